//! Shapes shared by every v3 entity: references, metadata, lists, messages, execution context.

use std::collections::BTreeMap;
use std::marker::PhantomData;

use serde::de::{DeserializeOwned, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

use crate::open_enum;
use crate::quote::{MAX_QUOTED_CHARS, bounded};

/// Fields we do not model, kept so that a read-modify-write sends them back unchanged.
pub type Extra = Map<String, Value>;

/// A reference to another entity: `{"kind":"cluster","uuid":"…","name":"…"}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Reference {
    /// Entity kind (`cluster`, `subnet`, `image`, `project`, `task`, …). Defaults to empty when Prism omits it.
    #[serde(default)]
    pub kind: String,
    pub uuid: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

impl Reference {
    /// A reference with no name.
    pub fn new(kind: impl Into<String>, uuid: impl Into<String>) -> Self {
        Self {
            kind: kind.into(),
            uuid: uuid.into(),
            name: None,
            extra: Extra::new(),
        }
    }
    pub fn cluster(uuid: impl Into<String>) -> Self {
        Self::new("cluster", uuid)
    }
    pub fn subnet(uuid: impl Into<String>) -> Self {
        Self::new("subnet", uuid)
    }
    pub fn image(uuid: impl Into<String>) -> Self {
        Self::new("image", uuid)
    }
    pub fn project(uuid: impl Into<String>) -> Self {
        Self::new("project", uuid)
    }
    pub fn storage_container(uuid: impl Into<String>) -> Self {
        Self::new("storage_container", uuid)
    }
}

/// The v3 schema's generic `reference` (task entities, a VM's host): unlike the typed references (`cluster_reference`,
/// `subnet_reference`, ...), which require `kind` and `uuid`, it requires no field.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EntityReference {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `metadata` of any v3 entity (VMs, images, subnets, clusters, projects, hosts, users).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EntityMetadata {
    /// `vm`, `image`, `subnet`, … Defaults to empty when Prism omits it.
    #[serde(default)]
    pub kind: String,
    /// Set by Prism; on create, a UUID reserved through `idempotence_identifiers`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Send on update the value last read: a stale one gets 409.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_version: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_reference: Option<Reference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_reference: Option<Reference>,
    /// Category key → value. Kept as received, an empty map included, so that an update sends back what a GET
    /// returned (real VMs carry `"categories": {}`: `hack/prism-mock/recorded/get_vm.json`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub categories: Option<BTreeMap<String, String>>,
    /// Category key → values, used when `use_categories_mapping` is true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub categories_mapping: Option<BTreeMap<String, Vec<String>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_categories_mapping: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

impl EntityMetadata {
    /// Metadata with only the kind set.
    pub fn of_kind(kind: impl Into<String>) -> Self {
        Self {
            kind: kind.into(),
            ..Self::default()
        }
    }
}

open_enum! {
    /// `status.state` of an intentful entity.
    pub enum EntityState {
        Pending = "PENDING",
        Complete = "COMPLETE",
        Error = "ERROR",
        DeletePending = "DELETE_PENDING",
        Running = "RUNNING",
    }
}

/// One entry of `message_list` (errors and warnings).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Message {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// e.g. `ENTITY_NOT_FOUND`, `INVALID_REQUEST`, `CONCURRENT_REQUESTS_NOT_ALLOWED`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Free-form details, e.g. `{"": ["'api_version' is a required property"]}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `status.execution_context`: the task(s) working on the entity.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExecutionContext {
    /// A string in create/update responses, a list in get/list responses: both decode to a list.
    #[serde(
        default,
        deserialize_with = "string_or_list",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub task_uuid: Vec<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

impl ExecutionContext {
    /// The first (in create/update responses, the only) task UUID.
    pub fn task_uuid(&self) -> Option<&str> {
        self.task_uuid.first().map(String::as_str)
    }
}

/// Accepts `"a"`, `["a","b"]` or `null`.
fn string_or_list<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match Option::<OneOrMany>::deserialize(deserializer)? {
        None => Vec::new(),
        Some(OneOrMany::One(uuid)) => vec![uuid],
        Some(OneOrMany::Many(uuids)) => uuids,
    })
}

open_enum! {
    /// `sort_order` of a list request.
    pub enum SortOrder {
        Ascending = "ASCENDING",
        Descending = "DESCENDING",
    }
}

/// Body of `POST /<kind>/list`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ListRequest {
    pub kind: String,
    /// FIQL filter; deprecated by Prism and matching partially. Prefer client-side filtering.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub length: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sort_attribute: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sort_order: Option<SortOrder>,
    #[serde(flatten)]
    pub extra: Extra,
}

impl ListRequest {
    /// A request for one page of entities of `kind`.
    pub fn page(kind: impl Into<String>, offset: u32, length: u32) -> Self {
        Self {
            kind: kind.into(),
            offset: Some(offset),
            length: Some(length),
            ..Self::default()
        }
    }
}

/// `metadata` of a list response.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ListMetadata {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_matches: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub length: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// Response of `POST /<kind>/list`.
///
/// Each entity decodes on its own: one that does not (a VM in an odd state, a shape this crate does not expect)
/// is left out of `entities` and reported in `skipped`, so that it never fails the whole page.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ListResponse<T> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    pub metadata: ListMetadata,
    pub entities: Vec<T>,
    /// The entities of this page that could not be decoded; never sent.
    #[serde(skip)]
    pub skipped: Vec<SkippedEntity>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A listed entity that could not be decoded, with what could be read of it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SkippedEntity {
    /// `metadata.uuid` (else a top-level `uuid`), when it is a string.
    pub uuid: Option<String>,
    /// `spec.name`, else `status.name`, else `metadata.name`, else a top-level `name`.
    pub name: Option<String>,
    /// Why it did not decode (the decoder's message, cut to a few hundred characters).
    pub reason: String,
}

impl SkippedEntity {
    fn of(entity: &Value, error: &serde_json::Error) -> Self {
        let text = |path: &[&str]| {
            path.iter()
                .try_fold(entity, |value, key| value.get(key))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        Self {
            uuid: text(&["metadata", "uuid"]).or_else(|| text(&["uuid"])),
            name: text(&["spec", "name"])
                .or_else(|| text(&["status", "name"]))
                .or_else(|| text(&["metadata", "name"]))
                .or_else(|| text(&["name"])),
            reason: bounded(&error.to_string(), SKIPPED_REASON_CHARS).to_string(),
        }
    }
}

impl std::fmt::Display for SkippedEntity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({}): {}",
            bounded(
                self.uuid.as_deref().unwrap_or("<no uuid>"),
                MAX_QUOTED_CHARS
            ),
            bounded(
                self.name.as_deref().unwrap_or("<no name>"),
                MAX_QUOTED_CHARS
            ),
            self.reason
        )
    }
}

/// Characters of a decoder message kept in a [`SkippedEntity`].
const SKIPPED_REASON_CHARS: usize = 300;

/// One entity of a list: decoded, or kept aside with what could be read of it.
enum ListedEntity<T> {
    Read(T),
    Unread(SkippedEntity),
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for ListedEntity<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        Ok(match T::deserialize(&value) {
            Ok(entity) => Self::Read(entity),
            Err(error) => Self::Unread(SkippedEntity::of(&value, &error)),
        })
    }
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for ListResponse<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct PageVisitor<T>(PhantomData<T>);

        impl<'de, T: DeserializeOwned> Visitor<'de> for PageVisitor<T> {
            type Value = ListResponse<T>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a v3 list response object")
            }

            // A map visitor rather than derived code: `#[serde(flatten)]` would buffer the whole page before any
            // entity is looked at; here each entity is held as JSON only while it is decoded.
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut page = ListResponse {
                    api_version: None,
                    metadata: ListMetadata::default(),
                    entities: Vec::new(),
                    skipped: Vec::new(),
                    extra: Extra::new(),
                };
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "api_version" => page.api_version = map.next_value()?,
                        "metadata" => {
                            page.metadata = map
                                .next_value::<Option<ListMetadata>>()?
                                .unwrap_or_default();
                        }
                        "entities" => {
                            let listed: Option<Vec<ListedEntity<T>>> = map.next_value()?;
                            for entity in listed.into_iter().flatten() {
                                match entity {
                                    ListedEntity::Read(entity) => page.entities.push(entity),
                                    ListedEntity::Unread(skipped) => page.skipped.push(skipped),
                                }
                            }
                        }
                        _ => {
                            let value: Value = map.next_value()?;
                            page.extra.insert(key, value);
                        }
                    }
                }
                Ok(page)
            }
        }

        deserializer.deserialize_map(PageVisitor(PhantomData))
    }
}

/// A procedural response: `{"task_uuid":"…"}` (clone, some actions).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskReference {
    pub task_uuid: String,
    #[serde(flatten)]
    pub extra: Extra,
}

/// Status part of a delete response: `{"status":{"state":"DELETE_PENDING","execution_context":{…}},"metadata":{…}}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeleteStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<EntityState>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_context: Option<ExecutionContext>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub message_list: Vec<Message>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// Response of `DELETE /<kind>/{uuid}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeleteResponse {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<EntityMetadata>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<DeleteStatus>,
    #[serde(flatten)]
    pub extra: Extra,
}

impl DeleteResponse {
    /// The task that performs the delete, if Prism named one.
    pub fn task_uuid(&self) -> Option<&str> {
        self.status
            .as_ref()?
            .execution_context
            .as_ref()?
            .task_uuid()
    }
}
