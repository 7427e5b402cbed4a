//! The VM side of a Machine's lifecycle: looking its VM up, the create protocol (see
//! [`crate::actuator`]'s documentation for why each step is safe), the follow-up update of a
//! clone or deploy, and updating the Machine from its VM.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use prism_client::v3::{EntityState, Vm};
use rand::RngCore;

use super::error::Error;
use super::inputs::{Environment, environment, secret_value};
use super::machine::{MachineReconcile, intervals};
use super::nodes::ensure_node_provider_id;
use crate::actuator::inventory::InventorySnapshot;
use crate::actuator::{Connection, FollowUpFailure, FollowUpOutcome};
use crate::api::{
    CLUSTER_ID_LABEL, Machine, NutanixMachineProviderConfig, NutanixMachineProviderStatus,
    PendingTask, TaskOperation, phase,
};
use crate::plan::addresses::{AddressInput, machine_addresses, nics_of};
use crate::plan::guest::{AdminPasswordSource, admin_password_source};
use crate::plan::lifecycle::{
    INVALID_CONFIGURATION, Step, VmObservation, VmState, after_validation, provider_id,
};
use crate::plan::machine_status::{
    StatusUpdate, conditions, machine_condition, provider_condition, vm_annotations, vm_labels,
};
use crate::plan::provision::{
    CreateCallOutcome, DEPLOYED_VM_SEARCH, DeployCandidate, DeployedByName, FailureClass,
    ListingSays, ListingView, TaskContext, TaskReading, after_transient_failure,
    classify_create_error, delete_sent, deployed_vm_by_name, follow_up_value, listed_after,
    listing_says, pending_follow_up, read_task, secure_boot_customized, task_read_directly,
};
use crate::plan::request::{FollowUpUpdate, VmRequest, build_request};
use crate::plan::resolve::{FailureDomain, RequiredLookups, ResolvedReferences};
use crate::plan::secret::{PASSWORD_RANDOM_BYTES, generated_password_secret};
use crate::plan::unattend::PasswordValue;
use crate::plan::{
    AdminPassword, ErrorClass, PlanContext, ResolutionMode, UserData, ValidationErrors, VmPlan,
    identity_of, plan_vm,
};

/// Key of the user data in its Secret.
pub const USER_DATA_KEY: &str = "userData";
/// Key of the Administrator password in `guestCustomization.adminPasswordSecret`.
pub const ADMIN_PASSWORD_KEY: &str = "password";

/// Looks up in Prism what `machine` refers to (through the connection's caches) and plans its
/// VM: what the controller does before every create, and what `validate` runs. A Machine that is
/// wrong in itself gets only those errors, without any Prism call.
pub async fn resolve_and_plan(
    connection: &Connection,
    machine: &Machine,
    failure_domains: &[FailureDomain],
    user_data: Option<&UserData>,
    password: Option<&AdminPassword>,
) -> Result<VmPlan, ValidationErrors> {
    if let Some(errors) = invalid_in_itself(machine) {
        return Err(errors);
    }
    let infra_id = machine
        .labels()
        .get(CLUSTER_ID_LABEL)
        .cloned()
        .unwrap_or_default();
    let resolved = match machine.provider_config().and_then(Result::ok) {
        Some(config) => {
            let lookups = RequiredLookups::of(&config, &infra_id, Some(failure_domains));
            connection
                .lookups
                .resolve(
                    connection.client(),
                    &connection.inventory,
                    &lookups,
                    failure_domains,
                )
                .await
        }
        None => ResolvedReferences::default(),
    };
    plan_vm(
        machine,
        &PlanContext {
            resolved: &resolved,
            mode: ResolutionMode::Strict,
            user_data,
            admin_password: password.map(PasswordValue::Secret),
        },
    )
}

/// The errors of a Machine that is wrong in itself (no lookup can change them), if any.
pub fn invalid_in_itself(machine: &Machine) -> Option<ValidationErrors> {
    let nothing = ResolvedReferences::default();
    let errors = plan_vm(
        machine,
        &PlanContext {
            resolved: &nothing,
            mode: ResolutionMode::Strict,
            user_data: None,
            admin_password: None,
        },
    )
    .err()?;
    let invalid: Vec<_> = errors
        .0
        .into_iter()
        .filter(|e| e.class == ErrorClass::Invalid)
        .collect();
    (!invalid.is_empty()).then_some(ValidationErrors(invalid))
}

/// The follow-up that powers a VM on again after its create task failed: the recorded one, if
/// any, else one that keeps the VM's description.
fn reasserted_power(recorded: Option<FollowUpUpdate>, vm: &Vm) -> FollowUpUpdate {
    let description = || {
        vm.spec
            .as_ref()
            .and_then(|spec| spec.description.clone())
            .unwrap_or_default()
    };
    let mut update = recorded.unwrap_or_else(|| FollowUpUpdate::reassert_power(description()));
    update.power_on = true;
    update.reassert_power = true;
    update
}

/// A password read from a Secret: UTF-8, one trailing newline dropped (`echo` into a file).
fn password_of(bytes: &[u8]) -> Result<AdminPassword, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "the password is not UTF-8".to_owned())?;
    let text = text.strip_suffix('\n').unwrap_or(text);
    AdminPassword::new(text).map_err(|problem| problem.to_string())
}

/// A random Administrator password for one VM (Sysprep without `adminPasswordSecret`).
pub fn random_admin_password() -> AdminPassword {
    let mut random = [0u8; PASSWORD_RANDOM_BYTES];
    rand::rng().fill_bytes(&mut random);
    AdminPassword::from_random_bytes(&random)
}

/// How long a deletion keeps retrying to confirm a template deploy whose plan cannot be made
/// (a lookup failing) before it forgets the deploy and finishes.
pub const DEPLOY_CONFIRM_PATIENCE: Duration = Duration::from_secs(600);

/// What a create needs, or why it cannot be made now.
enum Prepared {
    Ready {
        connection: Arc<Connection>,
        plan: Box<VmPlan>,
    },
    /// The Machine fails with this reason and message.
    Invalid {
        reason: Option<&'static str>,
        message: String,
    },
    /// Something looked up is missing or was not reachable: retry later.
    Unresolved(String),
}

fn is_template(plan: &VmPlan) -> bool {
    matches!(
        plan.source,
        crate::plan::vm_plan::SourcePlan::Template { .. }
    )
}

/// What looking the VM up found, or that the reconcile already did what it had to.
pub(super) enum Observed {
    Vm(VmObservation, Option<Box<Vm>>),
    Done(Action),
}

fn now() -> Time {
    Time(Timestamp::now())
}

fn present(vm: Vm) -> Observed {
    Observed::Vm(VmObservation::Present(VmState::of(&vm)), Some(Box::new(vm)))
}

fn operation_of(request: &VmRequest) -> TaskOperation {
    match request {
        VmRequest::Create(_) => TaskOperation::Create,
        VmRequest::Clone { .. } => TaskOperation::Clone,
        VmRequest::Deploy { .. } => TaskOperation::Deploy,
    }
}

impl MachineReconcile {
    fn deleting(&self) -> bool {
        self.machine.metadata.deletion_timestamp.is_some()
    }

    /// Finds the Machine's VM: a recorded task first, then the recorded UUID (the inventory for
    /// a Running Machine, a GET otherwise), then the identity marker.
    pub(super) async fn observe(&mut self) -> Result<Observed, Error> {
        let status = self.provider_status();
        let recorded = status.vm_uuid.is_some()
            || status.pending_task.is_some()
            || status.deploy_request_id.is_some();
        let connection = match environment(self.shared(), &self.machine).await {
            Ok(Environment { connection, .. }) => connection,
            // Nothing was ever sent to Prism for this Machine (every create records first):
            // a deletion need not wait for a Prism it cannot reach.
            Err(error) if self.deleting() && !recorded => {
                tracing::warn!(machine = %self.key, %error, "no Prism connection; nothing was created, deleting");
                return Ok(Observed::Vm(VmObservation::Missing, None));
            }
            Err(error) => return Err(error),
        };
        let client = connection.client();

        if let Some(task) = &status.pending_task {
            // A task recorded moments ago (the reconcile its own write triggered) is not read:
            // no create ends that fast.
            let poll = self.shared().settings.poll_interval;
            let first_read = connection.first_task_read_after(&task.operation, poll);
            if let Some(started) = &task.started {
                let age = Timestamp::now().duration_since(started.0);
                let age = Duration::try_from(age).unwrap_or_default();
                if age < first_read {
                    return Ok(Observed::Done(Action::requeue(first_read - age)));
                }
            }
            if let Some(observed) = self
                .listing_before_task_read(&connection, &status, task)
                .await?
            {
                return Ok(observed);
            }
            let progress = connection.read_task(task).await?;
            let context = TaskContext {
                recorded_vm: status.vm_uuid.as_deref(),
                secure_boot_customized: self
                    .machine
                    .provider_config()
                    .and_then(Result::ok)
                    .is_some_and(|config| secure_boot_customized(&config)),
            };
            match read_task(task, &progress, context) {
                TaskReading::Running { status: running } => {
                    tracing::debug!(machine = %self.key, task = %task.id, running, "task running");
                    if task.operation.creates_vm() {
                        return Ok(Observed::Vm(VmObservation::Creating, None));
                    }
                }
                TaskReading::Created { vm_uuid } => {
                    self.task_ended(&connection, task, true);
                    let mut next = status.clone();
                    next.pending_task = None;
                    if let (Some(reserved), Some(actual)) = (&status.vm_uuid, &vm_uuid)
                        && reserved != actual
                    {
                        // Prism did not keep the reserved UUID: the VM it made is this
                        // Machine's; creating again would make a second one.
                        tracing::warn!(machine = %self.key, %reserved, %actual, "Prism gave the VM another UUID than the reserved one; recording it");
                        let machine = self.machine.clone();
                        self.shared()
                            .event(
                                &machine,
                                false,
                                "Adopted",
                                format!("Prism created VM {actual} instead of the reserved UUID {reserved}"),
                            )
                            .await;
                    }
                    if vm_uuid.is_some() {
                        next.vm_uuid = vm_uuid;
                    }
                    self.write_provider_status(next).await?;
                    return Ok(Observed::Done(Action::await_change()));
                }
                TaskReading::DeployedVmUnnamed => {
                    return self
                        .find_deployed_vm(&connection, status.clone(), task)
                        .await;
                }
                TaskReading::FollowUpApplied => {
                    self.task_ended(&connection, task, true);
                    let mut next = status.clone();
                    next.pending_task = None;
                    next.pending_follow_up = None;
                    self.write_provider_status(next).await?;
                    return Ok(Observed::Done(Action::await_change()));
                }
                TaskReading::Failed { class, message } => {
                    self.task_ended(&connection, task, false);
                    return self
                        .task_failed(&connection, status.clone(), task, class, message)
                        .await;
                }
            }
        }

        if let Some(uuid) = &status.vm_uuid {
            if self.machine.phase() == phase::RUNNING && !self.deleting() {
                let snapshot = connection.inventory.snapshot(client).await?;
                if let Some(vm) = snapshot.vm(uuid) {
                    return Ok(present(vm.clone()));
                }
                // Absent from the listing proves nothing (list lag): confirm with a GET.
            } else if !self.deleting() && status.pending_follow_up.is_none() {
                // Waiting for addresses or the Node: one listing serves every waiting Machine.
                let requeue = self.shared().settings.requeue_interval;
                if let Some(listing) = connection
                    .listing_for_waiter(uuid, requeue * 2, requeue / 2)
                    .await?
                    && let Some(vm) = listing.vm(uuid)
                {
                    return Ok(present(vm.clone()));
                }
            }
            if self.deleting() && delete_sent(&status, uuid) {
                // Waiting for Prism to finish a delete this controller sent: the shared listing
                // says whether it is still going (every other answer is confirmed by a GET).
                let settings = &self.shared().settings;
                let (poll, requeue) = (settings.poll_interval, settings.requeue_interval);
                if let Some(listing) = connection
                    .listing_for_waiter(uuid, requeue * 2, poll)
                    .await?
                    && let Some(vm) = listing.vm(uuid)
                    && vm.state() == Some(&EntityState::DeletePending)
                {
                    return Ok(present(vm.clone()));
                }
            }
            // A deletion must see Prism as it is now; otherwise a read from the last few
            // seconds (the reconcile our own write triggered) will do.
            let vm = if self.deleting() {
                connection.get_vm(uuid).await?
            } else {
                connection.get_vm_recent(uuid).await?
            };
            return Ok(match vm {
                Some(vm) => present(vm),
                None => Observed::Vm(VmObservation::Missing, None),
            });
        }
        if status.deploy_request_id.is_some() {
            // The deploy may or may not have been sent: the create step (or, for a deletion,
            // the confirmation) sends it again with the same request id, which Prism answers
            // with the same task.
            return Ok(Observed::Vm(VmObservation::DeployUnconfirmed, None));
        }

        let uid = self.machine.uid().unwrap_or_default();
        let snapshot = connection.inventory.snapshot(client).await?;
        if let Some(vm) = snapshot.vm_of_machine(&uid)
            && let Some(uuid) = vm.uuid()
        {
            let uuid = uuid.to_ascii_lowercase();
            tracing::info!(machine = %self.key, vm = %uuid, "found the Machine's VM by its identity marker; adopting it");
            let mut next = status;
            next.vm_uuid = Some(uuid.clone());
            self.write_provider_status(next).await?;
            let machine = self.machine.clone();
            self.shared()
                .event(
                    &machine,
                    false,
                    "Adopted",
                    format!("VM {uuid} carries this Machine's identity"),
                )
                .await;
            return Ok(Observed::Done(Action::await_change()));
        }
        Ok(Observed::Vm(VmObservation::Missing, None))
    }

    /// The shared listing looked at before a task is read, when enough Machines wait for one
    /// listing to serve them all (`None`: read the task now); what it means is
    /// [`listing_says`]'s decision.
    async fn listing_before_task_read(
        &mut self,
        connection: &Connection,
        status: &NutanixMachineProviderStatus,
        task: &PendingTask,
    ) -> Result<Option<Observed>, Error> {
        if self.deleting() {
            return Ok(None);
        }
        let settings = &self.shared().settings;
        let (poll, requeue) = (settings.poll_interval, settings.requeue_interval);
        let started = task.started.as_ref().map(|time| time.0);
        let age = started.map_or(Duration::MAX, |started| {
            Duration::try_from(Timestamp::now().duration_since(started)).unwrap_or_default()
        });
        let unnamed_deploy = task.operation == TaskOperation::Deploy && status.vm_uuid.is_none();
        if task_read_directly(age, requeue) {
            // An old deploy is read directly, unless the listing shows its VM by name already.
            if unnamed_deploy
                && let Some(listing) = connection
                    .listing_for_waiter(&self.name(), requeue * 2, poll)
                    .await?
            {
                return self
                    .deployed_by_name(connection, status, task, &listing)
                    .await;
            }
            return Ok(None);
        }
        let waiter = match (&status.vm_uuid, &task.operation) {
            (Some(uuid), _) => uuid.clone(),
            (None, TaskOperation::Deploy) => self.name(),
            (None, _) => return Ok(None),
        };
        let Some(listing) = connection
            .listing_for_waiter(&waiter, requeue * 2, poll)
            .await?
        else {
            return Ok(None);
        };
        let name = self.name();
        let listed = status.vm_uuid.as_deref().and_then(|uuid| listing.vm(uuid));
        let view = ListingView {
            listed: listed.map(Vm::state),
            powered_on: listed.is_some_and(|vm| {
                vm.status
                    .as_ref()
                    .and_then(|status| status.resources.as_ref())
                    .and_then(|resources| resources.power_state.as_ref())
                    == Some(&prism_client::v3::PowerState::On)
            }),
            named: listing
                .vms()
                .any(|vm| vm.spec.as_ref().is_some_and(|spec| spec.name == name)),
            after_start: listed_after(listing.listed_at(), started),
        };
        Ok(match listing_says(&task.operation, age, requeue, view) {
            ListingSays::Created => {
                tracing::debug!(machine = %self.key, task = %task.id, "create ended: the VM is listed");
                self.task_ended(connection, task, true);
                let mut next = status.clone();
                next.pending_task = None;
                self.write_provider_status(next).await?;
                Some(Observed::Done(Action::await_change()))
            }
            ListingSays::Running if task.operation.creates_vm() => {
                Some(Observed::Vm(VmObservation::Creating, None))
            }
            ListingSays::Running => Some(Observed::Done(Action::requeue(poll))),
            // A deploy whose VM the listing shows by name (created since the Machine, no other
            // Machine's marker) is recorded without reading the task and its subtask, which is
            // where a real deploy task names its VM. Should the deploy fail after all, the VM's
            // absence later sends the deploy again with the recorded request id.
            ListingSays::ReadTask if unnamed_deploy => {
                return self
                    .deployed_by_name(connection, status, task, &listing)
                    .await;
            }
            ListingSays::ReadTask => None,
        })
    }

    /// Records the VM of a template deploy that `listing` shows by name (created since the
    /// Machine, no other Machine's marker), without reading the deploy task and its subtask,
    /// where a real deploy task names its VM; `None` (read the task) otherwise. Should the
    /// deploy fail after all, the VM's absence later sends the deploy again with the recorded
    /// request id.
    async fn deployed_by_name(
        &mut self,
        connection: &Connection,
        status: &NutanixMachineProviderStatus,
        task: &PendingTask,
        listing: &InventorySnapshot,
    ) -> Result<Option<Observed>, Error> {
        let DeployedByName::One(uuid) = self.deployed_in(listing) else {
            return Ok(None);
        };
        tracing::debug!(machine = %self.key, task = %task.id, vm = %uuid, "deploy ended: its VM is listed by name");
        self.task_ended(connection, task, true);
        let mut next = status.clone();
        next.pending_task = None;
        next.vm_uuid = Some(uuid);
        self.write_provider_status(next).await?;
        Ok(Some(Observed::Done(Action::await_change())))
    }

    /// A template deploy succeeded without naming its VM: looks for it by name in a listing
    /// taken now ([`deployed_vm_by_name`]). The task and request id stay recorded until it is
    /// found; after [`DEPLOYED_VM_SEARCH`] the Machine fails (a deletion forgets the deploy with
    /// a warning) instead of deploying again.
    async fn find_deployed_vm(
        &mut self,
        connection: &Connection,
        mut status: NutanixMachineProviderStatus,
        task: &PendingTask,
    ) -> Result<Observed, Error> {
        let poll = self.shared().settings.poll_interval;
        let started = task.started.as_ref().map(|time| time.0);
        let found = self.deployed_vm_in_listing(connection).await?;
        let age = started.map_or(Duration::ZERO, |started| {
            Duration::try_from(Timestamp::now().duration_since(started)).unwrap_or_default()
        });
        match found {
            DeployedByName::One(uuid) => {
                tracing::info!(machine = %self.key, task = %task.id, vm = %uuid, "the deploy task names no VM; found it by name");
                self.task_ended(connection, task, true);
                status.pending_task = None;
                status.vm_uuid = Some(uuid);
                self.write_provider_status(status).await?;
                Ok(Observed::Done(Action::await_change()))
            }
            DeployedByName::NotFound | DeployedByName::Several(_) if age < DEPLOYED_VM_SEARCH => {
                tracing::info!(machine = %self.key, task = %task.id, ?found, "deploy succeeded; its VM is not identified yet");
                Ok(Observed::Done(Action::requeue(poll)))
            }
            DeployedByName::NotFound | DeployedByName::Several(_) => {
                let request = status.deploy_request_id.clone().unwrap_or_default();
                let candidates = match &found {
                    DeployedByName::Several(uuids) => {
                        format!("several VMs fit ({})", uuids.join(", "))
                    }
                    _ => "no VM fits".to_owned(),
                };
                let message = format!(
                    "template deploy task {} (request {request}) succeeded but names no VM, and {candidates} among the VMs named {} created since; find the deployed VM in Prism",
                    task.id,
                    self.name()
                );
                self.task_ended(connection, task, true);
                if self.deleting() {
                    return self
                        .forget_deploy(status, &request, message)
                        .await
                        .map(Observed::Done);
                }
                status.pending_task = None;
                let action = self.fail_with(None, message, status).await?;
                Ok(Observed::Done(action))
            }
        }
    }

    /// The VM the Machine's template deploy made, looked for by the Machine's name in a listing
    /// no older than the poll interval, among VMs created since the Machine was (a deploy
    /// sent again keeps the first one's VM, so the task's own start is no bound).
    async fn deployed_vm_in_listing(
        &self,
        connection: &Connection,
    ) -> Result<DeployedByName, Error> {
        let poll = self.shared().settings.poll_interval;
        let listing = connection
            .inventory
            .snapshot_within(connection.client(), poll)
            .await?;
        Ok(self.deployed_in(&listing))
    }

    /// The VM the Machine's template deploy made, in `listing` ([`deployed_vm_by_name`]).
    fn deployed_in(&self, listing: &InventorySnapshot) -> DeployedByName {
        let machine_created = self
            .machine
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|time| time.0);
        let name = self.name();
        let candidates: Vec<DeployCandidate> = listing
            .vms()
            .filter(|vm| vm.spec.as_ref().is_some_and(|spec| spec.name == name))
            .filter_map(|vm| {
                Some(DeployCandidate {
                    uuid: vm.uuid()?.to_owned(),
                    created: vm
                        .metadata
                        .creation_time
                        .as_deref()
                        .and_then(|time| time.parse().ok()),
                    identity: vm
                        .spec
                        .as_ref()
                        .and_then(|spec| spec.description.as_deref())
                        .and_then(identity_of),
                })
            })
            .collect();
        deployed_vm_by_name(&candidates, &self.identity(), machine_created)
    }

    /// Counts the task in the metrics and, when it succeeded, remembers how long it took (how
    /// soon the next one of its kind is first read).
    fn task_ended(&self, connection: &Connection, task: &PendingTask, succeeded: bool) {
        if let Some(started) = &task.started {
            let elapsed = Timestamp::now().duration_since(started.0);
            let elapsed = Duration::try_from(elapsed).unwrap_or_default();
            self.shared()
                .metrics
                .task_ended(task.operation.as_str(), succeeded, elapsed);
            if succeeded {
                connection.task_took(&task.operation, elapsed);
            }
        }
    }

    async fn task_failed(
        &mut self,
        connection: &Connection,
        mut status: NutanixMachineProviderStatus,
        task: &PendingTask,
        class: FailureClass,
        message: String,
    ) -> Result<Observed, Error> {
        tracing::warn!(machine = %self.key, task = %task.id, operation = %task.operation, %message, "Prism task failed");
        // The task is over whatever comes next (a deploy's request id goes with it).
        after_transient_failure(&mut status);
        if self.deleting() {
            // Nothing fails a Machine being deleted: look its VM up again without the task.
            self.write_provider_status(status).await?;
            return Ok(Observed::Done(Action::await_change()));
        }
        if class == FailureClass::Invalid {
            let action = self
                .fail_with(
                    Some(INVALID_CONFIGURATION),
                    format!("Prism refused the VM: {message}"),
                    status,
                )
                .await?;
            return Ok(Observed::Done(action));
        }
        let creates = task.operation.creates_vm();
        if creates && let Some(uuid) = status.vm_uuid.clone() {
            match connection.get_vm(&uuid).await? {
                // Confirmed absent: the retry takes a new UUID (recorded before it is used).
                None => {
                    status.vm_uuid = None;
                    status.pending_follow_up = None;
                }
                Some(vm) => {
                    if let VmState::Error(vm_error) = VmState::of(&vm) {
                        let action = self
                            .fail_with(
                                None,
                                format!("creating VM {uuid} failed ({message}) and left it in state ERROR: {vm_error}"),
                                status,
                            )
                            .await?;
                        return Ok(Observed::Done(action));
                    }
                    // The VM exists (a failed power-on, for instance): nothing would power it
                    // on, so an update asks for power ON again (with backoff while it fails).
                    status.pending_follow_up = Some(follow_up_value(&reasserted_power(
                        pending_follow_up(&status),
                        &vm,
                    )));
                }
            }
        }
        let (condition, reason, kind) = if creates {
            (
                conditions::MACHINE_CREATION,
                conditions::CREATION_FAILED,
                super::machine::FailureKind::Create,
            )
        } else {
            (
                conditions::MACHINE_UPDATE,
                conditions::UPDATE_FAILED,
                super::machine::FailureKind::Update,
            )
        };
        status.set_condition(provider_condition(
            condition,
            false,
            reason,
            message.clone(),
            &now(),
        ));
        self.write_provider_status(status).await?;
        self.count_failure(kind, "TaskFailed");
        let machine = self.machine.clone();
        let event = if creates {
            "FailedCreate"
        } else {
            "FailedUpdate"
        };
        self.shared()
            .event(&machine, true, event, message.clone())
            .await;
        Err(Error::CreateRetry(message))
    }

    async fn admin_password(
        &self,
        config: &NutanixMachineProviderConfig,
    ) -> Result<Option<AdminPassword>, String> {
        match admin_password_source(&self.machine, config) {
            AdminPasswordSource::NotNeeded => Ok(None),
            AdminPasswordSource::Secret { name, field } => {
                let namespace = self.machine.namespace().unwrap_or_default();
                let bytes = secret_value(
                    &self.shared().secrets,
                    &namespace,
                    &name,
                    ADMIN_PASSWORD_KEY,
                )
                .map_err(|problem| format!("{field}: {problem}"))?;
                password_of(&bytes)
                    .map(Some)
                    .map_err(|problem| format!("{field}: {problem}"))
            }
            AdminPasswordSource::Generated => self.generated_admin_password().await.map(Some),
        }
    }

    /// The password generated once for this Machine's VM, kept in its own Secret
    /// ([`generated_password_secret`]), which is created (owned by the Machine) the first time.
    async fn generated_admin_password(&self) -> Result<AdminPassword, String> {
        let namespace = self.machine.namespace().unwrap_or_default();
        let name = generated_password_secret(&self.name());
        let uid = self.machine.uid().unwrap_or_default();
        let what = format!("Secret {namespace}/{name} (the generated Administrator password)");
        if let Some(secret) = self
            .shared()
            .secrets
            .get(&ObjectRef::new(&name).within(&namespace))
        {
            let owned = secret
                .metadata
                .owner_references
                .iter()
                .flatten()
                .any(|owner| owner.uid == uid);
            if !owned {
                return Err(format!(
                    "{what} exists but is not owned by this Machine; delete or rename it"
                ));
            }
            let bytes = secret
                .data
                .as_ref()
                .and_then(|data| data.get(ADMIN_PASSWORD_KEY))
                .map(|bytes| bytes.0.clone())
                .ok_or_else(|| format!("{what} has no key {ADMIN_PASSWORD_KEY}"))?;
            return password_of(&bytes).map_err(|problem| format!("{what}: {problem}"));
        }
        let password = random_admin_password();
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.clone()),
                owner_references: Some(vec![OwnerReference {
                    api_version: Machine::api_version(&()).into_owned(),
                    kind: Machine::kind(&()).into_owned(),
                    name: self.name(),
                    uid,
                    ..OwnerReference::default()
                }]),
                ..ObjectMeta::default()
            },
            data: Some(
                [(
                    ADMIN_PASSWORD_KEY.to_owned(),
                    ByteString(password.expose().as_bytes().to_vec()),
                )]
                .into(),
            ),
            type_: Some("Opaque".to_owned()),
            ..Secret::default()
        };
        let api: Api<Secret> = Api::namespaced(self.shared().client.clone(), &namespace);
        match api.create(&PostParams::default(), &secret).await {
            Ok(_) => {
                tracing::info!(machine = %self.key, secret = %name, "generated the VM's Administrator password and stored it in a Secret");
                Ok(password)
            }
            // Made by an earlier attempt, not yet in the watch cache: use it once it is there.
            Err(kube::Error::Api(status)) if status.code == 409 => {
                Err(format!("waiting for {what} to reach the cache"))
            }
            Err(error) => Err(format!("cannot create {what}: {error}")),
        }
    }

    /// What a create needs (the connection and the plan), or why it cannot be made now.
    async fn prepare(&mut self) -> Result<Prepared, Error> {
        if let Some(errors) = invalid_in_itself(&self.machine) {
            return Ok(Prepared::Invalid {
                reason: Some(INVALID_CONFIGURATION),
                message: errors.to_string(),
            });
        }
        let Environment {
            connection,
            infrastructure,
        } = environment(self.shared(), &self.machine).await?;
        let failure_domains = infrastructure
            .map(|info| info.failure_domains)
            .unwrap_or_default();
        let namespace = self.machine.namespace().unwrap_or_default();
        let config = self.machine.provider_config().and_then(Result::ok);
        let user_data = match config
            .as_ref()
            .and_then(|c| c.user_data_secret.as_ref())
            .filter(|s| !s.name.is_empty())
        {
            Some(secret) => {
                match secret_value(
                    &self.shared().secrets,
                    &namespace,
                    &secret.name,
                    USER_DATA_KEY,
                ) {
                    Ok(bytes) => Some(UserData::new(bytes)),
                    Err(problem) => {
                        return Ok(Prepared::Unresolved(format!(
                            "providerSpec.userDataSecret: {problem}"
                        )));
                    }
                }
            }
            None => None,
        };
        let password = match config.as_ref() {
            Some(config) => match self.admin_password(config).await {
                Ok(password) => password,
                Err(message) => return Ok(Prepared::Unresolved(message)),
            },
            None => None,
        };
        let plan = resolve_and_plan(
            &connection,
            &self.machine,
            &failure_domains,
            user_data.as_ref(),
            password.as_ref(),
        )
        .await;
        Ok(match plan {
            Ok(plan) => Prepared::Ready {
                connection,
                plan: Box::new(plan),
            },
            Err(errors) => match after_validation(&errors) {
                Step::Fail { reason, message } => Prepared::Invalid { reason, message },
                _ => Prepared::Unresolved(errors.to_string()),
            },
        })
    }

    /// Validates and plans the VM, records what a retry needs, and sends the create, clone or
    /// deploy.
    pub(super) async fn create(&mut self) -> Result<Action, Error> {
        if let Some(wait) = self.shared().backoff.remaining(&self.key) {
            return Ok(Action::requeue(wait));
        }
        let (connection, plan) = match self.prepare().await? {
            Prepared::Ready { connection, plan } => (connection, plan),
            Prepared::Invalid { reason, message } => return self.fail(reason, message).await,
            Prepared::Unresolved(message) => return self.retry_create(message).await,
        };
        for warning in &plan.warnings {
            tracing::info!(machine = %self.key, %warning, "plan warning");
        }

        let mut status = self.provider_status();
        if is_template(&plan) {
            let request = build_request(&plan, "");
            let request_id = match status.deploy_request_id.clone() {
                Some(id) => id,
                None => {
                    let id = uuid::Uuid::new_v4().to_string();
                    status.deploy_request_id = Some(id.clone());
                    status.pending_follow_up = request.follow_up().map(follow_up_value);
                    self.record_creation_started(&mut status, "deploying the template")
                        .await?;
                    id
                }
            };
            return self
                .send(&connection, &request, Some(&request_id), status)
                .await;
        }
        let uuid = match status.vm_uuid.clone() {
            Some(uuid) => uuid,
            None => {
                let uuid = connection.uuids.take(connection.client()).await?;
                status.vm_uuid = Some(uuid.clone());
                status.pending_follow_up =
                    build_request(&plan, &uuid).follow_up().map(follow_up_value);
                self.record_creation_started(&mut status, &format!("creating VM {uuid}"))
                    .await?;
                uuid
            }
        };
        let request = build_request(&plan, &uuid);
        self.send(&connection, &request, None, status).await
    }

    /// Deleting a Machine whose template deploy is unconfirmed (its request id recorded, its
    /// task not: the answer was lost, or the controller stopped before recording it): sends the
    /// deploy again with the same request id. Prism answers a repeat with the first deploy's
    /// task, whose VM the deletion then finds and deletes; a deploy that never got through is
    /// made now and deleted the same way. Without this, the deletion would find no VM and
    /// finish, leaving the deployed VM behind.
    ///
    /// When the deploy cannot be planned any more, the request is forgotten (with a warning
    /// naming it) so that the deletion can finish: at once for a providerSpec that can never
    /// deploy, after [`DEPLOY_CONFIRM_PATIENCE`] of deletion for a lookup that keeps failing
    /// (a template or Secret deleted since).
    pub(super) async fn confirm_deploy(&mut self) -> Result<Action, Error> {
        let mut status = self.provider_status();
        let Some(request_id) = status.deploy_request_id.clone() else {
            return Ok(Action::requeue(Duration::ZERO));
        };
        let (connection, plan) = match self.prepare().await? {
            Prepared::Ready { connection, plan } if is_template(&plan) => (connection, plan),
            Prepared::Ready { .. } => {
                let why = "the providerSpec no longer deploys a template".to_owned();
                return self.forget_deploy(status, &request_id, why).await;
            }
            Prepared::Invalid { message, .. } => {
                return self.forget_deploy(status, &request_id, message).await;
            }
            Prepared::Unresolved(message) => {
                if self.deleting_for() >= DEPLOY_CONFIRM_PATIENCE {
                    return self.forget_deploy(status, &request_id, message).await;
                }
                let message =
                    format!("cannot confirm template deploy request {request_id}: {message}");
                let machine = self.machine.clone();
                self.shared()
                    .event(&machine, true, "FailedDelete", message.clone())
                    .await;
                return Err(Error::DeployUnconfirmed(message));
            }
        };
        let request = build_request(&plan, "");
        match connection.send_create(&request, Some(&request_id)).await {
            Ok(sent) => {
                if let Some(task) = sent.task {
                    tracing::info!(machine = %self.key, %request_id, %task, "template deploy sent again to find its VM before deleting it");
                    status.pending_task = Some(PendingTask {
                        id: task,
                        operation: TaskOperation::Deploy,
                        started: Some(now()),
                        source_vm: None,
                    });
                    self.write_provider_status(status).await?;
                }
                Ok(Action::requeue(self.shared().settings.poll_interval))
            }
            Err(error) => match classify_create_error(&error, false) {
                CreateCallOutcome::Invalid(message) | CreateCallOutcome::SourceMissing(message) => {
                    self.forget_deploy(status, &request_id, message).await
                }
                _ => Err(error.into()),
            },
        }
    }

    /// How long the Machine has been deleting (zero when not, or not known).
    fn deleting_for(&self) -> Duration {
        self.machine
            .metadata
            .deletion_timestamp
            .as_ref()
            .and_then(|since| Duration::try_from(Timestamp::now().duration_since(since.0)).ok())
            .unwrap_or_default()
    }

    /// Gives up confirming a template deploy: the deletion goes on as if nothing was deployed,
    /// and a warning names the request and the VM name to look for.
    async fn forget_deploy(
        &mut self,
        mut status: NutanixMachineProviderStatus,
        request_id: &str,
        why: String,
    ) -> Result<Action, Error> {
        let message = format!(
            "template deploy request {request_id} cannot be confirmed ({why}); if it made a VM \
             named {}, delete that VM in Prism",
            self.name()
        );
        tracing::warn!(machine = %self.key, "{message}");
        status.deploy_request_id = None;
        status.pending_follow_up = None;
        self.write_provider_status(status).await?;
        let machine = self.machine.clone();
        self.shared()
            .event(&machine, true, "DeployUnconfirmed", message)
            .await;
        Ok(Action::await_change())
    }

    /// Records the reserved UUID or request id (and the follow-up) before anything is sent.
    async fn record_creation_started(
        &mut self,
        status: &mut NutanixMachineProviderStatus,
        message: &str,
    ) -> Result<(), Error> {
        status.set_condition(provider_condition(
            conditions::MACHINE_CREATION,
            false,
            conditions::CREATION_IN_PROGRESS,
            message,
            &now(),
        ));
        self.write_provider_status(status.clone()).await?;
        Ok(())
    }

    async fn send(
        &mut self,
        connection: &Arc<Connection>,
        request: &VmRequest,
        deploy_request_id: Option<&str>,
        mut status: NutanixMachineProviderStatus,
    ) -> Result<Action, Error> {
        let poll = self.shared().settings.poll_interval;
        let operation = operation_of(request);
        match connection.send_create(request, deploy_request_id).await {
            Ok(sent) => {
                let what = match &status.vm_uuid {
                    Some(uuid) => format!("VM {uuid}"),
                    None => "VM from the template".to_owned(),
                };
                if let Some(task) = sent.task {
                    status.pending_task = Some(PendingTask {
                        id: task,
                        operation: operation.clone(),
                        started: Some(now()),
                        source_vm: match request {
                            VmRequest::Clone { source_vm, .. } => Some(source_vm.clone()),
                            _ => None,
                        },
                    });
                    self.write_provider_status(status).await?;
                }
                tracing::info!(machine = %self.key, %operation, "create sent: {what}");
                let machine = self.machine.clone();
                self.shared()
                    .event(
                        &machine,
                        false,
                        "Create",
                        format!("{operation} requested for {what}"),
                    )
                    .await;
                Ok(Action::requeue(poll))
            }
            Err(error) => match classify_create_error(&error, deploy_request_id.is_none()) {
                CreateCallOutcome::Conflict => {
                    let Some(uuid) = status.vm_uuid.clone() else {
                        return Err(error.into());
                    };
                    if connection.get_vm(&uuid).await?.is_some() {
                        tracing::info!(machine = %self.key, vm = %uuid, "the VM exists already: an earlier create got through");
                        return Ok(Action::requeue(poll));
                    }
                    // No VM has the UUID: the 409 is a conflict of Prism's own; retrying at
                    // once would meet it again.
                    self.count_failure(super::machine::FailureKind::Create, "PrismConflict");
                    let message = format!(
                        "Prism refused the create of VM {uuid} for a conflict, and no VM has that UUID; retrying: {error}"
                    );
                    let machine = self.machine.clone();
                    self.shared()
                        .event(&machine, true, "FailedCreate", message.clone())
                        .await;
                    Err(Error::CreateRetry(message))
                }
                CreateCallOutcome::ReservationRejected => {
                    let Some(uuid) = status.vm_uuid.clone() else {
                        return Err(error.into());
                    };
                    if connection.get_vm(&uuid).await?.is_none() {
                        tracing::info!(machine = %self.key, vm = %uuid, "the UUID reservation expired; taking a new one");
                        status.vm_uuid = None;
                        status.pending_follow_up = None;
                        self.write_provider_status(status).await?;
                    }
                    Ok(Action::requeue(poll))
                }
                CreateCallOutcome::Invalid(message) => {
                    self.fail(
                        Some(INVALID_CONFIGURATION),
                        format!("Prism refused the VM: {message}"),
                    )
                    .await
                }
                CreateCallOutcome::SourceMissing(message) => {
                    connection.lookups.invalidate();
                    self.retry_create(message).await
                }
                CreateCallOutcome::Retry => {
                    self.count_failure(super::machine::FailureKind::Create, "PrismError");
                    // The event is the reconcile wrapper's, with the fix where the cause tells.
                    Err(error.into())
                }
            },
        }
    }

    /// Applies the pending follow-up of a clone or deploy; `None` when there is none to apply
    /// now.
    async fn follow_up(
        &mut self,
        connection: &Connection,
        vm: &Vm,
    ) -> Result<Option<Action>, Error> {
        let uuid = vm.uuid().unwrap_or_default();
        let mut status = self.provider_status();
        if status.pending_follow_up.is_none() || status.pending_task.is_some() {
            return Ok(None);
        }
        let poll = self.shared().settings.poll_interval;
        let Some(update) = pending_follow_up(&status) else {
            status.pending_follow_up = None;
            self.write_provider_status(status).await?;
            return Ok(Some(Action::await_change()));
        };
        match connection
            .apply_follow_up(uuid, &update, Some(vm.clone()))
            .await
        {
            Ok(FollowUpOutcome::Sent { task: Some(task) }) => {
                status.pending_task = Some(PendingTask {
                    id: task,
                    operation: TaskOperation::FollowUp,
                    started: Some(now()),
                    source_vm: None,
                });
                self.write_provider_status(status).await?;
                Ok(Some(Action::requeue(poll)))
            }
            Ok(FollowUpOutcome::Sent { task: None } | FollowUpOutcome::NothingLeft) => {
                status.pending_follow_up = None;
                self.write_provider_status(status).await?;
                Ok(Some(Action::await_change()))
            }
            Err(FollowUpFailure::Prism(error)) if error.is_conflict() => {
                tracing::info!(machine = %self.key, "the VM changed under the follow-up update; reading it again");
                connection.forget_read(uuid);
                Ok(Some(Action::requeue(Duration::from_secs(1))))
            }
            Err(FollowUpFailure::Prism(error)) => match classify_create_error(&error, false) {
                CreateCallOutcome::Invalid(message) => self
                    .fail(
                        Some(INVALID_CONFIGURATION),
                        format!("Prism refused the follow-up update: {message}"),
                    )
                    .await
                    .map(Some),
                _ => Err(error.into()),
            },
            Err(failure @ (FollowUpFailure::Impossible(..) | FollowUpFailure::NoSpec(_))) => self
                .fail(Some(INVALID_CONFIGURATION), failure.to_string())
                .await
                .map(Some),
        }
    }

    /// Updates the Machine from its VM (providerID, addresses, labels, annotations, provider
    /// status) and sets `phase`; nothing changes in Prism except a pending follow-up.
    pub(super) async fn update_from_vm(
        &mut self,
        phase: &'static str,
        vm: Vm,
    ) -> Result<Action, Error> {
        let Environment { connection, .. } = environment(self.shared(), &self.machine).await?;
        let uuid = vm.uuid().unwrap_or_default().to_ascii_lowercase();
        if let Some(action) = self.follow_up(&connection, &vm).await? {
            return Ok(action);
        }
        let settings = &self.shared().settings;
        let nics = nics_of(&vm);
        let subnet_order: Vec<String> = vm
            .spec
            .iter()
            .flat_map(|spec| &spec.resources.nic_list)
            .filter_map(|nic| nic.subnet_reference.as_ref().map(|r| r.uuid.clone()))
            .collect();
        let previous = self
            .machine
            .status
            .as_ref()
            .map(|s| s.addresses.clone())
            .unwrap_or_default();
        let name = self.name();
        let primary_cidr = match subnet_order.first() {
            Some(primary) => match connection
                .lookups
                .subnet_cidr(connection.client(), primary)
                .await
            {
                Ok(cidr) => cidr,
                Err(error) => {
                    tracing::warn!(machine = %self.key, %error, "cannot read the primary subnet's CIDR; addresses ordered without it");
                    None
                }
            },
            None => None,
        };
        let networks = self.shared().networks.get().await?;
        // `--excluded-address-cidrs` overrides the cluster's own networks.
        let excluded = if settings.excluded_cidrs.is_empty() {
            &networks.excluded
        } else {
            &settings.excluded_cidrs
        };
        let addresses = machine_addresses(&AddressInput {
            machine_name: &name,
            nics: &nics,
            subnet_order: &subnet_order,
            primary_cidr,
            excluded,
            ipv6_primary: networks.ipv6_primary,
            previous: &previous,
        });
        let region = match connection
            .lookups
            .prism_central_name(connection.client())
            .await
        {
            Ok(region) => region,
            Err(error) => {
                tracing::warn!(machine = %self.key, %error, "cannot read the Prism Central name for the region label");
                None
            }
        };
        let labels = vm_labels(&vm, region.as_deref());
        let annotations = vm_annotations(&vm);
        let provider_id = provider_id(&uuid);

        let mut status = self.provider_status();
        let state = vm
            .state()
            .map(|s| s.as_str().to_owned())
            .unwrap_or_default();
        let power = vm
            .status
            .as_ref()
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| r.power_state.as_ref())
            .map(|p| p.as_str().to_owned())
            .unwrap_or_default();
        let ready = state == "COMPLETE" && power == "ON";
        status.set_condition(provider_condition(
            conditions::MACHINE_CREATION,
            true,
            conditions::CREATION_SUCCEEDED,
            "",
            &now(),
        ));
        status.set_condition(provider_condition(
            conditions::MACHINE_UPDATE,
            true,
            conditions::UPDATE_SUCCEEDED,
            "",
            &now(),
        ));
        status.set_condition(provider_condition(
            conditions::MACHINE_INSTANCE_READY,
            ready,
            if ready {
                conditions::INSTANCE_READY
            } else {
                conditions::INSTANCE_NOT_READY
            },
            format!("VM state {state}, power {power}"),
            &now(),
        ));
        let metadata_changed = self
            .patch_metadata(&labels, &annotations, Some(&provider_id))
            .await?;
        let status_changed = self
            .patch_status(StatusUpdate {
                phase: Some(phase),
                addresses: Some(addresses),
                provider_status: Some(status),
                conditions: vec![machine_condition(
                    conditions::INSTANCE_EXISTS,
                    true,
                    None,
                    None,
                    &now(),
                )],
                ..StatusUpdate::default()
            })
            .await?;
        if metadata_changed || status_changed {
            let machine = self.machine.clone();
            self.shared()
                .event(
                    &machine,
                    false,
                    "Update",
                    format!("Updated Machine {name} from VM {uuid}"),
                )
                .await;
        }
        if phase == phase::RUNNING
            && let Some(node) = self
                .machine
                .status
                .as_ref()
                .and_then(|s| s.node_ref.as_ref())
                .and_then(|r| r.name.clone())
        {
            let machine = self.machine.clone();
            ensure_node_provider_id(
                &self.shared().client,
                &self.context.provider_ids,
                &machine,
                &node,
                &provider_id,
            )
            .await?;
        }
        self.shared().backoff.reset(&self.key);
        let wait = Step::UpdateFromVm { phase }
            .requeue_after(&intervals(self.shared()))
            .unwrap_or(self.shared().settings.requeue_interval);
        Ok(Action::requeue(wait))
    }
}
