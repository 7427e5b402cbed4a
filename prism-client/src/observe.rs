//! The observability hook: one event per HTTP attempt, labelled by endpoint template.

use std::fmt;
use std::time::Duration;

/// Which API a call belongs to; endpoint templates are relative to its base path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Api {
    /// `/api/nutanix/v3`
    V3,
    /// `/api/vmm/v4.0`
    VmmV4,
    /// `/api/prism/v4.0`
    PrismV4,
    /// `/api/volumes/v4.0`
    VolumesV4,
}

impl Api {
    /// The base path segments.
    pub(crate) fn base_segments(self) -> &'static [&'static str] {
        match self {
            Self::V3 => &["api", "nutanix", "v3"],
            Self::VmmV4 => &["api", "vmm", "v4.0"],
            Self::PrismV4 => &["api", "prism", "v4.0"],
            Self::VolumesV4 => &["api", "volumes", "v4.0"],
        }
    }

    /// A short label: `v3`, `vmm.v4`, `prism.v4`, `volumes.v4`.
    pub fn label(self) -> &'static str {
        match self {
            Self::V3 => "v3",
            Self::VmmV4 => "vmm.v4",
            Self::PrismV4 => "prism.v4",
            Self::VolumesV4 => "volumes.v4",
        }
    }
}

impl fmt::Display for Api {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// One HTTP attempt (a retry is a new event; a session login is an event of `GET /users/me`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestEvent {
    pub api: Api,
    /// The endpoint template, e.g. `GET /vms/{uuid}` (see [`crate::endpoints`]).
    pub endpoint: &'static str,
    /// The HTTP status; `None` when no response arrived (connect, TLS, timeout).
    pub status: Option<u16>,
    /// From sending the request to having read the whole body.
    pub latency: Duration,
    /// 1 for the first attempt of a call.
    pub attempt: u32,
}

/// Receives every [`RequestEvent`]. Implemented for any `Fn(&RequestEvent) + Send + Sync`.
pub trait RequestObserver: Send + Sync {
    fn observe(&self, event: &RequestEvent);
}

impl<F> RequestObserver for F
where
    F: Fn(&RequestEvent) + Send + Sync,
{
    fn observe(&self, event: &RequestEvent) {
        self(event);
    }
}
