//! What an OpenShift cluster with WMCO installed has besides the machine API, for `doctor` to
//! find on a healthy sandbox: `ClusterVersion/version`, WMCO's namespace, its
//! ClusterServiceVersion and its `cloud-private-key` Secret (WMCO's install guide,
//! `../shared/seeds/004_*`: the Namespace, `oc get csv` showing the CSV `Succeeded`, `oc create
//! secret generic cloud-private-key --from-file=private-key.pem=...`).

use base64::Engine;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::Client;
use kube::api::{Api, PostParams};
use kube_sim::RunningKubeSim;
use serde_json::json;

use super::{WorldError, api_error};

/// The OpenShift release the sandbox plays: 4.20, whose Kubernetes (1.33) the provider's
/// `k8s-openapi` feature targets (../shared/DESIGN.md).
pub const OPENSHIFT_VERSION: &str = "4.20.0";
/// WMCO's release for it (WMCO's y-streams follow OpenShift's: 10.N for 4.N).
pub const WMCO_VERSION: &str = "10.20.0";
/// WMCO's namespace.
pub const WMCO_NAMESPACE: &str = "openshift-windows-machine-config-operator";
/// WMCO's ClusterServiceVersion, named as OLM names it (`<package>.v<version>`).
pub fn wmco_csv_name() -> String {
    format!("windows-machine-config-operator.v{WMCO_VERSION}")
}

/// `ClusterVersion/version` and WMCO's ClusterServiceVersion (in the namespace
/// [`write_cloud_private_key`] made): kinds only kube-sim serves here (`hack/crds/`).
pub(super) fn create_cluster_version_and_wmco(sim: &RunningKubeSim) -> Result<(), WorldError> {
    let store_error = |what: &str| {
        let what = what.to_owned();
        move |e: kube_sim::ApiError| WorldError::Store {
            what,
            message: e.to_string(),
        }
    };
    sim.create(json!({
        "apiVersion": "config.openshift.io/v1", "kind": "ClusterVersion",
        "metadata": {"name": "version"},
        "spec": {"channel": "stable-4.20"},
    }))
    .map_err(store_error("create ClusterVersion/version"))?;
    sim.set_status(
        "config.openshift.io",
        "clusterversions",
        "",
        "version",
        json!({"desired": {"version": OPENSHIFT_VERSION}}),
    )
    .map_err(store_error("write ClusterVersion/version status"))?;
    let name = wmco_csv_name();
    sim.create(json!({
        "apiVersion": "operators.coreos.com/v1alpha1", "kind": "ClusterServiceVersion",
        "metadata": {"name": name, "namespace": WMCO_NAMESPACE},
        "spec": {"displayName": "Windows Machine Config Operator", "version": WMCO_VERSION},
    }))
    .map_err(store_error("create WMCO's ClusterServiceVersion"))?;
    sim.set_status(
        "operators.coreos.com",
        "clusterserviceversions",
        WMCO_NAMESPACE,
        &name,
        json!({"phase": "Succeeded"}),
    )
    .map_err(store_error("write WMCO's ClusterServiceVersion status"))?;
    Ok(())
}

/// WMCO's `cloud-private-key` Secret. Its content is a stand-in: the sandbox's WMCO signs in
/// with no key (the private half of its public key was never kept), and nothing reads it but
/// `doctor`, which looks only for its key `private-key.pem`.
pub(super) async fn write_cloud_private_key(client: &Client) -> Result<(), WorldError> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if namespaces
        .get_opt(WMCO_NAMESPACE)
        .await
        .map_err(api_error("read the WMCO namespace"))?
        .is_none()
    {
        let namespace: Namespace =
            serde_json::from_value(json!({"metadata": {"name": WMCO_NAMESPACE}})).map_err(|e| {
                WorldError::Store {
                    what: "build the WMCO namespace".to_owned(),
                    message: e.to_string(),
                }
            })?;
        namespaces
            .create(&PostParams::default(), &namespace)
            .await
            .map_err(api_error("create the WMCO namespace"))?;
    }
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "cloud-private-key", "namespace": WMCO_NAMESPACE},
        "type": "Opaque",
        "data": {"private-key.pem": base64::engine::general_purpose::STANDARD
            .encode("sandbox stand-in: no key is used")},
    }))
    .map_err(|e| WorldError::Store {
        what: "build Secret cloud-private-key".to_owned(),
        message: e.to_string(),
    })?;
    Api::<Secret>::namespaced(client.clone(), WMCO_NAMESPACE)
        .create(&PostParams::default(), &secret)
        .await
        .map_err(api_error("create Secret cloud-private-key"))?;
    Ok(())
}
