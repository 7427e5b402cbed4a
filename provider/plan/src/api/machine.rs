//! `Machine` and `MachineSet` (`machine.openshift.io/v1beta1`), the machine-api CRDs.
//!
//! The schema is owned by the machine-api-operator, so it is disabled here. `providerSpec.value`
//! and `providerStatus` stay raw JSON (read them with [`Machine::provider_config`] and
//! [`Machine::provider_status`]), and every spec and status struct keeps fields it does not model
//! in `other`, so a read-modify-write never drops what another controller wrote. Controllers still
//! write with merge patches, never `replace`.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{NodeAddress, ObjectReference, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
use kube::CustomResource;
use kube::core::DeserializeGuard;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::choices::AnnotatedChoices;
use super::conditions::MachineCondition;
use super::provider::{
    NutanixMachineProviderConfig, NutanixMachineProviderStatus, ParseError, ProviderStatusError,
};
use super::{OS_ID_LABEL, OS_ID_WINDOWS};

/// A Machine that may have failed to parse: watching `DeserializeGuard<Machine>` keeps one
/// malformed object from stalling the watch; its metadata is still there to report against.
pub type GuardedMachine = DeserializeGuard<Machine>;
/// A MachineSet that may have failed to parse (see [`GuardedMachine`]).
pub type GuardedMachineSet = DeserializeGuard<MachineSet>;

/// Desired state of a Machine.
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
    /// Labels, annotations and taints that nodelink copies to the Node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,
    #[serde(default, skip_serializing_if = "LifecycleHooks::is_empty")]
    pub lifecycle_hooks: LifecycleHooks,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    #[serde(default)]
    pub provider_spec: ProviderSpec,
    #[serde(
        default,
        rename = "providerID",
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,
    /// `MachineAPI` (default when absent) or `ClusterAPI`.
    #[serde(
        default,
        rename = "authoritativeAPI",
        skip_serializing_if = "Option::is_none"
    )]
    pub authoritative_api: Option<String>,
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

/// `spec.providerSpec`: the provider's configuration, kept as raw JSON. Behind an `Arc`, so that
/// the Machine cache keeps one copy of the value the Machines of a MachineSet share
/// (`controller::machine_cache`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProviderSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Arc<Value>>,
}

/// Hooks that hold a Machine before drain or before the instance is deleted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LifecycleHooks {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pre_drain: Vec<LifecycleHook>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pre_terminate: Vec<LifecycleHook>,
}

impl LifecycleHooks {
    fn is_empty(&self) -> bool {
        self.pre_drain.is_empty() && self.pre_terminate.is_empty()
    }
}

/// One lifecycle hook.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LifecycleHook {
    pub name: String,
    pub owner: String,
}

/// Observed state of a Machine.
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_status: Option<Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<NodeAddress>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<MachineCondition>,
    #[serde(
        default,
        rename = "authoritativeAPI",
        skip_serializing_if = "Option::is_none"
    )]
    pub authoritative_api: Option<String>,
    /// `lastOperation`, `synchronizedGeneration`, `deletion` and anything newer.
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

/// Desired state of a MachineSet.
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_ready_seconds: Option<i32>,
    /// `Random` (default), `Oldest` or `Newest`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_policy: Option<String>,
    #[serde(default)]
    pub selector: LabelSelector,
    #[serde(default)]
    pub template: MachineTemplateSpec,
    #[serde(
        default,
        rename = "authoritativeAPI",
        skip_serializing_if = "Option::is_none"
    )]
    pub authoritative_api: Option<String>,
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

/// The Machine a MachineSet stamps out.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MachineTemplateSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,
    #[serde(default)]
    pub spec: MachineSpec,
}

/// Observed state of a MachineSet.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineSetStatus {
    #[serde(default)]
    pub replicas: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fully_labeled_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<MachineCondition>,
    #[serde(
        default,
        rename = "authoritativeAPI",
        skip_serializing_if = "Option::is_none"
    )]
    pub authoritative_api: Option<String>,
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

/// Reads a providerSpec value with the choices of `metadata`'s annotations applied, or says it
/// is missing.
fn provider_config_of(
    spec: &MachineSpec,
    metadata: Option<&ObjectMeta>,
) -> Option<Result<NutanixMachineProviderConfig, ParseError>> {
    let choices = AnnotatedChoices::from_annotations(metadata.and_then(|m| m.annotations.as_ref()));
    spec.provider_spec.value.as_ref().map(|value| {
        NutanixMachineProviderConfig::from_value(value).map(|mut config| {
            choices.apply(&mut config);
            config
        })
    })
}

fn is_windows(labels: Option<&BTreeMap<String, String>>) -> bool {
    labels
        .and_then(|l| l.get(OS_ID_LABEL))
        .is_some_and(|v| v == OS_ID_WINDOWS)
}

impl Machine {
    /// `spec.providerSpec.value` as our type, with the choices of the Machine's annotations
    /// applied over it ([`AnnotatedChoices`]); `None` when it is absent. A reconcile reads it
    /// once, as [`crate::vm::spec::ParsedSpec`], and passes that on.
    pub fn provider_config(&self) -> Option<Result<NutanixMachineProviderConfig, ParseError>> {
        provider_config_of(&self.spec, Some(&self.metadata))
    }

    /// The choices the Machine's annotations state.
    pub fn annotated_choices(&self) -> AnnotatedChoices {
        AnnotatedChoices::from_annotations(self.metadata.annotations.as_ref())
    }

    /// `status.providerStatus` as our type (empty when absent).
    pub fn provider_status(&self) -> Result<NutanixMachineProviderStatus, ProviderStatusError> {
        NutanixMachineProviderStatus::from_value(
            self.status
                .as_ref()
                .and_then(|s| s.provider_status.as_ref()),
        )
    }

    /// The name of the MachineSet that controls this Machine, if any (its controller owner
    /// reference of kind `MachineSet`).
    pub fn machine_set(&self) -> Option<&str> {
        self.metadata
            .owner_references
            .as_deref()?
            .iter()
            .find(|owner| owner.controller == Some(true) && owner.kind == "MachineSet")
            .map(|owner| owner.name.as_str())
    }

    /// Whether the Machine is labelled `machine.openshift.io/os-id: Windows`.
    pub fn is_windows(&self) -> bool {
        is_windows(self.metadata.labels.as_ref())
    }

    /// `status.phase`, empty when unset.
    pub fn phase(&self) -> &str {
        self.status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .unwrap_or("")
    }
}

impl MachineSet {
    /// The template's `providerSpec.value` as our type, with the choices of the template's
    /// annotations (which every Machine of the set gets) applied; `None` when it is absent.
    pub fn provider_config(&self) -> Option<Result<NutanixMachineProviderConfig, ParseError>> {
        provider_config_of(
            &self.spec.template.spec,
            self.spec.template.metadata.as_ref(),
        )
    }

    /// Whether the template's Machines are labelled `machine.openshift.io/os-id: Windows`.
    pub fn is_windows(&self) -> bool {
        is_windows(
            self.spec
                .template
                .metadata
                .as_ref()
                .and_then(|m| m.labels.as_ref()),
        )
    }
}
