//! Kubernetes' faults carried out (issue 35): each waits for its moment (the kills' aims), then
//! acts on the real control plane, on one replica's path to it, or on Prism Central, while the
//! run keeps watching; then the API server is waited for, and the moment it answered again kept
//! for the recovery figures.

use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use prism_mock::{FaultKind, FaultRule};
use rand::Rng;

use super::Soak;
use super::kube_faults::{FaultMoment, FaultRecord, KubeFaultKind};
use crate::real_cluster::ControlPlane;
use crate::world::{CONTROLLER_SERVICE_ACCOUNT, replica_pod_name};

/// The controller's Lease: the Go provider's `LeaderElectionID`
/// (openshift/machine-api-provider-nutanix `cmd/manager/main.go:147`), which ours keeps so that a
/// rollout between them never leaves two leaders.
pub const LEASE_NAME: &str = "cluster-api-provider-nutanix-leader";

/// How long kube-apiserver may take to answer again after a fault before the run gives up.
const ANSWER_AGAIN_WITHIN: Duration = Duration::from_secs(180);

/// Every Prism Central route (a fault rule's glob).
const EVERY_PRISM_CALL: &str = "/api/*";

impl Soak<'_> {
    /// Waits for `moment`'s event (polling as a kill does), then strikes `kind`.
    pub(super) async fn fault_at(
        &mut self,
        kind: KubeFaultKind,
        moment: FaultMoment,
        release_drains_after: Option<Duration>,
    ) -> Result<FaultRecord, String> {
        let (aimed, event) = match moment {
            FaultMoment::At(aim) => {
                let (found, _) = self.await_aim(aim, release_drains_after, false).await?;
                if self.drains_due.take().is_some() {
                    self.release_drains().await?;
                }
                match found {
                    Some((event, _)) => (true, event),
                    None => (false, "struck when the wait ran out".to_owned()),
                }
            }
            FaultMoment::AfterKill(_) => (true, "the replica was just started again".to_owned()),
        };
        self.strike(kind, moment, aimed, event).await
    }

    /// Strikes the next fault of `faults` if it is one meant for right after a kill (the killed
    /// replica has just been started again).
    pub(super) async fn strike_after_kill(
        &mut self,
        faults: &mut std::iter::Peekable<std::vec::IntoIter<(KubeFaultKind, FaultMoment)>>,
    ) -> Result<Option<FaultRecord>, String> {
        let Some((kind, moment)) =
            faults.next_if(|(_, moment)| matches!(moment, FaultMoment::AfterKill(_)))
        else {
            return Ok(None);
        };
        let event = "the replica was just started again".to_owned();
        self.strike(kind, moment, true, event).await.map(Some)
    }

    /// Carries `kind` out now.
    pub(super) async fn strike(
        &mut self,
        kind: KubeFaultKind,
        moment: FaultMoment,
        aimed: bool,
        event: String,
    ) -> Result<FaultRecord, String> {
        let at = self.elapsed();
        let started = Instant::now();
        let mut record = FaultRecord {
            kind,
            moment,
            at,
            aimed,
            event,
            replica: None,
            lasted: Duration::ZERO,
            answering_again: None,
            detail: String::new(),
            recovery: None,
        };
        self.world.set_label(format!("fault: {kind}"));
        // A path fault is marked once its replica is chosen (that can wait for a leader).
        if !kind.on_a_path() {
            self.pictures.mark(kind.short());
        }
        match kind {
            KubeFaultKind::ApiServerDown | KubeFaultKind::EtcdDown => {
                let program = if kind == KubeFaultKind::ApiServerDown {
                    "kube-apiserver"
                } else {
                    "etcd"
                };
                let down = self
                    .random_duration(self.options.k8s.down_time.0, self.options.k8s.down_time.1);
                self.plane()?
                    .kill_program(program)
                    .await
                    .map_err(|e| e.to_string())?;
                self.idle(down).await?;
                self.plane()?
                    .start_program_again(program)
                    .map_err(|e| e.to_string())?;
                let answering = self.wait_answering().await?;
                record.answering_again = Some(answering);
                record.detail = format!("down {:.1}s", down.as_secs_f64());
            }
            KubeFaultKind::WatchExpiry => {
                let revision = self
                    .plane()?
                    .compact_etcd()
                    .await
                    .map_err(|e| e.to_string())?;
                // Every watch of the controller must resume: from a resource version now
                // compacted away.
                let cut = self.options.k8s.reset_for;
                for replica in 0..self.world.replica_count() {
                    self.set_path(replica, KubeFaultKind::ResetPath)?;
                }
                self.idle(cut).await?;
                for replica in 0..self.world.replica_count() {
                    self.open_path(replica)?;
                }
                record.answering_again = Some(SystemTime::now());
                record.detail = format!(
                    "etcd compacted to revision {revision}; the controller's connections reset for {:.1}s",
                    cut.as_secs_f64()
                );
            }
            KubeFaultKind::Throttled => {
                let window = self.options.k8s.window;
                let namespace = self.world.namespace().to_owned();
                self.plane()?
                    .throttle_service_account(&namespace, CONTROLLER_SERVICE_ACCOUNT)
                    .await
                    .map_err(|e| e.to_string())?;
                self.idle(window).await?;
                self.plane()?
                    .lift_throttle()
                    .await
                    .map_err(|e| e.to_string())?;
                record.answering_again = Some(SystemTime::now());
                record.detail = format!("{:.1}s window", window.as_secs_f64());
            }
            KubeFaultKind::SlowPath | KubeFaultKind::ResetPath | KubeFaultKind::BlackHole => {
                let leader = if self.world.replica_count() > 1 {
                    self.acting_leader().await?
                } else {
                    None
                };
                // Mostly the leader (whose partition is the dangerous case), sometimes the
                // standby.
                let replica = match leader {
                    Some(leader)
                        if self.rng.random_bool(0.75) || self.world.replica_count() == 1 =>
                    {
                        leader
                    }
                    Some(leader) => (leader + 1) % self.world.replica_count(),
                    None => self.rng.random_range(0..self.world.replica_count()),
                };
                let window = if kind == KubeFaultKind::BlackHole {
                    // Past the lease, so that the standby can take over.
                    self.options.k8s.lease_duration + self.options.k8s.window
                } else {
                    self.options.k8s.window
                };
                self.pictures
                    .mark(&format!("{} replica-{replica}", kind.short()));
                self.set_path(replica, kind)?;
                self.idle(window).await?;
                self.open_path(replica)?;
                record.replica = Some((replica, leader == Some(replica)));
                record.answering_again = Some(SystemTime::now());
                record.detail = format!("{:.1}s window", window.as_secs_f64());
            }
            KubeFaultKind::PrismUnreachable => {
                let window = self.options.k8s.prism_outage;
                // Each call waits past the controller's Prism request timeout (60 s:
                // prism-client `config.rs`, `request_timeout`), then its connection is closed
                // without an answer: nothing it asked for is done, as when Prism Central is
                // rebooting behind a load balancer that accepts connections.
                let hang = self.options.k8s.prism_call_hang;
                let admin = self.world.admin().clone();
                let latency = admin.add_fault(FaultRule::new(
                    None,
                    EVERY_PRISM_CALL,
                    FaultKind::Latency {
                        millis: u64::try_from(hang.as_millis()).unwrap_or(u64::MAX),
                    },
                ));
                let drop = admin.add_fault(FaultRule::new(
                    None,
                    EVERY_PRISM_CALL,
                    FaultKind::DropConnection,
                ));
                self.idle(window).await?;
                admin.remove_fault(latency);
                admin.remove_fault(drop);
                record.answering_again = Some(SystemTime::now());
                record.detail = format!(
                    "{:.0}s window, each call held {:.0}s then dropped",
                    window.as_secs_f64(),
                    hang.as_secs_f64()
                );
            }
        }
        record.lasted = started.elapsed();
        self.world.set_label(self.phase_label.clone());
        Ok(record)
    }

    fn plane(&self) -> Result<&ControlPlane, String> {
        self.world.control_plane().ok_or_else(|| {
            "this fault needs the real control plane (--control-plane real)".to_owned()
        })
    }

    /// Waits until kube-apiserver answers `/readyz` again, watching meanwhile.
    async fn wait_answering(&mut self) -> Result<SystemTime, String> {
        let deadline = Instant::now() + ANSWER_AGAIN_WITHIN;
        loop {
            if self.plane()?.api_answering().await {
                return Ok(SystemTime::now());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "kube-apiserver did not answer /readyz within {}s after a fault",
                    ANSWER_AGAIN_WITHIN.as_secs()
                ));
            }
            self.idle(Duration::from_millis(200)).await?;
        }
    }

    /// The replica that holds the controller's Lease now, by its holder identity
    /// (`<POD_NAME>_<uuid>`), if its running process is the one that acquired it (started before
    /// the Lease's `acquireTime`: a replica started again after a kill is not the holder its pod
    /// name still is until the old lease passes). `None` when the Lease cannot be read or no
    /// running replica holds it.
    pub(super) async fn leader(&self) -> Option<usize> {
        let leases: Api<Lease> =
            Api::namespaced(self.world.client().clone(), self.world.namespace());
        let lease = tokio::time::timeout(Duration::from_secs(2), leases.get_opt(LEASE_NAME))
            .await
            .ok()?
            .ok()??;
        let spec = lease.spec?;
        let holder = spec.holder_identity?;
        let acquired = SystemTime::from(spec.acquire_time?.0);
        let pod = holder
            .rsplit_once('_')
            .map_or(holder.as_str(), |(pod, _)| pod);
        let index =
            (0..self.world.replica_count()).find(|index| replica_pod_name(*index) == pod)?;
        let started = self.world.replica_started(index).await?;
        (started <= acquired).then_some(index)
    }

    /// Waits (watching) up to a lease duration and a few seconds for a running replica to hold
    /// the Lease, so that a fault meant for the leader finds one after a takeover.
    pub(super) async fn acting_leader(&mut self) -> Result<Option<usize>, String> {
        let deadline = Instant::now() + self.options.k8s.lease_duration + Duration::from_secs(5);
        loop {
            if let Some(leader) = self.leader().await {
                return Ok(Some(leader));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            self.idle(Duration::from_millis(500)).await?;
        }
    }
}
