//! The Windows join reconciler: the `WindowsJoin` condition ([`crate::plan::join`]) on every
//! Windows Machine (label `machine.openshift.io/os-id: Windows`, not
//! `windowsmachineconfig.openshift.io/ignore=true`), with an event on each change of its reason;
//! the Node's `spec.providerID` when it has none and is the Machine's by name and address
//! ([`crate::plan::node_link`]); and, with `--fail-timed-out-windows-joins`, phase Failed for a
//! Machine with no linked Node after `--windows-join-timeout`.
//!
//! It reads Machines, Nodes, CertificateSigningRequests and the shared VM inventory (the VM's
//! addresses as Prism reports them). It approves no CSR, logs in to no VM, and writes nothing
//! WMCO owns: its only writes are the Machine's status (the condition, or Failed), the
//! `instance-state` annotation of a Machine it fails, and an empty Node providerID.
//!
//! Nodes and CSRs are watched into stores that also trigger the reconcile of the Machines they
//! concern (a CSR under an unknown host name concerns every Windows Machine still waiting for its
//! Node).

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};

use super::Shared;
use super::error::Error;
use super::inputs::environment;
use super::nodes::apply_provider_id_action;
use super::stores_ready::StoresReady;
use crate::api::{GuardedMachine, INSTANCE_STATE_ANNOTATION, Machine, phase};
use crate::plan::addresses::nics_of;
use crate::plan::csr::{CLIENT_SIGNER, SERVING_SIGNER};
use crate::plan::csr_pem::{CsrObjectError, csr_of, csr_state};
use crate::plan::join::{
    CONDITION, JOIN_TIMED_OUT_ERROR, JoinInput, ObservedCsr, applies_to, decide, machine_facts,
    node_of,
};
use crate::plan::machine_status::{
    StatusUpdate, UNKNOWN_INSTANCE_STATE, metadata_patch, status_patch,
};
use crate::plan::node_link::{
    ProviderIdAction, machine_node_names, machine_of_node, node_ref, provider_id_action,
    same_dns_name,
};

/// Label of this controller in metrics.
const CONTROLLER: &str = "windows-join";
/// How soon a reconcile whose write lost a race (409) looks again.
const CONFLICT_RETRY: Duration = Duration::from_secs(1);
/// How soon a reconcile that came before the stores were filled looks again.
const STORES_NOT_READY_RETRY: Duration = Duration::from_secs(1);

/// The reconciler's context.
#[derive(Debug)]
pub struct Context {
    shared: Arc<Shared>,
    machines: Store<GuardedMachine>,
    nodes: Store<Node>,
    csrs: Store<CertificateSigningRequest>,
    /// Whether the Node and CSR stores have their first full list (the controller holds every
    /// reconcile until its Machine store has).
    stores_ready: StoresReady,
    /// CSRs that could not be read, logged once each.
    unreadable: Mutex<HashSet<String>>,
}

/// Runs the Windows join reconciler until its watch ends.
pub async fn run(shared: Arc<Shared>) {
    let client = shared.client.clone();
    let machines: Api<GuardedMachine> = match &shared.settings.namespace {
        Some(namespace) => Api::namespaced(client.clone(), namespace),
        None => Api::all(client.clone()),
    };
    // Cached without what is never read here: a real Node's image list and managed fields are
    // most of its size, and a cluster has one per Machine.
    let (nodes, node_writer) = reflector::store();
    let node_events = reflector::reflector(
        node_writer,
        watcher(Api::<Node>::all(client.clone()), watcher::Config::default())
            .default_backoff()
            .modify(|node: &mut Node| {
                node.managed_fields_mut().clear();
                if let Some(status) = node.status.as_mut() {
                    status.images = None;
                }
            }),
    )
    .touched_objects();
    let (csrs, csr_writer) = reflector::store();
    let csr_events = reflector::reflector(
        csr_writer,
        watcher(
            Api::<CertificateSigningRequest>::all(client),
            watcher::Config::default(),
        )
        .default_backoff()
        .modify(|csr: &mut CertificateSigningRequest| csr.managed_fields_mut().clear()),
    )
    .touched_objects();
    let controller = Controller::new(machines, watcher::Config::default());
    let store = controller.store();
    let config = controller::Config::default().concurrency(shared.settings.concurrency);
    // The Machine store is not waited on here: the controller itself holds every reconcile until
    // that store is filled, and a second waiter on it could leave the controller's wait unwoken.
    let stores_ready = {
        let (nodes, csrs) = (nodes.clone(), csrs.clone());
        StoresReady::spawn(async move {
            nodes.wait_until_ready().await.is_ok() && csrs.wait_until_ready().await.is_ok()
        })
    };
    let context = Arc::new(Context {
        shared,
        machines: store.clone(),
        nodes,
        csrs,
        stores_ready,
        unreadable: Mutex::new(HashSet::new()),
    });
    let for_nodes = store.clone();
    controller
        .watches_stream(node_events, move |node| machines_of_node(&node, &for_nodes))
        .watches_stream(csr_events, move |csr| machines_of_csr(&csr, &store))
        .with_config(config)
        .run(reconcile, error_policy, context)
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, "windows join reconciler");
            }
        })
        .await;
}

/// The Windows Machines among `machines` for which `keep` holds.
fn windows_machines(
    machines: &Store<GuardedMachine>,
    keep: impl Fn(&Machine) -> bool,
) -> Vec<ObjectRef<GuardedMachine>> {
    machines
        .state()
        .iter()
        .filter(|guarded| {
            guarded
                .0
                .as_ref()
                .is_ok_and(|machine| applies_to(machine) && keep(machine))
        })
        .map(|guarded| ObjectRef::from_obj(guarded.as_ref()))
        .collect()
}

fn named_as(machine: &Machine, node: &str) -> bool {
    node_ref(machine) == Some(node)
        || machine_node_names(machine)
            .iter()
            .any(|name| same_dns_name(name, node))
}

/// The Machines a Node change concerns: nodelink's annotation, the nodeRef, the name, the
/// providerID.
fn machines_of_node(
    node: &Node,
    machines: &Store<GuardedMachine>,
) -> Vec<ObjectRef<GuardedMachine>> {
    let name = node.name_any();
    let annotated = machine_of_node(node);
    let provider_id = node
        .spec
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .filter(|id| !id.is_empty());
    windows_machines(machines, |machine| {
        annotated.as_ref().is_some_and(|(namespace, annotated)| {
            machine.metadata.namespace.as_deref() == Some(namespace.as_str())
                && machine.name_any() == *annotated
        }) || named_as(machine, &name)
            || provider_id.is_some_and(|id| machine.spec.provider_id.as_deref() == Some(id))
    })
}

/// The Machines a CSR change concerns: the one it names; for a client CSR under a name no
/// Machine has, every Windows Machine still without a Node.
fn machines_of_csr(
    object: &CertificateSigningRequest,
    machines: &Store<GuardedMachine>,
) -> Vec<ObjectRef<GuardedMachine>> {
    let Some(Ok(observed)) = observe(object) else {
        return Vec::new();
    };
    let Some(node) = observed.node_name() else {
        return Vec::new();
    };
    let named = windows_machines(machines, |machine| named_as(machine, node));
    if named.is_empty() && observed.csr.signer_name == CLIENT_SIGNER {
        return windows_machines(machines, |machine| node_ref(machine).is_none());
    }
    named
}

/// A kubelet CSR as the plan reads it, or why it cannot be read; `None` for other signers.
fn observe(object: &CertificateSigningRequest) -> Option<Result<ObservedCsr, CsrObjectError>> {
    let signer = object.spec.signer_name.as_str();
    if signer != CLIENT_SIGNER && signer != SERVING_SIGNER {
        return None;
    }
    Some(csr_of(object).map(|csr| ObservedCsr {
        csr,
        state: csr_state(object),
    }))
}

fn key_of(guarded: &GuardedMachine) -> String {
    format!(
        "{CONTROLLER}:{}/{}",
        guarded.namespace().unwrap_or_default(),
        guarded.name_any()
    )
}

async fn reconcile(guarded: Arc<GuardedMachine>, context: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    let result = match &guarded.0 {
        Ok(machine) => reconcile_machine(machine, &context).await,
        // The Machine controller logs it.
        Err(_) => Ok(Action::await_change()),
    };
    if result.is_ok() {
        context.shared.backoff.reset(&key_of(&guarded));
    }
    context
        .shared
        .observe_reconcile(CONTROLLER, started, &result);
    result
}

fn error_policy(guarded: Arc<GuardedMachine>, error: &Error, context: Arc<Context>) -> Action {
    context
        .shared
        .retry_failed(CONTROLLER, &key_of(&guarded), error)
}

impl Context {
    /// The cluster's kubelet CSRs that can be read; each unreadable one is logged once.
    fn observed_csrs(&self) -> Vec<ObservedCsr> {
        let mut observed = Vec::new();
        for object in self.csrs.state() {
            match observe(&object) {
                Some(Ok(csr)) => observed.push(csr),
                Some(Err(error)) => {
                    let first = self
                        .unreadable
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert(object.name_any());
                    if first {
                        tracing::warn!(%error, "cannot read a CSR; left out of the join checks");
                    }
                }
                None => {}
            }
        }
        observed
    }

    /// The VM's IP addresses as Prism reports them (from the shared inventory); `None` when
    /// they cannot be known now.
    async fn prism_ips(&self, machine: &Machine) -> Option<Vec<IpAddr>> {
        let uuid = machine.provider_status().ok()?.vm_uuid?;
        let environment = match environment(&self.shared, machine).await {
            Ok(environment) => environment,
            Err(error) => {
                tracing::debug!(machine = %machine.name_any(), %error, "no Prism connection for the Node IP check");
                return None;
            }
        };
        let connection = environment.connection;
        let snapshot = match connection.inventory.snapshot(connection.client()).await {
            Ok(snapshot) => snapshot,
            Err(error) => {
                tracing::debug!(machine = %machine.name_any(), %error, "no VM inventory for the Node IP check");
                return None;
            }
        };
        // A VM not listed yet (Prism's list lag) proves nothing.
        let vm = snapshot.vm(&uuid)?;
        Some(
            nics_of(vm)
                .iter()
                .flat_map(|nic| &nic.ips)
                .filter_map(|reading| reading.ip.trim().parse().ok())
                .collect(),
        )
    }
}

async fn reconcile_machine(machine: &Machine, context: &Context) -> Result<Action, Error> {
    let done = [phase::FAILED, phase::DELETING].contains(&machine.phase());
    if !applies_to(machine) || machine.metadata.deletion_timestamp.is_some() || done {
        return Ok(Action::await_change());
    }
    let key = format!(
        "{}/{}",
        machine.namespace().unwrap_or_default(),
        machine.name_any()
    );
    // Decisions on half-filled stores would report stages and problems that are not there.
    if !context.stores_ready.is_ready() {
        return Ok(Action::requeue(STORES_NOT_READY_RETRY));
    }
    let mut status = match machine.provider_status() {
        Ok(status) => status,
        Err(error) => {
            tracing::warn!(machine = %key, %error, "status.providerStatus cannot be read; no WindowsJoin condition");
            return Ok(Action::await_change());
        }
    };
    let settings = &context.shared.settings;

    let nodes = context.nodes.state();
    let node_refs: Vec<&Node> = nodes.iter().map(AsRef::as_ref).collect();
    let node = node_of(machine, &node_refs);
    let node_names: Vec<String> = nodes.iter().map(|n| n.name_any()).collect();
    let machines: Vec<_> = context
        .machines
        .state()
        .iter()
        .filter_map(|guarded| guarded.0.as_ref().ok().map(machine_facts))
        .collect();
    let csrs = context.observed_csrs();
    let vm_ips = match node {
        Some(_) => context.prism_ips(machine).await,
        None => None,
    };
    let previous = status
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION)
        .cloned();
    let now = Time(Timestamp::now());
    let input = JoinInput {
        machine,
        node,
        csrs: &csrs,
        machines: &machines,
        node_names: &node_names,
        vm_ips: vm_ips.as_deref(),
        previous: previous.as_ref(),
        now: now.0,
        timeout: settings.windows_join_timeout,
    };
    let Some(decision) = decide(&input, settings.fail_timed_out_windows_joins, &now) else {
        return Ok(Action::await_change());
    };

    // Only an empty providerID is written; a different one is the condition's to explain (the
    // Machine controller logs it for linked Nodes).
    if let (Some(node), Some(provider_id)) = (node, machine.spec.provider_id.as_deref()) {
        let action = provider_id_action(machine, node, provider_id);
        if matches!(action, ProviderIdAction::Set(_)) {
            apply_provider_id_action(&context.shared.client, &action, &node.name_any()).await?;
        }
    }

    status.set_condition(decision.condition.clone());
    let update = match &decision.fail {
        Some(message) => StatusUpdate {
            phase: Some(phase::FAILED),
            error: Some((Some(JOIN_TIMED_OUT_ERROR.to_owned()), message.clone())),
            provider_status: Some(status),
            ..StatusUpdate::default()
        },
        None => StatusUpdate {
            provider_status: Some(status),
            ..StatusUpdate::default()
        },
    };
    let api: Api<Machine> = Api::namespaced(
        context.shared.client.clone(),
        &machine.namespace().unwrap_or_default(),
    );
    let mut written = None;
    if let Some(patch) = status_patch(machine, &update, &now) {
        match api
            .patch_status(
                &machine.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(updated) => written = Some(updated),
            Err(kube::Error::Api(status)) if status.code == 409 => {
                tracing::debug!(machine = %key, "the Machine changed meanwhile; looking again");
                return Ok(Action::requeue(CONFLICT_RETRY));
            }
            Err(error) => {
                return Err(Error::kube(format!("patch status of Machine {key}"), error));
            }
        }
    }
    if let Some(updated) = &written {
        let state = &decision.state;
        tracing::info!(machine = %key, reason = state.reason, message = %state.message, "WindowsJoin");
        if decision.fail.is_some() {
            let annotations = [(
                INSTANCE_STATE_ANNOTATION.to_owned(),
                UNKNOWN_INSTANCE_STATE.to_owned(),
            )]
            .into();
            if let Some(patch) = metadata_patch(updated, &Default::default(), &annotations, None) {
                api.patch(
                    &machine.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
                .map_err(|e| Error::kube(format!("patch Machine {key}"), e))?;
            }
            tracing::warn!(machine = %key, "Windows join timed out; Machine marked Failed");
        }
        if let Some(event) = &decision.event {
            context
                .shared
                .event(updated, event.warning, event.reason, event.note.clone())
                .await;
        }
    }
    if decision.fail.is_some() {
        return Ok(Action::await_change());
    }
    let wait = if decision.state.complete() {
        settings.running_interval
    } else {
        settings.requeue_interval
    };
    Ok(Action::requeue(wait))
}
