//! `sandbox`: the one-command demo of the Nutanix machine controller, and the cluster simulators
//! around it.
//!
//! - `sandbox [run] [--keep] [--control-plane real] [--prometheus PATH]` (the default): starts prism-mock, kube-sim
//!   (or the real control plane of `hack/real-cluster/`), the controller and the simulated
//!   actors on loopback, applies the CRDs and the examples, plays the scenario with a progress
//!   display, prints the closing table, and exits 0 only when the scenario held.
//! - `sandbox bench --machines N [--kind image|template|clone] [--rate-limit 50] [--plots DIR]`:
//!   the scale benchmark (tables, then one JSON line; with `--plots`, the JSON and SVG pictures of
//!   the run in DIR). `sandbox side-by-side ... [--plots DIR]` likewise, both providers on the
//!   same axes.
//! - `sandbox chaos [--machines 50] [--kills 5] [--seed S] [--control-plane real] [--plots DIR]`:
//!   the chaos soak (faults on, the controller killed at chosen moments, invariants checked; on
//!   the real control plane two replicas with leader election, and Kubernetes' own faults);
//!   exits 0 only when they held. With `--plots`, the report's JSON and its SVG pictures, each
//!   kill and fault marked, in DIR.
//! - `sandbox actors --kubeconfig FILE`: the replica controller, nodelink and the approver against
//!   an API server until Ctrl-C.
//! - `sandbox controller -- FLAGS` (hidden): the controller itself, as the scenario starts it in a
//!   process of its own (`nutanix-machine-controller FLAGS`).

use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use kube::config::{KubeConfigOptions, Kubeconfig};
use prism_mock::Timings;
use sandbox::approver::{self, ApproverConfig};
use sandbox::bench::side_by_side::{self, SideBySideOptions};
use sandbox::machineset::{self, MachineSetControllerConfig};
use sandbox::nodelink::{self, NodeLinkConfig};
use sandbox::real_cluster::{self, Binaries};
use sandbox::scenario::{self, ScenarioOptions};
use sandbox::world::{
    ControlPlaneChoice, ControllerCommand, ControllerIntervals, Provider, World, WorldOptions,
};

/// The hidden subcommand running the controller (dispatched before anything else starts: the
/// controller sets up its own logging and async runtime).
const CONTROLLER_SUBCOMMAND: &str = "controller";

/// The Nutanix machine controller's sandbox: prism-mock, an in-memory Kubernetes API, the
/// controller and simulators of the cluster's other actors, on loopback (development tool, never
/// shipped).
#[derive(Debug, Parser)]
#[command(name = "sandbox", version, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Play the scenario (the default): Windows and Linux MachineSets scaled up by hand and by the
    /// autoscaler, a scale-down, then everything to 0; exit 0 only when it held.
    Run(RunArgs),
    /// Scale benchmark: one MachineSet scaled 0 → N (time against the lower bound, Prism
    /// calls per Machine), a controller restart (convergence, writes), the steady state (calls
    /// per minute) and N → 0; controller CPU and peak memory. Prints tables, then one JSON line.
    Bench(sandbox::bench::cli::BenchArgs),
    /// Ours and the Go provider we replace, one after the other on fresh real control planes and
    /// prism-mocks with the same settings: the Linux example MachineSet 0 → N, a steady window, a
    /// restart, N → 0; time against the lower bound, Prism calls, Kubernetes writes, CPU
    /// and memory of each. Prints the table, then one JSON line.
    SideBySide(SideBySideArgs),
    /// Chaos soak: Machines of every kind scaled 0 → N → 0 with Prism faults on and the
    /// controller killed at chosen moments; exit 0 only when the invariants held.
    Chaos(ChaosArgs),
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

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum TimingsChoice {
    /// Tasks of 1.5 s, addresses 2 s after power-on.
    Sandbox,
    /// Tens of milliseconds (as the end-to-end tests).
    Tests,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum ControlPlaneArg {
    /// kube-sim in process, with the stand-ins for the machine-api-operator's MachineSet
    /// controller, nodelink and webhooks (no Go build needed).
    KubeSim,
    /// etcd, kube-apiserver, kube-controller-manager and the machine-api-operator's own
    /// controllers and webhooks, built by `hack/real-cluster/build.sh` (its directory in
    /// REAL_CLUSTER_DIR); the controller runs under its ServiceAccount and `manifests/rbac/`.
    Real,
}

#[derive(Clone, Debug, Args)]
struct RunArgs {
    /// The Kubernetes API and machine-api controllers the scenario runs on.
    #[arg(long, value_enum, default_value = "kube-sim")]
    control_plane: ControlPlaneArg,
    /// Leave everything running after the scenario and print the KUBECONFIG to explore it with
    /// kubectl (scale the MachineSets yourself); Ctrl-C stops it.
    #[arg(long)]
    keep: bool,
    /// Where to write the kubeconfig, prism-mock's CA and the controller's log (default: a
    /// temporary directory, removed at the end unless --keep or the scenario failed).
    #[arg(long, value_name = "DIR")]
    work_dir: Option<PathBuf>,
    /// prism-mock's delays.
    #[arg(long, value_enum, default_value = "sandbox")]
    timings: TimingsChoice,
    /// The controller's log verbosity (`--v`).
    #[arg(long, value_name = "LEVEL", default_value_t = 2)]
    controller_v: u8,
    /// Machines the autoscaler adds to the Windows image MachineSet (at least 2).
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(i32).range(2..=4))]
    windows_replicas: i32,
    /// A Prometheus server binary (`bash hack/promtool/build.sh prometheus` prints one): run it,
    /// scraping the controller's metrics every 5 s, and print its URL, to query the dashboard's
    /// metrics (manifests/monitoring/dashboard.yaml) by hand.
    #[arg(long, value_name = "PATH", env = "PROMETHEUS")]
    prometheus: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum ProviderArg {
    Ours,
    Go,
}

#[derive(Clone, Debug, Args)]
struct SideBySideArgs {
    /// Machines at the top.
    #[arg(long, value_name = "N", default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=1000))]
    machines: u32,
    /// The Go provider's `manager` (openshift/machine-api-provider-nutanix `cmd/manager`, built
    /// by you: the Go module proxy does not serve it); needed unless `--only ours`.
    #[arg(long, value_name = "PATH", env = "GO_PROVIDER_BIN")]
    go_provider: Option<PathBuf>,
    /// The steady window, minutes.
    #[arg(long, value_name = "MINUTES", default_value_t = 10)]
    steady_minutes: u64,
    /// How long after the restart its calls and writes are counted, seconds.
    #[arg(long, value_name = "SECS", default_value_t = 120)]
    restart_seconds: u64,
    /// How long the scale-up, and the scale-down, may take, seconds.
    #[arg(long, value_name = "SECS", default_value_t = 3600)]
    phase_timeout: u64,
    /// Our controller's --prism-rate-limit (default: its shipped default). The scale-up's
    /// lower bound counts the calls at the tighter of this and the mock's 50/s.
    #[arg(long, value_name = "QPS", default_value_t = 20.0)]
    prism_rate_limit: f64,
    /// Our controller's --prism-burst (default: its shipped default).
    #[arg(long, value_name = "N", default_value_t = 40)]
    prism_burst: u32,
    /// Our controller's --concurrency (default: its shipped default).
    #[arg(long, value_name = "N", default_value_t = 10)]
    concurrency: u16,
    /// Run one provider only (default: both, ours first).
    #[arg(long, value_enum, value_name = "PROVIDER")]
    only: Option<ProviderArg>,
    /// Where each provider's work directory goes (default: temporary directories).
    #[arg(long, value_name = "DIR")]
    work_dir: Option<PathBuf>,
    /// Write the JSON (`side-by-side.json`) and the pictures (SVG, both providers on the same
    /// axes: Machines by phase, Prism calls per second by kind, Kubernetes writes per second,
    /// resident memory) into this directory.
    #[arg(long, value_name = "DIR")]
    plots: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum ChaosTimings {
    /// prism-mock's sandbox delays: tasks 1.5 s, addresses 2 s after power-on.
    Sandbox,
    /// Tasks of 200 ms, addresses 100 ms after power-on, the tests' controller intervals (the
    /// test suite's version).
    Short,
}

#[derive(Clone, Debug, Args)]
struct ChaosArgs {
    /// Machines at the top (30 % template deploys, 25 % Windows images, 20 % clones, the rest
    /// Linux).
    #[arg(long, value_name = "N", default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=1000))]
    machines: u32,
    /// Controller kills (SIGKILL): after a create, after a template deploy (then its Machine
    /// deleted), at random, mid-drain, after a delete; more add follow-ups and random moments.
    #[arg(long, value_name = "N", default_value_t = 5)]
    kills: u32,
    /// Seeds prism-mock (UUIDs, fault draws) and the run's choices (default: from the clock,
    /// printed).
    #[arg(long, value_name = "S")]
    seed: Option<u64>,
    /// prism-mock's delays and the controller's intervals.
    #[arg(long, value_enum, default_value = "sandbox")]
    timings: ChaosTimings,
    /// Latency added to 20 % of Prism calls, milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 150)]
    latency_ms: u64,
    /// How long the scale-up, and the scale-down, may take, seconds.
    #[arg(long, value_name = "SECS", default_value_t = 900)]
    phase_timeout: u64,
    /// The controller's log verbosity (`--v`; 6 = trace, so the secrets search sees everything).
    #[arg(long, value_name = "LEVEL", default_value_t = 6)]
    controller_v: u8,
    /// Where controller.log, sandbox.log, the kubeconfigs and the CA go (default: a temporary
    /// directory, removed when the invariants held).
    #[arg(long, value_name = "DIR")]
    work_dir: Option<PathBuf>,
    /// The Kubernetes API the soak runs on. On the real control plane two replicas of the
    /// controller run with leader election, and Kubernetes' own faults strike besides Prism's:
    /// kube-apiserver and etcd killed, etcd compacted, APF throttling, a slow, resetting or
    /// black-holed path to the API server, and Prism Central unreachable.
    #[arg(long, value_enum, default_value = "kube-sim")]
    control_plane: ControlPlaneArg,
    /// Strikes of each Kubernetes fault (real control plane only; default 2, or 1 with
    /// `--timings short`).
    #[arg(long, value_name = "N")]
    faults_per_kind: Option<usize>,
    /// Controller replicas on the real control plane (each with `--leader-elect`).
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=5))]
    replicas: u32,
    /// Write the report's JSON (`chaos.json`) and its pictures (SVG: Machines by phase, Prism
    /// calls per second by kind, the controller's Kubernetes writes per second and each
    /// replica's resident memory, each phase, kill and Kubernetes fault marked) into this
    /// directory.
    #[arg(long, value_name = "DIR")]
    plots: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == CONTROLLER_SUBCOMMAND) {
        let mut flags = args.into_iter().skip(2).peekable();
        flags.next_if(|a| a == "--");
        return nutanix_machine_controller::cli_main(
            std::iter::once(OsString::from("nutanix-machine-controller")).chain(flags),
        );
    }
    let cli = Cli::parse_from(args);
    let default_level = if matches!(cli.command, Some(Command::Actors { .. })) {
        "info"
    } else {
        // stdout carries the progress display; only problems go to stderr.
        "warn"
    };
    // `sandbox chaos` installs its own subscriber (it also writes the log to a file).
    if !matches!(cli.command, Some(Command::Chaos(_))) {
        tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_env("SANDBOX_LOG").unwrap_or_else(|_| {
                    // kube-rs logs every answer that is not a success at error level, and the
                    // real control plane's start polls `/readyz` until it answers 200: what
                    // fails is reported by the sandbox's own errors.
                    tracing_subscriber::EnvFilter::new(format!(
                        "{default_level},kube_client::client::builder=off"
                    ))
                }),
            )
            .with_writer(std::io::stderr)
            .with_ansi(std::io::stderr().is_terminal())
            .init();
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("sandbox: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match cli.command {
        Some(Command::Actors {
            kubeconfig,
            namespace,
        }) => match runtime.block_on(run_actors(&kubeconfig, namespace)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("sandbox: {error}");
                ExitCode::FAILURE
            }
        },
        Some(Command::Run(args)) => runtime.block_on(run_scenario(args)),
        Some(Command::Chaos(args)) => run_chaos(args, &runtime),
        Some(Command::Bench(args)) => runtime.block_on(sandbox::bench::cli::run(args)),
        Some(Command::SideBySide(args)) => runtime.block_on(run_side_by_side(args)),
        None => runtime.block_on(run_scenario(cli.run)),
    }
}

/// Prometheus scraping the world's controller, in the world's directory.
async fn start_prometheus(
    world: &World,
    binary: &std::path::Path,
) -> Result<sandbox::prometheus::Prometheus, String> {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let address = loop {
        if let Some(address) = sandbox::bench::process::metrics_address(&world.controller_log()) {
            break address;
        }
        if std::time::Instant::now() > deadline {
            return Err("the controller never logged its metrics address".to_owned());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    sandbox::prometheus::Prometheus::start(
        binary,
        world.work_dir(),
        &address,
        Duration::from_secs(5),
    )
    .await
    .map_err(|error| error.to_string())
}

async fn run_scenario(args: RunArgs) -> ExitCode {
    let controller = match ControllerCommand::this_sandbox_binary() {
        Ok(command) => command,
        Err(error) => {
            eprintln!("sandbox: cannot find its own executable to start the controller: {error}");
            return ExitCode::FAILURE;
        }
    };
    let mut options = WorldOptions::sandbox(controller);
    if args.timings == TimingsChoice::Tests {
        options.mock_timings = Timings::for_tests();
        options.intervals = ControllerIntervals::tests();
    }
    options.controller_verbosity = args.controller_v;
    options.work_dir = args.work_dir.clone();
    options.progress = Some(Arc::new(|line: &str| println!("{line}")));
    let api_server = match args.control_plane {
        ControlPlaneArg::KubeSim => "kube-sim",
        ControlPlaneArg::Real => {
            let Some(binaries) = Binaries::from_env() else {
                eprintln!(
                    "sandbox: --control-plane real needs {}: run `export {}=\"$(bash hack/real-cluster/build.sh)\"` first",
                    real_cluster::DIR_VARIABLE,
                    real_cluster::DIR_VARIABLE,
                );
                return ExitCode::FAILURE;
            };
            println!("sandbox: the real control plane:\n{}", binaries.versions());
            options.control_plane = ControlPlaneChoice::Real(binaries);
            "the real control plane (etcd, kube-apiserver, kube-controller-manager, MAO)"
        }
    };

    println!(
        "sandbox: starting prism-mock, {api_server}, the controller and the actors on loopback"
    );
    let mut world = match World::start(options).await {
        Ok(world) => world,
        Err(error) => {
            eprintln!("sandbox: could not start: {error}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "  prism-mock {} (HTTPS, CA {})",
        world.mock().base_url(),
        world.work_dir().join("prism-ca.pem").display()
    );
    println!("  API server {}", world.api_url());
    println!(
        "  controller pid {} (log {})",
        world
            .controller_pid()
            .await
            .map_or_else(|| "?".to_owned(), |p| p.to_string()),
        world.controller_log_file().display()
    );
    let prometheus = match &args.prometheus {
        Some(binary) => match start_prometheus(&world, binary).await {
            Ok(prometheus) => {
                println!(
                    "  Prometheus {} (scraping the controller)",
                    prometheus.url()
                );
                Some(prometheus)
            }
            Err(error) => {
                eprintln!("sandbox: could not start Prometheus: {error}");
                world.shutdown().await;
                return ExitCode::FAILURE;
            }
        },
        None => None,
    };
    println!("  applied: manifests/crds, hack/crds, manifests/examples (MachineSets at 0)\n");

    let scenario_options = ScenarioOptions {
        windows_image_replicas: args.windows_replicas,
        ..ScenarioOptions::default()
    };
    let finished = tokio::select! {
        report = scenario::run(&world, scenario_options) => Some(report),
        () = sandbox::actor::stop_requested() => None,
    };
    let Some(report) = finished else {
        println!("\nsandbox: interrupted; stopping");
        world.shutdown().await;
        return ExitCode::from(130);
    };
    println!("\n{}", report.render());
    let held = report.outcome.is_ok();
    if !held {
        let dir = world.keep_work_dir();
        eprintln!(
            "sandbox: the scenario did not hold; the controller's log is in {}",
            dir.join("controller.log").display()
        );
    }

    if args.keep {
        let dir = world.keep_work_dir();
        println!(
            "The sandbox keeps running. Explore it from another terminal:\n\
             \n  export KUBECONFIG={}\
             \n  kubectl get machinesets,machines -n {ns}\
             \n  kubectl get nodes,csr\
             \n  kubectl scale machineset win-image -n {ns} --replicas=2\
             \n  kubectl get events -n {ns}\
             \n  kubectl get machine -n {ns} <machine> -o jsonpath='{{.status.providerStatus.windowsJoin}}'\
             \n  cargo run -p nutanix-machine-controller -- doctor --prism-ca-file {}\
             \n\nPrism Central (mock): {} (CA {}, the mock's default credentials)\
             \nController log: {}{}\
             \nProgress follows; Ctrl-C stops everything.",
            world.kubeconfig().display(),
            dir.join("prism-ca.pem").display(),
            world.mock().base_url(),
            dir.join("prism-ca.pem").display(),
            world.controller_log_file().display(),
            prometheus.as_ref().map_or_else(String::new, |p| format!(
                "\nPrometheus: {} (the dashboard's queries: manifests/monitoring/dashboard.yaml)",
                p.url()
            )),
            ns = world.namespace(),
        );
        world.set_label("kept running");
        loop {
            tokio::select! {
                () = sandbox::actor::stop_requested() => break,
                () = tokio::time::sleep(Duration::from_millis(500)) => {
                    let snapshot = world.snapshot();
                    world.print_progress(&snapshot);
                }
            }
        }
        println!("\nsandbox: stopping");
    }
    drop(prometheus);
    world.shutdown().await;
    if held {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

async fn run_side_by_side(args: SideBySideArgs) -> ExitCode {
    let Some(binaries) = Binaries::from_env() else {
        eprintln!(
            "sandbox: side-by-side runs on the real control plane: `export {}=\"$(bash hack/real-cluster/build.sh)\"` first",
            real_cluster::DIR_VARIABLE
        );
        return ExitCode::FAILURE;
    };
    let ours = match ControllerCommand::this_sandbox_binary() {
        Ok(command) => command,
        Err(error) => {
            eprintln!("sandbox: cannot find its own executable to start the controller: {error}");
            return ExitCode::FAILURE;
        }
    };
    let steady = Duration::from_secs(args.steady_minutes * 60);
    let restart_window = Duration::from_secs(args.restart_seconds);
    let providers = match args.only {
        None => vec![Provider::Ours, Provider::Go],
        Some(ProviderArg::Ours) => vec![Provider::Ours],
        Some(ProviderArg::Go) => vec![Provider::Go],
    };
    let options = SideBySideOptions {
        providers,
        machines: args.machines as usize,
        steady,
        restart_window,
        binaries,
        ours,
        go_provider: args.go_provider,
        mock_rate_limit: (50.0, 50),
        ours_rate_limit: (args.prism_rate_limit, args.prism_burst),
        ours_concurrency: args.concurrency,
        timings: Timings::sandbox(),
        phase_timeout: Duration::from_secs(args.phase_timeout),
        work_dir: args.work_dir,
        progress: Some(Arc::new(|line: &str| println!("{line}"))),
    };
    match side_by_side::run(&options).await {
        Ok(runs) => {
            println!("\n{}", side_by_side::render(&runs, steady, restart_window));
            println!("{}", side_by_side::render_writes(&runs));
            let json = match serde_json::to_string(&runs) {
                Ok(json) => json,
                Err(error) => {
                    eprintln!("sandbox: cannot write the JSON line: {error}");
                    return ExitCode::FAILURE;
                }
            };
            println!("{json}");
            let Some(dir) = &args.plots else {
                return ExitCode::SUCCESS;
            };
            let written =
                sandbox::bench::sampling::write_pictures(dir, &side_by_side::charts(&runs))
                    .and_then(|mut files| {
                        let path = dir.join("side-by-side.json");
                        std::fs::write(&path, &json).map_err(|source| {
                            sandbox::plots::PlotError::Write {
                                path: path.clone(),
                                source,
                            }
                        })?;
                        files.push(path);
                        Ok(files)
                    });
            match written {
                Ok(files) => {
                    for file in files {
                        println!("sandbox side-by-side: wrote {}", file.display());
                    }
                    ExitCode::SUCCESS
                }
                Err(error) => {
                    eprintln!("sandbox side-by-side: {error}");
                    ExitCode::FAILURE
                }
            }
        }
        Err(error) => {
            eprintln!("sandbox: side-by-side: {error}");
            ExitCode::FAILURE
        }
    }
}

/// `sandbox chaos`: its own logging (stderr as usual, and everything at debug level in
/// `sandbox.log`, which the run searches for secrets), then the soak.
fn run_chaos(args: ChaosArgs, runtime: &tokio::runtime::Runtime) -> ExitCode {
    let (work_dir, temp_dir) = match &args.work_dir {
        Some(dir) => (dir.clone(), None),
        None => match tempfile::Builder::new().prefix("chaos-").tempdir() {
            Ok(temp) => (temp.path().to_path_buf(), Some(temp)),
            Err(error) => {
                eprintln!("sandbox: cannot create a temporary directory: {error}");
                return ExitCode::FAILURE;
            }
        },
    };
    if let Err(error) = std::fs::create_dir_all(&work_dir) {
        eprintln!("sandbox: cannot create {}: {error}", work_dir.display());
        return ExitCode::FAILURE;
    }
    let sandbox_log = work_dir.join("sandbox.log");
    let stderr_filter = std::env::var("SANDBOX_LOG").unwrap_or_else(|_| "warn".to_owned());
    if let Err(error) = sandbox::chaos::capture_logs(&sandbox_log, Some(&stderr_filter)) {
        eprintln!("sandbox: {error}");
        return ExitCode::FAILURE;
    }
    let controller = match ControllerCommand::this_sandbox_binary() {
        Ok(command) => command,
        Err(error) => {
            eprintln!("sandbox: cannot find its own executable to start the controller: {error}");
            return ExitCode::FAILURE;
        }
    };
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_secs())
    });
    let mut options = match args.timings {
        ChaosTimings::Sandbox => sandbox::chaos::ChaosOptions::soak(controller, work_dir.clone()),
        ChaosTimings::Short => sandbox::chaos::ChaosOptions::small(controller, work_dir.clone()),
    };
    options.machines = args.machines as usize;
    options.kills = args.kills as usize;
    options.seed = seed;
    options.faults = sandbox::chaos::faults::FaultProfile::soak(args.latency_ms);
    options.phase_timeout = Duration::from_secs(args.phase_timeout);
    options.controller_verbosity = args.controller_v;
    options.sandbox_log = Some(sandbox_log);
    options.drain_blockers = (options.machines / 15).max(1);
    options.progress = Some(Arc::new(|line: &str| println!("{line}")));
    if args.control_plane == ControlPlaneArg::Real {
        let Some(binaries) = Binaries::from_env() else {
            eprintln!(
                "sandbox: --control-plane real needs {}: run `export {}=\"$(bash hack/real-cluster/build.sh)\"` first",
                real_cluster::DIR_VARIABLE,
                real_cluster::DIR_VARIABLE,
            );
            return ExitCode::FAILURE;
        };
        println!("sandbox: the real control plane:\n{}", binaries.versions());
        let mut k8s = match args.timings {
            ChaosTimings::Sandbox => sandbox::chaos::KubeFaultOptions::soak(),
            ChaosTimings::Short => sandbox::chaos::KubeFaultOptions::small(),
        };
        if let Some(per_kind) = args.faults_per_kind {
            k8s.per_kind = per_kind;
        }
        options = options.on_real_control_plane(binaries, k8s);
        options.replicas = args.replicas as usize;
    }
    println!(
        "sandbox chaos: seed {seed}, {} Machines, {} kills, {} Kubernetes faults of each kind, \
         {} replica(s); work directory {}",
        options.machines,
        options.kills,
        options.k8s.per_kind,
        options.replicas,
        work_dir.display()
    );
    let report = runtime.block_on(async {
        tokio::select! {
            report = sandbox::chaos::run(options) => Some(report),
            () = sandbox::actor::stop_requested() => None,
        }
    });
    let Some(report) = report else {
        println!(
            "\nsandbox chaos: interrupted; the work directory is kept: {}",
            work_dir.display()
        );
        if let Some(temp) = temp_dir {
            let _ = temp.keep();
        }
        return ExitCode::from(130);
    };
    println!("\n{}", report.render());
    if !report.kube_faults.is_empty() {
        println!("table row (docs/reliability.md):\n{}", report.table_row());
    }
    let plots_written = match &args.plots {
        None => true,
        Some(dir) => match sandbox::chaos::write_plots(dir, &report) {
            Ok(files) => {
                for file in files {
                    println!("sandbox chaos: wrote {}", file.display());
                }
                true
            }
            Err(error) => {
                eprintln!("sandbox chaos: {error}");
                false
            }
        },
    };
    if !report.held() {
        if let Some(temp) = temp_dir {
            let _ = temp.keep();
        }
        eprintln!(
            "sandbox chaos: an invariant broke or a step did not finish; logs in {}",
            work_dir.display()
        );
        return ExitCode::FAILURE;
    }
    drop(temp_dir);
    if plots_written {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
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
