//! The drain of a Machine being deleted, one round per reconcile, with the machine-api-operator's
//! drain events (`pkg/controller/machine/drain_controller.go`, `Reconcile` and `drainNode`; all
//! of type Normal there): `DrainProceeds` for each attempt, then `DrainRequeued` while it is not
//! done, `Deleted` and `DrainSucceeded` when it is; `DrainSkipped` when there is nothing to
//! drain, `DrainBlocked` while a pre-drain hook holds it.

use crate::machine::decision::{Change, Next};
use crate::machine::drain::CONTROL_PLANE_DRAIN_RETRY;
use crate::machine::lifecycle::DRAINED_CONDITION;
use crate::machine::snapshot::DrainProgress;
use crate::machine::status::conditions;

use super::draft::{Ask, Decided, Draft};

/// Event reasons of the drain, as MAO emits them.
pub mod events {
    pub const PROCEEDS: &str = "DrainProceeds";
    pub const REQUEUED: &str = "DrainRequeued";
    /// MAO's reason for the event that names the drained Node (`Node "x" drained`).
    pub const NODE_DRAINED: &str = "Deleted";
    pub const SUCCEEDED: &str = "DrainSucceeded";
    pub const SKIPPED: &str = "DrainSkipped";
    pub const BLOCKED: &str = "DrainBlocked";
}

/// One drain round on `node`, then what it left.
pub(super) fn drain(d: &mut Draft<'_>, node: String) -> Decided {
    let Some(progress) = &d.s.seen.delete.drain else {
        return Err(Ask::Send(Change::Drain { node }));
    };
    // MAO announces every attempt, the one its control-plane check refuses included.
    d.event(false, events::PROCEEDS, "Node drain proceeds");
    match progress {
        DrainProgress::Done => {
            let note = format!("Node {node} drained");
            d.machine_condition(
                DRAINED_CONDITION,
                true,
                Some(conditions::DRAINED),
                Some(note),
            );
            d.event(
                false,
                events::NODE_DRAINED,
                format!("Node {node:?} drained"),
            );
            d.event(false, events::SUCCEEDED, "Node drain succeeded");
            Ok(Next::AwaitChange)
        }
        DrainProgress::InProgress { note } => {
            d.machine_condition(
                DRAINED_CONDITION,
                false,
                Some(conditions::DRAIN_IN_PROGRESS),
                Some(note.clone()),
            );
            requeued(d, note);
            Ok(Next::Requeue(d.poll()))
        }
        DrainProgress::Blocked { note } => {
            d.machine_condition(
                DRAINED_CONDITION,
                false,
                Some(conditions::DRAIN_BLOCKED),
                Some(note.clone()),
            );
            requeued(d, &format!("Node {node}: {note}"));
            Ok(Next::Requeue(d.poll()))
        }
        DrainProgress::NotPermitted { other_node } => {
            let note = format!(
                "drain not permitted: control-plane Node {other_node} is cordoned and may be being drained; one control-plane Node is drained at a time"
            );
            // MAO's condition for a drain that failed, this refusal included.
            d.machine_condition(
                DRAINED_CONDITION,
                false,
                Some(conditions::DRAIN_ERROR),
                Some(format!("could not drain machine: {note}")),
            );
            requeued(d, &note);
            Ok(Next::Requeue(CONTROL_PLANE_DRAIN_RETRY))
        }
    }
}

fn requeued(d: &mut Draft<'_>, note: &str) {
    d.event(
        false,
        events::REQUEUED,
        format!("Node drain requeued: {note}"),
    );
}
