//! v4 VM templates: list, get, deploy (with `NTNX-Request-Id` idempotence), and v4 task reads.

use std::time::Instant;

use serde_json::{Map, Value, json};

use super::Store;
use super::refusal::Refusal;
use super::tasks::{FailCause, FailOutcome, FailPlan, V4_TASK_PREFIX, VMM_30102_MESSAGE};
use super::v4_shape::{V4Version, boot_config, etag_of};
use crate::seed::{GuestOs, SeedError, TemplateSeed};

/// Default and largest `$limit` of v4 lists.
const V4_DEFAULT_LIMIT: usize = 50;
const V4_MAX_LIMIT: usize = 100;
const MAX_DEPLOY_VMS: u64 = 100;

#[derive(Debug, Clone)]
pub(crate) struct Template {
    pub(crate) ext_id: String,
    pub(crate) version_id: String,
    pub(crate) name: String,
    pub(crate) os: GuestOs,
    pub(crate) image_uuid: String,
    pub(crate) boot_type: String,
    pub(crate) num_sockets: u64,
    pub(crate) num_cores_per_socket: u64,
    pub(crate) memory_mib: u64,
    pub(crate) disk_size_mib: u64,
    pub(crate) subnet_uuid: Option<String>,
    pub(crate) created: String,
}

impl Template {
    fn machine_type(&self) -> &'static str {
        if self.boot_type == "SECURE_BOOT" {
            "Q35"
        } else {
            "PC"
        }
    }

    fn v4_json(&self, username: &str, user_uuid: &str, version: &V4Version) -> Value {
        let boot_config = boot_config(&self.boot_type);
        let nics: Vec<Value> = self
            .subnet_uuid
            .iter()
            .map(|s| json!({"networkInfo": {"nicType": "NORMAL_NIC", "subnet": {"extId": s}}}))
            .collect();
        // No `versionDescription`: the v4.0 model's TemplateVersionSpec.version_description is "min=1 chars"
        // (ntnx-vmm-py-client 4.0.1), so an empty one is refused; the mock's templates have none.
        let mut template = json!({
            "$objectType": "vmm.v4.content.Template",
            "extId": self.ext_id,
            "templateName": self.name,
            "templateDescription": "",
            "createTime": self.created,
            "updateTime": self.created,
            "createdBy": {"extId": user_uuid, "username": username},
            "templateVersionSpec": {
                "$objectType": "vmm.v4.content.TemplateVersionSpec",
                "extId": self.version_id,
                "versionName": "1",
                "isActiveVersion": true,
                "isGcOverrideEnabled": true,
                "createTime": self.created,
                "vmSpec": {
                    "$objectType": "vmm.v4.ahv.config.Vm",
                    "name": self.name,
                    "numSockets": self.num_sockets,
                    "numCoresPerSocket": self.num_cores_per_socket,
                    "numThreadsPerCore": 1,
                    "memorySizeBytes": self.memory_mib.saturating_mul(1 << 20),
                    "machineType": self.machine_type(),
                    "bootConfig": boot_config,
                    "disks": [{
                        "diskAddress": {"busType": "SCSI", "index": 0},
                        "backingInfo": {
                            "$objectType": "vmm.v4.ahv.config.VmDisk",
                            "diskSizeBytes": self.disk_size_mib.saturating_mul(1 << 20),
                            "dataSource": {"reference": {"$objectType": "vmm.v4.ahv.config.ImageReference", "imageExtId": self.image_uuid}},
                        },
                    }],
                    "nics": nics,
                },
            },
        });
        // `categoryExtIds` came with a later revision: ntnx-vmm-py-client 4.3.2's Template has
        // `category_ext_ids`, 4.0.1's (v4.0) has not.
        if !version.is_v4_0()
            && let Some(map) = template.as_object_mut()
        {
            map.insert("categoryExtIds".to_owned(), json!([]));
        }
        match template {
            Value::Object(map) => version.wrap("vmm.v4.content.Template", map),
            other => other,
        }
    }
}

fn bad_request(message: impl Into<String>) -> Refusal {
    Refusal::V4Invalid {
        code: "VMM-30100",
        message: message.into(),
    }
}

fn parse_index(text: Option<&str>, name: &str, default: usize) -> Result<usize, Refusal> {
    match text {
        None => Ok(default),
        Some(t) => t.parse::<usize>().map_err(|_| {
            bad_request(format!(
                "query parameter {name}='{t}' is not a non-negative integer"
            ))
        }),
    }
}

/// `templateName eq 'X'`, the only `$filter` the mock understands.
fn parse_name_filter(filter: &str) -> Result<String, Refusal> {
    let rest = filter
        .trim()
        .strip_prefix("templateName")
        .map(str::trim_start)
        .and_then(|r| r.strip_prefix("eq"))
        .map(str::trim);
    match rest
        .and_then(|r| r.strip_prefix('\''))
        .and_then(|r| r.strip_suffix('\''))
    {
        Some(name) => Ok(name.replace("''", "'")),
        None => Err(bad_request(format!(
            "unsupported $filter '{filter}' (the mock knows only templateName eq '<name>')"
        ))),
    }
}

/// A task listing's refusal names the prism namespace (`PRISM-…` codes are the mock's own).
fn in_prism(refusal: Refusal) -> Refusal {
    match refusal {
        Refusal::V4Invalid { message, .. } => Refusal::V4Invalid {
            code: "PRISM-30100",
            message,
        },
        other => other,
    }
}

/// The task `$filter`s the mock understands: `extId eq '<id>'` and `extId in ('<id>', …)`
/// (OData 4.01 part 2, §5.1.1.1.1 and §5.1.1.1.12; `extId` is among the fields
/// ntnx-prism-py-client 4.0.1's `TasksApi.list_tasks` says a filter applies to). Each id is a
/// v4 extId (`<prefix>:<uuid>`) or a bare UUID; the lower-cased UUID parts are returned.
fn parse_task_filter(filter: &str) -> Result<Vec<String>, Refusal> {
    let refused = || {
        in_prism(bad_request(format!(
            "unsupported $filter '{filter}' (the mock knows only extId eq '<id>' and extId in ('<id>', ...))"
        )))
    };
    let rest = filter
        .trim()
        .strip_prefix("extId")
        .map(str::trim_start)
        .ok_or_else(refused)?;
    let list = if let Some(one) = rest.strip_prefix("eq") {
        one.trim().to_owned()
    } else if let Some(many) = rest.strip_prefix("in") {
        many.trim()
            .strip_prefix('(')
            .and_then(|r| r.strip_suffix(')'))
            .ok_or_else(refused)?
            .to_owned()
    } else {
        return Err(refused());
    };
    list.split(',')
        .map(|item| {
            let id = item
                .trim()
                .strip_prefix('\'')
                .and_then(|r| r.strip_suffix('\''))
                .ok_or_else(refused)?;
            let uuid = id.rsplit_once(':').map_or(id, |(_, uuid)| uuid);
            Ok(uuid.to_ascii_lowercase())
        })
        .collect()
}

/// Turns a v4 `guestCustomization` into the v3 `guest_customization` shape.
fn guest_v4_to_v3(gc: &Value) -> Result<Value, String> {
    let config = gc
        .get("config")
        .ok_or("guestCustomization.config is required")?;
    let object_type = config
        .get("$objectType")
        .and_then(Value::as_str)
        .unwrap_or("");
    let script_of = |key: &str| -> Result<(String, Value), String> {
        let script = config
            .get(key)
            .ok_or(format!("guestCustomization.config.{key} is required"))?;
        let ty = script
            .get("$objectType")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        Ok((ty, script.clone()))
    };
    match object_type {
        "vmm.v4.ahv.config.Sysprep" => {
            let install_type = config
                .get("installType")
                .and_then(Value::as_str)
                .unwrap_or("PREPARED");
            let (ty, script) = script_of("sysprepScript")?;
            let mut sysprep = Map::new();
            sysprep.insert("install_type".to_owned(), json!(install_type));
            match ty.as_str() {
                "vmm.v4.ahv.config.Unattendxml" => {
                    sysprep.insert(
                        "unattend_xml".to_owned(),
                        script.get("value").cloned().unwrap_or(Value::Null),
                    );
                }
                "vmm.v4.ahv.config.CustomKeyValues" => {
                    sysprep.insert(
                        "custom_key_values".to_owned(),
                        script.get("keyValuePairs").cloned().unwrap_or(Value::Null),
                    );
                }
                other => {
                    return Err(format!(
                        "guestCustomization.config.sysprepScript: unknown $objectType '{other}'"
                    ));
                }
            }
            Ok(json!({"is_overridable": false, "sysprep": sysprep}))
        }
        "vmm.v4.ahv.config.CloudInit" => {
            let (ty, script) = script_of("cloudInitScript")?;
            let mut cloud_init = Map::new();
            if let Some(meta) = config.get("metadata").filter(|m| !m.is_null()) {
                cloud_init.insert("meta_data".to_owned(), meta.clone());
            }
            match ty.as_str() {
                "vmm.v4.ahv.config.Userdata" => {
                    cloud_init.insert(
                        "user_data".to_owned(),
                        script.get("value").cloned().unwrap_or(Value::Null),
                    );
                }
                "vmm.v4.ahv.config.CustomKeyValues" => {
                    cloud_init.insert(
                        "custom_key_values".to_owned(),
                        script.get("keyValuePairs").cloned().unwrap_or(Value::Null),
                    );
                }
                other => {
                    return Err(format!(
                        "guestCustomization.config.cloudInitScript: unknown $objectType '{other}'"
                    ));
                }
            }
            Ok(json!({"is_overridable": false, "cloud_init": cloud_init}))
        }
        other => Err(format!(
            "guestCustomization.config: unknown $objectType '{other}'"
        )),
    }
}

/// Turns v4 override NICs into v3 `nic_list` entries (v4.0 `networkInfo`, later `nicNetworkInfo`);
/// `ipv4Config.ipAddress.value` is the address asked for (ntnx-vmm-py-client 4.3.2 `Ipv4Config`), an
/// `ASSIGNED` endpoint in v3 terms.
fn nics_v4_to_v3(nics: &Value) -> Result<Vec<Value>, String> {
    let list = nics.as_array().ok_or("nics must be a list")?;
    list.iter()
        .enumerate()
        .map(|(i, nic)| {
            let info = nic
                .get("networkInfo")
                .or_else(|| nic.get("nicNetworkInfo"))
                .ok_or(format!("nics[{i}].networkInfo is required"))?;
            let subnet = info
                .pointer("/subnet/extId")
                .and_then(Value::as_str)
                .ok_or(format!("nics[{i}].networkInfo.subnet.extId is required"))?;
            let mut v3 = json!({"subnet_reference": {"kind": "subnet", "uuid": subnet}});
            if let Some(ip) = info
                .pointer("/ipv4Config/ipAddress/value")
                .and_then(Value::as_str)
                && let Some(obj) = v3.as_object_mut()
            {
                obj.insert(
                    "ip_endpoint_list".to_owned(),
                    json!([{"ip": ip, "type": "ASSIGNED"}]),
                );
            }
            Ok(v3)
        })
        .collect()
}

impl Store {
    pub(crate) fn template(&self, ext_id: &str) -> Option<&Template> {
        self.templates.iter().find(|t| t.ext_id == ext_id)
    }

    /// `GET /api/vmm/{version}/content/templates` with `$page` (0-based), `$limit`, `$filter=templateName eq
    /// '…'`. An empty page answers without `data` (see [`V4Version::envelope`]).
    pub(crate) fn list_templates(
        &self,
        page: Option<&str>,
        limit: Option<&str>,
        filter: Option<&str>,
        version: &V4Version,
    ) -> Result<Value, Refusal> {
        let page = parse_index(page, "$page", 0)?;
        let limit = parse_index(limit, "$limit", V4_DEFAULT_LIMIT)?;
        if !(1..=V4_MAX_LIMIT).contains(&limit) {
            return Err(bad_request(format!(
                "$limit={limit} is not in 1..={V4_MAX_LIMIT}"
            )));
        }
        let name = filter.map(parse_name_filter).transpose()?;
        let matching: Vec<&Template> = self
            .templates
            .iter()
            .filter(|t| name.as_ref().is_none_or(|n| &t.name == n))
            .collect();
        let total = matching.len();
        let data: Vec<Value> = matching
            .into_iter()
            .skip(page.saturating_mul(limit))
            .take(limit)
            .map(|t| t.v4_json(&self.username, &self.user_uuid, version))
            .collect();
        let mut metadata = Map::new();
        metadata.insert("flags".to_owned(), version.flags(true));
        metadata.insert("totalAvailableResults".to_owned(), json!(total));
        let data = (!data.is_empty()).then_some(Value::Array(data));
        Ok(version.envelope("vmm.v4.content.ListTemplatesApiResponse", data, metadata))
    }

    /// `GET …/templates/{extId}`: the body and its ETag.
    pub(crate) fn get_template(
        &self,
        ext_id: &str,
        version: &V4Version,
    ) -> Result<(Value, String), Refusal> {
        let template = self
            .template(ext_id)
            .ok_or_else(|| template_not_found(ext_id))?;
        let data = template.v4_json(&self.username, &self.user_uuid, version);
        let etag = etag_of(&data);
        Ok((
            version.response("vmm.v4.content.GetTemplateApiResponse", data),
            etag,
        ))
    }

    /// `POST …/templates/{extId}/$actions/deploy`. The same `NTNX-Request-Id` returns the same task and creates
    /// nothing new (whatever the body); a missing one is a 400. Deployed VMs are powered off (mock choice).
    pub(crate) fn deploy_template(
        &mut self,
        now: Instant,
        ext_id: &str,
        request_id: Option<&str>,
        body: &Value,
        fail: Option<FailPlan>,
        version: &V4Version,
    ) -> Result<Value, Refusal> {
        let request_id = request_id
            .map(str::trim)
            .filter(|r| !r.is_empty())
            .ok_or_else(|| Refusal::V4Invalid {
                code: "VMM-30101",
                message: "the NTNX-Request-Id header is required".to_owned(),
            })?;
        if let Some(task) = self.v4_requests.get(request_id) {
            return Ok(task_reference(task, version));
        }
        let template = self
            .template(ext_id)
            .cloned()
            .ok_or_else(|| template_not_found(ext_id))?;
        let count = body.get("numberOfVms").and_then(Value::as_u64).unwrap_or(1);
        if !(1..=MAX_DEPLOY_VMS).contains(&count) {
            return Err(bad_request(format!(
                "numberOfVms={count} is not in 1..={MAX_DEPLOY_VMS}"
            )));
        }
        let cluster = body
            .get("clusterReference")
            .and_then(Value::as_str)
            .unwrap_or("");
        if !self.is_prism_element(cluster) {
            return Err(bad_request(format!(
                "clusterReference '{cluster}' is not a Prism Element cluster"
            )));
        }
        if let Some(version) = body.get("versionId").and_then(Value::as_str)
            && version != template.version_id
        {
            return Err(bad_request(format!(
                "versionId '{version}' is not a version of template {ext_id}"
            )));
        }
        let overrides = body
            .get("overrideVmConfigMap")
            .cloned()
            .unwrap_or_else(|| json!({}));
        let Some(overrides) = overrides.as_object() else {
            return Err(bad_request("overrideVmConfigMap must be an object"));
        };
        for key in overrides.keys() {
            if key.parse::<u64>().map_or(true, |i| i >= count) {
                return Err(bad_request(format!(
                    "overrideVmConfigMap key '{key}' is not a VM index below numberOfVms={count}"
                )));
            }
        }
        let mut prepared = Vec::new();
        let mut refused = None;
        for index in 0..count {
            let o = overrides
                .get(&index.to_string())
                .cloned()
                .unwrap_or_else(|| json!({}));
            let spec = self
                .deploy_spec(&template, cluster, &o)
                .map_err(|m| bad_request(format!("overrideVmConfigMap.{index}: {m}")))?;
            if refused.is_none() {
                refused = secure_boot_cdrom_refusal(&spec);
            }
            let vm = self
                .create_vm_from_spec(now, &spec, template.os)
                .map_err(|details| {
                    let text: Vec<String> = details
                        .into_iter()
                        .map(|(f, m)| format!("{f}: {m}"))
                        .collect();
                    bad_request(format!("VM {index}: {}", text.join("; ")))
                })?;
            prepared.push(vm);
        }
        let task = self.commit_deploy(now, prepared, cluster, &template.ext_id, fail.or(refused));
        self.v4_requests.insert(request_id.to_owned(), task.clone());
        Ok(task_reference(&task, version))
    }

    fn deploy_spec(&self, template: &Template, cluster: &str, o: &Value) -> Result<Value, String> {
        let number = |key: &str, default: u64| -> Result<u64, String> {
            match o.get(key) {
                None | Some(Value::Null) => Ok(default),
                Some(v) => v
                    .as_u64()
                    .ok_or(format!("{key} must be a non-negative integer")),
            }
        };
        let memory_bytes = number(
            "memorySizeBytes",
            template.memory_mib.saturating_mul(1 << 20),
        )?;
        if memory_bytes % (1 << 20) != 0 {
            return Err(format!(
                "memorySizeBytes={memory_bytes} is not a whole number of MiB"
            ));
        }
        let nics = match o.get("nics") {
            Some(list) => nics_v4_to_v3(list)?,
            None => template
                .subnet_uuid
                .iter()
                .map(|s| json!({"subnet_reference": {"kind": "subnet", "uuid": s}}))
                .collect(),
        };
        let name = o
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or(&template.name);
        let mut resources = json!({
            "num_sockets": number("numSockets", template.num_sockets)?,
            "num_vcpus_per_socket": number("numCoresPerSocket", template.num_cores_per_socket)?,
            "num_threads_per_core": number("numThreadsPerCore", 1)?,
            "memory_size_mib": memory_bytes >> 20,
            "power_state": "OFF",
            "machine_type": template.machine_type(),
            "boot_config": {"boot_type": template.boot_type},
            "disk_list": [{
                "data_source_reference": {"kind": "image", "uuid": template.image_uuid},
                "disk_size_mib": template.disk_size_mib,
                "device_properties": {"device_type": "DISK", "disk_address": {"adapter_type": "SCSI", "device_index": 0}},
            }],
            "nic_list": nics,
        });
        if let Some(gc) = o.get("guestCustomization").filter(|g| !g.is_null())
            && let Some(res) = resources.as_object_mut()
        {
            res.insert("guest_customization".to_owned(), guest_v4_to_v3(gc)?);
        }
        Ok(json!({
            "name": name,
            "description": format!("Deployed from template {}", template.name),
            "cluster_reference": {"kind": "cluster", "uuid": cluster},
            "resources": resources,
        }))
    }

    /// `GET /api/prism/{version}/config/tasks`: the tasks, oldest first (the mock's order: the
    /// documentation names none by default), `$page` 0-based and `$limit` 1..=100 (default 50), as
    /// ntnx-prism-py-client 4.0.1's `TasksApi.list_tasks` documents them; `$filter` on `extId`
    /// only ([`parse_task_filter`]), an extId matched by its UUID part as the task GET does.
    pub(crate) fn list_tasks_v4(
        &self,
        page: Option<&str>,
        limit: Option<&str>,
        filter: Option<&str>,
        version: &V4Version,
        host: &str,
    ) -> Result<Value, Refusal> {
        let page = parse_index(page, "$page", 0).map_err(in_prism)?;
        let limit = parse_index(limit, "$limit", V4_DEFAULT_LIMIT).map_err(in_prism)?;
        if !(1..=V4_MAX_LIMIT).contains(&limit) {
            return Err(in_prism(bad_request(format!(
                "$limit={limit} is not in 1..={V4_MAX_LIMIT}"
            ))));
        }
        let wanted = filter.map(parse_task_filter).transpose()?;
        let mut matching: Vec<&super::Task> = self
            .tasks
            .values()
            .filter(|task| {
                wanted
                    .as_ref()
                    .is_none_or(|ids| ids.contains(&task.uuid.to_ascii_lowercase()))
            })
            .collect();
        matching.sort_by(|a, b| a.created.cmp(&b.created).then(a.uuid.cmp(&b.uuid)));
        let total = matching.len();
        let data: Vec<Value> = matching
            .into_iter()
            .skip(page.saturating_mul(limit))
            .take(limit)
            .map(|task| {
                let mut body = self.task_v4_json(task, version, host);
                body.get_mut("data").map_or(Value::Null, Value::take)
            })
            .collect();
        let mut metadata = Map::new();
        metadata.insert("flags".to_owned(), version.flags(true));
        metadata.insert("totalAvailableResults".to_owned(), json!(total));
        let data = (!data.is_empty()).then_some(Value::Array(data));
        Ok(version.envelope("prism.v4.config.ListTasksApiResponse", data, metadata))
    }

    /// `GET /api/prism/{version}/config/tasks/{extId}`: takes `<prefix>:<uuid>` or the bare UUID; the body and
    /// its ETag.
    pub(crate) fn get_task_v4(
        &self,
        ext_id: &str,
        version: &V4Version,
        host: &str,
    ) -> Result<(Value, String), Refusal> {
        let uuid = ext_id.rsplit_once(':').map_or(ext_id, |(_, u)| u);
        let task = self.tasks.get(uuid).ok_or_else(|| Refusal::V4NotFound {
            namespace: "prism",
            code: "PRISM-40404",
            message: format!("task {ext_id} was not found"),
        })?;
        let body = self.task_v4_json(task, version, host);
        let etag = etag_of(&body["data"]);
        Ok((body, etag))
    }
}

/// The refusal of a Secure Boot VM with guest customization: its CD-ROM would be IDE, which Secure Boot forbids,
/// and AHV fails the task with VMM-30102 (nutanix/nutanix.ansible#876, nutanix/terraform-provider-nutanix#908).
pub(crate) fn secure_boot_cdrom_refusal(spec: &Value) -> Option<FailPlan> {
    let secure = spec
        .pointer("/resources/boot_config/boot_type")
        .and_then(Value::as_str)
        == Some("SECURE_BOOT");
    let customized = spec
        .pointer("/resources/guest_customization")
        .is_some_and(|gc| !gc.is_null());
    (secure && customized).then(|| FailPlan {
        error: VMM_30102_MESSAGE.to_owned(),
        outcome: FailOutcome::RemoveVm,
        cause: FailCause::InvalidArgument,
    })
}

fn template_not_found(ext_id: &str) -> Refusal {
    Refusal::V4NotFound {
        namespace: "vmm",
        code: "VMM-20404",
        message: format!("template {ext_id} was not found"),
    }
}

fn task_reference(task_uuid: &str, version: &V4Version) -> Value {
    let data = version.object(
        "prism.v4.config.TaskReference",
        [("extId", json!(format!("{V4_TASK_PREFIX}{task_uuid}")))],
    );
    version.response("vmm.v4.content.DeployTemplateApiResponse", data)
}

impl Store {
    /// Adds a template of the seed, its image and subnet looked up by name.
    pub(crate) fn seed_template(&mut self, template: &TemplateSeed) -> Result<(), SeedError> {
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
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysprep_and_cloud_init_overrides_map_to_v3() {
        let sysprep = json!({"config": {"$objectType": "vmm.v4.ahv.config.Sysprep", "installType": "PREPARED",
            "sysprepScript": {"$objectType": "vmm.v4.ahv.config.Unattendxml", "value": "PHhtbC8+"}}});
        assert_eq!(
            guest_v4_to_v3(&sysprep).unwrap(),
            json!({"is_overridable": false, "sysprep": {"install_type": "PREPARED", "unattend_xml": "PHhtbC8+"}})
        );
        let cloud = json!({"config": {"$objectType": "vmm.v4.ahv.config.CloudInit", "datasourceType": "CONFIG_DRIVE_V2",
            "metadata": "e30=", "cloudInitScript": {"$objectType": "vmm.v4.ahv.config.Userdata", "value": "I2Nsb3VkLWNvbmZpZw=="}}});
        assert_eq!(
            guest_v4_to_v3(&cloud).unwrap(),
            json!({"is_overridable": false, "cloud_init": {"meta_data": "e30=", "user_data": "I2Nsb3VkLWNvbmZpZw=="}})
        );
        assert!(guest_v4_to_v3(&json!({"config": {"$objectType": "x"}})).is_err());
    }

    #[test]
    fn template_name_filter() {
        assert_eq!(
            parse_name_filter("templateName eq 'win''s'").unwrap(),
            "win's"
        );
        assert!(parse_name_filter("startswith(templateName,'w')").is_err());
    }
}
