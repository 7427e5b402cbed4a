//! A deletion: the Node drained, the VM deleted once the Node lists no attached volume and the
//! VM's volume groups are detached, the Node deleted, the claims released, the finalizer removed;
//! and a template deploy whose answer was lost confirmed (sent again with its request id) so that
//! its VM is not left behind.

use std::time::Duration;

use prism_types::TaskProgress;

use crate::api::{DeletionSent, NutanixMachineProviderStatus, PendingTask, TaskOperation};
use crate::machine::decision::{
    Change, DetachRequest, Effect, Failure, FailureKind, MetadataChange, Next, Read,
};
use crate::machine::drain::{
    UNREACHABLE_VOLUME_WAIT, VOLUME_RECHECK, VolumeCheck, check_volumes, volume_events,
};
use crate::machine::lifecycle::VmState;
use crate::machine::snapshot::{DeleteOutcome, SendOutcome, VmRead};
use crate::machine::status::conditions;
use crate::vm::SourcePlan;
use crate::vm::request::build_request;

use super::DEPLOY_CONFIRM_PATIENCE;
use super::claims;
use super::create::{Readiness, readiness};
use super::draft::{Ask, Decided, Draft, since};
use super::environment;

/// Whether a Machine's deletion has sent the delete of VM `uuid`: the recorded
/// `deletionSent`, or, as a controller before it wrote it, a `MachineDeletion` condition
/// "in progress" naming the UUID.
pub fn deletion_sent(status: &NutanixMachineProviderStatus, uuid: &str) -> bool {
    if let Some(sent) = &status.deletion_sent {
        return sent.vm_uuid.eq_ignore_ascii_case(uuid);
    }
    status.conditions.iter().any(|condition| {
        condition.type_ == conditions::MACHINE_DELETION
            && condition.reason == conditions::DELETION_IN_PROGRESS
            && condition.message.contains(uuid)
    })
}

/// Deletes the VM once its Node lists no attached volume ([`check_volumes`]) and the VM holds no
/// volume group ([`detach_volume_groups`]); a 404 to its read or its DELETE says it is gone and
/// the deletion finishes at once (the v3 API answers a UUID it does not have with 404, "Invalid
/// UUID provided": prism-go-client `v3/swagger.json`).
///
/// Where CSI's volume groups may still be attached (the Node gone, or given up on unreachable),
/// the VM is read (as Prism has it now) just before its DELETE, for its volume groups: Prism
/// refuses to delete a VM holding one (its delete task fails, "Volume group at scsi.1 must be
/// detached before deleting VM.": nutanix/terraform-provider-nutanix#568), and Nutanix CSI 3.x
/// attaches each PersistentVolume's volume group to the VM itself. Otherwise the VM is deleted
/// without a read, as before: the Node reported every volume detached.
pub(super) fn delete_vm(d: &mut Draft<'_>) -> Decided {
    let s = d.s;
    let Some(uuid) = s.status.vm_uuid.clone() else {
        return Ok(Next::Requeue(d.poll()));
    };
    match &s.seen.delete.deleted {
        None => {}
        Some(DeleteOutcome::Gone) => return finish_deletion(d, s.machine.state.node.clone()),
        Some(DeleteOutcome::Accepted) => {
            // Recorded before the send (`record_deletion`): the same record again, no write.
            let message = record_deletion(d, &uuid);
            // The one event of a deletion that goes well: the Node's drain, when it was drained,
            // is told here rather than in events of its own ([`super::drain`]).
            let state = &s.machine.state;
            let message = match &state.node {
                Some(node) if state.drained && !state.exclude_node_draining => {
                    format!("Node {node} drained; {message}")
                }
                _ => message,
            };
            d.event(false, "Delete", message);
            return Ok(Next::Requeue(d.poll()));
        }
        Some(DeleteOutcome::Failed(message)) => {
            // Not sent after all: the record goes, so that the next look does not wait for it.
            d.record(|status| status.deletion_sent = None);
            d.provider_condition(
                conditions::MACHINE_DELETION,
                false,
                conditions::DELETION_FAILED,
                message.clone(),
            );
            d.failure_metric(FailureKind::Delete, "PrismError");
            // The event is the reconcile wrapper's, with the fix.
            return Ok(Next::Retry(Failure::ActionFailed));
        }
    }
    // Whether CSI's volume groups may still be attached to the VM: not when the Node reported
    // every volume detached (Nutanix CSI 3.x detaches a volume group from the VM when it
    // unpublishes the volume, which `volumesAttached` reports), and not without a Node (CSI
    // attaches to a Node's VM); only when the Node is gone, or was given up on unreachable.
    let mut may_hold_volume_groups = false;
    // The round that reads the detaches' outcome has published the Node's events already.
    let first_round = s.seen.delete.detached.is_none();
    if let Some(node_name) = &s.machine.state.node {
        let Some(node) = &s.seen.observe.node else {
            return Err(Ask::Read(Read::Node {
                name: node_name.clone(),
                cached: false,
            }));
        };
        match check_volumes(node_name, node.found(), s.machine.drained_at, s.now) {
            VolumeCheck::Clear => {}
            VolumeCheck::NodeGone { node } => {
                may_hold_volume_groups = true;
                if first_round {
                    d.event(
                    false,
                    volume_events::NODE_GONE,
                    format!(
                        "Node {node} is gone: nothing reports its attached volumes any more; deleting the VM"
                    ),
                );
                }
            }
            VolumeCheck::Wait {
                node,
                volumes,
                unreachable_until,
            } => {
                let volumes = volumes.join(", ");
                let message = match unreachable_until {
                    None => format!(
                        "Node {node} still lists attached volumes ({volumes}): the VM is deleted once they are detached"
                    ),
                    Some(until) => format!(
                        "Node {node} is unreachable and still lists attached volumes ({volumes}): the VM is deleted once they are detached, or at {until}"
                    ),
                };
                d.provider_condition(
                    conditions::MACHINE_DELETION,
                    false,
                    volume_events::WAITING,
                    message.clone(),
                );
                d.event(false, volume_events::WAITING, message);
                return Ok(Next::Requeue(VOLUME_RECHECK));
            }
            VolumeCheck::GiveUp {
                node,
                volumes,
                unreachable_since,
            } => {
                may_hold_volume_groups = true;
                if first_round {
                    d.event(
                true,
                volume_events::TIMED_OUT,
                format!(
                    "Node {node} has been unreachable since {unreachable_since} and still lists attached volumes ({}): deleting the VM without waiting longer (the attach/detach controller force-detaches the volumes of a Node that is not Ready after {:#})",
                    volumes.join(", "),
                    UNREACHABLE_VOLUME_WAIT
                ),
                );
                }
            }
        }
    }
    environment::require(d)?;
    if !may_hold_volume_groups && s.seen.observe.vm.is_none() {
        record_deletion(d, &uuid);
        return Err(Ask::Send(Change::DeleteVm { uuid }));
    }
    let vm = match &s.seen.observe.vm {
        None => return Err(Ask::Read(Read::Vm { uuid, fresh: true })),
        Some(VmRead::Gone) => return finish_deletion(d, s.machine.state.node.clone()),
        Some(VmRead::Found(vm)) => vm,
    };
    if VmState::of(vm) == VmState::Deleting {
        return Ok(Next::Requeue(d.poll()));
    }
    let attached = vm.attached_volume_groups();
    if !attached.is_empty() {
        return detach_volume_groups(d, uuid, attached);
    }
    record_deletion(d, &uuid);
    Err(Ask::Send(Change::DeleteVm { uuid }))
}

/// Records the DELETE of VM `uuid` (`deletionSent`, `MachineDeletion` in progress), written
/// before it is sent with the rest of the deletion's status (phase `Deleting`, `Drained`) in one
/// write, not in a write of its own after the answer; the message. A controller that stops
/// between the record and the answer waits a poll interval, then looks at the VM as after any
/// DELETE: being deleted, it waits; gone, the deletion finishes; still there (the DELETE never
/// got through), it is deleted then, as a restart between a DELETE and its record always did.
fn record_deletion(d: &mut Draft<'_>, uuid: &str) -> String {
    let message = format!("deleting VM {uuid}");
    let sent = DeletionSent {
        vm_uuid: uuid.to_owned(),
        at: d.now(),
    };
    d.record(|status| status.deletion_sent = Some(sent));
    d.provider_condition(
        conditions::MACHINE_DELETION,
        false,
        conditions::DELETION_IN_PROGRESS,
        message.clone(),
    );
    message
}

/// Detaches the volume groups `attached` to VM `vm_uuid` before its delete, as CAPX does (#460
/// 412d9d47; #473 reads them in the v3 VM's disk list and detaches them with the v4 volumes API,
/// #477 sends every detach and looks again later rather than waiting). The volume groups stay:
/// they are the PersistentVolumes' data, which the CSI driver attaches to the next Node.
///
/// Record before send: the decision's condition names what is detached and is written before the
/// detaches are sent. Each detach's request id is derived from the VM and the volume group
/// ([`detach_request_id`]), so a detach decided again (a lost answer, a restart, a detach still
/// running) is the same request, which Prism answers with the same task. Each task is read once
/// with its send; the VM is read again at the next look and deleted once it lists no volume
/// group. A failed detach is published with Prism's error and retried with backoff; as Prism
/// answers the same request with the same task, it stays failed until the volume group is
/// detached in Prism (the deletion then goes on by itself).
fn detach_volume_groups(d: &mut Draft<'_>, vm_uuid: String, attached: Vec<String>) -> Decided {
    let s = d.s;
    let Some(detached) = &s.seen.delete.detached else {
        let message = format!(
            "detaching volume groups {} from VM {vm_uuid} before deleting it (the volume groups are kept)",
            attached.join(", ")
        );
        d.provider_condition(
            conditions::MACHINE_DELETION,
            false,
            conditions::DETACHING_VOLUME_GROUPS,
            message.clone(),
        );
        // Once per detaching, not again at each look while the detaches run.
        let detaching = s.status.conditions.iter().any(|condition| {
            condition.type_ == conditions::MACHINE_DELETION
                && condition.reason == conditions::DETACHING_VOLUME_GROUPS
        });
        if !detaching {
            d.event(false, volume_events::DETACHING_VOLUME_GROUPS, message);
        }
        let detaches = attached
            .into_iter()
            .map(|volume_group| DetachRequest {
                request_id: detach_request_id(&vm_uuid, &volume_group),
                volume_group,
            })
            .collect();
        return Err(Ask::Send(Change::DetachVolumeGroups { vm_uuid, detaches }));
    };
    let failures: Vec<String> = detached
        .iter()
        .filter_map(|detach| match &detach.task {
            TaskProgress::Failed(failure) => {
                Some(format!("volume group {}: {failure}", detach.volume_group))
            }
            _ => None,
        })
        .collect();
    if !failures.is_empty() {
        let message = format!(
            "Prism failed to detach from VM {vm_uuid} {}; detach them in Prism to let the deletion go on",
            failures.join("; ")
        );
        d.provider_condition(
            conditions::MACHINE_DELETION,
            false,
            conditions::VOLUME_GROUP_DETACH_FAILED,
            message.clone(),
        );
        d.failure_metric(FailureKind::Delete, "VolumeGroupDetachFailed");
        d.event(true, volume_events::DETACH_FAILED, message.clone());
        return Ok(Next::Retry(Failure::VolumeGroupDetachFailed(message)));
    }
    // Ended: look again at once (the VM read anew); still running: after a poll interval.
    let running = detached.iter().any(|detach| !detach.task.is_terminal());
    Ok(Next::Requeue(if running {
        d.poll()
    } else {
        Duration::ZERO
    }))
}

/// The `NTNX-Request-Id` of the detach of `volume_group` from VM `vm`: a version 8 UUID derived
/// from the two (case aside), the same for every decision to detach them. CAPX derived its detach
/// request id the same way (af415bf6) so that "the same task will be returned for the same
/// request as per Nutanix API semantics".
pub fn detach_request_id(vm: &str, volume_group: &str) -> String {
    let key = format!(
        "detach-vm/{}/{}",
        volume_group.to_ascii_lowercase(),
        vm.to_ascii_lowercase()
    );
    // FNV-1a, twice over the key with chained offsets: 128 stable bits (std's hasher is not
    // stable across Rust releases, and a request id must be).
    let fnv = |offset: u64| {
        key.bytes().fold(offset, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    };
    let high = fnv(0xcbf2_9ce4_8422_2325);
    let low = fnv(high);
    let mut bytes = [0_u8; 16];
    bytes[..8].copy_from_slice(&high.to_be_bytes());
    bytes[8..].copy_from_slice(&low.to_be_bytes());
    uuid::Builder::from_custom_bytes(bytes)
        .into_uuid()
        .to_string()
}

pub(super) fn finish_deletion(d: &mut Draft<'_>, node: Option<String>) -> Decided {
    if let Some(node) = node
        && !d.s.seen.delete.node_deleted
    {
        return Err(Ask::Send(Change::DeleteNode { node }));
    }
    claims::release(d)?;
    d.metadata = Some(MetadataChange::RemoveFinalizer);
    d.effect(Effect::ResetBackoff);
    d.effect(Effect::Finished);
    Ok(Next::AwaitChange)
}

/// Deleting a Machine whose template deploy is unconfirmed (its request id recorded, its task
/// not: the answer was lost, or the controller stopped before recording it): sends the deploy
/// again with the same request id. Prism answers a repeat with the first deploy's task, whose
/// VM the deletion then finds and deletes; a deploy that never got through is made now and
/// deleted the same way. Without this, the deletion would find no VM and finish, leaving the
/// deployed VM behind.
///
/// When the deploy cannot be planned any more, the request is forgotten (with a warning naming
/// it) so that the deletion can finish: at once for a providerSpec that can never deploy, after
/// [`DEPLOY_CONFIRM_PATIENCE`] of deletion for a lookup that keeps failing.
pub(super) fn confirm_deploy(d: &mut Draft<'_>) -> Decided {
    let s = d.s;
    let Some(request_id) = d.status.deploy_request_id.clone() else {
        return Ok(Next::Requeue(Duration::ZERO));
    };
    let plan = match readiness(d, false)? {
        Readiness::Ready(plan) if matches!(plan.source, SourcePlan::Template { .. }) => plan,
        Readiness::Ready(_) => {
            let why = "the providerSpec no longer deploys a template";
            return Ok(forget_deploy(d, &request_id, why));
        }
        Readiness::Invalid { message, .. } => {
            return Ok(forget_deploy(d, &request_id, &message));
        }
        Readiness::Unresolved(message) => {
            let deleting_for = s
                .machine
                .deletion_started
                .map_or(Duration::ZERO, |started| since(s.now, started));
            if deleting_for >= DEPLOY_CONFIRM_PATIENCE {
                return Ok(forget_deploy(d, &request_id, &message));
            }
            let message = format!("cannot confirm template deploy request {request_id}: {message}");
            d.event(true, "FailedDelete", message.clone());
            return Ok(Next::Retry(Failure::DeployUnconfirmed(message)));
        }
    };
    match &s.seen.create.sent {
        None => Err(Ask::Send(Change::Create {
            request: Box::new(build_request(&plan, "")),
            deploy_request_id: Some(request_id),
        })),
        Some(SendOutcome::Accepted { task }) => {
            if let Some(task) = task {
                let pending = PendingTask {
                    id: task.clone(),
                    operation: TaskOperation::Deploy,
                    started: Some(d.now()),
                    source_vm: None,
                };
                d.record(|status| status.pending_task = Some(pending));
            }
            Ok(Next::Requeue(d.poll()))
        }
        Some(SendOutcome::Invalid(message) | SendOutcome::SourceMissing(message)) => {
            Ok(forget_deploy(d, &request_id, message))
        }
        Some(_) => Ok(Next::Retry(Failure::ActionFailed)),
    }
}

/// Gives up confirming a template deploy: the deletion goes on as if nothing was deployed, and
/// a warning names the request and the VM name to look for.
pub(super) fn forget_deploy(d: &mut Draft<'_>, request_id: &str, why: &str) -> Next {
    let message = format!(
        "template deploy request {request_id} cannot be confirmed ({why}); if it made a VM named {}, delete that VM in Prism",
        d.s.machine.name
    );
    d.record(|status| {
        status.deploy_request_id = None;
        status.pending_follow_up = None;
    });
    d.event(true, "DeployUnconfirmed", message);
    Next::AwaitChange
}
