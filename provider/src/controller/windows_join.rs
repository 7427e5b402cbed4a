//! The Windows join reconciler: the `WindowsJoin` condition ([`crate::plan::windows_join`]) on every
//! Windows Machine (label `machine.openshift.io/os-id: Windows`, not
//! `windowsmachineconfig.openshift.io/ignore=true`), with an event on each change of its reason.
//! A Machine with no linked Node after `--windows-join-timeout` gets the reason `JoinTimedOut`;
//! with `--fail-timed-out-windows-joins` the Machine controller, the one writer of phase, reads
//! that reason and fails the Machine ([`crate::plan::windows_join::timed_out_join`]).
//!
//! It reads Machines, Nodes, CertificateSigningRequests and the shared VM inventory (the VM's
//! addresses as Prism reports them). It approves no CSR, logs in to no VM, writes no Node, and
//! writes nothing WMCO owns: its only writes are the condition and its events. The Node's
//! `spec.providerID`, by which nodelink links a Windows Node before it has a nodeRef, is the
//! Machine controller's to set ([`crate::plan::machine::node_link`],
//! [`super::node_link::set_provider_id`]).
//!
//! The condition has a key of the providerStatus to itself, `windowsJoin` ([`STATUS_FIELD`]),
//! which the Machine controller never writes (it keeps unknown keys as they are, and a merge
//! patch of its own fields leaves this one alone); so the condition is written without a
//! resourceVersion and never conflicts with the Machine controller's writes, nor they with it
//! over the same list. A condition left in `providerStatus.conditions` by an earlier version is
//! moved once, by a patch that names the resourceVersion it was computed from.
//!
//! Nodes and CSRs are watched into stores that also trigger the reconcile of the Machines they
//! concern (a CSR under an unknown host name concerns every Windows Machine still waiting for its
//! Node).

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use serde_json::Value;

use super::error::Error;
use super::inputs::environment;
use super::kit::{self, BackoffKey, Kit, key_of};
use super::machine_cache::MachineFeed;
use super::nodes::NodeFeed;
use super::shared::Shared;
use super::stores_ready::StoresReady;
use crate::api::{GuardedMachine, Machine, phase};
use crate::plan::machine::addresses::nics_of;
use crate::plan::machine::node_link::{
    machine_node_names, machine_of_node, node_ref, same_dns_name,
};
use crate::plan::vm::scope::NameClause;
pub use crate::plan::windows_join::STATUS_FIELD;
use crate::plan::windows_join::csr::{CLIENT_SIGNER, SERVING_SIGNER};
use crate::plan::windows_join::csr_pem::{CsrObjectError, csr_of, csr_state};
use crate::plan::windows_join::{
    JoinInput, ObservedCsr, applies_to, condition_patch, decide, machine_facts, node_of,
    recorded_condition,
};

/// This reconciler in the kit: its failures back off under its own key (apart from the Machine
/// controller's for the same Machine), and a reconcile that went well ends the backoff; an
/// unreadable Machine is the Machine controller's to log.
const KIT: Kit = Kit {
    controller: "windows-join",
    title: "windows join reconciler",
    backoff: BackoffKey::Controller,
    logs_unreadable: false,
};
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

/// Runs the Windows join reconciler on the shared Machine and Node caches until the Machines'
/// watch ends.
pub async fn run(shared: Arc<Shared>, machines: MachineFeed, node_feed: NodeFeed) {
    let Some((store, changes)) = machines.when_ready().await else {
        tracing::error!("the Machine cache can never be filled; the Windows join reconciler stops");
        return;
    };
    let client = shared.client.clone();
    let nodes_filled = node_feed.filled();
    let NodeFeed {
        store: nodes,
        changes: node_changes,
        ..
    } = node_feed;
    let (csrs, csr_writer) = reflector::store();
    let csr_events = reflector::reflector(
        csr_writer,
        watcher(
            Api::<CertificateSigningRequest>::all(client),
            watcher::Config::default(),
        )
        .default_backoff()
        .modify(project_csr),
    )
    .touched_objects();
    let controller = Controller::for_shared_stream(changes, store.clone());
    let config = kit::config(&shared);
    // The Machine store is filled already (`when_ready`); a second waiter on it could leave the
    // controller's own wait unwoken.
    let stores_ready = {
        let csrs = csrs.clone();
        StoresReady::spawn(
            async move { nodes_filled.await && csrs.wait_until_ready().await.is_ok() },
        )
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
    let results = controller
        .watches_shared_stream(node_changes, move |node| {
            machines_of_node(&node, &for_nodes)
        })
        .watches_stream(csr_events, move |csr| machines_of_csr(&csr, &store))
        .with_config(config)
        .run(reconcile, error_policy, context);
    KIT.run(results).await;
}

/// A CSR as the join reads it: the request, signer, requester, usages and conditions; not the
/// issued certificate nor the managed fields.
fn project_csr(csr: &mut CertificateSigningRequest) {
    csr.managed_fields_mut().clear();
    if let Some(status) = csr.status.as_mut() {
        status.certificate = None;
    }
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

async fn reconcile(guarded: Arc<GuardedMachine>, context: Arc<Context>) -> Result<Action, Error> {
    KIT.reconcile(&context.shared, &guarded, async |machine| {
        reconcile_machine(machine, &context).await
    })
    .await
}

fn error_policy(guarded: Arc<GuardedMachine>, error: &Error, context: Arc<Context>) -> Action {
    KIT.retry(&context.shared, guarded.as_ref(), error)
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
        let spec = self.shared.settings.spec_reader.read(machine);
        let environment = match environment(&self.shared, machine, &spec).await {
            Ok(environment) => environment,
            Err(error) => {
                tracing::debug!(machine = %machine.name_any(), %error, "no Prism connection for the Node IP check");
                return None;
            }
        };
        let connection = environment.connection;
        let wanted = NameClause::of(machine);
        let snapshot = match connection
            .inventory
            .snapshot(connection.client(), &wanted)
            .await
        {
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
        // A Machine being replaced or gone is no stuck join any more.
        context.shared.metrics.windows_join(
            &machine.namespace().unwrap_or_default(),
            &machine.name_any(),
            None,
        );
        return Ok(Action::await_change());
    }
    let key = key_of(machine);
    // Decisions on half-filled stores would report stages and problems that are not there.
    if !context.stores_ready.is_ready() {
        return Ok(Action::requeue(STORES_NOT_READY_RETRY));
    }
    let status = match machine.provider_status() {
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
    let previous = recorded_condition(&status);
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
    let Some(decision) = decide(&input, &now) else {
        return Ok(Action::await_change());
    };

    let api: Api<Machine> = Api::namespaced(
        context.shared.client.clone(),
        &machine.namespace().unwrap_or_default(),
    );
    context.shared.metrics.windows_join(
        &machine.namespace().unwrap_or_default(),
        &machine.name_any(),
        Some(decision.state.reason),
    );
    let resource_version = machine.metadata.resource_version.as_deref();
    if let Some(patch) = condition_patch(&status, &decision.condition, resource_version) {
        let updated = match write_status(&api, &machine.name_any(), &key, &patch).await? {
            Written::Updated(updated) => updated,
            Written::Conflict => return Ok(Action::requeue(CONFLICT_RETRY)),
        };
        let state = &decision.state;
        tracing::info!(machine = %key, reason = state.reason, message = %state.message, "WindowsJoin");
        if let Some(event) = &decision.event {
            context
                .shared
                .event(&updated, event.warning, event.reason, event.note.clone())
                .await;
        }
    }
    Ok(Action::requeue(decision.next_look(
        settings.running_interval,
        settings.requeue_interval,
    )))
}

/// How a status write ended.
enum Written {
    Updated(Box<Machine>),
    /// Another writer changed the Machine since the version the patch named (409).
    Conflict,
}

async fn write_status(
    api: &Api<Machine>,
    name: &str,
    key: &str,
    patch: &Value,
) -> Result<Written, Error> {
    match api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        Ok(updated) => Ok(Written::Updated(Box::new(updated))),
        Err(kube::Error::Api(status)) if status.code == 409 => {
            tracing::debug!(machine = %key, "the Machine changed meanwhile; looking again");
            Ok(Written::Conflict)
        }
        Err(error) => Err(Error::kube(format!("patch status of Machine {key}"), error)),
    }
}

#[cfg(test)]
mod tests {
    use crate::api::ProviderCondition;
    use kube::api::PostParams;
    use serde_json::json;

    use super::*;
    use crate::plan::machine::status::{StatusUpdate, provider_condition, status_patch};
    use crate::plan::windows_join::CONDITION;

    const NS: &str = "openshift-machine-api";

    fn at(text: &str) -> Time {
        Time(text.parse().unwrap())
    }

    fn join(reason: &str, ok: bool, when: &str) -> ProviderCondition {
        provider_condition(CONDITION, ok, reason, format!("stage {reason}"), &at(when))
    }

    /// kube-sim with the Machine CRD and one Machine whose providerStatus has a VM and the
    /// Machine controller's `MachineCreation` condition.
    async fn machine_on_server() -> (kube_sim::RunningKubeSim, Api<Machine>, Machine) {
        let sim = kube_sim::KubeSim::start(kube_sim::Config {
            namespaces: vec![NS.to_owned()],
            ..kube_sim::Config::default()
        })
        .await
        .unwrap();
        let crd = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../manifests/crds/machine.openshift.io_machines.yaml"
        );
        let text = std::fs::read_to_string(crd).unwrap();
        for document in serde_saphyr::from_multiple::<Value>(&text).unwrap() {
            if !document.is_null() {
                sim.create(document).unwrap();
            }
        }
        let api: Api<Machine> = Api::namespaced(sim.client().unwrap(), NS);
        let machine: Machine = serde_json::from_value(json!({
            "apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
            "metadata": {"name": "win-1", "namespace": NS},
            "spec": {},
        }))
        .unwrap();
        api.create(&PostParams::default(), &machine).await.unwrap();
        let status = json!({"status": {"phase": "Provisioned", "providerStatus": {
            "vmUUID": "0d2d9c8e-4d2b-4b4f-8d53-7a1f3c2f8a11",
            "conditions": [provider_condition(
                "MachineCreation", true, "MachineCreationSucceeded", "created", &at("2026-12-01T10:00:00Z"),
            )],
        }}});
        let machine = api
            .patch_status("win-1", &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap();
        (sim, api, machine)
    }

    /// The Machine controller's write of one more provider condition, from `machine` as its
    /// cache had it.
    fn machine_controller_patch(machine: &Machine, reason: &str) -> Value {
        let mut status = machine.provider_status().unwrap();
        status.set_condition(provider_condition(
            "MachineUpdate",
            true,
            reason,
            "updated",
            &at("2026-12-01T10:05:00Z"),
        ));
        let update = StatusUpdate {
            provider_status: Some(status),
            ..StatusUpdate::default()
        };
        status_patch(machine, &update, &at("2026-12-01T10:05:00Z")).unwrap()
    }

    #[tokio::test]
    async fn the_join_condition_never_conflicts_with_the_machine_controllers_writes() {
        let (sim, api, seen) = machine_on_server().await;
        // Both writers start from the same version: the Machine controller writes first.
        api.patch_status(
            "win-1",
            &PatchParams::default(),
            &Patch::Merge(&machine_controller_patch(&seen, "Updated")),
        )
        .await
        .unwrap();
        let condition = join("VMCreated", false, "2026-12-01T10:06:00Z");
        let status = seen.provider_status().unwrap();
        // Written into the Machine controller's list, as before, it would be refused: the list
        // is sent whole, so the patch must name the version it was merged into.
        let mut in_the_list = status.clone();
        in_the_list.set_condition(condition.clone());
        let update = StatusUpdate {
            provider_status: Some(in_the_list),
            ..StatusUpdate::default()
        };
        let racing = status_patch(&seen, &update, &at("2026-12-01T10:06:00Z")).unwrap();
        assert!(matches!(
            write_status(&api, "win-1", "ns/win-1", &racing)
                .await
                .unwrap(),
            Written::Conflict
        ));
        let patch = condition_patch(
            &status,
            &condition,
            seen.metadata.resource_version.as_deref(),
        )
        .unwrap();
        let written = match write_status(&api, "win-1", "ns/win-1", &patch)
            .await
            .unwrap()
        {
            Written::Updated(machine) => *machine,
            Written::Conflict => panic!("the join condition lost a race it has no part in"),
        };
        let status = written.provider_status().unwrap();
        assert_eq!(recorded_condition(&status), Some(condition.clone()));
        let types: Vec<&str> = status.conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, ["MachineCreation", "MachineUpdate"]);

        // The Machine controller's next write, from the version with the join condition, leaves
        // the join's key alone; so does one from an older version (refused by its own
        // resourceVersion, never taking the condition away).
        let next = machine_controller_patch(&written, "UpdatedAgain");
        assert!(next["status"]["providerStatus"].get(STATUS_FIELD).is_none());
        let stale = machine_controller_patch(&seen, "UpdatedAgain");
        assert!(
            stale["status"]["providerStatus"]
                .get(STATUS_FIELD)
                .is_none()
        );
        let after = api
            .patch_status("win-1", &PatchParams::default(), &Patch::Merge(&next))
            .await
            .unwrap();
        assert_eq!(
            recorded_condition(&after.provider_status().unwrap()),
            Some(condition)
        );
        sim.shutdown().await;
    }
}
