//! `NutanixMachineProviderConfig` and `NutanixMachineProviderStatus` (`machine.openshift.io/v1`),
//! field for field as openshift/api serialises them, plus our optional additions (which the
//! machine-api-operator's webhook drops on OpenShift: the annotations of [`super::choices`] carry
//! the same choices there).
//!
//! Upstream quirks that must parse, and are written back the same way: `bootType: ""`,
//! `project: {type: ""}`, `categories: null` (also `gpus`, `dataDisks`, `failureDomain`:
//! no `omitempty` in Go), `metadata: {creationTimestamp: null}`.
//!
//! Every field has a default so that a missing required field reaches validation, which reports
//! it with its path, instead of failing the whole parse. Enums keep unknown values for the same
//! reason. Only a value of the wrong JSON type (a string where a number belongs) fails to parse;
//! [`NutanixMachineProviderConfig::from_value`] reports that one with its path too.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::LocalObjectReference;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use prism_types::open_enum;

use super::conditions::ProviderCondition;

/// apiVersion of the provider spec and status.
pub const PROVIDER_API_VERSION: &str = "machine.openshift.io/v1";
/// kind of the provider spec.
pub const PROVIDER_CONFIG_KIND: &str = "NutanixMachineProviderConfig";
/// kind of the provider status.
pub const PROVIDER_STATUS_KIND: &str = "NutanixMachineProviderStatus";

/// The JSON shape of an object inside `NutanixMachineProviderConfig`, as far as its field names
/// go: what a misspelt nested field is checked against (`plan::vm::validate`).
#[derive(Debug)]
pub enum FieldShape {
    /// An object with these fields (name, shape of its value).
    Object(&'static [(&'static str, FieldShape)]),
    /// A list of items of one shape.
    List(&'static FieldShape),
    /// A value whose inside is not checked (a string, a number, a quantity).
    Value,
}

/// `NutanixResourceIdentifier` (openshift/api `machine/v1/types_nutanixprovider.go`).
const IDENTIFIER: FieldShape = FieldShape::Object(&[
    ("type", FieldShape::Value),
    ("uuid", FieldShape::Value),
    ("name", FieldShape::Value),
]);
/// `corev1.LocalObjectReference`.
const LOCAL_REFERENCE: FieldShape = FieldShape::Object(&[("name", FieldShape::Value)]);

/// The objects inside `spec.providerSpec.value`, field by field, by their top-level field: the
/// upstream type's JSON names (openshift/api `machine/v1/types_nutanixprovider.go`:
/// `NutanixResourceIdentifier`, `NutanixCategory`, `NutanixGPU`, `NutanixVMDisk` with its
/// `NutanixVMDiskDeviceProperties` and `NutanixVMStorageConfig`, `NutanixStorageResourceIdentifier`,
/// `NutanixFailureDomainReference`), and our `guestCustomization`. Top-level fields of plain
/// values are not listed.
pub const PROVIDER_SPEC_NESTED: [(&str, FieldShape); 12] = [
    ("cluster", IDENTIFIER),
    ("image", IDENTIFIER),
    ("project", IDENTIFIER),
    ("subnets", FieldShape::List(&IDENTIFIER)),
    (
        "categories",
        FieldShape::List(&FieldShape::Object(&[
            ("key", FieldShape::Value),
            ("value", FieldShape::Value),
        ])),
    ),
    (
        "gpus",
        FieldShape::List(&FieldShape::Object(&[
            ("type", FieldShape::Value),
            ("deviceID", FieldShape::Value),
            ("name", FieldShape::Value),
        ])),
    ),
    (
        "dataDisks",
        FieldShape::List(&FieldShape::Object(&[
            ("diskSize", FieldShape::Value),
            (
                "deviceProperties",
                FieldShape::Object(&[
                    ("deviceType", FieldShape::Value),
                    ("adapterType", FieldShape::Value),
                    ("deviceIndex", FieldShape::Value),
                ]),
            ),
            (
                "storageConfig",
                FieldShape::Object(&[
                    ("diskMode", FieldShape::Value),
                    (
                        "storageContainer",
                        FieldShape::Object(&[
                            ("type", FieldShape::Value),
                            ("uuid", FieldShape::Value),
                        ]),
                    ),
                ]),
            ),
            ("dataSource", IDENTIFIER),
        ])),
    ),
    ("userDataSecret", LOCAL_REFERENCE),
    ("credentialsSecret", LOCAL_REFERENCE),
    (
        "failureDomain",
        FieldShape::Object(&[("name", FieldShape::Value)]),
    ),
    (
        "guestCustomization",
        FieldShape::Object(&[
            ("type", FieldShape::Value),
            ("timeZone", FieldShape::Value),
            ("adminPasswordSecret", LOCAL_REFERENCE),
        ]),
    ),
    // The installers' `metadata` is an ObjectMeta: its fields are not the provider's to judge.
    ("metadata", FieldShape::Value),
];

/// The fields of `spec.providerSpec.value` that [`NutanixMachineProviderConfig`] reads: the
/// upstream type's JSON names (openshift/api `machine/v1/types_nutanixprovider.go`), the
/// `metadata` installers write, and our `imageKind` and `guestCustomization`. Any other field is
/// ignored, so a misspelt one is warned about (`plan::vm::validate`).
pub const PROVIDER_SPEC_FIELDS: [&str; 20] = [
    "apiVersion",
    "kind",
    "metadata",
    "cluster",
    "image",
    "subnets",
    "vcpusPerSocket",
    "vcpuSockets",
    "memorySize",
    "systemDiskSize",
    "bootType",
    "project",
    "categories",
    "gpus",
    "dataDisks",
    "userDataSecret",
    "credentialsSecret",
    "failureDomain",
    "imageKind",
    "guestCustomization",
];

/// The Nutanix part of a Machine's spec (`spec.providerSpec.value`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NutanixMachineProviderConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Installer output carries `metadata: {creationTimestamp: null}`; nothing reads it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,
    /// The Prism Element (cluster) the VM is created on.
    #[serde(default)]
    pub cluster: NutanixResourceIdentifier,
    /// What the system disk comes from: see [`ImageKind`].
    #[serde(default)]
    pub image: NutanixResourceIdentifier,
    /// One NIC per subnet, in this order; the first is the primary NIC.
    #[serde(default, deserialize_with = "null_as_default")]
    pub subnets: Vec<NutanixResourceIdentifier>,
    #[serde(default)]
    pub vcpus_per_socket: i32,
    #[serde(default)]
    pub vcpu_sockets: i32,
    #[serde(default)]
    pub memory_size: Quantity,
    #[serde(default)]
    pub system_disk_size: Quantity,
    #[serde(default)]
    pub boot_type: BootType,
    #[serde(default)]
    pub project: NutanixResourceIdentifier,
    #[serde(default)]
    pub categories: Option<Vec<NutanixCategory>>,
    #[serde(default)]
    pub gpus: Option<Vec<NutanixGpu>>,
    #[serde(default)]
    pub data_disks: Option<Vec<NutanixVmDisk>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data_secret: Option<LocalObjectReference>,
    #[serde(default)]
    pub credentials_secret: Option<LocalObjectReference>,
    #[serde(default)]
    pub failure_domain: Option<NutanixFailureDomainReference>,

    /// Ours (ignored by the Go provider): what `image` names. Default `Image`. Overridden by the
    /// annotation [`super::IMAGE_KIND_ANNOTATION`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_kind: Option<ImageKind>,
    /// Ours (ignored by the Go provider): how the guest is customised. Overridden by the
    /// annotations of [`super::choices`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest_customization: Option<GuestCustomizationSpec>,
}

fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// A reference to a Prism entity by UUID or by name (`type: uuid|name`).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct NutanixResourceIdentifier {
    /// `uuid`, `name`, or `""` when the optional field is unset (`project: {type: ""}`).
    #[serde(default, rename = "type")]
    pub type_: IdentifierType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl NutanixResourceIdentifier {
    /// An identifier by UUID.
    pub fn by_uuid(uuid: impl Into<String>) -> Self {
        Self {
            type_: IdentifierType::Uuid,
            uuid: Some(uuid.into()),
            name: None,
        }
    }

    /// An identifier by name.
    pub fn by_name(name: impl Into<String>) -> Self {
        Self {
            type_: IdentifierType::Name,
            uuid: None,
            name: Some(name.into()),
        }
    }

    /// Whether the identifier is unset (`type: ""` and nothing else), as upstream writes an unset project.
    pub fn is_unset(&self) -> bool {
        self.type_ == IdentifierType::Unset && self.uuid.is_none() && self.name.is_none()
    }

    /// The text that names the entity: the UUID for `type: uuid`, the name for `type: name`.
    pub fn key(&self) -> Option<&str> {
        match self.type_ {
            IdentifierType::Uuid => self.uuid.as_deref(),
            IdentifierType::Name => self.name.as_deref(),
            IdentifierType::Unset | IdentifierType::Unknown(_) => None,
        }
    }
}

open_enum! {
    /// How a [`NutanixResourceIdentifier`] names its entity.
    #[derive(Default)]
    pub enum IdentifierType else Unknown {
        #[default]
        Unset = "",
        Uuid = "uuid",
        Name = "name",
    }
}

open_enum! {
    /// `bootType`: `""` means the AHV default (Legacy).
    #[derive(Default)]
    pub enum BootType else Unknown {
        #[default]
        Unset = "",
        Legacy = "Legacy",
        Uefi = "UEFI",
        SecureBoot = "SecureBoot",
    }
}

/// A Prism category key and value.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NutanixCategory {
    #[serde(default)]
    pub key: String,
    #[serde(default)]
    pub value: String,
}

/// A GPU by name or by device ID (`type: Name|DeviceID`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NutanixGpu {
    #[serde(default, rename = "type")]
    pub type_: GpuIdentifierType,
    #[serde(default, rename = "deviceID", skip_serializing_if = "Option::is_none")]
    pub device_id: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

open_enum! {
    /// How a [`NutanixGpu`] names its device.
    #[derive(Default)]
    pub enum GpuIdentifierType else Unknown {
        #[default]
        Unset = "",
        Name = "Name",
        DeviceId = "DeviceID",
    }
}

/// A data disk.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NutanixVmDisk {
    #[serde(default)]
    pub disk_size: Quantity,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_properties: Option<NutanixVmDiskDeviceProperties>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_config: Option<NutanixVmStorageConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_source: Option<NutanixResourceIdentifier>,
}

/// Device type, adapter and index of a data disk.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NutanixVmDiskDeviceProperties {
    /// Default `Disk`.
    #[serde(default)]
    pub device_type: DiskDeviceType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter_type: Option<DiskAdapterType>,
    /// Default 0; `omitempty` upstream.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub device_index: i32,
}

fn is_zero(value: &i32) -> bool {
    *value == 0
}

open_enum! {
    /// `deviceType` of a data disk.
    #[derive(Default)]
    pub enum DiskDeviceType else Unknown {
        #[default]
        Disk = "Disk",
        CdRom = "CDRom",
    }
}

open_enum! {
    /// `adapterType` of a data disk.
    pub enum DiskAdapterType else Unknown {
        Scsi = "SCSI",
        Ide = "IDE",
        Pci = "PCI",
        Sata = "SATA",
        Spapr = "SPAPR",
    }
}

/// Storage settings of a data disk.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NutanixVmStorageConfig {
    /// Default `Standard`.
    #[serde(default)]
    pub disk_mode: DiskMode,
    #[serde(default)]
    pub storage_container: Option<NutanixStorageResourceIdentifier>,
}

open_enum! {
    /// `diskMode` of a data disk.
    #[derive(Default)]
    pub enum DiskMode else Unknown {
        #[default]
        Standard = "Standard",
        Flash = "Flash",
    }
}

/// A storage container, by UUID only.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NutanixStorageResourceIdentifier {
    #[serde(default, rename = "type")]
    pub type_: IdentifierType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
}

/// A failure domain of `Infrastructure/cluster`, by name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NutanixFailureDomainReference {
    #[serde(default)]
    pub name: String,
}

open_enum! {
    /// Ours: what `image` names.
    pub enum ImageKind else Unknown {
        /// An image-service image: the v3 VM create body.
        Image = "Image",
        /// A Prism Central VM template: the v4 template deploy.
        Template = "Template",
        /// A powered-off source VM: the v3 clone.
        Vm = "VM",
    }
}

/// Ours: guest customization settings.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GuestCustomizationSpec {
    /// Default: CloudInit, for Windows Machines too (`crate::vm::guest`).
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<GuestCustomizationType>,
    /// Windows time zone ID for Sysprep (default `UTC`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
    /// Secret (key `password`) holding the Administrator password for Sysprep; random per VM when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_password_secret: Option<LocalObjectReference>,
}

open_enum! {
    /// Ours: the kind of guest customization.
    pub enum GuestCustomizationType else Unknown {
        Sysprep = "Sysprep",
        CloudInit = "CloudInit",
    }
}

/// Why a providerSpec or providerStatus value could not be read as our type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct ParseError {
    /// Where in the value, for example `dataDisks[1].deviceProperties.deviceIndex`; `.` for the root.
    pub path: String,
    /// serde's message, which names the expected type but never repeats the value.
    pub message: String,
}

fn from_value<T: serde::de::DeserializeOwned>(value: &Value) -> Result<T, ParseError> {
    serde_path_to_error::deserialize(value).map_err(|error| ParseError {
        path: error.path().to_string(),
        message: error.inner().to_string(),
    })
}

impl NutanixMachineProviderConfig {
    /// Reads `providerSpec.value`.
    pub fn from_value(value: &Value) -> Result<Self, ParseError> {
        from_value(value)
    }

    /// What the system disk comes from: the one reading of `imageKind` (an annotation's choice
    /// is already applied over it), used by the lookups, validation and the protocol alike.
    /// Unset is an image, as for the Go provider, which knows no other kind; an unknown value
    /// reads as an image too, and validation refuses it where it was written.
    pub fn source_kind(&self) -> ImageKind {
        match &self.image_kind {
            Some(kind) if kind.is_known() => kind.clone(),
            _ => ImageKind::Image,
        }
    }

    /// The value as upstream serialises it, our additions included when set.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// The Nutanix part of a Machine's status (`status.providerStatus`).
///
/// Fields we do not model (MAO writes `instanceState`/`vmState` on failure, for example) are kept
/// in `other` and written back. It is read leniently ([`Self::from_value`]): another writer (the
/// Go provider, an earlier version of ours) may leave out or shape differently what we write.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NutanixMachineProviderStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<ProviderCondition>,
    /// The VM's UUID. For a create or clone it is the reserved UUID, recorded *before* the
    /// request is sent (so a retry or a restarted controller finds or re-creates the same VM);
    /// for a template deploy it is read from the deploy task. Never changed once the VM exists.
    #[serde(default, rename = "vmUUID", skip_serializing_if = "Option::is_none")]
    pub vm_uuid: Option<String>,
    /// Ours: the `NTNX-Request-Id` of a template deploy, recorded before the deploy is sent; a
    /// repeat with the same id returns the same task instead of deploying again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deploy_request_id: Option<String>,
    /// Ours: a Prism task this controller started and has not yet seen end. A create's,
    /// clone's or deploy's is kept in memory, not written (`machine::task_memory`); one an older
    /// version wrote is still read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_task: Option<PendingTask>,
    /// Ours: what a clone or template deploy could not set and must still be applied to the VM
    /// (description, categories, project, disk size, power), as `plan::vm::request::FollowUpUpdate`.
    /// Holds no secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_follow_up: Option<Value>,
    /// Ours: the delete of the VM this controller sent, so that the deletion waits for Prism
    /// to finish it rather than sending it again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_sent: Option<DeletionSent>,
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
    /// Keys of ours that hold a value we cannot read (with why), kept as they were and written
    /// back unchanged unless this controller sets the key again.
    #[serde(skip)]
    pub unreadable: BTreeMap<String, Unreadable>,
}

/// A value of a known providerStatus key that could not be read as our type.
#[derive(Clone, Debug, PartialEq)]
pub struct Unreadable {
    pub value: Value,
    pub error: ParseError,
}

/// Why a providerStatus cannot be used at all: acting on it would lose what it records.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderStatusError {
    /// Not a JSON object.
    #[error("status.providerStatus is not an object")]
    NotAnObject,
    /// `vmUUID` is there but not a string: the Machine's VM is recorded, in a shape this
    /// controller cannot read, and going on without it would take the VM for missing.
    #[error("status.providerStatus.vmUUID cannot be read ({0}); the Machine is left as it is")]
    VmUuidUnreadable(ParseError),
}

/// Ours: a VM delete this controller sent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeletionSent {
    #[serde(rename = "vmUUID")]
    pub vm_uuid: String,
    pub at: Time,
}

/// Ours: a Prism task recorded on the Machine so that a reconcile reads it once and requeues
/// instead of waiting for it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingTask {
    /// v3 task UUID, or v4 task extId for a deploy.
    pub id: String,
    pub operation: TaskOperation,
    /// When the task was recorded (for the task-duration metric).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<Time>,
    /// The source VM of a clone: its task may name it beside the new VM, and it must never be
    /// taken for the Machine's VM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_vm: Option<String>,
}

open_enum! {
    /// Ours: what a [`PendingTask`] does.
    pub enum TaskOperation else Unknown {
        /// `POST /vms` (v3 task).
        Create = "Create",
        /// `POST /vms/{uuid}/clone` (v3 task).
        Clone = "Clone",
        /// Template deploy (v4 task).
        Deploy = "Deploy",
        /// `PUT /vms/{uuid}` applying the pending follow-up (v3 task).
        FollowUp = "FollowUp",
    }
}

impl TaskOperation {
    /// Whether the task is a v4 task (read with the v4 task endpoint).
    pub fn is_v4(&self) -> bool {
        *self == Self::Deploy
    }

    /// Whether the task creates the VM.
    pub fn creates_vm(&self) -> bool {
        matches!(self, Self::Create | Self::Clone | Self::Deploy)
    }
}

impl NutanixMachineProviderStatus {
    /// Reads `status.providerStatus`; an absent or null value is an empty status.
    ///
    /// What another writer left is read leniently: a key it left out is a default, a condition
    /// that cannot be read is dropped (the others stay), and a key of ours whose value cannot be
    /// read is kept as it is in [`Self::unreadable`]. Only a value that is not an object, or a
    /// `vmUUID` that is not a string, cannot be used: the Machine's VM would be lost with it.
    pub fn from_value(value: Option<&Value>) -> Result<Self, ProviderStatusError> {
        let object = match value {
            None | Some(Value::Null) => return Ok(Self::default()),
            Some(Value::Object(object)) => object,
            Some(_) => return Err(ProviderStatusError::NotAnObject),
        };
        let mut status = Self::default();
        for (key, value) in object {
            let read = match key.as_str() {
                "apiVersion" => field(key, value, &mut status.api_version),
                "kind" => field(key, value, &mut status.kind),
                "vmUUID" => Ok(field(key, value, &mut status.vm_uuid)
                    .map_err(ProviderStatusError::VmUuidUnreadable)?),
                "deployRequestId" => field(key, value, &mut status.deploy_request_id),
                "pendingTask" => field(key, value, &mut status.pending_task),
                "pendingFollowUp" => {
                    status.pending_follow_up = Some(value.clone()).filter(|v| !v.is_null());
                    Ok(())
                }
                "deletionSent" => field(key, value, &mut status.deletion_sent),
                "conditions" => conditions(value, &mut status),
                _ => {
                    status.other.insert(key.clone(), value.clone());
                    Ok(())
                }
            };
            if let Err(error) = read {
                status.unreadable.insert(
                    key.clone(),
                    Unreadable {
                        value: value.clone(),
                        error,
                    },
                );
            }
        }
        Ok(status)
    }

    /// The value to write back, with apiVersion and kind set.
    pub fn to_value(&self) -> Value {
        let mut status = self.clone();
        status
            .api_version
            .get_or_insert_with(|| PROVIDER_API_VERSION.to_owned());
        status
            .kind
            .get_or_insert_with(|| PROVIDER_STATUS_KIND.to_owned());
        let mut value = serde_json::to_value(status).unwrap_or(Value::Null);
        if let Value::Object(object) = &mut value {
            for (key, unreadable) in &self.unreadable {
                object
                    .entry(key.clone())
                    .or_insert_with(|| unreadable.value.clone());
            }
        }
        value
    }

    /// Merges one condition by type: other types stay, and `lastTransitionTime` only moves when
    /// the status changes (upstream replaced the whole list, losing the other types).
    pub fn set_condition(&mut self, condition: ProviderCondition) {
        super::merge_condition(&mut self.conditions, condition);
    }
}

/// Reads one key of the providerStatus into `slot` (null: unset).
fn field<T: serde::de::DeserializeOwned>(
    key: &str,
    value: &Value,
    slot: &mut Option<T>,
) -> Result<(), ParseError> {
    *slot = from_value::<Option<T>>(value).map_err(|error| ParseError {
        path: match error.path.as_str() {
            "." => key.to_owned(),
            inner => format!("{key}.{inner}"),
        },
        message: error.message,
    })?;
    Ok(())
}

/// Reads `conditions` entry by entry: one that cannot be read (no type, a status that is not a
/// string) is left out and the others kept; only a value that is not a list fails.
fn conditions(value: &Value, status: &mut NutanixMachineProviderStatus) -> Result<(), ParseError> {
    let entries = match value {
        Value::Null => return Ok(()),
        Value::Array(entries) => entries,
        _ => {
            return Err(ParseError {
                path: "conditions".into(),
                message: "not a list".into(),
            });
        }
    };
    status.conditions = entries
        .iter()
        .filter_map(|entry| from_value::<ProviderCondition>(entry).ok())
        .collect();
    Ok(())
}
