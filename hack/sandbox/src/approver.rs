//! The cluster-machine-approver: approves the kubelet CSRs of Machine-backed nodes.
//!
//! It watches CSRs, and Machines and Nodes (any change re-checks every pending CSR, as a Machine
//! gaining its addresses or nodeRef can make a pending CSR approvable). Each pending kubelet CSR
//! is parsed (PEM PKCS#10) and checked with the plan layer's [`check_csr`] against the Machines of
//! the namespace and the Nodes, read live; an approvable one gets the `Approved` condition through
//! the `/approval` subresource, the others stay pending with the reason logged and recorded
//! (see [`ApproverHandle::decision`]), and are checked again after `recheck_after`.
//!
//! Not simulated: the renewal path that dials the kubelet on port 10250 to compare a serving CSR
//! with the current certificate (there is no kubelet to dial, so every serving CSR goes through
//! the Machine check), the approver's metrics, and issuing certificates (kube-sim has no signer;
//! the node agent only waits for the `Approved` condition).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use nutanix_machine_controller::api::Machine;
use nutanix_machine_controller::plan::csr::{
    CLIENT_SIGNER, CsrContext, CsrKind, CsrVerdict, MachineFacts, SERVING_SIGNER, check_csr,
};
use serde_json::json;

use crate::actor::{ActorHandle, cache};
use crate::csr;

/// The reason the approver writes on its `Approved` condition.
pub const APPROVED_REASON: &str = "NodeCSRApprove";
const APPROVED_MESSAGE: &str =
    "This CSR was approved by the Node CSR Approver (cluster-machine-approver)";
/// CSRs older than this no longer count as recent pending ones.
const RECENT: SignedDuration = SignedDuration::from_hours(1);

/// Settings of the approver.
#[derive(Clone, Debug)]
pub struct ApproverConfig {
    /// Namespace of the Machines.
    pub namespace: String,
    /// How soon a pending CSR is checked again when nothing it depends on changed (the 2-hour
    /// window and the pending-CSR limit depend on time).
    pub recheck_after: Duration,
    /// Delay before a failed reconcile is retried.
    pub retry_after: Duration,
}

impl Default for ApproverConfig {
    fn default() -> Self {
        Self {
            namespace: crate::MACHINE_API_NAMESPACE.to_owned(),
            recheck_after: Duration::from_secs(5),
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
    /// Left pending, for this reason (the approver's words).
    Pending { reason: String },
    /// Denied by someone else.
    Denied,
    /// Not the approver's business: not a kubelet CSR, or a request it cannot read.
    Ignored { reason: String },
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
    config: ApproverConfig,
}

fn has_condition(csr: &CertificateSigningRequest, type_: &str) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True")
}

fn is_pending(csr: &CertificateSigningRequest) -> bool {
    !has_condition(csr, "Approved") && !has_condition(csr, "Denied")
}

fn pending_refs(
    store: &Store<CertificateSigningRequest>,
) -> Vec<ObjectRef<CertificateSigningRequest>> {
    store
        .state()
        .iter()
        .filter(|c| is_pending(c))
        .map(|c| ObjectRef::from_obj(c.as_ref()))
        .collect()
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
            machines: cache(machines.clone(), cancel.clone()),
            nodes: cache(nodes.clone(), cancel.clone()),
            store: store.clone(),
            decisions: shared,
            config,
        });
        let on_machine = store.clone();
        controller
            .watches(machines, watcher::Config::default(), move |_| {
                pending_refs(&on_machine)
            })
            .watches(nodes, watcher::Config::default(), move |_| {
                pending_refs(&store)
            })
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

/// Kubelet CSRs created in the last hour that are still pending.
fn recent_pending(csrs: &[Arc<CertificateSigningRequest>], now: Timestamp) -> usize {
    csrs.iter()
        .filter(|c| {
            matches!(c.spec.signer_name.as_str(), CLIENT_SIGNER | SERVING_SIGNER)
                && is_pending(c)
                && c.metadata
                    .creation_timestamp
                    .as_ref()
                    .is_some_and(|t| now.duration_since(t.0) < RECENT)
        })
        .count()
}

fn facts(machine: &Machine) -> MachineFacts {
    let status = machine.status.as_ref();
    MachineFacts {
        name: machine.name_any(),
        created: machine.metadata.creation_timestamp.as_ref().map(|t| t.0),
        addresses: status.map(|s| s.addresses.clone()).unwrap_or_default(),
        node_ref: status
            .and_then(|s| s.node_ref.as_ref())
            .and_then(|r| r.name.clone()),
    }
}

async fn reconcile(
    object: Arc<CertificateSigningRequest>,
    context: Arc<Context>,
) -> Result<Action, ApproverError> {
    let name = object.name_any();
    if has_condition(&object, "Denied") {
        record(&context, &name, Decision::Denied);
        return Ok(Action::await_change());
    }
    if has_condition(&object, "Approved") {
        let mut decisions = lock(&context.decisions);
        decisions.entry(name).or_insert(Decision::Approved {
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
    let csr = match csr::parse(&object) {
        Ok(csr) => csr,
        Err(error) => {
            if record(
                &context,
                &name,
                Decision::Ignored {
                    reason: error.to_string(),
                },
            ) {
                tracing::warn!(csr = %name, %error, "cannot read CSR");
            }
            return Ok(Action::await_change());
        }
    };
    let machines: Vec<MachineFacts> = context
        .machines
        .state()
        .iter()
        .map(|machine| facts(machine))
        .collect();
    let node_names: Vec<String> = context
        .nodes
        .state()
        .iter()
        .map(|node| node.name_any())
        .collect();
    let verdict = check_csr(
        &csr,
        &CsrContext {
            machines: &machines,
            node_names: &node_names,
            recent_pending: recent_pending(&context.store.state(), Timestamp::now()),
            current_serving_cert: None,
        },
    );
    match verdict {
        CsrVerdict::Approvable { kind, machine } => {
            let patch = json!({"status": {"conditions": [{
                "type": "Approved",
                "status": "True",
                "reason": APPROVED_REASON,
                "message": APPROVED_MESSAGE,
                "lastUpdateTime": Time(Timestamp::now()),
            }]}});
            context
                .csrs
                .patch_approval(&name, &PatchParams::default(), &Patch::Merge(patch))
                .await
                .map_err(api_error(&name, "approve"))?;
            tracing::info!(csr = %name, ?kind, machine = machine.as_deref().unwrap_or(""), "approved CSR");
            record(
                &context,
                &name,
                Decision::Approved {
                    kind: Some(kind),
                    machine,
                },
            );
            Ok(Action::await_change())
        }
        CsrVerdict::Pending { reason } => {
            if record(
                &context,
                &name,
                Decision::Pending {
                    reason: reason.clone(),
                },
            ) {
                tracing::info!(csr = %name, %reason, "CSR left pending");
            }
            Ok(Action::requeue(context.config.recheck_after))
        }
        CsrVerdict::NotNodeCsr => {
            record(
                &context,
                &name,
                Decision::Ignored {
                    reason: format!("signer {} is not a kubelet signer", csr.signer_name),
                },
            );
            Ok(Action::await_change())
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn csr(
        signer: &str,
        age_minutes: i64,
        conditions: serde_json::Value,
    ) -> Arc<CertificateSigningRequest> {
        let created = Timestamp::now() - SignedDuration::from_mins(age_minutes);
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": "c", "creationTimestamp": created.to_string()},
                "spec": {"request": "", "signerName": signer},
                "status": {"conditions": conditions}
            }))
            .unwrap(),
        )
    }

    #[test]
    fn recent_pending_counts_only_young_undecided_kubelet_csrs() {
        let csrs = vec![
            csr(CLIENT_SIGNER, 5, json!([])),
            csr(SERVING_SIGNER, 59, json!([])),
            csr(CLIENT_SIGNER, 61, json!([])),
            csr("example.com/other", 5, json!([])),
            csr(
                CLIENT_SIGNER,
                5,
                json!([{"type": "Approved", "status": "True"}]),
            ),
            csr(
                SERVING_SIGNER,
                5,
                json!([{"type": "Denied", "status": "True"}]),
            ),
        ];
        assert_eq!(recent_pending(&csrs, Timestamp::now()), 2);
    }
}
