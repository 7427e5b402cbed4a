//! The shared VM inventory: a paged `POST /vms/list` of this cluster's VMs, refreshed when
//! older than its maximum age and shared by every reconcile of the same Prism Central.
//!
//! It answers two questions without a Prism call per Machine:
//! - identity recovery: which VM carries a Machine's identity marker (its uid) in its
//!   description, when the Machine lost (or never recorded) its VM UUID;
//! - steady state: the VM of a Running Machine (state, power, addresses, cluster), so that N
//!   Running Machines cost `ceil(N / page length)` list calls per refresh instead of N GETs.
//!
//! Only the cluster's VMs are listed: those named as its Machines are
//! ([`crate::plan::vm::scope`], a `vm_name` filter Prism applies), so that a Prism Central shared
//! with thousands of other VMs costs no more calls or memory than one holding the cluster alone.
//! A listing covers the names of the Machines the controller knew when it began; a Machine whose
//! name it does not cover has a listing made that does (absence from a listing that never
//! looked for a name would prove nothing).
//!
//! Prism lists a VM only once its create task has ended, so the inventory never proves that a
//! VM does not exist: a VM absent from it is confirmed with one `GET /vms/{uuid}` before anyone
//! acts on its absence. Refreshes are single-flight. A caller content with the inventory's
//! maximum age is never kept waiting by a refresh while the last listing is less than twice
//! that old: it is served the last listing and the refresh runs in the background. A caller
//! asking for a younger listing (a Machine waiting for its create to end) waits for it.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use prism_client::v3::{ListRequest, Vm};
use prism_client::{Client, Error, V3Entity};
use prometheus::{Gauge, IntGauge};
use serde::{Deserialize, Deserializer};

use crate::plan::vm::identity::{MarkedVm, identity_of};
use crate::plan::vm::scope::{NameClause, VmNameScope};

/// Gives the names of every Machine the controller watches, as the scope to list.
pub type ScopeSource = Arc<dyn Fn() -> VmNameScope + Send + Sync>;

/// Set once the controller's Machine cache exists; until then (and in tools without one) a
/// listing covers the names its callers asked for.
pub type SharedScopeSource = Arc<OnceLock<ScopeSource>>;

/// One listing of the cluster's VMs.
#[derive(Debug, Default)]
pub struct InventorySnapshot {
    /// When the listing began (what it shows is at least this recent).
    listed_at: Timestamp,
    /// The same, on this process's clock (`None`: not made by a refresh).
    began: Option<Instant>,
    /// The names it looked for.
    scope: VmNameScope,
    by_uuid: HashMap<String, Vm>,
    /// Machine uid → UUIDs of the VMs whose identity marker names it.
    by_machine_uid: HashMap<String, Vec<String>>,
    /// VMs of the cluster with no Machine ([`VmNameScope::is_orphan`]).
    orphans: usize,
}

impl InventorySnapshot {
    /// Indexes those of `vms` that `scope` names (Prism's partial name match returns more).
    pub fn new(vms: Vec<Vm>, scope: VmNameScope) -> Self {
        let mut by_uuid = HashMap::with_capacity(vms.len());
        let mut by_machine_uid: HashMap<String, Vec<String>> = HashMap::new();
        let mut orphans = 0;
        for mut vm in vms {
            let Some(spec) = vm.spec.as_ref() else {
                continue;
            };
            if !scope.covers(&spec.name) {
                continue;
            }
            if scope.is_orphan(&spec.name, vm.metadata.categories.as_ref()) {
                orphans += 1;
            }
            let uid = spec
                .description
                .as_deref()
                .and_then(identity_of)
                .map(|identity| identity.uid);
            trim_for_inventory(&mut vm);
            let Some(uuid) = vm.uuid().map(str::to_ascii_lowercase) else {
                continue;
            };
            if let Some(uid) = uid {
                by_machine_uid.entry(uid).or_default().push(uuid.clone());
            }
            by_uuid.insert(uuid, vm);
        }
        Self {
            listed_at: Timestamp::now(),
            began: None,
            scope,
            by_uuid,
            by_machine_uid,
            orphans,
        }
    }

    /// VMs of the cluster with no Machine in the listing.
    pub fn orphans(&self) -> usize {
        self.orphans
    }

    /// When the listing began: a VM's state in it is no older than this.
    pub fn listed_at(&self) -> Timestamp {
        self.listed_at
    }

    /// Whether the listing looked for the names of `clause`.
    pub fn covers(&self, clause: &NameClause) -> bool {
        self.scope.includes(clause)
    }

    /// The VM with this UUID, if the listing had it.
    pub fn vm(&self, uuid: &str) -> Option<&Vm> {
        self.by_uuid.get(&uuid.to_ascii_lowercase())
    }

    /// The VMs whose identity marker names the Machine with this uid, for
    /// [`crate::plan::vm::identity::adoptable_vm`] to judge.
    pub fn marked_for(&self, machine_uid: &str) -> Vec<MarkedVm> {
        let Some(uuids) = self.by_machine_uid.get(machine_uid) else {
            return Vec::new();
        };
        uuids
            .iter()
            .filter_map(|uuid| MarkedVm::of(self.by_uuid.get(uuid)?))
            .collect()
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

/// A listed VM, trimmed ([`trim_for_inventory`]) as soon as it is decoded: a page of 500 VMs is
/// never held whole, only the part the inventory keeps (a heap profile at 1,000 Machines had 12.5
/// MiB of a page's untrimmed VMs at the controller's peak: docs/performance.md).
struct ListedVm(Vm);

impl<'de> Deserialize<'de> for ListedVm {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut vm = Vm::deserialize(deserializer)?;
        trim_for_inventory(&mut vm);
        Ok(Self(vm))
    }
}

impl V3Entity for ListedVm {
    const KIND: &'static str = Vm::KIND;
    const COLLECTION: &'static str = Vm::COLLECTION;
    const GET_ENDPOINT: &'static str = Vm::GET_ENDPOINT;
    const LIST_ENDPOINT: &'static str = Vm::LIST_ENDPOINT;
    fn entity_uuid(&self) -> Option<&str> {
        self.0.uuid()
    }
    fn entity_name(&self) -> Option<&str> {
        self.0.name()
    }
}

/// The gauges an inventory keeps current.
#[derive(Debug, Default)]
pub struct InventoryGauges {
    /// VMs a listing skipped as unreadable.
    pub unreadable: Option<IntGauge>,
    /// The cluster's VMs with no Machine.
    pub orphans: Option<IntGauge>,
    /// When the last listing began (Unix seconds).
    pub listed: Option<Gauge>,
}

/// The inventory of one Prism Central.
#[derive(Debug, Clone)]
pub struct Inventory {
    state: Arc<State>,
}

struct State {
    max_age: Duration,
    page_length: u32,
    /// Set to the number of VMs the last listing skipped as unreadable.
    unreadable: Option<IntGauge>,
    /// Set to the number of the cluster's VMs with no Machine in the last listing of every
    /// watched Machine's names (a listing for a few names cannot tell).
    orphans: Option<IntGauge>,
    /// Set to when the last successful listing began.
    listed: Option<Gauge>,
    scope_source: SharedScopeSource,
    /// Prism answered the name filter with 400/422: list unfiltered.
    filter_refused: AtomicBool,
    current: Mutex<Option<(Instant, Arc<InventorySnapshot>)>>,
    refresh: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inventory")
            .field("max_age", &self.max_age)
            .field("page_length", &self.page_length)
            .finish_non_exhaustive()
    }
}

impl Inventory {
    /// `unreadable` is set to the number of VMs each listing skipped as unreadable; `scope_source`
    /// gives the names to list once the controller knows its Machines.
    pub fn new(
        max_age: Duration,
        page_length: u32,
        gauges: InventoryGauges,
        scope_source: SharedScopeSource,
    ) -> Self {
        Self {
            state: Arc::new(State {
                max_age,
                page_length: page_length.max(1),
                unreadable: gauges.unreadable,
                orphans: gauges.orphans,
                listed: gauges.listed,
                scope_source,
                filter_refused: AtomicBool::new(false),
                current: Mutex::new(None),
                refresh: tokio::sync::Mutex::new(()),
            }),
        }
    }

    /// Whether `other` is this inventory (shared by clones).
    pub fn same_as(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.state, &other.state)
    }

    /// The last listing, with its age, if it covers `wanted`.
    fn current_covering(&self, wanted: &NameClause) -> Option<(Duration, Arc<InventorySnapshot>)> {
        let current = self
            .state
            .current
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        current
            .as_ref()
            .filter(|(_, snapshot)| snapshot.covers(wanted))
            .map(|(taken, snapshot)| (taken.elapsed(), snapshot.clone()))
    }

    /// List calls one refresh takes, judging by the last listing (1 before any).
    pub fn pages(&self) -> usize {
        let current = self
            .state
            .current
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let listed = current.as_ref().map_or(0, |(_, snapshot)| snapshot.len());
        listed.div_ceil(self.state.page_length as usize).max(1)
    }

    /// A listing covering `wanted`, no older than the maximum age; while a refresh runs (or is
    /// started by this call), the last listing is served if it is less than twice that old.
    pub async fn snapshot(
        &self,
        client: &Client,
        wanted: &NameClause,
    ) -> Result<Arc<InventorySnapshot>, Error> {
        let max_age = self.state.max_age;
        if let Some((age, snapshot)) = self.current_covering(wanted) {
            if age < max_age {
                return Ok(snapshot);
            }
            if age < max_age.saturating_mul(2) {
                self.refresh_in_background(client);
                return Ok(snapshot);
            }
        }
        self.snapshot_within(client, wanted, max_age).await
    }

    /// A listing covering `wanted`, no older than `max_age` (at most the maximum age), waiting
    /// for it if need be: for Machines that wait on their VMs and look more often than the
    /// inventory is refreshed.
    pub async fn snapshot_within(
        &self,
        client: &Client,
        wanted: &NameClause,
        max_age: Duration,
    ) -> Result<Arc<InventorySnapshot>, Error> {
        self.snapshot_begun_after(client, wanted, max_age, None)
            .await
    }

    /// As [`Self::snapshot_within`], and begun after `after` if given: a VM made while a
    /// listing ran may be missing from it (Prism lists a VM once the task that makes it has
    /// ended), so the waiter on a VM made at `after` is served a listing begun since.
    pub async fn snapshot_begun_after(
        &self,
        client: &Client,
        wanted: &NameClause,
        max_age: Duration,
        after: Option<Instant>,
    ) -> Result<Arc<InventorySnapshot>, Error> {
        let max_age = max_age.min(self.state.max_age);
        let fresh = |inventory: &Self| {
            inventory
                .current_covering(wanted)
                .filter(|(age, _)| *age < max_age)
                .filter(|(_, snapshot)| {
                    after.is_none_or(|after| snapshot.began.is_some_and(|began| began > after))
                })
                .map(|(_, snapshot)| snapshot)
        };
        if let Some(snapshot) = fresh(self) {
            return Ok(snapshot);
        }
        let _refreshing = self.state.refresh.lock().await;
        // Another caller may have refreshed while this one waited.
        if let Some(snapshot) = fresh(self) {
            return Ok(snapshot);
        }
        self.refresh(client, Some(wanted)).await
    }

    /// Starts a refresh unless one is running.
    fn refresh_in_background(&self, client: &Client) {
        let inventory = self.clone();
        let client = client.clone();
        tokio::spawn(async move {
            let Ok(_refreshing) = inventory.state.refresh.try_lock() else {
                return;
            };
            // Another task may have refreshed between this one's start and its lock.
            let age = inventory
                .state
                .current
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .as_ref()
                .map(|(taken, _)| taken.elapsed());
            if age.is_some_and(|age| age < inventory.state.max_age) {
                return;
            }
            if let Err(error) = inventory.refresh(&client, None).await {
                tracing::debug!(%error, "VM inventory: background refresh failed");
            }
        });
    }

    /// Lists the scope (every watched Machine's name, and `wanted`) into a new current listing.
    /// The caller holds the refresh lock.
    async fn refresh(
        &self,
        client: &Client,
        wanted: Option<&NameClause>,
    ) -> Result<Arc<InventorySnapshot>, Error> {
        let scope = self.scope_to_list(wanted);
        let began_at = Instant::now();
        let began = Timestamp::now();
        let vms = if scope.is_empty() {
            Vec::new()
        } else {
            self.list_scope(client, &scope).await?
        };
        let mut snapshot = InventorySnapshot::new(vms, scope);
        snapshot.listed_at = began;
        snapshot.began = Some(began_at);
        if let (Some(gauge), Some(_)) = (&self.state.orphans, self.state.scope_source.get()) {
            gauge.set(i64::try_from(snapshot.orphans).unwrap_or(i64::MAX));
        }
        if let Some(gauge) = &self.state.listed {
            gauge.set(began.as_duration().as_secs_f64());
        }
        let snapshot = Arc::new(snapshot);
        tracing::debug!(vms = snapshot.len(), "VM inventory refreshed");
        *self
            .state
            .current
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some((Instant::now(), snapshot.clone()));
        Ok(snapshot)
    }

    /// The watched Machines' names (or, without the controller's Machine cache, the names the
    /// last listing covered), and `wanted`.
    fn scope_to_list(&self, wanted: Option<&NameClause>) -> VmNameScope {
        let mut scope = match self.state.scope_source.get() {
            Some(source) => source(),
            None => self
                .state
                .current
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .as_ref()
                .map(|(_, snapshot)| snapshot.scope.clone())
                .unwrap_or_default(),
        };
        if let Some(wanted) = wanted
            && !scope.includes(wanted)
        {
            scope.insert(wanted.clone());
        }
        scope
    }

    /// The VMs `scope` selects, filtered by Prism; every VM if this Prism Central refused the
    /// filter once as invalid (the listing then keeps the scope's VMs itself).
    async fn list_scope(&self, client: &Client, scope: &VmNameScope) -> Result<Vec<Vm>, Error> {
        let filter = scope
            .filter()
            .filter(|_| !self.state.filter_refused.load(Ordering::Relaxed));
        if filter.is_none() {
            return self.list(client, None).await;
        }
        match self.list(client, filter).await {
            Err(Error::Invalid { .. }) => {
                self.state.filter_refused.store(true, Ordering::Relaxed);
                tracing::warn!(
                    endpoint = %client.endpoint(),
                    "Prism Central refused the VM name filter as invalid: the inventory lists every VM from now on"
                );
                self.list(client, None).await
            }
            other => other,
        }
    }

    /// Every VM `filter` selects (every VM of the Prism Central without one), page by page.
    async fn list(&self, client: &Client, filter: Option<String>) -> Result<Vec<Vm>, Error> {
        let page_length = self.state.page_length;
        let mut vms: Vec<Vm> = Vec::new();
        let mut seen: HashSet<String> = HashSet::new();
        let mut unreadable: usize = 0;
        let mut offset: u32 = 0;
        loop {
            let mut request = ListRequest::page("vm", offset, page_length);
            request.filter = filter.clone();
            let page = client.list::<ListedVm>(&request).await?;
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
            // Trimmed VM by VM as the page is decoded ([`ListedVm`]). A VM listed twice (a
            // server that ignores `offset`, or entities shifting between pages) is kept once.
            for ListedVm(vm) in page.entities {
                if let Some(uuid) = vm.uuid().map(str::to_ascii_lowercase)
                    && !seen.insert(uuid)
                {
                    continue;
                }
                vms.push(vm);
            }
            let done = match page.metadata.total_matches {
                Some(total) => received == 0 || u64::from(offset) >= total,
                None => received < page_length as usize,
            };
            // A page that adds nothing new ends the listing: otherwise a server that ignores
            // `offset` (real `hosts/list` does, CAPX #577) would be paged forever.
            if done || (vms.len() == before && new_skipped == 0) {
                if let Some(gauge) = &self.state.unreadable {
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

    fn vm(uuid: &str, name: &str, description: Option<&str>, created: &str) -> Vm {
        serde_json::from_value(json!({
            "metadata": {"kind": "vm", "uuid": uuid, "creation_time": created},
            "spec": {"name": name, "description": description,
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
        let snapshot = InventorySnapshot::new(vec![listed], VmNameScope::of([("n", None)]));
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
    fn a_listed_page_holds_its_vms_trimmed_and_still_skips_an_unreadable_one() {
        let page: prism_client::v3::ListResponse<ListedVm> = serde_json::from_value(json!({
            "metadata": {"kind": "vm", "total_matches": 2},
            "entities": [
                {"metadata": {"kind": "vm", "uuid": "a-1"},
                 "spec": {"name": "n", "resources": {"num_sockets": 1, "num_vcpus_per_socket": 1,
                     "memory_size_mib": 2048, "power_state": "ON", "vga_console_enabled": true,
                     "guest_customization": {"sysprep": {"unattend_xml": "PHhtbD4="}}}},
                 "status": {"state": "COMPLETE", "execution_context": {"task_uuid": ["t-1"]}}},
                {"metadata": {"kind": "vm", "uuid": "b-2"}, "spec": "not a spec"},
            ],
        }))
        .unwrap();
        assert_eq!(page.skipped.len(), 1);
        assert_eq!(page.skipped[0].uuid.as_deref(), Some("b-2"));
        let [ListedVm(vm)] = &page.entities[..] else {
            panic!("one readable VM");
        };
        let text = serde_json::to_string(vm).unwrap();
        assert!(!text.contains("unattend_xml"), "{text}");
        assert!(!text.contains("vga_console_enabled"), "{text}");
        assert!(!text.contains("execution_context"), "{text}");
        assert_eq!(vm.uuid(), Some("a-1"));
    }

    #[test]
    fn identity_markers_are_indexed_for_plan_to_judge() {
        let marker = "openshift-machine: ns/m-1 uid=uid-1";
        let snapshot = InventorySnapshot::new(
            vec![
                vm("B-2", "m-1", Some(marker), "2024-01-02T00:00:00Z"),
                vm("a-1", "m-1", Some(marker), "2024-01-01T00:00:00Z"),
                vm("c-3", "m-2", Some("hand-made"), "2024-01-01T00:00:00Z"),
                vm("d-4", "m-3", None, "2024-01-01T00:00:00Z"),
            ],
            VmNameScope::of([("m-1", Some("m"))]),
        );
        assert_eq!(snapshot.len(), 4);
        let mut marked: Vec<String> = snapshot
            .marked_for("uid-1")
            .into_iter()
            .map(|vm| vm.uuid)
            .collect();
        marked.sort();
        assert_eq!(marked, ["a-1", "b-2"]);
        assert_eq!(snapshot.marked_for("uid-2"), Vec::new());
        assert!(
            snapshot.vm("b-2").is_some(),
            "UUIDs compare case-insensitively"
        );
    }

    #[test]
    fn only_the_scopes_vms_are_kept() {
        // What Prism's partial match returns for `vm_name==win-` besides the cluster's own.
        let snapshot = InventorySnapshot::new(
            vec![
                vm("a", "win-abcde", None, "2024-01-01T00:00:00Z"),
                vm("b", "old-win-abcde", None, "2024-01-01T00:00:00Z"),
                vm("c", "winx", None, "2024-01-01T00:00:00Z"),
            ],
            VmNameScope::of([("win-abcde", Some("win"))]),
        );
        assert_eq!(snapshot.len(), 1);
        assert!(snapshot.vm("a").is_some());
        assert!(snapshot.covers(&NameClause::of_machine("win-zzzzz", Some("win"))));
        assert!(!snapshot.covers(&NameClause::of_machine("lin-zzzzz", Some("lin"))));
    }

    #[test]
    fn the_clusters_vms_without_a_machine_are_counted() {
        let categorised = |uuid: &str, name: &str, owner: &str| {
            let mut vm = vm(uuid, name, None, "2024-01-01T00:00:00Z");
            vm.metadata.categories = Some(std::collections::BTreeMap::from([(
                format!("kubernetes-io-cluster-{owner}"),
                "owned".to_owned(),
            )]));
            vm
        };
        let mut scope = VmNameScope::of([("win-abcde", Some("win"))]);
        scope.add_cluster_id("ocp");
        let snapshot = InventorySnapshot::new(
            vec![
                categorised("a", "win-abcde", "ocp"),
                categorised("b", "win-left1", "ocp"),
                categorised("c", "win-other", "another-cluster"),
                vm("d", "win-nocat", None, "2024-01-01T00:00:00Z"),
            ],
            scope,
        );
        assert_eq!(snapshot.len(), 4);
        assert_eq!(snapshot.orphans(), 1, "win-left1 only");
    }
}
