//! Seeded entities (clusters, hosts, subnets, images, projects, categories), idempotence identifiers.

use std::collections::{BTreeMap, HashMap};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::list::ListQuery;
use super::net::{Ipv4Net, Pool};
use super::refusal::Refusal;
use super::{Reservation, SPEC_HASH, Store, derived_uuid};
use crate::seed::{GuestOs, Seed, SeedError};

/// The built-in `admin` user as recorded entities name their owner (get_subnet.json).
const ADMIN_UUID: &str = "00000000-0000-0000-0000-000000000000";

/// Name of the project every Prism Central has.
const DEFAULT_PROJECT: &str = "_internal";

/// Entities of one kind, kept as the JSON real Prism returns, in creation order.
#[derive(Debug, Clone)]
pub(crate) struct Table {
    pub(crate) kind: &'static str,
    /// Whether its list honours `offset` and `length`.
    paginated: bool,
    /// Whether its list's `metadata` shows `offset` and `length` (list_cluster.json has neither, list_subnet.json
    /// and list_vm.json both).
    page_in_metadata: bool,
    order: Vec<String>,
    by_uuid: HashMap<String, Value>,
}

impl Table {
    pub(crate) fn new(kind: &'static str) -> Self {
        Self {
            kind,
            paginated: true,
            page_in_metadata: true,
            order: Vec::new(),
            by_uuid: HashMap::new(),
        }
    }

    /// A table whose list answers every match whatever the page asked (see [`Table::list`]).
    pub(crate) fn unpaged(kind: &'static str) -> Self {
        Self {
            paginated: false,
            ..Self::new(kind)
        }
    }

    /// A table whose list metadata shows no page (see `page_in_metadata`).
    pub(crate) fn without_page_metadata(kind: &'static str) -> Self {
        Self {
            page_in_metadata: false,
            ..Self::new(kind)
        }
    }

    pub(crate) fn insert(&mut self, uuid: String, entity: Value) {
        if self.by_uuid.insert(uuid.clone(), entity).is_none() {
            self.order.push(uuid);
        }
    }

    pub(crate) fn get(&self, uuid: &str) -> Option<&Value> {
        self.by_uuid.get(uuid)
    }

    pub(crate) fn get_mut(&mut self, uuid: &str) -> Option<&mut Value> {
        self.by_uuid.get_mut(uuid)
    }

    pub(crate) fn name_of(&self, uuid: &str) -> Option<&str> {
        self.get(uuid).and_then(entity_name)
    }

    pub(crate) fn uuid_by_name(&self, name: &str) -> Option<String> {
        self.order
            .iter()
            .find(|u| self.name_of(u) == Some(name))
            .cloned()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Value> {
        self.order.iter().filter_map(|u| self.by_uuid.get(u))
    }

    pub(crate) fn known_filters(&self) -> [&'static str; 2] {
        let kind_name = match self.kind {
            "cluster" => "cluster_name",
            "host" => "host_name",
            "subnet" => "subnet_name",
            "image" => "image_name",
            _ => "project_name",
        };
        ["name", kind_name]
    }

    /// Answers a list request over this table. `POST /hosts/list` (an [`Table::unpaged`] table) does not paginate: it answers every host
    /// whatever `offset` and `length` say (nutanix-cloud-native/cluster-api-provider-nutanix#577: "the API
    /// endpoint does not even support pagination", which broke prism-go-client's `ListAllHost` paging loop).
    pub(crate) fn list(
        &self,
        body: &[u8],
        render: impl Fn(&Value) -> Value,
    ) -> Result<Value, Refusal> {
        let mut query = ListQuery::parse(body, self.kind, &self.known_filters())?;
        if !self.paginated {
            query.unpaged();
        }
        query.page_in_metadata = self.page_in_metadata;
        let matching: Vec<&Value> = self
            .iter()
            .filter(|e| {
                let name = entity_name(e);
                query.filter.as_ref().is_none_or(|f| f.matches(|_| name))
            })
            .collect();
        let (total, page) = query.page(matching, |e| entity_name(e).unwrap_or(""));
        let entities = page
            .into_iter()
            .map(|e| without_api_version(render(e)))
            .collect();
        Ok(query.response(total, entities))
    }
}

/// A list entity carries no `api_version` of its own, the list does (list_vm.json, list_subnet.json,
/// list_cluster.json).
pub(crate) fn without_api_version(mut entity: Value) -> Value {
    if let Some(obj) = entity.as_object_mut() {
        obj.remove("api_version");
    }
    entity
}

/// `spec.name`, else `status.name`.
pub(crate) fn entity_name(entity: &Value) -> Option<&str> {
    entity
        .pointer("/spec/name")
        .and_then(Value::as_str)
        .or_else(|| entity.pointer("/status/name").and_then(Value::as_str))
}

/// A category key and its values (value → description).
#[derive(Debug, Clone, Default)]
pub(crate) struct CategoryKey {
    pub(crate) description: String,
    pub(crate) values: BTreeMap<String, String>,
}

pub(crate) fn reference(kind: &str, uuid: &str, name: Option<&str>) -> Value {
    match name {
        Some(name) => json!({"kind": kind, "uuid": uuid, "name": name}),
        None => json!({"kind": kind, "uuid": uuid}),
    }
}

impl Store {
    pub(super) fn seed_uuid(&mut self, given: &Option<String>) -> String {
        match given {
            Some(uuid) => uuid.clone(),
            None => self.new_uuid(),
        }
    }

    fn cluster_uuid(&self, name: &str, what: &str) -> Result<String, SeedError> {
        self.clusters
            .uuid_by_name(name)
            .filter(|u| *u != self.pc_uuid)
            .ok_or_else(|| {
                SeedError::Reference(format!("{what} refers to unknown cluster '{name}'"))
            })
    }

    /// Metadata of a seeded entity (the keys of get_subnet.json and get_cluster.json).
    fn metadata(&self, kind: &str, uuid: &str) -> Value {
        let now = self.wall(Instant::now());
        json!({"kind": kind, "uuid": uuid, "spec_version": 0, "creation_time": now, "last_update_time": now,
            "categories": {}, "categories_mapping": {}})
    }

    /// A subnet as GET and list answer it: its address usage is counted now (`ip_usage_stats`,
    /// get_subnet.json).
    pub(crate) fn subnet_json(&self, entity: &Value) -> Value {
        let mut entity = entity.clone();
        let uuid = entity
            .pointer("/metadata/uuid")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let range = entity
            .pointer("/spec/resources/ip_config/pool_list/0/range")
            .cloned()
            .unwrap_or(Value::Null);
        if let (Some(pool), Some(res)) = (
            self.pools.get(&uuid),
            entity
                .pointer_mut("/status/resources")
                .and_then(Value::as_object_mut),
        ) {
            let (total, free) = pool.usage();
            let macs = self
                .vms
                .values()
                .flat_map(|vm| vm.nics.iter())
                .filter(|nic| nic.subnet_uuid == uuid)
                .count()
                + self.foreign.on_subnet(&uuid);
            let size = u64::from(u32::MAX >> pool.net.prefix_len) + 1;
            res.insert(
                "ip_usage_stats".to_owned(),
                json!({
                    "num_free_ips": size.saturating_sub(pool.in_use()),
                    "num_macs": macs,
                    "num_assigned_ips": pool.in_use(),
                    "ip_pools_stats": [{"num_total_ips": total, "range": range, "num_free_ips": free}],
                }),
            );
        }
        entity
    }

    pub(crate) fn load_seed(&mut self, seed: &Seed) -> Result<(), SeedError> {
        let pc_uuid = self.seed_uuid(&seed.prism_central.uuid);
        self.pc_uuid = pc_uuid.clone();
        for cluster in &seed.clusters {
            if self.clusters.uuid_by_name(&cluster.name).is_some()
                || cluster.name == seed.prism_central.name
            {
                return Err(SeedError::Reference(format!(
                    "cluster '{}' is defined twice",
                    cluster.name
                )));
            }
            let uuid = self.seed_uuid(&cluster.uuid);
            let entity = cluster_json(
                self.metadata("cluster", &uuid),
                &cluster.name,
                "AOS",
                &cluster.aos_version,
            );
            self.clusters.insert(uuid, entity);
        }
        // The Prism Central entity comes after the Prism Elements in lists (list_cluster.json).
        let pc = cluster_json(
            self.metadata("cluster", &pc_uuid),
            &seed.prism_central.name,
            "PRISM_CENTRAL",
            "pc.2024.3",
        );
        self.clusters.insert(pc_uuid, pc);
        for host in &seed.hosts {
            let uuid = self.seed_uuid(&host.uuid);
            let cluster = self.cluster_uuid(&host.cluster, &format!("host '{}'", host.name))?;
            let mut gpus = Vec::new();
            for (index, gpu) in host.gpus.iter().enumerate() {
                let gpu_uuid = self.new_uuid();
                gpus.push(json!({
                    "uuid": gpu_uuid,
                    "name": gpu.name,
                    "device_id": gpu.device_id,
                    "vendor": gpu.vendor,
                    "mode": gpu.mode,
                    "status": "UNUSED",
                    "assignable": true,
                    "index": index,
                    "numa_node": 0,
                    "num_virtual_display_heads": 0,
                }));
            }
            let entity = json!({
                "api_version": "3.1",
                "metadata": self.metadata("host", &uuid),
                "spec": {"name": host.name, "resources": {}},
                "status": {
                    "name": host.name,
                    "state": "COMPLETE",
                    "cluster_reference": reference("cluster", &cluster, Some(&host.cluster)),
                    "resources": {
                        "host_type": "HYPER_CONVERGED",
                        "hypervisor": {"hypervisor_full_name": "AHV 10.0", "num_vms": 0},
                        "gpu_list": gpus,
                    },
                },
            });
            self.hosts.insert(uuid, entity);
        }
        for subnet in &seed.subnets {
            let uuid = self.seed_uuid(&subnet.uuid);
            let cluster =
                self.cluster_uuid(&subnet.cluster, &format!("subnet '{}'", subnet.name))?;
            let bad = |what: &str| {
                SeedError::Reference(format!("subnet '{}': invalid {what}", subnet.name))
            };
            let net = Ipv4Net::parse(&subnet.cidr).ok_or_else(|| bad("cidr"))?;
            let start: Ipv4Addr = subnet.pool_start.parse().map_err(|_| bad("pool_start"))?;
            let end: Ipv4Addr = subnet.pool_end.parse().map_err(|_| bad("pool_end"))?;
            let gateway: Ipv4Addr = subnet.gateway.parse().map_err(|_| bad("gateway"))?;
            let mut pool = Pool::new(net, start, end)
                .ok_or_else(|| bad("pool range (outside the cidr or reversed)"))?;
            pool.reserve(u32::from(gateway));
            self.pools.insert(uuid.clone(), pool);
            // The shape of a recorded VLAN subnet (get_subnet.json).
            let resources = json!({
                "subnet_type": "VLAN",
                "vlan_id": subnet.vlan_id,
                "vswitch_name": "br0",
                "virtual_switch_uuid": derived_uuid("virtual_switch", &cluster),
                "ip_config": {
                    "subnet_ip": net.address().to_string(),
                    "prefix_length": net.prefix_len,
                    "default_gateway_ip": subnet.gateway,
                    "pool_list": [{"range": format!("{} {}", subnet.pool_start, subnet.pool_end)}],
                    "dhcp_options": {"domain_name_server_list": [subnet.gateway]},
                    "dhcp_server_address": {"ip": net.host(u64::from(u32::MAX >> net.prefix_len).saturating_sub(1)).to_string()},
                },
            });
            let mut metadata = self.metadata("subnet", &uuid);
            if let Some(obj) = metadata.as_object_mut() {
                obj.insert("spec_hash".to_owned(), json!(SPEC_HASH));
                obj.insert(
                    "owner_reference".to_owned(),
                    reference("user", ADMIN_UUID, Some("admin")),
                );
            }
            let entity = json!({
                "api_version": "3.1",
                "metadata": metadata,
                "spec": {
                    "name": subnet.name,
                    "cluster_reference": reference("cluster", &cluster, Some(&subnet.cluster)),
                    "resources": resources,
                },
                "status": {
                    "name": subnet.name,
                    "state": "COMPLETE",
                    "cluster_reference": reference("cluster", &cluster, Some(&subnet.cluster)),
                    "resources": resources,
                    "execution_context": {"task_uuid": [derived_uuid("subnet_create", &uuid)]},
                },
            });
            self.subnets.insert(uuid, entity);
        }
        for image in &seed.images {
            let uuid = self.seed_uuid(&image.uuid);
            self.image_os.insert(uuid.clone(), image.os);
            let entity = json!({
                "api_version": "3.1",
                "metadata": self.metadata("image", &uuid),
                "spec": {"name": image.name, "resources": {"image_type": "DISK_IMAGE"}},
                "status": {
                    "name": image.name,
                    "state": "COMPLETE",
                    "resources": {
                        "image_type": "DISK_IMAGE",
                        "size_bytes": image.size_mib.saturating_mul(1 << 20),
                        "retrieval_uri_list": [],
                    },
                },
            });
            self.images.insert(uuid, entity);
        }
        for project in &seed.projects {
            let uuid = self.seed_uuid(&project.uuid);
            let entity = json!({
                "api_version": "3.1",
                "metadata": self.metadata("project", &uuid),
                "spec": {"name": project.name, "resources": {}},
                "status": {"name": project.name, "state": "COMPLETE", "resources": {}},
            });
            self.projects.insert(uuid, entity);
        }
        // Every Prism Central has the default project `_internal`, which VMs created without a project belong
        // to (get_vm.json). Its UUID is derived, not drawn, so seeded UUIDs stay what they were.
        if self.projects.uuid_by_name(DEFAULT_PROJECT).is_none() {
            let uuid = derived_uuid("project", DEFAULT_PROJECT);
            let entity = json!({
                "api_version": "3.1",
                "metadata": self.metadata("project", &uuid),
                "spec": {"name": DEFAULT_PROJECT, "resources": {}},
                "status": {"name": DEFAULT_PROJECT, "state": "COMPLETE", "resources": {}},
            });
            self.projects.insert(uuid, entity);
        }
        for category in &seed.categories {
            let key = self.categories.entry(category.key.clone()).or_default();
            for value in &category.values {
                key.values.insert(value.clone(), String::new());
            }
        }
        for template in &seed.templates {
            self.seed_template(template)?;
        }
        for vm in &seed.vms {
            self.seed_vm(vm)?;
        }
        self.seed_foreign_vms(seed.foreign_vms)
    }

    /// The reference to the default project (see `load_seed`).
    pub(crate) fn default_project_reference(&self) -> Value {
        let uuid = self
            .projects
            .uuid_by_name(DEFAULT_PROJECT)
            .unwrap_or_else(|| derived_uuid("project", DEFAULT_PROJECT));
        reference("project", &uuid, Some(DEFAULT_PROJECT))
    }

    /// A Prism Element (not the Prism Central entity) by UUID.
    pub(crate) fn is_prism_element(&self, uuid: &str) -> bool {
        uuid != self.pc_uuid && self.clusters.get(uuid).is_some()
    }

    pub(crate) fn image_size_mib(&self, uuid: &str) -> Option<u64> {
        self.images
            .get(uuid)?
            .pointer("/status/resources/size_bytes")?
            .as_u64()
            .map(|b| b >> 20)
    }

    pub(crate) fn image_os(&self, uuid: &str) -> GuestOs {
        self.image_os.get(uuid).copied().unwrap_or_default()
    }

    pub(crate) fn subnet_cluster(&self, uuid: &str) -> Option<&str> {
        self.subnets
            .get(uuid)?
            .pointer("/spec/cluster_reference/uuid")
            .and_then(Value::as_str)
    }

    // ---- categories ----

    pub(crate) fn category_key_json(name: &str, key: &CategoryKey) -> Value {
        json!({"api_version": "3.1", "name": name, "description": key.description, "system_defined": false})
    }

    pub(crate) fn category_value_json(key: &str, value: &str, description: &str) -> Value {
        json!({"api_version": "3.1", "name": key, "value": value, "description": description, "system_defined": false})
    }

    pub(crate) fn category_exists(&self, key: &str, value: &str) -> bool {
        self.categories
            .get(key)
            .is_some_and(|k| k.values.contains_key(value))
    }

    // ---- idempotence identifiers ----

    /// `POST /idempotence_identifiers`. A repeated request for a client identifier whose reservation has not
    /// expired returns the same UUIDs (mock choice, so a retried reservation is itself idempotent).
    pub(crate) fn reserve_uuids(&mut self, body: &Value, now: Instant) -> Result<Value, Refusal> {
        const KIND: &str = "idempotence_identifier";
        let mut details = Vec::new();
        let client_identifier = body
            .get("client_identifier")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if client_identifier.is_empty() {
            details.push(("client_identifier".to_owned(), "is required".to_owned()));
        }
        let count = body.get("count").and_then(Value::as_i64).unwrap_or(1);
        if !(1..=4096).contains(&count) {
            details.push(("count".to_owned(), format!("{count} is not in 1..=4096")));
        }
        let minutes = body
            .get("valid_duration_in_minutes")
            .and_then(Value::as_i64)
            .unwrap_or(60);
        if !(1..=527_040).contains(&minutes) {
            details.push((
                "valid_duration_in_minutes".to_owned(),
                format!("{minutes} is not in 1..=527040"),
            ));
        }
        if !details.is_empty() {
            return Err(Refusal::invalid(KIND, details));
        }
        if let Some(existing) = self.reservations.get(&client_identifier)
            && existing.expires > now
        {
            return Ok(reservation_json(existing));
        }
        let uuids: Vec<String> = (0..count).map(|_| self.new_uuid()).collect();
        let validity = Duration::from_secs(u64::try_from(minutes).unwrap_or(60) * 60);
        let expires = now + validity;
        let reservation = Reservation {
            client_identifier: client_identifier.clone(),
            uuids,
            expires,
            expiration_time: self.wall(expires),
        };
        for uuid in &reservation.uuids {
            self.reserved_uuids
                .insert(uuid.clone(), client_identifier.clone());
        }
        let response = reservation_json(&reservation);
        if let Some(old) = self.reservations.insert(client_identifier, reservation) {
            for uuid in old.uuids {
                self.reserved_uuids.remove(&uuid);
            }
        }
        Ok(response)
    }

    pub(crate) fn get_reservation(&self, client_identifier: &str) -> Option<Value> {
        self.reservations
            .get(client_identifier)
            .map(reservation_json)
    }

    /// Releases a reservation; false if there is none.
    pub(crate) fn delete_reservation(&mut self, client_identifier: &str) -> bool {
        let Some(reservation) = self.reservations.remove(client_identifier) else {
            return false;
        };
        for uuid in &reservation.uuids {
            self.reserved_uuids.remove(uuid);
        }
        true
    }

    /// Whether `uuid` was reserved and the reservation has not expired.
    pub(crate) fn uuid_is_reserved(&self, uuid: &str, now: Instant) -> bool {
        self.reserved_uuids
            .get(uuid)
            .and_then(|client| self.reservations.get(client))
            .is_some_and(|r| r.expires > now)
    }

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

    pub(crate) fn user_json(&self) -> Value {
        json!({
            "api_version": "3.1",
            "metadata": {"kind": "user", "uuid": self.user_uuid},
            "spec": {},
            "status": {
                "name": self.username,
                "state": "COMPLETE",
                "resources": {"display_name": self.username, "user_type": "LOCAL", "access_control_policy_reference_list": []},
            },
        })
    }
}

/// As recorded (create_idempotence_identifiers.json, get_idempotence_identifiers.json).
fn reservation_json(r: &Reservation) -> Value {
    json!({"client_identifier": r.client_identifier, "count": r.uuids.len(),
        "uuid_list": r.uuids, "expiration_time": r.expiration_time})
}

/// A cluster entity in the shape of get_cluster.json (a Prism Element) and of the Prism Central entry of
/// list_cluster.json (no `nodes`). Addresses are from the documentation range 192.0.2.0/24: the mock's clusters
/// have none of their own.
fn cluster_json(metadata: Value, name: &str, service: &str, version: &str) -> Value {
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
