//! Idempotence identifiers and `users/me`.

use serde::{Deserialize, Serialize};

use super::common::{EntityMetadata, Extra};

/// Body of `POST /idempotence_identifiers`: reserve `count` UUIDs to pass as `metadata.uuid` on create.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IdempotenceIdentifiersRequest {
    pub client_identifier: String,
    /// 1..=4096.
    pub count: u32,
    /// At most 527040 (a year).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valid_duration_in_minutes: Option<u32>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// Response of `POST /idempotence_identifiers` and `GET /idempotence_identifiers/{client_identifier}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IdempotenceIdentifiers {
    #[serde(default)]
    pub uuid_list: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiration_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_identifier: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// Response of `GET /users/me`: the authenticated user.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct User {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<EntityMetadata>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<UserStatus>,
    #[serde(flatten)]
    pub extra: Extra,
}

impl User {
    /// The user's name (`status.name`, else `metadata.name`).
    pub fn name(&self) -> Option<&str> {
        self.status
            .as_ref()
            .and_then(|status| status.name.as_deref())
            .or_else(|| self.metadata.as_ref()?.name.as_deref())
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UserStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<UserResources>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UserResources {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// e.g. `LOCAL`, `DIRECTORY_SERVICE`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_type: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}
