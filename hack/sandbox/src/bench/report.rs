//! The benchmark's report: what was measured, rendered as tables for people and as one JSON
//! object for scripts.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::bound::LowerBound;
use super::calls::CallTable;
use super::track::MachineTimeline;

/// Intervals in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct IntervalsMs {
    pub poll: u64,
    pub requeue: u64,
    pub inventory_refresh: u64,
}

/// How the run was set up.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Settings {
    pub machines: usize,
    pub kind: String,
    /// The mock's limit (requests per second, burst); none when unlimited.
    pub mock_rate_limit: Option<(f64, u32)>,
    pub controller_rate_limit: f64,
    pub controller_burst: u32,
    pub concurrency: u16,
    /// The controller's intervals while scaling up and down.
    pub scale_intervals: IntervalsMs,
    /// Which set they are (`sandbox bench --intervals`): `sandbox`, `production` or
    /// `custom`.
    pub scale_intervals_name: String,
    /// The controller's intervals after the restart (steady state): the production defaults.
    pub steady_intervals: IntervalsMs,
    /// prism-mock: a task's queued + running time, and the boot to an address.
    pub mock_task_ms: u64,
    pub mock_boot_ms: u64,
    /// VMs of other tenants prism-mock held besides the benchmark's (`--foreign-vms`).
    pub foreign_vms: u32,
    /// The program run as the controller (the sandbox itself, or `--controller-binary`).
    pub controller_program: String,
}

/// The machine the run was on.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Host {
    pub cpus: usize,
    pub cpu_model: String,
    /// 1-minute load average before the world started.
    pub load_before: Option<f64>,
    /// Highest and mean 1-minute load average sampled (every 5 s) during the run.
    pub load_max: Option<f64>,
    pub load_mean: Option<f64>,
}

/// Percentiles of one stage's duration over the Machines, seconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Spread {
    pub min: f64,
    pub p50: f64,
    pub p90: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(mut values: Vec<f64>) -> Self {
        if values.is_empty() {
            return Self::default();
        }
        values.sort_by(f64::total_cmp);
        let at = |q: f64| {
            let index = ((values.len() - 1) as f64 * q).round() as usize;
            values[index.min(values.len() - 1)]
        };
        Self {
            min: values[0],
            p50: at(0.5),
            p90: at(0.9),
            max: values[values.len() - 1],
        }
    }
}

/// Where each Machine's time from scale-up to Running went, and whose work it was.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Stages {
    /// Scale-up → Machine created (the simulated MachineSet replica controller).
    pub created: Spread,
    /// Created → its create, clone or deploy request reached Prism (the controller: queue,
    /// status writes, rate limit).
    pub to_create_request: Spread,
    /// Create request → addresses on the Machine (Prism's task and boot, the controller's reads).
    pub to_addresses: Spread,
    /// Addresses → nodeRef (the simulated node agent, approver and nodelink).
    pub to_node_ref: Spread,
    /// nodeRef → Running (the controller).
    pub to_running: Spread,
    /// The simulated actors' share of the last Machine's time to Running (created, plus
    /// addresses → nodeRef), 0 to 1.
    pub simulators_share_of_last: f64,
    /// The same share, averaged over the Machines.
    pub simulators_share_mean: f64,
}

/// Scaling 0 → N.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ScaleUp {
    /// Scale-up → all N Machines Running.
    pub seconds: f64,
    pub bound: LowerBound,
    /// `seconds / bound.seconds`.
    pub ratio: f64,
    pub calls: CallTable,
    pub stages: Stages,
    pub controller_cpu_seconds: f64,
    /// CPU of the sandbox process over the phase: prism-mock, kube-sim, the simulated actors
    /// and the benchmark itself.
    pub sandbox_cpu_seconds: f64,
    /// Kubernetes API requests by user (each actor has its own).
    pub kube_requests: BTreeMap<String, u64>,
}

/// After a restart of the controller with N Machines Running.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Restart {
    /// Process start → every Machine reconciled once (the controller's reconcile metrics).
    pub converge_seconds: f64,
    /// Prism calls from the start to convergence.
    pub calls: CallTable,
    /// Prism writes and the controller's Kubernetes writes from the start to the end of the
    /// steady-state window.
    pub prism_writes: u64,
    pub kube_writes: u64,
    /// What those Kubernetes writes were (`verb resource namespace/name`), to tell why there are any.
    pub kube_write_targets: Vec<String>,
}

/// Steady state with N Machines Running, production intervals.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Steady {
    pub seconds: f64,
    pub calls: CallTable,
    pub calls_per_minute: f64,
    /// `POST /vms/list` calls per minute, among `calls_per_minute`.
    pub vm_list_calls_per_minute: f64,
    pub controller_cpu_seconds: f64,
}

/// Scaling N → 0.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Delete {
    /// Scale-down → no Machine and no VM left.
    pub seconds: f64,
    /// What the scale-down's own Prism calls take at the binding rate limit
    /// ([`super::bound::calls_time`]).
    pub calls_seconds: f64,
    /// `seconds / calls_seconds`.
    pub ratio: f64,
    pub calls: CallTable,
    pub controller_cpu_seconds: f64,
}

/// One controller process's resources.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProcessUsage {
    /// What it ran through.
    pub phases: String,
    pub cpu_seconds: f64,
    /// Peak resident memory (`VmHWM`), MiB.
    pub peak_rss_mib: f64,
    /// Peak of its anonymous part (`RssAnon`, sampled every 100 ms), MiB: what the controller
    /// holds, whichever binary runs it.
    pub peak_rss_anon_mib: f64,
    /// Peak of its file-backed part (`RssFile`, sampled), MiB: mostly the executable's pages.
    pub peak_rss_file_mib: f64,
}

/// One target of issue 9 and whether it was met.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Target {
    pub name: String,
    pub target: String,
    pub measured: String,
    /// `None` when this run does not measure it (for example memory below N = 1,000).
    pub met: Option<bool>,
}

/// Everything one run measured.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BenchReport {
    pub settings: Settings,
    pub host: Host,
    pub scale_up: ScaleUp,
    pub restart: Option<Restart>,
    pub steady: Option<Steady>,
    pub delete: Option<Delete>,
    pub controller_processes: Vec<ProcessUsage>,
    pub targets: Vec<Target>,
    #[serde(skip)]
    pub timelines: Vec<MachineTimeline>,
    /// The run over time, for its pictures.
    #[serde(skip)]
    pub samples: super::sampling::RunSamples,
}

fn calls_table(out: &mut String, title: &str, table: &CallTable) {
    let _ = writeln!(
        out,
        "{title}: {} Prism calls, {:.2} per Machine ({} for the Machines' own VMs, {} shared; per VM {}..{}; {} writes; {} answered 429)",
        table.total,
        table.per_machine,
        table.attributed,
        table.shared,
        table.per_vm_min,
        table.per_vm_max,
        table.writes,
        table.throttled,
    );
    if table.endpoints.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "  {:<7} {:<62} {:>7} {:>8} {:>7} {:>11}",
        "method", "endpoint", "calls", "own VM", "shared", "per Machine"
    );
    for row in &table.endpoints {
        let _ = writeln!(
            out,
            "  {:<7} {:<62} {:>7} {:>8} {:>7} {:>11.2}",
            row.method, row.endpoint, row.total, row.attributed, row.shared, row.per_machine
        );
    }
}

/// A rate limit for the report: `45/s, burst 50`, or that none limits.
fn limit_text(limit: Option<(f64, u32)>) -> String {
    limit.map_or_else(
        || "no rate limit".to_owned(),
        |(rate, burst)| format!("{rate}/s, burst {burst}"),
    )
}

fn spread(out: &mut String, name: &str, spread: &Spread) {
    let _ = writeln!(
        out,
        "  {name:<44} {:>7.2} {:>7.2} {:>7.2}",
        spread.p50, spread.p90, spread.max
    );
}

impl BenchReport {
    /// The tables, for a terminal or a log.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let s = &self.settings;
        let limit = s.mock_rate_limit.map_or_else(
            || "unlimited".to_owned(),
            |(rate, burst)| format!("{rate} requests/s, burst {burst}"),
        );
        let _ = writeln!(
            out,
            "Benchmark: {} Machines, kind {}; prism-mock {limit}, tasks {} ms, boot to address {} ms, {} foreign VMs",
            s.machines, s.kind, s.mock_task_ms, s.mock_boot_ms, s.foreign_vms
        );
        let _ = writeln!(out, "Controller program: {}", s.controller_program);
        let _ = writeln!(
            out,
            "Controller: --prism-rate-limit {} --prism-burst {} --concurrency {}; scaling with the {} intervals: poll {} ms, requeue {} ms, inventory {} ms; steady state with {} / {} / {} ms",
            s.controller_rate_limit,
            s.controller_burst,
            s.concurrency,
            s.scale_intervals_name,
            s.scale_intervals.poll,
            s.scale_intervals.requeue,
            s.scale_intervals.inventory_refresh,
            s.steady_intervals.poll,
            s.steady_intervals.requeue,
            s.steady_intervals.inventory_refresh,
        );
        let h = &self.host;
        let load = |v: Option<f64>| v.map_or_else(|| "?".to_owned(), |v| format!("{v:.2}"));
        let _ = writeln!(
            out,
            "Host: {} CPUs ({}); load average before {}, during max {} mean {}\n",
            h.cpus,
            h.cpu_model,
            load(h.load_before),
            load(h.load_max),
            load(h.load_mean)
        );

        let up = &self.scale_up;
        let _ = writeln!(
            out,
            "Scale-up 0 → {}: all Running after {:.2} s; lower bound {:.2} s (rate {:.2} s for {} call(s) per Machine at {} + {:.2} s task and boot; one Machine {:.2} s); ratio {:.2}",
            s.machines,
            up.seconds,
            up.bound.seconds,
            up.bound.rate_seconds,
            up.bound.calls_per_machine,
            limit_text(up.bound.limit),
            up.bound.after_last_call_seconds,
            up.bound.one_machine_seconds,
            up.ratio
        );
        let _ = writeln!(
            out,
            "  the bound's calls per Machine: {} (none a correct controller can skip)",
            up.bound.calls
        );
        let _ = writeln!(
            out,
            "  {:<44} {:>7} {:>7} {:>7}",
            "stage (seconds)", "p50", "p90", "max"
        );
        spread(
            &mut out,
            "scale-up → Machine created (replica ctl)",
            &up.stages.created,
        );
        spread(
            &mut out,
            "created → create request (controller)",
            &up.stages.to_create_request,
        );
        spread(
            &mut out,
            "request → addresses (Prism, controller)",
            &up.stages.to_addresses,
        );
        spread(
            &mut out,
            "addresses → nodeRef (agent, approver, nodelink)",
            &up.stages.to_node_ref,
        );
        spread(
            &mut out,
            "nodeRef → Running (controller)",
            &up.stages.to_running,
        );
        let _ = writeln!(
            out,
            "  simulated actors' share of the time to Running: last Machine {:.0} %, mean {:.0} %",
            up.stages.simulators_share_of_last * 100.0,
            up.stages.simulators_share_mean * 100.0
        );
        let _ = writeln!(
            out,
            "  CPU: controller {:.2} s, sandbox process (mock, kube-sim, actors) {:.2} s",
            up.controller_cpu_seconds, up.sandbox_cpu_seconds
        );
        let requests: Vec<String> = up
            .kube_requests
            .iter()
            .map(|(user, count)| format!("{user} {count}"))
            .collect();
        let _ = writeln!(out, "  Kubernetes API requests: {}", requests.join(", "));
        calls_table(&mut out, "  create → Running", &up.calls);

        if let Some(restart) = &self.restart {
            let _ = writeln!(
                out,
                "\nRestart with {} Machines Running: converged (every Machine reconciled) {:.2} s after the start; Prism writes {}, controller Kubernetes writes {} (through the steady-state window)",
                s.machines, restart.converge_seconds, restart.prism_writes, restart.kube_writes
            );
            for target in &restart.kube_write_targets {
                let _ = writeln!(out, "  controller wrote: {target}");
            }
            calls_table(&mut out, "  start → converged", &restart.calls);
        }
        if let Some(steady) = &self.steady {
            let _ = writeln!(
                out,
                "\nSteady state, {:.0} s with {} Machines Running: {:.2} Prism calls per minute, {:.2} of them POST /vms/list; controller CPU {:.2} s",
                steady.seconds,
                s.machines,
                steady.calls_per_minute,
                steady.vm_list_calls_per_minute,
                steady.controller_cpu_seconds
            );
            calls_table(&mut out, "  steady state", &steady.calls);
        }
        if let Some(delete) = &self.delete {
            let _ = writeln!(
                out,
                "\nScale-down {} → 0: no Machine and no VM after {:.2} s; its {} Prism calls take {:.2} s at the binding rate limit; ratio {:.2}; controller CPU {:.2} s",
                s.machines,
                delete.seconds,
                delete.calls.total,
                delete.calls_seconds,
                delete.ratio,
                delete.controller_cpu_seconds
            );
            calls_table(&mut out, "  delete", &delete.calls);
        }
        let _ = writeln!(out, "\nController processes:");
        for process in &self.controller_processes {
            let _ = writeln!(
                out,
                "  {:<36} CPU {:>8.2} s, peak resident {:>7.1} MiB (anonymous {:.1} MiB, file-backed {:.1} MiB at their own peaks)",
                process.phases,
                process.cpu_seconds,
                process.peak_rss_mib,
                process.peak_rss_anon_mib,
                process.peak_rss_file_mib
            );
        }
        let _ = writeln!(out, "\nTargets:");
        for target in &self.targets {
            let verdict = match target.met {
                Some(true) => "met",
                Some(false) => "MISSED",
                None => "not measured",
            };
            let _ = writeln!(
                out,
                "  {:<44} {:<16} {:<28} {verdict}",
                target.name, target.target, target.measured
            );
        }
        out
    }

    /// One line of JSON.
    pub fn json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spreads_take_nearest_ranks() {
        let spread = Spread::of((1..=10).map(f64::from).collect());
        assert_eq!((spread.p50, spread.p90, spread.max), (6.0, 9.0, 10.0));
        assert_eq!(Spread::of(Vec::new()), Spread::default());
    }
}
