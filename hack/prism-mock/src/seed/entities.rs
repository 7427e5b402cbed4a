//! The entities a seed defines: the Prism Central, Prism Elements, hosts and GPUs, subnets, images, projects,
//! categories, templates and VMs.

use serde::{Deserialize, Serialize};

use super::GuestOs;

/// The Prism Central entity.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrismCentralSeed {
    /// Cluster name of the PC entity.
    pub name: String,
    /// UUID, drawn from the RNG when absent.
    #[serde(default)]
    pub uuid: Option<String>,
}

impl Default for PrismCentralSeed {
    fn default() -> Self {
        Self {
            name: "prism-central".to_owned(),
            uuid: None,
        }
    }
}

/// A Prism Element.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSeed {
    /// Cluster name.
    pub name: String,
    /// UUID, drawn from the RNG when absent.
    #[serde(default)]
    pub uuid: Option<String>,
    /// AOS version reported in `status.resources.config.build.version`.
    #[serde(default = "default_aos_version")]
    pub aos_version: String,
}

fn default_aos_version() -> String {
    "6.10".to_owned()
}

/// A host and its GPUs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostSeed {
    /// Host name.
    pub name: String,
    /// UUID, drawn from the RNG when absent.
    #[serde(default)]
    pub uuid: Option<String>,
    /// Name of the cluster the host belongs to.
    pub cluster: String,
    /// GPUs of the host.
    #[serde(default)]
    pub gpus: Vec<GpuSeed>,
}

/// One physical GPU.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuSeed {
    /// Model name, e.g. `Tesla T4`.
    pub name: String,
    /// PCI device id.
    pub device_id: i64,
    /// NVIDIA, INTEL or AMD.
    #[serde(default = "default_gpu_vendor")]
    pub vendor: String,
    /// PASSTHROUGH_COMPUTE, PASSTHROUGH_GRAPHICS or VIRTUAL.
    #[serde(default = "default_gpu_mode")]
    pub mode: String,
}

fn default_gpu_vendor() -> String {
    "NVIDIA".to_owned()
}

fn default_gpu_mode() -> String {
    "PASSTHROUGH_COMPUTE".to_owned()
}

/// A VLAN subnet: managed by Prism (IPAM: an IPv4 address pool its DHCP hands out, the default) or not.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubnetSeed {
    /// Subnet name.
    pub name: String,
    /// UUID, drawn from the RNG when absent.
    #[serde(default)]
    pub uuid: Option<String>,
    /// Name of the Prism Element the subnet is on.
    pub cluster: String,
    /// VLAN id.
    #[serde(default)]
    pub vlan_id: u32,
    /// Whether Prism manages the subnet's addresses (IPAM). `false`: a plain VLAN without `ip_config`, where
    /// Prism hands out no address and refuses an ASSIGNED one; it then takes no `gateway` or pool.
    #[serde(default = "managed_by_default")]
    pub managed: bool,
    /// Network, `a.b.c.d/len` (of an unmanaged subnet: checked, never shown, as Prism does not know it).
    pub cidr: String,
    /// Default gateway (managed subnets only, where it is required).
    #[serde(default)]
    pub gateway: Option<String>,
    /// First address of the pool (managed subnets only, where it is required).
    #[serde(default)]
    pub pool_start: Option<String>,
    /// Last address of the pool (managed subnets only, where it is required).
    #[serde(default)]
    pub pool_end: Option<String>,
}

fn managed_by_default() -> bool {
    true
}

/// An Image-service image.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageSeed {
    /// Image name.
    pub name: String,
    /// UUID, drawn from the RNG when absent.
    #[serde(default)]
    pub uuid: Option<String>,
    /// Guest OS family of the image.
    #[serde(default)]
    pub os: GuestOs,
    /// Virtual size in MiB (the default boot-disk size when a VM gives none).
    #[serde(default = "default_image_size_mib")]
    pub size_mib: u64,
}

fn default_image_size_mib() -> u64 {
    20480
}

/// A project.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProjectSeed {
    /// Project name.
    pub name: String,
    /// UUID, drawn from the RNG when absent.
    #[serde(default)]
    pub uuid: Option<String>,
}

/// A category key with its values.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CategorySeed {
    /// Category key.
    pub key: String,
    /// Values of the key.
    #[serde(default)]
    pub values: Vec<String>,
}

/// A v4 VM template (one active version).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemplateSeed {
    /// Template name.
    pub name: String,
    /// extId, drawn from the RNG when absent.
    #[serde(default)]
    pub ext_id: Option<String>,
    /// Image backing the template's boot disk.
    pub image: String,
    /// Guest OS family (defaults to the image's).
    #[serde(default)]
    pub os: Option<GuestOs>,
    /// LEGACY, UEFI or SECURE_BOOT.
    #[serde(default = "default_template_boot_type")]
    pub boot_type: String,
    /// Sockets.
    #[serde(default = "one")]
    pub num_sockets: u64,
    /// Cores per socket.
    #[serde(default = "one")]
    pub num_cores_per_socket: u64,
    /// Memory in MiB.
    #[serde(default = "default_memory_mib")]
    pub memory_mib: u64,
    /// Boot disk size in MiB.
    #[serde(default = "default_disk_mib")]
    pub disk_size_mib: u64,
    /// Subnet of the template's NIC (by name); none means no NIC unless the deploy adds one.
    #[serde(default)]
    pub subnet: Option<String>,
}

fn default_template_boot_type() -> String {
    "UEFI".to_owned()
}

fn one() -> u64 {
    1
}

fn default_memory_mib() -> u64 {
    8192
}

fn default_disk_mib() -> u64 {
    122880
}

/// A VM present at start.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VmSeed {
    /// VM name.
    pub name: String,
    /// UUID, drawn from the RNG when absent.
    #[serde(default)]
    pub uuid: Option<String>,
    /// Prism Element name.
    pub cluster: String,
    /// Image of the boot disk.
    pub image: String,
    /// Subnets (by name), one NIC each.
    #[serde(default)]
    pub subnets: Vec<String>,
    /// Sockets.
    #[serde(default = "one")]
    pub num_sockets: u64,
    /// vCPUs per socket.
    #[serde(default = "one")]
    pub num_vcpus_per_socket: u64,
    /// Memory in MiB.
    #[serde(default = "default_memory_mib")]
    pub memory_mib: u64,
    /// Boot disk size in MiB.
    #[serde(default = "default_disk_mib")]
    pub disk_size_mib: u64,
    /// ON or OFF.
    #[serde(default = "default_power_state")]
    pub power_state: String,
    /// LEGACY, UEFI or SECURE_BOOT.
    #[serde(default = "default_vm_boot_type")]
    pub boot_type: String,
}

fn default_power_state() -> String {
    "OFF".to_owned()
}

fn default_vm_boot_type() -> String {
    "LEGACY".to_owned()
}
