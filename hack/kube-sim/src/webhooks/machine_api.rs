//! The machine-api-operator's defaulting webhooks on an OpenShift cluster whose platform is
//! Nutanix: what a Machine or MachineSet looks like once the API server has stored it.
//!
//! Source: openshift/machine-api-operator at 951196122 (2026-08-17; Go 1.26, vendored openshift/api
//! 2026-07-15, apimachinery v0.36.2):
//! - `pkg/webhooks/config.go`, `MachineMutatingWebhook` and `MachineSetMutatingWebhook`: webhooks
//!   `default.machine.machine.openshift.io` and `default.machineset.machine.openshift.io`,
//!   `machine.openshift.io/v1beta1` `machines` / `machinesets`, operation CREATE only;
//! - `pkg/webhooks/machine_webhook.go`, `machineDefaulterHandler.Default`: the label
//!   `machine.openshift.io/cluster-api-cluster` is set to the infrastructure name when absent
//!   (Machines only); `getMachineDefaulterOperation`: platform Nutanix → `defaultNutanix`;
//! - `pkg/webhooks/machineset_webhook.go`, `machineSetDefaulterHandler.defaultMachineSet`: the
//!   same `defaultNutanix` on the template's spec, nothing on the MachineSet's labels;
//! - `pkg/webhooks/machine_webhook.go`, `defaultNutanix` and `unmarshalInto`: `providerSpec.value`
//!   is required, read with `sigs.k8s.io/yaml.Unmarshal` into
//!   `machinev1.NutanixMachineProviderConfig` (openshift/api `machine/v1/types_nutanixprovider.go`),
//!   `userDataSecret` defaulted to `worker-user-data` and `credentialsSecret` to
//!   `nutanix-credentials` when nil, and written back with `json.Marshal`: only the upstream
//!   type's fields survive, with Go's zero values ([`super::go_json`], [`super::quantity`]);
//! - controller-runtime `pkg/webhook/admission/defaulter_custom.go` (vendored),
//!   `defaulterForType.Handle`: the whole object goes through the Go type and the difference is
//!   returned as a patch, except removals the decoding alone causes (`dropSchemeRemovals`): so
//!   fields of the Machine the Go type lacks stay, while struct fields the Go type always writes
//!   are added when absent (`spec.metadata: {}`, `spec.lifecycleHooks: {}`; for a MachineSet
//!   also `spec.selector`, `spec.template.metadata`); an error is `Denied`: 403 Forbidden;
//! - kubernetes/kubernetes `staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/errors/statuserror.go`,
//!   `ToStatusErr`: the message `admission webhook "<name>" denied the request: <message>`.
//!
//! Not simulated: the `status` the Go type would add (the API server drops a custom resource's
//! status on create anyway), `metadata.creationTimestamp` (set by the server), the validating
//! webhooks, and other platforms. The `Invalid value` part of a decoding error leaves out Go's
//! rendering of the half-decoded struct.

use serde_json::{Value, json};

use super::go_json::{self, GoField, GoStruct, GoType, GoValue, Omit};
use crate::error::{ApiError, ApiResult};
use crate::resources::ResourceDef;

/// The group and version the webhooks are registered for.
const GROUP: &str = "machine.openshift.io";
const VERSION: &str = "v1beta1";
const MACHINE_WEBHOOK: &str = "default.machine.machine.openshift.io";
const MACHINE_SET_WEBHOOK: &str = "default.machineset.machine.openshift.io";
const CLUSTER_ID_LABEL: &str = "machine.openshift.io/cluster-api-cluster";
/// `defaultUserDataSecret` and `defaultNutanixCredentialsSecret` (`machine_webhook.go`).
const DEFAULT_USER_DATA_SECRET: &str = "worker-user-data";
const DEFAULT_CREDENTIALS_SECRET: &str = "nutanix-credentials";

/// The machine-api-operator's defaulting webhooks, as registered on a Nutanix cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineApiWebhooks {
    /// `Infrastructure/cluster` `status.infrastructureName`, which the Machine webhook puts in the
    /// cluster label when a Machine has none.
    pub infrastructure_name: String,
}

impl MachineApiWebhooks {
    /// Applies the webhook registered for creating `object` as `def`, if any.
    pub fn admit_create(&self, def: &ResourceDef, object: &mut Value) -> ApiResult<()> {
        if def.group != GROUP || !def.serves(VERSION) {
            return Ok(());
        }
        match def.plural.as_str() {
            "machines" => self.default_machine(object),
            "machinesets" => default_machine_set(object),
            _ => Ok(()),
        }
    }

    fn default_machine(&self, object: &mut Value) -> ApiResult<()> {
        let Some(map) = object.as_object_mut() else {
            return Ok(());
        };
        let metadata = map.entry("metadata").or_insert_with(|| json!({}));
        if let Some(metadata) = metadata.as_object_mut() {
            let labels = metadata.entry("labels").or_insert_with(|| json!({}));
            if labels.is_null() {
                *labels = json!({});
            }
            if let Some(labels) = labels.as_object_mut() {
                labels
                    .entry(CLUSTER_ID_LABEL)
                    .or_insert_with(|| json!(self.infrastructure_name));
            }
        }
        let spec = map.entry("spec").or_insert_with(|| json!({}));
        default_machine_spec(spec).map_err(|message| denied(MACHINE_WEBHOOK, &message))
    }
}

fn default_machine_set(object: &mut Value) -> ApiResult<()> {
    let Some(map) = object.as_object_mut() else {
        return Ok(());
    };
    let spec = map.entry("spec").or_insert_with(|| json!({}));
    let Some(spec) = spec.as_object_mut() else {
        return Ok(());
    };
    add_when_absent(spec, "selector");
    let template = spec.entry("template").or_insert_with(|| json!({}));
    if let Some(template) = template.as_object_mut() {
        add_when_absent(template, "metadata");
    }
    let template_spec = template
        .as_object_mut()
        .map(|t| t.entry("spec").or_insert_with(|| json!({})));
    match template_spec {
        Some(template_spec) => default_machine_spec(template_spec)
            .map_err(|message| denied(MACHINE_SET_WEBHOOK, &message)),
        None => Ok(()),
    }
}

/// A struct-typed field the Go type always writes (`json:",omitempty"` has no effect on structs).
fn add_when_absent(map: &mut serde_json::Map<String, Value>, key: &str) {
    if map.get(key).is_none_or(Value::is_null) {
        map.insert(key.to_owned(), json!({}));
    }
}

/// `defaultNutanix` on a Machine spec, plus the Machine spec's always-written struct fields.
fn default_machine_spec(spec: &mut Value) -> Result<(), String> {
    let Some(spec) = spec.as_object_mut() else {
        return Err("spec: Invalid value: not an object".to_owned());
    };
    add_when_absent(spec, "metadata");
    add_when_absent(spec, "lifecycleHooks");
    let value = spec
        .get("providerSpec")
        .and_then(|p| p.get("value"))
        .filter(|v| !v.is_null())
        .ok_or("providerSpec.value: Required value: a value must be provided")?;
    let mut config = go_json::decode(&PROVIDER_CONFIG, value).map_err(|error| {
        format!(
            "providerSpec.value: Invalid value: error unmarshaling JSON: while decoding JSON: {error}"
        )
    })?;
    for (field, default) in [
        ("userDataSecret", DEFAULT_USER_DATA_SECRET),
        ("credentialsSecret", DEFAULT_CREDENTIALS_SECRET),
    ] {
        if let Some(GoValue::Pointer(reference @ None)) = field_mut(&mut config, field) {
            *reference = Some(Box::new(GoValue::Struct(vec![GoValue::String(
                default.to_owned(),
            )])));
        }
    }
    let written = go_json::encode(&config, &GoType::Struct(&PROVIDER_CONFIG));
    spec.insert("providerSpec".to_owned(), json!({"value": written}));
    Ok(())
}

fn field_mut<'v>(config: &'v mut GoValue, name: &str) -> Option<&'v mut GoValue> {
    let index = PROVIDER_CONFIG.fields.iter().position(|f| f.json == name)?;
    match config {
        GoValue::Struct(fields) => fields.get_mut(index),
        _ => None,
    }
}

fn denied(webhook: &str, message: &str) -> ApiError {
    ApiError::forbidden(format!(
        "admission webhook \"{webhook}\" denied the request: {message}"
    ))
}

// ---- the upstream types (openshift/api machine/v1/types_nutanixprovider.go) ---------------------

const fn field(json: &'static str, ty: GoType) -> GoField {
    GoField {
        json,
        ty,
        omit: Omit::Never,
    }
}

const fn omitempty(json: &'static str, ty: GoType) -> GoField {
    GoField {
        json,
        ty,
        omit: Omit::Empty,
    }
}

const STRING: GoType = GoType::String("string");

/// `k8s.io/api/core/v1.LocalObjectReference`: `name` with `omitempty`.
static LOCAL_OBJECT_REFERENCE: GoStruct = GoStruct {
    name: "v1.LocalObjectReference",
    fields: &[omitempty("name", STRING)],
};

/// `metav1.ObjectMeta` (apimachinery v0.36.2 `pkg/apis/meta/v1/types.go`): every field
/// `omitempty`, `creationTimestamp` also `omitzero` (so an empty one is `{}`). `ownerReferences`
/// and `managedFields` are kept as written: no providerSpec carries them.
static OBJECT_META: GoStruct = GoStruct {
    name: "v1.ObjectMeta",
    fields: &[
        omitempty("name", STRING),
        omitempty("generateName", STRING),
        omitempty("namespace", STRING),
        omitempty("selfLink", STRING),
        omitempty("uid", GoType::String("types.UID")),
        omitempty("resourceVersion", STRING),
        omitempty("generation", GoType::Int64),
        GoField {
            json: "creationTimestamp",
            ty: GoType::Time,
            omit: Omit::Zero,
        },
        omitempty("deletionTimestamp", GoType::Pointer(&GoType::Time)),
        omitempty(
            "deletionGracePeriodSeconds",
            GoType::Pointer(&GoType::Int64),
        ),
        omitempty("labels", GoType::StringMap),
        omitempty("annotations", GoType::StringMap),
        omitempty("ownerReferences", GoType::Raw),
        omitempty("finalizers", GoType::Slice(&STRING)),
        omitempty("managedFields", GoType::Raw),
    ],
};

static RESOURCE_IDENTIFIER: GoStruct = GoStruct {
    name: "v1.NutanixResourceIdentifier",
    fields: &[
        field("type", GoType::String("v1.NutanixIdentifierType")),
        omitempty("uuid", GoType::Pointer(&STRING)),
        omitempty("name", GoType::Pointer(&STRING)),
    ],
};

static CATEGORY: GoStruct = GoStruct {
    name: "v1.NutanixCategory",
    fields: &[field("key", STRING), field("value", STRING)],
};

static GPU: GoStruct = GoStruct {
    name: "v1.NutanixGPU",
    fields: &[
        field("type", GoType::String("v1.NutanixGPUIdentifierType")),
        omitempty("deviceID", GoType::Pointer(&GoType::Int32)),
        omitempty("name", GoType::Pointer(&STRING)),
    ],
};

static DEVICE_PROPERTIES: GoStruct = GoStruct {
    name: "v1.NutanixVMDiskDeviceProperties",
    fields: &[
        field("deviceType", GoType::String("v1.NutanixDiskDeviceType")),
        field("adapterType", GoType::String("v1.NutanixDiskAdapterType")),
        omitempty("deviceIndex", GoType::Int32),
    ],
};

static STORAGE_RESOURCE_IDENTIFIER: GoStruct = GoStruct {
    name: "v1.NutanixStorageResourceIdentifier",
    fields: &[
        field("type", GoType::String("v1.NutanixIdentifierType")),
        omitempty("uuid", GoType::Pointer(&STRING)),
    ],
};

static STORAGE_CONFIG: GoStruct = GoStruct {
    name: "v1.NutanixVMStorageConfig",
    fields: &[
        field("diskMode", GoType::String("v1.NutanixDiskMode")),
        omitempty(
            "storageContainer",
            GoType::Pointer(&GoType::Struct(&STORAGE_RESOURCE_IDENTIFIER)),
        ),
    ],
};

static VM_DISK: GoStruct = GoStruct {
    name: "v1.NutanixVMDisk",
    fields: &[
        field("diskSize", GoType::Quantity),
        omitempty(
            "deviceProperties",
            GoType::Pointer(&GoType::Struct(&DEVICE_PROPERTIES)),
        ),
        omitempty(
            "storageConfig",
            GoType::Pointer(&GoType::Struct(&STORAGE_CONFIG)),
        ),
        omitempty(
            "dataSource",
            GoType::Pointer(&GoType::Struct(&RESOURCE_IDENTIFIER)),
        ),
    ],
};

static FAILURE_DOMAIN_REFERENCE: GoStruct = GoStruct {
    name: "v1.NutanixFailureDomainReference",
    fields: &[field("name", STRING)],
};

/// `NutanixMachineProviderConfig`: the embedded `metav1.TypeMeta` (`kind`, `apiVersion`, both
/// `omitempty`) first, then the fields in declaration order and with their tags.
pub(crate) static PROVIDER_CONFIG: GoStruct = GoStruct {
    name: "NutanixMachineProviderConfig",
    fields: &[
        omitempty("kind", STRING),
        omitempty("apiVersion", STRING),
        omitempty("metadata", GoType::Struct(&OBJECT_META)),
        field("cluster", GoType::Struct(&RESOURCE_IDENTIFIER)),
        field("image", GoType::Struct(&RESOURCE_IDENTIFIER)),
        field(
            "subnets",
            GoType::Slice(&GoType::Struct(&RESOURCE_IDENTIFIER)),
        ),
        field("vcpusPerSocket", GoType::Int32),
        field("vcpuSockets", GoType::Int32),
        field("memorySize", GoType::Quantity),
        field("systemDiskSize", GoType::Quantity),
        field("bootType", GoType::String("v1.NutanixBootType")),
        field("project", GoType::Struct(&RESOURCE_IDENTIFIER)),
        field("categories", GoType::Slice(&GoType::Struct(&CATEGORY))),
        field("gpus", GoType::Slice(&GoType::Struct(&GPU))),
        field("dataDisks", GoType::Slice(&GoType::Struct(&VM_DISK))),
        omitempty(
            "userDataSecret",
            GoType::Pointer(&GoType::Struct(&LOCAL_OBJECT_REFERENCE)),
        ),
        field(
            "credentialsSecret",
            GoType::Pointer(&GoType::Struct(&LOCAL_OBJECT_REFERENCE)),
        ),
        field(
            "failureDomain",
            GoType::Pointer(&GoType::Struct(&FAILURE_DOMAIN_REFERENCE)),
        ),
    ],
};
