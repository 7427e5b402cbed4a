//! VM intent shapes: create input, GET/list output, update and clone.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::common::{
    EntityMetadata, EntityReference, EntityState, ExecutionContext, Extra, Message, Reference,
};
use crate::open_enum;
use crate::sensitive::Sensitive;

/// The `metadata` of a VM (the same shape as every entity's).
pub type VmMetadata = EntityMetadata;

open_enum! {
    /// `resources.power_state`.
    #[derive(Default)]
    pub enum PowerState {
        #[default]
        On = "ON",
        Off = "OFF",
    }
}

open_enum! {
    /// `resources.machine_type`. Q35 is required for secure boot.
    pub enum MachineType {
        Pc = "PC",
        Pseries = "PSERIES",
        Q35 = "Q35",
    }
}

open_enum! {
    /// `boot_config.boot_type`.
    pub enum BootType {
        Legacy = "LEGACY",
        Uefi = "UEFI",
        SecureBoot = "SECURE_BOOT",
    }
}

open_enum! {
    /// Entries of `boot_config.boot_device_order_list`.
    pub enum BootDeviceKind {
        Cdrom = "CDROM",
        Disk = "DISK",
        Network = "NETWORK",
    }
}

open_enum! {
    /// `device_properties.device_type`.
    pub enum DeviceType {
        Disk = "DISK",
        Cdrom = "CDROM",
        VolumeGroup = "VOLUME_GROUP",
    }
}

open_enum! {
    /// `disk_address.adapter_type`.
    pub enum AdapterType {
        Scsi = "SCSI",
        Ide = "IDE",
        Pci = "PCI",
        Sata = "SATA",
        Spapr = "SPAPR",
    }
}

open_enum! {
    /// `ip_endpoint_list[].type`: only ASSIGNED may be sent in a spec; LEARNED comes from the guest.
    pub enum IpEndpointType {
        Assigned = "ASSIGNED",
        Learned = "LEARNED",
    }
}

open_enum! {
    /// `nic_list[].nic_type`.
    pub enum NicType {
        NormalNic = "NORMAL_NIC",
        DirectNic = "DIRECT_NIC",
        NetworkFunctionNic = "NETWORK_FUNCTION_NIC",
        SpanDestinationNic = "SPAN_DESTINATION_NIC",
    }
}

open_enum! {
    /// `gpu_list[].mode`.
    pub enum GpuMode {
        PassthroughGraphics = "PASSTHROUGH_GRAPHICS",
        PassthroughCompute = "PASSTHROUGH_COMPUTE",
        Virtual = "VIRTUAL",
    }
}

open_enum! {
    /// `gpu_list[].vendor`.
    pub enum GpuVendor {
        Nvidia = "NVIDIA",
        Intel = "INTEL",
        Amd = "AMD",
    }
}

open_enum! {
    /// `sysprep.install_type`; Prism's default is PREPARED.
    pub enum SysprepInstallType {
        Prepared = "PREPARED",
        Fresh = "FRESH",
    }
}

/// Body of `POST /vms` and `PUT /vms/{uuid}`: `{api_version?, metadata, spec}` (never `status`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VmIntentInput {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    pub metadata: VmMetadata,
    pub spec: VmSpec,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `spec` of a VM.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VmSpec {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The Prism Element the VM runs on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_reference: Option<Reference>,
    pub resources: VmResources,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `spec.resources` of a VM.
///
/// Every field is optional: `vm_resources` in the v3 schema (nutanix-cloud-native/prism-go-client
/// `v3/swagger.json`) requires none, and a real create echo (`hack/prism-mock/recorded/create_vm.json`) has no
/// `num_vcpus_per_socket` nor `power_state`. An absent field is not sent back on update.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VmResources {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_sockets: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_vcpus_per_socket: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_threads_per_core: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_size_mib: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_state: Option<PowerState>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hardware_clock_timezone: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_type: Option<MachineType>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_config: Option<BootConfig>,
    #[serde(default)]
    pub disk_list: Vec<Disk>,
    #[serde(default)]
    pub nic_list: Vec<Nic>,
    #[serde(default)]
    pub gpu_list: Vec<Gpu>,
    /// Create-only: Prism refuses a change to it later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest_customization: Option<GuestCustomization>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vtpm_config: Option<VtpmConfig>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `resources.vtpm_config`: the VM's virtual TPM (`vm_vtpm_config` in the v3 schema,
/// nutanix-cloud-native/prism-go-client `v3/swagger.json`; a real GET shows
/// `{"vtpm_enabled": false}` in spec and `{"vtpm_enabled": false, "version": ""}` in status,
/// `v3/mocks/TestOperations_GetVM.yaml` there).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VtpmConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vtpm_enabled: Option<bool>,
    #[serde(flatten)]
    pub extra: Extra,
}

impl VtpmConfig {
    /// A vTPM that is on.
    pub fn enabled() -> Self {
        Self {
            vtpm_enabled: Some(true),
            extra: Extra::new(),
        }
    }

    /// Whether it asks for a vTPM (absent is off: the recorded default).
    pub fn is_enabled(&self) -> bool {
        self.vtpm_enabled == Some(true)
    }
}

/// A disk or CD-ROM.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Disk {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// The image (or disk) the disk is cloned from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_source_reference: Option<Reference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_size_mib: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_size_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_properties: Option<DeviceProperties>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_config: Option<StorageConfig>,
    /// The volume group a `VOLUME_GROUP` disk is (prism-go-client `v3/swagger.json`, `vm_disk`): a volume group
    /// attached to the VM itself, as Nutanix CSI 3.x attaches a PersistentVolume's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_group_reference: Option<Reference>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `disk_list[].device_properties`. The schema leaves it an open object and prism-go-client's
/// `VMDiskDeviceProperties` makes `device_type` optional; `disk_address` requires both of its fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceProperties {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_type: Option<DeviceType>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_address: Option<DiskAddress>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `device_properties.disk_address`, e.g. SCSI 0.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiskAddress {
    pub adapter_type: AdapterType,
    pub device_index: u32,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `disk_list[].storage_config`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StorageConfig {
    /// `"ON"` for flash mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flash_mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_container_reference: Option<Reference>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A NIC, in spec and in status (status adds learned IPs).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Nic {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet_reference: Option<Reference>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ip_endpoint_list: Vec<IpEndpoint>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac_address: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nic_type: Option<NicType>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_connected: Option<bool>,
    #[serde(flatten)]
    pub extra: Extra,
}

impl Nic {
    /// A NIC on a subnet, addressed by DHCP.
    pub fn on_subnet(subnet_uuid: impl Into<String>) -> Self {
        Self {
            subnet_reference: Some(Reference::subnet(subnet_uuid)),
            ..Self::default()
        }
    }
}

/// `ip_endpoint_list[]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IpEndpoint {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<String>,
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub endpoint_type: Option<IpEndpointType>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A GPU requested for (or attached to) a VM. `vm_gpu` in the v3 schema requires no field.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Gpu {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor: Option<GpuVendor>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<GpuMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_id: Option<i64>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `resources.boot_config`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BootConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_type: Option<BootType>,
    /// Ignored by Prism in UEFI and secure boot.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub boot_device_order_list: Vec<BootDeviceKind>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `resources.guest_customization`: exactly one of `cloud_init` and `sysprep`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GuestCustomization {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_overridable: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud_init: Option<CloudInit>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sysprep: Option<Sysprep>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// cloud-init (or cloudbase-init) data; both fields are base64. `Debug` never shows them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CloudInit {
    /// Base64 user data (≤ 128000 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<Sensitive>,
    /// Base64 meta data, e.g. `{"hostname":…,"uuid":…}` (≤ 32000 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta_data: Option<Sensitive>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// Windows sysprep: `unattend_xml` (base64) or `custom_key_values`. `Debug` never shows their values.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Sysprep {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install_type: Option<SysprepInstallType>,
    /// Base64 unattend.xml (≤ 32000 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unattend_xml: Option<Sensitive>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_key_values: Option<BTreeMap<String, Sensitive>>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A VM as GET, list and create/update responses return it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Vm {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    pub metadata: VmMetadata,
    /// Present for every created VM; optional so that an entity in an odd state still decodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<VmSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<VmStatus>,
    #[serde(flatten)]
    pub extra: Extra,
}

impl Vm {
    /// The VM's UUID from its metadata.
    pub fn uuid(&self) -> Option<&str> {
        self.metadata.uuid.as_deref()
    }

    /// The name from the spec, else the status.
    pub fn name(&self) -> Option<&str> {
        self.spec
            .as_ref()
            .map(|spec| spec.name.as_str())
            .or_else(|| self.status.as_ref()?.name.as_deref())
    }

    /// The UUIDs of the volume groups attached to the VM (its `VOLUME_GROUP` disks), in spec and status, each
    /// once, lower case. CAPX reads `spec.resources.disk_list[].volume_group_reference` before deleting a VM
    /// (nutanix-cloud-native/cluster-api-provider-nutanix #473, d1217b98); status is read too, so that an
    /// attachment either side shows is found.
    pub fn attached_volume_groups(&self) -> Vec<String> {
        let spec_disks = self.spec.iter().flat_map(|spec| &spec.resources.disk_list);
        let status_disks = self
            .status
            .iter()
            .filter_map(|status| status.resources.as_ref())
            .flat_map(|resources| &resources.disk_list);
        let mut uuids: Vec<String> = Vec::new();
        for disk in spec_disks.chain(status_disks) {
            if let Some(reference) = &disk.volume_group_reference {
                let uuid = reference.uuid.to_ascii_lowercase();
                if !uuids.contains(&uuid) {
                    uuids.push(uuid);
                }
            }
        }
        uuids
    }

    /// `status.state`.
    pub fn state(&self) -> Option<&EntityState> {
        self.status.as_ref()?.state.as_ref()
    }

    /// The task of a create/update response (`status.execution_context.task_uuid`).
    pub fn task_uuid(&self) -> Option<&str> {
        self.status
            .as_ref()?
            .execution_context
            .as_ref()?
            .task_uuid()
    }

    /// The body for `PUT /vms/{uuid}` after a GET: metadata (with its `spec_version`) and spec, every unknown
    /// field kept; `status` and `metadata.spec_hash` dropped, as Prism requires. `None` when the VM has no spec.
    pub fn into_update_input(self) -> Option<VmIntentInput> {
        let mut metadata = self.metadata;
        metadata.extra.remove("spec_hash");
        Some(VmIntentInput {
            api_version: self.api_version,
            metadata,
            spec: self.spec?,
            extra: self.extra,
        })
    }
}

/// `status` of a VM.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VmStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<EntityState>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_reference: Option<Reference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<VmStatusResources>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_context: Option<ExecutionContext>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub message_list: Vec<Message>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `status.resources` of a VM: what is really there.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VmStatusResources {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_state: Option<PowerState>,
    /// e.g. `AHV`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hypervisor_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_reference: Option<EntityReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_sockets: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_vcpus_per_socket: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_size_mib: Option<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nic_list: Vec<Nic>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disk_list: Vec<Disk>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_list: Vec<Gpu>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bios_uuid: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

impl VmStatusResources {
    /// Every non-empty IP of every NIC, in NIC order.
    pub fn ip_addresses(&self) -> impl Iterator<Item = &str> {
        self.nic_list
            .iter()
            .flat_map(|nic| nic.ip_endpoint_list.iter())
            .filter_map(|endpoint| endpoint.ip.as_deref())
            .filter(|ip| !ip.is_empty())
    }
}

/// Body of `POST /vms/{uuid}/clone`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VmCloneInput {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<VmCloneMetadata>,
    pub override_spec: VmCloneOverrideSpec,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `metadata` of a clone request: the new VM's UUID (reserved through `idempotence_identifiers`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VmCloneMetadata {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entity_version: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// What a clone may change; disks always come from the source VM.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VmCloneOverrideSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_sockets: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_vcpus_per_socket: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_threads_per_core: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_size_mib: Option<u64>,
    /// Empty means "keep the source VM's NICs".
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nic_list: Vec<Nic>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_config: Option<BootConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest_customization: Option<GuestCustomization>,
    #[serde(flatten)]
    pub extra: Extra,
}
