//! The end of a run (the final look, the invariants, the logs searched for secrets, the counts),
//! and the log capture that makes the sandbox's own log one of those searched.

use std::path::Path;
use std::sync::Mutex;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use crate::world::{self, LINUX_USER_DATA_MARKER, WINDOWS_USER_DATA_MARKER};

use std::time::SystemTime;

use super::Soak;
use super::invariants::{Evidence, LeaseEvidence, secret_hits};
use super::kube_faults::KubeFaultKind;
use super::recovery;
use super::report::ChaosReport;
use super::{faults, invariants, prism_password};
use crate::leadership::{self, LeaseHistory};
use crate::world::CONTROLLER_SERVICE_ACCOUNT;

impl Soak<'_> {
    /// Final look, the invariants, the logs searched, the counts.
    pub(super) async fn finish(&mut self, report: &mut ChaosReport) {
        self.poll_vms();
        let _ = self.look(true).await;
        let machines = self.world.history();
        let mut secrets = vec![
            (
                "Prism password".to_owned(),
                prism_password(self.options.seed),
            ),
            (
                "Windows user data marker".to_owned(),
                WINDOWS_USER_DATA_MARKER.to_owned(),
            ),
            (
                "Linux user data marker".to_owned(),
                LINUX_USER_DATA_MARKER.to_owned(),
            ),
            (
                "Windows user data (base64)".to_owned(),
                STANDARD.encode(world::windows_user_data()),
            ),
            (
                "Linux user data (base64)".to_owned(),
                STANDARD.encode(world::linux_user_data()),
            ),
        ];
        secrets.extend(self.secrets.iter().cloned());
        let mut hits = Vec::new();
        let mut log_lines = Vec::new();
        let mut logs = self.world.controller_logs();
        if let Some(path) = &self.options.sandbox_log {
            logs.push((
                file_name(path),
                std::fs::read_to_string(path).unwrap_or_default(),
            ));
        }
        for (name, text) in &logs {
            hits.extend(secret_hits(name, text, &secrets));
            log_lines.push((name.clone(), text.lines().count()));
        }
        let states = self
            .lease_history
            .as_ref()
            .map(LeaseHistory::observations)
            .unwrap_or_default();
        let requests = self.world.admin().requests_since(0);
        let outside = leadership::writes_outside_lease(&states, &requests);
        let writes = requests
            .iter()
            .filter(|r| crate::bench::calls::is_write(&r.method, &r.endpoint))
            .filter(|r| {
                r.user_agent
                    .as_deref()
                    .is_some_and(|agent| agent.starts_with(leadership::CONTROLLER_PRODUCT))
            })
            .count();
        report.invariants = invariants::check(&Evidence {
            namespace: self.world.namespace(),
            tracker: &self.tracker,
            machines: &machines,
            failures: &self.failures,
            deleted_early: &self.deleted_early,
            last: &self.last,
            secret_hits: &hits,
            log_lines: &log_lines,
            unexpected_exits: &self.unexpected_exits,
            lease_exits: &self.lease_exits,
            lease: self.lease_history.as_ref().map(|_| LeaseEvidence {
                outside: &outside,
                writes,
                states: states.len(),
            }),
        });
        self.recovery(report);
        report.replicas = self.world.replica_count();
        report.control_plane = if self.world.on_real_control_plane() {
            "real"
        } else {
            "kube-sim"
        };
        report.controller_restarts = self
            .world
            .controller_starts()
            .await
            .saturating_sub(u32::try_from(report.replicas).unwrap_or(u32::MAX));
        report.lease_exits = self.lease_exits.clone();
        report.plane_restarts = self.plane_restarts.clone();
        report.faults = faults::firings(&self.world.admin().faults(), &self.fault_ids);
        report.list_lag_ms = self.options.faults.list_lag_ms;
        let counters = self.world.prism_counters();
        report.answers = faults::answers_by_status(&counters);
        report.prism_calls = counters.iter().map(|c| c.count).sum();
        report.machines_seen = machines.len();
        report.vms_seen = self.tracker.vms().count();
        report.failed = self
            .failures
            .iter()
            .map(|(name, (reason, message))| (name.clone(), reason.clone(), message.clone()))
            .collect();
        report.deleted_early = self
            .deleted_early
            .iter()
            .map(|(name, why)| (name.clone(), why.clone()))
            .collect();
    }
}

impl Soak<'_> {
    /// Each Kubernetes fault's recovery, and what the controller was answered while it lasted,
    /// from the real API server's audit log.
    fn recovery(&self, report: &mut ChaosReport) {
        let Some(plane) = self.world.control_plane() else {
            return;
        };
        let text = std::fs::read_to_string(plane.audit_log()).unwrap_or_default();
        let entries = recovery::entries(&text);
        let user = format!(
            "system:serviceaccount:{}:{CONTROLLER_SERVICE_ACCOUNT}",
            self.world.namespace()
        );
        let starts: Vec<SystemTime> = report
            .kube_faults
            .iter()
            .map(|f| self.started_wall + f.at)
            .collect();
        for (index, fault) in report.kube_faults.iter_mut().enumerate() {
            let Some(from) = fault.answering_again else {
                continue;
            };
            let until = starts.get(index + 1).copied();
            fault.recovery = recovery::recovery(&entries, &user, from, until);
            let start = starts[index];
            match fault.kind {
                KubeFaultKind::Throttled => {
                    let rejected = recovery::answered(&entries, &user, 429, start, from);
                    fault
                        .detail
                        .push_str(&format!("; {rejected} requests answered 429"));
                }
                KubeFaultKind::WatchExpiry => {
                    let after = from + std::time::Duration::from_secs(30);
                    let gone = recovery::answered(&entries, &user, 410, start, after);
                    let lists = recovery::requests(&entries, &user, "list", start, after);
                    fault.detail.push_str(&format!(
                        "; within 30 s: {gone} answers 410 Gone, {lists} lists"
                    ));
                }
                _ => {}
            }
        }
    }
}

/// Noisy dependencies kept at info in the captured log.
const CAPTURE_FILTER: &str =
    "debug,hyper=info,hyper_util=info,h2=info,rustls=info,tower=info,reqwest=info";

/// Installs the process's log subscriber: every event at debug level (dependencies' chatter at
/// info) appended to `path`, which a run names as [`ChaosOptions::sandbox_log`] to have it
/// searched for secrets; and, with `stderr_filter`, a plain stderr log as well.
pub fn capture_logs(path: &Path, stderr_filter: Option<&str>) -> Result<(), String> {
    use tracing_subscriber::prelude::*;
    use tracing_subscriber::{EnvFilter, fmt};
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    let to_file = fmt::layer()
        .with_writer(Mutex::new(file))
        .with_ansi(false)
        .with_filter(EnvFilter::new(CAPTURE_FILTER));
    let to_stderr = stderr_filter.map(|filter| {
        fmt::layer()
            .with_writer(std::io::stderr)
            .with_filter(EnvFilter::new(filter))
    });
    tracing_subscriber::registry()
        .with(to_file)
        .with(to_stderr)
        .try_init()
        .map_err(|e| format!("cannot install the log subscriber: {e}"))
}

fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}
