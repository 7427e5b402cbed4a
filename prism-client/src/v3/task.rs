//! v3 tasks (`GET /tasks/{uuid}`).

use serde::{Deserialize, Serialize};

use super::common::{EntityReference, Extra, Reference};
use crate::open_enum::open_enum;

open_enum! {
    /// `status` of a v3 task.
    pub enum TaskStatus {
        Queued = "QUEUED",
        Running = "RUNNING",
        Succeeded = "SUCCEEDED",
        Failed = "FAILED",
        Aborted = "ABORTED",
        Suspended = "SUSPENDED",
        /// Reported for a task UUID Prism does not know; terminal.
        InvalidUuid = "INVALID_UUID",
    }
}

impl TaskStatus {
    /// True when the task will not change any more. SUSPENDED is not terminal: it may resume.
    /// An unknown status counts as not terminal, so a caller keeps watching rather than guessing an outcome.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            Self::Succeeded | Self::Failed | Self::Aborted | Self::InvalidUuid
        )
    }
}

/// A v3 task.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Task {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<TaskStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percentage_complete: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_message: Option<String>,
    /// e.g. `kVmCreate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_detail: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entity_reference_list: Vec<EntityReference>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subtask_reference_list: Vec<Reference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_task_reference: Option<Reference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_reference: Option<Reference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logical_timestamp: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}
