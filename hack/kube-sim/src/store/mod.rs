//! The object store: one lock over per-resource ordered maps, one global resourceVersion counter (as in etcd),
//! a bounded event history for watches, and a broadcast of events to watchers.
//!
//! Every write happens under the write lock, so the order of resourceVersions, history and broadcast is the order
//! of writes. Side effects that the real control plane performs asynchronously and that tests need to be
//! deterministic (PodDisruptionBudget status, CRD registration) happen inside the same write.

mod delete;
mod disruption;
mod gc;
mod rules;
mod write;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::{Notify, broadcast};

use crate::error::{ApiError, ApiResult, Subject};
use crate::meta::{is_deleting, meta_str, metadata_mut};
use crate::resources::{ResourceDef, builtin_resources};
use crate::selector::{FieldSelector, LabelSelector};

pub use disruption::{pdb_status, pod_ready};
use gc::GcFacts;
pub use rules::field_scope;

/// Identifies a resource: (API group, plural).
pub type ResKey = (String, String);

/// An object as stored: the JSON value and its serialization (done once per write).
#[derive(Debug, Clone)]
pub struct Stored {
    /// The object.
    pub value: Arc<Value>,
    /// `serde_json` serialization of `value`.
    pub json: Bytes,
    /// What the garbage collector asks of it, read once per write.
    gc: Arc<GcFacts>,
}

impl Stored {
    fn new(value: Value) -> ApiResult<Self> {
        let json = serde_json::to_vec(&value)
            .map_err(|e| ApiError::internal(format!("cannot serialize object: {e}")))?;
        Ok(Self {
            gc: Arc::new(GcFacts::of(&value)),
            value: Arc::new(value),
            json: Bytes::from(json),
        })
    }
}

/// Watch event type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Object created (or entered a selector's view).
    Added,
    /// Object changed.
    Modified,
    /// Object removed (or left a selector's view).
    Deleted,
}

impl EventType {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One change, as kept in history and broadcast to watchers.
#[derive(Debug)]
pub struct Change {
    /// resourceVersion of the change.
    pub rv: u64,
    /// ADDED / MODIFIED / DELETED.
    pub kind: EventType,
    /// Which resource.
    pub resource: ResKey,
    /// Namespace ("" for cluster-scoped).
    pub namespace: String,
    /// The object after the change (for DELETED: its last state, with the deletion's resourceVersion).
    pub object: Stored,
    /// The object before the change, to turn MODIFIED into ADDED/DELETED for selector watchers.
    pub previous: Option<Arc<Value>>,
    /// When the change was applied (under the write lock, so in resourceVersion order): an
    /// in-process test orders it against the requests of other servers of the same process.
    pub at: Instant,
}

/// Receives every change after a subscription.
pub type ChangeReceiver = broadcast::Receiver<Arc<Change>>;

/// Which part of an object a write targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteTarget {
    /// The main resource (status ignored when the resource has a status subresource).
    Main,
    /// The `/status` subresource (only status changes).
    Status,
    /// Everything (the simulator's own controllers and direct Rust access).
    Whole,
}

/// Delete options from `DeleteOptions` / query parameters.
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    /// `preconditions.uid`.
    pub uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub resource_version: Option<String>,
    /// `Foreground`, `Background`, `Orphan`.
    pub propagation: Option<String>,
    /// Evaluate but do not persist.
    pub dry_run: bool,
}

/// Outcome of a list.
#[derive(Debug)]
pub struct ListResult {
    /// Matching objects in name order (namespace, then name).
    pub items: Vec<Stored>,
    /// The list's resourceVersion.
    pub resource_version: u64,
    /// Continue token when `limit` cut the list.
    pub continue_token: Option<String>,
    /// Items left after this page.
    pub remaining: Option<usize>,
}

/// List parameters.
#[derive(Debug, Default)]
pub struct ListParams<'a> {
    /// Namespace, or all namespaces.
    pub namespace: Option<&'a str>,
    /// Label selector.
    pub labels: Option<&'a LabelSelector>,
    /// Field selector.
    pub fields: Option<&'a FieldSelector>,
    /// Page size.
    pub limit: Option<usize>,
    /// Continue token from a previous page.
    pub continue_token: Option<&'a str>,
}

/// Store sizes and counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreConfig {
    /// Events kept for watches resuming from a resourceVersion; older ones answer 410 Gone.
    pub history_limit: usize,
    /// Events a slow watcher may fall behind before it is sent 410 and closed.
    pub broadcast_capacity: usize,
}

#[derive(Debug)]
struct Collection {
    def: Arc<ResourceDef>,
    objects: BTreeMap<(String, String), Stored>,
}

#[derive(Debug)]
struct Inner {
    rv: u64,
    /// Changes with rv > `history_floor` are all in `history`.
    history_floor: u64,
    history: VecDeque<Arc<Change>>,
    history_limit: usize,
    collections: HashMap<ResKey, Collection>,
    /// The uid of every stored object, kept with each write, so that the collector's check for
    /// owner references to missing uids does not gather them all again.
    uids: HashSet<String>,
}

/// The shared store.
#[derive(Debug)]
pub struct Store {
    inner: RwLock<Inner>,
    events: broadcast::Sender<Arc<Change>>,
    gc_wakeup: Notify,
    /// How long after a change watchers are told of it, in microseconds (0: at once).
    watch_delay_micros: AtomicU64,
    /// How long a write waits before it is applied, in microseconds (0: not at all).
    write_latency_micros: AtomicU64,
    /// What other clients do just before a write is applied ([`Store::interleave_before_write`]).
    interleavings: Interleavings,
}

/// A write as it reaches the server, before it is applied: what an [`Interleaving`] looks at.
#[derive(Debug, Clone, Copy)]
pub struct PendingWrite<'a> {
    /// The HTTP method: POST, PUT, PATCH or DELETE.
    pub method: &'a str,
    pub group: &'a str,
    pub plural: &'a str,
    /// "" for cluster-scoped objects.
    pub namespace: &'a str,
    /// "" for a create or a collection.
    pub name: &'a str,
    /// "" for the object itself.
    pub subresource: &'a str,
}

/// What another client does between one client's read and its write (a real API server answers
/// the write from the state that other client left, as any store would). Run on each write that
/// reaches the server, before it is applied, until it returns true; then it runs no more.
pub type Interleaving = Box<dyn FnMut(&Store, &PendingWrite<'_>) -> bool + Send>;

#[derive(Default)]
struct Interleavings(Mutex<Vec<Interleaving>>);

impl std::fmt::Debug for Interleavings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let count = self.0.lock().unwrap_or_else(PoisonError::into_inner).len();
        write!(f, "Interleavings({count})")
    }
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

/// Namespaces every cluster has.
pub const DEFAULT_NAMESPACES: [&str; 4] =
    ["default", "kube-system", "kube-public", "kube-node-lease"];

fn subject<'a>(def: &'a ResourceDef, name: &'a str) -> Subject<'a> {
    Subject {
        group: &def.group,
        resource: &def.plural,
        name,
    }
}

impl Store {
    /// An empty store with the built-in resources and default namespaces.
    /// Delays every watch event by `delay` after its change, in order, so that a watching
    /// client's cache lags the store as a real informer's can: the API server promises no bound
    /// on that lag, and controller-runtime tells controller authors to expect a cached object
    /// older than their own last write (kubernetes-sigs/controller-runtime `FAQ.md`, "My cache
    /// might be stale if I read from a cache!"). Lists and gets are not delayed.
    pub fn set_watch_delay(&self, delay: Duration) {
        self.watch_delay_micros
            .store(micros(delay), Ordering::Relaxed);
    }

    /// The delay [`Store::set_watch_delay`] set.
    pub fn watch_delay(&self) -> Duration {
        Duration::from_micros(self.watch_delay_micros.load(Ordering::Relaxed))
    }

    /// Makes every create, update, patch and delete wait `latency` before it is applied, as a
    /// loaded API server's do (the Kubernetes scalability SLO allows a mutating call on one
    /// object up to 1 s at the 99th percentile: kubernetes/community
    /// `sig-scalability/slos/api_call_latency.md`).
    pub fn set_write_latency(&self, latency: Duration) {
        self.write_latency_micros
            .store(micros(latency), Ordering::Relaxed);
    }

    /// The latency [`Store::set_write_latency`] set.
    pub fn write_latency(&self) -> Duration {
        Duration::from_micros(self.write_latency_micros.load(Ordering::Relaxed))
    }

    /// Runs `interleaving` on each write the server receives, before the write is applied, until
    /// it returns true: a test's way to put another client's change exactly between a
    /// controller's read and its write (another controller removing the last finalizer of an
    /// object this one is about to patch, say).
    pub fn interleave_before_write(&self, interleaving: Interleaving) {
        self.interleavings
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(interleaving);
    }

    /// Runs the pending interleavings on `write`, dropping those that acted. They run outside
    /// the list's lock, so that they may write to the store (and register more).
    pub fn run_interleavings(&self, write: &PendingWrite<'_>) {
        let pending = std::mem::take(
            &mut *self
                .interleavings
                .0
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        if pending.is_empty() {
            return;
        }
        let mut kept = Vec::new();
        for mut interleaving in pending {
            if !interleaving(self, write) {
                kept.push(interleaving);
            }
        }
        let mut list = self
            .interleavings
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        kept.append(&mut list);
        *list = kept;
    }

    pub fn new(config: StoreConfig) -> Self {
        let collections = builtin_resources()
            .into_iter()
            .map(|def| {
                (
                    (def.group.clone(), def.plural.clone()),
                    Collection {
                        def,
                        objects: BTreeMap::new(),
                    },
                )
            })
            .collect();
        let (events, _) = broadcast::channel(config.broadcast_capacity.max(16));
        let store = Self {
            inner: RwLock::new(Inner {
                rv: 0,
                history_floor: 0,
                history: VecDeque::new(),
                history_limit: config.history_limit.max(1),
                collections,
                uids: HashSet::new(),
            }),
            events,
            gc_wakeup: Notify::new(),
            watch_delay_micros: AtomicU64::new(0),
            write_latency_micros: AtomicU64::new(0),
            interleavings: Interleavings::default(),
        };
        for ns in DEFAULT_NAMESPACES {
            // The namespaces are valid and new: this cannot fail.
            let _ = store.create_value(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
            );
        }
        store
    }

    fn read(&self) -> RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wakes the garbage collector (after deletions).
    pub(crate) fn gc_notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.gc_wakeup.notified()
    }

    /// The current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.read().rv
    }

    /// All served resources.
    pub fn resources(&self) -> Vec<Arc<ResourceDef>> {
        let mut defs: Vec<_> = self
            .read()
            .collections
            .values()
            .map(|c| c.def.clone())
            .collect();
        defs.sort_by(|a, b| (&a.group, &a.plural).cmp(&(&b.group, &b.plural)));
        defs
    }

    /// Finds a served resource by group and plural.
    pub fn resource(&self, group: &str, plural: &str) -> Option<Arc<ResourceDef>> {
        self.read()
            .collections
            .get(&(group.to_string(), plural.to_string()))
            .map(|c| c.def.clone())
    }

    /// Finds a resource by `apiVersion` and `kind`.
    pub fn resource_for_kind(&self, api_version: &str, kind: &str) -> Option<Arc<ResourceDef>> {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        self.read()
            .collections
            .values()
            .find(|c| c.def.group == group && c.def.kind == kind && c.def.serves(version))
            .map(|c| c.def.clone())
    }

    /// Subscribes to changes; the returned rv is the last change the receiver will NOT see.
    pub fn subscribe(&self) -> (broadcast::Receiver<Arc<Change>>, u64) {
        let inner = self.read();
        (self.events.subscribe(), inner.rv)
    }

    /// Subscribes and returns, atomically, the retained changes after `rv`, or 410 if `rv` is older than history.
    pub fn subscribe_from(&self, rv: u64) -> ApiResult<(ChangeReceiver, Vec<Arc<Change>>)> {
        let inner = self.read();
        if rv < inner.history_floor {
            return Err(ApiError::expired(format!(
                "too old resource version: {rv} ({})",
                inner.history_floor + 1
            )));
        }
        let backlog = inner
            .history
            .iter()
            .filter(|c| c.rv > rv)
            .cloned()
            .collect();
        Ok((self.events.subscribe(), backlog))
    }

    /// Subscribes and returns a snapshot of the current objects, atomically (watch from "now" with initial events).
    pub fn subscribe_with_snapshot(
        &self,
        resource: &ResKey,
        namespace: Option<&str>,
    ) -> (broadcast::Receiver<Arc<Change>>, Vec<Stored>, u64) {
        let inner = self.read();
        let items = inner
            .collections
            .get(resource)
            .map(|c| scan(c, namespace).cloned().collect())
            .unwrap_or_default();
        (self.events.subscribe(), items, inner.rv)
    }

    /// Gets one object.
    pub fn get(&self, def: &ResourceDef, namespace: &str, name: &str) -> ApiResult<Stored> {
        let inner = self.read();
        inner
            .collections
            .get(&(def.group.clone(), def.plural.clone()))
            .and_then(|c| c.objects.get(&(namespace.to_string(), name.to_string())))
            .cloned()
            .ok_or_else(|| ApiError::not_found(subject(def, name)))
    }

    /// Lists objects, filtered and paged.
    pub fn list(&self, def: &ResourceDef, params: &ListParams<'_>) -> ApiResult<ListResult> {
        let inner = self.read();
        let collection = inner
            .collections
            .get(&(def.group.clone(), def.plural.clone()))
            .ok_or_else(|| ApiError::unknown_path(&def.plural))?;
        let (list_rv, start_after) = match params.continue_token {
            Some(token) => {
                let (rv, ns, name) = parse_continue(token)?;
                if rv < inner.history_floor {
                    return Err(ApiError::expired(
                        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
                    ));
                }
                (rv, Some((ns, name)))
            }
            None => (inner.rv, None),
        };
        let matching = scan(collection, params.namespace)
            .filter(|s| {
                let key = (
                    meta_str(&s.value, "namespace").to_string(),
                    meta_str(&s.value, "name").to_string(),
                );
                start_after.as_ref().is_none_or(|after| key > *after)
            })
            .filter(|s| {
                params.labels.is_none_or(|l| l.matches(&s.value))
                    && params.fields.is_none_or(|f| f.matches(&s.value))
            });
        let mut items = vec![];
        let mut remaining = 0usize;
        let limit = params.limit.filter(|l| *l > 0);
        for stored in matching {
            if limit.is_some_and(|l| items.len() >= l) {
                remaining += 1;
            } else {
                items.push(stored.clone());
            }
        }
        let continue_token = (remaining > 0).then(|| {
            let last = items
                .last()
                .map(|s| (meta_str(&s.value, "namespace"), meta_str(&s.value, "name")))
                .unwrap_or_default();
            format!("{list_rv}|{}|{}", last.0, last.1)
        });
        Ok(ListResult {
            items,
            resource_version: list_rv,
            remaining: continue_token.as_ref().map(|_| remaining),
            continue_token,
        })
    }

    /// Writes an object into its collection and records the change.
    #[allow(clippy::too_many_arguments)]
    fn commit(
        &self,
        inner: &mut Inner,
        def: &ResourceDef,
        namespace: &str,
        name: &str,
        object: Value,
        previous: Option<Arc<Value>>,
        kind: EventType,
    ) -> ApiResult<Stored> {
        let key = (def.group.clone(), def.plural.clone());
        let stored = self.record(inner, &key, namespace, object, previous, kind)?;
        if let Some(c) = inner.collections.get_mut(&key) {
            c.objects
                .insert((namespace.to_string(), name.to_string()), stored.clone());
            if !inner.uids.contains(&stored.gc.uid) {
                inner.uids.insert(stored.gc.uid.clone());
            }
        }
        Ok(stored)
    }

    /// Assigns the next resourceVersion, appends to history and broadcasts.
    fn record(
        &self,
        inner: &mut Inner,
        key: &ResKey,
        namespace: &str,
        mut object: Value,
        previous: Option<Arc<Value>>,
        kind: EventType,
    ) -> ApiResult<Stored> {
        inner.rv += 1;
        let rv = inner.rv;
        metadata_mut(&mut object).insert("resourceVersion".into(), json!(rv.to_string()));
        let stored = Stored::new(object)?;
        let change = Arc::new(Change {
            rv,
            kind,
            resource: key.clone(),
            namespace: namespace.to_string(),
            object: stored.clone(),
            previous,
            at: Instant::now(),
        });
        inner.history.push_back(change.clone());
        while inner.history.len() > inner.history_limit {
            if let Some(dropped) = inner.history.pop_front() {
                inner.history_floor = dropped.rv;
            }
        }
        // No receivers is fine: nobody is watching.
        let _ = self.events.send(change);
        Ok(stored)
    }

    /// Names of resources and counts of objects (for the admin endpoint).
    pub fn counts(&self) -> BTreeMap<String, usize> {
        self.read()
            .collections
            .values()
            .map(|c| {
                let name = if c.def.group.is_empty() {
                    c.def.plural.clone()
                } else {
                    format!("{}.{}", c.def.plural, c.def.group)
                };
                (name, c.objects.len())
            })
            .collect()
    }
}

impl Inner {
    fn lookup(&self, def: &ResourceDef, namespace: &str, name: &str) -> ApiResult<Stored> {
        self.collections
            .get(&(def.group.clone(), def.plural.clone()))
            .and_then(|c| c.objects.get(&(namespace.to_string(), name.to_string())))
            .cloned()
            .ok_or_else(|| ApiError::not_found(subject(def, name)))
    }

    fn check_namespace_open(&self, namespace: &str) -> ApiResult<()> {
        let ns = self
            .collections
            .get(&(String::new(), "namespaces".to_string()))
            .and_then(|c| c.objects.get(&(String::new(), namespace.to_string())));
        match ns {
            None => Err(ApiError::not_found(Subject {
                group: "",
                resource: "namespaces",
                name: namespace,
            })),
            Some(ns) if is_deleting(&ns.value) => Err(ApiError {
                code: 403,
                reason: "Forbidden",
                message: format!(
                    "unable to create new content in namespace {namespace} because it is being terminated"
                ),
                details: None,
            }),
            Some(_) => Ok(()),
        }
    }
}

fn scan<'a>(
    collection: &'a Collection,
    namespace: Option<&'a str>,
) -> Box<dyn Iterator<Item = &'a Stored> + 'a> {
    match namespace.filter(|n| !n.is_empty() && collection.def.namespaced) {
        Some(ns) => Box::new(
            collection
                .objects
                .range((ns.to_string(), String::new())..)
                .take_while(move |((n, _), _)| n == ns)
                .map(|(_, s)| s),
        ),
        None => Box::new(collection.objects.values()),
    }
}

fn parse_continue(token: &str) -> ApiResult<(u64, String, String)> {
    let mut parts = token.splitn(3, '|');
    let bad = || ApiError::bad_request(format!("continue key is not valid: {token:?}"));
    let rv = parts.next().and_then(|r| r.parse().ok()).ok_or_else(bad)?;
    let ns = parts.next().ok_or_else(bad)?.to_string();
    let name = parts.next().ok_or_else(bad)?.to_string();
    Ok((rv, ns, name))
}
