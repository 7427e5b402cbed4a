//! The Machine controller run in this process through the library's public entry points, as the
//! runtime wires it (`runtime::run`: a Secret reflector, the actuator, `Shared::new`), with the
//! short intervals the subprocess tests give the binary. Stopping it aborts its tasks: every
//! reconcile and request in flight is dropped, as when the process is killed.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use nutanix_machine_controller::actuator::{Actuator, ActuatorSettings};
use nutanix_machine_controller::api::GuardedMachine;
use nutanix_machine_controller::controller::machine_cache::MachineCache;
use nutanix_machine_controller::controller::nodes::NodeCache;
use nutanix_machine_controller::controller::{ControllerSettings, Shared, WatchedSecrets, machine};
use nutanix_machine_controller::metrics::Metrics;
use nutanix_machine_controller::plan::vm::spec::{ReadSpec, SpecReader};
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

use crate::harness::{Env, NS};

/// Intervals of the subprocess tests (`harness::Env::controller`): `--poll-interval 200ms`,
/// `--requeue-interval 500ms`, `--inventory-refresh-interval 2s`.
pub const POLL: Duration = Duration::from_millis(200);
pub const REQUEUE: Duration = Duration::from_millis(500);
pub const RUNNING: Duration = Duration::from_secs(2);

/// A Machine controller running in this process; stopped when dropped.
pub struct InProcessController {
    /// The user its Kubernetes requests carry in kube-sim's request log.
    pub user: String,
    pub metrics: Arc<Metrics>,
    tasks: Vec<JoinHandle<()>>,
}

impl InProcessController {
    /// Starts the Machine controller as `user`, once its Secret store is filled.
    pub async fn start(env: &Env, user: &str) -> Self {
        Self::start_polling(env, user, POLL).await
    }

    /// [`InProcessController::start`] with another `--poll-interval`.
    pub async fn start_polling(env: &Env, user: &str, poll: Duration) -> Self {
        Self::start_with(env, user, poll, Arc::new(ReadSpec)).await
    }

    /// [`InProcessController::start_polling`] with `spec_reader` reading the providerSpecs.
    pub async fn start_with(
        env: &Env,
        user: &str,
        poll: Duration,
        spec_reader: Arc<dyn SpecReader>,
    ) -> Self {
        let mut config = env.sim.kube_config();
        config.auth_info.token = Some(format!("user:{user}").into());
        let client = kube::Client::try_from(config.clone()).unwrap();
        let mut eviction_config = config;
        eviction_config.default_retry = false;
        let eviction_client = kube::Client::try_from(eviction_config).unwrap();

        let (secrets, writer) = reflector::store();
        let (changes, _) = broadcast::channel(64);
        let sender = changes.clone();
        let secret_watch = reflector::reflector(
            writer,
            watcher(
                Api::<Secret>::namespaced(client.clone(), NS),
                watcher::Config::default(),
            )
            .default_backoff(),
        )
        .touched_objects()
        .for_each(move |result| {
            if let Ok(secret) = result {
                drop(sender.send(ObjectRef::from_obj(&secret)));
            }
            std::future::ready(())
        });
        let secret_task = tokio::spawn(secret_watch);
        secrets.wait_until_ready().await.unwrap();

        let actuator = Arc::new(Actuator::new(
            ActuatorSettings {
                ca_file: Some(env.ca_file().clone()),
                inventory_max_age: RUNNING,
                // As the runtime derives it: half the soonest requeue.
                vm_read_ttl: poll / 2,
                ..ActuatorSettings::default()
            },
            None,
        ));
        let metrics = Arc::new(Metrics::new().unwrap());
        let settings = ControllerSettings {
            namespace: Some(NS.to_owned()),
            poll_interval: poll,
            requeue_interval: REQUEUE,
            running_interval: RUNNING,
            excluded_cidrs: vec![
                "10.128.0.0/14".parse().unwrap(),
                "172.30.0.0/16".parse().unwrap(),
            ],
            spec_reader,
            ..ControllerSettings::default()
        };
        let shared = Arc::new(Shared::new(
            client,
            eviction_client,
            actuator,
            metrics.clone(),
            settings,
            WatchedSecrets {
                store: secrets,
                changes,
            },
            user.to_owned(),
        ));
        // The Machine and Node caches the binary shares between its controllers
        // (`controller::controllers`); only the Machine controller reads them here.
        let machines: Api<GuardedMachine> = Api::namespaced(shared.client.clone(), NS);
        let cache = MachineCache::new();
        let feed = cache.subscribe();
        let cache_task = tokio::spawn(cache.run(machines));
        let mut nodes = NodeCache::new();
        let node_feed = nodes.subscribe();
        let node_task = tokio::spawn(nodes.run(shared.client.clone()));
        let machine_task = tokio::spawn(machine::run(shared, feed, node_feed));
        Self {
            user: user.to_owned(),
            metrics,
            tasks: vec![secret_task, cache_task, node_task, machine_task],
        }
    }

    /// Reconciles of Machines that have ended so far (successful or not).
    pub fn reconciles(&self) -> u64 {
        ["ok", "error"]
            .iter()
            .map(|outcome| {
                self.metrics
                    .reconcile_duration
                    .with_label_values(&["machine", outcome])
                    .get_sample_count()
            })
            .sum()
    }

    /// Stops it at once, wherever it is, and waits until its tasks are gone.
    pub async fn stop(mut self) {
        for task in self.tasks.drain(..) {
            task.abort();
            let _ = task.await;
        }
    }
}

impl Drop for InProcessController {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}
