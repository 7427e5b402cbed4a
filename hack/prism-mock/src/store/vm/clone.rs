//! `POST /vms/{uuid}/clone`: a new VM from a source VM's spec and the request's overrides.

use std::borrow::Cow;
use std::time::Instant;

use serde_json::{Value, json};

use super::requests::refuse_by_schema;
use super::{Details, KIND, detail};
use crate::store::refusal::Refusal;
use crate::store::tasks::FailPlan;
use crate::store::templates::secure_boot_cdrom_refusal;
use crate::store::{Store, schema};

impl Store {
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
        let fail = fail
            .or_else(|| secure_boot_cdrom_refusal(&prepared.spec))
            .or_else(|| {
                let what = format!("Failed to clone {source_uuid}: Failed to create VM {uuid}");
                self.unmanaged_assignment(&prepared.nics, what)
            });
        let task = self.start_create(now, &uuid, prepared, Some(source.os), "kVmClone", fail);
        self.clone_sources
            .insert(task.clone(), source_uuid.to_owned());
        Ok(json!({"task_uuid": task}))
    }
}
