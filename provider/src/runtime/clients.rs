//! What every command starts from: the Kubernetes client's configuration and the actuator's
//! settings from the Prism flags (the controller, `validate` and `doctor` alike).

use std::path::Path;

use kube::Config;
use kube::config::{KubeConfigOptions, Kubeconfig};
use prism_client::RateLimit;

use crate::actuator::ActuatorSettings;

use super::cli::PrismArgs;

/// Why no Kubernetes client configuration could be made.
#[derive(Debug, thiserror::Error)]
pub enum KubeConfigError {
    #[error("kubeconfig {path}: {source}")]
    Kubeconfig {
        path: String,
        source: kube::config::KubeconfigError,
    },
    #[error("Kubernetes client configuration: {0}")]
    Infer(#[from] kube::config::InferConfigError),
}

/// The Kubernetes client configuration: `--kubeconfig`, else in-cluster or `$KUBECONFIG`.
pub async fn kube_config(path: Option<&Path>) -> Result<Config, KubeConfigError> {
    match path {
        Some(path) => {
            let kubeconfig =
                Kubeconfig::read_from(path).map_err(|source| KubeConfigError::Kubeconfig {
                    path: path.display().to_string(),
                    source,
                })?;
            Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(|source| KubeConfigError::Kubeconfig {
                    path: path.display().to_string(),
                    source,
                })
        }
        None => Ok(Config::infer().await?),
    }
}

/// The actuator settings from the Prism flags.
pub fn actuator_settings(prism: &PrismArgs) -> ActuatorSettings {
    ActuatorSettings {
        ca_file: prism.prism_ca_file.clone(),
        // Nothing to watch when no certificate is checked.
        system_ca_file: if prism.insecure_skip_tls_verify {
            None
        } else {
            prism_client::system_roots_file()
        },
        insecure: prism.insecure_skip_tls_verify,
        allow_plain_http: prism.prism_allow_plain_http,
        rate_limit: RateLimit {
            requests_per_second: prism.prism_rate_limit,
            burst: prism.prism_burst,
        },
        ..ActuatorSettings::default()
    }
}
