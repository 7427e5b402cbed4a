//! Kubeconfigs and clients of the API server: the administrator's client certificate, the
//! stand-ins impersonated by it, ServiceAccount tokens, and any kubeconfig user.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::{Value, json};

use super::{Binaries, ControlPlane, RealClusterError, api_error, io_error};

impl ControlPlane {
    /// The API server's audit log: one JSON `audit.k8s.io/v1` Event per request, at its
    /// `ResponseComplete` stage.
    pub fn audit_log(&self) -> PathBuf {
        self.dir.join("audit.log")
    }

    /// A client acting as `user` (impersonated by the administrator, who may): a stand-in's own
    /// name in the audit log. Its permissions are `cluster-admin`'s (see [`super::STAND_IN_USERS`]).
    pub async fn impersonating_client(&self, user: &str) -> Result<Client, RealClusterError> {
        let user = json!({
            "client-certificate-data": STANDARD.encode(&self.pki.admin_cert_pem),
            "client-key-data": STANDARD.encode(&self.pki.admin_key_pem),
            "as": user,
        });
        self.client_as(&user).await
    }

    /// The API server's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The CA (PEM) that signed the API server's certificate.
    pub fn ca_pem(&self) -> &str {
        &self.pki.ca_pem
    }

    /// The admin kubeconfig (client certificate of `system:masters`).
    pub fn admin_kubeconfig(&self) -> &Path {
        &self.admin_kubeconfig
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn binaries(&self) -> &Binaries {
        &self.binaries
    }

    /// A client of the admin kubeconfig.
    pub async fn admin_client(&self) -> Result<Client, RealClusterError> {
        client_of(&self.admin_kubeconfig).await
    }

    /// A TokenRequest token (valid a day) of the ServiceAccount `namespace/service_account`.
    pub async fn service_account_token(
        &self,
        namespace: &str,
        service_account: &str,
    ) -> Result<String, RealClusterError> {
        let client = self.admin_client().await?;
        let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
            Api::namespaced(client, namespace);
        let request = json!({
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": 86_400},
        });
        let answer: Value = accounts
            .create_subresource("token", service_account, &PostParams::default(), &request)
            .await
            .map_err(api_error(format!(
                "request a token for ServiceAccount {namespace}/{service_account}"
            )))?;
        answer["status"]["token"]
            .as_str()
            .filter(|token| !token.is_empty())
            .map(str::to_owned)
            .ok_or_else(|| RealClusterError::NoToken {
                service_account: format!("{namespace}/{service_account}"),
            })
    }

    /// Writes a kubeconfig with a token of the ServiceAccount `service_account` of the
    /// machine-api namespace, as the controller's pod would have it.
    pub async fn write_service_account_kubeconfig(
        &self,
        service_account: &str,
        path: &Path,
    ) -> Result<(), RealClusterError> {
        let token = self
            .service_account_token(&self.namespace, service_account)
            .await?;
        let text = kubeconfig_yaml(
            &self.url,
            &self.pki.ca_pem,
            &json!({"token": token}),
            service_account,
        );
        std::fs::write(path, text).map_err(io_error(format!("write {}", path.display())))
    }

    /// A client of this API server authenticating with `user` (a kubeconfig user: a `token`, or
    /// `client-certificate-data` and `client-key-data`).
    pub async fn client_as(&self, user: &Value) -> Result<Client, RealClusterError> {
        client_of_identity(&self.url, &self.pki.ca_pem, user).await
    }

    pub(super) fn write_admin_kubeconfig(&self) -> Result<(), RealClusterError> {
        let user = json!({
            "client-certificate-data": STANDARD.encode(&self.pki.admin_cert_pem),
            "client-key-data": STANDARD.encode(&self.pki.admin_key_pem),
        });
        let text = kubeconfig_yaml(&self.url, &self.pki.ca_pem, &user, "admin");
        std::fs::write(&self.admin_kubeconfig, text).map_err(io_error(format!(
            "write {}",
            self.admin_kubeconfig.display()
        )))
    }
}

fn kubeconfig_yaml(url: &str, ca_pem: &str, user: &Value, user_name: &str) -> String {
    json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "real-cluster", "cluster": {
            "server": url, "certificate-authority-data": STANDARD.encode(ca_pem)}}],
        "users": [{"name": user_name, "user": user}],
        "contexts": [{"name": "real-cluster", "context": {"cluster": "real-cluster", "user": user_name}}],
        "current-context": "real-cluster",
    })
    .to_string()
}

/// A client of the API server at `url` (whose CA is `ca_pem`) authenticating with `user` (a
/// kubeconfig user).
pub async fn client_of_identity(
    url: &str,
    ca_pem: &str,
    user: &Value,
) -> Result<Client, RealClusterError> {
    let text = kubeconfig_yaml(url, ca_pem, user, "user");
    let kubeconfig_error = |message: String| RealClusterError::Kubeconfig {
        path: PathBuf::from(format!("(in memory, for {url})")),
        message,
    };
    let kubeconfig = Kubeconfig::from_yaml(&text).map_err(|e| kubeconfig_error(e.to_string()))?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| kubeconfig_error(e.to_string()))?;
    Client::try_from(config).map_err(api_error(format!("client of {url}")))
}

/// A client of a kubeconfig file.
pub async fn client_of(path: &Path) -> Result<Client, RealClusterError> {
    let kubeconfig_error = |message: String| RealClusterError::Kubeconfig {
        path: path.to_owned(),
        message,
    };
    let kubeconfig = Kubeconfig::read_from(path).map_err(|e| kubeconfig_error(e.to_string()))?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| kubeconfig_error(e.to_string()))?;
    Client::try_from(config).map_err(api_error(format!("client of {}", path.display())))
}
