//! Draining a Node before its Machine's VM is deleted: cordon, then evict (see
//! [`crate::plan::machine::drain`] for which pods), one round per reconcile. A round that leaves pods
//! behind (an eviction blocked by a PodDisruptionBudget, pods still terminating) reports what
//! blocks and is tried again later; nothing waits inside a reconcile.
//!
//! A control-plane Node is cordoned only while no other control-plane Node is
//! ([`crate::plan::machine::drain::drain_permission`], MAO's `isDrainAllowed`). The check reads
//! the control-plane Nodes from the API server, not the watch cache, and it and the cordon are
//! made under [`ControlPlaneCordon`], so two Machines reconciled at once cannot both pass it
//! before either's cordon is seen (MAO's drain controller runs one reconcile at a time).

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{DeleteParams, EvictParams, ListParams};

use super::error::Error;
use super::shared::Shared;
use crate::plan::machine::DrainProgress;
use crate::plan::machine::drain::{
    CONTROL_PLANE_NODE_LABELS, DrainPermission, drain_permission, is_unreachable,
    needs_control_plane_check, plan_drain,
};

/// Held while a control-plane Node's drain is allowed and its Node cordoned.
#[derive(Debug, Default)]
pub struct ControlPlaneCordon(tokio::sync::Mutex<()>);

/// One drain round on `node_name`.
pub async fn drain_round(
    shared: &Shared,
    cordon_lock: &ControlPlaneCordon,
    node_name: &str,
) -> Result<DrainProgress, Error> {
    let nodes: Api<Node> = Api::all(shared.client.clone());
    let Some(node) = nodes
        .get_opt(node_name)
        .await
        .map_err(|e| Error::kube(format!("read Node {node_name}"), e))?
    else {
        return Ok(DrainProgress::Done);
    };
    let cordoned = node
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false);
    let _held = if needs_control_plane_check(&node) {
        let held = cordon_lock.0.lock().await;
        let control_plane = control_plane_nodes(&nodes).await?;
        if let DrainPermission::OtherControlPlaneCordoned { node: other_node } =
            drain_permission(&node, &control_plane)
        {
            tracing::info!(
                node = node_name,
                other = other_node,
                "drain not permitted: another control-plane Node is cordoned"
            );
            return Ok(DrainProgress::NotPermitted { other_node });
        }
        Some(held)
    } else {
        None
    };
    if !cordoned {
        nodes
            .cordon(node_name)
            .await
            .map_err(|e| Error::kube(format!("cordon Node {node_name}"), e))?;
        tracing::info!(node = node_name, "cordoned");
    }
    let pods: Api<Pod> = Api::all(shared.client.clone());
    let on_node = pods
        .list(&ListParams::default().fields(&format!("spec.nodeName={node_name}")))
        .await
        .map_err(|e| Error::kube(format!("list pods of Node {node_name}"), e))?;
    let plan = plan_drain(&on_node.items, is_unreachable(&node), Timestamp::now());
    if plan.is_done() {
        return Ok(DrainProgress::Done);
    }
    let params = EvictParams {
        delete_options: Some(DeleteParams {
            grace_period_seconds: plan
                .grace_period_seconds
                .and_then(|g| u32::try_from(g).ok()),
            ..DeleteParams::default()
        }),
        ..EvictParams::default()
    };
    let mut blocked = Vec::new();
    let mut evicted = 0;
    for pod in &plan.evict {
        let api: Api<Pod> = Api::namespaced(shared.eviction_client.clone(), &pod.namespace);
        match api.evict(&pod.name, &params).await {
            Ok(_) => evicted += 1,
            Err(kube::Error::Api(status)) if status.code == 404 => evicted += 1,
            Err(kube::Error::Api(status)) if status.code == 429 => {
                blocked.push(format!("{pod}: {}", status.message));
            }
            Err(error) => return Err(Error::kube(format!("evict pod {pod}"), error)),
        }
    }
    tracing::info!(
        node = node_name,
        evicted,
        blocked = blocked.len(),
        waiting = plan.waiting.len(),
        "drain round"
    );
    let mut parts = Vec::new();
    if evicted > 0 {
        parts.push(format!("{evicted} pods evicted, waiting for them to go"));
    }
    if !plan.waiting.is_empty() {
        parts.push(format!("{} pods terminating", plan.waiting.len()));
    }
    if blocked.is_empty() {
        return Ok(DrainProgress::InProgress {
            note: parts.join("; "),
        });
    }
    parts.push(format!("eviction blocked: {}", blocked.join("; ")));
    Ok(DrainProgress::Blocked {
        note: parts.join("; "),
    })
}

/// The Nodes carrying either control-plane label, as the API server has them now.
async fn control_plane_nodes(nodes: &Api<Node>) -> Result<Vec<Node>, Error> {
    let mut found = Vec::new();
    for label in CONTROL_PLANE_NODE_LABELS {
        let listed = nodes
            .list(&ListParams::default().labels(label))
            .await
            .map_err(|e| Error::kube(format!("list Nodes labelled {label}"), e))?;
        found.extend(listed.items);
    }
    Ok(found)
}
