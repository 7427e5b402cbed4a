//! The one state store of a mock: entities, VMs, tasks, sessions, idempotence reservations, faults, counters.
//!
//! Time is simulated lazily: every write schedules its consequences (task start/end, guest addresses) in a
//! priority queue, and every request first calls [`Store::advance`] to apply what is due. Nothing runs in the
//! background, so the order of effects is deterministic for a given order of requests.

pub(crate) mod clusters;
pub(crate) mod entities;
pub(crate) mod foreign;
pub(crate) mod list;
pub(crate) mod net;
pub(crate) mod record;
pub(crate) mod refusal;
pub(crate) mod reservations;
pub(crate) mod schema;
pub(crate) mod subnets;
pub(crate) mod tasks;
pub(crate) mod templates;
pub(crate) mod v4_shape;
pub(crate) mod v4_vms;
pub(crate) mod vm;
pub(crate) mod volume_groups;

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::behaviour::{CloneBehaviour, DeployTaskShape, GuestBehaviour, Timings};
use crate::config::MockConfig;
use crate::faults::FaultState;
use crate::seed::SeedError;

pub(crate) use entities::{CategoryKey, Table};
pub(crate) use record::Vm;
pub(crate) use refusal::Refusal;
pub(crate) use tasks::{FailPlan, Task};
pub(crate) use templates::Template;
pub(crate) use v4_shape::V4Version;

/// Something that happens at a simulated time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Event {
    TaskStart(String),
    TaskEnd(String),
    Addresses {
        vm: String,
        boot_gen: u64,
        phase: record::AddressPhase,
    },
}

#[derive(Debug)]
struct Scheduled {
    at: Instant,
    seq: u64,
    event: Event,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at && self.seq == other.seq
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scheduled {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

/// A reservation made through `POST /idempotence_identifiers`.
#[derive(Debug, Clone)]
pub(crate) struct Reservation {
    pub(crate) client_identifier: String,
    pub(crate) uuids: Vec<String>,
    pub(crate) expires: Instant,
    pub(crate) expiration_time: String,
}

/// The whole state; always used under one mutex.
#[derive(Debug)]
pub(crate) struct Store {
    pub(crate) rng: StdRng,
    pub(crate) timings: Timings,
    /// How long after its create task ends a VM appears in lists (real Prism's lists are
    /// eventually consistent); zero by default.
    pub(crate) list_lag: Duration,
    /// How long after a VM's create or update task ends its `GET` still shows the state and power state it had
    /// before the task ended (see [`Store::get_vm`]); zero (off) by default.
    pub(crate) read_lag: Duration,
    pub(crate) guest: GuestBehaviour,
    pub(crate) clone_behaviour: CloneBehaviour,
    pub(crate) deploy_task_shape: DeployTaskShape,
    /// The source VM of each clone task.
    pub(crate) clone_sources: HashMap<String, String>,
    pub(crate) session_ttl: Duration,
    pub(crate) username: String,
    pub(crate) user_uuid: String,
    pub(crate) pc_uuid: String,
    pub(crate) clusters: Table,
    pub(crate) hosts: Table,
    pub(crate) subnets: Table,
    pub(crate) images: Table,
    pub(crate) projects: Table,
    pub(crate) categories: BTreeMap<String, CategoryKey>,
    pub(crate) templates: Vec<Template>,
    pub(crate) pools: HashMap<String, net::Pool>,
    pub(crate) image_os: HashMap<String, crate::seed::GuestOs>,
    pub(crate) vms: HashMap<String, Vm>,
    pub(crate) vm_order: BTreeMap<u64, String>,
    pub(crate) next_vm_seq: u64,
    /// The other tenants' VMs, kept lean (not in `vms` until a request changes one).
    pub(crate) foreign: foreign::ForeignVms,
    pub(crate) tasks: HashMap<String, Task>,
    schedule: BinaryHeap<Reverse<Scheduled>>,
    schedule_seq: u64,
    pub(crate) logical_clock: u64,
    pub(crate) reservations: HashMap<String, Reservation>,
    pub(crate) reserved_uuids: HashMap<String, String>,
    pub(crate) v4_requests: HashMap<String, String>,
    /// Volume groups by extId, with the VMs they are attached to.
    pub(crate) volume_groups: BTreeMap<String, volume_groups::VolumeGroup>,
    pub(crate) sessions: HashMap<String, Instant>,
    pub(crate) faults: FaultState,
    started_instant: Instant,
    started_wall: jiff::Timestamp,
}

impl Store {
    /// Builds the store from a configuration (seeding entities from `config.seed`).
    pub(crate) fn new(config: &MockConfig, now: Instant) -> Result<Self, SeedError> {
        let rng_seed = config.rng_seed.or(config.seed.rng_seed).unwrap_or(0);
        let mut rng = StdRng::seed_from_u64(rng_seed);
        let user_uuid = random_uuid(&mut rng);
        let mut store = Self {
            rng,
            timings: config.timings.clone(),
            list_lag: Duration::ZERO,
            read_lag: Duration::ZERO,
            guest: config.guest.clone(),
            clone_behaviour: CloneBehaviour::default(),
            deploy_task_shape: DeployTaskShape::default(),
            clone_sources: HashMap::new(),
            session_ttl: Duration::from_secs(config.session_ttl_secs),
            username: config.credentials.username.clone(),
            user_uuid,
            pc_uuid: String::new(),
            clusters: Table::without_page_metadata("cluster"),
            hosts: Table::unpaged("host"),
            subnets: Table::new("subnet"),
            images: Table::new("image"),
            projects: Table::new("project"),
            categories: BTreeMap::new(),
            templates: Vec::new(),
            pools: HashMap::new(),
            image_os: HashMap::new(),
            vms: HashMap::new(),
            vm_order: BTreeMap::new(),
            next_vm_seq: 0,
            foreign: foreign::ForeignVms::default(),
            tasks: HashMap::new(),
            schedule: BinaryHeap::new(),
            schedule_seq: 0,
            logical_clock: 0,
            reservations: HashMap::new(),
            reserved_uuids: HashMap::new(),
            v4_requests: HashMap::new(),
            volume_groups: BTreeMap::new(),
            sessions: HashMap::new(),
            faults: FaultState::default(),
            started_instant: now,
            started_wall: jiff::Timestamp::now(),
        };
        store.load_seed(&config.seed)?;
        Ok(store)
    }

    /// A new UUID from the seeded generator.
    pub(crate) fn new_uuid(&mut self) -> String {
        random_uuid(&mut self.rng)
    }

    /// RFC 3339 wall-clock time of a simulated instant.
    pub(crate) fn wall(&self, at: Instant) -> String {
        let offset = at.saturating_duration_since(self.started_instant);
        let span = jiff::SignedDuration::try_from(offset).unwrap_or(jiff::SignedDuration::ZERO);
        let ts = self
            .started_wall
            .checked_add(span)
            .unwrap_or(self.started_wall);
        ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
    }

    pub(crate) fn schedule(&mut self, at: Instant, event: Event) {
        self.schedule_seq += 1;
        self.schedule.push(Reverse(Scheduled {
            at,
            seq: self.schedule_seq,
            event,
        }));
    }

    /// Applies every scheduled event that is due at `now`, in time order.
    pub(crate) fn advance(&mut self, now: Instant) {
        while let Some(Reverse(next)) = self.schedule.peek() {
            if next.at > now {
                break;
            }
            let Some(Reverse(Scheduled { at, event, .. })) = self.schedule.pop() else {
                break;
            };
            match event {
                Event::TaskStart(uuid) => self.start_task(&uuid, at),
                Event::TaskEnd(uuid) => self.end_task(&uuid, at),
                Event::Addresses {
                    vm,
                    boot_gen,
                    phase,
                } => self.apply_address_phase(&vm, boot_gen, phase, at),
            }
        }
    }

    pub(crate) fn tick_logical(&mut self) -> u64 {
        self.logical_clock += 1;
        self.logical_clock
    }

    /// Creates a session cookie token.
    pub(crate) fn new_session(&mut self, now: Instant) -> String {
        let bytes: [u8; 24] = self.rng.random();
        let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        self.sessions.insert(token.clone(), now + self.session_ttl);
        token
    }

    pub(crate) fn session_valid(&mut self, token: &str, now: Instant) -> bool {
        match self.sessions.get(token) {
            Some(expires) if *expires > now => true,
            Some(_) => {
                self.sessions.remove(token);
                false
            }
            None => false,
        }
    }

    /// Milliseconds from the mock's start to `at`.
    pub(crate) fn elapsed_ms(&self, at: Instant) -> u64 {
        u64::try_from(
            at.saturating_duration_since(self.started_instant)
                .as_millis(),
        )
        .unwrap_or(u64::MAX)
    }

    /// The VM a task concerns (its first VM entity, else its first subtask's: a deploy names only its
    /// template), by task UUID or v4 extId.
    pub(crate) fn task_vm(&self, id: &str) -> Option<String> {
        let uuid = id.strip_prefix(tasks::V4_TASK_PREFIX).unwrap_or(id);
        let task = self.tasks.get(uuid)?;
        let own = task
            .entities
            .iter()
            .find(|(kind, _)| *kind == "vm")
            .map(|(_, vm)| vm.clone());
        own.or_else(|| {
            task.subtasks
                .iter()
                .filter_map(|sub| self.tasks.get(sub))
                .find_map(|sub| {
                    sub.entities
                        .iter()
                        .find(|(kind, _)| *kind == "vm")
                        .map(|(_, vm)| vm.clone())
                })
        })
    }

    /// Ends every session: later requests carrying only a cookie get 401 until the client logs in again.
    pub(crate) fn expire_sessions(&mut self) -> usize {
        let n = self.sessions.len();
        self.sessions.clear();
        n
    }
}

/// A JSON object built by moving the values in (`json!` would serialize each value again, which made large
/// list pages several times slower).
pub(crate) fn object(
    pairs: impl IntoIterator<Item = (&'static str, serde_json::Value)>,
) -> serde_json::Value {
    serde_json::Value::Object(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

/// `metadata.spec_hash` as real lists show it (list_vm.json, list_subnet.json, list_cluster.json).
pub(crate) const SPEC_HASH: &str = "00000000000000000000000000000000000000000000000000";

/// A UUID derived from a name, without drawing from the seeded generator (so adding one changes no other UUID).
pub(crate) fn derived_uuid(namespace: &str, key: &str) -> String {
    let hash = |seed: u64| {
        namespace
            .bytes()
            .chain([0])
            .chain(key.bytes())
            .fold(seed, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
            })
    };
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&hash(0xcbf2_9ce4_8422_2325).to_be_bytes());
    bytes[8..].copy_from_slice(&hash(0x84222325_cbf29ce4).to_be_bytes());
    uuid::Builder::from_random_bytes(bytes)
        .into_uuid()
        .to_string()
}

/// A random (v4-shaped) UUID drawn from `rng`.
pub(crate) fn random_uuid(rng: &mut StdRng) -> String {
    let bytes: [u8; 16] = rng.random();
    uuid::Builder::from_random_bytes(bytes)
        .into_uuid()
        .to_string()
}
