//! The Kubernetes API the world runs on: kube-sim in process (the embedded default, with the
//! stand-ins for the machine-api-operator's MachineSet controller, nodelink and webhooks), or the
//! real control plane of [`crate::real_cluster`] (etcd, kube-apiserver, kube-controller-manager
//! and MAO's own `machineset`, `nodelink-controller` and `machine-healthcheck`), where our
//! controller runs under the ServiceAccount and roles of `manifests/rbac/`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DynamicObject, ListParams};
use kube::runtime::reflector::Store as Cache;
use kube::{Client, ResourceExt};
use kube_sim::{RunningKubeSim, Store};
use nutanix_machine_controller::api::{Machine, MachineSet};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{WorldError, api_error};
use crate::node_agent::KubeletIdentities;
use crate::real_cluster::{Binaries, ControlPlane, RealClusterError};

/// Which API server the world starts.
#[derive(Clone, Debug, Default)]
pub enum ControlPlaneChoice {
    /// kube-sim in process, with the machine-api-operator's stand-ins.
    #[default]
    KubeSim,
    /// The real control plane built by `hack/real-cluster/build.sh`.
    Real(Binaries),
}

/// The ServiceAccount our controller runs as on the real control plane (`manifests/rbac/`).
pub const CONTROLLER_SERVICE_ACCOUNT: &str = "nutanix-machine-controller";

/// `manifests/rbac/`, applied with kubectl as an administrator applies it (the sandbox is a
/// development tool run from the repository).
fn rbac_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../manifests/rbac")
}

/// The running API server.
pub(super) enum Cluster {
    Sim(RunningKubeSim),
    Real(Box<ControlPlane>),
}

impl From<RealClusterError> for WorldError {
    fn from(error: RealClusterError) -> Self {
        Self::RealCluster(Box::new(error))
    }
}

impl Cluster {
    /// Starts the real control plane, applies `manifests/rbac/` and writes the controller's
    /// kubeconfig (a TokenRequest token of its ServiceAccount) and an admin kubeconfig at
    /// `kubeconfig`.
    pub(super) async fn start_real(
        binaries: Binaries,
        work_dir: &Path,
        namespace: &str,
        infrastructure_name: &str,
        prism_port: u16,
        kubeconfig: &Path,
        controller_kubeconfig: &Path,
    ) -> Result<(Self, Client), WorldError> {
        let plane = ControlPlane::start(
            binaries,
            &work_dir.join("control-plane"),
            namespace,
            infrastructure_name,
            prism_port,
        )
        .await?;
        let client = plane.admin_client().await?;
        // The MachineAutoscaler CRD: the cluster-autoscaler-operator's, which has no real
        // counterpart here (its operator plays in `machine_autoscaler`).
        let autoscaler_crds =
            crate::manifests::objects(&[crate::manifests::MACHINE_AUTOSCALER_CRD])?;
        plane.add_crds(&client, autoscaler_crds).await?;
        // The in-cluster pool, whose controller is stood in for (`crate::ipam`); the IPAM kinds
        // themselves come with the control plane's CRDs, from the machine-api-operator's module
        // (hack/real-cluster/build.sh).
        let pool_crd = crate::manifests::objects(&crate::manifests::POOL_CRDS)?;
        plane.add_crds(&client, pool_crd).await?;
        plane.apply_kustomization(&rbac_dir()).await?;
        plane
            .write_service_account_kubeconfig(CONTROLLER_SERVICE_ACCOUNT, controller_kubeconfig)
            .await?;
        std::fs::copy(plane.admin_kubeconfig(), kubeconfig).map_err(|source| WorldError::Io {
            what: format!("copy the admin kubeconfig to {}", kubeconfig.display()),
            source,
        })?;
        let cluster = Self::Real(Box::new(plane));
        let client = cluster.actor_client("test").await?;
        Ok((cluster, client))
    }

    /// The client of a simulated actor: on kube-sim as the user `name` (its request log tells
    /// them apart), on the real control plane as `sandbox:<name>` (one of
    /// [`crate::real_cluster::STAND_IN_USERS`], impersonated: the audit log tells them apart).
    pub(super) async fn actor_client(&self, name: &str) -> Result<Client, WorldError> {
        match self {
            Self::Sim(sim) => client_as(sim, name),
            Self::Real(plane) => Ok(plane
                .impersonating_client(&format!("sandbox:{name}"))
                .await?),
        }
    }

    /// The kubelets' identities: the agent's own client on kube-sim; on the real control plane
    /// the machine-config-operator's node-bootstrapper token, then each Node's own certificate.
    pub(super) async fn kubelet_identities(&self) -> Result<KubeletIdentities, WorldError> {
        let Self::Real(plane) = self else {
            return Ok(KubeletIdentities::Agent);
        };
        Ok(KubeletIdentities::of_real_cluster(plane).await?)
    }

    pub(super) fn real(&self) -> Option<&ControlPlane> {
        match self {
            Self::Sim(_) => None,
            Self::Real(plane) => Some(plane),
        }
    }

    pub(super) fn sim(&self) -> Option<&RunningKubeSim> {
        match self {
            Self::Sim(sim) => Some(sim),
            Self::Real(_) => None,
        }
    }

    /// The API server's URL.
    pub(super) fn url(&self) -> String {
        match self {
            Self::Sim(sim) => sim.url(),
            Self::Real(plane) => plane.url().to_owned(),
        }
    }

    /// Fails when a process of the real control plane has exited.
    pub(super) fn check_running(&self) -> Result<(), WorldError> {
        match self {
            Self::Sim(_) => Ok(()),
            Self::Real(plane) => Ok(plane.check_running()?),
        }
    }

    pub(super) async fn shutdown(self) {
        match self {
            Self::Sim(sim) => sim.shutdown().await,
            // Every process is killed on drop.
            Self::Real(plane) => drop(plane),
        }
    }
}

/// Where snapshots read Machines, MachineSets and Nodes: kube-sim's store directly, or caches
/// kept by watches of the real API server (which may lag it by a watch event).
pub(super) enum Objects {
    Store(Arc<Store>),
    Watched {
        machine_sets: Cache<MachineSet>,
        machines: Cache<Machine>,
        nodes: Cache<Node>,
        /// Stops the watches when the world goes.
        _stop: DropGuard,
    },
}

/// Cancels its token when dropped.
pub(super) struct DropGuard(CancellationToken);

impl Drop for DropGuard {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// How long the first list of each watch may take.
const CACHE_READY: Duration = Duration::from_secs(60);

impl Objects {
    pub(super) async fn watch(client: &Client, namespace: &str) -> Result<Self, WorldError> {
        let stop = CancellationToken::new();
        let machine_sets = crate::actor::cache(
            Api::<MachineSet>::namespaced(client.clone(), namespace),
            stop.clone(),
        );
        let machines = crate::actor::cache(
            Api::<Machine>::namespaced(client.clone(), namespace),
            stop.clone(),
        );
        let nodes = crate::actor::cache(Api::<Node>::all(client.clone()), stop.clone());
        let ready = async {
            machine_sets.wait_until_ready().await?;
            machines.wait_until_ready().await?;
            nodes.wait_until_ready().await
        };
        match tokio::time::timeout(CACHE_READY, ready).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) | Err(_) => {
                return Err(WorldError::Timeout {
                    what: "the first list of Machines, MachineSets and Nodes".to_owned(),
                    after: CACHE_READY,
                    detail: "a watch of the real API server never delivered its list".to_owned(),
                    state: String::new(),
                });
            }
        }
        Ok(Self::Watched {
            machine_sets,
            machines,
            nodes,
            _stop: DropGuard(stop),
        })
    }

    pub(super) fn machine_sets(&self) -> Vec<MachineSet> {
        match self {
            Self::Store(store) => typed(list_values(store, GROUP, "machinesets")),
            Self::Watched { machine_sets, .. } => cloned(machine_sets),
        }
    }

    pub(super) fn machines(&self) -> Vec<Machine> {
        match self {
            Self::Store(store) => typed(list_values(store, GROUP, "machines")),
            Self::Watched { machines, .. } => cloned(machines),
        }
    }

    pub(super) fn nodes(&self) -> Vec<Node> {
        match self {
            Self::Store(store) => typed(list_values(store, "", "nodes")),
            Self::Watched { nodes, .. } => cloned(nodes),
        }
    }
}

const GROUP: &str = "machine.openshift.io";

/// The cache's objects, by name (a store's list order).
fn cloned<K: kube::Resource + Clone>(cache: &Cache<K>) -> Vec<K>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    let mut objects: Vec<K> = cache.state().iter().map(|o| (**o).clone()).collect();
    objects.sort_by_key(|o| o.name_any());
    objects
}

fn list_values(store: &Store, group: &str, plural: &str) -> Vec<Value> {
    store
        .resource(group, plural)
        .and_then(|def| {
            store
                .list(&def, &kube_sim::store::ListParams::default())
                .ok()
        })
        .map(|result| {
            result
                .items
                .into_iter()
                .map(|s| (*s.value).clone())
                .collect()
        })
        .unwrap_or_default()
}

fn typed<T: serde::de::DeserializeOwned>(values: Vec<Value>) -> Vec<T> {
    values
        .into_iter()
        .filter_map(|v| serde_json::from_value(v).ok())
        .collect()
}

/// Every write so far, tallied.
pub(super) fn writes(cluster: &Cluster) -> Result<crate::writes::Tally, WorldError> {
    match cluster {
        Cluster::Sim(sim) => Ok(crate::writes::tally_kube_sim(&sim.requests())),
        Cluster::Real(plane) => {
            let path = plane.audit_log();
            let text = std::fs::read_to_string(&path).map_err(|source| WorldError::Io {
                what: format!("read {}", path.display()),
                source,
            })?;
            Ok(crate::writes::tally_audit_log(&text)?)
        }
    }
}

/// Every Event (core/v1, where the API server also shows events.k8s.io/v1 ones).
pub(super) async fn events(cluster: &Cluster, client: &Client) -> Result<Vec<Value>, WorldError> {
    if let Cluster::Sim(sim) = cluster {
        return Ok(sim.list("", "events").unwrap_or_default());
    }
    let resource = kube::core::ApiResource::erase::<k8s_openapi::api::core::v1::Event>(&());
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let list = api
        .list(&ListParams::default())
        .await
        .map_err(api_error("list Events"))?;
    Ok(list
        .items
        .into_iter()
        .filter_map(|event| serde_json::to_value(event).ok())
        .collect())
}

fn client_as(sim: &RunningKubeSim, user: &str) -> Result<Client, WorldError> {
    let mut config = sim.kube_config();
    config.auth_info.token = Some(format!("user:{user}").into());
    Client::try_from(config).map_err(api_error(format!("kube client for {user}")))
}
