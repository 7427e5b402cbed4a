//! Each controller replica's own path to the real API server: a proxy
//! ([`crate::api_proxy::ApiProxy`]) per replica, named by that replica's kubeconfig, so that a run
//! can slow down, reset or black-hole one replica's path while the other replica and every other
//! actor talk to kube-apiserver directly.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use super::{World, WorldError};
use crate::api_proxy::{ApiProxy, PathMode};

/// Starts one proxy to `api_url` per replica and writes, beside `kubeconfig` (the controller's,
/// naming `api_url`), `kubeconfig-controller-<i>` naming proxy `i` instead.
pub(super) async fn start(
    api_url: &str,
    kubeconfig: &Path,
    replicas: usize,
) -> Result<Vec<(ApiProxy, PathBuf)>, WorldError> {
    let target: SocketAddr = api_url
        .strip_prefix("https://")
        .and_then(|authority| authority.parse().ok())
        .ok_or_else(|| WorldError::Store {
            what: "the API server's address for the controller's proxies".to_owned(),
            message: format!("{api_url} is not https://IP:PORT"),
        })?;
    let text = std::fs::read_to_string(kubeconfig).map_err(|source| WorldError::Io {
        what: format!("read {}", kubeconfig.display()),
        source,
    })?;
    let mut paths = Vec::new();
    for index in 0..replicas.max(1) {
        let proxy = ApiProxy::start(target)
            .await
            .map_err(|source| WorldError::Io {
                what: format!("start the API proxy of controller replica {index}"),
                source,
            })?;
        let path = kubeconfig.with_file_name(format!("kubeconfig-controller-{index}"));
        std::fs::write(&path, text.replace(api_url, &proxy.url())).map_err(|source| {
            WorldError::Io {
                what: format!("write {}", path.display()),
                source,
            }
        })?;
        paths.push((proxy, path));
    }
    Ok(paths)
}

impl World {
    /// Puts replica `index`'s path to the API server in `mode`.
    pub fn set_api_path(&self, index: usize, mode: PathMode) -> Result<(), WorldError> {
        let count = self.api_proxies.len();
        self.api_proxies
            .get(index)
            .ok_or(WorldError::NoSuchReplica { index, count })?
            .set_mode(mode);
        Ok(())
    }

    /// Whether each replica reaches the API server through a proxy of its own.
    pub fn has_api_paths(&self) -> bool {
        !self.api_proxies.is_empty()
    }
}
