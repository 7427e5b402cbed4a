//! Which node group the autoscaler grows for pending pods, and by how many nodes: the scheduler's
//! filters against each group's template node, the binpacking estimate, and the default
//! least-waste expander.
//!
//! Sources, each cited at the code that simulates it: kubernetes `pkg/scheduler/framework/plugins`
//! (`tainttoleration`, `nodeaffinity`, `noderesources/fit.go`), k8s.io/api `core/v1/toleration.go`
//! (`ToleratesTaint`), k8s.io/component-helpers `scheduling/corev1/nodeaffinity` and
//! `resource/helpers.go` (`PodRequests`); openshift/kubernetes-autoscaler HEAD 70920d3,
//! `cluster-autoscaler/processors/nodeinfosprovider/mixed_nodeinfos_processor.go` (which node a
//! group's template is), `simulator/node_info_utils.go` and `utils/taints/taints.go` (the template's
//! sanitized taints), `cloudprovider/utils.go` (`BuildKubeProxy`), `estimator/binpacking_estimator.go`
//! and `decreasing_pod_orderer.go`, `expander/waste/waste.go`, `config/flags/flags.go` (least-waste is
//! the default expander; openshift/cluster-autoscaler-operator passes `--expander` only when the
//! ClusterAutoscaler names one).
//!
//! Simplified: pods are placed one by one (no equivalence groups, no fast path), on the first new
//! node they fit; no DaemonSet pods (the sandbox runs none); ties between equally wasteful groups
//! go to the first by name where the autoscaler picks at random; only the filters above (no pod
//! affinity, topology spread, volumes or ports).

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{
    Node, NodeSelectorRequirement, NodeSelectorTerm, Pod, ResourceRequirements, Taint, Toleration,
};
use k8s_semantics::quantity::Quantity;
use kube::ResourceExt;

use super::template::{GPU_RESOURCE, NodeTemplate};

/// Resource amounts: `cpu` in millicores, everything else in whole units (bytes, pods, devices),
/// as the scheduler's `Resource` counts them.
pub type Resources = BTreeMap<String, i64>;

/// `KubeProxyCpuRequestMillis`: the CPU of the kube-proxy pod `TemplateNodeInfo` puts on every
/// node built from annotations.
const KUBE_PROXY_CPU_MILLIS: i64 = 100;
/// `stabilizationDelay`: a Node is a good template once Ready for this long.
const STABILIZATION_DELAY: SignedDuration = SignedDuration::from_mins(1);
/// The autoscaler's taints, removed from a template (`ToBeDeletedTaint`,
/// `DeletionCandidateTaintKey`), and the node-condition taints (`NodeConditionTaints`).
const SANITIZED_TAINTS: [&str; 13] = [
    "ToBeDeletedByClusterAutoscaler",
    "DeletionCandidateOfClusterAutoscaler",
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
    "node.kubernetes.io/unschedulable",
    "node.kubernetes.io/memory-pressure",
    "node.kubernetes.io/disk-pressure",
    "node.kubernetes.io/network-unavailable",
    "node.kubernetes.io/pid-pressure",
    "node.cloudprovider.kubernetes.io/uninitialized",
    "node.cloudprovider.kubernetes.io/shutdown",
    "cloud.google.com/impending-node-termination",
    "NodeWithImpairedVolumes",
];
/// Taint key prefixes `NewTaintConfig` always treats as startup or status taints.
const SANITIZED_PREFIXES: [&str; 3] = [
    "ignore-taint.cluster-autoscaler.kubernetes.io/",
    "startup-taint.cluster-autoscaler.kubernetes.io/",
    "status-taint.cluster-autoscaler.kubernetes.io/",
];

/// The node the autoscaler simulates for a group.
#[derive(Clone, Debug, PartialEq)]
pub struct TemplateNode {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub allocatable: Resources,
    /// `node.Status.Capacity` (CPU and memory: what the least-waste expander divides by).
    pub capacity: Resources,
    /// What its own pods already request (the kube-proxy pod on an annotation template).
    pub requested: Resources,
}

/// `taints.SanitizeTaints` with the default configuration.
fn sanitize(taints: &[Taint]) -> Vec<Taint> {
    taints
        .iter()
        .filter(|t| {
            !SANITIZED_TAINTS.contains(&t.key.as_str())
                && !SANITIZED_PREFIXES.iter().any(|p| t.key.starts_with(p))
        })
        .cloned()
        .collect()
}

fn one_pod() -> Resources {
    Resources::from([("pods".to_owned(), 1)])
}

impl TemplateNode {
    /// `TemplateNodeInfo` (openshift `openshift_nodegroup.go`): capacity = allocatable = the
    /// annotations', with the kube-proxy pod (`BuildKubeProxy`) on it, taints sanitized
    /// (`SanitizedTemplateNodeInfoFromNodeGroup`).
    pub fn from_annotations(template: &NodeTemplate) -> Self {
        let signed = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let mut capacity = Resources::from([
            ("cpu".to_owned(), signed(template.cpu_millis)),
            ("memory".to_owned(), signed(template.memory_bytes)),
            ("pods".to_owned(), signed(template.max_pods)),
        ]);
        if let Some(disk) = template.ephemeral_disk_bytes {
            capacity.insert("ephemeral-storage".to_owned(), signed(disk));
        }
        if template.gpus > 0 {
            capacity.insert(GPU_RESOURCE.to_owned(), signed(template.gpus));
        }
        let mut requested = one_pod();
        requested.insert("cpu".to_owned(), KUBE_PROXY_CPU_MILLIS);
        Self {
            name: template
                .labels
                .get("kubernetes.io/hostname")
                .cloned()
                .unwrap_or_default(),
            labels: template.labels.clone(),
            taints: sanitize(&template.taints),
            allocatable: capacity.clone(),
            capacity,
            requested,
        }
    }

    /// `SanitizedTemplateNodeInfoFromNodeInfo`: a real Node of the group, its labels (the host
    /// name made the template's), sanitized taints, allocatable and capacity; none of its pods
    /// (only DaemonSet and mirror pods would be kept, and the sandbox runs none).
    pub fn from_node(node: &Node, group: &str) -> Self {
        let name = format!("template-node-for-{group}");
        let mut labels = node.labels().clone();
        labels.insert("kubernetes.io/hostname".to_owned(), name.clone());
        let status = node.status.as_ref();
        let resources = |list: Option<
            &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
        >| {
            list.into_iter()
                .flatten()
                .filter_map(|(key, q)| {
                    Some((key.clone(), amount(key, &Quantity::parse(&q.0).ok()?)))
                })
                .collect::<Resources>()
        };
        Self {
            name,
            labels,
            taints: sanitize(
                node.spec
                    .as_ref()
                    .and_then(|s| s.taints.as_deref())
                    .unwrap_or_default(),
            ),
            allocatable: resources(status.and_then(|s| s.allocatable.as_ref())),
            capacity: resources(status.and_then(|s| s.capacity.as_ref())),
            requested: Resources::new(),
        }
    }
}

/// A resource amount in the scheduler's units: millicores for CPU, whole units otherwise.
fn amount(resource: &str, quantity: &Quantity) -> i64 {
    if resource == "cpu" {
        quantity.milli_value()
    } else {
        quantity.value()
    }
}

/// `isNodeGoodTemplateCandidate`: Ready since more than a minute, schedulable, not being deleted
/// by the autoscaler.
pub fn is_good_template(node: &Node, now: Timestamp) -> bool {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default()
        .iter()
        .find(|c| c.type_ == "Ready");
    let stable = ready.is_some_and(|c| {
        c.status == "True"
            && c.last_transition_time
                .as_ref()
                .is_some_and(|t| t.0 + STABILIZATION_DELAY < now)
    });
    let spec = node.spec.as_ref();
    stable
        && !spec.and_then(|s| s.unschedulable).unwrap_or(false)
        && !spec
            .and_then(|s| s.taints.as_deref())
            .unwrap_or_default()
            .iter()
            .any(|t| t.key == "ToBeDeletedByClusterAutoscaler")
}

fn add_requests(total: &mut Resources, requirements: Option<&ResourceRequirements>) {
    for (resource, quantity) in requirements
        .and_then(|r| r.requests.as_ref())
        .into_iter()
        .flatten()
    {
        if let Ok(q) = Quantity::parse(&quantity.0) {
            *total.entry(resource.clone()).or_insert(0) += amount(resource, &q);
        }
    }
}

/// `PodRequests` (k8s.io/component-helpers `resource/helpers.go`): the containers' requests
/// summed, each init container's taken where larger, the pod overhead added; one pod. Sidecar
/// init containers are counted as plain init containers.
pub fn pod_requests(pod: &Pod) -> Resources {
    let mut total = Resources::new();
    let Some(spec) = pod.spec.as_ref() else {
        return one_pod();
    };
    for container in &spec.containers {
        add_requests(&mut total, container.resources.as_ref());
    }
    for init in spec.init_containers.iter().flatten() {
        let mut one = Resources::new();
        add_requests(&mut one, init.resources.as_ref());
        for (resource, value) in one {
            let entry = total.entry(resource).or_insert(0);
            *entry = (*entry).max(value);
        }
    }
    for (resource, quantity) in spec.overhead.iter().flatten() {
        if let Ok(q) = Quantity::parse(&quantity.0) {
            *total.entry(resource.clone()).or_insert(0) += amount(resource, &q);
        }
    }
    total.insert("pods".to_owned(), 1);
    total
}

/// `Toleration.ToleratesTaint` (k8s.io/api `core/v1/toleration.go`): an empty effect matches
/// every effect, an empty key every key; `Exists` matches any value, `Equal` (or no operator) an
/// equal one.
fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect = toleration.effect.as_deref().unwrap_or_default();
    let key = toleration.key.as_deref().unwrap_or_default();
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or_default() {
        "" | "Equal" => {
            toleration.value.as_deref().unwrap_or_default()
                == taint.value.as_deref().unwrap_or_default()
        }
        "Exists" => true,
        _ => false,
    }
}

/// The taint the pod does not tolerate, if any (the `TaintToleration` filter: only `NoSchedule`
/// and `NoExecute` taints count).
pub fn untolerated_taint<'a>(pod: &Pod, taints: &'a [Taint]) -> Option<&'a Taint> {
    let tolerations = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or_default();
    taints
        .iter()
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        .find(|taint| !tolerations.iter().any(|tol| tolerates(tol, taint)))
}

/// One `matchExpressions` requirement against the labels (`nodeaffinity`: `In`, `NotIn`,
/// `Exists`, `DoesNotExist`, and `Gt`/`Lt` on integers).
fn requirement_matches(
    requirement: &NodeSelectorRequirement,
    labels: &BTreeMap<String, String>,
) -> bool {
    let value = labels.get(&requirement.key);
    let values = requirement.values.as_deref().unwrap_or_default();
    let integer = |text: &str| text.parse::<i64>().ok();
    match requirement.operator.as_str() {
        "In" => value.is_some_and(|v| values.contains(v)),
        "NotIn" => value.is_none_or(|v| !values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(label), [bound]) = (value.and_then(|v| integer(v)), values) else {
                return false;
            };
            integer(bound).is_some_and(|bound| {
                if requirement.operator == "Gt" {
                    label > bound
                } else {
                    label < bound
                }
            })
        }
        _ => false,
    }
}

/// A node selector term: every expression and field requirement holds; an empty term matches
/// nothing. The only field is `metadata.name`.
fn term_matches(term: &NodeSelectorTerm, node: &TemplateNode) -> bool {
    let expressions = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if expressions.is_empty() && fields.is_empty() {
        return false;
    }
    let name = BTreeMap::from([("metadata.name".to_owned(), node.name.clone())]);
    expressions
        .iter()
        .all(|r| requirement_matches(r, &node.labels))
        && fields.iter().all(|r| requirement_matches(r, &name))
}

/// The `NodeAffinity` filter: `spec.nodeSelector` labels all present with their values, and one
/// of the required node affinity terms matching.
pub fn matches_node_selection(pod: &Pod, node: &TemplateNode) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return true;
    };
    let selector_ok = spec
        .node_selector
        .iter()
        .flatten()
        .all(|(k, v)| node.labels.get(k) == Some(v));
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    selector_ok
        && required.is_none_or(|r| r.node_selector_terms.iter().any(|t| term_matches(t, node)))
}

/// The `NodeResourcesFit` filter (`fitsRequest`): for each resource the pod requests, what the
/// node already holds plus the pod stays within its allocatable (a resource it lacks is 0), and
/// the pod count too.
fn fits(request: &Resources, used: &Resources, node: &TemplateNode) -> bool {
    request.iter().all(|(resource, wanted)| {
        *wanted == 0
            || used.get(resource).copied().unwrap_or(0) + wanted
                <= node.allocatable.get(resource).copied().unwrap_or(0)
    })
}

/// Whether the pod could run on an empty copy of the template node at all (the orchestrator's
/// check before estimating: the scheduler's filters on a fresh template).
pub fn schedulable_on(pod: &Pod, node: &TemplateNode) -> bool {
    untolerated_taint(pod, &node.taints).is_none()
        && matches_node_selection(pod, node)
        && fits(&pod_requests(pod), &node.requested, node)
}

/// A group that can grow: its template and how many nodes it may still add
/// (`sng_capacity_threshold.go`: max size − target size).
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    pub group: String,
    pub template: TemplateNode,
    pub headroom: i64,
}

/// What growing one group would do.
#[derive(Clone, Debug, PartialEq)]
pub struct ExpansionOption {
    pub group: String,
    pub nodes: i64,
    /// The pods the new nodes would run, by name.
    pub pods: Vec<String>,
    /// The least-waste expander's score (lower is better).
    pub waste: f64,
}

fn score(pod: &Resources, node: &TemplateNode) -> f64 {
    // `decreasing_pod_orderer.go`: the pod's CPU and memory as fractions of the node's.
    let fraction = |resource: &str| {
        let allocatable = node.allocatable.get(resource).copied().unwrap_or(0);
        if allocatable > 0 {
            pod.get(resource).copied().unwrap_or(0) as f64 / allocatable as f64
        } else {
            0.0
        }
    };
    fraction("cpu") + fraction("memory")
}

/// `BinpackingNodeEstimator.Estimate`: the pods that can run on the template, biggest first, each
/// on the first new node with room, else on one more node while the group has headroom.
fn estimate(candidate: &Candidate, pods: &[&Pod]) -> (i64, Vec<String>) {
    let node = &candidate.template;
    let mut ordered: Vec<(&Pod, Resources)> = pods
        .iter()
        .filter(|pod| schedulable_on(pod, node))
        .map(|pod| (*pod, pod_requests(pod)))
        .collect();
    ordered.sort_by(|a, b| score(&b.1, node).total_cmp(&score(&a.1, node)));
    let mut nodes: Vec<Resources> = Vec::new();
    let mut placed = Vec::new();
    for (pod, request) in ordered {
        let index = match nodes.iter().position(|used| fits(&request, used, node)) {
            Some(index) => index,
            None if i64::try_from(nodes.len()).unwrap_or(i64::MAX) < candidate.headroom => {
                nodes.push(node.requested.clone());
                nodes.len() - 1
            }
            None => continue,
        };
        let used = &mut nodes[index];
        for (resource, value) in &request {
            *used.entry(resource.clone()).or_insert(0) += value;
        }
        placed.push(pod.name_any());
    }
    (i64::try_from(nodes.len()).unwrap_or(i64::MAX), placed)
}

/// `leastwaste.BestOptions`: (capacity − requested) / capacity for CPU plus the same for memory,
/// over the new nodes' capacity.
fn waste(node: &TemplateNode, count: i64, pods: &[&Pod]) -> f64 {
    let (mut cpu, mut memory) = (0i64, 0i64);
    for pod in pods {
        let request = pod_requests(pod);
        cpu += request.get("cpu").copied().unwrap_or(0);
        memory += request.get("memory").copied().unwrap_or(0);
    }
    let wasted = |available: i64, requested: i64| {
        if available > 0 {
            (available - requested) as f64 / available as f64
        } else {
            0.0
        }
    };
    let capacity = |resource: &str| node.capacity.get(resource).copied().unwrap_or(0) * count;
    wasted(capacity("cpu"), cpu) + wasted(capacity("memory"), memory)
}

/// Every group's option for `pods`, and the one the least-waste expander picks (ties: the first
/// group by name).
pub fn plan(
    candidates: &[Candidate],
    pods: &[Pod],
) -> (Vec<ExpansionOption>, Option<ExpansionOption>) {
    let pending: Vec<&Pod> = pods.iter().collect();
    let mut options: Vec<ExpansionOption> = candidates
        .iter()
        .filter(|c| c.headroom > 0)
        .filter_map(|candidate| {
            let (nodes, placed) = estimate(candidate, &pending);
            if nodes == 0 {
                return None;
            }
            let running: Vec<&Pod> = pending
                .iter()
                .copied()
                .filter(|p| placed.contains(&p.name_any()))
                .collect();
            Some(ExpansionOption {
                group: candidate.group.clone(),
                nodes,
                pods: placed,
                waste: waste(&candidate.template, nodes, &running),
            })
        })
        .collect();
    options.sort_by(|a, b| a.group.cmp(&b.group));
    let best = options
        .iter()
        .min_by(|a, b| a.waste.total_cmp(&b.waste))
        .cloned();
    (options, best)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::autoscaler::template::{CPU, LABELS, MAX_PODS, MEMORY, TAINTS, node_template_of};
    use crate::machine_api::MachineSet;

    fn template(name: &str, annotations: Value) -> TemplateNode {
        let set: MachineSet = serde_json::from_value(json!({
            "apiVersion": "machine.openshift.io/v1beta1", "kind": "MachineSet",
            "metadata": {"name": name, "annotations": annotations},
            "spec": {"replicas": 0, "template": {"spec": {}}}
        }))
        .unwrap();
        TemplateNode::from_annotations(&node_template_of(&set).unwrap())
    }

    fn pod(name: &str, spec: Value) -> Pod {
        let mut spec = spec;
        if spec.get("containers").is_none() {
            spec["containers"] =
                json!([{"name": "app", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]);
        }
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
    }

    fn windows() -> Value {
        json!({CPU: "4", MEMORY: "16Gi", LABELS: "kubernetes.io/os=windows", TAINTS: "os=Windows:NoSchedule", MAX_PODS: "250"})
    }

    fn linux() -> Value {
        json!({CPU: "4", MEMORY: "16Gi"})
    }

    fn windows_pod(name: &str) -> Pod {
        pod(
            name,
            json!({"nodeSelector": {"kubernetes.io/os": "windows"},
            "tolerations": [{"key": "os", "value": "Windows", "effect": "NoSchedule"}]}),
        )
    }

    /// A rule, the Windows set's annotations, the pending pods, and the group and node count chosen.
    type ScaleUpRule = (&'static str, Value, Vec<Pod>, Option<(String, i64)>);

    /// The scheduling rules behind a scale-up, each with its place in the source: a Windows set
    /// whose annotations say its taint is never grown for a Linux pod; one whose annotations do
    /// not is (the provider must write the taint), and maxPods bounds the pods per node.
    #[test]
    fn scale_up_rules_are_the_autoscalers() {
        let candidates = |win: Value| {
            vec![
                Candidate {
                    group: "linux".into(),
                    template: template("linux", linux()),
                    headroom: 3,
                },
                Candidate {
                    group: "win".into(),
                    template: template("win", win),
                    headroom: 3,
                },
            ]
        };
        let chosen =
            |win: Value, pods: &[Pod]| plan(&candidates(win), pods).1.map(|o| (o.group, o.nodes));
        let plain = pod("plain", json!({}));
        let linux_selected = pod(
            "linux-only",
            json!({"nodeSelector": {"kubernetes.io/os": "linux"}}),
        );
        let table: Vec<ScaleUpRule> = vec![
            (
                "TaintToleration: a pod without the toleration is never placed on a Windows template",
                windows(),
                vec![plain.clone()],
                Some(("linux".into(), 1)),
            ),
            (
                "NodeAffinity: a Windows pod (nodeSelector os=windows, toleration) grows the Windows set",
                windows(),
                vec![windows_pod("w")],
                Some(("win".into(), 1)),
            ),
            (
                "NodeAffinity: a Linux pod's nodeSelector never matches a Windows template",
                json!({CPU: "4", MEMORY: "16Gi", LABELS: "kubernetes.io/os=windows"}),
                vec![linux_selected],
                Some(("linux".into(), 1)),
            ),
            (
                "least-waste: without the taints annotation a plain pod lands on a Windows set that wastes less",
                json!({CPU: "2", MEMORY: "8Gi", LABELS: "kubernetes.io/os=windows"}),
                vec![plain.clone()],
                Some(("win".into(), 1)),
            ),
        ];
        for (rule, win, pods, expected) in table {
            assert_eq!(chosen(win, &pods), expected, "{rule}");
        }

        // maxPods: the kube-proxy pod takes one of a template's pods, so maxPods 3 leaves 2 per node.
        let small = Candidate {
            group: "small".into(),
            template: template("small", json!({CPU: "64", MEMORY: "256Gi", MAX_PODS: "3"})),
            headroom: 10,
        };
        let pods: Vec<Pod> = (0..5).map(|i| pod(&format!("p{i}"), json!({}))).collect();
        let (_, best) = plan(std::slice::from_ref(&small), &pods);
        assert_eq!(
            best.map(|o| o.nodes),
            Some(3),
            "maxPods bounds the pods per node"
        );
        let default_pods = Candidate {
            template: template("small", json!({CPU: "64", MEMORY: "256Gi"})),
            ..small.clone()
        };
        assert_eq!(
            default_pods.template.allocatable["pods"], 110,
            "defaultMaxPods"
        );
        // Headroom (max − target size) caps the nodes; pods beyond it are not placed.
        let (_, best) = plan(
            &[Candidate {
                headroom: 1,
                ..small
            }],
            &pods,
        );
        assert_eq!(best.map(|o| (o.nodes, o.pods.len())), Some((1, 2)));
        // A pod that fits no template grows nothing.
        let huge = pod(
            "huge",
            json!({"containers": [{"name": "a", "resources": {"requests": {"cpu": "100"}}}]}),
        );
        assert_eq!(plan(&candidates(windows()), &[huge]).1, None);
    }

    #[test]
    fn tolerations_and_affinity_follow_the_api() {
        let taint = |key: &str, value: Option<&str>, effect: &str| Taint {
            key: key.into(),
            value: value.map(str::to_owned),
            effect: effect.into(),
            time_added: None,
        };
        let toleration = |v: Value| -> Toleration { serde_json::from_value(v).unwrap() };
        let os = taint("os", Some("Windows"), "NoSchedule");
        assert!(tolerates(
            &toleration(json!({"key": "os", "operator": "Exists"})),
            &os
        ));
        assert!(
            tolerates(&toleration(json!({"operator": "Exists"})), &os),
            "an empty key with Exists matches every taint"
        );
        assert!(
            tolerates(&toleration(json!({"key": "os", "value": "Windows"})), &os),
            "no operator is Equal"
        );
        assert!(
            !tolerates(&toleration(json!({"key": "os", "value": "windows"})), &os),
            "values compare exactly"
        );
        assert!(!tolerates(
            &toleration(json!({"key": "os", "operator": "Exists", "effect": "NoExecute"})),
            &os
        ));
        let pod_without = pod("p", json!({}));
        assert!(
            untolerated_taint(&pod_without, &[taint("soft", None, "PreferNoSchedule")]).is_none(),
            "TaintToleration filters on NoSchedule and NoExecute only"
        );

        let node = template(
            "n",
            json!({CPU: "4", MEMORY: "4Gi", LABELS: "zone=a,size=8"}),
        );
        let affinity = |term: Value| {
            pod(
                "p",
                json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}}),
            )
        };
        assert!(matches_node_selection(
            &affinity(
                json!({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]})
            ),
            &node
        ));
        assert!(!matches_node_selection(
            &affinity(
                json!({"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]})
            ),
            &node
        ));
        assert!(matches_node_selection(
            &affinity(
                json!({"matchExpressions": [{"key": "size", "operator": "Gt", "values": ["4"]}]})
            ),
            &node
        ));
        assert!(
            !matches_node_selection(&affinity(json!({})), &node),
            "an empty term matches nothing"
        );
    }

    #[test]
    fn pod_requests_sum_containers_and_take_the_largest_init() {
        let p = pod(
            "p",
            json!({
                "containers": [
                    {"name": "a", "resources": {"requests": {"cpu": "250m", "memory": "1Gi"}}},
                    {"name": "b", "resources": {"requests": {"cpu": "250m"}}}
                ],
                "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "2"}}}],
                "overhead": {"memory": "64Mi"}
            }),
        );
        let requests = pod_requests(&p);
        assert_eq!(requests["cpu"], 2000);
        assert_eq!(requests["memory"], (1 << 30) + (64 << 20));
        assert_eq!(requests["pods"], 1);
    }

    #[test]
    fn templates_from_nodes_are_sanitized() {
        let now = Timestamp::now();
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "win-a", "labels": {"kubernetes.io/os": "windows", "kubernetes.io/hostname": "win-a"}},
            "spec": {"taints": [
                {"key": "os", "value": "Windows", "effect": "NoSchedule"},
                {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
                {"key": "startup-taint.cluster-autoscaler.kubernetes.io/x", "effect": "NoSchedule"}
            ]},
            "status": {
                "capacity": {"cpu": "4", "memory": "16Gi", "pods": "250"},
                "allocatable": {"cpu": "3500m", "memory": "14Gi", "pods": "250"},
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": (now - SignedDuration::from_mins(2)).to_string()}]
            }
        }))
        .unwrap();
        let template = TemplateNode::from_node(&node, "win");
        assert_eq!(
            template
                .taints
                .iter()
                .map(|t| t.key.as_str())
                .collect::<Vec<_>>(),
            ["os"]
        );
        assert_eq!(template.allocatable["cpu"], 3500);
        assert_eq!(template.capacity["cpu"], 4000);
        assert_eq!(
            template.labels["kubernetes.io/hostname"],
            "template-node-for-win"
        );
        assert!(is_good_template(&node, now));
        assert!(
            !is_good_template(
                &node,
                now - SignedDuration::from_mins(1) - SignedDuration::from_secs(30)
            ),
            "stabilizationDelay: Ready for more than a minute"
        );
    }
}
