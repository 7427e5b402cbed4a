//! What a chaos run did and found, and its text rendering.

use std::fmt::Write as _;
use std::time::Duration;

use serde_json::{Value, json};

use super::faults::FaultLabel;
use super::invariants::Invariant;
use super::kills::KillAim;
use super::kube_faults::FaultRecord;
use crate::bench::sampling::RunSamples;

/// One kill of the controller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KillRecord {
    pub aim: KillAim,
    /// Since the run started.
    pub at: Duration,
    /// Whether the aimed event happened (else the kill fell back to the time it was due).
    pub aimed: bool,
    /// The event, e.g. `VM 1f0e… of win-tmpl-x7k2p appeared (PENDING)`.
    pub event: String,
    /// The target Machine's record at the kill (what the dead controller had written).
    pub machine_state: Option<String>,
    /// What the run did while the controller was down (e.g. deleted the Machine).
    pub while_down: Option<String>,
    pub down_for: Duration,
    /// With several replicas, the one killed and whether it held the Lease then.
    pub replica: Option<(usize, bool)>,
}

/// The whole run.
#[derive(Clone, Debug, Default)]
pub struct ChaosReport {
    pub seed: u64,
    pub machines: usize,
    /// Machines per MachineSet at the top, with what each creates.
    pub sets: Vec<(String, &'static str, usize)>,
    pub kills: Vec<KillRecord>,
    /// Kubernetes' own faults (and Prism Central's outages), in the order struck.
    pub kube_faults: Vec<FaultRecord>,
    /// Replicas of the controller.
    pub replicas: usize,
    /// The control plane (`kube-sim` or `real`).
    pub control_plane: &'static str,
    /// Controller processes started in all, beyond the first start of each replica.
    pub controller_restarts: u32,
    /// Exits of a replica that held the Lease when last seen: it gave leadership up, as it must
    /// when it cannot renew (client-go's leader election ends the process the same way).
    pub lease_exits: Vec<String>,
    /// Control-plane programs that exited on their own and were started again.
    pub plane_restarts: Vec<String>,
    /// Fault rules' firings per kind.
    pub faults: Vec<(FaultLabel, u64)>,
    /// prism-mock's list lag during the run.
    pub list_lag_ms: u64,
    /// prism-mock's answers by status (0: connection dropped).
    pub answers: Vec<(u16, u64)>,
    pub prism_calls: u64,
    /// Each step and how long it took.
    pub steps: Vec<(String, Duration)>,
    pub total: Duration,
    pub machines_seen: usize,
    pub vms_seen: usize,
    /// Machines that ended Failed: name, reason and message.
    pub failed: Vec<(String, String, String)>,
    /// Machines deleted on purpose before Running, with why.
    pub deleted_early: Vec<(String, String)>,
    pub invariants: Vec<Invariant>,
    /// A step that did not finish, or the world not starting.
    pub error: Option<String>,
    /// The run over time, for its pictures: Machines by phase, Prism calls, the controller's
    /// writes and each replica's memory, with each phase, kill and Kubernetes fault marked.
    pub samples: RunSamples,
}

impl ChaosReport {
    /// Every step finished and every invariant held.
    pub fn held(&self) -> bool {
        self.error.is_none()
            && !self.invariants.is_empty()
            && self.invariants.iter().all(|i| i.held)
    }

    /// The report as plain text.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let outcome = if self.held() { "HELD" } else { "BROKEN" };
        let _ = writeln!(
            out,
            "chaos soak: {outcome} (seed {}, {} Machines, {} kills, {} Kubernetes faults, control \
             plane {}, {} replica(s), {:.1}s)",
            self.seed,
            self.machines,
            self.kills.len(),
            self.kube_faults.len(),
            if self.control_plane.is_empty() {
                "kube-sim"
            } else {
                self.control_plane
            },
            self.replicas.max(1),
            self.total.as_secs_f64()
        );
        if let Some(error) = &self.error {
            let _ = writeln!(out, "error: {error}");
        }
        let sets: Vec<String> = self
            .sets
            .iter()
            .map(|(set, kind, n)| format!("{set} {n} ({kind})"))
            .collect();
        let _ = writeln!(out, "MachineSets: {}", sets.join(", "));

        let _ = writeln!(out, "\nInvariants:");
        for invariant in &self.invariants {
            let mark = if invariant.held { "ok  " } else { "FAIL" };
            let _ = writeln!(out, "  {mark} {}: {}", invariant.name, invariant.detail);
        }

        let _ = writeln!(out, "\nKills (SIGKILL):");
        for (i, kill) in self.kills.iter().enumerate() {
            let hit = if kill.aimed {
                ""
            } else {
                " [not aimed: no such event in time]"
            };
            let _ = writeln!(
                out,
                "  {}. +{:.1}s {}{hit}: {}; down {:.1}s",
                i + 1,
                kill.at.as_secs_f64(),
                kill.aim,
                kill.event,
                kill.down_for.as_secs_f64()
            );
            if let Some(state) = &kill.machine_state {
                let _ = writeln!(out, "     recorded on the Machine: {state}");
            }
            if let Some(action) = &kill.while_down {
                let _ = writeln!(out, "     while down: {action}");
            }
            if let Some((replica, leader)) = kill.replica {
                let role = if leader { "the leader" } else { "the standby" };
                let _ = writeln!(out, "     killed replica {replica} ({role})");
            }
        }
        self.render_kube_faults(&mut out);

        let _ = writeln!(
            out,
            "\nFaults injected (rule firings; rules can coincide, the first error answers):"
        );
        for (label, count) in &self.faults {
            let _ = writeln!(out, "  {:>6}  {}", count, label.describe());
        }
        let _ = writeln!(
            out,
            "  and every created VM missing from lists for {} ms after its create task ended",
            self.list_lag_ms
        );
        let answers: Vec<String> = self
            .answers
            .iter()
            .map(|(status, count)| {
                if *status == 0 {
                    format!("dropped {count}")
                } else {
                    format!("{status}: {count}")
                }
            })
            .collect();
        let _ = writeln!(
            out,
            "Prism calls: {} (answers {})",
            self.prism_calls,
            answers.join(", ")
        );

        let _ = writeln!(out, "\nSteps:");
        for (step, took) in &self.steps {
            let _ = writeln!(out, "  {:>7.1}s  {step}", took.as_secs_f64());
        }
        let _ = writeln!(
            out,
            "\nMachines seen: {}; VMs seen: {}",
            self.machines_seen, self.vms_seen
        );
        for (name, reason, message) in &self.failed {
            let _ = writeln!(out, "  Failed: {name}: {reason}: {message}");
        }
        for (name, why) in &self.deleted_early {
            let _ = writeln!(out, "  Deleted before Running: {name}: {why}");
        }
        out
    }
}

impl ChaosReport {
    /// The report as one JSON document (times in seconds since the run started).
    pub fn json(&self) -> Value {
        let seconds = |d: Duration| (d.as_secs_f64() * 10.0).round() / 10.0;
        let replica = |r: Option<(usize, bool)>| {
            r.map(|(replica, leader)| json!({"index": replica, "leader": leader}))
        };
        json!({
            "held": self.held(),
            "seed": self.seed,
            "machines": self.machines,
            "machine_sets": self.sets.iter().map(|(set, kind, n)| {
                json!({"name": set, "kind": kind, "machines": n})
            }).collect::<Vec<_>>(),
            "control_plane": if self.control_plane.is_empty() { "kube-sim" } else { self.control_plane },
            "replicas": self.replicas.max(1),
            "total_s": seconds(self.total),
            "steps": self.steps.iter().map(|(step, took)| {
                json!({"step": step, "took_s": seconds(*took)})
            }).collect::<Vec<_>>(),
            "kills": self.kills.iter().map(|kill| json!({
                "aim": kill.aim.to_string(),
                "at_s": seconds(kill.at),
                "aimed": kill.aimed,
                "event": kill.event,
                "while_down": kill.while_down,
                "down_for_s": seconds(kill.down_for),
                "replica": replica(kill.replica),
            })).collect::<Vec<_>>(),
            "kube_faults": self.kube_faults.iter().map(|fault| json!({
                "kind": fault.kind.short(),
                "moment": fault.moment.to_string(),
                "at_s": seconds(fault.at),
                "aimed": fault.aimed,
                "event": fault.event,
                "replica": replica(fault.replica),
                "lasted_s": seconds(fault.lasted),
                "detail": fault.detail,
                "recovery_s": fault.recovery.map(seconds),
            })).collect::<Vec<_>>(),
            "controller_restarts": self.controller_restarts,
            "lease_exits": self.lease_exits,
            "plane_restarts": self.plane_restarts,
            "prism_faults": self.faults.iter().map(|(label, fired)| {
                json!({"fault": label.describe(), "fired": fired})
            }).collect::<Vec<_>>(),
            "list_lag_ms": self.list_lag_ms,
            "prism_calls": self.prism_calls,
            // Status 0: the connection was dropped without an answer.
            "prism_answers": self.answers.iter().map(|(status, count)| {
                json!({"status": status, "count": count})
            }).collect::<Vec<_>>(),
            "machines_seen": self.machines_seen,
            "vms_seen": self.vms_seen,
            "failed": self.failed.iter().map(|(name, reason, message)| {
                json!({"machine": name, "reason": reason, "message": message})
            }).collect::<Vec<_>>(),
            "deleted_early": self.deleted_early.iter().map(|(name, why)| {
                json!({"machine": name, "why": why})
            }).collect::<Vec<_>>(),
            "invariants": self.invariants.iter().map(|invariant| json!({
                "name": invariant.name,
                "held": invariant.held,
                "detail": invariant.detail,
            })).collect::<Vec<_>>(),
            "error": self.error,
        })
    }

    fn render_kube_faults(&self, out: &mut String) {
        if !self.kube_faults.is_empty() {
            let _ = writeln!(
                out,
                "\nKubernetes faults (recovery: from answering again to the controller's next \
                 Machine write, by the audit log):"
            );
        }
        for (i, fault) in self.kube_faults.iter().enumerate() {
            let hit = if fault.aimed {
                ""
            } else {
                " [not aimed: no such event in time]"
            };
            let replica = fault.replica.map_or(String::new(), |(replica, leader)| {
                let role = if leader { "the leader" } else { "the standby" };
                format!(" on replica {replica} ({role})")
            });
            let recovery = fault.recovery.map_or_else(
                || "no Machine write before the next fault".to_owned(),
                |r| format!("recovery {:.1}s", r.as_secs_f64()),
            );
            let _ = writeln!(
                out,
                "  {}. +{:.1}s {}{replica}, {}{hit}: {}; lasted {:.1}s; {}; {recovery}",
                i + 1,
                fault.at.as_secs_f64(),
                fault.kind,
                fault.moment,
                fault.event,
                fault.lasted.as_secs_f64(),
                fault.detail,
            );
        }
        if self.replicas > 1 || self.controller_restarts > 0 {
            let _ = writeln!(
                out,
                "\nController restarts: {} ({} kills, {} after giving the Lease up, the rest \
                 other exits)",
                self.controller_restarts,
                self.kills.len(),
                self.lease_exits.len()
            );
            for exit in &self.lease_exits {
                let _ = writeln!(out, "  gave the Lease up: {exit}");
            }
        }
        for restart in &self.plane_restarts {
            let _ = writeln!(out, "  control plane: {restart}");
        }
    }

    /// One row of docs/reliability.md's table: seed, faults per kind, duplicates, orphans,
    /// stuck, restarts, recovery times per kind (seconds, in the order struck; "–" when no Machine
    /// needed a write before the next fault).
    pub fn table_row(&self) -> String {
        let mut kinds: Vec<super::kube_faults::KubeFaultKind> =
            self.kube_faults.iter().map(|f| f.kind).collect();
        kinds.sort();
        kinds.dedup();
        let of_kind = |kind| self.kube_faults.iter().filter(move |f| f.kind == kind);
        let faults: Vec<String> = kinds
            .iter()
            .map(|kind| format!("{} {}", kind.short(), of_kind(*kind).count()))
            .collect();
        let recoveries: Vec<String> = kinds
            .iter()
            .map(|kind| {
                let times: Vec<String> = of_kind(*kind)
                    .map(|f| {
                        f.recovery
                            .map_or("–".to_owned(), |r| format!("{:.1}", r.as_secs_f64()))
                    })
                    .collect();
                format!("{} {}", kind.short(), times.join("/"))
            })
            .collect();
        let broken = |name: &str| {
            self.invariants
                .iter()
                .find(|i| i.name == name)
                .map_or("?", |i| if i.held { "0" } else { "FAIL" })
        };
        format!(
            "| {} | {} | {} | {} | {} | {} ({} after giving the Lease up) | {} |",
            self.seed,
            faults.join(", "),
            broken(super::invariants::ONE_VM),
            broken(super::invariants::NO_ORPHAN),
            broken(super::invariants::NONE_STUCK),
            self.controller_restarts,
            self.lease_exits.len(),
            recoveries.join("; "),
        )
    }
}

/// Writes the report's JSON (`chaos.json`) and its pictures
/// ([`crate::bench::sampling::PICTURES`]) into `dir`, returning the files.
pub fn write_plots(
    dir: &std::path::Path,
    report: &ChaosReport,
) -> Result<Vec<std::path::PathBuf>, crate::plots::PlotError> {
    let mut files = crate::bench::sampling::write_pictures(dir, &report.samples.charts())?;
    let path = dir.join("chaos.json");
    std::fs::write(&path, report.json().to_string()).map_err(|source| {
        crate::plots::PlotError::Write {
            path: path.clone(),
            source,
        }
    })?;
    files.push(path);
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_holds_only_with_invariants_all_held_and_no_error() {
        let mut report = ChaosReport::default();
        assert!(!report.held(), "nothing checked is not a pass");
        report.invariants = vec![Invariant {
            name: "x",
            held: true,
            detail: "fine".into(),
        }];
        assert!(report.held());
        report.error = Some("timed out".into());
        assert!(!report.held());
        let text = report.render();
        assert!(text.starts_with("chaos soak: BROKEN"), "{text}");
        assert!(text.contains("error: timed out"));
        assert!(text.contains("ok   x: fine"));
    }

    #[test]
    fn the_json_has_each_kill_and_fault_with_its_moment() {
        use super::super::kube_faults::{FaultMoment, KubeFaultKind};
        let report = ChaosReport {
            seed: 7,
            kills: vec![KillRecord {
                aim: KillAim::MidDelete,
                at: Duration::from_millis(12_340),
                aimed: true,
                event: "VM u1 of w-a went DELETE_PENDING".into(),
                machine_state: None,
                while_down: None,
                down_for: Duration::from_millis(1500),
                replica: Some((1, true)),
            }],
            kube_faults: vec![FaultRecord {
                kind: KubeFaultKind::EtcdDown,
                moment: FaultMoment::At(KillAim::MidDrain),
                at: Duration::from_secs(20),
                aimed: false,
                event: "struck when the wait ran out".into(),
                replica: None,
                lasted: Duration::from_secs(4),
                answering_again: None,
                detail: "down 3.0s".into(),
                recovery: Some(Duration::from_millis(2_050)),
            }],
            answers: vec![(0, 2), (200, 9)],
            ..ChaosReport::default()
        };
        let json = report.json();
        assert_eq!(json["held"], false);
        assert_eq!(json["seed"], 7);
        assert_eq!(json["control_plane"], "kube-sim");
        assert_eq!(json["kills"][0]["at_s"], 12.3);
        assert_eq!(json["kills"][0]["replica"]["index"], 1);
        assert_eq!(json["kills"][0]["replica"]["leader"], true);
        assert_eq!(json["kube_faults"][0]["kind"], "etcd");
        assert_eq!(json["kube_faults"][0]["recovery_s"], 2.1);
        assert_eq!(json["kube_faults"][0]["replica"], Value::Null);
        assert_eq!(json["prism_answers"][0]["status"], 0);
    }

    #[test]
    fn kills_show_their_aim_event_and_what_was_recorded() {
        let report = ChaosReport {
            kills: vec![KillRecord {
                aim: KillAim::AfterDeployThenDelete,
                at: Duration::from_millis(2500),
                aimed: true,
                event: "VM u1 of win-tmpl-a appeared".into(),
                machine_state: Some("deployRequestId recorded, no task".into()),
                while_down: Some("deleted Machine win-tmpl-a".into()),
                down_for: Duration::from_secs(1),
                replica: Some((1, true)),
            }],
            faults: vec![(FaultLabel::Error429, 7)],
            answers: vec![(0, 2), (429, 7)],
            ..ChaosReport::default()
        };
        let text = report.render();
        assert!(text.contains("1. +2.5s right after a template deploy was sent, then its Machine deleted: VM u1 of win-tmpl-a appeared; down 1.0s"), "{text}");
        assert!(text.contains("recorded on the Machine: deployRequestId recorded, no task"));
        assert!(text.contains("while down: deleted Machine win-tmpl-a"));
        assert!(text.contains("     7  429 + Retry-After on any call"));
        assert!(text.contains("answers dropped 2, 429: 7"));
        assert!(text.contains("killed replica 1 (the leader)"), "{text}");
    }

    #[test]
    fn kubernetes_faults_show_their_moment_replica_and_recovery_and_make_a_table_row() {
        use super::super::kills::KillAim;
        use super::super::kube_faults::{FaultMoment, KubeFaultKind};
        let fault = |kind, recovery: Option<u64>| FaultRecord {
            kind,
            moment: FaultMoment::At(KillAim::MidDrain),
            at: Duration::from_secs(30),
            aimed: true,
            event: "Machine m has Drained=False (DrainBlocked)".into(),
            replica: (kind == KubeFaultKind::BlackHole).then_some((0, true)),
            lasted: Duration::from_secs(35),
            answering_again: None,
            detail: "35.0s window".into(),
            recovery: recovery.map(Duration::from_millis),
        };
        let report = ChaosReport {
            seed: 7,
            replicas: 2,
            control_plane: "real",
            kube_faults: vec![
                fault(KubeFaultKind::BlackHole, Some(2500)),
                fault(KubeFaultKind::ApiServerDown, None),
                fault(KubeFaultKind::BlackHole, Some(1000)),
            ],
            controller_restarts: 4,
            lease_exits: vec!["at +40.0s replica 0 exited".into()],
            invariants: vec![Invariant {
                name: super::super::invariants::ONE_VM,
                held: true,
                detail: String::new(),
            }],
            ..ChaosReport::default()
        };
        let text = report.render();
        assert!(
            text.contains("3 Kubernetes faults, control plane real, 2 replica(s)"),
            "{text}"
        );
        assert!(
            text.contains("1. +30.0s path to the API server black-holed on replica 0 (the leader), mid-drain (eviction blocked): Machine m has Drained=False (DrainBlocked); lasted 35.0s; 35.0s window; recovery 2.5s"),
            "{text}"
        );
        assert!(
            text.contains("no Machine write before the next fault"),
            "{text}"
        );
        assert!(
            text.contains("Controller restarts: 4 (0 kills, 1 after giving the Lease up"),
            "{text}"
        );
        assert_eq!(
            report.table_row(),
            "| 7 | apiserver 1, black hole 2 | 0 | ? | ? | 4 (1 after giving the Lease up) \
             | apiserver –; black hole 2.5/1.0 |"
        );
    }
}
