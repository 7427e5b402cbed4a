//! Seeded entities (clusters, hosts, images, projects, categories; subnets in `subnets`, the cluster JSON in
//! `clusters`) and the tables that keep them.

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use serde_json::{Value, json};

use super::clusters::cluster_json;
use super::list::ListQuery;
use super::refusal::Refusal;
use super::{Store, derived_uuid};
use crate::seed::{GuestOs, Seed, SeedError};

/// The built-in `admin` user as recorded entities name their owner (get_subnet.json).
pub(super) const ADMIN_UUID: &str = "00000000-0000-0000-0000-000000000000";

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

    pub(super) fn cluster_uuid(&self, name: &str, what: &str) -> Result<String, SeedError> {
        self.clusters
            .uuid_by_name(name)
            .filter(|u| *u != self.pc_uuid)
            .ok_or_else(|| {
                SeedError::Reference(format!("{what} refers to unknown cluster '{name}'"))
            })
    }

    /// Metadata of a seeded entity (the keys of get_subnet.json and get_cluster.json).
    pub(super) fn metadata(&self, kind: &str, uuid: &str) -> Value {
        let now = self.wall(Instant::now());
        json!({"kind": kind, "uuid": uuid, "spec_version": 0, "creation_time": now, "last_update_time": now,
            "categories": {}, "categories_mapping": {}})
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
            self.seed_subnet(subnet)?;
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
