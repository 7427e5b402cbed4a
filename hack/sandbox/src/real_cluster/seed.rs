//! The objects the control plane starts with, as the installer and the operators leave them on
//! an OpenShift cluster on Nutanix, created through the API.

use kube::Client;
use serde_json::json;

use super::RealClusterError;
use super::apply::create;
use crate::cluster_objects;

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

/// The objects an installed OpenShift cluster has before any Machine: those both control planes
/// get ([`crate::cluster_objects`]), then the kubelets' bootstrap identity and the stand-ins'
/// binding, which only a control plane that authorizes needs.
pub(super) async fn seed_objects(
    client: &Client,
    namespace: &str,
    infrastructure_name: &str,
    prism_port: u16,
) -> Result<(), RealClusterError> {
    cluster_objects::apply_all(
        client,
        &cluster_objects::openshift_on_nutanix(namespace, infrastructure_name, prism_port),
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
