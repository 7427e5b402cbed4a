//! kube-sim's start: the in-process API server with the machine-api-operator's webhooks and the
//! CRDs (the cluster's objects come through its API, [`crate::cluster_objects`]).

use std::path::Path;

use kube_sim::{KubeSim, RunningKubeSim};

use super::options::WorldOptions;
use super::{WorldError, io_error};
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
