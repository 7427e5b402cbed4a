//! `sandbox`: the cluster simulators around the Nutanix machine controller.
//!
//! The one-command scenario (issue 7) is wired on top of the library later; for now the binary
//! runs the simulated cluster actors that need only a Kubernetes API server.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use kube::config::{KubeConfigOptions, Kubeconfig};
use sandbox::approver::{self, ApproverConfig};
use sandbox::machineset::{self, MachineSetControllerConfig};
use sandbox::nodelink::{self, NodeLinkConfig};

/// Simulators of the OpenShift cluster actors around the Nutanix machine controller
/// (development tool, never shipped).
#[derive(Debug, Parser)]
#[command(name = "sandbox", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the machine-api-operator's MachineSet replica controller and nodelink, and the
    /// cluster-machine-approver, against a cluster until Ctrl-C. (The node agent needs an
    /// in-process prism-mock and the autoscaler is driven by a scenario: both are library only.)
    Actors {
        /// Kubeconfig of the API server (for example one written by `kube-sim --kubeconfig-out`).
        #[arg(long, env = "KUBECONFIG")]
        kubeconfig: PathBuf,
        /// Namespace of the Machines and MachineSets.
        #[arg(long, default_value = sandbox::MACHINE_API_NAMESPACE)]
        namespace: String,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SANDBOX_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Actors {
            kubeconfig,
            namespace,
        } => match run_actors(&kubeconfig, namespace).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("sandbox: {error}");
                ExitCode::FAILURE
            }
        },
    }
}

async fn run_actors(kubeconfig: &PathBuf, namespace: String) -> Result<(), String> {
    let config = Kubeconfig::read_from(kubeconfig)
        .map_err(|e| format!("cannot read kubeconfig {}: {e}", kubeconfig.display()))?;
    let config = kube::Config::from_custom_kubeconfig(config, &KubeConfigOptions::default())
        .await
        .map_err(|e| format!("kubeconfig {}: {e}", kubeconfig.display()))?;
    let client = kube::Client::try_from(config).map_err(|e| format!("kube client: {e}"))?;
    let machine_sets = machineset::start(
        client.clone(),
        MachineSetControllerConfig {
            namespace: namespace.clone(),
            ..MachineSetControllerConfig::default()
        },
    );
    let link = nodelink::start(
        client.clone(),
        NodeLinkConfig {
            namespace: namespace.clone(),
            ..NodeLinkConfig::default()
        },
    );
    let approver = approver::start(
        client,
        ApproverConfig {
            namespace,
            ..ApproverConfig::default()
        },
    );
    println!("actors running: machineset-controller, nodelink, approver");
    let signal = tokio::signal::ctrl_c().await;
    approver.stop().await;
    link.stop().await;
    machine_sets.stop().await;
    signal.map_err(|e| format!("waiting for Ctrl-C: {e}"))
}
