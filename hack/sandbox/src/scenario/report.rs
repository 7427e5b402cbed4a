//! The closing report: per Machine (times, Prism calls), per step, and Prism calls per endpoint.
//!
//! prism-mock counts calls per method and route template (`/api/nutanix/v3/vms/{uuid}`), not per
//! VM, so calls cannot be attributed to one Machine: each Machine is shown its step's calls
//! divided by the Machines that step created or deleted (background calls such as the inventory
//! list included), and the report says so.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use prism_mock::Counter;

use super::ScenarioFailure;
use crate::world::MachineRecord;

/// One step as it happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepReport {
    pub name: String,
    /// Since the world started.
    pub started: Duration,
    pub ended: Duration,
    /// Prism calls made during the step (all endpoints, every caller).
    pub prism_calls: u64,
    pub succeeded: bool,
}

impl StepReport {
    pub fn took(&self) -> Duration {
        self.ended.saturating_sub(self.started)
    }

    fn contains(&self, at: Duration) -> bool {
        self.started <= at && at <= self.ended
    }
}

/// Everything the scenario did, and whether it held.
#[derive(Clone, Debug)]
pub struct ScenarioReport {
    pub steps: Vec<StepReport>,
    pub machines: Vec<MachineRecord>,
    /// Calls per (method, endpoint), all statuses, whole run.
    pub prism_by_endpoint: BTreeMap<(String, String), u64>,
    pub outcome: Result<(), ScenarioFailure>,
}

fn seconds(duration: Duration) -> String {
    format!("{:.1}s", duration.as_secs_f64())
}

fn at(duration: Option<Duration>) -> String {
    duration.map_or_else(|| "-".to_owned(), |d| format!("+{}", seconds(d)))
}

impl ScenarioReport {
    pub fn new(
        steps: Vec<StepReport>,
        machines: Vec<MachineRecord>,
        counters: &[Counter],
        outcome: Result<(), ScenarioFailure>,
    ) -> Self {
        let mut prism_by_endpoint = BTreeMap::new();
        for counter in counters {
            *prism_by_endpoint
                .entry((counter.method.clone(), counter.endpoint.clone()))
                .or_default() += counter.count;
        }
        Self {
            steps,
            machines,
            prism_by_endpoint,
            outcome,
        }
    }

    /// From the first step's start to the last one's end.
    pub fn duration(&self) -> Duration {
        match (self.steps.first(), self.steps.last()) {
            (Some(first), Some(last)) => last.ended.saturating_sub(first.started),
            _ => Duration::ZERO,
        }
    }

    pub fn total_prism_calls(&self) -> u64 {
        self.prism_by_endpoint.values().sum()
    }

    /// Machines a step created or deleted (what its calls are divided by).
    pub fn machines_changed_in(&self, step: &StepReport) -> usize {
        self.machines
            .iter()
            .filter(|m| step.contains(m.first_seen) || m.gone.is_some_and(|g| step.contains(g)))
            .count()
    }

    fn calls_per_machine(&self, step: &StepReport) -> Option<f64> {
        let changed = self.machines_changed_in(step);
        (changed > 0).then(|| step.prism_calls as f64 / changed as f64)
    }

    /// The Prism calls per Machine of the step that created it (an average: see the module
    /// documentation).
    pub fn creation_calls_of(&self, machine: &MachineRecord) -> Option<f64> {
        self.steps
            .iter()
            .find(|s| s.contains(machine.first_seen))
            .and_then(|s| self.calls_per_machine(s))
    }

    /// The closing text: outcome, the Machine table, the step table, Prism calls by endpoint.
    pub fn render(&self) -> String {
        let mut out = String::new();
        match &self.outcome {
            Ok(()) => {
                let _ = writeln!(
                    out,
                    "The scenario held in {}: every Machine reached Running and joined, the autoscaler's \
                     scale-down deleted the annotated Machine, and no Machine, VM or Node is left.",
                    seconds(self.duration())
                );
            }
            Err(failure) => {
                let _ = writeln!(out, "The scenario FAILED: {failure}");
            }
        }
        let _ = writeln!(
            out,
            "\n{:<22} {:<15} {:<8} {:>8} {:>9} {:>10} {:>8} {:>8} {:>8}  {:<12} VM",
            "Machine",
            "MachineSet",
            "OS",
            "created",
            "Running",
            "to Running",
            "joined",
            "deleted",
            "calls*",
            "InternalIP",
        );
        for machine in &self.machines {
            let calls = self
                .creation_calls_of(machine)
                .map_or_else(|| "-".to_owned(), |c| format!("{c:.1}"));
            let _ = writeln!(
                out,
                "{:<22} {:<15} {:<8} {:>8} {:>9} {:>10} {:>8} {:>8} {:>8}  {:<12} {}",
                machine.name,
                machine.machine_set.as_deref().unwrap_or("-"),
                if machine.windows { "Windows" } else { "Linux" },
                at(Some(machine.first_seen)),
                at(machine.reached(nutanix_machine_controller::api::phase::RUNNING)),
                machine
                    .time_to_running()
                    .map_or_else(|| "-".to_owned(), seconds),
                at(machine.joined),
                at(machine.gone),
                calls,
                machine.internal_ip.as_deref().unwrap_or("-"),
                machine.vm_uuid.as_deref().unwrap_or("-"),
            );
        }
        let _ = writeln!(
            out,
            "\n{:<44} {:>8} {:>8} {:>12} {:>14}",
            "Step", "took", "result", "Prism calls", "per Machine*"
        );
        for step in &self.steps {
            let _ = writeln!(
                out,
                "{:<44} {:>8} {:>8} {:>12} {:>14}",
                step.name,
                seconds(step.took()),
                if step.succeeded { "ok" } else { "FAILED" },
                step.prism_calls,
                self.calls_per_machine(step)
                    .map_or_else(|| "-".to_owned(), |c| format!("{c:.1}")),
            );
        }
        let _ = writeln!(
            out,
            "\nPrism calls by endpoint (whole run, {} in all):",
            self.total_prism_calls()
        );
        for ((method, endpoint), count) in &self.prism_by_endpoint {
            let _ = writeln!(out, "{count:>8}  {method:<7} {endpoint}");
        }
        let _ = writeln!(
            out,
            "\n* prism-mock counts calls per endpoint, not per VM: a Machine's calls are its step's calls \
             divided by the Machines the step created or deleted (background calls, such as the \
             inventory list, included)."
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(name: &str, first_seen: u64, running: u64, gone: u64) -> MachineRecord {
        MachineRecord {
            name: name.to_owned(),
            machine_set: Some("win-image".to_owned()),
            windows: true,
            first_seen: Duration::from_secs(first_seen),
            phases: vec![("Running".to_owned(), Duration::from_secs(running))],
            joined: Some(Duration::from_secs(running)),
            gone: Some(Duration::from_secs(gone)),
            ..MachineRecord::default()
        }
    }

    fn step(name: &str, started: u64, ended: u64, calls: u64) -> StepReport {
        StepReport {
            name: name.to_owned(),
            started: Duration::from_secs(started),
            ended: Duration::from_secs(ended),
            prism_calls: calls,
            succeeded: true,
        }
    }

    fn counter(method: &str, endpoint: &str, status: u16, count: u64) -> Counter {
        Counter {
            method: method.to_owned(),
            endpoint: endpoint.to_owned(),
            status,
            count,
        }
    }

    #[test]
    fn calls_are_averaged_over_the_machines_a_step_created_or_deleted() {
        let report = ScenarioReport::new(
            vec![
                step("up", 0, 10, 30),
                step("down", 10, 20, 5),
                step("idle", 20, 21, 1),
            ],
            vec![
                record("a", 1, 5, 15),
                record("b", 2, 6, 30),
                record("c", 3, 7, 30),
            ],
            &[
                counter("POST", "/api/nutanix/v3/vms", 202, 3),
                counter("POST", "/api/nutanix/v3/vms", 500, 1),
                counter("GET", "/api/nutanix/v3/vms/{uuid}", 200, 10),
            ],
            Ok(()),
        );
        assert_eq!(report.machines_changed_in(&report.steps[0]), 3);
        assert_eq!(report.machines_changed_in(&report.steps[1]), 1);
        assert_eq!(report.creation_calls_of(&report.machines[0]), Some(10.0));
        assert_eq!(report.calls_per_machine(&report.steps[2]), None);
        assert_eq!(report.total_prism_calls(), 14);
        assert_eq!(
            report.prism_by_endpoint[&("POST".to_owned(), "/api/nutanix/v3/vms".to_owned())],
            4
        );
        assert_eq!(report.duration(), Duration::from_secs(21));
        let text = report.render();
        assert!(text.starts_with("The scenario held in 21.0s"), "{text}");
        assert!(text.contains("not per VM"), "{text}");
        let line_a = text.lines().find(|l| l.starts_with("a ")).unwrap();
        assert!(line_a.contains("4.0s"), "time to Running: {line_a}");
        assert!(line_a.contains("10.0"), "calls: {line_a}");
    }

    #[test]
    fn a_failure_is_named_first() {
        let report = ScenarioReport::new(
            vec![],
            vec![],
            &[],
            Err(ScenarioFailure {
                step: "oc scale".to_owned(),
                reason: "timed out".to_owned(),
            }),
        );
        assert!(
            report
                .render()
                .starts_with("The scenario FAILED: step \"oc scale\": timed out")
        );
    }
}
