//! Per-object exponential backoff for failed reconciles (kube-runtime has none; the
//! machine-api-operator relies on controller-runtime's). Each failure doubles the delay up to a
//! maximum; a `Retry-After` from Prism is honoured when it is longer, up to the same maximum (a
//! requeue later than the longest backoff would only delay the next look). The count starts again
//! when the object reaches a healthy state (its VM is found, or its deletion finishes), not
//! after any successful reconcile: a failed create writes a condition, and the reconcile that
//! write triggers must not reset the delay before the create is tried again.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The delay after `failures` consecutive failures (1 for the first): at most `max`, whatever
/// `retry_after` asks.
pub fn backoff_delay(
    failures: u32,
    min: Duration,
    max: Duration,
    retry_after: Option<Duration>,
) -> Duration {
    let exponent = failures.saturating_sub(1).min(30);
    let delay = min.saturating_mul(1 << exponent).min(max);
    retry_after.map_or(delay, |asked| delay.max(asked.min(max)))
}

/// One object's failures: how many in a row, and the last one's time and delay. The time the next
/// attempt may start is never computed as an `Instant` (adding to an `Instant` can overflow).
#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    last: Instant,
    delay: Duration,
}

/// Failure counts, and when the next attempt may start, by object key.
#[derive(Debug)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    failures: Mutex<HashMap<String, Failures>>,
}

impl Backoff {
    pub fn new(min: Duration, max: Duration) -> Self {
        Self {
            min,
            max: max.max(min),
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// Counts a failure of `key` and returns how long to wait before the next attempt (at most
    /// the maximum, whatever `retry_after` asks).
    pub fn failed(&self, key: &str, retry_after: Option<Duration>) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        let entry = failures.entry(key.to_owned()).or_insert(Failures {
            count: 0,
            last: now,
            delay: Duration::ZERO,
        });
        entry.count = entry.count.saturating_add(1);
        entry.last = now;
        entry.delay = backoff_delay(entry.count, self.min, self.max, retry_after);
        entry.delay
    }

    /// How long `key` must still wait after its last failure, if at all.
    pub fn remaining(&self, key: &str) -> Option<Duration> {
        let failures = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        let failure = failures.get(key)?;
        let left = failure.delay.saturating_sub(failure.last.elapsed());
        (!left.is_zero()).then_some(left)
    }

    /// Forgets the failures of `key` (it is healthy, or it is gone).
    pub fn reset(&self, key: &str) {
        self.failures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_secs(1);
    const MAX: Duration = Duration::from_secs(60);

    #[test]
    fn delays_double_up_to_the_maximum() {
        let delays: Vec<u64> = (1..=8)
            .map(|n| backoff_delay(n, MIN, MAX, None).as_secs())
            .collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(backoff_delay(u32::MAX, MIN, MAX, None), MAX);
    }

    #[test]
    fn retry_after_wins_when_longer() {
        assert_eq!(
            backoff_delay(1, MIN, MAX, Some(Duration::from_secs(7))),
            Duration::from_secs(7)
        );
        assert_eq!(
            backoff_delay(6, MIN, MAX, Some(Duration::from_secs(7))),
            Duration::from_secs(32)
        );
        assert_eq!(
            backoff_delay(1, MIN, MAX, Some(Duration::from_secs(3600))),
            MAX,
            "never longer than the maximum"
        );
    }

    #[test]
    fn a_retry_after_of_any_length_neither_panics_nor_waits_past_the_maximum() {
        // Adding this to an Instant panicked ("overflow when adding duration to instant").
        let backoff = Backoff::new(MIN, MAX);
        assert_eq!(backoff.failed("a", Some(Duration::MAX)), MAX);
        assert!(
            backoff.remaining("a").is_some_and(|left| left <= MAX),
            "{:?}",
            backoff.remaining("a")
        );
        assert_eq!(backoff.failed("a", Some(Duration::MAX)), MAX);
    }

    #[test]
    fn objects_back_off_independently_and_reset_on_success() {
        let backoff = Backoff::new(MIN, MAX);
        assert_eq!(backoff.failed("a", None), MIN);
        assert_eq!(backoff.failed("a", None), 2 * MIN);
        assert_eq!(backoff.failed("b", None), MIN);
        assert!(backoff.remaining("a").is_some_and(|left| left <= 2 * MIN));
        backoff.reset("a");
        assert_eq!(backoff.remaining("a"), None);
        assert_eq!(backoff.failed("a", None), MIN);
    }
}
