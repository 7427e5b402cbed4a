//! What the model answers when it refuses a request. A refusal says what is wrong in Prism's terms (its kind,
//! reason, error code and message); the HTTP layer (`errors.rs`) picks the status code and the body.

/// A request the model refuses.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum Refusal {
    /// v3: no such entity (404 `ENTITY_NOT_FOUND`).
    #[error("{kind} not found: {message}")]
    NotFound { kind: String, message: String },
    /// v3: the request is invalid (422 `INVALID_REQUEST`); each detail is a field and what is wrong with it.
    #[error("invalid {kind} request: {details:?}")]
    Invalid {
        kind: String,
        details: Vec<(String, String)>,
    },
    /// v3: the request conflicts with the entity's state (409), for Prism's `reason`.
    #[error("{kind} conflict {reason}: {message}")]
    Conflict {
        kind: String,
        reason: String,
        message: String,
    },
    /// v4: the input is invalid (400, group `INVALID_INPUT`), with the error code (`VMM-…`).
    #[error("{code}: {message}")]
    V4Invalid { code: &'static str, message: String },
    /// v4: an update without the `If-Match` its entity's ETag requires (PLAT-10004 `MISSING_ETAG_HEADER`).
    #[error("PLAT-10004: {message}")]
    V4EtagMissing { message: String },
    /// v4: an update whose `If-Match` is not its entity's current ETag (412 PLAT-10005).
    #[error("PLAT-10005: {message}")]
    V4EtagMismatch { message: String },
    /// v4: no such entity (404, group `ENTITY_NOT_FOUND`) in an API namespace (`vmm`, `prism`).
    #[error("{code}: {message}")]
    V4NotFound {
        namespace: &'static str,
        code: &'static str,
        message: String,
    },
}

impl Refusal {
    pub(crate) fn not_found(kind: &str, what: impl Into<String>) -> Self {
        Self::NotFound {
            kind: kind.to_owned(),
            message: what.into(),
        }
    }

    pub(crate) fn invalid(kind: &str, details: Vec<(String, String)>) -> Self {
        Self::Invalid {
            kind: kind.to_owned(),
            details,
        }
    }

    pub(crate) fn invalid_one(kind: &str, field: &str, message: impl Into<String>) -> Self {
        Self::invalid(kind, vec![(field.to_owned(), message.into())])
    }

    pub(crate) fn conflict(kind: &str, reason: &str, message: impl Into<String>) -> Self {
        Self::Conflict {
            kind: kind.to_owned(),
            reason: reason.to_owned(),
            message: message.into(),
        }
    }
}
