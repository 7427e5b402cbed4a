//! Node link support: which Machine a Node belongs to (so a Node change requeues its Machine),
//! and `Node.spec.providerID` set when the Node is the Machine's and has none (Windows nodes
//! have no cloud controller manager to set it). The decisions are in [`crate::plan::machine::node_link`].

use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use serde_json::json;

use super::error::Error;
use crate::api::{GuardedMachine, Machine};
use crate::plan::machine::node_link::ProviderIdAction;
pub use crate::plan::machine::node_link::{
    MACHINE_ANNOTATION, machine_of_node, provider_id_action,
};

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

/// Sets `spec.providerID` on the Machine's Node when it has none and is the Machine's
/// ([`provider_id_action`]).
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
    apply_provider_id_action(
        client,
        &provider_id_action(machine, &node, provider_id),
        node_name,
    )
    .await?;
    done.insert(node_name);
    Ok(())
}

/// Performs `action` on Node `node_name`: the patch for [`ProviderIdAction::Set`], a log line
/// otherwise. Returns whether it wrote.
pub async fn apply_provider_id_action(
    client: &kube::Client,
    action: &ProviderIdAction,
    node_name: &str,
) -> Result<bool, Error> {
    match action {
        ProviderIdAction::Set(provider_id) => {
            Api::<Node>::all(client.clone())
                .patch(
                    node_name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"providerID": provider_id}})),
                )
                .await
                .map_err(|e| Error::kube(format!("set providerID of Node {node_name}"), e))?;
            tracing::info!(node = node_name, %provider_id, "set the Node's providerID");
            Ok(true)
        }
        ProviderIdAction::Differs { node, machine } => {
            tracing::warn!(
                node = node_name,
                node_provider_id = %node,
                provider_id = %machine,
                "the Node's providerID differs from its Machine's"
            );
            Ok(false)
        }
        ProviderIdAction::NotOurs(why) => {
            tracing::debug!(node = node_name, %why, "providerID left alone");
            Ok(false)
        }
        ProviderIdAction::AlreadySet => Ok(false),
    }
}
