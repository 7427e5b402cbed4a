//! Objects applied to the API server: openshift/api's CRDs (waited for until `Established`), one
//! object at a time by discovery, and kustomizations with the built kubectl.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kube::Client;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use serde_json::Value;
use tokio::process::Command;

use super::{ControlPlane, RealClusterError, api_error, io_error};

impl ControlPlane {
    pub(super) async fn apply_crds(&mut self, client: &Client) -> Result<(), RealClusterError> {
        let mut documents = Vec::new();
        for path in self.binaries.crd_files()? {
            let text = std::fs::read_to_string(&path)
                .map_err(io_error(format!("read {}", path.display())))?;
            documents.extend(kube_sim::load::documents(&text).map_err(|e| {
                RealClusterError::Manifest {
                    path: path.clone(),
                    message: e.to_string(),
                }
            })?);
        }
        self.add_crds(client, documents).await
    }

    /// Creates CRDs (other than openshift/api's, which [`ControlPlane::start`] applies) and
    /// waits until each is `Established`.
    pub async fn add_crds(
        &self,
        client: &Client,
        documents: Vec<Value>,
    ) -> Result<(), RealClusterError> {
        let mut names = Vec::new();
        for crd in documents {
            names.push(
                crd["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            );
            create(client, crd).await?;
        }
        let crds: Api<
            k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
        > = Api::all(client.clone());
        let deadline = Instant::now() + Duration::from_secs(60);
        for name in names {
            loop {
                let established = crds.get(&name).await.ok().is_some_and(|crd| {
                    crd.status
                        .and_then(|s| s.conditions)
                        .unwrap_or_default()
                        .iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                });
                if established {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(self.not_ready(&format!("CRD {name} established"), 60));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(())
    }

    /// `kubectl apply -k DIR` with the built kubectl, as an administrator applies
    /// `manifests/rbac/`.
    pub async fn apply_kustomization(&self, dir: &Path) -> Result<(), RealClusterError> {
        let output = Command::new(self.binaries.program("kubectl")?)
            .arg("--kubeconfig")
            .arg(&self.admin_kubeconfig)
            .arg("apply")
            .arg("-k")
            .arg(dir)
            .output()
            .await
            .map_err(io_error(format!("run kubectl apply -k {}", dir.display())))?;
        if output.status.success() {
            return Ok(());
        }
        Err(RealClusterError::Kubectl {
            dir: dir.to_owned(),
            status: output.status,
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        })
    }
}

/// Creates one object given as JSON, finding its resource by discovery.
pub async fn create(client: &Client, object: Value) -> Result<Value, RealClusterError> {
    let api_version = object["apiVersion"].as_str().unwrap_or_default().to_owned();
    let kind = object["kind"].as_str().unwrap_or_default().to_owned();
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let (group, version) = api_version.split_once('/').unwrap_or(("", &api_version));
    let gvk = GroupVersionKind::gvk(group, version, &kind);
    let (resource, capabilities) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .map_err(api_error(format!("discover {api_version} {kind}")))?;
    let api: Api<DynamicObject> = match object["metadata"]["namespace"].as_str() {
        Some(namespace) if capabilities.scope == kube::discovery::Scope::Namespaced => {
            Api::namespaced_with(client.clone(), namespace, &resource)
        }
        _ => Api::all_with(client.clone(), &resource),
    };
    let typed: DynamicObject =
        serde_json::from_value(object).map_err(|e| RealClusterError::Manifest {
            path: PathBuf::from(format!("{kind}/{name}")),
            message: e.to_string(),
        })?;
    let created = api
        .create(&PostParams::default(), &typed)
        .await
        .map_err(api_error(format!("create {kind} {name}")))?;
    serde_json::to_value(created).map_err(|e| RealClusterError::Manifest {
        path: PathBuf::from(format!("{kind}/{name}")),
        message: e.to_string(),
    })
}
