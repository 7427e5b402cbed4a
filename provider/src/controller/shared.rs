//! What every controller shares: the clients, the event recorder, the actuator, the metrics,
//! the settings, the watched Secrets, the cluster's configuration caches and the backoff. The
//! ground floor of [`super`]: it knows no controller.

use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{ObjectRef, Store};
use tokio::sync::broadcast;

use super::backoff::Backoff;
use super::cluster_config::{InfrastructureCache, NetworkCache};
use super::events::publish;
use crate::actuator::Actuator;
use crate::api::Machine;
use crate::metrics::Metrics;
use crate::plan::vm::spec::{ReadSpec, SpecReader};

/// Name under which events are reported.
pub const CONTROLLER_NAME: &str = "nutanix-machine-controller";

/// Settings of the controllers (from the command line).
#[derive(Clone, Debug)]
pub struct ControllerSettings {
    /// Watch only this namespace (`--namespace`); all when `None`.
    pub namespace: Option<String>,
    /// Prism Central endpoint from `--prism-endpoint`, instead of `Infrastructure/cluster`.
    pub prism_endpoint: Option<String>,
    /// The `MachineAPIMigration` feature gate.
    pub migration_gate: bool,
    /// Reconciles running at once.
    pub concurrency: u16,
    /// How soon to read a running Prism task again, and to look again at a VM being deleted or a
    /// Node being drained.
    pub poll_interval: Duration,
    /// How soon to look again at a Machine waiting for its addresses or its Node (MAO: 30 s).
    pub requeue_interval: Duration,
    /// How often a Running Machine is checked against the VM inventory.
    pub running_interval: Duration,
    /// `--excluded-address-cidrs`: when given, addresses in these networks are never reported,
    /// instead of the cluster's own networks read from its network configuration.
    pub excluded_cidrs: Vec<IpNet>,
    /// Backoff after failed reconciles.
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    /// A Windows Machine with no linked Node this long after its creation gets `JoinTimedOut`.
    pub windows_join_timeout: Duration,
    /// Mark such a Machine Failed, so that it is replaced.
    pub fail_timed_out_windows_joins: bool,
    /// What reads a Machine's providerSpec (once a reconcile): [`ReadSpec`], or a test's
    /// stand-in that counts the reads.
    pub spec_reader: Arc<dyn SpecReader>,
}

impl Default for ControllerSettings {
    fn default() -> Self {
        Self {
            namespace: None,
            prism_endpoint: None,
            migration_gate: false,
            concurrency: 10,
            poll_interval: Duration::from_secs(10),
            requeue_interval: Duration::from_secs(30),
            running_interval: Duration::from_secs(60),
            excluded_cidrs: Vec::new(),
            backoff_min: Duration::from_secs(1),
            backoff_max: Duration::from_secs(300),
            windows_join_timeout: crate::plan::windows_join::DEFAULT_JOIN_TIMEOUT,
            fail_timed_out_windows_joins: false,
            spec_reader: Arc::new(ReadSpec),
        }
    }
}

/// The watched Secrets and the channel naming each one the store has just taken in.
#[derive(Debug)]
pub struct WatchedSecrets {
    pub store: Store<Secret>,
    pub changes: broadcast::Sender<ObjectRef<Secret>>,
}

/// What every controller shares.
pub struct Shared {
    pub client: kube::Client,
    /// A client without kube-rs's automatic retry of 429, for evictions: a PodDisruptionBudget
    /// answers 429, and the drain retries on its own schedule instead of blocking a worker.
    pub eviction_client: kube::Client,
    pub recorder: Recorder,
    pub actuator: Arc<Actuator>,
    pub metrics: Arc<Metrics>,
    pub settings: ControllerSettings,
    /// Secrets of the watched namespace(s): credentials, user data, Administrator passwords.
    pub secrets: Store<Secret>,
    /// Names each Secret just taken into [`Self::secrets`].
    pub secret_changes: broadcast::Sender<ObjectRef<Secret>>,
    pub infrastructure: InfrastructureCache,
    /// The cluster's networks (excluded from Machine addresses), unless `--excluded-address-cidrs`
    /// overrides them.
    pub networks: NetworkCache,
    pub backoff: Backoff,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Shared {
    /// Builds the shared state. `instance` names this replica in events.
    pub fn new(
        client: kube::Client,
        eviction_client: kube::Client,
        actuator: Arc<Actuator>,
        metrics: Arc<Metrics>,
        settings: ControllerSettings,
        secrets: WatchedSecrets,
        instance: String,
    ) -> Self {
        let WatchedSecrets {
            store: secrets,
            changes: secret_changes,
        } = secrets;
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: CONTROLLER_NAME.to_owned(),
                instance: Some(instance),
            },
        );
        Self {
            infrastructure: InfrastructureCache::new(client.clone(), Duration::from_secs(60)),
            networks: NetworkCache::new(client.clone(), Duration::from_secs(60)),
            backoff: Backoff::new(settings.backoff_min, settings.backoff_max),
            client,
            eviction_client,
            recorder,
            actuator,
            metrics,
            settings,
            secrets,
            secret_changes,
        }
    }

    /// Publishes an event about a Machine. Notes never carry secrets (they are built from
    /// validation messages and Prism errors, which quote none); a failure to publish is logged.
    pub async fn event(&self, machine: &Machine, warning: bool, reason: &str, note: String) {
        let event = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.to_owned(),
            note: Some(note),
            action: reason.to_owned(),
            secondary: None,
        };
        publish(&self.recorder, machine, &event).await;
    }
}
