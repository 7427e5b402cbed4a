//! The HTTP core: one shared client, auth (basic, API key, session), rate limit, retries, error mapping and the
//! observability hook.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use backon::{BackoffBuilder, ExponentialBuilder};
use base64::Engine as _;
use bytes::Bytes;
use reqwest::Method;
use reqwest::header::{self, HeaderMap, HeaderValue};
use serde::Serialize;
use serde::de::DeserializeOwned;
use url::Url;

use crate::config::{AuthMode, ClientConfig, Credentials, ProxyConfig, RetryPolicy};
use crate::endpoints;
use crate::error::{self, ConfigError, Error, TransportKind};
use crate::observe::{Api, RequestEvent, RequestObserver};
use crate::ratelimit::TokenBucket;
use crate::tls;

/// The header carrying a Prism API key (`X-ntnx-api-key`; header names are case-insensitive).
const API_KEY_HEADER: header::HeaderName = header::HeaderName::from_static("x-ntnx-api-key");
/// The v4 idempotency header.
pub const REQUEST_ID_HEADER: &str = "NTNX-Request-Id";

/// The longest `Retry-After` taken from an answer (5 minutes); a longer one, or one that is no number a
/// `Duration` can hold, counts as this long. No wait beyond it is useful: the client returns the error
/// instead of waiting past its retry budget ([`RetryPolicy::max_elapsed`], 30 s by default), and the
/// controller that gets the error never requeues later than its longest backoff (5 minutes). Unbounded, a
/// `Retry-After: 18446744073709551615` overflowed the time sums that decide when to retry.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);

/// A Prism Central client. Cheap to clone: clones share the connection pool, the session, and the rate limit.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    http: reqwest::Client,
    endpoint: Url,
    auth: Auth,
    retry: RetryPolicy,
    /// Shared with every client made from this one by [`Client::with_credentials`].
    limiter: Arc<TokenBucket>,
    page_size: u32,
    max_body_bytes: u64,
    observer: Option<Arc<dyn RequestObserver>>,
    session: tokio::sync::Mutex<Session>,
}

/// Prepared auth headers, marked sensitive so no HTTP library prints them.
enum Auth {
    Basic(HeaderValue),
    ApiKey(HeaderValue),
    Session { login: HeaderValue },
}

#[derive(Default)]
struct Session {
    cookie: Option<HeaderValue>,
    /// Bumped at each login, so that callers who saw the same stale cookie log in once, not once each.
    generation: u64,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let auth = match self.inner.auth {
            Auth::Basic(_) => "basic",
            Auth::ApiKey(_) => "api-key",
            Auth::Session { .. } => "session",
        };
        f.debug_struct("Client")
            .field("endpoint", &self.inner.endpoint.as_str())
            .field("auth", &auth)
            .finish_non_exhaustive()
    }
}

/// One request to make, described before any I/O.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    pub api: Api,
    pub method: Method,
    pub endpoint: &'static str,
    /// Path segments after the API base; each is percent-encoded as one segment.
    pub segments: Vec<String>,
    pub query: Option<String>,
    pub body: Option<Bytes>,
    /// Safe to send again after a failure that may or may not have reached the server.
    pub idempotent: bool,
    /// `NTNX-Request-Id` for v4 mutations.
    pub request_id: Option<String>,
}

impl Call {
    pub(crate) fn new(api: Api, method: Method, endpoint: &'static str, segments: &[&str]) -> Self {
        let idempotent = method == Method::GET;
        Self {
            api,
            method,
            endpoint,
            segments: segments
                .iter()
                .map(|segment| (*segment).to_owned())
                .collect(),
            query: None,
            body: None,
            idempotent,
            request_id: None,
        }
    }

    /// Adds a JSON body.
    pub(crate) fn json(mut self, body: &impl Serialize) -> Result<Self, Error> {
        let bytes = serde_json::to_vec(body).map_err(|error| Error::Encode {
            endpoint: self.endpoint,
            reason: error.to_string(),
        })?;
        self.body = Some(Bytes::from(bytes));
        Ok(self)
    }

    /// Marks a non-GET call as safe to retry (list POSTs, UUID reservation).
    pub(crate) fn idempotent(mut self) -> Self {
        self.idempotent = true;
        self
    }
}

impl Client {
    /// Builds a client: TLS configuration, HTTP pool, rate limiter. No request is sent yet (a session logs in on
    /// first use).
    pub fn new(config: ClientConfig) -> Result<Self, ConfigError> {
        let auth = auth_of(&config.credentials, config.auth_mode)?;
        if config.retry.max_attempts == 0 {
            return Err(ConfigError::InvalidRetryPolicy {
                reason: "max_attempts 0 must be at least 1".to_owned(),
            });
        }
        if config.list_page_size == 0 {
            return Err(ConfigError::InvalidPageSize);
        }
        if config.max_body_bytes == 0 {
            return Err(ConfigError::InvalidBodyLimit);
        }
        if config.endpoint.scheme() == "http" {
            // The origin (scheme, host, port) only: no user info, should a caller have set one.
            let endpoint = config.endpoint.origin().ascii_serialization();
            if !config.allow_plain_http {
                return Err(ConfigError::PlainHttpRefused { endpoint });
            }
            tracing::warn!(
                %endpoint,
                "plain HTTP to Prism Central is allowed: credentials cross the network in clear text"
            );
        }
        let limiter = Arc::new(TokenBucket::new(&config.rate_limit)?);
        let tls = tls::client_config(config.ca_bundle.as_ref(), config.insecure)?;
        let mut default_headers = HeaderMap::new();
        default_headers.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
        let mut builder = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .connect_timeout(config.connect_timeout)
            .timeout(config.request_timeout)
            .user_agent(config.user_agent.clone())
            .default_headers(default_headers)
            .redirect(reqwest::redirect::Policy::none());
        builder = match &config.proxy {
            ProxyConfig::FromEnvironment => builder,
            ProxyConfig::Direct => builder.no_proxy(),
            ProxyConfig::Url(url) => {
                // reqwest's message may quote the URL, which may hold credentials: keep only a generic reason.
                let proxy =
                    reqwest::Proxy::all(url.expose()).map_err(|_| ConfigError::InvalidProxy {
                        reason: "not a valid proxy URL".to_owned(),
                    })?;
                builder.proxy(proxy)
            }
        };
        let http = builder.build().map_err(|error| ConfigError::HttpClient {
            reason: error.to_string(),
        })?;
        Ok(Self {
            inner: Arc::new(Inner {
                http,
                endpoint: config.endpoint,
                auth,
                retry: config.retry,
                limiter,
                page_size: config.list_page_size,
                max_body_bytes: config.max_body_bytes,
                observer: config.observer,
                session: tokio::sync::Mutex::new(Session::default()),
            }),
        })
    }

    /// A client for the same Prism Central with other credentials: it shares this one's HTTP
    /// connections and rate limit (the limit is Prism Central's, whoever calls), not its session.
    pub fn with_credentials(
        &self,
        credentials: &Credentials,
        auth_mode: AuthMode,
    ) -> Result<Self, ConfigError> {
        let inner = &self.inner;
        Ok(Self {
            inner: Arc::new(Inner {
                http: inner.http.clone(),
                endpoint: inner.endpoint.clone(),
                auth: auth_of(credentials, auth_mode)?,
                retry: inner.retry.clone(),
                limiter: inner.limiter.clone(),
                page_size: inner.page_size,
                max_body_bytes: inner.max_body_bytes,
                observer: inner.observer.clone(),
                session: tokio::sync::Mutex::new(Session::default()),
            }),
        })
    }

    /// The endpoint this client talks to (`https://host:port/`).
    pub fn endpoint(&self) -> &Url {
        &self.inner.endpoint
    }

    pub(crate) fn page_size(&self) -> u32 {
        self.inner.page_size
    }

    /// The request rate the client allows itself now: the configured [`crate::RateLimit`], lower while Prism
    /// answers 429 (halved at each, recovered step by step after successes).
    pub fn rate_limit_per_second(&self) -> f64 {
        self.inner.limiter.current_rate()
    }

    /// Sends a call and decodes its JSON body.
    pub(crate) async fn call_json<T: DeserializeOwned>(&self, call: Call) -> Result<T, Error> {
        let endpoint = call.endpoint;
        let (status, body) = self.execute(call).await?;
        serde_json::from_slice(&body)
            .map_err(|error| error::decode_error(endpoint, status, &body, &error))
    }

    /// Sends a call with the retry policy: idempotent calls are retried on 429/502/503/504 and transport
    /// failures, after the `Retry-After` of a 429 or 503 when it is longer than the backoff; in session mode any
    /// call is sent once more after a 401 and a fresh login (a 401 means the server did not act on the request).
    pub(crate) async fn execute(&self, call: Call) -> Result<(u16, Bytes), Error> {
        let policy = &self.inner.retry;
        let mut backoff = ExponentialBuilder::default()
            .with_jitter()
            .with_min_delay(policy.min_delay)
            .with_max_delay(policy.max_delay)
            .with_max_times(policy.max_attempts.saturating_sub(1) as usize)
            .build();
        let started = Instant::now();
        let mut attempt = 0;
        let mut logged_in_again = false;
        loop {
            attempt += 1;
            let (result, session_generation) = self.send_once(&call, attempt).await;
            let error = match result {
                Ok(response) => return Ok(response),
                Err(error) => error,
            };
            if let (Error::Unauthorized { .. }, Some(generation), false) =
                (&error, session_generation, logged_in_again)
            {
                logged_in_again = true;
                tracing::debug!(
                    endpoint = call.endpoint,
                    "session refused (401): logging in again"
                );
                self.expire_session(generation).await;
                continue;
            }
            if !(call.idempotent && error.is_auto_retryable()) {
                return Err(error);
            }
            let Some(backoff_delay) = backoff.next() else {
                return Err(error);
            };
            let delay = backoff_delay.max(error.retry_after().unwrap_or_default());
            if started.elapsed().saturating_add(delay) > policy.max_elapsed {
                return Err(error);
            }
            tracing::info!(
                endpoint = call.endpoint,
                attempt,
                delay_ms = delay.as_millis() as u64,
                error = %error,
                "retrying Prism Central call"
            );
            tokio::time::sleep(delay).await;
        }
    }

    /// One attempt. Returns the session generation whose cookie was used, when in session mode.
    async fn send_once(
        &self,
        call: &Call,
        attempt: u32,
    ) -> (Result<(u16, Bytes), Error>, Option<u64>) {
        let (auth_header, generation) = match &self.inner.auth {
            Auth::Basic(value) => ((header::AUTHORIZATION, value.clone()), None),
            Auth::ApiKey(value) => ((API_KEY_HEADER, value.clone()), None),
            Auth::Session { .. } => match self.session_cookie().await {
                Ok((cookie, generation)) => ((header::COOKIE, cookie), Some(generation)),
                Err(error) => return (Err(error), None),
            },
        };
        let mut request = self
            .inner
            .http
            .request(
                call.method.clone(),
                self.url(call.api, &call.segments, call.query.as_deref()),
            )
            .header(auth_header.0, auth_header.1);
        if let Some(body) = &call.body {
            request = request
                .header(header::CONTENT_TYPE, "application/json")
                .body(body.clone());
        }
        if let Some(request_id) = &call.request_id {
            request = request.header(REQUEST_ID_HEADER, request_id.as_str());
        }
        let result = self.send(call.api, call.endpoint, request, attempt).await;
        (result.map(|(status, _, body)| (status, body)), generation)
    }

    /// Sends a prepared request through the rate limit, reads the body (up to the limit), reports the event and
    /// maps non-2xx.
    async fn send(
        &self,
        api: Api,
        endpoint: &'static str,
        request: reqwest::RequestBuilder,
        attempt: u32,
    ) -> Result<(u16, HeaderMap, Bytes), Error> {
        self.inner.limiter.acquire().await;
        let start = Instant::now();
        let limit = self.inner.max_body_bytes;
        let outcome = match request.send().await {
            Ok(response) => {
                let status = response.status().as_u16();
                let headers = response.headers().clone();
                read_body(response, limit)
                    .await
                    .map(|body| (status, headers, body))
            }
            Err(error) => Err(ReadFailure::Transport(error)),
        };
        let latency = start.elapsed();
        let status = match &outcome {
            Ok((status, _, _)) | Err(ReadFailure::TooLarge { status }) => Some(*status),
            Err(ReadFailure::Transport(_)) => None,
        };
        tracing::debug!(
            endpoint,
            status,
            latency_ms = latency.as_millis() as u64,
            attempt,
            "Prism Central request"
        );
        if let Some(observer) = &self.inner.observer {
            observer.observe(&RequestEvent {
                api,
                endpoint,
                status,
                latency,
                attempt,
            });
        }
        if status == Some(429) {
            self.inner.limiter.throttled();
        }
        let (status, headers, body) = outcome.map_err(|failure| match failure {
            ReadFailure::Transport(error) => transport_error(endpoint, &error),
            ReadFailure::TooLarge { status } => Error::BodyTooLarge {
                endpoint,
                status,
                limit,
            },
        })?;
        if (200..300).contains(&status) {
            self.inner.limiter.succeeded();
            Ok((status, headers, body))
        } else {
            Err(error::from_status(
                endpoint,
                status,
                retry_after(&headers),
                &body,
            ))
        }
    }

    /// The current session cookie, logging in first if there is none.
    async fn session_cookie(&self) -> Result<(HeaderValue, u64), Error> {
        let mut session = self.inner.session.lock().await;
        if let Some(cookie) = &session.cookie {
            return Ok((cookie.clone(), session.generation));
        }
        let cookie = self.login().await?;
        session.cookie = Some(cookie.clone());
        session.generation += 1;
        Ok((cookie, session.generation))
    }

    /// Forgets the cookie of `generation` (unless someone already replaced it).
    async fn expire_session(&self, generation: u64) {
        let mut session = self.inner.session.lock().await;
        if session.generation == generation {
            session.cookie = None;
        }
    }

    /// `GET /users/me` with basic auth; the cookies it sets become the session.
    async fn login(&self) -> Result<HeaderValue, Error> {
        let Auth::Session { login } = &self.inner.auth else {
            return Err(Error::NoSessionCookie {
                endpoint: endpoints::USERS_ME,
            });
        };
        let request = self
            .inner
            .http
            .get(self.url(Api::V3, &["users".to_owned(), "me".to_owned()], None))
            .header(header::AUTHORIZATION, login.clone());
        let (_, headers, _) = self.send(Api::V3, endpoints::USERS_ME, request, 1).await?;
        let cookies: Vec<&str> = headers
            .get_all(header::SET_COOKIE)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .filter_map(|value| value.split(';').next())
            .map(str::trim)
            .filter(|pair| pair.contains('='))
            .collect();
        if cookies.is_empty() {
            return Err(Error::NoSessionCookie {
                endpoint: endpoints::USERS_ME,
            });
        }
        tracing::debug!(cookies = cookies.len(), "logged in to Prism Central");
        sensitive_header(&cookies.join("; ")).map_err(|_| Error::NoSessionCookie {
            endpoint: endpoints::USERS_ME,
        })
    }

    fn url(&self, api: Api, segments: &[String], query: Option<&str>) -> Url {
        let mut url = self.inner.endpoint.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.clear().extend(api.base_segments()).extend(segments);
        }
        url.set_query(query);
        url
    }
}

fn sensitive_header(value: &str) -> Result<HeaderValue, ConfigError> {
    let mut header = HeaderValue::from_str(value).map_err(|_| ConfigError::HttpClient {
        reason: "a credential holds characters not allowed in an HTTP header".to_owned(),
    })?;
    header.set_sensitive(true);
    Ok(header)
}

/// The auth headers for `credentials` sent the way `mode` says.
fn auth_of(credentials: &Credentials, mode: AuthMode) -> Result<Auth, ConfigError> {
    Ok(match (credentials, mode) {
        (Credentials::Basic { username, password }, mode) => {
            let token = base64::engine::general_purpose::STANDARD
                .encode(format!("{username}:{}", password.expose()));
            let value = sensitive_header(&format!("Basic {token}"))?;
            match mode {
                AuthMode::PerRequest => Auth::Basic(value),
                AuthMode::Session => Auth::Session { login: value },
            }
        }
        (Credentials::ApiKey(key), AuthMode::PerRequest) => {
            Auth::ApiKey(sensitive_header(key.expose())?)
        }
        (Credentials::ApiKey(_), AuthMode::Session) => {
            return Err(ConfigError::SessionNeedsBasicCredentials);
        }
    })
}

/// Why an answer could not be read.
enum ReadFailure {
    /// No answer, or its body broke off.
    Transport(reqwest::Error),
    /// The body is longer than the limit.
    TooLarge { status: u16 },
}

/// Reads a body to its end, chunk by chunk, and stops as soon as it is longer than `limit` bytes (at once
/// when its `Content-Length` says so; a chunked answer has none).
async fn read_body(mut response: reqwest::Response, limit: u64) -> Result<Bytes, ReadFailure> {
    let status = response.status().as_u16();
    if response
        .content_length()
        .is_some_and(|length| length > limit)
    {
        return Err(ReadFailure::TooLarge { status });
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(ReadFailure::Transport)? {
        let length = u64::try_from(body.len().saturating_add(chunk.len())).unwrap_or(u64::MAX);
        if length > limit {
            return Err(ReadFailure::TooLarge { status });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(body))
}

/// `Retry-After` as seconds or an HTTP date, at most [`MAX_RETRY_AFTER`].
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(header::RETRY_AFTER)?.to_str().ok()?.trim();
    if !value.is_empty() && value.bytes().all(|byte| byte.is_ascii_digit()) {
        // All digits, but perhaps more than a u64 holds: that is longer than the maximum too.
        let seconds = value.parse::<u64>().unwrap_or(u64::MAX);
        return Some(Duration::from_secs(seconds).min(MAX_RETRY_AFTER));
    }
    let date = jiff::fmt::rfc2822::parse(value).ok()?.timestamp();
    let wait = jiff::Timestamp::now().until(date).ok()?;
    Duration::try_from(wait)
        .ok()
        .map(|wait| wait.clamp(Duration::ZERO, MAX_RETRY_AFTER))
}

/// True for a rustls error, also when wrapped in `io::Error`s (tokio-rustls and hyper wrap it twice).
fn is_rustls_error(error: &(dyn std::error::Error + 'static)) -> bool {
    if error.downcast_ref::<rustls::Error>().is_some() {
        return true;
    }
    error
        .downcast_ref::<std::io::Error>()
        .and_then(std::io::Error::get_ref)
        .is_some_and(|inner| is_rustls_error(inner))
}

/// Classifies a reqwest failure and flattens its causes into one line.
fn transport_error(endpoint: &'static str, error: &reqwest::Error) -> Error {
    let mut detail = error.to_string();
    let mut tls = false;
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        tls |= is_rustls_error(cause);
        let text = cause.to_string();
        if !detail.contains(&text) {
            detail.push_str(": ");
            detail.push_str(&text);
        }
        source = cause.source();
    }
    let kind = if error.is_timeout() {
        TransportKind::Timeout
    } else if tls {
        TransportKind::Tls
    } else if error.is_connect() {
        TransportKind::Connect
    } else {
        TransportKind::Other
    };
    Error::Transport {
        endpoint,
        kind,
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_accepts_seconds_and_dates() {
        let mut headers = HeaderMap::new();
        headers.insert(header::RETRY_AFTER, HeaderValue::from_static("7"));
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(7)));
        headers.insert(
            header::RETRY_AFTER,
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(retry_after(&headers), None, "a date in the past is no wait");
        let future = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(30);
        let text = jiff::fmt::rfc2822::DateTimePrinter::new()
            .timestamp_to_rfc9110_string(&future)
            .unwrap();
        headers.insert(header::RETRY_AFTER, HeaderValue::from_str(&text).unwrap());
        let wait = retry_after(&headers).unwrap();
        assert!(
            wait > Duration::from_secs(20) && wait <= Duration::from_secs(30),
            "{wait:?}"
        );
        headers.insert(header::RETRY_AFTER, HeaderValue::from_static("soon"));
        assert_eq!(retry_after(&headers), None);
        headers.insert(header::RETRY_AFTER, HeaderValue::from_static("-1"));
        assert_eq!(retry_after(&headers), None);
    }

    #[test]
    fn retry_after_is_at_most_the_maximum() {
        let mut headers = HeaderMap::new();
        for value in [
            "301",
            "3600",
            "18446744073709551615",
            "99999999999999999999999999",
            // Near the end of the dates jiff holds (a later one does not parse: no wait, as for "soon").
            "Thu, 30 Dec 9999 12:00:00 GMT",
        ] {
            headers.insert(header::RETRY_AFTER, HeaderValue::from_static(value));
            assert_eq!(retry_after(&headers), Some(MAX_RETRY_AFTER), "{value}");
        }
        headers.insert(header::RETRY_AFTER, HeaderValue::from_static("300"));
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(300)));
    }

    #[test]
    fn segments_are_encoded_one_by_one() {
        let config = ClientConfig::new("pc.example.com", Credentials::basic("u", "p")).unwrap();
        let client = Client::new(config).unwrap();
        let url = client.url(
            Api::PrismV4,
            &[
                "config".to_owned(),
                "tasks".to_owned(),
                "ZXJnb24=:a/b c".to_owned(),
            ],
            None,
        );
        assert_eq!(
            url.as_str(),
            "https://pc.example.com:9440/api/prism/v4.0/config/tasks/ZXJnb24=:a%2Fb%20c"
        );
        let url = client.url(
            Api::VmmV4,
            &["content".to_owned(), "templates".to_owned()],
            Some("$page=0&$limit=50"),
        );
        assert_eq!(
            url.as_str(),
            "https://pc.example.com:9440/api/vmm/v4.0/content/templates?$page=0&$limit=50"
        );
    }
}
