//! The create protocol's decisions: how Prism's answers move a Machine's provisioning record
//! (`providerStatus.vmUUID`, `deployRequestId`, `pendingTask`, `pendingFollowUp`) forward, so
//! that one Machine never gets two VMs, whatever fails in between.
//!
//! The protocol itself (what the actuator sends, in which order, and why each step is safe) is
//! described in `crate::actuator`'s module documentation. This module holds the parts that are
//! pure decisions: what a task read means, how a failed task or a refused create is classified,
//! and the follow-up update kept on the Machine.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use prism_types::v3::EntityState;
use prism_types::{Error, TaskEntity, TaskFailure, TaskProgress};

use crate::api::{NutanixMachineProviderStatus, PendingTask, TaskOperation};
use crate::vm::identity::MachineIdentity;
use crate::vm::request::FollowUpUpdate;

/// Whether a failure can heal by itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureClass {
    /// The request itself is wrong (an invalid configuration Prism refused): fail the Machine
    /// with reason `InvalidConfiguration`.
    Invalid,
    /// Capacity, a Prism hiccup, or a cause we do not recognise: retry with backoff.
    Transient,
}

/// What a Prism error identifier (a v3 `error_code` or `message_list[].reason`, a v4
/// `errorMessages[].code` or `errorGroup`) says about a failed task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Known {
    /// The request can never work as sent.
    Invalid,
    /// AHV refuses Secure Boot with guest customization (its CD-ROM is IDE): invalid, with
    /// its own explanation.
    SecureBootCustomization,
    /// Prism is busy or was raced: retry.
    Transient,
}

/// The identifiers whose meaning is established, each from the source that shows it.
const KNOWN_IDENTIFIERS: &[(&str, Known)] = &[
    // nutanix/nutanix.ansible#876, nutanix/terraform-provider-nutanix#908: the failed task of a
    // Secure Boot VM with guest customization.
    ("VMM-30102", Known::SecureBootCustomization),
    ("VM_INVALID_ARGUMENT", Known::Invalid),
    // The v3 reason of a request Prism refuses (prism-go-client v3/swagger.json error shape;
    // terraform-provider-nutanix#36).
    ("INVALID_REQUEST", Known::Invalid),
    ("INVALID_ARGUMENT", Known::Invalid),
    // gomorpheus/morpheus-nutanix-prism-plugin isApiRetryRequired: an edit conflict to retry.
    ("CONCURRENT_REQUESTS_NOT_ALLOWED", Known::Transient),
    // prism-go-client converged/v4/errors.go: rate limiting.
    ("RATE_LIMIT_EXCEEDED", Known::Transient),
    ("RATE_LIMIT_ERROR", Known::Transient),
    // terraform-provider-nutanix nutanix/services/vmmv2/helper.go: an ETag mismatch, retried.
    ("VMM-30303", Known::Transient),
    ("VM_ETAG_MISMATCH", Known::Transient),
];

/// Last resort, for errors that carry no identifier above: words in a task error that say the
/// request can never work as sent. Real wording is not established from any source; unknown
/// text is retried (see [`classify_text`]).
const INVALID_MARKERS: &[&str] = &[
    "invalid",
    "not supported",
    "unsupported",
    "must be",
    "must not",
    "not allowed",
    "cannot be",
    "malformed",
    "schema",
];

/// Last resort too: words that say the problem is capacity or Prism itself, which may pass;
/// they win over [`INVALID_MARKERS`] ("invalid state: host busy" is still transient).
const TRANSIENT_MARKERS: &[&str] = &[
    "exhausted",
    "insufficient",
    "not enough",
    "capacity",
    "timeout",
    "timed out",
    "unavailable",
    "busy",
    "try again",
    "retry",
    "internal error",
    "concurrent",
];

fn classify_text<'a>(texts: impl Iterator<Item = &'a str>) -> FailureClass {
    let texts: Vec<String> = texts.map(str::to_ascii_lowercase).collect();
    let any = |markers: &[&str]| {
        texts
            .iter()
            .any(|text| markers.iter().any(|marker| text.contains(marker)))
    };
    if any(TRANSIENT_MARKERS) {
        FailureClass::Transient
    } else if any(INVALID_MARKERS) {
        FailureClass::Invalid
    } else {
        // Upstream providers that failed Machines on unknown errors killed them for a timeout
        // (CAPX #701): an unknown cause is retried.
        FailureClass::Transient
    }
}

/// The identifiers of one failure: its error code and its messages' reasons, codes and groups.
fn identifiers<'a>(
    error_code: Option<&'a String>,
    messages: &'a prism_types::PrismMessages,
) -> impl Iterator<Item = &'a str> {
    error_code
        .into_iter()
        .chain(messages.0.iter().flat_map(|message| {
            message
                .reason
                .iter()
                .chain(&message.code)
                .chain(&message.error_group)
        }))
        .map(String::as_str)
}

/// The strongest meaning among `ids`: Secure Boot first, then invalid, then transient.
fn known(ids: impl Iterator<Item = impl AsRef<str>>) -> Option<Known> {
    let found: Vec<Known> = ids
        .filter_map(|id| {
            KNOWN_IDENTIFIERS
                .iter()
                .find(|(known, _)| *known == id.as_ref())
                .map(|(_, meaning)| *meaning)
        })
        .collect();
    [
        Known::SecureBootCustomization,
        Known::Invalid,
        Known::Transient,
    ]
    .into_iter()
    .find(|meaning| found.contains(meaning))
}

/// What the failure's identifiers say: its failed subtasks' when they have any (the parent's
/// error is then usually a generic "Internal Error", CAPX #783), else its own.
fn known_of(failure: &TaskFailure) -> Option<Known> {
    let subtasks: Vec<&str> = failure
        .subtask_errors
        .iter()
        .flat_map(|subtask| identifiers(subtask.error_code.as_ref(), &subtask.messages))
        .collect();
    known(subtasks.into_iter())
        .or_else(|| known(identifiers(failure.error_code.as_ref(), &failure.messages)))
}

/// Whether a failed create, clone, deploy or follow-up task fails the Machine or is retried:
/// by Prism's error identifiers where one is known ([`KNOWN_IDENTIFIERS`]), else, as a last
/// resort, by the words of its errors. When failed subtasks explain the failure, they decide.
pub fn classify_task_failure(failure: &TaskFailure) -> FailureClass {
    match known_of(failure) {
        Some(Known::Invalid | Known::SecureBootCustomization) => return FailureClass::Invalid,
        Some(Known::Transient) => return FailureClass::Transient,
        None => {}
    }
    let subtasks: Vec<&str> = failure
        .subtask_errors
        .iter()
        .flat_map(|subtask| subtask.error_code.iter().chain(&subtask.error_detail))
        .map(String::as_str)
        .collect();
    if !subtasks.is_empty() {
        return classify_text(subtasks.into_iter());
    }
    let texts = failure
        .error_code
        .iter()
        .chain(&failure.error_detail)
        .chain(&failure.progress_message)
        .map(String::as_str);
    classify_text(texts)
}

/// Why AHV refused the VM and what to do, when the failure says (VMM-30102).
pub const SECURE_BOOT_CUSTOMIZATION_REFUSED: &str = "AHV refuses Secure Boot with guest \
     customization (VMM-30102: the customization CD-ROM is IDE, which Secure Boot forbids); use \
     bootType UEFI, or Secure Boot only with a template or source VM whose guest needs no \
     customization";

/// The explanation and fix a failure gives, if any: VMM-30102, or any refusal of a VM that
/// asks for Secure Boot with guest customization
/// ([`crate::vm::spec::secure_boot_customized`]; a v3 task's
/// rendering of VMM-30102 is not established from any source, only that it is a refusal).
pub fn failure_advice(failure: &TaskFailure, secure_boot_customized: bool) -> Option<&'static str> {
    match known_of(failure) {
        Some(Known::SecureBootCustomization) => Some(SECURE_BOOT_CUSTOMIZATION_REFUSED),
        Some(Known::Invalid) if secure_boot_customized => Some(SECURE_BOOT_CUSTOMIZATION_REFUSED),
        _ => None,
    }
}

/// What a task read is interpreted against: the Machine's recorded VM UUID, and whether its
/// VM asks for Secure Boot with guest customization.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskContext<'a> {
    pub recorded_vm: Option<&'a str>,
    pub secure_boot_customized: bool,
}

/// What an error from `POST /vms`, a clone or a template deploy means.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CreateCallOutcome {
    /// 409 to a request carrying the reserved UUID: either a VM with that UUID exists already
    /// (an earlier attempt got through) or Prism refused for a conflict of its own (another
    /// operation on the same source VM, for instance). Only a GET of the UUID tells which.
    Conflict,
    /// 400/422 naming `metadata.uuid`: the reservation expired or was never made. Confirm that
    /// no VM has the UUID, then take a new one (recorded before it is used).
    ReservationRejected,
    /// Prism refused the request as invalid: fail the Machine with this message.
    Invalid(String),
    /// The source (image, template, source VM) or the cluster is gone: drop the cached lookups
    /// and retry (it may come back, or the Machine's spec may be fixed).
    SourceMissing(String),
    /// 429, 5xx, transport, credentials, an undecodable answer: the create may or may not have
    /// happened. Retry with backoff: the recorded UUID or request id makes the repeat safe.
    Retry,
}

/// Classifies an error of a create call. `reserved_uuid` says whether the request carried a
/// reserved `metadata.uuid` (create and clone), which a 409 or a 422 can be about.
pub fn classify_create_error(error: &Error, reserved_uuid: bool) -> CreateCallOutcome {
    match error {
        Error::Conflict { .. } if reserved_uuid => CreateCallOutcome::Conflict,
        Error::Invalid { messages, .. } => {
            let about_uuid = messages.0.iter().any(|message| {
                let text = message.to_string().to_ascii_lowercase();
                text.contains("metadata.uuid") || text.contains("idempotence")
            });
            if reserved_uuid && about_uuid {
                CreateCallOutcome::ReservationRejected
            } else {
                CreateCallOutcome::Invalid(error.to_string())
            }
        }
        Error::NotFound { .. } => CreateCallOutcome::SourceMissing(error.to_string()),
        _ => CreateCallOutcome::Retry,
    }
}

/// What reading a [`PendingTask`] once means.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TaskReading {
    /// Not done: look again after the task poll interval.
    Running { status: String },
    /// The create, clone or deploy succeeded; clear the task. `vm_uuid` is the VM the task
    /// names (lower case), to be recorded: a deploy's, or a create's or clone's when Prism gave
    /// it a UUID other than the reserved one; `None` when the task names none, and the recorded
    /// UUID stands.
    Created { vm_uuid: Option<String> },
    /// A template deploy succeeded, but neither the task nor the subtasks read with it name a
    /// VM: keep the task and the request id (deploying again would make a second VM) and look
    /// for the VM by name ([`deployed_vm_by_name`]).
    DeployedVmUnnamed,
    /// The follow-up update succeeded: clear the task and the pending follow-up.
    FollowUpApplied,
    /// The task failed.
    Failed {
        class: FailureClass,
        /// Prism's error, its subtasks' errors included.
        message: String,
    },
}

/// Entity kinds (v3) and relations (v4) that name a VM.
pub fn is_vm_entity(kind: &str) -> bool {
    kind == "vm" || kind.ends_with(":vm")
}

/// The VM a succeeded create, clone or deploy made, among the entities its task names: the
/// recorded one if named, else the only VM named that is not the clone's source. Prism may
/// name the source VM of a clone beside the new one; several candidates name nobody.
fn created_vm(
    entities: &[TaskEntity],
    recorded: Option<&str>,
    source_vm: Option<&str>,
) -> Option<String> {
    let same = |a: &str, b: &str| a.eq_ignore_ascii_case(b);
    let mut candidates = entities
        .iter()
        .filter(|entity| is_vm_entity(&entity.kind))
        .filter(|entity| source_vm.is_none_or(|source| !same(&entity.uuid, source)))
        .map(|entity| entity.uuid.to_ascii_lowercase());
    let first = candidates.next()?;
    let rest: Vec<String> = candidates.collect();
    if let Some(recorded) = recorded
        && (same(&first, recorded) || rest.iter().any(|uuid| same(uuid, recorded)))
    {
        return Some(recorded.to_ascii_lowercase());
    }
    rest.iter().all(|uuid| *uuid == first).then_some(first)
}

/// Interprets one read of `task`.
pub fn read_task(
    task: &PendingTask,
    progress: &TaskProgress,
    context: TaskContext<'_>,
) -> TaskReading {
    match progress {
        TaskProgress::Running { status, .. } => TaskReading::Running {
            status: status.clone(),
        },
        TaskProgress::Succeeded { entities, .. } => match task.operation {
            TaskOperation::FollowUp => TaskReading::FollowUpApplied,
            TaskOperation::Deploy => match created_vm(entities, None, None) {
                Some(vm) => TaskReading::Created { vm_uuid: Some(vm) },
                None => TaskReading::DeployedVmUnnamed,
            },
            TaskOperation::Create | TaskOperation::Clone | TaskOperation::Unknown(_) => {
                TaskReading::Created {
                    vm_uuid: created_vm(entities, context.recorded_vm, task.source_vm.as_deref()),
                }
            }
        },
        TaskProgress::Failed(failure) => TaskReading::Failed {
            class: classify_task_failure(failure),
            message: match failure_advice(failure, context.secure_boot_customized) {
                Some(advice) => format!("{advice}: {failure}"),
                None => failure.to_string(),
            },
        },
    }
}

/// A listed VM that may be the one a template deploy made, for [`deployed_vm_by_name`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeployCandidate {
    pub uuid: String,
    /// `metadata.creation_time`.
    pub created: Option<Timestamp>,
    /// The identity marker in its description, if any.
    pub identity: Option<MachineIdentity>,
    /// `metadata.categories`.
    pub categories: BTreeMap<String, String>,
}

/// What looking for a deployed VM by name found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeployedByName {
    /// Exactly one VM fits: record it.
    One(String),
    /// None fits (yet: a listing may lag behind the task).
    NotFound,
    /// Several fit; none is taken (a wrong guess would adopt, and later delete, another VM).
    Several(Vec<String>),
}

/// The VM a succeeded deploy made, among listed VMs with the Machine's name: one created no
/// earlier than `not_before` (the Machine's creation; Kubernetes keeps whole seconds: a second
/// of slack) and carrying no identity marker of another Machine (a deployed VM has none until
/// its follow-up; the Machine's own marker is accepted). A VM without a creation time is not
/// taken.
pub fn deployed_vm_by_name(
    candidates: &[DeployCandidate],
    machine: &MachineIdentity,
    not_before: Option<Timestamp>,
) -> DeployedByName {
    let Some(started) = not_before else {
        return DeployedByName::NotFound;
    };
    let earliest = started - SignedDuration::from_secs(1);
    let fits: Vec<String> = candidates
        .iter()
        .filter(|vm| vm.created.is_some_and(|created| created >= earliest))
        .filter(|vm| {
            vm.identity
                .as_ref()
                .is_none_or(|identity| identity == machine)
        })
        .map(|vm| vm.uuid.to_ascii_lowercase())
        .collect();
    match fits.as_slice() {
        [] => DeployedByName::NotFound,
        [one] => DeployedByName::One(one.clone()),
        _ => DeployedByName::Several(fits),
    }
}

/// The VM the Go provider (openshift/machine-api-provider-nutanix) made for a Machine that has
/// not recorded it, among listed VMs with the Machine's name. The Go provider records
/// `vmUUID` only after its create returns, and finds the VM of a Machine without one by its
/// name (`pkg/actuators/machine/reconciler.go`: `update`, `delete` and `exists` call
/// `findVMByName`, a `vm_name==<name>` listing that must find exactly one). Taking over its
/// Machines, this controller adopts by the same name, but only a VM the Go provider would have
/// made: no identity marker (it writes no description; a VM of ours always has one), the
/// cluster's category `kubernetes-io-cluster-<infraID>: owned` (its `addCategories`, from the
/// Machine's cluster label), and created no earlier than the Machine, within the clocks'
/// skew ([`crate::vm::identity::CLOCK_SKEW`]). Several fitting is answered as such, never with
/// a guess: adopting the wrong one would later delete another Machine's VM.
pub fn go_provider_vm(
    candidates: &[DeployCandidate],
    infra_id: Option<&str>,
    machine_created: Option<Timestamp>,
) -> DeployedByName {
    let (Some(infra_id), Some(created)) = (infra_id, machine_created) else {
        return DeployedByName::NotFound;
    };
    let category = format!("kubernetes-io-cluster-{infra_id}");
    let earliest = created - crate::vm::identity::CLOCK_SKEW;
    let mut fits: Vec<String> = candidates
        .iter()
        .filter(|vm| vm.identity.is_none())
        .filter(|vm| vm.categories.get(&category).is_some_and(|v| v == "owned"))
        .filter(|vm| vm.created.is_some_and(|at| at >= earliest))
        .map(|vm| vm.uuid.to_ascii_lowercase())
        .collect();
    fits.sort();
    match fits.as_slice() {
        [] => DeployedByName::NotFound,
        [one] => DeployedByName::One(one.clone()),
        _ => DeployedByName::Several(fits),
    }
}

/// How long after a deploy succeeded its VM may stay unfound (neither named by the task nor
/// listed by name) before the Machine fails; the request id is kept, never sent again.
pub const DEPLOYED_VM_SEARCH: Duration = Duration::from_secs(600);

/// The follow-up update recorded on the Machine, if any (an unreadable one is dropped: it holds
/// nothing that is not also in the plan, and the plan is made again on the next create).
pub fn pending_follow_up(status: &NutanixMachineProviderStatus) -> Option<FollowUpUpdate> {
    status
        .pending_follow_up
        .as_ref()
        .and_then(|value| serde_json::from_value(value.clone()).ok())
}

/// The value to record as `pendingFollowUp`.
pub fn follow_up_value(update: &FollowUpUpdate) -> serde_json::Value {
    serde_json::to_value(update).unwrap_or(serde_json::Value::Null)
}

/// How the provisioning record changes after a failed task: the task is dropped; a deploy also
/// drops its request id (a repeat with the same id would return the same failed task). A create
/// or clone keeps its UUID until Prism confirms that no VM has it.
pub fn after_transient_failure(status: &mut NutanixMachineProviderStatus) {
    if let Some(task) = status.pending_task.take()
        && task.operation == TaskOperation::Deploy
    {
        status.deploy_request_id = None;
    }
}

/// How soon after it was recorded a task is first read: when tasks of its kind on the same
/// Prism Central have recently taken at least `recent_minimum`, reading before then only finds
/// it running. A margin (four fifths of that minimum) lets the estimate follow tasks that get
/// faster (observed durations overestimate by at most one read interval, so they come down as
/// soon as tasks do). Never sooner than `poll`, the read interval itself.
pub fn first_task_read_after(recent_minimum: Option<Duration>, poll: Duration) -> Duration {
    recent_minimum.map_or(poll, |minimum| (minimum * 4 / 5).max(poll))
}

/// What the controller saw of one recent VM deletion on a Prism Central, counted from its
/// accepted `DELETE`: the read that found the VM gone (404), and the latest read that still
/// found it (zero when the first read after the `DELETE` found it gone).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeletionSeen {
    pub gone_after: Duration,
    pub still_there_after: Duration,
}

/// How soon after its `DELETE` was accepted a VM's end is first looked for: as a task
/// ([`first_task_read_after`], from the shortest of the `recent` deletions' 404s), but never
/// later than a `poll` interval after the longest that a recent deletion was seen still going.
///
/// A 404 is seen as late as the look that finds it, and a controller with a backlog looks late:
/// each time to the 404 then counts the wait before the look plus the queue, and a first look
/// at four fifths of those times settles at four times the queue's delay (a queue of 5 s in a
/// scale-down: 20 s before each look; issue 37). A read that still finds the VM is no such
/// overestimate: the deletion had not ended then. So the wait is only as long as deletions have
/// been seen to last; where every recent deletion was over at its first look, the look comes
/// after `poll`.
pub fn first_delete_look_after(recent: &[DeletionSeen], poll: Duration) -> Duration {
    let shortest_gone = recent.iter().map(|seen| seen.gone_after).min();
    let longest_going = recent
        .iter()
        .map(|seen| seen.still_there_after)
        .max()
        .unwrap_or_default();
    first_task_read_after(shortest_gone, poll)
        .min(longest_going.saturating_add(poll))
        .max(poll)
}

/// A task is looked for in the shared listing while it is younger than this many requeue
/// intervals; after that it is read directly unless the listing shows its VM created (a failed
/// create's VM never shows up; the error is in the task).
pub const DIRECT_TASK_READS_AFTER: u32 = 3;

/// Whether a task this old is read at every look instead of being looked for in the listing.
pub fn task_read_directly(age: Duration, requeue: Duration) -> bool {
    age >= requeue.saturating_mul(DIRECT_TASK_READS_AFTER)
}

/// What the Machine's VM looks like in a listing, for [`listing_says`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListingView<'a> {
    /// The state of the VM with the Machine's recorded UUID, if listed (`None` inside: listed
    /// without a state).
    pub listed: Option<Option<&'a EntityState>>,
    /// A VM with the Machine's name is listed (how a deploy's VM, whose UUID is not known yet,
    /// shows up).
    pub named: bool,
    /// The listing began after the task did.
    pub after_start: bool,
    /// The listed VM with the recorded UUID is powered on (its status says ON).
    pub powered_on: bool,
    /// The listed VM with the recorded UUID carries every effect of the Machine's pending
    /// follow-up update ([`FollowUpUpdate::shown_by`]); `false` without one.
    ///
    /// [`FollowUpUpdate::shown_by`]: crate::vm::request::FollowUpUpdate::shown_by
    pub follow_up_shown: bool,
    /// The listing began after every recent successful task of this kind on the same Prism
    /// Central would have ended ([`past_usual_end`]).
    pub past_usual_end: bool,
}

/// What the shared listing says about a recorded task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListingSays {
    /// A v3 create or clone whose VM is listed `COMPLETE`: it ended, no read needed (Prism
    /// lists a VM only once its create task has ended).
    Created,
    /// A follow-up update whose VM a listing taken after it was sent shows `COMPLETE` with
    /// every effect of the update: it ended, no read needed.
    Applied,
    /// Still running: look again after the poll interval, without reading the task.
    Running,
    /// Read the task now.
    ReadTask,
}

/// What a listing says about `operation`'s task, `age` after it was recorded:
/// - a v3 create or clone (VM UUID known): listed `COMPLETE` (and, for a create, powered on) is
///   [`ListingSays::Created`], not listed is still running, listed otherwise is read (the task
///   says why);
/// - a follow-up update: [`ListingSays::Applied`] once a listing taken after it started shows
///   the VM `COMPLETE` again with every effect of the update, read when it shows it `COMPLETE`
///   without them (a v3 VM reads `PENDING` from the moment Prism accepts a `PUT` until its
///   intent is applied, then `COMPLETE`: the recorded `PUT` answer, `update_vm.json`, is
///   `PENDING`, and nutanix/terraform-provider-nutanix `resource_nutanix_virtual_machine.go`
///   waits after `UpdateVM` for the VM's `status.state` to read `COMPLETE`);
/// - a template deploy: read once a listing taken after it started shows a VM with the
///   Machine's name (the task names the VM).
///
/// A task older than [`DIRECT_TASK_READS_AFTER`] requeue intervals, or one the listing does not
/// show ended although it was taken after every recent task of its kind had ended
/// ([`ListingView::past_usual_end`]), is read at every look ([`task_read_directly`]) unless the
/// listing shows its VM created or its update applied: a Machine that waited long for its look (a busy controller's
/// queue) still ends its task without a read, and a create that failed (its VM never listed)
/// is read at the first look after successful ones end, not after the long wait. Successful
/// tasks are no slower than the slowest recent one, so this costs no read of its own.
pub fn listing_says(
    operation: &TaskOperation,
    age: Duration,
    requeue: Duration,
    view: ListingView<'_>,
) -> ListingSays {
    match listing_says_of_young_task(operation, view) {
        ListingSays::Created => ListingSays::Created,
        ListingSays::Applied => ListingSays::Applied,
        _ if task_read_directly(age, requeue) || view.past_usual_end => ListingSays::ReadTask,
        says => says,
    }
}

fn listing_says_of_young_task(operation: &TaskOperation, view: ListingView<'_>) -> ListingSays {
    let complete = view.listed == Some(Some(&EntityState::Complete));
    match operation {
        // A v3 create asks for power ON: a VM listed COMPLETE but OFF is a create task that
        // ended without powering it on (a failed power-on leaves the VM, CAPX #783), which only
        // the task tells. A clone is powered on by its follow-up, so its power says nothing.
        TaskOperation::Create => match view.listed {
            Some(_) if complete && view.powered_on => ListingSays::Created,
            Some(_) => ListingSays::ReadTask,
            None => ListingSays::Running,
        },
        TaskOperation::Clone => match view.listed {
            Some(_) if complete => ListingSays::Created,
            Some(_) => ListingSays::ReadTask,
            None => ListingSays::Running,
        },
        TaskOperation::FollowUp => match view.listed {
            Some(_) if complete && view.after_start && view.follow_up_shown => ListingSays::Applied,
            Some(_) if complete && view.after_start => ListingSays::ReadTask,
            Some(_) => ListingSays::Running,
            None => ListingSays::ReadTask,
        },
        TaskOperation::Deploy if view.named && view.after_start => ListingSays::ReadTask,
        TaskOperation::Deploy => ListingSays::Running,
        _ => ListingSays::ReadTask,
    }
}

/// Whether a listing that began at `listed_at` began after a task recorded at `started` would
/// have ended, had it taken no longer than `slowest` (the slowest recent successful task of
/// its kind on the same Prism Central; `None`: none known, nothing is assumed). The recorded
/// time keeps whole seconds: a second is added.
pub fn past_usual_end(
    listed_at: Timestamp,
    started: Option<Timestamp>,
    slowest: Option<Duration>,
) -> bool {
    let (Some(started), Some(slowest)) = (started, slowest) else {
        return false;
    };
    let usual = SignedDuration::try_from(slowest)
        .unwrap_or(SignedDuration::MAX)
        .saturating_add(SignedDuration::from_secs(1));
    listed_at.duration_since(started) > usual
}

/// Whether a listing that began at `listed_at` began after a task recorded at `started`. The
/// recorded time went through the Machine's status, which keeps whole seconds: the task began
/// up to a second after it.
pub fn listed_after(listed_at: Timestamp, started: Option<Timestamp>) -> bool {
    started.is_some_and(|started| listed_at.duration_since(started) > SignedDuration::from_secs(1))
}

#[cfg(test)]
mod tests;
