//! Client for Nutanix Prism Central: v3 endpoints, v4 template deploy, auth, TLS, retry, rate limit and tasks.
//! It knows nothing of Kubernetes.
//!
//! - [`v3`] and [`v4`]: serde shapes of the requests and responses. Unknown fields are kept, unknown enum values
//!   decode, optional fields are not sent when `None`.

mod open_enum;
mod sensitive;
pub mod v3;
pub mod v4;

pub use sensitive::Sensitive;
