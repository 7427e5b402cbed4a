//! The Machine's own conditions (`status.conditions`) and the provider's
//! (`providerStatus.conditions`), and the one rule, shared by both, for keeping conditions in a
//! list by type.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A machine-api condition (not `metav1.Condition`: reason and message are optional and there is
/// a severity).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub severity: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A condition of `providerStatus.conditions`: `metav1.Condition` as the Go provider leaves it,
/// read leniently. The Go provider's conditions carry no `lastTransitionTime`
/// (openshift/machine-api-provider-nutanix `pkg/actuators/machine/utils.go`,
/// `setNutanixProviderConditions`, returns the list it was given rather than the one it stamped,
/// and a zero `metav1.Time` is written as null), so every field but the type and the status may
/// be missing; a missing one is a default, and is not written back until this controller sets
/// it. Fields of a newer `metav1.Condition` are kept in `other`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProviderCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub reason: String,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub message: String,
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

/// A string field written as null (Go's zero value of a pointer) reads as empty.
fn null_as_empty<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(deserializer)?.unwrap_or_default())
}

/// A condition that a list holds at most once per type.
pub trait TypedCondition {
    fn condition_type(&self) -> &str;
    fn condition_status(&self) -> &str;
    /// Takes `older`'s `lastTransitionTime`: the status did not change.
    fn keep_transition_of(&mut self, older: &Self);
}

/// Both condition types name these fields alike (`lastTransitionTime` is optional only in the
/// Machine's).
macro_rules! typed_condition {
    ($($condition:ty),+) => {$(
        impl TypedCondition for $condition {
            fn condition_type(&self) -> &str {
                &self.type_
            }
            fn condition_status(&self) -> &str {
                &self.status
            }
            fn keep_transition_of(&mut self, older: &Self) {
                self.last_transition_time.clone_from(&older.last_transition_time);
            }
        }
    )+};
}

typed_condition!(Condition, MachineCondition, ProviderCondition);

/// Puts `condition` in place of the one of its type (other types stay); its
/// `lastTransitionTime` only moves when its status changes.
pub fn merge_condition<C: TypedCondition>(conditions: &mut Vec<C>, mut condition: C) {
    match conditions
        .iter_mut()
        .find(|c| c.condition_type() == condition.condition_type())
    {
        Some(existing) => {
            if existing.condition_status() == condition.condition_status() {
                condition.keep_transition_of(existing);
            }
            *existing = condition;
        }
        None => conditions.push(condition),
    }
}
