//! Kubernetes' own faults in a chaos run on the real control plane (issue 35), and Prism Central
//! unreachable: what each is, where a real cluster shows it, and when a run strikes each (the
//! same moments the kills aim at: creates sent but not confirmed, mid-drain, right after a VM
//! DELETE, and right after a controller replica was killed, while it starts again).

use std::fmt;
use std::time::{Duration, SystemTime};

use rand::Rng;
use rand::seq::SliceRandom;

use super::kills::KillAim;

/// One kind of fault of the control plane or of the paths to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KubeFaultKind {
    /// kube-apiserver SIGKILLed, down for a while, started again on the same etcd with the same
    /// flags and port: a control-plane node's reboot or an OOM kill; on OpenShift every
    /// kube-apiserver rollout (a certificate rotation, a configuration change) restarts each
    /// instance in turn (openshift/cluster-kube-apiserver-operator's static pod installer).
    ApiServerDown,
    /// etcd SIGKILLed and started again on the same data directory: kube-apiserver answers
    /// errors and its `/readyz` fails (`etcd` check) until etcd is back.
    EtcdDown,
    /// etcd compacted to its current revision (as kube-apiserver does every
    /// `--etcd-compaction-interval`, 5 minutes by default), then the controller's connections
    /// reset, so that every watch resumes from a resource version compacted away.
    WatchExpiry,
    /// API Priority and Fairness gives the controller's ServiceAccount a tiny share, no queues:
    /// requests beyond it are answered 429 with `Retry-After`, as on a loaded cluster.
    Throttled,
    /// The path from one replica to kube-apiserver adds latency (a congested network, an
    /// overloaded load balancer in front of the API servers).
    SlowPath,
    /// The path from one replica to kube-apiserver resets its connections (a load balancer or
    /// an API server instance going away mid-request).
    ResetPath,
    /// The path from one replica to kube-apiserver swallows everything (a partition: packets
    /// dropped, no reset), while the replica still reaches Prism Central.
    BlackHole,
    /// Every Prism Central call times out for a while (Prism Central rebooting or upgrading).
    PrismUnreachable,
}

impl KubeFaultKind {
    /// Every kind, in the order a report lists them.
    pub const ALL: [Self; 8] = [
        Self::ApiServerDown,
        Self::EtcdDown,
        Self::WatchExpiry,
        Self::Throttled,
        Self::SlowPath,
        Self::ResetPath,
        Self::BlackHole,
        Self::PrismUnreachable,
    ];

    /// Whether the fault acts on one replica's path to the API server (and so needs the proxy).
    pub fn on_a_path(self) -> bool {
        matches!(self, Self::SlowPath | Self::ResetPath | Self::BlackHole)
    }

    /// Whether the fault needs the real control plane (kube-sim has no etcd, no APF and no
    /// proxy in front of it: `hack/kube-sim/README.md`).
    pub fn needs_real_control_plane(self) -> bool {
        self != Self::PrismUnreachable
    }
}

impl KubeFaultKind {
    /// A name for a table column.
    pub fn short(self) -> &'static str {
        match self {
            Self::ApiServerDown => "apiserver",
            Self::EtcdDown => "etcd",
            Self::WatchExpiry => "compaction",
            Self::Throttled => "APF",
            Self::SlowPath => "slow path",
            Self::ResetPath => "resets",
            Self::BlackHole => "black hole",
            Self::PrismUnreachable => "Prism down",
        }
    }
}

impl fmt::Display for KubeFaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::ApiServerDown => "kube-apiserver killed, started again",
            Self::EtcdDown => "etcd killed, started again",
            Self::WatchExpiry => "etcd compacted, the controller's watches resumed",
            Self::Throttled => "APF: the controller's ServiceAccount throttled (429)",
            Self::SlowPath => "slow path to the API server",
            Self::ResetPath => "connections to the API server reset",
            Self::BlackHole => "path to the API server black-holed",
            Self::PrismUnreachable => "Prism Central unreachable (every call times out)",
        })
    }
}

/// When a fault strikes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultMoment {
    /// At the first event of this aim (or when the wait runs out).
    At(KillAim),
    /// Right after a controller replica was killed and started again (the kill's aim).
    AfterKill(KillAim),
}

impl fmt::Display for FaultMoment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::At(aim) => write!(f, "{aim}"),
            Self::AfterKill(aim) => write!(f, "while a replica restarts (killed {aim})"),
        }
    }
}

/// A fault and when it strikes.
pub type Strike = (KubeFaultKind, FaultMoment);

/// The Kubernetes faults of a run: `(scale-up, scale-down)`, each a list of faults and their
/// moments in the order played. `per_kind` of each of `kinds`, shuffled by `rng`; every other
/// strike (kind after kind) in each phase, so that two of a kind go one to each phase, and
/// single strikes alternate. In the scale-up, faults come right
/// after a create was sent, or right after one of the `up_kills` (one fault each, in order); in
/// the scale-down, mid-drain first, then right after a VM delete, or after one of `down_kills`.
pub fn plan(
    kinds: &[KubeFaultKind],
    per_kind: usize,
    up_kills: &[KillAim],
    down_kills: &[KillAim],
    rng: &mut impl Rng,
) -> (Vec<Strike>, Vec<Strike>) {
    let mut up_kinds = Vec::new();
    let mut down_kinds = Vec::new();
    let strikes = kinds
        .iter()
        .flat_map(|kind| std::iter::repeat_n(*kind, per_kind));
    for (index, kind) in strikes.enumerate() {
        {
            if index % 2 == 0 {
                up_kinds.push(kind);
            } else {
                down_kinds.push(kind);
            }
        }
    }
    up_kinds.shuffle(rng);
    down_kinds.shuffle(rng);
    let up = up_kinds
        .into_iter()
        .enumerate()
        .map(|(index, kind)| {
            let moment = match up_kills.get(index) {
                Some(aim) => FaultMoment::AfterKill(*aim),
                None => FaultMoment::At(if index % 2 == 0 {
                    KillAim::AfterCreate
                } else {
                    KillAim::AtRandom
                }),
            };
            (kind, moment)
        })
        .collect();
    let count = down_kinds.len();
    let down = down_kinds
        .into_iter()
        .enumerate()
        .map(|(index, kind)| {
            let moment = match down_kills.get(index) {
                Some(aim) => FaultMoment::AfterKill(*aim),
                // The first half while drains are blocked, the rest while VMs are deleted.
                None if index < count / 2 => FaultMoment::At(KillAim::MidDrain),
                None => FaultMoment::At(KillAim::MidDelete),
            };
            (kind, moment)
        })
        .collect();
    (up, down)
}

/// One fault carried out.
#[derive(Clone, Debug)]
pub struct FaultRecord {
    pub kind: KubeFaultKind,
    pub moment: FaultMoment,
    /// Since the run started.
    pub at: Duration,
    /// Whether the aimed event happened (else the fault struck when the wait ran out).
    pub aimed: bool,
    /// The event that set it off.
    pub event: String,
    /// The replica whose path was faulted, and whether it held the Lease then.
    pub replica: Option<(usize, bool)>,
    /// How long the fault lasted (down time, window).
    pub lasted: Duration,
    /// When the API server (or Prism Central) answered again, or the fault was lifted
    /// (wall clock: the audit log's).
    pub answering_again: Option<SystemTime>,
    /// What was observed of it (the revision compacted to, 429s answered, ...).
    pub detail: String,
    /// From `answering_again` to the controller's next successful write of a Machine (from the
    /// API server's audit log); `None` when it wrote none before the next fault or the end.
    pub recovery: Option<Duration>,
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;
    use KillAim::*;

    #[test]
    fn every_kind_strikes_per_kind_times_split_over_both_phases() {
        let mut rng = StdRng::seed_from_u64(7);
        let (up, down) = plan(
            &KubeFaultKind::ALL,
            2,
            &[AfterCreate, AfterDeployThenDelete],
            &[MidDrain],
            &mut rng,
        );
        assert_eq!(up.len(), 8);
        assert_eq!(down.len(), 8);
        for kind in KubeFaultKind::ALL {
            assert_eq!(up.iter().filter(|(k, _)| *k == kind).count(), 1);
            assert_eq!(down.iter().filter(|(k, _)| *k == kind).count(), 1);
        }
        assert_eq!(up[0].1, FaultMoment::AfterKill(AfterCreate));
        assert_eq!(up[1].1, FaultMoment::AfterKill(AfterDeployThenDelete));
        assert_eq!(up[2].1, FaultMoment::At(AfterCreate));
        assert_eq!(down[0].1, FaultMoment::AfterKill(MidDrain));
        assert_eq!(down[7].1, FaultMoment::At(MidDelete));
        assert!(down.iter().any(|(_, m)| *m == FaultMoment::At(MidDrain)));
    }

    #[test]
    fn single_strikes_alternate_between_phases_and_the_seed_decides_the_order() {
        let kinds = [KubeFaultKind::ApiServerDown, KubeFaultKind::Throttled];
        let (up, down) = plan(&kinds, 1, &[], &[], &mut StdRng::seed_from_u64(1));
        assert_eq!(
            up,
            [(KubeFaultKind::ApiServerDown, FaultMoment::At(AfterCreate))]
        );
        assert_eq!(
            down,
            [(KubeFaultKind::Throttled, FaultMoment::At(MidDelete))]
        );
        let orders: std::collections::BTreeSet<Vec<KubeFaultKind>> = (0..20)
            .map(|seed| {
                plan(
                    &KubeFaultKind::ALL,
                    1,
                    &[],
                    &[],
                    &mut StdRng::seed_from_u64(seed),
                )
                .0
                .into_iter()
                .map(|(k, _)| k)
                .collect()
            })
            .collect();
        assert!(orders.len() > 1, "the seed shuffles the faults");
        assert!(!KubeFaultKind::PrismUnreachable.needs_real_control_plane());
        assert!(KubeFaultKind::BlackHole.on_a_path());
    }
}
