//! The OpenShift cluster autoscaler's `openshift` cloud provider and its scale-up decision, as
//! commands the scenario and tests call (no loop: deciding *when* to look is not simulated).
//!
//! From openshift/kubernetes-autoscaler HEAD 70920d3 (`cluster-autoscaler/cloudprovider/openshift`,
//! and the core's estimator and expander, see [`scale_up`]), each rule cited at its code:
//! - [`template`]: which MachineSets are node groups, and the node a group at zero would bring,
//!   from its capacity annotations (upstream `capacity.cluster-autoscaler.kubernetes.io/*` keys
//!   first, the deprecated `machine.openshift.io/*` ones as fallback; `taints`, `maxPods`,
//!   `ephemeral-disk` and `labels` read when present);
//! - [`Autoscaler::scale_up_for_pods`]: the group to grow for pending pods (its template: a
//!   Ready Node of the group, else its annotations), by the scheduler's filters (taints and
//!   tolerations, node selection, resources and pods), the binpacking estimate and the
//!   least-waste expander: a Windows set whose template carries `os=Windows:NoSchedule` is never
//!   grown for a Linux pod;
//! - [`Autoscaler::scale_up`] (`IncreaseSize`, `SetSize`): `/scale` read, then merge patched,
//!   never above max;
//! - [`Autoscaler::scale_down_node`] (`DeleteNodes`): the Node's group through its providerID
//!   (`nodeGroupForNode`), refused at min size, both delete annotations on the Machine (an update of
//!   the whole object, as the provider's unstructured client does), then `/scale` to replicas − 1,
//!   the annotations removed again if that fails.

pub mod scale_up;
pub mod template;

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde_json::json;

use crate::machine_api::{Machine, MachineSet};
use crate::machineset::{DELETE_MACHINE_ANNOTATION, OLD_DELETE_MACHINE_ANNOTATION};
use crate::nodelink::MACHINE_ANNOTATION;
pub use scale_up::{Candidate, ExpansionOption, TemplateNode};
pub use template::{
    AnnotationError, DEFAULT_MAX_PODS, MAX_SIZE_ANNOTATION, MIN_SIZE_ANNOTATION, NodeGroup,
    NodeTemplate, NotAGroup, TemplateError,
};

/// Node annotation naming the namespace of the Machine in [`MACHINE_ANNOTATION`]
/// (`clusterNamespaceAnnotationKey`).
pub const CLUSTER_NAMESPACE_ANNOTATION: &str = "machine.openshift.io/cluster-namespace";

/// The node a MachineSet's Machines would bring from its annotations (`TemplateNodeInfo`), read
/// from any serializable MachineSet as the autoscaler reads the API server's JSON.
pub fn node_template(set: &impl Serialize) -> Result<NodeTemplate, TemplateError> {
    let set = MachineSet::read(set).map_err(|e| TemplateError::Unreadable(e.to_string()))?;
    template::node_template_of(&set)
}

/// `normalizedProviderString`: the text after the last `/` (an Azure scale-set ID is kept whole).
pub fn normalized_provider_id(id: &str) -> &str {
    if id.starts_with("azure://") && id.contains("virtualMachineScaleSets") {
        return id;
    }
    id.rsplit('/').next().unwrap_or(id)
}

/// Why an autoscaler action was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum AutoscalerError {
    #[error("MachineSet {set} is not a node group: {why}")]
    NotANodeGroup { set: String, why: NotAGroup },
    #[error("MachineSet {set}: error validating min/max annotations: {source}")]
    BadAnnotation {
        set: String,
        source: AnnotationError,
    },
    #[error("MachineSet {set}: size increase must be positive, got {delta}")]
    BadDelta { set: String, delta: i64 },
    #[error("MachineSet {set}: size increase too large - desired:{desired} max:{max}")]
    AboveMax { set: String, desired: i64, max: i64 },
    #[error("MachineSet {set}: size decrease too large - desired:{desired} min:{min}")]
    BelowMin { set: String, desired: i64, min: i64 },
    #[error(
        "MachineSet {set}: min size reached ({replicas} replicas, min {min}), nodes will not be deleted"
    )]
    AtMinSize {
        set: String,
        replicas: i64,
        min: i64,
    },
    #[error("no node group found for node {node} (providerID {provider_id:?})")]
    NoNodeGroupForNode { node: String, provider_id: String },
    #[error("internal error; expected len==1, got {count} {kind} with providerID {id:?}")]
    AmbiguousProviderId {
        kind: &'static str,
        id: String,
        count: usize,
    },
    #[error("node {node}: its Machine {machine} is already being deleted")]
    MachineAlreadyDeleting { node: String, machine: String },
    #[error("{what} is not readable as machine.openshift.io/v1beta1: {message}")]
    Unreadable { what: String, message: String },
    #[error("{action}: {source}")]
    Api {
        action: String,
        source: Box<kube::Error>,
    },
    #[error(
        "MachineSet {set}: scaling to {replicas} failed ({source}); the delete annotations on Machine {machine} {cleanup}"
    )]
    ScaleDownFailed {
        set: String,
        replicas: i64,
        machine: String,
        source: Box<kube::Error>,
        cleanup: &'static str,
    },
}

/// Reads a MachineSet as a node group.
pub fn node_group(set: &impl Serialize) -> Result<NodeGroup, AutoscalerError> {
    let set = MachineSet::read(set).map_err(|e| AutoscalerError::Unreadable {
        what: "MachineSet".to_owned(),
        message: e.to_string(),
    })?;
    group_of(&set)
}

fn group_of(set: &MachineSet) -> Result<NodeGroup, AutoscalerError> {
    match template::node_group(set) {
        Ok(Ok(group)) => Ok(group),
        Ok(Err(why)) => Err(AutoscalerError::NotANodeGroup {
            set: set.name_any(),
            why,
        }),
        Err(source) => Err(AutoscalerError::BadAnnotation {
            set: set.name_any(),
            source,
        }),
    }
}

/// What a scale-down did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScaleDown {
    pub machine_set: String,
    pub machine: String,
    pub replicas: i32,
}

/// What a scale-up for pending pods did.
#[derive(Clone, Debug, PartialEq)]
pub struct ScaleUp {
    /// The option the expander chose.
    pub chosen: ExpansionOption,
    /// Every group's option, by group name.
    pub options: Vec<ExpansionOption>,
    /// The group's size after the increase.
    pub replicas: i32,
}

/// Go's `time.Now().String()` without the monotonic clock reading:
/// `2006-01-02 15:04:05.999999999 +0000 UTC` (trailing zeros of the fraction dropped).
fn go_time_string(now: Timestamp) -> String {
    let fraction = format!("{:09}", now.subsec_nanosecond());
    let fraction = fraction.trim_end_matches('0');
    let seconds = now.strftime("%Y-%m-%d %H:%M:%S");
    if fraction.is_empty() {
        format!("{seconds} +0000 UTC")
    } else {
        format!("{seconds}.{fraction} +0000 UTC")
    }
}

/// `findMachineByProviderID`: by the Machines' normalized providerIDs; else, through the Node with
/// that providerID, by its `machine.openshift.io/machine` annotation (joined to the
/// `cluster-namespace` one, as `path.Join` does).
fn machine_by_provider_id<'a>(
    id: &str,
    machines: &'a [Machine],
    nodes: &[Node],
) -> Result<Option<&'a Machine>, AutoscalerError> {
    if id.is_empty() {
        // Empty providerIDs are in neither index.
        return Ok(None);
    }
    fn normalized(id: Option<&str>) -> Option<&str> {
        id.filter(|p| !p.is_empty()).map(normalized_provider_id)
    }
    let found: Vec<&Machine> = machines
        .iter()
        .filter(|m| normalized(m.spec.provider_id.as_deref()) == Some(id))
        .collect();
    match found.as_slice() {
        [machine] => return Ok(Some(machine)),
        [] => {}
        _ => {
            return Err(AutoscalerError::AmbiguousProviderId {
                kind: "Machines",
                id: id.to_owned(),
                count: found.len(),
            });
        }
    }
    let found: Vec<&Node> = nodes
        .iter()
        .filter(|n| normalized(n.spec.as_ref().and_then(|s| s.provider_id.as_deref())) == Some(id))
        .collect();
    let node = match found.as_slice() {
        [] => return Ok(None),
        [node] => node,
        _ => {
            return Err(AutoscalerError::AmbiguousProviderId {
                kind: "Nodes",
                id: id.to_owned(),
                count: found.len(),
            });
        }
    };
    let annotations = node.annotations();
    let machine_id = annotations
        .get(MACHINE_ANNOTATION)
        .map(String::as_str)
        .unwrap_or_default();
    let key = match annotations.get(CLUSTER_NAMESPACE_ANNOTATION) {
        Some(namespace) if !namespace.is_empty() => format!("{namespace}/{machine_id}"),
        _ => machine_id.to_owned(),
    };
    Ok(machines
        .iter()
        .find(|m| format!("{}/{}", m.namespace().unwrap_or_default(), m.name_any()) == key))
}

/// `machineOwnerRef`: the first owner reference of kind MachineSet with a name.
fn owner_set(machine: &Machine) -> Option<&str> {
    machine
        .metadata
        .owner_references
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find(|r| r.kind == "MachineSet" && !r.name.is_empty())
        .map(|r| r.name.as_str())
}

/// `extractNodeLabels`: the labels a template takes from an existing Node of its group.
fn extract_node_labels(node: &Node) -> BTreeMap<String, String> {
    const KEYS: [&str; 7] = [
        "kubernetes.io/arch",
        "kubernetes.io/os",
        "beta.kubernetes.io/instance-type",
        "node.kubernetes.io/instance-type",
        "failure-domain.beta.kubernetes.io/region",
        "topology.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/zone",
    ];
    let labels = node.labels();
    KEYS.iter()
        .filter_map(|key| {
            labels
                .get(*key)
                .filter(|v| !v.is_empty())
                .map(|v| ((*key).to_owned(), v.clone()))
        })
        .collect()
}

/// The autoscaler's actions against one namespace's MachineSets.
#[derive(Clone)]
pub struct Autoscaler {
    machine_sets: Api<MachineSet>,
    machines: Api<Machine>,
    /// Machines as unstructured objects: marking one for deletion updates it whole.
    unstructured_machines: Api<DynamicObject>,
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
        let resource = ApiResource::erase::<Machine>(&());
        Self {
            machine_sets: Api::namespaced(client.clone(), namespace),
            machines: Api::namespaced(client.clone(), namespace),
            unstructured_machines: Api::namespaced_with(client.clone(), namespace, &resource),
            nodes: Api::all(client),
        }
    }

    async fn sets(&self) -> Result<Vec<MachineSet>, AutoscalerError> {
        Ok(self
            .machine_sets
            .list(&ListParams::default())
            .await
            .map_err(api_error("list MachineSets"))?
            .items)
    }

    /// The MachineSets that are node groups (`nodeGroups`); the others are skipped, and an
    /// invalid bound annotation fails the whole listing, as in the autoscaler.
    pub async fn node_groups(&self) -> Result<Vec<NodeGroup>, AutoscalerError> {
        let mut groups = Vec::new();
        for set in self.sets().await? {
            match group_of(&set) {
                Ok(group) => groups.push(group),
                Err(AutoscalerError::NotANodeGroup { .. }) => {}
                Err(error) => return Err(error),
            }
        }
        Ok(groups)
    }

    async fn group(&self, set: &str) -> Result<NodeGroup, AutoscalerError> {
        let set = self
            .machine_sets
            .get(set)
            .await
            .map_err(api_error(format!("read MachineSet {set}")))?;
        group_of(&set)
    }

    /// `Replicas`: `spec.replicas` of the `/scale` subresource. The API server omits it at 0
    /// (k8s.io/api v0.34.2 `autoscaling/v1` `ScaleSpec.Replicas`, `json:"replicas,omitempty"`),
    /// and the autoscaler reads the typed `int32`, so a missing one is 0
    /// (`clusterapi_unstructured.go`, `Replicas`).
    async fn replicas(&self, set: &str) -> Result<i64, AutoscalerError> {
        let scale = self
            .machine_sets
            .get_scale(set)
            .await
            .map_err(api_error(format!("read the scale of MachineSet {set}")))?;
        Ok(scale.spec.and_then(|s| s.replicas).map_or(0, i64::from))
    }

    /// `SetSize`: refused above max or below min, else a merge patch of `/scale`.
    async fn set_size(&self, group: &NodeGroup, replicas: i64) -> Result<(), AutoscalerError> {
        if replicas > group.max {
            return Err(AutoscalerError::AboveMax {
                set: group.name.clone(),
                desired: replicas,
                max: group.max,
            });
        }
        if replicas < group.min {
            return Err(AutoscalerError::BelowMin {
                set: group.name.clone(),
                desired: replicas,
                min: group.min,
            });
        }
        self.patch_scale(&group.name, replicas)
            .await
            .map_err(api_error(format!(
                "scale MachineSet {} to {replicas}",
                group.name
            )))
    }

    async fn patch_scale(&self, set: &str, replicas: i64) -> Result<(), kube::Error> {
        self.machine_sets
            .patch_scale(
                set,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": replicas}})),
            )
            .await
            .map(drop)
    }

    /// `IncreaseSize`: adds `delta` replicas to the group; returns the new size.
    pub async fn scale_up(&self, set: &str, delta: i32) -> Result<i32, AutoscalerError> {
        let group = self.group(set).await?;
        let delta = i64::from(delta);
        if delta <= 0 {
            return Err(AutoscalerError::BadDelta {
                set: group.name,
                delta,
            });
        }
        let desired = self.replicas(set).await?.saturating_add(delta);
        self.set_size(&group, desired).await?;
        tracing::info!(machineset = set, replicas = desired, "autoscaler scaled up");
        Ok(i32::try_from(desired).unwrap_or(i32::MAX))
    }

    /// The template node of each group that can grow, as the mixed node-info provider picks it:
    /// a good Node of the group, else its annotations (with the labels of a Node of the group,
    /// if it has one), else any Node of the group.
    async fn candidates(&self, groups: &[NodeGroup]) -> Result<Vec<Candidate>, AutoscalerError> {
        let machines = self
            .machines
            .list(&ListParams::default())
            .await
            .map_err(api_error("list Machines"))?
            .items;
        let nodes = self
            .nodes
            .list(&ListParams::default())
            .await
            .map_err(api_error("list Nodes"))?
            .items;
        let now = Timestamp::now();
        let mut nodes_of: BTreeMap<&str, Vec<&Node>> = BTreeMap::new();
        for node in &nodes {
            let id = node
                .spec
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .map(normalized_provider_id)
                .unwrap_or_default();
            if let Some(set) = machine_by_provider_id(id, &machines, &nodes)?.and_then(owner_set) {
                nodes_of.entry(set).or_default().push(node);
            }
        }
        let mut candidates = Vec::new();
        for group in groups {
            let members = nodes_of
                .get(group.name.as_str())
                .cloned()
                .unwrap_or_default();
            let good = members.iter().find(|n| scale_up::is_good_template(n, now));
            let template = match (good, &group.template, members.first()) {
                (Some(node), _, _) => TemplateNode::from_node(node, &group.name),
                (None, Ok(template), first) => {
                    let mut template = template.clone();
                    if let Some(node) = first {
                        template.labels.extend(extract_node_labels(node));
                    }
                    TemplateNode::from_annotations(&template)
                }
                (None, Err(_), Some(node)) => TemplateNode::from_node(node, &group.name),
                (None, Err(_), None) => continue,
            };
            candidates.push(Candidate {
                group: group.name.clone(),
                template,
                headroom: group.max - group.replicas,
            });
        }
        Ok(candidates)
    }

    /// What the autoscaler would do for `pods` (pending, unschedulable), without doing it: every
    /// group's expansion option and the one the least-waste expander picks.
    pub async fn plan_for_pods(
        &self,
        pods: &[Pod],
    ) -> Result<(Vec<ExpansionOption>, Option<ExpansionOption>), AutoscalerError> {
        let groups = self.node_groups().await?;
        let candidates = self.candidates(&groups).await?;
        Ok(scale_up::plan(&candidates, pods))
    }

    /// One scale-up for `pods`: the group the least-waste expander picks among those whose
    /// template node runs some of them, grown by the estimated number of nodes; `None` when no
    /// group's template runs any.
    pub async fn scale_up_for_pods(
        &self,
        pods: &[Pod],
    ) -> Result<Option<ScaleUp>, AutoscalerError> {
        let (options, chosen) = self.plan_for_pods(pods).await?;
        let Some(chosen) = chosen else {
            return Ok(None);
        };
        let group = self.group(&chosen.group).await?;
        let desired = self
            .replicas(&group.name)
            .await?
            .saturating_add(chosen.nodes);
        self.set_size(&group, desired).await?;
        tracing::info!(machineset = %group.name, replicas = desired, pods = chosen.pods.len(), "autoscaler scaled up for pending pods");
        Ok(Some(ScaleUp {
            chosen,
            options,
            replicas: i32::try_from(desired).unwrap_or(i32::MAX),
        }))
    }

    /// `MarkMachineForDeletion` / `UnmarkMachineForDeletion`: a GET and an update of the whole
    /// Machine with both delete annotations set to the time, or removed.
    async fn mark(&self, machine: &str, mark: bool) -> Result<(), kube::Error> {
        let mut object = self.unstructured_machines.get(machine).await?;
        let annotations = object.annotations_mut();
        for key in [DELETE_MACHINE_ANNOTATION, OLD_DELETE_MACHINE_ANNOTATION] {
            if mark {
                annotations.insert(key.to_owned(), go_time_string(Timestamp::now()));
            } else {
                annotations.remove(key);
            }
        }
        self.unstructured_machines
            .replace(machine, &PostParams::default(), &object)
            .await
            .map(drop)
    }

    /// `DeleteNodes` for one Node: annotate its Machine, then lower the replicas.
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
        let nodes = self
            .nodes
            .list(&ListParams::default())
            .await
            .map_err(api_error("list Nodes"))?
            .items;
        let provider_id = node_object
            .spec
            .as_ref()
            .and_then(|s| s.provider_id.clone())
            .unwrap_or_default();
        let no_group = || AutoscalerError::NoNodeGroupForNode {
            node: node.to_owned(),
            provider_id: provider_id.clone(),
        };
        // `nodeGroupForNode`: the Machine by providerID, its MachineSet, a node group.
        let machine =
            machine_by_provider_id(normalized_provider_id(&provider_id), &machines, &nodes)?
                .ok_or_else(no_group)?;
        let set = owner_set(machine).ok_or_else(no_group)?;
        let group = match self.group(set).await {
            Ok(group) => group,
            Err(AutoscalerError::NotANodeGroup { .. }) => return Err(no_group()),
            Err(error) => return Err(error),
        };
        let replicas = self.replicas(set).await?;
        if replicas <= group.min {
            return Err(AutoscalerError::AtMinSize {
                set: set.to_owned(),
                replicas,
                min: group.min,
            });
        }
        let machine_name = machine.name_any();
        if machine.meta().deletion_timestamp.is_some() {
            return Err(AutoscalerError::MachineAlreadyDeleting {
                node: node.to_owned(),
                machine: machine_name,
            });
        }
        self.mark(&machine_name, true)
            .await
            .map_err(api_error(format!("annotate Machine {machine_name}")))?;
        let target = replicas - 1;
        if let Err(source) = self.patch_scale(set, target).await {
            let cleanup = match self.mark(&machine_name, false).await {
                Ok(()) => "were removed again",
                Err(_) => "could not be removed",
            };
            return Err(AutoscalerError::ScaleDownFailed {
                set: set.to_owned(),
                replicas: target,
                machine: machine_name,
                source: Box::new(source),
                cleanup,
            });
        }
        tracing::info!(node, machine = %machine_name, machineset = %set, replicas = target, "autoscaler scaled down");
        Ok(ScaleDown {
            machine_set: set.to_owned(),
            machine: machine_name,
            replicas: i32::try_from(target).unwrap_or(i32::MAX),
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    #[test]
    fn provider_ids_normalize_after_the_last_slash() {
        assert_eq!(normalized_provider_id("nutanix://1234"), "1234");
        assert_eq!(normalized_provider_id("other-scheme:///1234"), "1234");
        assert_eq!(normalized_provider_id(""), "");
        let vmss = "azure:///subscriptions/s/virtualMachineScaleSets/x/virtualMachines/0";
        assert_eq!(normalized_provider_id(vmss), vmss);
    }

    fn machine(name: &str, id: &str, owner: Option<&str>) -> Machine {
        let owners: Vec<Value> = owner
            .map(|o| json!({"apiVersion": "machine.openshift.io/v1beta1", "kind": "MachineSet", "name": o, "uid": "u"}))
            .into_iter()
            .collect();
        serde_json::from_value(json!({
            "apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
            "metadata": {"name": name, "namespace": "ns", "ownerReferences": owners},
            "spec": {"providerID": id}
        }))
        .unwrap()
    }

    fn node(id: &str, annotation: &str) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "n", "annotations": {MACHINE_ANNOTATION: annotation}},
            "spec": {"providerID": id}
        }))
        .unwrap()
    }

    /// How the provider finds a Node's Machine and group (openshift/kubernetes-autoscaler
    /// `cloudprovider/openshift/openshift_controller.go`, `findMachineByProviderID`,
    /// `findMachineOwner`, HEAD 70920d3): a Node without a providerID has none, so the provider
    /// must write the Node's providerID for the autoscaler to remove it.
    #[test]
    fn nodes_find_their_machine_by_provider_id_then_annotation() {
        let machines = vec![
            machine("a", "nutanix://1234", Some("set")),
            machine("b", "", Some("set")),
        ];
        let found = |id: &str, nodes: &[Node]| {
            machine_by_provider_id(normalized_provider_id(id), &machines, nodes)
                .unwrap()
                .map(ResourceExt::name_any)
        };
        assert_eq!(found("other-scheme:///1234", &[]), Some("a".into()));
        let annotated = [node("nutanix://9999", "ns/b")];
        assert_eq!(
            found("nutanix://9999", &annotated),
            Some("b".into()),
            "a Machine without the providerID, through the Node's machine annotation"
        );
        assert_eq!(
            found("", &[node("", "ns/b")]),
            None,
            "an empty providerID is in no index"
        );
        assert_eq!(owner_set(&machines[0]), Some("set"));
        assert_eq!(owner_set(&machine("c", "x", None)), None);
        let twins = vec![
            machine("a", "nutanix://1", None),
            machine("b", "aws:///1", None),
        ];
        assert!(machine_by_provider_id("1", &twins, &[]).is_err());
    }

    #[test]
    fn delete_annotations_carry_gos_time_format() {
        let at: Timestamp = "2026-12-01T10:00:00.5Z".parse().unwrap();
        assert_eq!(go_time_string(at), "2026-12-01 10:00:00.5 +0000 UTC");
        let whole: Timestamp = "2026-12-01T10:00:00Z".parse().unwrap();
        assert_eq!(go_time_string(whole), "2026-12-01 10:00:00 +0000 UTC");
    }
}
