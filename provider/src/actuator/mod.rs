//! The actuator: everything this controller asks of Prism Central, through `prism-client`.
//!
//! [`Actuator::connection`] gives the [`Connection`] for a Prism Central endpoint and the
//! credentials of one Secret. Whatever the credentials, one Prism Central has one HTTP pool and
//! one rate limit (Prism's limit is per Prism Central, not per user), one VM [`inventory`], one
//! [`lookups`] cache and one pool of reserved UUIDs ([`uuid_pool`]). A Secret whose credentials
//! change gets a new client at once, and its old credentials are no longer used, without a
//! restart; two Secrets for one Prism Central each have their client, sharing the rest.
//!
//! What these calls serve, the create protocol (one VM per Machine, whatever fails in between:
//! what is recorded before each send, reserved UUIDs, request ids, tasks never waited for), is
//! decided in `crate::plan::machine::decide`; docs/architecture.md ("The create protocol") tells
//! it whole.

pub mod address_watch;
pub mod credentials;
pub mod infrastructure;
pub mod inventory;
pub mod lookups;
pub mod task_watch;
pub mod uuid_pool;

use std::collections::{HashMap, VecDeque};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use prism_client::v3::Vm;
use prism_client::{
    CaBundle, Client, ClientConfig, ConfigError, Error, RateLimit, RequestObserver, TaskProgress,
};
use prometheus::{GaugeVec, IntGaugeVec};
use tokio::sync::broadcast;

use crate::api::{PendingTask, TaskOperation};
use crate::plan::machine::provision::{
    DeletionSeen, first_delete_look_after, first_task_read_after, is_vm_entity,
};
use crate::plan::machine::{DetachRequest, VolumeGroupDetach};
use crate::plan::vm::request::{FollowUpError, FollowUpUpdate, VmRequest};
use crate::plan::vm::scope::NameClause;
use address_watch::AddressWatch;
use credentials::PrismCredentials;
use inventory::{Inventory, InventoryGauges, ScopeSource, SharedScopeSource};
use lookups::LookupCache;
use task_watch::{HandOver, MachineKey, TaskWatch};
use uuid_pool::UuidPool;

/// How the actuator talks to Prism.
#[derive(Clone, Debug)]
pub struct ActuatorSettings {
    /// Extra CA certificates trusted for Prism Central (PEM file).
    pub ca_file: Option<PathBuf>,
    /// How often the CA file is read again: a changed bundle (a ConfigMap mounted as a file,
    /// which the kubelet updates in place, such as OpenShift's injected trusted CA bundle) is
    /// used without a restart.
    pub ca_recheck: Duration,
    /// The system roots' bundle (`prism_client::system_roots_file`), read again as often as
    /// the CA file: when it changes (OpenShift's trusted CA bundle, which the machine-api-operator
    /// mounts there), new clients load the new roots. `None` watches nothing.
    pub system_ca_file: Option<PathBuf>,
    /// Accept any Prism certificate (labs only).
    pub insecure: bool,
    /// Accept a plain `http://` endpoint, which sends the credentials in clear text (labs
    /// only); refused otherwise.
    pub allow_plain_http: bool,
    pub rate_limit: RateLimit,
    /// Entities per list page (Prism allows 500).
    pub page_length: u32,
    /// How old the VM inventory may be before it is listed again.
    pub inventory_max_age: Duration,
    /// How long name → UUID lookups are kept.
    pub lookup_ttl: Duration,
    /// UUIDs reserved per `POST /idempotence_identifiers`.
    pub uuid_batch: u32,
    /// How long a reservation lasts.
    pub uuid_validity: Duration,
    /// How long a VM read by UUID is reused (the reconciles that a Machine's own status write
    /// triggers need no new GET); a write to the VM drops it.
    pub vm_read_ttl: Duration,
    /// The `User-Agent` of every Prism request (see [`user_agent`]).
    pub user_agent: String,
}

/// The `User-Agent` this controller sends Prism: its name and version, and, as a comment (RFC
/// 9110, section 10.1.5), the replica's leader-election identity, so that Prism's own request
/// logs (and prism-mock's) tell which replica sent a request.
pub fn user_agent(identity: Option<&str>) -> String {
    let product = concat!("nutanix-machine-controller/", env!("CARGO_PKG_VERSION"));
    // A header value is visible ASCII, and a comment's own parentheses would end it early.
    let comment: Option<String> = identity.map(|identity| {
        identity
            .chars()
            .filter(|c| c.is_ascii_graphic() && !matches!(c, '(' | ')' | '\\'))
            .collect()
    });
    match comment.filter(|comment| !comment.is_empty()) {
        Some(comment) => format!("{product} ({comment})"),
        None => product.to_owned(),
    }
}

impl Default for ActuatorSettings {
    fn default() -> Self {
        Self {
            ca_file: None,
            ca_recheck: Duration::from_secs(10),
            system_ca_file: None,
            insecure: false,
            allow_plain_http: false,
            rate_limit: RateLimit::default(),
            page_length: 500,
            inventory_max_age: Duration::from_secs(60),
            lookup_ttl: Duration::from_secs(300),
            uuid_batch: 32,
            uuid_validity: Duration::from_secs(24 * 3600),
            vm_read_ttl: Duration::from_secs(5),
            user_agent: user_agent(None),
        }
    }
}

/// Clients unused this long are dropped (a credentials Secret no longer used by any Machine).
const IDLE_CLIENT: Duration = Duration::from_secs(3600);

/// Prism access for the whole controller: one [`PrismCentral`] per endpoint, and per
/// credentials Secret a client sharing its HTTP connections and rate limit.
pub struct Actuator {
    settings: ActuatorSettings,
    observer: Option<Arc<dyn RequestObserver>>,
    /// `nutanix_prism_inventory_unreadable_vms`, by endpoint.
    inventory_unreadable: Option<IntGaugeVec>,
    /// `nutanix_prism_vms_without_machine`, by endpoint.
    inventory_orphans: Option<IntGaugeVec>,
    /// `nutanix_prism_inventory_listed_timestamp_seconds`, by endpoint.
    inventory_listed: Option<GaugeVec>,
    /// The names the inventories list (set once the controller's Machine cache exists).
    vm_scope: SharedScopeSource,
    prism_centrals: Mutex<HashMap<String, Arc<PrismCentral>>>,
    /// The CA file and the system roots' bundle as last read.
    ca: Mutex<TrustReads>,
    /// The Machines whose task a [`TaskWatch`] saw end, or whose VM an [`AddressWatch`] saw
    /// list new addresses.
    task_ends: broadcast::Sender<MachineKey>,
}

/// The trust files as last read.
#[derive(Debug, Default)]
struct TrustReads {
    /// `--prism-ca-file`.
    extra: Option<CaRead>,
    /// The system roots' bundle (only its fingerprint matters: the TLS setup reads it itself).
    system: Option<CaRead>,
}

/// A CA bundle's fingerprint and PEM text.
type CaPem = (u64, Arc<Vec<u8>>);

/// Task ends not yet taken by the Machine controller: more than a scale-up or -down has at once.
const TASK_ENDS_BUFFER: usize = 4096;

/// What clients are built with: the fingerprint of every trust file, and the CA file's PEM.
type Trust = (u64, Option<Arc<Vec<u8>>>);

/// The CA file's content as read at `at`.
#[derive(Debug)]
struct CaRead {
    at: Instant,
    fingerprint: u64,
    pem: Arc<Vec<u8>>,
}

/// What every user of one Prism Central shares, whatever its credentials.
#[derive(Debug)]
struct PrismCentral {
    /// The first client made for this Prism Central, with the fingerprint of the CA bundle it
    /// trusts: others are made from it ([`Client::with_credentials`]), sharing its HTTP
    /// connections and rate limit. A new CA bundle replaces it.
    base: Mutex<(u64, Client)>,
    inventory: Inventory,
    lookups: Arc<LookupCache>,
    uuids: Arc<UuidPool>,
    recent_reads: Arc<RecentReads>,
    waiting: Arc<WaitingVms>,
    made: Arc<MadeVms>,
    task_durations: Arc<TaskDurations>,
    deletes: Arc<DeleteDurations>,
    tasks: Arc<TaskWatch>,
    addresses: Arc<AddressWatch>,
    connections: Mutex<HashMap<String, SourceConnection>>,
}

/// The connection of one credentials source (the Secret they came from): the fingerprint of
/// the credentials it was made with, when it was last used, and the connection.
type SourceConnection = (u64, Instant, Arc<Connection>);

impl std::fmt::Debug for Actuator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Actuator")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Actuator {
    /// `observer` sees every Prism request (metrics).
    pub fn new(settings: ActuatorSettings, observer: Option<Arc<dyn RequestObserver>>) -> Self {
        Self {
            settings,
            observer,
            inventory_unreadable: None,
            inventory_orphans: None,
            inventory_listed: None,
            vm_scope: SharedScopeSource::default(),
            prism_centrals: Mutex::new(HashMap::new()),
            ca: Mutex::new(TrustReads::default()),
            task_ends: broadcast::channel(TASK_ENDS_BUFFER).0,
        }
    }

    /// The rate limit every Prism Central's calls are held to.
    pub fn rate_limit(&self) -> &RateLimit {
        &self.settings.rate_limit
    }

    /// The Machines whose task ended or whose VM lists new addresses, as the task and address
    /// watches of every Prism Central see them ([`task_watch`], [`address_watch`]); a receiver
    /// that falls behind skips some, which their own polls cover.
    pub fn task_ends(&self) -> broadcast::Receiver<MachineKey> {
        self.task_ends.subscribe()
    }

    /// Reports, by endpoint, the VMs each inventory listing skips as unreadable in
    /// `unreadable`, the cluster's VMs with no Machine in `orphans`, and when the last listing
    /// began in `listed`.
    pub fn with_inventory_gauges(
        mut self,
        unreadable: IntGaugeVec,
        orphans: IntGaugeVec,
        listed: GaugeVec,
    ) -> Self {
        self.inventory_unreadable = Some(unreadable);
        self.inventory_orphans = Some(orphans);
        self.inventory_listed = Some(listed);
        self
    }

    /// Gives the inventories the names of every watched Machine to list. Set once: a second
    /// call is ignored (one controller, one Machine cache).
    pub fn set_vm_scope(&self, source: ScopeSource) {
        if self.vm_scope.set(source).is_err() {
            tracing::debug!("the inventory's Machine names were already given");
        }
    }

    pub fn settings(&self) -> &ActuatorSettings {
        &self.settings
    }

    /// The connection for `endpoint` (`host:port` or an `https://` URL) with `credentials`, read
    /// from `source` (the Secret's `namespace/name`). Every source shares one inventory, cache,
    /// HTTP pool and rate limit per endpoint; new credentials from a source replace its old
    /// ones at once.
    pub fn connection(
        &self,
        endpoint: &str,
        source: &str,
        credentials: &PrismCredentials,
    ) -> Result<Arc<Connection>, ConfigError> {
        let prism_central = self.prism_central(endpoint, credentials)?;
        let fingerprint = credentials.fingerprint();
        let mut connections = prism_central
            .connections
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        connections.retain(|key, (_, used, _)| key == source || used.elapsed() < IDLE_CLIENT);
        match connections.get_mut(source) {
            Some((known, used, connection)) if *known == fingerprint => {
                *used = Instant::now();
                return Ok(connection.clone());
            }
            Some(_) => {
                tracing::info!(
                    endpoint,
                    source,
                    user = credentials.user(),
                    "credentials changed: the old ones are dropped"
                );
            }
            None => {
                tracing::info!(
                    endpoint,
                    source,
                    user = credentials.user(),
                    "connected to Prism Central"
                );
            }
        }
        let client = prism_central
            .base
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .1
            .with_credentials(&credentials.to_client(), Default::default())?;
        let connection = Arc::new(Connection {
            endpoint: endpoint.to_owned(),
            client,
            inventory: prism_central.inventory.clone(),
            lookups: prism_central.lookups.clone(),
            uuids: prism_central.uuids.clone(),
            recent_reads: prism_central.recent_reads.clone(),
            waiting: prism_central.waiting.clone(),
            made: prism_central.made.clone(),
            task_durations: prism_central.task_durations.clone(),
            deletes: prism_central.deletes.clone(),
            tasks: prism_central.tasks.clone(),
            addresses: prism_central.addresses.clone(),
        });
        connections.insert(
            source.to_owned(),
            (fingerprint, Instant::now(), connection.clone()),
        );
        Ok(connection)
    }

    /// The trust the clients are built with: a fingerprint of the CA file and the system roots'
    /// bundle together, and the CA file's content (`None` without `--prism-ca-file`), each read
    /// again after `ca_recheck`. A read that fails after a good one keeps the good one (the
    /// kubelet swaps a mounted ConfigMap's files by a symlink, never leaving a half-written file,
    /// so a failure is the file going away, which must not cut every Machine off Prism).
    fn current_ca(&self) -> Result<Trust, ConfigError> {
        let mut reads = self.ca.lock().unwrap_or_else(PoisonError::into_inner);
        let recheck = self.settings.ca_recheck;
        let extra = match &self.settings.ca_file {
            Some(path) => Some(
                reread(&mut reads.extra, path, recheck, "the Prism Central CA file").map_err(
                    |source| ConfigError::CaBundleUnreadable {
                        path: path.display().to_string(),
                        source,
                    },
                )?,
            ),
            None => None,
        };
        // The system bundle may be absent (roots from a directory, or none): nothing to watch.
        let system = self.settings.system_ca_file.as_ref().and_then(|path| {
            reread(&mut reads.system, path, recheck, "the system CA bundle")
                .ok()
                .map(|(fingerprint, _)| fingerprint)
        });
        let mut hasher = DefaultHasher::new();
        extra
            .as_ref()
            .map(|(fingerprint, _)| *fingerprint)
            .hash(&mut hasher);
        system.hash(&mut hasher);
        let fingerprint = match (&extra, system) {
            (None, None) => 0,
            _ => hasher.finish(),
        };
        Ok((fingerprint, extra.map(|(_, pem)| pem)))
    }

    /// A client of `endpoint` with `credentials`, trusting `ca`.
    fn base_client(
        &self,
        endpoint: &str,
        credentials: &PrismCredentials,
        ca: Option<&Arc<Vec<u8>>>,
    ) -> Result<Client, ConfigError> {
        let mut config = ClientConfig::new(endpoint, credentials.to_client())?;
        config.ca_bundle = match (ca, &self.settings.ca_file) {
            (Some(pem), Some(path)) => Some(CaBundle::Pem {
                origin: path.display().to_string(),
                pem: pem.as_ref().clone(),
            }),
            _ => None,
        };
        config.insecure = self.settings.insecure;
        config.allow_plain_http = self.settings.allow_plain_http;
        config.rate_limit = self.settings.rate_limit.clone();
        config.list_page_size = self.settings.page_length;
        config.observer = self.observer.clone();
        config.user_agent = self.settings.user_agent.clone();
        Client::new(config)
    }

    /// The shared state of `endpoint`, made with the first credentials used for it. When the CA
    /// bundle changed since its client was made, the client is made again (and every
    /// credentials' client from it), keeping the inventory and caches.
    fn prism_central(
        &self,
        endpoint: &str,
        credentials: &PrismCredentials,
    ) -> Result<Arc<PrismCentral>, ConfigError> {
        let (ca_fingerprint, ca) = self.current_ca()?;
        let mut prism_centrals = self
            .prism_centrals
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(prism_central) = prism_centrals.get(endpoint) {
            let mut base = prism_central
                .base
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if base.0 != ca_fingerprint {
                let client = self.base_client(endpoint, credentials, ca.as_ref())?;
                *base = (ca_fingerprint, client);
                prism_central
                    .connections
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clear();
                tracing::info!(
                    endpoint,
                    "the Prism Central CA bundle or the system roots changed: connections use the new ones"
                );
            }
            return Ok(prism_central.clone());
        }
        let client = self.base_client(endpoint, credentials, ca.as_ref())?;
        let inventory = Inventory::new(
            self.settings.inventory_max_age,
            self.settings.page_length,
            InventoryGauges {
                unreadable: self
                    .inventory_unreadable
                    .as_ref()
                    .map(|gauges| gauges.with_label_values(&[endpoint])),
                orphans: self
                    .inventory_orphans
                    .as_ref()
                    .map(|gauges| gauges.with_label_values(&[endpoint])),
                listed: self
                    .inventory_listed
                    .as_ref()
                    .map(|gauges| gauges.with_label_values(&[endpoint])),
            },
            self.vm_scope.clone(),
        );
        let recent_reads = Arc::new(RecentReads::new(self.settings.vm_read_ttl));
        let prism_central = Arc::new(PrismCentral {
            base: Mutex::new((ca_fingerprint, client)),
            inventory: inventory.clone(),
            lookups: Arc::new(LookupCache::new(self.settings.lookup_ttl)),
            uuids: Arc::new(UuidPool::new(
                self.settings.uuid_batch,
                self.settings.uuid_validity,
            )),
            recent_reads: recent_reads.clone(),
            waiting: Arc::default(),
            made: Arc::default(),
            task_durations: Arc::default(),
            deletes: Arc::default(),
            tasks: Arc::new(TaskWatch::new(self.task_ends.clone())),
            addresses: Arc::new(AddressWatch::new(
                inventory,
                recent_reads,
                self.task_ends.clone(),
            )),
            connections: Mutex::new(HashMap::new()),
        });
        prism_centrals.insert(endpoint.to_owned(), prism_central.clone());
        Ok(prism_central)
    }
}

/// `path`'s content and fingerprint, from `last` when read less than `recheck` ago, else read
/// again; a failed read after a good one keeps the good one (logged as `what`).
fn reread(
    last: &mut Option<CaRead>,
    path: &std::path::Path,
    recheck: Duration,
    what: &str,
) -> Result<CaPem, std::io::Error> {
    if let Some(read) = last.as_ref()
        && read.at.elapsed() < recheck
    {
        return Ok((read.fingerprint, read.pem.clone()));
    }
    match std::fs::read(path) {
        Ok(pem) => {
            let mut hasher = DefaultHasher::new();
            pem.hash(&mut hasher);
            let read = CaRead {
                at: Instant::now(),
                fingerprint: hasher.finish(),
                pem: Arc::new(pem),
            };
            let current = (read.fingerprint, read.pem.clone());
            *last = Some(read);
            Ok(current)
        }
        Err(error) => match last.as_mut() {
            Some(read) => {
                tracing::warn!(path = %path.display(), %error, "{what} cannot be read: the last one read is kept");
                read.at = Instant::now();
                Ok((read.fingerprint, read.pem.clone()))
            }
            None => Err(error),
        },
    }
}

/// One Prism Central with one set of credentials; what it shares with the other credentials
/// of the same Prism Central is behind `Arc`s.
#[derive(Debug)]
pub struct Connection {
    endpoint: String,
    client: Client,
    pub inventory: Inventory,
    pub lookups: Arc<LookupCache>,
    pub uuids: Arc<UuidPool>,
    recent_reads: Arc<RecentReads>,
    waiting: Arc<WaitingVms>,
    made: Arc<MadeVms>,
    task_durations: Arc<TaskDurations>,
    deletes: Arc<DeleteDurations>,
    /// The shared look at the tasks in flight on this Prism Central.
    tasks: Arc<TaskWatch>,
    /// The shared look at the VMs whose Machines wait for their addresses.
    addresses: Arc<AddressWatch>,
}

/// VMs read by UUID in the last few seconds.
#[derive(Debug)]
struct RecentReads {
    ttl: Duration,
    vms: Mutex<HashMap<String, (Instant, Option<Vm>)>>,
}

impl RecentReads {
    fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            vms: Mutex::new(HashMap::new()),
        }
    }

    fn get(&self, uuid: &str) -> Option<Option<Vm>> {
        let vms = self.vms.lock().unwrap_or_else(PoisonError::into_inner);
        vms.get(uuid)
            .filter(|(at, _)| at.elapsed() < self.ttl)
            .map(|(_, vm)| vm.clone())
    }

    fn put(&self, uuid: &str, vm: Option<Vm>) {
        let mut vms = self.vms.lock().unwrap_or_else(PoisonError::into_inner);
        vms.retain(|_, (at, _)| at.elapsed() < self.ttl);
        vms.insert(uuid.to_owned(), (Instant::now(), vm));
    }

    fn forget(&self, uuid: &str) {
        self.vms
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(uuid);
    }
}

/// VMs whose Machines are waiting on them (a create task to end, addresses to appear), with
/// when each last looked: how many Machines one shared listing would serve.
#[derive(Debug, Default)]
struct WaitingVms {
    seen: Mutex<HashMap<String, Instant>>,
}

impl WaitingVms {
    /// Notes that the Machine of `uuid` is waiting and returns how many have looked within
    /// `window` (this one included).
    fn note(&self, uuid: &str, window: Duration) -> usize {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.retain(|_, at| at.elapsed() < window);
        seen.insert(uuid.to_owned(), Instant::now());
        seen.len()
    }
}

/// VMs whose create, clone or deploy this Prism Central's connections saw end, with when.
/// Prism lists a VM once the task that makes it has ended (see [`inventory`]), so a listing
/// begun before that may not show it; a Machine waiting on such a VM is served a listing begun
/// since ([`Inventory::snapshot_begun_after`]), not one within its age bound that predates the
/// VM, whose absence would cost a `GET`.
#[derive(Debug, Default)]
struct MadeVms {
    seen: Mutex<HashMap<String, Instant>>,
}

/// How long a VM's making is remembered: past it, the waiter's own bound on a listing's age is
/// long past it too.
const MADE_KEPT: Duration = Duration::from_secs(300);

impl MadeVms {
    fn note(&self, uuid: &str, at: Instant) {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.retain(|_, made| made.elapsed() < MADE_KEPT);
        seen.insert(uuid.to_ascii_lowercase(), at);
    }

    /// When VM `uuid` was seen made, if it was lately.
    fn at(&self, uuid: &str) -> Option<Instant> {
        let seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.get(&uuid.to_ascii_lowercase())
            .copied()
            .filter(|made| made.elapsed() < MADE_KEPT)
    }
}

/// How long the last tasks of each kind took (from being recorded to the read that saw them
/// succeed), on one Prism Central.
#[derive(Debug, Default)]
struct TaskDurations {
    recent: Mutex<HashMap<TaskOperation, VecDeque<Duration>>>,
}

/// Tasks of one kind remembered.
const TASK_DURATIONS_KEPT: usize = 16;

impl TaskDurations {
    fn record(&self, operation: &TaskOperation, took: Duration) {
        let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        let durations = recent.entry(operation.clone()).or_default();
        if durations.len() == TASK_DURATIONS_KEPT {
            durations.pop_front();
        }
        durations.push_back(took);
    }

    fn minimum(&self, operation: &TaskOperation) -> Option<Duration> {
        let recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        recent.get(operation)?.iter().min().copied()
    }

    fn maximum(&self, operation: &TaskOperation) -> Option<Duration> {
        let recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        recent.get(operation)?.iter().max().copied()
    }
}

/// When each VM's DELETE was accepted, until a 404 confirms it, with the latest read that still
/// found the VM; and what recent deletions showed of both: a deletion is first looked at when
/// deletions usually end ([`first_delete_look_after`]), as a task is first read when tasks of
/// its kind usually end.
#[derive(Debug, Default)]
struct DeleteDurations {
    sent: Mutex<HashMap<String, DeletionGoing>>,
    recent: Mutex<VecDeque<DeletionSeen>>,
}

/// A deletion whose 404 has not come yet.
#[derive(Debug, Clone, Copy)]
struct DeletionGoing {
    sent: Instant,
    still_there_after: Duration,
}

/// Deletions whose 404 never came (the Machine went another way) are forgotten after this.
const DELETE_SENT_KEPT: Duration = Duration::from_secs(600);

impl DeleteDurations {
    fn sent(&self, uuid: &str, at: Instant) {
        let mut sent = self.sent.lock().unwrap_or_else(PoisonError::into_inner);
        sent.retain(|_, going| at.saturating_duration_since(going.sent) < DELETE_SENT_KEPT);
        let going = DeletionGoing {
            sent: at,
            still_there_after: Duration::ZERO,
        };
        sent.insert(uuid.to_owned(), going);
    }

    /// A read found `uuid` at `at`: if its DELETE was sent, the deletion lasts at least this long.
    fn still_there(&self, uuid: &str, at: Instant) {
        let mut sent = self.sent.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(going) = sent.get_mut(uuid) {
            going.still_there_after = going
                .still_there_after
                .max(at.saturating_duration_since(going.sent));
        }
    }

    /// A read found `uuid` gone at `at`: if its DELETE was sent, remember what it showed.
    fn gone(&self, uuid: &str, at: Instant) {
        let going = self
            .sent
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(uuid);
        if let Some(going) = going {
            let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
            if recent.len() == TASK_DURATIONS_KEPT {
                recent.pop_front();
            }
            recent.push_back(DeletionSeen {
                gone_after: at.saturating_duration_since(going.sent),
                still_there_after: going.still_there_after,
            });
        }
    }

    fn first_look(&self, poll: Duration) -> Duration {
        let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        first_delete_look_after(recent.make_contiguous(), poll)
    }
}

/// Whether Machines waiting on their VMs should look in the shared listing rather than each read
/// its own VM or task: when one refresh (`pages` list calls) serves at least as many Machines as
/// it costs calls.
pub fn shared_listing_pays(waiting: usize, pages: usize) -> bool {
    waiting >= pages.max(1)
}

/// What a create call returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreateSent {
    /// The task to watch; `None` when Prism named none (the VM is then looked up by UUID).
    pub task: Option<String>,
}

/// How applying a follow-up update went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FollowUpOutcome {
    /// A PUT was sent; its task, if Prism named one.
    Sent { task: Option<String> },
    /// The VM already has everything: nothing to send.
    NothingLeft,
}

/// Why a follow-up update was not applied.
#[derive(Debug, thiserror::Error)]
pub enum FollowUpFailure {
    #[error(transparent)]
    Prism(#[from] Error),
    #[error("VM {0}: {1}")]
    Impossible(String, FollowUpError),
    #[error("VM {0} has no spec to update")]
    NoSpec(String),
}

/// How a delete went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeleteOutcome {
    /// Prism accepted the delete (the VM goes through DELETE_PENDING, then 404), with the task
    /// that deletes it when Prism named one.
    Accepted { task: Option<String> },
    /// There was no such VM.
    AlreadyGone,
}

impl Connection {
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// `GET /vms/{uuid}`; `None` for 404.
    pub async fn get_vm(&self, uuid: &str) -> Result<Option<Vm>, Error> {
        let vm = match self.client.get_vm(uuid).await {
            Ok(vm) => {
                self.deletes.still_there(uuid, Instant::now());
                Some(vm)
            }
            Err(error) if error.is_not_found() => {
                self.deletes.gone(uuid, Instant::now());
                None
            }
            Err(error) => return Err(error),
        };
        self.recent_reads.put(uuid, vm.clone());
        Ok(vm)
    }

    /// Drops the recent read of a VM (it is known to have changed).
    pub fn forget_read(&self, uuid: &str) {
        self.recent_reads.forget(uuid);
    }

    /// The VM as read in the last few seconds, else `GET /vms/{uuid}`.
    pub async fn get_vm_recent(&self, uuid: &str) -> Result<Option<Vm>, Error> {
        match self.recent_reads.get(uuid) {
            Some(vm) => Ok(vm),
            None => self.get_vm(uuid).await,
        }
    }

    /// The shared listing, no older than `max_age`, for a Machine waiting on VM `uuid`; `None`
    /// when fewer Machines wait (within `window`) than a refresh costs calls, so that reading
    /// the VM or task directly is cheaper.
    pub async fn listing_for_waiter(
        &self,
        uuid: &str,
        wanted: &NameClause,
        window: Duration,
        max_age: Duration,
    ) -> Result<Option<Arc<inventory::InventorySnapshot>>, Error> {
        let waiting = self.waiting.note(uuid, window);
        if !shared_listing_pays(waiting, self.inventory.pages()) {
            return Ok(None);
        }
        self.inventory
            .snapshot_begun_after(&self.client, wanted, max_age, self.made.at(uuid))
            .await
            .map(Some)
    }

    /// How soon after being recorded a task of this kind is first read
    /// ([`crate::plan::machine::provision::first_task_read_after`]).
    pub fn first_task_read_after(&self, operation: &TaskOperation, poll: Duration) -> Duration {
        first_task_read_after(self.task_durations.minimum(operation), poll)
    }

    /// The longest that the last successful tasks of this kind on this Prism Central took
    /// ([`crate::plan::machine::provision::past_usual_end`]); `None` before the first.
    pub fn slowest_task(&self, operation: &TaskOperation) -> Option<Duration> {
        self.task_durations.maximum(operation)
    }

    /// How soon after a VM's DELETE was accepted its end is first looked for, from the last
    /// deletions on this Prism Central ([`first_delete_look_after`]).
    pub fn first_delete_look_after(&self, poll: Duration) -> Duration {
        self.deletes.first_look(poll)
    }

    /// Remembers how long a task that succeeded took, for [`Self::first_task_read_after`].
    pub fn task_took(&self, operation: &TaskOperation, took: Duration) {
        self.task_durations.record(operation, took);
    }

    /// One read of a recorded task (v4 for a deploy, v3 otherwise): what the shared task watch
    /// listed, when it saw the task succeed, else a `GET`. An ended task leaves the watch.
    pub async fn read_task(&self, task: &PendingTask) -> Result<TaskProgress, Error> {
        let (progress, ended) = match self.tasks.handed_over(&task.id) {
            Some((listed, seen)) => (listed, seen),
            None => {
                let progress = if task.operation.is_v4() {
                    self.client.get_v4_task(&task.id).await?
                } else {
                    self.client.get_task(&task.id).await?
                };
                (progress, Instant::now())
            }
        };
        if !matches!(progress, TaskProgress::Running { .. }) {
            self.tasks.forget(&task.id);
        }
        if let TaskProgress::Succeeded { entities, .. } = &progress
            && task.operation.creates_vm()
        {
            for vm in entities.iter().filter(|entity| is_vm_entity(&entity.kind)) {
                self.made.note(&vm.uuid, ended);
            }
        }
        Ok(progress)
    }

    /// Has the shared task watch wake `machine` when `task` ends. A listed success stands in for
    /// the Machine's own read; a deploy's (`v4`) once its subtasks, which name the VM, are listed.
    pub fn watch_task(&self, task: &str, v4: bool, machine: MachineKey) {
        let hand_over = if v4 {
            HandOver::WithSubtasks
        } else {
            HandOver::Listed
        };
        self.tasks
            .watch(&self.client, task, machine, hand_over, None);
    }

    /// Whether the shared task watch saw `task` end since it was recorded.
    pub fn task_end_seen(&self, task: &str) -> bool {
        self.tasks.end_seen(task)
    }

    /// Has the shared task watch wake `machine` when the DELETE task `task` of its VM `vm` ends.
    pub fn watch_delete(&self, task: &str, vm: &str, machine: MachineKey) {
        self.tasks
            .watch(&self.client, task, machine, HandOver::No, Some(vm));
    }

    /// Has the shared address watch wake `machine` (whose name `names` covers) when VM `vm`
    /// lists addresses other than `seen`.
    pub fn await_addresses(
        &self,
        vm: &str,
        seen: Vec<String>,
        names: NameClause,
        machine: MachineKey,
    ) {
        self.addresses.watch(&self.client, vm, seen, names, machine);
    }

    /// Whether the shared address watch looks at VM `vm`.
    pub fn address_watched(&self, vm: &str) -> bool {
        self.addresses.watches(vm)
    }

    /// Stops the shared address watch's look at VM `vm`.
    pub fn addresses_known(&self, vm: &str) {
        self.addresses.forget(vm);
    }

    /// Stops the shared address watch's looks for `machine` (it is gone).
    pub fn forget_machine_addresses(&self, machine: &MachineKey) {
        self.addresses.forget_machine(machine);
    }

    /// Whether the shared task watch saw the DELETE task of VM `vm` end.
    pub fn delete_end_seen(&self, vm: &str) -> bool {
        self.tasks.delete_end_seen(vm)
    }

    /// Sends the create, clone or deploy. `deploy_request_id` is required for a deploy (the id
    /// recorded on the Machine).
    pub async fn send_create(
        &self,
        request: &VmRequest,
        deploy_request_id: Option<&str>,
    ) -> Result<CreateSent, Error> {
        if let VmRequest::Create(body) = request
            && let Some(uuid) = &body.metadata.uuid
        {
            self.recent_reads.forget(uuid);
        }
        if let VmRequest::Clone { body, .. } = request
            && let Some(uuid) = body.metadata.as_ref().and_then(|m| m.uuid.as_ref())
        {
            self.recent_reads.forget(uuid);
        }
        match request {
            VmRequest::Create(body) => {
                let vm = self.client.create_vm(body).await?;
                Ok(CreateSent {
                    task: vm.task_uuid().map(str::to_owned),
                })
            }
            VmRequest::Clone {
                source_vm, body, ..
            } => {
                let task = self.client.clone_vm(source_vm, body).await?;
                Ok(CreateSent {
                    task: Some(task.task_uuid).filter(|t| !t.is_empty()),
                })
            }
            VmRequest::Deploy { template, body, .. } => {
                let accepted = self
                    .client
                    .deploy_template(template, body, deploy_request_id)
                    .await?;
                Ok(CreateSent {
                    task: Some(accepted.task_ext_id),
                })
            }
        }
    }

    /// Applies a follow-up update: change the VM as read (`vm`, or a GET when `None`), PUT (a
    /// 409 comes back as a Prism conflict: the VM changed since it was read; read it again
    /// and retry).
    pub async fn apply_follow_up(
        &self,
        uuid: &str,
        update: &FollowUpUpdate,
        vm: Option<Vm>,
    ) -> Result<FollowUpOutcome, FollowUpFailure> {
        let vm = match vm {
            Some(vm) => vm,
            None => self.client.get_vm(uuid).await?,
        };
        let mut input = vm
            .into_update_input()
            .ok_or_else(|| FollowUpFailure::NoSpec(uuid.to_owned()))?;
        let changed = update
            .apply(&mut input)
            .map_err(|error| FollowUpFailure::Impossible(uuid.to_owned(), error))?;
        if !changed {
            return Ok(FollowUpOutcome::NothingLeft);
        }
        self.recent_reads.forget(uuid);
        let updated = self.client.update_vm(uuid, &input).await?;
        Ok(FollowUpOutcome::Sent {
            task: updated.task_uuid().map(str::to_owned),
        })
    }

    /// `DELETE /vms/{uuid}`; a VM that is already gone is success.
    /// Detaches VM `vm_uuid` from each volume group (with its request id; the groups stay) and
    /// reads each detach's task once, without waiting for it.
    pub async fn detach_volume_groups(
        &self,
        vm_uuid: &str,
        detaches: &[DetachRequest],
    ) -> Result<Vec<VolumeGroupDetach>, Error> {
        self.recent_reads.forget(vm_uuid);
        let mut detached = Vec::with_capacity(detaches.len());
        for detach in detaches {
            let task = self
                .client
                .detach_volume_group(&detach.volume_group, vm_uuid, &detach.request_id)
                .await?;
            detached.push(VolumeGroupDetach {
                volume_group: detach.volume_group.clone(),
                task: self.client.get_v4_task(&task).await?,
            });
        }
        Ok(detached)
    }

    pub async fn delete_vm(&self, uuid: &str) -> Result<DeleteOutcome, Error> {
        self.recent_reads.forget(uuid);
        match self.client.delete_vm(uuid).await {
            Ok(answer) => {
                self.deletes.sent(uuid, Instant::now());
                Ok(DeleteOutcome::Accepted {
                    task: answer.task_uuid().map(str::to_owned),
                })
            }
            Err(error) if error.is_not_found() => Ok(DeleteOutcome::AlreadyGone),
            Err(error) => Err(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_agent_names_the_replica_and_stays_a_valid_header() {
        let product = concat!("nutanix-machine-controller/", env!("CARGO_PKG_VERSION"));
        assert_eq!(
            user_agent(Some("machine-api-controllers-7d9f_3b1c")),
            format!("{product} (machine-api-controllers-7d9f_3b1c)")
        );
        // Characters a header or a comment cannot carry are dropped, not sent.
        let odd = user_agent(Some("pod (a)\tb\u{e9}"));
        assert_eq!(odd, format!("{product} (podab)"));
        assert!(axum::http::HeaderValue::from_str(&odd).is_ok());
        assert_eq!(user_agent(Some("()")), product);
        assert_eq!(user_agent(None), product);
    }

    #[test]
    fn a_plain_http_endpoint_is_refused_unless_allowed() {
        let credentials = PrismCredentials::new("admin", "pa55");
        let actuator = Actuator::new(ActuatorSettings::default(), None);
        let error = actuator
            .connection("http://pc.example.com:9440", "ns/creds", &credentials)
            .unwrap_err();
        assert!(
            matches!(&error, ConfigError::PlainHttpRefused { endpoint } if endpoint == "http://pc.example.com:9440"),
            "{error:?}"
        );
        assert!(
            actuator
                .connection("pc.example.com", "ns/creds", &credentials)
                .is_ok()
        );
        let lab = Actuator::new(
            ActuatorSettings {
                allow_plain_http: true,
                ..ActuatorSettings::default()
            },
            None,
        );
        assert!(
            lab.connection("http://pc.example.com:9440", "ns/creds", &credentials)
                .is_ok()
        );
    }

    #[test]
    fn a_listing_pays_once_as_many_machines_wait_as_it_costs_calls() {
        assert!(shared_listing_pays(1, 1));
        assert!(shared_listing_pays(1, 0), "before any listing, one page");
        assert!(!shared_listing_pays(3, 4));
        assert!(shared_listing_pays(4, 4));
    }

    #[test]
    fn the_shortest_of_the_last_tasks_of_a_kind_sets_the_first_read() {
        let durations = TaskDurations::default();
        assert_eq!(durations.minimum(&TaskOperation::Create), None);
        durations.record(&TaskOperation::Create, Duration::from_secs(3));
        durations.record(&TaskOperation::Create, Duration::from_secs(2));
        durations.record(&TaskOperation::FollowUp, Duration::from_secs(1));
        assert_eq!(
            durations.minimum(&TaskOperation::Create),
            Some(Duration::from_secs(2))
        );
        for _ in 0..TASK_DURATIONS_KEPT {
            durations.record(&TaskOperation::Create, Duration::from_secs(5));
        }
        assert_eq!(
            durations.minimum(&TaskOperation::Create),
            Some(Duration::from_secs(5)),
            "only the last tasks count: slower tasks raise the estimate"
        );
    }

    #[test]
    fn a_deletion_counts_from_its_delete_to_the_404_and_to_the_last_read_that_found_the_vm() {
        let poll = Duration::from_millis(500);
        let secs = Duration::from_secs;
        let deletes = DeleteDurations::default();
        let start = Instant::now();
        assert_eq!(deletes.first_look(poll), poll);
        deletes.gone("never-deleted", start + secs(9));
        assert_eq!(
            deletes.first_look(poll),
            poll,
            "a 404 without a DELETE is no deletion"
        );
        deletes.sent("vm-1", start);
        deletes.sent("vm-2", start + secs(1));
        deletes.still_there("vm-1", start + secs(4));
        deletes.still_there("vm-2", start + secs(2));
        deletes.gone("vm-1", start + secs(5));
        deletes.gone("vm-2", start + secs(6));
        assert_eq!(
            deletes.first_look(poll),
            secs(4),
            "four fifths of the shortest time to the 404 (5 s), no later than a poll after 4 s seen going"
        );
        deletes.gone("vm-2", start + secs(30));
        assert_eq!(
            deletes.first_look(poll),
            secs(4),
            "a second 404 of the same VM is not a second deletion"
        );
        // A DELETE whose 404 never came is forgotten once it is old.
        deletes.sent("vm-3", start);
        deletes.sent("vm-4", start + DELETE_SENT_KEPT);
        deletes.gone("vm-3", start + DELETE_SENT_KEPT + secs(1));
        assert_eq!(deletes.first_look(poll), secs(4));
    }

    /// A scale-down's backlog makes every look late; each late 404 used to lengthen the wait
    /// before the next deletions' first look (issue 37). Deletions found over at their first
    /// look, however late, bring the look back to the poll interval.
    #[test]
    fn deletions_confirmed_late_by_a_backlog_do_not_delay_the_next_first_look() {
        let poll = Duration::from_millis(500);
        let deletes = DeleteDurations::default();
        let start = Instant::now();
        for index in 0..TASK_DURATIONS_KEPT {
            let uuid = format!("vm-{index}");
            deletes.sent(&uuid, start);
            deletes.gone(&uuid, start + Duration::from_secs(25));
        }
        assert_eq!(deletes.first_look(poll), poll);
        // Deletions that were seen going for a while do make the next ones wait.
        for index in 0..2 {
            let uuid = format!("slow-{index}");
            deletes.sent(&uuid, start);
            deletes.still_there(&uuid, start + Duration::from_secs(9));
            deletes.gone(&uuid, start + Duration::from_secs(30));
        }
        assert_eq!(deletes.first_look(poll), Duration::from_millis(9500));
    }

    #[test]
    fn waiting_machines_are_counted_within_the_window_once_each() {
        let waiting = WaitingVms::default();
        let window = Duration::from_secs(60);
        assert_eq!(waiting.note("a", window), 1);
        assert_eq!(waiting.note("b", window), 2);
        assert_eq!(
            waiting.note("a", window),
            2,
            "a Machine looking again counts once"
        );
        assert_eq!(
            waiting.note("c", Duration::ZERO),
            1,
            "looks older than the window are forgotten"
        );
    }

    #[test]
    fn one_prism_central_shares_one_state_whatever_the_credentials() {
        let actuator = Actuator::new(ActuatorSettings::default(), None);
        let endpoint = "pc.example.com:9440";
        let team_a = PrismCredentials::new("a", "one");
        let team_b = PrismCredentials::new("b", "two");
        let first = actuator.connection(endpoint, "ns/a", &team_a).unwrap();
        let other = actuator.connection(endpoint, "ns/b", &team_b).unwrap();
        assert!(Arc::ptr_eq(&first.lookups, &other.lookups));
        assert!(Arc::ptr_eq(&first.uuids, &other.uuids));
        assert!(Arc::ptr_eq(&first.waiting, &other.waiting));
        assert!(first.inventory.same_as(&other.inventory));
        let again = actuator.connection(endpoint, "ns/a", &team_a).unwrap();
        assert!(
            Arc::ptr_eq(&first, &again),
            "unchanged credentials: the same client"
        );

        // Rotated: a new client at once, the same shared state, and one client for the source.
        let rotated = PrismCredentials::new("a", "three");
        let after = actuator.connection(endpoint, "ns/a", &rotated).unwrap();
        assert!(!Arc::ptr_eq(&first, &after));
        assert!(Arc::ptr_eq(&first.lookups, &after.lookups));
        let prism_central = actuator.prism_central(endpoint, &rotated).unwrap();
        let connections = prism_central.connections.lock().unwrap();
        assert_eq!(connections.len(), 2, "ns/a and ns/b");
        assert!(Arc::ptr_eq(&connections["ns/a"].2, &after));

        // Another Prism Central has its own.
        let elsewhere = actuator
            .connection("pc2.example.com:9440", "ns/a", &team_a)
            .unwrap();
        assert!(!Arc::ptr_eq(&first.lookups, &elsewhere.lookups));
    }
}
