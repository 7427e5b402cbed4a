//! The request log: one record per API request, named as RBAC would name it, for tests that check a
//! controller's calls against its RBAC rules.

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
