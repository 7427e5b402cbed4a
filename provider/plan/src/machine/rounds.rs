//! The executor's script for one reconcile, as one state machine: ask [`decide`], keep its
//! changes, write the changes that make a retry safe before anything is sent (record before
//! send), hand over the one action it asks for, and ask again, at most [`MAX_ROUNDS`] times; at
//! the end, the writes in their order (the finalizer's removal last) and the events, some
//! published only once the Machine was written (`only_if_written`).
//!
//! A decision that only changes the Machine, waits for that change ([`Next::AwaitChange`]) and
//! says the next step follows from it alone ([`super::Decision::plan_on`]) does not end the
//! reconcile: the script plans on at once on the Machine as those changes will leave it (a
//! fresh snapshot of it, as the reconcile their write would trigger takes), so that the changes
//! of one transition (phase `Provisioning` and the record of the create; a task's end and the
//! VM it made; phase `Deleting`, the drain and the record of the delete) go to the API server
//! as one write, not one per step. Every write is etcd load on the cluster's control plane.
//! A create's task is not written at all: it is handed to the executor to keep in memory
//! ([`super::task_memory`]).
//!
//! The Machine controller and the plan tests' world both run it, each performing the steps
//! against its own Prism and Kubernetes: a change of the script is a change of both.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::Value;

use super::decide::{Planner, decide_with};
use super::decision::{Action, Change, Effect, Event, MAX_ROUNDS, MetadataChange, Next, Read};
use super::snapshot::Snapshot;
use crate::api::{MACHINE_FINALIZER, Machine};
use crate::machine::status::{StatusUpdate, metadata_patch, status_patch};
use crate::machine::task_memory::{RememberedTask, take_create_task};

/// One reconcile's rounds; the executor puts each action's result into [`Rounds::snapshot`].
#[derive(Debug)]
pub struct Rounds {
    pub snapshot: Snapshot,
    /// The status change decided and not written yet.
    status: StatusUpdate,
    /// The metadata changes decided and not written yet, in the order decided (each once).
    metadata: Vec<MetadataChange>,
    events: Vec<Event>,
    effects: Vec<Effect>,
    /// A send whose record is being written.
    sending: Option<Change>,
    asked: usize,
}

/// What the executor does next.
#[derive(Debug)]
pub enum Step {
    /// Perform the read; its result goes into the snapshot.
    Read(Read),
    /// Perform these writes of the Machine in order (metadata, then status), then ask for the
    /// next step: what makes the send that follows safe to retry (the finalizer, the reserved
    /// UUID, the request id) is on the Machine before it is sent.
    Record(Vec<Write>),
    /// Send the change; its outcome goes into the snapshot.
    Send(Change),
    /// The reconcile ends.
    Finish(Finish),
}

/// How a reconcile ends: the writes in order, then the events and the effects.
#[derive(Debug)]
pub struct Finish {
    pub writes: Vec<Write>,
    events: Vec<Event>,
    pub effects: Vec<Effect>,
    pub next: Next,
    /// No decision came in [`MAX_ROUNDS`] asks: looked at again later.
    pub exhausted: bool,
}

/// A write of the Machine.
#[derive(Debug)]
pub enum Write {
    Status(Box<StatusUpdate>),
    Metadata(MetadataChange),
}

impl Step {
    /// What the step is, for logs: no request body (user data and passwords stay out).
    pub fn name(&self) -> &'static str {
        match self {
            Self::Read(read) => read.name(),
            Self::Record(_) => "record before the send",
            Self::Send(change) => change.name(),
            Self::Finish(_) => "finish",
        }
    }
}

impl Finish {
    /// The events to publish, `wrote`: whether this reconcile wrote the Machine (an event
    /// published only with the write that carries what it announces).
    pub fn events(&self, wrote: bool) -> impl Iterator<Item = &Event> {
        self.events
            .iter()
            .filter(move |event| wrote || !event.only_if_written)
    }
}

impl Rounds {
    pub fn new(snapshot: Snapshot) -> Self {
        Self {
            snapshot,
            status: StatusUpdate::default(),
            metadata: Vec::new(),
            events: Vec::new(),
            effects: Vec::new(),
            sending: None,
            asked: 0,
        }
    }

    /// The next step, the VM's plan made by `planner` ([`super::PlanVm`] but in tests).
    pub fn next(&mut self, planner: &dyn Planner) -> Step {
        if let Some(change) = self.sending.take() {
            return Step::Send(change);
        }
        loop {
            if self.asked == MAX_ROUNDS {
                let poll = self.snapshot.settings.intervals.poll;
                let mut finish = self.finish(Next::Requeue(poll));
                finish.exhausted = true;
                return Step::Finish(finish);
            }
            self.asked += 1;
            let decision = decide_with(&self.snapshot, planner);
            // A change of the create's task alone is written nowhere, so no write triggers the
            // reconcile that would go on from it: the script goes on from it at once.
            let task_changed = decision
                .status
                .provider_status
                .as_ref()
                .is_some_and(|status| {
                    RememberedTask::of(status) != RememberedTask::of(self.snapshot.current_status())
                });
            if let Some(provider_status) = &decision.status.provider_status {
                self.snapshot.recorded = Some(provider_status.clone());
            }
            let continues = (decision.plan_on || task_changed)
                && decision.action.is_none()
                && decision.next == Next::AwaitChange
                && decision.metadata != Some(MetadataChange::RemoveFinalizer);
            let projected = continues
                .then(|| projection(&self.snapshot.machine.object, &decision, self.snapshot.now))
                .flatten();
            self.status.absorb(decision.status);
            if let Some(change) = decision.metadata
                && !self.metadata.contains(&change)
            {
                self.metadata.push(change);
            }
            for event in decision.events {
                // A decision planned on again can repeat an event of the one before it.
                if !self.events.contains(&event) {
                    self.events.push(event);
                }
            }
            self.effects.extend(decision.effects);
            match decision.action {
                None => match projected {
                    Some(machine) => self.plan_on(machine),
                    None => return Step::Finish(self.finish(decision.next)),
                },
                Some(Action::Read(read)) => return Step::Read(read),
                Some(Action::Send(change)) if change.records_first() => {
                    self.sending = Some(change);
                    return Step::Record(self.pending_writes());
                }
                Some(Action::Send(change)) => return Step::Send(change),
            }
        }
    }

    /// Plans on at once on `machine`, the Machine as the changes decided will leave it: a
    /// fresh snapshot of it, as the reconcile their write would trigger takes.
    fn plan_on(&mut self, machine: Machine) {
        let status = match machine.provider_status() {
            Ok(status) => status,
            // Not reached: the projection parsed it already.
            Err(_) => return,
        };
        let spec = self.snapshot.machine.spec.clone();
        let settings = self.snapshot.settings.clone();
        self.snapshot = Snapshot::of(&machine, spec, status, self.snapshot.now, settings);
    }

    /// The writes decided so far, taken to be written now (a record before a send): the
    /// metadata changes first, then the status change.
    fn pending_writes(&mut self) -> Vec<Write> {
        let mut writes: Vec<Write> = std::mem::take(&mut self.metadata)
            .into_iter()
            .map(Write::Metadata)
            .collect();
        writes.push(Write::Status(Box::new(self.take_status())));
        writes
    }

    /// The status change decided so far, to be written now, but for a create's task, which
    /// the executor keeps in memory instead ([`super::task_memory`]).
    fn take_status(&mut self) -> StatusUpdate {
        let mut status = std::mem::take(&mut self.status);
        if let Some(provider_status) = status.provider_status.as_mut() {
            self.effects.push(match take_create_task(provider_status) {
                Some(task) => Effect::RememberTask(task),
                None => Effect::ForgetTask,
            });
        }
        status
    }

    /// The end of a reconcile a failed call interrupted: what was decided before it still
    /// holds, and is written.
    pub fn interrupted(&mut self) -> Finish {
        self.finish(Next::AwaitChange)
    }

    /// The writes in order: the finalizer's removal after the status (once it is gone the API
    /// server may delete the Machine, and a status write after that would be lost), any other
    /// metadata change before it, so that the status it goes with is never seen without it.
    fn finish(&mut self, next: Next) -> Finish {
        let (after, before): (Vec<MetadataChange>, Vec<MetadataChange>) =
            std::mem::take(&mut self.metadata)
                .into_iter()
                .partition(MetadataChange::written_after_status);
        let mut writes: Vec<Write> = before.into_iter().map(Write::Metadata).collect();
        writes.push(Write::Status(Box::new(self.take_status())));
        writes.extend(after.into_iter().map(Write::Metadata));
        Finish {
            writes,
            events: std::mem::take(&mut self.events),
            effects: std::mem::take(&mut self.effects),
            next,
            exhausted: false,
        }
    }
}

/// `machine` as the API server would keep it once `decision`'s changes are written (each as the
/// executor writes it, a merge patch), or `None` when they change nothing: then there is nothing
/// to plan on, and the reconcile ends.
fn projection(
    machine: &Machine,
    decision: &super::Decision,
    now: k8s_openapi::jiff::Timestamp,
) -> Option<Machine> {
    let mut patches = Vec::new();
    match &decision.metadata {
        Some(MetadataChange::AddFinalizer) => {
            let mut finalizers = machine.metadata.finalizers.clone().unwrap_or_default();
            if !finalizers.iter().any(|f| f == MACHINE_FINALIZER) {
                finalizers.push(MACHINE_FINALIZER.to_owned());
                patches.push(serde_json::json!({"metadata": {"finalizers": finalizers}}));
            }
        }
        Some(MetadataChange::Merge {
            labels,
            annotations,
            provider_id,
        }) => patches.extend(metadata_patch(
            machine,
            labels,
            annotations,
            provider_id.as_deref(),
        )),
        Some(MetadataChange::RemoveFinalizer) | None => {}
    }
    patches.extend(status_patch(machine, &decision.status, &Time(now)));
    if patches.is_empty() {
        return None;
    }
    let mut value = serde_json::to_value(machine).ok()?;
    for patch in &patches {
        apply_merge_patch(&mut value, patch);
    }
    let projected: Machine = serde_json::from_value(value).ok()?;
    projected.provider_status().ok()?;
    Some(projected)
}

/// A JSON merge patch (RFC 7396) applied as the API server applies it: `null` removes a key,
/// an object merges into an object, anything else replaces. The plan tests' world applies its
/// writes with it too.
pub(super) fn apply_merge_patch(target: &mut Value, patch: &Value) {
    match (target.as_object_mut(), patch.as_object()) {
        (Some(target), Some(patch)) => {
            for (key, value) in patch {
                if value.is_null() {
                    target.remove(key);
                } else {
                    apply_merge_patch(target.entry(key.clone()).or_insert(Value::Null), value);
                }
            }
        }
        _ => *target = patch.clone(),
    }
}
