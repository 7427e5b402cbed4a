//! Prism Central v3 (`/api/nutanix/v3`) request and response shapes.
//!
//! Every struct keeps the fields it does not model in `extra`, so a GET → change → PUT sends them back; optional
//! fields are not serialised when `None`; enumerations accept values this crate does not know.

mod category;
mod common;
mod inventory;
mod misc;
mod task;
mod vm;

#[cfg(test)]
mod tests;

pub use category::{CategoryKey, CategoryValue};
pub use common::{
    DeleteResponse, DeleteStatus, EntityMetadata, EntityReference, EntityState, ExecutionContext,
    Extra, ListMetadata, ListRequest, ListResponse, Message, Reference, SkippedEntity, SortOrder,
    TaskReference,
};
pub use inventory::{
    Cluster, ClusterConfig, ClusterResources, ClusterSpec, ClusterStatus, Host, HostGpu,
    HostResources, HostSpec, HostStatus, Image, ImageResources, ImageSpec, ImageStatus, IpPool,
    IpPoolStats, IpUsageStats, PRISM_CENTRAL_SERVICE, Project, ProjectSpec, ProjectStatus, Subnet,
    SubnetIpConfig, SubnetResources, SubnetSpec, SubnetStatus,
};
pub use misc::{
    IdempotenceIdentifiers, IdempotenceIdentifiersRequest, User, UserResources, UserStatus,
};
pub use task::{Task, TaskStatus};
pub use vm::{
    AdapterType, BootConfig, BootDeviceKind, BootType, CloudInit, DeviceProperties, DeviceType,
    Disk, DiskAddress, Gpu, GpuMode, GpuVendor, GuestCustomization, IpEndpoint, IpEndpointType,
    MachineType, Nic, NicType, PowerState, StorageConfig, Sysprep, SysprepInstallType, Vm,
    VmCloneInput, VmCloneMetadata, VmCloneOverrideSpec, VmIntentInput, VmMetadata, VmResources,
    VmSpec, VmStatus, VmStatusResources, VtpmConfig,
};
