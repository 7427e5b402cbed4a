//! Leader election on the Lease `cluster-api-provider-nutanix-leader` (the Go provider's, so a
//! rollout from it to this controller, or back, never leaves two leaders), by client-go's
//! algorithm (k8s.io/client-go `tools/leaderelection/leaderelection.go`, `tryAcquireOrRenew`):
//!
//! - A candidate takes the Lease when it is free, or when it has seen the same record for the
//!   record's own `leaseDurationSeconds` (its local clock only measures how long nothing
//!   changed, so clock skew between replicas does not matter). It tries every retry period,
//!   jittered as client-go does.
//! - The holder renews every retry period, writing `renewTime`. It stops leading at the **renew
//!   deadline** after the start of its last successful renewal, whatever its requests are doing:
//!   the deadline is a timer, not the end of a request. Since the renew deadline is shorter than
//!   the lease duration (checked as client-go's `NewLeaderElector` checks it), the holder has
//!   stopped before any other replica can have seen its record unchanged for a whole lease
//!   duration; the difference is the margin for the holder's own teardown and for clocks that
//!   run at different rates.
//!
//! Losing the Lease ends the process (see `super::run`), as controller-runtime's manager does
//! ("leader election lost"), which stops all work at once; the Deployment starts it again as a
//! candidate.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use rand::Rng as _;
use tokio::time::Instant;

/// The Lease's name (the Go provider's).
pub const LEASE_NAME: &str = "cluster-api-provider-nutanix-leader";

/// client-go's `JitterFactor`: a candidate waits between one and 2.2 retry periods between
/// tries, and the renew deadline must leave room for more than one try.
const JITTER_FACTOR: f64 = 1.2;

/// The three durations of client-go's `LeaderElectionConfig`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ElectionTimings {
    /// How long candidates wait after the last change they saw before taking the Lease.
    pub lease_duration: Duration,
    /// How long after its last successful renewal the holder stops leading.
    pub renew_deadline: Duration,
    /// How often the holder renews and candidates try.
    pub retry_period: Duration,
}

/// Why leader-election durations were refused (client-go's `NewLeaderElector` checks).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TimingsError {
    #[error("--{flag} must be at least {least:?}, not {value:?}")]
    TooShort {
        flag: &'static str,
        value: Duration,
        least: Duration,
    },
    #[error(
        "--leader-elect-renew-deadline ({renew_deadline:?}) must be shorter than \
         --leader-elect-lease-duration ({lease_duration:?}): another replica may take the Lease \
         one lease duration after the last renewal, so the leader must have stopped by then"
    )]
    RenewDeadlineNotShorter {
        renew_deadline: Duration,
        lease_duration: Duration,
    },
    #[error(
        "--leader-elect-renew-deadline ({renew_deadline:?}) must be longer than 1.2 times \
         --leader-elect-retry-period ({retry_period:?}), or a leader gets no second try to renew"
    )]
    RetryPeriodTooLong {
        renew_deadline: Duration,
        retry_period: Duration,
    },
}

impl ElectionTimings {
    /// The durations for `lease_duration`, with the renew deadline and the retry period given or
    /// derived in the Go provider's proportions (`cmd/manager/main.go` of
    /// openshift/machine-api-provider-nutanix: lease 120 s, renew deadline 110 s, retry 20 s;
    /// the machine-api-operator passes only `--leader-elect-lease-duration`).
    pub fn new(
        lease_duration: Duration,
        renew_deadline: Option<Duration>,
        retry_period: Option<Duration>,
    ) -> Result<Self, TimingsError> {
        let retry_period = retry_period.unwrap_or_else(|| {
            (lease_duration / 6).clamp(Duration::from_secs(1), Duration::from_secs(20))
        });
        let renew_deadline = renew_deadline.unwrap_or(lease_duration * 11 / 12);
        // The Lease counts in whole seconds; the other two only need to be more than nothing.
        for (flag, value, least) in [
            (
                "leader-elect-lease-duration",
                lease_duration,
                Duration::from_secs(1),
            ),
            (
                "leader-elect-renew-deadline",
                renew_deadline,
                Duration::from_millis(1),
            ),
            (
                "leader-elect-retry-period",
                retry_period,
                Duration::from_millis(1),
            ),
        ] {
            if value < least {
                return Err(TimingsError::TooShort { flag, value, least });
            }
        }
        if renew_deadline >= lease_duration {
            return Err(TimingsError::RenewDeadlineNotShorter {
                renew_deadline,
                lease_duration,
            });
        }
        if renew_deadline <= retry_period.mul_f64(JITTER_FACTOR) {
            return Err(TimingsError::RetryPeriodTooLong {
                renew_deadline,
                retry_period,
            });
        }
        Ok(Self {
            lease_duration,
            renew_deadline,
            retry_period,
        })
    }

    /// `leaseDurationSeconds` as written: whole seconds, rounded up, so that candidates never
    /// wait less than the configured duration.
    fn lease_duration_seconds(&self) -> i32 {
        let seconds =
            self.lease_duration.as_secs() + u64::from(self.lease_duration.subsec_nanos() > 0);
        i32::try_from(seconds).unwrap_or(i32::MAX)
    }
}

/// What a candidate saw of the Lease, and when it first saw it (client-go's `observedRecord` and
/// `observedTime`).
#[derive(Clone, Debug)]
struct Observed {
    record: Record,
    resource_version: Option<String>,
    since: Instant,
}

/// The fields of a Lease that take part in the election.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Record {
    holder: String,
    lease_duration_seconds: i32,
    acquire_time: Option<Timestamp>,
    renew_time: Option<Timestamp>,
    transitions: i32,
}

impl Record {
    fn of(lease: &Lease) -> Self {
        let spec = lease.spec.clone().unwrap_or_default();
        Self {
            holder: spec.holder_identity.unwrap_or_default(),
            lease_duration_seconds: spec.lease_duration_seconds.unwrap_or(0),
            acquire_time: spec.acquire_time.map(|time| time.0),
            renew_time: spec.renew_time.map(|time| time.0),
            transitions: spec.lease_transitions.unwrap_or(0),
        }
    }

    fn spec(&self) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.holder.clone()).filter(|holder| !holder.is_empty()),
            lease_duration_seconds: Some(self.lease_duration_seconds),
            acquire_time: self.acquire_time.map(MicroTime),
            renew_time: self.renew_time.map(MicroTime),
            lease_transitions: Some(self.transitions),
            ..LeaseSpec::default()
        }
    }
}

/// What one try decided, before any write (client-go's `tryAcquireOrRenew`, steps 3 and 4).
#[derive(Debug, PartialEq, Eq)]
enum Step {
    /// Another replica holds the Lease and its record is still fresh.
    HeldBy(String),
    /// Write this record (take or renew the Lease).
    Write(Record),
}

fn step(
    observed: &Observed,
    identity: &str,
    timings: &ElectionTimings,
    now: Instant,
    wall: Timestamp,
) -> Step {
    let current = &observed.record;
    let fresh = observed.since
        + Duration::from_secs(u64::try_from(current.lease_duration_seconds).unwrap_or(0))
        > now;
    if !current.holder.is_empty() && current.holder != identity && fresh {
        return Step::HeldBy(current.holder.clone());
    }
    let renewing = current.holder == identity;
    Step::Write(Record {
        holder: identity.to_owned(),
        lease_duration_seconds: timings.lease_duration_seconds(),
        acquire_time: if renewing {
            current.acquire_time
        } else {
            Some(wall)
        },
        renew_time: Some(wall),
        transitions: if renewing {
            current.transitions
        } else {
            current.transitions.saturating_add(1)
        },
    })
}

/// One replica's side of the election.
struct Elector {
    leases: Api<Lease>,
    identity: String,
    timings: ElectionTimings,
    observed: Option<Observed>,
}

/// The outcome of one try.
#[derive(Debug)]
enum Tried {
    /// This replica holds the Lease, renewed by a try that started at this instant.
    Holds(Instant),
    HeldBy(String),
}

impl Elector {
    /// Keeps what `lease` says; its first sighting starts the clock a candidate waits by.
    fn observe(&mut self, lease: &Lease, now: Instant) -> Observed {
        let record = Record::of(lease);
        let resource_version = lease.metadata.resource_version.clone();
        let observed = match self.observed.take() {
            Some(observed) if observed.record == record => Observed {
                resource_version,
                ..observed
            },
            _ => Observed {
                record,
                resource_version,
                since: now,
            },
        };
        self.observed = Some(observed.clone());
        observed
    }

    /// One try to take or renew the Lease. The holder first writes on top of the record it last
    /// wrote (one request); a conflict, or any other case, reads the Lease first.
    async fn try_acquire_or_renew(&mut self) -> Result<Tried, kube::Error> {
        let started = Instant::now();
        let wall = Timestamp::now();
        if let Some(observed) = self.observed.clone()
            && observed.record.holder == self.identity
            && let Step::Write(record) =
                step(&observed, &self.identity, &self.timings, started, wall)
            && let Ok(written) = self.replace(record, observed.resource_version).await
        {
            self.observe(&written, started);
            return Ok(Tried::Holds(started));
        }
        let Some(lease) = self.leases.get_opt(LEASE_NAME).await? else {
            // client-go's step 2: no Lease yet, the first record (no transition so far).
            let record = Record {
                holder: self.identity.clone(),
                lease_duration_seconds: self.timings.lease_duration_seconds(),
                acquire_time: Some(wall),
                renew_time: Some(wall),
                transitions: 0,
            };
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(LEASE_NAME.to_owned()),
                    ..ObjectMeta::default()
                },
                spec: Some(record.spec()),
            };
            let created = self.leases.create(&PostParams::default(), &lease).await?;
            self.observe(&created, started);
            return Ok(Tried::Holds(started));
        };
        let now = Instant::now();
        let observed = self.observe(&lease, now);
        match step(&observed, &self.identity, &self.timings, now, wall) {
            Step::HeldBy(holder) => Ok(Tried::HeldBy(holder)),
            Step::Write(record) => {
                let written = self.replace(record, observed.resource_version).await?;
                self.observe(&written, started);
                Ok(Tried::Holds(started))
            }
        }
    }

    /// Writes `record` if the Lease is still at `resource_version` (optimistic concurrency: of
    /// two candidates, one gets a conflict).
    async fn replace(
        &self,
        record: Record,
        resource_version: Option<String>,
    ) -> Result<Lease, kube::Error> {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(LEASE_NAME.to_owned()),
                resource_version,
                ..ObjectMeta::default()
            },
            spec: Some(record.spec()),
        };
        self.leases
            .replace(LEASE_NAME, &PostParams::default(), &lease)
            .await
    }
}

/// This replica holds the Lease.
pub struct Leadership {
    elector: Elector,
    /// When this replica stops leading unless it renews first.
    deadline: Instant,
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("identity", &self.elector.identity)
            .field("timings", &self.elector.timings)
            .finish_non_exhaustive()
    }
}

/// How leadership ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeadershipLost {
    /// No renewal succeeded within the renew deadline.
    RenewDeadlinePassed,
    /// Another replica holds the Lease.
    TakenBy(String),
}

/// Waits until this replica holds the Lease in `namespace`.
pub async fn acquire(
    client: kube::Client,
    namespace: &str,
    identity: &str,
    timings: ElectionTimings,
) -> Leadership {
    let mut elector = Elector {
        leases: Api::namespaced(client, namespace),
        identity: identity.to_owned(),
        timings,
        observed: None,
    };
    tracing::info!(
        lease = LEASE_NAME,
        namespace,
        identity,
        "waiting for the leader lease"
    );
    let mut last_holder = None;
    loop {
        // A try may not outlast the retry period: the next one starts from a fresh read.
        match tokio::time::timeout(timings.retry_period, elector.try_acquire_or_renew()).await {
            Ok(Ok(Tried::Holds(started))) => {
                tracing::info!(lease = LEASE_NAME, identity, "became the leader");
                return Leadership {
                    elector,
                    deadline: started + timings.renew_deadline,
                };
            }
            Ok(Ok(Tried::HeldBy(holder))) => {
                if last_holder.as_ref() != Some(&holder) {
                    tracing::info!(lease = LEASE_NAME, %holder, "the lease is held by another replica");
                    last_holder = Some(holder);
                }
            }
            Ok(Err(error)) => {
                tracing::warn!(%error, lease = LEASE_NAME, "cannot take the leader lease")
            }
            Err(_) => {
                tracing::warn!(lease = LEASE_NAME, timeout = ?timings.retry_period, "the API server did not answer a try for the leader lease in time")
            }
        }
        let jitter = rand::rng().random_range(0.0..JITTER_FACTOR);
        tokio::time::sleep(timings.retry_period.mul_f64(1.0 + jitter)).await;
    }
}

impl Leadership {
    /// Renews the Lease every retry period; returns when leadership is lost: at the renew
    /// deadline after the last successful renewal, whatever a request in flight is doing, or
    /// when another replica holds the Lease.
    pub async fn lost(&mut self) -> LeadershipLost {
        let timings = self.elector.timings;
        loop {
            let next_try = Instant::now() + timings.retry_period;
            match tokio::time::timeout_at(self.deadline, self.elector.try_acquire_or_renew()).await
            {
                Err(_) => break,
                Ok(Ok(Tried::Holds(started))) => self.deadline = started + timings.renew_deadline,
                Ok(Ok(Tried::HeldBy(holder))) => {
                    tracing::error!(lease = LEASE_NAME, %holder, "the leader lease names another holder");
                    return LeadershipLost::TakenBy(holder);
                }
                Ok(Err(error)) => {
                    tracing::warn!(%error, lease = LEASE_NAME, "cannot renew the leader lease")
                }
            }
            if tokio::time::timeout_at(self.deadline, tokio::time::sleep_until(next_try))
                .await
                .is_err()
            {
                break;
            }
        }
        tracing::error!(
            lease = LEASE_NAME,
            renew_deadline = ?timings.renew_deadline,
            "the leader lease was not renewed within the renew deadline"
        );
        LeadershipLost::RenewDeadlinePassed
    }

    /// Gives the Lease up on shutdown (client-go's `release`: no holder, a one-second
    /// duration), so another replica need not wait for it to expire.
    pub async fn release(mut self) {
        let timings = self.elector.timings;
        let released = tokio::time::timeout(timings.renew_deadline, async {
            let lease = self.elector.leases.get_opt(LEASE_NAME).await?;
            let Some(lease) = lease else {
                return Ok(false);
            };
            self.elector.observe(&lease, Instant::now());
            let current = Record::of(&lease);
            if current.holder != self.elector.identity {
                return Ok(false);
            }
            let now = Timestamp::now();
            let record = Record {
                holder: String::new(),
                lease_duration_seconds: 1,
                acquire_time: Some(now),
                renew_time: Some(now),
                transitions: current.transitions,
            };
            self.elector
                .replace(record, lease.metadata.resource_version.clone())
                .await
                .map(|_| true)
        })
        .await;
        match released {
            Ok(Ok(true)) => tracing::info!(lease = LEASE_NAME, "released the leader lease"),
            Ok(Ok(false)) => {}
            Ok(Err(error)) => tracing::warn!(%error, "releasing the leader lease"),
            Err(_) => tracing::warn!(
                lease = LEASE_NAME,
                "the API server did not answer the release in time"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seconds(value: u64) -> Duration {
        Duration::from_secs(value)
    }

    #[test]
    fn the_go_providers_durations_follow_from_its_lease_duration() {
        let timings = ElectionTimings::new(seconds(120), None, None).unwrap();
        assert_eq!(
            (timings.renew_deadline, timings.retry_period),
            (seconds(110), seconds(20))
        );
        let short = ElectionTimings::new(seconds(15), None, None).unwrap();
        assert_eq!(
            (short.renew_deadline, short.retry_period),
            (Duration::from_millis(13_750), Duration::from_millis(2_500))
        );
        assert_eq!(short.lease_duration_seconds(), 15);
        let fractional = ElectionTimings::new(Duration::from_millis(15_500), None, None).unwrap();
        assert_eq!(fractional.lease_duration_seconds(), 16);
    }

    #[test]
    fn a_renew_deadline_that_is_not_shorter_than_the_lease_is_refused_as_client_go_refuses_it() {
        assert_eq!(
            ElectionTimings::new(seconds(15), Some(seconds(15)), None),
            Err(TimingsError::RenewDeadlineNotShorter {
                renew_deadline: seconds(15),
                lease_duration: seconds(15)
            })
        );
        assert_eq!(
            ElectionTimings::new(seconds(15), Some(seconds(10)), Some(seconds(9))),
            Err(TimingsError::RetryPeriodTooLong {
                renew_deadline: seconds(10),
                retry_period: seconds(9)
            })
        );
        assert!(matches!(
            ElectionTimings::new(Duration::from_millis(500), None, None),
            Err(TimingsError::TooShort {
                flag: "leader-elect-lease-duration",
                ..
            })
        ));
        assert!(ElectionTimings::new(seconds(15), Some(seconds(10)), Some(seconds(2))).is_ok());
    }

    fn observed(holder: &str, since: Instant, transitions: i32) -> Observed {
        Observed {
            record: Record {
                holder: holder.to_owned(),
                lease_duration_seconds: 15,
                acquire_time: Some(Timestamp::UNIX_EPOCH),
                renew_time: Some(Timestamp::UNIX_EPOCH),
                transitions,
            },
            resource_version: Some("7".to_owned()),
            since,
        }
    }

    #[test]
    fn a_candidate_waits_a_whole_lease_duration_of_an_unchanged_record_by_its_own_clock() {
        let timings = ElectionTimings::new(seconds(15), None, None).unwrap();
        let seen = Instant::now();
        let wall = Timestamp::now();
        let other = observed("pod-b_2", seen, 3);
        assert_eq!(
            step(&other, "pod-a_1", &timings, seen + seconds(14), wall),
            Step::HeldBy("pod-b_2".to_owned())
        );
        // The record's renewTime (the other replica's clock, here 1970) plays no part.
        let Step::Write(taken) = step(&other, "pod-a_1", &timings, seen + seconds(15), wall) else {
            panic!("a record unchanged for the lease duration is taken");
        };
        assert_eq!(
            (
                taken.holder.as_str(),
                taken.transitions,
                taken.acquire_time,
                taken.renew_time
            ),
            ("pod-a_1", 4, Some(wall), Some(wall))
        );
    }

    #[test]
    fn the_holder_renews_keeping_its_acquire_time_and_a_released_lease_is_free() {
        let timings = ElectionTimings::new(seconds(15), None, None).unwrap();
        let seen = Instant::now();
        let wall = Timestamp::now();
        let Step::Write(renewed) = step(
            &observed("pod-a_1", seen, 3),
            "pod-a_1",
            &timings,
            seen,
            wall,
        ) else {
            panic!("the holder renews");
        };
        assert_eq!(
            (
                renewed.transitions,
                renewed.acquire_time,
                renewed.renew_time
            ),
            (3, Some(Timestamp::UNIX_EPOCH), Some(wall))
        );
        let Step::Write(taken) = step(&observed("", seen, 3), "pod-b_2", &timings, seen, wall)
        else {
            panic!("a released lease is free at once");
        };
        assert_eq!((taken.holder.as_str(), taken.transitions), ("pod-b_2", 4));
    }

    /// Timings short enough for a test, with a margin of two seconds between the renew deadline
    /// and the lease duration.
    fn quick() -> ElectionTimings {
        ElectionTimings::new(
            seconds(4),
            Some(seconds(2)),
            Some(Duration::from_millis(500)),
        )
        .unwrap()
    }

    async fn server() -> (kube_sim::RunningKubeSim, kube::Client) {
        let sim = kube_sim::KubeSim::start(kube_sim::Config::default())
            .await
            .unwrap();
        let client = sim.client().unwrap();
        (sim, client)
    }

    async fn lease(client: &kube::Client) -> Record {
        let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
        Record::of(&leases.get(LEASE_NAME).await.unwrap())
    }

    #[tokio::test]
    async fn one_replica_leads_while_it_renews_and_the_other_takes_over_at_once_on_release() {
        let (sim, client) = server().await;
        let mut first = acquire(client.clone(), "default", "pod-a_1", quick()).await;
        let created = lease(&client).await;
        assert_eq!(
            (created.holder.as_str(), created.transitions),
            ("pod-a_1", 0)
        );

        let second = tokio::spawn({
            let client = client.clone();
            async move { acquire(client, "default", "pod-b_2", quick()).await }
        });
        // Two lease durations of renewals: the other replica never gets the Lease.
        let renewing = tokio::time::timeout(seconds(8), first.lost()).await;
        assert!(
            renewing.is_err(),
            "leadership ended while renewing: {renewing:?}"
        );
        assert!(!second.is_finished(), "two leaders at once");
        let renewed = lease(&client).await;
        assert_eq!(renewed.acquire_time, created.acquire_time);
        assert!(renewed.renew_time > created.renew_time);

        let released_at = Instant::now();
        first.release().await;
        let mut second = tokio::time::timeout(seconds(4), second)
            .await
            .expect("the released Lease is taken before it could have expired")
            .unwrap();
        assert!(released_at.elapsed() < seconds(4));
        let taken = lease(&client).await;
        assert_eq!((taken.holder.as_str(), taken.transitions), ("pod-b_2", 1));
        assert_eq!(taken.lease_duration_seconds, 4);

        // The Lease taken from under it: the holder learns it at its next renewal.
        let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
        let mut stolen = leases.get(LEASE_NAME).await.unwrap();
        stolen.spec.as_mut().unwrap().holder_identity = Some("pod-c_3".to_owned());
        leases
            .replace(LEASE_NAME, &PostParams::default(), &stolen)
            .await
            .unwrap();
        assert_eq!(
            tokio::time::timeout(seconds(4), second.lost())
                .await
                .unwrap(),
            LeadershipLost::TakenBy("pod-c_3".to_owned())
        );
        sim.shutdown().await;
    }

    #[tokio::test]
    async fn a_leader_cut_off_from_the_api_server_stops_at_its_renew_deadline_before_the_lease_can_pass()
     {
        let (sim, client) = server().await;
        let mut leader = acquire(client.clone(), "default", "pod-a_1", quick()).await;
        let acquired = lease(&client).await;
        // From now on every request of the leader's vanishes: the connections are accepted and
        // never answered, and no request ends before the leader must stop.
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap();
        let black_hole = listener.local_addr().unwrap();
        let held = tokio::spawn(async move {
            let mut connections = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                connections.push(stream);
            }
        });
        let cut_off = kube::Client::try_from(kube::Config::new(
            format!("http://{black_hole}").parse().unwrap(),
        ))
        .unwrap();
        leader.elector.leases = Api::namespaced(cut_off, "default");
        leader.elector.observed = None;

        let lost = leader.lost().await;
        let stopped = Timestamp::now();
        assert_eq!(lost, LeadershipLost::RenewDeadlinePassed);
        let last_renewal = acquired.renew_time.unwrap();
        let could_pass = last_renewal + seconds(4);
        assert!(
            stopped < could_pass,
            "stopped at {stopped}, the Lease could pass at {could_pass}"
        );
        assert!(
            stopped >= last_renewal + seconds(2),
            "stopped before its renew deadline"
        );
        // The Lease is untouched: the other replicas see it expire by itself.
        assert_eq!(lease(&client).await, acquired);
        held.abort();
        sim.shutdown().await;
    }
}
