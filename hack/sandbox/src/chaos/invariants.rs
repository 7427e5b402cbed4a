//! What must hold at the end of a chaos run, checked from what the run recorded (pure).

use std::collections::{BTreeMap, BTreeSet};

use nutanix_machine_controller::api::phase;

use super::tracker::VmTracker;
use crate::leadership::WriteOutsideLease;
use crate::world::{MachineRecord, Snapshot};

/// The names of the invariants a table reports.
pub const ONE_VM: &str = "no Machine ever had two VMs";
pub const NO_ORPHAN: &str = "no VM is left without a Machine";
pub const NONE_STUCK: &str = "every Machine reached Running or Failed with a reason";
pub const WRITES_IN_LEASE: &str = "no Prism write by a replica outside its lease";

/// One invariant and whether it held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invariant {
    pub name: &'static str,
    pub held: bool,
    /// What was checked, with counts; or what broke it.
    pub detail: String,
}

/// Everything the checks read.
#[derive(Debug)]
pub struct Evidence<'a> {
    pub namespace: &'a str,
    pub tracker: &'a VmTracker,
    /// Every Machine seen (the world's history).
    pub machines: &'a [MachineRecord],
    /// Machines seen Failed: `errorReason` and `errorMessage`.
    pub failures: &'a BTreeMap<String, (String, String)>,
    /// Machines the run deleted on purpose before they could be Running, with why.
    pub deleted_early: &'a BTreeMap<String, String>,
    /// The world at the end.
    pub last: &'a Snapshot,
    /// Log lines holding a secret (`file line N: which secret`).
    pub secret_hits: &'a [String],
    /// Lines searched per log.
    pub log_lines: &'a [(String, usize)],
    /// The controller exiting without being killed, with its status.
    pub unexpected_exits: &'a [String],
    /// A replica holding the Lease exiting (leadership given up): counted, not a failure.
    pub lease_exits: &'a [String],
    /// With several replicas: the Prism writes sent outside their sender's lease, out of how
    /// many writes, and how many Lease states were read.
    pub lease: Option<LeaseEvidence<'a>>,
}

/// What the lease invariant reads.
#[derive(Debug)]
pub struct LeaseEvidence<'a> {
    pub outside: &'a [WriteOutsideLease],
    pub writes: usize,
    pub states: usize,
}

fn first(items: &[String], max: usize) -> String {
    let mut text = items
        .iter()
        .take(max)
        .cloned()
        .collect::<Vec<_>>()
        .join("; ");
    if items.len() > max {
        text.push_str(&format!("; and {} more", items.len() - max));
    }
    text
}

fn invariant(name: &'static str, problems: Vec<String>, fine: String) -> Invariant {
    Invariant {
        name,
        held: problems.is_empty(),
        detail: if problems.is_empty() {
            fine
        } else {
            first(&problems, 8)
        },
    }
}

/// Checks every invariant.
pub fn check(evidence: &Evidence<'_>) -> Vec<Invariant> {
    vec![
        one_vm_per_machine(evidence),
        no_vm_without_machine(evidence),
        running_or_failed(evidence),
        deletions_finished(evidence),
        no_secret_logged(evidence),
        no_unexpected_exit(evidence),
    ]
    .into_iter()
    .chain(evidence.lease.as_ref().map(writes_inside_leases))
    .collect()
}

fn writes_inside_leases(lease: &LeaseEvidence<'_>) -> Invariant {
    let mut problems: Vec<String> = lease.outside.iter().map(ToString::to_string).collect();
    if lease.states == 0 {
        problems.push("the Lease was never read".to_owned());
    }
    invariant(
        WRITES_IN_LEASE,
        problems,
        format!(
            "each of the {} Prism writes the replicas sent (prism-mock's log, by User-Agent) \
             came inside its sender's lease ({} Lease states read)",
            lease.writes, lease.states
        ),
    )
}

fn one_vm_per_machine(evidence: &Evidence<'_>) -> Invariant {
    let tracker = evidence.tracker;
    let problems: Vec<String> = tracker
        .overlaps()
        .iter()
        .map(|o| {
            format!(
                "{} had VMs {} and {} at once (at {:.1}s)",
                o.machine,
                o.first,
                o.second,
                o.at.as_secs_f64()
            )
        })
        .collect();
    let names: BTreeSet<&str> = tracker.vms().map(|r| r.name.as_str()).collect();
    let again = names
        .iter()
        .filter(|name| tracker.vms_named(name).len() > 1)
        .count();
    invariant(
        ONE_VM,
        problems,
        format!(
            "{} VMs seen over the run in {} polls (at most {} ms apart), for {} names; {} Machines \
             got a second VM only after the first was gone (a failed create task removes its VM)",
            tracker.vms().count(),
            tracker.polls(),
            tracker.longest_gap().as_millis(),
            names.len(),
            again
        ),
    )
}

fn no_vm_without_machine(evidence: &Evidence<'_>) -> Invariant {
    let known: BTreeSet<&str> = evidence.machines.iter().map(|m| m.name.as_str()).collect();
    let mut problems = Vec::new();
    for vm in &evidence.last.vms {
        problems.push(format!(
            "VM {} ({}, {}) is left in Prism",
            vm.uuid, vm.name, vm.state
        ));
    }
    for record in evidence.tracker.vms() {
        if !known.contains(record.name.as_str()) {
            problems.push(format!(
                "VM {} is named {:?}, which no Machine was",
                record.uuid, record.name
            ));
        }
        if let Some(identity) = &record.identity
            && *identity != format!("{}/{}", evidence.namespace, record.name)
        {
            problems.push(format!(
                "VM {} ({}) carries the identity of {identity}",
                record.uuid, record.name
            ));
        }
    }
    invariant(
        NO_ORPHAN,
        problems,
        format!(
            "no VM left at the end; each of the {} VMs seen was named after a Machine, and its \
             identity marker (when set) named that Machine",
            evidence.tracker.vms().count()
        ),
    )
}

fn running_or_failed(evidence: &Evidence<'_>) -> Invariant {
    let mut problems = Vec::new();
    let (mut running, mut failed) = (0, 0);
    for machine in evidence.machines {
        if machine.reached(phase::RUNNING).is_some() {
            running += 1;
        } else if machine.reached(phase::FAILED).is_some() {
            match evidence.failures.get(&machine.name) {
                Some((reason, message)) if !reason.is_empty() || !message.is_empty() => {
                    failed += 1;
                }
                _ => problems.push(format!("{} Failed without a reason", machine.name)),
            }
        } else if !evidence.deleted_early.contains_key(&machine.name) {
            let last = machine
                .phases
                .last()
                .map_or("no phase", |(phase, _)| phase.as_str());
            problems.push(format!(
                "{} never reached Running or Failed (last phase: {last})",
                machine.name
            ));
        }
    }
    invariant(
        NONE_STUCK,
        problems,
        format!(
            "{running} reached Running, {failed} Failed with a reason, {} deleted on purpose \
             before they could",
            evidence.deleted_early.len()
        ),
    )
}

fn deletions_finished(evidence: &Evidence<'_>) -> Invariant {
    let last = evidence.last;
    let mut problems: Vec<String> = last
        .machines
        .iter()
        .map(|m| {
            let name = kube::ResourceExt::name_any(m);
            let finalizers = kube::ResourceExt::finalizers(m).join(",");
            format!("Machine {name} is left (finalizers: {finalizers})")
        })
        .collect();
    problems.extend(
        last.nodes
            .iter()
            .map(|n| format!("Node {} is left", kube::ResourceExt::name_any(n))),
    );
    for machine in evidence.machines {
        if machine.gone.is_none() {
            continue;
        }
        if machine.vm_outlived_machine {
            problems.push(format!(
                "Machine {} disappeared while its VM was still in Prism",
                machine.name
            ));
        }
    }
    let deleted = evidence
        .machines
        .iter()
        .filter(|m| m.gone.is_some())
        .count();
    invariant(
        "every deletion finished",
        problems,
        format!(
            "all {deleted} Machines deleted (finalizer removed, object gone), each after its VM; \
             no Node left"
        ),
    )
}

fn no_secret_logged(evidence: &Evidence<'_>) -> Invariant {
    let searched: Vec<String> = evidence
        .log_lines
        .iter()
        .map(|(log, lines)| format!("{log}: {lines} lines"))
        .collect();
    let mut problems = evidence.secret_hits.to_vec();
    if evidence.log_lines.iter().all(|(_, lines)| *lines == 0) {
        problems.push("no log line to search".to_owned());
    }
    invariant(
        "no secret appeared in any log",
        problems,
        format!(
            "Prism password, user data (markers and whole, clear and base64) and every \
             Administrator password searched in {}",
            searched.join(", ")
        ),
    )
}

fn no_unexpected_exit(evidence: &Evidence<'_>) -> Invariant {
    invariant(
        "the controller never exited unless killed",
        evidence.unexpected_exits.to_vec(),
        if evidence.lease_exits.is_empty() {
            "only the run's kills ended it".to_owned()
        } else {
            format!(
                "only the run's kills ended it, and {} exits of the replica holding the Lease \
                 (leadership given up when it could not renew)",
                evidence.lease_exits.len()
            )
        },
    )
}

/// The lines of `log` holding one of `secrets` (`(label, value)`), as `name line N: label`;
/// the secret itself is never quoted.
pub fn secret_hits(name: &str, log: &str, secrets: &[(String, String)]) -> Vec<String> {
    let mut hits = Vec::new();
    for (number, line) in log.lines().enumerate() {
        for (label, value) in secrets {
            if !value.is_empty() && line.contains(value.as_str()) {
                hits.push(format!("{name} line {}: {label}", number + 1));
            }
        }
    }
    hits
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use prism_mock::{GuestOs, VmSummary};

    use super::*;

    fn vm(uuid: &str, name: &str) -> VmSummary {
        VmSummary {
            uuid: uuid.to_owned(),
            name: name.to_owned(),
            state: "COMPLETE".to_owned(),
            power_state: "ON".to_owned(),
            listed: true,
            spec_version: 0,
            addresses: Vec::new(),
            os: GuestOs::Linux,
            cluster_uuid: String::new(),
        }
    }

    fn record(name: &str, phases: &[&str], gone: bool) -> MachineRecord {
        MachineRecord {
            name: name.to_owned(),
            phases: phases
                .iter()
                .map(|p| ((*p).to_owned(), Duration::from_secs(1)))
                .collect(),
            gone: gone.then_some(Duration::from_secs(9)),
            ..MachineRecord::default()
        }
    }

    struct Case {
        tracker: VmTracker,
        machines: Vec<MachineRecord>,
        failures: BTreeMap<String, (String, String)>,
        deleted_early: BTreeMap<String, String>,
        last: Snapshot,
        hits: Vec<String>,
        lines: Vec<(String, usize)>,
        exits: Vec<String>,
    }

    impl Case {
        fn good() -> Self {
            let mut tracker = VmTracker::new("ns");
            tracker.observe(Duration::ZERO, &[vm("u1", "m-a"), vm("u2", "m-b")], |_| {
                None
            });
            tracker.observe(Duration::from_secs(1), &[], |_| None);
            Self {
                tracker,
                machines: vec![
                    record("m-a", &["Provisioning", "Running", "Deleting"], true),
                    record("m-b", &["Provisioning", "Failed", "Deleting"], true),
                ],
                failures: BTreeMap::from([(
                    "m-b".to_owned(),
                    ("InvalidConfiguration".to_owned(), "bad".to_owned()),
                )]),
                deleted_early: BTreeMap::new(),
                last: Snapshot::default(),
                hits: Vec::new(),
                lines: vec![("controller.log".to_owned(), 100)],
                exits: Vec::new(),
            }
        }

        fn check(&self) -> Vec<Invariant> {
            check(&Evidence {
                namespace: "ns",
                tracker: &self.tracker,
                machines: &self.machines,
                failures: &self.failures,
                deleted_early: &self.deleted_early,
                last: &self.last,
                secret_hits: &self.hits,
                log_lines: &self.lines,
                unexpected_exits: &self.exits,
                lease_exits: &[],
                lease: None,
            })
        }

        fn broken(&self) -> Vec<&'static str> {
            self.check()
                .into_iter()
                .filter(|i| !i.held)
                .map(|i| i.name)
                .collect()
        }
    }

    #[test]
    fn a_clean_run_holds_every_invariant() {
        let case = Case::good();
        let invariants = case.check();
        assert_eq!(invariants.len(), 6);
        assert!(invariants.iter().all(|i| i.held), "{invariants:?}");
        assert!(
            invariants[2]
                .detail
                .starts_with("1 reached Running, 1 Failed")
        );
    }

    #[test]
    fn a_vm_left_or_unnamed_breaks_the_orphan_invariant() {
        let mut case = Case::good();
        case.last.vms = vec![vm("u9", "m-a")];
        assert_eq!(case.broken(), ["no VM is left without a Machine"]);
        let mut case = Case::good();
        case.tracker
            .observe(Duration::from_secs(2), &[vm("u3", "template-name")], |_| {
                None
            });
        case.tracker.observe(Duration::from_secs(3), &[], |_| None);
        assert_eq!(case.broken(), ["no VM is left without a Machine"]);
    }

    #[test]
    fn two_vms_at_once_break_the_one_vm_invariant() {
        let mut case = Case::good();
        case.tracker.observe(
            Duration::from_secs(2),
            &[vm("u3", "m-a"), vm("u4", "m-a")],
            |_| None,
        );
        case.tracker.observe(Duration::from_secs(3), &[], |_| None);
        assert_eq!(case.broken(), ["no Machine ever had two VMs"]);
    }

    #[test]
    fn a_machine_stuck_or_failed_without_reason_breaks_the_phase_invariant() {
        let mut case = Case::good();
        case.failures.clear();
        assert_eq!(
            case.broken(),
            ["every Machine reached Running or Failed with a reason"]
        );
        let mut case = Case::good();
        case.machines
            .push(record("m-c", &["Provisioning", "Deleting"], true));
        assert_eq!(
            case.broken(),
            ["every Machine reached Running or Failed with a reason"]
        );
        case.deleted_early.insert(
            "m-c".to_owned(),
            "deleted right after its deploy".to_owned(),
        );
        assert!(case.broken().is_empty());
    }

    #[test]
    fn a_machine_or_node_left_or_a_vm_outliving_its_machine_breaks_the_deletion_invariant() {
        let mut case = Case::good();
        case.machines[0].vm_outlived_machine = true;
        assert_eq!(case.broken(), ["every deletion finished"]);
        let mut case = Case::good();
        case.last.nodes =
            vec![serde_json::from_value(serde_json::json!({"metadata": {"name": "n"}})).unwrap()];
        assert_eq!(case.broken(), ["every deletion finished"]);
    }

    #[test]
    fn a_prism_write_outside_its_sender_s_lease_breaks_the_lease_invariant() {
        let case = Case::good();
        let check = |outside: &[WriteOutsideLease], states| {
            check(&Evidence {
                namespace: "ns",
                tracker: &case.tracker,
                machines: &case.machines,
                failures: &case.failures,
                deleted_early: &case.deleted_early,
                last: &case.last,
                secret_hits: &case.hits,
                log_lines: &case.lines,
                unexpected_exits: &case.exits,
                lease_exits: &[],
                lease: Some(LeaseEvidence {
                    outside,
                    writes: 12,
                    states,
                }),
            })
        };
        let held = check(&[], 5);
        assert_eq!(held.len(), 7);
        assert!(held.iter().all(|i| i.held), "{held:?}");
        assert!(held[6].detail.starts_with("each of the 12 Prism writes"));
        let outside = WriteOutsideLease {
            identity: Some("nutanix-machine-controller-0_u1".into()),
            method: "DELETE".into(),
            endpoint: "/api/nutanix/v3/vms/{uuid}".into(),
            vm: Some("vm-1".into()),
            received_unix_ms: 20_000,
            last_renewal: None,
        };
        let broken = check(std::slice::from_ref(&outside), 5);
        assert!(!broken[6].held);
        assert!(
            broken[6]
                .detail
                .contains("by nutanix-machine-controller-0_u1"),
            "{}",
            broken[6].detail
        );
        assert!(!check(&[], 0)[6].held, "a Lease never read proves nothing");
    }

    #[test]
    fn secret_hits_name_the_line_and_the_secret_without_quoting_it() {
        let secrets = [("Prism password".to_owned(), "pw-123".to_owned())];
        let hits = secret_hits("controller.log", "ok\nlogin with pw-123\n", &secrets);
        assert_eq!(hits, ["controller.log line 2: Prism password"]);
        let mut case = Case::good();
        case.hits = hits;
        assert_eq!(case.broken(), ["no secret appeared in any log"]);
        let mut case = Case::good();
        case.lines = vec![("controller.log".to_owned(), 0)];
        assert_eq!(case.broken(), ["no secret appeared in any log"]);
        let mut case = Case::good();
        case.exits = vec!["exit status 101".to_owned()];
        assert_eq!(case.broken(), ["the controller never exited unless killed"]);
    }
}
