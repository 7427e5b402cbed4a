//! The request log: one record per API request, named as RBAC would name it, for tests that check a
//! controller's calls against its RBAC rules.

use std::collections::BTreeSet;
use std::sync::{Mutex, PoisonError};

use serde::Serialize;

/// One request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestRecord {
    /// RBAC verb: get, list, watch, create, update, patch, delete, deletecollection; for non-resource URLs the
    /// lower-case HTTP method.
    pub verb: String,
    /// HTTP method.
    pub method: String,
    /// Request path (no query).
    pub path: String,
    /// API group ("" for core).
    pub api_group: String,
    /// API version.
    pub api_version: String,
    /// Resource plural ("" for non-resource URLs).
    pub resource: String,
    /// Subresource ("" if none).
    pub subresource: String,
    /// Namespace ("" if none).
    pub namespace: String,
    /// Object name ("" for collections).
    pub name: String,
    /// `User-Agent` header.
    pub user_agent: String,
    /// User: the name in a `user:<name>` bearer token or basic auth; `bearer` for other tokens (never the token).
    pub user: String,
    /// HTTP status code of the response (200 for a watch that started).
    pub status: u16,
}

impl RequestRecord {
    /// Is this a request on a resource (not discovery or another non-resource URL)?
    pub fn is_resource_request(&self) -> bool {
        !self.resource.is_empty()
    }

    /// The resource as an RBAC rule names it: `pods`, `pods/eviction`, `machines/status`.
    pub fn rbac_resource(&self) -> String {
        if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        }
    }
}

/// One (API group, resource[/subresource], verb) an RBAC rule must allow.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct RbacCall {
    /// API group ("" for core).
    pub api_group: String,
    /// Resource, with `/subresource` if any.
    pub resource: String,
    /// RBAC verb.
    pub verb: String,
}

/// The distinct RBAC calls among resource requests whose user agent starts with `user_agent_prefix` (all if
/// empty): what a controller's ClusterRole must allow.
pub fn rbac_calls(records: &[RequestRecord], user_agent_prefix: &str) -> BTreeSet<RbacCall> {
    records
        .iter()
        .filter(|r| r.is_resource_request() && r.user_agent.starts_with(user_agent_prefix))
        .map(|r| RbacCall {
            api_group: r.api_group.clone(),
            resource: r.rbac_resource(),
            verb: r.verb.clone(),
        })
        .collect()
}

/// Bounded, shared request log.
#[derive(Debug)]
pub struct RequestLog {
    records: Mutex<Vec<RequestRecord>>,
    limit: usize,
}

impl RequestLog {
    /// A log keeping at most `limit` records (the oldest are dropped).
    pub fn new(limit: usize) -> Self {
        Self {
            records: Mutex::new(Vec::new()),
            limit: limit.max(1),
        }
    }

    /// Appends a record.
    pub fn push(&self, record: RequestRecord) {
        let mut records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
        if records.len() >= self.limit {
            let excess = records.len() + 1 - self.limit;
            records.drain(..excess);
        }
        records.push(record);
    }

    /// A copy of all records, oldest first.
    pub fn records(&self) -> Vec<RequestRecord> {
        self.records
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Forgets all records.
    pub fn clear(&self) {
        self.records
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }
}
