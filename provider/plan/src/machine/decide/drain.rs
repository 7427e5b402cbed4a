//! The drain of a Machine being deleted, one round per reconcile, with the machine-api-operator's
//! drain events (`pkg/controller/machine/drain_controller.go`, `Reconcile` and `drainNode`; all
//! of type Normal there) where they say something the Machine's status does not: `DrainRequeued`
//! while it is not done (with why), `DrainSkipped` when there is nothing to drain, `DrainBlocked`
//! while a pre-drain hook holds it. MAO also announces every attempt (`DrainProceeds`) and the
//! end twice (`Deleted`, `Node "x" drained`, and `DrainSucceeded`); each event is a write to
//! etcd, so those three are left out: the end is the `Drained` condition, written with the
//! delete's record, and the `Delete` event that follows names the drained Node.

use crate::machine::decision::{Change, Next};
use crate::machine::drain::CONTROL_PLANE_DRAIN_RETRY;
use crate::machine::lifecycle::DRAINED_CONDITION;
use crate::machine::snapshot::DrainProgress;
use crate::machine::status::conditions;

use super::draft::{Ask, Decided, Draft};

/// Event reasons of the drain, as MAO emits them.
pub mod events {
    pub const REQUEUED: &str = "DrainRequeued";
    pub const SKIPPED: &str = "DrainSkipped";
    pub const BLOCKED: &str = "DrainBlocked";
}

/// One drain round on `node`, then what it left.
pub(super) fn drain(d: &mut Draft<'_>, node: String) -> Decided {
    let Some(progress) = &d.s.seen.delete.drain else {
        return Err(Ask::Send(Change::Drain { node }));
    };
    match progress {
        DrainProgress::Done => {
            let note = format!("Node {node} drained");
            d.machine_condition(
                DRAINED_CONDITION,
                true,
                Some(conditions::DRAINED),
                Some(note),
            );
            // The VM's delete follows: the condition is written with its record.
            d.plan_on = true;
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
