//! A task's progress, typed: what a task read means, independent of how it was read.

use std::fmt;

use crate::message::{MAX_MESSAGE_CHARS, PrismMessage, PrismMessages};
use crate::quote::{MAX_QUOTED_CHARS, bounded};
use crate::v3::{self, TaskStatus};
use crate::v4;

/// Subtask reads made to explain one failure, or to collect the entities of one succeeded task, at most.
pub const MAX_SUBTASK_READS: usize = 16;

/// Where a task is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskProgress {
    /// QUEUED, RUNNING, SUSPENDED, CANCELING, or a status this crate does not know (never guessed terminal).
    Running {
        status: String,
        percentage_complete: Option<i64>,
    },
    /// Done; the entities it names (deduplicated: v4 tasks may list one twice). For a v4 task with subtasks, the
    /// entities of its subtasks too (a template deploy names only the template; its VMs are in its subtasks).
    Succeeded {
        entities: Vec<TaskEntity>,
        /// Subtasks that could not be read (an error, or past [`MAX_SUBTASK_READS`]): when not empty, `entities`
        /// may lack some of the task's entities.
        unread_subtasks: Vec<String>,
    },
    /// Ended without success, or unknown to Prism.
    Failed(Box<TaskFailure>),
}

impl TaskProgress {
    pub fn is_terminal(&self) -> bool {
        !matches!(self, Self::Running { .. })
    }
}

/// An entity a task names: v3 `kind` (`vm`) or v4 `rel` (`vmm:ahv:config:vm`), and its UUID or extId.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskEntity {
    pub kind: String,
    pub uuid: String,
}

/// How a task ended without success.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskEnd {
    Failed,
    /// v3 ABORTED.
    Aborted,
    /// v4 CANCELED.
    Canceled,
    /// v3 INVALID_UUID.
    InvalidUuid,
    /// The task GET returned 404.
    NotFound,
}

impl fmt::Display for TaskEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Failed => "FAILED",
            Self::Aborted => "ABORTED",
            Self::Canceled => "CANCELED",
            Self::InvalidUuid => "INVALID_UUID",
            Self::NotFound => "not found",
        })
    }
}

/// A task that did not succeed, with its error and the errors of its failed subtasks (where the real cause
/// usually is: the parent's error is often generic).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskFailure {
    pub task: String,
    pub end: TaskEnd,
    /// v3 `error_code` (a string or a number in answers, kept as text), else the first v4 `code` (or
    /// `errorGroup`).
    pub error_code: Option<String>,
    /// v3 `error_detail`, else every v4 message joined, else the v4 `legacyErrorMessage`.
    pub error_detail: Option<String>,
    pub progress_message: Option<String>,
    /// The typed messages: v3 `message_list[]` (`reason`, `message`, `details`), v4 `errorMessages[]`
    /// (`code`, `error_group`, `message`). Classify by these, not by the text of `error_detail`.
    pub messages: PrismMessages,
    pub subtask_errors: Vec<SubtaskError>,
}

/// A failed subtask's error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubtaskError {
    pub task: String,
    pub end: TaskEnd,
    pub error_code: Option<String>,
    pub error_detail: Option<String>,
    /// As [`TaskFailure::messages`].
    pub messages: PrismMessages,
}

/// Every text of a task comes from Prism: each is cut to a bounded length (a task id to
/// [`MAX_QUOTED_CHARS`], a message to [`MAX_MESSAGE_CHARS`]).
impl fmt::Display for TaskFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "task {} {}",
            bounded(&self.task, MAX_QUOTED_CHARS),
            self.end
        )?;
        write_error(f, self.error_detail.as_deref(), self.error_code.as_deref())?;
        if self.error_detail.is_none() && !self.messages.is_empty() {
            write!(f, ": {}", self.messages)?;
        } else if self.error_detail.is_none()
            && let Some(progress) = &self.progress_message
        {
            write!(f, " ({})", bounded(progress, MAX_MESSAGE_CHARS))?;
        }
        for subtask in &self.subtask_errors {
            write!(
                f,
                "; subtask {} {}",
                bounded(&subtask.task, MAX_QUOTED_CHARS),
                subtask.end
            )?;
            write_error(
                f,
                subtask.error_detail.as_deref(),
                subtask.error_code.as_deref(),
            )?;
        }
        Ok(())
    }
}

fn write_error(
    f: &mut fmt::Formatter<'_>,
    detail: Option<&str>,
    code: Option<&str>,
) -> fmt::Result {
    if let Some(detail) = detail {
        write!(f, ": {}", bounded(detail, MAX_MESSAGE_CHARS))?;
    }
    if let Some(code) = code {
        write!(f, " (code {})", bounded(code, MAX_QUOTED_CHARS))?;
    }
    Ok(())
}

/// How a v3 task status ended, `None` while it runs.
pub fn v3_end(status: &TaskStatus) -> Option<TaskEnd> {
    match status {
        TaskStatus::Failed => Some(TaskEnd::Failed),
        TaskStatus::Aborted => Some(TaskEnd::Aborted),
        TaskStatus::InvalidUuid => Some(TaskEnd::InvalidUuid),
        _ => None,
    }
}

/// How a v4 task status ended, `None` while it runs.
pub fn v4_end(status: &v4::TaskStatus) -> Option<TaskEnd> {
    match status {
        v4::TaskStatus::Failed => Some(TaskEnd::Failed),
        v4::TaskStatus::Canceled => Some(TaskEnd::Canceled),
        _ => None,
    }
}

/// The progress of a task Prism does not know (its GET answered 404).
pub fn not_found(task: &str) -> TaskProgress {
    TaskProgress::Failed(Box::new(TaskFailure {
        task: task.to_owned(),
        end: TaskEnd::NotFound,
        error_code: None,
        error_detail: None,
        progress_message: None,
        messages: PrismMessages::default(),
        subtask_errors: Vec::new(),
    }))
}

/// The typed messages of a v3 task.
pub fn v3_messages(task: &v3::Task) -> PrismMessages {
    PrismMessages(
        task.message_list
            .iter()
            .map(PrismMessage::from_v3)
            .collect(),
    )
}

/// The typed messages of a v4 task.
pub fn v4_messages(task: &v4::Task) -> PrismMessages {
    PrismMessages(
        task.error_messages
            .iter()
            .map(PrismMessage::from_v4)
            .collect(),
    )
}

/// The entities in their first order, each once (v4 tasks may list one twice).
pub fn dedup(entities: impl Iterator<Item = TaskEntity>) -> Vec<TaskEntity> {
    let mut unique: Vec<TaskEntity> = Vec::new();
    for entity in entities {
        if !unique.contains(&entity) {
            unique.push(entity);
        }
    }
    unique
}

/// The progress of a v3 task (without its subtasks' errors).
pub fn v3_progress(requested: &str, task: &v3::Task) -> TaskProgress {
    let status = task
        .status
        .clone()
        .unwrap_or_else(|| TaskStatus::Other(String::new()));
    if status == TaskStatus::Succeeded {
        return TaskProgress::Succeeded {
            unread_subtasks: Vec::new(),
            entities: dedup(task.entity_reference_list.iter().filter_map(|reference| {
                Some(TaskEntity {
                    kind: reference.kind.clone().unwrap_or_default(),
                    uuid: reference.uuid.clone()?,
                })
            })),
        };
    }
    match v3_end(&status) {
        Some(end) => TaskProgress::Failed(Box::new(TaskFailure {
            task: task.uuid.clone().unwrap_or_else(|| requested.to_owned()),
            end,
            error_code: task.error_code.clone(),
            error_detail: task.error_detail.clone(),
            progress_message: task.progress_message.clone(),
            messages: v3_messages(task),
            subtask_errors: Vec::new(),
        })),
        None => TaskProgress::Running {
            status: status.as_str().to_owned(),
            percentage_complete: task.percentage_complete,
        },
    }
}

/// The progress of a v4 task (without its subtasks' errors).
pub fn v4_progress(requested: &str, task: &v4::Task) -> TaskProgress {
    let status = task
        .status
        .clone()
        .unwrap_or_else(|| v4::TaskStatus::Other(String::new()));
    if status == v4::TaskStatus::Succeeded {
        return TaskProgress::Succeeded {
            entities: dedup(v4_entities(task)),
            unread_subtasks: Vec::new(),
        };
    }
    match v4_end(&status) {
        Some(end) => {
            let (error_code, error_detail) = v4_error(task);
            TaskProgress::Failed(Box::new(TaskFailure {
                task: task.ext_id.clone().unwrap_or_else(|| requested.to_owned()),
                end,
                error_code,
                error_detail,
                progress_message: None,
                messages: v4_messages(task),
                subtask_errors: Vec::new(),
            }))
        }
        None => TaskProgress::Running {
            status: status.as_str().to_owned(),
            percentage_complete: task.progress_percentage,
        },
    }
}

/// `entitiesAffected` of a v4 task, those without an extId left out.
pub fn v4_entities(task: &v4::Task) -> impl Iterator<Item = TaskEntity> + '_ {
    task.entities_affected.iter().filter_map(|entity| {
        Some(TaskEntity {
            kind: entity.rel.clone().unwrap_or_default(),
            uuid: entity.ext_id.clone()?,
        })
    })
}

/// First code, and every message joined (else the legacy message).
pub fn v4_error(task: &v4::Task) -> (Option<String>, Option<String>) {
    let code = task
        .error_messages
        .iter()
        .find_map(|message| message.code.clone().or_else(|| message.error_group.clone()));
    let messages: Vec<&str> = task
        .error_messages
        .iter()
        .filter_map(|message| message.message.as_deref())
        .collect();
    let detail = if messages.is_empty() {
        task.legacy_error_message.clone()
    } else {
        Some(messages.join("; "))
    };
    (code, detail)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn v3_statuses_map_to_progress() {
        let task: v3::Task = serde_json::from_value(json!({
            "uuid": "t", "status": "SUCCEEDED",
            "entity_reference_list": [{"kind": "vm", "uuid": "u"}, {"kind": "vm", "uuid": "u"}]
        }))
        .unwrap();
        assert_eq!(
            v3_progress("t", &task),
            TaskProgress::Succeeded {
                entities: vec![TaskEntity {
                    kind: "vm".into(),
                    uuid: "u".into()
                }],
                unread_subtasks: Vec::new(),
            }
        );
        for (status, running) in [
            ("QUEUED", true),
            ("RUNNING", true),
            ("SUSPENDED", true),
            ("NEW", true),
        ] {
            let task: v3::Task =
                serde_json::from_value(json!({"status": status, "percentage_complete": 5}))
                    .unwrap();
            assert_eq!(!v3_progress("t", &task).is_terminal(), running, "{status}");
        }
        let task: v3::Task = serde_json::from_value(json!({
            "uuid": "t", "status": "ABORTED", "progress_message": "aborted by user"
        }))
        .unwrap();
        let TaskProgress::Failed(failure) = v3_progress("t", &task) else {
            panic!()
        };
        assert_eq!(failure.end, TaskEnd::Aborted);
        assert_eq!(failure.to_string(), "task t ABORTED (aborted by user)");
        let task: v3::Task = serde_json::from_value(json!({"status": "INVALID_UUID"})).unwrap();
        let TaskProgress::Failed(failure) = v3_progress("asked", &task) else {
            panic!()
        };
        assert_eq!(
            (failure.task.as_str(), failure.end),
            ("asked", TaskEnd::InvalidUuid)
        );
    }

    #[test]
    fn v4_failure_without_messages_is_still_terminal() {
        let task: v4::Task =
            serde_json::from_value(json!({"extId": "x", "status": "FAILED"})).unwrap();
        let TaskProgress::Failed(failure) = v4_progress("x", &task) else {
            panic!()
        };
        assert_eq!(failure.to_string(), "task x FAILED");
        let task: v4::Task = serde_json::from_value(json!({
            "extId": "x", "status": "FAILED", "legacyErrorMessage": "kNoResources"
        }))
        .unwrap();
        let TaskProgress::Failed(failure) = v4_progress("x", &task) else {
            panic!()
        };
        assert_eq!(failure.error_detail.as_deref(), Some("kNoResources"));
        let task: v4::Task = serde_json::from_value(json!({"status": "CANCELING"})).unwrap();
        assert!(!v4_progress("x", &task).is_terminal());
        let task: v4::Task = serde_json::from_value(json!({"status": "CANCELED"})).unwrap();
        assert!(
            matches!(v4_progress("x", &task), TaskProgress::Failed(f) if f.end == TaskEnd::Canceled)
        );
    }

    #[test]
    fn v3_failures_carry_their_typed_reasons_and_a_numeric_error_code() {
        let task: v3::Task = serde_json::from_value(json!({
            "uuid": "t", "status": "FAILED", "error_code": 409,
            "message_list": [{"reason": "CONCURRENT_REQUESTS_NOT_ALLOWED", "message": "Edit conflict: please retry change.",
                              "details": {"spec_version": ["3 is stale"]}}]
        }))
        .unwrap();
        let TaskProgress::Failed(failure) = v3_progress("t", &task) else {
            panic!()
        };
        assert_eq!(failure.error_code.as_deref(), Some("409"));
        assert!(
            failure
                .messages
                .has_reason("CONCURRENT_REQUESTS_NOT_ALLOWED")
        );
        assert_eq!(
            failure.messages.0[0].details.as_deref(),
            Some(r#"{"spec_version":["3 is stale"]}"#)
        );
        assert_eq!(
            failure.to_string(),
            "task t FAILED (code 409): CONCURRENT_REQUESTS_NOT_ALLOWED: Edit conflict: please retry change. \
             ({\"spec_version\":[\"3 is stale\"]})"
        );
        let task: v3::Task =
            serde_json::from_value(json!({"status": "FAILED", "error_code": "500"})).unwrap();
        assert_eq!(task.error_code.as_deref(), Some("500"));
        assert!(serde_json::from_value::<v3::Task>(json!({"error_code": [1]})).is_err());
    }

    #[test]
    fn v4_failures_carry_codes_and_error_groups() {
        let task: v4::Task = serde_json::from_value(json!({
            "extId": "x", "status": "FAILED",
            "errorMessages": [{"message": "Failed to perform the operation on the VM, because it is not found.",
                               "code": "VMM-30100", "errorGroup": "VM_NOT_FOUND", "severity": "ERROR"}]
        }))
        .unwrap();
        let TaskProgress::Failed(failure) = v4_progress("x", &task) else {
            panic!()
        };
        let message = &failure.messages.0[0];
        assert_eq!(
            (message.code.as_deref(), message.error_group.as_deref()),
            (Some("VMM-30100"), Some("VM_NOT_FOUND"))
        );
        assert!(failure.messages.has_code("VMM-30100"));
        assert!(failure.messages.has_error_group("VM_NOT_FOUND"));
    }

    #[test]
    fn failure_display_names_subtask_causes() {
        let failure = TaskFailure {
            task: "t".into(),
            end: TaskEnd::Failed,
            error_code: Some("500".into()),
            error_detail: Some("Internal error".into()),
            progress_message: None,
            messages: PrismMessages::default(),
            subtask_errors: vec![SubtaskError {
                task: "s".into(),
                end: TaskEnd::Failed,
                error_code: None,
                error_detail: Some("DHCP pool exhausted".into()),
                messages: PrismMessages::default(),
            }],
        };
        assert_eq!(
            failure.to_string(),
            "task t FAILED: Internal error (code 500); subtask s FAILED: DHCP pool exhausted"
        );
    }

    #[test]
    fn failure_display_stays_short_whatever_prism_wrote() {
        let long = "e".repeat(50_000);
        let subtask = SubtaskError {
            task: long.clone(),
            end: TaskEnd::Failed,
            error_code: Some(long.clone()),
            error_detail: Some(long.clone()),
            messages: PrismMessages::default(),
        };
        let failure = TaskFailure {
            task: long.clone(),
            end: TaskEnd::Failed,
            error_code: Some(long.clone()),
            error_detail: None,
            progress_message: Some(long.clone()),
            messages: PrismMessages::default(),
            subtask_errors: vec![subtask; MAX_SUBTASK_READS],
        };
        let shown = failure.to_string();
        // Per subtask: an id and a code of 256 characters, a detail of 300, and the words.
        assert!(
            shown.chars().count() < (MAX_SUBTASK_READS + 1) * 1_000,
            "{}",
            shown.chars().count()
        );
        assert!(shown.contains("… (50000 characters)"), "{shown}");
    }
}
