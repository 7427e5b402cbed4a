//! Tasks: QUEUED → RUNNING → SUCCEEDED | FAILED, their effects, and their v3 and v4 renderings.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::Store;
use super::entities::reference;
use super::vm::NicRuntime;

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
}

/// How a task is to fail (decided when it is created: an injected fault or an exhausted address pool).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FailPlan {
    /// The specific error, carried by the failed subtask (the parent only says "Internal Error").
    pub(crate) subtask_error: String,
    /// Leave a created VM in state ERROR instead of removing it.
    pub(crate) leave_vm_in_error: bool,
}

/// What happens when the task ends.
#[derive(Debug, Clone)]
pub(crate) enum Effect {
    /// Create (POST /vms, clone, one VM of a deploy): success makes the VM listed and COMPLETE.
    Create { vms: Vec<String> },
    /// PUT: success applies power; failure restores the previous spec.
    Update {
        vm: String,
        previous_spec: Box<Value>,
        previous_nics: Vec<NicRuntime>,
    },
    /// DELETE: success removes the VM.
    Delete { vm: String },
    /// A subtask: no effect of its own.
    Subtask,
}

#[derive(Debug, Clone)]
pub(crate) struct Task {
    pub(crate) uuid: String,
    pub(crate) operation: &'static str,
    pub(crate) status: TaskStatus,
    pub(crate) entities: Vec<(&'static str, String)>,
    pub(crate) cluster_uuid: Option<String>,
    pub(crate) created: String,
    pub(crate) started: Option<String>,
    pub(crate) completed: Option<String>,
    pub(crate) logical: u64,
    /// How the task fails, with the UUID of its failed subtask: drawn when the task is created, never while
    /// events run (that would make later UUIDs depend on timing).
    pub(crate) fail: Option<(FailPlan, String)>,
    pub(crate) error: Option<(String, String)>,
    pub(crate) subtasks: Vec<String>,
    pub(crate) parent: Option<String>,
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
            effect,
        };
        self.tasks.insert(uuid.clone(), task);
        let queued = Duration::from_millis(self.timings.task_queued_ms);
        let running = Duration::from_millis(self.timings.task_running_ms);
        self.schedule(now + queued, super::Event::TaskStart(uuid.clone()));
        self.schedule(now + queued + running, super::Event::TaskEnd(uuid.clone()));
        uuid
    }

    pub(crate) fn start_task(&mut self, uuid: &str, at: Instant) {
        let wall = self.wall(at);
        let logical = self.tick_logical();
        if let Some(task) = self.tasks.get_mut(uuid)
            && task.status == TaskStatus::Queued
        {
            task.status = TaskStatus::Running;
            task.started = Some(wall);
            task.logical = logical;
        }
    }

    pub(crate) fn end_task(&mut self, uuid: &str, at: Instant) {
        let wall = self.wall(at);
        let logical = self.tick_logical();
        let Some(task) = self.tasks.get_mut(uuid) else {
            return;
        };
        if matches!(task.status, TaskStatus::Succeeded | TaskStatus::Failed) {
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
        match &fail {
            None => task.status = TaskStatus::Succeeded,
            Some(plan) => {
                task.status = TaskStatus::Failed;
                task.error = Some(("INTERNAL_ERROR".to_owned(), "Internal Error".to_owned()));
                let sub_uuid = plan.1.clone();
                let plan = &plan.0;
                let sub_logical = self.tick_logical();
                let created = self
                    .tasks
                    .get(uuid)
                    .map(|t| t.created.clone())
                    .unwrap_or_default();
                let sub = Task {
                    uuid: sub_uuid.clone(),
                    operation: subtask_operation(operation),
                    status: TaskStatus::Failed,
                    entities,
                    cluster_uuid,
                    created,
                    started: Some(wall.clone()),
                    completed: Some(wall),
                    logical: sub_logical,
                    fail: None,
                    error: Some(("TASK_FAILED".to_owned(), plan.subtask_error.clone())),
                    subtasks: Vec::new(),
                    parent: Some(uuid.to_owned()),
                    effect: Effect::Subtask,
                };
                self.tasks.insert(sub_uuid.clone(), sub);
                if let Some(parent) = self.tasks.get_mut(uuid) {
                    parent.subtasks.push(sub_uuid);
                }
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
            Effect::Subtask => {}
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
            if let Some((code, detail)) = &task.error {
                obj.insert("error_code".to_owned(), json!(code));
                obj.insert("error_detail".to_owned(), json!(detail));
            }
        }
        body
    }

    /// v4 `GET /api/prism/v4.0/config/tasks/{extId}` body.
    pub(crate) fn task_v4_json(&self, task: &Task) -> Value {
        let entities: Vec<Value> = task
            .entities
            .iter()
            .filter(|(kind, _)| *kind == "vm")
            .map(|(_, uuid)| json!({"extId": uuid, "rel": "vmm:ahv:config:vm"}))
            .collect();
        let subtasks: Vec<Value> = task
            .subtasks
            .iter()
            .map(|u| json!({"extId": format!("{V4_TASK_PREFIX}{u}"), "rel": "prism:config:task"}))
            .collect();
        let mut error_messages = Vec::new();
        if let Some((code, detail)) = &task.error {
            error_messages.push(
                json!({"message": detail, "code": code, "severity": "ERROR", "locale": "en_US"}),
            );
        }
        for sub in task.subtasks.iter().filter_map(|u| self.tasks.get(u)) {
            if let Some((code, detail)) = &sub.error {
                error_messages.push(json!({"message": detail, "code": code, "severity": "ERROR", "locale": "en_US"}));
            }
        }
        let legacy = task.error.as_ref().map(|(_, detail)| detail.clone());
        json!({
            "data": {
                "$objectType": "prism.v4.config.Task",
                "extId": format!("{V4_TASK_PREFIX}{}", task.uuid),
                "operation": task.operation,
                "operationDescription": task.operation,
                "status": task.status.as_str(),
                "progressPercentage": task.status.percentage(),
                "createdTime": task.created,
                "startedTime": task.started,
                "completedTime": task.completed,
                "entitiesAffected": entities,
                "errorMessages": error_messages,
                "legacyErrorMessage": legacy,
                "subTasks": subtasks,
                "parentTask": task.parent.as_ref().map(|p| json!({"extId": format!("{V4_TASK_PREFIX}{p}")})),
                "isCancelable": false,
            }
        })
    }
}

fn subtask_operation(operation: &str) -> &'static str {
    match operation {
        "kVmCreate" | "kVmClone" | "kVmTemplateDeploy" => "kVmCreateIntentful",
        "kVmUpdate" => "kVmUpdateIntentful",
        "kVmDelete" => "kVmDeleteIntentful",
        _ => "kSubtask",
    }
}
