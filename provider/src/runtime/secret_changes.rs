//! Which watched Secrets really changed. A watch also hands over a Secret whose data did not
//! change (its labels, annotations or owner references did, or the watch was re-listed after a
//! restart of its connection); only a change of what Machines read from it (its data) makes the
//! Machines using it reconcile at once, without the backoff their failures earned.

use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;

/// A fingerprint of each Secret's data, by namespace and name (data never kept in clear).
#[derive(Debug, Default)]
pub struct SecretDataChanges {
    seen: HashMap<(String, String), u64>,
}

impl SecretDataChanges {
    /// Records `secret` and says whether its data differs from what was last recorded for it
    /// (a Secret seen for the first time has changed).
    pub fn changed(&mut self, secret: &Secret) -> bool {
        let key = (secret.namespace().unwrap_or_default(), secret.name_any());
        let fingerprint = data_fingerprint(secret);
        self.seen.insert(key, fingerprint) != Some(fingerprint)
    }
}

fn data_fingerprint(secret: &Secret) -> u64 {
    let mut hasher = DefaultHasher::new();
    // `data` and `stringData` are ordered maps: the same data always hashes the same.
    for (key, value) in secret.data.iter().flatten() {
        key.hash(&mut hasher);
        value.0.hash(&mut hasher);
    }
    0xff_u8.hash(&mut hasher);
    for (key, value) in secret.string_data.iter().flatten() {
        key.hash(&mut hasher);
        value.hash(&mut hasher);
    }
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::ByteString;

    use super::*;

    fn secret(name: &str, password: &str, label: &str) -> Secret {
        let mut secret = Secret::default();
        secret.metadata.name = Some(name.into());
        secret.metadata.namespace = Some("openshift-machine-api".into());
        secret.metadata.labels = Some(BTreeMap::from([("team".into(), label.into())]));
        secret.data = Some(BTreeMap::from([(
            "credentials".into(),
            ByteString(password.as_bytes().to_vec()),
        )]));
        secret
    }

    #[test]
    fn only_new_data_is_a_change() {
        let mut changes = SecretDataChanges::default();
        assert!(changes.changed(&secret("creds", "one", "a")), "first sight");
        assert!(!changes.changed(&secret("creds", "one", "a")), "re-listed");
        assert!(!changes.changed(&secret("creds", "one", "b")), "a label");
        assert!(changes.changed(&secret("creds", "two", "b")), "new data");
        assert!(
            changes.changed(&secret("other", "two", "b")),
            "another Secret"
        );
        assert!(!changes.changed(&secret("creds", "two", "c")));
    }
}
