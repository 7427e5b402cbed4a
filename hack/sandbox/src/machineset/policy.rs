//! The pure part of the MachineSet replica controller: which Machines belong to a set, which ones
//! to delete when it shrinks, what a new Machine looks like, and the replica counts of its status.
//!
//! Each rule follows the machine-api-operator's `pkg/controller/machineset` (`controller.go`,
//! `delete_policy.go`, `status.go`), quirks included, because the sandbox must behave like the
//! cluster the provider will meet, not like a tidier one.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::core::{Selector, SelectorExt};
use kube::{Resource, ResourceExt};
use nutanix_machine_controller::api::{Machine, MachineSet};

/// Annotation that makes a Machine the first to go when its MachineSet shrinks (the cluster
/// autoscaler writes it before lowering the replicas).
pub const DELETE_MACHINE_ANNOTATION: &str = "machine.openshift.io/delete-machine";
/// The previous key of [`DELETE_MACHINE_ANNOTATION`]. The machine-api-operator still reads it, but
/// only under the `Oldest` policy (see [`delete_priority`]).
pub const OLD_DELETE_MACHINE_ANNOTATION: &str = "machine.openshift.io/cluster-api-delete-machine";

const MUST_DELETE: f64 = 100.0;
const BETTER_DELETE: f64 = 50.0;
const PREFER_DELETE: f64 = 40.0;
const COULD_DELETE: f64 = 20.0;
const MUST_NOT_DELETE: f64 = 0.0;
/// Age scale of the `Oldest`/`Newest` curve: a Machine ten days old has priority 63.
const SECONDS_PER_TEN_DAYS: f64 = 864_000.0;

/// `spec.deletePolicy` of a MachineSet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeletePolicy {
    /// The default (also for an empty value): Machines marked for deletion or failed first, then
    /// Machines without a Node, then any.
    Random,
    /// The oldest Machines first.
    Oldest,
    /// The newest Machines first.
    Newest,
}

impl DeletePolicy {
    /// Reads `spec.deletePolicy`; `None` or `""` is `Random`. An unknown value is returned as the
    /// error, as the machine-api-operator refuses to scale down with it.
    pub fn parse(value: Option<&str>) -> Result<Self, String> {
        match value.unwrap_or("") {
            "" | "Random" => Ok(Self::Random),
            "Oldest" => Ok(Self::Oldest),
            "Newest" => Ok(Self::Newest),
            other => Err(other.to_owned()),
        }
    }
}

fn annotation_set(machine: &Machine, key: &str) -> bool {
    machine
        .annotations()
        .get(key)
        .is_some_and(|v| !v.is_empty())
}

fn has_error(machine: &Machine) -> bool {
    machine
        .status
        .as_ref()
        .is_some_and(|s| s.error_reason.is_some() || s.error_message.is_some())
}

fn has_node_ref(machine: &Machine) -> bool {
    machine
        .status
        .as_ref()
        .is_some_and(|s| s.node_ref.is_some())
}

fn oldest_priority(machine: &Machine, now: Timestamp) -> f64 {
    if machine.metadata.deletion_timestamp.is_some()
        || annotation_set(machine, DELETE_MACHINE_ANNOTATION)
        || annotation_set(machine, OLD_DELETE_MACHINE_ANNOTATION)
        || has_error(machine)
    {
        return MUST_DELETE;
    }
    let Some(created) = machine.metadata.creation_timestamp.as_ref() else {
        return MUST_NOT_DELETE;
    };
    let age = now.duration_since(created.0).as_secs_f64();
    if age < 0.0 {
        return MUST_NOT_DELETE;
    }
    MUST_DELETE * (1.0 - (-age / SECONDS_PER_TEN_DAYS).exp())
}

/// How eager the policy is to delete `machine` (higher first), as the machine-api-operator
/// computes it. Its quirks are kept: the old annotation key counts only under `Oldest`, and under
/// `Newest` a Machine carrying only the old key gets the lowest priority (that policy subtracts the
/// `Oldest` priority, which the old key sets to the maximum).
pub fn delete_priority(policy: DeletePolicy, machine: &Machine, now: Timestamp) -> f64 {
    match policy {
        DeletePolicy::Oldest => oldest_priority(machine, now),
        DeletePolicy::Newest => {
            if machine.metadata.deletion_timestamp.is_some()
                || annotation_set(machine, DELETE_MACHINE_ANNOTATION)
                || has_error(machine)
            {
                MUST_DELETE
            } else {
                MUST_DELETE - oldest_priority(machine, now)
            }
        }
        DeletePolicy::Random => {
            if machine.metadata.deletion_timestamp.is_some() {
                MUST_DELETE
            } else if annotation_set(machine, DELETE_MACHINE_ANNOTATION) || has_error(machine) {
                BETTER_DELETE
            } else if !has_node_ref(machine) {
                // No Node yet, so no workload to disturb.
                PREFER_DELETE
            } else {
                COULD_DELETE
            }
        }
    }
}

/// The `count` Machines to delete, highest priority first. `machines` comes sorted by name (as
/// the machine-api-operator sorts them); equal priorities keep that order.
pub fn machines_to_delete(
    machines: &[Machine],
    count: usize,
    policy: DeletePolicy,
    now: Timestamp,
) -> Vec<&Machine> {
    let mut ranked: Vec<(f64, &Machine)> = machines
        .iter()
        .map(|m| (delete_priority(policy, m, now), m))
        .collect();
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0));
    ranked.into_iter().take(count).map(|(_, m)| m).collect()
}

/// The controller reference a MachineSet puts on its Machines.
pub fn controller_ref(set: &MachineSet) -> Option<OwnerReference> {
    set.controller_owner_ref(&())
}

fn controller_of(machine: &Machine) -> Option<&OwnerReference> {
    machine
        .metadata
        .owner_references
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find(|r| r.controller == Some(true))
}

/// Whether `machine` has no controller at all (an orphan the set may adopt).
pub fn is_orphan(machine: &Machine) -> bool {
    controller_of(machine).is_none()
}

/// Whether the set ignores `machine`: controlled by another object, being deleted, or not
/// matching the selector.
pub fn is_excluded(set: &MachineSet, selector: &Selector, machine: &Machine) -> bool {
    if let Some(owner) = controller_of(machine)
        && set.metadata.uid.as_deref() != Some(owner.uid.as_str())
    {
        return true;
    }
    machine.metadata.deletion_timestamp.is_some() || !selector.matches(machine.labels())
}

/// The Machine the set creates: `generateName: <set>-`, the template's labels, annotations and
/// spec, and the set as controller.
pub fn new_machine(set: &MachineSet) -> Machine {
    let template = &set.spec.template;
    let template_meta = template.metadata.clone().unwrap_or_default();
    let mut machine = Machine::new("", template.spec.clone());
    machine.metadata = ObjectMeta {
        generate_name: Some(format!("{}-", set.name_any())),
        namespace: set.namespace(),
        labels: template_meta.labels,
        annotations: template_meta.annotations,
        owner_references: controller_ref(set).map(|r| vec![r]),
        ..ObjectMeta::default()
    };
    machine
}

/// The replica counts of a MachineSet's status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplicaCounts {
    /// Machines the set owns (not being deleted).
    pub replicas: i32,
    /// Of those, Machines carrying every label of the template.
    pub fully_labeled: i32,
    /// Of those, Machines whose nodeRef names a Ready Node.
    pub ready: i32,
    /// Of the ready ones, those Ready for at least `minReadySeconds`.
    pub available: i32,
}

fn ready_since(node: &Node) -> Option<Option<Timestamp>> {
    node.status
        .as_ref()?
        .conditions
        .as_deref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .filter(|c| c.status == "True")
        .map(|c| c.last_transition_time.as_ref().map(|t| t.0))
}

/// Counts `machines` (the set's, after filtering) against the Nodes by name.
pub fn count_replicas(
    set: &MachineSet,
    machines: &[Machine],
    nodes: &BTreeMap<String, Node>,
    now: Timestamp,
) -> ReplicaCounts {
    let template_labels = set
        .spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    let min_ready = i64::from(set.spec.min_ready_seconds.unwrap_or(0).max(0));
    let mut counts = ReplicaCounts {
        replicas: i32::try_from(machines.len()).unwrap_or(i32::MAX),
        ..ReplicaCounts::default()
    };
    for machine in machines {
        let labels = machine.labels();
        if template_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
        {
            counts.fully_labeled += 1;
        }
        let node = machine
            .status
            .as_ref()
            .and_then(|s| s.node_ref.as_ref())
            .and_then(|r| r.name.as_ref())
            .and_then(|name| nodes.get(name));
        let Some(since) = node.and_then(ready_since) else {
            continue;
        };
        counts.ready += 1;
        let available =
            min_ready == 0 || since.is_some_and(|t| now.duration_since(t).as_secs() >= min_ready);
        if available {
            counts.available += 1;
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use jiff::SignedDuration;
    use serde_json::json;

    use super::*;

    fn machine(name: &str, age_secs: i64, now: Timestamp, extra: serde_json::Value) -> Machine {
        let mut value = json!({
            "apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
            "metadata": {"name": name, "namespace": "ns", "labels": {"set": "a"},
                "creationTimestamp": (now - SignedDuration::from_secs(age_secs)).to_string()},
            "spec": {}
        });
        if let Some(meta) = extra.get("metadata").and_then(|m| m.as_object()) {
            for (k, v) in meta {
                value["metadata"][k] = v.clone();
            }
        }
        if let Some(status) = extra.get("status") {
            value["status"] = status.clone();
        }
        serde_json::from_value(value).unwrap()
    }

    fn names(machines: Vec<&Machine>) -> Vec<String> {
        machines.iter().map(|m| m.name_any()).collect()
    }

    fn linked() -> serde_json::Value {
        json!({"status": {"nodeRef": {"kind": "Node", "name": "n"}}})
    }

    #[test]
    fn delete_policy_values() {
        assert_eq!(DeletePolicy::parse(None), Ok(DeletePolicy::Random));
        assert_eq!(DeletePolicy::parse(Some("")), Ok(DeletePolicy::Random));
        assert_eq!(
            DeletePolicy::parse(Some("Oldest")),
            Ok(DeletePolicy::Oldest)
        );
        assert_eq!(
            DeletePolicy::parse(Some("Newest")),
            Ok(DeletePolicy::Newest)
        );
        assert_eq!(
            DeletePolicy::parse(Some("oldest")),
            Err("oldest".to_owned())
        );
    }

    #[test]
    fn random_prefers_deleting_then_annotated_or_failed_then_nodeless() {
        let now = Timestamp::now();
        let machines = vec![
            machine("a-linked", 10, now, linked()),
            machine("b-nodeless", 10, now, json!({})),
            machine(
                "c-annotated",
                10,
                now,
                json!({"metadata": {"annotations": {DELETE_MACHINE_ANNOTATION: "2026-01-01T00:00:00Z"}},
                       "status": {"nodeRef": {"kind": "Node", "name": "n"}}}),
            ),
            machine(
                "d-deleting",
                10,
                now,
                json!({"metadata": {"deletionTimestamp": now.to_string(), "finalizers": ["f"]}}),
            ),
            machine(
                "e-failed",
                10,
                now,
                json!({"status": {"errorReason": "InvalidConfiguration", "nodeRef": {"kind": "Node", "name": "n"}}}),
            ),
        ];
        assert_eq!(
            names(machines_to_delete(&machines, 5, DeletePolicy::Random, now)),
            [
                "d-deleting",
                "c-annotated",
                "e-failed",
                "b-nodeless",
                "a-linked"
            ]
        );
        assert_eq!(
            names(machines_to_delete(&machines, 2, DeletePolicy::Random, now)),
            ["d-deleting", "c-annotated"]
        );
    }

    #[test]
    fn random_ignores_the_old_annotation_as_the_operator_does() {
        let now = Timestamp::now();
        let old = machine(
            "a-old-key",
            10,
            now,
            json!({"metadata": {"annotations": {OLD_DELETE_MACHINE_ANNOTATION: "yes"}},
                   "status": {"nodeRef": {"kind": "Node", "name": "n"}}}),
        );
        assert_eq!(
            delete_priority(DeletePolicy::Random, &old, now),
            COULD_DELETE
        );
        assert_eq!(
            delete_priority(DeletePolicy::Oldest, &old, now),
            MUST_DELETE
        );
        assert_eq!(
            delete_priority(DeletePolicy::Newest, &old, now),
            MUST_NOT_DELETE
        );
    }

    #[test]
    fn oldest_and_newest_order_by_age_after_the_annotation() {
        let now = Timestamp::now();
        let machines = vec![
            machine("a-young", 60, now, linked()),
            machine("b-old", 86_400, now, linked()),
            machine("c-middle", 3_600, now, linked()),
            machine(
                "d-young-annotated",
                1,
                now,
                json!({"metadata": {"annotations": {DELETE_MACHINE_ANNOTATION: "t"}}}),
            ),
        ];
        assert_eq!(
            names(machines_to_delete(&machines, 4, DeletePolicy::Oldest, now)),
            ["d-young-annotated", "b-old", "c-middle", "a-young"]
        );
        assert_eq!(
            names(machines_to_delete(&machines, 4, DeletePolicy::Newest, now)),
            ["d-young-annotated", "a-young", "c-middle", "b-old"]
        );
    }

    #[test]
    fn a_machine_from_the_future_or_without_creation_time_is_kept_under_oldest() {
        let now = Timestamp::now();
        let future = machine("f", -60, now, json!({}));
        assert_eq!(
            delete_priority(DeletePolicy::Oldest, &future, now),
            MUST_NOT_DELETE
        );
        let mut undated = machine("u", 0, now, json!({}));
        undated.metadata.creation_timestamp = None;
        assert_eq!(
            delete_priority(DeletePolicy::Oldest, &undated, now),
            MUST_NOT_DELETE
        );
    }

    fn machine_set() -> MachineSet {
        serde_json::from_value(json!({
            "apiVersion": "machine.openshift.io/v1beta1", "kind": "MachineSet",
            "metadata": {"name": "workers", "namespace": "ns", "uid": "set-uid"},
            "spec": {"replicas": 2, "minReadySeconds": 30,
                "selector": {"matchLabels": {"set": "a"}},
                "template": {
                    "metadata": {"labels": {"set": "a", "role": "worker"}, "annotations": {"note": "x"}},
                    "spec": {"providerSpec": {"value": {"vcpuSockets": 2}}, "taints": [{"key": "k", "effect": "NoSchedule"}]}}}
        }))
        .unwrap()
    }

    #[test]
    fn new_machines_copy_the_template_and_name_the_set_as_controller() {
        let set = machine_set();
        let m = new_machine(&set);
        assert_eq!(m.metadata.generate_name.as_deref(), Some("workers-"));
        assert_eq!(m.metadata.name, None);
        assert_eq!(m.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(m.labels()["role"], "worker");
        assert_eq!(m.annotations()["note"], "x");
        assert_eq!(m.spec, set.spec.template.spec);
        let owner = &m.metadata.owner_references.unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
            ("MachineSet", "workers", "set-uid")
        );
        assert_eq!(owner.controller, Some(true));
        assert_eq!(owner.api_version, "machine.openshift.io/v1beta1");
    }

    #[test]
    fn exclusion_by_controller_deletion_and_selector() {
        let now = Timestamp::now();
        let set = machine_set();
        let selector = Selector::try_from(set.spec.selector.clone()).unwrap();
        let mine = machine(
            "mine",
            1,
            now,
            json!({"metadata": {"ownerReferences": [{"apiVersion": "machine.openshift.io/v1beta1",
                "kind": "MachineSet", "name": "workers", "uid": "set-uid", "controller": true}]}}),
        );
        let theirs = machine(
            "theirs",
            1,
            now,
            json!({"metadata": {"ownerReferences": [{"apiVersion": "machine.openshift.io/v1beta1",
                "kind": "MachineSet", "name": "other", "uid": "other-uid", "controller": true}]}}),
        );
        let orphan = machine("orphan", 1, now, json!({}));
        let unlabeled = machine("unlabeled", 1, now, json!({"metadata": {"labels": {}}}));
        let deleting = machine(
            "deleting",
            1,
            now,
            json!({"metadata": {"deletionTimestamp": now.to_string()}}),
        );
        assert!(!is_excluded(&set, &selector, &mine));
        assert!(!is_excluded(&set, &selector, &orphan));
        assert!(is_orphan(&orphan) && !is_orphan(&mine));
        assert!(is_excluded(&set, &selector, &theirs));
        assert!(is_excluded(&set, &selector, &unlabeled));
        assert!(is_excluded(&set, &selector, &deleting));
    }

    fn node(name: &str, ready: &str, since: Timestamp) -> (String, Node) {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": name},
            "status": {"conditions": [{"type": "Ready", "status": ready, "lastTransitionTime": since.to_string()}]}
        }))
        .unwrap();
        (name.to_owned(), node)
    }

    #[test]
    fn counts_ready_and_available_through_node_refs() {
        let now = Timestamp::now();
        let set = machine_set();
        let with_node = |name: &str, node: &str, labels: serde_json::Value| {
            machine(
                name,
                100,
                now,
                json!({"metadata": {"labels": labels}, "status": {"nodeRef": {"kind": "Node", "name": node}}}),
            )
        };
        let full = json!({"set": "a", "role": "worker"});
        let machines = vec![
            with_node("m1", "long-ready", full.clone()),
            with_node("m2", "just-ready", full.clone()),
            with_node("m3", "not-ready", json!({"set": "a"})),
            with_node("m4", "missing", full),
            machine("m5", 100, now, json!({})),
        ];
        let nodes = BTreeMap::from([
            node("long-ready", "True", now - SignedDuration::from_secs(300)),
            node("just-ready", "True", now - SignedDuration::from_secs(5)),
            node("not-ready", "False", now - SignedDuration::from_secs(300)),
        ]);
        assert_eq!(
            count_replicas(&set, &machines, &nodes, now),
            ReplicaCounts {
                replicas: 5,
                fully_labeled: 3,
                ready: 2,
                available: 1
            }
        );
        let mut no_wait = set.clone();
        no_wait.spec.min_ready_seconds = None;
        assert_eq!(
            count_replicas(&no_wait, &machines, &nodes, now).available,
            2
        );
    }
}
