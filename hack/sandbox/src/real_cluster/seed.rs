//! The objects the control plane starts with, as the installer and the operators leave them on
//! an OpenShift cluster on Nutanix, created through the API.

use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

use super::RealClusterError;
use super::apply::create;
use super::error::api_error;

/// The users the simulated actors act as on the real control plane, bound to `cluster-admin`:
/// the stand-ins have no real roles to run under (the cluster-machine-approver's would come with
/// it).
pub const STAND_IN_USERS: [&str; 5] = [
    "sandbox:approver",
    "sandbox:node-agent",
    "sandbox:autoscaler",
    "sandbox:ipam",
    "sandbox:test",
];

/// The cluster-scoped objects an installed OpenShift cluster has before any Machine: the
/// machine API's namespace, the kubelets' bootstrap identity, the stand-ins' binding,
/// `Infrastructure/cluster`, the networks and `DNS/cluster`.
pub(super) async fn seed_objects(
    client: &Client,
    namespace: &str,
    infrastructure_name: &str,
    prism_port: u16,
) -> Result<(), RealClusterError> {
    create(
        client,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}),
    )
    .await?;
    create_node_bootstrapper(client).await?;
    create(
        client,
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "sandbox-stand-ins"},
            "subjects": STAND_IN_USERS.map(|name| json!({
                "kind": "User", "name": name, "apiGroup": "rbac.authorization.k8s.io"})),
            "roleRef": {"kind": "ClusterRole", "name": "cluster-admin",
                        "apiGroup": "rbac.authorization.k8s.io"},
        }),
    )
    .await?;
    create_infrastructure(client, infrastructure_name, prism_port).await?;
    create_networks(client).await?;
    // MAO's webhooks read `DNS/cluster` at start (machine_webhook.go, getDNS): no public zone,
    // as on a cluster installed on Nutanix without one.
    create(
        client,
        json!({
            "apiVersion": "config.openshift.io/v1", "kind": "DNS",
            "metadata": {"name": "cluster"},
            "spec": {"baseDomain": "sandbox.example"},
        }),
    )
    .await?;
    Ok(())
}

/// The machine-config-operator's namespace, where the ServiceAccount of the kubelets' bootstrap
/// token lives.
pub const NODE_BOOTSTRAPPER_NAMESPACE: &str = "openshift-machine-config-operator";
/// The ServiceAccount whose token a new kubelet asks for its client certificate with.
pub const NODE_BOOTSTRAPPER: &str = "node-bootstrapper";

/// The kubelets' bootstrap identity as the machine-config-operator installs it
/// (`manifests/machineconfigserver/`: `node-bootstrapper-sa.yaml`,
/// `csr-bootstrap-role-binding.yaml` binding Kubernetes' `system:node-bootstrapper` ClusterRole,
/// and `csr-renewal-role-binding.yaml` letting `system:nodes` renew their own client
/// certificates). It may create CSRs, not approve them: kube-controller-manager's approver leaves
/// its requests to the cluster-machine-approver.
async fn create_node_bootstrapper(client: &Client) -> Result<(), RealClusterError> {
    create(
        client,
        json!({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": NODE_BOOTSTRAPPER_NAMESPACE}}),
    )
    .await?;
    create(
        client,
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": NODE_BOOTSTRAPPER, "namespace": NODE_BOOTSTRAPPER_NAMESPACE}}),
    )
    .await?;
    for (name, subject, role) in [
        (
            "system-bootstrap-node-bootstrapper",
            json!({"kind": "ServiceAccount", "name": NODE_BOOTSTRAPPER,
                   "namespace": NODE_BOOTSTRAPPER_NAMESPACE}),
            "system:node-bootstrapper",
        ),
        (
            "system-bootstrap-node-renewal",
            json!({"kind": "Group", "name": "system:nodes",
                   "apiGroup": "rbac.authorization.k8s.io"}),
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
        ),
    ] {
        create(
            client,
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": name},
                "subjects": [subject],
                "roleRef": {"kind": "ClusterRole", "name": role,
                            "apiGroup": "rbac.authorization.k8s.io"},
            }),
        )
        .await?;
    }
    Ok(())
}

/// `Infrastructure/cluster` as the installer leaves it on Nutanix: the spec's Prism Central and
/// Prism Element, then the status (a subresource in openshift/api's CRD) with the infra ID.
async fn create_infrastructure(
    client: &Client,
    infrastructure_name: &str,
    prism_port: u16,
) -> Result<(), RealClusterError> {
    create(
        client,
        json!({
            "apiVersion": "config.openshift.io/v1", "kind": "Infrastructure",
            "metadata": {"name": "cluster"},
            "spec": {"platformSpec": {"type": "Nutanix", "nutanix": {
                "prismCentral": {"address": "127.0.0.1", "port": prism_port},
                "prismElements": [{"name": "pe-1", "endpoint": {"address": "127.0.0.1", "port": prism_port}}],
            }}},
        }),
    )
    .await?;
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("config.openshift.io", "v1", "Infrastructure"),
        "infrastructures",
    );
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let status = json!({"status": {
        "infrastructureName": infrastructure_name,
        "platform": "Nutanix",
        "platformStatus": {"type": "Nutanix"},
        "controlPlaneTopology": "HighlyAvailable",
        "infrastructureTopology": "HighlyAvailable",
        "apiServerURL": "https://api.sandbox.example:6443",
        "apiServerInternalURI": "https://api-int.sandbox.example:6443",
        "etcdDiscoveryDomain": "",
    }});
    api.patch_status(
        "cluster",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&status),
    )
    .await
    .map_err(api_error("write Infrastructure/cluster status"))?;
    Ok(())
}

/// OpenShift's default networks (the installer's `clusterNetwork` and `serviceNetwork`) in
/// `Network.config.openshift.io/cluster` (its CRD has no status subresource: the status is
/// written with the object), and OVN-Kubernetes' hybrid overlay, as WMCO requires it, in
/// `Network.operator.openshift.io/cluster`.
async fn create_networks(client: &Client) -> Result<(), RealClusterError> {
    let networks = json!({
        "clusterNetwork": [{"cidr": "10.128.0.0/14", "hostPrefix": 23}],
        "serviceNetwork": ["172.30.0.0/16"],
        "networkType": "OVNKubernetes",
    });
    create(
        client,
        json!({
            "apiVersion": "config.openshift.io/v1", "kind": "Network",
            "metadata": {"name": "cluster"},
            "spec": networks, "status": networks,
        }),
    )
    .await?;
    create(
        client,
        json!({
            "apiVersion": "operator.openshift.io/v1", "kind": "Network",
            "metadata": {"name": "cluster"},
            "spec": {"defaultNetwork": {"type": "OVNKubernetes", "ovnKubernetesConfig": {
                "hybridOverlayConfig": {"hybridClusterNetwork": [{"cidr": "10.132.0.0/14", "hostPrefix": 23}]}}}},
        }),
    )
    .await?;
    Ok(())
}
