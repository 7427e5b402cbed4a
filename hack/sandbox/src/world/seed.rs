//! The namespaced objects every world is given through the API, as an administrator applies them:
//! the credentials and user-data Secrets, and the examples (MachineSets at 0 replicas, the
//! MachineAutoscaler).

use base64::Engine as _;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use prism_mock::RunningMock;
use serde_json::{Value, json};

use super::{WorldError, api_error};
use crate::manifests::{self, ManifestError};
use crate::node_agent;

/// A distinctive part of the Windows user data (the sandbox WMCO's key): it must never show in a
/// log line.
pub const WINDOWS_USER_DATA_MARKER: &str = "AAAAIOQr8h6wG4CauqEpRnpW+n7iAaX7cGSguySTwhq1I9Yt";
/// Marker inside the stand-in Linux user data.
pub const LINUX_USER_DATA_MARKER: &str = "sandbox-linux-user-data-8b2c";

/// WMCO's `windows-user-data`, as the node agent's WMCO generates it for Nutanix.
pub fn windows_user_data() -> String {
    node_agent::wmco::user_data(node_agent::wmco::SANDBOX_PUBLIC_KEY)
}

/// The stand-in for the installer's `worker-user-data` (an Ignition config).
pub fn linux_user_data() -> String {
    json!({"ignition": {"version": "3.2.0"}, "storage": {"files": [{
        "path": "/etc/sandbox-marker", "mode": 420,
        "contents": {"source": format!("data:,{LINUX_USER_DATA_MARKER}")},
    }]}})
    .to_string()
}

/// The credentials Secret of the example, as an administrator applies it (`stringData`, which the
/// API server folds into `data`) with the mock's user name and password, and stand-ins for the
/// user-data Secrets of WMCO and the installer.
pub async fn write_secrets(
    client: &Client,
    namespace: &str,
    mock: &RunningMock,
) -> Result<(), WorldError> {
    let mut example = manifests::example("Secret", manifests::CREDENTIALS_SECRET)?;
    let mut credentials: Value = example["stringData"]["credentials"]
        .as_str()
        .and_then(|text| serde_json::from_str(text).ok())
        .ok_or(ManifestError {
            path: "manifests/examples/credentials-secret.yaml",
            message: "stringData.credentials is not a JSON list".to_owned(),
        })?;
    let prism_central = &mut credentials[0]["data"]["prismCentral"];
    if !prism_central.is_object() {
        return Err(ManifestError {
            path: "manifests/examples/credentials-secret.yaml",
            message: "credentials[0].data.prismCentral is not an object".to_owned(),
        }
        .into());
    }
    prism_central["username"] = json!(mock.credentials().username);
    prism_central["password"] = json!(mock.credentials().password);
    example["stringData"]["credentials"] = json!(credentials.to_string());
    example["metadata"]["namespace"] = json!(namespace);
    let user_data = [
        (manifests::WINDOWS_USER_DATA_SECRET, windows_user_data()),
        (manifests::LINUX_USER_DATA_SECRET, linux_user_data()),
    ]
    .map(|(name, value)| {
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace},
            "type": "Opaque",
            "data": {"userData": base64::engine::general_purpose::STANDARD.encode(value)},
        })
    });
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    for object in std::iter::once(example).chain(user_data) {
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let secret: Secret = serde_json::from_value(object).map_err(|e| WorldError::Store {
            what: format!("build Secret {name}"),
            message: e.to_string(),
        })?;
        api.create(&PostParams::default(), &secret)
            .await
            .map_err(api_error(format!("create Secret {name}")))?;
    }
    Ok(())
}

/// Server-side applies the example MachineSets (at 0 replicas) and MachineAutoscaler with strict
/// field validation, as `kubectl apply --server-side` would: a misspelt field fails.
pub async fn apply_examples(client: &Client, namespace: &str) -> Result<(), WorldError> {
    for mut object in manifests::objects(&manifests::EXAMPLES)? {
        let kind = object["kind"].as_str().unwrap_or_default().to_owned();
        if kind == "Secret" {
            continue;
        }
        if kind == "MachineSet" {
            object["spec"]["replicas"] = json!(0);
        }
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let api_version = object["apiVersion"].as_str().unwrap_or_default();
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, &kind);
        let (resource, _) = kube::discovery::pinned_kind(client, &gvk)
            .await
            .map_err(api_error(format!("discover {api_version} {kind}")))?;
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
        let applied = api
            .patch(
                &name,
                &PatchParams::apply("sandbox").validation_strict(),
                &Patch::Apply(&object),
            )
            .await
            .map_err(api_error(format!("apply {kind} {name}")))?;
        tracing::debug!(%kind, name = %applied.name_any(), "applied example");
    }
    Ok(())
}
