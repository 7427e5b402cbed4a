//! The machine-api-operator's nodelink controller: links each Node to its Machine.
//!
//! For each Node it finds the Machine whose `spec.providerID` equals the Node's (exact string), or
//! else the Machine that has the Node's first `InternalIP` among its `InternalIP`s; then it sets
//! the Machine's `status.nodeRef` (status patch), annotates the Node
//! `machine.openshift.io/machine=<namespace>/<name>`, copies the Machine's `spec.metadata.labels`
//! to the Node and adds the Machine's `spec.taints` the Node lacks (same key and effect). A
//! Machine event is mapped to its Node the other way round: by providerID, else by the Machine's
//! first `InternalIP` against the Nodes' `InternalIP`s.
//!
//! As in the operator, annotations of `spec.metadata` are not copied, two candidates are an error
//! (nothing is linked), and `nodeRef` is written again only when the Node's readiness changed
//! since the last write. One deliberate difference: the readiness memory is keyed by the Node's
//! uid (not its name) and a Machine whose nodeRef does not name the Node is always written, so a
//! Node re-created under the same name is linked again.

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
use nutanix_machine_controller::api::Machine;
use serde_json::json;

use crate::actor::{ActorHandle, cache};

/// Node annotation naming the Node's Machine as `<namespace>/<name>`.
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
    #[error("node {node}: {action}: {source}")]
    Api {
        node: String,
        action: String,
        source: Box<kube::Error>,
    },
}

fn internal_ips(addresses: Option<&[NodeAddress]>) -> impl Iterator<Item = &str> {
    addresses
        .unwrap_or_default()
        .iter()
        .filter(|a| a.type_ == INTERNAL_IP)
        .map(|a| a.address.as_str())
}

fn node_addresses(node: &Node) -> Option<&[NodeAddress]> {
    node.status.as_ref().and_then(|s| s.addresses.as_deref())
}

fn machine_addresses(machine: &Machine) -> Option<&[NodeAddress]> {
    machine.status.as_ref().map(|s| s.addresses.as_slice())
}

fn node_provider_id(node: &Node) -> Option<&str> {
    node.spec
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .filter(|p| !p.is_empty())
}

fn machine_provider_id(machine: &Machine) -> Option<&str> {
    machine
        .spec
        .provider_id
        .as_deref()
        .filter(|p| !p.is_empty())
}

fn one<'a, T>(
    node: &Node,
    by: &'static str,
    value: &str,
    found: Vec<&'a T>,
) -> Result<Option<&'a T>, NodeLinkError> {
    match found.as_slice() {
        [] => Ok(None),
        [single] => Ok(Some(single)),
        _ => Err(NodeLinkError::Ambiguous {
            node: node.name_any(),
            by,
            value: value.to_owned(),
            count: found.len(),
        }),
    }
}

/// The Machine of `node`: by exact providerID, else by the Node's first InternalIP.
pub fn machine_for_node<'a, M: Borrow<Machine>>(
    node: &Node,
    machines: &'a [M],
) -> Result<Option<&'a Machine>, NodeLinkError> {
    if let Some(id) = node_provider_id(node) {
        let found = machines
            .iter()
            .map(Borrow::borrow)
            .filter(|m| machine_provider_id(m) == Some(id))
            .collect();
        if let Some(machine) = one(node, "providerID", id, found)? {
            return Ok(Some(machine));
        }
    }
    let Some(ip) = internal_ips(node_addresses(node)).next() else {
        return Ok(None);
    };
    let found = machines
        .iter()
        .map(Borrow::borrow)
        .filter(|m| internal_ips(machine_addresses(m)).any(|a| a == ip))
        .collect();
    one(node, "InternalIP", ip, found)
}

/// The Nodes a Machine event concerns: by exact providerID, else by the Machine's first
/// InternalIP (empty for a deleting Machine, as in the operator).
pub fn nodes_for_machine<'a>(machine: &Machine, nodes: &'a [Arc<Node>]) -> Vec<&'a Node> {
    if machine.metadata.deletion_timestamp.is_some() {
        return Vec::new();
    }
    if let Some(id) = machine_provider_id(machine) {
        let found: Vec<&Node> = nodes
            .iter()
            .map(AsRef::as_ref)
            .filter(|n| node_provider_id(n) == Some(id))
            .collect();
        if !found.is_empty() {
            return found;
        }
    }
    let Some(ip) = internal_ips(machine_addresses(machine)).next() else {
        return Vec::new();
    };
    nodes
        .iter()
        .map(AsRef::as_ref)
        .filter(|n| internal_ips(node_addresses(n)).any(|a| a == ip))
        .collect()
}

/// `node` as nodelink leaves it: the Machine annotation, the Machine's `spec.metadata` labels,
/// and the Machine's taints whose key and effect the Node does not have yet.
pub fn linked_node(node: &Node, machine: &Machine) -> Node {
    let mut linked = node.clone();
    linked.annotations_mut().insert(
        MACHINE_ANNOTATION.to_owned(),
        format!(
            "{}/{}",
            machine.namespace().unwrap_or_default(),
            machine.name_any()
        ),
    );
    if let Some(labels) = machine
        .spec
        .metadata
        .as_ref()
        .and_then(|m| m.labels.as_ref())
    {
        linked
            .labels_mut()
            .extend(labels.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
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
    /// Readiness last written per Node uid.
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
                nodes_for_machine(&machine, &store.state())
                    .into_iter()
                    .map(ObjectRef::from_obj)
                    .collect::<Vec<_>>()
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
        // The cache may not have the Machine's latest change yet: look again soon.
        tracing::debug!(node = %node.name_any(), "no Machine for node yet");
        return Ok(Action::requeue(context.retry_after));
    };
    let uid = node.uid().unwrap_or_default();
    if node.metadata.deletion_timestamp.is_some() {
        lock(&context.readiness).remove(&uid);
        return Ok(Action::await_change());
    }
    update_node_ref(&context, &node, machine, &uid).await?;
    let linked = linked_node(&node, machine);
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

async fn update_node_ref(
    context: &Context,
    node: &Node,
    machine: &Machine,
    uid: &str,
) -> Result<(), NodeLinkError> {
    let ready = is_ready(node);
    let names_node = machine
        .status
        .as_ref()
        .and_then(|s| s.node_ref.as_ref())
        .is_some_and(|r| r.name.as_deref() == Some(&node.name_any()));
    if names_node && lock(&context.readiness).get(uid) == Some(&ready) {
        return Ok(());
    }
    let patch = json!({"status": {
        "nodeRef": {"kind": "Node", "name": node.name_any(), "uid": uid},
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
    lock(&context.readiness).insert(uid.to_owned(), ready);
    tracing::info!(node = %node.name_any(), machine = %machine.name_any(), ready, "set nodeRef");
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

    #[test]
    fn provider_id_first_then_the_nodes_first_internal_ip() {
        let machines = vec![
            machine("by-id", Some("nutanix://a"), &["10.0.0.1"]),
            machine("by-ip", None, &["10.0.0.9", "10.0.0.2"]),
        ];
        // The providerID wins over an IP that points at another Machine.
        assert_eq!(
            name(machine_for_node(
                &node("n", Some("nutanix://a"), &["10.0.0.2"]),
                &machines
            )),
            Some("by-id".into())
        );
        // An unknown providerID falls back to the IP; any of the Machine's InternalIPs matches.
        assert_eq!(
            name(machine_for_node(
                &node("n", Some("nutanix://zz"), &["10.0.0.2"]),
                &machines
            )),
            Some("by-ip".into())
        );
        // Only the Node's first InternalIP is used.
        assert_eq!(
            name(machine_for_node(
                &node("n", None, &["10.9.9.9", "10.0.0.2"]),
                &machines
            )),
            None
        );
        assert_eq!(
            name(machine_for_node(&node("n", None, &[]), &machines)),
            None
        );
    }

    #[test]
    fn two_candidates_are_an_error() {
        let machines = vec![
            machine("a", None, &["10.0.0.1"]),
            machine("b", None, &["10.0.0.1"]),
        ];
        let error = machine_for_node(&node("n", None, &["10.0.0.1"]), &machines).unwrap_err();
        assert_eq!(
            error.to_string(),
            "node n: 2 Machines match its InternalIP \"10.0.0.1\"; expected one"
        );
    }

    #[test]
    fn machine_events_map_by_provider_id_then_the_machines_first_ip() {
        let nodes = vec![
            Arc::new(node("with-id", Some("nutanix://a"), &["10.0.0.1"])),
            Arc::new(node("second-ip", None, &["10.0.0.7", "10.0.0.2"])),
        ];
        let names = |m: &Machine| {
            nodes_for_machine(m, &nodes)
                .into_iter()
                .map(ResourceExt::name_any)
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&machine("m", Some("nutanix://a"), &[])), ["with-id"]);
        assert_eq!(names(&machine("m", None, &["10.0.0.2"])), ["second-ip"]);
        assert!(names(&machine("m", None, &["10.0.0.3", "10.0.0.2"])).is_empty());
        let mut deleting = machine("m", Some("nutanix://a"), &[]);
        deleting.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
        assert!(names(&deleting).is_empty());
    }

    #[test]
    fn linking_annotates_copies_labels_and_merges_taints() {
        let mut n = node("n", None, &["10.0.0.1"]);
        n.labels_mut().insert("keep".into(), "me".into());
        n.spec.get_or_insert_with(Default::default).taints = Some(vec![
            serde_json::from_value(
                json!({"key": "dedicated", "value": "old", "effect": "NoSchedule"}),
            )
            .unwrap(),
        ]);
        let mut m = machine("m", None, &["10.0.0.1"]);
        m.spec.metadata = Some(
            serde_json::from_value(json!({
                "labels": {"node-role.kubernetes.io/windows": "", "keep": "overridden"},
                "annotations": {"not": "copied"}
            }))
            .unwrap(),
        );
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
        assert!(!linked.annotations().contains_key("not"));
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
            ]
        );
        // A second pass changes nothing.
        assert_eq!(linked_node(&linked, &m), linked);
    }
}
