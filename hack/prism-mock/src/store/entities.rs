//! Seeded entities (clusters, hosts, subnets, images, projects, categories), idempotence identifiers.

use std::collections::{BTreeMap, HashMap};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::list::ListQuery;
use super::net::{Ipv4Net, Pool};
use super::{Reservation, Store, Template};
use crate::errors::ApiError;
use crate::seed::{GuestOs, Seed, SeedError};

/// Entities of one kind, kept as the JSON real Prism returns, in creation order.
#[derive(Debug, Clone)]
pub(crate) struct Table {
    pub(crate) kind: &'static str,
    /// Whether its list honours `offset` and `length`.
    paginated: bool,
    order: Vec<String>,
    by_uuid: HashMap<String, Value>,
}

impl Table {
    pub(crate) fn new(kind: &'static str) -> Self {
        Self {
            kind,
            paginated: true,
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
    pub(crate) fn list(&self, body: &[u8]) -> Result<Value, ApiError> {
        let mut query = ListQuery::parse(body, self.kind, &self.known_filters())?;
        if !self.paginated {
            query.unpaged();
        }
        let matching: Vec<&Value> = self
            .iter()
            .filter(|e| {
                let name = entity_name(e);
                query.filter.as_ref().is_none_or(|f| f.matches(|_| name))
            })
            .collect();
        let (total, page) = query.page(matching, |e| entity_name(e).unwrap_or(""));
        Ok(query.response(total, page.into_iter().cloned().collect()))
    }
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
    fn seed_uuid(&mut self, given: &Option<String>) -> String {
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

    fn metadata(&self, kind: &str, uuid: &str) -> Value {
        let now = self.wall(Instant::now());
        json!({"kind": kind, "uuid": uuid, "spec_version": 0, "creation_time": now, "last_update_time": now})
    }

    pub(crate) fn load_seed(&mut self, seed: &Seed) -> Result<(), SeedError> {
        let pc_uuid = self.seed_uuid(&seed.prism_central.uuid);
        self.pc_uuid = pc_uuid.clone();
        let pc = cluster_json(
            self.metadata("cluster", &pc_uuid),
            &seed.prism_central.name,
            "PRISM_CENTRAL",
            "pc.2024.3",
        );
        self.clusters.insert(pc_uuid, pc);
        for cluster in &seed.clusters {
            if self.clusters.uuid_by_name(&cluster.name).is_some() {
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
            let resources = json!({
                "subnet_type": "VLAN",
                "vlan_id": subnet.vlan_id,
                "ip_config": {
                    "subnet_ip": net.address().to_string(),
                    "prefix_length": net.prefix_len,
                    "default_gateway_ip": subnet.gateway,
                    "pool_list": [{"range": format!("{} {}", subnet.pool_start, subnet.pool_end)}],
                },
            });
            let entity = json!({
                "api_version": "3.1",
                "metadata": self.metadata("subnet", &uuid),
                "spec": {
                    "name": subnet.name,
                    "cluster_reference": reference("cluster", &cluster, None),
                    "resources": resources,
                },
                "status": {
                    "name": subnet.name,
                    "state": "COMPLETE",
                    "cluster_reference": reference("cluster", &cluster, Some(&subnet.cluster)),
                    "resources": resources,
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
        for category in &seed.categories {
            let key = self.categories.entry(category.key.clone()).or_default();
            for value in &category.values {
                key.values.insert(value.clone(), String::new());
            }
        }
        for template in &seed.templates {
            let ext_id = self.seed_uuid(&template.ext_id);
            let version_id = self.new_uuid();
            let image_uuid = self.images.uuid_by_name(&template.image).ok_or_else(|| {
                SeedError::Reference(format!(
                    "template '{}' refers to unknown image '{}'",
                    template.name, template.image
                ))
            })?;
            let subnet_uuid = match &template.subnet {
                Some(name) => Some(self.subnets.uuid_by_name(name).ok_or_else(|| {
                    SeedError::Reference(format!(
                        "template '{}' refers to unknown subnet '{name}'",
                        template.name
                    ))
                })?),
                None => None,
            };
            let os = template
                .os
                .unwrap_or_else(|| self.image_os.get(&image_uuid).copied().unwrap_or_default());
            let created = self.wall(Instant::now());
            self.templates.push(Template {
                ext_id,
                version_id,
                name: template.name.clone(),
                os,
                image_uuid,
                boot_type: template.boot_type.clone(),
                num_sockets: template.num_sockets,
                num_cores_per_socket: template.num_cores_per_socket,
                memory_mib: template.memory_mib,
                disk_size_mib: template.disk_size_mib,
                subnet_uuid,
                created,
            });
        }
        for vm in &seed.vms {
            self.seed_vm(vm)?;
        }
        Ok(())
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
    pub(crate) fn reserve_uuids(&mut self, body: &Value, now: Instant) -> Result<Value, ApiError> {
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
            return Err(ApiError::invalid(KIND, details));
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

    pub(crate) fn delete_reservation(&mut self, client_identifier: &str) -> Option<Value> {
        let reservation = self.reservations.remove(client_identifier)?;
        for uuid in &reservation.uuids {
            self.reserved_uuids.remove(uuid);
        }
        Some(reservation_json(&reservation))
    }

    /// Whether `uuid` was reserved and the reservation has not expired.
    pub(crate) fn uuid_is_reserved(&self, uuid: &str, now: Instant) -> bool {
        self.reserved_uuids
            .get(uuid)
            .and_then(|client| self.reservations.get(client))
            .is_some_and(|r| r.expires > now)
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

fn reservation_json(r: &Reservation) -> Value {
    json!({"uuid_list": r.uuids, "expiration_time": r.expiration_time})
}

fn cluster_json(metadata: Value, name: &str, service: &str, version: &str) -> Value {
    let config =
        json!({"service_list": [service], "build": {"version": version}, "is_available": true});
    json!({
        "api_version": "3.1",
        "metadata": metadata,
        "spec": {"name": name, "resources": {"config": {"service_list": [service]}}},
        "status": {"name": name, "state": "COMPLETE", "resources": {"config": config}},
    })
}
