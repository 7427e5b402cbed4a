//! The v3 writes on VMs: create, update (with its concurrency token) and delete, and their 202 answers
//! (clone in `clone`).

use std::time::Instant;

use serde_json::{Value, json};

use super::{KIND, Prepared};
use crate::seed::GuestOs;
use crate::store::record::Vm;
use crate::store::refusal::Refusal;
use crate::store::tasks::{Effect, FailOutcome, FailPlan};
use crate::store::templates::secure_boot_cdrom_refusal;
use crate::store::{Store, schema};

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

/// A 422 when the schema check found anything.
pub(super) fn refuse_by_schema(details: schema::Details) -> Result<(), Refusal> {
    if details.is_empty() {
        Ok(())
    } else {
        Err(Refusal::invalid(KIND, details))
    }
}

impl Store {
    /// Checks `metadata.uuid` of a create or clone: reserved and unused → Ok(uuid); none given → a new UUID.
    pub(super) fn uuid_for_new_vm(
        &mut self,
        metadata: &Value,
        now: Instant,
    ) -> Result<String, Refusal> {
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
        let fail = fail
            .or_else(|| secure_boot_cdrom_refusal(&prepared.spec))
            .or_else(|| {
                self.unmanaged_assignment(&prepared.nics, format!("Failed to create VM {uuid}"))
            });
        let task_uuid = self.start_create(now, &uuid, prepared, None, "kVmCreate", fail);
        Ok(self.pending_response(&uuid, &metadata, &spec_in, &task_uuid, 0))
    }

    pub(super) fn start_create(
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
        let fail = fail.or_else(|| {
            self.unmanaged_assignment(&prepared.nics, format!("Failed to update VM {uuid}"))
        });
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
    /// With a volume group attached, the task fails and the VM stays ([`Store::delete_refusal`]).
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
                // Prism accepts the DELETE of a VM holding a volume group, and its task fails
                // (terraform-provider-nutanix#568; `volume_groups`).
                let fail = fail.or_else(|| self.delete_refusal(uuid));
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
}
