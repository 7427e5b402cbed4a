//! The kubelet's end of a pod's graceful deletion. A real API server only marks a deleted (or
//! evicted) pod bound to a Node with `deletionTimestamp`; the Node's kubelet stops its
//! containers and then deletes it for good, with a grace period of 0 and the pod's UID as
//! precondition (kubernetes v1.34.2 `pkg/kubelet/status/status_manager.go`, `syncPod`, after
//! `canBeDeleted`). Without it a drain never ends on a real API server. kube-sim deletes such a
//! pod at once, so there this finds nothing to do.
//!
//! The sandbox's containers do not exist, so they stop at once: the pod goes as soon as it is
//! seen terminating on a Node of a running guest.

use std::collections::HashSet;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Preconditions};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;

/// The Nodes whose kubelet the agent plays (names of the guests it joined or is joining).
pub(super) type KubeletNodes = Arc<dyn Fn() -> HashSet<String> + Send + Sync>;

/// Watches every pod and deletes for good each terminating one bound to one of `nodes`, until
/// `cancel` fires.
pub(super) async fn finish_terminating_pods(
    client: Client,
    nodes: KubeletNodes,
    cancel: CancellationToken,
) {
    let pods: Api<Pod> = Api::all(client.clone());
    let updates = watcher(pods, watcher::Config::default())
        .default_backoff()
        .applied_objects();
    let finish = updates.for_each(|pod| {
        let client = client.clone();
        let nodes = nodes.clone();
        async move {
            let Ok(pod) = pod else {
                return;
            };
            let terminating = pod.metadata.deletion_timestamp.is_some();
            let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
            if !terminating || !node.is_some_and(|n| nodes().contains(&n)) {
                return;
            }
            let (Some(namespace), Some(uid)) = (pod.namespace(), pod.uid()) else {
                return;
            };
            let api: Api<Pod> = Api::namespaced(client, &namespace);
            let params = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            match api.delete(&pod.name_any(), &params).await {
                Ok(_) => tracing::debug!(pod = %pod.name_any(), "kubelet: pod terminated"),
                // Gone already, or a new pod of the same name (the precondition held it).
                Err(error) => {
                    tracing::debug!(pod = %pod.name_any(), %error, "kubelet: pod not deleted")
                }
            }
        }
    });
    tokio::select! {
        () = cancel.cancelled() => {}
        () = finish => {}
    }
}
