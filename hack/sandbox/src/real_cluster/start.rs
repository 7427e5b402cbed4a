//! The start sequence: etcd, kube-apiserver (its audit log on), kube-controller-manager, the
//! CRDs and the seeded objects, then the machine-api-operator's programs, each waited for.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::ports::free_port;
use super::{Binaries, ControlPlane, RealClusterError, client_of, io_error, pki, seed};

/// Metadata of every request at `ResponseComplete` (the `audit.k8s.io/v1` Policy), and the body
/// of a write of a Machine's status, which says when a provider wrote the Machine's addresses
/// and its phase `Running` (`bench::join_stages`). No other bodies: Secrets and tokens never
/// reach the log, and a Machine's status holds neither. The first rule that matches a request
/// sets its level, and `machines/status` names the subresource alone, `machines` not matching it
/// (kubernetes/website `content/en/examples/audit/audit-policy.yaml`, its `pods/log` rule).
fn audit_policy_document() -> Value {
    json!({
        "apiVersion": "audit.k8s.io/v1", "kind": "Policy",
        "omitStages": ["RequestReceived", "ResponseStarted"],
        "rules": [
            {"level": "Request", "verbs": ["patch", "update"],
             "resources": [{"group": "machine.openshift.io", "resources": ["machines/status"]}]},
            {"level": "Metadata"},
        ],
    })
}

impl ControlPlane {
    /// Starts etcd, kube-apiserver and kube-controller-manager, applies openshift/api's CRDs,
    /// `Infrastructure/cluster` (platform Nutanix, Prism Central at `prism_port`) and
    /// `Network/cluster`, starts MAO's `machineset` (webhooks registered with the generated CA),
    /// `nodelink-controller` and `machine-healthcheck`, and waits for each.
    pub async fn start(
        binaries: Binaries,
        dir: &Path,
        namespace: &str,
        infrastructure_name: &str,
        prism_port: u16,
    ) -> Result<Self, RealClusterError> {
        std::fs::create_dir_all(dir).map_err(io_error(format!("create {}", dir.display())))?;
        let pki = pki::write(dir)?;
        let etcd_port = free_port()?;
        let etcd_peer_port = free_port()?;
        let api_port = free_port()?;
        let mut plane = Self {
            processes: std::sync::Mutex::new(Vec::new()),
            dir: dir.to_owned(),
            url: format!("https://127.0.0.1:{api_port}"),
            etcd_url: format!("http://127.0.0.1:{etcd_port}"),
            admin_kubeconfig: dir.join("kubeconfig"),
            pki,
            binaries,
            namespace: namespace.to_owned(),
        };
        plane.write_admin_kubeconfig()?;

        let etcd_client = format!("http://127.0.0.1:{etcd_port}");
        let etcd_peer = format!("http://127.0.0.1:{etcd_peer_port}");
        let etcd_data = dir.join("etcd");
        // A fresh cluster every start: a data directory left by an earlier run (a kept work
        // directory) would hold its objects.
        if etcd_data.exists() {
            std::fs::remove_dir_all(&etcd_data)
                .map_err(io_error(format!("remove {}", etcd_data.display())))?;
        }
        plane.spawn(
            "etcd",
            vec![
                "--data-dir".into(),
                etcd_data.display().to_string(),
                "--listen-client-urls".into(),
                etcd_client.clone(),
                "--advertise-client-urls".into(),
                etcd_client.clone(),
                "--listen-peer-urls".into(),
                etcd_peer.clone(),
                "--initial-advertise-peer-urls".into(),
                etcd_peer.clone(),
                "--initial-cluster".into(),
                format!("default={etcd_peer}"),
                // A test cluster: no fsync wait on a shared disk.
                "--unsafe-no-fsync".into(),
            ],
        )?;

        let pki = plane.pki.clone();
        let audit_policy = dir.join("audit-policy.json");
        std::fs::write(&audit_policy, audit_policy_document().to_string())
            .map_err(io_error(format!("write {}", audit_policy.display())))?;
        plane.spawn(
            "kube-apiserver",
            vec![
                // Every request's metadata and answer, one JSON line each, for the comparison of
                // what each actor wrote here and on kube-sim (`sandbox::writes`).
                "--audit-policy-file".into(),
                audit_policy.display().to_string(),
                "--audit-log-path".into(),
                plane.audit_log().display().to_string(),
                "--audit-log-format".into(),
                "json".into(),
                "--etcd-servers".into(),
                etcd_client,
                "--bind-address".into(),
                "127.0.0.1".into(),
                "--advertise-address".into(),
                "127.0.0.1".into(),
                "--secure-port".into(),
                api_port.to_string(),
                "--tls-cert-file".into(),
                pki.server_cert.display().to_string(),
                "--tls-private-key-file".into(),
                pki.server_key.display().to_string(),
                "--client-ca-file".into(),
                pki.ca_cert.display().to_string(),
                "--service-account-issuer".into(),
                "https://kubernetes.default.svc".into(),
                "--service-account-key-file".into(),
                pki.service_account_public.display().to_string(),
                "--service-account-signing-key-file".into(),
                pki.service_account_private.display().to_string(),
                "--service-cluster-ip-range".into(),
                "172.30.0.0/16".into(),
                // OpenShift's kube-apiserver has the Node authorizer beside RBAC: the kubelets'
                // own identities (`system:node:<name>`) register their Nodes and ask for their
                // serving certificates.
                "--authorization-mode".into(),
                "Node,RBAC".into(),
                // The `kubernetes` Service's endpoints would name a loopback address, which the
                // endpoint validation refuses; nothing here reaches the API server through it.
                "--endpoint-reconciler-type".into(),
                "none".into(),
            ],
        )?;
        plane.wait_api_ready().await?;

        let kubeconfig = plane.admin_kubeconfig.display().to_string();
        plane.spawn(
            "kube-controller-manager",
            vec![
                "--kubeconfig".into(),
                kubeconfig.clone(),
                "--authentication-kubeconfig".into(),
                kubeconfig.clone(),
                "--authorization-kubeconfig".into(),
                kubeconfig.clone(),
                "--bind-address".into(),
                "127.0.0.1".into(),
                "--secure-port".into(),
                free_port()?.to_string(),
                "--leader-elect=false".into(),
                "--cluster-signing-cert-file".into(),
                pki.ca_cert.display().to_string(),
                "--cluster-signing-key-file".into(),
                pki.ca_key.display().to_string(),
                "--root-ca-file".into(),
                pki.ca_cert.display().to_string(),
                "--service-account-private-key-file".into(),
                pki.service_account_private.display().to_string(),
                "--use-service-account-credentials=false".into(),
            ],
        )?;

        let client = plane.admin_client().await?;
        plane.apply_crds(&client).await?;
        // OLM's ClusterServiceVersion, for WMCO's among the cluster's objects: no OLM runs here.
        let olm_crd = crate::manifests::objects(&[crate::manifests::CLUSTER_SERVICE_VERSION_CRD])
            .map_err(|e| RealClusterError::Manifest {
            path: e.path.into(),
            message: e.message,
        })?;
        plane.add_crds(&client, olm_crd).await?;
        seed::seed_objects(&client, namespace, infrastructure_name, prism_port).await?;

        let webhook_port = free_port()?;
        let namespace_flag = format!("--namespace={namespace}");
        plane.spawn(
            "machineset",
            vec![
                namespace_flag.clone(),
                format!("--webhook-port={webhook_port}"),
                format!("--webhook-cert-dir={}", pki.webhook_dir.display()),
                format!("--metrics-bind-address=127.0.0.1:{}", free_port()?),
                format!("--health-addr=127.0.0.1:{}", free_port()?),
            ],
        )?;
        plane.register_webhooks(&client, webhook_port).await?;
        plane.spawn("nodelink-controller", vec![namespace_flag.clone()])?;
        plane.spawn(
            "machine-healthcheck",
            vec![
                namespace_flag,
                format!("--metrics-bind-address=127.0.0.1:{}", free_port()?),
                format!("--health-addr=127.0.0.1:{}", free_port()?),
            ],
        )?;
        plane.wait_webhooks_served(webhook_port).await?;
        Ok(plane)
    }

    async fn wait_api_ready(&mut self) -> Result<(), RealClusterError> {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            self.check_running()?;
            if let Ok(client) = client_of(&self.admin_kubeconfig).await {
                let ready =
                    client
                        .request_text(http::Request::get("/readyz").body(Vec::new()).map_err(
                            |e| RealClusterError::Manifest {
                                path: self.admin_kubeconfig.clone(),
                                message: e.to_string(),
                            },
                        )?)
                        .await;
                if ready.is_ok_and(|text| text.trim() == "ok") {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                return Err(self.not_ready("kube-apiserver /readyz", 120));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}
