//! The kubelet's heartbeat: each joined Node's kubelet renews its Lease `kube-node-lease/<node>`
//! (holder the node, 40 s, owned by its Node) every quarter of its duration (kubernetes v1.34.2
//! `pkg/kubelet/kubelet.go`: `NodeLeaseDurationSeconds` 40 by default,
//! `nodeLeaseRenewIntervalFraction` 0.25; `k8s.io/component-helpers/apimachinery/lease`,
//! `newLease`, with the kubelet's owner reference to its Node). kube-controller-manager's node
//! lifecycle controller marks a Node whose Lease and status both went stale `Unknown`, so
//! without this every Node of a long run on the real control plane would turn `NotReady`.
//!
//! A guest that stops (its VM powered off or gone) stops renewing, as a dead kubelet does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::lock;

/// `kube-node-lease`, where every kubelet's Lease lives.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";
const LEASE_DURATION_SECONDS: i32 = 40;
const RENEW_EVERY: Duration = Duration::from_secs(10);
/// How often the agent looks for a kubelet due to beat (a new Node's first beat comes at once).
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// A joined Node's kubelet: the client it renews with (its own identity on the real control
/// plane) and its Node's UID (the Lease's owner).
pub(super) struct Heartbeat {
    client: Client,
    node_uid: String,
    lease: Option<Lease>,
    last_beat: Option<Instant>,
}

impl Heartbeat {
    pub(super) fn new(client: Client, node_uid: String) -> Self {
        Self {
            client,
            node_uid,
            lease: None,
            last_beat: None,
        }
    }

    fn due(&self) -> bool {
        self.last_beat.is_none_or(|at| at.elapsed() >= RENEW_EVERY)
    }
}

/// The kubelets that beat, by Node name.
pub(super) type Heartbeats = Arc<Mutex<HashMap<String, Heartbeat>>>;

fn lease_object(
    node: &str,
    node_uid: &str,
    base: Option<Lease>,
) -> Result<Lease, serde_json::Error> {
    let mut lease = match base {
        Some(lease) => serde_json::to_value(lease)?,
        None => json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {
                "name": node, "namespace": NODE_LEASE_NAMESPACE,
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid}],
            },
            "spec": {"holderIdentity": node},
        }),
    };
    lease["spec"]["leaseDurationSeconds"] = json!(LEASE_DURATION_SECONDS);
    lease["spec"]["renewTime"] = json!(Timestamp::now().to_string());
    serde_json::from_value(lease)
}

/// Renews one kubelet's Lease: an update of the last one it wrote, or a create (and on a lost
/// race or a Lease gone, the next beat starts from what the server has).
async fn beat(node: &str, heartbeat: &mut Heartbeat) {
    heartbeat.last_beat = Some(Instant::now());
    let api: Api<Lease> = Api::namespaced(heartbeat.client.clone(), NODE_LEASE_NAMESPACE);
    let base = heartbeat.lease.take();
    let update = base.is_some();
    let lease = match lease_object(node, &heartbeat.node_uid, base) {
        Ok(lease) => lease,
        Err(error) => {
            tracing::debug!(%node, %error, "kubelet: cannot build the Lease");
            return;
        }
    };
    let written = if update {
        api.replace(node, &PostParams::default(), &lease).await
    } else {
        api.create(&PostParams::default(), &lease).await
    };
    match written {
        Ok(lease) => heartbeat.lease = Some(lease),
        Err(error) => {
            tracing::debug!(%node, %error, "kubelet: Lease not renewed; reading it again");
            heartbeat.lease = api.get_opt(node).await.ok().flatten();
        }
    }
}

/// Renews the Lease of every kubelet in `heartbeats` whose guest `beating` still runs, at once
/// and then every 10 s, until `cancel` fires.
pub(super) async fn renew_leases(
    heartbeats: Heartbeats,
    beating: Arc<dyn Fn(&str) -> bool + Send + Sync>,
    cancel: CancellationToken,
) {
    loop {
        let due: Vec<(String, Heartbeat)> = {
            let mut heartbeats = lock(&heartbeats);
            heartbeats.retain(|node, _| beating(node));
            let due: Vec<String> = heartbeats
                .iter()
                .filter(|(_, h)| h.due())
                .map(|(node, _)| node.clone())
                .collect();
            due.into_iter()
                .filter_map(|node| heartbeats.remove_entry(&node))
                .collect()
        };
        let mut renewed = Vec::with_capacity(due.len());
        for (node, mut heartbeat) in due {
            beat(&node, &mut heartbeat).await;
            renewed.push((node, heartbeat));
        }
        {
            let mut heartbeats = lock(&heartbeats);
            for (node, heartbeat) in renewed {
                // A join that registered the Node again meanwhile has the newer kubelet.
                heartbeats.entry(node).or_insert(heartbeat);
            }
        }
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(LOOK_EVERY) => {}
        }
    }
}
