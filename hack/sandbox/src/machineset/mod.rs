//! The machine-api-operator's MachineSet replica controller: keeps `spec.replicas` Machines per
//! MachineSet and reports them in its status (openshift/machine-api-operator
//! `pkg/controller/machineset/controller.go`, `status.go`; the rules themselves are in [`policy`]).
//!
//! Like the operator it watches MachineSets, the Machines they control (through the controller
//! reference) and orphan Machines (through the selectors: `MachineToMachineSets`); on each
//! reconcile (`reconcile`) it validates the set, lists the namespace's Machines, adopts matching
//! orphans, creates Machines from the template or deletes the surplus by the delete policy
//! (`syncReplicas`), and writes `status` (`updateMachineSetStatus`: replicas, fully labelled,
//! ready and available replicas, `observedGeneration`, and `labelSelector` for the scale
//! subresource), requeueing after `minReadySeconds` while Ready Machines are not yet available.
//!
//! Not simulated: the operator's validation webhook (defaulting of the selector), its
//! 10-second wait for the cache to see its own creates and deletes (this controller lists live,
//! so it needs none), events, and the `authoritativeAPI` migration to Cluster API (behind the
//! `MachineAPIMigration` feature gate, off by default).

pub mod policy;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, PatchOperation, TestOperation};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::actor::ActorHandle;
use crate::machine_api::{Machine, MachineSet};
use policy::InvalidSet;
pub use policy::{DELETE_MACHINE_ANNOTATION, DeletePolicy, OLD_DELETE_MACHINE_ANNOTATION};

/// Settings of the replica controller.
#[derive(Clone, Debug)]
pub struct MachineSetControllerConfig {
    /// Namespace of the MachineSets and Machines (the operator watches `openshift-machine-api`).
    pub namespace: String,
    /// Delay before a failed reconcile is retried.
    pub retry_after: Duration,
}

impl Default for MachineSetControllerConfig {
    fn default() -> Self {
        Self {
            namespace: crate::MACHINE_API_NAMESPACE.to_owned(),
            retry_after: Duration::from_secs(1),
        }
    }
}

/// Why a MachineSet could not be reconciled.
#[derive(Debug, thiserror::Error)]
pub enum MachineSetError {
    #[error("MachineSet {set}: spec.selector: empty selector is not valid for MachineSet")]
    EmptySelector { set: String },
    #[error("MachineSet {set}: spec.selector: invalid label selector: {message}")]
    Selector { set: String, message: String },
    #[error(
        "MachineSet {set}: spec.template.metadata.labels: `selector` does not match template `labels`, so the set could never see its own Machines"
    )]
    SelectorMismatch { set: String },
    #[error("MachineSet {set} has no metadata.uid to name as the controller of its Machines")]
    NoUid { set: String },
    #[error("MachineSet {set}: cannot encode a patch: {message}")]
    Encode { set: String, message: String },
    #[error("MachineSet {set}: spec.replicas is not set")]
    NoReplicas { set: String },
    #[error(
        "MachineSet {set}: spec.deletePolicy {policy:?} is not one of Random, Newest or Oldest"
    )]
    DeletePolicy { set: String, policy: String },
    #[error("MachineSet {set}: {action}: {source}")]
    Api {
        set: String,
        action: String,
        source: Box<kube::Error>,
    },
}

struct Context {
    machines: Api<Machine>,
    machine_sets: Api<MachineSet>,
    nodes: Api<Node>,
    config: MachineSetControllerConfig,
}

fn api_error(set: &str, action: impl Into<String>) -> impl FnOnce(kube::Error) -> MachineSetError {
    let (set, action) = (set.to_owned(), action.into());
    move |source| MachineSetError::Api {
        set,
        action,
        source: Box::new(source),
    }
}

/// Starts the replica controller.
pub fn start(client: Client, config: MachineSetControllerConfig) -> ActorHandle {
    ActorHandle::spawn("machineset-controller", move |cancel| async move {
        let namespace = config.namespace.clone();
        let machine_sets: Api<MachineSet> = Api::namespaced(client.clone(), &namespace);
        let machines: Api<Machine> = Api::namespaced(client.clone(), &namespace);
        let context = Arc::new(Context {
            machines: machines.clone(),
            machine_sets: machine_sets.clone(),
            nodes: Api::all(client),
            config,
        });
        let controller = Controller::new(machine_sets, watcher::Config::default());
        let sets = controller.store();
        controller
            .owns(machines.clone(), watcher::Config::default())
            // Orphans have no controller reference: map them to every set whose selector matches.
            .watches(machines, watcher::Config::default(), move |machine| {
                sets.state()
                    .iter()
                    .filter(|set| policy::maps_to_set(&machine, set))
                    .map(|set| ObjectRef::from_obj(set.as_ref()))
                    .collect::<Vec<_>>()
            })
            .graceful_shutdown_on(async move { cancel.cancelled().await })
            .run(reconcile, error_policy, context)
            .for_each(|result| async move {
                if let Err(error) = result {
                    tracing::debug!(%error, "machineset controller");
                }
            })
            .await;
    })
}

fn error_policy(set: Arc<MachineSet>, error: &MachineSetError, context: Arc<Context>) -> Action {
    tracing::warn!(machineset = %set.name_any(), %error, "reconcile failed");
    Action::requeue(context.config.retry_after)
}

async fn reconcile(set: Arc<MachineSet>, context: Arc<Context>) -> Result<Action, MachineSetError> {
    if set.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let name = set.name_any();
    policy::validate(&set).map_err(|invalid| match invalid {
        InvalidSet::EmptySelector => MachineSetError::EmptySelector { set: name.clone() },
        InvalidSet::BadSelector(message) => MachineSetError::Selector {
            set: name.clone(),
            message,
        },
        InvalidSet::SelectorMismatch => MachineSetError::SelectorMismatch { set: name.clone() },
    })?;

    let all = context
        .machines
        .list(&ListParams::default())
        .await
        .map_err(api_error(&name, "list Machines"))?;
    let mut machines = Vec::new();
    for machine in all.items {
        if policy::is_excluded(&set, &machine) {
            continue;
        }
        if policy::is_orphan(&machine) {
            match adopt(&context, &set, &machine).await {
                Ok(adopted) => machines.push(adopted),
                Err(error) => {
                    tracing::warn!(machineset = %name, machine = %machine.name_any(), %error, "cannot adopt orphan Machine");
                }
            }
            continue;
        }
        machines.push(machine);
    }
    machines.sort_by_key(|m| m.name_any());

    let synced = sync_replicas(&context, &set, &machines).await;
    let now = Timestamp::now();
    let nodes: BTreeMap<String, Node> = context
        .nodes
        .list(&ListParams::default())
        .await
        .map_err(api_error(&name, "list Nodes"))?
        .items
        .into_iter()
        .map(|n| (n.name_any(), n))
        .collect();
    let counts = policy::count_replicas(&set, &machines, &nodes, now);
    let selector = policy::format_label_selector(&set.spec.selector);
    write_status(&context, &set, counts, &selector).await?;
    synced?;

    let min_ready = set.spec.min_ready_seconds;
    let desired = set.spec.replicas.unwrap_or(0);
    if min_ready > 0 && counts.ready == desired && counts.available != desired {
        // Nothing else changes when a Ready Node turns available: look again then.
        return Ok(Action::requeue(Duration::from_secs(
            u64::try_from(min_ready).unwrap_or(1),
        )));
    }
    Ok(Action::await_change())
}

async fn adopt(
    context: &Context,
    set: &MachineSet,
    machine: &Machine,
) -> Result<Machine, MachineSetError> {
    let name = set.name_any();
    let owner =
        policy::controller_ref(set).ok_or_else(|| MachineSetError::NoUid { set: name.clone() })?;
    let mut owners = machine
        .metadata
        .owner_references
        .clone()
        .unwrap_or_default();
    owners.push(owner);
    let owners = serde_json::to_value(owners).map_err(|e| MachineSetError::Encode {
        set: name.clone(),
        message: e.to_string(),
    })?;
    // The test on resourceVersion makes the adoption fail rather than race another writer.
    let patch = json_patch::Patch(vec![
        PatchOperation::Test(TestOperation {
            path: PointerBuf::from_tokens(["metadata", "resourceVersion"]),
            value: json!(machine.resource_version()),
        }),
        PatchOperation::Add(AddOperation {
            path: PointerBuf::from_tokens(["metadata", "ownerReferences"]),
            value: owners,
        }),
    ]);
    let adopted = context
        .machines
        .patch(
            &machine.name_any(),
            &PatchParams::default(),
            &Patch::<()>::Json(patch),
        )
        .await
        .map_err(api_error(
            &name,
            format!("adopt Machine {}", machine.name_any()),
        ))?;
    tracing::info!(machineset = %name, machine = %machine.name_any(), "adopted orphan Machine");
    Ok(adopted)
}

async fn sync_replicas(
    context: &Context,
    set: &MachineSet,
    machines: &[Machine],
) -> Result<(), MachineSetError> {
    let name = set.name_any();
    let desired = set
        .spec
        .replicas
        .ok_or_else(|| MachineSetError::NoReplicas { set: name.clone() })?;
    let desired = usize::try_from(desired).unwrap_or(0);
    if machines.len() < desired {
        let missing = desired - machines.len();
        tracing::info!(machineset = %name, have = machines.len(), want = desired, "creating {missing} Machine(s)");
        let template = policy::new_machine(set);
        let mut first_error = None;
        for _ in 0..missing {
            match context
                .machines
                .create(&PostParams::default(), &template)
                .await
            {
                Ok(created) => {
                    tracing::info!(machineset = %name, machine = %created.name_any(), "created Machine");
                }
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        return first_error.map_or(Ok(()), |e| Err(api_error(&name, "create Machine")(e)));
    }
    if machines.len() > desired {
        let policy = DeletePolicy::parse(&set.spec.delete_policy).map_err(|policy| {
            MachineSetError::DeletePolicy {
                set: name.clone(),
                policy,
            }
        })?;
        let victims = policy::machines_to_delete(
            machines,
            machines.len() - desired,
            policy,
            Timestamp::now(),
        );
        let mut first_error = None;
        for machine in victims {
            match context
                .machines
                .delete(&machine.name_any(), &DeleteParams::default())
                .await
            {
                Ok(_) => {
                    tracing::info!(machineset = %name, machine = %machine.name_any(), ?policy, "deleted Machine");
                }
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        return first_error.map_or(Ok(()), |e| Err(api_error(&name, "delete Machine")(e)));
    }
    Ok(())
}

async fn write_status(
    context: &Context,
    set: &MachineSet,
    counts: policy::ReplicaCounts,
    selector: &str,
) -> Result<(), MachineSetError> {
    let generation = set.metadata.generation.unwrap_or(0);
    let current = set.status.clone().unwrap_or_default();
    // `status.go`, `updateMachineSetStatus`: nothing to write in the steady state.
    if current.replicas == counts.replicas
        && current.fully_labeled_replicas == counts.fully_labeled
        && current.ready_replicas == counts.ready
        && current.available_replicas == counts.available
        && current.label_selector == selector
        && current.observed_generation == generation
    {
        return Ok(());
    }
    let patch = json!({"status": {
        "replicas": counts.replicas,
        "fullyLabeledReplicas": counts.fully_labeled,
        "readyReplicas": counts.ready,
        "availableReplicas": counts.available,
        "observedGeneration": generation,
        "labelSelector": selector,
    }});
    context
        .machine_sets
        .patch_status(
            &set.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await
        .map_err(api_error(&set.name_any(), "patch status"))?;
    Ok(())
}
