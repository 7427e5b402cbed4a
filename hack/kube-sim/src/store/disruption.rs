//! The disruption controller's part: PodDisruptionBudget status from the pods it selects,
//! recomputed inside the write that changed them so that tests see it at once.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::meta::{is_deleting, meta_str, now_rfc3339};
use crate::selector::LabelSelector;

use super::{EventType, Inner, Store, Stored, scan};

/// Is the object's Ready condition true (pods)?
pub fn pod_ready(pod: &Value) -> bool {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.get("type") == Some(&json!("Ready")) && c.get("status") == Some(&json!("True"))
            })
        })
}

impl Store {
    /// Recomputes the status of every PodDisruptionBudget in a namespace (what the disruption controller does),
    /// writing only those that changed.
    pub(super) fn sync_pdbs(&self, inner: &mut Inner, namespace: &str) {
        let pdb_key = ("policy".to_string(), "poddisruptionbudgets".to_string());
        let Some(pdbs) = inner.collections.get(&pdb_key) else {
            return;
        };
        let pdb_def = pdbs.def.clone();
        let pdb_list: Vec<Stored> = scan(pdbs, Some(namespace)).cloned().collect();
        let pods: Vec<Arc<Value>> = inner
            .collections
            .get(&(String::new(), "pods".to_string()))
            .map(|c| scan(c, Some(namespace)).map(|s| s.value.clone()).collect())
            .unwrap_or_default();
        for pdb in pdb_list {
            let status = pdb_status(&pdb.value, &pods);
            if pdb.value.get("status") == Some(&status) {
                continue;
            }
            let mut next = (*pdb.value).clone();
            next["status"] = status;
            let name = meta_str(&next, "name").to_string();
            let _ = self.commit(
                inner,
                &pdb_def,
                namespace,
                &name,
                next,
                Some(pdb.value.clone()),
                EventType::Modified,
            );
        }
    }
}

/// The status the disruption controller would write for a PodDisruptionBudget given the namespace's pods.
/// Expected pods are the pods the selector matches (the real controller asks the pods' controllers for their
/// scale; bare pods are counted directly here).
pub fn pdb_status(pdb: &Value, pods: &[Arc<Value>]) -> Value {
    let selector = LabelSelector::from_object(pdb.pointer("/spec/selector")).unwrap_or_default();
    let matching: Vec<&Arc<Value>> = pods
        .iter()
        .filter(|p| !selector.is_empty() && selector.matches(p))
        .collect();
    let expected = matching.len() as i64;
    let healthy = matching
        .iter()
        .filter(|p| pod_ready(p) && !is_deleting(p))
        .count() as i64;
    let resolve = |v: &Value| -> i64 {
        match v {
            Value::Number(n) => n.as_i64().unwrap_or(0),
            Value::String(s) => match s.strip_suffix('%').and_then(|p| p.parse::<i64>().ok()) {
                Some(pct) => (pct * expected + 99) / 100,
                None => s.parse().unwrap_or(0),
            },
            _ => 0,
        }
    };
    let desired = if let Some(min) = pdb.pointer("/spec/minAvailable") {
        resolve(min)
    } else if let Some(max) = pdb.pointer("/spec/maxUnavailable") {
        (expected - resolve(max)).max(0)
    } else {
        expected
    };
    let allowed = (healthy - desired).max(0);
    let (status, reason) = if allowed > 0 {
        ("True", "SufficientPods")
    } else {
        ("False", "InsufficientPods")
    };
    // The transition time changes only when the condition's status does.
    let since = pdb
        .pointer("/status/conditions/0")
        .filter(|c| c.get("status") == Some(&json!(status)))
        .and_then(|c| c.get("lastTransitionTime").cloned())
        .unwrap_or_else(|| json!(now_rfc3339()));
    json!({
        "observedGeneration": pdb.pointer("/metadata/generation").cloned().unwrap_or(json!(1)),
        "disruptionsAllowed": allowed,
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
        "conditions": [{"type": "DisruptionAllowed", "status": status, "reason": reason, "message": "", "observedGeneration": pdb.pointer("/metadata/generation").cloned().unwrap_or(json!(1)), "lastTransitionTime": since}],
    })
}
