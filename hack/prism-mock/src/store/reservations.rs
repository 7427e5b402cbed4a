//! Idempotence identifiers: UUIDs reserved through `POST /idempotence_identifiers` for later creates.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::refusal::Refusal;
use super::{Reservation, Store};

impl Store {
    /// `POST /idempotence_identifiers`. A repeated request for a client identifier whose reservation has not
    /// expired returns the same UUIDs (mock choice, so a retried reservation is itself idempotent).
    pub(crate) fn reserve_uuids(&mut self, body: &Value, now: Instant) -> Result<Value, Refusal> {
        const KIND: &str = "idempotence_identifier";
        let mut details = Vec::new();
        let client_identifier = body
            .get("client_identifier")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if client_identifier.is_empty() {
            details.push(("client_identifier".to_owned(), "is required".to_owned()));
        }
        let count = body.get("count").and_then(Value::as_i64).unwrap_or(1);
        if !(1..=4096).contains(&count) {
            details.push(("count".to_owned(), format!("{count} is not in 1..=4096")));
        }
        let minutes = body
            .get("valid_duration_in_minutes")
            .and_then(Value::as_i64)
            .unwrap_or(60);
        if !(1..=527_040).contains(&minutes) {
            details.push((
                "valid_duration_in_minutes".to_owned(),
                format!("{minutes} is not in 1..=527040"),
            ));
        }
        if !details.is_empty() {
            return Err(Refusal::invalid(KIND, details));
        }
        if let Some(existing) = self.reservations.get(&client_identifier)
            && existing.expires > now
        {
            return Ok(reservation_json(existing));
        }
        let uuids: Vec<String> = (0..count).map(|_| self.new_uuid()).collect();
        let validity = Duration::from_secs(u64::try_from(minutes).unwrap_or(60) * 60);
        let expires = now + validity;
        let reservation = Reservation {
            client_identifier: client_identifier.clone(),
            uuids,
            expires,
            expiration_time: self.wall(expires),
        };
        for uuid in &reservation.uuids {
            self.reserved_uuids
                .insert(uuid.clone(), client_identifier.clone());
        }
        let response = reservation_json(&reservation);
        if let Some(old) = self.reservations.insert(client_identifier, reservation) {
            for uuid in old.uuids {
                self.reserved_uuids.remove(&uuid);
            }
        }
        Ok(response)
    }

    pub(crate) fn get_reservation(&self, client_identifier: &str) -> Option<Value> {
        self.reservations
            .get(client_identifier)
            .map(reservation_json)
    }

    /// Releases a reservation; false if there is none.
    pub(crate) fn delete_reservation(&mut self, client_identifier: &str) -> bool {
        let Some(reservation) = self.reservations.remove(client_identifier) else {
            return false;
        };
        for uuid in &reservation.uuids {
            self.reserved_uuids.remove(uuid);
        }
        true
    }

    /// Whether `uuid` was reserved and the reservation has not expired.
    pub(crate) fn uuid_is_reserved(&self, uuid: &str, now: Instant) -> bool {
        self.reserved_uuids
            .get(uuid)
            .and_then(|client| self.reservations.get(client))
            .is_some_and(|r| r.expires > now)
    }
}

/// As recorded (create_idempotence_identifiers.json, get_idempotence_identifiers.json).
fn reservation_json(r: &Reservation) -> Value {
    json!({"client_identifier": r.client_identifier, "count": r.uuids.len(),
        "uuid_list": r.uuids, "expiration_time": r.expiration_time})
}
