//! Node link support: which Machine a Node belongs to (so a Node change requeues its Machine),
//! and the Node's `spec.providerID` written when the Machine protocol asks for it. Whether to
//! write it is [`crate::plan::machine::node_link`]'s and `decide`'s.

use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::error::Error;
use crate::api::GuardedMachine;
use crate::plan::machine::node_link::NodeOwner;
pub use crate::plan::machine::node_link::{MACHINE_ANNOTATION, machine_of_node};

/// The Machine to requeue when `node` changes: by nodelink's annotation, else by providerID
/// among the watched Machines, else, for a Node that has neither yet, the Machine it is named
/// as (whose protocol may set its providerID before nodelink links them).
pub fn machine_to_requeue(
    node: &Node,
    machines: &Store<GuardedMachine>,
) -> Option<ObjectRef<GuardedMachine>> {
    if let Some((namespace, name)) = machine_of_node(node) {
        return Some(ObjectRef::new(&name).within(&namespace));
    }
    let provider_id = node
        .spec
        .as_ref()
        .and_then(|spec| spec.provider_id.as_deref())
        .unwrap_or_default();
    let node_name = node.name_any();
    machines.state().iter().find_map(|guarded| {
        let machine = guarded.0.as_ref().ok()?;
        let ours = if provider_id.is_empty() {
            NodeOwner::of(machine)
                .node_names()
                .iter()
                .any(|name| name.eq_ignore_ascii_case(&node_name))
        } else {
            machine.spec.provider_id.as_deref() == Some(provider_id)
        };
        ours.then(|| ObjectRef::from_obj(guarded.as_ref()))
    })
}

/// Sets Node `node`'s `spec.providerID`, decided where the watch cache showed none; the Node
/// as the patch left it. No
/// resourceVersion: the API server refuses to change a providerID once set (k8s.io/kubernetes
/// `pkg/apis/core/validation/validation.go`, `ValidateNodeUpdate`, v1.34.2 lines 6970-6973), so
/// a cloud controller manager's value set in between is answered 422 and never overwritten,
/// while the Node's other writers (nodelink's annotation right after it links the Node, the
/// kubelet's status) no longer make this write fail with 409.
pub async fn set_provider_id(
    client: &kube::Client,
    node: &str,
    provider_id: &str,
) -> Result<Node, Error> {
    let patch = json!({"spec": {"providerID": provider_id}});
    let patched = Api::<Node>::all(client.clone())
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| Error::kube(format!("set providerID of Node {node}"), e))?;
    tracing::info!(node, %provider_id, "set the Node's providerID");
    Ok(patched)
}
