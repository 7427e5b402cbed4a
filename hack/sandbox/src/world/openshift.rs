//! What WMCO's install guide has an administrator create by hand, for `doctor` to find on a
//! healthy sandbox: the `cloud-private-key` Secret (`../shared/seeds/004_*`: `oc create secret
//! generic cloud-private-key --from-file=private-key.pem=...`), in WMCO's namespace, which
//! [`crate::cluster_objects`] creates with WMCO's ClusterServiceVersion.

use base64::Engine;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::json;

use super::{WorldError, api_error};
use crate::cluster_objects::WMCO_NAMESPACE;

/// WMCO's `cloud-private-key` Secret. Its content is a stand-in: the sandbox's WMCO signs in
/// with no key (the private half of its public key was never kept), and nothing reads it but
/// `doctor`, which looks only for its key `private-key.pem`.
pub(super) async fn write_cloud_private_key(client: &Client) -> Result<(), WorldError> {
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
