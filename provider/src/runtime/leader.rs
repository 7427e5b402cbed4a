//! Leader election on the Lease `cluster-api-provider-nutanix-leader` (the Go provider's, so a
//! rollout from it to this controller, or back, never leaves two leaders), with
//! kube-lease-manager.
//!
//! The holder renews every `min(20 s, duration / 3)` (the Go provider: lease 120 s, retry 20 s).
//! Besides kube-lease-manager's own report, the holder reads the Lease back at that interval:
//! if it names another holder, or has not been confirmed for a whole lease duration (the API
//! server unreachable: another replica may hold it by now), leadership counts as lost. Losing it
//! ends the process (see `super::run`), which stops all work at once; the Deployment restarts it
//! as a candidate.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube_lease_manager::{LeaseManagerBuilder, LeaseManagerError};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The Lease's name (the Go provider's).
pub const LEASE_NAME: &str = "cluster-api-provider-nutanix-leader";

/// How often the holder renews, and checks the Lease.
pub fn renew_interval(duration: Duration) -> Duration {
    (duration / 3).clamp(Duration::from_secs(1), Duration::from_secs(20))
}

/// This replica holds the Lease.
pub struct Leadership {
    receiver: watch::Receiver<bool>,
    manager: JoinHandle<Result<kube_lease_manager::LeaseManager, LeaseManagerError>>,
    leases: Api<Lease>,
    identity: String,
    duration: Duration,
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("identity", &self.identity)
            .field("duration", &self.duration)
            .finish_non_exhaustive()
    }
}

/// Waits until this replica holds the Lease in `namespace`.
pub async fn acquire(
    client: kube::Client,
    namespace: &str,
    identity: &str,
    duration: Duration,
) -> Result<Leadership, LeaseManagerError> {
    let seconds = duration.as_secs().max(2);
    let grace = seconds - renew_interval(duration).as_secs().clamp(1, seconds - 1);
    let manager = LeaseManagerBuilder::new(client.clone(), LEASE_NAME)
        .with_namespace(namespace)
        .with_identity(identity)
        .with_duration(seconds)
        .with_grace(grace)
        .build()
        .await?;
    let (mut receiver, manager) = manager.watch().await;
    tracing::info!(
        lease = LEASE_NAME,
        namespace,
        identity,
        "waiting for the leader lease"
    );
    while !*receiver.borrow_and_update() {
        if receiver.changed().await.is_err() {
            return match manager.await {
                Ok(Err(error)) => Err(error),
                _ => Err(LeaseManagerError::InconsistentState(
                    "the lease manager stopped".into(),
                )),
            };
        }
    }
    tracing::info!(lease = LEASE_NAME, identity, "became the leader");
    Ok(Leadership {
        receiver,
        manager,
        leases: Api::namespaced(client, namespace),
        identity: identity.to_owned(),
        duration: Duration::from_secs(seconds),
    })
}

impl Leadership {
    /// Returns when leadership is lost.
    pub async fn lost(&mut self) {
        let interval = renew_interval(self.duration);
        let mut confirmed = Instant::now();
        loop {
            tokio::select! {
                changed = self.receiver.changed() => {
                    if changed.is_err() || !*self.receiver.borrow() {
                        tracing::error!(lease = LEASE_NAME, "lost the leader lease");
                        return;
                    }
                }
                () = tokio::time::sleep(interval) => {
                    match self.leases.get_opt(LEASE_NAME).await {
                        Ok(Some(lease)) if self.holds(&lease) => confirmed = Instant::now(),
                        Ok(_) => {
                            tracing::error!(lease = LEASE_NAME, "the lease names another holder");
                            return;
                        }
                        Err(error) => tracing::warn!(%error, "cannot read the leader lease"),
                    }
                    if confirmed.elapsed() >= self.duration {
                        tracing::error!(lease = LEASE_NAME, "the lease could not be confirmed for a whole lease duration");
                        return;
                    }
                }
            }
        }
    }

    fn holds(&self, lease: &Lease) -> bool {
        let Some(spec) = &lease.spec else {
            return false;
        };
        let holder = spec.holder_identity.as_deref() == Some(self.identity.as_str());
        let fresh = spec.renew_time.as_ref().is_none_or(|renewed| {
            let age = Timestamp::now().duration_since(renewed.0);
            age.as_secs() < i64::try_from(self.duration.as_secs()).unwrap_or(i64::MAX)
        });
        holder && fresh
    }

    /// Gives the Lease up (on shutdown), so another replica need not wait for it to expire.
    pub async fn release(self) {
        drop(self.receiver);
        match self.manager.await {
            Ok(Ok(_)) => tracing::info!(lease = LEASE_NAME, "released the leader lease"),
            Ok(Err(error)) => tracing::warn!(%error, "releasing the leader lease"),
            Err(error) => tracing::warn!(%error, "the lease manager task failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renewals_follow_the_go_provider() {
        assert_eq!(
            renew_interval(Duration::from_secs(120)),
            Duration::from_secs(20)
        );
        assert_eq!(
            renew_interval(Duration::from_secs(6)),
            Duration::from_secs(2)
        );
        assert_eq!(
            renew_interval(Duration::from_secs(1)),
            Duration::from_secs(1)
        );
    }
}
