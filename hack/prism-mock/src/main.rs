//! `prism-mock`: a mock Prism Central for the sandbox and scripts. Development tool, never shipped.
//!
//! Prints its base URL on the first line of stdout once it answers, then runs until SIGINT/SIGTERM.

use std::io::{IsTerminal as _, Write as _};
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::Parser;
use prism_mock::{Credentials, MAX_FOREIGN_VMS, MockConfig, MockPrism, Seed, Timings};

/// Mock Prism Central (v3 + v4 templates) over HTTPS with a generated CA.
#[derive(Debug, Parser)]
#[command(name = "prism-mock", version)]
struct Args {
    /// Address to listen on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:9440")]
    listen: SocketAddr,
    /// Write the generated CA certificate (PEM) to this file before printing the URL.
    #[arg(long)]
    ca_out: Option<PathBuf>,
    /// YAML seed file (default: the built-in seed; see seeds/default.yaml).
    #[arg(long)]
    seed_file: Option<PathBuf>,
    /// Basic-auth user name.
    #[arg(long, default_value = "admin", env = "PRISM_MOCK_USERNAME")]
    username: String,
    /// Basic-auth password.
    #[arg(
        long,
        default_value = "mock-password",
        env = "PRISM_MOCK_PASSWORD",
        hide_env_values = true
    )]
    password: String,
    /// Value accepted in the X-ntnx-api-key header.
    #[arg(
        long,
        default_value = "mock-api-key",
        env = "PRISM_MOCK_API_KEY",
        hide_env_values = true
    )]
    api_key: String,
    /// Serve plain HTTP instead of HTTPS.
    #[arg(long)]
    http: bool,
    /// Seed of the random-number generator (default: the seed file's rng_seed, else 0).
    #[arg(long)]
    rng_seed: Option<u64>,
    /// Milliseconds a task stays QUEUED (default: seed file, else 300).
    #[arg(long)]
    task_queued_ms: Option<u64>,
    /// Milliseconds a task stays RUNNING (default: seed file, else 1200).
    #[arg(long)]
    task_running_ms: Option<u64>,
    /// Milliseconds from power-on to addresses (default: seed file, else 2000).
    #[arg(long)]
    boot_ms: Option<u64>,
    /// Session cookie lifetime in seconds.
    #[arg(long, default_value_t = 900)]
    session_ttl_secs: u64,
    /// VMs of other tenants of the Prism Central, which belong to no Machine (default: the seed
    /// file's foreign_vms, else 0; see the README, "Foreign VMs").
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(0..=i64::from(MAX_FOREIGN_VMS)))]
    foreign_vms: Option<u32>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let args = Args::parse();
    let mut seed = match &args.seed_file {
        Some(path) => Seed::from_file(path)?,
        None => Seed::builtin(),
    };
    if let Some(count) = args.foreign_vms {
        seed.foreign_vms = count;
    }
    let base = seed.timings.clone().unwrap_or_else(Timings::sandbox);
    let timings = Timings {
        task_queued_ms: args.task_queued_ms.unwrap_or(base.task_queued_ms),
        task_running_ms: args.task_running_ms.unwrap_or(base.task_running_ms),
        boot_to_address_ms: args.boot_ms.unwrap_or(base.boot_to_address_ms),
    };
    let guest = seed.guest_behaviour.clone().unwrap_or_default();
    let config = MockConfig {
        listen: args.listen,
        tls: !args.http,
        credentials: Credentials {
            username: args.username,
            password: args.password,
            api_key: Some(args.api_key),
        },
        seed,
        rng_seed: args.rng_seed,
        timings,
        guest,
        session_ttl_secs: args.session_ttl_secs,
    };
    let mock = MockPrism::start(config).await?;
    if let (Some(path), Some(pem)) = (&args.ca_out, mock.ca_pem()) {
        std::fs::write(path, pem)
            .with_context(|| format!("writing the CA to {}", path.display()))?;
    }
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{}", mock.base_url()).context("writing the URL to stdout")?;
    stdout.flush().context("flushing stdout")?;
    drop(stdout);
    tracing::info!(
        url = mock.base_url(),
        "prism-mock ready; admin API under /mock/"
    );
    wait_for_signal().await;
    mock.shutdown().await;
    Ok(())
}

async fn wait_for_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(signal) => signal,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
