//! Draining a Node before its Machine's VM is deleted: cordon, then evict (see
//! [`crate::plan::machine::drain`] for which pods), one round per reconcile. A round that leaves pods
//! behind (an eviction blocked by a PodDisruptionBudget, pods still terminating) reports what
//! blocks and is tried again later; nothing waits inside a reconcile.

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{DeleteParams, EvictParams, ListParams};

use super::error::Error;
use super::shared::Shared;
use crate::plan::machine::DrainProgress;
use crate::plan::machine::drain::{is_unreachable, plan_drain};

/// One drain round on `node_name`.
pub async fn drain_round(shared: &Shared, node_name: &str) -> Result<DrainProgress, Error> {
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
