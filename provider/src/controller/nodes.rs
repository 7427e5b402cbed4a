//! Nodes as the controllers cache them: one watch and one store, shared by the Machine controller
//! and the Windows join reconciler ([`NodeCache`]). A real Node's image list and managed fields
//! are most of its size, and a cluster has one per Machine, so the store keeps only what the
//! Machine protocol and the Windows join read (name, labels, annotations, taints, providerID,
//! addresses, systemUUID).

use std::sync::Arc;

use futures::channel::mpsc;
use futures::{SinkExt, Stream, StreamExt};
use k8s_openapi::api::core::v1::{Node, NodeStatus, NodeSystemInfo};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use tokio::sync::watch;

/// Node changes one controller may leave unread before the watch waits for it (each a
/// reference-counted copy of the projected Node, shared by the controllers).
const CHANGES_BUFFERED: usize = 1024;

/// A Node as the controllers read it: every field [`crate::plan::windows_join`] and
/// [`crate::plan::machine::node_link`] never look at is dropped before it is cached.
pub fn project_node(node: &mut Node) {
    node.managed_fields_mut().clear();
    node.metadata.owner_references = None;
    if let Some(spec) = node.spec.as_mut() {
        spec.config_source = None;
        spec.pod_cidr = None;
        spec.pod_cidrs = None;
    }
    if let Some(status) = node.status.as_mut() {
        let system_uuid = status
            .node_info
            .take()
            .map(|info| info.system_uuid)
            .unwrap_or_default();
        *status = NodeStatus {
            addresses: status.addresses.take(),
            node_info: Some(NodeSystemInfo {
                system_uuid,
                ..NodeSystemInfo::default()
            }),
            ..NodeStatus::default()
        };
    }
}

/// The shared Node cache before its watch runs: hands out a [`NodeFeed`] per controller. One
/// store instead of one per controller: a projected Node is kept once, and the API server
/// serves one list and one watch.
#[derive(Debug)]
pub struct NodeCache {
    store: Store<Node>,
    writer: reflector::store::Writer<Node>,
    subscribers: Vec<mpsc::Sender<Arc<Node>>>,
    ready: watch::Sender<bool>,
}

/// One controller's view of the shared Node cache: the store, whether it has its first full
/// list, and every Node the watch takes in or sees deleted (a deletion matters: a Machine being
/// deleted waits for its Node to go).
#[derive(Debug)]
pub struct NodeFeed {
    pub store: Store<Node>,
    pub changes: mpsc::Receiver<Arc<Node>>,
    ready: watch::Receiver<bool>,
}

impl NodeFeed {
    /// Resolves to `true` once the store has its first full list, `false` when it never will (the
    /// watch is gone). Any number of tasks may wait at once (unlike the store's own wait, which
    /// wakes only the last of them: [`super::stores_ready`]).
    pub fn filled(&self) -> impl Future<Output = bool> + Send + 'static {
        let mut ready = self.ready.clone();
        async move { ready.wait_for(|filled| *filled).await.is_ok() }
    }
}

impl Default for NodeCache {
    fn default() -> Self {
        Self::new()
    }
}

impl NodeCache {
    pub fn new() -> Self {
        let (store, writer) = reflector::store();
        let (ready, _) = watch::channel(false);
        Self {
            store,
            writer,
            subscribers: Vec::new(),
            ready,
        }
    }

    /// A feed for one more controller. Every feed must be taken before [`Self::run`], and each
    /// must be read (a controller that stops reading stops the watch for all; one that is gone
    /// is left out).
    pub fn subscribe(&mut self) -> NodeFeed {
        let (sender, changes) = mpsc::channel(CHANGES_BUFFERED);
        self.subscribers.push(sender);
        NodeFeed {
            store: self.store.clone(),
            changes,
            ready: self.ready.subscribe(),
        }
    }

    /// Watches every Node into the cache until the watch ends.
    pub async fn run(self, client: kube::Client) {
        let events =
            watcher(Api::<Node>::all(client), watcher::Config::default()).default_backoff();
        self.run_on(events).await;
    }

    /// Feeds the cache from `events` (a watcher's stream) until it ends.
    pub async fn run_on(
        self,
        events: impl Stream<Item = watcher::Result<watcher::Event<Node>>> + Send,
    ) {
        let Self {
            store,
            writer,
            mut subscribers,
            ready,
        } = self;
        let lookup = store.clone();
        let announce = async move {
            // The one waiter on the store's readiness.
            if store.wait_until_ready().await.is_ok() {
                ready.send_replace(true);
            }
            // Keeps the sender, so that feeds waiting for readiness never see it dropped first.
            std::future::pending::<()>().await;
        };
        let fan_out = async move {
            let mut touched = std::pin::pin!(
                reflector::reflector(writer, events.modify(project_node)).touched_objects()
            );
            while let Some(node) = touched.next().await {
                match node {
                    Ok(node) => {
                        // The store's own copy, where it has one (not for a deleted Node).
                        let node = lookup
                            .get(&ObjectRef::from_obj(&node))
                            .unwrap_or_else(|| Arc::new(node));
                        let mut kept = Vec::with_capacity(subscribers.len());
                        for mut subscriber in subscribers {
                            if subscriber.send(node.clone()).await.is_ok() {
                                kept.push(subscriber);
                            }
                        }
                        subscribers = kept;
                    }
                    Err(error) => tracing::debug!(%error, "Node watch"),
                }
            }
        };
        tokio::select! {
            () = fan_out => {}
            () = announce => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn node(name: &str) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "managedFields": [{"manager": "kubelet"}]},
            "status": {"images": [{"names": ["registry/pause"], "sizeBytes": 1}]},
        }))
        .unwrap()
    }

    #[tokio::test]
    async fn every_feed_sees_each_node_taken_in_or_deleted_from_one_projected_store() {
        let mut cache = NodeCache::new();
        let mut feeds = [cache.subscribe(), cache.subscribe()];
        let waiting: Vec<_> = feeds
            .iter()
            .map(|feed| tokio::spawn(feed.filled()))
            .collect();
        let (mut events, receiver) = futures::channel::mpsc::unbounded();
        let watch = tokio::spawn(cache.run_on(receiver));
        for event in [
            watcher::Event::Init,
            watcher::Event::InitApply(node("a")),
            watcher::Event::InitDone,
            watcher::Event::Apply(node("b")),
            watcher::Event::Delete(node("a")),
        ] {
            events.send(Ok(event)).await.unwrap();
        }
        for waiter in waiting {
            let filled = tokio::time::timeout(Duration::from_secs(5), waiter).await;
            assert!(filled.expect("each waiter is woken").unwrap());
        }
        for feed in &mut feeds {
            let seen: Vec<String> = tokio::time::timeout(
                Duration::from_secs(5),
                (&mut feed.changes)
                    .take(3)
                    .map(|node| node.name_any())
                    .collect(),
            )
            .await
            .expect("each feed gets every change");
            assert_eq!(seen, ["a", "b", "a"], "the deletion of a included");
            let cached: Vec<Arc<Node>> = feed.store.state();
            assert_eq!(cached.len(), 1);
            assert!(
                cached[0].status.as_ref().unwrap().images.is_none(),
                "projected"
            );
        }
        assert!(
            Arc::ptr_eq(&feeds[0].store.state()[0], &feeds[1].store.state()[0]),
            "one copy of each Node"
        );
        watch.abort();
    }

    #[tokio::test]
    async fn a_feed_is_never_filled_when_the_watch_ends_before_its_first_list() {
        let mut cache = NodeCache::new();
        let feed = cache.subscribe();
        cache.run_on(futures::stream::empty()).await;
        assert!(!feed.filled().await);
    }

    #[test]
    fn a_cached_node_keeps_what_the_controllers_read_and_nothing_else() {
        let mut node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "win-1",
                "labels": {"kubernetes.io/os": "windows"},
                "annotations": {"machine.openshift.io/machine": "openshift-machine-api/win-1"},
                "managedFields": [{"manager": "kubelet"}],
            },
            "spec": {
                "providerID": "nutanix://0d2d9c8e",
                "taints": [{"key": "os", "value": "Windows", "effect": "NoSchedule"}],
                "podCIDR": "10.128.2.0/24",
            },
            "status": {
                "addresses": [{"type": "InternalIP", "address": "10.40.15.20"}],
                "nodeInfo": {"systemUUID": "0D2D9C8E", "machineID": "m", "bootID": "b",
                    "kernelVersion": "10.0.20348", "osImage": "Windows Server 2022",
                    "containerRuntimeVersion": "containerd://1.7", "kubeletVersion": "v1.33.2",
                    "kubeProxyVersion": "", "operatingSystem": "windows", "architecture": "amd64"},
                "capacity": {"cpu": "4", "memory": "16Gi"},
                "conditions": [{"type": "Ready", "status": "True"}],
                "images": [{"names": ["registry/pause"], "sizeBytes": 1}],
            },
        }))
        .unwrap();
        let before = node.clone();
        project_node(&mut node);
        assert_eq!(node.metadata.name, before.metadata.name);
        assert_eq!(node.metadata.labels, before.metadata.labels);
        assert_eq!(node.metadata.annotations, before.metadata.annotations);
        assert!(node.metadata.managed_fields.is_none_or(|f| f.is_empty()));
        let (spec, was) = (node.spec.unwrap(), before.spec.unwrap());
        assert_eq!(spec.provider_id, was.provider_id);
        assert_eq!(spec.taints, was.taints);
        assert_eq!(spec.pod_cidr, None);
        let status = node.status.unwrap();
        assert_eq!(status.addresses, before.status.as_ref().unwrap().addresses);
        assert_eq!(status.node_info.unwrap().system_uuid, "0D2D9C8E");
        assert_eq!(status.capacity, None);
        assert_eq!(status.conditions, None);
        assert_eq!(status.images, None);
    }
}
