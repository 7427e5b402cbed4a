//! One replica's path to the API server faulted through its proxy.

use super::Soak;
use super::kube_faults::KubeFaultKind;

impl Soak<'_> {
    /// Puts replica `replica`'s path to the API server in the mode of `kind`.
    pub(super) fn set_path(&mut self, replica: usize, kind: KubeFaultKind) -> Result<(), String> {
        Err(format!("no API proxy for replica {replica} ({kind})"))
    }

    /// Opens replica `replica`'s path again.
    pub(super) fn open_path(&mut self, replica: usize) -> Result<(), String> {
        Err(format!("no API proxy for replica {replica}"))
    }
}
