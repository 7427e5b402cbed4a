//! The faults of a chaos run, as prism-mock fault rules, and what they did.
//!
//! Every fault is a prism-mock rule drawn with the mock's seeded generator, so a seed and the
//! same request order give the same faults. Several rules may match one request: each counts a
//! firing, the first error rule answers, and an error answer hides a task failure or a "write then
//! 500" drawn for the same request. The report therefore gives both the firings per rule and the
//! answers prism-mock actually sent, by status.

use prism_mock::{Counter, FaultKind, FaultRule, InstalledRule};

/// Route patterns (globs over prism-mock's route templates and paths).
const EVERY_CALL: &str = "/api/*";
const CREATE: &str = "/api/nutanix/v3/vms";
const CLONE: &str = "/api/nutanix/v3/vms/*/clone";
const DEPLOY: &str = "/api/vmm/*/$actions/deploy";
const ONE_VM: &str = "/api/nutanix/v3/vms/{uuid}";

/// How often each fault strikes (probabilities per matching request).
#[derive(Clone, Debug, PartialEq)]
pub struct FaultProfile {
    /// Any Prism call answered 500 or 503 (half each; 503 carries `Retry-After`).
    pub server_errors: f64,
    /// Any Prism call answered 429 with `Retry-After: 1`.
    pub rate_limited: f64,
    /// Any Prism call delayed by `latency_ms`.
    pub slow_calls: f64,
    pub latency_ms: u64,
    /// Any Prism call whose connection is closed without an answer.
    pub dropped_connections: f64,
    /// Writes (create, clone, deploy, update, delete) whose task ends FAILED, with a failed
    /// subtask saying why (a transient cause: the controller retries).
    pub failed_tasks: f64,
    /// Creates, clones and deploys that Prism carries out but answers 500.
    pub create_then_500: f64,
    /// Updates and deletes that Prism carries out but answers 500.
    pub write_then_500: f64,
    /// Calls whose session cookie is ended first (the client must log in again).
    pub session_expiry: f64,
    /// How long after its create task ends a VM appears in lists (prism-mock's list lag).
    pub list_lag_ms: u64,
    /// How long after a VM's create or update task ends its GET still shows the state and power
    /// state from before (prism-mock's read lag).
    pub read_lag_ms: u64,
}

impl FaultProfile {
    /// Issue 9's soak: 10 % 5xx, 5 % 429, added latency, 2 % failed tasks, "create then 500",
    /// session expiry, list lag of ten times the added latency, a read lag of five times it (and a
    /// few dropped connections).
    pub fn soak(latency_ms: u64) -> Self {
        Self {
            server_errors: 0.10,
            rate_limited: 0.05,
            slow_calls: 0.20,
            latency_ms,
            dropped_connections: 0.01,
            failed_tasks: 0.02,
            create_then_500: 0.05,
            write_then_500: 0.03,
            session_expiry: 0.02,
            list_lag_ms: latency_ms * 10,
            read_lag_ms: latency_ms * 5,
        }
    }
}

/// What a rule injects, for the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum FaultLabel {
    Error500,
    Error503,
    Error429,
    Latency,
    DroppedConnection,
    FailedTask,
    CreateThen500,
    WriteThen500,
    SessionExpiry,
}

impl FaultLabel {
    pub fn describe(self) -> &'static str {
        match self {
            Self::Error500 => "500 on any call",
            Self::Error503 => "503 + Retry-After on any call",
            Self::Error429 => "429 + Retry-After on any call",
            Self::Latency => "added latency on any call",
            Self::DroppedConnection => "connection dropped, no answer",
            Self::FailedTask => "write accepted, its task FAILED",
            Self::CreateThen500 => "create/clone/deploy done, answered 500",
            Self::WriteThen500 => "update/delete done, answered 500",
            Self::SessionExpiry => "session cookie ended first",
        }
    }
}

/// Subtask errors of failed tasks, all transient in the controller's classification (as most
/// real task failures are: capacity, a busy host).
const TASK_ERRORS: [&str; 3] = [
    "Host pe-1-host-1 is busy: try again later",
    "Insufficient memory on the host to power on the VM",
    "Operation timed out waiting for the hypervisor",
];

fn error(status: u16, retry_after_secs: Option<u64>) -> FaultKind {
    FaultKind::Error {
        status,
        retry_after_secs,
    }
}

/// The rules for a profile, each with its label, in the order they are installed (the first
/// error rule that fires answers).
pub fn rules(profile: &FaultProfile) -> Vec<(FaultLabel, FaultRule)> {
    let mut rules = vec![
        (
            FaultLabel::Error500,
            FaultRule::new(None, EVERY_CALL, error(500, None))
                .probability(profile.server_errors / 2.0),
        ),
        (
            FaultLabel::Error503,
            FaultRule::new(None, EVERY_CALL, error(503, Some(1)))
                .probability(profile.server_errors / 2.0),
        ),
        (
            FaultLabel::Error429,
            FaultRule::new(None, EVERY_CALL, error(429, Some(1))).probability(profile.rate_limited),
        ),
        (
            FaultLabel::Latency,
            FaultRule::new(
                None,
                EVERY_CALL,
                FaultKind::Latency {
                    millis: profile.latency_ms,
                },
            )
            .probability(profile.slow_calls),
        ),
        (
            FaultLabel::DroppedConnection,
            FaultRule::new(None, EVERY_CALL, FaultKind::DropConnection)
                .probability(profile.dropped_connections),
        ),
        (
            FaultLabel::SessionExpiry,
            FaultRule::new(None, EVERY_CALL, FaultKind::ExpireSession)
                .probability(profile.session_expiry),
        ),
    ];
    let writes = [
        ("POST", CREATE),
        ("POST", CLONE),
        ("POST", DEPLOY),
        ("PUT", ONE_VM),
        ("DELETE", ONE_VM),
    ];
    for (index, (method, path)) in writes.into_iter().enumerate() {
        let kind = FaultKind::FailTask {
            error: TASK_ERRORS[index % TASK_ERRORS.len()].to_owned(),
            leave_vm_in_error: false,
        };
        rules.push((
            FaultLabel::FailedTask,
            FaultRule::new(Some(method), path, kind).probability(profile.failed_tasks),
        ));
    }
    for (method, path) in [("POST", CREATE), ("POST", CLONE), ("POST", DEPLOY)] {
        rules.push((
            FaultLabel::CreateThen500,
            FaultRule::new(Some(method), path, FaultKind::CreateThen500)
                .probability(profile.create_then_500),
        ));
    }
    for method in ["PUT", "DELETE"] {
        rules.push((
            FaultLabel::WriteThen500,
            FaultRule::new(Some(method), ONE_VM, FaultKind::CreateThen500)
                .probability(profile.write_then_500),
        ));
    }
    rules
}

/// Firings per label, from the installed rules (`ids` pairs each rule id with its label).
pub fn firings(installed: &[InstalledRule], ids: &[(u64, FaultLabel)]) -> Vec<(FaultLabel, u64)> {
    let mut counts: std::collections::BTreeMap<FaultLabel, u64> = Default::default();
    for (id, label) in ids {
        let fired = installed
            .iter()
            .find(|rule| rule.id == *id)
            .map_or(0, |rule| rule.fired);
        *counts.entry(*label).or_default() += fired;
    }
    counts.into_iter().collect()
}

/// Prism answers by status (0: connection dropped), all endpoints.
pub fn answers_by_status(counters: &[Counter]) -> Vec<(u16, u64)> {
    let mut counts: std::collections::BTreeMap<u16, u64> = Default::default();
    for counter in counters {
        *counts.entry(counter.status).or_default() += counter.count;
    }
    counts.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soak_profile_has_a_rule_per_fault_and_write() {
        let rules = rules(&FaultProfile::soak(150));
        let count = |label| rules.iter().filter(|(l, _)| *l == label).count();
        assert_eq!(count(FaultLabel::Error500), 1);
        assert_eq!(count(FaultLabel::Error503), 1);
        assert_eq!(count(FaultLabel::FailedTask), 5);
        assert_eq!(count(FaultLabel::CreateThen500), 3);
        assert_eq!(count(FaultLabel::WriteThen500), 2);
        // 10 % of calls get a 5xx: two rules of 5 % each.
        let five_xx: f64 = rules
            .iter()
            .filter(|(l, _)| matches!(l, FaultLabel::Error500 | FaultLabel::Error503))
            .map(|(_, r)| r.probability.unwrap_or(1.0))
            .sum();
        assert!((five_xx - 0.10).abs() < 1e-9);
        // Error rules come first: they decide the answer.
        assert_eq!(rules[0].0, FaultLabel::Error500);
        assert!(rules.iter().all(|(_, r)| r.path.starts_with("/api/")));
    }

    #[test]
    fn creates_by_template_deploy_are_faulted_too() {
        let rules = rules(&FaultProfile::soak(0));
        let deploy = rules
            .iter()
            .find(|(l, r)| *l == FaultLabel::CreateThen500 && r.path.contains("deploy"))
            .unwrap();
        assert_eq!(deploy.1.path, "/api/vmm/*/$actions/deploy");
        assert_eq!(deploy.1.method.as_deref(), Some("POST"));
        assert_eq!(deploy.1.fault, FaultKind::CreateThen500);
    }

    #[test]
    fn firings_and_answers_add_up_per_label_and_status() {
        let rule = |id, fired| InstalledRule {
            id,
            rule: FaultRule::new(None, "/api/*", FaultKind::DropConnection),
            fired,
        };
        let installed = [rule(1, 3), rule(2, 4), rule(3, 5)];
        let ids = [
            (1, FaultLabel::FailedTask),
            (2, FaultLabel::FailedTask),
            (3, FaultLabel::Latency),
        ];
        assert_eq!(
            firings(&installed, &ids),
            vec![(FaultLabel::Latency, 5), (FaultLabel::FailedTask, 7)]
        );
        let counter = |status, count| Counter {
            method: "GET".into(),
            endpoint: "/x".into(),
            status,
            count,
        };
        assert_eq!(
            answers_by_status(&[counter(200, 2), counter(500, 1), counter(200, 3)]),
            vec![(200, 5), (500, 1)]
        );
    }
}
