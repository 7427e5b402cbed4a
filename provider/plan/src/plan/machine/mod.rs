//! The protocol of one Machine as one pure function: [`decide`] takes a [`Snapshot`] (the
//! Machine parsed once, what this reconcile has observed and sent, the clock) and returns a
//! [`Decision`] (the status and metadata changes, at most one action, the events, the metrics,
//! the requeue). The controller's executor (`nutanix_machine_controller::controller::machine`) performs the action,
//! feeds its result back and calls again; it decides nothing itself.

mod decide;
mod decision;
mod snapshot;

pub use decide::{
    DEPLOY_CONFIRM_PATIENCE, FOLLOW_UP_CONFLICT_RETRY, decide, deletion_sent, vm_ready,
};
pub use decision::{
    Action, Change, Decision, Effect, Event, Failure, FailureKind, ListingSlot, ListingSource,
    MetadataChange, Next, Read,
};
pub use snapshot::{
    AddressContext, DeleteOutcome, DrainProgress, EnvironmentSeen, FollowUpOutcome, Listing,
    MachineFacts, PAUSED_CONDITION, Prepared, Seen, SendOutcome, Settings, Snapshot,
};

#[cfg(test)]
mod tests;
