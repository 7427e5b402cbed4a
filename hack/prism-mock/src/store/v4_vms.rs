//! v4 VM reads and updates (`GET`/`PUT /api/vmm/{version}/ahv/config/vms/{extId}`), the read-then-update flow of
//! Nutanix's own clients: the GET's `ETag` comes back as `If-Match` on the PUT.
//!
//! Sources: ntnx-vmm-py-client `VmApi.get_vm_by_id` / `update_vm_by_id` (4.0.1 calls `/api/vmm/v4.0/…`, 4.3.2
//! `/api/vmm/v4.3/…`; both take `If-Match`, and `ApiClient.__call_api` sends the `$reserved.ETag` of the body it
//! is given as `If-Match`); prism-go-client `converged/v4/vms.go` `UpdateAsync` (GetVmById, `CopyEtag`, then
//! UpdateVmById with the ETag as `If-Match`), commit 1e253ea7.

use std::time::Instant;

use serde_json::{Map, Value, json};

use super::Store;
use super::record::Vm;
use super::refusal::Refusal;
use super::tasks::{FailPlan, V4_TASK_PREFIX};
use super::v4_shape::{V4Version, boot_config, etag_of};

impl Store {
    /// `GET …/ahv/config/vms/{extId}`: the body and its ETag.
    pub(crate) fn get_vm_v4(
        &self,
        ext_id: &str,
        version: &V4Version,
    ) -> Result<(Value, String), Refusal> {
        let vm = self
            .vm_or_foreign(ext_id)
            .ok_or_else(|| vm_not_found(ext_id))?;
        let data = vm_v4_json(&vm, version);
        let etag = etag_of(&data);
        Ok((
            version.response("vmm.v4.ahv.config.GetVmApiResponse", data),
            etag,
        ))
    }

    /// `PUT …/ahv/config/vms/{extId}` with `If-Match`: the VM's name, description, CPU and memory as sent, through
    /// the same update (and task) a v3 `PUT` makes. A missing `If-Match` is refused as PLAT-10004
    /// `MISSING_ETAG_HEADER` (nutanix/terraform-provider-nutanix#1231), one that is not the VM's current ETag as
    /// 412 PLAT-10005 "Invalid eTag header" (nutanix/nutanix.ansible#706; terraform-provider-nutanix#1089: the ETag
    /// changes when the VM does between the read and the write).
    pub(crate) fn update_vm_v4(
        &mut self,
        now: Instant,
        ext_id: &str,
        if_match: Option<&str>,
        body: &Value,
        fail: Option<FailPlan>,
        version: &V4Version,
    ) -> Result<Value, Refusal> {
        let vm = self
            .vm_or_foreign(ext_id)
            .ok_or_else(|| vm_not_found(ext_id))?
            .into_owned();
        let if_match = if_match
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .ok_or_else(|| Refusal::V4EtagMissing {
                message: format!("an If-Match header is required to update VM {ext_id}"),
            })?;
        if if_match != etag_of(&vm_v4_json(&vm, version)) {
            return Err(Refusal::V4EtagMismatch {
                message: "Invalid eTag header".to_owned(),
            });
        }
        let spec = updated_spec(&vm, body)?;
        let v3 = json!({
            "metadata": {"kind": "vm", "uuid": vm.uuid, "spec_version": vm.spec_version},
            "spec": spec,
        });
        let answer = self
            .update_vm(now, &vm.uuid, &v3, fail)
            .map_err(|refusal| match refusal {
                Refusal::Invalid { details, .. } => v4_invalid(
                    details
                        .iter()
                        .map(|(f, m)| format!("{f}: {m}"))
                        .collect::<Vec<_>>()
                        .join("; "),
                ),
                other => other,
            })?;
        let task = answer
            .pointer("/status/execution_context/task_uuid")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let data = version.object(
            "prism.v4.config.TaskReference",
            [("extId", json!(format!("{V4_TASK_PREFIX}{task}")))],
        );
        Ok(version.response("vmm.v4.ahv.config.UpdateVmApiResponse", data))
    }
}

fn vm_not_found(ext_id: &str) -> Refusal {
    Refusal::V4NotFound {
        namespace: "vmm",
        code: "VMM-20404",
        message: format!("VM {ext_id} was not found"),
    }
}

fn v4_invalid(message: String) -> Refusal {
    Refusal::V4Invalid {
        code: "VMM-30100",
        message,
    }
}

/// The VM as `vmm.v4.ahv.config.Vm` of ntnx-vmm-py-client (4.0.1 and 4.3.2 share these fields): what the mock
/// keeps of it, the disks (not the CD-ROMs, which v4 lists apart as `cdRoms`) and NICs in the shapes the
/// template's `vmSpec` uses.
fn vm_v4_json(vm: &Vm, version: &V4Version) -> Value {
    let res = vm.spec.get("resources").cloned().unwrap_or(Value::Null);
    let number = |key: &str, default: u64| res.get(key).and_then(Value::as_u64).unwrap_or(default);
    let boot_type = res
        .pointer("/boot_config/boot_type")
        .and_then(Value::as_str)
        .unwrap_or("LEGACY");
    let disks: Vec<Value> = res
        .get("disk_list")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|d| {
            d.pointer("/device_properties/device_type")
                .and_then(Value::as_str)
                .is_none_or(|t| t == "DISK")
        })
        .map(disk_v4)
        .collect();
    let nics: Vec<Value> = vm
        .nics
        .iter()
        .map(|nic| {
            json!({
                "extId": nic.uuid,
                "networkInfo": {"nicType": "NORMAL_NIC", "subnet": {"extId": nic.subnet_uuid}},
            })
        })
        .collect();
    let mut data = Map::new();
    let mut put = |key: &str, value: Value| {
        data.insert(key.to_owned(), value);
    };
    put("extId", json!(vm.uuid));
    put("name", json!(vm.name()));
    if let Some(description) = vm
        .spec
        .get("description")
        .and_then(Value::as_str)
        .filter(|d| !d.is_empty())
    {
        put("description", json!(description));
    }
    put("createTime", json!(vm.creation_time));
    put("updateTime", json!(vm.last_update_time));
    put("numSockets", json!(number("num_sockets", 1)));
    put(
        "numCoresPerSocket",
        json!(number("num_vcpus_per_socket", 1)),
    );
    put(
        "numThreadsPerCore",
        json!(number("num_threads_per_core", 1)),
    );
    put(
        "memorySizeBytes",
        json!(number("memory_size_mib", 0).saturating_mul(1 << 20)),
    );
    put(
        "machineType",
        json!(
            res.get("machine_type")
                .and_then(Value::as_str)
                .unwrap_or("PC")
        ),
    );
    put("powerState", json!(vm.power_state()));
    put("cluster", json!({"extId": vm.cluster_uuid()}));
    if let Some(host) = &vm.host_uuid {
        put("host", json!({"extId": host}));
    }
    put("biosUuid", json!(vm.bios_uuid));
    put("bootConfig", boot_config(boot_type));
    put("disks", Value::Array(disks));
    put("nics", Value::Array(nics));
    version.wrap("vmm.v4.ahv.config.Vm", data)
}

fn disk_v4(disk: &Value) -> Value {
    let bus = disk
        .pointer("/device_properties/disk_address/adapter_type")
        .and_then(Value::as_str)
        .unwrap_or("SCSI");
    let index = disk
        .pointer("/device_properties/disk_address/device_index")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let size = disk
        .get("disk_size_mib")
        .and_then(Value::as_u64)
        .map(|mib| mib.saturating_mul(1 << 20))
        .or_else(|| disk.get("disk_size_bytes").and_then(Value::as_u64))
        .unwrap_or(0);
    let mut backing = json!({"$objectType": "vmm.v4.ahv.config.VmDisk", "diskSizeBytes": size});
    if let (Some(image), Some(map)) = (
        disk.pointer("/data_source_reference/uuid")
            .filter(|_| {
                disk.pointer("/data_source_reference/kind")
                    .and_then(Value::as_str)
                    == Some("image")
            })
            .and_then(Value::as_str),
        backing.as_object_mut(),
    ) {
        map.insert(
            "dataSource".to_owned(),
            json!({"reference": {"$objectType": "vmm.v4.ahv.config.ImageReference", "imageExtId": image}}),
        );
    }
    json!({"diskAddress": {"busType": bus, "index": index}, "backingInfo": backing})
}

/// The VM's v3 spec with what the mock takes from a v4 `Vm` body: `name`, `description`, `numSockets`,
/// `numCoresPerSocket`, `numThreadsPerCore`, `memorySizeBytes` (whole MiB). The rest of the body (disks, NICs,
/// boot configuration…) is not read: a mock limit, since a real PUT replaces the whole configuration.
fn updated_spec(vm: &Vm, body: &Value) -> Result<Value, Refusal> {
    let mut spec = vm.spec.clone();
    let Some(obj) = spec.as_object_mut() else {
        return Err(v4_invalid(format!("VM {} has no spec", vm.uuid)));
    };
    for (v4, v3) in [("name", "name"), ("description", "description")] {
        match body.get(v4) {
            None | Some(Value::Null) => {}
            Some(Value::String(text)) => {
                obj.insert(v3.to_owned(), json!(text));
            }
            Some(_) => return Err(v4_invalid(format!("{v4} must be a string"))),
        }
    }
    let Some(res) = obj.get_mut("resources").and_then(Value::as_object_mut) else {
        return Err(v4_invalid(format!("VM {} has no resources", vm.uuid)));
    };
    for (v4, v3) in [
        ("numSockets", "num_sockets"),
        ("numCoresPerSocket", "num_vcpus_per_socket"),
        ("numThreadsPerCore", "num_threads_per_core"),
    ] {
        match body.get(v4) {
            None | Some(Value::Null) => {}
            Some(value) => {
                let count = value
                    .as_u64()
                    .filter(|n| *n >= 1)
                    .ok_or_else(|| v4_invalid(format!("{v4} must be a positive integer")))?;
                res.insert(v3.to_owned(), json!(count));
            }
        }
    }
    match body.get("memorySizeBytes") {
        None | Some(Value::Null) => {}
        Some(value) => {
            let bytes = value
                .as_u64()
                .filter(|b| *b > 0 && b % (1 << 20) == 0)
                .ok_or_else(|| {
                    v4_invalid("memorySizeBytes must be a positive whole number of MiB".to_owned())
                })?;
            res.insert("memory_size_mib".to_owned(), json!(bytes >> 20));
        }
    }
    Ok(spec)
}
