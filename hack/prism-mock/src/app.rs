//! The HTTP application: shared state and the Prism middleware (counters, rate limit, faults, auth).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use http::{HeaderMap, StatusCode, header};
use serde_json::Value;
use tokio::sync::Notify;

use crate::config::Credentials;
use crate::errors::ApiError;
use crate::faults::{RequestRecord, TimedRequest};
use crate::store::{FailPlan, Store};

/// State shared by all handlers.
pub(crate) struct Shared {
    store: Mutex<Store>,
    pub(crate) credentials: Credentials,
    /// Served over TLS: the session cookie is marked `Secure` only then (a cookie store would not send a
    /// `Secure` cookie over plain HTTP).
    pub(crate) tls: bool,
}

pub(crate) type App = Arc<Shared>;

/// Shows no store content: it holds session tokens and guest user data.
impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("credentials", &self.credentials)
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

impl Shared {
    pub(crate) fn new(store: Store, credentials: Credentials, tls: bool) -> Self {
        Self {
            store: Mutex::new(store),
            credentials,
            tls,
        }
    }

    /// Locks the store and applies every event due now. A panic in another handler does not make the mock
    /// unusable (the poisoned state is taken as is).
    pub(crate) fn lock(&self) -> MutexGuard<'_, Store> {
        let mut guard = self
            .store
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        guard.advance(Instant::now());
        guard
    }
}

/// Closes the connection a request came on (the "dropped connection" fault).
#[derive(Clone, Debug)]
pub(crate) struct ConnectionKill(pub(crate) Arc<Notify>);

/// The VM a response concerns, set by handlers that create one (the request log's attribution).
#[derive(Clone, Debug)]
pub(crate) struct VmAttribution(pub(crate) String);

/// Marks `response` as concerning `vm`.
pub(crate) fn attribute(mut response: Response, vm: Option<String>) -> Response {
    if let Some(vm) = vm {
        response.extensions_mut().insert(VmAttribution(vm));
    }
    response
}

/// The VM a request concerned: what the handler said, else the `{uuid}` of a VM path, else the
/// VM of a task read.
fn attributed_vm(
    store: &Store,
    template: &str,
    path: &str,
    response: Option<&Response>,
) -> Option<String> {
    if let Some(VmAttribution(vm)) = response.and_then(|r| r.extensions().get::<VmAttribution>()) {
        return Some(vm.clone());
    }
    let last = path.rsplit('/').next().unwrap_or_default();
    match template {
        "/api/nutanix/v3/vms/{uuid}"
        | "/api/vmm/v4.0/ahv/config/vms/{ext_id}"
        | "/api/vmm/v4.3/ahv/config/vms/{ext_id}" => Some(last.to_owned()),
        "/api/nutanix/v3/tasks/{uuid}"
        | "/api/prism/v4.0/config/tasks/{ext_id}"
        | "/api/prism/v4.4/config/tasks/{ext_id}" => store.task_vm(last),
        _ => None,
    }
}

/// How a request authenticated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AuthMethod {
    Basic,
    Session,
    ApiKey,
}

/// What the Prism middleware passes to handlers.
#[derive(Clone, Debug)]
pub(crate) struct Directives {
    pub(crate) auth: AuthMethod,
    pub(crate) fail_task: Option<FailPlan>,
}

/// Header carrying the client's request id on v4 mutating calls.
pub(crate) const REQUEST_ID_HEADER: &str = "NTNX-Request-Id";

/// Name of the session cookie.
pub(crate) const SESSION_COOKIE: &str = "NTNX_IGW_SESSION";

fn session_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| {
            let (name, value) = pair.trim().split_once('=')?;
            (name == SESSION_COOKIE).then(|| value.to_owned())
        })
}

fn authenticate(
    app: &Shared,
    store: &mut Store,
    headers: &HeaderMap,
    expire_session: bool,
    now: Instant,
) -> Option<AuthMethod> {
    if let Some(key) = headers.get("x-ntnx-api-key") {
        let expected = app.credentials.api_key.as_deref()?;
        return (key.as_bytes() == expected.as_bytes()).then_some(AuthMethod::ApiKey);
    }
    if let Some(value) = headers.get(header::AUTHORIZATION) {
        let encoded = value.to_str().ok()?.strip_prefix("Basic ")?;
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .ok()?;
        let text = String::from_utf8(decoded).ok()?;
        let (user, password) = text.split_once(':')?;
        return (user == app.credentials.username && password == app.credentials.password)
            .then_some(AuthMethod::Basic);
    }
    let token = session_token(headers)?;
    if expire_session {
        store.sessions.remove(&token);
    }
    store
        .session_valid(&token, now)
        .then_some(AuthMethod::Session)
}

fn is_v4(path: &str) -> bool {
    path.starts_with("/api/vmm/") || path.starts_with("/api/prism/")
}

fn injected_error(status: u16, retry_after_secs: u64, v4: bool) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    match code {
        StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE => ApiError::Throttled {
            status: code,
            retry_after_secs,
            v4,
        }
        .into_response(),
        _ if v4 => ApiError::v4_prism(
            code,
            "INTERNAL_ERROR",
            "PRISM-50000",
            "Internal Server Error (injected by prism-mock)",
        )
        .into_response(),
        _ => ApiError::v3(
            code,
            "",
            "INTERNAL_ERROR",
            "Internal Server Error (injected by prism-mock)",
            None,
        )
        .into_response(),
    }
}

fn unix_ms(time: std::time::SystemTime) -> u64 {
    time.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
        })
}

/// Runs around every Prism endpoint: rate limit, faults, authentication, then counts the answer.
pub(crate) async fn prism_layer(
    State(app): State<App>,
    mut request: Request,
    next: Next,
) -> Response {
    let now = Instant::now();
    let received_unix_ms = unix_ms(std::time::SystemTime::now());
    let user_agent = request
        .headers()
        .get(header::USER_AGENT)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    let method = request.method().as_str().to_owned();
    let template = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "<unmatched>".to_owned(), |m| m.as_str().to_owned());
    let path = request.uri().path().to_owned();
    let request_id = request
        .headers()
        .get(REQUEST_ID_HEADER)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    let v4 = is_v4(&path);
    let decision = {
        let mut guard = app.lock();
        let store = &mut *guard;
        store
            .faults
            .decide(&mut store.rng, now, &method, &template, &path)
    };
    let response = if let Some(retry_after_secs) = decision.rate_limited {
        ApiError::Throttled {
            status: StatusCode::TOO_MANY_REQUESTS,
            retry_after_secs,
            v4,
        }
        .into_response()
    } else {
        if !decision.latency.is_zero() {
            tokio::time::sleep(decision.latency).await;
        }
        if decision.drop_connection {
            {
                let mut store = app.lock();
                let answered = Instant::now();
                let record = RequestRecord {
                    at_ms: store.elapsed_ms(answered),
                    method: method.clone(),
                    endpoint: template.clone(),
                    status: 0,
                    vm: attributed_vm(&store, &template, &path, None),
                    user_agent: user_agent.clone(),
                    received_unix_ms,
                };
                store.faults.record(TimedRequest {
                    received: now,
                    answered,
                    request_id,
                    record,
                });
            }
            if let Some(kill) = request.extensions().get::<ConnectionKill>() {
                kill.0.notify_one();
            }
            return std::future::pending().await;
        }
        if let Some((status, retry_after_secs)) = decision.error {
            injected_error(status, retry_after_secs, v4)
        } else {
            let auth = {
                let mut store = app.lock();
                authenticate(
                    &app,
                    &mut store,
                    request.headers(),
                    decision.expire_session,
                    Instant::now(),
                )
            };
            match auth {
                None => ApiError::Unauthorized.into_response(),
                Some(auth) => {
                    if decision.edited_elsewhere
                        && template == "/api/nutanix/v3/vms/{uuid}"
                        && let Some(uuid) = path.rsplit('/').next()
                    {
                        app.lock().edit_elsewhere(uuid, Instant::now());
                    }
                    let fail_task = decision.fail_task.map(FailPlan::from);
                    request
                        .extensions_mut()
                        .insert(Directives { auth, fail_task });
                    let response = next.run(request).await;
                    if decision.create_then_500 && response.status().is_success() {
                        // The VM was made: the log still names it.
                        let made = response.extensions().get::<VmAttribution>().cloned();
                        let mut failed = injected_error(500, 0, v4);
                        if let Some(made) = made {
                            failed.extensions_mut().insert(made);
                        }
                        failed
                    } else {
                        response
                    }
                }
            }
        }
    };
    {
        let mut store = app.lock();
        let answered = Instant::now();
        let record = RequestRecord {
            at_ms: store.elapsed_ms(answered),
            vm: attributed_vm(&store, &template, &path, Some(&response)),
            method,
            endpoint: template,
            status: response.status().as_u16(),
            user_agent,
            received_unix_ms,
        };
        store.faults.record(TimedRequest {
            received: now,
            answered,
            request_id,
            record,
        });
    }
    response
}

/// Parses a JSON request body; bad JSON is a 422 (v3) naming the body.
pub(crate) fn parse_json(kind: &str, body: &[u8]) -> Result<Value, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Object(serde_json::Map::new()));
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid_one(kind, "body", format!("is not valid JSON: {e}")))
}
