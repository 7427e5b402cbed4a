//! Which pods a drain evicts, skips or waits for, as the machine-api-operator's drain controller
//! does it (`kubectl drain` with force, ignore DaemonSets, delete emptyDir data).
//!
//! - Mirror pods (static pods, annotation `kubernetes.io/config.mirror`) and pods a DaemonSet
//!   controls are left alone: evicting them is pointless (the kubelet or the DaemonSet brings them
//!   back, and a DaemonSet pod tolerates the cordon).
//! - Every other pod is evicted through the Eviction API, so PodDisruptionBudgets are respected;
//!   a blocked eviction is retried later. Pods not managed by a controller are evicted too
//!   ("force").
//! - A pod already being deleted is waited for. On an unreachable node (its `Ready` condition is
//!   `Unknown`: the kubelet cannot confirm anything) evictions use a 1-second grace period, and a
//!   pod whose deletion started more than 1 second ago counts as gone, as MAO does.

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// Annotation of a mirror pod.
pub const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// Grace period of evictions from an unreachable node, in seconds.
pub const UNREACHABLE_GRACE_SECONDS: i64 = 1;
/// How long a deleting pod on an unreachable node is waited for.
pub const UNREACHABLE_SKIP_WAIT: SignedDuration = SignedDuration::from_secs(1);

/// A pod, by namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for PodRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Why a pod is not evicted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SkipReason {
    Mirror,
    DaemonSet,
    /// Deleting on an unreachable node for longer than [`UNREACHABLE_SKIP_WAIT`].
    StuckOnUnreachableNode,
}

/// What to do with the pods of a Node being drained.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DrainPlan {
    pub evict: Vec<PodRef>,
    /// Already being deleted: wait until they are gone.
    pub waiting: Vec<PodRef>,
    pub skipped: Vec<(PodRef, SkipReason)>,
    /// Grace period for the evictions (`None`: the pods' own).
    pub grace_period_seconds: Option<i64>,
}

impl DrainPlan {
    /// Nothing left to evict or wait for.
    pub fn is_done(&self) -> bool {
        self.evict.is_empty() && self.waiting.is_empty()
    }
}

/// Whether the Node's kubelet stopped reporting (`Ready` is `Unknown`).
pub fn is_unreachable(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "Unknown")
}

fn pod_ref(pod: &Pod) -> PodRef {
    PodRef {
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        name: pod.metadata.name.clone().unwrap_or_default(),
    }
}

fn is_mirror(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(MIRROR_POD_ANNOTATION))
}

fn is_daemon_set_pod(pod: &Pod) -> bool {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|owner| owner.controller == Some(true) && owner.kind == "DaemonSet")
}

/// The drain plan for `pods` (the pods bound to the Node) at `now`.
pub fn plan_drain(pods: &[Pod], unreachable: bool, now: Timestamp) -> DrainPlan {
    let mut plan = DrainPlan {
        grace_period_seconds: unreachable.then_some(UNREACHABLE_GRACE_SECONDS),
        ..DrainPlan::default()
    };
    for pod in pods {
        let reference = pod_ref(pod);
        if is_mirror(pod) {
            plan.skipped.push((reference, SkipReason::Mirror));
        } else if is_daemon_set_pod(pod) {
            plan.skipped.push((reference, SkipReason::DaemonSet));
        } else if let Some(since) = &pod.metadata.deletion_timestamp {
            if unreachable && now.duration_since(since.0) > UNREACHABLE_SKIP_WAIT {
                plan.skipped
                    .push((reference, SkipReason::StuckOnUnreachableNode));
            } else {
                plan.waiting.push(reference);
            }
        } else {
            plan.evict.push(reference);
        }
    }
    plan.evict.sort();
    plan.waiting.sort();
    plan
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    use super::*;

    fn pod(name: &str, extra: serde_json::Value) -> Pod {
        let mut value = json!({"metadata": {"namespace": "app", "name": name}});
        if let (Some(meta), Some(more)) = (value["metadata"].as_object_mut(), extra.as_object()) {
            meta.extend(more.clone());
        }
        serde_json::from_value(value).unwrap()
    }

    fn reference(name: &str) -> PodRef {
        PodRef {
            namespace: "app".into(),
            name: name.into(),
        }
    }

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(seconds).unwrap()
    }

    fn pods() -> Vec<Pod> {
        vec![
            pod(
                "web-2",
                json!({"ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "r", "controller": true}]}),
            ),
            pod("web-1", json!({})),
            pod(
                "static",
                json!({"annotations": {MIRROR_POD_ANNOTATION: "x"}}),
            ),
            pod(
                "dns",
                json!({"ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "dns", "uid": "d", "controller": true}]}),
            ),
            pod("old", json!({"deletionTimestamp": Time(at(100))})),
        ]
    }

    #[test]
    fn reachable_node() {
        let plan = plan_drain(&pods(), false, at(200));
        assert_eq!(plan.evict, [reference("web-1"), reference("web-2")]);
        assert_eq!(plan.waiting, [reference("old")]);
        assert_eq!(
            plan.skipped,
            [
                (reference("static"), SkipReason::Mirror),
                (reference("dns"), SkipReason::DaemonSet)
            ]
        );
        assert_eq!(plan.grace_period_seconds, None);
        assert!(!plan.is_done());
    }

    #[test]
    fn unreachable_node_uses_short_grace_and_skips_stuck_pods() {
        let plan = plan_drain(&pods(), true, at(200));
        assert_eq!(plan.grace_period_seconds, Some(1));
        assert!(plan.waiting.is_empty());
        assert!(
            plan.skipped
                .contains(&(reference("old"), SkipReason::StuckOnUnreachableNode))
        );
        let just_deleted = plan_drain(&pods(), true, at(100));
        assert_eq!(just_deleted.waiting, [reference("old")]);
    }

    #[test]
    fn only_skipped_pods_left_is_done() {
        let left: Vec<Pod> = pods().into_iter().skip(2).take(2).collect();
        assert!(plan_drain(&left, false, at(0)).is_done());
    }

    #[test]
    fn unreachable_means_ready_unknown() {
        let node = |status: &str| -> Node {
            serde_json::from_value(json!({"metadata": {"name": "n"},
                "status": {"conditions": [{"type": "Ready", "status": status}]}}))
            .unwrap()
        };
        assert!(is_unreachable(&node("Unknown")));
        assert!(!is_unreachable(&node("True")));
        assert!(!is_unreachable(&node("False")));
    }
}
