//! Clusters as Prism Central answers them: the Prism Elements, the Prism Central's own cluster entity, and
//! `GET /prism_central`.

use serde_json::{Value, json};

use super::{SPEC_HASH, Store, derived_uuid};

impl Store {
    /// `GET /prism_central`, in the shape of get_prism_central.json: one Prism Central VM on the first Prism
    /// Element and subnet, addresses from the documentation range.
    pub(crate) fn prism_central_json(&self) -> Value {
        let cluster = self
            .clusters
            .iter()
            .filter_map(|c| c.pointer("/metadata/uuid").and_then(Value::as_str))
            .find(|u| *u != self.pc_uuid)
            .unwrap_or(&self.pc_uuid)
            .to_owned();
        let subnet = self
            .subnets
            .iter()
            .find_map(|s| s.pointer("/metadata/uuid").and_then(Value::as_str))
            .unwrap_or_default()
            .to_owned();
        json!({"resources": {
            "should_auto_register": false,
            "is_registered_to_hosting_pe": true,
            "cmsp_config": {
                "platform_ip_block_list": ["192.168.6.2 192.168.6.25"],
                "platform_network_configuration": {"subnet_mask": "255.255.255.0", "type": "kPrivateNetwork", "default_gateway": "192.168.6.1"},
                "pc_domain_name": "msp.cluster.local",
                "cmsp_args": "{}",
            },
            "pc_size": "kSmall",
            "version": "pc.2024.3.0.1",
            "pc_vm_list": [{
                "vm_name": "prism-central-vm-1",
                "data_disk_size_bytes": 536_870_912_000_u64,
                "dns_server_ip_list": ["192.0.2.2"],
                "container_uuid": derived_uuid("storage_container", &cluster),
                "nic_list": [{"network_configuration": {"subnet_mask": "255.255.255.0", "network_uuid": subnet, "default_gateway": "192.0.2.1"},
                    "ip_list": ["192.0.2.30"]}],
                "num_sockets": 6,
                "memory_size_bytes": 28_991_029_248_u64,
                "status": "NORMAL",
                "power_state": "ON",
                "vm_uuid": derived_uuid("pc_vm", &self.pc_uuid),
                "ntp_server_list": ["0.pool.ntp.org"],
                "cluster_reference": {"kind": "cluster", "uuid": cluster},
            }],
            "cluster_uuid": self.pc_uuid,
            "type": "PC",
            "virtual_ip": "192.0.2.31",
        }})
    }
}

/// A cluster entity in the shape of get_cluster.json (a Prism Element) and of the Prism Central entry of
/// list_cluster.json (no `nodes`). Addresses are from the documentation range 192.0.2.0/24: the mock's clusters
/// have none of their own.
pub(super) fn cluster_json(metadata: Value, name: &str, service: &str, version: &str) -> Value {
    let mut metadata = metadata;
    if let Some(obj) = metadata.as_object_mut() {
        obj.insert("spec_hash".to_owned(), json!(SPEC_HASH));
    }
    let software = json!({
        "NOS": {"software_type": "NOS", "status": "INSTALLED", "version": version},
        "NCC": {"software_type": "NCC", "status": "INSTALLED", "version": "ncc-5.0.0"},
    });
    let keys = json!([{"name": "prism-mock", "key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPrismMockShapeOnlyKey prism-mock"}]);
    let network = json!({
        "external_ip": "192.0.2.10",
        "external_subnet": "192.0.2.0/255.255.255.0",
        "external_data_services_ip": "192.0.2.11",
        "internal_subnet": "192.168.5.0/255.255.255.128",
        "ntp_server_ip_list": ["0.pool.ntp.org"],
        "name_server_ip_list": ["192.0.2.2"],
    });
    let spec_config = json!({
        "authorized_public_key_list": keys,
        "software_map": software,
        "encryption_status": "NOT_SUPPORTED",
        "supported_information_verbosity": "BASIC_PLUS_CORE_DUMP",
        "redundancy_factor": 2,
        "domain_awareness_level": "NODE",
        "enabled_feature_list": ["PASSWORD_REMOTE_LOGIN_ENABLED"],
        "timezone": "UTC",
        "operation_mode": "NORMAL",
    });
    let status_config = json!({
        "software_map": software,
        "encryption_status": "NOT_SUPPORTED",
        "ssl_key": {"key_type": "RSA_4096", "expire_datetime": "2030-01-01T00:00:00Z",
            "signing_info": {"country_code": "", "state": "", "city": "", "organization": "",
                "common_name": "", "email_address": ""}},
        "service_list": [service],
        "redundancy_factor": 2,
        "enabled_feature_list": ["PASSWORD_REMOTE_LOGIN_ENABLED"],
        "is_available": true,
        "timezone": "UTC",
        "cluster_arch": "X86_64",
        "authorized_public_key_list": keys,
        "supported_information_verbosity": "BASIC_PLUS_CORE_DUMP",
        "domain_awareness_level": "NODE",
        "build": {"build_type": "release", "version": version, "full_version": format!("el8-release-{version}"),
            "commit_id": "0000000000000000000000000000000000000000", "short_commit_id": "000000",
            "is_long_term_support": false},
        "operation_mode": "NORMAL",
    });
    let mut status_resources = json!({"config": status_config, "network": network});
    if service != "PRISM_CENTRAL"
        && let Some(obj) = status_resources.as_object_mut()
    {
        obj.insert(
            "nodes".to_owned(),
            json!({"hypervisor_server_list": [{"ip": "192.0.2.20", "type": "AHV", "version": "el8.nutanix.20230302"}]}),
        );
    }
    json!({
        "api_version": "3.1",
        "metadata": metadata,
        "spec": {"name": name, "resources": {"config": spec_config, "network": network}},
        "status": {"name": name, "state": "COMPLETE", "resources": status_resources},
    })
}
