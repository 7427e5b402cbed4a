//! One shared look per Prism Central at the VMs whose Machines wait for their addresses
//! (issue 37, item 2).
//!
//! A VM whose create ended is often read before its guest has an address: a NIC's address in a
//! v3 VM's status is `ASSIGNED` or `LEARNED` (prism-go-client `v3/swagger.json`,
//! `ip_endpoint_list[].type`; only `ASSIGNED` may be asked for in the spec), and a learned one
//! comes from the running guest, which can be well after the VM is powered on (prism-mock's
//! guests report theirs `boot_to_address_ms` after power-on). Such a Machine stays
//! `Provisioned` and would look again only at its requeue (`--requeue-interval`, 30 s in
//! production). While any VM waits, the watch takes a fresh shared inventory listing (the same
//! listing every waiting Machine reads, so its calls follow the time VMs wait, not their
//! number) and wakes each Machine whose VM now lists other addresses than the Machine saw. The
//! woken Machine reads the same listing ([`super::Connection::listing_for_waiter`]) or, when
//! too few wait for a listing to pay, its VM with a fresh `GET`. Its own requeue stays the
//! fallback.
//!
//! A VM that waits long is looked at less often: a Windows guest that gets its address from
//! DHCP only after a long first boot costs a listing every [`LOOK_AT_MOST`], not every second.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use prism_client::Client;
use prism_client::v3::Vm;
use tokio::sync::{Notify, broadcast};

use super::RecentReads;
use super::inventory::{Inventory, InventorySnapshot};
use super::task_watch::MachineKey;
use crate::plan::vm::scope::NameClause;

/// How soon after it starts waiting a VM is first looked for, and how often while VMs have
/// waited no longer than four times this.
pub const LOOK_EVERY: Duration = Duration::from_secs(1);

/// The longest pause between two looks (the shipped `--poll-interval`).
pub const LOOK_AT_MOST: Duration = Duration::from_secs(10);

/// How long a VM is watched at most: past this, its Machine's own requeue alone follows it.
const WATCHED_AT_MOST: Duration = Duration::from_secs(3600);

/// A VM whose Machine waits for its addresses.
#[derive(Debug)]
struct Waiting {
    machine: MachineKey,
    /// The names the listing must cover to show the VM.
    names: NameClause,
    /// The addresses the Machine saw (sorted): another set wakes it.
    seen: Vec<String>,
    since: Instant,
    /// When a listing last covered its names (`None`: never since it was watched).
    covered: Option<Instant>,
}

#[derive(Debug, Default)]
struct State {
    client: Option<Client>,
    /// By VM UUID, lower-cased.
    waiting: HashMap<String, Waiting>,
    running: bool,
}

/// The address watch of one Prism Central.
#[derive(Debug)]
pub struct AddressWatch {
    inventory: Inventory,
    /// A woken Machine must not be served its VM as read before the addresses came.
    recent_reads: Arc<RecentReads>,
    state: Mutex<State>,
    added: Notify,
    wakes: broadcast::Sender<MachineKey>,
}

/// What one listing changed: the VMs (UUID) whose Machines were woken.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Looked {
    pub woken: Vec<String>,
}

/// The addresses a VM lists on its NICs, sorted.
pub fn listed_addresses(vm: &Vm) -> Vec<String> {
    let mut addresses: Vec<String> = vm
        .status
        .as_ref()
        .and_then(|status| status.resources.as_ref())
        .map(|resources| resources.nic_list.as_slice())
        .unwrap_or_default()
        .iter()
        .flat_map(|nic| &nic.ip_endpoint_list)
        .filter_map(|endpoint| endpoint.ip.clone())
        .collect();
    addresses.sort();
    addresses.dedup();
    addresses
}

impl AddressWatch {
    /// A watch that lists through `inventory` and wakes Machines through `wakes`, dropping
    /// their VMs' reads from `recent_reads`.
    pub(super) fn new(
        inventory: Inventory,
        recent_reads: Arc<RecentReads>,
        wakes: broadcast::Sender<MachineKey>,
    ) -> Self {
        Self {
            inventory,
            recent_reads,
            state: Mutex::new(State::default()),
            added: Notify::new(),
            wakes,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Watches VM `vm` of `machine` (whose name `names` covers), which showed the addresses
    /// `seen`, through `client`. Starts the loop on the first VM (inside a tokio runtime).
    /// Watching a VM again replaces what its Machine saw.
    pub fn watch(
        self: &Arc<Self>,
        client: &Client,
        vm: &str,
        seen: Vec<String>,
        names: NameClause,
        machine: MachineKey,
    ) {
        let start = {
            let mut state = self.state();
            state.client = Some(client.clone());
            let mut seen = seen;
            seen.sort();
            seen.dedup();
            state
                .waiting
                .entry(vm.to_ascii_lowercase())
                .and_modify(|waiting| {
                    waiting.seen.clone_from(&seen);
                    waiting.machine = machine.clone();
                })
                .or_insert_with(|| Waiting {
                    machine,
                    names,
                    seen,
                    since: Instant::now(),
                    covered: None,
                });
            !std::mem::replace(&mut state.running, true)
        };
        if start {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(self.clone().run());
            } else {
                self.state().running = false;
            }
        }
        self.added.notify_one();
    }

    /// Stops watching VM `vm` (its Machine has its addresses, or no longer waits).
    pub fn forget(&self, vm: &str) {
        self.state().waiting.remove(&vm.to_ascii_lowercase());
    }

    /// Stops watching the VMs of `machine` (it is gone).
    pub fn forget_machine(&self, machine: &MachineKey) {
        self.state()
            .waiting
            .retain(|_, waiting| waiting.machine != *machine);
    }

    /// Whether VM `vm` is watched.
    pub fn watches(&self, vm: &str) -> bool {
        self.state().waiting.contains_key(&vm.to_ascii_lowercase())
    }

    /// Takes in one listing: each watched VM it covers and lists with addresses other than its
    /// Machine saw leaves the watch and wakes its Machine. A VM the listing covers but does not
    /// show (Prism lists a VM late) stays watched.
    pub fn take_in(&self, listing: &InventorySnapshot) -> Looked {
        let mut looked = Looked::default();
        let mut woken = Vec::new();
        {
            let mut state = self.state();
            state.waiting.retain(|uuid, waiting| {
                if !listing.covers(&waiting.names) {
                    return true;
                }
                waiting.covered = Some(Instant::now());
                let Some(vm) = listing.vm(uuid) else {
                    return true;
                };
                let addresses = listed_addresses(vm);
                if addresses.is_empty() || addresses == waiting.seen {
                    return true;
                }
                looked.woken.push(uuid.clone());
                woken.push(waiting.machine.clone());
                false
            });
        }
        for uuid in &looked.woken {
            self.recent_reads.forget(uuid);
        }
        for machine in woken {
            // No receiver (no Machine controller yet): the Machine's own requeue looks again.
            let _ = self.wakes.send(machine);
        }
        looked
    }

    /// What to list next: the client, the names of the VM a listing covered least recently (a
    /// listing covers every watched Machine's name once the controller knows them; these make
    /// sure), and how long to pause after it. `None` when no VM waits. Drops VMs watched too
    /// long.
    fn due(&self) -> Option<(Client, NameClause, Duration)> {
        let mut state = self.state();
        state
            .waiting
            .retain(|_, waiting| waiting.since.elapsed() < WATCHED_AT_MOST);
        let oldest = state
            .waiting
            .values()
            .max_by_key(|waiting| waiting.since.elapsed())?;
        let youngest = state
            .waiting
            .values()
            .map(|waiting| waiting.since.elapsed())
            .min()
            .unwrap_or_default();
        Some((
            state.client.clone()?,
            oldest.names.clone(),
            pause_after(youngest),
        ))
    }

    /// Lists while VMs wait; idle otherwise.
    async fn run(self: Arc<Self>) {
        loop {
            let Some((client, names, pause)) = self.due() else {
                self.added.notified().await;
                continue;
            };
            match self
                .inventory
                .snapshot_within(&client, &names, LOOK_EVERY)
                .await
            {
                Ok(listing) => {
                    self.take_in(&listing);
                }
                // The Machines' own requeues look meanwhile.
                Err(error) => {
                    tracing::debug!(%error, "cannot list the VMs waiting for their addresses");
                }
            }
            tokio::time::sleep(pause).await;
        }
    }
}

/// The pause before the next look, when the VM that started waiting last has waited `waited`:
/// a quarter of that, within [`LOOK_EVERY`] and [`LOOK_AT_MOST`].
pub fn pause_after(waited: Duration) -> Duration {
    (waited / 4).clamp(LOOK_EVERY, LOOK_AT_MOST)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actuator::inventory::{InventoryGauges, SharedScopeSource};
    use crate::plan::vm::scope::VmNameScope;
    use serde_json::json;

    fn machine(name: &str) -> MachineKey {
        MachineKey {
            namespace: "openshift-machine-api".to_owned(),
            name: name.to_owned(),
        }
    }

    fn vm(uuid: &str, name: &str, ips: &[&str]) -> Vm {
        serde_json::from_value(json!({
            "metadata": {"uuid": uuid, "kind": "vm"},
            "spec": {"name": name, "resources": {}},
            "status": {"name": name, "state": "COMPLETE", "resources": {
                "power_state": "ON",
                "nic_list": [{"ip_endpoint_list": ips
                    .iter()
                    .map(|ip| json!({"ip": ip, "type": "LEARNED"}))
                    .collect::<Vec<_>>()}],
            }},
        }))
        .unwrap()
    }

    fn listing(vms: Vec<Vm>) -> InventorySnapshot {
        InventorySnapshot::new(vms, VmNameScope::of([("workers-a1", Some("workers"))]))
    }

    fn waiting(watch: &AddressWatch, uuid: &str, name: &str, seen: &[&str]) {
        watch.state().waiting.insert(
            uuid.to_owned(),
            Waiting {
                machine: machine(name),
                names: NameClause::of_machine(name, Some("workers")),
                seen: seen.iter().map(|ip| (*ip).to_owned()).collect(),
                since: Instant::now(),
                covered: None,
            },
        );
    }

    fn new_watch(wakes: broadcast::Sender<MachineKey>) -> AddressWatch {
        let inventory = Inventory::new(
            Duration::from_secs(60),
            500,
            InventoryGauges::default(),
            SharedScopeSource::default(),
        );
        AddressWatch::new(
            inventory,
            Arc::new(RecentReads::new(Duration::from_secs(5))),
            wakes,
        )
    }

    const VM_A: &str = "5f0e8a3c-0000-4000-8000-0000000000a1";
    const VM_B: &str = "5f0e8a3c-0000-4000-8000-0000000000b2";

    #[test]
    fn a_machine_is_woken_once_its_vm_lists_other_addresses_than_it_saw() {
        let (wakes, mut woken) = broadcast::channel(8);
        let watch = new_watch(wakes);
        waiting(&watch, VM_A, "workers-a1", &[]);
        waiting(&watch, VM_B, "workers-b2", &["169.254.0.9"]);

        // Not listed yet, listed without an address, listed with the address already seen.
        let looked = watch.take_in(&listing(vec![
            vm(VM_A, "workers-a1", &[]),
            vm(VM_B, "workers-b2", &["169.254.0.9"]),
        ]));
        assert_eq!(looked, Looked::default());
        assert!(watch.take_in(&listing(vec![])).woken.is_empty());
        assert!(woken.try_recv().is_err());

        // The guest got its address: its Machine is woken once and the VM leaves the watch.
        let looked = watch.take_in(&listing(vec![
            vm(VM_A, "workers-a1", &["10.0.0.7"]),
            vm(VM_B, "workers-b2", &["169.254.0.9"]),
        ]));
        assert_eq!(looked.woken, [VM_A]);
        assert_eq!(woken.try_recv().unwrap(), machine("workers-a1"));
        assert!(!watch.watches(VM_A));
        assert!(watch.watches(VM_B));
        assert!(
            watch
                .take_in(&listing(vec![vm(VM_A, "workers-a1", &["10.0.0.7"])]))
                .woken
                .is_empty()
        );
    }

    #[test]
    fn a_listing_that_does_not_cover_the_machines_name_proves_nothing() {
        let (wakes, _woken) = broadcast::channel(8);
        let watch = new_watch(wakes);
        watch.state().waiting.insert(
            VM_A.to_owned(),
            Waiting {
                machine: machine("other-x"),
                names: NameClause::of_machine("other-x", Some("other")),
                seen: Vec::new(),
                since: Instant::now(),
                covered: None,
            },
        );
        // The VM is in a listing that did not look for its name: a stale name match, not a look.
        let looked = watch.take_in(&listing(vec![vm(VM_A, "workers-a1", &["10.0.0.7"])]));
        assert!(looked.woken.is_empty());
        assert!(watch.watches(VM_A));
    }

    #[test]
    fn a_long_wait_is_looked_at_less_often_within_the_bounds() {
        assert_eq!(pause_after(Duration::ZERO), LOOK_EVERY);
        assert_eq!(pause_after(Duration::from_secs(8)), Duration::from_secs(2));
        assert_eq!(pause_after(Duration::from_secs(600)), LOOK_AT_MOST);
    }
}
