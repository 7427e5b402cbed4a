//! The v4 envelope, list metadata, references and error items.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::v3::Extra;

/// Every v4 response: `{"data": …, "metadata": {…}}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Envelope<T> {
    pub data: T,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ListMetadata>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A v4 list response: `{"data": [...], "metadata": {...}}`. A list with no item may have no `data` at all
/// (nutanix.ansible `plugins/modules/ntnx_templates_info_v2.py` answers `[]` when the SDK's
/// `ListTemplatesApiResponse.data`, an optional field, is unset); a missing or null `data` is an empty page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(bound(deserialize = "T: Deserialize<'de>"))]
pub struct ListEnvelope<T> {
    #[serde(default = "Vec::new", deserialize_with = "null_as_empty")]
    pub data: Vec<T>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ListMetadata>,
    #[serde(flatten)]
    pub extra: Extra,
}

fn null_as_empty<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    deserializer: D,
) -> Result<Vec<T>, D::Error> {
    Ok(Option::<Vec<T>>::deserialize(deserializer)?.unwrap_or_default())
}

/// `metadata` of a v4 response; lists carry `totalAvailableResults`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListMetadata {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_available_results: Option<u64>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `{"extId": "…"}`: a reference by external id (deploy returns the task this way).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExtIdReference {
    pub ext_id: String,
    #[serde(flatten)]
    pub extra: Extra,
}

impl ExtIdReference {
    pub fn new(ext_id: impl Into<String>) -> Self {
        Self {
            ext_id: ext_id.into(),
            extra: Extra::new(),
        }
    }
}

/// One v4 message (`errorMessages[]` of a task, `error[]` of an error body).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AppMessage {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// e.g. `ENTITY_NOT_FOUND`, `RATE_LIMIT_EXCEEDED`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub severity: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `data` of a v4 error body: `{"$errorItemDiscriminator": …, "error": [AppMessage…]}`. A schema validation
/// error puts one object (with `validationErrorMessages`) under `error` instead of a list; both decode.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ErrorData {
    #[serde(
        default,
        deserialize_with = "one_or_many_messages",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub error: Vec<AppMessage>,
    #[serde(flatten)]
    pub extra: Extra,
}

fn one_or_many_messages<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<AppMessage>, D::Error> {
    Ok(match Option::<Value>::deserialize(deserializer)? {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .into_iter()
            .map(serde_json::from_value)
            .collect::<Result<_, _>>()
            .map_err(serde::de::Error::custom)?,
        Some(other) => vec![serde_json::from_value(other).map_err(serde::de::Error::custom)?],
    })
}
