//! The OpenShift cluster autoscaler's API actions on MachineSets (its `openshift` cloud provider),
//! as commands the scenario calls; the simulation of pending pods and unneeded nodes that decides
//! *when* to call them is not part of it.
//!
//! - A MachineSet is a node group when it carries both `…-node-group-min-size` and
//!   `…-node-group-max-size` annotations with `0 <= min <= max` and `max > 0`, and its
//!   `authoritativeAPI` is `MachineAPI` (or unset).
//! - A group at zero replicas can be scaled only if its annotations describe a node (scale from
//!   zero): CPU and memory, upstream keys (`capacity.cluster-autoscaler.kubernetes.io/*`) first,
//!   the deprecated `machine.openshift.io/*` keys as fallback (memory then in MiB).
//! - [`Autoscaler::scale_up`] patches the `/scale` subresource (merge patch), never above max.
//! - [`Autoscaler::scale_down_node`] finds the Node's Machine (normalized providerID, else the
//!   nodelink annotation), refuses below min, annotates the Machine
//!   `machine.openshift.io/delete-machine=<time>`, then patches `/scale` to replicas − 1, and
//!   removes the annotation again if that fails. The MachineSet replica controller then deletes
//!   the annotated Machine first.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use nutanix_machine_controller::api::quantity::{MIB, parse_units};
use nutanix_machine_controller::api::{Machine, MachineSet};
use nutanix_machine_controller::plan::annotations::{
    CAPACITY_CPU, CAPACITY_GPU_COUNT, CAPACITY_LABELS, CAPACITY_MEMORY, GPU, MEMORY_MB, VCPU,
};
use serde_json::json;

use crate::machineset::DELETE_MACHINE_ANNOTATION;
use crate::nodelink::MACHINE_ANNOTATION;

/// Smallest size of a node group.
pub const MIN_SIZE_ANNOTATION: &str =
    "machine.openshift.io/cluster-api-autoscaler-node-group-min-size";
/// Largest size of a node group.
pub const MAX_SIZE_ANNOTATION: &str =
    "machine.openshift.io/cluster-api-autoscaler-node-group-max-size";
/// Pods per node (upstream key).
pub const CAPACITY_MAX_PODS: &str = "capacity.cluster-autoscaler.kubernetes.io/maxPods";
/// Pods per node (deprecated key).
pub const MAX_PODS: &str = "machine.openshift.io/maxPods";
/// The autoscaler's default when no maxPods annotation is set.
pub const DEFAULT_MAX_PODS: u64 = 110;

/// The node a group's Machines would bring, as the autoscaler simulates it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeTemplate {
    pub cpu_millis: u64,
    pub memory_bytes: u64,
    pub gpus: u64,
    pub max_pods: u64,
    /// Generic labels (`kubernetes.io/os=linux`, `kubernetes.io/arch=amd64`), then the template's
    /// `spec.metadata.labels`, then the capacity `labels` annotation.
    pub labels: BTreeMap<String, String>,
}

/// A MachineSet as a node group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeGroup {
    pub name: String,
    pub min: i32,
    pub max: i32,
    pub replicas: i32,
    /// The simulated node, or why there is none (then the group cannot scale from zero).
    pub template: Result<NodeTemplate, String>,
}

impl NodeGroup {
    /// Whether the autoscaler may act on the group now: a group at zero needs a template.
    pub fn can_scale(&self) -> bool {
        self.replicas > 0 || self.template.is_ok()
    }
}

/// Why an autoscaler action was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum AutoscalerError {
    #[error(
        "MachineSet {set} is not a node group: it lacks the {MIN_SIZE_ANNOTATION} or {MAX_SIZE_ANNOTATION} annotation"
    )]
    NotANodeGroup { set: String },
    #[error("MachineSet {set}: annotation {key}={value:?} is not a whole number")]
    BadSize {
        set: String,
        key: &'static str,
        value: String,
    },
    #[error(
        "MachineSet {set}: node group bounds min {min}, max {max} are invalid (max must be > 0 and >= min)"
    )]
    BadBounds { set: String, min: i32, max: i32 },
    #[error("MachineSet {set}: authoritativeAPI is {api:?}, not MachineAPI")]
    NotMachineApi { set: String, api: String },
    #[error("MachineSet {set} has 0 replicas and cannot scale from zero: {reason}")]
    CannotScaleFromZero { set: String, reason: String },
    #[error("MachineSet {set}: a size increase must be positive, got {delta}")]
    BadDelta { set: String, delta: i32 },
    #[error("MachineSet {set}: size increase too large: desired {desired}, max {max}")]
    AboveMax { set: String, desired: i32, max: i32 },
    #[error(
        "MachineSet {set}: min size reached ({replicas} replicas, min {min}), nodes will not be deleted"
    )]
    AtMinSize {
        set: String,
        replicas: i32,
        min: i32,
    },
    #[error(
        "node {node}: no Machine matches its providerID or its {MACHINE_ANNOTATION} annotation"
    )]
    NoMachineForNode { node: String },
    #[error("node {node}: Machine {machine} is not controlled by a MachineSet")]
    NotInNodeGroup { node: String, machine: String },
    #[error("{action}: {source}")]
    Api {
        action: String,
        source: Box<kube::Error>,
    },
    #[error(
        "MachineSet {set}: scaling to {replicas} failed ({source}); the {DELETE_MACHINE_ANNOTATION} annotation on Machine {machine} {cleanup}"
    )]
    ScaleDownFailed {
        set: String,
        replicas: i32,
        machine: String,
        source: Box<kube::Error>,
        cleanup: &'static str,
    },
}

fn size(set: &MachineSet, key: &'static str) -> Result<Option<i32>, AutoscalerError> {
    set.annotations()
        .get(key)
        .map(|value| {
            value.trim().parse().map_err(|_| AutoscalerError::BadSize {
                set: set.name_any(),
                key,
                value: value.clone(),
            })
        })
        .transpose()
}

fn cpu_millis(text: &str) -> Option<u64> {
    let text = text.trim();
    if let Some(millis) = text.strip_suffix('m') {
        return millis.parse().ok();
    }
    let cores: f64 = text.parse().ok()?;
    (cores.is_finite() && cores >= 0.0).then(|| (cores * 1000.0).round() as u64)
}

/// The node a group's Machine would bring, from the MachineSet's annotations and template.
pub fn node_template(set: &MachineSet) -> Result<NodeTemplate, String> {
    let annotations = set.annotations();
    let upstream_first = |upstream: &str, deprecated: &str| {
        annotations
            .get(upstream)
            .map(|v| (upstream.to_owned(), v.clone(), true))
            .or_else(|| {
                annotations
                    .get(deprecated)
                    .map(|v| (deprecated.to_owned(), v.clone(), false))
            })
    };
    let Some((cpu_key, cpu, _)) = upstream_first(CAPACITY_CPU, VCPU) else {
        return Err(format!("no {CAPACITY_CPU} or {VCPU} annotation"));
    };
    let cpu_millis =
        cpu_millis(&cpu).ok_or_else(|| format!("{cpu_key}={cpu:?} is not a CPU quantity"))?;
    let Some((memory_key, memory, upstream)) = upstream_first(CAPACITY_MEMORY, MEMORY_MB) else {
        return Err(format!("no {CAPACITY_MEMORY} or {MEMORY_MB} annotation"));
    };
    let memory_bytes = if upstream {
        parse_units(&memory).map_err(|e| format!("{memory_key}: {e}"))?
    } else {
        memory
            .trim()
            .parse::<u64>()
            .map(|mib| mib * MIB)
            .map_err(|_| format!("{memory_key}={memory:?} is not a whole number of MiB"))?
    };
    let count = |upstream: &str, deprecated: &str, default: u64| -> Result<u64, String> {
        match upstream_first(upstream, deprecated) {
            None => Ok(default),
            Some((key, value, _)) => value
                .trim()
                .parse()
                .map_err(|_| format!("{key}={value:?} is not a whole number")),
        }
    };
    let gpus = count(CAPACITY_GPU_COUNT, GPU, 0)?;
    let max_pods = count(CAPACITY_MAX_PODS, MAX_PODS, DEFAULT_MAX_PODS)?;

    let mut labels = BTreeMap::from([
        ("kubernetes.io/os".to_owned(), "linux".to_owned()),
        ("kubernetes.io/arch".to_owned(), "amd64".to_owned()),
    ]);
    if let Some(template_labels) = set
        .spec
        .template
        .spec
        .metadata
        .as_ref()
        .and_then(|m| m.labels.as_ref())
    {
        labels.extend(template_labels.clone());
    }
    if let Some(extra) = annotations.get(CAPACITY_LABELS) {
        for pair in extra.split(',').filter(|p| !p.trim().is_empty()) {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| format!("{CAPACITY_LABELS}: {pair:?} is not key=value"))?;
            labels.insert(key.trim().to_owned(), value.trim().to_owned());
        }
    }
    Ok(NodeTemplate {
        cpu_millis,
        memory_bytes,
        gpus,
        max_pods,
        labels,
    })
}

/// Reads a MachineSet as a node group.
pub fn node_group(set: &MachineSet) -> Result<NodeGroup, AutoscalerError> {
    let name = set.name_any();
    if let Some(api) = set.spec.authoritative_api.as_deref()
        && api != "MachineAPI"
    {
        return Err(AutoscalerError::NotMachineApi {
            set: name,
            api: api.to_owned(),
        });
    }
    let (Some(min), Some(max)) = (
        size(set, MIN_SIZE_ANNOTATION)?,
        size(set, MAX_SIZE_ANNOTATION)?,
    ) else {
        return Err(AutoscalerError::NotANodeGroup { set: name });
    };
    if min < 0 || max <= 0 || max < min {
        return Err(AutoscalerError::BadBounds {
            set: name,
            min,
            max,
        });
    }
    Ok(NodeGroup {
        name,
        min,
        max,
        replicas: set.spec.replicas.unwrap_or(0),
        template: node_template(set),
    })
}

/// The text after the last `/` of a providerID (how the autoscaler compares them).
pub fn normalized_provider_id(id: &str) -> &str {
    id.rsplit('/').next().unwrap_or(id)
}

/// The Machine of `node`, as the autoscaler finds it.
pub fn machine_for_node<'a>(node: &Node, machines: &'a [Machine]) -> Option<&'a Machine> {
    let node_id = node
        .spec
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .filter(|p| !p.is_empty())
        .map(normalized_provider_id);
    if let Some(id) = node_id
        && let Some(machine) = machines.iter().find(|m| {
            m.spec
                .provider_id
                .as_deref()
                .filter(|p| !p.is_empty())
                .map(normalized_provider_id)
                == Some(id)
        })
    {
        return Some(machine);
    }
    let (namespace, name) = node
        .annotations()
        .get(MACHINE_ANNOTATION)?
        .split_once('/')?;
    machines
        .iter()
        .find(|m| m.name_any() == name && m.namespace().as_deref() == Some(namespace))
}

/// What a scale-down did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScaleDown {
    pub machine_set: String,
    pub machine: String,
    pub replicas: i32,
}

/// The autoscaler's API actions against one namespace's MachineSets.
#[derive(Clone)]
pub struct Autoscaler {
    machine_sets: Api<MachineSet>,
    machines: Api<Machine>,
    nodes: Api<Node>,
}

impl std::fmt::Debug for Autoscaler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Autoscaler").finish_non_exhaustive()
    }
}

fn api_error(action: impl Into<String>) -> impl FnOnce(kube::Error) -> AutoscalerError {
    let action = action.into();
    move |source| AutoscalerError::Api {
        action,
        source: Box::new(source),
    }
}

impl Autoscaler {
    /// An autoscaler for the MachineSets of `namespace`.
    pub fn new(client: Client, namespace: &str) -> Self {
        Self {
            machine_sets: Api::namespaced(client.clone(), namespace),
            machines: Api::namespaced(client.clone(), namespace),
            nodes: Api::all(client),
        }
    }

    /// The MachineSets that are node groups; the others are skipped, as the autoscaler does.
    pub async fn node_groups(&self) -> Result<Vec<NodeGroup>, AutoscalerError> {
        let sets = self
            .machine_sets
            .list(&ListParams::default())
            .await
            .map_err(api_error("list MachineSets"))?;
        Ok(sets
            .items
            .iter()
            .filter_map(|s| node_group(s).ok())
            .collect())
    }

    async fn group(&self, set: &str) -> Result<NodeGroup, AutoscalerError> {
        let set = self
            .machine_sets
            .get(set)
            .await
            .map_err(api_error(format!("read MachineSet {set}")))?;
        node_group(&set)
    }

    async fn set_size(&self, set: &str, replicas: i32) -> Result<(), kube::Error> {
        self.machine_sets
            .patch_scale(
                set,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": replicas}})),
            )
            .await
            .map(drop)
    }

    /// Adds `delta` replicas to the group; returns the new size.
    pub async fn scale_up(&self, set: &str, delta: i32) -> Result<i32, AutoscalerError> {
        let group = self.group(set).await?;
        if delta <= 0 {
            return Err(AutoscalerError::BadDelta {
                set: group.name,
                delta,
            });
        }
        if group.replicas == 0
            && let Err(reason) = &group.template
        {
            return Err(AutoscalerError::CannotScaleFromZero {
                set: group.name,
                reason: reason.clone(),
            });
        }
        let desired = group.replicas.saturating_add(delta);
        if desired > group.max {
            return Err(AutoscalerError::AboveMax {
                set: group.name,
                desired,
                max: group.max,
            });
        }
        self.set_size(set, desired)
            .await
            .map_err(api_error(format!("scale MachineSet {set} to {desired}")))?;
        tracing::info!(machineset = set, replicas = desired, "autoscaler scaled up");
        Ok(desired)
    }

    /// Removes the node's Machine from its group: annotate, then lower the replicas.
    pub async fn scale_down_node(&self, node: &str) -> Result<ScaleDown, AutoscalerError> {
        let node_object = self
            .nodes
            .get(node)
            .await
            .map_err(api_error(format!("read Node {node}")))?;
        let machines = self
            .machines
            .list(&ListParams::default())
            .await
            .map_err(api_error("list Machines"))?
            .items;
        let machine = machine_for_node(&node_object, &machines).ok_or_else(|| {
            AutoscalerError::NoMachineForNode {
                node: node.to_owned(),
            }
        })?;
        let machine_name = machine.name_any();
        let set = machine
            .metadata
            .owner_references
            .as_deref()
            .unwrap_or_default()
            .iter()
            .find(|r| r.controller == Some(true) && r.kind == "MachineSet")
            .map(|r| r.name.clone())
            .ok_or_else(|| AutoscalerError::NotInNodeGroup {
                node: node.to_owned(),
                machine: machine_name.clone(),
            })?;
        let group = self.group(&set).await?;
        if group.replicas <= group.min {
            return Err(AutoscalerError::AtMinSize {
                set,
                replicas: group.replicas,
                min: group.min,
            });
        }
        let annotate = |value: serde_json::Value| json!({"metadata": {"annotations": {DELETE_MACHINE_ANNOTATION: value}}});
        self.machines
            .patch(
                &machine_name,
                &PatchParams::default(),
                &Patch::Merge(annotate(json!(Timestamp::now().to_string()))),
            )
            .await
            .map_err(api_error(format!("annotate Machine {machine_name}")))?;
        let replicas = group.replicas - 1;
        if let Err(source) = self.set_size(&set, replicas).await {
            let cleanup = match self
                .machines
                .patch(
                    &machine_name,
                    &PatchParams::default(),
                    &Patch::Merge(annotate(serde_json::Value::Null)),
                )
                .await
            {
                Ok(_) => "was removed again",
                Err(_) => "could not be removed",
            };
            return Err(AutoscalerError::ScaleDownFailed {
                set,
                replicas,
                machine: machine_name,
                source: Box::new(source),
                cleanup,
            });
        }
        tracing::info!(node, machine = %machine_name, machineset = %set, replicas, "autoscaler scaled down");
        Ok(ScaleDown {
            machine_set: set,
            machine: machine_name,
            replicas,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn set(annotations: Value, replicas: i32) -> MachineSet {
        serde_json::from_value(json!({
            "apiVersion": "machine.openshift.io/v1beta1", "kind": "MachineSet",
            "metadata": {"name": "win", "namespace": "ns", "annotations": annotations},
            "spec": {"replicas": replicas, "template": {"spec": {"metadata": {"labels": {"node-role.kubernetes.io/worker": ""}}}}}
        }))
        .unwrap()
    }

    fn bounds(min: &str, max: &str) -> Value {
        json!({MIN_SIZE_ANNOTATION: min, MAX_SIZE_ANNOTATION: max})
    }

    fn with(mut base: Value, extra: Value) -> Value {
        for (k, v) in extra.as_object().unwrap() {
            base[k] = v.clone();
        }
        base
    }

    #[test]
    fn upstream_keys_win_over_deprecated_ones() {
        let annotations = with(
            bounds("0", "3"),
            json!({CAPACITY_CPU: "4", VCPU: "2", CAPACITY_MEMORY: "16Gi", MEMORY_MB: "8192",
                   CAPACITY_LABELS: "kubernetes.io/os=windows,kubernetes.io/arch=amd64"}),
        );
        let template = node_template(&set(annotations, 0)).unwrap();
        assert_eq!(template.cpu_millis, 4000);
        assert_eq!(template.memory_bytes, 16 << 30);
        assert_eq!(template.max_pods, DEFAULT_MAX_PODS);
        assert_eq!(template.gpus, 0);
        assert_eq!(template.labels["kubernetes.io/os"], "windows");
        assert_eq!(template.labels["node-role.kubernetes.io/worker"], "");
    }

    #[test]
    fn deprecated_keys_alone_suffice_with_memory_in_mib() {
        let annotations = with(
            bounds("0", "3"),
            json!({VCPU: "2", MEMORY_MB: "8192", GPU: "1", MAX_PODS: "250"}),
        );
        let template = node_template(&set(annotations, 0)).unwrap();
        assert_eq!(
            (
                template.cpu_millis,
                template.memory_bytes,
                template.gpus,
                template.max_pods
            ),
            (2000, 8192 * MIB, 1, 250)
        );
        assert_eq!(template.labels["kubernetes.io/os"], "linux");
        assert_eq!(cpu_millis("500m"), Some(500));
        assert_eq!(cpu_millis("1.5"), Some(1500));
        assert_eq!(cpu_millis("four"), None);
    }

    #[test]
    fn groups_need_both_bounds_and_capacity_to_scale_from_zero() {
        let no_capacity = node_group(&set(bounds("0", "3"), 0)).unwrap();
        assert!(!no_capacity.can_scale());
        assert_eq!(
            no_capacity.template.unwrap_err(),
            format!("no {CAPACITY_CPU} or {VCPU} annotation")
        );
        let cpu_only = node_group(&set(with(bounds("0", "3"), json!({VCPU: "2"})), 0)).unwrap();
        assert!(cpu_only.template.unwrap_err().contains("memory"));
        assert!(node_group(&set(bounds("0", "3"), 1)).unwrap().can_scale());

        assert!(matches!(
            node_group(&set(json!({MIN_SIZE_ANNOTATION: "0"}), 0)),
            Err(AutoscalerError::NotANodeGroup { .. })
        ));
        assert!(matches!(
            node_group(&set(bounds("2", "1"), 0)),
            Err(AutoscalerError::BadBounds { min: 2, max: 1, .. })
        ));
        assert!(matches!(
            node_group(&set(bounds("0", "0"), 0)),
            Err(AutoscalerError::BadBounds { .. })
        ));
        assert_eq!(
            node_group(&set(bounds("0", "x"), 0))
                .unwrap_err()
                .to_string(),
            format!("MachineSet win: annotation {MAX_SIZE_ANNOTATION}=\"x\" is not a whole number")
        );
        let mut cluster_api = set(bounds("0", "3"), 1);
        cluster_api.spec.authoritative_api = Some("ClusterAPI".to_owned());
        assert!(matches!(
            node_group(&cluster_api),
            Err(AutoscalerError::NotMachineApi { .. })
        ));
    }

    #[test]
    fn nodes_map_to_machines_by_normalized_provider_id_then_annotation() {
        let machine = |name: &str, id: &str| -> Machine {
            serde_json::from_value(json!({
                "apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
                "metadata": {"name": name, "namespace": "ns"}, "spec": {"providerID": id}
            }))
            .unwrap()
        };
        let machines = vec![machine("a", "nutanix://1234"), machine("b", "")];
        let node = |id: &str, annotation: &str| -> Node {
            serde_json::from_value(json!({
                "metadata": {"name": "n", "annotations": {MACHINE_ANNOTATION: annotation}},
                "spec": {"providerID": id}
            }))
            .unwrap()
        };
        let found = |n: &Node| machine_for_node(n, &machines).map(ResourceExt::name_any);
        assert_eq!(found(&node("other-scheme:///1234", "")), Some("a".into()));
        assert_eq!(found(&node("", "ns/b")), Some("b".into()));
        assert_eq!(found(&node("nutanix://9999", "ns/b")), Some("b".into()));
        assert_eq!(found(&node("", "other-ns/b")), None);
        assert_eq!(found(&node("", "")), None);
    }
}
