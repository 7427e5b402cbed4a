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
//!
//! After the drain, the VM is deleted only once the Node lists no `status.volumesAttached`
//! ([`check_volumes`]): pods go before their volumes are detached, and a VM deleted with a volume
//! still attached can take the volume's data with it (openshift/machine-api-provider-nutanix
//! `pkg/actuators/machine/reconciler.go` `delete` and `machine_scope.go`
//! `nodeHasVolumesAttached`: requeue after 20 s while the linked Node lists any; a Node that is
//! gone counts as having none). The Go provider waits for ever; this one stops waiting for a Node
//! that has been unreachable for [`UNREACHABLE_VOLUME_WAIT`], because nothing detaches a volume
//! from it any more except the attach/detach controller's own forced detach after that time.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::lifecycle::DRAINED_CONDITION;
use crate::api::Machine;

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

/// Node labels that make a Node a control-plane Node for the drain (MAO
/// `pkg/controller/machine/drain_controller.go`, `nodeControlPlaneLabel`, `nodeMasterLabel` and
/// `isControlPlaneNode`: either label, whatever its value).
pub const CONTROL_PLANE_NODE_LABELS: [&str; 2] = [
    "node-role.kubernetes.io/control-plane",
    "node-role.kubernetes.io/master",
];

/// How long a control-plane drain that may not start waits before asking again (MAO
/// `isDrainAllowed`: `RequeueAfterError{RequeueAfter: 20 * time.Second}`).
pub const CONTROL_PLANE_DRAIN_RETRY: Duration = Duration::from_secs(20);

/// Whether the Node carries a control-plane label ([`CONTROL_PLANE_NODE_LABELS`]).
pub fn is_control_plane(node: &Node) -> bool {
    node.metadata.labels.as_ref().is_some_and(|labels| {
        CONTROL_PLANE_NODE_LABELS
            .iter()
            .any(|l| labels.contains_key(*l))
    })
}

/// Whether the Node is cordoned (`spec.unschedulable`): to MAO, a Node being drained.
pub fn is_cordoned(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
}

/// Whether the drain of `node` must first look at the other Nodes: it is a control-plane Node
/// not cordoned yet (a cordoned one continues its drain, a worker always drains).
pub fn needs_control_plane_check(node: &Node) -> bool {
    !is_cordoned(node) && is_control_plane(node)
}

/// Whether a drain may start now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DrainPermission {
    Allowed,
    /// Another control-plane Node is cordoned (this one's drain would take a second
    /// control-plane Node, and an etcd member, out at once): wait until it is gone or uncordoned.
    OtherControlPlaneCordoned {
        node: String,
    },
}

/// One control-plane Node drained at a time, as MAO's drain controller decides it
/// (`drain_controller.go`, `isDrainAllowed`): a Node already cordoned continues its drain; a
/// worker always drains; a control-plane Node drains only while no control-plane Node among
/// `nodes` is cordoned. MAO tells "being drained" by the cordon alone, so a control-plane Node
/// cordoned by hand or by an update holds the drain as well; the other Machines are not looked at.
pub fn drain_permission<'a>(
    node: &Node,
    nodes: impl IntoIterator<Item = &'a Node>,
) -> DrainPermission {
    if !needs_control_plane_check(node) {
        return DrainPermission::Allowed;
    }
    let own = node.metadata.name.as_deref();
    nodes
        .into_iter()
        .filter(|other| other.metadata.name.as_deref() != own)
        .filter(|other| is_control_plane(other) && is_cordoned(other))
        .filter_map(|other| other.metadata.name.clone())
        .min()
        .map_or(DrainPermission::Allowed, |node| {
            DrainPermission::OtherControlPlaneCordoned { node }
        })
}

/// How soon a deletion waiting for volumes looks again (the Go provider's requeue; a change of
/// the Node triggers it sooner).
pub const VOLUME_RECHECK: Duration = Duration::from_secs(20);

/// How long a deletion waits for the volumes of an unreachable Node: the attach/detach
/// controller's `maxWaitForUnmountDuration` (kubernetes `pkg/controller/volume/attachdetach`
/// `DefaultTimerConfig`, 6 minutes), after which it force-detaches the volumes of a Node that is
/// not Ready (`reconciler/reconciler.go`: `forceDetach := !isHealthy && forceDetachTimeoutExpired`).
/// A kubelet that stopped reporting never confirms an unmount, and its pods stay in the desired
/// state while they look running: past this, waiting longer only holds the deletion (a
/// MachineHealthCheck's remediation among them) for ever.
pub const UNREACHABLE_VOLUME_WAIT: SignedDuration = SignedDuration::from_mins(6);

/// Event reasons of the volume check.
pub mod volume_events {
    /// Normal: the Node still lists attached volumes; the VM waits.
    pub const WAITING: &str = "WaitingForVolumeDetach";
    /// Warning: the Node has been unreachable too long; the VM is deleted with volumes listed.
    pub const TIMED_OUT: &str = "VolumeDetachTimedOut";
    /// Normal: the linked Node is gone; nothing reports its volumes any more.
    pub const NODE_GONE: &str = "VolumeCheckSkipped";
    /// Normal: the VM's volume groups are being detached before its delete.
    pub const DETACHING_VOLUME_GROUPS: &str = "DetachVolumeGroups";
    /// Warning: Prism failed to detach a volume group.
    pub const DETACH_FAILED: &str = "FailedDetachVolumeGroup";
}

/// Whether the Machine's VM may be deleted, as far as the volumes of its Node go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VolumeCheck {
    /// The Node lists no attached volume (or the Machine has no Node): delete the VM.
    Clear,
    /// The linked Node no longer exists: delete the VM (the Go provider treats it as having no
    /// volumes).
    NodeGone { node: String },
    /// The Node still lists these volumes: wait for their detach.
    Wait {
        node: String,
        volumes: Vec<String>,
        /// The Node is unreachable; the wait ends at this time.
        unreachable_until: Option<Timestamp>,
    },
    /// The Node has been unreachable for [`UNREACHABLE_VOLUME_WAIT`] and still lists these
    /// volumes: delete the VM anyway.
    GiveUp {
        node: String,
        volumes: Vec<String>,
        unreachable_since: Timestamp,
    },
}

/// Since when the Node has been unreachable: its `Ready=Unknown` condition's
/// `lastTransitionTime` (the node lifecycle controller sets it when the kubelet stops posting);
/// `None` when the Node is reachable, or when that time is missing.
fn unreachable_since(node: &Node) -> Option<Timestamp> {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .find(|c| c.type_ == "Ready" && c.status == "Unknown")
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0)
}

/// The volumes the Node lists in `status.volumesAttached`.
pub fn attached_volumes(node: &Node) -> Vec<String> {
    node.status
        .as_ref()
        .and_then(|s| s.volumes_attached.as_ref())
        .into_iter()
        .flatten()
        .map(|v| v.name.clone())
        .collect()
}

/// When the deletion's drain ended: the `Drained=True` condition's `lastTransitionTime`.
pub fn drained_at(machine: &Machine) -> Option<Timestamp> {
    machine
        .status
        .iter()
        .flat_map(|s| &s.conditions)
        .find(|c| c.type_ == DRAINED_CONDITION && c.status == "True")
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0)
}

/// The volume check for the Machine linked to `node_name`, whose Node read as `node` (`None`: not
/// found). An unreachable Node's wait counts from its `Ready=Unknown` transition, or, when that
/// is not recorded, from `waiting_since` (when the drain ended, [`drained_at`]).
pub fn check_volumes(
    node_name: &str,
    node: Option<&Node>,
    waiting_since: Option<Timestamp>,
    now: Timestamp,
) -> VolumeCheck {
    let Some(node) = node else {
        return VolumeCheck::NodeGone {
            node: node_name.to_owned(),
        };
    };
    let volumes = attached_volumes(node);
    if volumes.is_empty() {
        return VolumeCheck::Clear;
    }
    let node_name = node_name.to_owned();
    if !is_unreachable(node) {
        return VolumeCheck::Wait {
            node: node_name,
            volumes,
            unreachable_until: None,
        };
    }
    let since = unreachable_since(node).or(waiting_since).unwrap_or(now);
    let until = since
        .checked_add(UNREACHABLE_VOLUME_WAIT)
        .unwrap_or(Timestamp::MAX);
    if now >= until {
        VolumeCheck::GiveUp {
            node: node_name,
            volumes,
            unreachable_since: since,
        }
    } else {
        VolumeCheck::Wait {
            node: node_name,
            volumes,
            unreachable_until: Some(until),
        }
    }
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

    fn node_with(ready: &str, since: Option<i64>, volumes: &[&str]) -> Node {
        let mut condition = json!({"type": "Ready", "status": ready});
        if let Some(since) = since {
            condition["lastTransitionTime"] = json!(Time(at(since)));
        }
        let attached: Vec<serde_json::Value> = volumes
            .iter()
            .map(|v| json!({"name": v, "devicePath": ""}))
            .collect();
        serde_json::from_value(json!({"metadata": {"name": "n"},
            "status": {"conditions": [condition], "volumesAttached": attached}}))
        .unwrap()
    }

    const VOLUME: &str = "kubernetes.io/csi/csi.nutanix.com^vg-1";
    const MINUTE: i64 = 60;

    #[test]
    fn the_vm_waits_for_the_nodes_volumes() {
        let now = at(100 * MINUTE);
        let check = |node: Option<&Node>, drained: Option<i64>| {
            check_volumes("n", node, drained.map(at), now)
        };
        assert_eq!(
            check(None, Some(0)),
            VolumeCheck::NodeGone { node: "n".into() }
        );
        assert_eq!(
            check(Some(&node_with("True", Some(0), &[])), Some(0)),
            VolumeCheck::Clear
        );
        // Reachable: waited for however long it takes, as the Go provider does.
        assert_eq!(
            check(Some(&node_with("True", Some(0), &[VOLUME])), Some(0)),
            VolumeCheck::Wait {
                node: "n".into(),
                volumes: vec![VOLUME.into()],
                unreachable_until: None
            }
        );
        assert_eq!(
            check(Some(&node_with("False", Some(0), &[VOLUME])), Some(0)),
            VolumeCheck::Wait {
                node: "n".into(),
                volumes: vec![VOLUME.into()],
                unreachable_until: None
            },
            "NotReady is not unreachable (MAO: Ready Unknown)"
        );
    }

    #[test]
    fn an_unreachable_node_is_waited_for_six_minutes() {
        let now = at(100 * MINUTE);
        let unreachable = |since: Option<i64>, drained: Option<i64>| {
            check_volumes(
                "n",
                Some(&node_with("Unknown", since, &[VOLUME])),
                drained.map(at),
                now,
            )
        };
        // Unreachable for 5 minutes: wait until 6 minutes have passed.
        assert_eq!(
            unreachable(Some(95 * MINUTE), Some(99 * MINUTE)),
            VolumeCheck::Wait {
                node: "n".into(),
                volumes: vec![VOLUME.into()],
                unreachable_until: Some(at(101 * MINUTE))
            }
        );
        // Unreachable for 6 minutes, however recent the drain (a MachineHealthCheck's
        // remediation of a dead node): give up at once.
        assert_eq!(
            unreachable(Some(94 * MINUTE), Some(99 * MINUTE)),
            VolumeCheck::GiveUp {
                node: "n".into(),
                volumes: vec![VOLUME.into()],
                unreachable_since: at(94 * MINUTE)
            }
        );
        // No transition time recorded: counted from the end of the drain.
        assert!(matches!(
            unreachable(None, Some(95 * MINUTE)),
            VolumeCheck::Wait { .. }
        ));
        assert!(matches!(
            unreachable(None, Some(94 * MINUTE)),
            VolumeCheck::GiveUp { .. }
        ));
        // Times at the end of the range do not overflow.
        assert!(matches!(
            check_volumes(
                "n",
                Some(&node_with("Unknown", None, &[VOLUME])),
                Some(Timestamp::MAX),
                now
            ),
            VolumeCheck::Wait { .. }
        ));
    }

    fn labelled_node(name: &str, label: Option<&str>, cordoned: bool) -> Node {
        let labels: serde_json::Map<String, serde_json::Value> = label
            .map(|l| (l.to_owned(), json!("")))
            .into_iter()
            .collect();
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels},
            "spec": {"unschedulable": cordoned}}))
        .unwrap()
    }

    const MASTER: &str = "node-role.kubernetes.io/master";
    const CONTROL_PLANE: &str = "node-role.kubernetes.io/control-plane";

    #[test]
    fn one_control_plane_node_is_drained_at_a_time() {
        let master_0 = labelled_node("master-0", Some(MASTER), false);
        let master_1_draining = labelled_node("master-1", Some(CONTROL_PLANE), true);
        let master_2 = labelled_node("master-2", Some(MASTER), false);
        let worker_draining =
            labelled_node("worker-0", Some("node-role.kubernetes.io/worker"), true);
        let worker = labelled_node("worker-1", None, false);
        let all = [
            &master_0,
            &master_1_draining,
            &master_2,
            &worker_draining,
            &worker,
        ];
        // Another control-plane Node is cordoned: wait for it, whichever label it carries.
        assert_eq!(
            drain_permission(&master_0, all),
            DrainPermission::OtherControlPlaneCordoned {
                node: "master-1".into()
            }
        );
        // A cordoned worker does not hold a control-plane drain.
        assert_eq!(
            drain_permission(&master_0, [&master_0, &master_2, &worker_draining]),
            DrainPermission::Allowed
        );
        // The one cordoned already continues its drain.
        assert_eq!(
            drain_permission(&master_1_draining, all),
            DrainPermission::Allowed
        );
        // Workers always drain.
        assert_eq!(drain_permission(&worker, all), DrainPermission::Allowed);
        assert!(!needs_control_plane_check(&worker));
        assert!(!needs_control_plane_check(&master_1_draining));
        assert!(needs_control_plane_check(&master_0));
        // The Node itself, as listed, is not "another" (a list read after its cordon).
        let master_0_listed_cordoned = labelled_node("master-0", Some(MASTER), true);
        assert_eq!(
            drain_permission(&master_0, [&master_0_listed_cordoned, &master_2]),
            DrainPermission::Allowed
        );
    }

    #[test]
    fn the_drain_ends_when_drained_turns_true() {
        let machine: Machine = serde_json::from_value(json!({
            "metadata": {"name": "m"}, "spec": {},
            "status": {"conditions": [
                {"type": "Drainable", "status": "True", "lastTransitionTime": Time(at(1))},
                {"type": "Drained", "status": "True", "lastTransitionTime": Time(at(7))}]}}))
        .unwrap();
        assert_eq!(drained_at(&machine), Some(at(7)));
        let mut not_yet = machine.clone();
        if let Some(status) = not_yet.status.as_mut() {
            status.conditions[1].status = "False".into();
        }
        assert_eq!(drained_at(&not_yet), None);
    }
}
