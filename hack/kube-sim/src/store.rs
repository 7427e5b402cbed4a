//! The object store: one lock over per-resource ordered maps, one global resourceVersion counter (as in etcd),
//! a bounded event history for watches, and a broadcast of events to watchers.
//!
//! Every write happens under the write lock, so the order of resourceVersions, history and broadcast is the order
//! of writes. Side effects that the real control plane performs asynchronously and that tests need to be
//! deterministic (PodDisruptionBudget status, CRD registration) happen inside the same write.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use base64::Engine as _;
use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::{Notify, broadcast};

use crate::error::{ApiError, ApiResult, Subject};
use crate::meta::{
    finalizers, invalid_label, invalid_subdomain, is_deleting, meta_str, metadata_mut, new_uid,
    now_rfc3339, random_suffix, set_finalizers,
};
use crate::resources::{ResourceDef, builtin_resources, resource_from_crd};
use crate::selector::{FieldSelector, LabelSelector};

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

/// The fields of an object that decide whether a garbage-collection pass has work.
#[derive(Debug, Default)]
struct GcFacts {
    uid: String,
    /// The uids of its owner references.
    owners: Vec<String>,
    /// Being deleted, and held by a finalizer the collector itself removes (`orphan`,
    /// `foregroundDeletion`), or a namespace being emptied.
    awaits_collector: bool,
}

impl GcFacts {
    fn of(object: &Value) -> Self {
        let owners = object
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .map(|refs| {
                refs.iter()
                    .map(|r| {
                        r.get("uid")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned()
                    })
                    .collect()
            })
            .unwrap_or_default();
        let namespace = object.get("apiVersion").and_then(Value::as_str) == Some("v1")
            && object.get("kind").and_then(Value::as_str) == Some("Namespace");
        let awaits_collector = is_deleting(object)
            && (namespace
                || finalizers(object)
                    .iter()
                    .any(|f| f == "orphan" || f == "foregroundDeletion"));
        Self {
            uid: meta_str(object, "uid").to_owned(),
            owners,
            awaits_collector,
        }
    }
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

fn spec_part(object: &Value) -> Value {
    let mut copy = object.clone();
    if let Some(map) = copy.as_object_mut() {
        map.remove("metadata");
        map.remove("status");
    }
    copy
}

/// Is the object's Ready condition true (pods)?
pub fn pod_ready(pod: &Value) -> bool {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.get("type") == Some(&json!("Ready")) && c.get("status") == Some(&json!("True"))
            })
        })
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

    /// Creates an object of a resource, in a namespace (ignored for cluster-scoped resources).
    pub fn create(
        &self,
        def: &ResourceDef,
        namespace: &str,
        mut object: Value,
        dry_run: bool,
    ) -> ApiResult<Stored> {
        self.check_type(def, &mut object)?;
        decode_builtin(def, &mut object)?;
        let namespace = if def.namespaced { namespace } else { "" };
        let body_ns = meta_str(&object, "namespace").to_string();
        if def.namespaced && !body_ns.is_empty() && body_ns != namespace {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        let mut inner = self.write();
        let mut name = meta_str(&object, "name").to_string();
        if name.is_empty() {
            let prefix = meta_str(&object, "generateName").to_string();
            if prefix.is_empty() {
                return Err(ApiError::invalid(
                    subject(def, ""),
                    &def.kind,
                    "metadata.name",
                    "Required value: name or generateName is required",
                ));
            }
            name = format!("{prefix}{}", random_suffix());
        }
        let invalid = if def.plural == "namespaces" {
            invalid_label(&name)
        } else {
            invalid_subdomain(&name)
        };
        if let Some(why) = invalid {
            return Err(ApiError::invalid(
                subject(def, &name),
                &def.kind,
                "metadata.name",
                &format!("Invalid value: {name:?}: {why}"),
            ));
        }
        if def.namespaced {
            inner.check_namespace_open(namespace)?;
        }
        let key = (def.group.clone(), def.plural.clone());
        if inner.collections.get(&key).is_some_and(|c| {
            c.objects
                .contains_key(&(namespace.to_string(), name.clone()))
        }) {
            return Err(ApiError::already_exists(subject(def, &name)));
        }
        let meta = metadata_mut(&mut object);
        meta.insert("name".into(), json!(name));
        if def.namespaced {
            meta.insert("namespace".into(), json!(namespace));
        } else {
            meta.remove("namespace");
        }
        meta.insert("uid".into(), json!(new_uid()));
        meta.insert("creationTimestamp".into(), json!(now_rfc3339()));
        meta.remove("deletionTimestamp");
        meta.remove("deletionGracePeriodSeconds");
        meta.remove("resourceVersion");
        meta.remove("selfLink");
        if def.spec_generation {
            meta.insert("generation".into(), json!(1));
        } else {
            meta.remove("generation");
        }
        if let Some(map) = object.as_object_mut() {
            map.insert(
                "apiVersion".into(),
                json!(def.api_version(def.preferred_version())),
            );
        }
        if let Some((field, message)) = crate::meta::invalid_labels_or_annotations(&object) {
            return Err(ApiError::invalid(
                subject(def, &name),
                &def.kind,
                &field,
                &message,
            ));
        }
        prepare_create(def, &mut object)?;
        if let Some(schema) = &def.schema {
            crate::schema::apply_to_object(&mut object, schema);
        }
        let crd_def = if def.group == "apiextensions.k8s.io" {
            let new_def = resource_from_crd(&object).map_err(|e| {
                ApiError::invalid(subject(def, &name), &def.kind, &e.field, &e.message)
            })?;
            if inner
                .collections
                .contains_key(&(new_def.group.clone(), new_def.plural.clone()))
            {
                return Err(ApiError::invalid(
                    subject(def, &name),
                    &def.kind,
                    "spec.names.plural",
                    "Invalid value: the resource is already served by another definition",
                ));
            }
            object["status"] = crd_status(&object);
            Some(new_def)
        } else {
            None
        };
        if dry_run {
            return Stored::new(object);
        }
        if let Some(new_def) = crd_def {
            let new_key = (new_def.group.clone(), new_def.plural.clone());
            inner.collections.insert(
                new_key,
                Collection {
                    def: Arc::new(new_def),
                    objects: BTreeMap::new(),
                },
            );
        }
        let stored = self.commit(
            &mut inner,
            def,
            namespace,
            &name,
            object,
            None,
            EventType::Added,
        )?;
        if def.group == "policy" || (def.group.is_empty() && def.plural == "pods") {
            self.sync_pdbs(&mut inner, namespace);
        }
        Ok(stored)
    }

    /// Creates an object from its own `apiVersion`, `kind` and `metadata.namespace` (direct Rust access).
    pub fn create_value(&self, object: Value) -> ApiResult<Stored> {
        let def = self.def_of(&object)?;
        let namespace = meta_str(&object, "namespace").to_string();
        let namespace = if def.namespaced && namespace.is_empty() {
            "default".to_string()
        } else {
            namespace
        };
        self.create(&def, &namespace, object, false)
    }

    /// Finds the resource of an object from its `apiVersion` and `kind`.
    pub fn def_of(&self, object: &Value) -> ApiResult<Arc<ResourceDef>> {
        let api_version = object
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let kind = object
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default();
        self.resource_for_kind(api_version, kind).ok_or_else(|| {
            ApiError::bad_request(format!(
                "no resource serves apiVersion {api_version:?} kind {kind:?}"
            ))
        })
    }

    fn check_type(&self, def: &ResourceDef, object: &mut Value) -> ApiResult<()> {
        if !object.is_object() {
            return Err(ApiError::bad_request(
                "the request body is not a JSON object",
            ));
        }
        let api_version = object
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let kind = object
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if !kind.is_empty() && kind != def.kind {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({kind}) does not match the expected kind ({})",
                def.kind
            )));
        }
        match api_version.rsplit_once('/') {
            Some((group, version)) if group == def.group && def.serves(version) => {}
            None if def.group.is_empty() && def.serves(&api_version) => {}
            _ if api_version.is_empty() => {}
            _ => {
                return Err(ApiError::bad_request(format!(
                    "the API version in the data ({api_version}) does not match the expected API version ({})",
                    def.api_version(def.preferred_version())
                )));
            }
        };
        if let Some(map) = object.as_object_mut() {
            map.insert("kind".into(), json!(def.kind));
        }
        Ok(())
    }

    /// Replaces an object (PUT), or its status. `require_rv` rejects updates without a resourceVersion (custom
    /// resources do not allow unconditional updates).
    #[allow(clippy::too_many_arguments)] // the parts of a PUT; a struct would only rename them
    pub fn update(
        &self,
        def: &ResourceDef,
        namespace: &str,
        name: &str,
        mut object: Value,
        target: WriteTarget,
        dry_run: bool,
        manager: Option<&str>,
    ) -> ApiResult<Stored> {
        self.check_type(def, &mut object)?;
        let body_name = meta_str(&object, "name");
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::bad_request(
                "the name of the object does not match the name on the URL",
            ));
        }
        if meta_str(&object, "resourceVersion").is_empty()
            && def.custom
            && target != WriteTarget::Whole
        {
            return Err(ApiError::invalid(
                subject(def, name),
                &def.kind,
                "metadata.resourceVersion",
                "Invalid value: 0x0: must be specified for an update",
            ));
        }
        self.modify(def, namespace, name, target, dry_run, |current| {
            if let Some(manager) = manager {
                let subresource = if target == WriteTarget::Status {
                    "status"
                } else {
                    ""
                };
                crate::fields::record_update(
                    current,
                    &mut object,
                    manager,
                    field_scope(def, target),
                    subresource,
                    &now_rfc3339(),
                );
            }
            Ok(object)
        })
    }

    /// Atomically reads, transforms and writes an object (patches). The closure sees the current object and
    /// returns the desired one; a `metadata.resourceVersion` in the result that differs from the current one is a
    /// 409 Conflict.
    pub fn modify<F>(
        &self,
        def: &ResourceDef,
        namespace: &str,
        name: &str,
        target: WriteTarget,
        dry_run: bool,
        change: F,
    ) -> ApiResult<Stored>
    where
        F: FnOnce(&Value) -> ApiResult<Value>,
    {
        let namespace = if def.namespaced { namespace } else { "" };
        let mut inner = self.write();
        let current = inner.lookup(def, namespace, name)?;
        let mut desired = change(&current.value)?;
        if !desired.is_object() {
            return Err(ApiError::bad_request("the result is not a JSON object"));
        }
        decode_builtin(def, &mut desired)?;
        let wanted_rv = meta_str(&desired, "resourceVersion");
        if !wanted_rv.is_empty() && wanted_rv != meta_str(&current.value, "resourceVersion") {
            return Err(ApiError::conflict(
                subject(def, name),
                "the object has been modified; please apply your changes to the latest version and try again",
            ));
        }
        let desired_name = meta_str(&desired, "name");
        if !desired_name.is_empty() && desired_name != name {
            return Err(ApiError::bad_request(format!(
                "metadata.name: the name of the object ({desired_name}) does not match the name on the URL ({name})"
            )));
        }
        let next = merge_for_update(def, &current.value, &mut desired, target)?;
        if def.group == "apiextensions.k8s.io" && spec_part(&current.value) != spec_part(&next) {
            let new_def = resource_from_crd(&next).map_err(|e| {
                ApiError::invalid(subject(def, name), &def.kind, &e.field, &e.message)
            })?;
            if !dry_run
                && let Some(c) = inner
                    .collections
                    .get_mut(&(new_def.group.clone(), new_def.plural.clone()))
            {
                c.def = Arc::new(new_def);
            }
        }
        if dry_run {
            return Stored::new(next);
        }
        if *current.value == next || same_but_managed_times(&current.value, &next) {
            // A no-op write (such as re-applying the same configuration) changes nothing, as in the real server.
            return Ok(current);
        }
        let stored = if is_deleting(&next) && finalizers(&next).is_empty() {
            self.remove(&mut inner, def, namespace, name, next)?
        } else {
            self.commit(
                &mut inner,
                def,
                namespace,
                name,
                next,
                Some(current.value.clone()),
                EventType::Modified,
            )?
        };
        if def.group == "policy" || (def.group.is_empty() && def.plural == "pods") {
            self.sync_pdbs(&mut inner, namespace);
        }
        Ok(stored)
    }

    /// Deletes an object: marks it deleting when finalizers (or the propagation policy) hold it, removes it
    /// otherwise. Returns the object as last seen.
    pub fn delete(
        &self,
        def: &ResourceDef,
        namespace: &str,
        name: &str,
        options: &DeleteOptions,
    ) -> ApiResult<Stored> {
        let namespace = if def.namespaced { namespace } else { "" };
        let mut inner = self.write();
        let stored = self.delete_locked(&mut inner, def, namespace, name, options)?;
        if def.group == "policy" || (def.group.is_empty() && def.plural == "pods") {
            self.sync_pdbs(&mut inner, namespace);
        }
        Ok(stored)
    }

    fn delete_locked(
        &self,
        inner: &mut Inner,
        def: &ResourceDef,
        namespace: &str,
        name: &str,
        options: &DeleteOptions,
    ) -> ApiResult<Stored> {
        let current = inner.lookup(def, namespace, name)?;
        let preconditions = [
            ("UID", "uid", &options.uid),
            (
                "ResourceVersion",
                "resourceVersion",
                &options.resource_version,
            ),
        ];
        for (label, field, wanted) in preconditions {
            let actual = meta_str(&current.value, field);
            if let Some(wanted) = wanted
                && wanted != actual
            {
                return Err(ApiError::conflict(
                    subject(def, name),
                    &format!(
                        "Precondition failed: {label} in precondition: {wanted}, {label} in object meta: {actual}"
                    ),
                ));
            }
        }
        let mut next = (*current.value).clone();
        let mut list = finalizers(&next);
        let propagation_finalizer = match options.propagation.as_deref() {
            Some("Foreground") => Some("foregroundDeletion"),
            Some("Orphan") => Some("orphan"),
            _ => None,
        };
        if let Some(f) = propagation_finalizer
            && !list.iter().any(|x| x == f)
        {
            list.push(f.to_string());
            set_finalizers(&mut next, &list);
        }
        if options.dry_run {
            return Stored::new(next);
        }
        let is_namespace = def.group.is_empty() && def.plural == "namespaces";
        if is_deleting(&current.value) && *current.value == next {
            return Ok(current);
        }
        if !list.is_empty() || is_namespace {
            let meta = metadata_mut(&mut next);
            if !meta.contains_key("deletionTimestamp") {
                meta.insert("deletionTimestamp".into(), json!(now_rfc3339()));
                meta.insert("deletionGracePeriodSeconds".into(), json!(0));
            }
            if is_namespace {
                next["status"] = json!({"phase": "Terminating"});
            }
            let stored = self.commit(
                inner,
                def,
                namespace,
                name,
                next,
                Some(current.value.clone()),
                EventType::Modified,
            )?;
            self.gc_wakeup.notify_one();
            return Ok(stored);
        }
        self.remove(inner, def, namespace, name, next)
    }

    /// Deletes every object of a resource in a namespace matching the selectors.
    pub fn delete_collection(
        &self,
        def: &ResourceDef,
        params: &ListParams<'_>,
        options: &DeleteOptions,
    ) -> ApiResult<Vec<Stored>> {
        let names: Vec<(String, String)> = self
            .list(
                def,
                &ListParams {
                    limit: None,
                    continue_token: None,
                    ..*params
                },
            )?
            .items
            .iter()
            .map(|s| {
                (
                    meta_str(&s.value, "namespace").to_string(),
                    meta_str(&s.value, "name").to_string(),
                )
            })
            .collect();
        let mut deleted = vec![];
        for (ns, name) in names {
            match self.delete(def, &ns, &name, options) {
                Ok(stored) => deleted.push(stored),
                Err(e) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(deleted)
    }

    fn remove(
        &self,
        inner: &mut Inner,
        def: &ResourceDef,
        namespace: &str,
        name: &str,
        last: Value,
    ) -> ApiResult<Stored> {
        let key = (def.group.clone(), def.plural.clone());
        let previous = inner
            .collections
            .get_mut(&key)
            .and_then(|c| c.objects.remove(&(namespace.to_string(), name.to_string())))
            .map(|s| {
                inner.uids.remove(&s.gc.uid);
                s.value
            });
        if def.group == "apiextensions.k8s.io" {
            self.unregister_crd(inner, &last);
        }
        let stored = self.record(inner, &key, namespace, last, previous, EventType::Deleted)?;
        self.gc_wakeup.notify_one();
        Ok(stored)
    }

    fn unregister_crd(&self, inner: &mut Inner, crd: &Value) {
        let Ok(crd_def) = resource_from_crd(crd) else {
            return;
        };
        let key = (crd_def.group.clone(), crd_def.plural.clone());
        let Some(collection) = inner.collections.remove(&key) else {
            return;
        };
        for ((ns, _), stored) in collection.objects {
            inner.uids.remove(&stored.gc.uid);
            let last = (*stored.value).clone();
            // Serialization of a stored object cannot fail.
            let _ = self.record(
                inner,
                &key,
                &ns,
                last,
                Some(stored.value),
                EventType::Deleted,
            );
        }
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

    /// Recomputes the status of every PodDisruptionBudget in a namespace (what the disruption controller does),
    /// writing only those that changed.
    fn sync_pdbs(&self, inner: &mut Inner, namespace: &str) {
        let pdb_key = ("policy".to_string(), "poddisruptionbudgets".to_string());
        let Some(pdbs) = inner.collections.get(&pdb_key) else {
            return;
        };
        let pdb_def = pdbs.def.clone();
        let pdb_list: Vec<Stored> = scan(pdbs, Some(namespace)).cloned().collect();
        let pods: Vec<Arc<Value>> = inner
            .collections
            .get(&(String::new(), "pods".to_string()))
            .map(|c| scan(c, Some(namespace)).map(|s| s.value.clone()).collect())
            .unwrap_or_default();
        for pdb in pdb_list {
            let status = pdb_status(&pdb.value, &pods);
            if pdb.value.get("status") == Some(&status) {
                continue;
            }
            let mut next = (*pdb.value).clone();
            next["status"] = status;
            let name = meta_str(&next, "name").to_string();
            let _ = self.commit(
                inner,
                &pdb_def,
                namespace,
                &name,
                next,
                Some(pdb.value.clone()),
                EventType::Modified,
            );
        }
    }

    /// Evicts a pod, honouring PodDisruptionBudgets (429 when one does not allow the disruption). The pod is
    /// deleted at once (no kubelet: grace periods are not simulated).
    pub fn evict(&self, namespace: &str, name: &str, options: &DeleteOptions) -> ApiResult<Stored> {
        let mut inner = self.write();
        let pods_key = (String::new(), "pods".to_string());
        let pod_def = inner
            .collections
            .get(&pods_key)
            .map(|c| c.def.clone())
            .ok_or_else(|| ApiError::internal("pods are not served"))?;
        let pod = inner
            .collections
            .get(&pods_key)
            .and_then(|c| c.objects.get(&(namespace.to_string(), name.to_string())))
            .cloned()
            .ok_or_else(|| ApiError::not_found(subject(&pod_def, name)))?;
        let phase = pod
            .value
            .pointer("/status/phase")
            .and_then(Value::as_str)
            .unwrap_or("Pending");
        let terminal_or_pending = matches!(phase, "Succeeded" | "Failed" | "Pending");
        if !terminal_or_pending && !is_deleting(&pod.value) {
            let pdb_key = ("policy".to_string(), "poddisruptionbudgets".to_string());
            let guarding: Vec<Stored> = inner
                .collections
                .get(&pdb_key)
                .map(|c| {
                    scan(c, Some(namespace))
                        .filter(|pdb| {
                            LabelSelector::from_object(pdb.value.pointer("/spec/selector"))
                                .is_ok_and(|s| !s.is_empty() && s.matches(&pod.value))
                        })
                        .cloned()
                        .collect()
                })
                .unwrap_or_default();
            if guarding.len() > 1 {
                return Err(ApiError::internal(
                    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
                ));
            }
            if let Some(pdb) = guarding.first() {
                let pods: Vec<Arc<Value>> = inner
                    .collections
                    .get(&pods_key)
                    .map(|c| scan(c, Some(namespace)).map(|s| s.value.clone()).collect())
                    .unwrap_or_default();
                let status = pdb_status(&pdb.value, &pods);
                let allowed = status
                    .get("disruptionsAllowed")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                let healthy = status
                    .get("currentHealthy")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                let desired = status
                    .get("desiredHealthy")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                let blocked = if pod_ready(&pod.value) {
                    allowed <= 0
                } else {
                    healthy < desired
                };
                if blocked {
                    let pdb_name = meta_str(&pdb.value, "name");
                    return Err(ApiError::too_many_requests(
                        "Cannot evict pod as it would violate the pod's disruption budget.",
                        json!([{"reason": "DisruptionBudget", "message": format!("The disruption budget {pdb_name} needs {desired} healthy pods and has {healthy} currently")}]),
                    ));
                }
            }
        }
        let stored = self.delete_locked(&mut inner, &pod_def, namespace, name, options)?;
        self.sync_pdbs(&mut inner, namespace);
        Ok(stored)
    }

    /// One garbage-collection pass: deletes dependents whose owners are all gone, honours `foregroundDeletion` and
    /// `orphan` finalizers, empties terminating namespaces. Returns how many objects it changed.
    pub fn collect_garbage(&self) -> usize {
        let mut changed = 0;
        // Each pass may free more (chains of owners); bounded so a cycle cannot spin.
        for _ in 0..16 {
            let n = self.gc_pass();
            changed += n;
            if n == 0 {
                break;
            }
        }
        changed
    }

    /// Whether a pass could change anything: a namespace being emptied, an object being deleted that
    /// holds a finalizer only the collector removes (`orphan`, `foregroundDeletion`: its dependents are
    /// orphaned or deleted first), or an owner reference to a missing uid. An object held by any other
    /// finalizer waits for that finalizer's controller, not for the collector, so it gives a pass
    /// nothing to do: the real collector also acts only on changes to its dependency graph
    /// (kubernetes/kubernetes `pkg/controller/garbagecollector/graph_builder.go`), not on every
    /// deleting object. Checked under the read lock from facts read at each write and the uids kept
    /// with them, so that idle checks neither block writers nor rebuild anything.
    fn gc_needed(&self) -> bool {
        let inner = self.read();
        inner
            .collections
            .values()
            .flat_map(|c| c.objects.values())
            .any(|s| {
                s.gc.awaits_collector
                    || s.gc
                        .owners
                        .iter()
                        .any(|owner| !inner.uids.contains(owner.as_str()))
            })
    }

    fn gc_pass(&self) -> usize {
        if !self.gc_needed() {
            return 0;
        }
        let mut inner = self.write();
        let mut uids: HashMap<String, Arc<Value>> = HashMap::new();
        let mut all: Vec<(Arc<ResourceDef>, Stored)> = vec![];
        for c in inner.collections.values() {
            for s in c.objects.values() {
                uids.insert(meta_str(&s.value, "uid").to_string(), s.value.clone());
                all.push((c.def.clone(), s.clone()));
            }
        }
        let terminating: HashSet<String> = inner
            .collections
            .get(&(String::new(), "namespaces".to_string()))
            .map(|c| {
                c.objects
                    .values()
                    .filter(|s| is_deleting(&s.value))
                    .map(|s| meta_str(&s.value, "name").to_string())
                    .collect()
            })
            .unwrap_or_default();
        let mut changed = 0;
        let mut dependents_of: HashMap<String, usize> = HashMap::new();
        let background = DeleteOptions::default();
        for (def, stored) in &all {
            let ns = meta_str(&stored.value, "namespace").to_string();
            let name = meta_str(&stored.value, "name").to_string();
            if terminating.contains(&ns) {
                if !is_deleting(&stored.value)
                    && self
                        .delete_locked(&mut inner, def, &ns, &name, &background)
                        .is_ok()
                {
                    changed += 1;
                }
                continue;
            }
            let refs: Vec<Value> = stored
                .value
                .pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            if refs.is_empty() {
                continue;
            }
            let owners: Vec<Option<&Arc<Value>>> = refs
                .iter()
                .map(|r| uids.get(r.get("uid").and_then(Value::as_str).unwrap_or_default()))
                .collect();
            for owner in owners.iter().flatten() {
                *dependents_of
                    .entry(meta_str(owner, "uid").to_string())
                    .or_default() += 1;
            }
            let orphaned_by: Vec<&str> = owners
                .iter()
                .flatten()
                .filter(|o| is_deleting(o) && finalizers(o).iter().any(|f| f == "orphan"))
                .map(|o| meta_str(o, "uid"))
                .collect();
            let all_gone = owners.iter().all(Option::is_none);
            let foreground = owners
                .iter()
                .flatten()
                .any(|o| is_deleting(o) && finalizers(o).iter().any(|f| f == "foregroundDeletion"));
            if (all_gone || foreground) && !is_deleting(&stored.value) {
                if self
                    .delete_locked(&mut inner, def, &ns, &name, &background)
                    .is_ok()
                {
                    changed += 1;
                }
            } else if !orphaned_by.is_empty() {
                let mut next = (*stored.value).clone();
                let kept: Vec<Value> = refs
                    .into_iter()
                    .filter(|r| {
                        !orphaned_by
                            .contains(&r.get("uid").and_then(Value::as_str).unwrap_or_default())
                    })
                    .collect();
                if kept.is_empty() {
                    metadata_mut(&mut next).remove("ownerReferences");
                } else {
                    metadata_mut(&mut next).insert("ownerReferences".into(), Value::from(kept));
                }
                if self
                    .commit(
                        &mut inner,
                        def,
                        &ns,
                        &name,
                        next,
                        Some(stored.value.clone()),
                        EventType::Modified,
                    )
                    .is_ok()
                {
                    changed += 1;
                }
            }
        }
        // Owners waiting on their dependents.
        for (def, stored) in &all {
            if !is_deleting(&stored.value) {
                continue;
            }
            let uid = meta_str(&stored.value, "uid");
            let list = finalizers(&stored.value);
            let has_dependents = dependents_of.get(uid).copied().unwrap_or(0) > 0;
            let kept: Vec<String> = list
                .iter()
                .filter(|f| match f.as_str() {
                    "orphan" => false,
                    "foregroundDeletion" => has_dependents,
                    _ => true,
                })
                .cloned()
                .collect();
            let ns = meta_str(&stored.value, "namespace").to_string();
            let name = meta_str(&stored.value, "name").to_string();
            let is_namespace = def.group.is_empty() && def.plural == "namespaces";
            let namespace_empty = is_namespace
                && !all
                    .iter()
                    .any(|(d, s)| d.namespaced && meta_str(&s.value, "namespace") == name);
            if kept.len() != list.len() || (namespace_empty && kept.is_empty()) {
                let mut next = (*stored.value).clone();
                set_finalizers(&mut next, &kept);
                let still_current = inner
                    .collections
                    .get(&(def.group.clone(), def.plural.clone()))
                    .and_then(|c| c.objects.get(&(ns.clone(), name.clone())))
                    .is_some_and(|s| Arc::ptr_eq(&s.value, &stored.value));
                if !still_current {
                    continue;
                }
                let result = if kept.is_empty() && (!is_namespace || namespace_empty) {
                    self.remove(&mut inner, def, &ns, &name, next)
                } else {
                    self.commit(
                        &mut inner,
                        def,
                        &ns,
                        &name,
                        next,
                        Some(stored.value.clone()),
                        EventType::Modified,
                    )
                };
                if result.is_ok() {
                    changed += 1;
                }
            }
        }
        changed
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

/// Which fields a write to `target` of a resource may own (server-side apply bookkeeping).
pub fn field_scope(def: &ResourceDef, target: WriteTarget) -> crate::fields::Scope {
    match target {
        WriteTarget::Status => crate::fields::Scope::StatusOnly,
        WriteTarget::Main if def.status_subresource => crate::fields::Scope::MainWithoutStatus,
        WriteTarget::Main | WriteTarget::Whole => crate::fields::Scope::Everything,
    }
}

/// What decoding a write into the server's internal type does to a built-in kind, for every write
/// (create, update, patch result).
///
/// Secret: `stringData` is folded into `data`, its values winning over `data`'s, and is never
/// stored (kubernetes/kubernetes `pkg/apis/core/v1/conversion.go`,
/// `Convert_v1_Secret_To_core_Secret`: "StringData overwrites Data"; the internal type has no
/// `stringData`).
fn decode_builtin(def: &ResourceDef, object: &mut Value) -> ApiResult<()> {
    if !(def.group.is_empty() && def.plural == "secrets") {
        return Ok(());
    }
    let Some(map) = object.as_object_mut() else {
        return Ok(());
    };
    let string_data = match map.remove("stringData") {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Object(entries)) => entries,
        Some(_) => {
            return Err(ApiError::bad_request(
                "Secret in version \"v1\" cannot be handled as a Secret: stringData: expected a map of strings",
            ));
        }
    };
    if string_data.is_empty() {
        return Ok(());
    }
    let data = map
        .entry("data")
        .or_insert_with(|| Value::Object(serde_json::Map::new()));
    if data.is_null() {
        *data = Value::Object(serde_json::Map::new());
    }
    let Some(data) = data.as_object_mut() else {
        return Err(ApiError::bad_request(
            "Secret in version \"v1\" cannot be handled as a Secret: data: expected a map of base64 strings",
        ));
    };
    for (key, value) in string_data {
        let Value::String(text) = value else {
            return Err(ApiError::bad_request(format!(
                "Secret in version \"v1\" cannot be handled as a Secret: stringData.{key}: expected a string"
            )));
        };
        data.insert(
            key,
            Value::String(base64::engine::general_purpose::STANDARD.encode(text)),
        );
    }
    Ok(())
}

/// Type-specific create rules (what the real registry strategies do in PrepareForCreate).
fn prepare_create(def: &ResourceDef, object: &mut Value) -> ApiResult<()> {
    let Some(map) = object.as_object_mut() else {
        return Ok(());
    };
    match (def.group.as_str(), def.plural.as_str()) {
        ("", "namespaces") => {
            map.insert("status".into(), json!({"phase": "Active"}));
        }
        ("", "pods") => {
            map.insert("status".into(), json!({"phase": "Pending"}));
        }
        ("certificates.k8s.io", _) | ("policy", _) => {
            map.insert("status".into(), json!({}));
        }
        _ if def.custom && def.status_subresource => {
            map.remove("status");
        }
        _ => {}
    }
    Ok(())
}

fn crd_status(crd: &Value) -> Value {
    let now = now_rfc3339();
    let names = crd.pointer("/spec/names").cloned().unwrap_or(json!({}));
    let stored: Vec<Value> = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .map(|vs| {
            vs.iter()
                .filter(|v| v.get("storage") == Some(&json!(true)))
                .filter_map(|v| v.get("name").cloned())
                .collect()
        })
        .unwrap_or_default();
    json!({
        "acceptedNames": names,
        "storedVersions": stored,
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": now},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": now},
        ],
    })
}

/// Equal except for the `time` of managedFields entries.
fn same_but_managed_times(a: &Value, b: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(entries) = v
            .pointer_mut("/metadata/managedFields")
            .and_then(Value::as_array_mut)
        {
            for entry in entries.iter_mut().filter_map(Value::as_object_mut) {
                entry.remove("time");
            }
        }
        v
    };
    a.pointer("/metadata/managedFields").is_some() && strip(a) == strip(b)
}

/// Makes `to`'s status that of `from` (absent if `from` has none).
fn copy_status(from: &Value, to: &mut Value) {
    match (from.get("status"), to.as_object_mut()) {
        (Some(status), Some(map)) => {
            map.insert("status".into(), status.clone());
        }
        (None, Some(map)) => {
            map.remove("status");
        }
        (_, None) => {}
    }
}

/// Applies the rules of an update: immutable metadata kept, status or main part kept per target, generation
/// bumped on spec change, finalizers not added while deleting.
fn merge_for_update(
    def: &ResourceDef,
    current: &Value,
    desired: &mut Value,
    target: WriteTarget,
) -> ApiResult<Value> {
    let name = meta_str(current, "name").to_string();
    let mut next = match target {
        WriteTarget::Status => {
            let mut next = current.clone();
            if let Some(managed) = desired.pointer("/metadata/managedFields") {
                metadata_mut(&mut next).insert("managedFields".into(), managed.clone());
            }
            copy_status(desired, &mut next);
            next
        }
        WriteTarget::Main | WriteTarget::Whole => {
            let mut next = desired.clone();
            if target == WriteTarget::Main
                && def.status_subresource
                && def.group != "apiextensions.k8s.io"
            {
                copy_status(current, &mut next);
            }
            next
        }
    };
    let current_meta = current.get("metadata").cloned().unwrap_or(json!({}));
    let meta = metadata_mut(&mut next);
    for field in [
        "name",
        "namespace",
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
    ] {
        match current_meta.get(field) {
            Some(v) => meta.insert(field.into(), v.clone()),
            None => meta.remove(field),
        };
    }
    meta.insert(
        "resourceVersion".into(),
        current_meta
            .get("resourceVersion")
            .cloned()
            .unwrap_or(json!("")),
    );
    if let Some(map) = next.as_object_mut() {
        map.insert(
            "apiVersion".into(),
            current.get("apiVersion").cloned().unwrap_or(Value::Null),
        );
        map.insert("kind".into(), json!(def.kind));
    }
    if def.group == "apiextensions.k8s.io" {
        next["status"] = crd_status(&next);
    }
    if let Some((field, message)) = crate::meta::invalid_labels_or_annotations(&next) {
        return Err(ApiError::invalid(
            Subject {
                group: &def.group,
                resource: &def.plural,
                name: &name,
            },
            &def.kind,
            &field,
            &message,
        ));
    }
    if is_deleting(current) {
        let before = finalizers(current);
        if let Some(added) = finalizers(&next).into_iter().find(|f| !before.contains(f)) {
            return Err(ApiError::invalid(
                Subject {
                    group: &def.group,
                    resource: &def.plural,
                    name: &name,
                },
                &def.kind,
                "metadata.finalizers",
                &format!(
                    "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers [\"{added}\"]"
                ),
            ));
        }
    }
    if let Some(schema) = &def.schema {
        crate::schema::apply_to_object(&mut next, schema);
    }
    if def.spec_generation && spec_part(current) != spec_part(&next) {
        let generation = current
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0)
            + 1;
        metadata_mut(&mut next).insert("generation".into(), json!(generation));
    }
    Ok(next)
}

/// The status the disruption controller would write for a PodDisruptionBudget given the namespace's pods.
/// Expected pods are the pods the selector matches (the real controller asks the pods' controllers for their
/// scale; bare pods are counted directly here).
pub fn pdb_status(pdb: &Value, pods: &[Arc<Value>]) -> Value {
    let selector = LabelSelector::from_object(pdb.pointer("/spec/selector")).unwrap_or_default();
    let matching: Vec<&Arc<Value>> = pods
        .iter()
        .filter(|p| !selector.is_empty() && selector.matches(p))
        .collect();
    let expected = matching.len() as i64;
    let healthy = matching
        .iter()
        .filter(|p| pod_ready(p) && !is_deleting(p))
        .count() as i64;
    let resolve = |v: &Value| -> i64 {
        match v {
            Value::Number(n) => n.as_i64().unwrap_or(0),
            Value::String(s) => match s.strip_suffix('%').and_then(|p| p.parse::<i64>().ok()) {
                Some(pct) => (pct * expected + 99) / 100,
                None => s.parse().unwrap_or(0),
            },
            _ => 0,
        }
    };
    let desired = if let Some(min) = pdb.pointer("/spec/minAvailable") {
        resolve(min)
    } else if let Some(max) = pdb.pointer("/spec/maxUnavailable") {
        (expected - resolve(max)).max(0)
    } else {
        expected
    };
    let allowed = (healthy - desired).max(0);
    let (status, reason) = if allowed > 0 {
        ("True", "SufficientPods")
    } else {
        ("False", "InsufficientPods")
    };
    // The transition time changes only when the condition's status does.
    let since = pdb
        .pointer("/status/conditions/0")
        .filter(|c| c.get("status") == Some(&json!(status)))
        .and_then(|c| c.get("lastTransitionTime").cloned())
        .unwrap_or_else(|| json!(now_rfc3339()));
    json!({
        "observedGeneration": pdb.pointer("/metadata/generation").cloned().unwrap_or(json!(1)),
        "disruptionsAllowed": allowed,
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
        "conditions": [{"type": "DisruptionAllowed", "status": status, "reason": reason, "message": "", "observedGeneration": pdb.pointer("/metadata/generation").cloned().unwrap_or(json!(1)), "lastTransitionTime": since}],
    })
}

#[cfg(test)]
mod gc_tests {
    use super::*;

    fn store() -> Store {
        Store::new(StoreConfig {
            history_limit: 100,
            broadcast_capacity: 100,
        })
    }

    fn config_map(name: &str, metadata: Value) -> Value {
        let mut object = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata});
        object["metadata"]["name"] = json!(name);
        object
    }

    #[test]
    fn an_object_held_by_another_controllers_finalizer_gives_the_collector_nothing_to_do() {
        let store = store();
        let def = store.resource("", "configmaps").unwrap();
        let held = config_map("held", json!({"finalizers": ["example.com/held"]}));
        store.create(&def, "default", held, false).unwrap();
        store
            .delete(&def, "default", "held", &DeleteOptions::default())
            .unwrap();
        assert!(is_deleting(
            &store.get(&def, "default", "held").unwrap().value
        ));
        assert!(!store.gc_needed(), "only the finalizer's owner can end it");

        // A dependent whose owner is gone is the collector's work, once.
        let dependent = config_map(
            "dependent",
            json!({"ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "gone", "uid": "no-such-uid"}]}),
        );
        store.create(&def, "default", dependent, false).unwrap();
        assert!(store.gc_needed());
        assert_eq!(store.collect_garbage(), 1);
        assert!(store.get(&def, "default", "dependent").is_err());
        assert!(!store.gc_needed());
    }

    #[test]
    fn a_dependent_becomes_the_collectors_work_when_its_owner_is_removed() {
        let store = store();
        let def = store.resource("", "configmaps").unwrap();
        let owner = store
            .create(&def, "default", config_map("owner", json!({})), false)
            .unwrap();
        let uid = meta_str(&owner.value, "uid").to_owned();
        let dependent = config_map(
            "dependent",
            json!({"ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid}]}),
        );
        store.create(&def, "default", dependent, false).unwrap();
        assert!(!store.gc_needed(), "the owner is there");
        store
            .delete(&def, "default", "owner", &DeleteOptions::default())
            .unwrap();
        assert!(store.gc_needed(), "the owner's uid is gone");
        assert_eq!(store.collect_garbage(), 1);
        assert!(!store.gc_needed());
    }

    #[test]
    fn an_owner_deleted_with_orphan_or_foreground_propagation_waits_for_the_collector() {
        for propagation in ["Orphan", "Foreground"] {
            let store = store();
            let def = store.resource("", "configmaps").unwrap();
            store
                .create(&def, "default", config_map("owner", json!({})), false)
                .unwrap();
            let options = DeleteOptions {
                propagation: Some(propagation.to_owned()),
                ..DeleteOptions::default()
            };
            store.delete(&def, "default", "owner", &options).unwrap();
            assert!(store.gc_needed(), "{propagation}");
            store.collect_garbage();
            assert!(
                store.get(&def, "default", "owner").is_err(),
                "{propagation}: no dependents, so the owner goes"
            );
            assert!(!store.gc_needed(), "{propagation}");
        }
    }
}
