//! Discovery documents: `/api`, `/apis`, per group/version resource lists, `/version`.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::resources::{ResourceDef, STANDARD_VERBS, SpecialSubresource};

/// The Kubernetes version the simulator claims (OpenShift 4.20's).
pub const KUBE_VERSION: (&str, &str) = ("1", "33");

/// `/version`.
pub fn version() -> Value {
    json!({
        "major": KUBE_VERSION.0,
        "minor": KUBE_VERSION.1,
        "gitVersion": format!("v{}.{}.0-kube-sim", KUBE_VERSION.0, KUBE_VERSION.1),
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "1970-01-01T00:00:00Z",
        "goVersion": "none (kube-sim, Rust)",
        "compiler": "rustc",
        "platform": "linux/amd64",
    })
}

/// `/api`.
pub fn core_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

fn group_entry(name: &str, versions: &[String]) -> Value {
    let entries: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    let preferred = entries.first().cloned().unwrap_or(Value::Null);
    json!({"name": name, "versions": entries, "preferredVersion": preferred})
}

/// Groups and their versions (preferred first), core excluded.
fn groups(defs: &[Arc<ResourceDef>]) -> BTreeMap<String, Vec<String>> {
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for def in defs.iter().filter(|d| !d.group.is_empty()) {
        let versions = groups.entry(def.group.clone()).or_default();
        for v in &def.versions {
            if !versions.contains(v) {
                versions.push(v.clone());
            }
        }
    }
    groups
}

/// `/apis`.
pub fn group_list(defs: &[Arc<ResourceDef>]) -> Value {
    let groups: Vec<Value> = groups(defs)
        .iter()
        .map(|(name, versions)| group_entry(name, versions))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/{group}`, if served.
pub fn group(defs: &[Arc<ResourceDef>], name: &str) -> Option<Value> {
    let groups = groups(defs);
    let versions = groups.get(name)?;
    let mut entry = group_entry(name, versions);
    entry["kind"] = json!("APIGroup");
    entry["apiVersion"] = json!("v1");
    Some(entry)
}

/// The resources of a group-version, or `None` if it is not served.
fn served<'a>(
    defs: &'a [Arc<ResourceDef>],
    group: &str,
    version: &str,
) -> Option<Vec<&'a Arc<ResourceDef>>> {
    let served: Vec<&Arc<ResourceDef>> = defs
        .iter()
        .filter(|d| d.group == group && d.serves(version))
        .collect();
    (!served.is_empty()).then_some(served)
}

/// `/api/v1` or `/apis/{group}/{version}`, if served.
pub fn resource_list(defs: &[Arc<ResourceDef>], group: &str, version: &str) -> Option<Value> {
    let served = served(defs, group, version)?;
    let mut resources = vec![];
    for def in served {
        resources.push(json!({
            "name": def.plural,
            "singularName": def.singular,
            "namespaced": def.namespaced,
            "kind": def.kind,
            "verbs": STANDARD_VERBS,
            "shortNames": def.short_names,
            "categories": def.categories,
        }));
        if def.status_subresource {
            resources.push(json!({"name": format!("{}/status", def.plural), "singularName": "", "namespaced": def.namespaced,
                "kind": def.kind, "verbs": ["get", "patch", "update"]}));
        }
        if def.scale.is_some() {
            resources.push(json!({"name": format!("{}/scale", def.plural), "singularName": "", "namespaced": def.namespaced,
                "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": ["get", "patch", "update"]}));
        }
        for special in &def.special_subresources {
            resources.push(match special {
                SpecialSubresource::Eviction => json!({"name": format!("{}/eviction", def.plural), "singularName": "",
                    "namespaced": def.namespaced, "group": "policy", "version": "v1", "kind": "Eviction", "verbs": ["create"]}),
                SpecialSubresource::Approval => json!({"name": format!("{}/approval", def.plural), "singularName": "",
                    "namespaced": def.namespaced, "kind": def.kind, "verbs": ["get", "patch", "update"]}),
            });
        }
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}),
    )
}

/// The key of a group-version in the OpenAPI v3 root (`api/v1`, `apis/{group}/{version}`).
fn openapi_key(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `/openapi/v3`: one entry per served group-version. `hash` changes whenever the documents may have changed, so
/// kubectl's cache of them stays valid.
pub fn openapi_v3_root(defs: &[Arc<ResourceDef>], hash: u64) -> Value {
    let mut paths = serde_json::Map::new();
    for def in defs {
        for version in &def.versions {
            let key = openapi_key(&def.group, version);
            paths.insert(
                key.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{key}?hash={hash:016X}")}),
            );
        }
    }
    json!({"paths": paths})
}

/// `/openapi/v3/{api/v1 | apis/g/v}`: only what kubectl reads. Each resource has a PATCH operation tagged with
/// its group-version-kind and the `fieldValidation` parameter, so kubectl leaves validation to the server (which
/// accepts unknown fields: schemas are not enforced). `components.schemas` is empty, so kubectl computes
/// client-side apply patches from its compiled-in types (built-in kinds) or as JSON merge patches (custom kinds).
pub fn openapi_v3_group_version(
    defs: &[Arc<ResourceDef>],
    group: &str,
    version: &str,
) -> Option<Value> {
    let served = served(defs, group, version)?;
    let prefix = if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    };
    let mut paths = serde_json::Map::new();
    for def in served {
        let path = if def.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", def.plural)
        } else {
            format!("{prefix}/{}/{{name}}", def.plural)
        };
        let gvk = json!({"group": def.group, "version": version, "kind": def.kind});
        let parameters = json!([
            {"name": "dryRun", "in": "query", "schema": {"type": "string"}},
            {"name": "fieldManager", "in": "query", "schema": {"type": "string"}},
            {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}},
            {"name": "force", "in": "query", "schema": {"type": "boolean"}},
        ]);
        paths.insert(
            path,
            json!({"patch": {"operationId": format!("patch{}", def.kind), "x-kubernetes-group-version-kind": gvk, "parameters": parameters,
                "responses": {"200": {"description": "OK"}}}}),
        );
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (kube-sim)", "version": format!("v{}.{}.0", KUBE_VERSION.0, KUBE_VERSION.1)},
        "paths": paths,
        "components": {"schemas": {}},
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::builtin_resources;

    #[test]
    fn core_list_has_pod_eviction_with_its_group() {
        let list = resource_list(&builtin_resources(), "", "v1").unwrap();
        let eviction = list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "pods/eviction")
            .unwrap();
        assert_eq!(eviction["group"], "policy");
        assert_eq!(eviction["kind"], "Eviction");
        assert_eq!(list["groupVersion"], "v1");
    }

    #[test]
    fn group_list_excludes_core_and_names_preferred_version() {
        let list = group_list(&builtin_resources());
        let groups = list["groups"].as_array().unwrap();
        assert!(groups.iter().all(|g| g["name"] != ""));
        let policy = groups.iter().find(|g| g["name"] == "policy").unwrap();
        assert_eq!(policy["preferredVersion"]["groupVersion"], "policy/v1");
        assert!(group(&builtin_resources(), "nope.example.com").is_none());
    }

    #[test]
    fn openapi_v3_tags_patch_operations_with_field_validation() {
        let defs = builtin_resources();
        let root = openapi_v3_root(&defs, 5);
        assert_eq!(
            root["paths"]["apis/policy/v1"]["serverRelativeURL"],
            "/openapi/v3/apis/policy/v1?hash=0000000000000005"
        );
        let doc = openapi_v3_group_version(&defs, "", "v1").unwrap();
        let pod = &doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"];
        assert_eq!(pod["x-kubernetes-group-version-kind"]["kind"], "Pod");
        assert!(
            pod["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == "fieldValidation")
        );
        assert!(doc["paths"]["/api/v1/nodes/{name}"]["patch"].is_object());
    }
}
