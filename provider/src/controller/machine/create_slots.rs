//! How many reconciles may begin a create at once.
//!
//! A create holds its worker while it waits for Prism's rate limit. With every worker held so
//! (a MachineSet scaled by hundreds), a Machine whose task has ended, or whose addresses came,
//! waits for a worker among all the Machines still to be created: at capacity kube-runtime holds
//! every ready reconcile in a `HashSet` and takes the next in its iteration order (kube-runtime
//! 5.0.0, `src/controller/runner.rs` and `src/scheduler.rs`, `pending`), so a Machine created
//! first could wait until nearly every create was sent (measured: 21 to 26 s of a 45 s scale-up to 1,000 at the
//! sandbox's intervals, the cluster-machine-approver's per-CSR backoff then adding up to 20 s
//! more before its Node joined). So only [`CreateSlots::new`]'s count of reconciles may begin a
//! create; the others are told when to look again, in the order they were first turned away, at
//! the pace the rate limit lets creates through. The workers left serve the Machines already on
//! their way.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus::IntGauge;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The soonest a turned-away Machine looks again.
const SHORTEST_WAIT: Duration = Duration::from_millis(100);

/// The longest: a Machine never waits longer than this for its turn to be checked.
const LONGEST_WAIT: Duration = Duration::from_secs(10);

/// A Machine in line asks again within [`LONGEST_WAIT`]; one that has not for three times that
/// is gone (deleted while it waited, which with no finalizer yet takes no reconcile of ours) and
/// is forgotten, so that `nutanix_machine_creates_waiting` does not count it. One that was
/// only slow to ask again takes a new place at the back.
const FORGET_AFTER: Duration = Duration::from_secs(30);

/// The reconciles that may begin a create at once, and the line of those turned away.
#[derive(Debug)]
pub struct CreateSlots {
    permits: Arc<Semaphore>,
    /// Creates per second the Prism rate limit lets through.
    rate: f64,
    line: Mutex<Line>,
    /// `nutanix_machine_creates_waiting`: the Machines in line.
    waiting: IntGauge,
}

#[derive(Debug, Default)]
struct Line {
    /// Machine key → (its ticket, when it was last turned away): a Machine is behind every
    /// ticket lower than its own.
    tickets: HashMap<String, (u64, Instant)>,
    next_ticket: u64,
}

impl CreateSlots {
    /// Slots for half of `concurrency` workers (rounded up), for creates at most `rate` per
    /// second, the Machines in line counted into `waiting`: a create's own writes and call take tens of milliseconds, so a few slots keep the
    /// rate limit busy, while the Machines on their way (a write or two each, two or three times
    /// on the way to `Running`) need workers of their own. Measured at 1,000 Machines: keeping
    /// two of ten workers for them left those two saturated (a `nodeRef` waited up to 11 s for
    /// its `Running`).
    pub fn new(concurrency: u16, rate: f64, waiting: IntGauge) -> Self {
        let slots = concurrency.div_ceil(2).max(1);
        Self {
            permits: Arc::new(Semaphore::new(usize::from(slots))),
            rate: if rate > 0.0 { rate } else { f64::INFINITY },
            line: Mutex::new(Line::default()),
            waiting,
        }
    }

    fn line(&self) -> std::sync::MutexGuard<'_, Line> {
        self.line
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn count(&self, line: &Line) {
        self.waiting
            .set(i64::try_from(line.tickets.len()).unwrap_or(i64::MAX));
    }

    /// Forgets the Machines that stopped asking ([`FORGET_AFTER`]); the line as it is then.
    fn tidied(&self, now: Instant) -> std::sync::MutexGuard<'_, Line> {
        let mut line = self.line();
        line.tickets
            .retain(|_, (_, at)| now.saturating_duration_since(*at) < FORGET_AFTER);
        self.count(&line);
        line
    }

    /// Forgets the Machines that stopped asking: called by every reconcile that begins no
    /// create, so that the gauge falls to 0 once a scale-up is over, whatever was deleted in line.
    pub fn tidy(&self, now: Instant) {
        drop(self.tidied(now));
    }

    /// A slot for the Machine `key` (held until the permit is dropped), or how long it should
    /// wait before it asks again: its place in the line of those turned away, at the rate's pace.
    pub fn admit(&self, key: &str, now: Instant) -> Result<OwnedSemaphorePermit, Duration> {
        let mut line = self.tidied(now);
        if let Ok(permit) = self.permits.clone().try_acquire_owned() {
            line.tickets.remove(key);
            self.count(&line);
            return Ok(permit);
        }
        let next = line.next_ticket;
        let ticket = match line.tickets.get_mut(key) {
            Some((ticket, at)) => {
                *at = now;
                *ticket
            }
            None => {
                line.tickets.insert(key.to_owned(), (next, now));
                line.next_ticket += 1;
                next
            }
        };
        self.count(&line);
        let ahead = line.tickets.values().filter(|(t, _)| *t < ticket).count() + 1;
        let wait = Duration::try_from_secs_f64(ahead as f64 / self.rate).unwrap_or(LONGEST_WAIT);
        Err(wait.clamp(SHORTEST_WAIT, LONGEST_WAIT))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slots_of(concurrency: u16, rate: f64) -> CreateSlots {
        CreateSlots::new(concurrency, rate, IntGauge::new("waiting", "test").unwrap())
    }

    #[test]
    fn half_the_workers_may_create_and_at_least_one() {
        let now = Instant::now();
        let slots = slots_of(9, 20.0);
        let held: Vec<_> = (0..5)
            .map(|i| slots.admit(&format!("m-{i}"), now).unwrap())
            .collect();
        assert!(slots.admit("m-5", now).is_err());
        drop(held);
        assert!(
            slots.admit("m-5", now).is_ok(),
            "a dropped permit frees its slot"
        );

        let one = slots_of(1, 20.0);
        let _held = one.admit("a", now).unwrap();
        assert!(one.admit("b", now).is_err());
    }

    #[test]
    fn the_turned_away_wait_by_their_place_in_line_at_the_rates_pace() {
        let now = Instant::now();
        let slots = slots_of(1, 10.0);
        let held = slots.admit("first", now).unwrap();
        // 1st, 2nd and 3rd in line: 0.1, 0.2 and 0.3 s at 10 creates a second.
        let waits: Vec<Duration> = ["a", "b", "c"]
            .iter()
            .map(|key| slots.admit(key, now).unwrap_err())
            .collect();
        assert_eq!(
            waits,
            [
                Duration::from_millis(100),
                Duration::from_millis(200),
                Duration::from_millis(300),
            ]
        );
        // Asking again keeps a Machine's place; it moves up as others are admitted.
        assert_eq!(
            slots.admit("c", now).unwrap_err(),
            Duration::from_millis(300)
        );
        assert_eq!(slots.waiting.get(), 3, "a, b and c in line");
        drop(held);
        let _a = slots.admit("a", now).unwrap();
        assert_eq!(slots.waiting.get(), 2, "a admitted");
        assert_eq!(
            slots.admit("c", now).unwrap_err(),
            Duration::from_millis(200)
        );
        // The wait is bounded both ways.
        let busy = slots_of(1, 0.01);
        let _held = busy.admit("x", now).unwrap();
        assert_eq!(busy.admit("y", now).unwrap_err(), LONGEST_WAIT);
        let fast = slots_of(1, 1000.0);
        let _held = fast.admit("x", now).unwrap();
        assert_eq!(fast.admit("y", now).unwrap_err(), SHORTEST_WAIT);
    }

    #[test]
    fn a_machine_that_stopped_asking_is_forgotten() {
        let now = Instant::now();
        let slots = slots_of(1, 10.0);
        let _held = slots.admit("holder", now).unwrap();
        slots.admit("gone", now).unwrap_err();
        assert_eq!(slots.waiting.get(), 1);
        // A reconcile that begins no create tidies the line: the gauge falls to 0.
        slots.tidy(now + FORGET_AFTER);
        assert_eq!(slots.waiting.get(), 0, "gone stopped asking");
        // So is it when the next Machine is turned away.
        slots.admit("gone", now).unwrap_err();
        let later = now + FORGET_AFTER + Duration::from_secs(1);
        slots.admit("new", later).unwrap_err();
        assert_eq!(
            slots.line().tickets.len(),
            1,
            "only the new Machine is in line"
        );
        assert_eq!(slots.waiting.get(), 1);
    }
}
