//! kube-sim's start: the in-process API server with the machine-api-operator's webhooks, the
//! CRDs, and the cluster-scoped objects (Infrastructure, Networks) written into its store.

use std::path::Path;

use kube_sim::{KubeSim, RunningKubeSim};
use serde_json::json;

use super::options::WorldOptions;
use super::{EXCLUDED_CIDRS, WorldError, io_error};
use crate::manifests;
use crate::writes::CONTROLLER_USER;

/// kube-sim with the machine-api-operator's webhooks, its CRDs and the sandbox's, an admin
/// kubeconfig at `kubeconfig` and the controller's (user `nutanix-machine-controller`) at
/// `controller_kubeconfig`.
pub(super) async fn start_kube_sim(
    options: &WorldOptions,
    kubeconfig: &Path,
    controller_kubeconfig: &Path,
) -> Result<RunningKubeSim, WorldError> {
    let sim = KubeSim::start(kube_sim::Config {
        namespaces: vec![options.namespace.clone()],
        // An OpenShift cluster on Nutanix: every Machine and MachineSet goes through the
        // machine-api-operator's defaulting when it is created.
        machine_api_webhooks: Some(kube_sim::webhooks::MachineApiWebhooks {
            infrastructure_name: manifests::INFRASTRUCTURE_ID.to_owned(),
        }),
        ..kube_sim::Config::default()
    })
    .await?;
    sim.write_kubeconfig(kubeconfig)?;
    std::fs::write(
        controller_kubeconfig,
        sim.kubeconfig_yaml().replace(
            kube_sim::KUBECONFIG_TOKEN,
            &format!("user:{CONTROLLER_USER}"),
        ),
    )
    .map_err(io_error(format!(
        "write {}",
        controller_kubeconfig.display()
    )))?;
    for crd in manifests::objects(&manifests::MACHINE_API_CRDS)?
        .into_iter()
        .chain(manifests::objects(&manifests::SANDBOX_CRDS)?)
        .chain(manifests::objects(&manifests::IPAM_CRDS)?)
    {
        let name = crd["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        sim.create(crd).map_err(|e| WorldError::Store {
            what: format!("create CRD {name}"),
            message: e.to_string(),
        })?;
    }
    Ok(sim)
}

pub(super) fn create_infrastructure(
    sim: &RunningKubeSim,
    prism_port: u16,
) -> Result<(), WorldError> {
    let store_error = |what: &str| {
        let what = what.to_owned();
        move |e: kube_sim::ApiError| WorldError::Store {
            what,
            message: e.to_string(),
        }
    };
    sim.create(json!({
        "apiVersion": "config.openshift.io/v1", "kind": "Infrastructure",
        "metadata": {"name": "cluster"},
        "spec": {"platformSpec": {"type": "Nutanix", "nutanix": {
            "prismCentral": {"address": "127.0.0.1", "port": prism_port},
            "prismElements": [{"name": "pe-1", "endpoint": {"address": "127.0.0.1", "port": prism_port}}],
        }}},
    }))
    .map_err(store_error("create Infrastructure/cluster"))?;
    sim.set_status(
        "config.openshift.io",
        "infrastructures",
        "",
        "cluster",
        json!({
            "infrastructureName": manifests::INFRASTRUCTURE_ID,
            "platform": "Nutanix",
            "platformStatus": {"type": "Nutanix"},
        }),
    )
    .map_err(store_error("write Infrastructure/cluster status"))?;
    Ok(())
}

/// `Network.config.openshift.io/cluster` and `Network.operator.openshift.io/cluster` as an
/// OVN-Kubernetes cluster with the hybrid overlay that WMCO requires has them (openshift/api
/// `config/v1/types_network.go`, `operator/v1/types_network.go`; WMCO refuses a cluster without
/// `hybridClusterNetwork`, openshift/windows-machine-config-operator `pkg/cluster/config.go`):
/// the controller reads the networks whose addresses are never a Machine's from them.
pub(super) fn create_networks(sim: &RunningKubeSim) -> Result<(), WorldError> {
    let store_error = |what: &str| {
        let what = what.to_owned();
        move |e: kube_sim::ApiError| WorldError::Store {
            what,
            message: e.to_string(),
        }
    };
    let [cluster, service, hybrid] = EXCLUDED_CIDRS;
    let networks = json!({
        "clusterNetwork": [{"cidr": cluster, "hostPrefix": 23}],
        "serviceNetwork": [service],
        "networkType": "OVNKubernetes",
    });
    sim.create(json!({
        "apiVersion": "config.openshift.io/v1", "kind": "Network",
        "metadata": {"name": "cluster"},
        "spec": networks,
    }))
    .map_err(store_error("create Network.config.openshift.io/cluster"))?;
    sim.set_status("config.openshift.io", "networks", "", "cluster", networks)
        .map_err(store_error(
            "write Network.config.openshift.io/cluster status",
        ))?;
    sim.create(json!({
        "apiVersion": "operator.openshift.io/v1", "kind": "Network",
        "metadata": {"name": "cluster"},
        "spec": {"defaultNetwork": {"type": "OVNKubernetes", "ovnKubernetesConfig": {
            "hybridOverlayConfig": {"hybridClusterNetwork": [{"cidr": hybrid, "hostPrefix": 23}]}}}},
    }))
    .map_err(store_error("create Network.operator.openshift.io/cluster"))?;
    Ok(())
}
