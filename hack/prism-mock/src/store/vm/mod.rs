//! VMs: what the store keeps of a VM, and every request on one. A VM body is validated as real Prism
//! rejects requests and filled with server defaults (`prepare`, with `disks`, `nics`, `gpus` and `guest`),
//! committed to the store (`commit`), created, updated, deleted and cloned through v3 (`requests`), changed as
//! its tasks end and its guest boots (`lifecycle`), and rendered in the v3 shapes (`render`).

mod commit;
mod disks;
mod gpus;
mod guest;
mod lifecycle;
mod nics;
mod prepare;
mod render;
mod requests;

use std::net::Ipv4Addr;
use std::time::Instant;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::seed::GuestOs;

pub use guest::GuestCustomization;

const KIND: &str = "vm";

/// What the guest currently reports on its NICs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum AddressPhase {
    /// Nothing yet (booting, powered off).
    None,
    /// Windows APIPA misbehaviour: a 169.254.x.y address on the first NIC only.
    Apipa,
    /// The pool addresses.
    Real,
    /// The pool addresses plus a hybrid-overlay address on the first NIC.
    Overlay,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NicRuntime {
    pub(crate) uuid: String,
    pub(crate) subnet_uuid: String,
    pub(crate) ip: Option<u32>,
    pub(crate) assigned: bool,
}

/// Metadata fields a client controls.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct VmMeta {
    pub(crate) categories: Map<String, Value>,
    pub(crate) categories_mapping: Map<String, Value>,
    pub(crate) use_categories_mapping: bool,
    pub(crate) project: Option<Value>,
}

/// What a `GET` of a VM still shows for a while after its task ended (the store's read lag).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StaleView {
    pub(crate) until: Instant,
    pub(crate) state: &'static str,
    pub(crate) power_state: &'static str,
}

#[derive(Debug, Clone)]
pub(crate) struct Vm {
    pub(crate) uuid: String,
    pub(crate) seq: u64,
    pub(crate) spec: Value,
    pub(crate) meta: VmMeta,
    pub(crate) spec_version: u64,
    /// `metadata.entity_version` (a string in answers): "1" beside spec_version 0 on a new VM (get_vm.json);
    /// moves on every change, including one made outside v3 (see [`Store::edit_elsewhere`]).
    pub(crate) entity_version: u64,
    /// The create task ended successfully (or the VM was seeded): it appears in lists.
    pub(crate) listed: bool,
    /// With a list lag, the moment a listed VM starts to appear in lists.
    pub(crate) listed_from: Option<Instant>,
    pub(crate) pending_updates: u32,
    pub(crate) deleting: Option<String>,
    pub(crate) error: Option<String>,
    pub(crate) task_uuids: Vec<String>,
    pub(crate) powered_on: bool,
    pub(crate) boot_gen: u64,
    pub(crate) phase: AddressPhase,
    /// The link-local address a Windows guest reports first under the APIPA misbehaviour (drawn at create).
    pub(crate) apipa: u32,
    pub(crate) overlay: Option<u32>,
    pub(crate) nics: Vec<NicRuntime>,
    pub(crate) gpus: Vec<(String, usize)>,
    pub(crate) os: GuestOs,
    pub(crate) guest: Option<GuestCustomization>,
    pub(crate) creation_time: String,
    pub(crate) last_update_time: String,
    pub(crate) host_uuid: Option<String>,
    pub(crate) bios_uuid: String,
    /// Under a read lag: the state and power state a GET shows until then.
    pub(crate) stale_view: Option<StaleView>,
}

impl Vm {
    pub(crate) fn name(&self) -> &str {
        self.spec.get("name").and_then(Value::as_str).unwrap_or("")
    }

    pub(crate) fn cluster_uuid(&self) -> &str {
        self.spec
            .pointer("/cluster_reference/uuid")
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    /// `status.state` as a `GET` shows it: `PENDING` until the task that makes the VM ends (and
    /// while an update runs), then `COMPLETE`; v3 clients waited for a created VM by reading it
    /// until it was `COMPLETE` (openshift/machine-api-provider-nutanix `pkg/client/state.go`
    /// `WaitForGetVMComplete`, uncalled since its 9df9b5f2 of October 2024: it now waits for the
    /// create task; nutanix-cloud-native/packer-plugin-nutanix `builder/nutanix/driver.go` up to
    /// daf8428, before its February 2026 move to v4), and `ERROR` carries `message_list` (the
    /// latter).
    pub(crate) fn state(&self) -> &'static str {
        if self.deleting.is_some() {
            "DELETE_PENDING"
        } else if self.error.is_some() {
            "ERROR"
        } else if !self.listed || self.pending_updates > 0 {
            "PENDING"
        } else {
            "COMPLETE"
        }
    }

    pub(crate) fn power_state(&self) -> &'static str {
        if self.powered_on { "ON" } else { "OFF" }
    }

    /// The addresses the guest reports now, per NIC, as (ip, type).
    pub(crate) fn reported_addresses(&self) -> Vec<Vec<(String, &'static str)>> {
        self.nics
            .iter()
            .enumerate()
            .map(|(index, nic)| {
                let mut list = Vec::new();
                match self.phase {
                    AddressPhase::None => {}
                    AddressPhase::Apipa => {
                        if index == 0 {
                            list.push((Ipv4Addr::from(self.apipa).to_string(), "LEARNED"));
                        }
                    }
                    AddressPhase::Real | AddressPhase::Overlay => {
                        if let Some(ip) = nic.ip {
                            list.push((
                                Ipv4Addr::from(ip).to_string(),
                                if nic.assigned { "ASSIGNED" } else { "LEARNED" },
                            ));
                        }
                        if let (AddressPhase::Overlay, 0, Some(ip)) =
                            (self.phase, index, self.overlay)
                        {
                            list.push((Ipv4Addr::from(ip).to_string(), "LEARNED"));
                        }
                    }
                }
                list
            })
            .collect()
    }
}

/// A VM body validated and filled with server defaults, not yet committed.
#[derive(Debug)]
struct Prepared {
    spec: Value,
    meta: VmMeta,
    nics: Vec<NicPlan>,
    gpus: Vec<(String, usize)>,
    guest: Option<GuestCustomization>,
    cluster_uuid: String,
    boot_image: Option<String>,
}

#[derive(Debug)]
struct NicPlan {
    uuid: String,
    subnet_uuid: String,
    requested_ip: Option<u32>,
    kept: Option<NicRuntime>,
}

type Details = Vec<(String, String)>;

fn detail(details: &mut Details, field: impl Into<String>, message: impl Into<String>) {
    details.push((field.into(), message.into()));
}

/// `metadata.spec_hash` as real lists show it (list_vm.json, list_subnet.json, list_cluster.json).
pub(crate) const SPEC_HASH: &str = "00000000000000000000000000000000000000000000000000";

/// A UUID derived from a name, without drawing from the seeded generator (so adding one changes no other UUID).
pub(crate) fn derived_uuid(namespace: &str, key: &str) -> String {
    let hash = |seed: u64| {
        namespace
            .bytes()
            .chain([0])
            .chain(key.bytes())
            .fold(seed, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
            })
    };
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&hash(0xcbf2_9ce4_8422_2325).to_be_bytes());
    bytes[8..].copy_from_slice(&hash(0x84222325_cbf29ce4).to_be_bytes());
    uuid::Builder::from_random_bytes(bytes)
        .into_uuid()
        .to_string()
}
