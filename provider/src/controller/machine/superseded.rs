//! The versions of each Machine that this controller's own writes replaced.
//!
//! The watch cache can hand a reconcile a Machine older than the last write (its event not
//! applied yet; controller-runtime's `FAQ.md` warns of the same for every cache-backed
//! controller). Acting on it would repeat a step (a create the recorded UUID or request id makes
//! harmless, but still a Prism call, and a 409 at the end), so such a reconcile waits for the
//! cache instead.
//!
//! A Machine whose finalizer this controller removed stays remembered for a while: its last
//! status write and the removal are two versions whose watch events arrive one after the
//! other, and a reconcile woken by the first must not read the VM again and send a second
//! removal to a Machine that no longer exists.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Replaced versions remembered per Machine.
const KEPT_PER_MACHINE: usize = 16;

/// How long a released Machine's versions are kept: far longer than a watch event takes to
/// arrive, short enough that a scale-down of thousands leaves nothing behind for long.
const KEPT_AFTER_RELEASE: Duration = Duration::from_secs(300);

#[derive(Debug, Default)]
struct Versions {
    replaced: VecDeque<String>,
    /// When this controller removed the Machine's finalizer.
    released: Option<Instant>,
}

/// See the module documentation.
#[derive(Debug, Default)]
pub(super) struct Superseded(Mutex<HashMap<String, Versions>>);

impl Superseded {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Versions>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Remembers that a write of Machine `key` replaced `version`.
    pub(super) fn record(&self, key: &str, version: Option<&String>) {
        let Some(version) = version else { return };
        let mut map = self.map();
        let versions = map.entry(key.to_owned()).or_default();
        versions.replaced.push_back(version.clone());
        while versions.replaced.len() > KEPT_PER_MACHINE {
            versions.replaced.pop_front();
        }
    }

    /// Whether `version` of Machine `key` is one this controller's writes replaced.
    pub(super) fn is_stale(&self, key: &str, version: Option<&String>) -> bool {
        let Some(version) = version else { return false };
        self.map()
            .get(key)
            .is_some_and(|versions| versions.replaced.contains(version))
    }

    /// Machine `key` was released (its finalizer removed) at `now`: its versions are kept for
    /// [`KEPT_AFTER_RELEASE`], and those of Machines released longer ago are dropped. A new
    /// Machine of the same name has versions of its own, never one of these (resourceVersions
    /// only grow), so keeping them cannot hold it back.
    pub(super) fn released(&self, key: &str, now: Instant) {
        let mut map = self.map();
        map.retain(|_, versions| {
            versions
                .released
                .is_none_or(|at| now.saturating_duration_since(at) < KEPT_AFTER_RELEASE)
        });
        if let Some(versions) = map.get_mut(key) {
            versions.released = Some(now);
        }
    }

    #[cfg(test)]
    fn machines(&self) -> usize {
        self.map().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rv(version: &str) -> Option<String> {
        Some(version.to_owned())
    }

    #[test]
    fn a_version_a_write_replaced_is_stale_and_the_current_one_is_not() {
        let superseded = Superseded::default();
        superseded.record("ns/m", rv("5").as_ref());
        assert!(superseded.is_stale("ns/m", rv("5").as_ref()));
        assert!(!superseded.is_stale("ns/m", rv("6").as_ref()));
        assert!(!superseded.is_stale("ns/other", rv("5").as_ref()));
        assert!(!superseded.is_stale("ns/m", None));
    }

    #[test]
    fn the_versions_before_the_release_stay_stale_after_it() {
        let superseded = Superseded::default();
        let now = Instant::now();
        // The last status write replaced 6, the finalizer's removal replaced 7.
        superseded.record("ns/m", rv("6").as_ref());
        superseded.record("ns/m", rv("7").as_ref());
        superseded.released("ns/m", now);
        assert!(superseded.is_stale("ns/m", rv("6").as_ref()));
        assert!(superseded.is_stale("ns/m", rv("7").as_ref()));
    }

    #[test]
    fn released_machines_are_dropped_once_kept_long_enough() {
        let superseded = Superseded::default();
        let start = Instant::now();
        superseded.record("ns/old", rv("3").as_ref());
        superseded.released("ns/old", start);
        superseded.record("ns/running", rv("4").as_ref());
        superseded.record("ns/new", rv("9").as_ref());
        superseded.released("ns/new", start + KEPT_AFTER_RELEASE);
        assert!(!superseded.is_stale("ns/old", rv("3").as_ref()));
        assert!(superseded.is_stale("ns/running", rv("4").as_ref()));
        assert!(superseded.is_stale("ns/new", rv("9").as_ref()));
        assert_eq!(superseded.machines(), 2);
    }

    #[test]
    fn only_the_last_versions_are_kept() {
        let superseded = Superseded::default();
        for version in 0..=KEPT_PER_MACHINE {
            superseded.record("ns/m", Some(&version.to_string()));
        }
        assert!(!superseded.is_stale("ns/m", rv("0").as_ref()));
        assert!(superseded.is_stale("ns/m", rv("1").as_ref()));
    }
}
