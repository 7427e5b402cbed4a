//! Tasks: QUEUED → RUNNING → SUCCEEDED | FAILED, their effects, and their v3 and v4 renderings.

use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use super::Store;
use super::entities::reference;
use super::record::{NicRuntime, StaleView};
use super::v4_shape::V4Version;
use crate::faults::TaskFault;

/// Prefix of v4 task extIds (`base64("ergon")`, as real Prism Central's extIds look). The part after the colon
/// is the task UUID that v3 `GET /tasks/{uuid}` takes.
pub(crate) const V4_TASK_PREFIX: &str = "ZXJnb24=:";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TaskStatus {
    Queued,
    Running,
    Succeeded,
    Failed,
}

impl TaskStatus {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "QUEUED",
            Self::Running => "RUNNING",
            Self::Succeeded => "SUCCEEDED",
            Self::Failed => "FAILED",
        }
    }

    fn percentage(self) -> u64 {
        match self {
            Self::Queued => 0,
            Self::Running => 50,
            Self::Succeeded | Self::Failed => 100,
        }
    }

    pub(crate) fn ended(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed)
    }
}

/// What becomes of the VMs of a create (POST /vms, clone, deploy) whose task fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FailOutcome {
    /// The VM is removed (mock choice for a failed create; see the README).
    RemoveVm,
    /// The VM stays, listed, in state ERROR.
    LeaveVmInError,
    /// The VM stays, listed, COMPLETE and powered off: the failure came after it existed (its power-on).
    LeaveVmPoweredOff,
}

/// Where a failed task reports its cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FailCause {
    /// The parent only says "Internal Error"; a failed subtask carries the cause (CAPX #783,
    /// nutanix-cloud-native/cluster-api-provider-nutanix: a DHCP pool exhaustion was found only in a subtask).
    Subtask,
    /// The VM was created, its power-on failed: the failed subtask is the power-state change (its operation
    /// name, `kVmSetPowerState`, is the mock's: no recorded answer shows it).
    PowerOn,
    /// AHV refuses an argument of the VM: the task itself fails with `VMM-30102` / `VM_INVALID_ARGUMENT`
    /// (nutanix/nutanix.ansible#876: a Secure Boot VM with cloud-init, whose CD-ROM is IDE, ends in a FAILED
    /// task whose `errorMessages` carry that code, group and message, placeholders unrendered). Also the
    /// refusal of an ASSIGNED address on an unmanaged subnet, with Prism's own message (`vm::nics`).
    InvalidArgument,
    /// Prism refuses what the task asks of an entity in its state: the task itself fails with this code and the
    /// plan's error, no subtask (a VM delete while a volume group is attached, terraform-provider-nutanix#568;
    /// see `volume_groups`).
    Refused { code: &'static str },
}

/// How a task is to fail (decided when it is created: an injected fault, an exhausted address pool, an
/// argument AHV refuses).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FailPlan {
    /// The specific error (of the failed subtask, or of the task itself for [`FailCause::InvalidArgument`]).
    pub(crate) error: String,
    pub(crate) outcome: FailOutcome,
    pub(crate) cause: FailCause,
}

impl FailPlan {
    /// A failure reported in a subtask, the VM removed (pool exhaustion, an injected `fail_task`).
    pub(crate) fn in_subtask(error: String, outcome: FailOutcome) -> Self {
        Self {
            error,
            outcome,
            cause: FailCause::Subtask,
        }
    }
}

impl From<TaskFault> for FailPlan {
    fn from(fault: TaskFault) -> Self {
        match fault {
            TaskFault::Fail {
                error,
                leave_vm_in_error,
            } => {
                let outcome = if leave_vm_in_error {
                    FailOutcome::LeaveVmInError
                } else {
                    FailOutcome::RemoveVm
                };
                Self::in_subtask(error, outcome)
            }
            TaskFault::PowerOn { error } => Self {
                error,
                outcome: FailOutcome::LeaveVmPoweredOff,
                cause: FailCause::PowerOn,
            },
        }
    }
}

/// An error a failed task reports: v3 `error_code` / `error_detail`, v4 `errorMessages[]` (an `AppMessage`:
/// `code`, `errorGroup`, `message`; prism.v4.error.AppMessage of Nutanix's ntnx-prism-py-client).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TaskError {
    pub(crate) code: String,
    pub(crate) group: Option<String>,
    pub(crate) message: String,
}

impl TaskError {
    fn new(code: &str, group: Option<&str>, message: impl Into<String>) -> Self {
        Self {
            code: code.to_owned(),
            group: group.map(str::to_owned),
            message: message.into(),
        }
    }
}

/// The VMM-30102 message as AHV answered it in nutanix/nutanix.ansible#876 (with its placeholders).
pub(crate) const VMM_30102_MESSAGE: &str = "Failed to perform the operation on the VM with UUID '{{{vm_uuid}}}', due to an invalid argument with key '{{{argument_key}}}' and value '{{{argument_value}}}'.";

/// What happens when the task ends.
#[derive(Debug, Clone)]
pub(crate) enum Effect {
    /// Create (POST /vms, clone, the VMs of a deploy): success makes the VMs listed and COMPLETE.
    Create { vms: Vec<String> },
    /// PUT: success applies power; failure restores the previous spec.
    Update {
        vm: String,
        previous_spec: Box<Value>,
        previous_nics: Vec<NicRuntime>,
    },
    /// DELETE: success removes the VM.
    Delete { vm: String },
    /// A volume group's detach-vm: success detaches the VM.
    DetachVm { volume_group: String, vm: String },
    /// A subtask: no effect of its own.
    Subtask,
}

#[derive(Debug, Clone)]
pub(crate) struct Task {
    pub(crate) uuid: String,
    pub(crate) operation: &'static str,
    pub(crate) status: TaskStatus,
    /// (kind, UUID): `vm`, or `template` for a deploy (whose VMs are in its subtasks, or here too: see
    /// `DeployTaskShape`).
    pub(crate) entities: Vec<(&'static str, String)>,
    pub(crate) cluster_uuid: Option<String>,
    pub(crate) created: String,
    pub(crate) started: Option<String>,
    pub(crate) completed: Option<String>,
    pub(crate) logical: u64,
    /// How the task fails, with the UUID of its failed subtask: drawn when the task is created, never while
    /// events run (that would make later UUIDs depend on timing).
    pub(crate) fail: Option<(FailPlan, String)>,
    pub(crate) error: Option<TaskError>,
    pub(crate) subtasks: Vec<String>,
    pub(crate) parent: Option<String>,
    /// Subtasks that follow this task's progress (the per-VM subtasks of a deploy) instead of being created
    /// when it fails.
    pub(crate) followers: bool,
    pub(crate) effect: Effect,
}

impl Store {
    /// Creates a task that starts after the queued time and ends after the running time.
    pub(crate) fn create_task(
        &mut self,
        now: Instant,
        operation: &'static str,
        entities: Vec<(&'static str, String)>,
        cluster_uuid: Option<String>,
        effect: Effect,
        fail: Option<FailPlan>,
    ) -> String {
        let uuid = self.new_uuid();
        let fail = fail.map(|plan| (plan, self.new_uuid()));
        let logical = self.tick_logical();
        let task = Task {
            uuid: uuid.clone(),
            operation,
            status: TaskStatus::Queued,
            entities,
            cluster_uuid,
            created: self.wall(now),
            started: None,
            completed: None,
            logical,
            fail,
            error: None,
            subtasks: Vec::new(),
            parent: None,
            followers: false,
            effect,
        };
        self.tasks.insert(uuid.clone(), task);
        let queued = Duration::from_millis(self.timings.task_queued_ms);
        let running = Duration::from_millis(self.timings.task_running_ms);
        self.schedule(now + queued, super::Event::TaskStart(uuid.clone()));
        self.schedule(now + queued + running, super::Event::TaskEnd(uuid.clone()));
        uuid
    }

    /// Adds a subtask to `parent` that moves with it (QUEUED, RUNNING, then its end), concerning `vm`.
    pub(crate) fn add_follower_subtask(&mut self, parent: &str, operation: &'static str, vm: &str) {
        let uuid = self.new_uuid();
        let logical = self.tick_logical();
        let Some(task) = self.tasks.get_mut(parent) else {
            return;
        };
        task.followers = true;
        task.subtasks.push(uuid.clone());
        let sub = Task {
            uuid: uuid.clone(),
            operation,
            status: TaskStatus::Queued,
            entities: vec![("vm", vm.to_owned())],
            cluster_uuid: task.cluster_uuid.clone(),
            created: task.created.clone(),
            started: None,
            completed: None,
            logical,
            fail: None,
            error: None,
            subtasks: Vec::new(),
            parent: Some(parent.to_owned()),
            followers: false,
            effect: Effect::Subtask,
        };
        self.tasks.insert(uuid, sub);
    }

    pub(crate) fn start_task(&mut self, uuid: &str, at: Instant) {
        let wall = self.wall(at);
        let logical = self.tick_logical();
        let Some(task) = self.tasks.get_mut(uuid) else {
            return;
        };
        if task.status != TaskStatus::Queued {
            return;
        }
        task.status = TaskStatus::Running;
        task.started = Some(wall.clone());
        task.logical = logical;
        let followers = if task.followers {
            task.subtasks.clone()
        } else {
            Vec::new()
        };
        for sub in followers {
            if let Some(sub) = self.tasks.get_mut(&sub) {
                sub.status = TaskStatus::Running;
                sub.started = Some(wall.clone());
                sub.logical = logical;
            }
        }
    }

    pub(crate) fn end_task(&mut self, uuid: &str, at: Instant) {
        let wall = self.wall(at);
        let logical = self.tick_logical();
        let Some(task) = self.tasks.get_mut(uuid) else {
            return;
        };
        if task.status.ended() {
            return;
        }
        task.started.get_or_insert_with(|| wall.clone());
        task.completed = Some(wall.clone());
        task.logical = logical;
        let fail = task.fail.clone();
        let effect = task.effect.clone();
        let operation = task.operation;
        let entities = task.entities.clone();
        let cluster_uuid = task.cluster_uuid.clone();
        let created = task.created.clone();
        let followers = if task.followers {
            task.subtasks.clone()
        } else {
            Vec::new()
        };
        let sub_error = match &fail {
            None => {
                task.status = TaskStatus::Succeeded;
                None
            }
            Some((plan, _)) if plan.cause == FailCause::InvalidArgument => {
                task.status = TaskStatus::Failed;
                task.error = Some(TaskError::new(
                    "VMM-30102",
                    Some("VM_INVALID_ARGUMENT"),
                    plan.error.clone(),
                ));
                None
            }
            Some((
                FailPlan {
                    cause: FailCause::Refused { code },
                    error,
                    ..
                },
                _,
            )) => {
                task.status = TaskStatus::Failed;
                task.error = Some(TaskError::new(code, None, error.clone()));
                None
            }
            Some((plan, _)) => {
                task.status = TaskStatus::Failed;
                task.error = Some(TaskError::new("INTERNAL_ERROR", None, "Internal Error"));
                Some(TaskError::new("TASK_FAILED", None, plan.error.clone()))
            }
        };
        let status = task.status;
        for sub in &followers {
            if let Some(sub) = self.tasks.get_mut(sub) {
                sub.status = status;
                sub.started.get_or_insert_with(|| wall.clone());
                sub.completed = Some(wall.clone());
                sub.logical = logical;
                sub.error.clone_from(&sub_error);
            }
        }
        if let (Some((plan, sub_uuid)), Some(error), true) =
            (&fail, sub_error, followers.is_empty())
        {
            let sub_logical = self.tick_logical();
            let sub_operation = match plan.cause {
                FailCause::PowerOn => "kVmSetPowerState",
                _ => subtask_operation(operation),
            };
            let sub = Task {
                uuid: sub_uuid.clone(),
                operation: sub_operation,
                status: TaskStatus::Failed,
                entities: entities.into_iter().filter(|(k, _)| *k == "vm").collect(),
                cluster_uuid,
                created,
                started: Some(wall.clone()),
                completed: Some(wall),
                logical: sub_logical,
                fail: None,
                error: Some(error),
                subtasks: Vec::new(),
                parent: Some(uuid.to_owned()),
                followers: false,
                effect: Effect::Subtask,
            };
            self.tasks.insert(sub_uuid.clone(), sub);
            if let Some(parent) = self.tasks.get_mut(uuid) {
                parent.subtasks.push(sub_uuid.clone());
            }
        }
        self.apply_task_effect(uuid, effect, fail.as_ref().map(|(plan, _)| plan), at);
    }

    fn apply_task_effect(
        &mut self,
        task_uuid: &str,
        effect: Effect,
        fail: Option<&FailPlan>,
        at: Instant,
    ) {
        let touched: Vec<String> = match &effect {
            Effect::Create { vms } => vms.clone(),
            Effect::Update { vm, .. } => vec![vm.clone()],
            Effect::Delete { .. } | Effect::DetachVm { .. } | Effect::Subtask => Vec::new(),
        };
        let before: Vec<(String, &'static str, &'static str)> = touched
            .into_iter()
            .filter_map(|uuid| {
                let vm = self.vms.get(&uuid)?;
                let (state, power) = (vm.state(), vm.power_state());
                Some((uuid, state, power))
            })
            .collect();
        match effect {
            Effect::Create { vms } => {
                for vm in vms {
                    self.finish_vm_create(&vm, fail, at);
                }
            }
            Effect::Update {
                vm,
                previous_spec,
                previous_nics,
            } => self.finish_vm_update(&vm, *previous_spec, previous_nics, fail.is_some(), at),
            Effect::Delete { vm } => self.finish_vm_delete(&vm, task_uuid, fail.is_some(), at),
            Effect::DetachVm { volume_group, vm } => {
                self.finish_detach(&volume_group, &vm, fail.is_some());
            }
            Effect::Subtask => {}
        }
        if !self.read_lag.is_zero() {
            let until = at + self.read_lag;
            for (uuid, state, power_state) in before {
                if let Some(vm) = self.vms.get_mut(&uuid) {
                    vm.stale_view = Some(StaleView {
                        until,
                        state,
                        power_state,
                    });
                }
            }
        }
    }

    /// v3 `GET /tasks/{uuid}` body.
    pub(crate) fn task_v3_json(&self, task: &Task) -> Value {
        let entities: Vec<Value> = task
            .entities
            .iter()
            .map(|(kind, uuid)| reference(kind, uuid, None))
            .collect();
        let subtasks: Vec<Value> = task
            .subtasks
            .iter()
            .map(|u| reference("task", u, None))
            .collect();
        let mut body = json!({
            "api_version": "3.1",
            "uuid": task.uuid,
            "status": task.status.as_str(),
            "percentage_complete": task.status.percentage(),
            "progress_message": task.operation,
            "operation_type": task.operation,
            "entity_reference_list": entities,
            "subtask_reference_list": subtasks,
            "creation_time": task.created,
            "logical_timestamp": task.logical,
        });
        if let Some(obj) = body.as_object_mut() {
            if let Some(cluster) = &task.cluster_uuid {
                obj.insert(
                    "cluster_reference".to_owned(),
                    reference("cluster", cluster, None),
                );
            }
            if let Some(parent) = &task.parent {
                obj.insert(
                    "parent_task_reference".to_owned(),
                    reference("task", parent, None),
                );
            }
            if let Some(started) = &task.started {
                obj.insert("start_time".to_owned(), json!(started));
            }
            if let Some(completed) = &task.completed {
                obj.insert("completion_time".to_owned(), json!(completed));
            }
            if let Some(error) = &task.error {
                // v3 reports the group where a v4 AppMessage has one (the v3 task knows only a string code).
                let code = error.group.as_deref().unwrap_or(&error.code);
                obj.insert("error_code".to_owned(), json!(code));
                obj.insert("error_detail".to_owned(), json!(error.message));
            }
        }
        body
    }

    /// v4 `GET /api/prism/{version}/config/tasks/{extId}` body, in the shape of prism.v4.config.Task of
    /// Nutanix's ntnx-prism-py-client: `subTasks` are TaskReferenceInternal `{extId, href, rel: "subtask"}` and
    /// `entitiesAffected` EntityReference `{extId, rel}`, as the Ansible collection's ntnx_templates_deploy_v2
    /// RETURN block shows a real deploy task (the template as `vmm:content:templates`).
    pub(crate) fn task_v4_json(&self, task: &Task, version: &V4Version, host: &str) -> Value {
        let entities: Vec<Value> = task
            .entities
            .iter()
            .map(|(kind, uuid)| {
                let rel = match *kind {
                    "template" => "vmm:content:templates",
                    // The mock's choice, in the pattern of the others: no recorded detach task shows it.
                    "volume_group" => "volumes:config:volume-group",
                    _ => "vmm:ahv:config:vm",
                };
                version.object(
                    "prism.v4.config.EntityReference",
                    [("extId", json!(uuid)), ("rel", json!(rel))],
                )
            })
            .collect();
        let subtasks: Vec<Value> = task
            .subtasks
            .iter()
            .map(|u| {
                let ext_id = format!("{V4_TASK_PREFIX}{u}");
                let href = format!(
                    "https://{host}/api/prism/{}/config/tasks/{ext_id}",
                    version.path
                );
                version.object(
                    "prism.v4.config.TaskReferenceInternal",
                    [
                        ("extId", json!(ext_id)),
                        ("href", json!(href)),
                        ("rel", json!("subtask")),
                    ],
                )
            })
            .collect();
        let mut error_messages = Vec::new();
        if let Some(error) = &task.error {
            error_messages.push(app_message(version, error));
        }
        for sub in task.subtasks.iter().filter_map(|u| self.tasks.get(u)) {
            if let Some(error) = &sub.error {
                error_messages.push(app_message(version, error));
            }
        }
        let updated = task
            .completed
            .as_ref()
            .or(task.started.as_ref())
            .unwrap_or(&task.created);
        let mut data = Map::new();
        let mut put = |key: &str, value: Value| {
            data.insert(key.to_owned(), value);
        };
        put("extId", json!(format!("{V4_TASK_PREFIX}{}", task.uuid)));
        put("operation", json!(task.operation));
        put("operationDescription", json!(task.operation));
        put("status", json!(task.status.as_str()));
        put("progressPercentage", json!(task.status.percentage()));
        put("createdTime", json!(task.created));
        if let Some(started) = &task.started {
            put("startedTime", json!(started));
        }
        if let Some(completed) = &task.completed {
            put("completedTime", json!(completed));
        }
        put("lastUpdatedTime", json!(updated));
        put("numberOfEntitiesAffected", json!(entities.len()));
        put("entitiesAffected", Value::Array(entities));
        put("numberOfSubtasks", json!(subtasks.len()));
        if !subtasks.is_empty() {
            put("subTasks", Value::Array(subtasks));
        }
        if let Some(parent) = &task.parent {
            put(
                "parentTask",
                version.object(
                    "prism.v4.config.TaskReferenceInternal",
                    [("extId", json!(format!("{V4_TASK_PREFIX}{parent}")))],
                ),
            );
        }
        if let Some(cluster) = &task.cluster_uuid {
            put("clusterExtIds", json!([cluster]));
        }
        put(
            "ownedBy",
            version.object(
                "prism.v4.config.OwnerReference",
                [
                    ("extId", json!(self.user_uuid)),
                    ("name", json!(self.username)),
                ],
            ),
        );
        put("isCancelable", json!(false));
        put("isBackgroundTask", json!(false));
        if !error_messages.is_empty() {
            put("errorMessages", Value::Array(error_messages));
        }
        if let Some(error) = &task.error {
            put("legacyErrorMessage", json!(error.message));
        }
        version.response(
            "prism.v4.config.GetTaskApiResponse",
            version.wrap("prism.v4.config.Task", data),
        )
    }
}

fn app_message(version: &V4Version, error: &TaskError) -> Value {
    let mut fields = vec![
        ("message", json!(error.message)),
        ("code", json!(error.code)),
        ("severity", json!("ERROR")),
        ("locale", json!("en_US")),
    ];
    if let Some(group) = &error.group {
        fields.push(("errorGroup", json!(group)));
    }
    version.object("prism.v4.error.AppMessage", fields)
}

fn subtask_operation(operation: &str) -> &'static str {
    match operation {
        "kVmCreate" | "kVmClone" | "kVmTemplateDeploy" => "kVmCreateIntentful",
        "kVmUpdate" => "kVmUpdateIntentful",
        "kVmDelete" => "kVmDeleteIntentful",
        _ => "kSubtask",
    }
}
