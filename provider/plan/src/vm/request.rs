//! Prism request bodies from a [`VmPlan`].
//!
//! - `imageKind: Image`: `POST /vms` with the whole VM (the Go provider's body, plus the identity
//!   description, `machine_type: Q35` for SecureBoot and a reserved `metadata.uuid`);
//! - `imageKind: VM`: `POST /vms/{source}/clone` (name, CPU, memory, NICs, guest customization,
//!   reserved UUID), then a [`FollowUpUpdate`];
//! - `imageKind: Template`: v4 `POST .../templates/{extId}/$actions/deploy` (name, CPU, memory,
//!   NICs, guest customization; it takes no VM UUID), then a [`FollowUpUpdate`] once the deploy
//!   task names the new VM.
//!
//! The reserved UUID comes from `POST /idempotence_identifiers`: the actuator records it on the
//! Machine before sending, so a retry after a crash finds or re-creates the same VM, never a
//! second one.

use std::collections::BTreeMap;

use prism_types::v3::{
    self, AdapterType, BootConfig, BootDeviceKind, DeviceProperties, DeviceType, Disk, DiskAddress,
    EntityMetadata, Extra, IpEndpoint, IpEndpointType, MachineType, Nic, PowerState, StorageConfig,
    SysprepInstallType, VmCloneInput, VmCloneMetadata, VmCloneOverrideSpec, VmIntentInput,
    VmResources, VmSpec, VtpmConfig,
};
use prism_types::v4::{self, GuestCustomizationConfig, TemplateDeployRequest, VmConfigOverride};
use serde::{Deserialize, Serialize};

use super::{BootPlan, EntityRef, GuestPlan, PlannedDataDisk, PlannedGpu, SourcePlan, VmPlan};
use crate::api::quantity::MIB;
use crate::api::{DiskAdapterType, DiskDeviceType};

/// v3 API version sent in bodies (older Prism Central releases require it).
pub const V3_API_VERSION: &str = "3.1";
/// Base path of the v3 API.
pub const V3_BASE: &str = "/api/nutanix/v3";
/// Base path of the v4 VM management API used for template deploy.
pub const V4_VMM_BASE: &str = "/api/vmm/v4.0";

/// The request that creates a Machine's VM.
#[derive(Clone, Debug, PartialEq)]
pub enum VmRequest {
    /// `POST /vms`.
    Create(Box<VmIntentInput>),
    /// `POST /vms/{source_vm}/clone`, then `follow_up`.
    Clone {
        source_vm: String,
        body: Box<VmCloneInput>,
        follow_up: FollowUpUpdate,
    },
    /// `POST /content/templates/{template}/$actions/deploy`, then `follow_up`.
    Deploy {
        template: String,
        body: Box<TemplateDeployRequest>,
        follow_up: FollowUpUpdate,
    },
}

impl VmRequest {
    /// Method and path, for previews and logs.
    pub fn endpoint(&self) -> (&'static str, String) {
        match self {
            Self::Create(_) => ("POST", format!("{V3_BASE}/vms")),
            Self::Clone { source_vm, .. } => ("POST", format!("{V3_BASE}/vms/{source_vm}/clone")),
            Self::Deploy { template, .. } => (
                "POST",
                format!("{V4_VMM_BASE}/content/templates/{template}/$actions/deploy"),
            ),
        }
    }

    /// The JSON body as sent.
    pub fn body_json(&self) -> serde_json::Value {
        let body = match self {
            Self::Create(body) => serde_json::to_value(body),
            Self::Clone { body, .. } => serde_json::to_value(body),
            Self::Deploy { body, .. } => serde_json::to_value(body),
        };
        body.unwrap_or(serde_json::Value::Null)
    }

    /// What must change after a clone or deploy.
    pub fn follow_up(&self) -> Option<&FollowUpUpdate> {
        match self {
            Self::Create(_) => None,
            Self::Clone { follow_up, .. } | Self::Deploy { follow_up, .. } => Some(follow_up),
        }
    }
}

/// The request for `plan`. `vm_uuid` is the reserved UUID the new VM gets (create and clone; a
/// template deploy cannot take one).
pub fn build_request(plan: &VmPlan, vm_uuid: &str) -> VmRequest {
    match &plan.source {
        SourcePlan::Image(image) => VmRequest::Create(Box::new(create_body(plan, image, vm_uuid))),
        SourcePlan::Vm {
            source_vm,
            resize_system_disk_mib,
        } => VmRequest::Clone {
            source_vm: source_vm.id().to_owned(),
            body: Box::new(clone_body(plan, vm_uuid)),
            follow_up: FollowUpUpdate::new(plan, *resize_system_disk_mib),
        },
        SourcePlan::Template {
            template,
            version_id,
            resize_system_disk_mib,
        } => VmRequest::Deploy {
            template: template.id().to_owned(),
            body: Box::new(deploy_body(plan, version_id.clone())),
            follow_up: FollowUpUpdate::new(plan, *resize_system_disk_mib),
        },
    }
}

fn create_body(plan: &VmPlan, image: &EntityRef, vm_uuid: &str) -> VmIntentInput {
    let system_disk = Disk {
        data_source_reference: Some(image.reference("image")),
        disk_size_mib: Some(plan.system_disk_mib),
        // The shape a data disk's container is sent in; a real GET shows it on the image-backed
        // boot disk too (`storage_config.storage_container_reference`,
        // nutanix-cloud-native/prism-go-client `v3/mocks/TestOperations_GetVM.yaml`).
        storage_config: plan
            .system_disk_storage_container
            .as_ref()
            .map(|uuid| StorageConfig {
                flash_mode: None,
                storage_container_reference: Some(v3::Reference::storage_container(uuid.as_str())),
                extra: Extra::new(),
            }),
        ..Disk::default()
    };
    let disk_list = std::iter::once(system_disk)
        .chain(plan.data_disks.iter().map(data_disk))
        .collect();
    VmIntentInput {
        api_version: Some(V3_API_VERSION.to_owned()),
        metadata: EntityMetadata {
            uuid: Some(vm_uuid.to_owned()),
            project_reference: plan.project.as_ref().map(|p| p.reference("project")),
            categories: (!plan.categories.is_empty()).then(|| plan.categories.clone()),
            ..EntityMetadata::of_kind("vm")
        },
        spec: VmSpec {
            name: plan.name.clone(),
            description: Some(plan.description.clone()),
            cluster_reference: Some(plan.cluster.reference("cluster")),
            resources: VmResources {
                num_sockets: Some(plan.num_sockets),
                num_vcpus_per_socket: Some(plan.vcpus_per_socket),
                num_threads_per_core: None,
                memory_size_mib: Some(plan.memory_mib),
                power_state: Some(PowerState::On),
                hardware_clock_timezone: Some("UTC".to_owned()),
                machine_type: (plan.boot == BootPlan::SecureBoot).then_some(MachineType::Q35),
                boot_config: boot_config(plan.boot),
                disk_list,
                nic_list: nics(plan),
                gpu_list: plan.gpus.iter().map(gpu).collect(),
                guest_customization: v3_guest(&plan.guest),
                vtpm_config: plan.vtpm_enabled.then(VtpmConfig::enabled),
                extra: Extra::new(),
            },
            extra: Extra::new(),
        },
        extra: Extra::new(),
    }
}

fn clone_body(plan: &VmPlan, vm_uuid: &str) -> VmCloneInput {
    VmCloneInput {
        metadata: Some(VmCloneMetadata {
            uuid: Some(vm_uuid.to_owned()),
            ..VmCloneMetadata::default()
        }),
        override_spec: VmCloneOverrideSpec {
            name: Some(plan.name.clone()),
            num_sockets: Some(plan.num_sockets),
            num_vcpus_per_socket: Some(plan.vcpus_per_socket),
            memory_size_mib: Some(plan.memory_mib),
            nic_list: nics(plan),
            guest_customization: v3_guest(&plan.guest),
            ..VmCloneOverrideSpec::default()
        },
        extra: Extra::new(),
    }
}

/// The v3 `flash_mode` value that pins a disk to the hot tier.
pub const FLASH_MODE_ENABLED: &str = "ENABLED";

fn deploy_body(plan: &VmPlan, version_id: Option<String>) -> TemplateDeployRequest {
    let overrides = VmConfigOverride {
        name: plan.name.clone(),
        num_sockets: plan.num_sockets,
        num_cores_per_socket: plan.vcpus_per_socket,
        num_threads_per_core: 1,
        memory_size_bytes: plan.memory_mib * MIB,
        nics: plan
            .subnets
            .iter()
            .enumerate()
            .map(|(index, subnet)| {
                let nic = v4::Nic::on_subnet(subnet.id());
                match plan.assigned_ips.get(index).copied().flatten() {
                    Some(ip) => nic.with_address(ip),
                    None => nic,
                }
            })
            .collect(),
        guest_customization: v4_guest(&plan.guest),
        extra: Extra::new(),
    };
    TemplateDeployRequest {
        version_id,
        ..TemplateDeployRequest::single(plan.cluster.id(), overrides)
    }
}

/// One NIC per subnet; a static address as the NIC's `ASSIGNED` endpoint (prism-go-client
/// `v3/swagger.json`, `ip_address.type`: "can only be ASSIGNED in the spec").
fn nics(plan: &VmPlan) -> Vec<Nic> {
    plan.subnets
        .iter()
        .enumerate()
        .map(|(index, subnet)| Nic {
            subnet_reference: Some(subnet.reference("subnet")),
            ip_endpoint_list: plan
                .assigned_ips
                .get(index)
                .copied()
                .flatten()
                .map(|ip| IpEndpoint {
                    ip: Some(ip.to_string()),
                    endpoint_type: Some(IpEndpointType::Assigned),
                    extra: Extra::new(),
                })
                .into_iter()
                .collect(),
            ..Nic::default()
        })
        .collect()
}

fn boot_config(boot: BootPlan) -> Option<BootConfig> {
    let (boot_type, order) = match boot {
        BootPlan::Default | BootPlan::FromSource => return None,
        BootPlan::Legacy => (
            v3::BootType::Legacy,
            vec![
                BootDeviceKind::Cdrom,
                BootDeviceKind::Disk,
                BootDeviceKind::Network,
            ],
        ),
        BootPlan::Uefi => (v3::BootType::Uefi, Vec::new()),
        BootPlan::SecureBoot => (v3::BootType::SecureBoot, Vec::new()),
    };
    Some(BootConfig {
        boot_type: Some(boot_type),
        boot_device_order_list: order,
        extra: Extra::new(),
    })
}

fn data_disk(disk: &PlannedDataDisk) -> Disk {
    let device_properties = match &disk.address {
        Some(address) => DeviceProperties {
            device_type: Some(device_type(&address.device_type)),
            disk_address: Some(DiskAddress {
                adapter_type: adapter_type(&address.adapter),
                device_index: address.index,
                extra: Extra::new(),
            }),
            extra: Extra::new(),
        },
        None => DeviceProperties {
            device_type: Some(DeviceType::Disk),
            disk_address: None,
            extra: Extra::new(),
        },
    };
    let storage_config =
        (disk.flash_mode || disk.storage_container_uuid.is_some()).then(|| StorageConfig {
            // `ENABLED | DISABLED` in the v3 schema (`definitions.flash_mode` of
            // nutanix-cloud-native/prism-go-client `v3/swagger.json`); "ON" is refused with a 422.
            flash_mode: disk.flash_mode.then(|| FLASH_MODE_ENABLED.to_owned()),
            storage_container_reference: disk
                .storage_container_uuid
                .as_ref()
                .map(|uuid| v3::Reference::storage_container(uuid.as_str())),
            extra: Extra::new(),
        });
    Disk {
        data_source_reference: disk
            .data_source
            .as_ref()
            .map(|source| source.reference("image")),
        disk_size_mib: Some(disk.size_mib),
        device_properties: Some(device_properties),
        storage_config,
        ..Disk::default()
    }
}

fn device_type(device_type: &DiskDeviceType) -> DeviceType {
    match device_type {
        DiskDeviceType::CdRom => DeviceType::Cdrom,
        DiskDeviceType::Disk | DiskDeviceType::Unknown(_) => DeviceType::Disk,
    }
}

fn adapter_type(adapter: &DiskAdapterType) -> AdapterType {
    AdapterType::from(adapter.as_str())
}

fn gpu(gpu: &PlannedGpu) -> v3::Gpu {
    match gpu {
        PlannedGpu::Assigned {
            vendor,
            mode,
            device_id,
        } => v3::Gpu {
            vendor: Some(vendor.clone()),
            mode: Some(mode.clone()),
            device_id: *device_id,
            extra: Extra::new(),
        },
        // Previews only: the request is never sent, so show what was asked for.
        PlannedGpu::AsWritten(wanted) => {
            let mut extra = Extra::new();
            if let Some(name) = &wanted.name {
                extra.insert("name".to_owned(), serde_json::Value::String(name.clone()));
            }
            v3::Gpu {
                vendor: Some(v3::GpuVendor::Other(String::new())),
                mode: Some(v3::GpuMode::Other(String::new())),
                device_id: wanted.device_id.map(i64::from),
                extra,
            }
        }
    }
}

fn v3_guest(guest: &GuestPlan) -> Option<v3::GuestCustomization> {
    match guest {
        GuestPlan::None => None,
        GuestPlan::CloudInit {
            user_data,
            meta_data,
        } => Some(v3::GuestCustomization {
            is_overridable: Some(true),
            cloud_init: Some(v3::CloudInit {
                user_data: Some(user_data.clone()),
                meta_data: meta_data.clone(),
                extra: Extra::new(),
            }),
            ..v3::GuestCustomization::default()
        }),
        GuestPlan::Sysprep(unattend) => Some(v3::GuestCustomization {
            is_overridable: Some(true),
            sysprep: Some(v3::Sysprep {
                install_type: Some(SysprepInstallType::Prepared),
                unattend_xml: Some(unattend.to_base64()),
                ..v3::Sysprep::default()
            }),
            ..v3::GuestCustomization::default()
        }),
    }
}

fn v4_guest(guest: &GuestPlan) -> Option<v4::GuestCustomization> {
    let config = match guest {
        GuestPlan::None => return None,
        GuestPlan::CloudInit {
            user_data,
            meta_data,
        } => GuestCustomizationConfig::CloudInit(v4::CloudInit::config_drive(
            user_data.clone(),
            meta_data.clone(),
        )),
        GuestPlan::Sysprep(unattend) => GuestCustomizationConfig::Sysprep(
            v4::Sysprep::prepared_unattend_xml(unattend.to_base64()),
        ),
    };
    Some(v4::GuestCustomization::new(config))
}

/// What a clone or deploy cannot set, applied with `PUT /vms/{uuid}` to the body read by GET
/// (`Vm::into_update_input`) once the new VM exists: the identity description, categories,
/// project, a larger boot disk, a vTPM, and power on.
///
/// The actuator records it on the Machine (`providerStatus.pendingFollowUp`) before the clone or
/// deploy is sent, so it survives a restart; it holds no secret.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FollowUpUpdate {
    pub description: String,
    #[serde(default)]
    pub categories: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_uuid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resize_system_disk_mib: Option<u64>,
    /// Turn the vTPM on: neither a clone (`vm_clone_override_spec` in the v3 schema,
    /// nutanix-cloud-native/prism-go-client `v3/swagger.json`) nor a deploy (v4
    /// `VmConfigOverride`, ntnx-vmm-py-client 4.3.2) can, while an update can
    /// (`vm_resources.vtpm_config` there; nutanix/terraform-provider-nutanix updates
    /// `VtpmConfig` of an existing VM, `resource_nutanix_virtual_machine_v2.go`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub vtpm_enabled: bool,
    #[serde(default)]
    pub power_on: bool,
    /// Send the update even when the VM's spec already asks for power ON: its create task
    /// failed after the VM was made (a failed power-on leaves the spec ON and the VM OFF), and
    /// only a new update makes Prism try again. That a PUT of an unchanged spec makes AHV
    /// power the VM on is not established from any source; prism-mock assumes it and
    /// `provider/tests/controller` pins it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reassert_power: bool,
}

/// Why a follow-up update cannot be applied to a VM.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FollowUpError {
    #[error("VM has no disk to resize to {0} MiB (no DISK device in its disk_list)")]
    NoSystemDisk(u64),
}

impl FollowUpUpdate {
    fn new(plan: &VmPlan, resize_system_disk_mib: Option<u64>) -> Self {
        Self {
            description: plan.description.clone(),
            categories: plan.categories.clone(),
            project_uuid: plan.project.as_ref().map(|p| p.id().to_owned()),
            resize_system_disk_mib,
            vtpm_enabled: plan.vtpm_enabled,
            power_on: true,
            reassert_power: false,
        }
    }

    /// Powers on a VM whose create task failed after making it, changing nothing else but the
    /// identity description (which it carries already when the create sent it).
    pub fn reassert_power(description: String) -> Self {
        Self {
            description,
            categories: BTreeMap::new(),
            project_uuid: None,
            resize_system_disk_mib: None,
            vtpm_enabled: false,
            power_on: true,
            reassert_power: true,
        }
    }

    /// Applies the update to a VM's body; `Ok(false)` when there is nothing left to change (it
    /// was applied before a crash), so no PUT is needed.
    pub fn apply(&self, input: &mut VmIntentInput) -> Result<bool, FollowUpError> {
        let mut changed = false;
        let mut set = |changed_now: bool| changed |= changed_now;

        set(input.spec.description.as_deref() != Some(self.description.as_str()));
        input.spec.description = Some(self.description.clone());

        for (key, value) in &self.categories {
            set(input
                .metadata
                .categories
                .get_or_insert_default()
                .insert(key.clone(), value.clone())
                .as_ref()
                != Some(value));
            if let Some(mapping) = &mut input.metadata.categories_mapping {
                let values = vec![value.clone()];
                set(mapping.insert(key.clone(), values.clone()) != Some(values));
            }
        }
        if let Some(project) = &self.project_uuid {
            set(input
                .metadata
                .project_reference
                .as_ref()
                .map(|r| r.uuid.as_str())
                != Some(project));
            input.metadata.project_reference = Some(v3::Reference::project(project.as_str()));
        }
        if let Some(wanted) = self.resize_system_disk_mib {
            let disk = system_disk(&mut input.spec.resources.disk_list)
                .ok_or(FollowUpError::NoSystemDisk(wanted))?;
            let current = disk_mib(disk).unwrap_or(0);
            if current < wanted {
                disk.disk_size_mib = Some(wanted);
                // Prism requires the two sizes to agree.
                disk.disk_size_bytes = disk.disk_size_bytes.map(|_| wanted * MIB);
                set(true);
            }
        }
        if self.vtpm_enabled {
            let vtpm = input
                .spec
                .resources
                .vtpm_config
                .get_or_insert_with(VtpmConfig::default);
            set(!vtpm.is_enabled());
            vtpm.vtpm_enabled = Some(true);
        }
        if self.power_on {
            set(self.reassert_power || input.spec.resources.power_state != Some(PowerState::On));
            input.spec.resources.power_state = Some(PowerState::On);
        }
        Ok(changed)
    }

    /// Whether `listed`, a VM as a `POST /vms/list` entity shows it, carries every effect of
    /// this update: its description, categories and project in the intent, and the power state
    /// ON in its status (what only the update's end brings: a clone or deploy makes the VM
    /// OFF), and a boot disk at least as large as asked (the listed entity carries each disk's
    /// size: the recorded `list_vm.json`). A vTPM counts as not shown: the listing leaves
    /// `vtpm_config` out (`list_vm.json` against `get_vm.json`).
    pub fn shown_by(&self, listed: &v3::Vm) -> bool {
        if self.vtpm_enabled {
            return false;
        }
        let metadata = &listed.metadata;
        let spec = listed.spec.as_ref();
        let description = spec.and_then(|spec| spec.description.as_deref());
        let disk_shown = self.resize_system_disk_mib.is_none_or(|wanted| {
            let disks = spec.map_or(&[][..], |spec| &spec.resources.disk_list[..]);
            system_disk_at(disks)
                .and_then(|at| disks.get(at))
                .and_then(disk_mib)
                .is_some_and(|size| size >= wanted)
        });
        let categories_shown = self.categories.iter().all(|(key, value)| {
            metadata
                .categories
                .as_ref()
                .and_then(|categories| categories.get(key))
                == Some(value)
        });
        let project_shown = self.project_uuid.as_ref().is_none_or(|project| {
            metadata
                .project_reference
                .as_ref()
                .is_some_and(|reference| reference.uuid == *project)
        });
        let power = listed
            .status
            .as_ref()
            .and_then(|status| status.resources.as_ref())
            .and_then(|resources| resources.power_state.as_ref());
        let power_shown = !self.power_on || power == Some(&PowerState::On);
        description == Some(self.description.as_str())
            && disk_shown
            && categories_shown
            && project_shown
            && power_shown
    }
}

/// A disk's size in MiB, from either of the two sizes Prism keeps.
fn disk_mib(disk: &Disk) -> Option<u64> {
    disk.disk_size_mib.or(disk.disk_size_bytes.map(|b| b / MIB))
}

/// The boot disk of a cloned or deployed VM: the disk at SCSI 0, else the first DISK.
fn system_disk(disks: &mut [Disk]) -> Option<&mut Disk> {
    let at = system_disk_at(disks)?;
    disks.get_mut(at)
}

/// Where [`system_disk`] is in `disks`.
fn system_disk_at(disks: &[Disk]) -> Option<usize> {
    let is_disk = |disk: &Disk| {
        disk.device_properties.as_ref().is_none_or(|p| {
            p.device_type
                .as_ref()
                .is_none_or(|t| *t == DeviceType::Disk)
        })
    };
    let at_scsi_0 = |disk: &Disk| {
        disk.device_properties
            .as_ref()
            .and_then(|p| p.disk_address.as_ref())
            .is_some_and(|a| a.adapter_type == AdapterType::Scsi && a.device_index == 0)
    };
    disks
        .iter()
        .position(|d| is_disk(d) && at_scsi_0(d))
        .or_else(|| disks.iter().position(is_disk))
}

#[cfg(test)]
mod tests;
