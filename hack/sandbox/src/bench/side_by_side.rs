//! `sandbox side-by-side`: ours and the Go provider we replace (openshift/machine-api-provider-
//! nutanix `cmd/manager`), one after the other in one run, each on a fresh real control plane
//! (`real_cluster`) and a fresh prism-mock with the same delays and rate limit, on the same
//! workload: the Linux example MachineSet (an image with cloud-init, which both support) scaled
//! 0 → N, a steady window, a restart (SIGKILL, then a new process), N → 0. Each provider runs
//! with the flags the machine-api-operator gives it and its own defaults otherwise.
//!
//! Per provider: the scale-up's time against the lower bound ([`super::bound`]), Prism
//! calls (prism-mock's counters: only the provider calls it over HTTP) and Kubernetes writes (the
//! audit log, [`crate::writes`]) per phase, and the CPU seconds and peak resident memory of its
//! processes (`/proc`).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use prism_mock::{RateLimit, Timings};
use serde::Serialize;

use super::bound::{binding_limit, lower_bound, with_arrival};
use super::join_stages::{self, JoinStages};
use super::process::{ProcessStats, process_stats};
use super::sampling::{RunSamples, Sampler};
use super::{BenchError, BenchKind};
use crate::manifests::LINUX_SET;
use crate::real_cluster::Binaries;
use crate::world::{
    ControlPlaneChoice, ControllerCommand, ControllerIntervals, ProgressSink, Provider, Snapshot,
    World, WorldOptions,
};
use crate::writes::{Actor, Tally};

/// How to run it.
#[derive(Clone)]
pub struct SideBySideOptions {
    /// The providers to run, in order (both, ours first, for the table).
    pub providers: Vec<Provider>,
    pub machines: usize,
    /// The steady window (the issue asks for 10 minutes).
    pub steady: Duration,
    /// How long after a restart its calls and writes are counted.
    pub restart_window: Duration,
    pub binaries: Binaries,
    /// Our controller's command (the sandbox binary itself, or a built controller).
    pub ours: ControllerCommand,
    /// The Go provider's `manager` (needed when `providers` has it).
    pub go_provider: Option<PathBuf>,
    /// prism-mock's rate limit (requests per second, burst).
    pub mock_rate_limit: (f64, u32),
    /// Our controller's `--prism-rate-limit` and `--prism-burst`, passed to it as flags.
    pub ours_rate_limit: (f64, u32),
    /// Our controller's `--concurrency`.
    pub ours_concurrency: u16,
    pub timings: Timings,
    pub phase_timeout: Duration,
    pub work_dir: Option<PathBuf>,
    pub progress: Option<ProgressSink>,
}

impl std::fmt::Debug for SideBySideOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SideBySideOptions")
            .field("machines", &self.machines)
            .field("steady", &self.steady)
            .field("go_provider", &self.go_provider)
            .finish_non_exhaustive()
    }
}

/// What one phase cost.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Phase {
    pub seconds: f64,
    pub prism_calls: u64,
    pub kube_writes: u64,
    /// The provider's writes by kind (`verb resource[/subresource] → code`), which add up to
    /// `kube_writes`: where a Machine's writes go (issue 37).
    pub writes_by_kind: BTreeMap<String, u64>,
}

impl Phase {
    pub fn calls_per_machine(&self, machines: usize) -> f64 {
        self.prism_calls as f64 / machines.max(1) as f64
    }

    pub fn per_minute(count: u64, seconds: f64) -> f64 {
        if seconds > 0.0 {
            count as f64 * 60.0 / seconds
        } else {
            0.0
        }
    }
}

/// One provider's run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProviderRun {
    pub provider: &'static str,
    pub machines: usize,
    pub up: Phase,
    /// The lower bound: the larger of the calls' ([`lower_bound`]) and the Machines' arrival's
    /// ([`with_arrival`]).
    pub bound_seconds: f64,
    /// When the last Machine was created, seconds after the scale request (its
    /// `creationTimestamp`, whole seconds, rounded down).
    pub last_machine_created_seconds: Option<f64>,
    /// Where the scale-up's time went, Machine by Machine, from the audit log: the provider's
    /// part and the cluster's join ([`join_stages`]); `None` when the log could not be read.
    pub join: Option<JoinStages>,
    pub steady: Phase,
    pub restart: Phase,
    pub down: Phase,
    pub cpu_seconds: f64,
    pub peak_rss_mib: f64,
    /// The run over time, for its pictures.
    #[serde(skip)]
    pub samples: RunSamples,
}

/// CPU and memory of every process a provider ran as (a restart makes a second one).
#[derive(Default)]
struct Usage {
    last: HashMap<u32, ProcessStats>,
}

impl Usage {
    fn sample(&mut self, pid: Option<u32>) {
        if let Some((pid, stats)) = pid.and_then(|pid| process_stats(pid).map(|s| (pid, s))) {
            self.last.insert(pid, stats);
        }
    }

    fn cpu_seconds(&self) -> f64 {
        self.last.values().map(|s| s.cpu_seconds).sum()
    }

    fn peak_rss_mib(&self) -> f64 {
        self.last
            .values()
            .map(|s| s.peak_rss_kib)
            .max()
            .unwrap_or_default() as f64
            / 1024.0
    }
}

/// The provider's writes in a tally of the audit log, by kind (the actor left out).
fn writes_by_kind(tally: &Tally, provider: Provider) -> BTreeMap<String, u64> {
    let actor = provider_actor(provider);
    let mut kinds = BTreeMap::new();
    for (kind, count) in tally.iter().filter(|(kind, _)| kind.actor == actor) {
        let resource = if kind.subresource.is_empty() {
            kind.resource.clone()
        } else {
            format!("{}/{}", kind.resource, kind.subresource)
        };
        *kinds
            .entry(format!("{} {resource} → {}", kind.verb, kind.code))
            .or_default() += count;
    }
    kinds
}

/// Where a run is: the time, Prism calls and the provider's writes so far, by kind.
struct Mark {
    at: Instant,
    calls: u64,
    writes: BTreeMap<String, u64>,
}

fn phase(from: &Mark, to: &Mark) -> Phase {
    let writes_by_kind: BTreeMap<String, u64> = to
        .writes
        .iter()
        .map(|(kind, count)| {
            let before = from.writes.get(kind).copied().unwrap_or_default();
            (kind.clone(), count.saturating_sub(before))
        })
        .filter(|(_, count)| *count > 0)
        .collect();
    Phase {
        seconds: to.at.duration_since(from.at).as_secs_f64(),
        prism_calls: to.calls.saturating_sub(from.calls),
        kube_writes: writes_by_kind.values().sum(),
        writes_by_kind,
    }
}

/// Each phase's writes per Machine by kind, for a report: one line per phase and kind.
pub fn render_writes(runs: &[ProviderRun]) -> String {
    let mut out = String::new();
    for run in runs {
        let machines = run.machines.max(1) as f64;
        for (name, phase) in [("0 → N", &run.up), ("N → 0", &run.down)] {
            for (kind, count) in &phase.writes_by_kind {
                out.push_str(&format!(
                    "{}: {name}: {:.2} per Machine: {kind}\n",
                    run.provider,
                    *count as f64 / machines
                ));
            }
        }
    }
    out
}

fn all_running(snapshot: &Snapshot, machines: usize) -> Result<(), String> {
    let set = snapshot.machines_of(LINUX_SET);
    let running = set
        .iter()
        .filter(|m| {
            let status = m.status.as_ref();
            status.and_then(|s| s.phase.as_deref()) == Some("Running")
                && status.is_some_and(|s| s.node_ref.is_some())
        })
        .count();
    if set.len() == machines && running == machines {
        Ok(())
    } else {
        Err(format!(
            "{} Machines, {running} Running with a Node, of {machines}",
            set.len()
        ))
    }
}

fn nothing_left(snapshot: &Snapshot) -> Result<(), String> {
    if snapshot.machines.is_empty() && snapshot.vms.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} Machines and {} VMs left",
            snapshot.machines.len(),
            snapshot.vms.len()
        ))
    }
}

/// When the last of the set's Machines in `snapshot` was created, seconds after `scaled_at`.
/// `creationTimestamp` keeps whole seconds, rounded down: the figure is never later than the
/// truth, so the bound it makes stays a lower bound.
fn last_created_after(snapshot: &Snapshot, scaled_at: Timestamp) -> Option<f64> {
    snapshot
        .machines_of(LINUX_SET)
        .iter()
        .filter_map(|machine| machine.metadata.creation_timestamp.as_ref())
        .map(|created| created.0.duration_since(scaled_at).as_secs_f64())
        .max_by(f64::total_cmp)
}

/// The scale-up's stages Machine by Machine, from the control plane's audit log as it is now;
/// `None` (and a line on the progress) when it cannot be read.
fn join_of(
    world: &World,
    provider: Provider,
    running: &Snapshot,
    scaled_at: Timestamp,
) -> Option<JoinStages> {
    let plane = world.control_plane()?;
    let path = plane.audit_log();
    let writes = std::fs::read_to_string(&path)
        .map_err(|e| e.to_string())
        .and_then(|text| crate::writes::audit_writes(&text).map_err(|e| e.to_string()));
    let writes = match writes {
        Ok(writes) => writes,
        Err(error) => {
            tracing::warn!(path = %path.display(), %error, "no stage breakdown: the audit log is unreadable");
            return None;
        }
    };
    let created: HashMap<String, Timestamp> = running
        .machines_of(LINUX_SET)
        .iter()
        .filter_map(|machine| {
            Some((
                machine.metadata.name.clone()?,
                machine.metadata.creation_timestamp.as_ref()?.0,
            ))
        })
        .collect();
    let joins = join_stages::machine_joins(&writes, &provider_actor(provider), &created, scaled_at);
    Some(join_stages::summarize(&joins))
}

fn provider_actor(provider: Provider) -> Actor {
    match provider {
        Provider::Ours => Actor::Controller,
        Provider::Go => Actor::GoProvider,
    }
}

async fn mark(world: &World, provider: Provider) -> Result<Mark, BenchError> {
    let writes = writes_by_kind(&world.writes()?, provider);
    Ok(Mark {
        at: Instant::now(),
        calls: world.prism_calls(),
        writes,
    })
}

/// Sleeps `duration`, sampling the provider's process every second.
async fn sample_for(world: &World, usage: &Mutex<Usage>, duration: Duration) {
    let end = Instant::now() + duration;
    while Instant::now() < end {
        let pid = world.controller_pid().await;
        usage
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .sample(pid);
        tokio::time::sleep(Duration::from_secs(1).min(end - Instant::now())).await;
    }
}

/// Samples the process `pid` every second until aborted.
fn spawn_sampler(usage: Arc<Mutex<Usage>>, pid: Option<u32>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            usage
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .sample(pid);
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })
}

/// Runs one provider through every phase on a world of its own.
async fn run_one(
    options: &SideBySideOptions,
    provider: Provider,
) -> Result<ProviderRun, BenchError> {
    let (name, command) = match provider {
        Provider::Ours => ("ours", options.ours.clone()),
        Provider::Go => (
            "go",
            ControllerCommand::go_provider(
                options
                    .go_provider
                    .as_ref()
                    .ok_or(BenchError::NoGoProvider)?,
            ),
        ),
    };
    let mut world_options = WorldOptions::sandbox(command);
    world_options.control_plane = ControlPlaneChoice::Real(options.binaries.clone());
    world_options.mock_timings = options.timings.clone();
    // Each provider with its shipped defaults (the Go provider has no interval flags).
    world_options.intervals = ControllerIntervals::production();
    if provider == Provider::Ours {
        let (rate, burst) = options.ours_rate_limit;
        world_options.controller_args = vec![
            "--prism-rate-limit".into(),
            rate.to_string(),
            "--prism-burst".into(),
            burst.to_string(),
            "--concurrency".into(),
            options.ours_concurrency.to_string(),
        ];
    }
    world_options.work_dir = options.work_dir.as_ref().map(|dir| dir.join(name));
    world_options.observe_every = Duration::from_secs(1);
    world_options.progress = options.progress.clone();
    world_options.controller_verbosity = 2;
    let say = |line: String| {
        if let Some(progress) = &options.progress {
            progress(&line);
        }
    };
    say(format!(
        "{name}: starting the real control plane, prism-mock and the provider"
    ));
    let world = World::start(world_options).await?;
    let (rate, burst) = options.mock_rate_limit;
    world.admin().set_rate_limit(Some(RateLimit {
        requests_per_second: rate,
        burst,
    }));
    let usage = Arc::new(Mutex::new(Usage::default()));
    // The provider's start-up (caches, a first inventory) is not the workload's.
    sample_for(&world, &usage, Duration::from_secs(5)).await;
    let n = options.machines;

    // The pictures' samples: every 2 s (the audit log is read whole each time).
    let pictures = Sampler::new(&world, Duration::from_secs(2));
    let (marks, samples) = pictures
        .run(&world, async {
            let sampler = spawn_sampler(usage.clone(), world.controller_pid().await);
            let start = mark(&world, provider).await?;
            pictures.mark("scale-up");
            say(format!("{name}: scaling {LINUX_SET} 0 → {n}"));
            world.set_label(format!("{name}: 0 → {n}"));
            let scaled_at = Timestamp::now();
            world
                .scale(LINUX_SET, i32::try_from(n).unwrap_or(i32::MAX))
                .await?;
            let running = world
                .wait_for(
                    &format!("{n} Machines Running"),
                    options.phase_timeout,
                    |s| all_running(s, n),
                )
                .await?;
            let up_end = mark(&world, provider).await?;
            let last_created = last_created_after(&running, scaled_at);
            let join = join_of(&world, provider, &running, scaled_at);
            sampler.abort();

            pictures.mark("steady");
            say(format!("{name}: steady for {:?}", options.steady));
            world.set_label(format!("{name}: steady"));
            sample_for(&world, &usage, options.steady).await;
            let steady_end = mark(&world, provider).await?;

            pictures.mark("restart");
            say(format!("{name}: restart (SIGKILL, then a new process)"));
            world.set_label(format!("{name}: restart"));
            world.restart_controller().await?;
            sample_for(&world, &usage, options.restart_window).await;
            let restart_end = mark(&world, provider).await?;

            pictures.mark("scale-down");
            say(format!("{name}: scaling {LINUX_SET} {n} → 0"));
            world.set_label(format!("{name}: {n} → 0"));
            world.scale(LINUX_SET, 0).await?;
            let sampler = spawn_sampler(usage.clone(), world.controller_pid().await);
            world
                .wait_for(
                    "no Machine and no VM left",
                    options.phase_timeout,
                    nothing_left,
                )
                .await?;
            let down_end = mark(&world, provider).await?;
            sampler.abort();
            Ok::<_, BenchError>((
                start,
                up_end,
                last_created,
                join,
                steady_end,
                restart_end,
                down_end,
            ))
        })
        .await;
    let (start, up_end, last_created, join, steady_end, restart_end, down_end) = marks?;
    let pid = world.controller_pid().await;
    let (cpu_seconds, peak_rss_mib) = {
        let mut usage = usage
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        usage.sample(pid);
        (usage.cpu_seconds(), usage.peak_rss_mib())
    };
    world.shutdown().await;

    let bound = lower_bound(
        BenchKind::Image,
        n,
        options.timings.task_queued_ms + options.timings.task_running_ms,
        options.timings.boot_to_address_ms,
        binding_limit(Some(options.mock_rate_limit), Some(options.ours_rate_limit)),
    );
    Ok(ProviderRun {
        provider: name,
        machines: n,
        up: phase(&start, &up_end),
        bound_seconds: with_arrival(&bound, last_created),
        last_machine_created_seconds: last_created,
        join,
        steady: phase(&up_end, &steady_end),
        restart: phase(&steady_end, &restart_end),
        down: phase(&restart_end, &down_end),
        cpu_seconds,
        peak_rss_mib,
        samples,
    })
}

/// The pictures of `runs`, both providers on the same axes (in the order of
/// [`super::sampling::PICTURES`]).
pub fn charts(runs: &[ProviderRun]) -> Vec<crate::plots::Chart> {
    let charts: Vec<(&str, Vec<crate::plots::Chart>)> = runs
        .iter()
        .map(|run| (run.provider, run.samples.charts()))
        .collect();
    crate::plots::side_by_side(&charts)
}

/// The providers of the options, in order.
pub async fn run(options: &SideBySideOptions) -> Result<Vec<ProviderRun>, BenchError> {
    let mut runs = Vec::new();
    for provider in &options.providers {
        runs.push(run_one(options, *provider).await?);
    }
    Ok(runs)
}

/// The table of docs/performance.md: one column per provider.
pub fn render(runs: &[ProviderRun], steady: Duration, restart_window: Duration) -> String {
    let row = |label: &str, value: &dyn Fn(&ProviderRun) -> String| {
        let mut line = format!("| {label} |");
        for run in runs {
            line.push_str(&format!(" {} |", value(run)));
        }
        line.push('\n');
        line
    };
    let mut out = String::from("| |");
    for run in runs {
        out.push_str(&format!(" {} |", run.provider));
    }
    out.push('\n');
    out.push_str(&format!("|---|{}\n", "---|".repeat(runs.len())));
    let minutes = steady.as_secs_f64() / 60.0;
    out.push_str(&row("0 → N, seconds (÷ the lower bound)", &|r| {
        format!(
            "{:.1} ({:.1}×)",
            r.up.seconds,
            r.up.seconds / r.bound_seconds.max(f64::MIN_POSITIVE)
        )
    }));
    out.push_str(&row(
        "0 → N, the last Machine created, seconds after the scale",
        &|r| {
            r.last_machine_created_seconds
                .map_or_else(|| "?".to_owned(), |created| format!("{created:.0}"))
        },
    ));
    out.push_str(&row(
        "0 → N, seconds ÷ (the lower bound + the cluster's fastest join)",
        &|r| {
            r.join.as_ref().map_or_else(
                || "?".to_owned(),
                |join| {
                    let bound = r.bound_seconds + join.fastest_join();
                    format!(
                        "{:.1}× ({bound:.1} s)",
                        r.up.seconds / bound.max(f64::MIN_POSITIVE)
                    )
                },
            )
        },
    ));
    out.push_str(&row(
        "0 → N, the last InternalIP written, seconds after the scale (÷ the lower bound)",
        &|r| {
            r.join
                .as_ref()
                .and_then(|join| join.last_internal_ip)
                .map_or_else(
                    || "?".to_owned(),
                    |at| {
                        format!(
                            "{at:.1} ({:.2}×)",
                            at / r.bound_seconds.max(f64::MIN_POSITIVE)
                        )
                    },
                )
        },
    ));
    let stage = |label: &str, spread: fn(&JoinStages) -> &super::report::Spread| {
        row(label, &|r: &ProviderRun| {
            r.join.as_ref().map_or_else(
                || "?".to_owned(),
                |join| {
                    let s = spread(join);
                    format!("{:.1} / {:.1} / {:.1}", s.p50, s.p90, s.max)
                },
            )
        })
    };
    out.push_str(&stage(
        "0 → N, created → InternalIP written (the provider), s, p50 / p90 / max",
        |j| &j.to_internal_ip,
    ));
    out.push_str(&stage(
        "0 → N, InternalIP → nodeRef (the cluster's join), s, p50 / p90 / max",
        |j| &j.join,
    ));
    out.push_str(&stage(
        "0 → N, within it, Node and InternalIP both there → nodeRef (nodelink), s, p50 / p90 / max",
        |j| &j.link,
    ));
    out.push_str(&stage(
        "0 → N, nodeRef → Running (the provider), s, p50 / p90 / max",
        |j| &j.to_running,
    ));
    out.push_str(&row(
        "0 → N, the last Machine Running: created, InternalIP, Node, nodeRef, Running (s after the scale)",
        &|r| {
            r.join
                .as_ref()
                .and_then(|join| join.last.as_ref())
                .map_or_else(
                    || "?".to_owned(),
                    |m| {
                        let at = |t: Option<f64>| t.map_or_else(|| "?".to_owned(), |t| format!("{t:.1}"));
                        format!(
                            "{:.0}, {}, {}, {}, {}",
                            m.created,
                            at(m.internal_ip),
                            at(m.node),
                            at(m.node_ref),
                            at(m.running)
                        )
                    },
                )
        },
    ));
    out.push_str(&row("0 → N, Prism calls per Machine", &|r| {
        format!("{:.2}", r.up.calls_per_machine(r.machines))
    }));
    out.push_str(&row("0 → N, Kubernetes writes per Machine", &|r| {
        format!("{:.2}", r.up.kube_writes as f64 / r.machines.max(1) as f64)
    }));
    out.push_str(&row(
        &format!("steady ({minutes:.0} min), Prism calls per minute"),
        &|r| {
            format!(
                "{:.1}",
                Phase::per_minute(r.steady.prism_calls, r.steady.seconds)
            )
        },
    ));
    out.push_str(&row(
        &format!("steady ({minutes:.0} min), Kubernetes writes per minute"),
        &|r| {
            format!(
                "{:.1}",
                Phase::per_minute(r.steady.kube_writes, r.steady.seconds)
            )
        },
    ));
    out.push_str(&row(
        &format!(
            "restart, Prism calls in the first {} s",
            restart_window.as_secs()
        ),
        &|r| r.restart.prism_calls.to_string(),
    ));
    out.push_str(&row(
        &format!(
            "restart, Kubernetes writes in the first {} s",
            restart_window.as_secs()
        ),
        &|r| r.restart.kube_writes.to_string(),
    ));
    out.push_str(&row("N → 0, seconds", &|r| {
        format!("{:.1}", r.down.seconds)
    }));
    out.push_str(&row("N → 0, Prism calls per Machine", &|r| {
        format!("{:.2}", r.down.calls_per_machine(r.machines))
    }));
    out.push_str(&row("N → 0, Kubernetes writes per Machine", &|r| {
        format!(
            "{:.2}",
            r.down.kube_writes as f64 / r.machines.max(1) as f64
        )
    }));
    out.push_str(&row("CPU seconds, whole run", &|r| {
        format!("{:.1}", r.cpu_seconds)
    }));
    out.push_str(&row("peak resident memory, MiB", &|r| {
        format!("{:.0}", r.peak_rss_mib)
    }));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::writes::WriteKind;

    fn run(provider: &'static str, up_seconds: f64, up_calls: u64) -> ProviderRun {
        ProviderRun {
            provider,
            machines: 10,
            up: Phase {
                seconds: up_seconds,
                prism_calls: up_calls,
                kube_writes: 120,
                writes_by_kind: BTreeMap::new(),
            },
            bound_seconds: 5.0,
            last_machine_created_seconds: None,
            join: None,
            steady: Phase {
                seconds: 120.0,
                prism_calls: 30,
                kube_writes: 0,
                writes_by_kind: BTreeMap::new(),
            },
            restart: Phase::default(),
            down: Phase::default(),
            cpu_seconds: 1.25,
            peak_rss_mib: 45.6,
            samples: RunSamples::default(),
        }
    }

    #[test]
    fn the_table_has_a_column_per_provider_and_ratios_per_machine_and_minute() {
        let mut ours = run("ours", 25.0, 33);
        ours.last_machine_created_seconds = Some(17.2);
        let spread = |min, p50, p90, max| super::super::report::Spread { min, p50, p90, max };
        ours.join = Some(JoinStages {
            machines: 10,
            to_internal_ip: spread(2.0, 4.0, 9.0, 12.0),
            join: spread(2.5, 4.0, 6.0, 7.0),
            link: spread(0.5, 1.0, 3.0, 5.0),
            to_running: spread(0.1, 0.1, 0.2, 0.3),
            last: Some(join_stages::MachineJoin {
                name: "m".into(),
                created: 3.0,
                internal_ip: Some(15.0),
                node: Some(14.5),
                node_ref: Some(24.8),
                running: None,
            }),
            last_internal_ip: Some(15.0),
        });
        let table = render(
            &[ours, run("go", 50.0, 190)],
            Duration::from_secs(120),
            Duration::from_secs(60),
        );
        assert!(
            table.starts_with("| | ours | go |\n|---|---|---|\n"),
            "{table}"
        );
        assert!(
            table.contains("| 0 → N, seconds (÷ the lower bound) | 25.0 (5.0×) | 50.0 (10.0×) |"),
            "{table}"
        );
        assert!(
            table.contains("| 0 → N, the last Machine created, seconds after the scale | 17 | ? |"),
            "{table}"
        );
        // The bound with the cluster's fastest join: 5.0 + 2.5.
        assert!(
            table.contains(
                "| 0 → N, seconds ÷ (the lower bound + the cluster's fastest join) | 3.3× (7.5 s) | ? |"
            ),
            "{table}"
        );
        assert!(
            table.contains("| 0 → N, the last InternalIP written, seconds after the scale (÷ the lower bound) | 15.0 (3.00×) | ? |"),
            "{table}"
        );
        assert!(
            table.contains("| 0 → N, InternalIP → nodeRef (the cluster's join), s, p50 / p90 / max | 4.0 / 6.0 / 7.0 | ? |"),
            "{table}"
        );
        assert!(
            table.contains("| 0 → N, within it, Node and InternalIP both there → nodeRef (nodelink), s, p50 / p90 / max | 1.0 / 3.0 / 5.0 | ? |"),
            "{table}"
        );
        assert!(
            table.contains("| 0 → N, the last Machine Running: created, InternalIP, Node, nodeRef, Running (s after the scale) | 3, 15.0, 14.5, 24.8, ? | ? |"),
            "{table}"
        );
        assert!(
            table.contains("| 0 → N, Prism calls per Machine | 3.30 | 19.00 |"),
            "{table}"
        );
        assert!(
            table.contains("| steady (2 min), Prism calls per minute | 15.0 | 15.0 |"),
            "{table}"
        );
        assert!(
            table.contains("| peak resident memory, MiB | 46 | 46 |"),
            "{table}"
        );
    }

    #[test]
    fn a_providers_writes_are_its_own_actors() {
        let kind = |actor| WriteKind {
            actor,
            verb: "patch".to_owned(),
            resource: "machines".to_owned(),
            subresource: "status".to_owned(),
            code: 200,
        };
        let tally: Tally = [
            (kind(Actor::Controller), 7),
            (kind(Actor::GoProvider), 11),
            (kind(Actor::Nodelink), 5),
        ]
        .into_iter()
        .collect();
        let total = |provider| -> u64 { writes_by_kind(&tally, provider).values().sum() };
        assert_eq!(total(Provider::Ours), 7);
        assert_eq!(total(Provider::Go), 11);
        assert_eq!(
            writes_by_kind(&tally, Provider::Ours),
            BTreeMap::from([("patch machines/status → 200".to_owned(), 7)])
        );
    }

    #[test]
    fn a_phase_has_the_writes_of_each_kind_made_in_it() {
        let mark = |writes: &[(&str, u64)]| Mark {
            at: Instant::now(),
            calls: 0,
            writes: writes
                .iter()
                .map(|(kind, count)| ((*kind).to_owned(), *count))
                .collect(),
        };
        let from = mark(&[("patch machines/status → 200", 3)]);
        let to = mark(&[
            ("patch machines/status → 200", 7),
            ("create events → 201", 2),
        ]);
        let phase = phase(&from, &to);
        assert_eq!(phase.kube_writes, 6);
        assert_eq!(
            phase.writes_by_kind,
            BTreeMap::from([
                ("create events → 201".to_owned(), 2),
                ("patch machines/status → 200".to_owned(), 4),
            ])
        );
        let runs = [ProviderRun {
            up: phase,
            ..run("ours", 25.0, 33)
        }];
        assert_eq!(
            render_writes(&runs),
            "ours: 0 → N: 0.20 per Machine: create events → 201\n\
             ours: 0 → N: 0.40 per Machine: patch machines/status → 200\n"
        );
    }
}
