//! Fault rules, the server-side rate limit, and call counters.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rand::Rng;
use rand::rngs::StdRng;
use serde::{Deserialize, Serialize};

/// What a matching rule does.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FaultKind {
    /// Answer with this status instead of running the handler (500, 503 or 429; 429/503 carry `Retry-After`).
    Error {
        /// HTTP status.
        status: u16,
        /// `Retry-After` seconds for 429/503 (default 1).
        #[serde(default)]
        retry_after_secs: Option<u64>,
    },
    /// Delay the request by this many milliseconds, then handle it normally.
    Latency {
        /// Added delay.
        millis: u64,
    },
    /// Close the connection without answering.
    DropConnection,
    /// Let the request succeed, but the task it starts ends FAILED, with a failed subtask carrying `error`
    /// (the parent task only says "Internal Error", as real Prism does).
    FailTask {
        /// The specific error of the subtask.
        error: String,
        /// Leave a VM being created in state ERROR (listed) instead of removing it.
        #[serde(default)]
        leave_vm_in_error: bool,
    },
    /// Let a VM create (POST /vms, a clone, a deploy) succeed as far as the VM, then fail its power-on: the
    /// task ends FAILED with a failed `kVmSetPowerState` subtask carrying `error`, and the VM stays, listed,
    /// COMPLETE and powered OFF (not in ERROR). A create whose power-on fails leaves a VM behind: CAPX creates
    /// and powers on in two tasks (nutanix-cloud-native/cluster-api-provider-nutanix, the v4 path of
    /// reference/02 §7), so a failed power-on cannot undo the create; that a single v3 create task behaves the
    /// same is the mock's assumption.
    FailPowerOn {
        /// The specific error of the power-on subtask.
        error: String,
    },
    /// Run the handler (so the VM is created), then answer 500.
    CreateThen500,
    /// End the session of the request's cookie before authenticating it (the client must log in again).
    ExpireSession,
    /// Just before a request on `/api/nutanix/v3/vms/{uuid}` runs, another client changes that VM through
    /// another API namespace: its `entity_version` moves, its `spec_version` does not (a concurrent writer,
    /// see `Store::edit_elsewhere`). A PUT carrying the entity_version it read then gets the 409.
    EditedElsewhere,
}

/// A fault rule: applies to requests whose method and path match.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FaultRule {
    /// HTTP method to match (any when absent).
    #[serde(default)]
    pub method: Option<String>,
    /// Glob (`*` matches any run of characters) over the route template (e.g. `/api/nutanix/v3/vms/{uuid}`)
    /// or the concrete path.
    pub path: String,
    /// Probability that a matching request is affected (1.0 when absent); draws use the seeded generator.
    #[serde(default)]
    pub probability: Option<f64>,
    /// How many times the rule may fire before it retires (unlimited when absent).
    #[serde(default)]
    pub times: Option<u64>,
    /// What to do.
    #[serde(flatten)]
    pub fault: FaultKind,
}

impl FaultRule {
    /// A rule that always fires on `method path`.
    pub fn new(method: Option<&str>, path: &str, fault: FaultKind) -> Self {
        Self {
            method: method.map(str::to_owned),
            path: path.to_owned(),
            probability: None,
            times: None,
            fault,
        }
    }

    /// Fire at most `n` times.
    pub fn times(mut self, n: u64) -> Self {
        self.times = Some(n);
        self
    }

    /// Fire with this probability.
    pub fn probability(mut self, p: f64) -> Self {
        self.probability = Some(p);
        self
    }

    fn matches(&self, method: &str, template: &str, path: &str) -> bool {
        self.method
            .as_deref()
            .is_none_or(|m| m.eq_ignore_ascii_case(method))
            && (glob_match(&self.path, template) || glob_match(&self.path, path))
    }
}

/// A rule installed in a mock, with its id.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InstalledRule {
    /// Id to remove it by.
    pub id: u64,
    /// The rule.
    #[serde(flatten)]
    pub rule: FaultRule,
    /// How many times it has fired.
    pub fired: u64,
}

/// Server-side rate limit: a token bucket refilled at `requests_per_second`, holding at most `burst`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimit {
    /// Sustained rate.
    pub requests_per_second: f64,
    /// Bucket size.
    pub burst: u32,
}

/// One counter: calls of an endpoint template that ended with a status (0 = connection dropped).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Counter {
    /// HTTP method.
    pub method: String,
    /// Route template, e.g. `/api/nutanix/v3/vms/{uuid}`; `<unmatched>` for unknown paths.
    pub endpoint: String,
    /// Status answered; 0 when the connection was dropped.
    pub status: u16,
    /// Number of calls.
    pub count: u64,
}

/// One Prism request as the mock answered it (the request log, for per-VM and per-phase call
/// attribution in benchmarks).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// Milliseconds since the mock started, when the answer was sent.
    pub at_ms: u64,
    /// HTTP method.
    pub method: String,
    /// Route template, e.g. `/api/nutanix/v3/vms/{uuid}`; `<unmatched>` for unknown paths.
    pub endpoint: String,
    /// Status answered; 0 when the connection was dropped.
    pub status: u16,
    /// The VM the request concerned, where the mock can tell: the `{uuid}` of `/vms/{uuid}`, the VM
    /// a create, clone or deploy made, the VM of a task read. `None` for lists, lookups and
    /// reservations (shared by every VM).
    pub vm: Option<String>,
    /// The request's `User-Agent` (a client that names itself there, as the controller names its
    /// leader-election identity, can be held to what it sent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_agent: Option<String>,
    /// Wall-clock milliseconds since the Unix epoch when the request arrived: comparable with
    /// times other servers on this host record, such as a Lease's `renewTime`.
    #[serde(default)]
    pub received_unix_ms: u64,
}

/// A request of the log with what only an in-process test reads: when it arrived and when its
/// answer was ready (`Instant`s of one process compare across servers, so that a test orders
/// the calls a client made to the mock and to another server), and the `NTNX-Request-Id` it
/// carried (a v4 deploy's idempotence key).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimedRequest {
    /// When the request arrived, before the rate limit, faults and authentication.
    pub received: Instant,
    /// When its answer was ready (after the handler, and after any injected latency).
    pub answered: Instant,
    /// The `NTNX-Request-Id` header, if the request had one.
    pub request_id: Option<String>,
    /// The request as the benchmarks see it.
    pub record: RequestRecord,
}

/// Requests kept in the log; older ones are dropped first (a long-running mock stays bounded).
pub(crate) const REQUEST_LOG_CAPACITY: usize = 1_000_000;

/// The task failure a rule asks for (`FaultKind::FailTask` or `FailPowerOn`); the store makes it its plan of
/// the failure (`FailPlan`), so that this module needs nothing of the store that holds its state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TaskFault {
    /// The task fails in a subtask; the VM of a create is removed or left in ERROR.
    Fail {
        error: String,
        leave_vm_in_error: bool,
    },
    /// The VM is made, its power-on fails.
    PowerOn { error: String },
}

/// What the fault layer decided for one request.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Decision {
    pub(crate) latency: Duration,
    pub(crate) rate_limited: Option<u64>,
    pub(crate) error: Option<(u16, u64)>,
    pub(crate) drop_connection: bool,
    pub(crate) fail_task: Option<TaskFault>,
    pub(crate) create_then_500: bool,
    pub(crate) expire_session: bool,
    pub(crate) edited_elsewhere: bool,
}

#[derive(Debug, Default)]
pub(crate) struct FaultState {
    pub(crate) rules: Vec<InstalledRule>,
    next_id: u64,
    pub(crate) rate_limit: Option<RateLimit>,
    tokens: f64,
    refilled: Option<Instant>,
    pub(crate) counters: BTreeMap<(String, String, u16), u64>,
    pub(crate) log: std::collections::VecDeque<TimedRequest>,
}

impl FaultState {
    pub(crate) fn add(&mut self, rule: FaultRule) -> u64 {
        self.next_id += 1;
        self.rules.push(InstalledRule {
            id: self.next_id,
            rule,
            fired: 0,
        });
        self.next_id
    }

    pub(crate) fn remove(&mut self, id: u64) -> bool {
        let before = self.rules.len();
        self.rules.retain(|r| r.id != id);
        self.rules.len() != before
    }

    pub(crate) fn set_rate_limit(&mut self, limit: Option<RateLimit>) {
        self.tokens = limit.as_ref().map_or(0.0, |l| f64::from(l.burst));
        self.refilled = None;
        self.rate_limit = limit;
    }

    /// Takes a token; `Some(retry_after_secs)` when none is left.
    fn take_token(&mut self, now: Instant) -> Option<u64> {
        let limit = self.rate_limit.as_ref()?;
        let rate = limit.requests_per_second.max(0.001);
        if let Some(last) = self.refilled {
            self.tokens = (self.tokens + now.saturating_duration_since(last).as_secs_f64() * rate)
                .min(f64::from(limit.burst));
        }
        self.refilled = Some(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            None
        } else {
            Some(((1.0 - self.tokens) / rate).ceil().max(1.0) as u64)
        }
    }

    pub(crate) fn decide(
        &mut self,
        rng: &mut StdRng,
        now: Instant,
        method: &str,
        template: &str,
        path: &str,
    ) -> Decision {
        let mut decision = Decision {
            rate_limited: self.take_token(now),
            ..Decision::default()
        };
        if decision.rate_limited.is_some() {
            return decision;
        }
        for installed in &mut self.rules {
            if !installed.rule.matches(method, template, path)
                || installed.rule.times.is_some_and(|t| installed.fired >= t)
            {
                continue;
            }
            if let Some(p) = installed.rule.probability
                && p < 1.0
                && !rng.random_bool(p.clamp(0.0, 1.0))
            {
                continue;
            }
            installed.fired += 1;
            match &installed.rule.fault {
                FaultKind::Error {
                    status,
                    retry_after_secs,
                } => {
                    decision
                        .error
                        .get_or_insert((*status, retry_after_secs.unwrap_or(1)));
                }
                FaultKind::Latency { millis } => decision.latency += Duration::from_millis(*millis),
                FaultKind::DropConnection => decision.drop_connection = true,
                FaultKind::FailTask {
                    error,
                    leave_vm_in_error,
                } => {
                    decision.fail_task.get_or_insert_with(|| TaskFault::Fail {
                        error: error.clone(),
                        leave_vm_in_error: *leave_vm_in_error,
                    });
                }
                FaultKind::FailPowerOn { error } => {
                    decision
                        .fail_task
                        .get_or_insert_with(|| TaskFault::PowerOn {
                            error: error.clone(),
                        });
                }
                FaultKind::CreateThen500 => decision.create_then_500 = true,
                FaultKind::ExpireSession => decision.expire_session = true,
                FaultKind::EditedElsewhere => decision.edited_elsewhere = true,
            }
        }
        decision
    }

    pub(crate) fn count(&mut self, method: &str, endpoint: &str, status: u16) {
        *self
            .counters
            .entry((method.to_owned(), endpoint.to_owned(), status))
            .or_insert(0) += 1;
    }

    /// Counts the request and appends it to the request log.
    pub(crate) fn record(&mut self, request: TimedRequest) {
        let record = &request.record;
        self.count(&record.method, &record.endpoint, record.status);
        if self.log.len() >= REQUEST_LOG_CAPACITY {
            self.log.pop_front();
        }
        self.log.push_back(request);
    }

    pub(crate) fn counters(&self) -> Vec<Counter> {
        self.counters
            .iter()
            .map(|((method, endpoint, status), count)| Counter {
                method: method.clone(),
                endpoint: endpoint.clone(),
                status: *status,
                count: *count,
            })
            .collect()
    }
}

/// `*` matches any run of characters (including `/`); everything else matches itself.
pub(crate) fn glob_match(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !text.starts_with(first)
        || !text[first.len()..].ends_with(last)
        || text.len() < first.len() + last.len()
    {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn glob_matches_templates_and_paths() {
        assert!(glob_match("/api/nutanix/v3/vms", "/api/nutanix/v3/vms"));
        assert!(!glob_match(
            "/api/nutanix/v3/vms",
            "/api/nutanix/v3/vms/list"
        ));
        assert!(glob_match(
            "/api/nutanix/v3/vms*",
            "/api/nutanix/v3/vms/list"
        ));
        assert!(glob_match("*/vms/{uuid}", "/api/nutanix/v3/vms/{uuid}"));
        assert!(glob_match(
            "/api/*/tasks/*",
            "/api/prism/v4.0/config/tasks/abc"
        ));
        assert!(!glob_match(
            "/api/*/tasks/*x",
            "/api/prism/v4.0/config/tasks/abc"
        ));
        assert!(!glob_match("a*a", "a"));
    }

    #[test]
    fn rules_fire_a_limited_number_of_times() {
        let mut state = FaultState::default();
        let mut rng = StdRng::seed_from_u64(1);
        state.add(
            FaultRule::new(
                Some("POST"),
                "/x",
                FaultKind::Error {
                    status: 503,
                    retry_after_secs: Some(2),
                },
            )
            .times(1),
        );
        let now = Instant::now();
        assert_eq!(state.decide(&mut rng, now, "GET", "/x", "/x").error, None);
        assert_eq!(
            state.decide(&mut rng, now, "POST", "/x", "/x").error,
            Some((503, 2))
        );
        assert_eq!(state.decide(&mut rng, now, "POST", "/x", "/x").error, None);
    }

    #[test]
    fn rate_limit_refuses_past_the_burst_and_refills() {
        let mut state = FaultState::default();
        let mut rng = StdRng::seed_from_u64(1);
        state.set_rate_limit(Some(RateLimit {
            requests_per_second: 10.0,
            burst: 2,
        }));
        let t0 = Instant::now();
        assert_eq!(
            state.decide(&mut rng, t0, "GET", "/", "/").rate_limited,
            None
        );
        assert_eq!(
            state.decide(&mut rng, t0, "GET", "/", "/").rate_limited,
            None
        );
        assert_eq!(
            state.decide(&mut rng, t0, "GET", "/", "/").rate_limited,
            Some(1)
        );
        assert_eq!(
            state
                .decide(&mut rng, t0 + Duration::from_millis(150), "GET", "/", "/")
                .rate_limited,
            None
        );
    }

    #[test]
    fn rules_parse_from_json() {
        let rule: FaultRule = serde_json::from_str(r#"{"method":"POST","path":"/api/nutanix/v3/vms","kind":"fail_task","error":"DHCP pool exhausted"}"#).unwrap();
        assert_eq!(
            rule.fault,
            FaultKind::FailTask {
                error: "DHCP pool exhausted".to_owned(),
                leave_vm_in_error: false
            }
        );
    }
}
