//! The cluster-machine-approver: approves the kubelet CSRs of Machine-backed nodes.
//!
//! Like the real one (openshift/cluster-machine-approver `main.go`, `pkg/controller/controller.go`)
//! it watches CSRs only, not Machines or Nodes. Each CSR it reconciles (`pendingNodeCertFilter`) is
//! parsed (PEM PKCS#10) and judged by [`rules`], the approver's own rules, against the Machines of
//! the namespace and the Nodes; an approvable one gets the `Approved` condition through the
//! `/approval` subresource (`approve`). The others stay pending with the reason recorded (see
//! [`ApproverHandle::decision`]); only those the approver reports as errors (no Machine found yet,
//! a SAN not among the Machine's addresses, an unreadable request: see
//! [`PendingReason::is_retried`]) are looked at again, with controller-runtime's per-item
//! exponential backoff (5 ms doubling up to `max_backoff`); the others wait for the CSR to change.
//! It reads the Machines and Nodes from caches of its own where the real one reads them
//! uncached, so a decision may lag a change by the time the cache takes to see it.
//!
//! Not simulated: the renewal paths (see [`rules`]), the approver's metrics, and issuing
//! certificates (kube-sim has no signer; the node agent only waits for the `Approved` condition).

pub mod rules;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::actor::{ActorHandle, cache};
use crate::csr;
use crate::machine_api::Machine;
use rules::ApproverMachine;
pub use rules::{APPROVED_MESSAGE, APPROVED_REASON, CsrKind, IgnoreReason, PendingReason};

/// Settings of the approver.
#[derive(Clone, Debug)]
pub struct ApproverConfig {
    /// Namespace of the Machines.
    pub namespace: String,
    /// The first delay before a retried CSR is looked at again; it doubles at each retry.
    pub base_backoff: Duration,
    /// The longest such delay.
    pub max_backoff: Duration,
    /// Delay before a failed API call is retried.
    pub retry_after: Duration,
}

impl Default for ApproverConfig {
    fn default() -> Self {
        Self {
            namespace: crate::MACHINE_API_NAMESPACE.to_owned(),
            // controller-runtime's `DefaultTypedControllerRateLimiter`: 5 ms to 1000 s per item.
            base_backoff: Duration::from_millis(5),
            max_backoff: Duration::from_secs(1000),
            retry_after: Duration::from_secs(1),
        }
    }
}

/// What the approver made of one CSR.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Approved (by this approver, or found approved already with `kind: None`).
    Approved {
        kind: Option<CsrKind>,
        machine: Option<String>,
    },
    /// Left pending, for this reason.
    Pending { reason: PendingReason },
    /// Denied by someone else.
    Denied,
    /// Not the approver's business (`pendingNodeCertFilter`).
    Ignored { reason: IgnoreReason },
}

/// Why a CSR could not be handled.
#[derive(Debug, thiserror::Error)]
pub enum ApproverError {
    #[error("CSR {csr}: {action}: {source}")]
    Api {
        csr: String,
        action: String,
        source: Box<kube::Error>,
    },
}

/// A running approver.
#[derive(Debug)]
pub struct ApproverHandle {
    actor: ActorHandle,
    decisions: Arc<Mutex<BTreeMap<String, Decision>>>,
}

impl ApproverHandle {
    /// The latest decision on the CSR named `name`, once the approver has looked at it.
    pub fn decision(&self, name: &str) -> Option<Decision> {
        lock(&self.decisions).get(name).cloned()
    }

    /// Every decision so far, by CSR name.
    pub fn decisions(&self) -> BTreeMap<String, Decision> {
        lock(&self.decisions).clone()
    }

    /// Stops the approver and waits for it.
    pub async fn stop(self) {
        self.actor.stop().await;
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

struct Context {
    csrs: Api<CertificateSigningRequest>,
    /// Every Machine and Node, as the approver's informers keep them.
    machines: Store<Machine>,
    nodes: Store<Node>,
    store: Store<CertificateSigningRequest>,
    decisions: Arc<Mutex<BTreeMap<String, Decision>>>,
    /// Retries so far per CSR name, for the backoff.
    failures: Mutex<HashMap<String, u32>>,
    config: ApproverConfig,
}

fn is_denied(csr: &CertificateSigningRequest) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Denied" && c.status == "True")
}

/// Starts the approver.
pub fn start(client: Client, config: ApproverConfig) -> ApproverHandle {
    let decisions = Arc::new(Mutex::new(BTreeMap::new()));
    let shared = decisions.clone();
    let actor = ActorHandle::spawn("approver", move |cancel| async move {
        let csrs: Api<CertificateSigningRequest> = Api::all(client.clone());
        let machines: Api<Machine> = Api::namespaced(client.clone(), &config.namespace);
        let nodes: Api<Node> = Api::all(client);
        let controller = Controller::new(csrs.clone(), watcher::Config::default());
        let store = controller.store();
        let context = Arc::new(Context {
            csrs,
            machines: cache(machines, cancel.clone()),
            nodes: cache(nodes, cancel.clone()),
            store,
            decisions: shared,
            failures: Mutex::new(HashMap::new()),
            config,
        });
        controller
            .graceful_shutdown_on(async move { cancel.cancelled().await })
            .run(reconcile, error_policy, context)
            .for_each(|result| async move {
                if let Err(error) = result {
                    tracing::debug!(%error, "approver");
                }
            })
            .await;
    });
    ApproverHandle { actor, decisions }
}

fn error_policy(
    csr: Arc<CertificateSigningRequest>,
    error: &ApproverError,
    context: Arc<Context>,
) -> Action {
    tracing::warn!(csr = %csr.name_any(), %error, "approver reconcile failed");
    Action::requeue(context.config.retry_after)
}

fn api_error(csr: &str, action: &str) -> impl FnOnce(kube::Error) -> ApproverError {
    let (csr, action) = (csr.to_owned(), action.to_owned());
    move |source| ApproverError::Api {
        csr,
        action,
        source: Box::new(source),
    }
}

fn record(context: &Context, name: &str, decision: Decision) -> bool {
    lock(&context.decisions).insert(name.to_owned(), decision.clone()) != Some(decision)
}

/// The delay before the `failures`-th retry: `base · 2^failures`, at most `max`
/// (client-go `ItemExponentialFailureRateLimiter`).
pub fn backoff(base: Duration, max: Duration, failures: u32) -> Duration {
    base.checked_mul(2u32.saturating_pow(failures))
        .map_or(max, |delay| delay.min(max))
}

fn pending(context: &Context, name: &str, reason: PendingReason) -> Action {
    let retried = reason.is_retried();
    let shown = reason.to_string();
    if record(context, name, Decision::Pending { reason }) {
        tracing::info!(csr = %name, reason = %shown, "CSR left pending");
    }
    if !retried {
        lock(&context.failures).remove(name);
        return Action::await_change();
    }
    let mut failures = lock(&context.failures);
    let count = failures.entry(name.to_owned()).or_insert(0);
    let delay = backoff(
        context.config.base_backoff,
        context.config.max_backoff,
        *count,
    );
    *count = count.saturating_add(1);
    Action::requeue(delay)
}

async fn reconcile(
    object: Arc<CertificateSigningRequest>,
    context: Arc<Context>,
) -> Result<Action, ApproverError> {
    let name = object.name_any();
    if is_denied(&object) {
        record(&context, &name, Decision::Denied);
        return Ok(Action::await_change());
    }
    // `reconcileCSR`: an approved CSR is left alone.
    if rules::is_approved(&object) {
        lock(&context.decisions)
            .entry(name)
            .or_insert(Decision::Approved {
                kind: None,
                machine: None,
            });
        return Ok(Action::await_change());
    }
    if matches!(
        lock(&context.decisions).get(&name),
        Some(Decision::Approved { .. })
    ) {
        // Approved by this approver; the watch has not shown it yet (names are never reused:
        // kubelets use generateName).
        return Ok(Action::await_change());
    }
    if let Err(reason) = rules::signer_filter(&object) {
        record(&context, &name, Decision::Ignored { reason });
        return Ok(Action::await_change());
    }
    // `Reconcile`: the limit on recent pending CSRs comes before anything else.
    let csrs = context.store.state();
    let now = Timestamp::now();
    let pending_count = rules::recently_pending(csrs.iter().map(AsRef::as_ref), now);
    let machines: Vec<ApproverMachine> = context
        .machines
        .state()
        .iter()
        .map(|m| ApproverMachine::from(m.as_ref()))
        .collect();
    let nodes = context.nodes.state();
    if let Some(reason) = rules::limit_reached(pending_count, machines.len(), nodes.len()) {
        return Ok(pending(&context, &name, reason));
    }
    let request = match csr::parse(&object) {
        Ok(request) => request,
        Err(error) => {
            let reason = PendingReason::UnparsableRequest {
                message: error.to_string(),
            };
            return Ok(pending(&context, &name, reason));
        }
    };
    let node_exists = |node: &str| nodes.iter().any(|n| n.name_any() == node);
    let authorized = match rules::authorize(&object, &request, &machines, &node_exists) {
        Ok(authorized) => authorized,
        Err(reason) => return Ok(pending(&context, &name, reason)),
    };
    let now = Time(Timestamp::now());
    let patch = json!({"status": {"conditions": [{
        "type": "Approved",
        "status": "True",
        "reason": APPROVED_REASON,
        "message": APPROVED_MESSAGE,
        "lastUpdateTime": now,
        "lastTransitionTime": now,
    }]}});
    context
        .csrs
        .patch_approval(&name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map_err(api_error(&name, "approve"))?;
    tracing::info!(csr = %name, kind = ?authorized.kind, machine = %authorized.machine, "approved CSR");
    lock(&context.failures).remove(&name);
    record(
        &context,
        &name,
        Decision::Approved {
            kind: Some(authorized.kind),
            machine: Some(authorized.machine),
        },
    );
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_exponentially_up_to_the_cap() {
        let base = Duration::from_millis(5);
        let max = Duration::from_secs(1000);
        let delays: Vec<Duration> = [0, 1, 2, 10]
            .iter()
            .map(|n| backoff(base, max, *n))
            .collect();
        assert_eq!(
            delays,
            [
                Duration::from_millis(5),
                Duration::from_millis(10),
                Duration::from_millis(20),
                Duration::from_millis(5120)
            ]
        );
        assert_eq!(backoff(base, max, 40), max);
        assert_eq!(backoff(base, max, u32::MAX), max);
    }
}
