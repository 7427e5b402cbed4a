//! Volume groups and their attachments to VMs (the v4 volumes API), and what an attachment does to the VM: it
//! shows in the VM's `disk_list` and Prism refuses to delete the VM while it holds one.
//!
//! Nutanix CSI 3.x attaches a PersistentVolume's volume group to the VM itself (hypervisor-attached); when a
//! cluster's VM is deleted before the volume is detached, "the prism task fails to delete the VM because an
//! existing volume group is attached to the VM" (nutanix-cloud-native/cluster-api-provider-nutanix #460,
//! 412d9d47). CAPX detaches them with the v4 volumes API first (#473 d1217b98, #477 0883e551).

use std::time::Instant;

use serde_json::{Value, json};

use super::Store;
use super::refusal::Refusal;
use super::tasks::{Effect, FailCause, FailOutcome, FailPlan, V4_TASK_PREFIX};
use super::v4_shape::V4Version;

/// A volume group; only what its attachments to VMs need.
#[derive(Debug, Clone)]
pub(crate) struct VolumeGroup {
    pub(crate) ext_id: String,
    pub(crate) name: String,
    /// The Prism Element it lives on (the first VM's it was attached to).
    pub(crate) cluster_uuid: String,
    /// The VMs it is attached to, each with the SCSI index its disk has on that VM.
    pub(crate) vm_attachments: Vec<VmAttachment>,
}

/// One VM a volume group is attached to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct VmAttachment {
    pub(crate) vm: String,
    pub(crate) index: i64,
}

/// The error of a VM delete task refused for an attached volume group, as a real one failed in
/// nutanix/terraform-provider-nutanix#568 (v3 `DELETE /vms/{uuid}` from provider 1.7.1, its task read back):
/// `error_detail: INVALID_ARGUMENT: Invalid Argument: 6\n:Volume group at scsi.1 must be detached before deleting
/// VM., progress_message: delete_vm`. The issue shows the text through Terraform's indented error box, so the
/// exact whitespace after the line break is not known; the mock writes none.
pub(crate) fn delete_refused_message(scsi_index: i64) -> String {
    format!(
        "INVALID_ARGUMENT: Invalid Argument: 6\n:Volume group at scsi.{scsi_index} must be detached before deleting VM."
    )
}

/// The v3 `error_code` of that task. The recorded answer shows only `error_detail`, which begins with this
/// code; the mock reports it as the code too (its choice).
pub(crate) const DELETE_REFUSED_CODE: &str = "INVALID_ARGUMENT";

/// `$objectType` of a v4 volume group and of a VM attachment (Nutanix's ntnx-volumes-py-client 4.3.2).
const VOLUME_GROUP_TYPE: &str = "volumes.v4.config.VolumeGroup";
const VM_ATTACHMENT_TYPE: &str = "volumes.v4.config.VmAttachment";

impl Store {
    /// Creates a volume group attached to each of `vms` (the admin side's stand-in for Nutanix CSI, which creates
    /// and attaches them through the volumes API); its extId. Each VM must exist.
    pub(crate) fn create_volume_group(
        &mut self,
        name: &str,
        vms: &[String],
    ) -> Result<String, Refusal> {
        for vm in vms {
            self.make_ordinary(vm);
            if !self.vms.contains_key(vm) {
                return Err(Refusal::not_found("vm", format!("VM {vm} was not found")));
            }
        }
        let ext_id = self.new_uuid();
        let cluster_uuid = vms
            .first()
            .and_then(|vm| self.vms.get(vm))
            .map(|vm| vm.cluster_uuid().to_owned())
            .unwrap_or_default();
        let vm_attachments = vms
            .iter()
            .map(|vm| VmAttachment {
                vm: vm.clone(),
                index: self.next_scsi_index(vm),
            })
            .collect();
        self.volume_groups.insert(
            ext_id.clone(),
            VolumeGroup {
                ext_id: ext_id.clone(),
                name: name.to_owned(),
                cluster_uuid,
                vm_attachments,
            },
        );
        Ok(ext_id)
    }

    /// The SCSI index a volume group attached to `vm` now takes: the first above every SCSI disk it has (its own
    /// disks and other volume groups). Real AHV puts the first one at `scsi.1` beside the system disk at `scsi.0`
    /// (terraform-provider-nutanix#568).
    fn next_scsi_index(&self, vm: &str) -> i64 {
        let own = self
            .vms
            .get(vm)
            .and_then(|vm| vm.spec.pointer("/resources/disk_list"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|disk| {
                disk.pointer("/device_properties/disk_address/adapter_type")
                    .and_then(Value::as_str)
                    .is_none_or(|adapter| adapter == "SCSI")
            })
            .filter_map(|disk| {
                disk.pointer("/device_properties/disk_address/device_index")
                    .and_then(Value::as_i64)
            });
        let groups = self
            .volume_groups_of(vm)
            .into_iter()
            .map(|(_, index)| index);
        own.chain(groups).max().map_or(0, |highest| highest + 1)
    }

    /// The volume groups attached to `vm`, each with its SCSI index there, in extId order.
    pub(crate) fn volume_groups_of(&self, vm: &str) -> Vec<(&VolumeGroup, i64)> {
        self.volume_groups
            .values()
            .filter_map(|group| {
                let attachment = group.vm_attachments.iter().find(|a| a.vm == vm)?;
                Some((group, attachment.index))
            })
            .collect()
    }

    /// The `disk_list` entries of the volume groups attached to `vm`, as v3 shows them: a `VOLUME_GROUP` disk with
    /// its `volume_group_reference` (prism-go-client `v3/swagger.json`, `vm_disk`), which CAPX reads to find what to
    /// detach (#473).
    pub(crate) fn volume_group_disks(&self, vm: &str) -> Vec<Value> {
        self.volume_groups_of(vm)
            .into_iter()
            .map(|(group, index)| {
                json!({
                    "device_properties": {
                        "device_type": "VOLUME_GROUP",
                        "disk_address": {"adapter_type": "SCSI", "device_index": index},
                    },
                    "volume_group_reference": {
                        "kind": "volume_group",
                        "uuid": group.ext_id,
                        "name": group.name,
                    },
                })
            })
            .collect()
    }

    /// How the delete of `vm` fails, if a volume group is attached to it: its task FAILS with Prism's error naming
    /// the first attachment's SCSI index, and the VM stays (terraform-provider-nutanix#568).
    pub(crate) fn delete_refusal(&self, vm: &str) -> Option<FailPlan> {
        let (_, index) = self
            .volume_groups_of(vm)
            .into_iter()
            .min_by_key(|(_, index)| *index)?;
        Some(FailPlan {
            error: delete_refused_message(index),
            outcome: FailOutcome::RemoveVm,
            cause: FailCause::Refused {
                code: DELETE_REFUSED_CODE,
            },
        })
    }

    /// `POST /api/volumes/{version}/config/volume-groups/{extId}/$actions/detach-vm` (ntnx-volumes-py-client 4.3.2
    /// `VolumeGroupsApi.detach_vm`; body `VmAttachment`, `extId` required): a task that detaches the VM when it
    /// ends; the volume group stays. The same `NTNX-Request-Id` returns the same task (as the deploy's: CAPX
    /// af415bf6 relies on it for this call); a missing one is a 400, as for a deploy (the SDKs always send one).
    /// Detaching a VM the group is not attached to fails the task (mock choice: no recorded answer).
    pub(crate) fn detach_vm(
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
                code: "VOL-10001",
                message: "the NTNX-Request-Id header is required".to_owned(),
            })?;
        if let Some(task) = self.v4_requests.get(request_id) {
            return Ok(detach_response(task, version));
        }
        let group = self
            .volume_groups
            .get(ext_id)
            .ok_or_else(|| volume_group_not_found(ext_id))?;
        let vm = body
            .get("extId")
            .and_then(Value::as_str)
            .filter(|vm| !vm.is_empty())
            .ok_or_else(|| Refusal::V4Invalid {
                code: "VOL-10001",
                message: "extId of the VM to detach is required".to_owned(),
            })?
            .to_owned();
        let attached = group.vm_attachments.iter().any(|a| a.vm == vm);
        let fail = fail.or_else(|| {
            (!attached).then(|| FailPlan {
                error: format!("VM {vm} is not attached to volume group {ext_id}"),
                outcome: FailOutcome::RemoveVm,
                cause: FailCause::Refused {
                    code: "INVALID_ARGUMENT",
                },
            })
        });
        let cluster = Some(group.cluster_uuid.clone()).filter(|c| !c.is_empty());
        let task = self.create_task(
            now,
            "VolumeGroupDetachVm",
            vec![("volume_group", ext_id.to_owned()), ("vm", vm.clone())],
            cluster,
            Effect::DetachVm {
                volume_group: ext_id.to_owned(),
                vm,
            },
            fail,
        );
        self.v4_requests.insert(request_id.to_owned(), task.clone());
        Ok(detach_response(&task, version))
    }

    /// A detach task ended: on success the VM is no longer attached.
    pub(crate) fn finish_detach(&mut self, volume_group: &str, vm: &str, failed: bool) {
        if failed {
            return;
        }
        if let Some(group) = self.volume_groups.get_mut(volume_group) {
            group.vm_attachments.retain(|a| a.vm != vm);
        }
    }

    /// A VM removed holds no attachment any more.
    pub(crate) fn forget_attachments_of(&mut self, vm: &str) {
        for group in self.volume_groups.values_mut() {
            group.vm_attachments.retain(|a| a.vm != vm);
        }
    }

    /// `GET /api/volumes/{version}/config/volume-groups/{extId}` (`GetVolumeGroupApiResponse`), with only the
    /// fields the mock keeps.
    pub(crate) fn get_volume_group(
        &self,
        ext_id: &str,
        version: &V4Version,
    ) -> Result<Value, Refusal> {
        let group = self
            .volume_groups
            .get(ext_id)
            .ok_or_else(|| volume_group_not_found(ext_id))?;
        let data = version.object(
            VOLUME_GROUP_TYPE,
            [
                ("extId", json!(group.ext_id)),
                ("name", json!(group.name)),
                ("clusterReference", json!(group.cluster_uuid)),
            ],
        );
        Ok(version.response("volumes.v4.config.GetVolumeGroupApiResponse", data))
    }

    /// `GET /api/volumes/{version}/config/volume-groups/{extId}/vm-attachments` (`ListVmAttachmentsApiResponse`,
    /// items `VmAttachment {extId, index}`), every attachment on one page.
    pub(crate) fn list_vm_attachments(
        &self,
        ext_id: &str,
        version: &V4Version,
    ) -> Result<Value, Refusal> {
        let group = self
            .volume_groups
            .get(ext_id)
            .ok_or_else(|| volume_group_not_found(ext_id))?;
        let items: Vec<Value> = group
            .vm_attachments
            .iter()
            .map(|a| {
                version.object(
                    VM_ATTACHMENT_TYPE,
                    [("extId", json!(a.vm)), ("index", json!(a.index))],
                )
            })
            .collect();
        let mut metadata = serde_json::Map::new();
        metadata.insert("flags".to_owned(), version.flags(false));
        metadata.insert("totalAvailableResults".to_owned(), json!(items.len()));
        let data = (!items.is_empty()).then_some(Value::Array(items));
        Ok(version.envelope(
            "volumes.v4.config.ListVmAttachmentsApiResponse",
            data,
            metadata,
        ))
    }
}

/// 404 for an unknown volume group (the code is the mock's: no recorded answer).
fn volume_group_not_found(ext_id: &str) -> Refusal {
    Refusal::V4NotFound {
        namespace: "volumes",
        code: "VOL-20404",
        message: format!("volume group {ext_id} was not found"),
    }
}

/// `DetachVmApiResponse`: `data` is the task's `prism.v4.config.TaskReference`.
fn detach_response(task_uuid: &str, version: &V4Version) -> Value {
    let data = version.object(
        "prism.v4.config.TaskReference",
        [("extId", json!(format!("{V4_TASK_PREFIX}{task_uuid}")))],
    );
    version.response("volumes.v4.config.DetachVmApiResponse", data)
}
