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

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use prism_client::v3::{ListRequest, Vm};
use prism_client::{Client, Error};
use prometheus::IntGauge;

use crate::plan::vm::identity::identity_of;

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
            trim_for_inventory(&mut vm);
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

/// Keeps of a listed VM only what the inventory's readers use (identity, name, state, power,
/// NICs and addresses, cluster, categories, project, disks and boot configuration of a source
/// VM). Dropped: the guest customization (a Windows VM's unattend.xml is up to 32,000
/// characters, and it holds user data better not kept for every VM of the Prism Central), the
/// status' copy of the disks, and every field the client does not model. A decoded VM takes about
/// five times its JSON; one copy per VM of the whole Prism Central is kept (two during a
/// refresh). Nothing from the inventory is ever sent back to Prism: updates start from a GET.
fn trim_for_inventory(vm: &mut Vm) {
    vm.extra = Default::default();
    vm.metadata.extra = Default::default();
    vm.metadata.categories_mapping = None;
    if let Some(spec) = vm.spec.as_mut() {
        spec.extra = Default::default();
        spec.resources.guest_customization = None;
        spec.resources.extra = Default::default();
        for nic in &mut spec.resources.nic_list {
            nic.extra = Default::default();
        }
        for disk in &mut spec.resources.disk_list {
            disk.extra = Default::default();
        }
    }
    if let Some(status) = vm.status.as_mut() {
        status.extra = Default::default();
        status.execution_context = None;
        if let Some(resources) = status.resources.as_mut() {
            resources.extra = Default::default();
            resources.disk_list = Vec::new();
            for nic in &mut resources.nic_list {
                nic.extra = Default::default();
            }
        }
    }
}

/// The inventory of one Prism Central.
#[derive(Debug)]
pub struct Inventory {
    max_age: Duration,
    page_length: u32,
    /// Set to the number of VMs the last listing skipped as unreadable.
    unreadable: Option<IntGauge>,
    current: Mutex<Option<(Instant, Arc<InventorySnapshot>)>>,
    refresh: tokio::sync::Mutex<()>,
}

impl Inventory {
    /// `unreadable` is set to the number of VMs each listing skipped as unreadable.
    pub fn new(max_age: Duration, page_length: u32, unreadable: Option<IntGauge>) -> Self {
        Self {
            max_age,
            page_length: page_length.max(1),
            unreadable,
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
        let mut seen: HashSet<String> = HashSet::new();
        let mut unreadable: usize = 0;
        let mut offset: u32 = 0;
        loop {
            let page = client
                .list::<Vm>(&ListRequest::page("vm", offset, self.page_length))
                .await?;
            // Skipped entities took their places on the page: the next page starts after them.
            let received = page.entities.len() + page.skipped.len();
            offset = offset.saturating_add(u32::try_from(received).unwrap_or(u32::MAX));
            for skipped in &page.skipped {
                // Another tool's VM that this client cannot read must not hide every other VM
                // (nor stop the Machines that need the inventory); it is counted and skipped.
                tracing::debug!(vm = ?skipped.uuid, name = ?skipped.name, reason = %skipped.reason, "inventory: a listed VM cannot be read; skipped");
            }
            let new_skipped = page
                .skipped
                .iter()
                .filter_map(|skipped| skipped.uuid.as_deref())
                .filter(|uuid| seen.insert(uuid.to_ascii_lowercase()))
                .count();
            let without_uuid = page.skipped.iter().filter(|s| s.uuid.is_none()).count();
            unreadable += new_skipped + without_uuid;
            let before = vms.len();
            // Trimmed page by page: only one page is ever held whole. A VM listed twice (a
            // server that ignores `offset`, or entities shifting between pages) is kept once.
            for mut vm in page.entities {
                if let Some(uuid) = vm.uuid().map(str::to_ascii_lowercase)
                    && !seen.insert(uuid)
                {
                    continue;
                }
                trim_for_inventory(&mut vm);
                vms.push(vm);
            }
            let done = match page.metadata.total_matches {
                Some(total) => received == 0 || u64::from(offset) >= total,
                None => received < self.page_length as usize,
            };
            // A page that adds nothing new ends the listing: otherwise a server that ignores
            // `offset` (real `hosts/list` does, CAPX #577) would be paged forever.
            if done || (vms.len() == before && new_skipped == 0) {
                if let Some(gauge) = &self.unreadable {
                    gauge.set(i64::try_from(unreadable).unwrap_or(i64::MAX));
                }
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
    fn listed_vms_are_kept_with_what_the_inventory_reads_only() {
        let listed: Vm = serde_json::from_value(json!({
            "metadata": {"kind": "vm", "uuid": "a-1"},
            "spec": {"name": "n", "resources": {"num_sockets": 1, "num_vcpus_per_socket": 1,
                "memory_size_mib": 2048, "power_state": "ON", "vga_console_enabled": true,
                "disk_list": [{"disk_size_mib": 1024}],
                "guest_customization": {"sysprep": {"unattend_xml": "PHhtbD4="}}}},
            "status": {"state": "COMPLETE", "resources": {
                "guest_customization": {"sysprep": {"unattend_xml": "PHhtbD4="}},
                "nic_list": [{"ip_endpoint_list": [{"ip": "10.0.0.7", "type": "LEARNED"}]}],
                "power_state": "ON"}},
        }))
        .unwrap();
        let snapshot = InventorySnapshot::new(vec![listed]);
        let kept = snapshot.vm("a-1").unwrap();
        let text = serde_json::to_string(kept).unwrap();
        assert!(!text.contains("unattend_xml"), "{text}");
        assert!(
            !text.contains("vga_console_enabled"),
            "unmodelled fields dropped: {text}"
        );
        assert_eq!(kept.state(), Some(&prism_client::v3::EntityState::Complete));
        assert!(text.contains(r#""power_state":"ON""#), "{text}");
        assert_eq!(kept.spec.as_ref().unwrap().resources.disk_list.len(), 1);
        let nics = &kept
            .status
            .as_ref()
            .unwrap()
            .resources
            .as_ref()
            .unwrap()
            .nic_list;
        assert_eq!(nics[0].ip_endpoint_list[0].ip.as_deref(), Some("10.0.0.7"));
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
