//! The lower bound prism-mock imposes on scaling a MachineSet from 0 to N: what no controller,
//! however good, could beat with the mock's delays and rate limit.
//!
//! Every Machine needs its VM created (`POST /vms`, a clone or a template deploy) and, for a
//! clone or a deploy, one update (`PUT /vms/{uuid}`) for what those requests cannot set (power
//! on, the identity marker). Those writes cannot be shared between Machines; reads can (one
//! paged list shows every VM), and a UUID reservation serves up to 4,096 Machines, so neither is
//! counted. With the mock answering `rate` requests per second after a burst of `burst`, the last
//! of the N × writes passes no earlier than `(N × writes − burst) / rate`; its VM then still
//! needs that write's task and the guest's boot to an address. And any single Machine needs all
//! its tasks in turn, then the boot. The bound is the larger of the two.

use serde::Serialize;

use super::BenchKind;

/// The lower bound and its parts, in seconds.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LowerBound {
    /// Writes per Machine no controller can avoid.
    pub writes_per_machine: u32,
    /// `(N × writes − burst) / rate` (0 without a rate limit).
    pub rate_seconds: f64,
    /// After the last write: its task and the boot to an address.
    pub after_last_write_seconds: f64,
    /// One Machine alone: every task in turn, then the boot.
    pub one_machine_seconds: f64,
    /// `max(rate + after last write, one Machine)`.
    pub seconds: f64,
}

/// The bound for `machines` Machines of `kind`, with tasks of `task_ms` (queued + running),
/// a boot to address of `boot_ms`, and the mock's `(rate, burst)` limit if any.
pub fn lower_bound(
    kind: BenchKind,
    machines: usize,
    task_ms: u64,
    boot_ms: u64,
    limit: Option<(f64, u32)>,
) -> LowerBound {
    let writes_per_machine = match kind {
        BenchKind::Image => 1,
        BenchKind::Clone | BenchKind::Template => 2,
    };
    let task = task_ms as f64 / 1000.0;
    let boot = boot_ms as f64 / 1000.0;
    let rate_seconds = limit.map_or(0.0, |(rate, burst)| {
        let writes = machines as f64 * f64::from(writes_per_machine);
        ((writes - f64::from(burst)) / rate.max(f64::MIN_POSITIVE)).max(0.0)
    });
    let after_last_write_seconds = task + boot;
    let one_machine_seconds = f64::from(writes_per_machine) * task + boot;
    LowerBound {
        writes_per_machine,
        rate_seconds,
        after_last_write_seconds,
        one_machine_seconds,
        seconds: (rate_seconds + after_last_write_seconds).max(one_machine_seconds),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_machines_are_bound_by_the_rate_then_one_task_and_the_boot() {
        let bound = lower_bound(BenchKind::Image, 200, 1500, 2000, Some((50.0, 50)));
        assert_eq!(bound.writes_per_machine, 1);
        assert_eq!(bound.rate_seconds, 3.0);
        assert_eq!(bound.seconds, 6.5);
    }

    #[test]
    fn clones_need_two_writes_and_one_machine_both_tasks() {
        let bound = lower_bound(BenchKind::Clone, 200, 1500, 2000, Some((50.0, 50)));
        assert_eq!(bound.rate_seconds, 7.0);
        assert_eq!(bound.one_machine_seconds, 5.0);
        assert_eq!(bound.seconds, 10.5);
        let few = lower_bound(BenchKind::Template, 3, 1500, 2000, Some((50.0, 50)));
        assert_eq!(few.rate_seconds, 0.0, "the burst covers them");
        assert_eq!(
            few.seconds, 5.0,
            "one Machine's tasks in turn, then the boot"
        );
    }

    #[test]
    fn without_a_rate_limit_only_the_delays_count() {
        let bound = lower_bound(BenchKind::Image, 1000, 1500, 2000, None);
        assert_eq!((bound.rate_seconds, bound.seconds), (0.0, 3.5));
    }
}
