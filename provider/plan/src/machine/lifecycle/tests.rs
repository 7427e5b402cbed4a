use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::json;

use super::*;
use crate::vm::errors::FieldError;

/// A Machine that has its finalizer, label and providerSpec, and nothing else yet.
fn fresh() -> MachineState {
    MachineState {
        has_finalizer: true,
        has_cluster_label: true,
        has_provider_spec: true,
        ..MachineState::default()
    }
}

fn running() -> MachineState {
    MachineState {
        phase: phase::RUNNING.into(),
        provider_id: Some("nutanix://u".into()),
        has_addresses: true,
        node: Some("node-1".into()),
        ..fresh()
    }
}

fn deleting() -> MachineState {
    MachineState {
        deleting: true,
        phase: phase::DELETING.into(),
        drained: true,
        ..running()
    }
}

const OK: VmObservation = VmObservation::Present(VmState::Ok);

#[test]
fn steps_in_the_machine_api_operator_order() {
    type Row = (&'static str, MachineState, VmObservation, bool, Step);
    let rows: Vec<Row> = vec![
        // 1. Migration pause (only with the gate on).
        (
            "ClusterAPI owns it",
            MachineState {
                authoritative_api: Some("ClusterAPI".into()),
                ..running()
            },
            OK,
            true,
            Step::Paused,
        ),
        (
            "migrating",
            MachineState {
                authoritative_api: Some("Migrating".into()),
                ..running()
            },
            OK,
            true,
            Step::Paused,
        ),
        (
            "gate off: ClusterAPI ignored",
            MachineState {
                authoritative_api: Some("ClusterAPI".into()),
                ..running()
            },
            OK,
            false,
            Step::UpdateFromVm {
                phase: phase::RUNNING,
            },
        ),
        (
            "MachineAPI owns it",
            MachineState {
                authoritative_api: Some("MachineAPI".into()),
                ..running()
            },
            OK,
            true,
            Step::UpdateFromVm {
                phase: phase::RUNNING,
            },
        ),
        (
            "status empty: the spec's written there first, as MAO",
            MachineState {
                spec_authoritative_api: Some("ClusterAPI".into()),
                ..deleting()
            },
            OK,
            true,
            Step::SetAuthoritativeApi("ClusterAPI".into()),
        ),
        (
            "the status decides, not a spec changed since",
            MachineState {
                authoritative_api: Some("MachineAPI".into()),
                spec_authoritative_api: Some("ClusterAPI".into()),
                ..running()
            },
            OK,
            true,
            Step::UpdateFromVm {
                phase: phase::RUNNING,
            },
        ),
        (
            "gate off: the status is left alone",
            MachineState {
                spec_authoritative_api: Some("MachineAPI".into()),
                ..running()
            },
            OK,
            false,
            Step::UpdateFromVm {
                phase: phase::RUNNING,
            },
        ),
        // 2. What every Machine needs, checked before deletion too.
        (
            "no cluster label",
            MachineState {
                has_cluster_label: false,
                ..fresh()
            },
            VmObservation::NotLookedUp,
            false,
            Step::RejectInvalidMachine {
                reason: "missing label machine.openshift.io/cluster-api-cluster".into(),
            },
        ),
        (
            "no providerSpec",
            MachineState {
                has_provider_spec: false,
                deleting: true,
                ..fresh()
            },
            VmObservation::NotLookedUp,
            false,
            Step::RejectInvalidMachine {
                reason: "missing spec.providerSpec.value".into(),
            },
        ),
        // 3. Finalizer first.
        (
            "no finalizer",
            MachineState {
                has_finalizer: false,
                ..fresh()
            },
            VmObservation::NotLookedUp,
            false,
            Step::AddFinalizer,
        ),
        // 4. Deletion.
        (
            "deleted without our finalizer",
            MachineState {
                has_finalizer: false,
                ..deleting()
            },
            OK,
            false,
            Step::Stop,
        ),
        (
            "deleting: phase first",
            MachineState {
                phase: phase::RUNNING.into(),
                ..deleting()
            },
            OK,
            false,
            Step::SetPhase(phase::DELETING),
        ),
        (
            "deleting a Failed Machine still deletes",
            MachineState {
                phase: phase::FAILED.into(),
                ..deleting()
            },
            OK,
            false,
            Step::SetPhase(phase::DELETING),
        ),
        (
            "pre-drain hook holds",
            MachineState {
                has_pre_drain_hooks: true,
                drained: false,
                ..deleting()
            },
            OK,
            false,
            Step::WaitForPreDrainHooks,
        ),
        (
            "drain the node",
            MachineState {
                drained: false,
                ..deleting()
            },
            OK,
            false,
            Step::Drain {
                node: "node-1".into(),
            },
        ),
        (
            "no node: nothing to drain",
            MachineState {
                drained: false,
                node: None,
                ..deleting()
            },
            OK,
            false,
            Step::MarkDrained,
        ),
        (
            "draining excluded",
            MachineState {
                drained: false,
                exclude_node_draining: true,
                ..deleting()
            },
            OK,
            false,
            Step::MarkDrained,
        ),
        (
            "pre-terminate hook holds after drain",
            MachineState {
                has_pre_terminate_hooks: true,
                ..deleting()
            },
            OK,
            false,
            Step::WaitForPreTerminateHooks,
        ),
        (
            "look the VM up",
            deleting(),
            VmObservation::NotLookedUp,
            false,
            Step::LookUpVm,
        ),
        ("delete the VM", deleting(), OK, false, Step::DeleteVm),
        (
            "delete a VM in ERROR too",
            deleting(),
            VmObservation::Present(VmState::Error("boom".into())),
            false,
            Step::DeleteVm,
        ),
        (
            "wait while Prism deletes",
            deleting(),
            VmObservation::Present(VmState::Deleting),
            false,
            Step::WaitForVmDeletion,
        ),
        (
            "a create still running is waited for",
            deleting(),
            VmObservation::Creating,
            false,
            Step::WaitForCreate,
        ),
        (
            "an unconfirmed template deploy is sent again to find its VM",
            deleting(),
            VmObservation::DeployUnconfirmed,
            false,
            Step::ConfirmDeploy,
        ),
        (
            "VM gone: node and finalizer",
            deleting(),
            VmObservation::Missing,
            false,
            Step::FinishDeletion {
                node: Some("node-1".into()),
            },
        ),
        (
            "VM gone, never had a node",
            MachineState {
                node: None,
                ..deleting()
            },
            VmObservation::Missing,
            false,
            Step::FinishDeletion { node: None },
        ),
        // 5. Failed is final.
        (
            "failed",
            MachineState {
                phase: phase::FAILED.into(),
                ..running()
            },
            OK,
            false,
            Step::Stop,
        ),
        // 6. The VM exists.
        (
            "look the VM up",
            running(),
            VmObservation::NotLookedUp,
            false,
            Step::LookUpVm,
        ),
        (
            "running",
            running(),
            OK,
            false,
            Step::UpdateFromVm {
                phase: phase::RUNNING,
            },
        ),
        (
            "VM up, no node yet",
            MachineState {
                node: None,
                ..running()
            },
            OK,
            false,
            Step::UpdateFromVm {
                phase: phase::PROVISIONED,
            },
        ),
        (
            "first sight of a created VM",
            MachineState {
                phase: phase::PROVISIONING.into(),
                ..fresh()
            },
            OK,
            false,
            Step::UpdateFromVm {
                phase: phase::PROVISIONED,
            },
        ),
        (
            "VM in ERROR",
            running(),
            VmObservation::Present(VmState::Error("no host".into())),
            false,
            Step::ReportVmError {
                message: "no host".into(),
            },
        ),
        // 7. The VM vanished.
        (
            "provisioned VM gone",
            running(),
            VmObservation::Missing,
            false,
            Step::InstanceMissing,
        ),
        (
            "gone with addresses only",
            MachineState {
                provider_id: None,
                node: None,
                phase: phase::PROVISIONED.into(),
                ..running()
            },
            VmObservation::Missing,
            false,
            Step::InstanceMissing,
        ),
        // 8. Provisioning before create.
        (
            "no phase",
            fresh(),
            VmObservation::Missing,
            false,
            Step::SetPhase(phase::PROVISIONING),
        ),
        // 9. Create, once.
        (
            "create",
            MachineState {
                phase: phase::PROVISIONING.into(),
                ..fresh()
            },
            VmObservation::Missing,
            false,
            Step::Create,
        ),
        (
            "an unconfirmed template deploy is sent again by the create",
            MachineState {
                phase: phase::PROVISIONING.into(),
                ..fresh()
            },
            VmObservation::DeployUnconfirmed,
            false,
            Step::Create,
        ),
        (
            "create running",
            MachineState {
                phase: phase::PROVISIONING.into(),
                ..fresh()
            },
            VmObservation::Creating,
            false,
            Step::WaitForCreate,
        ),
    ];
    for (name, state, vm, gate, expected) in rows {
        assert_eq!(next_step(&state, &vm, gate), expected, "{name}");
    }
}

#[test]
fn waits_requeue_by_what_they_wait_for_and_writes_do_not() {
    let intervals = Intervals {
        poll: Duration::from_secs(1),
        requeue: Duration::from_secs(2),
        running: Duration::from_secs(3),
    };
    assert_eq!(
        Intervals::default().requeue,
        REQUEUE_AFTER,
        "MAO's 30 s by default"
    );
    let after = |step: Step| step.requeue_after(&intervals).map(|d| d.as_secs());
    assert_eq!(after(Step::WaitForVmDeletion), Some(1));
    assert_eq!(after(Step::WaitForCreate), Some(1));
    assert_eq!(
        after(Step::UpdateFromVm {
            phase: phase::PROVISIONED
        }),
        Some(2)
    );
    assert_eq!(
        after(Step::UpdateFromVm {
            phase: phase::RUNNING
        }),
        Some(3),
        "a Running Machine is checked against the inventory"
    );
    assert_eq!(after(Step::AddFinalizer), None);
    assert_eq!(after(Step::Stop), None);
}

#[test]
fn validation_errors_fail_or_retry_by_class() {
    let error = |class| FieldError {
        path: "providerSpec.image".into(),
        class,
        message: "m".into(),
    };
    let invalid = ValidationErrors(vec![
        error(ErrorClass::Unresolved),
        error(ErrorClass::Invalid),
    ]);
    assert_eq!(
        after_validation(&invalid),
        Step::Fail {
            reason: Some("InvalidConfiguration"),
            message: "providerSpec.image: m (unresolved); providerSpec.image: m (invalid)".into()
        }
    );
    let unresolved = ValidationErrors(vec![error(ErrorClass::Unresolved)]);
    assert_eq!(
        after_validation(&unresolved),
        Step::RetryCreate {
            message: "providerSpec.image: m (unresolved)".into()
        }
    );
}

#[test]
fn state_is_read_from_the_machine() {
    let machine: Machine = serde_json::from_value(json!({
        "apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
        "metadata": {"name": "m", "namespace": "ns", "deletionTimestamp": "2026-01-01T00:00:00Z",
                     "finalizers": ["other", "machine.machine.openshift.io"],
                     "labels": {"machine.openshift.io/cluster-api-cluster": "ocp"},
                     "annotations": {"machine.openshift.io/exclude-node-draining": ""}},
        "spec": {"providerSpec": {"value": {}}, "providerID": "nutanix://u", "authoritativeAPI": "MachineAPI",
                 "lifecycleHooks": {"preTerminate": [{"name": "h", "owner": "o"}]}},
        "status": {"phase": "Deleting", "nodeRef": {"name": "n"}, "authoritativeAPI": "Migrating",
                   "addresses": [{"type": "InternalIP", "address": "10.0.0.5"}],
                   "conditions": [{"type": "Drained", "status": "True"}]}
    }))
    .unwrap();
    assert_eq!(
        MachineState::of(&machine),
        MachineState {
            deleting: true,
            has_finalizer: true,
            phase: "Deleting".into(),
            has_cluster_label: true,
            has_provider_spec: true,
            authoritative_api: Some("Migrating".into()),
            spec_authoritative_api: Some("MachineAPI".into()),
            provider_id: Some("nutanix://u".into()),
            has_addresses: true,
            node: Some("n".into()),
            has_pre_drain_hooks: false,
            has_pre_terminate_hooks: true,
            drained: true,
            exclude_node_draining: true,
        }
    );
}

#[test]
fn vm_state_from_prism() {
    let vm = |status: serde_json::Value| -> prism_types::v3::Vm {
        serde_json::from_value(json!({"metadata": {"kind": "vm", "uuid": "u"}, "status": status}))
            .unwrap()
    };
    assert_eq!(VmState::of(&vm(json!({"state": "COMPLETE"}))), VmState::Ok);
    assert_eq!(VmState::of(&vm(json!({"state": "PENDING"}))), VmState::Ok);
    assert_eq!(
        VmState::of(&vm(json!({"state": "DELETE_PENDING"}))),
        VmState::Deleting
    );
    assert_eq!(
        VmState::of(&vm(
            json!({"state": "ERROR", "message_list": [{"message": "no host has room"}, {"reason": "INTERNAL_ERROR"}]})
        )),
        VmState::Error("no host has room; INTERNAL_ERROR".into())
    );
    assert_eq!(
        VmState::of(&vm(json!({"state": "ERROR"}))),
        VmState::Error("VM is in state ERROR".into())
    );
}

#[test]
fn provider_id_is_lower_case() {
    assert_eq!(
        provider_id("6E8A0C2F-4D6B-4F8A-0C2E-3A5B7D9F1C04"),
        "nutanix://6e8a0c2f-4d6b-4f8a-0c2e-3a5b7d9f1c04"
    );
}
