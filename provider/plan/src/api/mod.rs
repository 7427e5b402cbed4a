//! API types: `Machine` and `MachineSet` (machine-api CRDs) and the Nutanix provider spec and
//! status carried inside them.

mod choices;
mod conditions;
pub mod go_provider_status;
pub mod ipam;
mod machine;
mod provider;
pub mod quantity;

pub use choices::{
    ANNOTATION_PREFIX, AnnotatedChoices, GUEST_CUSTOMIZATION_ANNOTATION, IMAGE_KIND_ANNOTATION,
    IP_POOL_ANNOTATION, KNOWN_ANNOTATIONS, NAMESERVERS_ANNOTATION,
    SYSPREP_ADMIN_PASSWORD_SECRET_ANNOTATION, SYSPREP_TIME_ZONE_ANNOTATION,
    SYSTEM_DISK_STORAGE_CONTAINER_ANNOTATION, VTPM_ANNOTATION, VtpmChoice, unknown_annotations,
};
pub use conditions::{MachineCondition, ProviderCondition, TypedCondition, merge_condition};
pub use machine::{
    GuardedMachine, GuardedMachineSet, LifecycleHook, LifecycleHooks, Machine, MachineSet,
    MachineSetSpec, MachineSetStatus, MachineSpec, MachineStatus, MachineTemplateSpec,
    ProviderSpec, provider_spec_reads,
};
pub use provider::{
    BootType, DeletionSent, DiskAdapterType, DiskDeviceType, DiskMode, FieldShape,
    GpuIdentifierType, GuestCustomizationSpec, GuestCustomizationType, IdentifierType, ImageKind,
    NutanixCategory, NutanixFailureDomainReference, NutanixGpu, NutanixMachineProviderConfig,
    NutanixMachineProviderStatus, NutanixResourceIdentifier, NutanixStorageResourceIdentifier,
    NutanixVmDisk, NutanixVmDiskDeviceProperties, NutanixVmStorageConfig, PROVIDER_API_VERSION,
    PROVIDER_CONFIG_KIND, PROVIDER_SPEC_FIELDS, PROVIDER_SPEC_NESTED, PROVIDER_STATUS_KIND,
    ParseError, PendingTask, ProviderStatusError, TaskOperation, Unreadable,
};

/// Label that marks a Windows Machine (read by WMCO and by us).
pub const OS_ID_LABEL: &str = "machine.openshift.io/os-id";
/// Value of [`OS_ID_LABEL`] for Windows.
pub const OS_ID_WINDOWS: &str = "Windows";
/// Label naming the cluster's infrastructure ID; required on every Machine.
pub const CLUSTER_ID_LABEL: &str = "machine.openshift.io/cluster-api-cluster";
/// Key of the Prism Central credentials in the credentials Secret.
pub const CREDENTIALS_KEY: &str = "credentials";
/// Finalizer the machine controller puts on Machines.
pub const MACHINE_FINALIZER: &str = "machine.machine.openshift.io";
/// Annotation that skips draining the Node of a deleted Machine.
pub const EXCLUDE_NODE_DRAINING_ANNOTATION: &str = "machine.openshift.io/exclude-node-draining";
/// Annotation holding Prism's VM state (`COMPLETE`, `ERROR`, ... or `Unknown`).
pub const INSTANCE_STATE_ANNOTATION: &str = "machine.openshift.io/instance-state";

/// Machine phases of the machine-api-operator.
pub mod phase {
    pub const PROVISIONING: &str = "Provisioning";
    pub const PROVISIONED: &str = "Provisioned";
    pub const RUNNING: &str = "Running";
    pub const FAILED: &str = "Failed";
    pub const DELETING: &str = "Deleting";
}

#[cfg(test)]
mod tests;
