//! API errors, rendered as `metav1.Status` bodies with the codes and reasons the real API server uses.

use serde_json::{Value, json};

/// An error the simulated API server returns to a client, as a `metav1.Status`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// `metav1.StatusReason` (`NotFound`, `AlreadyExists`, `Conflict`, `Invalid`...).
    pub reason: &'static str,
    /// Human-readable message, worded like the real server's.
    pub message: String,
    /// `details` of the Status (name, group, kind, causes), if any.
    pub details: Option<Value>,
}

/// Identifies the object an error is about, for `Status.details`.
#[derive(Debug, Clone, Copy)]
pub struct Subject<'a> {
    /// API group ("" for core).
    pub group: &'a str,
    /// Resource plural (`machines`).
    pub resource: &'a str,
    /// Object name.
    pub name: &'a str,
}

impl Subject<'_> {
    fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.resource.to_string()
        } else {
            format!("{}.{}", self.resource, self.group)
        }
    }

    fn details(&self) -> Value {
        json!({"name": self.name, "group": self.group, "kind": self.resource})
    }
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    /// 404 for a named object.
    pub fn not_found(subject: Subject<'_>) -> Self {
        Self {
            details: Some(subject.details()),
            ..Self::new(
                404,
                "NotFound",
                format!("{} \"{}\" not found", subject.qualified(), subject.name),
            )
        }
    }

    /// 404 for a path that names no known resource.
    pub fn unknown_path(path: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({path})"),
        )
    }

    /// 409 AlreadyExists on create.
    pub fn already_exists(subject: Subject<'_>) -> Self {
        Self {
            details: Some(subject.details()),
            ..Self::new(
                409,
                "AlreadyExists",
                format!(
                    "{} \"{}\" already exists",
                    subject.qualified(),
                    subject.name
                ),
            )
        }
    }

    /// 409 Conflict for a stale resourceVersion or failed precondition.
    pub fn conflict(subject: Subject<'_>, why: &str) -> Self {
        Self {
            details: Some(subject.details()),
            ..Self::new(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {} \"{}\": {why}",
                    subject.qualified(),
                    subject.name
                ),
            )
        }
    }

    /// 422 Invalid, with one cause naming the field.
    pub fn invalid(subject: Subject<'_>, kind: &str, field: &str, message: &str) -> Self {
        let mut details = subject.details();
        details["kind"] = json!(kind);
        details["causes"] =
            json!([{"reason": "FieldValueInvalid", "message": message, "field": field}]);
        Self {
            details: Some(details),
            ..Self::new(
                422,
                "Invalid",
                format!("{kind} \"{}\" is invalid: {field}: {message}", subject.name),
            )
        }
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 403 Forbidden (an admission webhook's denial).
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message)
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    /// 410 Gone / Expired: the resourceVersion is older than the retained history.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 415 UnsupportedMediaType (for example strategic merge patch on a custom resource).
    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        Self::new(415, "UnsupportedMediaType", message)
    }

    /// 429 TooManyRequests (an eviction blocked by a PodDisruptionBudget).
    pub fn too_many_requests(message: impl Into<String>, causes: Value) -> Self {
        Self {
            details: Some(json!({"causes": causes})),
            ..Self::new(429, "TooManyRequests", message)
        }
    }

    /// 500 for a broken invariant inside the simulator.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// The `metav1.Status` body.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(details) = &self.details {
            status["details"] = details.clone();
        }
        status
    }
}

/// Result alias for API handlers.
pub type ApiResult<T> = Result<T, ApiError>;
