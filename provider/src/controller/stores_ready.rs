//! A readiness flag for reflector stores that any number of reconciles can check at once.
//!
//! kube-runtime's `Store::wait_until_ready` waits on a oneshot receiver that keeps a single waker:
//! when two tasks wait at the same time only the most recent is woken, and the other waits for
//! good (seen as a Windows Machine that never got its condition). So exactly one task waits for
//! the stores and publishes the outcome in a flag that reconciles read without waiting. A
//! controller's own store must not be among them: kube-runtime's `Controller` already waits on it
//! before running any reconcile, and a second waiter would race with that wait.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::task::JoinHandle;

/// Set once the stores behind it have their first full list.
#[derive(Debug)]
pub struct StoresReady {
    ready: Arc<AtomicBool>,
    waiter: JoinHandle<()>,
}

impl StoresReady {
    /// Starts the one task that waits: `all_ready` resolves to `true` once every store is filled
    /// (for example by awaiting each store's `wait_until_ready` in turn), or `false` when a store
    /// can never be (its writer is gone).
    pub fn spawn(all_ready: impl Future<Output = bool> + Send + 'static) -> Self {
        let ready = Arc::new(AtomicBool::new(false));
        let flag = ready.clone();
        let waiter = tokio::spawn(async move {
            if all_ready.await {
                flag.store(true, Ordering::Release);
            }
        });
        Self { ready, waiter }
    }

    /// Whether every store has its first full list.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }
}

impl Drop for StoresReady {
    fn drop(&mut self) {
        self.waiter.abort();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use k8s_openapi::api::core::v1::{ConfigMap, Node};
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;

    use super::*;

    async fn eventually(gate: &StoresReady) -> bool {
        for _ in 0..200 {
            if gate.is_ready() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        false
    }

    #[tokio::test]
    async fn ready_only_once_every_store_has_its_first_list() {
        let (config_maps, mut config_map_writer) = reflector::store::<ConfigMap>();
        let (nodes, mut node_writer) = reflector::store::<Node>();
        let gate = StoresReady::spawn(async move {
            config_maps.wait_until_ready().await.is_ok() && nodes.wait_until_ready().await.is_ok()
        });
        // The stores are filled in the opposite order of the waits.
        node_writer.apply_watcher_event(&Event::Init);
        node_writer.apply_watcher_event(&Event::InitDone);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!gate.is_ready(), "one store is still empty");
        config_map_writer.apply_watcher_event(&Event::Init);
        config_map_writer.apply_watcher_event(&Event::InitDone);
        assert!(eventually(&gate).await);
    }

    #[tokio::test]
    async fn many_concurrent_readers_all_see_readiness() {
        let (nodes, mut node_writer) = reflector::store::<Node>();
        let gate = Arc::new(StoresReady::spawn(async move {
            nodes.wait_until_ready().await.is_ok()
        }));
        // As many readers as concurrent reconciles; with `wait_until_ready` in each, all but one
        // would hang.
        let readers: Vec<_> = (0..8)
            .map(|_| {
                let gate = gate.clone();
                tokio::spawn(async move { eventually(&gate).await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(20)).await;
        node_writer.apply_watcher_event(&Event::Init);
        node_writer.apply_watcher_event(&Event::InitDone);
        for reader in readers {
            assert!(reader.await.unwrap());
        }
    }

    #[tokio::test]
    async fn never_ready_when_a_store_cannot_be_filled() {
        let (nodes, node_writer) = reflector::store::<Node>();
        let gate = StoresReady::spawn(async move { nodes.wait_until_ready().await.is_ok() });
        drop(node_writer);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!gate.is_ready());
    }
}
