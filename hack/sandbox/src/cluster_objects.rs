//! The cluster-scoped objects an installed OpenShift cluster on Nutanix has before any Machine,
//! as the installer and its operators leave them, applied through the API the same way on both
//! control planes (kube-sim and the real one): one list, one path, so that the two worlds start
//! from the same objects. What only the real control plane has (its RBAC: kube-sim authorizes
//! nothing) stays in `real_cluster`.

use kube::Client;
use kube::api::{Api, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::discovery::Scope;
use serde_json::{Value, json};

/// The OpenShift release the sandbox plays: 4.20, whose Kubernetes (1.33) the provider's
/// `k8s-openapi` feature targets (../shared/DESIGN.md).
pub const OPENSHIFT_VERSION: &str = "4.20.0";
/// WMCO's release for it (WMCO's y-streams follow OpenShift's: 10.N for 4.N).
pub const WMCO_VERSION: &str = "10.20.0";
/// WMCO's namespace.
pub const WMCO_NAMESPACE: &str = "openshift-windows-machine-config-operator";
/// The networks whose addresses the controller never reports: the installer's default cluster
/// and service networks, and OVN-Kubernetes' hybrid overlay network for Windows nodes
/// (prism-mock's default).
pub const EXCLUDED_CIDRS: [&str; 3] = ["10.128.0.0/14", "172.30.0.0/16", "10.132.0.0/14"];

/// WMCO's ClusterServiceVersion, named as OLM names it (`<package>.v<version>`).
pub fn wmco_csv_name() -> String {
    format!("windows-machine-config-operator.v{WMCO_VERSION}")
}

/// One object to apply, and the status its operator writes.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterObject {
    pub object: Value,
    /// Written through the status subresource after the object is applied (the kinds whose CRD
    /// has one; a kind without one carries its status in `object`).
    pub status: Option<Value>,
}

/// Why an object could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum SeedError {
    #[error("discover {api_version} {kind}: {source}")]
    Discover {
        api_version: String,
        kind: String,
        source: kube::Error,
    },
    #[error("build {kind}/{name}: {source}")]
    Build {
        kind: String,
        name: String,
        source: serde_json::Error,
    },
    #[error("apply {kind}/{name}: {source}")]
    Apply {
        kind: String,
        name: String,
        source: kube::Error,
    },
    #[error("write the status of {kind}/{name}: {source}")]
    Status {
        kind: String,
        name: String,
        source: kube::Error,
    },
}

/// The objects of a cluster named `infrastructure_name` whose Prism Central (and Prism Element)
/// answer on `127.0.0.1:prism_port`, with the machine API in `namespace`.
pub fn openshift_on_nutanix(
    namespace: &str,
    infrastructure_name: &str,
    prism_port: u16,
) -> Vec<ClusterObject> {
    let [cluster_network, service_network, hybrid_network] = EXCLUDED_CIDRS;
    let networks = json!({
        "clusterNetwork": [{"cidr": cluster_network, "hostPrefix": 23}],
        "serviceNetwork": [service_network],
        "networkType": "OVNKubernetes",
    });
    vec![
        plain(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})),
        // `Infrastructure/cluster` as the installer leaves it on Nutanix: the spec's Prism
        // Central and Prism Element; the status (a subresource in openshift/api's CRD) with the
        // infra ID the machine API's webhooks and the controller read.
        ClusterObject {
            object: json!({
                "apiVersion": "config.openshift.io/v1", "kind": "Infrastructure",
                "metadata": {"name": "cluster"},
                "spec": {"platformSpec": {"type": "Nutanix", "nutanix": {
                    "prismCentral": {"address": "127.0.0.1", "port": prism_port},
                    "prismElements": [{"name": "pe-1",
                        "endpoint": {"address": "127.0.0.1", "port": prism_port}}],
                }}},
            }),
            status: Some(json!({
                "infrastructureName": infrastructure_name,
                "platform": "Nutanix",
                "platformStatus": {"type": "Nutanix"},
                "controlPlaneTopology": "HighlyAvailable",
                "infrastructureTopology": "HighlyAvailable",
                "apiServerURL": "https://api.sandbox.example:6443",
                "apiServerInternalURI": "https://api-int.sandbox.example:6443",
                "etcdDiscoveryDomain": "",
            })),
        },
        // The installer's networks (openshift/api `config/v1/types_network.go`; its CRD,
        // `0000_10_config-operator_01_networks.crd.yaml`, has no status subresource: the status
        // goes with the object), and OVN-Kubernetes' hybrid overlay, which WMCO requires
        // (openshift/windows-machine-config-operator `pkg/cluster/config.go`), in
        // `Network.operator.openshift.io/cluster`.
        plain(json!({
            "apiVersion": "config.openshift.io/v1", "kind": "Network",
            "metadata": {"name": "cluster"},
            "spec": networks, "status": networks,
        })),
        plain(json!({
            "apiVersion": "operator.openshift.io/v1", "kind": "Network",
            "metadata": {"name": "cluster"},
            "spec": {"defaultNetwork": {"type": "OVNKubernetes", "ovnKubernetesConfig": {
                "hybridOverlayConfig": {"hybridClusterNetwork": [
                    {"cidr": hybrid_network, "hostPrefix": 23}]}}}},
        })),
        // The machine-api-operator's webhooks read `DNS/cluster` at start (machine_webhook.go,
        // getDNS): no public zone, as on a cluster installed on Nutanix without one.
        plain(json!({
            "apiVersion": "config.openshift.io/v1", "kind": "DNS",
            "metadata": {"name": "cluster"},
            "spec": {"baseDomain": "sandbox.example"},
        })),
        // `ClusterVersion/version`, for `doctor`: the spec's `clusterID` and the status's
        // `availableUpdates`, `desired` (image and version), `observedGeneration` and
        // `versionHash` are required by openshift/api's CRD
        // (`0000_00_cluster-version-operator_01_clusterversions-Default.crd.yaml`); an empty
        // `availableUpdates` (a merge patch's `null` would delete the key the CRD requires).
        ClusterObject {
            object: json!({
                "apiVersion": "config.openshift.io/v1", "kind": "ClusterVersion",
                "metadata": {"name": "version"},
                "spec": {"clusterID": "5d3c4b2a-1111-4222-8333-444455556666",
                         "channel": "stable-4.20"},
            }),
            status: Some(json!({
                "desired": {"version": OPENSHIFT_VERSION,
                    "image": "quay.io/openshift-release-dev/ocp-release@sha256:0000000000000000000000000000000000000000000000000000000000000000"},
                "availableUpdates": [],
                "observedGeneration": 1,
                "versionHash": "sandbox",
            })),
        },
        // WMCO installed from OperatorHub, as its install guide shows it
        // (`../shared/seeds/004_*`: the Namespace, `oc get csv` showing the CSV `Succeeded`).
        plain(json!({"apiVersion": "v1", "kind": "Namespace",
                     "metadata": {"name": WMCO_NAMESPACE}})),
        ClusterObject {
            object: json!({
                "apiVersion": "operators.coreos.com/v1alpha1", "kind": "ClusterServiceVersion",
                "metadata": {"name": wmco_csv_name(), "namespace": WMCO_NAMESPACE},
                "spec": {"displayName": "Windows Machine Config Operator",
                         "version": WMCO_VERSION},
            }),
            status: Some(json!({"phase": "Succeeded"})),
        },
    ]
}

fn plain(object: Value) -> ClusterObject {
    ClusterObject {
        object,
        status: None,
    }
}

/// Applies each object in order (server-side apply, as `kubectl apply --server-side` does), then
/// writes its status where it has one apart.
pub async fn apply_all(client: &Client, objects: &[ClusterObject]) -> Result<(), SeedError> {
    for ClusterObject { object, status } in objects {
        let api_version = object["apiVersion"].as_str().unwrap_or_default();
        let kind = object["kind"].as_str().unwrap_or_default().to_owned();
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, &kind);
        let (resource, capabilities) =
            kube::discovery::pinned_kind(client, &gvk)
                .await
                .map_err(|source| SeedError::Discover {
                    api_version: api_version.to_owned(),
                    kind: kind.clone(),
                    source,
                })?;
        let api: Api<DynamicObject> = match object["metadata"]["namespace"].as_str() {
            Some(namespace) if capabilities.scope == Scope::Namespaced => {
                Api::namespaced_with(client.clone(), namespace, &resource)
            }
            _ => Api::all_with(client.clone(), &resource),
        };
        let typed: DynamicObject =
            serde_json::from_value(object.clone()).map_err(|source| SeedError::Build {
                kind: kind.clone(),
                name: name.clone(),
                source,
            })?;
        api.patch(&name, &PatchParams::apply("sandbox"), &Patch::Apply(&typed))
            .await
            .map_err(|source| SeedError::Apply {
                kind: kind.clone(),
                name: name.clone(),
                source,
            })?;
        if let Some(status) = status {
            api.patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status})),
            )
            .await
            .map_err(|source| SeedError::Status {
                kind: kind.clone(),
                name: name.clone(),
                source,
            })?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_object_is_named_once_and_statuses_go_apart_only_where_the_crd_has_a_subresource() {
        let objects = openshift_on_nutanix("openshift-machine-api", "sandbox-x1", 9440);
        let mut keys: Vec<String> = objects
            .iter()
            .map(|o| {
                format!(
                    "{} {}/{}",
                    o.object["apiVersion"], o.object["kind"], o.object["metadata"]["name"]
                )
            })
            .collect();
        let count = keys.len();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), count, "an object listed twice: {keys:?}");
        for object in &objects {
            let kind = object.object["kind"].as_str().unwrap();
            // openshift/api's Network.config CRD has no status subresource; the others that
            // carry a status here do.
            let with_object =
                kind == "Network" && object.object["apiVersion"] == "config.openshift.io/v1";
            assert_eq!(
                object.object.get("status").is_some(),
                with_object,
                "{kind}: status with the object"
            );
        }
        let infrastructure = objects
            .iter()
            .find(|o| o.object["kind"] == "Infrastructure")
            .unwrap();
        assert_eq!(
            infrastructure.status.as_ref().unwrap()["infrastructureName"],
            "sandbox-x1"
        );
        assert_eq!(
            infrastructure.object["spec"]["platformSpec"]["nutanix"]["prismCentral"]["port"],
            9440
        );
    }
}
