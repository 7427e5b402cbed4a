//! v4 tasks (`GET /api/prism/v4.0/config/tasks/{extId}`).

use serde::{Deserialize, Serialize};

use super::common::AppMessage;
use crate::open_enum;
use crate::v3::Extra;

open_enum! {
    /// `status` of a v4 task.
    pub enum TaskStatus {
        Queued = "QUEUED",
        Running = "RUNNING",
        Canceling = "CANCELING",
        Succeeded = "SUCCEEDED",
        Failed = "FAILED",
        Canceled = "CANCELED",
        Suspended = "SUSPENDED",
    }
}

impl TaskStatus {
    /// True when the task will not change any more (SUCCEEDED, FAILED, CANCELED).
    pub fn is_terminal(&self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Canceled)
    }
}

/// A v4 task.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    /// Looks like `<base64 service>:<uuid>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ext_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<TaskStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_percentage: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation_description: Option<String>,
    /// May list an entity twice or name one that cannot be found (seen on real VM-create tasks).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entities_affected: Vec<EntityAffected>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub error_messages: Vec<AppMessage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub legacy_error_message: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sub_tasks: Vec<SubTaskReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_time: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `entitiesAffected[]`: `{"extId": …, "rel": "vmm:ahv:config:vm"}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EntityAffected {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ext_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rel: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `subTasks[]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubTaskReference {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ext_id: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}
