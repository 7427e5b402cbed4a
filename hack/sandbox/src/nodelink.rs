//! The machine-api-operator's nodelink controller: links each Node to its Machine
//! (openshift/machine-api-operator `pkg/controller/nodelink/nodelink_controller.go`; each rule is
//! cited at the code that simulates it).
//!
//! For each Node it finds its Machine (`findMachineFromNode`: the Machine whose `spec.providerID`
//! equals the Node's, else the Machine that has the Node's first `InternalIP` among its
//! `InternalIP`s), sets the Machine's `status.nodeRef` when the Node's readiness changed since it
//! last did (`updateNodeRef`), and updates the Node (`Reconcile`): the annotation
//! `machine.openshift.io/machine=<namespace>/<name>`, the Machine's `spec.metadata.annotations`
//! and `spec.metadata.labels`, and the Machine's `spec.taints` whose key and effect the Node lacks
//! (`addTaintsToNode`). A Machine event is mapped to its Node the other way round
//! (`nodeRequestFromMachine`). Two candidates are an error: nothing is linked.
//!
//! One difference, forced by kube-rs: the operator's reconcile and its Machine watch read one
//! informer cache, so a Node without a Machine yet is simply dropped until the Machine's own event
//! maps to it; here the Machine cache and the Machine watch are two streams, so such a Node is
//! looked at again after `retry_after` instead.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, NodeAddress};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::actor::{ActorHandle, cache};
use crate::machine_api::Machine;

/// Node annotation naming the Node's Machine as `<namespace>/<name>` (`machineAnnotationKey`).
pub const MACHINE_ANNOTATION: &str = "machine.openshift.io/machine";

const INTERNAL_IP: &str = "InternalIP";

/// Settings of the nodelink controller.
#[derive(Clone, Debug)]
pub struct NodeLinkConfig {
    /// Namespace of the Machines.
    pub namespace: String,
    /// Delay before a failed reconcile is retried.
    pub retry_after: Duration,
}

impl Default for NodeLinkConfig {
    fn default() -> Self {
        Self {
            namespace: crate::MACHINE_API_NAMESPACE.to_owned(),
            retry_after: Duration::from_secs(1),
        }
    }
}

/// Why a Node could not be linked.
#[derive(Debug, thiserror::Error)]
pub enum NodeLinkError {
    #[error("node {node}: {count} Machines match its {by} {value:?}; expected one")]
    Ambiguous {
        node: String,
        by: &'static str,
        value: String,
        count: usize,
    },
    #[error("Machine {machine}: {count} Nodes match its {by} {value:?}; expected one")]
    AmbiguousNode {
        machine: String,
        by: &'static str,
        value: String,
        count: usize,
    },
    #[error("node {node}: {action}: {source}")]
    Api {
        node: String,
        action: String,
        source: Box<kube::Error>,
    },
}

/// Every `InternalIP` in list order (`indexNodeByInternalIP`, `indexMachineByInternalIP`).
fn internal_ips(addresses: &[NodeAddress]) -> impl Iterator<Item = &str> {
    addresses
        .iter()
        .filter(|a| a.type_ == INTERNAL_IP)
        .map(|a| a.address.as_str())
}

fn node_addresses(node: &Node) -> &[NodeAddress] {
    node.status
        .as_ref()
        .and_then(|s| s.addresses.as_deref())
        .unwrap_or_default()
}

/// `indexNodeByProviderID`: an empty providerID is not indexed.
fn node_provider_id(node: &Node) -> Option<&str> {
    node.spec
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .filter(|p| !p.is_empty())
}

/// `indexMachineByProvider`: an absent or empty providerID is not indexed.
fn machine_provider_id(machine: &Machine) -> Option<&str> {
    machine
        .spec
        .provider_id
        .as_deref()
        .filter(|p| !p.is_empty())
}

/// The Machine of `node` (`findMachineFromNode`): by exact providerID
/// (`findMachineFromNodeByProviderID`), else by the Node's first InternalIP among the Machines'
/// InternalIPs (`findMachineFromNodeByIP`). More than one candidate either way is an error.
pub fn machine_for_node<'a, M: Borrow<Machine>>(
    node: &Node,
    machines: &'a [M],
) -> Result<Option<&'a Machine>, NodeLinkError> {
    let ambiguous = |by: &'static str, value: &str, count: usize| NodeLinkError::Ambiguous {
        node: node.name_any(),
        by,
        value: value.to_owned(),
        count,
    };
    if let Some(id) = node_provider_id(node) {
        let found: Vec<&Machine> = machines
            .iter()
            .map(Borrow::borrow)
            .filter(|m| machine_provider_id(m) == Some(id))
            .collect();
        match found.as_slice() {
            [] => {}
            [single] => return Ok(Some(single)),
            _ => return Err(ambiguous("providerID", id, found.len())),
        }
    }
    let Some(ip) = internal_ips(node_addresses(node)).next() else {
        return Ok(None);
    };
    let found: Vec<&Machine> = machines
        .iter()
        .map(Borrow::borrow)
        .filter(|m| internal_ips(m.addresses()).any(|a| a == ip))
        .collect();
    match found.as_slice() {
        [] => Ok(None),
        [single] => Ok(Some(single)),
        _ => Err(ambiguous("InternalIP", ip, found.len())),
    }
}

/// The Node a Machine event concerns (`nodeRequestFromMachine`, `findNodeFromMachine`): none for
/// a deleting Machine; by exact providerID (an absent one skips to the IP), else by the Machine's
/// first InternalIP among the Nodes' InternalIPs. More than one candidate is an error (no-op).
pub fn node_for_machine<'a>(
    machine: &Machine,
    nodes: &'a [Arc<Node>],
) -> Result<Option<&'a Node>, NodeLinkError> {
    if machine.metadata.deletion_timestamp.is_some() {
        return Ok(None);
    }
    let ambiguous = |by: &'static str, value: &str, count: usize| NodeLinkError::AmbiguousNode {
        machine: machine.name_any(),
        by,
        value: value.to_owned(),
        count,
    };
    if let Some(id) = machine.spec.provider_id.as_deref() {
        let found: Vec<&Node> = nodes
            .iter()
            .map(AsRef::as_ref)
            .filter(|n| node_provider_id(n) == Some(id))
            .collect();
        match found.as_slice() {
            [] => {}
            [single] => return Ok(Some(single)),
            _ => return Err(ambiguous("providerID", id, found.len())),
        }
    }
    let Some(ip) = internal_ips(machine.addresses()).next() else {
        return Ok(None);
    };
    let found: Vec<&Node> = nodes
        .iter()
        .map(AsRef::as_ref)
        .filter(|n| internal_ips(node_addresses(n)).any(|a| a == ip))
        .collect();
    match found.as_slice() {
        [] => Ok(None),
        [single] => Ok(Some(single)),
        _ => Err(ambiguous("InternalIP", ip, found.len())),
    }
}

/// `node` as nodelink's `Reconcile` leaves it: the Machine annotation, then the Machine's
/// `spec.metadata` annotations and labels (overwriting), then `addTaintsToNode`: each Machine
/// taint whose key and effect the Node does not have yet, appended.
pub fn linked_node(node: &Node, machine: &Machine) -> Node {
    let mut linked = node.clone();
    let annotations = linked.annotations_mut();
    annotations.insert(
        MACHINE_ANNOTATION.to_owned(),
        format!(
            "{}/{}",
            machine.namespace().unwrap_or_default(),
            machine.name_any()
        ),
    );
    annotations.extend(
        machine
            .spec
            .metadata
            .annotations
            .iter()
            .map(|(k, v)| (k.clone(), v.clone())),
    );
    linked.labels_mut().extend(
        machine
            .spec
            .metadata
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone())),
    );
    if !machine.spec.taints.is_empty() {
        let taints = linked
            .spec
            .get_or_insert_with(Default::default)
            .taints
            .get_or_insert_with(Vec::new);
        for taint in &machine.spec.taints {
            if !taints
                .iter()
                .any(|t| t.key == taint.key && t.effect == taint.effect)
            {
                taints.push(taint.clone());
            }
        }
    }
    linked
}

/// `isNodeReady`: the `Ready` condition is True.
fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default()
        .iter()
        .find(|c| c.type_ == "Ready")
        .is_some_and(|c| c.status == "True")
}

struct Context {
    machines: Api<Machine>,
    /// Every Machine, as the operator's informer keeps them (a reconcile lists nothing).
    machine_cache: Store<Machine>,
    nodes: Api<Node>,
    /// Readiness last written per Node name (`nodeReadinessCache`).
    readiness: Mutex<HashMap<String, bool>>,
    retry_after: Duration,
}

/// Starts the nodelink controller.
pub fn start(client: Client, config: NodeLinkConfig) -> ActorHandle {
    ActorHandle::spawn("nodelink", move |cancel| async move {
        let machines: Api<Machine> = Api::namespaced(client.clone(), &config.namespace);
        let nodes: Api<Node> = Api::all(client);
        let context = Arc::new(Context {
            machines: machines.clone(),
            machine_cache: cache(machines.clone(), cancel.clone()),
            nodes: nodes.clone(),
            readiness: Mutex::new(HashMap::new()),
            retry_after: config.retry_after,
        });
        let controller = Controller::new(nodes, watcher::Config::default());
        let store = controller.store();
        controller
            .watches(machines, watcher::Config::default(), move |machine| {
                let nodes = store.state();
                match node_for_machine(&machine, &nodes) {
                    Ok(node) => node.map(ObjectRef::from_obj),
                    Err(error) => {
                        tracing::debug!(%error, "nodelink: no-op for a Machine event");
                        None
                    }
                }
            })
            .graceful_shutdown_on(async move { cancel.cancelled().await })
            .run(reconcile, error_policy, context)
            .for_each(|result| async move {
                if let Err(error) = result {
                    tracing::debug!(%error, "nodelink controller");
                }
            })
            .await;
    })
}

impl NodeLinkError {
    /// Whether another writer changed the Node between the read and the update (409): expected
    /// while the kubelet and the machine controller write the same Node, and retried.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Self::Api { source, .. }
            if matches!(source.as_ref(), kube::Error::Api(status) if status.code == 409))
    }
}

fn error_policy(node: Arc<Node>, error: &NodeLinkError, context: Arc<Context>) -> Action {
    if error.is_conflict() {
        tracing::debug!(node = %node.name_any(), %error, "nodelink: Node changed meanwhile; retrying");
    } else {
        tracing::warn!(node = %node.name_any(), %error, "nodelink reconcile failed");
    }
    Action::requeue(context.retry_after)
}

fn api_error(node: &Node, action: impl Into<String>) -> impl FnOnce(kube::Error) -> NodeLinkError {
    let (node, action) = (node.name_any(), action.into());
    move |source| NodeLinkError::Api {
        node,
        action,
        source: Box::new(source),
    }
}

async fn reconcile(node: Arc<Node>, context: Arc<Context>) -> Result<Action, NodeLinkError> {
    let machines = context.machine_cache.state();
    let Some(machine) = machine_for_node(&node, &machines)? else {
        // See the module's note: the Machine's event may already have gone by.
        tracing::debug!(node = %node.name_any(), "no Machine for node yet");
        return Ok(Action::requeue(context.retry_after));
    };
    update_node_ref(&context, &node, machine).await?;
    if node.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let linked = linked_node(&node, machine);
    // `Reconcile`: an Update (PUT) only when the Node changed; a conflict is retried.
    if linked != *node {
        context
            .nodes
            .replace(&node.name_any(), &PostParams::default(), &linked)
            .await
            .map_err(api_error(&node, "update Node"))?;
        tracing::info!(node = %node.name_any(), machine = %machine.name_any(), "labelled Node for its Machine");
    }
    Ok(Action::await_change())
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What `updateNodeRef` does for this Node, given the readiness it last wrote for the Node's name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeRefAction {
    /// The Node is being deleted: forget its readiness, write nothing.
    Forget,
    /// The readiness is what was last written: write nothing, whatever the Machine's nodeRef says.
    Skip,
    /// Write `nodeRef` (kind, name, uid) and `lastUpdated`, and remember this readiness.
    Write { ready: bool },
}

/// `updateNodeRef`'s decision.
pub fn node_ref_action(node: &Node, last_written: Option<bool>) -> NodeRefAction {
    if node.metadata.deletion_timestamp.is_some() {
        return NodeRefAction::Forget;
    }
    let ready = is_ready(node);
    if last_written == Some(ready) {
        return NodeRefAction::Skip;
    }
    NodeRefAction::Write { ready }
}

async fn update_node_ref(
    context: &Context,
    node: &Node,
    machine: &Machine,
) -> Result<(), NodeLinkError> {
    let name = node.name_any();
    let last_written = lock(&context.readiness).get(&name).copied();
    let ready = match node_ref_action(node, last_written) {
        NodeRefAction::Forget => {
            lock(&context.readiness).remove(&name);
            return Ok(());
        }
        NodeRefAction::Skip => return Ok(()),
        NodeRefAction::Write { ready } => ready,
    };
    // A status merge patch (`client.MergeFrom`) of nodeRef and lastUpdated.
    let patch = json!({"status": {
        "nodeRef": {"kind": "Node", "name": name, "uid": node.uid().unwrap_or_default()},
        "lastUpdated": Time(Timestamp::now()),
    }});
    context
        .machines
        .patch_status(
            &machine.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await
        .map_err(api_error(
            node,
            format!("set nodeRef of Machine {}", machine.name_any()),
        ))?;
    lock(&context.readiness).insert(name.clone(), ready);
    tracing::info!(node = %name, machine = %machine.name_any(), ready, "set nodeRef");
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    #[test]
    fn only_a_409_is_a_conflict() {
        let api = |code: u16| NodeLinkError::Api {
            node: "n".to_owned(),
            action: "update Node".to_owned(),
            source: Box::new(kube::Error::Api(
                serde_json::from_value(
                    json!({"status": "Failure", "code": code, "reason": "x", "message": "m"}),
                )
                .unwrap(),
            )),
        };
        assert!(api(409).is_conflict());
        assert!(!api(500).is_conflict());
        let ambiguous = NodeLinkError::Ambiguous {
            node: "n".to_owned(),
            by: "providerID",
            value: "p".to_owned(),
            count: 2,
        };
        assert!(!ambiguous.is_conflict());
    }

    fn node(name: &str, provider_id: Option<&str>, ips: &[&str]) -> Node {
        let addresses: Vec<Value> = ips
            .iter()
            .map(|ip| json!({"type": "InternalIP", "address": ip}))
            .chain([json!({"type": "Hostname", "address": name})])
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"providerID": provider_id},
            "status": {"addresses": addresses}
        }))
        .unwrap()
    }

    fn machine(name: &str, provider_id: Option<&str>, ips: &[&str]) -> Machine {
        let addresses: Vec<Value> = ips
            .iter()
            .map(|ip| json!({"type": "InternalIP", "address": ip}))
            .chain([json!({"type": "InternalDNS", "address": name})])
            .collect();
        serde_json::from_value(json!({
            "apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
            "metadata": {"name": name, "namespace": "openshift-machine-api"},
            "spec": {"providerID": provider_id},
            "status": {"addresses": addresses}
        }))
        .unwrap()
    }

    fn name(found: Result<Option<&Machine>, NodeLinkError>) -> Option<String> {
        found.unwrap().map(ResourceExt::name_any)
    }

    /// nodelink's rules, each with its place in openshift/machine-api-operator
    /// `pkg/controller/nodelink/nodelink_controller.go` (HEAD 9511961): the Machine a Node links
    /// to. A provider that wrote providerIDs or addresses nodelink does not match on fails here
    /// only if the rule itself changed; it fails the e2e suite through the missing nodeRef.
    #[test]
    fn node_to_machine_rules_are_the_operators() {
        let machines = vec![
            machine("by-id", Some("nutanix://a"), &["10.0.0.1"]),
            machine("by-ip", None, &["10.0.0.9", "10.0.0.2"]),
            machine("empty-id", Some(""), &["10.0.0.5"]),
        ];
        let table: [(&str, Node, Option<&str>); 6] = [
            (
                "findMachineFromNodeByProviderID: exact providerID wins over the IP",
                node("n", Some("nutanix://a"), &["10.0.0.2"]),
                Some("by-id"),
            ),
            (
                "findMachineFromNodeByProviderID: compared as strings, not normalized",
                node("n", Some("nutanix:///a"), &["10.9.9.9"]),
                None,
            ),
            (
                "findMachineFromNodeByIP: unknown providerID falls back to the IP; any Machine InternalIP",
                node("n", Some("nutanix://zz"), &["10.0.0.2"]),
                Some("by-ip"),
            ),
            (
                "findMachineFromNodeByIP: only the Node's first InternalIP",
                node("n", None, &["10.9.9.9", "10.0.0.2"]),
                None,
            ),
            (
                "indexMachineByProvider: an empty providerID is not indexed; the IP still links",
                node("n", None, &["10.0.0.5"]),
                Some("empty-id"),
            ),
            (
                "findMachineFromNodeByIP: no InternalIP, no Machine",
                node("n", None, &[]),
                None,
            ),
        ];
        for (rule, n, expected) in table {
            assert_eq!(
                name(machine_for_node(&n, &machines)),
                expected.map(str::to_owned),
                "{rule}"
            );
        }
        let twins = vec![
            machine("a", None, &["10.0.0.1"]),
            machine("b", None, &["10.0.0.1"]),
        ];
        let error = machine_for_node(&node("n", None, &["10.0.0.1"]), &twins).unwrap_err();
        assert_eq!(
            error.to_string(),
            "node n: 2 Machines match its InternalIP \"10.0.0.1\"; expected one",
            "findMachineFromNodeByIP: len(machines) > 1 is an error"
        );
    }

    #[test]
    fn machine_events_map_by_provider_id_then_the_machines_first_ip() {
        let nodes = vec![
            Arc::new(node("with-id", Some("nutanix://a"), &["10.0.0.1"])),
            Arc::new(node("second-ip", None, &["10.0.0.7", "10.0.0.2"])),
            Arc::new(node("twin-1", None, &["10.0.0.8"])),
            Arc::new(node("twin-2", None, &["10.0.0.8"])),
        ];
        let found = |m: &Machine| {
            node_for_machine(m, &nodes)
                .unwrap()
                .map(ResourceExt::name_any)
        };
        assert_eq!(
            found(&machine("m", Some("nutanix://a"), &[])).as_deref(),
            Some("with-id")
        );
        assert_eq!(
            found(&machine("m", None, &["10.0.0.2"])).as_deref(),
            Some("second-ip"),
            "findNodeFromMachineByIP: the Machine's first InternalIP among any Node InternalIP"
        );
        assert_eq!(found(&machine("m", None, &["10.0.0.3", "10.0.0.2"])), None);
        assert!(node_for_machine(&machine("m", None, &["10.0.0.8"]), &nodes).is_err());
        let mut deleting = machine("m", Some("nutanix://a"), &[]);
        deleting.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
        assert_eq!(
            found(&deleting),
            None,
            "nodeRequestFromMachine: no-op for a deleting Machine"
        );
    }

    #[test]
    fn node_ref_is_rewritten_only_when_readiness_changed() {
        let ready: Node = serde_json::from_value(json!({
            "metadata": {"name": "n"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .unwrap();
        let mut deleting = ready.clone();
        deleting.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
        assert_eq!(
            node_ref_action(&ready, None),
            NodeRefAction::Write { ready: true }
        );
        assert_eq!(node_ref_action(&ready, Some(true)), NodeRefAction::Skip);
        assert_eq!(
            node_ref_action(&ready, Some(false)),
            NodeRefAction::Write { ready: true }
        );
        assert_eq!(
            node_ref_action(&deleting, Some(true)),
            NodeRefAction::Forget
        );
        let no_condition = node("n", None, &[]);
        assert_eq!(
            node_ref_action(&no_condition, None),
            NodeRefAction::Write { ready: false }
        );
    }

    #[test]
    fn linking_annotates_copies_annotations_and_labels_and_merges_taints() {
        let mut n = node("n", None, &["10.0.0.1"]);
        n.labels_mut().insert("keep".into(), "me".into());
        n.spec.get_or_insert_with(Default::default).taints = Some(vec![
            serde_json::from_value(
                json!({"key": "dedicated", "value": "old", "effect": "NoSchedule"}),
            )
            .unwrap(),
        ]);
        let mut m = machine("m", None, &["10.0.0.1"]);
        m.spec.metadata = serde_json::from_value(json!({
            "labels": {"node-role.kubernetes.io/windows": "", "keep": "overridden"},
            "annotations": {"copied": "too"}
        }))
        .unwrap();
        m.spec.taints = serde_json::from_value(json!([
            {"key": "dedicated", "value": "new", "effect": "NoSchedule"},
            {"key": "dedicated", "value": "new", "effect": "NoExecute"},
            {"key": "os", "value": "Windows", "effect": "NoSchedule"}
        ]))
        .unwrap();
        let linked = linked_node(&n, &m);
        assert_eq!(
            linked.annotations()[MACHINE_ANNOTATION],
            "openshift-machine-api/m"
        );
        assert_eq!(
            linked.annotations()["copied"],
            "too",
            "Reconcile: machine.Spec.Annotations are copied"
        );
        assert_eq!(linked.labels()["keep"], "overridden");
        assert_eq!(linked.labels()["node-role.kubernetes.io/windows"], "");
        let taints: Vec<(String, Option<String>, String)> = linked
            .spec
            .clone()
            .unwrap()
            .taints
            .unwrap()
            .into_iter()
            .map(|t| (t.key, t.value, t.effect))
            .collect();
        assert_eq!(
            taints,
            [
                ("dedicated".into(), Some("old".into()), "NoSchedule".into()),
                ("dedicated".into(), Some("new".into()), "NoExecute".into()),
                ("os".into(), Some("Windows".into()), "NoSchedule".into()),
            ],
            "addTaintsToNode: same key and effect is already present; the value is not compared"
        );
        // A second pass changes nothing.
        assert_eq!(linked_node(&linked, &m), linked);
    }
}
