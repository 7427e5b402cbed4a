//! The providerStatus shapes the Go provider (openshift/machine-api-provider-nutanix) writes,
//! identical on its main, release-4.21 and release-4.20 branches (read at main 246b53b):
//! `pkg/actuators/machine/actuator.go` sets two conditions after each `Create`, `Update` and
//! `Delete` (the operation's, from `conditionSuccess` / `conditionFailed`, and
//! `MachineInstanceReady` from `conditionInstanceReady`); `utils.go`'s
//! `setNutanixProviderConditions` returns the two it was given, never stamped, so they carry
//! no `lastTransitionTime` (Go's zero `metav1.Time`, written as null; the API server stored
//! none on the real control plane); `machine_scope.go` `setProviderStatus` sets `vmUUID` only
//! with a VM; `RawExtensionFromNutanixMachineProviderStatus` writes no apiVersion or kind.
//! Fixtures for the tests of the takeover: this crate's and the end-to-end tests' (which write
//! Machines as the Go provider leaves them on the real control plane).

use serde_json::{Value, json};

/// A Go `metav1.Condition` as written: `reason` and `message` always (no `omitempty`),
/// `lastTransitionTime` null when `stamped_null`, else absent as the API server stored it.
fn condition(type_: &str, status: &str, reason: &str, message: &str, stamped_null: bool) -> Value {
    let mut condition =
        json!({"type": type_, "status": status, "reason": reason, "message": message});
    if stamped_null {
        condition["lastTransitionTime"] = Value::Null;
    }
    condition
}

/// After a successful `Update` of a Running Machine (the shape measured on 6 December).
pub fn running(vm_uuid: &str, stamped_null: bool) -> Value {
    json!({
        "conditions": [
            condition("MachineUpdate", "True", "MachineUpdateSucceeded", "MachineUpdate succeeded", stamped_null),
            condition("MachineInstanceReady", "True", "Machine instance is ready", "Machine instance is ready", stamped_null),
        ],
        "vmUUID": vm_uuid,
    })
}

/// After a successful `Create`.
pub fn created(vm_uuid: &str) -> Value {
    json!({
        "conditions": [
            condition("MachineCreation", "True", "MachineCreationSucceeded", "MachineCreation succeeded", false),
            condition("MachineInstanceReady", "True", "Machine instance is ready", "Machine instance is ready", false),
        ],
        "vmUUID": vm_uuid,
    })
}

/// After a failed `Create` whose VM was never returned (no `vmUUID`).
pub fn create_failed() -> Value {
    json!({
        "conditions": [
            condition("MachineCreation", "False", "MachineCreationFailed", "failed to create VM: task failed", false),
            condition("MachineInstanceReady", "False", "Machine instance is not ready", "Machine instance is not ready", false),
        ],
    })
}

/// After a failed `Update` (the VM not found by its UUID, for example).
pub fn update_failed(vm_uuid: &str) -> Value {
    json!({
        "conditions": [
            condition("MachineUpdate", "False", "MachineUpdateFailed", "error finding VM by UUID", true),
            condition("MachineInstanceReady", "Unknown", "Unknown machine instance ready or not", "Unknown machine instance ready or not", true),
        ],
        "vmUUID": vm_uuid,
    })
}

/// Every shape, by name.
pub fn all(vm_uuid: &str) -> Vec<(&'static str, Value, Option<String>)> {
    let uuid = Some(vm_uuid.to_owned());
    vec![
        ("running", running(vm_uuid, false), uuid.clone()),
        ("running, null times", running(vm_uuid, true), uuid.clone()),
        ("created", created(vm_uuid), uuid.clone()),
        ("create failed", create_failed(), None),
        ("update failed", update_failed(vm_uuid), uuid),
        ("empty", json!({}), None),
    ]
}
