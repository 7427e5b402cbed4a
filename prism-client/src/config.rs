//! Client configuration: endpoint, credentials, auth mode, TLS, proxy, timeouts, retries and rate limit.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use url::Url;

use crate::Sensitive;
use crate::error::ConfigError;
use crate::observe::RequestObserver;

/// Prism Central's default port.
pub const DEFAULT_PORT: u16 = 9440;

/// Default [`ClientConfig::max_body_bytes`]: 64 MiB.
///
/// The largest answer the provider asks for is a page of 500 VMs. The recorded answers of a real Prism
/// Central (`hack/prism-mock/recorded/get_vm.json`, `list_vm.json`) hold about 4.4 KB of JSON per VM
/// (6.6 KB pretty-printed), so such a page is about 3.3 MB; 64 MiB leaves room for VMs twenty times
/// that size (many disks and NICs, categories, cloud-init or Sysprep data read back), and is an eighth
/// of the controller Deployment's 512 Mi memory limit.
pub const DEFAULT_MAX_BODY_BYTES: u64 = 64 << 20;

/// The user name that, by Prism convention, means "the password is an API key".
pub const API_KEY_USERNAME: &str = "X-ntnx-api-key";

/// How the client proves who it is.
#[derive(Clone, PartialEq, Eq)]
pub enum Credentials {
    /// A Prism user and password (HTTP Basic, or the login of a session).
    Basic {
        username: String,
        password: Sensitive,
    },
    /// An API key, sent as the `X-ntnx-api-key` header.
    ApiKey(Sensitive),
}

impl Credentials {
    /// User and password; the user name `X-ntnx-api-key` makes the password an API key, as other Prism clients do.
    pub fn basic(username: impl Into<String>, password: impl Into<Sensitive>) -> Self {
        let username = username.into();
        let password = password.into();
        if username == API_KEY_USERNAME {
            Self::ApiKey(password)
        } else {
            Self::Basic { username, password }
        }
    }

    pub fn api_key(key: impl Into<Sensitive>) -> Self {
        Self::ApiKey(key.into())
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Basic { username, .. } => f
                .debug_struct("Basic")
                .field("username", username)
                .field("password", &"<redacted>")
                .finish(),
            Self::ApiKey(_) => f.write_str("ApiKey(<redacted>)"),
        }
    }
}

/// How credentials are sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AuthMode {
    /// Credentials on every request.
    #[default]
    PerRequest,
    /// Log in once with `GET /users/me`, then send only the session cookie; on a 401, log in again once and
    /// resend. Needs [`Credentials::Basic`].
    Session,
}

/// Extra trusted certificate authorities, added to the system roots.
#[derive(Clone, PartialEq, Eq)]
pub enum CaBundle {
    /// A PEM file, read when the client is built.
    File(PathBuf),
    /// PEM text already in memory (e.g. from a ConfigMap); `origin` names it in errors.
    Pem { origin: String, pem: Vec<u8> },
}

impl fmt::Debug for CaBundle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::File(path) => f.debug_tuple("File").field(path).finish(),
            Self::Pem { origin, pem } => {
                write!(f, "Pem {{ origin: {origin:?}, bytes: {} }}", pem.len())
            }
        }
    }
}

/// Which proxy to use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ProxyConfig {
    /// `HTTPS_PROXY`/`NO_PROXY` from the environment (what OpenShift's cluster-wide proxy injects).
    #[default]
    FromEnvironment,
    /// No proxy at all.
    Direct,
    /// This proxy for every request. It may carry credentials; they are never printed.
    Url(Sensitive),
}

/// Automatic retries of idempotent calls (GET, list, task reads, UUID reservation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included; 1 disables retries.
    pub max_attempts: u32,
    /// First backoff delay (then doubling, with jitter).
    pub min_delay: Duration,
    /// Longest single backoff delay.
    pub max_delay: Duration,
    /// No retry starts after this much time since the first attempt; a `Retry-After` that would cross it ends
    /// the retries and returns the rate-limit error to the caller.
    pub max_elapsed: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 4,
            min_delay: Duration::from_millis(250),
            max_delay: Duration::from_secs(5),
            max_elapsed: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// No automatic retries.
    pub fn none() -> Self {
        Self {
            max_attempts: 1,
            ..Self::default()
        }
    }
}

/// One token bucket per client, shared by all its clones and callers.
#[derive(Debug, Clone, PartialEq)]
pub struct RateLimit {
    /// Sustained requests per second.
    pub requests_per_second: f64,
    /// Requests that may go at once after a quiet period.
    pub burst: u32,
}

impl Default for RateLimit {
    fn default() -> Self {
        Self {
            requests_per_second: 20.0,
            burst: 40,
        }
    }
}

/// Everything a [`crate::Client`] needs. Build with [`ClientConfig::new`], then set fields.
#[derive(Clone)]
pub struct ClientConfig {
    /// Scheme, host and port only (`https://pc.example.com:9440`).
    pub endpoint: Url,
    pub credentials: Credentials,
    pub auth_mode: AuthMode,
    pub ca_bundle: Option<CaBundle>,
    /// Accept any server certificate. Only for labs; the client logs a warning when built with it.
    pub insecure: bool,
    /// Accept a plain `http://` endpoint, over which every request carries the credentials in clear text.
    /// Only for a lab or a test server; without it, [`crate::Client::new`] refuses such an endpoint
    /// ([`ConfigError::PlainHttpRefused`]), and with it the client logs a warning when built.
    pub allow_plain_http: bool,
    pub proxy: ProxyConfig,
    pub connect_timeout: Duration,
    /// Whole-request timeout (send and read the body).
    pub request_timeout: Duration,
    pub retry: RetryPolicy,
    pub rate_limit: RateLimit,
    /// Entities asked for per list page (`length`).
    pub list_page_size: u32,
    /// Longest response body read, in bytes (default [`DEFAULT_MAX_BODY_BYTES`]); a longer one is not read
    /// further and the call fails with [`crate::Error::BodyTooLarge`].
    pub max_body_bytes: u64,
    /// Called once per HTTP attempt with the endpoint template, status and latency.
    pub observer: Option<Arc<dyn RequestObserver>>,
    pub user_agent: String,
}

impl fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientConfig")
            .field("endpoint", &self.endpoint.as_str())
            .field("credentials", &self.credentials)
            .field("auth_mode", &self.auth_mode)
            .field("ca_bundle", &self.ca_bundle)
            .field("insecure", &self.insecure)
            .field("allow_plain_http", &self.allow_plain_http)
            .field("proxy", &self.proxy)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("retry", &self.retry)
            .field("rate_limit", &self.rate_limit)
            .field("list_page_size", &self.list_page_size)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("observer", &self.observer.as_ref().map(|_| "set"))
            .field("user_agent", &self.user_agent)
            .finish()
    }
}

impl ClientConfig {
    /// A configuration with defaults for everything but the endpoint and credentials.
    ///
    /// `endpoint` is `host`, `host:port`, `https://host[:port]` or (for test servers) `http://host:port`, which
    /// [`crate::Client::new`] accepts only with [`ClientConfig::allow_plain_http`]; the port defaults to 9440.
    /// A path, query, or user info in the URL is refused.
    pub fn new(endpoint: &str, credentials: Credentials) -> Result<Self, ConfigError> {
        Ok(Self {
            endpoint: parse_endpoint(endpoint)?,
            credentials,
            auth_mode: AuthMode::default(),
            ca_bundle: None,
            insecure: false,
            allow_plain_http: false,
            proxy: ProxyConfig::default(),
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(60),
            retry: RetryPolicy::default(),
            rate_limit: RateLimit::default(),
            list_page_size: 100,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            observer: None,
            user_agent: concat!("prism-client/", env!("CARGO_PKG_VERSION")).to_owned(),
        })
    }
}

/// Parses and normalises an endpoint; see [`ClientConfig::new`].
pub(crate) fn parse_endpoint(endpoint: &str) -> Result<Url, ConfigError> {
    let invalid = |reason: &str| ConfigError::InvalidEndpoint {
        endpoint: redact_user_info(endpoint),
        reason: reason.to_owned(),
    };
    let trimmed = endpoint.trim();
    if trimmed.is_empty() {
        return Err(invalid("it is empty"));
    }
    let with_scheme = if trimmed.contains("://") {
        trimmed.to_owned()
    } else {
        format!("https://{trimmed}")
    };
    let mut url = Url::parse(&with_scheme).map_err(|error| invalid(&error.to_string()))?;
    if url.scheme() != "https" && url.scheme() != "http" {
        return Err(invalid(
            "the scheme must be https (or http for a test server)",
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(invalid("it has no host"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(invalid(
            "credentials do not belong in the URL; pass them as credentials",
        ));
    }
    if url.path() != "/" && !url.path().is_empty() {
        return Err(invalid(
            "it must not have a path (the client adds /api/...)",
        ));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(invalid("it must not have a query or fragment"));
    }
    // `Url` forgets a port that is the scheme's default, so look at what was written.
    let authority = with_scheme
        .split_once("://")
        .map(|(_, rest)| rest.split(['/', '?', '#']).next().unwrap_or_default())
        .unwrap_or_default();
    let port_written = !authority.ends_with(']')
        && authority
            .rsplit_once(':')
            .is_some_and(|(_, port)| !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()));
    if !port_written {
        url.set_port(Some(DEFAULT_PORT))
            .map_err(|()| invalid("cannot set the default port"))?;
    }
    Ok(url)
}

/// `https://user:pass@host` → `https://<redacted>@host`, so an endpoint can be shown in an error.
fn redact_user_info(endpoint: &str) -> String {
    let (scheme, rest) = endpoint.split_once("://").unwrap_or(("", endpoint));
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => {
            let prefix = if scheme.is_empty() {
                String::new()
            } else {
                format!("{scheme}://")
            };
            format!("{prefix}<redacted>{}", &rest[at..])
        }
        None => endpoint.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_normalised_with_the_default_port() {
        for (input, expected) in [
            ("pc.example.com", "https://pc.example.com:9440/"),
            ("pc.example.com:9441", "https://pc.example.com:9441/"),
            ("https://pc.example.com", "https://pc.example.com:9440/"),
            ("https://pc.example.com:443", "https://pc.example.com:443/"),
            (
                "https://pc.example.com:9440/",
                "https://pc.example.com:9440/",
            ),
            ("http://127.0.0.1:8080", "http://127.0.0.1:8080/"),
            ("10.1.2.3", "https://10.1.2.3:9440/"),
            ("[fd00::1]", "https://[fd00::1]:9440/"),
            ("https://[fd00::1]:9441", "https://[fd00::1]:9441/"),
        ] {
            let url = parse_endpoint(input).unwrap();
            let shown = if url.port().is_none() {
                format!("{}://{}:{}/", url.scheme(), url.host_str().unwrap(), 443)
            } else {
                url.to_string()
            };
            assert_eq!(shown, expected, "{input}");
        }
    }

    #[test]
    fn bad_endpoints_are_refused_with_the_reason() {
        for (input, reason) in [
            ("", "empty"),
            ("ftp://pc", "scheme"),
            ("https://user:secret@pc", "credentials"),
            ("https://pc/api/nutanix/v3", "path"),
            ("https://pc?x=1", "query"),
            ("https://", "host"),
            ("https://pc:99999", "invalid port"),
        ] {
            let error = parse_endpoint(input).unwrap_err().to_string();
            assert!(error.contains(reason), "{input}: {error}");
            assert!(!error.contains("secret@"), "{error}");
        }
    }

    #[test]
    fn api_key_user_name_means_api_key_and_debug_hides_secrets() {
        assert_eq!(
            Credentials::basic("X-ntnx-api-key", "k3y"),
            Credentials::ApiKey(Sensitive::new("k3y"))
        );
        let basic = Credentials::basic("admin", "pa55word");
        let shown = format!("{basic:?} {:?}", Credentials::api_key("k3y"));
        assert!(shown.contains("admin"));
        assert!(
            !shown.contains("pa55word") && !shown.contains("k3y"),
            "{shown}"
        );
        let mut config = ClientConfig::new("pc", basic).unwrap();
        config.proxy = ProxyConfig::Url(Sensitive::new("http://u:proxypass@proxy:3128"));
        assert!(!format!("{config:?}").contains("pa55word"));
        assert!(!format!("{config:?}").contains("proxypass"));
    }
}
