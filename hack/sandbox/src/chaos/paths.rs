//! One replica's path to the API server faulted through its proxy
//! ([`crate::api_proxy`]); the other replica and every other actor keep theirs.

use std::time::Duration;

use super::Soak;
use super::kube_faults::KubeFaultKind;
use crate::api_proxy::PathMode;

/// The latency a slow path adds to every chunk, each way: past kube-apiserver's usual answer
/// times, well under the controller's 30 s request timeout, so that requests are slow, not lost.
const SLOW_PATH_LATENCY: Duration = Duration::from_millis(1500);

impl Soak<'_> {
    /// Puts replica `replica`'s path to the API server in the mode of `kind`.
    pub(super) fn set_path(&mut self, replica: usize, kind: KubeFaultKind) -> Result<(), String> {
        let mode = match kind {
            KubeFaultKind::SlowPath => PathMode::Latency(SLOW_PATH_LATENCY),
            KubeFaultKind::BlackHole => PathMode::BlackHole,
            _ => PathMode::Reset,
        };
        self.world
            .set_api_path(replica, mode)
            .map_err(|e| e.to_string())
    }

    /// Opens replica `replica`'s path again.
    pub(super) fn open_path(&mut self, replica: usize) -> Result<(), String> {
        self.world
            .set_api_path(replica, PathMode::Open)
            .map_err(|e| e.to_string())
    }
}
