//! Errors: one variant per cause, each naming the endpoint involved. No secret ever reaches a message.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;

use crate::message::{MAX_MESSAGE_CHARS, PrismMessage, PrismMessages};
use crate::quote::{MAX_QUOTED_CHARS, bounded, quoted};
use crate::task::TaskFailure;

/// Characters of an undecodable body kept in a decode error.
const EXCERPT_CHARS: usize = 160;

/// A problem with the configuration, found when the client is built.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("invalid Prism Central endpoint {endpoint:?}: {reason}")]
    InvalidEndpoint { endpoint: String, reason: String },
    #[error("cannot read the CA bundle {path}: {source}")]
    CaBundleUnreadable {
        path: String,
        source: std::io::Error,
    },
    #[error("the CA bundle {origin} is not valid PEM: {reason}")]
    CaBundleInvalid { origin: String, reason: String },
    #[error("the CA bundle {origin} holds no CERTIFICATE block")]
    CaBundleWithoutCertificates { origin: String },
    #[error("the CA bundle {origin} holds a {kind} block; only CERTIFICATE blocks are accepted")]
    CaBundleNotCertificate { origin: String, kind: String },
    #[error("the CA bundle {origin} has a certificate rustls refuses: {reason}")]
    CaBundleBadCertificate { origin: String, reason: String },
    #[error("session auth needs a user name and password, not an API key")]
    SessionNeedsBasicCredentials,
    #[error("invalid proxy URL: {reason}")]
    InvalidProxy { reason: String },
    #[error("invalid rate limit: {reason}")]
    InvalidRateLimit { reason: String },
    #[error("invalid retry policy: {reason}")]
    InvalidRetryPolicy { reason: String },
    #[error("invalid list_page_size 0: it must be at least 1")]
    InvalidPageSize,
    #[error("invalid max_body_bytes 0: it must be at least 1")]
    InvalidBodyLimit,
    /// A plain `http://` endpoint without `allow_plain_http`: every request would carry the
    /// credentials (a password or API key, or the session cookie) in clear text.
    #[error(
        "Prism Central endpoint {endpoint} is plain http://, which would send the credentials in clear text: \
         use https://, or allow plain HTTP explicitly (a lab or test server only)"
    )]
    PlainHttpRefused { endpoint: String },
    #[error("cannot set up TLS: {reason}")]
    Tls { reason: String },
    #[error("cannot build the HTTP client: {reason}")]
    HttpClient { reason: String },
}

/// What failed at the transport level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportKind {
    /// TCP connect failed (refused, unreachable, DNS).
    Connect,
    /// The TLS handshake failed (unknown CA, bad certificate, protocol).
    Tls,
    /// The connect or request timeout passed.
    Timeout,
    /// Anything else (connection reset while reading the body, ...).
    Other,
}

impl fmt::Display for TransportKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Connect => "connect",
            Self::Tls => "TLS",
            Self::Timeout => "timeout",
            Self::Other => "transport",
        })
    }
}

/// Every way a call can fail. `endpoint` is the endpoint template (`GET /vms/{uuid}`).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// 404, `ENTITY_NOT_FOUND`.
    #[error("{endpoint}: not found ({messages})")]
    NotFound {
        endpoint: &'static str,
        messages: PrismMessages,
    },
    /// 401. Prism's body is not JSON and is not kept.
    #[error("{endpoint}: unauthorized (401): the credentials were refused")]
    Unauthorized { endpoint: &'static str },
    /// 403.
    #[error("{endpoint}: forbidden (403): {messages}")]
    Forbidden {
        endpoint: &'static str,
        messages: PrismMessages,
    },
    /// 409: a stale `spec_version`, a concurrent change, or an entity (or reserved UUID) already used. Tell them
    /// apart by `messages` (`reason`, `code`, `error_group`): a v3 edit conflict is `{"code": 409, "message_list":
    /// [{"reason": "CONCURRENT_REQUESTS_NOT_ALLOWED", "message": "Edit conflict: please retry change."}]}`
    /// (gomorpheus/morpheus-nutanix-prism-plugin `isApiRetryRequired` retries exactly that).
    #[error("{endpoint}: conflict (409): {messages}")]
    Conflict {
        endpoint: &'static str,
        messages: PrismMessages,
    },
    /// 400 or 422: Prism refused the request (`INVALID_REQUEST` with details).
    #[error("{endpoint}: invalid request ({status}): {messages}")]
    Invalid {
        endpoint: &'static str,
        status: u16,
        messages: PrismMessages,
    },
    /// 429.
    #[error("{endpoint}: rate limited (429){}", retry_after_text(*.retry_after))]
    RateLimited {
        endpoint: &'static str,
        retry_after: Option<Duration>,
    },
    /// 5xx. `retry_after` is the answer's `Retry-After` (a 503 may carry one, as a 429 does: RFC 9110 §10.2.3).
    #[error("{endpoint}: server error ({status}): {messages}{}", retry_after_text(*.retry_after))]
    Server {
        endpoint: &'static str,
        status: u16,
        messages: PrismMessages,
        retry_after: Option<Duration>,
    },
    /// Any other non-2xx status.
    #[error("{endpoint}: unexpected HTTP status {status}: {messages}")]
    UnexpectedStatus {
        endpoint: &'static str,
        status: u16,
        messages: PrismMessages,
    },
    /// No response: connect, TLS, timeout or a broken connection.
    #[error("{endpoint}: {kind} error: {detail}")]
    Transport {
        endpoint: &'static str,
        kind: TransportKind,
        /// The error and its causes, one line.
        detail: String,
    },
    /// The answer's body is longer than the client's limit (`ClientConfig::max_body_bytes`): it was
    /// not read to its end, and the same request would get the same answer.
    #[error(
        "{endpoint}: the answer ({status}) has a body longer than the limit of {limit} bytes; it was not read"
    )]
    BodyTooLarge {
        endpoint: &'static str,
        status: u16,
        limit: u64,
    },
    /// A 2xx whose body is not what the endpoint returns.
    #[error(
        "{endpoint}: cannot decode the response ({status}): {reason}; body starts with {excerpt:?}"
    )]
    Decode {
        endpoint: &'static str,
        status: u16,
        reason: String,
        excerpt: String,
    },
    /// The request body could not be serialised (a map with non-string keys in `extra`, for instance).
    #[error("{endpoint}: cannot encode the request body: {reason}")]
    Encode {
        endpoint: &'static str,
        reason: String,
    },
    /// Session login (`GET /users/me`) succeeded but set no cookie.
    #[error("{endpoint}: session login returned no cookie")]
    NoSessionCookie { endpoint: &'static str },
    /// `find_by_exact_name` found more than one entity with the name.
    #[error(
        "{count} {kind} entities are named {name:?}: {uuids}",
        count = .uuids.len(),
        name = quoted(.name),
        uuids = bounded(&.uuids.join(", "), MAX_MESSAGE_CHARS)
    )]
    DuplicateName {
        kind: &'static str,
        name: String,
        uuids: Vec<String>,
    },
    /// `find_by_exact_name`: an entity with the name was listed but could not be decoded, so whether it is the
    /// one looked for cannot be told.
    #[error("a {kind} entity named {name:?} was listed but cannot be read: {entity}", name = quoted(.name))]
    UnreadableMatch {
        kind: &'static str,
        name: String,
        entity: crate::v3::SkippedEntity,
    },
    /// A listing did not end within [`crate::MAX_LIST_PAGES`] pages: the server keeps announcing more
    /// entities than it hands out (for example it ignores `offset`). Returning the partial list could make
    /// present entities look missing, so the listing fails instead.
    #[error("{endpoint}: listing did not end after {pages} pages ({collected} entities received)")]
    ListDidNotEnd {
        endpoint: &'static str,
        pages: u32,
        collected: usize,
    },
    /// A task ended without success (`wait_task`).
    #[error("{0}")]
    TaskFailed(Box<TaskFailure>),
    /// `wait_task` gave up.
    #[error(
        "task {task} still {last_status} after {waited:?}",
        task = bounded(.task, MAX_QUOTED_CHARS),
        last_status = bounded(.last_status, MAX_QUOTED_CHARS)
    )]
    TaskTimeout {
        task: String,
        last_status: String,
        waited: Duration,
    },
}

fn retry_after_text(retry_after: Option<Duration>) -> String {
    retry_after
        .map(|delay| format!(", retry after {}s", delay.as_secs()))
        .unwrap_or_default()
}

impl Error {
    /// True when the same request may succeed later unchanged: 429, 5xx and transport failures other than TLS.
    /// A 409 is not: the caller must read the entity again and rebuild the request. Nor is a body above the
    /// limit ([`Error::BodyTooLarge`]): the same request gets the same answer.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::RateLimited { .. } | Self::Server { .. } => true,
            Self::Transport { kind, .. } => *kind != TransportKind::Tls,
            _ => false,
        }
    }

    /// True for the errors the client retries by itself on idempotent calls: 429, 502, 503, 504 and transport
    /// failures other than TLS (a 500 may be a bug that repeats; the caller decides).
    pub fn is_auto_retryable(&self) -> bool {
        match self {
            Self::RateLimited { .. } => true,
            Self::Server { status, .. } => matches!(status, 502..=504),
            Self::Transport { kind, .. } => *kind != TransportKind::Tls,
            _ => false,
        }
    }

    /// The delay a 429 or a 5xx (typically a 503) asked for with `Retry-After`.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::RateLimited { retry_after, .. } | Self::Server { retry_after, .. } => {
                *retry_after
            }
            _ => None,
        }
    }

    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::NotFound { .. })
    }

    pub fn is_conflict(&self) -> bool {
        matches!(self, Self::Conflict { .. })
    }

    /// The HTTP status, when there was a response.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::NotFound { .. } => Some(404),
            Self::Unauthorized { .. } => Some(401),
            Self::Forbidden { .. } => Some(403),
            Self::Conflict { .. } => Some(409),
            Self::RateLimited { .. } => Some(429),
            Self::Invalid { status, .. }
            | Self::Server { status, .. }
            | Self::UnexpectedStatus { status, .. }
            | Self::BodyTooLarge { status, .. }
            | Self::Decode { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The endpoint template, when the error came from one call.
    pub fn endpoint(&self) -> Option<&'static str> {
        match self {
            Self::NotFound { endpoint, .. }
            | Self::Unauthorized { endpoint }
            | Self::Forbidden { endpoint, .. }
            | Self::Conflict { endpoint, .. }
            | Self::Invalid { endpoint, .. }
            | Self::RateLimited { endpoint, .. }
            | Self::Server { endpoint, .. }
            | Self::UnexpectedStatus { endpoint, .. }
            | Self::Transport { endpoint, .. }
            | Self::BodyTooLarge { endpoint, .. }
            | Self::Decode { endpoint, .. }
            | Self::Encode { endpoint, .. }
            | Self::NoSessionCookie { endpoint }
            | Self::ListDidNotEnd { endpoint, .. } => Some(endpoint),
            _ => None,
        }
    }
}

/// Maps a non-2xx response to its error. `retry_after` is the parsed `Retry-After` header.
pub fn from_status(
    endpoint: &'static str,
    status: u16,
    retry_after: Option<Duration>,
    body: &[u8],
) -> Error {
    if status == 401 {
        return Error::Unauthorized { endpoint };
    }
    let messages = parse_messages(body);
    match status {
        403 => Error::Forbidden { endpoint, messages },
        404 => Error::NotFound { endpoint, messages },
        409 => Error::Conflict { endpoint, messages },
        400 | 422 => Error::Invalid {
            endpoint,
            status,
            messages,
        },
        429 => Error::RateLimited {
            endpoint,
            retry_after,
        },
        500..=599 => Error::Server {
            endpoint,
            status,
            messages,
            retry_after,
        },
        _ => Error::UnexpectedStatus {
            endpoint,
            status,
            messages,
        },
    }
}

/// A body that did not decode.
pub fn decode_error(
    endpoint: &'static str,
    status: u16,
    body: &[u8],
    error: &serde_json::Error,
) -> Error {
    let text = String::from_utf8_lossy(body);
    Error::Decode {
        endpoint,
        status,
        // serde quotes the offending value, which can be as long as the body.
        reason: bounded(&error.to_string(), MAX_MESSAGE_CHARS).to_string(),
        excerpt: bounded(&text, EXCERPT_CHARS).to_string(),
    }
}

/// The messages of a v3 error (`message_list` at the top level or under `status`) or a v4 error
/// (`data.error[]`). A body that is not JSON gives one message with a short excerpt of it.
fn parse_messages(body: &[u8]) -> PrismMessages {
    #[derive(Deserialize)]
    struct V3Status {
        #[serde(default)]
        message_list: Vec<crate::v3::Message>,
    }
    #[derive(Deserialize)]
    struct Body {
        #[serde(default)]
        message_list: Vec<crate::v3::Message>,
        status: Option<V3Status>,
        message: Option<String>,
        data: Option<crate::v4::ErrorData>,
    }

    if body.iter().all(u8::is_ascii_whitespace) {
        return PrismMessages::default();
    }
    let Ok(parsed) = serde_json::from_slice::<Body>(body) else {
        let text = String::from_utf8_lossy(body);
        return PrismMessages(vec![PrismMessage {
            message: Some(format!(
                "non-JSON body: {:?}",
                bounded(text.trim(), EXCERPT_CHARS)
            )),
            ..PrismMessage::default()
        }]);
    };
    let v3 = parsed
        .message_list
        .into_iter()
        .chain(
            parsed
                .status
                .into_iter()
                .flat_map(|status| status.message_list),
        )
        .map(|message| PrismMessage::from_v3(&message));
    let v4 = parsed
        .data
        .into_iter()
        .flat_map(|data| data.error)
        .map(|message| PrismMessage::from_v4(&message));
    let mut messages: Vec<PrismMessage> = v3.chain(v4).collect();
    if messages.is_empty()
        && let Some(message) = parsed.message
    {
        messages.push(PrismMessage {
            message: Some(message),
            ..PrismMessage::default()
        });
    }
    PrismMessages(messages)
}

#[cfg(test)]
mod tests {
    use super::*;

    const E404: &[u8] = include_bytes!("../../tests/fixtures/v3/error_404.json");
    const E422: &[u8] = include_bytes!("../../tests/fixtures/v3/error_422.json");
    const NESTED: &[u8] = include_bytes!("../../tests/fixtures/v3/error_nested.json");
    const V4_LIST: &[u8] = include_bytes!("../../tests/fixtures/v4/error_list.json");

    #[test]
    fn not_found_keeps_the_reason() {
        let error = from_status("GET /vms/{uuid}", 404, None, E404);
        let Error::NotFound { messages, .. } = &error else {
            panic!("{error:?}")
        };
        assert!(messages.has_reason("ENTITY_NOT_FOUND"));
        assert!(error.is_not_found() && !error.is_retryable());
        assert_eq!(
            error.to_string(),
            "GET /vms/{uuid}: not found (ENTITY_NOT_FOUND: VM 7f4e3a2b-1c0d-4e5f-8a9b-0c1d2e3f4a5b not found)"
        );
    }

    #[test]
    fn invalid_request_keeps_details() {
        let error = from_status("POST /vms", 422, None, E422);
        assert_eq!(
            error.to_string(),
            "POST /vms: invalid request (422): INVALID_REQUEST: Request could not be processed. \
             ({\"\":[\"'api_version' is a required property\"]})"
        );
    }

    #[test]
    fn messages_nested_under_status_are_found() {
        let error = from_status("PUT /vms/{uuid}", 409, None, NESTED);
        let Error::Conflict { messages, .. } = &error else {
            panic!("{error:?}")
        };
        assert!(messages.has_reason("CONCURRENT_REQUESTS_NOT_ALLOWED"));
        assert!(error.is_conflict() && !error.is_retryable());
    }

    #[test]
    fn v4_error_groups_are_reasons() {
        let error = from_status("GET /content/templates/{extId}", 404, None, V4_LIST);
        let Error::NotFound { messages, .. } = &error else {
            panic!("{error:?}")
        };
        assert!(messages.has_reason("ENTITY_NOT_FOUND"));
    }

    #[test]
    fn a_v4_conflict_keeps_its_code_and_error_group_apart() {
        // Code and group as terraform-provider-nutanix `nutanix/services/vmmv2/helper.go` (isVmmEtagMismatchErr)
        // looks for them; which status a real ETag mismatch has was not established, 409 is assumed here.
        let body = br#"{"data": {"$errorItemDiscriminator": "List<vmm.v4.error.AppMessage>", "error": [
            {"message": "ETag mismatch", "code": "VMM-30303", "errorGroup": "VM_ETAG_MISMATCH", "severity": "ERROR"}]}}"#;
        let error = from_status(
            "POST /content/templates/{extId}/$actions/deploy",
            409,
            None,
            body,
        );
        let Error::Conflict { messages, .. } = &error else {
            panic!("{error:?}")
        };
        assert!(messages.has_code("VMM-30303") && messages.has_error_group("VM_ETAG_MISMATCH"));
        assert!(!messages.has_code("VM_ETAG_MISMATCH"));
        assert_eq!(
            error.to_string(),
            "POST /content/templates/{extId}/$actions/deploy: conflict (409): VM_ETAG_MISMATCH: ETag mismatch \
             (code VMM-30303)"
        );
    }

    #[test]
    fn unauthorized_ignores_its_html_body_and_empty_bodies_are_errors_too() {
        let error = from_status("GET /users/me", 401, None, b"<html>401 Unauthorized</html>");
        assert!(matches!(error, Error::Unauthorized { .. }));
        let error = from_status("GET /vms/{uuid}", 500, None, b"");
        assert_eq!(
            error.to_string(),
            "GET /vms/{uuid}: server error (500): no message"
        );
        assert!(error.is_retryable() && !error.is_auto_retryable());
        let error = from_status("GET /vms/{uuid}", 503, None, b"<html>busy</html>");
        assert!(
            error
                .to_string()
                .contains("non-JSON body: \"<html>busy</html>\"")
        );
        assert!(error.is_auto_retryable());
        let error = from_status("GET /vms/{uuid}", 302, None, b"");
        assert!(matches!(error, Error::UnexpectedStatus { status: 302, .. }));
    }

    #[test]
    fn rate_limit_carries_retry_after() {
        let error = from_status("POST /vms/list", 429, Some(Duration::from_secs(3)), b"");
        assert_eq!(error.retry_after(), Some(Duration::from_secs(3)));
        assert_eq!(
            error.to_string(),
            "POST /vms/list: rate limited (429), retry after 3s"
        );
        assert!(error.is_retryable());
    }

    #[test]
    fn a_503_carries_its_retry_after_too() {
        let error = from_status("GET /vms/{uuid}", 503, Some(Duration::from_secs(5)), b"");
        assert_eq!(error.retry_after(), Some(Duration::from_secs(5)));
        assert_eq!(
            error.to_string(),
            "GET /vms/{uuid}: server error (503): no message, retry after 5s"
        );
    }

    #[test]
    fn long_messages_and_decode_excerpts_are_cut() {
        let long = format!(
            r#"{{"message_list":[{{"message":"{}"}}]}}"#,
            "x".repeat(5000)
        );
        let error = from_status("POST /vms", 422, None, long.as_bytes());
        let shown = error.to_string();
        assert!(shown.len() < 400, "{}", shown.len());
        assert!(shown.ends_with("… (5000 characters)"), "{shown}");
        let body = format!("{{\"metadata\": {}", "y".repeat(1000));
        let json_error = serde_json::from_str::<serde_json::Value>(&body).unwrap_err();
        let error = decode_error("GET /vms/{uuid}", 200, body.as_bytes(), &json_error);
        let Error::Decode { excerpt, .. } = &error else {
            panic!()
        };
        assert_eq!(
            excerpt,
            &format!("{{\"metadata\": {}… (1013 characters)", "y".repeat(147))
        );
        let html = format!("<html>{}</html>", "z".repeat(10_000));
        let error = from_status("GET /vms/{uuid}", 503, None, html.as_bytes());
        assert!(
            error.to_string().ends_with("zzz…\" (10013 characters)"),
            "{error}"
        );
    }

    #[test]
    fn names_ids_and_statuses_from_prism_are_quoted_with_a_bound() {
        let long = "n".repeat(100_000);
        let errors = [
            Error::DuplicateName {
                kind: "vm",
                name: long.clone(),
                uuids: vec![long.clone(); 1000],
            },
            Error::UnreadableMatch {
                kind: "vm",
                name: long.clone(),
                entity: crate::v3::SkippedEntity {
                    uuid: Some(long.clone()),
                    name: Some(long.clone()),
                    reason: "invalid type: map, expected a string".to_owned(),
                },
            },
            Error::TaskTimeout {
                task: long.clone(),
                last_status: long.clone(),
                waited: Duration::from_secs(1),
            },
        ];
        for error in errors {
            let shown = error.to_string();
            assert!(shown.chars().count() < 2_000, "{}", shown.chars().count());
            assert!(shown.contains("(100000 characters)"), "{shown}");
        }
    }

    #[test]
    fn a_body_above_the_limit_is_final_and_names_its_endpoint_and_limit() {
        let error = Error::BodyTooLarge {
            endpoint: "POST /vms/list",
            status: 200,
            limit: 1024,
        };
        assert_eq!(
            error.to_string(),
            "POST /vms/list: the answer (200) has a body longer than the limit of 1024 bytes; it was not read"
        );
        assert!(!error.is_retryable() && !error.is_auto_retryable());
        assert_eq!(
            (error.status(), error.endpoint()),
            (Some(200), Some("POST /vms/list"))
        );
    }
}
