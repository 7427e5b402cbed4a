//! The protocol of one Machine as one pure function: [`decide`] takes a [`Snapshot`] (the
//! Machine parsed once, what this reconcile has observed and sent, the clock) and returns a
//! [`Decision`] (the status and metadata changes, at most one action, the events, the metrics,
//! the requeue). The controller's executor (`nutanix_machine_controller::controller::machine`) performs the action,
//! feeds its result back and calls again; it decides nothing itself.
//!
//! The protocol is `snapshot`, `decision` and `decide`; the modules beside them are the
//! building blocks its rules are made of, each testable alone: the machine-api-operator's
//! [`lifecycle`], the create protocol's readings ([`provision`]), the [`status`] and metadata
//! patches, the Machine's [`addresses`] (without the cluster's own [`networks`]), the [`drain`]
//! and which Node is the Machine's ([`node_link`]).

pub mod addresses;
pub mod drain;
pub mod ipam;
pub mod join_report;
pub mod lifecycle;
pub mod networks;
pub mod node_link;
pub mod provision;
pub mod status;
pub mod task_memory;

mod decide;
mod decision;
mod rounds;
mod snapshot;

pub use decide::{
    DEPLOY_CONFIRM_PATIENCE, FOLLOW_UP_CONFLICT_RETRY, PlanVm, Planner, decide, decide_with,
    deletion_sent, detach_request_id, vm_ready,
};
pub use decision::{
    Action, Change, Decision, DetachRequest, Effect, Event, Failure, FailureKind, ListingSlot,
    ListingSource, MAX_ROUNDS, MetadataChange, Next, Read, SecretKey,
};
pub use rounds::{Finish, Rounds, Step, Write};
pub use snapshot::{
    AddressContext, CreateInputs, CreateSeen, DeleteOutcome, DeleteSeen, DrainProgress,
    EnvironmentProblem, EnvironmentSeen, FollowUpOutcome, Listing, ListingRead, MachineFacts,
    NodeRead, ObserveSeen, PAUSED_CONDITION, PasswordSecretOutcome, SecretRead, Seen, SendOutcome,
    Settings, Snapshot, UpdateSeen, VmRead, VolumeGroupDetach,
};

#[cfg(test)]
mod tests;
