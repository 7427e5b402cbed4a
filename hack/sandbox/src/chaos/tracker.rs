//! Every VM prism-mock held during a chaos run, from polls of its admin handle a few
//! milliseconds apart: when each appeared, its states, its identity marker, when it went, and
//! any moment at which one Machine had two VMs.
//!
//! A VM belongs to the Machine it is named after (the controller names every VM it creates,
//! clones or deploys after its Machine) and, once set, to the Machine its identity marker names.
//! A VM is only ever created by one request and removed by a later one (prism-mock changes
//! nothing between requests), so a VM lives at least as long as its shortest task, which the run
//! compares with the longest gap between two polls.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use nutanix_machine_controller::plan::vm::identity::identity_of;
use prism_mock::VmSummary;

/// One VM's life, times since the run started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmRecord {
    pub uuid: String,
    pub name: String,
    pub first_seen: Duration,
    pub gone: Option<Duration>,
    /// `status.state` changes, first one included.
    pub states: Vec<(String, Duration)>,
    pub spec_version: u64,
    /// The Machine (`namespace/name`) its identity marker names, once read.
    pub identity: Option<String>,
}

/// What changed since the previous poll.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VmEvent {
    Appeared {
        uuid: String,
        name: String,
    },
    State {
        uuid: String,
        name: String,
        state: String,
    },
    SpecVersion {
        uuid: String,
        name: String,
        version: u64,
    },
    Gone {
        uuid: String,
        name: String,
    },
}

/// Two VMs of one Machine present at the same time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Overlap {
    pub machine: String,
    pub first: String,
    pub second: String,
    pub at: Duration,
}

/// The VMs seen so far.
#[derive(Clone, Debug, Default)]
pub struct VmTracker {
    namespace: String,
    vms: BTreeMap<String, VmRecord>,
    overlaps: Vec<Overlap>,
    polls: u64,
    last_poll: Option<Duration>,
    longest_gap: Duration,
}

impl VmTracker {
    /// Machines are in `namespace` (identity markers name `namespace/name`).
    pub fn new(namespace: &str) -> Self {
        Self {
            namespace: namespace.to_owned(),
            ..Self::default()
        }
    }

    /// Records one poll of the VMs (the seed's excluded) at `at`. `description` reads a VM's
    /// description; it is asked for new VMs and for VMs whose spec version moved (the follow-up
    /// update writes the identity marker of a clone or deploy).
    pub fn observe(
        &mut self,
        at: Duration,
        vms: &[VmSummary],
        mut description: impl FnMut(&str) -> Option<String>,
    ) -> Vec<VmEvent> {
        if let Some(last) = self.last_poll {
            self.longest_gap = self.longest_gap.max(at.saturating_sub(last));
        }
        self.last_poll = Some(at);
        self.polls += 1;
        let mut events = Vec::new();
        for vm in vms {
            let record = match self.vms.get_mut(&vm.uuid) {
                Some(record) if record.gone.is_none() => record,
                Some(record) => {
                    // A UUID coming back would be a new VM with a reused UUID: keep the first
                    // life and count it as present again.
                    record.gone = None;
                    record
                }
                None => {
                    events.push(VmEvent::Appeared {
                        uuid: vm.uuid.clone(),
                        name: vm.name.clone(),
                    });
                    self.vms.entry(vm.uuid.clone()).or_insert(VmRecord {
                        uuid: vm.uuid.clone(),
                        name: vm.name.clone(),
                        first_seen: at,
                        gone: None,
                        states: Vec::new(),
                        spec_version: vm.spec_version,
                        identity: None,
                    })
                }
            };
            let new = record.states.is_empty();
            if record
                .states
                .last()
                .is_none_or(|(state, _)| *state != vm.state)
            {
                record.states.push((vm.state.clone(), at));
                if !new {
                    events.push(VmEvent::State {
                        uuid: vm.uuid.clone(),
                        name: vm.name.clone(),
                        state: vm.state.clone(),
                    });
                }
            }
            if vm.spec_version != record.spec_version {
                record.spec_version = vm.spec_version;
                events.push(VmEvent::SpecVersion {
                    uuid: vm.uuid.clone(),
                    name: vm.name.clone(),
                    version: vm.spec_version,
                });
            }
            if (new || record.identity.is_none() || events_touch(&events, &vm.uuid))
                && let Some(text) = description(&vm.uuid)
                && let Some(identity) = identity_of(&text)
            {
                record.identity = Some(format!("{}/{}", identity.namespace, identity.name));
            }
        }
        let present: BTreeSet<&str> = vms.iter().map(|vm| vm.uuid.as_str()).collect();
        for record in self.vms.values_mut() {
            if record.gone.is_none() && !present.contains(record.uuid.as_str()) {
                record.gone = Some(at);
                events.push(VmEvent::Gone {
                    uuid: record.uuid.clone(),
                    name: record.name.clone(),
                });
            }
        }
        self.record_overlaps(at);
        events
    }

    fn record_overlaps(&mut self, at: Duration) {
        let mut by_machine: BTreeMap<String, Vec<&str>> = BTreeMap::new();
        for record in self.vms.values().filter(|r| r.gone.is_none()) {
            for machine in self.machines_of(record) {
                by_machine.entry(machine).or_default().push(&record.uuid);
            }
        }
        let mut found = Vec::new();
        for (machine, uuids) in by_machine {
            for (i, first) in uuids.iter().enumerate() {
                for second in &uuids[i + 1..] {
                    let known = self
                        .overlaps
                        .iter()
                        .any(|o| o.machine == machine && o.first == *first && o.second == *second);
                    if !known {
                        found.push(Overlap {
                            machine: machine.clone(),
                            first: (*first).to_owned(),
                            second: (*second).to_owned(),
                            at,
                        });
                    }
                }
            }
        }
        self.overlaps.extend(found);
    }

    /// The Machines (`namespace/name`) a VM counts for: the one it is named after, and the one
    /// its identity marker names if that differs.
    fn machines_of(&self, record: &VmRecord) -> BTreeSet<String> {
        let mut machines = BTreeSet::from([format!("{}/{}", self.namespace, record.name)]);
        machines.extend(record.identity.clone());
        machines
    }

    /// Every VM seen, in UUID order.
    pub fn vms(&self) -> impl Iterator<Item = &VmRecord> {
        self.vms.values()
    }

    pub fn vm(&self, uuid: &str) -> Option<&VmRecord> {
        self.vms.get(uuid)
    }

    /// Moments at which one Machine had two VMs.
    pub fn overlaps(&self) -> &[Overlap] {
        &self.overlaps
    }

    /// The VMs named after a Machine, in the order they appeared.
    pub fn vms_named(&self, name: &str) -> Vec<&VmRecord> {
        let mut vms: Vec<&VmRecord> = self.vms.values().filter(|r| r.name == name).collect();
        vms.sort_by_key(|r| r.first_seen);
        vms
    }

    pub fn polls(&self) -> u64 {
        self.polls
    }

    /// The longest time between two polls (a VM living less than this could have been missed).
    pub fn longest_gap(&self) -> Duration {
        self.longest_gap
    }
}

fn events_touch(events: &[VmEvent], uuid: &str) -> bool {
    events.iter().any(|event| match event {
        VmEvent::SpecVersion { uuid: u, .. } => u == uuid,
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use prism_mock::GuestOs;

    use super::*;

    fn vm(uuid: &str, name: &str, state: &str, spec_version: u64) -> VmSummary {
        VmSummary {
            uuid: uuid.to_owned(),
            name: name.to_owned(),
            state: state.to_owned(),
            power_state: "OFF".to_owned(),
            listed: false,
            spec_version,
            addresses: Vec::new(),
            os: GuestOs::Windows,
            cluster_uuid: String::new(),
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn no_description(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn records_appearance_states_follow_up_and_disappearance() {
        let mut tracker = VmTracker::new("ns");
        let events = tracker.observe(ms(0), &[vm("u1", "m-a", "PENDING", 0)], no_description);
        assert_eq!(
            events,
            vec![VmEvent::Appeared {
                uuid: "u1".into(),
                name: "m-a".into()
            }]
        );
        let events = tracker.observe(ms(5), &[vm("u1", "m-a", "COMPLETE", 1)], |_| {
            Some("openshift-machine: ns/m-a uid=123".to_owned())
        });
        assert_eq!(
            events,
            vec![
                VmEvent::State {
                    uuid: "u1".into(),
                    name: "m-a".into(),
                    state: "COMPLETE".into()
                },
                VmEvent::SpecVersion {
                    uuid: "u1".into(),
                    name: "m-a".into(),
                    version: 1
                },
            ]
        );
        assert_eq!(
            tracker.vm("u1").unwrap().identity.as_deref(),
            Some("ns/m-a")
        );
        let events = tracker.observe(ms(20), &[], no_description);
        assert_eq!(
            events,
            vec![VmEvent::Gone {
                uuid: "u1".into(),
                name: "m-a".into()
            }]
        );
        let record = tracker.vm("u1").unwrap();
        assert_eq!(record.gone, Some(ms(20)));
        assert_eq!(
            record.states,
            vec![("PENDING".into(), ms(0)), ("COMPLETE".into(), ms(5))]
        );
        assert_eq!(tracker.polls(), 3);
        assert_eq!(tracker.longest_gap(), ms(15));
        assert!(tracker.overlaps().is_empty());
    }

    #[test]
    fn a_second_vm_while_the_first_exists_is_an_overlap_one_after_the_other_is_not() {
        let mut tracker = VmTracker::new("ns");
        tracker.observe(ms(0), &[vm("u1", "m-a", "PENDING", 0)], no_description);
        // The first VM's create task failed and removed it; the retry's VM comes later.
        tracker.observe(ms(5), &[], no_description);
        tracker.observe(ms(10), &[vm("u2", "m-a", "PENDING", 0)], no_description);
        assert!(tracker.overlaps().is_empty());
        assert_eq!(tracker.vms_named("m-a").len(), 2);

        tracker.observe(
            ms(15),
            &[
                vm("u2", "m-a", "COMPLETE", 0),
                vm("u3", "m-a", "PENDING", 0),
            ],
            no_description,
        );
        tracker.observe(
            ms(20),
            &[
                vm("u2", "m-a", "COMPLETE", 0),
                vm("u3", "m-a", "PENDING", 0),
            ],
            no_description,
        );
        assert_eq!(
            tracker.overlaps(),
            [Overlap {
                machine: "ns/m-a".into(),
                first: "u2".into(),
                second: "u3".into(),
                at: ms(15)
            }]
        );
    }

    #[test]
    fn an_identity_marker_naming_another_machine_counts_for_that_machine_too() {
        let mut tracker = VmTracker::new("ns");
        tracker.observe(ms(0), &[vm("u1", "m-a", "COMPLETE", 0)], no_description);
        tracker.observe(
            ms(5),
            &[
                vm("u1", "m-a", "COMPLETE", 0),
                vm("u2", "other", "COMPLETE", 0),
            ],
            |uuid| (uuid == "u2").then(|| "openshift-machine: ns/m-a uid=1".to_owned()),
        );
        assert_eq!(tracker.overlaps().len(), 1);
        assert_eq!(tracker.overlaps()[0].machine, "ns/m-a");
    }
}
