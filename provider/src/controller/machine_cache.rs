//! One cache of the watched Machines, shared by the Machine controller and the Windows join
//! reconciler: one watch, one decoded copy of each Machine, and each controller triggered by the
//! same changes (kube-runtime's shared reflector, `Controller::for_shared_stream`).
//!
//! Readiness needs care: kube-runtime's `Controller` waits on its store's readiness before its
//! first reconcile, and a store's readiness wakes only the last of several waiters
//! ([`super::stores_ready`]). So exactly one task waits on the store and publishes the outcome;
//! each controller starts only after it, when the store's own wait returns at once.
//!
//! Cached without `metadata.managedFields`, which no controller reads (on a real cluster each
//! writer of a Machine, the provider, nodelink, the MachineSet controller, adds an entry).

use futures::{Stream, StreamExt};
use kube::Api;
use kube::ResourceExt;
use kube::runtime::reflector::{self, ReflectHandle, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;

use std::sync::Arc;

use crate::actuator::inventory::ScopeSource;
use crate::api::{CLUSTER_ID_LABEL, GuardedMachine};
use crate::plan::vm::scope::VmNameScope;

/// Changes one controller may leave unread before the watch waits for it (each is a reference
/// into the store, not a copy of the Machine).
const CHANGES_BUFFERED: usize = 1024;

/// The shared cache before its watch runs: hands out a [`MachineFeed`] per controller.
#[derive(Debug)]
pub struct MachineCache {
    writer: Writer<GuardedMachine>,
    store: Store<GuardedMachine>,
    ready: watch::Sender<bool>,
}

/// One controller's view of the shared cache: the store, and the Machines that changed.
pub struct MachineFeed {
    store: Store<GuardedMachine>,
    changes: ReflectHandle<GuardedMachine>,
    ready: watch::Receiver<bool>,
}

impl std::fmt::Debug for MachineFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MachineFeed")
            .field("ready", &*self.ready.borrow())
            .finish_non_exhaustive()
    }
}

impl Default for MachineCache {
    fn default() -> Self {
        Self::new()
    }
}

impl MachineCache {
    pub fn new() -> Self {
        let writer = Writer::new_shared(CHANGES_BUFFERED, ());
        let store = writer.as_reader();
        let (ready, _) = watch::channel(false);
        Self {
            writer,
            store,
            ready,
        }
    }

    /// A feed for one more controller. Every feed must be taken before [`Self::run`], and each
    /// must be read (a controller that stops reading stops the watch for all).
    pub fn subscribe(&self) -> MachineFeed {
        MachineFeed {
            store: self.store.clone(),
            // A writer made by `new_shared` always has a dispatcher.
            changes: self
                .writer
                .subscribe()
                .unwrap_or_else(|| unreachable!("a shared writer hands out subscriptions")),
            ready: self.ready.subscribe(),
        }
    }

    /// The cache's store, for readers that only look (the Machine metrics).
    pub fn store(&self) -> Store<GuardedMachine> {
        self.store.clone()
    }

    /// The names of the cached Machines' VMs, for the VM inventory to list.
    pub fn vm_scope(&self) -> ScopeSource {
        let store = self.store.clone();
        Arc::new(move || {
            let machines = store.state();
            let readable = || {
                machines
                    .iter()
                    .filter_map(|guarded| guarded.0.as_ref().ok())
            };
            let mut scope = VmNameScope::of(readable().map(|machine| {
                (
                    machine.metadata.name.as_deref().unwrap_or_default(),
                    machine.machine_set(),
                )
            }));
            for machine in readable() {
                if let Some(infra_id) = machine.labels().get(CLUSTER_ID_LABEL) {
                    scope.add_cluster_id(infra_id);
                }
            }
            scope
        })
    }

    /// Watches the Machines of `api` into the cache until the watch ends.
    pub async fn run(self, api: Api<GuardedMachine>) {
        let events = watcher(api, watcher::Config::default()).default_backoff();
        self.run_on(events).await;
    }

    /// Feeds the cache from `events` (a watcher's stream) until it ends.
    pub async fn run_on(
        self,
        events: impl Stream<Item = watcher::Result<watcher::Event<GuardedMachine>>> + Send,
    ) {
        let Self {
            writer,
            store,
            ready,
        } = self;
        let announce = async move {
            // The one waiter on the store's readiness (see the module's note).
            if store.wait_until_ready().await.is_ok() {
                ready.send_replace(true);
            }
            // Keeps the sender, so that feeds waiting for readiness never see it dropped first.
            std::future::pending::<()>().await;
        };
        let reflect = reflector::reflector(
            writer,
            events.modify(|guarded: &mut GuardedMachine| {
                if let Ok(machine) = guarded.0.as_mut() {
                    machine.managed_fields_mut().clear();
                }
            }),
        )
        .for_each(|event| async move {
            if let Err(error) = event {
                tracing::debug!(%error, "Machine watch");
            }
        });
        tokio::select! {
            () = reflect => {}
            () = announce => {}
        }
    }
}

impl MachineFeed {
    /// Waits until the cache has its first full list, then gives the store and the stream of
    /// changed Machines; `None` when the cache can never be filled (its watch is gone).
    pub async fn when_ready(
        mut self,
    ) -> Option<(Store<GuardedMachine>, ReflectHandle<GuardedMachine>)> {
        self.ready.wait_for(|ready| *ready).await.ok()?;
        Some((self.store, self.changes))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::SinkExt;
    use kube::runtime::reflector::ObjectRef;
    use serde_json::json;

    use super::*;

    fn guarded(name: &str) -> GuardedMachine {
        serde_json::from_value(json!({
            "apiVersion": "machine.openshift.io/v1beta1",
            "kind": "Machine",
            "metadata": {
                "name": name,
                "namespace": "openshift-machine-api",
                "managedFields": [{"manager": "nodelink", "operation": "Update"}],
            },
            "spec": {},
        }))
        .unwrap()
    }

    #[tokio::test]
    async fn both_controllers_waiting_at_once_see_the_filled_cache() {
        let cache = MachineCache::new();
        let feeds = [cache.subscribe(), cache.subscribe()];
        let (mut events, receiver) = futures::channel::mpsc::unbounded();
        let watch = tokio::spawn(cache.run_on(receiver));
        // Both wait before the first list has arrived: the store's own readiness would wake
        // only one of them.
        let waiting: Vec<_> = feeds
            .into_iter()
            .map(|feed| tokio::spawn(feed.when_ready()))
            .collect();
        tokio::time::sleep(Duration::from_millis(20)).await;
        for event in [
            watcher::Event::Init,
            watcher::Event::InitApply(guarded("a")),
            watcher::Event::InitApply(guarded("b")),
            watcher::Event::InitDone,
        ] {
            events.send(Ok(event)).await.unwrap();
        }
        for waiter in waiting {
            let (store, changes) = tokio::time::timeout(Duration::from_secs(5), waiter)
                .await
                .expect("each feed is woken")
                .unwrap()
                .expect("the cache is filled");
            assert_eq!(store.state().len(), 2);
            // Each controller is handed every Machine of the first list.
            let mut names: Vec<String> = changes
                .take(2)
                .map(|machine| machine.name_any())
                .collect()
                .await;
            names.sort();
            assert_eq!(names, ["a", "b"]);
            let cached = store
                .get(&ObjectRef::new("a").within("openshift-machine-api"))
                .unwrap();
            let machine = cached.0.as_ref().unwrap();
            assert!(
                machine
                    .metadata
                    .managed_fields
                    .as_ref()
                    .is_none_or(Vec::is_empty)
            );
        }
        watch.abort();
    }

    #[tokio::test]
    async fn a_feed_is_never_ready_when_the_watch_ends_before_its_first_list() {
        let cache = MachineCache::new();
        let feed = cache.subscribe();
        cache.run_on(futures::stream::empty()).await;
        assert!(feed.when_ready().await.is_none());
    }
}
