//! Images, subnets, clusters, projects and hosts: what a VM spec refers to.

use serde::{Deserialize, Serialize};

use super::common::{EntityMetadata, EntityState, Extra, Message, Reference};
use super::vm::{GpuMode, GpuVendor};

/// The usual `{metadata, spec, status}` envelope of an entity whose spec and status we model loosely.
macro_rules! entity {
    ($(#[$meta:meta])* $name:ident, $spec:ty, $status:ty) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
        pub struct $name {
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub api_version: Option<String>,
            #[serde(default)]
            pub metadata: EntityMetadata,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub spec: Option<$spec>,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub status: Option<$status>,
            #[serde(flatten)]
            pub extra: Extra,
        }

        impl $name {
            /// The entity's UUID from its metadata.
            pub fn uuid(&self) -> Option<&str> {
                self.metadata.uuid.as_deref()
            }
        }
    };
}

// ---- images ----

entity!(
    /// An image-service image (`GET /images/{uuid}`, `POST /images/list`).
    Image,
    ImageSpec,
    ImageStatus
);

impl Image {
    /// The name from the spec, else the status.
    pub fn name(&self) -> Option<&str> {
        self.spec
            .as_ref()
            .and_then(|spec| spec.name.as_deref())
            .or_else(|| self.status.as_ref()?.name.as_deref())
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ImageSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ImageResources>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ImageStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<EntityState>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ImageResources>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub message_list: Vec<Message>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ImageResources {
    /// `DISK_IMAGE` or `ISO_IMAGE`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_uri: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
    #[serde(flatten)]
    pub extra: Extra,
}

// ---- subnets ----

entity!(
    /// A subnet (`GET /subnets/{uuid}`, `POST /subnets/list`). The list spans every Prism Element.
    Subnet,
    SubnetSpec,
    SubnetStatus
);

impl Subnet {
    /// The name from the spec, else the status.
    pub fn name(&self) -> Option<&str> {
        self.spec
            .as_ref()
            .and_then(|spec| spec.name.as_deref())
            .or_else(|| self.status.as_ref()?.name.as_deref())
    }

    /// Whether Prism hands out the subnet's addresses: an `ip_config` with at least one pool
    /// (spec, else status); a subnet without one gets its addresses from a DHCP server outside
    /// Prism.
    pub fn has_ip_pools(&self) -> bool {
        let pools = |resources: Option<&SubnetResources>| {
            resources
                .and_then(|r| r.ip_config.as_ref())
                .is_some_and(|config| !config.pool_list.is_empty())
        };
        pools(self.spec.as_ref().and_then(|s| s.resources.as_ref()))
            || pools(self.status.as_ref().and_then(|s| s.resources.as_ref()))
    }

    /// (addresses in the IP pools, of which free), summed over the pools of
    /// `status.resources.ip_usage_stats.ip_pools_stats`; `None` when Prism gave no count.
    pub fn pool_usage(&self) -> Option<(u64, u64)> {
        let stats = &self
            .status
            .as_ref()?
            .resources
            .as_ref()?
            .ip_usage_stats
            .as_ref()?
            .ip_pools_stats;
        if stats.is_empty() {
            return None;
        }
        Some(stats.iter().fold((0, 0), |(total, free), pool| {
            (
                total.saturating_add(pool.num_total_ips.unwrap_or(0)),
                free.saturating_add(pool.num_free_ips.unwrap_or(0)),
            )
        }))
    }

    /// The Prism Element the subnet belongs to (spec, else status).
    pub fn cluster_uuid(&self) -> Option<&str> {
        self.spec
            .as_ref()
            .and_then(|spec| spec.cluster_reference.as_ref())
            .or_else(|| self.status.as_ref()?.cluster_reference.as_ref())
            .map(|reference| reference.uuid.as_str())
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SubnetSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_reference: Option<Reference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<SubnetResources>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SubnetStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<EntityState>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_reference: Option<Reference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<SubnetResources>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SubnetResources {
    /// `VLAN` or `OVERLAY`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vlan_id: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vswitch_name: Option<String>,
    /// Present on a subnet whose addresses Prism hands out (IPAM); absent when a DHCP server
    /// outside Prism does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_config: Option<SubnetIpConfig>,
    /// The addresses in use, counted by Prism (status only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_usage_stats: Option<IpUsageStats>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `ip_config` of a subnet (prism-go-client's recorded `GET /subnets/{uuid}`,
/// `v3/mocks/TestOperations_GetSubnet.yaml`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SubnetIpConfig {
    /// Ranges `"first last"` Prism hands addresses out of.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pool_list: Vec<IpPool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_gateway_ip: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_length: Option<u8>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet_ip: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IpPool {
    #[serde(default)]
    pub range: String,
}

/// `status.resources.ip_usage_stats` of a subnet (same recording).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IpUsageStats {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_free_ips: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_assigned_ips: Option<u64>,
    /// One entry per range of `ip_config.pool_list`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ip_pools_stats: Vec<IpPoolStats>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IpPoolStats {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_total_ips: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_free_ips: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range: Option<String>,
}

// ---- clusters ----

entity!(
    /// A cluster entity (`GET /clusters/{uuid}`, `POST /clusters/list`): a Prism Element, or Prism Central itself.
    Cluster,
    ClusterSpec,
    ClusterStatus
);

/// The service that marks the Prism Central entity in the cluster list.
pub const PRISM_CENTRAL_SERVICE: &str = "PRISM_CENTRAL";

impl Cluster {
    /// The name from the spec, else the status.
    pub fn name(&self) -> Option<&str> {
        self.spec
            .as_ref()
            .and_then(|spec| spec.name.as_deref())
            .or_else(|| self.status.as_ref()?.name.as_deref())
    }

    /// The cluster's services, from `status.resources.config.service_list` (else the spec's).
    pub fn services(&self) -> &[String] {
        let from_status = self
            .status
            .as_ref()
            .and_then(|status| status.resources.as_ref())
            .and_then(|resources| resources.config.as_ref())
            .map(|config| config.service_list.as_slice())
            .filter(|services| !services.is_empty());
        let from_spec = || {
            self.spec
                .as_ref()
                .and_then(|spec| spec.resources.as_ref())
                .and_then(|resources| resources.config.as_ref())
                .map(|config| config.service_list.as_slice())
        };
        from_status.or_else(from_spec).unwrap_or_default()
    }

    /// True for the Prism Central entity, which is listed among the clusters but hosts no VMs of ours.
    pub fn is_prism_central(&self) -> bool {
        self.services()
            .iter()
            .any(|service| service == PRISM_CENTRAL_SERVICE)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClusterSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ClusterResources>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClusterStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<EntityState>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ClusterResources>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClusterResources {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<ClusterConfig>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClusterConfig {
    /// e.g. `["AOS"]` for a Prism Element, `["PRISM_CENTRAL"]` for Prism Central.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub service_list: Vec<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

// ---- projects ----

entity!(
    /// A project (`GET /projects/{uuid}`, `POST /projects/list`).
    Project,
    ProjectSpec,
    ProjectStatus
);

impl Project {
    /// The name from the spec, else the status.
    pub fn name(&self) -> Option<&str> {
        self.spec
            .as_ref()
            .and_then(|spec| spec.name.as_deref())
            .or_else(|| self.status.as_ref()?.name.as_deref())
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProjectSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProjectStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<EntityState>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

// ---- hosts ----

entity!(
    /// A host (`GET /hosts/{uuid}`, `POST /hosts/list`), read for its GPU inventory.
    Host,
    HostSpec,
    HostStatus
);

impl Host {
    /// The host's name from its status, else its spec.
    pub fn name(&self) -> Option<&str> {
        self.status
            .as_ref()
            .and_then(|status| status.name.as_deref())
            .or_else(|| self.spec.as_ref()?.name.as_deref())
    }

    /// The Prism Element the host belongs to.
    pub fn cluster_uuid(&self) -> Option<&str> {
        self.status
            .as_ref()?
            .cluster_reference
            .as_ref()
            .map(|reference| reference.uuid.as_str())
    }

    /// The host's GPUs (`status.resources.gpu_list`).
    pub fn gpus(&self) -> &[HostGpu] {
        self.status
            .as_ref()
            .and_then(|status| status.resources.as_ref())
            .map(|resources| resources.gpu_list.as_slice())
            .unwrap_or_default()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<EntityState>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_reference: Option<Reference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<HostResources>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostResources {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_list: Vec<HostGpu>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// One GPU of a host's inventory.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostGpu {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor: Option<GpuVendor>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<GpuMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_id: Option<i64>,
    /// `UNUSED` when free to attach.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assignable: Option<bool>,
    #[serde(flatten)]
    pub extra: Extra,
}

impl HostGpu {
    /// True when the GPU is free (`status == "UNUSED"`).
    pub fn is_unused(&self) -> bool {
        self.status.as_deref() == Some("UNUSED")
    }
}
