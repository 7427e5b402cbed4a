//! A VM body validated as real Prism validates it and filled with the server defaults a real GET shows: the
//! spec's resources and metadata here, its disks, NICs, GPUs and guest customization in their own modules.

use serde_json::{Map, Value, json};

use super::{Details, KIND, Prepared, detail};
use crate::store::Store;
use crate::store::entities::reference;
use crate::store::record::{Vm, VmMeta};

/// `vm.name` maxLength in the v3 swagger (`vm_clone_override_spec.name` has 80, checked in `schema`).
const MAX_NAME: usize = 256;

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

pub(super) fn enum_field(
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

impl Store {
    /// Validates a VM spec and metadata the way real Prism does and fills server defaults.
    /// `existing` is the VM being updated (PUT), with its NICs.
    pub(super) fn prepare_vm(
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
    pub(in crate::store) fn filled_spec(&mut self, spec: &Value) -> Result<Value, String> {
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
}
