//! Error responses in the shapes real Prism Central uses (v3 `message_list`, v4 `AppMessage` list, 401 HTML).

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use serde_json::{Value, json};

use crate::store::Refusal;

/// An error answered to a client.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ApiError {
    /// v3 error body: `{api_version, code, kind, state: ERROR, message_list}`.
    V3(Box<V3Error>),
    /// v4 error body: `{data: {$errorItemDiscriminator, error: [AppMessage]}}`.
    V4 {
        status: StatusCode,
        namespace: &'static str,
        group: String,
        code: String,
        message: String,
    },
    /// 401 with an HTML page, as the real gateway answers.
    Unauthorized,
    /// 429 / 503 with `Retry-After`.
    Throttled {
        status: StatusCode,
        retry_after_secs: u64,
        v4: bool,
    },
}

/// Fields of a v3 error body.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct V3Error {
    pub(crate) status: StatusCode,
    pub(crate) kind: String,
    pub(crate) reason: String,
    pub(crate) message: String,
    pub(crate) details: Option<Value>,
}

impl ApiError {
    pub(crate) fn v3(
        status: StatusCode,
        kind: &str,
        reason: &str,
        message: impl Into<String>,
        details: Option<Value>,
    ) -> Self {
        Self::V3(Box::new(V3Error {
            status,
            kind: kind.to_owned(),
            reason: reason.to_owned(),
            message: message.into(),
            details,
        }))
    }

    pub(crate) fn not_found(kind: &str, what: impl Into<String>) -> Self {
        Self::v3(
            StatusCode::NOT_FOUND,
            kind,
            "ENTITY_NOT_FOUND",
            what.into(),
            None,
        )
    }

    /// 422 `INVALID_REQUEST`; each detail names the field it is about.
    pub(crate) fn invalid(kind: &str, details: Vec<(String, String)>) -> Self {
        let mut map = serde_json::Map::new();
        for (field, message) in details {
            match map.get_mut(&field) {
                Some(Value::Array(list)) => list.push(Value::String(message)),
                _ => {
                    map.insert(field, json!([message]));
                }
            }
        }
        Self::v3(
            StatusCode::UNPROCESSABLE_ENTITY,
            kind,
            "INVALID_REQUEST",
            "Request could not be processed.".to_owned(),
            Some(Value::Object(map)),
        )
    }

    pub(crate) fn invalid_one(kind: &str, field: &str, message: impl Into<String>) -> Self {
        Self::invalid(kind, vec![(field.to_owned(), message.into())])
    }

    pub(crate) fn conflict(kind: &str, reason: &str, message: impl Into<String>) -> Self {
        Self::v3(StatusCode::CONFLICT, kind, reason, message.into(), None)
    }

    /// A v4 error of the `vmm` namespace (templates).
    pub(crate) fn v4(
        status: StatusCode,
        group: &str,
        code: &str,
        message: impl Into<String>,
    ) -> Self {
        Self::v4_in("vmm", status, group, code, message)
    }

    /// A v4 error of the `prism` namespace (tasks).
    pub(crate) fn v4_prism(
        status: StatusCode,
        group: &str,
        code: &str,
        message: impl Into<String>,
    ) -> Self {
        Self::v4_in("prism", status, group, code, message)
    }

    fn v4_in(
        namespace: &'static str,
        status: StatusCode,
        group: &str,
        code: &str,
        message: impl Into<String>,
    ) -> Self {
        Self::V4 {
            status,
            namespace,
            group: group.to_owned(),
            code: code.to_owned(),
            message: message.into(),
        }
    }
}

/// The status and body Prism answers each refusal of the model with.
impl From<Refusal> for ApiError {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::NotFound { kind, message } => Self::not_found(&kind, message),
            Refusal::Invalid { kind, details } => Self::invalid(&kind, details),
            Refusal::Conflict {
                kind,
                reason,
                message,
            } => Self::conflict(&kind, &reason, message),
            Refusal::V4Invalid { code, message } => {
                Self::v4(StatusCode::BAD_REQUEST, "INVALID_INPUT", code, message)
            }
            // 428 for a missing If-Match is the HTTP status for a required precondition (RFC 6585): the reports
            // name only the code and group (nutanix/terraform-provider-nutanix#1231), not the status. The 412's
            // group is the mock's; nutanix/nutanix.ansible#706 shows only its code and message.
            Refusal::V4EtagMissing { message } => Self::v4(
                StatusCode::PRECONDITION_REQUIRED,
                "MISSING_ETAG_HEADER",
                "PLAT-10004",
                message,
            ),
            Refusal::V4EtagMismatch { message } => Self::v4(
                StatusCode::PRECONDITION_FAILED,
                "PRECONDITION_FAILED",
                "PLAT-10005",
                message,
            ),
            Refusal::V4NotFound {
                namespace,
                code,
                message,
            } => Self::v4_in(
                namespace,
                StatusCode::NOT_FOUND,
                "ENTITY_NOT_FOUND",
                code,
                message,
            ),
        }
    }
}

pub(crate) fn v3_error_body(
    status: StatusCode,
    kind: &str,
    reason: &str,
    message: &str,
    details: Option<&Value>,
) -> Value {
    let mut item = json!({"reason": reason, "message": message});
    if let (Some(details), Some(obj)) = (details, item.as_object_mut()) {
        obj.insert("details".to_owned(), details.clone());
    }
    json!({
        "api_version": "3.1",
        "code": status.as_u16(),
        "kind": kind,
        "state": "ERROR",
        "message_list": [item],
    })
}

pub(crate) fn v4_error_body(namespace: &str, group: &str, code: &str, message: &str) -> Value {
    json!({
        "data": {
            "$errorItemDiscriminator": format!("List<{namespace}.v4.error.AppMessage>"),
            "$objectType": format!("{namespace}.v4.error.ErrorResponse"),
            "error": [{
                "$objectType": format!("{namespace}.v4.error.AppMessage"),
                "errorGroup": group,
                "code": code,
                "message": message,
                "severity": "ERROR",
                "locale": "en_US",
            }],
        }
    })
}

const UNAUTHORIZED_PAGE: &str = "<!DOCTYPE html>\n<html><head><title>401 Unauthorized</title></head>\
<body><h1>Unauthorized</h1><p>Authentication is required to access this resource.</p></body></html>\n";

fn json_response(status: StatusCode, body: &Value) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let mut response = (status, bytes).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match self {
            Self::V3(e) => json_response(
                e.status,
                &v3_error_body(e.status, &e.kind, &e.reason, &e.message, e.details.as_ref()),
            ),
            Self::V4 {
                status,
                namespace,
                group,
                code,
                message,
            } => json_response(status, &v4_error_body(namespace, &group, &code, &message)),
            Self::Unauthorized => {
                let mut response = (StatusCode::UNAUTHORIZED, UNAUTHORIZED_PAGE).into_response();
                response
                    .headers_mut()
                    .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html"));
                response.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Basic realm=\"Prism Central\""),
                );
                response
            }
            Self::Throttled {
                status,
                retry_after_secs,
                v4,
            } => {
                let (reason, group, message) = if status == StatusCode::TOO_MANY_REQUESTS {
                    (
                        "TOO_MANY_REQUESTS",
                        "RATE_LIMIT_EXCEEDED",
                        "Too many requests, please retry later.",
                    )
                } else {
                    (
                        "SERVICE_UNAVAILABLE",
                        "SERVICE_UNAVAILABLE",
                        "Service temporarily unavailable.",
                    )
                };
                let body = if v4 {
                    v4_error_body(
                        "prism",
                        group,
                        &format!("PRISM-{}", status.as_u16()),
                        message,
                    )
                } else {
                    v3_error_body(status, "", reason, message, None)
                };
                let mut response = json_response(status, &body);
                if let Ok(value) = HeaderValue::from_str(&retry_after_secs.to_string()) {
                    response.headers_mut().insert(header::RETRY_AFTER, value);
                }
                response
            }
        }
    }
}

/// A 200/202 JSON response.
pub(crate) fn json_ok(status: StatusCode, body: Value) -> Response {
    json_response(status, &body)
}
