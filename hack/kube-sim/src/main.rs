//! `kube-sim`: runs the in-memory Kubernetes API server until stopped. Development tool, never shipped.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use tracing_subscriber::EnvFilter;

/// In-memory Kubernetes API server for tests and demos (plain HTTP, loopback).
#[derive(Debug, Parser)]
#[command(name = "kube-sim", version)]
struct Args {
    /// Address to listen on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:6443")]
    listen: SocketAddr,
    /// Write a kubeconfig for kubectl and kube-rs to this file once ready.
    #[arg(long)]
    kubeconfig_out: Option<PathBuf>,
    /// Events kept for watches resuming from an old resourceVersion.
    #[arg(long, default_value_t = 10_000)]
    history: usize,
    /// Seconds between watch bookmarks.
    #[arg(long, default_value_t = 10)]
    bookmark_seconds: u64,
    /// Namespaces to create at start (repeatable).
    #[arg(long = "namespace")]
    namespaces: Vec<String>,
    /// Serve HTTPS with a CA made at start (written into the kubeconfig); plain HTTP otherwise.
    #[arg(long)]
    tls: bool,
    /// Files (YAML or JSON, `---`-separated documents) of objects to create at start, in order.
    #[arg(long = "load")]
    load: Vec<PathBuf>,
    /// Apply the machine-api-operator's defaulting webhooks of a Nutanix cluster to Machines and
    /// MachineSets created through the API; the value is the infrastructure name the Machine
    /// webhook puts in a missing `machine.openshift.io/cluster-api-cluster` label.
    #[arg(long, value_name = "INFRASTRUCTURE_NAME")]
    machine_api_webhooks: Option<String>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_env("KUBE_SIM_LOG").unwrap_or_else(|_| EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let config = kube_sim::Config {
        listen: args.listen,
        history_limit: args.history,
        bookmark_interval: std::time::Duration::from_secs(args.bookmark_seconds.max(1)),
        namespaces: args.namespaces,
        tls: args.tls,
        machine_api_webhooks: args.machine_api_webhooks.map(|infrastructure_name| {
            kube_sim::webhooks::MachineApiWebhooks {
                infrastructure_name,
            }
        }),
        ..kube_sim::Config::default()
    };
    let sim = kube_sim::KubeSim::start(config).await?;
    for file in &args.load {
        let text = std::fs::read_to_string(file)
            .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", file.display()))?;
        for object in kube_sim::load::documents(&text)
            .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?
        {
            sim.create(object)
                .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
        }
    }
    if let Some(path) = &args.kubeconfig_out {
        sim.write_kubeconfig(path)?;
    }
    println!("{}", sim.url());
    tokio::signal::ctrl_c().await?;
    sim.shutdown().await;
    Ok(())
}
