//! The Machine controller: the executor of [`crate::plan::machine::decide`].
//!
//! Each reconcile builds a [`Scope`] (the Machine parsed once, the Prism environment resolved
//! at most once), then runs the plan's script, [`Rounds`]: ask `decide`, write the status change
//! that makes a retry safe before anything is sent, perform the one action it asks for, feed the
//! result back, and ask again (at most [`MAX_ROUNDS`] times), planning on at once after a change
//! it only writes; at the end, write the metadata and status patches in the script's order
//! (each only if it changes anything), publish the events and count the metrics. Which read to make, what an answer means and what to write are the plan's alone;
//! each call's result goes into the snapshot as it is, and a call that failed returns its own
//! error, which the reconcile ends with when the plan fails it.
//!
//! Watched: Machines (in `--namespace`, or all) through the cache it shares with the Windows join
//! reconciler ([`super::machine_cache`]), wrapped in `DeserializeGuard` so a malformed one is
//! logged and skipped instead of stalling the watch; Nodes, mapped to their Machine; IP address
//! claims, mapped to the Machine that controls them (where the API serves them).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::drain::{ControlPlaneCordon, drain_round};
use super::error::Error;
use super::inputs::{
    Environment, connection_problem, environment, environment_problem, secrets_named_by,
};
use super::kit::{self, BackoffKey, Kit, key_of};
use super::machine_cache::MachineFeed;
use super::node_link::{machine_to_requeue, set_provider_id};
use super::nodes::NodeFeed;
use super::prepare::{create_password_secret, read_create_inputs};
use super::shared::Shared;
use super::stores_ready::StoresReady;
use crate::actuator::inventory::InventorySnapshot;
use crate::actuator::task_watch::MachineKey;
use crate::actuator::{self, FollowUpFailure};
use crate::api::{GuardedMachine, MACHINE_FINALIZER, Machine, NutanixMachineProviderStatus};
use crate::plan::machine::MAX_ROUNDS;
use crate::plan::machine::lifecycle::Intervals;
use crate::plan::machine::provision::DeployCandidate;
use crate::plan::machine::status::{
    StatusUpdate, event_note, failure_event_reason, metadata_patch, status_patch,
};
use crate::plan::machine::{
    AddressContext, Change, DeleteOutcome, Effect, EnvironmentSeen, Failure, FailureKind, Finish,
    FollowUpOutcome, Listing, ListingSlot, ListingSource, MetadataChange, Next,
    PasswordSecretOutcome, PlanVm, Read, Rounds, SendOutcome, Settings, Snapshot, Step, Write,
};
use crate::plan::vm::identity::identity_of;
use crate::plan::vm::scope::NameClause;

/// Label of this controller in metrics.
const CONTROLLER: &str = "machine";

mod claims;
mod create_slots;
mod perform;
mod provider_ids_set;
mod remembered_tasks;
mod superseded;

use create_slots::CreateSlots;
use provider_ids_set::ProviderIdsSet;
use remembered_tasks::RememberedTasks;
use superseded::Superseded;

/// The Machine controller's context.
#[derive(Debug)]
pub struct Context {
    pub shared: Arc<Shared>,
    /// Nodes as the watch last saw them ([`super::nodes`]): what a Node's providerID is decided on.
    nodes: Store<Node>,
    /// Whether `nodes` has its first full list (until then a Node is read from the API server).
    nodes_ready: StoresReady,
    superseded: Superseded,
    /// One control-plane drain allowed and cordoned at a time ([`super::drain`]).
    control_plane_cordon: ControlPlaneCordon,
    /// How many reconciles may begin a create at once ([`create_slots`]).
    create_slots: CreateSlots,
    /// The create tasks kept in memory, not on the Machines ([`remembered_tasks`]).
    remembered_tasks: RememberedTasks,
    /// The Node providerIDs set, until the Node watch shows them ([`provider_ids_set`]).
    provider_ids_set: ProviderIdsSet,
}

/// How soon a reconcile that saw a stale Machine looks again (the write's event normally
/// triggers it sooner).
const STALE_RETRY: Duration = Duration::from_secs(1);

/// This controller in the kit: a failure backs off under the Machine's own key, the one the
/// protocol reads as its create backoff and alone resets.
const KIT: Kit = Kit {
    controller: CONTROLLER,
    title: "machine controller",
    backoff: BackoffKey::Object,
    logs_unreadable: true,
};

/// Runs the Machine controller on the shared Machine and Node caches until the Machines' watch
/// ends.
pub async fn run(shared: Arc<Shared>, machines: MachineFeed, node_feed: NodeFeed) {
    let Some((store, changes)) = machines.when_ready().await else {
        tracing::error!("the Machine cache can never be filled; the Machine controller stops");
        return;
    };
    let client = shared.client.clone();
    let config = kit::config(&shared);
    let nodes_ready = StoresReady::spawn(node_feed.filled());
    let NodeFeed {
        store: nodes,
        changes: node_changes,
        ..
    } = node_feed;
    let create_slots = CreateSlots::new(
        shared.settings.concurrency,
        shared.actuator.rate_limit().requests_per_second,
        shared.metrics.creates_waiting.clone(),
    );
    let context = Arc::new(Context {
        shared,
        nodes,
        nodes_ready,
        superseded: Superseded::default(),
        control_plane_cordon: ControlPlaneCordon::default(),
        create_slots,
        remembered_tasks: RememberedTasks::default(),
        provider_ids_set: ProviderIdsSet::default(),
    });
    let claim_changes =
        claims::claim_changes(client.clone(), context.shared.settings.namespace.clone()).await;
    let controller = Controller::for_shared_stream(changes, store.clone());
    let secret_changes = secret_change_stream(context.shared.secret_changes.subscribe());
    let task_ends = task_end_stream(context.shared.actuator.task_ends());
    let (for_secrets, shared) = (store.clone(), context.shared.clone());
    let results = controller
        .watches_shared_stream(node_changes, move |node| machine_to_requeue(&node, &store))
        .reconcile_on(secret_changes.flat_map(move |secret| {
            futures::stream::iter(machines_using_secret(&secret, &for_secrets, &shared))
        }))
        .reconcile_on(claim_changes)
        .reconcile_on(task_ends)
        .with_config(config)
        .run(reconcile, error_policy, context);
    KIT.run(results).await;
}

/// The Secrets the store has just taken in, as a stream (a receiver that fell behind skips the
/// changes it missed).
fn secret_change_stream(
    receiver: broadcast::Receiver<ObjectRef<Secret>>,
) -> impl futures::Stream<Item = ObjectRef<Secret>> + Send + 'static {
    futures::stream::unfold(receiver, |mut receiver| async move {
        loop {
            match receiver.recv().await {
                Ok(secret) => return Some((secret, receiver)),
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    })
}

/// The Machines whose task the shared task watches saw end, to be reconciled at once (a
/// receiver that fell behind skips them: their own polls see the ends).
fn task_end_stream(
    receiver: broadcast::Receiver<MachineKey>,
) -> impl futures::Stream<Item = ObjectRef<GuardedMachine>> + Send + 'static {
    futures::stream::unfold(receiver, |mut receiver| async move {
        loop {
            match receiver.recv().await {
                Ok(machine) => {
                    let object = ObjectRef::new(&machine.name).within(&machine.namespace);
                    return Some((object, receiver));
                }
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    })
}

/// The Machines that read `secret` (credentials, user data, Administrator password), to be
/// reconciled at once with it as it now is: a corrected Secret is used without waiting out the
/// backoff its earlier failures earned, which is dropped.
fn machines_using_secret(
    secret: &ObjectRef<Secret>,
    machines: &Store<GuardedMachine>,
    shared: &Shared,
) -> Vec<ObjectRef<GuardedMachine>> {
    machines
        .state()
        .iter()
        .filter_map(|guarded| {
            let machine = guarded.0.as_ref().ok()?;
            let same_namespace = machine.namespace() == secret.namespace;
            // Read here, not cached: a Secret change is rare, a reconcile is not.
            let named = secrets_named_by(&shared.settings.spec_reader.read(machine));
            (same_namespace && named.contains(&secret.name)).then(|| {
                shared.backoff.reset(&KIT.backoff_key(guarded.as_ref()));
                ObjectRef::from_obj(guarded.as_ref())
            })
        })
        .collect()
}

async fn reconcile(guarded: Arc<GuardedMachine>, context: Arc<Context>) -> Result<Action, Error> {
    KIT.reconcile(&context.shared, &guarded, async |machine| {
        let result = match machine.provider_status() {
            Ok(status) => {
                Scope::new(context.clone(), machine.clone(), status)
                    .run()
                    .await
            }
            Err(source) => Err(Error::ProviderStatus {
                machine: key_of(machine),
                source,
            }),
        };
        // A write that lost a race is no failure ([`Error::is_conflict`]): the reconcile the
        // other writer's change triggers decides again, and a Warning about it would be one
        // more write to etcd announcing nothing.
        if let Err(error) = &result
            && !error.published()
            && !error.is_conflict()
        {
            publish_failure(&context.shared, machine, error).await;
        }
        result
    })
    .await
}

/// Makes a failed reconcile visible on the Machine (`oc describe machine`), as the Go provider's
/// `FailedCreate` / `FailedUpdate` / `FailedDelete` events do: the error and, where its cause
/// tells, the fix. The recorder folds repeats of one note into one event with a count. Errors
/// carry no secret (see [`Error`]).
async fn publish_failure(shared: &Shared, machine: &Machine, error: &Error) {
    let reason = failure_event_reason(machine);
    let note = match error.advice() {
        Some(advice) => event_note(&format!("{error}. Fix: {advice}")),
        None => event_note(&error.to_string()),
    };
    shared.event(machine, true, reason, note).await;
}

fn error_policy(guarded: Arc<GuardedMachine>, error: &Error, context: Arc<Context>) -> Action {
    KIT.retry(&context.shared, guarded.as_ref(), error)
}

/// One reconcile of one Machine.
struct Scope {
    context: Arc<Context>,
    /// The Machine as last read or written.
    machine: Machine,
    key: String,
    /// The script of this reconcile, with what it has seen so far.
    rounds: Rounds,
    environment: Option<Environment>,
    /// Whether this reconcile wrote the Machine.
    wrote: bool,
}

impl Scope {
    fn new(context: Arc<Context>, machine: Machine, status: NutanixMachineProviderStatus) -> Self {
        let key = key_of(&machine);
        for (field, unreadable) in &status.unreadable {
            tracing::warn!(machine = %key, field, error = %unreadable.error, "status.providerStatus: a value cannot be read; it is kept as it is");
        }
        let shared = &context.shared;
        let settings = Settings {
            intervals: intervals(shared),
            migration_gate: shared.settings.migration_gate,
            create_backoff: shared.backoff.remaining(&key),
            new_request_id: uuid::Uuid::new_v4().to_string(),
            fail_timed_out_windows_joins: shared.settings.fail_timed_out_windows_joins,
        };
        let spec = shared.settings.spec_reader.read(&machine);
        // Planned on with the create's task this controller remembers; written as it is.
        let snapshot = match context.remembered_tasks.planned(&machine) {
            Some(planned) => {
                let status = planned.provider_status().unwrap_or(status);
                Snapshot::of(&planned, spec, status, Timestamp::now(), settings)
            }
            None => Snapshot::of(&machine, spec, status, Timestamp::now(), settings),
        };
        Self {
            context,
            machine,
            key,
            rounds: Rounds::new(snapshot),
            environment: None,
            wrote: false,
        }
    }

    fn shared(&self) -> &Shared {
        &self.context.shared
    }

    /// Reconciles; a write answered 404 ends it quietly, since the Machine no longer exists
    /// (its deletion finished by another writer, or a finalizer removed by hand).
    async fn run(mut self) -> Result<Action, Error> {
        match self.reconcile().await {
            Err(Error::MachineGone { action, .. }) => {
                tracing::info!(machine = %self.key, action, "the Machine is gone; nothing left to do");
                // The version this reconcile started from is as stale as the ones it replaced.
                self.context
                    .superseded
                    .record(&self.key, self.machine.metadata.resource_version.as_ref());
                self.context.superseded.released(&self.key, Instant::now());
                self.shared().backoff.reset(&self.key);
                Ok(Action::await_change())
            }
            result => result,
        }
    }

    async fn reconcile(&mut self) -> Result<Action, Error> {
        if self
            .context
            .superseded
            .is_stale(&self.key, self.machine.metadata.resource_version.as_ref())
        {
            tracing::debug!(machine = %self.key, "the cache has not seen this controller's last write yet");
            return Ok(Action::requeue(STALE_RETRY));
        }
        // Held until this reconcile ends.
        let _create_slot = if self.rounds.snapshot.starts_a_create() {
            match self.context.create_slots.admit(&self.key, Instant::now()) {
                Ok(slot) => Some(slot),
                Err(wait) => {
                    tracing::debug!(machine = %self.key, ?wait, "every create slot is taken; its turn comes later");
                    return Ok(Action::requeue(wait));
                }
            }
        } else {
            self.context.create_slots.tidy(Instant::now());
            None
        };
        let (finish, failed_call) = match self.run_rounds().await {
            Ok(ending) => ending,
            Err(error @ Error::MachineGone { .. }) => return Err(error),
            Err(error) => {
                // What was decided before the failed call still holds.
                let finish = self.rounds.interrupted();
                match self.flush(finish).await {
                    Err(gone @ Error::MachineGone { .. }) => return Err(gone),
                    Err(flush) => {
                        tracing::warn!(machine = %self.key, error = %flush, "cannot write what was decided before the failure");
                    }
                    Ok(()) => {}
                }
                return Err(error);
            }
        };
        if finish.exhausted {
            tracing::warn!(machine = %self.key, "no decision after {MAX_ROUNDS} rounds; looking again later");
        }
        let next = finish.next.clone();
        self.flush(finish).await?;
        match next {
            Next::AwaitChange => Ok(Action::await_change()),
            Next::Requeue(after) => Ok(Action::requeue(after)),
            Next::Retry(failure) => Err(self.error_of(failure, failed_call)),
        }
    }

    /// Runs the script ([`Rounds`]): performs each step it asks for until it ends the
    /// reconcile; with how it ends, the error of the last call when that failed (what a
    /// reconcile the plan fails for it ends with).
    async fn run_rounds(&mut self) -> Result<(Finish, Option<Error>), Error> {
        let mut failed_call = None;
        loop {
            let step = self.rounds.next(&PlanVm);
            tracing::debug!(machine = %self.key, step = step.name(), "step");
            failed_call = match step {
                Step::Finish(finish) => return Ok((finish, failed_call)),
                Step::Read(read) => match self.read(read).await {
                    Ok(failed) => failed,
                    Err(error) => Some(self.connection_failed(error)?),
                },
                Step::Record(writes) => {
                    self.write_all(writes).await?;
                    continue;
                }
                Step::Send(change) => self.send(change).await?,
            };
        }
    }

    /// A read failed: where Prism refused or could not be reached on the Machine's connection
    /// (credentials, certificate, network), the plan is told so (it explains it on a Machine
    /// still to be created, and fails the reconcile with this error, which is returned); any
    /// other error ends the reconcile now.
    fn connection_failed(&mut self, error: Error) -> Result<Error, Error> {
        let problem = self.environment.as_ref().and_then(|environment| {
            connection_problem(
                &error,
                &self.machine,
                &self.rounds.snapshot.machine.spec,
                environment.connection.endpoint(),
            )
        });
        let Some(problem) = problem else {
            return Err(error);
        };
        tracing::warn!(machine = %self.key, %error, "Prism Central refused or unreachable");
        self.rounds.snapshot.seen.observe.environment = Some(EnvironmentSeen::Unavailable(problem));
        Ok(error)
    }

    /// The error a reconcile that `failure` ends fails with; `failed_call`: the error of the
    /// last call, when it failed.
    fn error_of(&self, failure: Failure, failed_call: Option<Error>) -> Error {
        match failure {
            Failure::CreateRetry(message) => Error::CreateRetry(message),
            Failure::InvalidMachine(message) => Error::InvalidMachine(message),
            Failure::VmError(message) => Error::VmError(message),
            Failure::DeployUnconfirmed(message) => Error::DeployUnconfirmed(message),
            Failure::AmbiguousVm(message) => Error::AmbiguousVm(message),
            Failure::VolumeGroupDetachFailed(message) => Error::VolumeGroupDetachFailed(message),
            Failure::Environment | Failure::ActionFailed => failed_call.unwrap_or_else(|| {
                Error::Configuration(format!(
                    "Machine {}: the plan failed the reconcile for a call that succeeded (a bug in the protocol)",
                    self.key
                ))
            }),
        }
    }

    fn connection(&self) -> Result<&Arc<actuator::Connection>, Error> {
        self.environment
            .as_ref()
            .map(|environment| &environment.connection)
            .ok_or_else(|| {
                Error::Configuration(format!(
                    "Machine {}: a Prism call was decided before the connection",
                    self.key
                ))
            })
    }

    /// Writes what the reconcile decided, in the script's order, then publishes the events
    /// and applies the effects.
    async fn flush(&mut self, mut finish: Finish) -> Result<(), Error> {
        self.write_all(std::mem::take(&mut finish.writes)).await?;
        let machine = self.machine.clone();
        for event in finish.events(self.wrote) {
            if event.warning {
                tracing::warn!(machine = %self.key, reason = event.reason, note = %event.note, "event");
            } else {
                tracing::info!(machine = %self.key, reason = event.reason, note = %event.note, "event");
            }
            self.shared()
                .event(&machine, event.warning, event.reason, event.note.clone())
                .await;
        }
        for effect in finish.effects {
            self.apply(effect);
        }
        Ok(())
    }

    /// Performs `writes` in order, each only if it changes anything.
    async fn write_all(&mut self, writes: Vec<Write>) -> Result<(), Error> {
        for write in writes {
            match write {
                Write::Status(update) => self.write_status(*update).await?,
                Write::Metadata(change) => self.write_metadata(change).await?,
            }
        }
        Ok(())
    }

    fn apply(&self, effect: Effect) {
        let shared = self.shared();
        match effect {
            Effect::Failure { kind, reason } => {
                let metrics = &shared.metrics;
                let counter = match kind {
                    FailureKind::Create => &metrics.create_failed,
                    FailureKind::Update => &metrics.update_failed,
                    FailureKind::Delete => &metrics.delete_failed,
                };
                let namespace = self.machine.namespace().unwrap_or_default();
                counter
                    .with_label_values(&[&self.machine.name_any(), &namespace, reason])
                    .inc();
            }
            Effect::TaskEnded {
                operation,
                succeeded,
                elapsed,
            } => {
                shared
                    .metrics
                    .task_ended(operation.as_str(), succeeded, elapsed);
                if succeeded && let Some(environment) = &self.environment {
                    environment.connection.task_took(&operation, elapsed);
                }
            }
            Effect::PhaseEntered { phase, age } => {
                shared
                    .metrics
                    .phase_transition
                    .with_label_values(&[phase])
                    .observe(age.as_secs_f64());
                tracing::info!(machine = %self.key, phase, "phase");
            }
            Effect::ForgetRead(uuid) => {
                if let Some(environment) = &self.environment {
                    environment.connection.forget_read(&uuid);
                }
            }
            Effect::InvalidateLookups => {
                if let Some(environment) = &self.environment {
                    environment.connection.lookups.invalidate();
                }
            }
            Effect::AwaitAddresses { vm, seen } => {
                if let Some(environment) = &self.environment {
                    environment.connection.await_addresses(
                        &vm,
                        seen,
                        NameClause::of(&self.machine),
                        self.machine_key(),
                    );
                }
            }
            Effect::AddressesKnown { vm } => {
                if let Some(environment) = &self.environment {
                    environment.connection.addresses_known(&vm);
                }
            }
            Effect::RememberTask(task) => {
                self.context
                    .remembered_tasks
                    .remember(&self.machine, task, Instant::now());
            }
            Effect::ForgetTask => self.context.remembered_tasks.forget(&self.machine),
            Effect::ResetBackoff => shared.backoff.reset(&self.key),
            Effect::Finished => {
                self.context.remembered_tasks.forget(&self.machine);
                if let Some(environment) = &self.environment {
                    environment
                        .connection
                        .forget_machine_addresses(&self.machine_key());
                }
                self.context.superseded.released(&self.key, Instant::now());
                tracing::info!(machine = %self.key, "deleted");
            }
        }
    }

    fn api(&self) -> Api<Machine> {
        Api::namespaced(
            self.shared().client.clone(),
            &self.machine.namespace().unwrap_or_default(),
        )
    }

    /// Writes the status change `update`, if it changes anything.
    async fn write_status(&mut self, update: StatusUpdate) -> Result<(), Error> {
        let Some(patch) = status_patch(&self.machine, &update, &now()) else {
            return Ok(());
        };
        self.patch(MachinePart::Status, &patch, "patch status of")
            .await
    }

    /// Writes the metadata change `change`, if it changes anything. A finalizer change
    /// carries the resourceVersion (the finalizer list is replaced whole).
    async fn write_metadata(&mut self, change: MetadataChange) -> Result<(), Error> {
        let (patch, what) = match change {
            MetadataChange::AddFinalizer | MetadataChange::RemoveFinalizer => {
                let mut finalizers: Vec<String> = self
                    .machine
                    .finalizers()
                    .iter()
                    .filter(|f| *f != MACHINE_FINALIZER)
                    .cloned()
                    .collect();
                if change == MetadataChange::AddFinalizer {
                    finalizers.push(MACHINE_FINALIZER.to_owned());
                }
                let patch = json!({"metadata": {
                    "finalizers": finalizers,
                    "resourceVersion": self.machine.metadata.resource_version,
                }});
                (patch, "update finalizers of")
            }
            MetadataChange::Merge {
                labels,
                annotations,
                provider_id,
            } => {
                let Some(patch) =
                    metadata_patch(&self.machine, &labels, &annotations, provider_id.as_deref())
                else {
                    return Ok(());
                };
                (patch, "patch")
            }
        };
        self.patch(MachinePart::Main, &patch, what).await
    }

    /// Sends one merge patch of the Machine and keeps what it returned; `action` names it in
    /// an error ("patch status of", ...).
    async fn patch(&mut self, part: MachinePart, patch: &Value, action: &str) -> Result<(), Error> {
        let api = self.api();
        let name = self.machine.name_any();
        let params = PatchParams::default();
        let patch = Patch::Merge(patch);
        let written = match part {
            MachinePart::Main => api.patch(&name, &params, &patch).await,
            MachinePart::Status => api.patch_status(&name, &params, &patch).await,
        };
        let updated = written
            .map_err(|e| written_error(&self.key, format!("{action} Machine {}", self.key), e))?;
        self.replace_machine(updated);
        Ok(())
    }

    /// Keeps the Machine a write returned, remembering the version it replaced.
    fn replace_machine(&mut self, updated: Machine) {
        self.context
            .superseded
            .record(&self.key, self.machine.metadata.resource_version.as_ref());
        self.machine = updated;
        self.wrote = true;
    }
}

/// The part of the Machine a patch writes: its main resource (metadata) or `/status`.
#[derive(Clone, Copy)]
enum MachinePart {
    Main,
    Status,
}

/// The error of a failed write of the Machine: [`Error::MachineGone`] for a 404.
fn written_error(key: &str, action: String, error: kube::Error) -> Error {
    match error {
        kube::Error::Api(status) if status.code == 404 => Error::MachineGone {
            machine: key.to_owned(),
            action,
        },
        error => Error::kube(action, error),
    }
}

fn now() -> Time {
    Time(Timestamp::now())
}

/// The intervals of the settings.
fn intervals(shared: &Shared) -> Intervals {
    let settings = &shared.settings;
    Intervals {
        poll: settings.poll_interval,
        requeue: settings.requeue_interval,
        running: settings.running_interval,
    }
}
