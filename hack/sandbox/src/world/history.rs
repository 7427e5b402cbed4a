//! The life of every Machine seen, from snapshots taken every 100 ms: when it appeared, reached
//! each phase, got its Node linked, joined and disappeared. The closing table and the scenario's
//! final checks read it.

use std::collections::BTreeMap;
use std::time::Duration;

use kube::ResourceExt;
use nutanix_machine_controller::api::Machine;

use super::snapshot::{Snapshot, machine_set_of};

/// One Machine's life, times relative to the world's start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MachineRecord {
    pub name: String,
    pub machine_set: Option<String>,
    pub windows: bool,
    pub first_seen: Duration,
    /// Each phase with the first time it was seen, in the order seen.
    pub phases: Vec<(String, Duration)>,
    /// The VM (providerStatus `vmUUID`, else from the providerID).
    pub vm_uuid: Option<String>,
    /// The first InternalIP reported.
    pub internal_ip: Option<String>,
    /// When `status.nodeRef` was first seen.
    pub linked: Option<Duration>,
    /// When the Machine was first seen fully joined (see [`Snapshot::join_gap`]).
    pub joined: Option<Duration>,
    /// When the Machine was first seen with a deletion timestamp.
    pub deleting: Option<Duration>,
    /// When it was no longer there.
    pub gone: Option<Duration>,
    /// Whether its VM was still in prism-mock when the Machine disappeared (the finalizer must
    /// hold a Machine until its VM is gone).
    pub vm_outlived_machine: bool,
}

impl MachineRecord {
    /// When the Machine first reached the phase.
    pub fn reached(&self, phase: &str) -> Option<Duration> {
        self.phases
            .iter()
            .find(|(p, _)| p == phase)
            .map(|(_, at)| *at)
    }

    /// From first seen to Running.
    pub fn time_to_running(&self) -> Option<Duration> {
        self.reached(nutanix_machine_controller::api::phase::RUNNING)
            .map(|at| at.saturating_sub(self.first_seen))
    }
}

fn vm_uuid_of(machine: &Machine) -> Option<String> {
    machine
        .status
        .as_ref()
        .and_then(|s| s.provider_status.as_ref())
        .and_then(|p| p.get("vmUUID"))
        .and_then(|v| v.as_str())
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
        .or_else(|| {
            machine
                .spec
                .provider_id
                .as_deref()
                .and_then(|id| id.strip_prefix("nutanix://"))
                .map(str::to_owned)
        })
}

/// Every Machine seen, by uid.
#[derive(Clone, Debug, Default)]
pub struct History {
    machines: BTreeMap<String, MachineRecord>,
    /// The time of the latest snapshot recorded.
    latest: Duration,
}

impl History {
    /// Records what the snapshot shows. A snapshot older than one already recorded is ignored:
    /// it would show Machines created since as gone.
    pub fn observe(&mut self, snapshot: &Snapshot) {
        let now = snapshot.elapsed;
        if now < self.latest {
            return;
        }
        self.latest = now;
        for machine in &snapshot.machines {
            let uid = machine.uid().unwrap_or_else(|| machine.name_any());
            let record = self.machines.entry(uid).or_insert_with(|| MachineRecord {
                name: machine.name_any(),
                machine_set: machine_set_of(machine).map(str::to_owned),
                windows: machine.is_windows(),
                first_seen: now,
                ..MachineRecord::default()
            });
            let phase = machine.phase();
            if !phase.is_empty() && record.reached(phase).is_none() {
                record.phases.push((phase.to_owned(), now));
            }
            if record.vm_uuid.is_none() {
                record.vm_uuid = vm_uuid_of(machine);
            }
            let status = machine.status.as_ref();
            if record.internal_ip.is_none() {
                record.internal_ip = status
                    .and_then(|s| s.addresses.iter().find(|a| a.type_ == "InternalIP"))
                    .map(|a| a.address.clone());
            }
            if record.linked.is_none() && status.is_some_and(|s| s.node_ref.is_some()) {
                record.linked = Some(now);
            }
            if record.joined.is_none() && snapshot.join_gap(machine).is_none() {
                record.joined = Some(now);
            }
            if record.deleting.is_none() && machine.metadata.deletion_timestamp.is_some() {
                record.deleting = Some(now);
            }
        }
        for (uid, record) in &mut self.machines {
            if record.gone.is_some() {
                continue;
            }
            if !snapshot
                .machines
                .iter()
                .any(|m| m.uid().as_deref() == Some(uid))
            {
                record.gone = Some(now);
                record.vm_outlived_machine = record
                    .vm_uuid
                    .as_ref()
                    .is_some_and(|uuid| snapshot.vms.iter().any(|vm| &vm.uuid == uuid));
            }
        }
    }

    /// Every Machine seen, in the order first seen.
    pub fn machines(&self) -> Vec<MachineRecord> {
        let mut records: Vec<MachineRecord> = self.machines.values().cloned().collect();
        records.sort_by(|a, b| (a.first_seen, &a.name).cmp(&(b.first_seen, &b.name)));
        records
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn machine(uid: &str, phase: &str, deleting: bool) -> Machine {
        let mut value = json!({
            "apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
            "metadata": {"name": format!("m-{uid}"), "namespace": "ns", "uid": uid,
                "labels": {crate::manifests::MACHINE_SET_LABEL: "set"}},
            "spec": {"providerID": "nutanix://vm-1"},
            "status": {"phase": phase, "providerStatus": {"vmUUID": "vm-1"},
                "addresses": [{"type": "InternalIP", "address": "10.40.1.1"}]},
        });
        if deleting {
            value["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        serde_json::from_value(value).unwrap()
    }

    fn at(seconds: u64, machines: Vec<Machine>) -> Snapshot {
        Snapshot {
            elapsed: Duration::from_secs(seconds),
            machines,
            ..Snapshot::default()
        }
    }

    #[test]
    fn records_first_times_of_each_phase_and_the_disappearance() {
        let mut history = History::default();
        history.observe(&at(1, vec![machine("u1", "", false)]));
        history.observe(&at(2, vec![machine("u1", "Provisioning", false)]));
        history.observe(&at(3, vec![machine("u1", "Provisioning", false)]));
        history.observe(&at(5, vec![machine("u1", "Running", false)]));
        history.observe(&at(8, vec![machine("u1", "Deleting", true)]));
        history.observe(&at(9, vec![]));
        let records = history.machines();
        assert_eq!(records.len(), 1);
        let record = &records[0];
        assert_eq!(record.name, "m-u1");
        assert_eq!(record.machine_set.as_deref(), Some("set"));
        assert_eq!(
            record.phases,
            vec![
                ("Provisioning".to_owned(), Duration::from_secs(2)),
                ("Running".to_owned(), Duration::from_secs(5)),
                ("Deleting".to_owned(), Duration::from_secs(8)),
            ]
        );
        assert_eq!(record.time_to_running(), Some(Duration::from_secs(4)));
        assert_eq!(record.vm_uuid.as_deref(), Some("vm-1"));
        assert_eq!(record.internal_ip.as_deref(), Some("10.40.1.1"));
        assert_eq!(record.deleting, Some(Duration::from_secs(8)));
        assert_eq!(record.gone, Some(Duration::from_secs(9)));
        assert!(!record.vm_outlived_machine);
        // Never joined: no Node in these snapshots.
        assert_eq!(record.joined, None);
    }

    #[test]
    fn an_older_snapshot_recorded_late_does_not_make_a_new_machine_gone() {
        let mut history = History::default();
        history.observe(&at(2, vec![machine("u1", "Provisioning", false)]));
        history.observe(&at(1, vec![]));
        assert_eq!(history.machines()[0].gone, None);
    }
}
