//! The create tasks this controller keeps in memory rather than on the Machine
//! ([`crate::plan::machine::task_memory`]), by Machine uid.
//!
//! Lost on a restart or a change of leader, which costs no safety: the Machine records what
//! each create was sent for, and the plan finds the VM from that alone.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use kube::ResourceExt;

use crate::api::Machine;
use crate::plan::machine::task_memory::RememberedTask;

/// A task remembered this long is dropped whatever became of its Machine (deleted while its
/// create ran, by a reconcile that never saw it end): far longer than a create, clone or deploy
/// takes; one older is found again from the Machine's record.
const FORGET_AFTER: Duration = Duration::from_secs(2 * 3600);

/// See the module documentation.
#[derive(Debug, Default)]
pub(super) struct RememberedTasks(Mutex<HashMap<String, (RememberedTask, Instant)>>);

impl RememberedTasks {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, (RememberedTask, Instant)>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `machine` as the reconcile plans on it: with its remembered create task, where that
    /// still applies (`None`: nothing remembered applies, and what was is forgotten).
    pub(super) fn planned(&self, machine: &Machine) -> Option<Machine> {
        let uid = machine.uid()?;
        let mut tasks = self.map();
        let (remembered, _) = tasks.get(&uid)?;
        let restored = remembered.restored_into(machine);
        if restored.is_none() {
            tasks.remove(&uid);
        }
        restored
    }

    pub(super) fn remember(&self, machine: &Machine, task: RememberedTask, now: Instant) {
        let Some(uid) = machine.uid() else {
            return;
        };
        let mut tasks = self.map();
        tasks.retain(|_, (_, at)| now.saturating_duration_since(*at) < FORGET_AFTER);
        tasks.insert(uid, (task, now));
    }

    pub(super) fn forget(&self, machine: &Machine) {
        if let Some(uid) = machine.uid() {
            self.map().remove(&uid);
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.map().len()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::NutanixMachineProviderStatus;

    fn machine(uid: &str, provider_status: serde_json::Value) -> Machine {
        serde_json::from_value(json!({
            "apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
            "metadata": {"name": "m", "namespace": "ns", "uid": uid},
            "spec": {},
            "status": {"phase": "Provisioning", "providerStatus": provider_status},
        }))
        .unwrap()
    }

    fn create_task(uuid: &str) -> RememberedTask {
        let status: NutanixMachineProviderStatus = NutanixMachineProviderStatus::from_value(Some(
            &json!({"vmUUID": uuid, "pendingTask": {"id": "task-1", "operation": "Create"}}),
        ))
        .unwrap();
        RememberedTask::of(&status).unwrap()
    }

    #[test]
    fn a_remembered_task_is_planned_on_while_the_machine_records_its_vm() {
        let tasks = RememberedTasks::default();
        let now = Instant::now();
        let waiting = machine("uid-1", json!({"vmUUID": "vm-1"}));
        tasks.remember(&waiting, create_task("vm-1"), now);
        let planned = tasks.planned(&waiting).expect("restored");
        let status = planned.provider_status().unwrap();
        assert_eq!(status.pending_task.unwrap().id, "task-1");
        assert_eq!(status.vm_uuid.as_deref(), Some("vm-1"));

        // Another Machine of the same name (another uid) is not this one.
        assert!(
            tasks
                .planned(&machine("uid-2", json!({"vmUUID": "vm-1"})))
                .is_none()
        );
        // A Machine that records another VM now (a retried create) forgets the task.
        assert!(
            tasks
                .planned(&machine("uid-1", json!({"vmUUID": "vm-2"})))
                .is_none()
        );
        assert_eq!(tasks.len(), 0);

        tasks.remember(&waiting, create_task("vm-1"), now);
        tasks.forget(&waiting);
        assert!(tasks.planned(&waiting).is_none());
    }

    #[test]
    fn old_tasks_are_dropped_when_another_is_remembered() {
        let tasks = RememberedTasks::default();
        let now = Instant::now();
        tasks.remember(
            &machine("uid-1", json!({"vmUUID": "vm-1"})),
            create_task("vm-1"),
            now,
        );
        tasks.remember(
            &machine("uid-2", json!({"vmUUID": "vm-2"})),
            create_task("vm-2"),
            now + FORGET_AFTER,
        );
        assert_eq!(tasks.len(), 1, "the first was remembered too long ago");
    }
}
