//! Validation of v3 VM request bodies against the v3 schema, as Prism Central's own schema check refuses them
//! before any semantic check: a 422 `INVALID_REQUEST` whose `details` say what the schema says.
//!
//! Every rule comes from `v3/swagger.json` of nutanix-cloud-native/prism-go-client (definitions `vm_intent_input`,
//! `vm_metadata`, `vm`, `vm_resources`, `vm_boot_config`, `disk_address`, `vm_power_state_mechanism`, `vm_disk`,
//! `disk_storage_config`, `flash_mode`, `vm_vtpm_config`, `vm_nic`, `ip_address`, `vm_gpu`, `guest_customization`,
//! `cluster_reference`, `subnet_reference`, `project_reference`, `vm_clone_input`, `vm_clone_override_spec`).
//! The swagger marks enums with `x-ntnx-enum`; they are enforced. Messages take the form of the schema errors
//! real Prism answers (nutanix/terraform-provider-nutanix#36: `"'api_version' is a required property"`).
//! Fields the schema does not constrain, and fields the mock does not know, are accepted: a real Prism accepts
//! them (the recorded PUT of `update_vm.json` sends `gateway_address_list`, `secondary_ip_address_list`,
//! `num_queues`, empty `vnuma_config` and `vtpm_config`, and is accepted).

use serde_json::{Map, Value};

/// (field path, message) pairs.
pub(crate) type Details = Vec<(String, String)>;

const UUID_PATTERN: &str =
    "^[a-fA-F0-9]{8}-[a-fA-F0-9]{4}-[a-fA-F0-9]{4}-[a-fA-F0-9]{4}-[a-fA-F0-9]{12}$";
const MAC_PATTERN: &str = "^([0-9A-Fa-f]{2}[:-]){5}([0-9A-Fa-f]{2})$";
const IPV4_PATTERN: &str =
    "^(?:(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)\\.){3}(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)$";

/// `vm_intent_input`: the body of `POST /vms` and `PUT /vms/{uuid}`.
pub(crate) fn check_vm_intent(body: &Value) -> Details {
    let mut c = Checker::default();
    let Some(top) = c.object(body, "") else {
        return c.details;
    };
    c.required(top, &["metadata", "spec"], "");
    c.string(top, "api_version", "", None);
    if let Some(metadata) = top.get("metadata").and_then(|m| c.object(m, "metadata")) {
        c.vm_metadata(metadata);
    }
    if let Some(spec) = top.get("spec").and_then(|s| c.object(s, "spec")) {
        c.required(spec, &["name", "resources"], "spec");
        c.string(spec, "name", "spec", Some(256));
        c.string(spec, "description", "spec", Some(1000));
        c.kind_reference(spec, "cluster_reference", "cluster", "spec");
        if let Some(res) = spec
            .get("resources")
            .and_then(|r| c.object(r, "spec.resources"))
        {
            c.vm_resources(res, "spec.resources");
        }
    }
    c.details
}

/// `vm_clone_input`: the body of `POST /vms/{uuid}/clone`.
pub(crate) fn check_clone_input(body: &Value) -> Details {
    let mut c = Checker::default();
    let Some(top) = c.object(body, "") else {
        return c.details;
    };
    if let Some(metadata) = top.get("metadata").and_then(|m| c.object(m, "metadata")) {
        c.uuid(metadata, "uuid", "metadata");
        c.string(metadata, "entity_version", "metadata", None);
    }
    if let Some(o) = top
        .get("override_spec")
        .and_then(|o| c.object(o, "override_spec"))
    {
        let path = "override_spec";
        c.string(o, "name", path, Some(80));
        for key in [
            "num_threads_per_core",
            "num_vcpus_per_socket",
            "num_sockets",
            "memory_size_mib",
        ] {
            c.integer(o, key, path, Some(1), None);
        }
        c.items(o, "nic_list", path, |c, nic, p| c.vm_nic(nic, p));
        if let Some(boot) = o
            .get("boot_config")
            .and_then(|b| c.object(b, "override_spec.boot_config"))
        {
            c.boot_config(boot, "override_spec.boot_config");
        }
        if let Some(gc) = o
            .get("guest_customization")
            .and_then(|g| c.object(g, "override_spec.guest_customization"))
        {
            c.guest_customization(gc, "override_spec.guest_customization");
        }
    }
    c.details
}

#[derive(Default)]
struct Checker {
    details: Details,
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn is_uuid(text: &str) -> bool {
    uuid::Uuid::try_parse(text).is_ok_and(|_| text.len() == 36)
}

fn is_mac(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.len() == 17
        && bytes.iter().enumerate().all(|(i, b)| {
            if i % 3 == 2 {
                *b == b':' || *b == b'-'
            } else {
                b.is_ascii_hexdigit()
            }
        })
}

fn is_ipv4(text: &str) -> bool {
    let parts: Vec<&str> = text.split('.').collect();
    parts.len() == 4
        && parts.iter().all(|p| {
            !p.is_empty() && p.len() <= 3 && p.bytes().all(|b| b.is_ascii_digit()) && {
                p.parse::<u16>().is_ok_and(|n| n <= 255)
            }
        })
}

impl Checker {
    fn fail(&mut self, path: &str, message: String) {
        self.details.push((path.to_owned(), message));
    }

    fn type_error(&mut self, path: &str, value: &Value, expected: &str) {
        self.fail(path, format!("{value} is not of type '{expected}'"));
    }

    fn object<'v>(&mut self, value: &'v Value, path: &str) -> Option<&'v Map<String, Value>> {
        match value {
            Value::Object(map) => Some(map),
            other => {
                self.type_error(path, other, "object");
                None
            }
        }
    }

    fn required(&mut self, map: &Map<String, Value>, keys: &[&str], path: &str) {
        for key in keys {
            if !map.contains_key(*key) {
                self.fail(path, format!("'{key}' is a required property"));
            }
        }
    }

    fn string(&mut self, map: &Map<String, Value>, key: &str, path: &str, max: Option<usize>) {
        let Some(value) = map.get(key) else { return };
        let path = join(path, key);
        match value {
            Value::String(s) => {
                if let Some(max) = max
                    && s.chars().count() > max
                {
                    self.fail(&path, format!("'{s}' is too long (maximum length {max})"));
                }
            }
            other => self.type_error(&path, other, "string"),
        }
    }

    fn pattern(
        &mut self,
        map: &Map<String, Value>,
        key: &str,
        path: &str,
        pattern: &str,
        valid: fn(&str) -> bool,
    ) {
        let Some(value) = map.get(key) else { return };
        let path = join(path, key);
        match value {
            Value::String(s) if valid(s) => {}
            Value::String(s) => self.fail(&path, format!("'{s}' does not match '{pattern}'")),
            other => self.type_error(&path, other, "string"),
        }
    }

    fn uuid(&mut self, map: &Map<String, Value>, key: &str, path: &str) {
        self.pattern(map, key, path, UUID_PATTERN, is_uuid);
    }

    fn one_of(&mut self, map: &Map<String, Value>, key: &str, path: &str, allowed: &[&str]) {
        if let Some(value) = map.get(key) {
            self.enum_value(value, &join(path, key), allowed);
        }
    }

    fn enum_value(&mut self, value: &Value, path: &str, allowed: &[&str]) {
        match value {
            Value::String(s) if allowed.contains(&s.as_str()) => {}
            Value::String(_) => {
                let list: Vec<String> = allowed.iter().map(|a| format!("'{a}'")).collect();
                self.fail(path, format!("{value} is not one of [{}]", list.join(", ")));
            }
            other => self.type_error(path, other, "string"),
        }
    }

    fn integer(
        &mut self,
        map: &Map<String, Value>,
        key: &str,
        path: &str,
        min: Option<i64>,
        max: Option<i64>,
    ) {
        let Some(value) = map.get(key) else { return };
        let path = join(path, key);
        match value.as_i64() {
            Some(n) if min.is_some_and(|m| n < m) => self.fail(
                &path,
                format!(
                    "{n} is less than the minimum of {}",
                    min.unwrap_or_default()
                ),
            ),
            Some(n) if max.is_some_and(|m| n > m) => self.fail(
                &path,
                format!(
                    "{n} is greater than the maximum of {}",
                    max.unwrap_or_default()
                ),
            ),
            Some(_) => {}
            None if value.is_u64() => {}
            None => self.type_error(&path, value, "integer"),
        }
    }

    fn boolean(&mut self, map: &Map<String, Value>, key: &str, path: &str) {
        if let Some(value) = map.get(key)
            && !value.is_boolean()
        {
            self.type_error(&join(path, key), value, "boolean");
        }
    }

    fn child<'v>(
        &mut self,
        map: &'v Map<String, Value>,
        key: &str,
        path: &str,
    ) -> Option<(&'v Map<String, Value>, String)> {
        let value = map.get(key)?;
        let path = join(path, key);
        self.object(value, &path).map(|m| (m, path))
    }

    /// Each item of an array field, an object checked by `check` with its path.
    fn items(
        &mut self,
        map: &Map<String, Value>,
        key: &str,
        path: &str,
        mut check: impl FnMut(&mut Self, &Map<String, Value>, &str),
    ) {
        let Some((list, path)) = self.array(map, key, path, None) else {
            return;
        };
        for (i, item) in list.iter().enumerate() {
            let item_path = format!("{path}[{i}]");
            if let Some(obj) = self.object(item, &item_path) {
                check(self, obj, &item_path);
            }
        }
    }

    /// An array field, at most `max_items` long; its items are not constrained further.
    fn array<'v>(
        &mut self,
        map: &'v Map<String, Value>,
        key: &str,
        path: &str,
        max_items: Option<usize>,
    ) -> Option<(&'v Vec<Value>, String)> {
        let value = map.get(key)?;
        let path = join(path, key);
        let Some(list) = value.as_array() else {
            self.type_error(&path, value, "array");
            return None;
        };
        if let Some(max) = max_items
            && list.len() > max
        {
            self.fail(&path, format!("is too long (maximum {max} items)"));
        }
        Some((list, path))
    }

    /// Each item of an array of strings, which must be one of `allowed`.
    fn enum_items(&mut self, map: &Map<String, Value>, key: &str, path: &str, allowed: &[&str]) {
        if let Some((list, path)) = self.array(map, key, path, None) {
            for (i, item) in list.iter().enumerate() {
                self.enum_value(item, &format!("{path}[{i}]"), allowed);
            }
        }
    }

    /// A `{kind, uuid}` reference of a fixed kind (`cluster_reference`, `subnet_reference`,
    /// `project_reference`: both required, `kind` the one value of its `x-ntnx-enum`).
    fn kind_reference(&mut self, map: &Map<String, Value>, key: &str, kind: &str, path: &str) {
        let Some((reference, path)) = self.child(map, key, path) else {
            return;
        };
        self.required(reference, &["kind", "uuid"], &path);
        self.one_of(reference, "kind", &path, &[kind]);
        self.uuid(reference, "uuid", &path);
    }

    fn vm_metadata(&mut self, metadata: &Map<String, Value>) {
        let path = "metadata";
        self.required(metadata, &["kind"], path);
        self.one_of(metadata, "kind", path, &["vm"]);
        self.uuid(metadata, "uuid", path);
        self.integer(metadata, "spec_version", path, None, None);
        self.string(metadata, "spec_hash", path, None);
        self.string(metadata, "entity_version", path, None);
        self.string(metadata, "name", path, Some(80));
        self.boolean(metadata, "use_categories_mapping", path);
        self.boolean(metadata, "should_force_translate", path);
        for key in ["categories", "categories_mapping"] {
            self.child(metadata, key, path);
        }
        self.kind_reference(metadata, "project_reference", "project", path);
    }

    fn vm_resources(&mut self, res: &Map<String, Value>, path: &str) {
        for key in [
            "num_threads_per_core",
            "memory_size_mib",
            "num_vcpus_per_socket",
            "num_sockets",
        ] {
            self.integer(res, key, path, Some(1), None);
        }
        for key in [
            "is_agent_vm",
            "hardware_virtualization_enabled",
            "is_vcpu_hard_pinned",
            "vga_console_enabled",
            "memory_overcommit_enabled",
            "gpu_console_enabled",
            "enable_cpu_passthrough",
            "disable_branding",
        ] {
            self.boolean(res, key, path);
        }
        self.one_of(res, "power_state", path, &["ON", "OFF"]);
        self.one_of(res, "machine_type", path, &["PC", "PSERIES", "Q35"]);
        self.string(res, "hardware_clock_timezone", path, Some(64));
        self.string(res, "guest_os_id", path, Some(64));
        self.uuid(res, "generation_uuid", path);
        self.uuid(res, "bios_uuid", path);
        if let Some((boot, p)) = self.child(res, "boot_config", path) {
            self.boot_config(boot, &p);
        }
        if let Some((mechanism, p)) = self.child(res, "power_state_mechanism", path) {
            self.one_of(mechanism, "mechanism", &p, &["ACPI", "GUEST", "HARD"]);
        }
        if let Some((storage, p)) = self.child(res, "storage_config", path) {
            self.one_of(storage, "flash_mode", &p, &["ENABLED", "DISABLED"]);
        }
        if let Some((gc, p)) = self.child(res, "guest_customization", path) {
            self.guest_customization(gc, &p);
        }
        if let Some((vtpm, p)) = self.child(res, "vtpm_config", path) {
            self.boolean(vtpm, "vtpm_enabled", &p);
            self.string(vtpm, "vtpm_secret", &p, None);
        }
        for key in ["vnuma_config", "apc_config"] {
            self.child(res, key, path);
        }
        self.items(res, "disk_list", path, |c, disk, p| c.vm_disk(disk, p));
        self.items(res, "nic_list", path, |c, nic, p| c.vm_nic(nic, p));
        self.items(res, "gpu_list", path, |c, gpu, p| {
            c.one_of(gpu, "vendor", p, &["NVIDIA", "INTEL", "AMD"]);
            c.one_of(
                gpu,
                "mode",
                p,
                &["PASSTHROUGH_GRAPHICS", "PASSTHROUGH_COMPUTE", "VIRTUAL"],
            );
            c.integer(gpu, "device_id", p, None, None);
        });
        self.array(res, "serial_port_list", path, None);
    }

    fn boot_config(&mut self, boot: &Map<String, Value>, path: &str) {
        self.one_of(boot, "boot_type", path, &["UEFI", "LEGACY", "SECURE_BOOT"]);
        self.enum_items(
            boot,
            "boot_device_order_list",
            path,
            &["CDROM", "DISK", "NETWORK"],
        );
        if let Some((device, p)) = self.child(boot, "boot_device", path) {
            if let Some((address, ap)) = self.child(device, "disk_address", &p) {
                self.disk_address(address, &ap);
            }
            self.pattern(device, "mac_address", &p, MAC_PATTERN, is_mac);
        }
    }

    fn disk_address(&mut self, address: &Map<String, Value>, path: &str) {
        self.required(address, &["adapter_type", "device_index"], path);
        self.integer(address, "device_index", path, None, None);
        self.one_of(
            address,
            "adapter_type",
            path,
            &["SCSI", "IDE", "PCI", "SATA", "SPAPR"],
        );
    }

    fn vm_disk(&mut self, disk: &Map<String, Value>, path: &str) {
        self.uuid(disk, "uuid", path);
        self.integer(disk, "disk_size_bytes", path, Some(1), None);
        self.integer(disk, "disk_size_mib", path, Some(1), None);
        if let Some((storage, p)) = self.child(disk, "storage_config", path) {
            self.one_of(storage, "flash_mode", &p, &["ENABLED", "DISABLED"]);
            if let Some((container, cp)) = self.child(storage, "storage_container_reference", &p) {
                self.string(container, "kind", &cp, None);
                self.uuid(container, "uuid", &cp);
            }
        }
        if let Some((props, p)) = self.child(disk, "device_properties", path)
            && let Some((address, ap)) = self.child(props, "disk_address", &p)
        {
            self.disk_address(address, &ap);
        }
        self.child(disk, "data_source_reference", path);
    }

    fn vm_nic(&mut self, nic: &Map<String, Value>, path: &str) {
        self.one_of(
            nic,
            "nic_type",
            path,
            &[
                "NORMAL_NIC",
                "DIRECT_NIC",
                "NETWORK_FUNCTION_NIC",
                "SPAN_DESTINATION_NIC",
            ],
        );
        self.uuid(nic, "uuid", path);
        self.integer(nic, "num_queues", path, None, None);
        self.array(nic, "secondary_ip_address_list", path, Some(100));
        self.one_of(
            nic,
            "network_function_nic_type",
            path,
            &["INGRESS", "EGRESS", "TAP"],
        );
        self.one_of(nic, "vlan_mode", path, &["ACCESS", "TRUNKED"]);
        self.pattern(nic, "mac_address", path, MAC_PATTERN, is_mac);
        self.kind_reference(nic, "subnet_reference", "subnet", path);
        self.one_of(nic, "model", path, &["VIRTIO", "E1000"]);
        self.boolean(nic, "is_connected", path);
        self.items(nic, "ip_endpoint_list", path, |c, endpoint, p| {
            c.pattern(endpoint, "ip", p, IPV4_PATTERN, is_ipv4);
            c.one_of(endpoint, "type", p, &["ASSIGNED", "LEARNED"]);
            c.integer(endpoint, "prefix_length", p, Some(0), Some(32));
            c.one_of(endpoint, "ip_type", p, &["DHCP", "STATIC"]);
        });
    }

    fn guest_customization(&mut self, gc: &Map<String, Value>, path: &str) {
        self.boolean(gc, "is_overridable", path);
        for key in ["cloud_init", "sysprep"] {
            self.child(gc, key, path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn create(resources: Value) -> Value {
        json!({"metadata": {"kind": "vm"}, "spec": {"name": "a", "resources": resources,
            "cluster_reference": {"kind": "cluster", "uuid": "00061f7f-44f7-19dc-3be1-7cc25586ee44"}}})
    }

    #[test]
    fn flash_mode_on_is_not_one_of_the_schema_values() {
        let details = check_vm_intent(&create(json!({"disk_list": [{"disk_size_mib": 1,
            "storage_config": {"flash_mode": "ON"}}]})));
        assert_eq!(
            details,
            vec![(
                "spec.resources.disk_list[0].storage_config.flash_mode".to_owned(),
                "\"ON\" is not one of ['ENABLED', 'DISABLED']".to_owned()
            )]
        );
        assert!(
            check_vm_intent(&create(json!({"disk_list": [{"disk_size_bytes": 1048576,
            "storage_config": {"flash_mode": "DISABLED"}}]})))
            .is_empty()
        );
    }

    #[test]
    fn required_properties_types_and_limits() {
        let details = check_vm_intent(&json!({"spec": {"name": 7, "resources": {"num_sockets": 0,
            "nic_list": [{"subnet_reference": {"uuid": "nope"}, "mac_address": "50:6b:8d:xx:19:54"}]}}}));
        let fields: Vec<&str> = details.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(
            fields,
            vec![
                "",
                "spec.name",
                "spec.resources.num_sockets",
                "spec.resources.nic_list[0].mac_address",
                "spec.resources.nic_list[0].subnet_reference",
                "spec.resources.nic_list[0].subnet_reference.uuid",
            ],
            "{details:?}"
        );
        assert_eq!(details[0].1, "'metadata' is a required property");
        assert!(is_mac("50:6b:8d:24:19:54") && !is_mac("50:6b:8d:24:19"));
        assert!(is_ipv4("10.23.129.96") && !is_ipv4("10.23.129.256") && !is_ipv4("1.2.3"));
    }

    #[test]
    fn the_recorded_requests_pass() {
        for file in ["create_vm.json", "update_vm.json"] {
            let path = format!("{}/recorded/{file}", env!("CARGO_MANIFEST_DIR"));
            let text = std::fs::read_to_string(&path).unwrap();
            let recorded: Value = serde_json::from_str(&text).unwrap();
            for exchange in recorded["exchanges"].as_array().unwrap() {
                let body = &exchange["request"]["body"];
                if body.is_object() {
                    assert!(
                        check_vm_intent(body).is_empty(),
                        "{file}: {:?}",
                        check_vm_intent(body)
                    );
                }
            }
        }
    }
}
