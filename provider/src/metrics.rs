//! Prometheus metrics (`prometheus` crate, so the machine-api names are exact: no `_total`
//! suffix is added).
//!
//! The machine-api-operator's, with its labels and buckets:
//! - `mapi_instance_create_failed`, `mapi_instance_update_failed`, `mapi_instance_delete_failed`
//!   (counters; labels `name`, `namespace`, `reason`, the reason a short fixed word);
//! - `mapi_machine_phase_transition_seconds{phase}`: time from the Machine's creation to each
//!   phase it enters (buckets 5 s to 600 s).
//!
//! Ours:
//! - `nutanix_prism_requests_total{api,endpoint,code}` and
//!   `nutanix_prism_request_duration_seconds{api,endpoint}`: every HTTP attempt to Prism, by
//!   endpoint template (never a raw path), `code` `none` when no response came;
//! - `nutanix_prism_task_duration_seconds{operation,result}`: from recording a Prism task on a
//!   Machine to seeing it end;
//! - `nutanix_machine_reconcile_duration_seconds{controller,result}` and
//!   `nutanix_machine_reconcile_errors_total{controller,reason}`;
//! - `nutanix_machine_controller_leader` (1 while this instance holds the lease);
//! - `nutanix_prism_inventory_unreadable_vms{endpoint}`: VMs of the last inventory listing that
//!   could not be decoded and were skipped (foreign VMs with fields this client cannot read);
//! - `nutanix_prism_vms_without_machine{endpoint}`: VMs of the cluster (its
//!   `kubernetes-io-cluster-<infraID>: owned` category, named as its Machines are) that no
//!   Machine has, in the last inventory listing;
//! - `nutanix_windows_join_timed_out{namespace,name}`: 1 for each Windows Machine whose
//!   `WindowsJoin` condition says `JoinTimedOut` (no series for the others), for the alert
//!   `NutanixWindowsJoinTimedOut` (manifests/monitoring/);
//! - `nutanix_doctor_findings{check,severity}`: the findings of `doctor`'s checks, run by the
//!   leader every `--doctor-interval` (a series for every check and severity, 0 when none), and
//!   `nutanix_doctor_checks_skipped{check}`: checks it could not make (a read it may not do),
//!   for the alert `NutanixWindowsPrerequisiteMissing`;
//! - `nutanix_machines{namespace,machineset,phase}`: the watched Machines by MachineSet and
//!   phase, counted from the controller's Machine cache at each scrape (every phase of a
//!   MachineSet with Machines, 0 when none is in it);
//! - `nutanix_windows_join_reason{namespace,name,reason}`: 1 for each Windows Machine, labelled
//!   with the reason of its `WindowsJoin` condition (the stage its join reached, or why it is
//!   stuck);
//! - `nutanix_prism_inventory_listed_timestamp_seconds{endpoint}`: when the last VM inventory
//!   listing of that Prism Central began (its age is `time()` minus this);
//! - `nutanix_machine_creates_waiting`: Machines waiting for a create slot (half of
//!   `--concurrency` may begin a create at once: `controller::machine`'s `create_slots`).
//!
//! The console dashboard of manifests/monitoring/ reads these; tests/e2e/dashboard.rs runs its
//! queries on a real Prometheus scraping a sandbox run.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use kube::runtime::reflector::Store;

use prism_client::{RequestEvent, RequestObserver};
use prometheus::{
    Encoder, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

use crate::api::GuardedMachine;
use crate::plan::api::phase;
use crate::plan::windows_join::reasons;

/// The machine-api-operator's Machine phases, each a series of `nutanix_machines` per MachineSet.
const MACHINE_PHASES: [&str; 5] = [
    phase::PROVISIONING,
    phase::PROVISIONED,
    phase::RUNNING,
    phase::DELETING,
    phase::FAILED,
];

/// Buckets of `mapi_machine_phase_transition_seconds` (the machine-api-operator's).
pub const PHASE_TRANSITION_BUCKETS: &[f64] = &[
    5.0, 10.0, 20.0, 30.0, 60.0, 90.0, 120.0, 180.0, 240.0, 300.0, 360.0, 480.0, 600.0,
];

/// Every metric of the controller, in one registry.
#[derive(Clone, Debug)]
pub struct Metrics {
    registry: Registry,
    pub create_failed: IntCounterVec,
    pub update_failed: IntCounterVec,
    pub delete_failed: IntCounterVec,
    pub phase_transition: HistogramVec,
    pub prism_requests: IntCounterVec,
    pub prism_latency: HistogramVec,
    pub task_duration: HistogramVec,
    pub reconcile_duration: HistogramVec,
    pub reconcile_errors: IntCounterVec,
    pub leader: IntGauge,
    pub creates_waiting: IntGauge,
    pub inventory_unreadable: IntGaugeVec,
    pub windows_join_timed_out: IntGaugeVec,
    pub vms_without_machine: IntGaugeVec,
    pub doctor_findings: IntGaugeVec,
    pub doctor_skipped: IntGaugeVec,
    pub inventory_listed: GaugeVec,
    machines: IntGaugeVec,
    /// The controller's Machine cache, counted into `machines` at each scrape (set once the
    /// cache exists).
    machine_cache: Arc<OnceLock<Store<GuardedMachine>>>,
    windows_join_reason: IntGaugeVec,
    /// The reason each Windows Machine's series carries, so that a new reason replaces it.
    windows_join_reasons: Arc<Mutex<HashMap<(String, String), String>>>,
}

impl Metrics {
    pub fn new() -> Result<Self, prometheus::Error> {
        let registry = Registry::new();
        let instance_labels = &["name", "namespace", "reason"];
        let counter =
            |name: &str, help: &str, labels: &[&str]| -> Result<IntCounterVec, prometheus::Error> {
                let counter = IntCounterVec::new(Opts::new(name, help), labels)?;
                registry.register(Box::new(counter.clone()))?;
                Ok(counter)
            };
        let histogram = |name: &str,
                         help: &str,
                         labels: &[&str],
                         buckets: Vec<f64>|
         -> Result<HistogramVec, prometheus::Error> {
            let histogram =
                HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets), labels)?;
            registry.register(Box::new(histogram.clone()))?;
            Ok(histogram)
        };
        let short = prometheus::exponential_buckets(0.005, 2.5, 10)?;
        let long = prometheus::exponential_buckets(0.5, 2.0, 12)?;
        let leader = IntGauge::new(
            "nutanix_machine_controller_leader",
            "1 while this instance holds the leader lease",
        )?;
        registry.register(Box::new(leader.clone()))?;
        let creates_waiting = IntGauge::new(
            "nutanix_machine_creates_waiting",
            "Machines waiting for a create slot (half of --concurrency may begin a create at once)",
        )?;
        registry.register(Box::new(creates_waiting.clone()))?;
        let inventory_unreadable = IntGaugeVec::new(
            Opts::new(
                "nutanix_prism_inventory_unreadable_vms",
                "VMs of the last inventory listing that could not be decoded and were skipped",
            ),
            &["endpoint"],
        )?;
        registry.register(Box::new(inventory_unreadable.clone()))?;
        let windows_join_timed_out = IntGaugeVec::new(
            Opts::new(
                "nutanix_windows_join_timed_out",
                "1 for a Windows Machine whose node has not joined within --windows-join-timeout",
            ),
            &["namespace", "name"],
        )?;
        registry.register(Box::new(windows_join_timed_out.clone()))?;
        let vms_without_machine = IntGaugeVec::new(
            Opts::new(
                "nutanix_prism_vms_without_machine",
                "VMs of the cluster (its category, named as its Machines are) that no Machine has, in the last inventory listing",
            ),
            &["endpoint"],
        )?;
        registry.register(Box::new(vms_without_machine.clone()))?;
        let doctor_findings = IntGaugeVec::new(
            Opts::new(
                "nutanix_doctor_findings",
                "Findings of the last doctor run by check and severity (doctor prints them with their fixes)",
            ),
            &["check", "severity"],
        )?;
        registry.register(Box::new(doctor_findings.clone()))?;
        let doctor_skipped = IntGaugeVec::new(
            Opts::new(
                "nutanix_doctor_checks_skipped",
                "Objects a check of the last doctor run could not look at, by check",
            ),
            &["check"],
        )?;
        registry.register(Box::new(doctor_skipped.clone()))?;
        let inventory_listed = GaugeVec::new(
            Opts::new(
                "nutanix_prism_inventory_listed_timestamp_seconds",
                "When the last VM inventory listing of the Prism Central began (Unix seconds)",
            ),
            &["endpoint"],
        )?;
        registry.register(Box::new(inventory_listed.clone()))?;
        let machines = IntGaugeVec::new(
            Opts::new(
                "nutanix_machines",
                "Watched Machines by namespace, MachineSet (empty for none) and phase",
            ),
            &["namespace", "machineset", "phase"],
        )?;
        registry.register(Box::new(machines.clone()))?;
        let windows_join_reason = IntGaugeVec::new(
            Opts::new(
                "nutanix_windows_join_reason",
                "1 for each Windows Machine, with the reason of its WindowsJoin condition",
            ),
            &["namespace", "name", "reason"],
        )?;
        registry.register(Box::new(windows_join_reason.clone()))?;
        Ok(Self {
            inventory_listed,
            machines,
            machine_cache: Arc::default(),
            windows_join_reason,
            windows_join_reasons: Arc::default(),
            doctor_findings,
            doctor_skipped,
            vms_without_machine,
            windows_join_timed_out,
            inventory_unreadable,
            create_failed: counter(
                "mapi_instance_create_failed",
                "Number of times a machine instance create failed",
                instance_labels,
            )?,
            update_failed: counter(
                "mapi_instance_update_failed",
                "Number of times a machine instance update failed",
                instance_labels,
            )?,
            delete_failed: counter(
                "mapi_instance_delete_failed",
                "Number of times a machine instance delete failed",
                instance_labels,
            )?,
            phase_transition: histogram(
                "mapi_machine_phase_transition_seconds",
                "Seconds from a Machine's creation to each phase it enters",
                &["phase"],
                PHASE_TRANSITION_BUCKETS.to_vec(),
            )?,
            prism_requests: counter(
                "nutanix_prism_requests_total",
                "HTTP requests to Prism Central by API, endpoint template and status code",
                &["api", "endpoint", "code"],
            )?,
            prism_latency: histogram(
                "nutanix_prism_request_duration_seconds",
                "Latency of HTTP requests to Prism Central by API and endpoint template",
                &["api", "endpoint"],
                short.clone(),
            )?,
            task_duration: histogram(
                "nutanix_prism_task_duration_seconds",
                "Seconds from recording a Prism task on a Machine to seeing it end",
                &["operation", "result"],
                long,
            )?,
            reconcile_duration: histogram(
                "nutanix_machine_reconcile_duration_seconds",
                "Duration of reconciles by controller and result",
                &["controller", "result"],
                short,
            )?,
            reconcile_errors: counter(
                "nutanix_machine_reconcile_errors_total",
                "Failed reconciles by controller and reason",
                &["controller", "reason"],
            )?,
            leader,
            creates_waiting,
            registry,
        })
    }

    /// Counts the Machines of `cache` into `nutanix_machines` at each scrape. Set once: a
    /// second call is ignored (one controller, one Machine cache).
    pub fn count_machines_of(&self, cache: Store<GuardedMachine>) {
        if self.machine_cache.set(cache).is_err() {
            tracing::debug!("the metrics' Machine cache was already given");
        }
    }

    /// `nutanix_machines` from the Machine cache, as it is now. Machines without a phase yet are
    /// not counted, as the machine-api-operator's own Machine metrics skip them
    /// (openshift/machine-api-operator pkg/metrics/metrics.go, `collectMachineMetrics`).
    fn count_machines(&self) {
        let Some(cache) = self.machine_cache.get() else {
            return;
        };
        let mut counts: BTreeMap<[String; 3], i64> = BTreeMap::new();
        for guarded in cache.state() {
            let Ok(machine) = guarded.0.as_ref() else {
                continue;
            };
            if machine.phase().is_empty() {
                continue;
            }
            let namespace = machine.metadata.namespace.clone().unwrap_or_default();
            let machine_set = machine.machine_set().unwrap_or_default().to_owned();
            // Every phase of a MachineSet that has Machines gets its series, 0 when no Machine
            // is in it, as kube-state-metrics' `kube_pod_status_phase` gives every phase: a
            // panel of a phase Machines pass through in under a scrape interval (Deleting) shows
            // 0, not "no data".
            for phase in MACHINE_PHASES {
                counts
                    .entry([namespace.clone(), machine_set.clone(), phase.to_owned()])
                    .or_default();
            }
            *counts
                .entry([namespace, machine_set, machine.phase().to_owned()])
                .or_default() += 1;
        }
        // MachineSets no Machine is in any more disappear rather than stay at their last count.
        self.machines.reset();
        for (labels, count) in counts {
            self.machines
                .with_label_values(&[&labels[0], &labels[1], &labels[2]])
                .set(count);
        }
    }

    /// The text exposition format.
    pub fn render(&self) -> String {
        self.count_machines();
        let mut buffer = Vec::new();
        if let Err(error) = TextEncoder::new().encode(&self.registry.gather(), &mut buffer) {
            tracing::warn!(%error, "cannot encode metrics");
        }
        String::from_utf8(buffer).unwrap_or_default()
    }

    /// An observer for the Prism client that feeds the request metrics.
    pub fn prism_observer(self: &Arc<Self>) -> Arc<dyn RequestObserver> {
        let metrics = self.clone();
        Arc::new(move |event: &RequestEvent| metrics.observe_prism(event))
    }

    fn observe_prism(&self, event: &RequestEvent) {
        let code = event
            .status
            .map_or_else(|| "none".to_owned(), |status| status.to_string());
        let api = event.api.label();
        self.prism_requests
            .with_label_values(&[api, event.endpoint, &code])
            .inc();
        self.prism_latency
            .with_label_values(&[api, event.endpoint])
            .observe(event.latency.as_secs_f64());
    }

    /// Records the reason of the `WindowsJoin` condition of Machine `namespace/name` (`None`
    /// for a Machine the join no longer concerns: it has no series then), and whether its join
    /// has timed out (a Machine whose join has not has no `nutanix_windows_join_timed_out`
    /// series).
    pub fn windows_join(&self, namespace: &str, name: &str, reason: Option<&str>) {
        let key = (namespace.to_owned(), name.to_owned());
        let mut reasons_now = self
            .windows_join_reasons
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let previous = match reason {
            Some(reason) => reasons_now.insert(key, reason.to_owned()),
            None => reasons_now.remove(&key),
        };
        if let Some(previous) = previous.filter(|previous| Some(previous.as_str()) != reason) {
            // An absent series is no error.
            let _ = self
                .windows_join_reason
                .remove_label_values(&[namespace, name, &previous]);
        }
        if let Some(reason) = reason {
            self.windows_join_reason
                .with_label_values(&[namespace, name, reason])
                .set(1);
        }
        self.windows_join_timed_out(namespace, name, reason == Some(reasons::JOIN_TIMED_OUT));
    }

    fn windows_join_timed_out(&self, namespace: &str, name: &str, timed_out: bool) {
        if timed_out {
            self.windows_join_timed_out
                .with_label_values(&[namespace, name])
                .set(1);
        } else {
            // An absent series is no error.
            let _ = self
                .windows_join_timed_out
                .remove_label_values(&[namespace, name]);
        }
    }

    /// Observes a task that ended after `elapsed`.
    pub fn task_ended(&self, operation: &str, succeeded: bool, elapsed: Duration) {
        let result = if succeeded { "succeeded" } else { "failed" };
        self.task_duration
            .with_label_values(&[operation, result])
            .observe(elapsed.as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machine_api_names_are_exact_and_prism_requests_are_counted_by_template() {
        let metrics = Arc::new(Metrics::new().unwrap());
        metrics
            .create_failed
            .with_label_values(&["m", "ns", "InvalidConfiguration"])
            .inc();
        metrics
            .phase_transition
            .with_label_values(&["Running"])
            .observe(42.0);
        let observer = metrics.prism_observer();
        observer.observe(&RequestEvent {
            api: prism_client::Api::V3,
            endpoint: prism_client::endpoints::VMS_GET,
            status: Some(200),
            latency: Duration::from_millis(12),
            attempt: 1,
        });
        observer.observe(&RequestEvent {
            api: prism_client::Api::V3,
            endpoint: prism_client::endpoints::VMS_CREATE,
            status: None,
            latency: Duration::from_millis(12),
            attempt: 1,
        });
        let text = metrics.render();
        assert!(text.contains(
            r#"mapi_instance_create_failed{name="m",namespace="ns",reason="InvalidConfiguration"} 1"#
        ));
        assert!(
            text.contains(
                r#"mapi_machine_phase_transition_seconds_bucket{phase="Running",le="60"} 1"#
            ),
            "{text}"
        );
        assert!(
            text.contains(
                r#"nutanix_prism_requests_total{api="v3",code="200",endpoint="GET /vms/{uuid}"} 1"#
            ),
            "{text}"
        );
        assert!(text.contains(r#"code="none",endpoint="POST /vms""#));
        assert!(!text.contains("mapi_instance_create_failed_total"));
    }

    #[test]
    fn a_windows_join_has_one_reason_series_and_none_once_it_no_longer_applies() {
        let metrics = Metrics::new().unwrap();
        metrics.windows_join("ns", "win-0", Some("VmCreated"));
        metrics.windows_join("ns", "win-0", Some(reasons::JOIN_TIMED_OUT));
        let text = metrics.render();
        assert!(!text.contains(r#"reason="VmCreated""#), "{text}");
        assert!(text.contains(&format!(
            r#"nutanix_windows_join_reason{{name="win-0",namespace="ns",reason="{}"}} 1"#,
            reasons::JOIN_TIMED_OUT
        )));
        assert!(text.contains(r#"nutanix_windows_join_timed_out{name="win-0",namespace="ns"} 1"#));
        metrics.windows_join("ns", "win-0", None);
        let text = metrics.render();
        assert!(!text.contains("nutanix_windows_join_reason{"), "{text}");
        assert!(!text.contains("nutanix_windows_join_timed_out{"), "{text}");
    }

    #[test]
    fn machines_are_counted_by_machine_set_and_phase_at_each_scrape() {
        use kube::runtime::{reflector, watcher};
        let machine = |name: &str, set: Option<&str>, phase: Option<&str>| -> GuardedMachine {
            let owners = set.map(|set| {
                serde_json::json!([{"apiVersion": "machine.openshift.io/v1beta1",
                    "kind": "MachineSet", "name": set, "uid": "u", "controller": true}])
            });
            serde_json::from_value(serde_json::json!({
                "apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
                "metadata": {"name": name, "namespace": "ns", "ownerReferences": owners},
                "spec": {}, "status": {"phase": phase},
            }))
            .unwrap()
        };
        let (store, mut writer) = reflector::store::<GuardedMachine>();
        let metrics = Metrics::new().unwrap();
        metrics.count_machines_of(store);
        writer.apply_watcher_event(&watcher::Event::Apply(machine(
            "a",
            Some("workers"),
            Some("Running"),
        )));
        writer.apply_watcher_event(&watcher::Event::Apply(machine(
            "b",
            Some("workers"),
            Some("Running"),
        )));
        writer.apply_watcher_event(&watcher::Event::Apply(machine("c", None, Some("Failed"))));
        writer.apply_watcher_event(&watcher::Event::Apply(machine("d", Some("workers"), None)));
        let text = metrics.render();
        assert!(
            text.contains(
                r#"nutanix_machines{machineset="workers",namespace="ns",phase="Running"} 2"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"nutanix_machines{machineset="",namespace="ns",phase="Failed"} 1"#)
        );
        assert!(
            text.contains(
                r#"nutanix_machines{machineset="workers",namespace="ns",phase="Deleting"} 0"#
            ),
            "every phase of a MachineSet with Machines: {text}"
        );
        assert_eq!(
            text.matches("nutanix_machines{").count(),
            10,
            "five phases for each of the two MachineSets; a Machine with no phase counts in none: {text}"
        );
        writer.apply_watcher_event(&watcher::Event::Delete(machine("c", None, Some("Failed"))));
        let text = metrics.render();
        assert!(
            !text.contains(r#"machineset="",namespace="ns""#),
            "a MachineSet left with no Machine goes: {text}"
        );
        assert!(
            text.contains(
                r#"nutanix_machines{machineset="workers",namespace="ns",phase="Failed"} 0"#
            ),
            "{text}"
        );
    }
}
