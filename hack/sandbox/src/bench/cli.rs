//! `sandbox bench`: the command line of the scale benchmark.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};
use prism_mock::{MAX_FOREIGN_VMS, Timings};

use super::{BenchKind, BenchOptions};
use crate::world::{ControllerCommand, ControllerIntervals, ProgressSink};

/// How the benchmark's Machines get their VMs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum KindChoice {
    /// Linux Machines from an image (`POST /vms`).
    Image,
    /// Windows Machines from a Prism Central VM template (v4 deploy + update).
    Template,
    /// Windows Machines cloned from a powered-off VM (v3 clone + update).
    Clone,
}

/// `sandbox bench` arguments.
#[derive(Clone, Debug, Args)]
pub struct BenchArgs {
    /// Machines to scale the MachineSet to.
    #[arg(long, value_name = "N", default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=5000))]
    machines: u32,
    /// How the Machines get their VMs.
    #[arg(long, value_enum, default_value = "image")]
    kind: KindChoice,
    /// prism-mock's rate limit in requests per second (0: unlimited).
    #[arg(long, value_name = "RPS", default_value_t = 50.0)]
    rate_limit: f64,
    /// prism-mock's burst (default: one second's worth of the rate limit).
    #[arg(long, value_name = "N")]
    burst: Option<u32>,
    /// The controller's --prism-rate-limit (default: 90 % of the mock's limit, or 20 when the
    /// mock is unlimited).
    #[arg(long, value_name = "QPS")]
    prism_rate_limit: Option<f64>,
    /// The controller's --prism-burst (default: the mock's burst, or 40: with its rate under the
    /// mock's, the controller's bucket never empties the mock's).
    #[arg(long, value_name = "N")]
    prism_burst: Option<u32>,
    /// The controller's --concurrency.
    #[arg(long, value_name = "N", default_value_t = 10)]
    concurrency: u16,
    /// The controller's intervals while scaling up and down: the sandbox's (poll 500 ms, requeue
    /// 1 s, inventory 5 s) or the production defaults (10 s, 30 s, 60 s); the three flags below
    /// override one each.
    #[arg(long, value_enum, default_value = "sandbox")]
    intervals: IntervalsChoice,
    /// The controller's --poll-interval while scaling, milliseconds (default: from --intervals).
    #[arg(long, value_name = "MS")]
    poll_ms: Option<u64>,
    /// The controller's --requeue-interval while scaling, milliseconds (default: from --intervals).
    #[arg(long, value_name = "MS")]
    requeue_ms: Option<u64>,
    /// The controller's --inventory-refresh-interval while scaling, milliseconds (default: from
    /// --intervals).
    #[arg(long, value_name = "MS")]
    inventory_ms: Option<u64>,
    /// Steady-state window after the restart (production intervals), seconds; 0 skips the
    /// restart and the steady state.
    #[arg(long, value_name = "SECONDS", default_value_t = 180)]
    steady_seconds: u64,
    /// Stop after the steady state (no scale-down).
    #[arg(long)]
    no_delete: bool,
    /// prism-mock's delays.
    #[arg(long, value_enum, default_value = "sandbox")]
    timings: BenchTimings,
    /// The controller's log verbosity (`--v`).
    #[arg(long, value_name = "LEVEL", default_value_t = 2)]
    controller_v: u8,
    /// Where to write the kubeconfig, prism-mock's CA and the controller's log (default: a
    /// temporary directory, removed at the end unless the benchmark fails).
    #[arg(long, value_name = "DIR")]
    work_dir: Option<PathBuf>,
    /// VMs of other tenants in prism-mock besides the benchmark's, which belong to no Machine
    /// (prism-mock's --foreign-vms: a Prism Central shared by many clusters and teams).
    #[arg(long, value_name = "N", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=i64::from(MAX_FOREIGN_VMS)))]
    foreign_vms: u32,
    /// Write the report's JSON (`bench.json`) and its pictures (SVG: Machines by phase, Prism
    /// calls per second by kind, the controller's Kubernetes writes per second and its resident
    /// memory, over the run) into this directory.
    #[arg(long, value_name = "DIR")]
    plots: Option<PathBuf>,
    /// Run this binary as the controller (for example the shipped `nutanix-machine-controller`
    /// of the same build) instead of the sandbox re-executing itself: the file-backed part of
    /// the controller's resident memory is then that binary's, as users run it.
    #[arg(long, value_name = "PATH")]
    controller_binary: Option<PathBuf>,
}

/// The controller's intervals while scaling.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum IntervalsChoice {
    /// Poll 500 ms, requeue 1 s, inventory 5 s: matched to prism-mock's sandbox delays.
    Sandbox,
    /// Poll 10 s, requeue 30 s, inventory 60 s: the controller's defaults, what users run.
    Production,
}

/// prism-mock's delays.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BenchTimings {
    /// Tasks of 1.5 s, addresses 2 s after power-on.
    Sandbox,
    /// Tens of milliseconds (as the end-to-end tests).
    Tests,
}

/// The benchmark's options from the command line.
pub fn options(args: &BenchArgs) -> BenchOptions {
    let kind = match args.kind {
        KindChoice::Image => BenchKind::Image,
        KindChoice::Template => BenchKind::Template,
        KindChoice::Clone => BenchKind::Clone,
    };
    let mut options = BenchOptions::new(args.machines as usize, kind);
    let mock_limit = (args.rate_limit > 0.0).then(|| {
        let burst = args
            .burst
            .unwrap_or_else(|| args.rate_limit.ceil().clamp(1.0, f64::from(u32::MAX)) as u32);
        (args.rate_limit, burst)
    });
    options.mock_rate_limit = mock_limit;
    options.controller_rate_limit = args
        .prism_rate_limit
        .unwrap_or_else(|| mock_limit.map_or(20.0, |(rate, _)| (rate * 0.9 * 10.0).round() / 10.0));
    options.controller_burst = args
        .prism_burst
        .unwrap_or_else(|| mock_limit.map_or(40, |(_, burst)| burst.max(1)));
    options.concurrency = args.concurrency;
    let chosen = match args.intervals {
        IntervalsChoice::Sandbox => ControllerIntervals::sandbox(),
        IntervalsChoice::Production => ControllerIntervals::production(),
    };
    options.scale_intervals = ControllerIntervals {
        poll: args.poll_ms.map_or(chosen.poll, Duration::from_millis),
        requeue: args
            .requeue_ms
            .map_or(chosen.requeue, Duration::from_millis),
        inventory_refresh: args
            .inventory_ms
            .map_or(chosen.inventory_refresh, Duration::from_millis),
    };
    options.steady = Duration::from_secs(args.steady_seconds);
    options.delete = !args.no_delete;
    if args.timings == BenchTimings::Tests {
        options.timings = Timings::for_tests();
    }
    options.controller_verbosity = args.controller_v;
    options.work_dir = args.work_dir.clone();
    options.foreign_vms = args.foreign_vms;
    options
}

/// Runs the benchmark: progress lines, the tables, then one JSON line, all on stdout.
pub async fn run(args: BenchArgs) -> ExitCode {
    let controller = match &args.controller_binary {
        Some(program) => ControllerCommand::binary(program),
        None => match ControllerCommand::this_sandbox_binary() {
            Ok(command) => command,
            Err(error) => {
                eprintln!(
                    "sandbox: cannot find its own executable to start the controller: {error}"
                );
                return ExitCode::FAILURE;
            }
        },
    };
    let options = options(&args);
    let progress: ProgressSink = Arc::new(|line: &str| println!("{line}"));
    println!(
        "sandbox bench: {} Machines ({}), starting prism-mock ({} foreign VMs), kube-sim, the controller and the actors",
        options.machines,
        options.kind.as_str(),
        options.foreign_vms
    );
    let finished = tokio::select! {
        report = super::run(&options, controller, Some(progress)) => Some(report),
        () = crate::actor::stop_requested() => None,
    };
    match finished {
        None => {
            println!("\nsandbox bench: interrupted");
            ExitCode::from(130)
        }
        Some(Err(error)) => {
            eprintln!("sandbox bench: {error}");
            ExitCode::FAILURE
        }
        Some(Ok(report)) => {
            println!("\n{}", report.render());
            println!("{}", report.json());
            match &args.plots {
                Some(dir) => write_plots(dir, &report),
                None => ExitCode::SUCCESS,
            }
        }
    }
}

/// `bench.json` and the pictures of `report` in `dir`.
fn write_plots(dir: &std::path::Path, report: &super::report::BenchReport) -> ExitCode {
    let written =
        super::sampling::write_pictures(dir, &report.samples.charts()).and_then(|mut files| {
            let json = dir.join("bench.json");
            std::fs::write(&json, report.json()).map_err(|source| {
                crate::plots::PlotError::Write {
                    path: json.clone(),
                    source,
                }
            })?;
            files.push(json);
            Ok(files)
        });
    match written {
        Ok(files) => {
            for file in files {
                println!("sandbox bench: wrote {}", file.display());
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("sandbox bench: {error}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Command {
        #[command(flatten)]
        bench: BenchArgs,
    }

    fn parse(args: &[&str]) -> Result<BenchOptions, clap::Error> {
        let command =
            Command::try_parse_from(std::iter::once("bench").chain(args.iter().copied()))?;
        Ok(options(&command.bench))
    }

    #[test]
    fn foreign_vms_reach_the_options_and_are_bounded_as_the_mocks() {
        assert_eq!(parse(&[]).unwrap().foreign_vms, 0);
        assert_eq!(
            parse(&["--foreign-vms", "100000"]).unwrap().foreign_vms,
            100_000
        );
        assert!(parse(&["--foreign-vms", "1000000"]).is_err());
    }

    #[test]
    fn intervals_choose_the_scaling_set_and_each_flag_overrides_one() {
        assert_eq!(
            parse(&[]).unwrap().scale_intervals,
            ControllerIntervals::sandbox()
        );
        assert_eq!(
            parse(&["--intervals", "production"])
                .unwrap()
                .scale_intervals,
            ControllerIntervals::production()
        );
        let mixed = parse(&["--intervals", "production", "--poll-ms", "2000"]).unwrap();
        assert_eq!(mixed.scale_intervals.poll, Duration::from_secs(2));
        assert_eq!(
            mixed.scale_intervals.requeue,
            ControllerIntervals::production().requeue
        );
    }
}
