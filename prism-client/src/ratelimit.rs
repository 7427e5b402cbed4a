//! A token bucket shared by every clone of a client, so all its callers together stay under the limit.
//!
//! The rate adapts to Prism's answers: each 429 halves it (down to a floor) and drops the saved-up burst, each
//! success brings it back by a step, up to the configured rate. A client that only waited out each 429 would go
//! back to its full rate at once and be refused again; the v4 SDKs retry 429 and 503 (reference note 02 §5), but
//! no peer slows down, so the factors here are this crate's choice.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::config::RateLimit;
use crate::error::ConfigError;

/// Lowest rate a run of 429s brings the bucket to, as a fraction of the configured rate.
const MIN_RATE_FRACTION: f64 = 1.0 / 32.0;
/// What each success gives back, as a fraction of the configured rate.
const RECOVERY_FRACTION: f64 = 1.0 / 16.0;

#[derive(Debug)]
pub(crate) struct TokenBucket {
    configured_per_second: f64,
    burst: f64,
    state: Mutex<Bucket>,
}

#[derive(Debug)]
struct Bucket {
    /// May go below zero: each caller reserves its token at once and sleeps for its turn, so waiting callers are
    /// served in the order they arrived.
    tokens: f64,
    updated: Instant,
    /// The rate now: the configured one, or less after 429s.
    per_second: f64,
}

impl Bucket {
    /// Adds the tokens earned since the last update, at the current rate.
    fn refill(&mut self, now: Instant, burst: f64) {
        let elapsed = now.saturating_duration_since(self.updated).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.per_second).min(burst);
        self.updated = now.max(self.updated);
    }
}

impl TokenBucket {
    pub(crate) fn new(limit: &RateLimit) -> Result<Self, ConfigError> {
        if !(limit.requests_per_second.is_finite() && limit.requests_per_second > 0.0) {
            return Err(ConfigError::InvalidRateLimit {
                reason: format!(
                    "requests_per_second {} must be above 0",
                    limit.requests_per_second
                ),
            });
        }
        if limit.burst == 0 {
            return Err(ConfigError::InvalidRateLimit {
                reason: "burst 0 must be at least 1".to_owned(),
            });
        }
        let burst = f64::from(limit.burst);
        Ok(Self {
            configured_per_second: limit.requests_per_second,
            burst,
            state: Mutex::new(Bucket {
                tokens: burst,
                updated: Instant::now(),
                per_second: limit.requests_per_second,
            }),
        })
    }

    fn bucket(&self) -> std::sync::MutexGuard<'_, Bucket> {
        // A poisoned lock only means another thread panicked mid-update of a few numbers; the state stays usable.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The rate allowed now, in requests per second.
    pub(crate) fn current_rate(&self) -> f64 {
        self.bucket().per_second
    }

    /// Prism answered 429: halve the rate (not below the floor) and give up the saved-up burst.
    pub(crate) fn throttled(&self) {
        self.throttled_at(Instant::now());
    }

    fn throttled_at(&self, now: Instant) {
        let mut bucket = self.bucket();
        bucket.refill(now, self.burst);
        bucket.tokens = bucket.tokens.min(0.0);
        let floor = self.configured_per_second * MIN_RATE_FRACTION;
        bucket.per_second = (bucket.per_second / 2.0).max(floor);
        tracing::info!(
            requests_per_second = bucket.per_second,
            "Prism Central answered 429: the client slows down"
        );
    }

    /// A request succeeded: give back a step of the rate, up to the configured one.
    pub(crate) fn succeeded(&self) {
        let mut bucket = self.bucket();
        if bucket.per_second < self.configured_per_second {
            bucket.refill(Instant::now(), self.burst);
            bucket.per_second = (bucket.per_second
                + self.configured_per_second * RECOVERY_FRACTION)
                .min(self.configured_per_second);
        }
    }

    /// Waits until this caller may send one request.
    pub(crate) async fn acquire(&self) {
        let wait = self.reserve(Instant::now());
        if !wait.is_zero() {
            tracing::trace!(
                wait_ms = wait.as_millis(),
                "rate limit: waiting for a token"
            );
            tokio::time::sleep(wait).await;
        }
    }

    /// Takes a token at `now` and returns how long the caller must wait before using it.
    fn reserve(&self, now: Instant) -> Duration {
        let mut bucket = self.bucket();
        bucket.refill(now, self.burst);
        bucket.tokens -= 1.0;
        if bucket.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-bucket.tokens / bucket.per_second)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket(per_second: f64, burst: u32) -> TokenBucket {
        TokenBucket::new(&RateLimit {
            requests_per_second: per_second,
            burst,
        })
        .unwrap()
    }

    #[test]
    fn burst_goes_at_once_then_callers_queue_at_the_rate() {
        let bucket = bucket(10.0, 3);
        let start = Instant::now();
        let waits: Vec<Duration> = (0..6).map(|_| bucket.reserve(start)).collect();
        let millis: Vec<u128> = waits.iter().map(Duration::as_millis).collect();
        assert_eq!(millis, [0, 0, 0, 100, 200, 300]);
    }

    #[test]
    fn tokens_refill_over_time_up_to_the_burst() {
        let bucket = bucket(10.0, 2);
        let start = Instant::now();
        assert!(bucket.reserve(start).is_zero());
        assert!(bucket.reserve(start).is_zero());
        assert_eq!(bucket.reserve(start).as_millis(), 100);
        // One second later the bucket is full again (2 tokens), not 10.
        let later = start + Duration::from_secs(1);
        assert!(bucket.reserve(later).is_zero());
        assert!(bucket.reserve(later).is_zero());
        assert!(!bucket.reserve(later).is_zero());
    }

    #[test]
    fn each_429_halves_the_rate_down_to_a_floor_and_successes_bring_it_back_step_by_step() {
        let bucket = bucket(32.0, 10);
        let rates: Vec<f64> = (0..7)
            .map(|_| {
                bucket.throttled();
                bucket.current_rate()
            })
            .collect();
        assert_eq!(rates, [16.0, 8.0, 4.0, 2.0, 1.0, 1.0, 1.0], "floor 1/32");
        bucket.succeeded();
        assert_eq!(
            bucket.current_rate(),
            3.0,
            "a step is 1/16 of the configured rate"
        );
        for _ in 0..20 {
            bucket.succeeded();
        }
        assert_eq!(
            bucket.current_rate(),
            32.0,
            "never above the configured rate"
        );
    }

    #[test]
    fn after_a_429_the_saved_burst_is_gone_and_callers_are_spaced_at_the_lower_rate() {
        let bucket = bucket(10.0, 5);
        let start = Instant::now();
        bucket.throttled_at(start);
        let waits: Vec<u128> = (0..4).map(|_| bucket.reserve(start).as_millis()).collect();
        // 5 tokens were saved; after the 429 none is left, and one comes every 200 ms (5 per second).
        assert_eq!(waits, [200, 400, 600, 800]);
    }

    #[test]
    fn invalid_limits_are_refused() {
        for (rate, burst) in [(0.0, 1), (-1.0, 1), (f64::NAN, 1), (1.0, 0)] {
            assert!(
                TokenBucket::new(&RateLimit {
                    requests_per_second: rate,
                    burst
                })
                .is_err()
            );
        }
    }
}
