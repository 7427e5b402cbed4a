//! The controller's permissions as `manifests/rbac/` grants them, evaluated the way the API
//! server's RBAC authorizer does, so that tests can check each call in kube-sim's request log
//! against the manifests an administrator installs (they are the single source of truth).
//!
//! Shared by `tests/manifests.rs` and the end-to-end tests (`tests/controller/`), each of which
//! includes this file as a module.
#![allow(dead_code, reason = "shared by two test crates, each using part of it")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, Subject,
};
use kube_sim::RequestRecord;
use serde_json::Value;

/// `manifests/rbac/`, read with every directory below it.
pub fn rbac_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/rbac")
}

/// One rule and where it applies: `None` everywhere (a ClusterRoleBinding), `Some(ns)` in one
/// namespace (a RoleBinding).
#[derive(Debug, Clone)]
pub struct Grant {
    pub namespace: Option<String>,
    pub rule: PolicyRule,
}

/// What one ServiceAccount may do.
#[derive(Debug, Clone)]
pub struct Permissions {
    pub service_account: (String, String),
    pub grants: Vec<Grant>,
}

/// Every RBAC object (and ServiceAccount) found in a directory tree.
#[derive(Debug, Default)]
struct Objects {
    service_accounts: Vec<(String, String)>,
    cluster_roles: BTreeMap<String, Vec<PolicyRule>>,
    roles: BTreeMap<(String, String), Vec<PolicyRule>>,
    cluster_role_bindings: Vec<ClusterRoleBinding>,
    role_bindings: Vec<RoleBinding>,
}

fn yaml_files(dir: &Path, found: &mut Vec<PathBuf>) -> Result<(), String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries {
        let path = entry.map_err(|e| format!("{}: {e}", dir.display()))?.path();
        if path.is_dir() {
            yaml_files(&path, found)?;
        } else if path
            .extension()
            .is_some_and(|ext| ext == "yaml" || ext == "yml")
        {
            found.push(path);
        }
    }
    found.sort();
    Ok(())
}

fn typed<T: serde::de::DeserializeOwned>(document: Value, path: &Path) -> Result<T, String> {
    serde_json::from_value(document).map_err(|e| format!("{}: {e}", path.display()))
}

fn text(document: &Value, pointer: &str) -> String {
    document
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

impl Objects {
    fn read(dir: &Path) -> Result<Self, String> {
        let mut files = Vec::new();
        yaml_files(dir, &mut files)?;
        let mut objects = Self::default();
        for path in files {
            let source =
                std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let documents = serde_saphyr::from_multiple::<Value>(&source)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            for document in documents.into_iter().filter(|d| !d.is_null()) {
                let kind = text(&document, "/kind");
                let name = text(&document, "/metadata/name");
                let namespace = text(&document, "/metadata/namespace");
                match kind.as_str() {
                    "ServiceAccount" => objects.service_accounts.push((namespace, name)),
                    "ClusterRole" => {
                        let role: ClusterRole = typed(document, &path)?;
                        let previous = objects
                            .cluster_roles
                            .insert(name.clone(), role.rules.unwrap_or_default());
                        if previous.is_some() {
                            return Err(format!("ClusterRole {name} is defined twice"));
                        }
                    }
                    "Role" => {
                        if namespace.is_empty() {
                            return Err(format!(
                                "{}: Role {name} has no namespace",
                                path.display()
                            ));
                        }
                        let role: Role = typed(document, &path)?;
                        let previous = objects.roles.insert(
                            (namespace.clone(), name.clone()),
                            role.rules.unwrap_or_default(),
                        );
                        if previous.is_some() {
                            return Err(format!("Role {namespace}/{name} is defined twice"));
                        }
                    }
                    "ClusterRoleBinding" => {
                        objects.cluster_role_bindings.push(typed(document, &path)?)
                    }
                    "RoleBinding" => {
                        if namespace.is_empty() {
                            return Err(format!(
                                "{}: RoleBinding {name} has no namespace",
                                path.display()
                            ));
                        }
                        objects.role_bindings.push(typed(document, &path)?);
                    }
                    _ => {}
                }
            }
        }
        Ok(objects)
    }
}

fn names_service_account(subjects: Option<&Vec<Subject>>, namespace: &str, name: &str) -> bool {
    subjects.into_iter().flatten().any(|subject| {
        subject.kind == "ServiceAccount"
            && subject.name == name
            && subject.namespace.as_deref() == Some(namespace)
    })
}

impl Permissions {
    /// The permissions of the one ServiceAccount `manifests/rbac/` defines (the controller's).
    pub fn controller() -> Result<Self, String> {
        let dir = rbac_dir();
        let objects = Objects::read(&dir)?;
        let [(namespace, name)] = objects.service_accounts.as_slice() else {
            return Err(format!(
                "{}: expected exactly one ServiceAccount, found {:?}",
                dir.display(),
                objects.service_accounts
            ));
        };
        Self::from_objects(&objects, namespace, name)
    }

    /// The permissions of ServiceAccount `namespace/name` from the manifests under `dir`.
    pub fn of_service_account(dir: &Path, namespace: &str, name: &str) -> Result<Self, String> {
        Self::from_objects(&Objects::read(dir)?, namespace, name)
    }

    fn from_objects(objects: &Objects, namespace: &str, name: &str) -> Result<Self, String> {
        let mut grants = Vec::new();
        for binding in &objects.cluster_role_bindings {
            if !names_service_account(binding.subjects.as_ref(), namespace, name) {
                continue;
            }
            let role = &binding.role_ref;
            let binding_name = binding.metadata.name.as_deref().unwrap_or_default();
            if role.kind != "ClusterRole" {
                return Err(format!(
                    "ClusterRoleBinding {binding_name}: roleRef kind {} (must be ClusterRole)",
                    role.kind
                ));
            }
            let rules = objects.cluster_roles.get(&role.name).ok_or_else(|| {
                format!(
                    "ClusterRoleBinding {binding_name}: ClusterRole {} is not in the manifests",
                    role.name
                )
            })?;
            grants.extend(rules.iter().map(|rule| Grant {
                namespace: None,
                rule: rule.clone(),
            }));
        }
        for binding in &objects.role_bindings {
            if !names_service_account(binding.subjects.as_ref(), namespace, name) {
                continue;
            }
            let binding_namespace = binding.metadata.namespace.clone().unwrap_or_default();
            let binding_name = binding.metadata.name.as_deref().unwrap_or_default();
            let role = &binding.role_ref;
            let rules = match role.kind.as_str() {
                "Role" => objects
                    .roles
                    .get(&(binding_namespace.clone(), role.name.clone())),
                "ClusterRole" => objects.cluster_roles.get(&role.name),
                other => {
                    return Err(format!(
                        "RoleBinding {binding_namespace}/{binding_name}: roleRef kind {other}"
                    ));
                }
            }
            .ok_or_else(|| {
                format!(
                    "RoleBinding {binding_namespace}/{binding_name}: {} {} is not in the manifests (in that namespace)",
                    role.kind, role.name
                )
            })?;
            grants.extend(rules.iter().map(|rule| Grant {
                namespace: Some(binding_namespace.clone()),
                rule: rule.clone(),
            }));
        }
        Ok(Self {
            service_account: (namespace.to_owned(), name.to_owned()),
            grants,
        })
    }

    /// Does some rule allow this resource request? (RBAC's matching: `*` wildcards, `*/sub`
    /// for subresources, `resourceNames` only for requests that name an object.)
    pub fn allows(&self, call: &RequestRecord) -> bool {
        let resource = call.rbac_resource();
        self.grants.iter().any(|grant| {
            let rule = &grant.rule;
            let namespace_ok = grant
                .namespace
                .as_ref()
                .is_none_or(|namespace| *namespace == call.namespace);
            let verb_ok = rule.verbs.iter().any(|v| v == "*" || *v == call.verb);
            let group_ok = rule
                .api_groups
                .iter()
                .flatten()
                .any(|g| g == "*" || *g == call.api_group);
            let resource_ok = rule.resources.iter().flatten().any(|r| {
                r == "*"
                    || *r == resource
                    || (!call.subresource.is_empty()
                        && r.strip_prefix("*/") == Some(call.subresource.as_str()))
            });
            let name_ok = match rule.resource_names.as_deref() {
                None | Some([]) => true,
                Some(names) => !call.name.is_empty() && names.contains(&call.name),
            };
            namespace_ok && verb_ok && group_ok && resource_ok && name_ok
        })
    }

    /// The distinct resource requests among `calls` that no rule allows, described for a
    /// failure message. Non-resource requests (discovery, `/version`) are left out: every
    /// authenticated user may make them (the built-in `system:discovery` role).
    pub fn forbidden(&self, calls: &[RequestRecord]) -> Vec<String> {
        let mut forbidden: Vec<String> = calls
            .iter()
            .filter(|call| call.is_resource_request() && !self.allows(call))
            .map(describe)
            .collect();
        forbidden.sort();
        forbidden.dedup();
        forbidden
    }
}

/// `verb group/resource[/sub] [namespace ns] [name n]`.
pub fn describe(call: &RequestRecord) -> String {
    let group = if call.api_group.is_empty() {
        "core"
    } else {
        call.api_group.as_str()
    };
    let mut text = format!("{} {group}/{}", call.verb, call.rbac_resource());
    if !call.namespace.is_empty() {
        text.push_str(&format!(" in namespace {}", call.namespace));
    }
    if !call.name.is_empty() {
        text.push_str(&format!(" named {}", call.name));
    }
    text
}
