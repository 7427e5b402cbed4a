//! The shape of v4 answers, which the model renders: the API version a path is served under and the object
//! version its answers carry, the `$objectType` and `$reserved` of every object, the response envelope, and
//! the ETag of an entity.

use serde_json::{Map, Value, json};

/// A v4 API version a path is served under, with the object version its answers carry in `$reserved.$fv`
/// (the SDKs' models: vmm 4.3 objects default to `v4.r3`, prism 4.4 objects to `v4.r4`; v4.0 to `v4.r0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct V4Version {
    /// Path segment, e.g. `v4.3`.
    pub(crate) path: &'static str,
    /// `$reserved.$fv` of the answers.
    pub(crate) fv: &'static str,
}

impl V4Version {
    /// An object with its `$objectType` and `$reserved` (every v4 model carries both; the SDK reads the
    /// `$objectType` to pick the class).
    pub(crate) fn object<'a>(
        &self,
        object_type: &str,
        fields: impl IntoIterator<Item = (&'a str, Value)>,
    ) -> Value {
        let map: Map<String, Value> = fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        self.wrap(object_type, map)
    }

    /// `map` with `$objectType` and `$reserved` added. Objects of the `common.v1` namespace (a response's
    /// metadata and its flags) carry their own namespace's version, `v1.r0`, under every API version: so do
    /// `common.v1.response.ApiResponseMetadata` and `common.v1.config.Flag` in ntnx-vmm-py-client 4.0.1 and
    /// 4.3.2 (`_initialize_object_version`; sdk-check/check_v4.py).
    pub(crate) fn wrap(&self, object_type: &str, mut map: Map<String, Value>) -> Value {
        let fv = if object_type.starts_with("common.v1.") {
            "v1.r0"
        } else {
            self.fv
        };
        map.insert("$objectType".to_owned(), json!(object_type));
        map.insert("$reserved".to_owned(), json!({"$fv": fv}));
        Value::Object(map)
    }

    /// Whether this is the first v4 version (`v4.0`), whose models lack the fields later revisions added.
    pub(crate) fn is_v4_0(&self) -> bool {
        self.path == "v4.0"
    }

    /// The response envelope `{data, metadata, $objectType, $reserved}`; `data` is left out when `None`
    /// (an empty list answers without `data`: prism-go-client converged/v4/utils.go `CallListAPI` treats a nil
    /// `data` as no results, and the Ansible collection's ntnx_templates_info_v2 checks
    /// `getattr(resp, "data", None)` before reading it).
    pub(crate) fn envelope(
        &self,
        object_type: &str,
        data: Option<Value>,
        metadata: Map<String, Value>,
    ) -> Value {
        let mut map = Map::new();
        if let Some(data) = data {
            map.insert("data".to_owned(), data);
        }
        map.insert(
            "metadata".to_owned(),
            self.wrap("common.v1.response.ApiResponseMetadata", metadata),
        );
        self.wrap(object_type, map)
    }

    /// A single-entity response (`hasError` and `isPaginated` false).
    pub(crate) fn response(&self, object_type: &str, data: Value) -> Value {
        let mut metadata = Map::new();
        metadata.insert("flags".to_owned(), self.flags(false));
        self.envelope(object_type, Some(data), metadata)
    }

    /// The `flags` of a response's metadata (common.v1.response.ApiResponseMetadata).
    pub(crate) fn flags(&self, paginated: bool) -> Value {
        json!([
            self.object(
                "common.v1.config.Flag",
                [("name", json!("hasError")), ("value", json!(false))]
            ),
            self.object(
                "common.v1.config.Flag",
                [("name", json!("isPaginated")), ("value", json!(paginated))]
            ),
        ])
    }
}

/// `bootConfig` of a v4 VM (or a template's `vmSpec`) for a v3 `boot_type`: a oneOf of LegacyBoot and UefiBoot
/// (vmm.v4.ahv.config.Vm of ntnx-vmm-py-client), Secure Boot being a UEFI boot with `isSecureBootEnabled`.
pub(crate) fn boot_config(boot_type: &str) -> Value {
    match boot_type {
        "LEGACY" => {
            json!({"$objectType": "vmm.v4.ahv.config.LegacyBoot", "bootOrder": ["CDROM", "DISK", "NETWORK"]})
        }
        other => {
            json!({"$objectType": "vmm.v4.ahv.config.UefiBoot", "isSecureBootEnabled": other == "SECURE_BOOT"})
        }
    }
}

/// An ETag for an answer: a hash of its content, so it changes when the entity does (the value of a real ETag
/// is opaque to clients; the SDKs only copy it back).
pub(crate) fn etag_of(body: &Value) -> String {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    format!("\"{hash:016x}\"")
}
