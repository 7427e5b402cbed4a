//! A Machine whose VM exists: the pending follow-up of a clone or deploy applied, then the
//! Machine brought up to date from its VM (providerID, addresses, labels, annotations, the
//! provider conditions, the phase) and its Node's providerID.

use prism_types::v3::Vm;

use crate::api::{PendingTask, TaskOperation, phase};
use crate::machine::addresses::{AddressInput, address_type, machine_addresses, nics_of};
use crate::machine::decision::{Change, Effect, Event, Failure, MetadataChange, Next, Read};
use crate::machine::lifecycle::{INVALID_CONFIGURATION, Step, provider_id};
use crate::machine::node_link::{NodeOwner, ProviderIdAction};
use crate::machine::provision::pending_follow_up;
use crate::machine::snapshot::{FollowUpOutcome, NodeRead};
use crate::machine::status::{conditions, vm_annotations, vm_labels};

use super::FOLLOW_UP_CONFLICT_RETRY;
use super::draft::{Ask, Decided, Draft, MachineFailure, fail, power_of};
use super::vm_ready;

/// Applies the pending follow-up of a clone or deploy; `None` when there is none to apply now.
fn follow_up(d: &mut Draft<'_>, vm: &Vm) -> Result<Option<Next>, Ask> {
    let s = d.s;
    // As recorded so far: a clone that ended in this reconcile has its task forgotten.
    let status = &d.status;
    if status.pending_follow_up.is_none() || status.pending_task.is_some() {
        return Ok(None);
    }
    let uuid = vm.uuid().unwrap_or_default().to_owned();
    let Some(update) = pending_follow_up(status) else {
        d.record(|status| status.pending_follow_up = None);
        return Ok(Some(Next::AwaitChange));
    };
    let Some(outcome) = &s.seen.update.follow_up else {
        return Err(Ask::Send(Change::FollowUp {
            uuid,
            update: Box::new(update),
            vm: Box::new(vm.clone()),
        }));
    };
    Ok(Some(match outcome {
        FollowUpOutcome::Task(task) => {
            let pending = PendingTask {
                id: task.clone(),
                operation: TaskOperation::FollowUp,
                started: Some(d.now()),
                source_vm: None,
            };
            d.record(|status| status.pending_task = Some(pending));
            Next::Requeue(d.poll())
        }
        FollowUpOutcome::Done => {
            d.record(|status| status.pending_follow_up = None);
            Next::AwaitChange
        }
        FollowUpOutcome::Conflict => {
            d.effect(Effect::ForgetRead(uuid));
            Next::Requeue(FOLLOW_UP_CONFLICT_RETRY)
        }
        FollowUpOutcome::Invalid(message) => fail(
            d,
            MachineFailure::Create {
                reason: Some(INVALID_CONFIGURATION),
                message: format!("Prism refused the follow-up update: {message}"),
            },
        ),
        FollowUpOutcome::Impossible(message) => fail(
            d,
            MachineFailure::Create {
                reason: Some(INVALID_CONFIGURATION),
                message: message.clone(),
            },
        ),
        FollowUpOutcome::Retry => Next::Retry(Failure::ActionFailed),
    }))
}

/// Updates the Machine from its VM (providerID, addresses, labels, annotations, provider
/// status) and sets `phase`; nothing changes in Prism except a pending follow-up.
pub(super) fn update_from_vm(d: &mut Draft<'_>, phase: &'static str, vm: &Vm) -> Decided {
    let s = d.s;
    if let Some(next) = follow_up(d, vm)? {
        return Ok(next);
    }
    let wait = Step::UpdateFromVm { phase }
        .requeue_after(&s.settings.intervals)
        .unwrap_or(d.requeue());
    if s.seen.update.node_provider_id_set {
        // The round before this one decided everything else.
        return Ok(Next::Requeue(wait));
    }
    let subnet_order: Vec<String> = vm
        .spec
        .iter()
        .flat_map(|spec| &spec.resources.nic_list)
        .filter_map(|nic| nic.subnet_reference.as_ref().map(|r| r.uuid.clone()))
        .collect();
    let Some(context) = &s.seen.update.address_context else {
        return Err(Ask::Read(Read::AddressContext {
            primary_subnet: subnet_order.first().cloned(),
        }));
    };
    let uuid = vm.uuid().unwrap_or_default().to_ascii_lowercase();
    let nics = nics_of(vm);
    // `--excluded-address-cidrs` overrides the cluster's own networks.
    let excluded = if context.excluded_flag.is_empty() {
        &context.cluster_networks
    } else {
        &context.excluded_flag
    };
    let addresses = machine_addresses(&AddressInput {
        machine_name: &s.machine.name,
        nics: &nics,
        subnet_order: &subnet_order,
        primary_cidr: context.primary_cidr,
        excluded,
        ipv6_primary: context.ipv6_primary,
        previous: &s.machine.addresses,
    });
    let provider_id = provider_id(&uuid);
    let state = vm
        .state()
        .map(|s| s.as_str().to_owned())
        .unwrap_or_default();
    let power = power_of(vm)
        .map(|p| p.as_str().to_owned())
        .unwrap_or_default();
    let ready = vm_ready(vm);
    d.provider_condition(
        conditions::MACHINE_CREATION,
        true,
        conditions::CREATION_SUCCEEDED,
        String::new(),
    );
    d.provider_condition(
        conditions::MACHINE_UPDATE,
        true,
        conditions::UPDATE_SUCCEEDED,
        String::new(),
    );
    d.provider_condition(
        conditions::MACHINE_INSTANCE_READY,
        ready,
        if ready {
            conditions::INSTANCE_READY
        } else {
            conditions::INSTANCE_NOT_READY
        },
        format!("VM state {state}, power {power}"),
    );
    d.metadata = Some(MetadataChange::Merge {
        labels: vm_labels(vm, context.region.as_deref()),
        annotations: vm_annotations(vm),
        provider_id: Some(provider_id.clone()),
    });
    let has_ip = addresses.iter().any(|address| {
        matches!(
            address.type_.as_str(),
            address_type::INTERNAL_IP | address_type::EXTERNAL_IP
        )
    });
    d.effect(if has_ip || phase == phase::RUNNING {
        Effect::AddressesKnown { vm: uuid.clone() }
    } else {
        Effect::AwaitAddresses {
            vm: uuid.clone(),
            seen: nics
                .iter()
                .flat_map(|nic| &nic.ips)
                .map(|ip| ip.ip.clone())
                .collect(),
        }
    });
    d.update.phase = Some(phase);
    d.update.addresses = Some(addresses);
    d.machine_condition(conditions::INSTANCE_EXISTS, true, None, None);
    // The Go provider's `Update` event, published when its update changed the Machine
    // (machine-api-provider-nutanix `pkg/actuators/machine/actuator.go`, `Update`): here only
    // when a Machine already Running changed (its VM changed behind it), not on the way there,
    // where `Create` announced the create and the phases Provisioned and Running written are
    // the steps of it: an event saying what the write it goes with says is one more write to
    // etcd per Machine.
    if phase == phase::RUNNING && s.machine.state.phase == phase::RUNNING {
        d.events.push(Event {
            warning: false,
            reason: "Update",
            note: format!("Updated Machine {} from VM {uuid}", s.machine.name),
            only_if_written: true,
        });
    }
    d.effect(Effect::ResetBackoff);
    node_provider_id(d, phase, provider_id)?;
    Ok(Next::Requeue(wait))
}

/// The Node's providerID, set where it has none and is the Machine's ([`NodeOwner`]): the
/// linked Node of a Running Machine, or, for a Windows Machine nodelink has not linked yet, the
/// Node named as it (so that nodelink can match them by providerID). The Node is read from the
/// watch cache: a Running Machine looks at it on every periodic reconcile.
fn node_provider_id(d: &Draft<'_>, phase: &'static str, provider_id: String) -> Result<(), Ask> {
    let s = d.s;
    let facts = &s.machine;
    let owner = NodeOwner {
        namespace: &facts.identity.namespace,
        name: &facts.name,
        node_ref: facts.state.node.as_deref(),
        addresses: &facts.addresses,
    };
    let name = match &facts.state.node {
        Some(node) if phase == phase::RUNNING => node.clone(),
        None if facts.windows_join => match owner.node_names().into_iter().next() {
            Some(name) => name,
            None => return Ok(()),
        },
        _ => return Ok(()),
    };
    let linked = facts.state.node.is_some();
    let node = match &s.seen.observe.node {
        None => return Err(Ask::Read(Read::Node { name, cached: true })),
        // nodelink linked this Node, so it exists: the watch cache is behind. Read it from the
        // API server rather than leave the Node without its providerID until the next look.
        Some(NodeRead::Absent) if linked && !s.seen.observe.node_fresh => {
            return Err(Ask::Read(Read::Node {
                name,
                cached: false,
            }));
        }
        Some(node) => node.found(),
    };
    match node.map(|node| owner.provider_id_action(node, &provider_id)) {
        Some(ProviderIdAction::Set(provider_id)) => Err(Ask::Send(Change::NodeProviderId {
            node: name,
            provider_id,
        })),
        // Already set, set to another value by another writer (left alone), or not provably
        // the Machine's Node.
        _ => Ok(()),
    }
}
