//! Where a chaos run kills the controller: aimed at the moments the create and delete protocols
//! must survive, each armed at a random time and fired by the first matching event after it.

use std::fmt;

/// The moment a kill aims at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KillAim {
    /// A VM created from an image or cloned appeared in Prism: the create was just sent, and its
    /// task is probably not recorded yet.
    AfterCreate,
    /// A VM deployed from a template appeared: the deploy was just sent, its request id is
    /// recorded, and its task is not (the run turns the next deploys' answers into 500s). While
    /// the controller is down, the Machine is deleted: the deletion must send the deploy again
    /// with the recorded request id to find the VM (no identity marker reaches the VM until the
    /// follow-up update).
    AfterDeployThenDelete,
    /// A cloned or deployed VM's spec version moved: the follow-up update was just sent.
    AfterFollowUp,
    /// No event: a random moment.
    AtRandom,
    /// A deleting Machine's drain is blocked by a PodDisruptionBudget.
    MidDrain,
    /// A VM went to DELETE_PENDING: the delete was just sent.
    MidDelete,
}

impl KillAim {
    /// Whether the kill belongs to the scale-down (else to the scale-up).
    pub fn during_scale_down(self) -> bool {
        matches!(self, Self::MidDrain | Self::MidDelete)
    }
}

impl fmt::Display for KillAim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::AfterCreate => "right after a create or clone was sent",
            Self::AfterDeployThenDelete => {
                "right after a template deploy was sent, then its Machine deleted"
            }
            Self::AfterFollowUp => "right after a follow-up update was sent",
            Self::AtRandom => "at a random moment",
            Self::MidDrain => "mid-drain (eviction blocked)",
            Self::MidDelete => "right after a VM delete was sent",
        })
    }
}

/// The order aims are taken in: the two the issue names first (a deploy's gap, a delete), then
/// the others, then random moments.
const ORDER: [KillAim; 6] = [
    KillAim::AfterDeployThenDelete,
    KillAim::MidDelete,
    KillAim::AfterCreate,
    KillAim::MidDrain,
    KillAim::AtRandom,
    KillAim::AfterFollowUp,
];

/// The kills of a run: `(scale-up kills, scale-down kills)`, each in the order played. The
/// scale-up creates in two bursts: the first kill follows the first burst, and the deploy kill
/// comes right after a burst (so that deploys are being sent); the scale-down drains first, so a
/// drain kill comes before a delete kill.
pub fn plan(kills: usize) -> (Vec<KillAim>, Vec<KillAim>) {
    let aims: Vec<KillAim> = (0..kills)
        .map(|i| {
            ORDER.get(i).copied().unwrap_or(if i % 2 == 0 {
                KillAim::AtRandom
            } else {
                KillAim::AfterFollowUp
            })
        })
        .collect();
    let rank_up = |aim: &KillAim| match aim {
        KillAim::AfterCreate => 0,
        KillAim::AfterDeployThenDelete => 1,
        KillAim::AfterFollowUp => 2,
        _ => 3,
    };
    let rank_down = |aim: &KillAim| match aim {
        KillAim::MidDrain => 0,
        KillAim::MidDelete => 1,
        _ => 2,
    };
    let mut up: Vec<KillAim> = aims
        .iter()
        .copied()
        .filter(|a| !a.during_scale_down())
        .collect();
    // Random kills alternate between the two phases.
    let mut down: Vec<KillAim> = aims
        .iter()
        .copied()
        .filter(|a| a.during_scale_down())
        .collect();
    let randoms = up.iter().filter(|a| **a == KillAim::AtRandom).count();
    up.retain(|a| *a != KillAim::AtRandom);
    for i in 0..randoms {
        if i % 2 == 0 {
            up.push(KillAim::AtRandom);
        } else {
            down.push(KillAim::AtRandom);
        }
    }
    up.sort_by_key(rank_up);
    down.sort_by_key(rank_down);
    (up, down)
}

#[cfg(test)]
mod tests {
    use super::*;
    use KillAim::*;

    #[test]
    fn two_kills_aim_at_the_deploy_gap_and_a_delete() {
        assert_eq!(plan(2), (vec![AfterDeployThenDelete], vec![MidDelete]));
    }

    #[test]
    fn five_kills_cover_create_deploy_random_drain_and_delete() {
        assert_eq!(
            plan(5),
            (
                vec![AfterCreate, AfterDeployThenDelete, AtRandom],
                vec![MidDrain, MidDelete]
            )
        );
    }

    #[test]
    fn more_kills_add_follow_ups_and_random_moments_in_both_phases() {
        let (up, down) = plan(8);
        assert_eq!(up.len() + down.len(), 8);
        assert_eq!(up[0], AfterCreate);
        assert_eq!(down[0], MidDrain);
        assert!(up.contains(&AfterFollowUp));
        assert!(down.contains(&AtRandom));
        assert_eq!(plan(0), (vec![], vec![]));
    }
}
