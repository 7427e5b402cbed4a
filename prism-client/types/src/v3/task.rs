//! v3 tasks (`GET /tasks/{uuid}`).

use serde::{Deserialize, Serialize};

use serde::Deserializer;
use serde_json::Value;

use super::common::{EntityReference, Extra, Message, Reference};
use crate::open_enum;

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
    /// A string in the v3 schema (`task.error_code`), read as a number too: peers treat it as an HTTP-like
    /// status (nutanix.ansible `plugins/module_utils/v3/prism/tasks.py` reports it as `status_code`). A number is
    /// kept as its decimal text.
    #[serde(
        default,
        deserialize_with = "string_or_number",
        skip_serializing_if = "Option::is_none"
    )]
    pub error_code: Option<String>,
    /// Messages with a machine-readable `reason`, as in a v3 error body. Not in the schema's `task`: read when
    /// present (no real task answer with it was found), so that a cause is never lost.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub message_list: Vec<Message>,
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

/// `"500"`, `500` or `null`.
fn string_or_number<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<String>, D::Error> {
    Ok(match Option::<Value>::deserialize(deserializer)? {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => Some(text),
        Some(Value::Number(number)) => Some(number.to_string()),
        Some(other) => {
            return Err(serde::de::Error::custom(format!(
                "error_code must be a string or a number, not {other}"
            )));
        }
    })
}
