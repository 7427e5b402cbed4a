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
//! writer of a Machine, the provider, nodelink, the MachineSet controller, adds an entry); and with
//! one copy of each distinct providerSpec ([`SharedSpecs`]): the Machines of a MachineSet carry
//! the same one, which was the largest part of the cache in a heap profile at 1,000 Machines
//! (docs/performance.md).

use futures::{Stream, StreamExt};
use kube::Api;
use kube::ResourceExt;
use kube::runtime::reflector::{self, ReflectHandle, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;

use std::sync::Arc;

use serde_json::Value;

use crate::actuator::inventory::ScopeSource;
use crate::api::{CLUSTER_ID_LABEL, GuardedMachine};
use crate::plan::vm::scope::VmNameScope;

/// Changes one controller may leave unread before the watch waits for it (each is a reference
/// into the store, not a copy of the Machine).
const CHANGES_BUFFERED: usize = 1024;

/// Distinct providerSpecs the cache shares at most (a cluster has a few MachineSets; past this
/// many, a Machine keeps its own copy).
const SHARED_SPECS_MAX: usize = 64;

/// One copy of each distinct providerSpec value among the cached Machines.
#[derive(Debug, Default)]
struct SharedSpecs {
    specs: Vec<Arc<Value>>,
}

impl SharedSpecs {
    /// Points `spec` at the copy already kept of an equal value, or keeps it as that copy.
    fn share(&mut self, spec: &mut Option<Arc<Value>>) {
        let Some(spec) = spec else {
            return;
        };
        // A value no cached Machine holds any more is forgotten.
        self.specs.retain(|kept| Arc::strong_count(kept) > 1);
        if let Some(kept) = self.specs.iter().find(|kept| ***kept == **spec) {
            *spec = kept.clone();
        } else if self.specs.len() < SHARED_SPECS_MAX {
            self.specs.push(spec.clone());
        }
    }
}

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
        let mut specs = SharedSpecs::default();
        let reflect = reflector::reflector(
            writer,
            events.modify(move |guarded: &mut GuardedMachine| {
                if let Ok(machine) = guarded.0.as_mut() {
                    machine.managed_fields_mut().clear();
                    specs.share(&mut machine.spec.provider_spec.value);
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

    fn with_spec(name: &str, image: &str) -> GuardedMachine {
        let mut guarded = guarded(name);
        if let Ok(machine) = guarded.0.as_mut() {
            machine.spec.provider_spec.value = Some(Arc::new(json!({
                "kind": "NutanixMachineProviderConfig",
                "image": {"type": "name", "name": image},
            })));
        }
        guarded
    }

    fn spec_of(store: &Store<GuardedMachine>, name: &str) -> Arc<Value> {
        let cached = store
            .get(&ObjectRef::new(name).within("openshift-machine-api"))
            .unwrap();
        let machine = cached.0.as_ref().unwrap();
        machine.spec.provider_spec.value.clone().unwrap()
    }

    #[tokio::test]
    async fn equal_provider_specs_are_cached_once_and_different_ones_apart() {
        let cache = MachineCache::new();
        let store = cache.store();
        let feed = cache.subscribe();
        let (mut events, receiver) = futures::channel::mpsc::unbounded();
        let watch = tokio::spawn(cache.run_on(receiver));
        for event in [
            watcher::Event::Init,
            watcher::Event::InitApply(with_spec("a", "rhcos")),
            watcher::Event::InitApply(with_spec("b", "rhcos")),
            watcher::Event::InitApply(with_spec("c", "windows")),
            watcher::Event::InitDone,
        ] {
            events.send(Ok(event)).await.unwrap();
        }
        let (store_ready, _changes) =
            tokio::time::timeout(Duration::from_secs(5), feed.when_ready())
                .await
                .unwrap()
                .unwrap();
        assert_eq!(store_ready.state().len(), 3);
        let (a, b, c) = (
            spec_of(&store, "a"),
            spec_of(&store, "b"),
            spec_of(&store, "c"),
        );
        assert!(Arc::ptr_eq(&a, &b), "one copy for equal specs");
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(
            c["image"]["name"], "windows",
            "each Machine keeps its own value"
        );
        watch.abort();
    }

    #[test]
    fn a_spec_no_cached_machine_holds_is_forgotten() {
        let mut specs = SharedSpecs::default();
        let mut first = Some(Arc::new(json!({"image": "rhcos"})));
        specs.share(&mut first);
        assert_eq!(specs.specs.len(), 1);
        drop(first);
        let mut other = Some(Arc::new(json!({"image": "windows"})));
        specs.share(&mut other);
        assert_eq!(specs.specs.len(), 1, "the dropped value is not kept");
        assert_eq!(*specs.specs[0], json!({"image": "windows"}));
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
