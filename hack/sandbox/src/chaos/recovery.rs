//! Recovery after a fault, from the real API server's audit log (pure): from the moment the API
//! server answered again (or the fault was lifted) to the controller's next successful write of
//! a Machine, and what the controller was answered while a fault lasted.

use std::time::{Duration, SystemTime};

use jiff::Timestamp;
use serde_json::Value;

/// One request of the audit log, as the recovery figures read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditEntry {
    pub user: String,
    pub verb: String,
    pub resource: String,
    pub code: u16,
    /// `stageTimestamp`: when the answer was complete.
    pub at: SystemTime,
}

/// The requests of an audit log (`audit.k8s.io/v1` Events, one JSON line each), skipping lines
/// that are not (a line being written when the log is read).
pub fn entries(text: &str) -> Vec<AuditEntry> {
    text.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|event| {
            let at: Timestamp = event["stageTimestamp"].as_str()?.parse().ok()?;
            Some(AuditEntry {
                user: event["user"]["username"].as_str()?.to_owned(),
                verb: event["verb"].as_str().unwrap_or_default().to_owned(),
                resource: event["objectRef"]["resource"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                code: u16::try_from(event["responseStatus"]["code"].as_i64()?).ok()?,
                at: SystemTime::from(at),
            })
        })
        .collect()
}

/// Whether the entry is a successful write of a Machine by `user`.
fn machine_write(entry: &AuditEntry, user: &str) -> bool {
    entry.user == user
        && matches!(
            entry.verb.as_str(),
            "create" | "update" | "patch" | "delete"
        )
        && entry.resource == "machines"
        && (200..300).contains(&entry.code)
}

/// From `from` to `user`'s first successful Machine write at or after it and before `until`.
pub fn recovery(
    entries: &[AuditEntry],
    user: &str,
    from: SystemTime,
    until: Option<SystemTime>,
) -> Option<Duration> {
    entries
        .iter()
        .filter(|e| machine_write(e, user) && e.at >= from && until.is_none_or(|u| e.at < u))
        .map(|e| e.at)
        .min()
        .and_then(|at| at.duration_since(from).ok())
}

/// How many of `user`'s requests between `from` and `until` were answered `code`.
pub fn answered(
    entries: &[AuditEntry],
    user: &str,
    code: u16,
    from: SystemTime,
    until: SystemTime,
) -> usize {
    entries
        .iter()
        .filter(|e| e.user == user && e.code == code && e.at >= from && e.at <= until)
        .count()
}

/// How many of `user`'s requests with `verb` were answered between `from` and `until`.
pub fn requests(
    entries: &[AuditEntry],
    user: &str,
    verb: &str,
    from: SystemTime,
    until: SystemTime,
) -> usize {
    entries
        .iter()
        .filter(|e| e.user == user && e.verb == verb && e.at >= from && e.at <= until)
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    const USER: &str = "system:serviceaccount:ns:nutanix-machine-controller";

    fn line(user: &str, verb: &str, resource: &str, code: u16, at: &str) -> String {
        serde_json::json!({
            "kind": "Event", "apiVersion": "audit.k8s.io/v1", "stage": "ResponseComplete",
            "user": {"username": user}, "verb": verb,
            "objectRef": {"resource": resource, "namespace": "ns"},
            "responseStatus": {"code": code},
            "stageTimestamp": at,
        })
        .to_string()
    }

    fn at(text: &str) -> SystemTime {
        SystemTime::from(text.parse::<Timestamp>().unwrap())
    }

    #[test]
    fn recovery_runs_to_the_first_successful_machine_write_after_the_fault() {
        let log = [
            line(
                USER,
                "patch",
                "machines",
                200,
                "2026-12-06T06:00:00.000000Z",
            ),
            line(USER, "update", "leases", 200, "2026-12-06T06:00:11.000000Z"),
            line(
                USER,
                "patch",
                "machines",
                429,
                "2026-12-06T06:00:12.000000Z",
            ),
            line(
                "sandbox:test",
                "patch",
                "machines",
                200,
                "2026-12-06T06:00:12.500000Z",
            ),
            line(
                USER,
                "patch",
                "machines",
                200,
                "2026-12-06T06:00:13.250000Z",
            ),
            "{not json".to_owned(),
        ]
        .join("\n");
        let entries = entries(&log);
        assert_eq!(entries.len(), 5);
        let from = at("2026-12-06T06:00:10Z");
        assert_eq!(
            recovery(&entries, USER, from, None),
            Some(Duration::from_millis(3250))
        );
        assert_eq!(
            recovery(&entries, USER, from, Some(at("2026-12-06T06:00:13Z"))),
            None,
            "a write after the next fault is not this one's recovery"
        );
        assert_eq!(
            answered(&entries, USER, 429, from, at("2026-12-06T06:00:20Z")),
            1
        );
        assert_eq!(
            requests(&entries, USER, "patch", from, at("2026-12-06T06:00:20Z")),
            2
        );
    }
}
