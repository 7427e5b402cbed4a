//! The pure part of the MachineSet replica controller: which Machines belong to a set, which ones
//! to delete when it shrinks, what a new Machine looks like, and the replica counts of its status.
//!
//! Each rule follows openshift/machine-api-operator `pkg/controller/machineset` (`controller.go`,
//! `delete_policy.go`, `machine.go`, `status.go`, `util.go`), quirks included, cited at the code
//! that simulates it: the sandbox must behave like the cluster the provider will meet, not like a
//! tidier one.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use kube::core::{Selector, SelectorExt};
use kube::{Resource, ResourceExt};

use crate::machine_api::{Machine, MachineSet};

/// Annotation that makes a Machine one of the first to go when its MachineSet shrinks (the cluster
/// autoscaler writes it before lowering the replicas): `delete_policy.go`, `DeleteNodeAnnotation`.
pub const DELETE_MACHINE_ANNOTATION: &str = "machine.openshift.io/delete-machine";
/// The previous key of [`DELETE_MACHINE_ANNOTATION`], read by every policy alike:
/// `delete_policy.go`, `oldDeleteNodeAnnotation`.
pub const OLD_DELETE_MACHINE_ANNOTATION: &str = "machine.openshift.io/cluster-api-delete-machine";

// `delete_policy.go`: the priorities and the age scale of the Oldest/Newest curve.
const MUST_DELETE: f64 = 100.0;
const BETTER_DELETE: f64 = 50.0;
const PREFER_DELETE: f64 = 40.0;
const COULD_DELETE: f64 = 20.0;
const MUST_NOT_DELETE: f64 = 0.0;
const SECONDS_PER_HUNDRED_DAYS: f64 = 8_640_000.0;

/// `spec.deletePolicy` of a MachineSet (`delete_policy.go`, `getDeletePriorityFunc`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeletePolicy {
    /// The default (also for an empty value).
    Random,
    Oldest,
    Newest,
}

impl DeletePolicy {
    /// `""` and `Random` are `Random`; another unknown value is returned as the error, as the
    /// operator refuses to scale down with it.
    pub fn parse(value: &str) -> Result<Self, String> {
        match value {
            "" | "Random" => Ok(Self::Random),
            "Oldest" => Ok(Self::Oldest),
            "Newest" => Ok(Self::Newest),
            other => Err(other.to_owned()),
        }
    }
}

fn is_deleting(machine: &Machine) -> bool {
    machine.metadata.deletion_timestamp.is_some()
}

/// Either delete annotation with a non-empty value (`delete_policy.go`: `!= ""` on each key).
fn marked_for_deletion(machine: &Machine) -> bool {
    let annotations = machine.annotations();
    [DELETE_MACHINE_ANNOTATION, OLD_DELETE_MACHINE_ANNOTATION]
        .iter()
        .any(|key| annotations.get(*key).is_some_and(|v| !v.is_empty()))
}

fn has_error(machine: &Machine) -> bool {
    machine
        .status
        .as_ref()
        .is_some_and(|s| s.error_reason.is_some() || s.error_message.is_some())
}

/// `oldestDeletePriority`: 100 for a deleting, annotated or failed Machine; 0 without a creation
/// time or created in the future; else 50·(1 − e^(−age/100 days)).
fn oldest_priority(machine: &Machine, now: Timestamp) -> f64 {
    if is_deleting(machine) || marked_for_deletion(machine) || has_error(machine) {
        return MUST_DELETE;
    }
    let Some(created) = machine.metadata.creation_timestamp.as_ref() else {
        return MUST_NOT_DELETE;
    };
    let age = now.duration_since(created.0).as_secs_f64();
    if age < 0.0 {
        return MUST_NOT_DELETE;
    }
    BETTER_DELETE * (1.0 - (-age / SECONDS_PER_HUNDRED_DAYS).exp())
}

/// How eager the policy is to delete `machine` (higher first), as `delete_policy.go` computes it.
pub fn delete_priority(policy: DeletePolicy, machine: &Machine, now: Timestamp) -> f64 {
    match policy {
        DeletePolicy::Oldest => oldest_priority(machine, now),
        // `newestDeletePriority`: the same marks at 100, else 100 − the Oldest priority.
        DeletePolicy::Newest => {
            if is_deleting(machine) || marked_for_deletion(machine) || has_error(machine) {
                MUST_DELETE
            } else {
                MUST_DELETE - oldest_priority(machine, now)
            }
        }
        // `randomDeletePolicy`.
        DeletePolicy::Random => {
            if is_deleting(machine) {
                MUST_DELETE
            } else if marked_for_deletion(machine) || has_error(machine) {
                BETTER_DELETE
            } else if machine.node_ref().is_none() {
                PREFER_DELETE
            } else {
                COULD_DELETE
            }
        }
    }
}

/// The `count` Machines to delete (`getMachinesToDeletePrioritized`): all of them when `count`
/// reaches their number (in the given order), none for 0, else the highest priorities first.
/// `machines` comes sorted by name, as `controller.go` sorts them. Equal priorities keep that
/// order: Go's `sort.Sort` is an insertion sort, stable, up to 12 elements, which covers the
/// sandbox's sets.
pub fn machines_to_delete(
    machines: &[Machine],
    count: usize,
    policy: DeletePolicy,
    now: Timestamp,
) -> Vec<&Machine> {
    if count >= machines.len() {
        return machines.iter().collect();
    }
    let mut ranked: Vec<(f64, &Machine)> = machines
        .iter()
        .map(|m| (delete_priority(policy, m, now), m))
        .collect();
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0));
    ranked.into_iter().take(count).map(|(_, m)| m).collect()
}

/// The controller reference a MachineSet puts on its Machines (`metav1.NewControllerRef`:
/// controller and blockOwnerDeletion set).
pub fn controller_ref(set: &MachineSet) -> Option<OwnerReference> {
    set.controller_owner_ref(&())
        .map(|reference| OwnerReference {
            block_owner_deletion: Some(true),
            ..reference
        })
}

/// `metav1.GetControllerOf`: the first owner reference marked as controller.
fn controller_of(machine: &Machine) -> Option<&OwnerReference> {
    machine
        .metadata
        .owner_references
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find(|r| r.controller == Some(true))
}

/// Whether `machine` has no controller at all (an orphan a set may adopt).
pub fn is_orphan(machine: &Machine) -> bool {
    controller_of(machine).is_none()
}

fn is_empty(selector: &LabelSelector) -> bool {
    selector
        .match_labels
        .as_ref()
        .is_none_or(BTreeMap::is_empty)
        && selector
            .match_expressions
            .as_ref()
            .is_none_or(Vec::is_empty)
}

/// `machine.go`, `hasMatchingLabels`: an empty or invalid selector matches nothing.
pub fn has_matching_labels(set: &MachineSet, machine: &Machine) -> bool {
    if is_empty(&set.spec.selector) {
        return false;
    }
    Selector::try_from(set.spec.selector.clone()).is_ok_and(|s| s.matches(machine.labels()))
}

/// `controller.go`, `MachineToMachineSets`: an event of a Machine without a controller goes to
/// every set whose selector matches it; a Machine without labels goes nowhere.
pub fn maps_to_set(machine: &Machine, set: &MachineSet) -> bool {
    is_orphan(machine) && !machine.labels().is_empty() && has_matching_labels(set, machine)
}

/// `controller.go`, `shouldExcludeMachine`: controlled by another object, being deleted, or not
/// matched by the selector.
pub fn is_excluded(set: &MachineSet, machine: &Machine) -> bool {
    if let Some(owner) = controller_of(machine)
        && set.metadata.uid.as_deref() != Some(owner.uid.as_str())
    {
        return true;
    }
    is_deleting(machine) || !has_matching_labels(set, machine)
}

/// Why `controller.go`'s `validateMachineset` refuses a set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InvalidSet {
    /// "empty selector is not valid for MachineSet."
    EmptySelector,
    /// "invalid label selector."
    BadSelector(String),
    /// "`selector` does not match template `labels`"
    SelectorMismatch,
}

/// `controller.go`, `validateMachineset`.
pub fn validate(set: &MachineSet) -> Result<Selector, InvalidSet> {
    if is_empty(&set.spec.selector) {
        return Err(InvalidSet::EmptySelector);
    }
    let selector = Selector::try_from(set.spec.selector.clone())
        .map_err(|e| InvalidSet::BadSelector(e.to_string()))?;
    if !selector.matches(&set.spec.template.metadata.labels) {
        return Err(InvalidSet::SelectorMismatch);
    }
    Ok(selector)
}

/// `controller.go`, `createMachine`: `generateName: <set>-`, the template's labels and
/// annotations, its spec (the typed copy: fields machine/v1beta1 does not declare are gone), the
/// set's namespace, and the set as controller.
pub fn new_machine(set: &MachineSet) -> Machine {
    let template = &set.spec.template;
    let mut machine = Machine::new("", template.spec.clone());
    let non_empty = |map: &BTreeMap<String, String>| (!map.is_empty()).then(|| map.clone());
    machine.metadata = ObjectMeta {
        generate_name: Some(format!("{}-", set.name_any())),
        namespace: set.namespace(),
        labels: non_empty(&template.metadata.labels),
        annotations: non_empty(&template.metadata.annotations),
        owner_references: controller_ref(set).map(|r| vec![r]),
        ..ObjectMeta::default()
    };
    machine
}

/// The replica counts of a MachineSet's status (`status.go`, `calculateStatus`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplicaCounts {
    /// Machines the set owns (not being deleted).
    pub replicas: i32,
    /// Of those, Machines carrying every label of the template.
    pub fully_labeled: i32,
    /// Of those, Machines whose nodeRef names a Ready Node.
    pub ready: i32,
    /// Of the ready ones, those available (`util.go`, `IsNodeAvailable`).
    pub available: i32,
}

/// The Node's `Ready` condition: whether it is True, and since when.
fn readiness(node: &Node) -> Option<(bool, Option<Timestamp>)> {
    node.status
        .as_ref()?
        .conditions
        .as_deref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| {
            (
                c.status == "True",
                c.last_transition_time.as_ref().map(|t| t.0),
            )
        })
}

/// `util.go`, `IsNodeAvailable`: Ready, and either no `minReadySeconds` or Ready since strictly
/// longer than that (a missing transition time is never long enough).
fn is_available(since: Option<Timestamp>, min_ready_seconds: i32, now: Timestamp) -> bool {
    if min_ready_seconds == 0 {
        return true;
    }
    since.is_some_and(|t| now.duration_since(t).as_secs_f64() > f64::from(min_ready_seconds))
}

/// Counts `machines` (the set's, after filtering) against the Nodes by name.
pub fn count_replicas(
    set: &MachineSet,
    machines: &[Machine],
    nodes: &BTreeMap<String, Node>,
    now: Timestamp,
) -> ReplicaCounts {
    let template_labels = &set.spec.template.metadata.labels;
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
            .node_ref()
            .and_then(|r| r.name.as_ref())
            .and_then(|name| nodes.get(name));
        let Some((true, since)) = node.and_then(readiness) else {
            continue;
        };
        counts.ready += 1;
        if is_available(since, set.spec.min_ready_seconds, now) {
            counts.available += 1;
        }
    }
    counts
}

/// `status.labelSelector` as apimachinery's `metav1.FormatLabelSelector` writes it: the
/// requirements sorted by key and joined by `,` (`k=v`, `k in (a,b)`, `k notin (a,b)`, `k`,
/// `!k`), `<none>` for an empty selector (k8s.io/apimachinery `pkg/labels/selector.go`).
pub fn format_label_selector(selector: &LabelSelector) -> String {
    let mut requirements: Vec<(String, String)> = Vec::new();
    for (key, value) in selector.match_labels.iter().flatten() {
        requirements.push((key.clone(), format!("{key}={value}")));
    }
    for expression in selector.match_expressions.iter().flatten() {
        let key = &expression.key;
        let mut values = expression.values.clone().unwrap_or_default();
        values.sort();
        let text = match expression.operator.as_str() {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.clone(),
            "DoesNotExist" => format!("!{key}"),
            other => format!("{key} {other} ({})", values.join(",")),
        };
        requirements.push((key.clone(), text));
    }
    requirements.sort_by(|a, b| a.0.cmp(&b.0));
    if requirements.is_empty() {
        return "<none>".to_owned();
    }
    requirements
        .into_iter()
        .map(|(_, text)| text)
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use jiff::SignedDuration;
    use serde_json::{Value, json};

    use super::*;

    fn machine(name: &str, age_secs: i64, now: Timestamp, extra: Value) -> Machine {
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

    fn linked() -> Value {
        json!({"status": {"nodeRef": {"kind": "Node", "name": "n"}}})
    }

    fn annotated(key: &str) -> Value {
        json!({"metadata": {"annotations": {key: "2026-01-01 00:00:00 +0000 UTC"}},
               "status": {"nodeRef": {"kind": "Node", "name": "n"}}})
    }

    /// Each delete-policy rule of openshift/machine-api-operator
    /// `pkg/controller/machineset/delete_policy.go` (HEAD 9511961), with the Machine it applies to
    /// and the priority the operator gives it. Changing a rule here changes which Machine a
    /// scale-down removes, so the table fails first.
    #[test]
    fn delete_priorities_are_the_operators() {
        let now = Timestamp::now();
        let ten_days = 864_000;
        let deleting =
            json!({"metadata": {"deletionTimestamp": now.to_string(), "finalizers": ["f"]}});
        let failed =
            json!({"status": {"errorMessage": "boom", "nodeRef": {"kind": "Node", "name": "n"}}});
        // 50·(1 − e^(−10 days / 100 days)).
        let ten_day_curve = BETTER_DELETE * (1.0 - (-0.1f64).exp());
        let table: [(&str, DeletePolicy, Value, i64, f64); 14] = [
            (
                "randomDeletePolicy: deletionTimestamp → mustDelete",
                DeletePolicy::Random,
                deleting.clone(),
                10,
                MUST_DELETE,
            ),
            (
                "randomDeletePolicy: DeleteNodeAnnotation → betterDelete",
                DeletePolicy::Random,
                annotated(DELETE_MACHINE_ANNOTATION),
                10,
                BETTER_DELETE,
            ),
            (
                "randomDeletePolicy: oldDeleteNodeAnnotation → betterDelete",
                DeletePolicy::Random,
                annotated(OLD_DELETE_MACHINE_ANNOTATION),
                10,
                BETTER_DELETE,
            ),
            (
                "randomDeletePolicy: ErrorReason/ErrorMessage → betterDelete",
                DeletePolicy::Random,
                failed.clone(),
                10,
                BETTER_DELETE,
            ),
            (
                "randomDeletePolicy: no NodeRef → preferDelete",
                DeletePolicy::Random,
                json!({}),
                10,
                PREFER_DELETE,
            ),
            (
                "randomDeletePolicy: otherwise couldDelete",
                DeletePolicy::Random,
                linked(),
                10,
                COULD_DELETE,
            ),
            (
                "oldestDeletePriority: deletionTimestamp → mustDelete",
                DeletePolicy::Oldest,
                deleting.clone(),
                10,
                MUST_DELETE,
            ),
            (
                "oldestDeletePriority: oldDeleteNodeAnnotation → mustDelete",
                DeletePolicy::Oldest,
                annotated(OLD_DELETE_MACHINE_ANNOTATION),
                10,
                MUST_DELETE,
            ),
            (
                "oldestDeletePriority: ErrorMessage → mustDelete",
                DeletePolicy::Oldest,
                failed.clone(),
                10,
                MUST_DELETE,
            ),
            (
                "oldestDeletePriority: created in the future → mustNotDelete",
                DeletePolicy::Oldest,
                linked(),
                -60,
                MUST_NOT_DELETE,
            ),
            (
                "oldestDeletePriority: betterDelete·(1 − e^(−age/secondsPerHundredDays))",
                DeletePolicy::Oldest,
                linked(),
                ten_days,
                ten_day_curve,
            ),
            (
                "newestDeletePriority: DeleteNodeAnnotation → mustDelete",
                DeletePolicy::Newest,
                annotated(DELETE_MACHINE_ANNOTATION),
                10,
                MUST_DELETE,
            ),
            (
                "newestDeletePriority: oldDeleteNodeAnnotation → mustDelete",
                DeletePolicy::Newest,
                annotated(OLD_DELETE_MACHINE_ANNOTATION),
                10,
                MUST_DELETE,
            ),
            (
                "newestDeletePriority: mustDelete − oldestDeletePriority",
                DeletePolicy::Newest,
                linked(),
                ten_days,
                MUST_DELETE - ten_day_curve,
            ),
        ];
        for (rule, policy, extra, age, expected) in table {
            let m = machine("m", age, now, extra);
            let got = delete_priority(policy, &m, now);
            assert!(
                (got - expected).abs() < 1e-9,
                "{rule}: got {got}, want {expected}"
            );
        }
        let mut undated = machine("u", 0, now, linked());
        undated.metadata.creation_timestamp = None;
        assert_eq!(
            delete_priority(DeletePolicy::Oldest, &undated, now),
            MUST_NOT_DELETE,
            "oldestDeletePriority: zero CreationTimestamp → mustNotDelete"
        );
        // An empty annotation value does not mark a Machine (`!= ""`).
        let empty = machine(
            "e",
            10,
            now,
            json!({"metadata": {"annotations": {DELETE_MACHINE_ANNOTATION: ""}}, "status": {"nodeRef": {"name": "n"}}}),
        );
        assert_eq!(
            delete_priority(DeletePolicy::Random, &empty, now),
            COULD_DELETE
        );
    }

    #[test]
    fn delete_policy_values() {
        assert_eq!(DeletePolicy::parse(""), Ok(DeletePolicy::Random));
        assert_eq!(DeletePolicy::parse("Random"), Ok(DeletePolicy::Random));
        assert_eq!(DeletePolicy::parse("Oldest"), Ok(DeletePolicy::Oldest));
        assert_eq!(DeletePolicy::parse("Newest"), Ok(DeletePolicy::Newest));
        assert_eq!(DeletePolicy::parse("oldest"), Err("oldest".to_owned()));
    }

    #[test]
    fn random_order_and_the_count_rules() {
        let now = Timestamp::now();
        let machines = vec![
            machine("a-linked", 10, now, linked()),
            machine("b-nodeless", 10, now, json!({})),
            machine("c-annotated", 10, now, annotated(DELETE_MACHINE_ANNOTATION)),
            machine(
                "d-failed",
                10,
                now,
                json!({"status": {"errorReason": "InvalidConfiguration", "nodeRef": {"kind": "Node", "name": "n"}}}),
            ),
        ];
        assert_eq!(
            names(machines_to_delete(&machines, 3, DeletePolicy::Random, now)),
            ["c-annotated", "d-failed", "b-nodeless"]
        );
        assert_eq!(
            names(machines_to_delete(&machines, 4, DeletePolicy::Random, now)),
            ["a-linked", "b-nodeless", "c-annotated", "d-failed"],
            "diff >= len: every Machine, unsorted"
        );
        assert!(machines_to_delete(&machines, 0, DeletePolicy::Random, now).is_empty());
    }

    #[test]
    fn oldest_and_newest_order_by_age_after_the_marks() {
        let now = Timestamp::now();
        let machines = vec![
            machine("a-young", 60, now, linked()),
            machine("b-old", 86_400, now, linked()),
            machine("c-middle", 3_600, now, linked()),
            machine(
                "d-young-old-key",
                1,
                now,
                annotated(OLD_DELETE_MACHINE_ANNOTATION),
            ),
            machine("e-spare", 30, now, linked()),
        ];
        assert_eq!(
            names(machines_to_delete(&machines, 4, DeletePolicy::Oldest, now)),
            ["d-young-old-key", "b-old", "c-middle", "a-young"]
        );
        assert_eq!(
            names(machines_to_delete(&machines, 4, DeletePolicy::Newest, now)),
            ["d-young-old-key", "e-spare", "a-young", "c-middle"]
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
        assert_eq!(
            (owner.controller, owner.block_owner_deletion),
            (Some(true), Some(true))
        );
        assert_eq!(owner.api_version, "machine.openshift.io/v1beta1");
    }

    #[test]
    fn exclusion_mapping_and_validation() {
        let now = Timestamp::now();
        let set = machine_set();
        let owned_by = |name: &str, uid: &str| {
            json!({"metadata": {"ownerReferences": [{"apiVersion": "machine.openshift.io/v1beta1",
                "kind": "MachineSet", "name": name, "uid": uid, "controller": true}]}})
        };
        let mine = machine("mine", 1, now, owned_by("workers", "set-uid"));
        let theirs = machine("theirs", 1, now, owned_by("other", "other-uid"));
        let orphan = machine("orphan", 1, now, json!({}));
        let unlabeled = machine("unlabeled", 1, now, json!({"metadata": {"labels": {}}}));
        let deleting = machine(
            "deleting",
            1,
            now,
            json!({"metadata": {"deletionTimestamp": now.to_string()}}),
        );
        assert!(!is_excluded(&set, &mine));
        assert!(!is_excluded(&set, &orphan));
        assert!(is_excluded(&set, &theirs));
        assert!(is_excluded(&set, &unlabeled));
        assert!(is_excluded(&set, &deleting));
        assert!(maps_to_set(&orphan, &set));
        assert!(!maps_to_set(&mine, &set) && !maps_to_set(&unlabeled, &set));

        let mut empty = set.clone();
        empty.spec.selector = LabelSelector::default();
        assert!(
            !has_matching_labels(&empty, &orphan),
            "empty selector matches nothing"
        );
        assert_eq!(validate(&empty).unwrap_err(), InvalidSet::EmptySelector);
        let mut mismatch = set.clone();
        mismatch.spec.template.metadata.labels.clear();
        assert_eq!(
            validate(&mismatch).unwrap_err(),
            InvalidSet::SelectorMismatch
        );
        assert!(validate(&set).is_ok());
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
        let with_node = |name: &str, node: &str, labels: Value| {
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
            with_node("m4", "missing", full.clone()),
            with_node("m5", "exactly-min", full),
            machine("m6", 100, now, json!({})),
        ];
        let nodes = BTreeMap::from([
            node("long-ready", "True", now - SignedDuration::from_secs(300)),
            node("just-ready", "True", now - SignedDuration::from_secs(5)),
            node("not-ready", "False", now - SignedDuration::from_secs(300)),
            node("exactly-min", "True", now - SignedDuration::from_secs(30)),
        ]);
        assert_eq!(
            count_replicas(&set, &machines, &nodes, now),
            ReplicaCounts {
                replicas: 6,
                fully_labeled: 4,
                ready: 3,
                available: 1
            },
            "IsNodeAvailable: lastTransitionTime + minReadySeconds strictly before now"
        );
        let mut no_wait = set.clone();
        no_wait.spec.min_ready_seconds = 0;
        assert_eq!(
            count_replicas(&no_wait, &machines, &nodes, now).available,
            3
        );
    }

    #[test]
    fn label_selectors_format_as_apimachinery_does() {
        let selector: LabelSelector = serde_json::from_value(json!({
            "matchLabels": {"z": "1", "a": "2"},
            "matchExpressions": [
                {"key": "m", "operator": "In", "values": ["y", "x"]},
                {"key": "n", "operator": "NotIn", "values": ["v"]},
                {"key": "e", "operator": "Exists"},
                {"key": "f", "operator": "DoesNotExist"}
            ]
        }))
        .unwrap();
        assert_eq!(
            format_label_selector(&selector),
            "a=2,e,!f,m in (x,y),n notin (v),z=1"
        );
        assert_eq!(format_label_selector(&LabelSelector::default()), "<none>");
    }
}
