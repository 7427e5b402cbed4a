//! The VM of a Machine. Its providerSpec is validated ([`validate`], against what the actuator
//! looked up: [`resolve`]) into the typed plan defined here, [`VmPlan`]: everything validated,
//! resolved and decided, ready to be written as a Prism request by [`request`] (the guest's
//! [`unattend`] or [`cloud_init`] with it).

pub mod addressing;
pub mod cloud_init;
pub mod errors;
pub mod guest;
pub mod guest_network;
pub mod identity;
pub mod request;
pub mod resolve;
pub mod scope;
pub mod secret;
pub mod spec;
pub mod unattend;
pub mod validate;

use std::collections::BTreeMap;

use prism_types::Sensitive;
use prism_types::v3::{GpuMode, GpuVendor, Reference};

use self::identity::MachineIdentity;
use self::unattend::Unattend;
use crate::api::{DiskAdapterType, DiskDeviceType, NutanixGpu};

/// A Prism entity: by UUID, or (only in previews) by the name it was written with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EntityRef {
    Uuid(String),
    /// An unresolved name, left as written by `render`; the actuator never builds a request with one.
    Name(String),
}

impl EntityRef {
    /// A v3 reference of `kind`. An unresolved name is sent as `name` with an empty `uuid`.
    pub fn reference(&self, kind: &str) -> Reference {
        match self {
            Self::Uuid(uuid) => Reference::new(kind, uuid.as_str()),
            Self::Name(name) => Reference {
                name: Some(name.clone()),
                ..Reference::new(kind, "")
            },
        }
    }

    /// The UUID, or the name when unresolved (v4 bodies and request paths hold one string).
    pub fn id(&self) -> &str {
        match self {
            Self::Uuid(id) | Self::Name(id) => id,
        }
    }
}

/// Where the system disk comes from, and what the chosen API cannot do in the create call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourcePlan {
    /// An image-service image: `POST /vms` with the image as the first disk.
    Image(EntityRef),
    /// A VM template: `POST /content/templates/{extId}/$actions/deploy`, then a follow-up update.
    Template {
        template: EntityRef,
        version_id: Option<String>,
        resize_system_disk_mib: Option<u64>,
    },
    /// A source VM: `POST /vms/{uuid}/clone`, then a follow-up update.
    Vm {
        source_vm: EntityRef,
        resize_system_disk_mib: Option<u64>,
    },
}

/// Boot settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BootPlan {
    /// `bootType: ""`: no boot config, AHV's default (Legacy).
    Default,
    /// Legacy BIOS, boot order CDROM, DISK, NETWORK.
    Legacy,
    Uefi,
    /// UEFI with secure boot; machine type Q35, which AHV requires for it.
    SecureBoot,
    /// The template's or source VM's own settings.
    FromSource,
}

/// Where a data disk sits on the VM's buses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiskAddressPlan {
    pub device_type: DiskDeviceType,
    pub adapter: DiskAdapterType,
    pub index: u32,
}

/// A data disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedDataDisk {
    pub size_mib: u64,
    /// `None`: AHV picks the next free SCSI slot.
    pub address: Option<DiskAddressPlan>,
    pub flash_mode: bool,
    pub storage_container_uuid: Option<String>,
    pub data_source: Option<EntityRef>,
}

/// A GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlannedGpu {
    /// A free GPU of the cluster's hosts that matched the request.
    Assigned {
        vendor: GpuVendor,
        mode: GpuMode,
        device_id: Option<i64>,
    },
    /// Not matched against the host inventory (preview only).
    AsWritten(NutanixGpu),
}

/// Guest customization, ready to send. `Debug` never shows its contents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GuestPlan {
    /// No user data: nothing to customise.
    None,
    /// cloud-init (Ignition for RHCOS, cloudbase-init for Windows); base64 values.
    CloudInit {
        user_data: Sensitive,
        meta_data: Option<Sensitive>,
    },
    /// Windows Sysprep with an unattend.xml.
    Sysprep(Unattend),
}

/// Everything decided about one Machine's VM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmPlan {
    pub identity: MachineIdentity,
    /// The VM name: the Machine name.
    pub name: String,
    /// Carries the identity marker (see [`identity`]).
    pub description: String,
    pub cluster: EntityRef,
    pub source: SourcePlan,
    /// One NIC each, in order; the first is the primary NIC.
    pub subnets: Vec<EntityRef>,
    /// The address each NIC is given as `ASSIGNED` (static, from an IP pool: see
    /// `plan::machine::ipam`), by NIC index; a NIC past its end, or `None`, is addressed by Prism.
    pub assigned_ips: Vec<Option<std::net::Ipv4Addr>>,
    pub num_sockets: u32,
    pub vcpus_per_socket: u32,
    pub memory_mib: u64,
    /// Size of the boot disk for an image (a template or source VM keeps its own, see
    /// [`SourcePlan`]).
    pub system_disk_mib: u64,
    /// UUID of the storage container an image's boot disk is created in
    /// (`nutanix.machine.openshift.io/system-disk-storage-container`); `None`: the cluster's
    /// default. Never set for a template or source VM, whose disks stay where they are.
    pub system_disk_storage_container: Option<String>,
    /// Whether the VM gets a virtual TPM (`nutanix.machine.openshift.io/vtpm: Enabled`): in the
    /// create body for an image, in the follow-up update for a clone or deploy.
    pub vtpm_enabled: bool,
    pub data_disks: Vec<PlannedDataDisk>,
    pub gpus: Vec<PlannedGpu>,
    pub boot: BootPlan,
    pub project: Option<EntityRef>,
    /// The user's categories plus `kubernetes-io-cluster-<infraID>: owned` when that exists.
    pub categories: BTreeMap<String, String>,
    pub guest: GuestPlan,
    /// Things the administrator should know; none of them stops the create.
    pub warnings: Vec<String>,
}
