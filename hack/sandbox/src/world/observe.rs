//! What the world looks like: snapshots of the Machines, Nodes, VMs and joins, recorded into the
//! history by a background task and on every look, progress lines, and waits on a condition.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prism_mock::Admin;

use super::cluster::Objects;
use super::history::{History, MachineRecord};
use super::snapshot::Snapshot;
use super::{World, WorldError, lock};
use crate::node_agent::NodeAgentHandle;

/// What the snapshots read, shared with the task that records the history.
pub(super) struct Sources {
    pub(super) objects: Objects,
    pub(super) admin: Admin,
    pub(super) agent: Arc<NodeAgentHandle>,
    pub(super) seed_vms: BTreeSet<String>,
    pub(super) started: Instant,
}

impl Sources {
    fn snapshot(&self) -> Snapshot {
        Snapshot {
            elapsed: self.started.elapsed(),
            machine_sets: self.objects.machine_sets(),
            machines: self.objects.machines(),
            nodes: self.objects.nodes(),
            vms: self
                .admin
                .vms()
                .into_iter()
                .filter(|vm| !self.seed_vms.contains(&vm.uuid))
                .collect(),
            joins: self.agent.joins(),
        }
    }
}

pub(super) struct Observed {
    pub(super) history: History,
    pub(super) label: String,
    pub(super) last_line: String,
    pub(super) last_print: Option<Instant>,
}

/// Takes a snapshot and records it, under the lock: snapshots are recorded in the order they are
/// taken (a Machine created between two snapshots recorded out of order would look gone).
pub(super) fn observe(sources: &Sources, observed: &Mutex<Observed>) -> Snapshot {
    let mut observed = lock(observed);
    let snapshot = sources.snapshot();
    observed.history.observe(&snapshot);
    snapshot
}

/// How often the history task looks.
pub(super) const OBSERVE_EVERY: Duration = Duration::from_millis(100);
/// An unchanged progress line is printed again after this long.
const PROGRESS_HEARTBEAT: Duration = Duration::from_secs(10);

impl World {
    /// The world now (also recorded in the history).
    pub fn snapshot(&self) -> Snapshot {
        observe(&self.sources, &self.observed)
    }

    /// Every Machine seen so far.
    pub fn history(&self) -> Vec<MachineRecord> {
        lock(&self.observed).history.machines()
    }

    /// Names the current step in progress lines.
    pub fn set_label(&self, label: impl Into<String>) {
        lock(&self.observed).label = label.into();
    }

    /// Sends a progress line to the sink when it changed (or every 10 s).
    pub fn print_progress(&self, snapshot: &Snapshot) {
        let Some(sink) = &self.options.progress else {
            return;
        };
        let line = {
            let mut observed = lock(&self.observed);
            let line = snapshot.progress_line(&observed.label);
            // The time prefix changes all the time; compare what follows it.
            let body = line
                .split_once(']')
                .map_or(line.as_str(), |(_, b)| b)
                .to_owned();
            let due = observed
                .last_print
                .is_none_or(|at| at.elapsed() >= PROGRESS_HEARTBEAT);
            if body == observed.last_line && !due {
                return;
            }
            observed.last_line = body;
            observed.last_print = Some(Instant::now());
            line
        };
        sink(&line);
    }

    /// Polls (every 100 ms) until `done` holds for a snapshot, printing progress; fails after
    /// `timeout` with the last state, or at once when the controller exits on its own.
    pub async fn wait_until(
        &self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&Snapshot) -> bool,
    ) -> Result<Snapshot, WorldError> {
        self.wait_for(what, timeout, |s| {
            if done(s) { Ok(()) } else { Err(String::new()) }
        })
        .await
    }

    /// Like [`World::wait_until`], with `check` saying what is missing (shown on a timeout).
    pub async fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        check: impl Fn(&Snapshot) -> Result<(), String>,
    ) -> Result<Snapshot, WorldError> {
        let deadline = Instant::now() + timeout;
        loop {
            let snapshot = self.snapshot();
            self.print_progress(&snapshot);
            let missing = match check(&snapshot) {
                Ok(()) => return Ok(snapshot),
                Err(missing) => missing,
            };
            self.check_controller(what).await?;
            if Instant::now() >= deadline {
                let label = lock(&self.observed).label.clone();
                return Err(WorldError::Timeout {
                    what: what.to_owned(),
                    after: timeout,
                    detail: if missing.is_empty() {
                        "condition not met".to_owned()
                    } else {
                        missing
                    },
                    state: snapshot.progress_line(&label),
                });
            }
            tokio::time::sleep(OBSERVE_EVERY).await;
        }
    }
}
