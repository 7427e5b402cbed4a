//! A VM's disks validated and filled with their server defaults.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value, json};

use super::prepare::enum_field;
use super::{Details, detail};
use crate::store::record::Vm;
use crate::store::{Store, derived_uuid};

/// Name of the storage container disks land on (the recorded VM's, get_vm.json).
const DEFAULT_CONTAINER: &str = "SelfServiceContainer";

impl Store {
    pub(super) fn prepare_disks(
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
        // A volume group's disk that a client sends back (it reads it in the VM's spec) is the attachment the
        // volumes API manages, not a disk to make: it is left out of the stored spec (mock choice: no recorded
        // answer shows what a v3 PUT does with one).
        let mut disks: Vec<Value> = match res.get("disk_list") {
            Some(Value::Array(list)) => list
                .iter()
                .filter(|disk| disk.get("volume_group_reference").is_none())
                .cloned()
                .collect(),
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
}
