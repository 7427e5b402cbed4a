//! What the controller writes on a Machine, as patches computed from the object it read.
//!
//! Writes are JSON merge patches, never replaces, so fields this controller does not model
//! (`nodeRef` written by nodelink, `lastOperation`, anything newer) survive. Status patches carry
//! `metadata.resourceVersion`: arrays (conditions, addresses) are replaced whole by a merge patch,
//! so a concurrent writer must make the patch fail (409) rather than be overwritten. Metadata
//! patches only touch the keys this controller owns and need no precondition.
//!
//! The machine-api-operator's status rules are kept: `errorReason`/`errorMessage` are cleared in
//! every phase but `Failed`; `lastUpdated` moves only when the status really changed; conditions
//! are merged by type and `lastTransitionTime` moves only when a condition's status changes.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::NodeAddress;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use prism_types::v3::Vm;
use serde_json::{Map, Value, json};

use crate::api::{
    INSTANCE_STATE_ANNOTATION, LifecycleHook, LifecycleHooks, Machine, MachineCondition,
    MachineStatus, NutanixMachineProviderStatus, ProviderCondition, merge_condition, phase,
};

/// Label: the Prism Central's name.
pub const REGION_LABEL: &str = "machine.openshift.io/region";
/// Label: the Prism Element (cluster) the VM runs on.
pub const ZONE_LABEL: &str = "machine.openshift.io/zone";
/// Label: the hypervisor (`AHV`).
pub const INSTANCE_TYPE_LABEL: &str = "machine.openshift.io/instance-type";
/// Annotation: the VM's power state (`ON`, `OFF`).
pub const INSTANCE_POWER_STATE_ANNOTATION: &str = "machine.openshift.io/instance-power-state";
/// `instance-state` of a Failed Machine, as the machine-api-operator writes it.
pub const UNKNOWN_INSTANCE_STATE: &str = "Unknown";

/// providerStatus condition types (upstream's) and their reasons (ours are CamelCase: upstream's
/// contain spaces, which `metav1.Condition` does not allow).
pub mod conditions {
    pub const MACHINE_CREATION: &str = "MachineCreation";
    pub const MACHINE_UPDATE: &str = "MachineUpdate";
    pub const MACHINE_DELETION: &str = "MachineDeletion";
    pub const MACHINE_INSTANCE_READY: &str = "MachineInstanceReady";
    /// `True` while validating the Machine's configuration gave warnings (a choice that works
    /// but is likely not what was meant, such as Secure Boot with guest customization).
    pub const CONFIGURATION_WARNING: &str = "ConfigurationWarning";

    pub const CREATION_SUCCEEDED: &str = "MachineCreationSucceeded";
    pub const CREATION_FAILED: &str = "MachineCreationFailed";
    pub const CREATION_IN_PROGRESS: &str = "MachineCreationInProgress";
    /// Reasons of `MachineCreation=False` when no Prism connection can be made or used.
    pub const PRISM_ENDPOINT_MISSING: &str = "PrismEndpointMissing";
    pub const CREDENTIALS_SECRET_MISSING: &str = "CredentialsSecretMissing";
    pub const CREDENTIALS_SECRET_INVALID: &str = "CredentialsSecretInvalid";
    pub const CREDENTIALS_REFUSED: &str = "CredentialsRefused";
    pub const PRISM_CLIENT_UNUSABLE: &str = "PrismClientUnusable";
    pub const PRISM_CERTIFICATE_UNTRUSTED: &str = "PrismCertificateUntrusted";
    pub const PRISM_UNREACHABLE: &str = "PrismUnreachable";
    /// Reasons of `ConfigurationWarning`.
    pub const PLAN_WARNINGS: &str = "PlanWarnings";
    pub const NO_PLAN_WARNINGS: &str = "NoPlanWarnings";
    pub const UPDATE_SUCCEEDED: &str = "MachineUpdateSucceeded";
    pub const UPDATE_FAILED: &str = "MachineUpdateFailed";
    pub const DELETION_IN_PROGRESS: &str = "MachineDeletionInProgress";
    pub const DELETION_FAILED: &str = "MachineDeletionFailed";
    /// Reasons of `MachineDeletion=False` while the VM's volume groups are detached before its delete, and
    /// when a detach failed (CAPX's reason, `api/v1beta1/conditions.go`).
    pub const DETACHING_VOLUME_GROUPS: &str = "DetachingVolumeGroups";
    pub const VOLUME_GROUP_DETACH_FAILED: &str = "VolumeGroupDetachFailed";
    pub const INSTANCE_READY: &str = "MachineInstanceReady";
    pub const INSTANCE_NOT_READY: &str = "MachineInstanceNotReady";

    /// Machine (`status.conditions`) condition types of the machine-api-operator.
    pub const INSTANCE_EXISTS: &str = "InstanceExists";
    /// Whether a pre-drain / pre-terminate lifecycle hook holds the Machine's deletion.
    pub const DRAINABLE: &str = "Drainable";
    pub const TERMINABLE: &str = "Terminable";
    /// Reason of `Drainable=False` and `Terminable=False` (openshift/api `MachineHookPresent`).
    pub const HOOK_PRESENT: &str = "HookPresent";
    /// Reasons of `InstanceExists` (openshift/api `InstanceMissingReason`,
    /// `InstanceNotCreatedReason`, `ErrorCheckingProviderReason`): `False` once the VM is gone,
    /// `False` before it is made, `Unknown` when Prism cannot be asked.
    pub const INSTANCE_MISSING: &str = "InstanceMissing";
    pub const INSTANCE_NOT_CREATED: &str = "InstanceNotCreated";
    pub const ERROR_CHECKING_PROVIDER: &str = "ErrorCheckingProvider";
    /// Reasons of `Drained`.
    pub const DRAINED: &str = "Drained";
    pub const DRAIN_SKIPPED: &str = "DrainSkipped";
    pub const DRAIN_IN_PROGRESS: &str = "DrainInProgress";
    pub const DRAIN_BLOCKED: &str = "DrainBlocked";
    /// MAO's reason of `Drained=False` (openshift/api `MachineDrainError`), for a drain that
    /// may not start ([`crate::machine::drain::drain_permission`]).
    pub const DRAIN_ERROR: &str = "DrainError";
}

/// A providerStatus condition.
/// The Go provider's reason for the event of a failed reconcile: `FailedDelete` for a Machine
/// being deleted, `FailedUpdate` once it is `Provisioned` or `Running`, else `FailedCreate`.
pub fn failure_event_reason(machine: &Machine) -> &'static str {
    if machine.metadata.deletion_timestamp.is_some() {
        "FailedDelete"
    } else if matches!(
        machine.phase(),
        crate::api::phase::PROVISIONED | crate::api::phase::RUNNING
    ) {
        "FailedUpdate"
    } else {
        "FailedCreate"
    }
}

/// Kubernetes keeps at most this many bytes of an event's note.
pub const EVENT_NOTE_LIMIT: usize = 1024;

/// `text` as an event note: cut to [`EVENT_NOTE_LIMIT`] bytes on a character boundary, with
/// `...` marking the cut.
pub fn event_note(text: &str) -> String {
    if text.len() <= EVENT_NOTE_LIMIT {
        return text.to_owned();
    }
    let mut end = EVENT_NOTE_LIMIT - 3;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

pub fn provider_condition(
    type_: &str,
    ok: bool,
    reason: &str,
    message: impl Into<String>,
    now: &Time,
) -> ProviderCondition {
    ProviderCondition {
        type_: type_.to_owned(),
        status: if ok { "True" } else { "False" }.to_owned(),
        reason: reason.to_owned(),
        message: message.into(),
        last_transition_time: Some(now.clone()),
        ..ProviderCondition::default()
    }
}

/// A Machine condition; a `False` one gets severity `Warning` (the machine-api's convention).
pub fn machine_condition(
    type_: &str,
    ok: bool,
    reason: Option<&str>,
    message: Option<String>,
    now: &Time,
) -> MachineCondition {
    MachineCondition {
        type_: type_.to_owned(),
        status: if ok { "True" } else { "False" }.to_owned(),
        severity: (!ok).then(|| "Warning".to_owned()),
        last_transition_time: Some(now.clone()),
        reason: reason.map(str::to_owned),
        message,
    }
}

/// The `Drainable` and `Terminable` conditions of a Machine with these hooks, as the
/// machine-api-operator writes them whenever it writes a Machine's status
/// (`pkg/controller/machine/controller.go`, `setLifecycleHookConditions`, called by
/// `updateStatus`): `False`, `HookPresent`, severity Warning, naming the hooks, while any hook of
/// the kind is present; else `True` with no reason.
pub fn lifecycle_hook_conditions(hooks: &LifecycleHooks, now: &Time) -> [MachineCondition; 2] {
    let condition = |type_: &str, held: &[LifecycleHook], operation: &str| {
        if held.is_empty() {
            machine_condition(type_, true, None, None, now)
        } else {
            machine_condition(
                type_,
                false,
                Some(conditions::HOOK_PRESENT),
                Some(format!(
                    "{operation} operation currently blocked by: {}",
                    go_hook_list(held)
                )),
                now,
            )
        }
    };
    [
        condition(conditions::DRAINABLE, &hooks.pre_drain, "Drain"),
        condition(conditions::TERMINABLE, &hooks.pre_terminate, "Terminate"),
    ]
}

/// The hooks as Go's `%+v` prints a `[]LifecycleHook` (MAO's message quotes them so):
/// `[{Name:a Owner:b} {Name:c Owner:d}]`.
fn go_hook_list(hooks: &[LifecycleHook]) -> String {
    let items: Vec<String> = hooks
        .iter()
        .map(|hook| format!("{{Name:{} Owner:{}}}", hook.name, hook.owner))
        .collect();
    format!("[{}]", items.join(" "))
}

/// A Machine condition of status `Unknown` (no severity, as MAO's `UnknownCondition`).
pub fn unknown_machine_condition(
    type_: &str,
    reason: &str,
    message: String,
    now: &Time,
) -> MachineCondition {
    MachineCondition {
        type_: type_.to_owned(),
        status: "Unknown".to_owned(),
        severity: None,
        last_transition_time: Some(now.clone()),
        reason: Some(reason.to_owned()),
        message: Some(message),
    }
}

/// What to change in a Machine's status; `None` fields stay as they are.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StatusUpdate {
    pub phase: Option<&'static str>,
    /// `status.authoritativeAPI`.
    pub authoritative_api: Option<String>,
    /// `errorReason` (optional) and `errorMessage`, for phase Failed.
    pub error: Option<(Option<String>, String)>,
    pub addresses: Option<Vec<NodeAddress>>,
    pub provider_status: Option<NutanixMachineProviderStatus>,
    /// Machine conditions, merged by type.
    pub conditions: Vec<MachineCondition>,
}

impl StatusUpdate {
    /// Folds a later decision's change into this one, not yet written: what the later one sets
    /// wins, conditions accumulate (merged by type when written). The executor keeps a
    /// reconcile's pending change with this, and the protocol's simulated world does the same.
    pub fn absorb(&mut self, later: StatusUpdate) {
        self.phase = later.phase.or(self.phase);
        self.authoritative_api = later.authoritative_api.or(self.authoritative_api.take());
        self.error = later.error.or(self.error.take());
        self.addresses = later.addresses.or(self.addresses.take());
        self.provider_status = later.provider_status.or(self.provider_status.take());
        self.conditions.extend(later.conditions);
    }
}

/// The providerStatus as it would be written back (apiVersion and kind set), for comparisons that
/// do not depend on how another writer formatted it.
fn normalized_status(status: &MachineStatus) -> MachineStatus {
    let mut status = status.clone();
    if let Some(raw) = &status.provider_status
        && let Ok(parsed) = NutanixMachineProviderStatus::from_value(Some(raw))
    {
        status.provider_status = Some(parsed.to_value());
    }
    status
}

/// The status merge patch for `update`, or `None` when nothing would change. `now` becomes
/// `lastUpdated` (and the transition time of changed conditions).
pub fn status_patch(machine: &Machine, update: &StatusUpdate, now: &Time) -> Option<Value> {
    let current = normalized_status(&machine.status.clone().unwrap_or_default());
    let mut desired = current.clone();
    if let Some(phase) = update.phase {
        desired.phase = Some(phase.to_owned());
    }
    if let Some(api) = &update.authoritative_api {
        desired.authoritative_api = Some(api.clone());
    }
    if desired.phase.as_deref() == Some(phase::FAILED) {
        if let Some((reason, message)) = &update.error {
            desired.error_reason.clone_from(reason);
            desired.error_message = Some(message.clone());
        }
    } else {
        desired.error_reason = None;
        desired.error_message = None;
    }
    if let Some(addresses) = &update.addresses {
        desired.addresses.clone_from(addresses);
    }
    if let Some(provider_status) = &update.provider_status {
        desired.provider_status = Some(provider_status.to_value());
    }
    for condition in &update.conditions {
        merge_condition(&mut desired.conditions, condition.clone());
    }
    if desired == current {
        return None;
    }
    desired.last_updated = Some(now.clone());
    let before = serde_json::to_value(&current).unwrap_or(Value::Null);
    let after = serde_json::to_value(&desired).unwrap_or(Value::Null);
    let diff = merge_diff(&before, &after)?;
    Some(json!({
        "metadata": {"resourceVersion": machine.metadata.resource_version},
        "status": diff,
    }))
}

/// A merge patch for the Machine's own labels, annotations and providerID: only the keys that
/// differ; `None` when nothing would change.
pub fn metadata_patch(
    machine: &Machine,
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
    provider_id: Option<&str>,
) -> Option<Value> {
    let changed = |wanted: &BTreeMap<String, String>,
                   current: Option<&BTreeMap<String, String>>| {
        wanted
            .iter()
            .filter(|(key, value)| current.and_then(|c| c.get(*key)) != Some(*value))
            .map(|(key, value)| (key.clone(), Value::String(value.clone())))
            .collect::<Map<String, Value>>()
    };
    let labels = changed(labels, machine.metadata.labels.as_ref());
    let annotations = changed(annotations, machine.metadata.annotations.as_ref());
    let provider_id = provider_id.filter(|id| machine.spec.provider_id.as_deref() != Some(*id));
    if labels.is_empty() && annotations.is_empty() && provider_id.is_none() {
        return None;
    }
    let mut patch = json!({});
    if !labels.is_empty() {
        patch["metadata"]["labels"] = Value::Object(labels);
    }
    if !annotations.is_empty() {
        patch["metadata"]["annotations"] = Value::Object(annotations);
    }
    if let Some(id) = provider_id {
        patch["spec"] = json!({"providerID": id});
    }
    Some(patch)
}

/// The labels of a Machine whose VM is `vm`. `region` is the Prism Central's name.
pub fn vm_labels(vm: &Vm, region: Option<&str>) -> BTreeMap<String, String> {
    let status = vm.status.as_ref();
    let zone = status
        .and_then(|s| s.cluster_reference.as_ref())
        .and_then(|r| r.name.clone());
    let hypervisor = status
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.hypervisor_type.clone());
    [
        (REGION_LABEL, region.map(str::to_owned)),
        (ZONE_LABEL, zone),
        (INSTANCE_TYPE_LABEL, hypervisor),
    ]
    .into_iter()
    .filter_map(|(key, value)| {
        value
            .filter(|v| !v.is_empty())
            .map(|value| (key.to_owned(), value))
    })
    .collect()
}

/// The annotations of a Machine whose VM is `vm`: Prism's state and power state.
pub fn vm_annotations(vm: &Vm) -> BTreeMap<String, String> {
    let status = vm.status.as_ref();
    let state = status
        .and_then(|s| s.state.as_ref())
        .map(|s| s.as_str().to_owned());
    let power = status
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.power_state.as_ref())
        .map(|p| p.as_str().to_owned());
    [
        (INSTANCE_STATE_ANNOTATION, state),
        (INSTANCE_POWER_STATE_ANNOTATION, power),
    ]
    .into_iter()
    .filter_map(|(key, value)| value.map(|value| (key.to_owned(), value)))
    .collect()
}

/// The JSON merge patch (RFC 7396) that turns `before` into `after`; `None` when they are equal.
/// Removed keys become `null`; arrays and scalars are replaced whole.
pub fn merge_diff(before: &Value, after: &Value) -> Option<Value> {
    if before == after {
        return None;
    }
    match (before, after) {
        (Value::Object(old), Value::Object(new)) => {
            let mut patch = Map::new();
            for (key, value) in new {
                match old.get(key) {
                    Some(previous) => {
                        if let Some(diff) = merge_diff(previous, value) {
                            patch.insert(key.clone(), diff);
                        }
                    }
                    None => {
                        patch.insert(key.clone(), value.clone());
                    }
                }
            }
            for key in old.keys() {
                if !new.contains_key(key) {
                    patch.insert(key.clone(), Value::Null);
                }
            }
            Some(Value::Object(patch))
        }
        _ => Some(after.clone()),
    }
}

#[cfg(test)]
mod tests;
