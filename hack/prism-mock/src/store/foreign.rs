//! Foreign VMs: the other tenants of a shared Prism Central.
//!
//! A Prism Central manages every VM of the Prism Elements registered to it, whoever made them: a
//! single Prism Central VM up to 12,000 VMs, a scale-out one up to 25,000 powered-on VMs
//! (Nutanix's Prism Central scale-out, AOS 5.6; vmwaremine.com, "Nutanix Prism Central scale
//! out", 2018), and `POST /vms/list` answers all of them to a client that does not filter
//! (CAPX lists every VM and compares names client-side, nutanix-cloud-native/
//! cluster-api-provider-nutanix#485, reference/02 §2). A seed's `foreign_vms` adds that many VMs
//! that belong to no Machine: `foreign-vm-000001`, … powered on, `COMPLETE`, listed, spread over
//! the seeded subnets (and so their clusters), each with a description of its own and no
//! categories.
//!
//! They are kept lean, so that 100,000 of them cost a few MiB: nothing per VM but its UUID in an
//! index and one flag. Everything else (name, description, placement, NIC and disk UUIDs, MAC) is
//! derived from its number, and its [`Vm`] is built only to answer a GET or a list page, through
//! the same rendering as every other VM. Nothing is drawn from the seeded generator, so a seed with
//! and without them gives every other VM the same UUIDs. A request that changes one (PUT, DELETE,
//! an out-of-band change) first turns it into an ordinary VM ([`Store::make_ordinary`]).
//!
//! Their NICs report no address: they take none from the seeded pools, which stay the Machines'
//! (the mock's addresses are pool-like, see the README), so they are as a guest is before it
//! reports one.

use std::borrow::Cow;
use std::collections::HashMap;
use std::time::Instant;

use serde_json::{Value, json};
use uuid::Uuid;

use super::Store;
use super::derived_uuid;
use super::record::{AddressPhase, NicRuntime, Vm, VmMeta};
use crate::seed::{GuestOs, MAX_FOREIGN_VMS, SeedError};

/// Start of every foreign VM's name. No name the sandbox, the examples or a MachineSet gives its
/// Machines (`<set>-<suffix>`) is a part of `foreign-vm-NNNNNN`, so a filter of theirs matches
/// none of these.
pub(crate) const NAME_PREFIX: &str = "foreign-vm-";
const NAME_LEN: usize = NAME_PREFIX.len() + 6;

/// What foreign VMs do, for their descriptions.
const ROLES: [&str; 5] = [
    "build agent",
    "database",
    "web server",
    "jump host",
    "test runner",
];
/// How many teams own them, for their descriptions.
const TEAMS: u32 = 23;

/// A foreign VM's name, written without allocating (a filtered list reads every one).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ForeignName([u8; NAME_LEN]);

impl ForeignName {
    /// The name of the VM at `index` (0-based): numbers start at 1.
    fn of(index: u32) -> Self {
        let mut bytes = [b'0'; NAME_LEN];
        bytes[..NAME_PREFIX.len()].copy_from_slice(NAME_PREFIX.as_bytes());
        let mut number = index + 1;
        for digit in bytes[NAME_PREFIX.len()..].iter_mut().rev() {
            *digit = b'0' + (number % 10) as u8;
            number /= 10;
        }
        Self(bytes)
    }

    pub(crate) fn as_str(&self) -> &str {
        // ASCII by construction.
        std::str::from_utf8(&self.0).unwrap_or(NAME_PREFIX)
    }
}

/// Where a share of the foreign VMs sits: one per seeded subnet on a Prism Element.
#[derive(Debug)]
struct Placement {
    /// The spec a create of such a VM gets, server defaults filled; its name, description, disk
    /// and NIC UUIDs and MAC are each VM's own.
    spec: Value,
    cluster_uuid: String,
    subnet_uuid: String,
    /// Where a powered-on VM of the cluster sits (the cluster's first host, as for any VM).
    host_uuid: Option<String>,
}

/// The foreign VMs of a store.
#[derive(Debug, Default)]
pub(crate) struct ForeignVms {
    /// `seq` of the first; the one at index `i` has `first_seq + i`, so they list in creation
    /// order among the others.
    first_seq: u64,
    placements: Vec<Placement>,
    index_of: HashMap<Uuid, u32>,
    /// Whether each is still foreign (lean): false once a request made it an ordinary VM.
    lean: Vec<bool>,
    /// `creation_time` of all of them (seeded together).
    created: String,
}

impl ForeignVms {
    /// The index of the lean foreign VM with this UUID (lower-case, as every UUID the mock answers).
    fn index_of(&self, uuid: &str) -> Option<u32> {
        let parsed = Uuid::try_parse(uuid).ok()?;
        let mut buffer = Uuid::encode_buffer();
        if parsed.hyphenated().encode_lower(&mut buffer) != uuid {
            return None;
        }
        let index = *self.index_of.get(&parsed)?;
        self.lean
            .get(index as usize)
            .copied()
            .unwrap_or(false)
            .then_some(index)
    }

    fn placement(&self, index: u32) -> &Placement {
        // Indices exist only when there are placements (see `seed_foreign_vms`).
        &self.placements[index as usize % self.placements.len()]
    }

    /// The lean ones, in creation order.
    fn lean_indices(&self) -> impl Iterator<Item = u32> + '_ {
        (0..)
            .zip(&self.lean)
            .filter_map(|(i, lean)| lean.then_some(i))
    }

    /// How many lean ones have a NIC on the subnet.
    pub(crate) fn on_subnet(&self, subnet_uuid: &str) -> usize {
        self.lean_indices()
            .filter(|i| self.placement(*i).subnet_uuid == subnet_uuid)
            .count()
    }
}

fn uuid_of(name: &ForeignName) -> String {
    derived_uuid("foreign-vm", name.as_str())
}

/// A VM in a list: an ordinary one, or a lean foreign one whose [`Vm`] is built only if it is
/// answered.
#[derive(Debug)]
pub(crate) enum Listed<'a> {
    Ordinary(&'a Vm),
    Foreign {
        index: u32,
        name: ForeignName,
        cluster_uuid: &'a str,
    },
}

impl Listed<'_> {
    pub(crate) fn name(&self) -> &str {
        match self {
            Self::Ordinary(vm) => vm.name(),
            Self::Foreign { name, .. } => name.as_str(),
        }
    }

    pub(crate) fn power_state(&self) -> &'static str {
        match self {
            Self::Ordinary(vm) => vm.power_state(),
            Self::Foreign { .. } => "ON",
        }
    }

    pub(crate) fn cluster_uuid(&self) -> &str {
        match self {
            Self::Ordinary(vm) => vm.cluster_uuid(),
            Self::Foreign { cluster_uuid, .. } => cluster_uuid,
        }
    }
}

impl Store {
    /// Adds `count` foreign VMs, spread over the subnets of the Prism Elements in turn.
    pub(crate) fn seed_foreign_vms(&mut self, count: u32) -> Result<(), SeedError> {
        if count == 0 {
            return Ok(());
        }
        if count > MAX_FOREIGN_VMS {
            return Err(SeedError::TooMany(format!(
                "foreign_vms: {count} is more than {MAX_FOREIGN_VMS}"
            )));
        }
        let subnets: Vec<(String, String)> = self
            .subnets
            .iter()
            .filter_map(|s| s.pointer("/metadata/uuid").and_then(Value::as_str))
            .filter_map(|s| Some((s.to_owned(), self.subnet_cluster(s)?.to_owned())))
            .filter(|(_, cluster)| self.is_prism_element(cluster))
            .collect();
        if subnets.is_empty() {
            return Err(SeedError::Reference(
                "foreign_vms: no subnet on a Prism Element to place them on".to_owned(),
            ));
        }
        let mut placements = Vec::new();
        for (subnet_uuid, cluster_uuid) in subnets {
            let body = json!({
                "name": NAME_PREFIX,
                "cluster_reference": {"kind": "cluster", "uuid": cluster_uuid},
                "resources": {
                    "num_sockets": 2,
                    "memory_size_mib": 4096,
                    "power_state": "ON",
                    "disk_list": [{"disk_size_mib": 40960}],
                    "nic_list": [{"subnet_reference": {"kind": "subnet", "uuid": subnet_uuid}}],
                },
            });
            let spec = self
                .filled_spec(&body)
                .map_err(|message| SeedError::Reference(format!("foreign_vms: {message}")))?;
            placements.push(Placement {
                spec,
                host_uuid: self.first_host_of(&cluster_uuid),
                cluster_uuid,
                subnet_uuid,
            });
        }
        let first_seq = self.next_vm_seq;
        self.next_vm_seq += u64::from(count);
        let index_of = (0..count)
            .filter_map(|i| Some((Uuid::try_parse(&uuid_of(&ForeignName::of(i))).ok()?, i)))
            .collect();
        self.foreign = ForeignVms {
            first_seq,
            placements,
            index_of,
            lean: vec![true; count as usize],
            created: self.wall(Instant::now()),
        };
        Ok(())
    }

    /// Every VM in creation order, ordinary ones and lean foreign ones.
    pub(crate) fn all_vms(&self) -> impl Iterator<Item = Listed<'_>> {
        let mut ordinary = self
            .vm_order
            .iter()
            .filter_map(|(seq, uuid)| Some((*seq, self.vms.get(uuid)?)))
            .peekable();
        let foreign = &self.foreign;
        let mut lean = foreign
            .lean_indices()
            .map(|i| (foreign.first_seq + u64::from(i), i))
            .peekable();
        std::iter::from_fn(move || {
            let foreign_first = match (ordinary.peek(), lean.peek()) {
                (Some((a, _)), Some((b, _))) => b < a,
                (None, Some(_)) => true,
                _ => false,
            };
            if foreign_first {
                lean.next().map(|(_, index)| Listed::Foreign {
                    index,
                    name: ForeignName::of(index),
                    cluster_uuid: &foreign.placement(index).cluster_uuid,
                })
            } else {
                ordinary.next().map(|(_, vm)| Listed::Ordinary(vm))
            }
        })
    }

    /// The foreign VM at `index`, as an ordinary VM with the same state would be.
    pub(crate) fn foreign_vm(&self, index: u32) -> Vm {
        let placement = self.foreign.placement(index);
        let name = ForeignName::of(index);
        let uuid = uuid_of(&name);
        let nic_uuid = derived_uuid("foreign-vm-nic", name.as_str());
        let mut spec = placement.spec.clone();
        if let Some(obj) = spec.as_object_mut() {
            obj.insert("name".to_owned(), json!(name.as_str()));
            obj.insert(
                "description".to_owned(),
                json!(format!(
                    "{} of team-{:02} ({})",
                    ROLES[index as usize % ROLES.len()],
                    index % TEAMS + 1,
                    name.as_str()
                )),
            );
        }
        if let Some(disk) = spec
            .pointer_mut("/resources/disk_list/0")
            .and_then(Value::as_object_mut)
        {
            disk.insert(
                "uuid".to_owned(),
                json!(derived_uuid("foreign-vm-disk", name.as_str())),
            );
        }
        if let Some(nic) = spec
            .pointer_mut("/resources/nic_list/0")
            .and_then(Value::as_object_mut)
        {
            nic.insert("uuid".to_owned(), json!(nic_uuid));
            let [_, a, b, c] = (index + 1).to_be_bytes();
            nic.insert(
                "mac_address".to_owned(),
                json!(format!("50:6b:8d:{a:02x}:{b:02x}:{c:02x}")),
            );
        }
        Vm {
            bios_uuid: uuid.clone(),
            uuid,
            seq: self.foreign.first_seq + u64::from(index),
            spec,
            meta: VmMeta::default(),
            spec_version: 0,
            entity_version: 1,
            listed: true,
            listed_from: None,
            pending_updates: 0,
            deleting: None,
            error: None,
            task_uuids: Vec::new(),
            powered_on: true,
            boot_gen: 1,
            phase: AddressPhase::Real,
            // Shown by Windows guests only.
            apipa: 0,
            static_ipv4: None,
            overlay: None,
            nics: vec![NicRuntime {
                uuid: nic_uuid,
                subnet_uuid: placement.subnet_uuid.clone(),
                managed: self.is_managed_subnet(&placement.subnet_uuid),
                ip: None,
                assigned: false,
            }],
            gpus: Vec::new(),
            os: GuestOs::Linux,
            guest: None,
            creation_time: self.foreign.created.clone(),
            last_update_time: self.foreign.created.clone(),
            host_uuid: placement.host_uuid.clone(),
            stale_view: None,
        }
    }

    /// The VM with this UUID, ordinary or foreign.
    pub(crate) fn vm_or_foreign(&self, uuid: &str) -> Option<Cow<'_, Vm>> {
        match self.vms.get(uuid) {
            Some(vm) => Some(Cow::Borrowed(vm)),
            None => Some(Cow::Owned(self.foreign_vm(self.foreign.index_of(uuid)?))),
        }
    }

    /// Makes a foreign VM an ordinary one, before a request changes it (nothing if the UUID is not
    /// a lean foreign VM's). It keeps its place in lists.
    pub(crate) fn make_ordinary(&mut self, uuid: &str) {
        let Some(index) = self.foreign.index_of(uuid) else {
            return;
        };
        let vm = self.foreign_vm(index);
        if let Some(lean) = self.foreign.lean.get_mut(index as usize) {
            *lean = false;
        }
        self.vm_order.insert(vm.seq, vm.uuid.clone());
        self.vms.insert(vm.uuid.clone(), vm);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_count_from_one_with_six_digits() {
        assert_eq!(ForeignName::of(0).as_str(), "foreign-vm-000001");
        assert_eq!(ForeignName::of(41).as_str(), "foreign-vm-000042");
        assert_eq!(
            ForeignName::of(MAX_FOREIGN_VMS - 1).as_str(),
            "foreign-vm-999999"
        );
    }
}
