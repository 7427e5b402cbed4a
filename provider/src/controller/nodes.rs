//! Node link support: which Machine a Node belongs to (so a Node change requeues its Machine),
//! and `Node.spec.providerID` set when the Node is the Machine's and has none (Windows nodes
//! have no cloud controller manager to set it).

use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};

use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::error::Error;
use crate::api::{GuardedMachine, Machine};

/// Node annotation nodelink writes: `<namespace>/<name>` of the Machine.
pub const MACHINE_ANNOTATION: &str = "machine.openshift.io/machine";

/// The Machine a Node names in its nodelink annotation.
pub fn machine_of_node(node: &Node) -> Option<(String, String)> {
    let value = node.annotations().get(MACHINE_ANNOTATION)?;
    let (namespace, name) = value.split_once('/')?;
    (!namespace.is_empty() && !name.is_empty() && !name.contains('/'))
        .then(|| (namespace.to_owned(), name.to_owned()))
}

/// The Machine to requeue when `node` changes: by nodelink's annotation, else by providerID
/// among the watched Machines.
pub fn machine_to_requeue(
    node: &Node,
    machines: &Store<GuardedMachine>,
) -> Option<ObjectRef<GuardedMachine>> {
    if let Some((namespace, name)) = machine_of_node(node) {
        return Some(ObjectRef::new(&name).within(&namespace));
    }
    let provider_id = node.spec.as_ref()?.provider_id.as_deref()?;
    if provider_id.is_empty() {
        return None;
    }
    machines.state().iter().find_map(|guarded| {
        let machine = guarded.0.as_ref().ok()?;
        (machine.spec.provider_id.as_deref() == Some(provider_id))
            .then(|| ObjectRef::from_obj(guarded.as_ref()))
    })
}

/// Nodes whose providerID this process has checked (set it, or found it set), so a Running
/// Machine's periodic reconcile does not read its Node every time.
#[derive(Debug, Default)]
pub struct ProviderIdsDone(Mutex<HashSet<String>>);

impl ProviderIdsDone {
    fn contains(&self, node: &str) -> bool {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(node)
    }

    fn insert(&self, node: &str) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(node.to_owned());
    }
}

/// Sets `spec.providerID` on the Machine's Node when it has none. The Node must be the
/// Machine's: nodelink's annotation, if present, must name this Machine.
pub async fn ensure_node_provider_id(
    client: &kube::Client,
    done: &ProviderIdsDone,
    machine: &Machine,
    node_name: &str,
    provider_id: &str,
) -> Result<(), Error> {
    if done.contains(node_name) {
        return Ok(());
    }
    let nodes: Api<Node> = Api::all(client.clone());
    let Some(node) = nodes
        .get_opt(node_name)
        .await
        .map_err(|e| Error::kube(format!("read Node {node_name}"), e))?
    else {
        return Ok(());
    };
    let ours = machine_of_node(&node).is_none_or(|(namespace, name)| {
        Some(namespace.as_str()) == machine.metadata.namespace.as_deref()
            && Some(name.as_str()) == machine.metadata.name.as_deref()
    });
    let current = node.spec.as_ref().and_then(|s| s.provider_id.as_deref());
    match current {
        None | Some("") if ours => {
            nodes
                .patch(
                    node_name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"providerID": provider_id}})),
                )
                .await
                .map_err(|e| Error::kube(format!("set providerID of Node {node_name}"), e))?;
            tracing::info!(node = node_name, provider_id, "set the Node's providerID");
        }
        Some(other) if other != provider_id => {
            tracing::warn!(
                node = node_name,
                node_provider_id = other,
                provider_id,
                "the Node's providerID differs from its Machine's"
            );
        }
        _ => {}
    }
    done.insert(node_name);
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn nodelink_annotation_names_the_machine() {
        let node = |annotation: &str| -> Node {
            serde_json::from_value(json!({"metadata": {"name": "n",
                "annotations": {MACHINE_ANNOTATION: annotation}}}))
            .unwrap()
        };
        assert_eq!(
            machine_of_node(&node("openshift-machine-api/worker-0")),
            Some(("openshift-machine-api".into(), "worker-0".into()))
        );
        for bad in ["worker-0", "/worker-0", "ns/", "a/b/c"] {
            assert_eq!(machine_of_node(&node(bad)), None, "{bad}");
        }
        let bare: Node = serde_json::from_value(json!({"metadata": {"name": "n"}})).unwrap();
        assert_eq!(machine_of_node(&bare), None);
    }
}
