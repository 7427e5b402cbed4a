//! The data of Nutanix Prism Central's API, without the transport: the v3 and v4 request and response shapes,
//! the typed error of a call, and a task's typed progress. `prism-client` sends and receives these; the
//! provider's pure decisions read them without depending on an HTTP client or an async runtime.
//!
//! - [`v3`] and [`v4`]: serde shapes. Unknown fields are kept, unknown enum values decode, optional fields are
//!   not sent when `None`.
//! - [`Error`]: one variant per way a call can fail; [`Error::is_retryable`] tells a transient failure.
//! - [`TaskProgress`]: what one task read means.
//! - [`quote`]: text from outside put into a message with a bounded length.

pub mod error;
mod message;
mod open_enum;
pub mod quote;
mod sensitive;
pub mod task;
pub mod v3;
pub mod v4;

pub use error::{ConfigError, Error, TransportKind};
pub use message::{PrismMessage, PrismMessages};
pub use sensitive::Sensitive;
pub use task::{MAX_SUBTASK_READS, SubtaskError, TaskEnd, TaskEntity, TaskFailure, TaskProgress};

/// The most pages one listing (`list_all`, `find_by_exact_name`, `list_all_templates`) reads before it fails
/// with [`Error::ListDidNotEnd`]: 200,000 entities at the default page length of 100, far beyond what one
/// Prism Central holds, yet a bound on a server that keeps announcing more than it hands out.
pub const MAX_LIST_PAGES: u32 = 2_000;
