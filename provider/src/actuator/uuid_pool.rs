//! Reserved VM UUIDs (`POST /idempotence_identifiers`), taken in batches.
//!
//! A create or clone carries one of these as `metadata.uuid`, recorded on the Machine before the
//! request is sent: a repeat of the request then either creates that same VM or gets 409. Each
//! batch uses a new client identifier (Prism answers a repeated identifier with the same UUIDs).
//! UUIDs are handed out only while their reservation has more than a safety margin left; the
//! ones never used simply expire in Prism.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use prism_client::v3::IdempotenceIdentifiersRequest;
use prism_client::{Client, Error};

/// How long before its reservation ends a UUID is no longer handed out (the create that uses it
/// must reach Prism before it expires; if it does not, Prism answers 422 and the controller
/// takes another).
const SAFETY_MARGIN_FRACTION: u32 = 4;

/// A pool of reserved UUIDs for one Prism Central.
#[derive(Debug)]
pub struct UuidPool {
    batch: u32,
    validity: Duration,
    available: Mutex<VecDeque<(String, Instant)>>,
    refill: tokio::sync::Mutex<()>,
}

impl UuidPool {
    /// `batch` UUIDs per reservation (1..=4096), each valid for `validity` (at most a year).
    pub fn new(batch: u32, validity: Duration) -> Self {
        Self {
            batch: batch.clamp(1, 4096),
            validity: validity.clamp(Duration::from_secs(60), Duration::from_secs(527_040 * 60)),
            available: Mutex::new(VecDeque::new()),
            refill: tokio::sync::Mutex::new(()),
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
        let _refilling = self.refill.lock().await;
        if let Some(uuid) = self.pop() {
            return Ok(uuid);
        }
        let minutes = u32::try_from(self.validity.as_secs() / 60).unwrap_or(u32::MAX);
        let reserved_at = Instant::now();
        let response = client
            .reserve_uuids(&IdempotenceIdentifiersRequest {
                client_identifier: format!("nutanix-machine-controller-{}", uuid::Uuid::new_v4()),
                count: self.batch,
                valid_duration_in_minutes: Some(minutes),
                ..IdempotenceIdentifiersRequest::default()
            })
            .await?;
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
        tracing::debug!(batch = self.batch, "reserved VM UUIDs");
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
