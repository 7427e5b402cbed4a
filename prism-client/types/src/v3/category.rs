//! Categories: keys (`/categories/{key}`) and their values (`/categories/{key}/{value}`).

use serde::{Deserialize, Serialize};

use super::common::Extra;

/// A category key, as `GET /categories/{key}` returns it and `PUT /categories/{key}` takes it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CategoryKey {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_defined: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A category value, as `GET /categories/{key}/{value}` returns it and `PUT` takes it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CategoryValue {
    /// The key's name. Optional in a PUT body (the path names it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub value: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_defined: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}
