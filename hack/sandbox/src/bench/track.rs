//! When each Machine of the benchmark's MachineSet reached each stage, from polls of kube-sim's
//! store (in-process, no API calls, cheap at a thousand Machines): created, addresses reported,
//! Node registered, nodeRef set, Running, deleting, gone.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube_sim::Store;
use serde::Serialize;
use serde_json::Value;

use crate::manifests::MACHINE_SET_LABEL;

/// Seconds since the phase started at which a Machine was first seen at each stage.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct MachineTimeline {
    pub name: String,
    pub created: f64,
    /// `status.addresses` has an `InternalIP`.
    pub addressed: Option<f64>,
    /// A Node named as the Machine exists.
    pub node: Option<f64>,
    /// `status.nodeRef` is set.
    pub linked: Option<f64>,
    /// Phase Running.
    pub running: Option<f64>,
    pub deleting: Option<f64>,
    pub gone: Option<f64>,
}

/// The Machines of one MachineSet, as seen over a phase.
#[derive(Debug)]
pub struct Tracker {
    started: Instant,
    machines: BTreeMap<String, MachineTimeline>,
}

fn has_internal_ip(machine: &Value) -> bool {
    machine["status"]["addresses"]
        .as_array()
        .is_some_and(|a| a.iter().any(|a| a["type"] == "InternalIP"))
}

impl Tracker {
    pub fn new(started: Instant) -> Self {
        Self {
            started,
            machines: BTreeMap::new(),
        }
    }

    /// Records what `machines` (the set's Machines now) and `nodes` (Node names now) show at `now`.
    pub fn observe(&mut self, machines: &[Arc<Value>], nodes: &HashSet<String>, now: Instant) {
        let at = now.saturating_duration_since(self.started).as_secs_f64();
        let mut present = HashSet::new();
        for machine in machines {
            let Some(name) = machine["metadata"]["name"].as_str() else {
                continue;
            };
            present.insert(name);
            let timeline =
                self.machines
                    .entry(name.to_owned())
                    .or_insert_with(|| MachineTimeline {
                        name: name.to_owned(),
                        created: at,
                        ..MachineTimeline::default()
                    });
            let first = |slot: &mut Option<f64>, reached: bool| {
                if reached && slot.is_none() {
                    *slot = Some(at);
                }
            };
            first(&mut timeline.addressed, has_internal_ip(machine));
            first(&mut timeline.node, nodes.contains(name));
            first(
                &mut timeline.linked,
                !machine["status"]["nodeRef"]["name"].is_null(),
            );
            first(
                &mut timeline.running,
                machine["status"]["phase"] == "Running",
            );
            first(
                &mut timeline.deleting,
                !machine["metadata"]["deletionTimestamp"].is_null(),
            );
        }
        for timeline in self.machines.values_mut() {
            if timeline.gone.is_none() && !present.contains(timeline.name.as_str()) {
                timeline.gone = Some(at);
            }
        }
    }

    /// Machines seen and not gone.
    pub fn present(&self) -> usize {
        self.machines.values().filter(|m| m.gone.is_none()).count()
    }

    /// Machines present and Running.
    pub fn running(&self) -> usize {
        self.machines
            .values()
            .filter(|m| m.gone.is_none() && m.running.is_some())
            .count()
    }

    /// Machines seen over the phase.
    pub fn seen(&self) -> usize {
        self.machines.len()
    }

    pub fn timelines(&self) -> Vec<MachineTimeline> {
        self.machines.values().cloned().collect()
    }

    /// Counts by stage for a progress line: present, addressed, linked, Running, deleting.
    pub fn counts(&self) -> StageCounts {
        let present: Vec<&MachineTimeline> = self
            .machines
            .values()
            .filter(|m| m.gone.is_none())
            .collect();
        let count = |f: fn(&MachineTimeline) -> bool| present.iter().filter(|m| f(m)).count();
        StageCounts {
            present: present.len(),
            addressed: count(|m| m.addressed.is_some()),
            linked: count(|m| m.linked.is_some()),
            running: count(|m| m.running.is_some()),
            deleting: count(|m| m.deleting.is_some()),
            gone: self.machines.len() - present.len(),
        }
    }

    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}

/// How many Machines are at each stage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StageCounts {
    pub present: usize,
    pub addressed: usize,
    pub linked: usize,
    pub running: usize,
    pub deleting: usize,
    pub gone: usize,
}

/// The Machines labelled as `set`'s in `namespace`, straight from the store.
pub fn set_machines(store: &Store, namespace: &str, set: &str) -> Vec<Arc<Value>> {
    let Some(def) = store.resource("machine.openshift.io", "machines") else {
        return Vec::new();
    };
    let params = kube_sim::store::ListParams {
        namespace: Some(namespace),
        ..kube_sim::store::ListParams::default()
    };
    store
        .list(&def, &params)
        .map(|result| {
            result
                .items
                .into_iter()
                .map(|stored| stored.value)
                .filter(|m| m["metadata"]["labels"][MACHINE_SET_LABEL] == set)
                .collect()
        })
        .unwrap_or_default()
}

/// The names of every Node, straight from the store.
pub fn node_names(store: &Store) -> HashSet<String> {
    let Some(def) = store.resource("", "nodes") else {
        return HashSet::new();
    };
    store
        .list(&def, &kube_sim::store::ListParams::default())
        .map(|result| {
            result
                .items
                .iter()
                .filter_map(|stored| stored.value["metadata"]["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn each_stage_is_recorded_when_first_seen_and_gone_when_absent() {
        let start = Instant::now();
        let mut tracker = Tracker::new(start);
        let bare = Arc::new(json!({"metadata": {"name": "m-1"}}));
        tracker.observe(&[bare], &HashSet::new(), start + Duration::from_secs(1));
        let addressed = Arc::new(json!({"metadata": {"name": "m-1"}, "status": {
            "phase": "Provisioned",
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}}));
        let nodes: HashSet<String> = ["m-1".to_owned()].into();
        tracker.observe(&[addressed], &nodes, start + Duration::from_secs(2));
        let running = Arc::new(json!({"metadata": {"name": "m-1"}, "status": {
            "phase": "Running", "nodeRef": {"name": "m-1"},
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}}));
        tracker.observe(&[running], &nodes, start + Duration::from_secs(3));
        assert_eq!((tracker.present(), tracker.running()), (1, 1));
        tracker.observe(&[], &nodes, start + Duration::from_secs(4));
        let timeline = &tracker.timelines()[0];
        assert_eq!(timeline.created, 1.0);
        assert_eq!(timeline.addressed, Some(2.0));
        assert_eq!(timeline.node, Some(2.0));
        assert_eq!(timeline.linked, Some(3.0));
        assert_eq!(timeline.running, Some(3.0));
        assert_eq!(timeline.gone, Some(4.0));
        assert_eq!(
            (tracker.present(), tracker.running(), tracker.seen()),
            (0, 0, 1)
        );
        assert_eq!(tracker.counts().gone, 1);
    }
}
