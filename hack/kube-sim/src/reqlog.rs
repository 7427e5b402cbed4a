//! The request log: one record per API request, named as RBAC would name it, for tests that check a
//! controller's calls against its RBAC rules.

use std::collections::BTreeSet;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

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

/// A request with when it arrived and when its answer was ready. `Instant`s of one process
/// compare across servers, so that an in-process test can order what a client sent to kube-sim
/// and to another server (a request answered before another arrived came first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimedRequest {
    /// When the request arrived, before it was routed.
    pub received: Instant,
    /// When its answer was ready, after any write it made was applied.
    pub answered: Instant,
    /// The request.
    pub record: RequestRecord,
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
    records: Mutex<Vec<TimedRequest>>,
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

    /// Appends a request.
    pub fn push(&self, request: TimedRequest) {
        let mut records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
        if records.len() >= self.limit {
            let excess = records.len() + 1 - self.limit;
            records.drain(..excess);
        }
        records.push(request);
    }

    /// A copy of all records, oldest first.
    pub fn records(&self) -> Vec<RequestRecord> {
        self.records
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|request| request.record.clone())
            .collect()
    }

    /// A copy of all requests with their times, in the order their answers were ready.
    pub fn timed_records(&self) -> Vec<TimedRequest> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn record(name: &str) -> RequestRecord {
        RequestRecord {
            verb: "patch".into(),
            method: "PATCH".into(),
            path: format!("/api/v1/namespaces/default/configmaps/{name}"),
            api_group: String::new(),
            api_version: "v1".into(),
            resource: "configmaps".into(),
            subresource: String::new(),
            namespace: "default".into(),
            name: name.into(),
            user_agent: "test".into(),
            user: "tester".into(),
            status: 200,
        }
    }

    fn timed(name: &str) -> TimedRequest {
        let received = Instant::now();
        TimedRequest {
            received,
            answered: Instant::now(),
            record: record(name),
        }
    }

    #[test]
    fn the_log_keeps_each_request_with_its_times_and_drops_the_oldest_past_its_limit() {
        let log = RequestLog::new(2);
        let (first, second, third) = (timed("a"), timed("b"), timed("c"));
        log.push(first);
        log.push(second.clone());
        log.push(third.clone());
        assert_eq!(log.timed_records(), [second.clone(), third.clone()]);
        assert_eq!(log.records(), [second.record, third.record]);
        log.clear();
        assert!(log.timed_records().is_empty());
    }
}
