//! The Machine controller: the machine-api-operator's lifecycle ([`crate::plan::lifecycle`])
//! performed step by step, with the VM side in [`super::provision`] and the drain in
//! [`super::drain`].
//!
//! Each reconcile asks [`next_step`] what to do, performs that one step (a status or metadata
//! merge patch, a Prism call), and ends: a write triggers the next reconcile through the watch,
//! a wait requeues. Only looking the VM up continues within the same reconcile.
//!
//! Watched: Machines (in `--namespace`, or all) through the cache it shares with the Windows join
//! reconciler ([`super::machine_cache`]), wrapped in `DeserializeGuard` so a malformed one is
//! logged and skipped instead of stalling the watch; Nodes, mapped to their Machine.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use prism_client::v3::Vm;
use serde_json::json;
use tokio::sync::broadcast;

use super::Shared;
use super::drain::{DrainProgress, drain_round};
use super::error::Error;
use super::inputs::secrets_named_by;
use super::machine_cache::MachineFeed;
use super::nodes::{ProviderIdsDone, machine_to_requeue};
use super::provision::Observed;
use crate::actuator::DeleteOutcome;
use crate::api::{
    GuardedMachine, INSTANCE_STATE_ANNOTATION, MACHINE_FINALIZER, Machine,
    NutanixMachineProviderStatus, phase,
};
use crate::plan::drain::{
    UNREACHABLE_VOLUME_WAIT, VOLUME_RECHECK, VolumeCheck, check_volumes, drained_at, volume_events,
};
use crate::plan::lifecycle::{
    DRAINED_CONDITION, INSTANCE_MISSING_MESSAGE, Intervals, MachineState, Step, VmObservation,
    next_step,
};
use crate::plan::machine_status::{
    StatusUpdate, UNKNOWN_INSTANCE_STATE, conditions, machine_condition, metadata_patch,
    provider_condition, status_patch,
};
use crate::plan::machine_status::{event_note, failure_event_reason};

/// Label of this controller in metrics.
const CONTROLLER: &str = "machine";
/// Machine condition of a paused Machine (migration to the Cluster API).
const PAUSED_CONDITION: &str = "Paused";

/// The Machine controller's context.
#[derive(Debug)]
pub struct Context {
    pub shared: Arc<Shared>,
    pub(super) provider_ids: ProviderIdsDone,
    superseded: Superseded,
}

/// Versions of each Machine that this controller's own writes replaced. The watch cache can
/// hand a reconcile a Machine older than the last write (its event not applied yet); acting on
/// it would repeat a step (a create the recorded UUID or request id makes harmless, but still a
/// Prism call) and end in a 409. Such a reconcile waits for the cache instead.
#[derive(Debug, Default)]
struct Superseded(
    std::sync::Mutex<std::collections::HashMap<String, std::collections::VecDeque<String>>>,
);

/// Replaced versions remembered per Machine.
const SUPERSEDED_KEPT: usize = 16;

impl Superseded {
    fn record(&self, key: &str, version: Option<&String>) {
        let Some(version) = version else { return };
        let mut map = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let versions = map.entry(key.to_owned()).or_default();
        versions.push_back(version.clone());
        while versions.len() > SUPERSEDED_KEPT {
            versions.pop_front();
        }
    }

    fn is_stale(&self, key: &str, version: Option<&String>) -> bool {
        let Some(version) = version else { return false };
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(key)
            .is_some_and(|versions| versions.contains(version))
    }

    fn forget(&self, key: &str) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(key);
    }
}

/// How soon a reconcile that saw a stale Machine looks again (the write's event normally
/// triggers it sooner).
const STALE_RETRY: Duration = Duration::from_secs(1);

/// Runs the Machine controller on the shared Machine cache until its watch ends.
pub async fn run(shared: Arc<Shared>, machines: MachineFeed) {
    let Some((store, changes)) = machines.when_ready().await else {
        tracing::error!("the Machine cache can never be filled; the Machine controller stops");
        return;
    };
    let client = shared.client.clone();
    let config = controller::Config::default().concurrency(shared.settings.concurrency);
    let context = Arc::new(Context {
        shared,
        provider_ids: ProviderIdsDone::default(),
        superseded: Superseded::default(),
    });
    let controller = Controller::for_shared_stream(changes, store.clone());
    let secret_changes = secret_change_stream(context.shared.secret_changes.subscribe());
    let (for_secrets, shared) = (store.clone(), context.shared.clone());
    controller
        .watches(
            Api::<Node>::all(client),
            watcher::Config::default(),
            move |node| machine_to_requeue(&node, &store),
        )
        .reconcile_on(secret_changes.flat_map(move |secret| {
            futures::stream::iter(machines_using_secret(&secret, &for_secrets, &shared))
        }))
        .with_config(config)
        .run(reconcile, error_policy, context)
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, "machine controller");
            }
        })
        .await;
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
            (same_namespace && secrets_named_by(machine).contains(&secret.name)).then(|| {
                shared.backoff.reset(&key_of(guarded));
                ObjectRef::from_obj(guarded.as_ref())
            })
        })
        .collect()
}

fn key_of(guarded: &GuardedMachine) -> String {
    format!(
        "{}/{}",
        guarded.namespace().unwrap_or_default(),
        guarded.name_any()
    )
}

async fn reconcile(guarded: Arc<GuardedMachine>, context: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    let result = match &guarded.0 {
        Ok(machine) => {
            let result = MachineReconcile::new(context.clone(), machine.clone())
                .run()
                .await;
            if let Err(error) = &result
                && !error.published()
            {
                publish_failure(&context.shared, machine, error).await;
            }
            result
        }
        Err(invalid) => {
            tracing::warn!(machine = %key_of(&guarded), error = %invalid.error, "cannot read the Machine; skipped until it changes");
            Ok(Action::await_change())
        }
    };
    context
        .shared
        .observe_reconcile(CONTROLLER, started, &result);
    result
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
    context
        .shared
        .retry_failed(CONTROLLER, &key_of(&guarded), error)
}

fn now() -> Time {
    Time(Timestamp::now())
}

/// One reconcile of one Machine.
pub(super) struct MachineReconcile {
    pub(super) context: Arc<Context>,
    pub(super) machine: Machine,
    pub(super) key: String,
}

impl MachineReconcile {
    fn new(context: Arc<Context>, machine: Machine) -> Self {
        let key = format!(
            "{}/{}",
            machine.namespace().unwrap_or_default(),
            machine.name_any()
        );
        Self {
            context,
            machine,
            key,
        }
    }

    pub(super) fn shared(&self) -> &Shared {
        &self.context.shared
    }

    fn api(&self) -> Api<Machine> {
        Api::namespaced(
            self.shared().client.clone(),
            &self.machine.namespace().unwrap_or_default(),
        )
    }

    pub(super) fn name(&self) -> String {
        self.machine.name_any()
    }

    /// The identity its VM's marker carries.
    pub(super) fn identity(&self) -> crate::plan::MachineIdentity {
        crate::plan::MachineIdentity {
            namespace: self.machine.namespace().unwrap_or_default(),
            name: self.name(),
            uid: self.machine.uid().unwrap_or_default(),
        }
    }

    async fn run(mut self) -> Result<Action, Error> {
        if self
            .context
            .superseded
            .is_stale(&self.key, self.machine.metadata.resource_version.as_ref())
        {
            tracing::debug!(machine = %self.key, "the cache has not seen this controller's last write yet");
            return Ok(Action::requeue(STALE_RETRY));
        }
        let state = MachineState::of(&self.machine);
        let gate = self.shared().settings.migration_gate;
        let mut observation = VmObservation::NotLookedUp;
        let mut vm = None;
        loop {
            let step = next_step(&state, &observation, gate);
            tracing::debug!(machine = %self.key, ?step, "next step");
            if step == Step::LookUpVm {
                match self.observe().await? {
                    Observed::Vm(seen, found) => {
                        observation = seen;
                        vm = found;
                        continue;
                    }
                    Observed::Done(action) => return Ok(action),
                }
            }
            if gate && step != Step::Paused {
                self.unpause().await?;
            }
            return self.perform(step, vm).await;
        }
    }

    pub(super) async fn perform(
        &mut self,
        step: Step,
        vm: Option<Box<Vm>>,
    ) -> Result<Action, Error> {
        let settings = &self.shared().settings;
        let (poll, requeue) = (settings.poll_interval, settings.requeue_interval);
        match step {
            Step::Paused => {
                let paused = machine_condition(
                    PAUSED_CONDITION,
                    true,
                    Some("AuthoritativeAPINotMachineAPI"),
                    Some("the Machine is owned by another API".into()),
                    &now(),
                );
                self.patch_status(StatusUpdate {
                    conditions: vec![paused],
                    ..StatusUpdate::default()
                })
                .await?;
                Ok(Action::await_change())
            }
            Step::RejectInvalidMachine { reason } => {
                let machine = self.machine.clone();
                self.shared()
                    .event(&machine, true, "FailedValidate", reason.clone())
                    .await;
                Err(Error::InvalidMachine(reason))
            }
            Step::AddFinalizer => {
                let mut finalizers = self.machine.finalizers().to_vec();
                finalizers.push(MACHINE_FINALIZER.to_owned());
                self.patch_finalizers(finalizers).await?;
                Ok(Action::await_change())
            }
            Step::SetPhase(phase) => {
                self.patch_status(StatusUpdate {
                    phase: Some(phase),
                    ..StatusUpdate::default()
                })
                .await?;
                Ok(Action::await_change())
            }
            Step::WaitForPreDrainHooks => {
                tracing::info!(machine = %self.key, "waiting for preDrain lifecycle hooks");
                Ok(Action::await_change())
            }
            Step::WaitForPreTerminateHooks => {
                tracing::info!(machine = %self.key, "waiting for preTerminate lifecycle hooks");
                Ok(Action::await_change())
            }
            Step::MarkDrained => {
                let why = if self
                    .machine
                    .annotations()
                    .contains_key(crate::api::EXCLUDE_NODE_DRAINING_ANNOTATION)
                {
                    "draining excluded by annotation"
                } else {
                    "no Node to drain"
                };
                self.set_drained(true, conditions::DRAIN_SKIPPED, why.into())
                    .await?;
                Ok(Action::await_change())
            }
            Step::Drain { node } => match drain_round(self.shared(), &node).await? {
                DrainProgress::Done => {
                    self.set_drained(true, conditions::DRAINED, format!("Node {node} drained"))
                        .await?;
                    let machine = self.machine.clone();
                    self.shared()
                        .event(&machine, false, "Drained", format!("Node {node} drained"))
                        .await;
                    Ok(Action::await_change())
                }
                DrainProgress::Pending(why) => {
                    let blocked = why.contains("blocked");
                    let reason = if blocked {
                        conditions::DRAIN_BLOCKED
                    } else {
                        conditions::DRAIN_IN_PROGRESS
                    };
                    self.set_drained(false, reason, why.clone()).await?;
                    if blocked {
                        let machine = self.machine.clone();
                        self.shared()
                            .event(&machine, true, "FailedDrain", format!("Node {node}: {why}"))
                            .await;
                    }
                    Ok(Action::requeue(poll))
                }
            },
            Step::DeleteVm => self.delete_vm().await,
            Step::WaitForVmDeletion | Step::WaitForCreate => Ok(Action::requeue(
                step.requeue_after(&intervals(self.shared()))
                    .unwrap_or(poll),
            )),
            Step::FinishDeletion { node } => self.finish_deletion(node).await,
            Step::Stop => Ok(Action::await_change()),
            Step::UpdateFromVm { phase } => match vm {
                Some(vm) => self.update_from_vm(phase, *vm).await,
                None => Ok(Action::requeue(requeue)),
            },
            Step::ReportVmError { message } => {
                let mut status = self.provider_status();
                status.set_condition(provider_condition(
                    conditions::MACHINE_UPDATE,
                    false,
                    conditions::UPDATE_FAILED,
                    message.clone(),
                    &now(),
                ));
                self.patch_status(StatusUpdate {
                    provider_status: Some(status),
                    ..StatusUpdate::default()
                })
                .await?;
                self.count_failure(FailureKind::Update, "VmError");
                let machine = self.machine.clone();
                self.shared()
                    .event(&machine, true, "FailedUpdate", message.clone())
                    .await;
                Err(Error::VmError(message))
            }
            Step::Fail { reason, message } => self.fail(reason, message).await,
            Step::Create => self.create().await,
            Step::ConfirmDeploy => self.confirm_deploy().await,
            // `run` looks the VM up and asks again; reaching here would be a bug: look later.
            Step::LookUpVm => Ok(Action::requeue(poll)),
            Step::RetryCreate { message } => self.retry_create(message).await,
        }
    }

    /// The providerStatus as read (an unreadable one is started afresh, with a warning).
    pub(super) fn provider_status(&self) -> NutanixMachineProviderStatus {
        self.machine.provider_status().unwrap_or_else(|error| {
            tracing::warn!(machine = %self.key, %error, "status.providerStatus cannot be read; starting a new one");
            NutanixMachineProviderStatus::default()
        })
    }

    /// Writes the status change, if any, and keeps the updated Machine. Returns whether
    /// anything was written.
    pub(super) async fn patch_status(&mut self, update: StatusUpdate) -> Result<bool, Error> {
        let Some(patch) = status_patch(&self.machine, &update, &now()) else {
            return Ok(false);
        };
        let updated = self
            .api()
            .patch_status(&self.name(), &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| Error::kube(format!("patch status of Machine {}", self.key), e))?;
        if let Some(phase) = update.phase
            && phase != self.machine.phase()
        {
            let created = self
                .machine
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0);
            if let Some(created) = created {
                let age = Timestamp::now().duration_since(created).as_secs_f64();
                self.shared()
                    .metrics
                    .phase_transition
                    .with_label_values(&[phase])
                    .observe(age.max(0.0));
            }
            tracing::info!(machine = %self.key, phase, "phase");
        }
        self.replace_machine(updated);
        Ok(true)
    }

    /// Writes the providerStatus.
    pub(super) async fn write_provider_status(
        &mut self,
        status: NutanixMachineProviderStatus,
    ) -> Result<bool, Error> {
        self.patch_status(StatusUpdate {
            provider_status: Some(status),
            ..StatusUpdate::default()
        })
        .await
    }

    /// Writes labels, annotations and providerID that differ. Returns whether anything was
    /// written.
    pub(super) async fn patch_metadata(
        &mut self,
        labels: &std::collections::BTreeMap<String, String>,
        annotations: &std::collections::BTreeMap<String, String>,
        provider_id: Option<&str>,
    ) -> Result<bool, Error> {
        let Some(patch) = metadata_patch(&self.machine, labels, annotations, provider_id) else {
            return Ok(false);
        };
        let updated = self
            .api()
            .patch(&self.name(), &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| Error::kube(format!("patch Machine {}", self.key), e))?;
        self.replace_machine(updated);
        Ok(true)
    }

    async fn patch_finalizers(&mut self, finalizers: Vec<String>) -> Result<(), Error> {
        let patch = json!({"metadata": {
            "finalizers": finalizers,
            "resourceVersion": self.machine.metadata.resource_version,
        }});
        let updated = self
            .api()
            .patch(&self.name(), &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| Error::kube(format!("update finalizers of Machine {}", self.key), e))?;
        self.replace_machine(updated);
        Ok(())
    }

    /// Keeps the Machine a write returned, remembering the version it replaced.
    fn replace_machine(&mut self, updated: Machine) {
        self.context
            .superseded
            .record(&self.key, self.machine.metadata.resource_version.as_ref());
        self.machine = updated;
    }

    async fn unpause(&mut self) -> Result<(), Error> {
        let paused = self.machine.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == PAUSED_CONDITION && c.status == "True")
        });
        if paused {
            let condition = machine_condition(
                PAUSED_CONDITION,
                false,
                Some("AuthoritativeAPIMachineAPI"),
                Some("the Machine API owns the Machine".into()),
                &now(),
            );
            self.patch_status(StatusUpdate {
                conditions: vec![condition],
                ..StatusUpdate::default()
            })
            .await?;
        }
        Ok(())
    }

    async fn set_drained(
        &mut self,
        drained: bool,
        reason: &str,
        message: String,
    ) -> Result<(), Error> {
        let condition = machine_condition(
            DRAINED_CONDITION,
            drained,
            Some(reason),
            Some(message),
            &now(),
        );
        self.patch_status(StatusUpdate {
            conditions: vec![condition],
            ..StatusUpdate::default()
        })
        .await?;
        Ok(())
    }

    pub(super) fn count_failure(&self, kind: FailureKind, reason: &str) {
        let metrics = &self.shared().metrics;
        let counter = match kind {
            FailureKind::Create => &metrics.create_failed,
            FailureKind::Update => &metrics.update_failed,
            FailureKind::Delete => &metrics.delete_failed,
        };
        let namespace = self.machine.namespace().unwrap_or_default();
        counter
            .with_label_values(&[&self.name(), &namespace, reason])
            .inc();
    }

    /// Phase Failed with the reason and message; `instance-state: Unknown`, as MAO writes.
    pub(super) async fn fail(
        &mut self,
        reason: Option<&'static str>,
        message: String,
    ) -> Result<Action, Error> {
        let status = self.provider_status();
        self.fail_with(reason, message, status).await
    }

    /// [`Self::fail`], writing `status` as the providerStatus (with its conditions added).
    pub(super) async fn fail_with(
        &mut self,
        reason: Option<&'static str>,
        message: String,
        mut status: NutanixMachineProviderStatus,
    ) -> Result<Action, Error> {
        let missing = reason.is_none() && message == INSTANCE_MISSING_MESSAGE;
        let mut machine_conditions = Vec::new();
        if missing {
            machine_conditions.push(machine_condition(
                conditions::INSTANCE_EXISTS,
                false,
                Some(conditions::INSTANCE_MISSING),
                Some(message.clone()),
                &now(),
            ));
        } else {
            status.set_condition(provider_condition(
                conditions::MACHINE_CREATION,
                false,
                conditions::CREATION_FAILED,
                message.clone(),
                &now(),
            ));
        }
        let annotations = [(
            INSTANCE_STATE_ANNOTATION.to_owned(),
            UNKNOWN_INSTANCE_STATE.to_owned(),
        )]
        .into();
        self.patch_metadata(&Default::default(), &annotations, None)
            .await?;
        self.patch_status(StatusUpdate {
            phase: Some(phase::FAILED),
            error: Some((reason.map(str::to_owned), message.clone())),
            provider_status: Some(status),
            conditions: machine_conditions,
            ..StatusUpdate::default()
        })
        .await?;
        let (kind, event, metric_reason) = if missing {
            (FailureKind::Update, "FailedUpdate", "InstanceMissing")
        } else {
            (
                FailureKind::Create,
                "FailedCreate",
                reason.unwrap_or("Failed"),
            )
        };
        self.count_failure(kind, metric_reason);
        tracing::warn!(machine = %self.key, %message, "Machine failed");
        let machine = self.machine.clone();
        self.shared().event(&machine, true, event, message).await;
        Ok(Action::await_change())
    }

    /// A create that cannot be made now: condition, event, metric, and a retry with backoff.
    pub(super) async fn retry_create(&mut self, message: String) -> Result<Action, Error> {
        let mut status = self.provider_status();
        status.set_condition(provider_condition(
            conditions::MACHINE_CREATION,
            false,
            conditions::CREATION_FAILED,
            message.clone(),
            &now(),
        ));
        self.write_provider_status(status).await?;
        self.count_failure(FailureKind::Create, "Unresolved");
        let machine = self.machine.clone();
        self.shared()
            .event(&machine, true, "FailedCreate", message.clone())
            .await;
        Err(Error::CreateRetry(message))
    }

    async fn delete_vm(&mut self) -> Result<Action, Error> {
        let Some(uuid) = self.provider_status().vm_uuid else {
            return Ok(Action::requeue(self.shared().settings.poll_interval));
        };
        if let Some(wait) = self.wait_for_volumes().await? {
            return Ok(wait);
        }
        let mut status = self.provider_status();
        let environment = super::inputs::environment(self.shared(), &self.machine).await?;
        match environment.connection.delete_vm(&uuid).await {
            // Gone already: the next look finds it missing and finishes the deletion.
            Ok(DeleteOutcome::AlreadyGone) => Ok(Action::requeue(Duration::ZERO)),
            Ok(DeleteOutcome::Accepted) => {
                status.set_condition(provider_condition(
                    conditions::MACHINE_DELETION,
                    false,
                    conditions::DELETION_IN_PROGRESS,
                    format!("deleting VM {uuid}"),
                    &now(),
                ));
                self.write_provider_status(status).await?;
                let machine = self.machine.clone();
                self.shared()
                    .event(&machine, false, "Delete", format!("deleting VM {uuid}"))
                    .await;
                Ok(Action::requeue(self.shared().settings.poll_interval))
            }
            Err(error) => {
                status.set_condition(provider_condition(
                    conditions::MACHINE_DELETION,
                    false,
                    conditions::DELETION_FAILED,
                    error.to_string(),
                    &now(),
                ));
                self.write_provider_status(status).await?;
                self.count_failure(FailureKind::Delete, "PrismError");
                // The event is the reconcile wrapper's (publish_failure), with the fix.
                Err(error.into())
            }
        }
    }

    /// Holds the VM's deletion while the linked Node lists attached volumes
    /// ([`check_volumes`]); `Some` with the requeue while it waits.
    async fn wait_for_volumes(&mut self) -> Result<Option<Action>, Error> {
        let Some(node_name) = MachineState::of(&self.machine).node else {
            return Ok(None);
        };
        let nodes: Api<Node> = Api::all(self.shared().client.clone());
        let node = nodes.get_opt(&node_name).await.map_err(|e| {
            Error::kube(format!("read Node {node_name} for its attached volumes"), e)
        })?;
        let check = check_volumes(
            &node_name,
            node.as_ref(),
            drained_at(&self.machine),
            Timestamp::now(),
        );
        let machine = self.machine.clone();
        match check {
            VolumeCheck::Clear => Ok(None),
            VolumeCheck::NodeGone { node } => {
                let note = format!(
                    "Node {node} is gone: nothing reports its attached volumes any more; deleting the VM"
                );
                self.shared()
                    .event(&machine, false, volume_events::NODE_GONE, note)
                    .await;
                Ok(None)
            }
            VolumeCheck::Wait {
                node,
                volumes,
                unreachable_until,
            } => {
                let volumes = volumes.join(", ");
                let message = match unreachable_until {
                    None => format!(
                        "Node {node} still lists attached volumes ({volumes}): the VM is deleted once they are detached"
                    ),
                    Some(until) => format!(
                        "Node {node} is unreachable and still lists attached volumes ({volumes}): the VM is deleted once they are detached, or at {until}"
                    ),
                };
                let mut status = self.provider_status();
                status.set_condition(provider_condition(
                    conditions::MACHINE_DELETION,
                    false,
                    volume_events::WAITING,
                    message.clone(),
                    &now(),
                ));
                self.write_provider_status(status).await?;
                self.shared()
                    .event(&machine, false, volume_events::WAITING, message)
                    .await;
                tracing::info!(machine = %self.key, node, "waiting for the Node's volumes to be detached");
                Ok(Some(Action::requeue(VOLUME_RECHECK)))
            }
            VolumeCheck::GiveUp {
                node,
                volumes,
                unreachable_since,
            } => {
                let note = format!(
                    "Node {node} has been unreachable since {unreachable_since} and still lists attached volumes ({}): deleting the VM without waiting longer (the attach/detach controller force-detaches the volumes of a Node that is not Ready after {:#})",
                    volumes.join(", "),
                    UNREACHABLE_VOLUME_WAIT
                );
                tracing::warn!(machine = %self.key, node, "deleting the VM with volumes still listed on its unreachable Node");
                self.shared()
                    .event(&machine, true, volume_events::TIMED_OUT, note)
                    .await;
                Ok(None)
            }
        }
    }

    async fn finish_deletion(&mut self, node: Option<String>) -> Result<Action, Error> {
        if let Some(node) = node {
            let nodes: Api<Node> = Api::all(self.shared().client.clone());
            match nodes.delete(&node, &Default::default()).await {
                Ok(_) => tracing::info!(machine = %self.key, node, "deleted the Node"),
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => return Err(Error::kube(format!("delete Node {node}"), error)),
            }
        }
        let finalizers: Vec<String> = self
            .machine
            .finalizers()
            .iter()
            .filter(|f| *f != MACHINE_FINALIZER)
            .cloned()
            .collect();
        self.patch_finalizers(finalizers).await?;
        self.shared().backoff.reset(&self.key);
        self.context.superseded.forget(&self.key);
        tracing::info!(machine = %self.key, "deleted");
        Ok(Action::await_change())
    }
}

/// Which `mapi_instance_*_failed` counter a failure counts in.
#[derive(Clone, Copy, Debug)]
pub(super) enum FailureKind {
    Create,
    Update,
    Delete,
}

/// The intervals of the settings, for [`Step::requeue_after`].
pub(super) fn intervals(shared: &Shared) -> Intervals {
    let settings = &shared.settings;
    Intervals {
        poll: settings.poll_interval,
        requeue: settings.requeue_interval,
        running: settings.running_interval,
    }
}
