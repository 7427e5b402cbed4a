//! Prism calls of one phase of the benchmark, from prism-mock's request log: by endpoint, split
//! into calls made for one of the phase's Machines (the mock attributes a request to the VM it
//! concerned) and shared calls (lists, lookups, UUID reservations, reads of VMs that are not the
//! phase's, such as a clone's source).

use std::collections::{BTreeMap, HashMap, HashSet};

use prism_mock::RequestRecord;
use serde::Serialize;

/// Whether a request changes something in Prism: every PUT and DELETE, and every POST but a
/// list (`POST …/list` reads).
pub fn is_write(method: &str, endpoint: &str) -> bool {
    match method {
        "PUT" | "DELETE" | "PATCH" => true,
        "POST" => !endpoint.ends_with("/list"),
        _ => false,
    }
}

/// The calls of one endpoint (method and route template) in a phase.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EndpointCalls {
    pub method: String,
    pub endpoint: String,
    pub total: u64,
    /// Calls attributed to one of the phase's Machines.
    pub attributed: u64,
    /// Calls for no Machine of the phase (lists, lookups, reservations).
    pub shared: u64,
    /// `total` divided by the phase's Machines.
    pub per_machine: f64,
}

/// The Prism calls of one phase.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CallTable {
    /// Machines the phase created or deleted.
    pub machines: usize,
    pub total: u64,
    pub attributed: u64,
    pub shared: u64,
    /// Requests that changed something (see [`is_write`]).
    pub writes: u64,
    /// Answers 429 (the mock's rate limit).
    pub throttled: u64,
    /// `total` divided by `machines`.
    pub per_machine: f64,
    /// The fewest and most calls attributed to one Machine's VM.
    pub per_vm_min: u64,
    pub per_vm_max: u64,
    /// By endpoint, most calls first.
    pub endpoints: Vec<EndpointCalls>,
}

impl CallTable {
    /// Calls of one method and route template.
    pub fn count(&self, method: &str, endpoint: &str) -> u64 {
        self.endpoints
            .iter()
            .filter(|e| e.method == method && e.endpoint == endpoint)
            .map(|e| e.total)
            .sum()
    }
}

fn per(count: u64, machines: usize) -> f64 {
    if machines == 0 {
        0.0
    } else {
        count as f64 / machines as f64
    }
}

/// Attributes `records` to the VMs in `ours` (the phase's Machines' VMs, `machines` of them).
pub fn attribute(records: &[RequestRecord], ours: &HashSet<String>, machines: usize) -> CallTable {
    let mut endpoints: BTreeMap<(String, String), (u64, u64)> = BTreeMap::new();
    let mut per_vm: HashMap<&str, u64> = ours.iter().map(|vm| (vm.as_str(), 0)).collect();
    let (mut writes, mut throttled) = (0, 0);
    for record in records {
        let mine = record
            .vm
            .as_deref()
            .and_then(|vm| per_vm.get_mut(vm))
            .map(|count| *count += 1)
            .is_some();
        let entry = endpoints
            .entry((record.method.clone(), record.endpoint.clone()))
            .or_default();
        entry.0 += 1;
        if mine {
            entry.1 += 1;
        }
        if is_write(&record.method, &record.endpoint) {
            writes += 1;
        }
        if record.status == 429 {
            throttled += 1;
        }
    }
    let mut rows: Vec<EndpointCalls> = endpoints
        .into_iter()
        .map(|((method, endpoint), (total, attributed))| EndpointCalls {
            method,
            endpoint,
            total,
            attributed,
            shared: total - attributed,
            per_machine: per(total, machines),
        })
        .collect();
    rows.sort_by(|a, b| b.total.cmp(&a.total).then(a.endpoint.cmp(&b.endpoint)));
    let total = records.len() as u64;
    let attributed: u64 = rows.iter().map(|r| r.attributed).sum();
    CallTable {
        machines,
        total,
        attributed,
        shared: total - attributed,
        writes,
        throttled,
        per_machine: per(total, machines),
        per_vm_min: per_vm.values().copied().min().unwrap_or(0),
        per_vm_max: per_vm.values().copied().max().unwrap_or(0),
        endpoints: rows,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(method: &str, endpoint: &str, status: u16, vm: Option<&str>) -> RequestRecord {
        RequestRecord {
            at_ms: 0,
            method: method.to_owned(),
            endpoint: endpoint.to_owned(),
            status,
            vm: vm.map(str::to_owned),
            user_agent: None,
            received_unix_ms: 0,
        }
    }

    #[test]
    fn lists_are_reads_and_every_other_post_put_or_delete_is_a_write() {
        assert!(!is_write("POST", "/api/nutanix/v3/vms/list"));
        assert!(!is_write("GET", "/api/nutanix/v3/vms/{uuid}"));
        assert!(is_write("POST", "/api/nutanix/v3/vms"));
        assert!(is_write("POST", "/api/nutanix/v3/idempotence_identifiers"));
        assert!(is_write(
            "POST",
            "/api/vmm/v4.0/content/templates/{ext_id}/$actions/deploy"
        ));
        assert!(is_write("PUT", "/api/nutanix/v3/vms/{uuid}"));
        assert!(is_write("DELETE", "/api/nutanix/v3/vms/{uuid}"));
    }

    #[test]
    fn calls_for_the_phase_vms_are_attributed_and_the_rest_shared() {
        let ours: HashSet<String> = ["a", "b"].iter().map(|s| (*s).to_owned()).collect();
        let records = vec![
            record("POST", "/api/nutanix/v3/vms", 202, Some("a")),
            record("POST", "/api/nutanix/v3/vms", 202, Some("b")),
            record("GET", "/api/nutanix/v3/vms/{uuid}", 200, Some("a")),
            record("GET", "/api/nutanix/v3/vms/{uuid}", 200, Some("a")),
            record("GET", "/api/nutanix/v3/vms/{uuid}", 200, Some("golden")),
            record("POST", "/api/nutanix/v3/vms/list", 200, None),
            record("POST", "/api/nutanix/v3/vms/list", 429, None),
        ];
        let table = attribute(&records, &ours, 2);
        assert_eq!(table.total, 7);
        assert_eq!(table.attributed, 4);
        assert_eq!(table.shared, 3, "another VM's read is shared");
        assert_eq!(table.writes, 2);
        assert_eq!(table.throttled, 1);
        assert_eq!(table.per_machine, 3.5);
        assert_eq!((table.per_vm_min, table.per_vm_max), (1, 3));
        assert_eq!(table.count("POST", "/api/nutanix/v3/vms/list"), 2);
        assert_eq!(table.count("GET", "/api/nutanix/v3/vms/{uuid}"), 3);
        assert_eq!(table.count("PUT", "/api/nutanix/v3/vms/{uuid}"), 0);
        let first = &table.endpoints[0];
        assert_eq!(
            (
                first.endpoint.as_str(),
                first.total,
                first.attributed,
                first.shared
            ),
            ("/api/nutanix/v3/vms/{uuid}", 3, 2, 1)
        );
        assert_eq!(first.per_machine, 1.5);
    }

    #[test]
    fn a_phase_without_machines_has_no_per_machine_figures() {
        let table = attribute(
            &[record("POST", "/api/nutanix/v3/vms/list", 200, None)],
            &HashSet::new(),
            0,
        );
        assert_eq!(table.per_machine, 0.0);
        assert_eq!((table.per_vm_min, table.per_vm_max), (0, 0));
    }
}
