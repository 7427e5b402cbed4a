//! Who held the controller's leader Lease when, and whether every Prism write a replica sent
//! came while it held it: the invariant leader election exists for, checked from what the API
//! server stored and what prism-mock received, never from the controller's own account.
//!
//! A candidate may take the Lease once it has seen the record unchanged for its
//! `leaseDurationSeconds` (k8s.io/client-go `tools/leaderelection/leaderelection.go`,
//! `tryAcquireOrRenew` and `isLeaseValid`): at the earliest, the holder's last `renewTime` plus
//! that duration. So a write by replica R received at `t` is inside R's lease when R's latest
//! renewal `r ≤ t` satisfies `t < r + duration`. Every time here is wall-clock milliseconds of
//! this host: the Lease's `renewTime` (written by the holder) and prism-mock's
//! `received_unix_ms` come from the same clock.
//!
//! A replica names itself in the `User-Agent` of its Prism requests as the comment after the
//! product (`nutanix-machine-controller/0.1.0 (<identity>)`), with the identity it writes into
//! the Lease's `holderIdentity`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use prism_mock::RequestRecord;
use tokio::task::JoinHandle;

use crate::bench::calls::is_write;

/// The product the controller names in its `User-Agent`.
pub const CONTROLLER_PRODUCT: &str = "nutanix-machine-controller/";

/// One state of the Lease, as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseObservation {
    /// `spec.holderIdentity` (empty when released).
    pub holder: String,
    /// `spec.renewTime`.
    pub renewed_unix_ms: u64,
    /// `spec.leaseDurationSeconds`.
    pub duration_ms: u64,
    /// When this state was first read.
    pub seen_unix_ms: u64,
}

impl LeaseObservation {
    /// The earliest moment another replica may take the Lease after this renewal.
    pub fn could_pass_unix_ms(&self) -> u64 {
        self.renewed_unix_ms.saturating_add(self.duration_ms)
    }
}

fn unix_ms(time: std::time::SystemTime) -> u64 {
    time.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
        })
}

fn observation(lease: &Lease) -> Option<LeaseObservation> {
    let spec = lease.spec.as_ref()?;
    let renewed = spec.renew_time.as_ref()?.0.as_millisecond();
    Some(LeaseObservation {
        holder: spec.holder_identity.clone().unwrap_or_default(),
        renewed_unix_ms: u64::try_from(renewed).ok()?,
        duration_ms: u64::try_from(spec.lease_duration_seconds?).ok()? * 1_000,
        seen_unix_ms: unix_ms(std::time::SystemTime::now()),
    })
}

/// Reads a Lease every `every` (well under any renew interval, so no renewal is missed; a watch
/// could skip states across a relist) and keeps each new state. Stops when dropped.
#[derive(Debug)]
pub struct LeaseHistory {
    observations: Arc<Mutex<Vec<LeaseObservation>>>,
    reader: JoinHandle<()>,
}

impl Drop for LeaseHistory {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl LeaseHistory {
    /// Starts reading `name` through `leases` (a client that is not throttled or cut off with
    /// the controller: the administrator's).
    pub fn record(leases: Api<Lease>, name: &str, every: Duration) -> Self {
        let observations = Arc::new(Mutex::new(Vec::<LeaseObservation>::new()));
        let kept = observations.clone();
        let name = name.to_owned();
        let reader = tokio::spawn(async move {
            loop {
                if let Ok(Some(lease)) = leases.get_opt(&name).await
                    && let Some(seen) = observation(&lease)
                {
                    let mut kept = lock(&kept);
                    let changed = kept.last().is_none_or(|last| {
                        (last.holder.as_str(), last.renewed_unix_ms, last.duration_ms)
                            != (seen.holder.as_str(), seen.renewed_unix_ms, seen.duration_ms)
                    });
                    if changed {
                        kept.push(seen);
                    }
                }
                tokio::time::sleep(every).await;
            }
        });
        Self {
            observations,
            reader,
        }
    }

    /// Every state read so far, oldest first.
    pub fn observations(&self) -> Vec<LeaseObservation> {
        lock(&self.observations).clone()
    }
}

/// The replica a `User-Agent` names: the comment after the controller's product.
pub fn identity_in_user_agent(user_agent: &str) -> Option<&str> {
    let rest = user_agent.strip_prefix(CONTROLLER_PRODUCT)?;
    let (_, comment) = rest.split_once('(')?;
    let (identity, _) = comment.split_once(')')?;
    Some(identity).filter(|identity| !identity.is_empty())
}

/// A Prism write by a replica that did not hold the Lease when it was received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteOutsideLease {
    /// `None`: the controller sent a write without naming itself.
    pub identity: Option<String>,
    pub method: String,
    pub endpoint: String,
    pub vm: Option<String>,
    pub received_unix_ms: u64,
    /// The replica's latest renewal before the write; `None` if it never held the Lease.
    pub last_renewal: Option<LeaseObservation>,
}

impl std::fmt::Display for WriteOutsideLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let who = self.identity.as_deref().unwrap_or("an unnamed replica");
        write!(
            f,
            "{} {} (VM {}) by {who} at {} ms: ",
            self.method,
            self.endpoint,
            self.vm.as_deref().unwrap_or("-"),
            self.received_unix_ms
        )?;
        match &self.last_renewal {
            None => write!(f, "it never held the Lease before"),
            Some(renewal) => write!(
                f,
                "its lease could pass at {} ms, {} ms earlier",
                renewal.could_pass_unix_ms(),
                self.received_unix_ms
                    .saturating_sub(renewal.could_pass_unix_ms())
            ),
        }
    }
}

/// The latest renewal by `identity` at or before `at`.
pub fn renewal_before<'a>(
    observations: &'a [LeaseObservation],
    identity: &str,
    at_unix_ms: u64,
) -> Option<&'a LeaseObservation> {
    observations
        .iter()
        .filter(|seen| seen.holder == identity && seen.renewed_unix_ms <= at_unix_ms)
        .max_by_key(|seen| seen.renewed_unix_ms)
}

/// Every Prism write the controller sent (by its `User-Agent`) outside the sender's lease.
pub fn writes_outside_lease(
    observations: &[LeaseObservation],
    requests: &[RequestRecord],
) -> Vec<WriteOutsideLease> {
    requests
        .iter()
        .filter(|request| is_write(&request.method, &request.endpoint))
        .filter(|request| {
            request
                .user_agent
                .as_deref()
                .is_some_and(|agent| agent.starts_with(CONTROLLER_PRODUCT))
        })
        .filter_map(|request| {
            let identity = request
                .user_agent
                .as_deref()
                .and_then(identity_in_user_agent);
            let renewal = identity.and_then(|identity| {
                renewal_before(observations, identity, request.received_unix_ms)
            });
            let inside = renewal
                .is_some_and(|renewal| request.received_unix_ms < renewal.could_pass_unix_ms());
            (!inside).then(|| WriteOutsideLease {
                identity: identity.map(str::to_owned),
                method: request.method.clone(),
                endpoint: request.endpoint.clone(),
                vm: request.vm.clone(),
                received_unix_ms: request.received_unix_ms,
                last_renewal: renewal.cloned(),
            })
        })
        .collect()
}

/// The Prism writes `identity` sent (named in their `User-Agent`), in the order received.
pub fn writes_by<'a>(
    requests: &'a [RequestRecord],
    identity: &'a str,
) -> impl Iterator<Item = &'a RequestRecord> {
    requests.iter().filter(move |request| {
        is_write(&request.method, &request.endpoint)
            && request
                .user_agent
                .as_deref()
                .and_then(identity_in_user_agent)
                == Some(identity)
    })
}

/// The last Prism write `identity` sent, by when prism-mock received it.
pub fn last_write_by<'a>(
    requests: &'a [RequestRecord],
    identity: &'a str,
) -> Option<&'a RequestRecord> {
    writes_by(requests, identity).max_by_key(|request| request.received_unix_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn renewal(holder: &str, at: u64) -> LeaseObservation {
        LeaseObservation {
            holder: holder.to_owned(),
            renewed_unix_ms: at,
            duration_ms: 15_000,
            seen_unix_ms: at + 50,
        }
    }

    fn write(user_agent: Option<&str>, method: &str, endpoint: &str, at: u64) -> RequestRecord {
        RequestRecord {
            at_ms: 0,
            method: method.to_owned(),
            endpoint: endpoint.to_owned(),
            status: 202,
            vm: Some("vm-1".to_owned()),
            user_agent: user_agent.map(str::to_owned),
            received_unix_ms: at,
        }
    }

    const A: &str = "nutanix-machine-controller/0.1.0 (pod-a_1)";
    const B: &str = "nutanix-machine-controller/0.1.0 (pod-b_2)";

    #[test]
    fn the_identity_is_the_comment_after_the_controllers_product() {
        assert_eq!(identity_in_user_agent(A), Some("pod-a_1"));
        assert_eq!(
            identity_in_user_agent("nutanix-machine-controller/0.1.0"),
            None
        );
        assert_eq!(
            identity_in_user_agent("nutanix-machine-controller/0.1.0 ()"),
            None
        );
        assert_eq!(identity_in_user_agent("python-requests/2 (pod-a_1)"), None);
    }

    #[test]
    fn writes_count_against_the_senders_latest_renewal_before_them() {
        let history = [
            renewal("pod-a_1", 1_000),
            renewal("pod-a_1", 6_000),
            // pod-a is cut off after 6 s; pod-b takes the Lease once it could pass (21 s).
            renewal("pod-b_2", 21_500),
        ];
        let requests = [
            write(Some(A), "POST", "/api/nutanix/v3/vms", 5_000),
            write(Some(A), "PUT", "/api/nutanix/v3/vms/{uuid}", 20_999),
            // Reads never count, whoever sends them.
            write(Some(A), "GET", "/api/nutanix/v3/vms/{uuid}", 40_000),
            write(Some(A), "POST", "/api/nutanix/v3/vms/list", 40_000),
            write(Some(B), "DELETE", "/api/nutanix/v3/vms/{uuid}", 22_000),
            // Another client of prism-mock (the sandbox seeding VMs) is not the controller's.
            write(
                Some("python-requests/2"),
                "POST",
                "/api/nutanix/v3/vms",
                500,
            ),
        ];
        assert_eq!(writes_outside_lease(&history, &requests), vec![]);

        let late = [
            write(Some(A), "DELETE", "/api/nutanix/v3/vms/{uuid}", 21_000),
            write(Some(B), "POST", "/api/nutanix/v3/vms", 21_000),
            write(
                Some("nutanix-machine-controller/0.1.0"),
                "POST",
                "/api/nutanix/v3/vms",
                5_000,
            ),
        ];
        let outside = writes_outside_lease(&history, &late);
        let who: Vec<_> = outside
            .iter()
            .map(|write| (write.identity.as_deref(), write.last_renewal.clone()))
            .collect();
        assert_eq!(
            who,
            vec![
                // At the very moment the lease could pass: outside.
                (Some("pod-a_1"), Some(renewal("pod-a_1", 6_000))),
                // Before its first renewal.
                (Some("pod-b_2"), None),
                (None, None),
            ]
        );
        assert!(
            outside[0]
                .to_string()
                .contains("could pass at 21000 ms, 0 ms earlier")
        );
        assert_eq!(
            last_write_by(&requests, "pod-a_1").map(|write| write.received_unix_ms),
            Some(20_999)
        );
    }
}
