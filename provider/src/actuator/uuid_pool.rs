//! Reserved VM UUIDs (`POST /idempotence_identifiers`), taken in batches.
//!
//! A create or clone carries one of these as `metadata.uuid`, recorded on the Machine before the
//! request is sent: a repeat of the request then either creates that same VM or gets 409. Each
//! batch uses a new client identifier (Prism answers a repeated identifier with the same UUIDs).
//! UUIDs are handed out only while their reservation has more than a safety margin left; the
//! ones never used simply expire in Prism. A pool emptied soon after its last reservation is a
//! scale-up under way: its next batch is twice the last, up to Prism's 4,096
//! ([`next_batch`]), so that a MachineSet scaled by a thousand costs six reservations, not 32.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use prism_client::v3::IdempotenceIdentifiersRequest;
use prism_client::{Client, Error};

/// How long before its reservation ends a UUID is no longer handed out (the create that uses it
/// must reach Prism before it expires; if it does not, Prism answers 422 and the controller
/// takes another).
const SAFETY_MARGIN_FRACTION: u32 = 4;

/// The most UUIDs one reservation may ask for: the v3 `idempotence_identifiers` request's
/// `count` is 1..4096 (../shared/reference/02-prism-v3-and-capx.md; prism-mock refuses more).
const MAX_BATCH: u32 = 4096;

/// A pool emptied within this long of its last reservation reserves twice as many next time.
const GROWTH_WINDOW: Duration = Duration::from_secs(60);

/// How many UUIDs to reserve at `now`: `base`, or twice the last batch when the pool emptied
/// within [`GROWTH_WINDOW`] of reserving it (`last`: when, and how many), at most [`MAX_BATCH`].
pub fn next_batch(base: u32, last: Option<(Instant, u32)>, now: Instant) -> u32 {
    let base = base.clamp(1, MAX_BATCH);
    match last {
        Some((at, count)) if now.saturating_duration_since(at) < GROWTH_WINDOW => {
            count.saturating_mul(2).clamp(base, MAX_BATCH)
        }
        _ => base,
    }
}

/// A pool of reserved UUIDs for one Prism Central.
#[derive(Debug)]
pub struct UuidPool {
    batch: u32,
    validity: Duration,
    available: Mutex<VecDeque<(String, Instant)>>,
    /// Held while reserving; holds when the last reservation was made and how many it asked.
    refill: tokio::sync::Mutex<Option<(Instant, u32)>>,
}

impl UuidPool {
    /// At least `batch` UUIDs per reservation (1..=4096; more in a scale-up: [`next_batch`]),
    /// each valid for `validity` (at most a year).
    pub fn new(batch: u32, validity: Duration) -> Self {
        Self {
            batch: batch.clamp(1, MAX_BATCH),
            validity: validity.clamp(Duration::from_secs(60), Duration::from_secs(527_040 * 60)),
            available: Mutex::new(VecDeque::new()),
            refill: tokio::sync::Mutex::new(None),
        }
    }

    fn pop(&self) -> Option<String> {
        let mut available = self
            .available
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        while let Some((uuid, usable_until)) = available.pop_front() {
            if usable_until > now {
                return Some(uuid);
            }
        }
        None
    }

    /// One reserved UUID, reserving a new batch when the pool is empty.
    pub async fn take(&self, client: &Client) -> Result<String, Error> {
        if let Some(uuid) = self.pop() {
            return Ok(uuid);
        }
        let mut last_reservation = self.refill.lock().await;
        if let Some(uuid) = self.pop() {
            return Ok(uuid);
        }
        let minutes = u32::try_from(self.validity.as_secs() / 60).unwrap_or(u32::MAX);
        let reserved_at = Instant::now();
        let count = next_batch(self.batch, *last_reservation, reserved_at);
        let response = client
            .reserve_uuids(&IdempotenceIdentifiersRequest {
                client_identifier: format!("nutanix-machine-controller-{}", uuid::Uuid::new_v4()),
                count,
                valid_duration_in_minutes: Some(minutes),
                ..IdempotenceIdentifiersRequest::default()
            })
            .await?;
        *last_reservation = Some((reserved_at, count));
        // `validity` is at most a year, far from overflowing an `Instant`; were it not, the UUIDs
        // would count as expired at once rather than panic.
        let usable_until = reserved_at
            .checked_add(self.validity - self.validity / SAFETY_MARGIN_FRACTION)
            .unwrap_or(reserved_at);
        let mut uuids = response
            .uuid_list
            .into_iter()
            .map(|uuid| uuid.to_ascii_lowercase());
        let first = uuids.next();
        self.available
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(uuids.map(|uuid| (uuid, usable_until)));
        tracing::debug!(count, "reserved VM UUIDs");
        first.ok_or(Error::Decode {
            endpoint: prism_client::endpoints::IDEMPOTENCE_RESERVE,
            status: 200,
            reason: "the reservation returned no UUID".into(),
            excerpt: String::new(),
        })
    }

    /// UUIDs left in the pool (for tests and metrics).
    pub fn available(&self) -> usize {
        self.available
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_emptied_soon_reserves_twice_as_many_up_to_prisms_limit() {
        let start = Instant::now();
        assert_eq!(next_batch(32, None, start), 32, "the first reservation");
        let soon = start + Duration::from_secs(5);
        assert_eq!(next_batch(32, Some((start, 32)), soon), 64);
        assert_eq!(next_batch(32, Some((start, 2048)), soon), 4096);
        assert_eq!(
            next_batch(32, Some((start, 4096)), soon),
            4096,
            "Prism's limit"
        );
        // A thousand Machines at once: 32 + 64 + 128 + 256 + 512 + 1,024 UUIDs, six reservations.
        let mut last = None;
        let mut reserved = 0;
        let mut reservations = 0;
        while reserved < 1000 {
            let count = next_batch(32, last, soon);
            last = Some((soon, count));
            reserved += count;
            reservations += 1;
        }
        assert_eq!(reservations, 6);
        // A pool that lasted past the window starts again from the base.
        let later = start + GROWTH_WINDOW;
        assert_eq!(next_batch(32, Some((start, 1024)), later), 32);
        // The base is kept within Prism's range whatever is configured.
        assert_eq!(next_batch(0, None, start), 1);
        assert_eq!(next_batch(10_000, None, start), 4096);
    }
}
