//! The shared VM inventory: one paged `POST /vms/list` of every VM, refreshed when older than its
//! maximum age and shared by every reconcile of the same Prism Central.
//!
//! It answers two questions without a Prism call per Machine:
//! - identity recovery: which VM carries a Machine's identity marker (its uid) in its
//!   description, when the Machine lost (or never recorded) its VM UUID;
//! - steady state: the VM of a Running Machine (state, power, addresses, cluster), so that N
//!   Running Machines cost `ceil(N / page length)` list calls per refresh instead of N GETs.
//!
//! Prism lists a VM only once its create task has ended, so the inventory never proves that a
//! VM does not exist: a VM absent from it is confirmed with one `GET /vms/{uuid}` before anyone
//! acts on its absence. Refreshes are single-flight: concurrent callers wait for the one refresh
//! in progress instead of each listing everything.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use prism_client::v3::{ListRequest, Vm};
use prism_client::{Client, Error};

use crate::plan::identity_of;

/// One listing of every VM.
#[derive(Debug, Default)]
pub struct InventorySnapshot {
    /// When the listing began (what it shows is at least this recent).
    listed_at: Timestamp,
    by_uuid: HashMap<String, Vm>,
    /// Machine uid → VM UUID, from the identity markers.
    by_machine_uid: HashMap<String, String>,
}

impl InventorySnapshot {
    /// Indexes `vms`. When two VMs claim one Machine (which the create protocol prevents), the
    /// older one wins, by creation time then UUID, so the answer is stable.
    pub fn new(vms: Vec<Vm>) -> Self {
        let mut by_uuid = HashMap::with_capacity(vms.len());
        let mut claims: HashMap<String, (String, String)> = HashMap::new();
        for mut vm in vms {
            forget_guest_customization(&mut vm);
            let Some(uuid) = vm.uuid().map(str::to_ascii_lowercase) else {
                continue;
            };
            let uid = vm
                .spec
                .as_ref()
                .and_then(|spec| spec.description.as_deref())
                .and_then(identity_of)
                .map(|identity| identity.uid);
            if let Some(uid) = uid {
                let created = vm.metadata.creation_time.clone().unwrap_or_default();
                let candidate = (created, uuid.clone());
                claims
                    .entry(uid)
                    .and_modify(|current| {
                        if candidate < *current {
                            *current = candidate.clone();
                        }
                    })
                    .or_insert(candidate);
            }
            by_uuid.insert(uuid, vm);
        }
        Self {
            listed_at: Timestamp::now(),
            by_uuid,
            by_machine_uid: claims
                .into_iter()
                .map(|(uid, (_, uuid))| (uid, uuid))
                .collect(),
        }
    }

    /// When the listing began: a VM's state in it is no older than this.
    pub fn listed_at(&self) -> Timestamp {
        self.listed_at
    }

    /// The VM with this UUID, if the listing had it.
    pub fn vm(&self, uuid: &str) -> Option<&Vm> {
        self.by_uuid.get(&uuid.to_ascii_lowercase())
    }

    /// The VM whose identity marker names the Machine with this uid.
    pub fn vm_of_machine(&self, machine_uid: &str) -> Option<&Vm> {
        self.by_machine_uid
            .get(machine_uid)
            .and_then(|uuid| self.by_uuid.get(uuid))
    }

    /// VMs in the listing.
    pub fn len(&self) -> usize {
        self.by_uuid.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_uuid.is_empty()
    }

    /// Every VM, by UUID.
    pub fn vms(&self) -> impl Iterator<Item = &Vm> {
        self.by_uuid.values()
    }
}

/// Drops a listed VM's guest customization (spec and status): nothing read from the inventory
/// needs it, it is the largest part of a Windows VM (its unattend.xml, up to 32,000 characters),
/// and it holds user data that is better not kept for every VM of the Prism Central.
fn forget_guest_customization(vm: &mut Vm) {
    if let Some(spec) = vm.spec.as_mut() {
        spec.resources.guest_customization = None;
    }
    if let Some(resources) = vm.status.as_mut().and_then(|s| s.resources.as_mut()) {
        resources.extra.remove("guest_customization");
    }
}

/// The inventory of one Prism Central.
#[derive(Debug)]
pub struct Inventory {
    max_age: Duration,
    page_length: u32,
    current: Mutex<Option<(Instant, Arc<InventorySnapshot>)>>,
    refresh: tokio::sync::Mutex<()>,
}

impl Inventory {
    pub fn new(max_age: Duration, page_length: u32) -> Self {
        Self {
            max_age,
            page_length: page_length.max(1),
            current: Mutex::new(None),
            refresh: tokio::sync::Mutex::new(()),
        }
    }

    fn fresh(&self, max_age: Duration) -> Option<Arc<InventorySnapshot>> {
        let current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        current
            .as_ref()
            .filter(|(taken, _)| taken.elapsed() < max_age)
            .map(|(_, snapshot)| snapshot.clone())
    }

    /// List calls one refresh takes, judging by the last listing (1 before any).
    pub fn pages(&self) -> usize {
        let current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        let listed = current.as_ref().map_or(0, |(_, snapshot)| snapshot.len());
        listed.div_ceil(self.page_length as usize).max(1)
    }

    /// A snapshot no older than the maximum age, listing every VM if needed.
    pub async fn snapshot(&self, client: &Client) -> Result<Arc<InventorySnapshot>, Error> {
        self.snapshot_within(client, self.max_age).await
    }

    /// A snapshot no older than `max_age` (at most the maximum age), listing every VM if needed:
    /// for Machines that wait on their VMs and look more often than the inventory is refreshed.
    pub async fn snapshot_within(
        &self,
        client: &Client,
        max_age: Duration,
    ) -> Result<Arc<InventorySnapshot>, Error> {
        let max_age = max_age.min(self.max_age);
        if let Some(snapshot) = self.fresh(max_age) {
            return Ok(snapshot);
        }
        let _refreshing = self.refresh.lock().await;
        // Another caller may have refreshed while this one waited.
        if let Some(snapshot) = self.fresh(max_age) {
            return Ok(snapshot);
        }
        let began = Timestamp::now();
        let vms = self.list_every_vm(client).await?;
        let mut snapshot = InventorySnapshot::new(vms);
        snapshot.listed_at = began;
        let snapshot = Arc::new(snapshot);
        tracing::debug!(vms = snapshot.len(), "VM inventory refreshed");
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) =
            Some((Instant::now(), snapshot.clone()));
        Ok(snapshot)
    }

    async fn list_every_vm(&self, client: &Client) -> Result<Vec<Vm>, Error> {
        let mut vms: Vec<Vm> = Vec::new();
        loop {
            let offset = u32::try_from(vms.len()).unwrap_or(u32::MAX);
            let page = client
                .list::<Vm>(&ListRequest::page("vm", offset, self.page_length))
                .await?;
            let received = page.entities.len();
            vms.extend(page.entities);
            let done = match page.metadata.total_matches {
                Some(total) => received == 0 || vms.len() as u64 >= total,
                None => received < self.page_length as usize,
            };
            if done {
                return Ok(vms);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn vm(uuid: &str, description: Option<&str>, created: &str) -> Vm {
        serde_json::from_value(json!({
            "metadata": {"kind": "vm", "uuid": uuid, "creation_time": created},
            "spec": {"name": "n", "description": description,
                     "resources": {"num_sockets": 1, "num_vcpus_per_socket": 1, "memory_size_mib": 2048, "power_state": "ON"}},
        }))
        .unwrap()
    }

    #[test]
    fn listed_vms_are_kept_without_their_guest_customization() {
        let listed: Vm = serde_json::from_value(json!({
            "metadata": {"kind": "vm", "uuid": "a-1"},
            "spec": {"name": "n", "resources": {"num_sockets": 1, "num_vcpus_per_socket": 1,
                "memory_size_mib": 2048, "power_state": "ON",
                "guest_customization": {"sysprep": {"unattend_xml": "PHhtbD4="}}}},
            "status": {"state": "COMPLETE", "resources": {
                "guest_customization": {"sysprep": {"unattend_xml": "PHhtbD4="}},
                "power_state": "ON"}},
        }))
        .unwrap();
        let snapshot = InventorySnapshot::new(vec![listed]);
        let kept = serde_json::to_string(snapshot.vm("a-1").unwrap()).unwrap();
        assert!(!kept.contains("unattend_xml"), "{kept}");
        assert!(kept.contains(r#""power_state":"ON""#), "{kept}");
    }

    #[test]
    fn identity_markers_are_indexed_and_the_older_claim_wins() {
        let marker = "openshift-machine: ns/m uid=uid-1";
        let snapshot = InventorySnapshot::new(vec![
            vm("B-2", Some(marker), "2024-01-02T00:00:00Z"),
            vm("a-1", Some(marker), "2024-01-01T00:00:00Z"),
            vm("c-3", Some("hand-made"), "2024-01-01T00:00:00Z"),
            vm("d-4", None, "2024-01-01T00:00:00Z"),
        ]);
        assert_eq!(snapshot.len(), 4);
        assert_eq!(snapshot.vm_of_machine("uid-1").unwrap().uuid(), Some("a-1"));
        assert_eq!(snapshot.vm_of_machine("uid-2"), None);
        assert!(
            snapshot.vm("b-2").is_some(),
            "UUIDs compare case-insensitively"
        );
    }
}
