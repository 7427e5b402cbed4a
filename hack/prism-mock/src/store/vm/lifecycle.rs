//! What happens to a VM after a request: its task's end, power on and off, the addresses its guest reports, and
//! changes made by other clients.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::seed::GuestOs;
use crate::store::net::Ipv4Net;
use crate::store::record::{AddressPhase, NicRuntime};
use crate::store::tasks::{FailOutcome, FailPlan};
use crate::store::{Event, Store};

impl Store {
    pub(crate) fn finish_vm_create(&mut self, uuid: &str, fail: Option<&FailPlan>, at: Instant) {
        let listed_from = (!self.list_lag.is_zero()).then(|| at + self.list_lag);
        let outcome = fail.map(|plan| plan.outcome);
        if outcome == Some(FailOutcome::RemoveVm) {
            self.remove_vm(uuid);
            return;
        }
        let wants_on = match self.vms.get_mut(uuid) {
            Some(vm) => {
                vm.listed = true;
                vm.listed_from = listed_from;
                match (outcome, fail) {
                    (Some(FailOutcome::LeaveVmInError), Some(plan)) => {
                        vm.error = Some(plan.error.clone());
                        false
                    }
                    (Some(FailOutcome::LeaveVmPoweredOff), _) => {
                        // The power-on failed: the spec says OFF, as the VM is.
                        if let Some(res) =
                            vm.spec.get_mut("resources").and_then(Value::as_object_mut)
                        {
                            res.insert("power_state".to_owned(), json!("OFF"));
                        }
                        false
                    }
                    _ => {
                        vm.spec
                            .pointer("/resources/power_state")
                            .and_then(Value::as_str)
                            == Some("ON")
                    }
                }
            }
            None => return,
        };
        if wants_on {
            self.power_on(uuid, at);
        }
    }

    pub(crate) fn finish_vm_update(
        &mut self,
        uuid: &str,
        previous_spec: Value,
        previous_nics: Vec<NicRuntime>,
        failed: bool,
        at: Instant,
    ) {
        let Some(vm) = self.vms.get_mut(uuid) else {
            return;
        };
        vm.pending_updates = vm.pending_updates.saturating_sub(1);
        let current_nics = vm.nics.clone();
        let (dropped, restore) = if failed {
            let keep: HashSet<&str> = previous_nics.iter().map(|n| n.uuid.as_str()).collect();
            let dropped: Vec<NicRuntime> = current_nics
                .iter()
                .filter(|n| !keep.contains(n.uuid.as_str()))
                .cloned()
                .collect();
            (dropped, Some((previous_spec, previous_nics)))
        } else {
            let keep: HashSet<&str> = current_nics.iter().map(|n| n.uuid.as_str()).collect();
            let dropped: Vec<NicRuntime> = previous_nics
                .iter()
                .filter(|n| !keep.contains(n.uuid.as_str()))
                .cloned()
                .collect();
            (dropped, None)
        };
        if let Some((spec, nics)) = restore {
            vm.spec = spec;
            vm.nics = nics;
        }
        let wants_on = vm
            .spec
            .pointer("/resources/power_state")
            .and_then(Value::as_str)
            == Some("ON");
        let is_on = vm.powered_on;
        self.release_nics(&dropped);
        match (wants_on, is_on) {
            (true, false) => self.power_on(uuid, at),
            (false, true) => self.power_off(uuid),
            _ => {}
        }
    }

    pub(crate) fn finish_vm_delete(
        &mut self,
        uuid: &str,
        task_uuid: &str,
        failed: bool,
        _at: Instant,
    ) {
        if failed {
            if let Some(vm) = self.vms.get_mut(uuid)
                && vm.deleting.as_deref() == Some(task_uuid)
            {
                vm.deleting = None;
            }
        } else {
            self.remove_vm(uuid);
        }
    }

    /// Powers a VM on and schedules what its guest will report.
    pub(crate) fn power_on(&mut self, uuid: &str, at: Instant) {
        let host = {
            let Some(vm) = self.vms.get(uuid) else { return };
            vm.gpus
                .first()
                .map(|(h, _)| h.clone())
                .or_else(|| self.first_host_of(vm.cluster_uuid()))
        };
        let boot =
            Duration::from_millis(self.timings.boot_to_address_ms + self.guest.no_address_ms);
        let apipa_ms = self.guest.apipa_first_ms;
        let Some(vm) = self.vms.get_mut(uuid) else {
            return;
        };
        vm.powered_on = true;
        vm.host_uuid = host;
        vm.boot_gen += 1;
        vm.phase = AddressPhase::None;
        let boot_gen = vm.boot_gen;
        let windows = vm.os == GuestOs::Windows;
        let first = at + boot;
        match (windows, apipa_ms) {
            (true, Some(ms)) => {
                self.schedule(
                    first,
                    Event::Addresses {
                        vm: uuid.to_owned(),
                        boot_gen,
                        phase: AddressPhase::Apipa,
                    },
                );
                self.schedule(
                    first + Duration::from_millis(ms),
                    Event::Addresses {
                        vm: uuid.to_owned(),
                        boot_gen,
                        phase: AddressPhase::Real,
                    },
                );
            }
            _ => self.schedule(
                first,
                Event::Addresses {
                    vm: uuid.to_owned(),
                    boot_gen,
                    phase: AddressPhase::Real,
                },
            ),
        }
    }

    /// Where a powered-on VM without a GPU sits: the first host of its cluster.
    pub(crate) fn first_host_of(&self, cluster_uuid: &str) -> Option<String> {
        self.hosts
            .iter()
            .find(|h| {
                h.pointer("/status/cluster_reference/uuid")
                    .and_then(Value::as_str)
                    == Some(cluster_uuid)
            })
            .and_then(|h| {
                h.pointer("/metadata/uuid")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
    }

    pub(crate) fn power_off(&mut self, uuid: &str) {
        if let Some(vm) = self.vms.get_mut(uuid) {
            vm.powered_on = false;
            vm.boot_gen += 1;
            vm.phase = AddressPhase::None;
            vm.host_uuid = None;
        }
    }

    pub(crate) fn apply_address_phase(
        &mut self,
        uuid: &str,
        boot_gen: u64,
        phase: AddressPhase,
        at: Instant,
    ) {
        let hybrid = self.guest.hybrid_overlay_after_ms;
        let overlay_net = Ipv4Net::parse(&self.guest.hybrid_overlay_cidr);
        let Some(vm) = self.vms.get_mut(uuid) else {
            return;
        };
        if vm.boot_gen != boot_gen || !vm.powered_on {
            return;
        }
        vm.phase = phase;
        if phase == AddressPhase::Overlay {
            // Derived from the VM's creation index, not drawn here: events run at request-dependent moments,
            // and drawing from the generator now would make later UUIDs depend on timing.
            vm.overlay = overlay_net.map(|net| u32::from(net.host(vm.seq + 1)));
        }
        if phase == AddressPhase::Real
            && vm.os == GuestOs::Windows
            && let Some(ms) = hybrid
        {
            self.schedule(
                at + Duration::from_millis(ms),
                Event::Addresses {
                    vm: uuid.to_owned(),
                    boot_gen,
                    phase: AddressPhase::Overlay,
                },
            );
        }
    }

    /// Out-of-band power off (as if someone used the Prism Element UI): spec_version moves on.
    pub(crate) fn power_off_out_of_band(&mut self, uuid: &str, now: Instant) -> bool {
        self.make_ordinary(uuid);
        let wall = self.wall(now);
        let Some(vm) = self.vms.get_mut(uuid) else {
            return false;
        };
        if let Some(res) = vm.spec.get_mut("resources").and_then(Value::as_object_mut) {
            res.insert("power_state".to_owned(), json!("OFF"));
        }
        vm.spec_version += 1;
        vm.entity_version += 1;
        vm.last_update_time = wall;
        self.power_off(uuid);
        true
    }

    /// The VM changed through another API namespace (v4, Prism Element) behind the v3 client's back: its
    /// `entity_version` moves, its `spec_version` (the v3 spec's) does not. The v3 swagger's `vm_metadata`
    /// describes entity_version as the "logical entity version that allows serializing updates to the entity
    /// across multiple API namespaces" (prism-go-client v3/swagger.json). False if the VM is unknown.
    pub(crate) fn edit_elsewhere(&mut self, uuid: &str, now: Instant) -> bool {
        self.make_ordinary(uuid);
        let wall = self.wall(now);
        let Some(vm) = self.vms.get_mut(uuid) else {
            return false;
        };
        vm.entity_version += 1;
        vm.last_update_time = wall;
        true
    }
}
