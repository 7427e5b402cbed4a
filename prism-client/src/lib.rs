//! Client for Nutanix Prism Central: v3 endpoints, v4 template deploy, auth, TLS, retry, rate limit and tasks.
//! It knows nothing of Kubernetes.
//!
//! - [`Client`]: one per Prism Central endpoint and credentials, cheap to clone and shared by every caller.
//! - [`ClientConfig`]: endpoint, credentials, auth mode, TLS, proxy, timeouts, retries, rate limit, observer.
//! - [`v3`] and [`v4`]: serde shapes of the requests and responses. Unknown fields are kept, unknown enum values
//!   decode, optional fields are not sent when `None`.
//! - [`Error`]: one variant per cause; [`Error::is_retryable`] tells a transient failure.
//! - [`endpoints`]: the endpoint templates that label errors, logs and [`RequestEvent`]s.
//! - [`TaskProgress`]: a typed task read ([`Client::get_task`], [`Client::get_v4_task`]).

mod api_v3;
mod api_v4;
mod client;
mod config;
pub mod endpoints;
mod error;
mod observe;
mod open_enum;
mod ratelimit;
mod sensitive;
mod task;
mod tls;
pub mod v3;
pub mod v4;

pub use api_v3::{Listing, V3Entity};

/// The most pages one listing (`list_all`, `find_by_exact_name`, `list_all_templates`) reads before it fails
/// with [`Error::ListDidNotEnd`]: 200,000 entities at the default page length of 100, far beyond what one
/// Prism Central holds, yet a bound on a server that keeps announcing more than it hands out.
pub const MAX_LIST_PAGES: u32 = 2_000;
pub use api_v4::DeployAccepted;
pub use client::{Client, REQUEST_ID_HEADER};
pub use config::{
    API_KEY_USERNAME, AuthMode, CaBundle, ClientConfig, Credentials, DEFAULT_PORT, ProxyConfig,
    RateLimit, RetryPolicy,
};
pub use error::{ConfigError, Error, PrismMessage, PrismMessages, TransportKind};
pub use observe::{Api, RequestEvent, RequestObserver};
pub use sensitive::Sensitive;
pub use task::{MAX_SUBTASK_READS, SubtaskError, TaskEnd, TaskEntity, TaskFailure, TaskProgress};
