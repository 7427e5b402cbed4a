//! The executor's script for one reconcile, as one state machine: ask [`decide`], keep its
//! changes, write the status change that makes a retry safe before anything is sent (record
//! before send), hand over the one action it asks for, and ask again, at most [`MAX_ROUNDS`]
//! times; at the end, the writes in their order (the finalizer's removal last) and the events,
//! some published only once the Machine was written (`only_if_written`).
//!
//! The Machine controller and the plan tests' world both run it, each performing the steps
//! against its own Prism and Kubernetes: a change of the script is a change of both.

use super::decide::{Planner, decide_with};
use super::decision::{Action, Change, Effect, Event, MAX_ROUNDS, MetadataChange, Next, Read};
use super::snapshot::Snapshot;
use crate::machine::status::StatusUpdate;

/// One reconcile's rounds; the executor puts each action's result into [`Rounds::snapshot`].
#[derive(Debug)]
pub struct Rounds {
    pub snapshot: Snapshot,
    /// The status change decided and not written yet.
    status: StatusUpdate,
    /// The metadata change decided (the last one asked for).
    metadata: Option<MetadataChange>,
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
    /// Write this status change to the Machine, then ask for the next step: what makes the
    /// send that follows safe to retry is on the Machine before it is sent.
    Record(Box<StatusUpdate>),
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
            metadata: None,
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
        if self.asked == MAX_ROUNDS {
            let poll = self.snapshot.settings.intervals.poll;
            let mut finish = self.finish(Next::Requeue(poll));
            finish.exhausted = true;
            return Step::Finish(finish);
        }
        self.asked += 1;
        let decision = decide_with(&self.snapshot, planner);
        if let Some(provider_status) = &decision.status.provider_status {
            self.snapshot.recorded = Some(provider_status.clone());
        }
        self.status.absorb(decision.status);
        if decision.metadata.is_some() {
            self.metadata = decision.metadata;
        }
        self.events.extend(decision.events);
        self.effects.extend(decision.effects);
        match decision.action {
            None => Step::Finish(self.finish(decision.next)),
            Some(Action::Read(read)) => Step::Read(read),
            Some(Action::Send(change)) if change.records_first() => {
                self.sending = Some(change);
                Step::Record(Box::new(std::mem::take(&mut self.status)))
            }
            Some(Action::Send(change)) => Step::Send(change),
        }
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
        let status = Write::Status(Box::new(std::mem::take(&mut self.status)));
        let writes = match self.metadata.take() {
            None => vec![status],
            Some(change) if change.written_after_status() => {
                vec![status, Write::Metadata(change)]
            }
            Some(change) => vec![Write::Metadata(change), status],
        };
        Finish {
            writes,
            events: std::mem::take(&mut self.events),
            effects: std::mem::take(&mut self.effects),
            next,
            exhausted: false,
        }
    }
}
