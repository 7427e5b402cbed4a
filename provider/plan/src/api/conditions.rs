//! The one rule for keeping conditions in a list by type, shared by the Machine's own
//! conditions (`status.conditions`) and the provider's (`providerStatus.conditions`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use super::MachineCondition;

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

typed_condition!(Condition, MachineCondition);

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
