//! The resource table: built-in types served from a static list, custom resources registered from
//! `CustomResourceDefinition` objects.

use std::sync::Arc;

use serde_json::Value;

use crate::meta::string_list;

/// Verbs every served resource supports.
pub const STANDARD_VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// A resource: its group, versions, names, scope, subresources and printer columns.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceDef {
    /// API group, "" for core.
    pub group: String,
    /// Served versions; the first is the preferred (and storage) version.
    pub versions: Vec<String>,
    /// Kind, e.g. `Machine`.
    pub kind: String,
    /// List kind, e.g. `MachineList`.
    pub list_kind: String,
    /// Plural resource name used in paths.
    pub plural: String,
    /// Singular name.
    pub singular: String,
    /// Short names (`kubectl get ms`).
    pub short_names: Vec<String>,
    /// Categories (`kubectl get all`).
    pub categories: Vec<String>,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Has a `/status` subresource: main-resource writes ignore status, `/status` writes change only status.
    pub status_subresource: bool,
    /// Scale subresource paths, if any.
    pub scale: Option<ScalePaths>,
    /// Subresources other than status and scale (eviction, approval).
    pub special_subresources: Vec<SpecialSubresource>,
    /// Columns for `Table` output (kubectl get), after the Name column.
    pub columns: Vec<PrinterColumn>,
    /// Defined by a CustomResourceDefinition.
    pub custom: bool,
    /// `metadata.generation` is set and bumped when anything but metadata and status changes.
    pub spec_generation: bool,
    /// A PUT of a missing object creates it (the strategy's `AllowCreateOnUpdate`), unless its
    /// body carries a UID, whose precondition then fails with a 409.
    pub create_on_update: bool,
    /// The storage version's `openAPIV3Schema` (custom resources): writes are pruned and defaulted by it.
    pub schema: Option<Value>,
}

/// JSON paths of a scale subresource, as in a CRD's `subresources.scale`.
#[derive(Debug, Clone, PartialEq)]
pub struct ScalePaths {
    /// e.g. `.spec.replicas`.
    pub spec_replicas: String,
    /// e.g. `.status.replicas`.
    pub status_replicas: String,
    /// e.g. `.status.labelSelector`.
    pub label_selector: Option<String>,
}

/// A subresource with its own request kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecialSubresource {
    /// `pods/eviction` (policy/v1 Eviction, create only).
    Eviction,
    /// `certificatesigningrequests/approval` (get, patch, update).
    Approval,
}

impl SpecialSubresource {
    /// Path segment.
    pub fn name(self) -> &'static str {
        match self {
            Self::Eviction => "eviction",
            Self::Approval => "approval",
        }
    }
}

/// How a printer column gets its value.
#[derive(Debug, Clone, PartialEq)]
pub enum ColumnSource {
    /// A simple JSONPath (`.status.phase`, `.metadata.labels['a/b']`).
    JsonPath(String),
    /// Age since `metadata.creationTimestamp`.
    Age,
    /// Node readiness plus `SchedulingDisabled`.
    NodeStatus,
    /// Pod `ready/total` containers.
    PodReady,
    /// CSR condition summary (`Approved,Issued`, `Pending`).
    CsrCondition,
    /// Age of an event's last occurrence (series, lastTimestamp, eventTime, creation).
    EventLastSeen,
    /// `kind/name` of the object an event is about, lower-case kind.
    EventObject,
}

/// A column of `kubectl get` output.
#[derive(Debug, Clone, PartialEq)]
pub struct PrinterColumn {
    /// Header.
    pub name: String,
    /// OpenAPI type (`string`, `integer`, `date`).
    pub type_: String,
    /// Where the value comes from.
    pub source: ColumnSource,
    /// 0 = always shown, 1 = only with `-o wide`.
    pub priority: i64,
}

impl ResourceDef {
    /// The preferred version.
    pub fn preferred_version(&self) -> &str {
        self.versions.first().map(String::as_str).unwrap_or("v1")
    }

    /// `apiVersion` for a version of this resource.
    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{}", self.group, version)
        }
    }

    /// Does this resource serve `version`?
    pub fn serves(&self, version: &str) -> bool {
        self.versions.iter().any(|v| v == version)
    }

    /// Is `sub` a subresource this resource serves?
    pub fn has_subresource(&self, sub: &str) -> bool {
        match sub {
            "status" => self.status_subresource,
            "scale" => self.scale.is_some(),
            other => self.special_subresources.iter().any(|s| s.name() == other),
        }
    }
}

struct Builtin {
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    short: &'static [&'static str],
    namespaced: bool,
    status: bool,
    special: &'static [SpecialSubresource],
}

const BUILTINS: &[Builtin] = &[
    Builtin {
        group: "",
        version: "v1",
        kind: "Namespace",
        plural: "namespaces",
        short: &["ns"],
        namespaced: false,
        status: true,
        special: &[],
    },
    Builtin {
        group: "",
        version: "v1",
        kind: "Node",
        plural: "nodes",
        short: &["no"],
        namespaced: false,
        status: true,
        special: &[],
    },
    Builtin {
        group: "",
        version: "v1",
        kind: "Pod",
        plural: "pods",
        short: &["po"],
        namespaced: true,
        status: true,
        special: &[SpecialSubresource::Eviction],
    },
    Builtin {
        group: "",
        version: "v1",
        kind: "Secret",
        plural: "secrets",
        short: &[],
        namespaced: true,
        status: false,
        special: &[],
    },
    Builtin {
        group: "",
        version: "v1",
        kind: "ConfigMap",
        plural: "configmaps",
        short: &["cm"],
        namespaced: true,
        status: false,
        special: &[],
    },
    Builtin {
        group: "",
        version: "v1",
        kind: "Event",
        plural: "events",
        short: &["ev"],
        namespaced: true,
        status: false,
        special: &[],
    },
    Builtin {
        group: "",
        version: "v1",
        kind: "ServiceAccount",
        plural: "serviceaccounts",
        short: &["sa"],
        namespaced: true,
        status: false,
        special: &[],
    },
    Builtin {
        group: "",
        version: "v1",
        kind: "Service",
        plural: "services",
        short: &["svc"],
        namespaced: true,
        status: true,
        special: &[],
    },
    Builtin {
        group: "events.k8s.io",
        version: "v1",
        kind: "Event",
        plural: "events",
        short: &["ev"],
        namespaced: true,
        status: false,
        special: &[],
    },
    Builtin {
        group: "coordination.k8s.io",
        version: "v1",
        kind: "Lease",
        plural: "leases",
        short: &[],
        namespaced: true,
        status: false,
        special: &[],
    },
    Builtin {
        group: "certificates.k8s.io",
        version: "v1",
        kind: "CertificateSigningRequest",
        plural: "certificatesigningrequests",
        short: &["csr"],
        namespaced: false,
        status: true,
        special: &[SpecialSubresource::Approval],
    },
    Builtin {
        group: "policy",
        version: "v1",
        kind: "PodDisruptionBudget",
        plural: "poddisruptionbudgets",
        short: &["pdb"],
        namespaced: true,
        status: true,
        special: &[],
    },
    Builtin {
        group: "apps",
        version: "v1",
        kind: "DaemonSet",
        plural: "daemonsets",
        short: &["ds"],
        namespaced: true,
        status: true,
        special: &[],
    },
    Builtin {
        group: "apps",
        version: "v1",
        kind: "ReplicaSet",
        plural: "replicasets",
        short: &["rs"],
        namespaced: true,
        status: true,
        special: &[],
    },
    Builtin {
        group: "apiextensions.k8s.io",
        version: "v1",
        kind: "CustomResourceDefinition",
        plural: "customresourcedefinitions",
        short: &["crd", "crds"],
        namespaced: false,
        status: true,
        special: &[],
    },
];

fn column(name: &str, type_: &str, source: ColumnSource, priority: i64) -> PrinterColumn {
    PrinterColumn {
        name: name.to_string(),
        type_: type_.to_string(),
        source,
        priority,
    }
}

fn path(p: &str) -> ColumnSource {
    ColumnSource::JsonPath(p.to_string())
}

fn builtin_columns(group: &str, plural: &str) -> Vec<PrinterColumn> {
    let age = column("Age", "date", ColumnSource::Age, 0);
    match (group, plural) {
        ("", "namespaces") => vec![column("Status", "string", path(".status.phase"), 0), age],
        ("", "nodes") => vec![
            column("Status", "string", ColumnSource::NodeStatus, 0),
            age,
            column(
                "Version",
                "string",
                path(".status.nodeInfo.kubeletVersion"),
                0,
            ),
            column("OS-Image", "string", path(".status.nodeInfo.osImage"), 1),
        ],
        ("", "pods") => vec![
            column("Ready", "string", ColumnSource::PodReady, 0),
            column("Status", "string", path(".status.phase"), 0),
            age,
            column("IP", "string", path(".status.podIP"), 1),
            column("Node", "string", path(".spec.nodeName"), 1),
        ],
        ("", "events") => vec![
            column("Last Seen", "string", ColumnSource::EventLastSeen, 0),
            column("Type", "string", path(".type"), 0),
            column("Reason", "string", path(".reason"), 0),
            column("Object", "string", ColumnSource::EventObject, 0),
            column("Message", "string", path(".message"), 0),
            column("Count", "integer", path(".count"), 1),
            column("Name", "string", path(".metadata.name"), 1),
        ],
        ("", "secrets") => vec![column("Type", "string", path(".type"), 0), age],
        ("certificates.k8s.io", _) => vec![
            age,
            column("SignerName", "string", path(".spec.signerName"), 0),
            column("Requestor", "string", path(".spec.username"), 0),
            column("Condition", "string", ColumnSource::CsrCondition, 0),
        ],
        ("policy", _) => vec![
            column("Min Available", "string", path(".spec.minAvailable"), 0),
            column("Max Unavailable", "string", path(".spec.maxUnavailable"), 0),
            column(
                "Allowed Disruptions",
                "integer",
                path(".status.disruptionsAllowed"),
                0,
            ),
            age,
        ],
        ("coordination.k8s.io", _) => vec![
            column("Holder", "string", path(".spec.holderIdentity"), 0),
            age,
        ],
        ("apiextensions.k8s.io", _) => vec![column(
            "Created At",
            "string",
            path(".metadata.creationTimestamp"),
            0,
        )],
        _ => vec![age],
    }
}

/// The built-in resources the simulator serves.
pub fn builtin_resources() -> Vec<Arc<ResourceDef>> {
    BUILTINS
        .iter()
        .map(|b| {
            Arc::new(ResourceDef {
                group: b.group.to_string(),
                versions: vec![b.version.to_string()],
                kind: b.kind.to_string(),
                list_kind: format!("{}List", b.kind),
                plural: b.plural.to_string(),
                singular: b.kind.to_ascii_lowercase(),
                short_names: b.short.iter().map(|s| s.to_string()).collect(),
                categories: match b.plural {
                    "pods" | "services" | "daemonsets" | "replicasets" => vec!["all".to_string()],
                    _ => Vec::new(),
                },
                namespaced: b.namespaced,
                status_subresource: b.status,
                scale: None,
                special_subresources: b.special.to_vec(),
                columns: builtin_columns(b.group, b.plural),
                custom: false,
                schema: None,
                // kubernetes v1.34.2 `pkg/registry/{coordination/lease,core/event,core/service}/
                // strategy.go`: `AllowCreateOnUpdate` is true for these of kube-sim's built-ins.
                create_on_update: matches!(b.plural, "leases" | "events" | "services"),
                spec_generation: !matches!(
                    b.plural,
                    "namespaces"
                        | "secrets"
                        | "configmaps"
                        | "events"
                        | "serviceaccounts"
                        | "leases"
                        | "pods"
                        | "nodes"
                ),
            })
        })
        .collect()
}

/// Why a CustomResourceDefinition cannot be registered, naming the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct CrdError {
    /// JSON path of the offending field.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

fn crd_error(field: &str, message: &str) -> CrdError {
    CrdError {
        field: field.to_string(),
        message: message.to_string(),
    }
}

fn str_at<'a>(value: &'a Value, pointer: &str) -> Option<&'a str> {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// Builds the resource definition a `CustomResourceDefinition` object declares.
pub fn resource_from_crd(crd: &Value) -> Result<ResourceDef, CrdError> {
    let group =
        str_at(crd, "/spec/group").ok_or_else(|| crd_error("spec.group", "Required value"))?;
    let plural = str_at(crd, "/spec/names/plural")
        .ok_or_else(|| crd_error("spec.names.plural", "Required value"))?;
    let kind = str_at(crd, "/spec/names/kind")
        .ok_or_else(|| crd_error("spec.names.kind", "Required value"))?;
    let name = str_at(crd, "/metadata/name").unwrap_or_default();
    if name != format!("{plural}.{group}") {
        return Err(crd_error(
            "metadata.name",
            &format!("must be spec.names.plural+\".\"+spec.group ({plural}.{group})"),
        ));
    }
    let namespaced = match str_at(crd, "/spec/scope") {
        Some("Namespaced") => true,
        Some("Cluster") => false,
        _ => {
            return Err(crd_error(
                "spec.scope",
                "Unsupported value: must be Namespaced or Cluster",
            ));
        }
    };
    let versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if versions.is_empty() {
        return Err(crd_error(
            "spec.versions",
            "Required value: must have exactly one version marked as storage",
        ));
    }
    let storage: Vec<&Value> = versions
        .iter()
        .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .collect();
    let [storage] = storage.as_slice() else {
        return Err(crd_error(
            "spec.versions",
            "must have exactly one version marked as storage version",
        ));
    };
    let storage_name = str_at(storage, "/name")
        .ok_or_else(|| crd_error("spec.versions[].name", "Required value"))?;
    let mut served: Vec<String> = vec![];
    if storage.get("served").and_then(Value::as_bool) == Some(true) {
        served.push(storage_name.to_string());
    }
    for v in &versions {
        if let Some(n) = str_at(v, "/name")
            && n != storage_name
            && v.get("served").and_then(Value::as_bool) == Some(true)
        {
            served.push(n.to_string());
        }
    }
    let scale = storage.pointer("/subresources/scale").map(|s| ScalePaths {
        spec_replicas: str_at(s, "/specReplicasPath")
            .unwrap_or(".spec.replicas")
            .to_string(),
        status_replicas: str_at(s, "/statusReplicasPath")
            .unwrap_or(".status.replicas")
            .to_string(),
        label_selector: str_at(s, "/labelSelectorPath").map(str::to_string),
    });
    let mut columns: Vec<PrinterColumn> = storage
        .get("additionalPrinterColumns")
        .and_then(Value::as_array)
        .map(|cols| {
            cols.iter()
                .filter_map(|c| {
                    Some(column(
                        str_at(c, "/name")?,
                        str_at(c, "/type").unwrap_or("string"),
                        path(str_at(c, "/jsonPath")?),
                        c.get("priority").and_then(Value::as_i64).unwrap_or(0),
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    if columns.is_empty() {
        columns.push(column("Age", "date", ColumnSource::Age, 0));
    }
    Ok(ResourceDef {
        group: group.to_string(),
        versions: served,
        kind: kind.to_string(),
        list_kind: str_at(crd, "/spec/names/listKind")
            .map(str::to_string)
            .unwrap_or_else(|| format!("{kind}List")),
        plural: plural.to_string(),
        singular: str_at(crd, "/spec/names/singular")
            .map(str::to_string)
            .unwrap_or_else(|| kind.to_ascii_lowercase()),
        short_names: string_list(crd.pointer("/spec/names/shortNames")),
        categories: string_list(crd.pointer("/spec/names/categories")),
        namespaced,
        status_subresource: storage.pointer("/subresources/status").is_some(),
        scale,
        special_subresources: Vec::new(),
        columns,
        custom: true,
        spec_generation: true,
        // `customresource` strategy: `AllowCreateOnUpdate` is false.
        create_on_update: false,
        schema: storage.pointer("/schema/openAPIV3Schema").cloned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn crd() -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"kind": "Widget", "plural": "widgets", "shortNames": ["wd"]},
                "versions": [
                    {"name": "v1alpha1", "served": true, "storage": false},
                    {"name": "v1", "served": true, "storage": true,
                     "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.size", "statusReplicasPath": ".status.size"}},
                     "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}]}]}
        })
    }

    #[test]
    fn crd_declares_storage_version_first_with_subresources_and_columns() {
        let def = resource_from_crd(&crd()).unwrap();
        assert_eq!(def.versions, vec!["v1", "v1alpha1"]);
        assert!(def.status_subresource);
        assert_eq!(def.scale.as_ref().unwrap().spec_replicas, ".spec.size");
        assert_eq!(def.short_names, vec!["wd"]);
        assert_eq!(def.list_kind, "WidgetList");
        assert_eq!(
            def.columns[0].source,
            ColumnSource::JsonPath(".spec.size".into())
        );
    }

    #[test]
    fn crd_name_must_match_plural_and_group() {
        let mut bad = crd();
        bad["metadata"]["name"] = json!("gadgets.example.com");
        assert_eq!(resource_from_crd(&bad).unwrap_err().field, "metadata.name");
    }

    #[test]
    fn crd_needs_exactly_one_storage_version() {
        let mut bad = crd();
        bad["spec"]["versions"][0]["storage"] = json!(true);
        assert_eq!(resource_from_crd(&bad).unwrap_err().field, "spec.versions");
    }
}
