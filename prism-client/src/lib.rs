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
mod observe;
mod ratelimit;
mod task;
mod tls;

// The API's data lives in `prism-types` (no transport), re-exported here whole.
use prism_types::error;
pub use prism_types::{quote, v3, v4};

pub use api_v3::{Listing, V3Entity};

pub use api_v4::{DeployAccepted, V4_TASKS_MAX_PAGE, task_uuid_part, v4_task_ext_id};
pub use client::{Client, MAX_RETRY_AFTER, REQUEST_ID_HEADER};
pub use config::{
    API_KEY_USERNAME, AuthMode, CaBundle, ClientConfig, Credentials, DEFAULT_MAX_BODY_BYTES,
    DEFAULT_PORT, ProxyConfig, RateLimit, RetryPolicy,
};
pub use observe::{Api, RequestEvent, RequestObserver};
pub use prism_types::task::{dedup as dedup_entities, v4_entities, v4_progress};
pub use prism_types::{
    ConfigError, Error, MAX_LIST_PAGES, MAX_SUBTASK_READS, PrismMessage, PrismMessages, Sensitive,
    SubtaskError, TaskEnd, TaskEntity, TaskFailure, TaskProgress, TransportKind,
};
pub use tls::system_roots_file;
