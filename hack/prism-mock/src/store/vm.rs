//! VMs: validation as real Prism rejects requests, server defaults, create/update/delete/clone, guest boot and
//! addresses, rendering in the v3 shapes.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use base64::Engine as _;
use rand::Rng;
use serde::Serialize;
use serde_json::{Map, Value, json};

use super::Store;
use super::entities::reference;
use super::foreign::Listed;
use super::list::ListQuery;
use super::net::Ipv4Net;
use super::refusal::Refusal;
use super::schema;
use super::tasks::{Effect, FailOutcome, FailPlan};
use super::templates::secure_boot_cdrom_refusal;
use crate::behaviour::DeployTaskShape;
use crate::seed::{GuestOs, SeedError, VmSeed};

const KIND: &str = "vm";
/// Size limits from the v3 swagger (characters of the base64 text as sent).
const MAX_USER_DATA: usize = 128_000;
const MAX_META_DATA: usize = 32_000;
const MAX_UNATTEND_XML: usize = 32_000;
/// `vm.name` maxLength in the v3 swagger (`vm_clone_override_spec.name` has 80, checked in `schema`).
const MAX_NAME: usize = 256;

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

/// A VM's guest customization, decoded from base64, as the guest would receive it. `Debug` shows only sizes:
/// user data carries secrets.
#[derive(Clone, PartialEq, Eq, Serialize)]
pub struct GuestCustomization {
    /// `cloud_init` or `sysprep`.
    pub kind: String,
    /// Decoded cloud-init user data.
    pub user_data: Option<String>,
    /// Decoded cloud-init meta data.
    pub meta_data: Option<String>,
    /// Decoded sysprep unattend.xml.
    pub unattend_xml: Option<String>,
    /// Sysprep install type (PREPARED or FRESH).
    pub install_type: Option<String>,
    /// `custom_key_values` as sent (not decoded).
    pub custom_key_values: Option<Value>,
    /// `is_overridable` as sent.
    pub is_overridable: bool,
}

impl std::fmt::Debug for GuestCustomization {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let size = |text: &Option<String>| text.as_ref().map(|t| format!("<{} bytes>", t.len()));
        f.debug_struct("GuestCustomization")
            .field("kind", &self.kind)
            .field("user_data", &size(&self.user_data))
            .field("meta_data", &size(&self.meta_data))
            .field("unattend_xml", &size(&self.unattend_xml))
            .field("install_type", &self.install_type)
            .field(
                "custom_key_values",
                &self.custom_key_values.as_ref().map(|_| "<redacted>"),
            )
            .field("is_overridable", &self.is_overridable)
            .finish()
    }
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

/// Name of the storage container disks land on (the recorded VM's, get_vm.json).
const DEFAULT_CONTAINER: &str = "SelfServiceContainer";

/// Server defaults of `spec.resources` a real GET shows on a VM created without them (get_vm.json, a VM created
/// by create_vm.json's request, which sets none of these).
fn fill_resource_defaults(res: &mut Map<String, Value>) {
    let defaults = [
        ("apc_config", json!({"enabled": false})),
        ("memory_overcommit_enabled", json!(false)),
        ("gpu_console_enabled", json!(false)),
        ("is_vcpu_hard_pinned", json!(false)),
        ("is_agent_vm", json!(false)),
        ("disable_branding", json!(false)),
        ("enable_cpu_passthrough", json!(false)),
        ("hardware_virtualization_enabled", json!(false)),
        ("vtpm_config", json!({"vtpm_enabled": false})),
        ("gpu_list", json!([])),
        ("vga_console_enabled", json!(true)),
        ("vnuma_config", json!({"num_vnuma_nodes": 0})),
        ("serial_port_list", json!([])),
        ("cpu_hotplug_enabled", json!(true)),
        ("scsi_controller_enabled", json!(true)),
    ];
    for (key, value) in defaults {
        if res.get(key).is_none_or(Value::is_null) {
            res.insert(key.to_owned(), value);
        }
    }
    if let Some(mechanism) = res
        .get_mut("power_state_mechanism")
        .and_then(Value::as_object_mut)
        && mechanism
            .get("guest_transition_config")
            .is_none_or(Value::is_null)
    {
        mechanism.insert(
            "guest_transition_config".to_owned(),
            json!({"enable_script_exec": false, "should_fail_on_script_failure": false}),
        );
    }
}

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

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

fn int_field(
    res: &mut Map<String, Value>,
    name: &str,
    default: i64,
    max: i64,
    details: &mut Details,
) -> i64 {
    let value = match res.get(name) {
        None | Some(Value::Null) => {
            res.insert(name.to_owned(), json!(default));
            return default;
        }
        Some(v) => v.as_i64(),
    };
    match value {
        Some(n) if (1..=max).contains(&n) => n,
        Some(n) => {
            detail(
                details,
                format!("spec.resources.{name}"),
                format!("{n} is out of range 1..={max}"),
            );
            default
        }
        None => {
            detail(
                details,
                format!("spec.resources.{name}"),
                "must be an integer",
            );
            default
        }
    }
}

fn enum_field(
    res: &mut Map<String, Value>,
    path: &str,
    name: &str,
    default: &str,
    allowed: &[&str],
    details: &mut Details,
) -> String {
    match res.get(name) {
        None | Some(Value::Null) => {
            res.insert(name.to_owned(), json!(default));
            default.to_owned()
        }
        Some(Value::String(s)) if allowed.contains(&s.as_str()) => s.clone(),
        Some(other) => {
            detail(
                details,
                format!("{path}.{name}"),
                format!("{other} is not one of {}", allowed.join(", ")),
            );
            default.to_owned()
        }
    }
}

fn decode_b64(text: &str, field: &str, max: usize, details: &mut Details) -> Option<String> {
    if text.len() > max {
        detail(
            details,
            field,
            format!(
                "is {} characters long, more than the maximum {max}",
                text.len()
            ),
        );
        return None;
    }
    match b64().decode(text) {
        Ok(bytes) => Some(String::from_utf8_lossy(&bytes).into_owned()),
        Err(_) => {
            detail(details, field, "is not valid base64");
            None
        }
    }
}

fn mac_from(rng: &mut rand::rngs::StdRng) -> String {
    let bytes: [u8; 3] = rng.random();
    format!(
        "50:6b:8d:{:02x}:{:02x}:{:02x}",
        bytes[0], bytes[1], bytes[2]
    )
}

fn parse_ipv4(text: &str) -> Option<u32> {
    text.parse::<Ipv4Addr>().ok().map(u32::from)
}

impl Store {
    /// Validates a VM spec and metadata the way real Prism does and fills server defaults.
    /// `existing` is the VM being updated (PUT), with its NICs.
    fn prepare_vm(
        &mut self,
        spec_in: &Value,
        metadata_in: &Value,
        existing: Option<&Vm>,
    ) -> Result<Prepared, Details> {
        let mut details = Details::new();
        let Some(spec_obj) = spec_in.as_object() else {
            return Err(vec![(
                "spec".to_owned(),
                "is required and must be an object".to_owned(),
            )]);
        };
        let mut spec = spec_obj.clone();
        spec.remove("status");
        match spec.get("name").and_then(Value::as_str) {
            Some(name) if !name.is_empty() && name.chars().count() <= MAX_NAME => {}
            Some(_) => detail(
                &mut details,
                "spec.name",
                format!("must be 1 to {MAX_NAME} characters"),
            ),
            None => detail(&mut details, "spec.name", "is required"),
        }
        let cluster_uuid = spec
            .get("cluster_reference")
            .and_then(|c| c.get("uuid"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        if cluster_uuid.is_empty() {
            detail(
                &mut details,
                "spec.cluster_reference",
                "is required (the mock does not pick a cluster)",
            );
        } else if !self.is_prism_element(&cluster_uuid) {
            detail(
                &mut details,
                "spec.cluster_reference.uuid",
                format!("'{cluster_uuid}' is not a Prism Element cluster"),
            );
        }
        if let Some(existing) = existing
            && existing.cluster_uuid() != cluster_uuid
        {
            detail(
                &mut details,
                "spec.cluster_reference",
                "cannot be changed after create",
            );
        }
        let cluster_name = self.clusters.name_of(&cluster_uuid).map(str::to_owned);
        spec.insert(
            "cluster_reference".to_owned(),
            reference("cluster", &cluster_uuid, cluster_name.as_deref()),
        );

        let mut res = match spec.get("resources") {
            Some(Value::Object(map)) => map.clone(),
            None | Some(Value::Null) => Map::new(),
            Some(_) => {
                detail(&mut details, "spec.resources", "must be an object");
                Map::new()
            }
        };
        int_field(&mut res, "num_sockets", 1, 240, &mut details);
        int_field(&mut res, "num_vcpus_per_socket", 1, 128, &mut details);
        int_field(&mut res, "num_threads_per_core", 1, 2, &mut details);
        int_field(&mut res, "memory_size_mib", 2048, 4_194_304, &mut details);
        let machine_type = enum_field(
            &mut res,
            "spec.resources",
            "machine_type",
            "PC",
            &["PC", "Q35", "PSERIES"],
            &mut details,
        );
        enum_field(
            &mut res,
            "spec.resources",
            "power_state",
            "OFF",
            &["ON", "OFF"],
            &mut details,
        );
        if !res.contains_key("power_state_mechanism") {
            res.insert(
                "power_state_mechanism".to_owned(),
                json!({"mechanism": "HARD"}),
            );
        }
        if !res.contains_key("hardware_clock_timezone") {
            res.insert("hardware_clock_timezone".to_owned(), json!("UTC"));
        }
        let mut boot = match res.get("boot_config") {
            Some(Value::Object(map)) => map.clone(),
            _ => Map::new(),
        };
        let boot_type = enum_field(
            &mut boot,
            "spec.resources.boot_config",
            "boot_type",
            "LEGACY",
            &["LEGACY", "UEFI", "SECURE_BOOT"],
            &mut details,
        );
        // The recorded UEFI VM shows the default order too (get_vm.json).
        if !boot.contains_key("boot_device_order_list") {
            boot.insert(
                "boot_device_order_list".to_owned(),
                json!(["CDROM", "DISK", "NETWORK"]),
            );
        }
        if boot_type == "SECURE_BOOT" && machine_type != "Q35" {
            detail(
                &mut details,
                "spec.resources.machine_type",
                "Machine type must be set to Q35 for secure boot",
            );
        }
        res.insert("boot_config".to_owned(), Value::Object(boot));
        // A vTPM needs UEFI: Prism refuses the create of a Legacy BIOS VM with one
        // (nutanix/nutanix.ansible#529: "the API server will refuse the creation" when the boot
        // type is not UEFI; nutanix-cloud-native/packer-plugin-nutanix `builder/nutanix/config.go`
        // refuses it before asking: "vTPM is not supported with legacy boot type"). The wording
        // of the real refusal is not recorded; this one is the mock's.
        let vtpm_enabled = res
            .get("vtpm_config")
            .and_then(|v| v.get("vtpm_enabled"))
            .and_then(Value::as_bool)
            == Some(true);
        if vtpm_enabled && boot_type == "LEGACY" {
            detail(
                &mut details,
                "spec.resources.vtpm_config.vtpm_enabled",
                "vTPM is not supported with legacy boot type: use UEFI or SECURE_BOOT",
            );
        }
        fill_resource_defaults(&mut res);

        let boot_image = self.prepare_disks(
            &mut res,
            &machine_type,
            &cluster_uuid,
            existing,
            &mut details,
        );
        let nics = self.prepare_nics(&mut res, &cluster_uuid, existing, &mut details);
        let gpus = self.prepare_gpus(&res, &cluster_uuid, existing, &mut details);
        let guest = self.prepare_guest(&mut res, existing, &mut details);
        spec.insert("resources".to_owned(), Value::Object(res));
        let meta = self.prepare_meta(metadata_in, &mut details);
        if details.is_empty() {
            Ok(Prepared {
                spec: Value::Object(spec),
                meta,
                nics,
                gpus,
                guest,
                cluster_uuid,
                boot_image,
            })
        } else {
            Err(details)
        }
    }

    /// A spec as a create would fill it with server defaults, drawing nothing from the seeded
    /// generator (the disk and NIC UUIDs and MACs in it are the caller's to replace).
    pub(super) fn filled_spec(&mut self, spec: &Value) -> Result<Value, String> {
        let saved = self.rng.clone();
        let prepared = self.prepare_vm(spec, &json!({"kind": KIND}), None);
        self.rng = saved;
        prepared.map(|p| p.spec).map_err(|details| {
            details
                .into_iter()
                .map(|(f, m)| format!("{f}: {m}"))
                .collect::<Vec<_>>()
                .join("; ")
        })
    }

    fn prepare_disks(
        &mut self,
        res: &mut Map<String, Value>,
        machine_type: &str,
        cluster_uuid: &str,
        existing: Option<&Vm>,
        details: &mut Details,
    ) -> Option<String> {
        let existing_disks: HashMap<String, i64> = existing
            .and_then(|vm| {
                vm.spec
                    .pointer("/resources/disk_list")
                    .and_then(Value::as_array)
            })
            .into_iter()
            .flatten()
            .filter_map(|d| {
                Some((
                    d.get("uuid")?.as_str()?.to_owned(),
                    d.get("disk_size_mib").and_then(Value::as_i64).unwrap_or(0),
                ))
            })
            .collect();
        let mut disks: Vec<Value> = match res.get("disk_list") {
            Some(Value::Array(list)) => list.clone(),
            None | Some(Value::Null) => Vec::new(),
            Some(_) => {
                detail(details, "spec.resources.disk_list", "must be a list");
                Vec::new()
            }
        };
        let mut used_addresses: HashSet<(String, i64)> = HashSet::new();
        for disk in &disks {
            if let (Some(adapter), Some(index)) = (
                disk.pointer("/device_properties/disk_address/adapter_type")
                    .and_then(Value::as_str),
                disk.pointer("/device_properties/disk_address/device_index")
                    .and_then(Value::as_i64),
            ) && !used_addresses.insert((adapter.to_owned(), index))
            {
                detail(
                    details,
                    "spec.resources.disk_list",
                    format!("disk address {adapter}.{index} is used twice"),
                );
            }
        }
        let mut boot_image = None;
        for (i, disk) in disks.iter_mut().enumerate() {
            let field = format!("spec.resources.disk_list[{i}]");
            let Some(d) = disk.as_object_mut() else {
                detail(details, &field, "must be an object");
                continue;
            };
            let mut props = d
                .get("device_properties")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            let device_type = enum_field(
                &mut props,
                &format!("{field}.device_properties"),
                "device_type",
                "DISK",
                &["DISK", "CDROM", "VOLUME_GROUP"],
                details,
            );
            let mut address = props
                .get("disk_address")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            let default_adapter = if device_type == "CDROM" {
                if machine_type == "Q35" { "SATA" } else { "IDE" }
            } else {
                "SCSI"
            };
            let adapter = enum_field(
                &mut address,
                &format!("{field}.device_properties.disk_address"),
                "adapter_type",
                default_adapter,
                &["SCSI", "IDE", "PCI", "SATA", "SPAPR"],
                details,
            );
            if !address.contains_key("device_index") {
                let index = (0..)
                    .find(|n| !used_addresses.contains(&(adapter.clone(), *n)))
                    .unwrap_or(0);
                used_addresses.insert((adapter.clone(), index));
                address.insert("device_index".to_owned(), json!(index));
            }
            if device_type == "CDROM" && !matches!(adapter.as_str(), "IDE" | "SATA") {
                detail(
                    details,
                    format!("{field}.device_properties.disk_address.adapter_type"),
                    "a CDROM must be on IDE or SATA",
                );
            }
            if machine_type == "Q35" && adapter == "IDE" {
                detail(
                    details,
                    format!("{field}.device_properties.disk_address.adapter_type"),
                    "IDE disks are not supported with machine type Q35",
                );
            }
            props.insert("disk_address".to_owned(), Value::Object(address));
            d.insert("device_properties".to_owned(), Value::Object(props));
            if device_type == "DISK" {
                // Disks land on the cluster's default container (the recorded VM's disk names
                // SelfServiceContainer; the mock keeps no containers of its own, see the README).
                let storage = d.entry("storage_config").or_insert_with(|| json!({}));
                if let Some(storage) = storage.as_object_mut() {
                    storage
                        .entry("storage_container_reference")
                        .or_insert_with(|| {
                            json!({"kind": "storage_container",
                                "uuid": derived_uuid("storage_container", cluster_uuid),
                                "name": DEFAULT_CONTAINER})
                        });
                }
            }

            let mut image_size = None;
            match d.get("data_source_reference") {
                None | Some(Value::Null) => {}
                Some(source) => {
                    let kind = source.get("kind").and_then(Value::as_str).unwrap_or("");
                    let uuid = source.get("uuid").and_then(Value::as_str).unwrap_or("");
                    if kind != "image" {
                        detail(
                            details,
                            format!("{field}.data_source_reference.kind"),
                            format!("'{kind}' is not supported by the mock (only image)"),
                        );
                    } else if let Some(size) = self.image_size_mib(uuid) {
                        image_size = Some(size);
                        if device_type == "DISK" && boot_image.is_none() {
                            boot_image = Some(uuid.to_owned());
                        }
                    } else {
                        detail(
                            details,
                            format!("{field}.data_source_reference.uuid"),
                            format!("image '{uuid}' does not exist"),
                        );
                    }
                }
            }
            let given_bytes = d.get("disk_size_bytes").and_then(Value::as_i64);
            let size_mib = match d.get("disk_size_mib") {
                // A disk given by its size in bytes alone is accepted (`vm_disk` requires neither size);
                // rounding a size that is not a whole MiB up is the mock's choice.
                None | Some(Value::Null) => given_bytes
                    .map(|b| b.saturating_add((1 << 20) - 1) >> 20)
                    .or(image_size.map(|s| s as i64)),
                Some(v) => match v.as_i64() {
                    Some(n) => Some(n),
                    None => {
                        detail(
                            details,
                            format!("{field}.disk_size_mib"),
                            "must be an integer",
                        );
                        None
                    }
                },
            };
            if device_type == "DISK" {
                match size_mib {
                    None => detail(
                        details,
                        format!("{field}.disk_size_mib"),
                        "is required for a disk without an image",
                    ),
                    Some(n) if !(1..=67_108_864).contains(&n) => detail(
                        details,
                        format!("{field}.disk_size_mib"),
                        format!("{n} is out of range 1..=67108864"),
                    ),
                    Some(n) => {
                        if let Some(img) = image_size
                            && (n as u64) < img
                        {
                            detail(
                                details,
                                format!("{field}.disk_size_mib"),
                                format!("{n} is smaller than the image ({img} MiB)"),
                            );
                        }
                        if let Some(bytes) = given_bytes
                            && d.get("disk_size_mib").is_some_and(|m| !m.is_null())
                            && bytes != n.saturating_mul(1 << 20)
                        {
                            detail(
                                details,
                                format!("{field}.disk_size_bytes"),
                                "must equal disk_size_mib * 1048576",
                            );
                        }
                        d.insert("disk_size_mib".to_owned(), json!(n));
                        d.insert(
                            "disk_size_bytes".to_owned(),
                            json!(n.saturating_mul(1 << 20)),
                        );
                    }
                }
            }
            match d.get("uuid").and_then(Value::as_str).map(str::to_owned) {
                Some(uuid) => match existing_disks.get(&uuid) {
                    Some(old) => {
                        if let Some(n) = size_mib
                            && n < *old
                        {
                            detail(
                                details,
                                format!("{field}.disk_size_mib"),
                                format!("cannot shrink a disk ({old} MiB to {n} MiB)"),
                            );
                        }
                    }
                    None => detail(
                        details,
                        format!("{field}.uuid"),
                        format!("disk '{uuid}' does not belong to this VM"),
                    ),
                },
                None => {
                    let uuid = self.new_uuid();
                    d.insert("uuid".to_owned(), json!(uuid));
                }
            }
        }
        res.insert("disk_list".to_owned(), Value::Array(disks));
        boot_image
    }

    fn prepare_nics(
        &mut self,
        res: &mut Map<String, Value>,
        cluster_uuid: &str,
        existing: Option<&Vm>,
        details: &mut Details,
    ) -> Vec<NicPlan> {
        let existing_nics: HashMap<&str, &NicRuntime> = existing
            .map(|vm| vm.nics.iter().map(|n| (n.uuid.as_str(), n)).collect())
            .unwrap_or_default();
        let existing_macs: HashMap<String, String> = existing
            .and_then(|vm| {
                vm.spec
                    .pointer("/resources/nic_list")
                    .and_then(Value::as_array)
            })
            .into_iter()
            .flatten()
            .filter_map(|n| {
                Some((
                    n.get("uuid")?.as_str()?.to_owned(),
                    n.get("mac_address")?.as_str()?.to_owned(),
                ))
            })
            .collect();
        let mut nics: Vec<Value> = match res.get("nic_list") {
            Some(Value::Array(list)) => list.clone(),
            None | Some(Value::Null) => Vec::new(),
            Some(_) => {
                detail(details, "spec.resources.nic_list", "must be a list");
                Vec::new()
            }
        };
        let mut plans = Vec::new();
        let mut requested: HashSet<u32> = HashSet::new();
        for (i, nic) in nics.iter_mut().enumerate() {
            let field = format!("spec.resources.nic_list[{i}]");
            let Some(n) = nic.as_object_mut() else {
                detail(details, &field, "must be an object");
                continue;
            };
            let subnet_uuid = n
                .get("subnet_reference")
                .and_then(|s| s.get("uuid"))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            match self.subnet_cluster(&subnet_uuid) {
                None => detail(
                    details,
                    format!("{field}.subnet_reference.uuid"),
                    format!("subnet '{subnet_uuid}' does not exist"),
                ),
                Some(c) if c != cluster_uuid => detail(
                    details,
                    format!("{field}.subnet_reference.uuid"),
                    format!("subnet '{subnet_uuid}' is not on cluster '{cluster_uuid}'"),
                ),
                Some(_) => {}
            }
            let subnet_name = self.subnets.name_of(&subnet_uuid).map(str::to_owned);
            n.insert(
                "subnet_reference".to_owned(),
                reference("subnet", &subnet_uuid, subnet_name.as_deref()),
            );
            let kept = n
                .get("uuid")
                .and_then(Value::as_str)
                .and_then(|u| existing_nics.get(u))
                .map(|r| (*r).clone());
            if let Some(uuid) = n.get("uuid").and_then(Value::as_str)
                && kept.is_none()
            {
                detail(
                    details,
                    format!("{field}.uuid"),
                    format!("NIC '{uuid}' does not belong to this VM"),
                );
            }
            if let Some(k) = &kept
                && k.subnet_uuid != subnet_uuid
            {
                detail(
                    details,
                    format!("{field}.subnet_reference"),
                    "cannot change the subnet of an existing NIC",
                );
            }
            let mut requested_ip = None;
            // A spec's address is ASSIGNED, the type's default (prism-go-client `v3/swagger.json`,
            // `ip_address.type`: "It can only be ASSIGNED in the spec"), and an IPv4 `ip`; AHV's
            // IPAM then gives the guest that address (nutanix/nutanix.ansible
            // `plugins/module_utils/v3/prism/vms.py` sends a NIC's `private_ip` so).
            if let Some(list) = n.get("ip_endpoint_list").and_then(Value::as_array) {
                for (j, endpoint) in list.iter().enumerate() {
                    let efield = format!("{field}.ip_endpoint_list[{j}]");
                    let ty = endpoint
                        .get("type")
                        .and_then(Value::as_str)
                        .unwrap_or("ASSIGNED");
                    if ty != "ASSIGNED" {
                        detail(
                            details,
                            format!("{efield}.type"),
                            format!("'{ty}' is not allowed in a spec (only ASSIGNED)"),
                        );
                    }
                    let Some(ip) = endpoint
                        .get("ip")
                        .and_then(Value::as_str)
                        .and_then(parse_ipv4)
                    else {
                        detail(details, format!("{efield}.ip"), "is not an IPv4 address");
                        continue;
                    };
                    if j > 0 {
                        detail(details, &efield, "the mock supports one address per NIC");
                        continue;
                    }
                    let same_as_kept = kept.as_ref().is_some_and(|k| k.ip == Some(ip));
                    match self.pools.get(&subnet_uuid) {
                        Some(pool) if !pool.net.contains(ip) => detail(
                            details,
                            format!("{efield}.ip"),
                            format!("{} is not in the subnet", Ipv4Addr::from(ip)),
                        ),
                        Some(pool)
                            if (pool.is_used(ip) && !same_as_kept) || !requested.insert(ip) =>
                        {
                            detail(
                                details,
                                format!("{efield}.ip"),
                                format!("{} is already in use", Ipv4Addr::from(ip)),
                            )
                        }
                        _ => requested_ip = Some(ip),
                    }
                }
            }
            if let Some(k) = &kept
                && k.assigned != requested_ip.is_some()
            {
                detail(
                    details,
                    format!("{field}.ip_endpoint_list"),
                    "cannot change the address of an existing NIC",
                );
            }
            let uuid = match &kept {
                Some(k) => k.uuid.clone(),
                None => self.new_uuid(),
            };
            let mac = existing_macs
                .get(&uuid)
                .cloned()
                .unwrap_or_else(|| mac_from(&mut self.rng));
            n.insert("uuid".to_owned(), json!(uuid));
            n.insert("mac_address".to_owned(), json!(mac));
            n.entry("nic_type").or_insert_with(|| json!("NORMAL_NIC"));
            n.entry("vlan_mode").or_insert_with(|| json!("ACCESS"));
            n.entry("is_connected").or_insert_with(|| json!(true));
            n.entry("trunked_vlan_list").or_insert_with(|| json!([]));
            n.entry("num_queues").or_insert_with(|| json!(1));
            plans.push(NicPlan {
                uuid,
                subnet_uuid,
                requested_ip,
                kept,
            });
        }
        res.insert("nic_list".to_owned(), Value::Array(nics));
        plans
    }

    fn prepare_gpus(
        &self,
        res: &Map<String, Value>,
        cluster_uuid: &str,
        existing: Option<&Vm>,
        details: &mut Details,
    ) -> Vec<(String, usize)> {
        let requested: Vec<Value> = res
            .get("gpu_list")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if let Some(vm) = existing {
            let before = vm
                .spec
                .pointer("/resources/gpu_list")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let ids = |list: &[Value]| {
                list.iter()
                    .map(|g| g.get("device_id").and_then(Value::as_i64))
                    .collect::<Vec<_>>()
            };
            if ids(&before) != ids(&requested) {
                detail(
                    details,
                    "spec.resources.gpu_list",
                    "the mock does not change GPUs after create",
                );
            }
            return vm.gpus.clone();
        }
        let mut picked: Vec<(String, usize)> = Vec::new();
        for (i, gpu) in requested.iter().enumerate() {
            let device_id = gpu.get("device_id").and_then(Value::as_i64);
            let vendor = gpu.get("vendor").and_then(Value::as_str);
            let mode = gpu.get("mode").and_then(Value::as_str);
            let found = self.hosts.iter().find_map(|host| {
                if host
                    .pointer("/status/cluster_reference/uuid")
                    .and_then(Value::as_str)
                    != Some(cluster_uuid)
                {
                    return None;
                }
                let host_uuid = host.pointer("/metadata/uuid").and_then(Value::as_str)?;
                let list = host
                    .pointer("/status/resources/gpu_list")
                    .and_then(Value::as_array)?;
                list.iter().enumerate().find_map(|(idx, g)| {
                    let free = g.get("status").and_then(Value::as_str) == Some("UNUSED")
                        && !picked.iter().any(|(h, x)| h == host_uuid && *x == idx);
                    let fits = g.get("device_id").and_then(Value::as_i64) == device_id
                        && vendor
                            .is_none_or(|v| g.get("vendor").and_then(Value::as_str) == Some(v))
                        && mode.is_none_or(|m| g.get("mode").and_then(Value::as_str) == Some(m));
                    (free && fits).then(|| (host_uuid.to_owned(), idx))
                })
            });
            match found {
                Some(pick) => picked.push(pick),
                None => detail(
                    details,
                    format!("spec.resources.gpu_list[{i}]"),
                    format!("no UNUSED GPU with device_id {device_id:?} on the cluster"),
                ),
            }
        }
        picked
    }

    fn prepare_guest(
        &self,
        res: &mut Map<String, Value>,
        existing: Option<&Vm>,
        details: &mut Details,
    ) -> Option<GuestCustomization> {
        let given = match res.get("guest_customization") {
            None | Some(Value::Null) => None,
            Some(v) => Some(v.clone()),
        };
        if let Some(vm) = existing {
            let before = vm.spec.pointer("/resources/guest_customization").cloned();
            match given {
                // Absent on PUT keeps what was set at create (mock choice).
                None => {
                    if let Some(before) = before {
                        res.insert("guest_customization".to_owned(), before);
                    }
                }
                Some(now) if Some(&now) != before.as_ref() => {
                    detail(
                        details,
                        "spec.resources.guest_customization",
                        "cannot be changed after the VM is created",
                    );
                }
                Some(_) => {}
            }
            return vm.guest.clone();
        }
        let mut gc = match given {
            None => return None,
            Some(Value::Object(map)) => map,
            Some(_) => {
                detail(
                    details,
                    "spec.resources.guest_customization",
                    "must be an object",
                );
                return None;
            }
        };
        let field = "spec.resources.guest_customization";
        let is_overridable = gc
            .get("is_overridable")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        gc.insert("is_overridable".to_owned(), json!(is_overridable));
        let cloud_init = gc.get("cloud_init").filter(|v| !v.is_null()).cloned();
        let sysprep = gc.get("sysprep").filter(|v| !v.is_null()).cloned();
        let view = match (cloud_init, sysprep) {
            (Some(_), Some(_)) => {
                detail(
                    details,
                    field,
                    "only one of cloud_init and sysprep may be set",
                );
                None
            }
            (None, None) => {
                detail(details, field, "needs cloud_init or sysprep");
                None
            }
            (Some(ci), None) => {
                let text = |key: &str| ci.get(key).and_then(Value::as_str).map(str::to_owned);
                let user_data = text("user_data").and_then(|t| {
                    decode_b64(
                        &t,
                        &format!("{field}.cloud_init.user_data"),
                        MAX_USER_DATA,
                        details,
                    )
                });
                let meta_data = text("meta_data").and_then(|t| {
                    decode_b64(
                        &t,
                        &format!("{field}.cloud_init.meta_data"),
                        MAX_META_DATA,
                        details,
                    )
                });
                Some(GuestCustomization {
                    kind: "cloud_init".to_owned(),
                    user_data,
                    meta_data,
                    unattend_xml: None,
                    install_type: None,
                    custom_key_values: ci.get("custom_key_values").cloned(),
                    is_overridable,
                })
            }
            (None, Some(sp)) => {
                let mut sp = sp.as_object().cloned().unwrap_or_default();
                let install_type = enum_field(
                    &mut sp,
                    &format!("{field}.sysprep"),
                    "install_type",
                    "PREPARED",
                    &["PREPARED", "FRESH"],
                    details,
                );
                let unattend = sp
                    .get("unattend_xml")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                let unattend_xml = unattend.and_then(|t| {
                    decode_b64(
                        &t,
                        &format!("{field}.sysprep.unattend_xml"),
                        MAX_UNATTEND_XML,
                        details,
                    )
                });
                let custom = sp.get("custom_key_values").cloned();
                if unattend_xml.is_none() && custom.is_none() {
                    detail(
                        details,
                        format!("{field}.sysprep"),
                        "needs unattend_xml or custom_key_values",
                    );
                }
                gc.insert("sysprep".to_owned(), Value::Object(sp));
                Some(GuestCustomization {
                    kind: "sysprep".to_owned(),
                    user_data: None,
                    meta_data: None,
                    unattend_xml,
                    install_type: Some(install_type),
                    custom_key_values: custom,
                    is_overridable,
                })
            }
        };
        res.insert("guest_customization".to_owned(), Value::Object(gc));
        view
    }

    fn prepare_meta(&self, metadata: &Value, details: &mut Details) -> VmMeta {
        let mut meta = VmMeta::default();
        if let Some(kind) = metadata.get("kind").and_then(Value::as_str)
            && kind != KIND
        {
            detail(details, "metadata.kind", format!("'{kind}' is not 'vm'"));
        }
        meta.use_categories_mapping = metadata
            .get("use_categories_mapping")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let mut pairs: Vec<(String, String)> = Vec::new();
        if let Some(map) = metadata.get("categories").and_then(Value::as_object) {
            for (key, value) in map {
                match value.as_str() {
                    Some(v) => pairs.push((key.clone(), v.to_owned())),
                    None => detail(
                        details,
                        format!("metadata.categories.{key}"),
                        "must be a string",
                    ),
                }
            }
        }
        if let Some(map) = metadata
            .get("categories_mapping")
            .and_then(Value::as_object)
        {
            for (key, values) in map {
                match values.as_array() {
                    Some(list) => pairs.extend(
                        list.iter()
                            .filter_map(Value::as_str)
                            .map(|v| (key.clone(), v.to_owned())),
                    ),
                    None => detail(
                        details,
                        format!("metadata.categories_mapping.{key}"),
                        "must be a list",
                    ),
                }
            }
        }
        for (key, value) in &pairs {
            if !self.category_exists(key, value) {
                detail(
                    details,
                    "metadata.categories",
                    format!("category {key}:{value} does not exist"),
                );
            }
            meta.categories
                .entry(key.clone())
                .or_insert_with(|| json!(value));
            match meta
                .categories_mapping
                .entry(key.clone())
                .or_insert_with(|| json!([]))
            {
                Value::Array(list) if !list.iter().any(|v| v.as_str() == Some(value)) => {
                    list.push(json!(value))
                }
                _ => {}
            }
        }
        if let Some(project) = metadata.get("project_reference").filter(|p| !p.is_null()) {
            let uuid = project.get("uuid").and_then(Value::as_str).unwrap_or("");
            match self.projects.name_of(uuid) {
                Some(name) => meta.project = Some(reference("project", uuid, Some(name))),
                None => detail(
                    details,
                    "metadata.project_reference.uuid",
                    format!("project '{uuid}' does not exist"),
                ),
            }
        }
        meta
    }

    /// Allocates addresses and GPUs of a prepared VM and stores it (not yet listed). Returns a failure plan
    /// when an address pool is exhausted (the create task then fails, as on a real cluster).
    fn commit_new_vm(
        &mut self,
        uuid: &str,
        prepared: Prepared,
        os: GuestOs,
        now: Instant,
    ) -> Option<FailPlan> {
        let mut exhausted = None;
        let nics = self.allocate_nics(&prepared.nics, &mut exhausted);
        for (host, index) in &prepared.gpus {
            self.set_gpu_consumer(
                host,
                *index,
                Some((
                    uuid,
                    prepared
                        .spec
                        .get("name")
                        .and_then(Value::as_str)
                        .unwrap_or(""),
                )),
            );
        }
        let seq = self.next_vm_seq;
        self.next_vm_seq += 1;
        let wall = self.wall(now);
        let apipa_octets: [u8; 2] = self.rng.random();
        let apipa = Ipv4Addr::new(
            169,
            254,
            1 + apipa_octets[0] % 254,
            1 + apipa_octets[1] % 254,
        );
        let vm = Vm {
            uuid: uuid.to_owned(),
            seq,
            spec: prepared.spec,
            meta: prepared.meta,
            spec_version: 0,
            entity_version: 1,
            listed: false,
            listed_from: None,
            pending_updates: 0,
            deleting: None,
            error: None,
            task_uuids: Vec::new(),
            powered_on: false,
            boot_gen: 0,
            phase: AddressPhase::None,
            apipa: u32::from(apipa),
            overlay: None,
            nics,
            gpus: prepared.gpus,
            os,
            guest: prepared.guest,
            creation_time: wall.clone(),
            last_update_time: wall,
            host_uuid: None,
            // The recorded VM's bios_uuid is its own UUID (get_vm.json).
            bios_uuid: uuid.to_owned(),
            stale_view: None,
        };
        self.vm_order.insert(seq, uuid.to_owned());
        self.vms.insert(uuid.to_owned(), vm);
        exhausted.map(|subnet| {
            FailPlan::in_subtask(
                format!("IP pool of subnet '{subnet}' is exhausted"),
                FailOutcome::RemoveVm,
            )
        })
    }

    fn allocate_nics(
        &mut self,
        plans: &[NicPlan],
        exhausted: &mut Option<String>,
    ) -> Vec<NicRuntime> {
        let mut nics = Vec::new();
        for plan in plans {
            if let Some(kept) = &plan.kept {
                nics.push(kept.clone());
                continue;
            }
            let pool = self.pools.get_mut(&plan.subnet_uuid);
            let ip = match (pool, plan.requested_ip) {
                (Some(pool), Some(ip)) => {
                    pool.reserve(ip);
                    Some(ip)
                }
                (Some(pool), None) => {
                    let ip = pool.allocate();
                    if ip.is_none() {
                        *exhausted = Some(
                            self.subnets
                                .name_of(&plan.subnet_uuid)
                                .unwrap_or(&plan.subnet_uuid)
                                .to_owned(),
                        );
                    }
                    ip
                }
                (None, _) => None,
            };
            nics.push(NicRuntime {
                uuid: plan.uuid.clone(),
                subnet_uuid: plan.subnet_uuid.clone(),
                ip,
                assigned: plan.requested_ip.is_some(),
            });
        }
        nics
    }

    fn release_nics(&mut self, nics: &[NicRuntime]) {
        for nic in nics {
            if let (Some(ip), Some(pool)) = (nic.ip, self.pools.get_mut(&nic.subnet_uuid)) {
                pool.release(ip);
            }
        }
    }

    fn set_gpu_consumer(&mut self, host: &str, index: usize, consumer: Option<(&str, &str)>) {
        let Some(gpu) = self
            .hosts
            .get_mut(host)
            .and_then(|h| h.pointer_mut(&format!("/status/resources/gpu_list/{index}")))
        else {
            return;
        };
        let Some(obj) = gpu.as_object_mut() else {
            return;
        };
        match consumer {
            Some((uuid, name)) => {
                obj.insert("status".to_owned(), json!("USED"));
                obj.insert("assignable".to_owned(), json!(false));
                obj.insert(
                    "consumer_reference".to_owned(),
                    reference("vm", uuid, Some(name)),
                );
            }
            None => {
                obj.insert("status".to_owned(), json!("UNUSED"));
                obj.insert("assignable".to_owned(), json!(true));
                obj.remove("consumer_reference");
            }
        }
    }

    /// Removes a VM and gives back its addresses and GPUs.
    pub(crate) fn remove_vm(&mut self, uuid: &str) -> bool {
        self.make_ordinary(uuid);
        let Some(vm) = self.vms.remove(uuid) else {
            return false;
        };
        self.vm_order.remove(&vm.seq);
        self.release_nics(&vm.nics);
        for (host, index) in &vm.gpus {
            self.set_gpu_consumer(host, *index, None);
        }
        true
    }

    /// Checks `metadata.uuid` of a create or clone: reserved and unused → Ok(uuid); none given → a new UUID.
    fn uuid_for_new_vm(&mut self, metadata: &Value, now: Instant) -> Result<String, Refusal> {
        match metadata.get("uuid").and_then(Value::as_str) {
            None => Ok(self.new_uuid()),
            Some(uuid) => {
                if self.vm_or_foreign(uuid).is_some() {
                    Err(Refusal::conflict(
                        KIND,
                        "ENTITY_ALREADY_EXISTS",
                        format!("A VM with UUID {uuid} already exists"),
                    ))
                } else if !self.uuid_is_reserved(uuid, now) {
                    Err(Refusal::invalid_one(
                        KIND,
                        "metadata.uuid",
                        format!(
                            "{uuid} was not reserved through idempotence_identifiers, or its reservation expired"
                        ),
                    ))
                } else {
                    Ok(uuid.to_owned())
                }
            }
        }
    }

    fn os_of(&self, prepared: &Prepared, inherited: Option<GuestOs>) -> GuestOs {
        if let Some(os) = inherited {
            return os;
        }
        if prepared.guest.as_ref().is_some_and(|g| g.kind == "sysprep") {
            return GuestOs::Windows;
        }
        prepared
            .boot_image
            .as_deref()
            .map(|img| self.image_os(img))
            .unwrap_or_default()
    }

    /// `POST /vms`.
    pub(crate) fn create_vm(
        &mut self,
        now: Instant,
        body: &Value,
        fail: Option<FailPlan>,
    ) -> Result<Value, Refusal> {
        refuse_by_schema(schema::check_vm_intent(body))?;
        let metadata = body.get("metadata").cloned().unwrap_or_else(|| json!({}));
        let spec_in = body.get("spec").cloned().unwrap_or(Value::Null);
        let uuid = self.uuid_for_new_vm(&metadata, now)?;
        let prepared = self
            .prepare_vm(&spec_in, &metadata, None)
            .map_err(|d| Refusal::invalid(KIND, d))?;
        let fail = fail.or_else(|| secure_boot_cdrom_refusal(&prepared.spec));
        let task_uuid = self.start_create(now, &uuid, prepared, None, "kVmCreate", fail);
        Ok(self.pending_response(&uuid, &metadata, &spec_in, &task_uuid, 0))
    }

    fn start_create(
        &mut self,
        now: Instant,
        uuid: &str,
        prepared: Prepared,
        os: Option<GuestOs>,
        operation: &'static str,
        fail: Option<FailPlan>,
    ) -> String {
        let os = self.os_of(&prepared, os);
        let cluster = prepared.cluster_uuid.clone();
        let exhausted = self.commit_new_vm(uuid, prepared, os, now);
        let fail = fail.or(exhausted);
        let task = self.create_task(
            now,
            operation,
            vec![("vm", uuid.to_owned())],
            Some(cluster),
            Effect::Create {
                vms: vec![uuid.to_owned()],
            },
            fail,
        );
        if let Some(vm) = self.vms.get_mut(uuid) {
            vm.task_uuids = vec![task.clone()];
        }
        task
    }

    /// The 202 body of a create or update: the spec as sent, `status` PENDING with the task UUID as a string,
    /// `metadata` with `kind`, `uuid`, `spec_version` (0 after a create; on an update the version it was applied
    /// to: the recorded PUT of update_vm.json answered the VM's 0) and `use_categories_mapping` (create_vm.json,
    /// update_vm.json), plus the categories and project when the request carried them.
    fn pending_response(
        &self,
        uuid: &str,
        metadata_in: &Value,
        spec_in: &Value,
        task_uuid: &str,
        spec_version: u64,
    ) -> Value {
        let meta = self
            .vms
            .get(uuid)
            .map(|vm| vm.meta.clone())
            .unwrap_or_default();
        let mut metadata = json!({
            "kind": KIND,
            "uuid": uuid,
            "spec_version": spec_version,
            "use_categories_mapping": meta.use_categories_mapping,
        });
        if let Some(obj) = metadata.as_object_mut() {
            let given = |key: &str| metadata_in.get(key).is_some_and(|v| !v.is_null());
            if given("categories") || given("categories_mapping") {
                obj.insert("categories".to_owned(), Value::Object(meta.categories));
                obj.insert(
                    "categories_mapping".to_owned(),
                    Value::Object(meta.categories_mapping),
                );
            }
            if let Some(project) = meta.project.filter(|_| given("project_reference")) {
                obj.insert("project_reference".to_owned(), project);
            }
        }
        json!({
            "api_version": "3.1",
            "metadata": metadata,
            "spec": spec_in,
            "status": {"state": "PENDING", "execution_context": {"task_uuid": task_uuid}},
        })
    }

    /// `PUT /vms/{uuid}`.
    pub(crate) fn update_vm(
        &mut self,
        now: Instant,
        uuid: &str,
        body: &Value,
        fail: Option<FailPlan>,
    ) -> Result<Value, Refusal> {
        refuse_by_schema(schema::check_vm_intent(body))?;
        self.make_ordinary(uuid);
        let existing = self
            .vms
            .get(uuid)
            .cloned()
            .ok_or_else(|| Refusal::not_found(KIND, format!("VM {uuid} was not found")))?;
        if existing.deleting.is_some() {
            return Err(Refusal::conflict(
                KIND,
                "CONCURRENT_REQUESTS_NOT_ALLOWED",
                format!("VM {uuid} is being deleted"),
            ));
        }
        let metadata = body.get("metadata").cloned().unwrap_or_else(|| json!({}));
        check_version_token(&metadata, &existing)?;
        let spec_in = body.get("spec").cloned().unwrap_or(Value::Null);
        let prepared = self
            .prepare_vm(&spec_in, &metadata, Some(&existing))
            .map_err(|d| Refusal::invalid(KIND, d))?;
        let mut exhausted = None;
        let nics = self.allocate_nics(&prepared.nics, &mut exhausted);
        let fail = fail.or(exhausted.map(|subnet| {
            FailPlan::in_subtask(
                format!("IP pool of subnet '{subnet}' is exhausted"),
                FailOutcome::RemoveVm,
            )
        }));
        let wall = self.wall(now);
        let previous_spec = existing.spec.clone();
        let previous_nics = existing.nics.clone();
        if let Some(vm) = self.vms.get_mut(uuid) {
            vm.spec = prepared.spec;
            vm.meta = prepared.meta;
            vm.nics = nics;
            vm.spec_version += 1;
            vm.entity_version += 1;
            vm.pending_updates += 1;
            vm.last_update_time = wall;
        }
        let task = self.create_task(
            now,
            "kVmUpdate",
            vec![("vm", uuid.to_owned())],
            Some(existing.cluster_uuid().to_owned()),
            Effect::Update {
                vm: uuid.to_owned(),
                previous_spec: Box::new(previous_spec),
                previous_nics,
            },
            fail,
        );
        if let Some(vm) = self.vms.get_mut(uuid) {
            vm.task_uuids = vec![task.clone()];
        }
        Ok(self.pending_response(uuid, &metadata, &spec_in, &task, existing.spec_version))
    }

    /// `DELETE /vms/{uuid}`: DELETE_PENDING until the task ends, then gone. A repeated DELETE returns the same task.
    pub(crate) fn delete_vm(
        &mut self,
        now: Instant,
        uuid: &str,
        fail: Option<FailPlan>,
    ) -> Result<Value, Refusal> {
        self.make_ordinary(uuid);
        let vm = self
            .vms
            .get(uuid)
            .ok_or_else(|| Refusal::not_found(KIND, format!("VM {uuid} was not found")))?;
        let task = match &vm.deleting {
            Some(task) => task.clone(),
            None => {
                let cluster = vm.cluster_uuid().to_owned();
                let task = self.create_task(
                    now,
                    "kVmDelete",
                    vec![("vm", uuid.to_owned())],
                    Some(cluster),
                    Effect::Delete {
                        vm: uuid.to_owned(),
                    },
                    fail,
                );
                if let Some(vm) = self.vms.get_mut(uuid) {
                    vm.deleting = Some(task.clone());
                    vm.task_uuids = vec![task.clone()];
                }
                task
            }
        };
        Ok(json!({
            "api_version": "3.1",
            "metadata": {"kind": KIND, "uuid": uuid},
            "spec": "",
            "status": {"state": "DELETE_PENDING", "execution_context": {"task_uuid": task}},
        }))
    }

    /// `POST /vms/{uuid}/clone`: disks come from the source; name, CPU, memory, NICs, boot config and guest
    /// customization may be overridden. The clone is powered off (mock choice: power it on with a PUT).
    pub(crate) fn clone_vm(
        &mut self,
        now: Instant,
        source_uuid: &str,
        body: &Value,
        fail: Option<FailPlan>,
    ) -> Result<Value, Refusal> {
        refuse_by_schema(schema::check_clone_input(body))?;
        let source = self
            .vm_or_foreign(source_uuid)
            .map(Cow::into_owned)
            .ok_or_else(|| Refusal::not_found(KIND, format!("VM {source_uuid} was not found")))?;
        let metadata = body.get("metadata").cloned().unwrap_or_else(|| json!({}));
        let overrides = body
            .get("override_spec")
            .cloned()
            .unwrap_or_else(|| json!({}));
        if self.clone_behaviour.concurrent_clones_conflict
            && self.clone_sources.iter().any(|(task, from)| {
                from == source_uuid && self.tasks.get(task).is_some_and(|t| !t.status.ended())
            })
        {
            return Err(Refusal::conflict(
                KIND,
                "CONCURRENT_REQUESTS_NOT_ALLOWED",
                format!("VM {source_uuid} is the source of a clone in progress"),
            ));
        }
        let requested = self.uuid_for_new_vm(&metadata, now)?;
        let uuid = if self.clone_behaviour.ignores_requested_uuid
            && metadata.get("uuid").is_some_and(Value::is_string)
        {
            self.new_uuid()
        } else {
            requested
        };
        // The clone input has no cluster reference (`vm_clone_override_spec` in the v3 swagger): the clone lands
        // on the source VM's cluster, whatever else the body carries.
        let mut spec = source.spec.clone();
        let mut details = Details::new();
        if let Some(obj) = spec.as_object_mut() {
            if let Some(name) = overrides.get("name") {
                obj.insert("name".to_owned(), name.clone());
            }
            if let Some(res) = obj.get_mut("resources").and_then(Value::as_object_mut) {
                for key in [
                    "num_sockets",
                    "num_vcpus_per_socket",
                    "num_threads_per_core",
                    "memory_size_mib",
                    "boot_config",
                    "guest_customization",
                ] {
                    if let Some(v) = overrides.get(key) {
                        res.insert(key.to_owned(), v.clone());
                    } else if key == "guest_customization" {
                        res.remove(key);
                    }
                }
                res.insert("power_state".to_owned(), json!("OFF"));
                res.remove("gpu_list");
                if let Some(Value::Array(disks)) = res.get_mut("disk_list") {
                    for disk in disks.iter_mut().filter_map(Value::as_object_mut) {
                        disk.remove("uuid");
                    }
                }
                let nics = match overrides.get("nic_list") {
                    Some(list) => list.clone(),
                    None => {
                        let mut list = res.get("nic_list").cloned().unwrap_or_else(|| json!([]));
                        for nic in list
                            .as_array_mut()
                            .into_iter()
                            .flatten()
                            .filter_map(Value::as_object_mut)
                        {
                            nic.remove("uuid");
                            nic.remove("mac_address");
                            nic.remove("ip_endpoint_list");
                        }
                        list
                    }
                };
                res.insert("nic_list".to_owned(), nics);
            }
        }
        if source.deleting.is_some() {
            detail(&mut details, "uuid", "the source VM is being deleted");
        }
        let clone_meta = json!({
            "kind": KIND,
            "categories": source.meta.categories,
            "project_reference": source.meta.project,
        });
        let prepared = match self.prepare_vm(&spec, &clone_meta, None) {
            Ok(p) if details.is_empty() => p,
            Ok(_) => return Err(Refusal::invalid(KIND, details)),
            Err(mut d) => {
                d.append(&mut details);
                return Err(Refusal::invalid(KIND, d));
            }
        };
        let fail = fail.or_else(|| secure_boot_cdrom_refusal(&prepared.spec));
        let task = self.start_create(now, &uuid, prepared, Some(source.os), "kVmClone", fail);
        self.clone_sources
            .insert(task.clone(), source_uuid.to_owned());
        Ok(json!({"task_uuid": task}))
    }

    /// Creates a VM from a v3-shaped spec built elsewhere (template deploy); `Err` carries 422 details.
    pub(crate) fn create_vm_from_spec(
        &mut self,
        now: Instant,
        spec: &Value,
        os: GuestOs,
    ) -> Result<(String, DeployVm), Details> {
        let prepared = self.prepare_vm(spec, &json!({"kind": KIND}), None)?;
        let uuid = self.new_uuid();
        Ok((
            uuid,
            DeployVm {
                inner: prepared,
                os,
                now,
            },
        ))
    }

    /// Commits VMs prepared by [`Store::create_vm_from_spec`] under one deploy task, in the store's
    /// [`DeployTaskShape`]. By default the task names only the template (`vmm:content:templates`); each VM has
    /// a subtask of its own that names it and moves with the deploy (the Ansible collection's
    /// ntnx_templates_deploy_v2 RETURN block: a real deploy task lists the template in `entities_affected` and
    /// its work in `sub_tasks`). One `kVmCreate` subtask per VM is the mock's reading: the recorded answer
    /// shows three subtasks without saying what each one did. With `VmsOnParentTask` the task names the
    /// template and the VMs itself, as terraform-provider-nutanix reads it.
    pub(crate) fn commit_deploy(
        &mut self,
        now: Instant,
        prepared: Vec<(String, DeployVm)>,
        cluster: &str,
        template: &str,
        fail: Option<FailPlan>,
    ) -> String {
        let mut uuids = Vec::new();
        let mut fail = fail;
        for (uuid, p) in prepared {
            let exhausted = self.commit_new_vm(&uuid, p.inner, p.os, p.now);
            fail = fail.or(exhausted);
            uuids.push(uuid);
        }
        let on_parent = self.deploy_task_shape == DeployTaskShape::VmsOnParentTask;
        let mut entities = vec![("template", template.to_owned())];
        if on_parent {
            entities.extend(uuids.iter().map(|uuid| ("vm", uuid.clone())));
        }
        let task = self.create_task(
            now,
            "kVmTemplateDeploy",
            entities,
            Some(cluster.to_owned()),
            Effect::Create { vms: uuids.clone() },
            fail,
        );
        for uuid in &uuids {
            if !on_parent {
                self.add_follower_subtask(&task, "kVmCreate", uuid);
            }
            if let Some(vm) = self.vms.get_mut(uuid) {
                vm.task_uuids = vec![task.clone()];
            }
        }
        task
    }

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
                    super::Event::Addresses {
                        vm: uuid.to_owned(),
                        boot_gen,
                        phase: AddressPhase::Apipa,
                    },
                );
                self.schedule(
                    first + Duration::from_millis(ms),
                    super::Event::Addresses {
                        vm: uuid.to_owned(),
                        boot_gen,
                        phase: AddressPhase::Real,
                    },
                );
            }
            _ => self.schedule(
                first,
                super::Event::Addresses {
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
                super::Event::Addresses {
                    vm: uuid.to_owned(),
                    boot_gen,
                    phase: AddressPhase::Overlay,
                },
            );
        }
    }

    /// `GET /vms/{uuid}` body.
    /// `GET /vms/{uuid}` body, in the shape of get_vm.json: `metadata` has no `use_categories_mapping`
    /// (unless set), names the default project `_internal` when the VM has none, and its `entity_version` as a
    /// string; `status.resources` adds what the hypervisor reports.
    pub(crate) fn vm_json(&self, vm: &Vm) -> Value {
        let cluster_uuid = vm.cluster_uuid();
        let cluster_name = self.clusters.name_of(cluster_uuid);
        let mut metadata = json!({
            "kind": KIND,
            "uuid": vm.uuid,
            "spec_version": vm.spec_version,
            "entity_version": vm.entity_version.to_string(),
            "creation_time": vm.creation_time,
            "last_update_time": vm.last_update_time,
            "categories": vm.meta.categories,
            "categories_mapping": vm.meta.categories_mapping,
            "owner_reference": reference("user", &self.user_uuid, Some(&self.username)),
        });
        if let Some(obj) = metadata.as_object_mut() {
            let project = vm
                .meta
                .project
                .clone()
                .unwrap_or_else(|| self.default_project_reference());
            obj.insert("project_reference".to_owned(), project);
            if vm.meta.use_categories_mapping {
                obj.insert("use_categories_mapping".to_owned(), json!(true));
            }
        }
        let mut resources = vm
            .spec
            .get("resources")
            .cloned()
            .unwrap_or_else(|| json!({}));
        let reported = vm.reported_addresses();
        if let Some(res) = resources.as_object_mut() {
            res.insert("power_state".to_owned(), json!(vm.power_state()));
            res.insert("hypervisor_type".to_owned(), json!("AHV"));
            res.insert("bios_uuid".to_owned(), json!(vm.bios_uuid));
            res.insert(
                "generation_uuid".to_owned(),
                json!(derived_uuid("generation", &vm.uuid)),
            );
            res.insert("protection_type".to_owned(), json!("UNPROTECTED"));
            if let Some(vtpm) = res.get_mut("vtpm_config").and_then(Value::as_object_mut) {
                // Off: `""` (the recorded GET, get_vm.json). On: TPM 2.0, the version Nutanix's
                // own tests read back from a VM created with a vTPM (nutanix/nutanix.ansible
                // `tests/integration/targets/ntnx_vms_v2/tasks/create_delete_uefi_vms.yml`).
                let version = if vtpm.get("vtpm_enabled").and_then(Value::as_bool) == Some(true) {
                    "2.0"
                } else {
                    ""
                };
                vtpm.entry("version").or_insert_with(|| json!(version));
            }
            if let Some(Value::Array(disks)) = res.get_mut("disk_list") {
                for disk in disks.iter_mut().filter_map(Value::as_object_mut) {
                    disk.insert("is_migration_in_progress".to_owned(), json!(false));
                }
            }
            if let Some(host) = &vm.host_uuid {
                res.insert(
                    "host_reference".to_owned(),
                    reference("host", host, self.hosts.name_of(host)),
                );
            }
            if let Some(Value::Array(nics)) = res.get_mut("nic_list") {
                for (nic, addresses) in nics.iter_mut().zip(reported) {
                    if let Some(n) = nic.as_object_mut() {
                        let list: Vec<Value> = addresses
                            .into_iter()
                            .map(|(ip, ty)| json!({"ip": ip, "type": ty}))
                            .collect();
                        n.insert("ip_endpoint_list".to_owned(), Value::Array(list));
                    }
                }
            }
        }
        let mut status = super::object([
            ("state", json!(vm.state())),
            ("name", json!(vm.name())),
            (
                "cluster_reference",
                reference("cluster", cluster_uuid, cluster_name),
            ),
            ("execution_context", json!({"task_uuid": vm.task_uuids})),
            ("resources", resources),
        ]);
        if let Some(obj) = status.as_object_mut() {
            if let Some(description) = vm.spec.get("description") {
                obj.insert("description".to_owned(), description.clone());
            }
            if let Some(error) = &vm.error {
                obj.insert(
                    "message_list".to_owned(),
                    json!([{"reason": "TASK_FAILED", "message": error}]),
                );
            }
        }
        super::object([
            ("api_version", json!("3.1")),
            ("metadata", metadata),
            ("spec", vm.spec.clone()),
            ("status", status),
        ])
    }

    /// `GET /vms/{uuid}`. Under a read lag, a GET soon after the VM's task ended still shows the
    /// `status.state` and power state from before: terraform-provider-nutanix, after a power change's update
    /// task SUCCEEDED, polls the VM's GET until `status.state` is `COMPLETE` and
    /// `status.resources.power_state` is the one asked for (`changePowerState` / `taskVMStateRefreshFunc`,
    /// nutanix/services/vmm/resource_nutanix_virtual_machine.go, since its c6b983ce), which it would not
    /// need if the GET were current as soon as the task ended. The length of the lag is not documented.
    pub(crate) fn get_vm(&self, uuid: &str) -> Result<Value, Refusal> {
        let vm = self
            .vm_or_foreign(uuid)
            .ok_or_else(|| Refusal::not_found(KIND, format!("VM {uuid} was not found")))?;
        let mut body = self.vm_json(&vm);
        if let Some(stale) = vm.stale_view.filter(|s| Instant::now() < s.until)
            && let Some(status) = body.get_mut("status").and_then(Value::as_object_mut)
        {
            status.insert("state".to_owned(), json!(stale.state));
            if let Some(res) = status.get_mut("resources").and_then(Value::as_object_mut) {
                res.insert("power_state".to_owned(), json!(stale.power_state));
            }
        }
        Ok(body)
    }

    /// `POST /vms/list`: VMs whose create task has not ended (or ended less than the list lag
    /// ago) are not listed. The filter runs on names and states before any VM's JSON is built, and
    /// only the page's VMs are rendered (a foreign VM's [`Vm`] is built for its page only).
    pub(crate) fn list_vms(&self, body: &[u8]) -> Result<Value, Refusal> {
        let now = Instant::now();
        let query = ListQuery::parse(
            body,
            KIND,
            &["name", "vm_name", "power_state", "cluster_name"],
        )?;
        let matching: Vec<Listed<'_>> = self
            .all_vms()
            .filter(|entry| match entry {
                Listed::Ordinary(vm) => vm.listed && vm.listed_from.is_none_or(|from| now >= from),
                Listed::Foreign { .. } => true,
            })
            .filter(|entry| {
                query.filter.as_ref().is_none_or(|f| {
                    f.matches(|attr| match attr {
                        "name" | "vm_name" => Some(entry.name()),
                        "power_state" => Some(entry.power_state()),
                        "cluster_name" => self.clusters.name_of(entry.cluster_uuid()),
                        _ => None,
                    })
                })
            })
            .collect();
        let (total, page) = query.page(matching, Listed::name);
        let entities = page
            .into_iter()
            .map(|entry| match entry {
                Listed::Ordinary(vm) => self.vm_list_json(vm),
                Listed::Foreign { index, .. } => self.vm_list_json(&self.foreign_vm(index)),
            })
            .collect();
        Ok(query.response(total, entities))
    }

    /// A VM as `POST /vms/list` shows it, which differs from its GET (list_vm.json against get_vm.json):
    /// `metadata.spec_hash`; no `apc_config`, `vtpm_config` or NIC `num_queues`; disks' `storage_config` with
    /// `flash_mode`; `status.resources` with `storage_config` and disks' `is_encryption_in_progress`.
    fn vm_list_json(&self, vm: &Vm) -> Value {
        let mut body = super::entities::without_api_version(self.vm_json(vm));
        if let Some(metadata) = body.get_mut("metadata").and_then(Value::as_object_mut) {
            metadata.insert("spec_hash".to_owned(), json!(SPEC_HASH));
        }
        for (part, is_status) in [("spec", false), ("status", true)] {
            let Some(res) = body
                .pointer_mut(&format!("/{part}/resources"))
                .and_then(Value::as_object_mut)
            else {
                continue;
            };
            res.remove("apc_config");
            res.remove("vtpm_config");
            if is_status {
                res.insert("storage_config".to_owned(), json!({}));
            }
            if let Some(Value::Array(nics)) = res.get_mut("nic_list") {
                for nic in nics.iter_mut().filter_map(Value::as_object_mut) {
                    nic.remove("num_queues");
                }
            }
            if let Some(Value::Array(disks)) = res.get_mut("disk_list") {
                for disk in disks.iter_mut().filter_map(Value::as_object_mut) {
                    if let Some(storage) = disk
                        .get_mut("storage_config")
                        .and_then(Value::as_object_mut)
                    {
                        storage
                            .entry("flash_mode")
                            .or_insert_with(|| json!("DISABLED"));
                    }
                    if is_status {
                        disk.insert("is_encryption_in_progress".to_owned(), json!(false));
                    }
                }
            }
        }
        body
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

    pub(crate) fn seed_vm(&mut self, seed: &VmSeed) -> Result<(), SeedError> {
        let bad = |what: String| SeedError::Reference(format!("vm '{}': {what}", seed.name));
        let cluster = self
            .clusters
            .uuid_by_name(&seed.cluster)
            .ok_or_else(|| bad(format!("unknown cluster '{}'", seed.cluster)))?;
        let image = self
            .images
            .uuid_by_name(&seed.image)
            .ok_or_else(|| bad(format!("unknown image '{}'", seed.image)))?;
        let mut nics = Vec::new();
        for subnet in &seed.subnets {
            let uuid = self
                .subnets
                .uuid_by_name(subnet)
                .ok_or_else(|| bad(format!("unknown subnet '{subnet}'")))?;
            nics.push(json!({"subnet_reference": {"kind": "subnet", "uuid": uuid}}));
        }
        let machine_type = if seed.boot_type == "SECURE_BOOT" {
            "Q35"
        } else {
            "PC"
        };
        let spec = json!({
            "name": seed.name,
            "cluster_reference": {"kind": "cluster", "uuid": cluster},
            "resources": {
                "num_sockets": seed.num_sockets,
                "num_vcpus_per_socket": seed.num_vcpus_per_socket,
                "memory_size_mib": seed.memory_mib,
                "power_state": seed.power_state,
                "machine_type": machine_type,
                "boot_config": {"boot_type": seed.boot_type},
                "disk_list": [{"data_source_reference": {"kind": "image", "uuid": image}, "disk_size_mib": seed.disk_size_mib}],
                "nic_list": nics,
            },
        });
        let uuid = match &seed.uuid {
            Some(u) => u.clone(),
            None => self.new_uuid(),
        };
        let prepared = self
            .prepare_vm(&spec, &json!({"kind": KIND}), None)
            .map_err(|d| {
                bad(d
                    .into_iter()
                    .map(|(f, m)| format!("{f}: {m}"))
                    .collect::<Vec<_>>()
                    .join("; "))
            })?;
        let os = self.os_of(&prepared, None);
        let now = Instant::now();
        if self.commit_new_vm(&uuid, prepared, os, now).is_some() {
            return Err(bad("address pool exhausted".to_owned()));
        }
        self.finish_vm_create(&uuid, None, now);
        Ok(())
    }
}

/// A 422 when the schema check found anything.
/// The concurrency token of a `PUT /vms/{uuid}`. When `metadata.entity_version` is sent it is the one that
/// counts: the v3 swagger's `vm_metadata.entity_version` says "For kinds that support entity_version, it
/// overrides spec_version" (prism-go-client v3/swagger.json), and a VM's GET carries one (get_vm.json). Any
/// value but the current one is refused with the 409 of a stale spec_version: no recorded answer shows a PUT
/// with a wrong entity_version, so the mock keeps to reference/02's "mismatch against current → 409".
/// Without it, `spec_version` is required and only a stale (lower) one is refused
/// (terraform-provider-nutanix#268: a PUT with the spec_version read before an out-of-band change failed;
/// gomorpheus/morpheus-nutanix-prism-plugin retries on the 409 "Edit conflict"); a newer one is accepted: the
/// recorded PUT of update_vm.json sent spec_version 1 to a VM at 0 and got a 202.
fn check_version_token(metadata: &Value, existing: &Vm) -> Result<(), Refusal> {
    let conflict = |what: String| {
        Refusal::conflict(
            KIND,
            "CONCURRENT_REQUESTS_NOT_ALLOWED",
            format!("Edit conflict: please retry change. {what}"),
        )
    };
    if let Some(given) = metadata.get("entity_version").filter(|v| !v.is_null()) {
        let current = existing.entity_version;
        let matches = match given {
            Value::String(text) => text.trim().parse::<u64>().ok() == Some(current),
            other => other.as_u64() == Some(current),
        };
        return if matches {
            Ok(())
        } else {
            Err(conflict(format!(
                "entity_version {given} does not match the current \"{current}\""
            )))
        };
    }
    let Some(given) = metadata.get("spec_version").and_then(Value::as_u64) else {
        return Err(Refusal::invalid_one(
            KIND,
            "metadata.spec_version",
            "is required on update",
        ));
    };
    if given < existing.spec_version {
        return Err(conflict(format!(
            "spec_version {given} does not match the current {}",
            existing.spec_version
        )));
    }
    Ok(())
}

fn refuse_by_schema(details: schema::Details) -> Result<(), Refusal> {
    if details.is_empty() {
        Ok(())
    } else {
        Err(Refusal::invalid(KIND, details))
    }
}

/// A VM of a template deploy, validated, waiting to be committed.
#[derive(Debug)]
pub(crate) struct DeployVm {
    inner: Prepared,
    os: GuestOs,
    now: Instant,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guest_customization_debug_shows_no_content() {
        let gc = GuestCustomization {
            kind: "cloud_init".to_owned(),
            user_data: Some("password: hunter2".to_owned()),
            meta_data: None,
            unattend_xml: None,
            install_type: None,
            custom_key_values: Some(json!({"k": "secret"})),
            is_overridable: false,
        };
        let text = format!("{gc:?}");
        assert!(
            !text.contains("hunter2") && !text.contains("secret"),
            "{text}"
        );
        assert!(text.contains("<17 bytes>"), "{text}");
    }
}
