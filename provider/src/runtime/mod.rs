//! The runtime: logging, Kubernetes and Prism clients, the metrics and health endpoints, leader
//! election, and the controllers of [`crate::controller::controllers`] started under the lease.
//!
//! Only the leader runs controllers. Losing the lease ends the process with a non-zero status
//! (the simplest way to stop every reconcile at once; the Deployment restarts it as a candidate),
//! as does a controller whose watch ends. SIGTERM or Ctrl-C releases the lease and exits 0.

pub mod cli;
pub mod clients;
pub mod doctor;
pub mod kube_client;
pub mod leader;
pub mod secret_changes;
pub mod server;
pub mod validate;

use std::io::IsTerminal;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Config};
use tokio::sync::broadcast;
use tokio::task::JoinSet;
use tracing_subscriber::EnvFilter;

use crate::actuator::{Actuator, ActuatorSettings};
use crate::controller::{ControllerSettings, Shared, WatchedSecrets, controllers};
use crate::metrics::Metrics;
use cli::{MACHINE_API_MIGRATION, RunArgs, parse_listen_address};
use clients::{actuator_settings, kube_config};
use secret_changes::SecretDataChanges;

/// Why the controller stopped.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error(transparent)]
    KubeConfig(#[from] clients::KubeConfigError),
    #[error("Kubernetes client: {0}")]
    KubeClient(#[from] kube::Error),
    #[error("{0}")]
    Flag(String),
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    #[error("cannot listen: {0}")]
    Listen(#[from] std::io::Error),
    #[error("leader election: {0}")]
    LeaderElection(#[from] leader::TimingsError),
    #[error("lost the leader lease: {0:?}")]
    LeaseLost(leader::LeadershipLost),
    #[error("the {0} controller stopped")]
    ControllerStopped(&'static str),
}

/// The controller's exit status when it stopped because it lost the leader Lease (the
/// Deployment starts it again as a candidate): told apart from a failure by whoever watches it.
pub const EXIT_LEASE_LOST: u8 = 3;

/// Sets up logging to stderr: `RUST_LOG` if set, else `--v` mapped to a level for this crate
/// and the Prism client (other crates log warnings only: their debug output is not ours to
/// vouch for).
pub fn init_logging(verbosity: u8, json: bool) {
    let level = match verbosity {
        0..=3 => "info",
        4..=5 => "debug",
        _ => "trace",
    };
    install_logging(
        &format!("warn,nutanix_machine_controller={level},prism_client={level}"),
        json,
    );
}

/// Logging for the one-shot commands: warnings only, unless `RUST_LOG` says otherwise.
pub fn init_command_logging() {
    install_logging("warn", false);
}

fn install_logging(default_filter: &str, json: bool) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let result = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
    if let Err(error) = result {
        eprintln!("logging already set up: {error}");
    }
}

/// Where the leader's doctor looks for MachineSets when the controller watches every
/// namespace: the machine API's namespace on OpenShift.
const DEFAULT_DOCTOR_NAMESPACE: &str = "openshift-machine-api";

/// How long a VM read is reused: long enough for the reconciles a Machine's own status write
/// triggers, shorter than the soonest planned look again, which must see a fresh VM (a Machine
/// waiting for its address would otherwise wait one extra interval per look).
fn vm_read_ttl(soonest_requeue: Duration) -> Duration {
    (soonest_requeue / 2).min(ActuatorSettings::default().vm_read_ttl)
}

/// Watches the Secrets of `namespace` (all when `None`) into a store.
/// The watched Secrets, the task that keeps the store current, and a channel that names every
/// Secret whose data the store has just taken in (so that the Machines using it are reconciled
/// at once, and read the Secret as changed).
fn secret_store(
    client: Client,
    namespace: Option<&str>,
) -> (
    Store<Secret>,
    impl Future<Output = ()> + Send + 'static,
    broadcast::Sender<ObjectRef<Secret>>,
) {
    let api: Api<Secret> = match namespace {
        Some(namespace) => Api::namespaced(client, namespace),
        None => Api::all(client),
    };
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(
        writer,
        watcher(api, watcher::Config::default()).default_backoff(),
    )
    .touched_objects();
    let (changes, _) = broadcast::channel(SECRET_CHANGES_BUFFER);
    let sender = changes.clone();
    let run = async move {
        let mut data_changes = SecretDataChanges::default();
        stream
            .for_each(|result| {
                match result {
                    // Only new data is announced; no receiver (no Machine controller running
                    // yet) is no error.
                    Ok(secret) => {
                        if data_changes.changed(&secret) {
                            drop(sender.send(ObjectRef::from_obj(&secret)));
                        }
                    }
                    Err(error) => tracing::warn!(%error, "watching Secrets"),
                }
                std::future::ready(())
            })
            .await;
    };
    (reader, run, changes)
}

/// Secret changes buffered for a slow receiver; one that falls behind skips the oldest (the
/// Machines they concern are reconciled on their own schedule anyway).
const SECRET_CHANGES_BUFFER: usize = 1024;

fn lease_namespace(args: &RunArgs, config: &Config) -> String {
    args.leader_elect_resource_namespace
        .clone()
        .or_else(|| args.namespace.clone())
        .or_else(|| std::env::var("POD_NAMESPACE").ok())
        .or_else(|| {
            std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
                .ok()
                .map(|text| text.trim().to_owned())
        })
        .filter(|namespace| !namespace.is_empty())
        .unwrap_or_else(|| config.default_namespace.clone())
}

/// This replica's name in the Lease and in events: the pod name (or host name) and a random
/// suffix, as client-go does.
fn identity() -> String {
    let host = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .ok()
        .filter(|name| !name.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|text| text.trim().to_owned())
        })
        .unwrap_or_else(|| "nutanix-machine-controller".to_owned());
    format!("{host}_{}", uuid::Uuid::new_v4())
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(signal) => signal,
                Err(error) => {
                    tracing::warn!(%error, "cannot watch SIGTERM");
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

/// Runs the controller until a signal (Ok), a lost lease or a stopped controller (Err).
pub async fn run(args: RunArgs) -> Result<(), RuntimeError> {
    let election = leader::ElectionTimings::new(
        args.leader_elect_lease_duration,
        args.leader_elect_renew_deadline,
        args.leader_elect_retry_period,
    )?;
    let metrics = Arc::new(Metrics::new()?);
    let config = kube_config(args.kubeconfig.as_deref()).await?;
    let client = kube_client::client(config.clone(), args.kube_request_timeout)?;
    let mut eviction_config = config.clone();
    eviction_config.default_retry = false;
    let eviction_client = kube_client::client(eviction_config, args.kube_request_timeout)?;

    let health = parse_listen_address(&args.health_addr).map_err(RuntimeError::Flag)?;
    let metrics_address =
        parse_listen_address(&args.metrics_bind_address).map_err(RuntimeError::Flag)?;
    server::start(health, metrics_address, metrics.clone()).await?;

    let (secrets, watch_secrets, secret_changes) =
        secret_store(client.clone(), args.namespace.as_deref());
    tokio::spawn(watch_secrets);

    let identity = identity();
    let actuator = Arc::new(
        Actuator::new(
            ActuatorSettings {
                user_agent: crate::actuator::user_agent(Some(&identity)),
                inventory_max_age: args.inventory_refresh_interval,
                lookup_ttl: args.lookup_cache_ttl,
                vm_read_ttl: vm_read_ttl(args.poll_interval.min(args.requeue_interval)),
                ..actuator_settings(&args.prism)
            },
            Some(metrics.prism_observer()),
        )
        .with_inventory_gauges(
            metrics.inventory_unreadable.clone(),
            metrics.vms_without_machine.clone(),
            metrics.inventory_listed.clone(),
        ),
    );
    let settings = ControllerSettings {
        namespace: args.namespace.clone(),
        prism_endpoint: args.prism.prism_endpoint.clone(),
        migration_gate: args.feature_gates.enabled(MACHINE_API_MIGRATION),
        concurrency: args.concurrency.max(1),
        poll_interval: args.poll_interval,
        requeue_interval: args.requeue_interval,
        running_interval: args.inventory_refresh_interval,
        excluded_cidrs: args.excluded_address_cidrs.clone(),
        windows_join_timeout: args.windows_join_timeout,
        fail_timed_out_windows_joins: args.fail_timed_out_windows_joins,
        ..ControllerSettings::default()
    };
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        %identity,
        namespace = args.namespace.as_deref().unwrap_or("(all)"),
        "starting"
    );
    if let Some(note) = args.tls_flags_note() {
        tracing::info!("{note}");
    }

    let mut leadership = if args.leader_elect {
        let namespace = lease_namespace(&args, &config);
        tokio::select! {
            leadership = leader::acquire(client.clone(), &namespace, &identity, election) => Some(leadership),
            () = shutdown_signal() => return Ok(()),
        }
    } else {
        None
    };
    metrics.leader.set(1);
    secrets.wait_until_ready().await.ok();

    if !args.doctor_interval.is_zero() {
        tokio::spawn(doctor::every(
            client.clone(),
            actuator.clone(),
            metrics.clone(),
            doctor::GatherSettings {
                namespace: args
                    .namespace
                    .clone()
                    .unwrap_or_else(|| DEFAULT_DOCTOR_NAMESPACE.to_owned()),
                prism_endpoint: args.prism.prism_endpoint.clone(),
                windows_join_timeout: args.windows_join_timeout,
                read_cloud_private_key: false,
            },
            args.doctor_interval,
        ));
    }
    let shared = Arc::new(Shared::new(
        client,
        eviction_client,
        actuator,
        metrics,
        settings,
        WatchedSecrets {
            store: secrets,
            changes: secret_changes,
        },
        identity,
    ));
    let mut running = JoinSet::new();
    for (name, controller) in controllers(shared) {
        tracing::info!(controller = name, "starting controller");
        running.spawn(async move {
            controller.await;
            name
        });
    }
    let lost = async {
        match leadership.as_mut() {
            Some(leadership) => leadership.lost().await,
            None => std::future::pending().await,
        }
    };
    let outcome = tokio::select! {
        () = shutdown_signal() => Ok(()),
        lost = lost => Err(RuntimeError::LeaseLost(lost)),
        stopped = running.join_next() => Err(RuntimeError::ControllerStopped(
            stopped.and_then(Result::ok).unwrap_or("unknown"),
        )),
    };
    running.abort_all();
    if let (Ok(()), Some(leadership)) = (&outcome, leadership) {
        leadership.release().await;
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vm_read_is_never_reused_past_half_the_soonest_requeue() {
        assert_eq!(
            vm_read_ttl(Duration::from_secs(1)),
            Duration::from_millis(500)
        );
        assert_eq!(vm_read_ttl(Duration::from_secs(4)), Duration::from_secs(2));
        // Production intervals (10 s poll, 30 s requeue) keep the default.
        assert_eq!(
            vm_read_ttl(Duration::from_secs(10)),
            ActuatorSettings::default().vm_read_ttl
        );
    }
}
