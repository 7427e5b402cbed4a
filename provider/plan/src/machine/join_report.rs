//! The Windows join reconciler's report on a Machine (`providerStatus.windowsJoin`), as the
//! Machine protocol reads it: [`crate::windows_join`] decides and writes it; the protocol
//! only reads whether it says the join timed out. Kept here, below both, so that the join's
//! capability depends on the Machine's and never the other way round.

use kube::ResourceExt;

use crate::api::{Machine, NutanixMachineProviderStatus, ProviderCondition};
use crate::machine::node_link::node_ref;

/// providerStatus condition type.
pub const CONDITION: &str = "WindowsJoin";
/// The providerStatus key of the `WindowsJoin` condition, written by the join reconciler only
/// (the Machine controller reads it to fail a Machine whose join timed out).
pub const STATUS_FIELD: &str = "windowsJoin";
/// Machine label with which WMCO (and this reconciler) leave a Machine alone.
pub const IGNORE_LABEL: &str = "windowsmachineconfig.openshift.io/ignore";
/// `errorReason` of a Machine failed for a timed-out join, and the condition's reason for it.
pub const JOIN_TIMED_OUT_ERROR: &str = "JoinTimedOut";

/// Whether the reconciler looks after this Machine: labelled `machine.openshift.io/os-id:
/// Windows` and not `windowsmachineconfig.openshift.io/ignore=true`.
pub fn applies_to(machine: &Machine) -> bool {
    machine.is_windows()
        && machine
            .labels()
            .get(IGNORE_LABEL)
            .is_none_or(|value| value != "true")
}

/// The `WindowsJoin` condition as last written: from [`STATUS_FIELD`], else where an earlier
/// version kept it (`providerStatus.conditions`). An unreadable one counts as none.
pub fn recorded_condition(status: &NutanixMachineProviderStatus) -> Option<ProviderCondition> {
    match status.other.get(STATUS_FIELD) {
        Some(value) => serde_json::from_value(value.clone()).ok(),
        None => status
            .conditions
            .iter()
            .find(|c| c.type_ == CONDITION)
            .cloned(),
    }
}

/// The `errorMessage` a Machine is failed with under `--fail-timed-out-windows-joins`: set when
/// the recorded condition of a Machine this reconciler looks after says `JoinTimedOut` and the
/// Machine still has no Node (one linked since the condition was written ends the timeout).
pub fn timed_out_join(machine: &Machine, status: &NutanixMachineProviderStatus) -> Option<String> {
    if !applies_to(machine) || node_ref(machine).is_some() {
        return None;
    }
    let condition = recorded_condition(status)?;
    (condition.reason == JOIN_TIMED_OUT_ERROR).then(|| {
        format!(
            "Windows join timed out: {}; the Machine is marked Failed (--fail-timed-out-windows-joins) so that it is replaced",
            condition.message
        )
    })
}
