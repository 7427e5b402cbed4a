//! A token bucket shared by every clone of a client, so all its callers together stay under the limit.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::config::RateLimit;
use crate::error::ConfigError;

#[derive(Debug)]
pub(crate) struct TokenBucket {
    per_second: f64,
    burst: f64,
    state: Mutex<Bucket>,
}

#[derive(Debug)]
struct Bucket {
    /// May go below zero: each caller reserves its token at once and sleeps for its turn, so waiting callers are
    /// served in the order they arrived.
    tokens: f64,
    updated: Instant,
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
            per_second: limit.requests_per_second,
            burst,
            state: Mutex::new(Bucket {
                tokens: burst,
                updated: Instant::now(),
            }),
        })
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
        // A poisoned lock only means another thread panicked mid-update of two numbers; the state stays usable.
        let mut bucket = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let elapsed = now.saturating_duration_since(bucket.updated).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * self.per_second).min(self.burst);
        bucket.updated = now.max(bucket.updated);
        bucket.tokens -= 1.0;
        if bucket.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-bucket.tokens / self.per_second)
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
