//! `Machine` and `MachineSet` (`machine.openshift.io/v1beta1`) as the machine API's own components
//! read them, for the stand-ins only.
//!
//! The fields and their JSON names are openshift/api's Go types (`machine/v1beta1/types_machine.go`,
//! `types_machineset.go`, `types_provider.go`, vendored in openshift/machine-api-operator), not the
//! provider's: a stand-in that read Machines through the provider's own types would agree with any
//! misread field name. Like the Go types, a field they do not declare is dropped, and Go's value
//! fields (`minReadySeconds`, `deletePolicy`, the template's metadata) read as their zero value when
//! absent.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeAddress, ObjectReference, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference, Time};
use kube::CustomResource;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The Machine label WMCO selects Windows Machines by (windows-machine-config-operator
/// `controllers/windowsmachine_controller.go`, `MachineOSLabel`).
pub const OS_ID_LABEL: &str = "machine.openshift.io/os-id";

/// machine/v1beta1 `ObjectMeta`: the metadata a MachineSet's template and a Machine's
/// `spec.metadata` carry (`types_provider.go`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineMeta {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub generate_name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub owner_references: Vec<OwnerReference>,
}

/// `spec.providerSpec`: a `runtime.RawExtension`, kept as it came.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProviderSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
}

/// machine/v1beta1 `MachineSpec` (`types_machine.go`).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "machine.openshift.io",
    version = "v1beta1",
    kind = "Machine",
    namespaced,
    status = "MachineStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct MachineSpec {
    /// Labels, annotations and taints nodelink copies onto the Node.
    #[serde(default)]
    pub metadata: MachineMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle_hooks: Option<Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    #[serde(default)]
    pub provider_spec: ProviderSpec,
    /// A pointer in Go: absent and empty are told apart (nodelink does).
    #[serde(
        default,
        rename = "providerID",
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,
    #[serde(
        default,
        rename = "authoritativeAPI",
        skip_serializing_if = "Option::is_none"
    )]
    pub authoritative_api: Option<String>,
}

/// machine/v1beta1 `MachineStatus`, the fields the stand-ins read.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_ref: Option<ObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_updated: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<NodeAddress>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
}

/// machine/v1beta1 `MachineTemplateSpec` (`types_machineset.go`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MachineTemplateSpec {
    #[serde(default)]
    pub metadata: MachineMeta,
    #[serde(default)]
    pub spec: MachineSpec,
}

/// machine/v1beta1 `MachineSetSpec` (`types_machineset.go`).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "machine.openshift.io",
    version = "v1beta1",
    kind = "MachineSet",
    namespaced,
    status = "MachineSetStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct MachineSetSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    #[serde(default)]
    pub min_ready_seconds: i32,
    #[serde(default)]
    pub delete_policy: String,
    #[serde(default)]
    pub selector: LabelSelector,
    #[serde(default)]
    pub template: MachineTemplateSpec,
    /// Read as present or absent: the autoscaler treats an absent field as `MachineAPI` and an
    /// empty one as not (openshift/kubernetes-autoscaler `cloudprovider/openshift/openshift_utils.go`,
    /// `isScalableResourceMachineAPIAuthoritative`).
    #[serde(
        default,
        rename = "authoritativeAPI",
        skip_serializing_if = "Option::is_none"
    )]
    pub authoritative_api: Option<String>,
}

/// machine/v1beta1 `MachineSetStatus`, the fields the replica controller writes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineSetStatus {
    #[serde(default)]
    pub replicas: i32,
    #[serde(default)]
    pub fully_labeled_replicas: i32,
    #[serde(default)]
    pub ready_replicas: i32,
    #[serde(default)]
    pub available_replicas: i32,
    #[serde(default)]
    pub observed_generation: i64,
    #[serde(default)]
    pub label_selector: String,
}

/// Why an object could not be read as the machine API's components read it.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cannot write the {kind} as JSON: {source}")]
    Encode {
        kind: &'static str,
        source: serde_json::Error,
    },
    #[error("{kind} {name}: not readable as machine.openshift.io/v1beta1: {source}")]
    Decode {
        kind: &'static str,
        name: String,
        source: serde_json::Error,
    },
}

fn read<T: serde::de::DeserializeOwned>(
    kind: &'static str,
    object: &impl Serialize,
) -> Result<T, ReadError> {
    let value =
        serde_json::to_value(object).map_err(|source| ReadError::Encode { kind, source })?;
    let name = value["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    serde_json::from_value(value).map_err(|source| ReadError::Decode { kind, name, source })
}

impl Machine {
    /// Reads any serializable Machine (another crate's type, or JSON) as the components read it
    /// from the API server's JSON.
    pub fn read(object: &impl Serialize) -> Result<Self, ReadError> {
        read("Machine", object)
    }

    /// `status.phase`, empty when unset.
    pub fn phase(&self) -> &str {
        self.status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .unwrap_or_default()
    }

    /// `status.addresses`.
    pub fn addresses(&self) -> &[NodeAddress] {
        self.status
            .as_ref()
            .map(|s| s.addresses.as_slice())
            .unwrap_or_default()
    }

    /// `status.nodeRef`.
    pub fn node_ref(&self) -> Option<&ObjectReference> {
        self.status.as_ref().and_then(|s| s.node_ref.as_ref())
    }
}

impl MachineSet {
    /// Reads any serializable MachineSet (another crate's type, or JSON) as the components read it
    /// from the API server's JSON.
    pub fn read(object: &impl Serialize) -> Result<Self, ReadError> {
        read("MachineSet", object)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn json_names_are_the_go_types() {
        let machine = Machine::read(&json!({
            "apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
            "metadata": {"name": "m", "namespace": "ns"},
            "spec": {
                "metadata": {"labels": {"a": "b"}, "annotations": {"c": "d"}},
                "taints": [{"key": "os", "value": "Windows", "effect": "NoSchedule"}],
                "providerID": "nutanix://abc",
                "providerSpec": {"value": {"kind": "NutanixMachineProviderConfig"}},
                "notAGoField": true
            },
            "status": {"phase": "Provisioned", "errorReason": "InvalidConfiguration",
                "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                "nodeRef": {"kind": "Node", "name": "n"}}
        }))
        .unwrap();
        assert_eq!(machine.spec.metadata.labels["a"], "b");
        assert_eq!(machine.spec.metadata.annotations["c"], "d");
        assert_eq!(machine.spec.taints[0].key, "os");
        assert_eq!(machine.spec.provider_id.as_deref(), Some("nutanix://abc"));
        assert_eq!(machine.phase(), "Provisioned");
        assert_eq!(machine.addresses()[0].address, "10.0.0.1");
        assert_eq!(
            machine.node_ref().and_then(|r| r.name.as_deref()),
            Some("n")
        );
        // An undeclared field is dropped, as Go's decoder drops it.
        let written = serde_json::to_value(&machine).unwrap();
        assert!(written["spec"].get("notAGoField").is_none());
        assert_eq!(
            written["spec"]["providerSpec"]["value"]["kind"],
            "NutanixMachineProviderConfig"
        );

        let set = MachineSet::read(&json!({
            "apiVersion": "machine.openshift.io/v1beta1", "kind": "MachineSet",
            "metadata": {"name": "s"},
            "spec": {"replicas": 2, "authoritativeAPI": "", "selector": {"matchLabels": {"x": "y"}},
                "template": {"metadata": {"labels": {"x": "y"}}, "spec": {}}}
        }))
        .unwrap();
        assert_eq!(set.spec.replicas, Some(2));
        assert_eq!(set.spec.min_ready_seconds, 0);
        assert_eq!(set.spec.delete_policy, "");
        assert_eq!(set.spec.authoritative_api.as_deref(), Some(""));
        assert_eq!(set.spec.template.metadata.labels["x"], "y");
    }
}
