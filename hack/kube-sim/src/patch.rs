//! Patch types: JSON merge patch (RFC 7386), JSON patch (RFC 6902, with `test`), strategic merge patch (the
//! merge keys and directives of the built-in types kubectl uses) and an approximation of server-side apply.

use serde_json::{Map, Value};

/// A patch content type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    /// `application/merge-patch+json`.
    Merge,
    /// `application/json-patch+json`.
    Json,
    /// `application/strategic-merge-patch+json`.
    Strategic,
    /// `application/apply-patch+yaml` (server-side apply).
    Apply,
}

impl PatchKind {
    /// Recognises a `Content-Type`.
    pub fn from_content_type(content_type: &str) -> Option<Self> {
        match content_type.split(';').next().map(str::trim) {
            Some("application/merge-patch+json") => Some(Self::Merge),
            Some("application/json-patch+json") => Some(Self::Json),
            Some("application/strategic-merge-patch+json") => Some(Self::Strategic),
            Some("application/apply-patch+yaml") | Some("application/apply-patch+cbor") => {
                Some(Self::Apply)
            }
            _ => None,
        }
    }
}

/// Why a patch cannot be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// The body is not valid JSON (or YAML for apply).
    #[error("the patch body is not valid: {0}")]
    Malformed(String),
    /// A JSON patch operation failed (including a failed `test`).
    #[error("the JSON patch could not be applied: {0}")]
    JsonPatch(String),
    /// A strategic merge directive is not understood.
    #[error("unknown strategic merge patch directive {0:?}")]
    UnknownDirective(String),
}

/// Parses a patch or apply body: JSON, or YAML for server-side apply.
pub fn parse_body(kind: PatchKind, body: &[u8]) -> Result<Value, PatchError> {
    match serde_json::from_slice(body) {
        Ok(v) => Ok(v),
        Err(json_err) if kind == PatchKind::Apply => {
            let text =
                std::str::from_utf8(body).map_err(|e| PatchError::Malformed(e.to_string()))?;
            serde_saphyr::from_str::<Value>(text)
                .map_err(|e| PatchError::Malformed(format!("{json_err}; as YAML: {e}")))
        }
        Err(e) => Err(PatchError::Malformed(e.to_string())),
    }
}

/// Applies a parsed patch to a copy of `current`.
pub fn apply_patch(kind: PatchKind, current: &Value, patch: &Value) -> Result<Value, PatchError> {
    let mut doc = current.clone();
    match kind {
        PatchKind::Merge => json_patch::merge(&mut doc, patch),
        PatchKind::Json => {
            let ops: json_patch::Patch = serde_json::from_value(patch.clone())
                .map_err(|e| PatchError::Malformed(e.to_string()))?;
            for op in &ops.0 {
                // As in the API server's JSON patch library, `test` of a missing path against null succeeds
                // (kube-rs's finalizer helper relies on it when an object has no finalizers yet).
                if let json_patch::PatchOperation::Test(test) = op
                    && test.value.is_null()
                    && doc.pointer(test.path.as_str()).is_none_or(Value::is_null)
                {
                    continue;
                }
                json_patch::patch(&mut doc, std::slice::from_ref(op))
                    .map_err(|e| PatchError::JsonPatch(e.to_string()))?;
            }
        }
        PatchKind::Strategic => strategic_merge(&mut doc, patch)?,
        PatchKind::Apply => server_side_apply(&mut doc, patch),
    }
    Ok(doc)
}

/// How a list field merges in a strategic merge patch.
pub(crate) enum ListStrategy {
    /// Elements are maps merged by this key.
    MergeKey(&'static str),
    /// Elements are primitives; the patch's are added to the target's.
    PrimitiveMerge,
    /// The list is replaced.
    Replace,
}

/// Merge strategies of the built-in types' lists (their Go struct tags `patchStrategy:"merge"` and
/// `patchMergeKey`), by field name.
pub(crate) fn list_strategy(field: &str) -> ListStrategy {
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets"
        | "resourceClaims" => ListStrategy::MergeKey("name"),
        "conditions" | "addresses" => ListStrategy::MergeKey("type"),
        "ports" => ListStrategy::MergeKey("containerPort"),
        "volumeMounts" => ListStrategy::MergeKey("mountPath"),
        "volumeDevices" => ListStrategy::MergeKey("devicePath"),
        "ownerReferences" => ListStrategy::MergeKey("uid"),
        "hostAliases" => ListStrategy::MergeKey("ip"),
        "topologySpreadConstraints" => ListStrategy::MergeKey("topologyKey"),
        "finalizers" => ListStrategy::PrimitiveMerge,
        _ => ListStrategy::Replace,
    }
}

/// Strategic merge patch: JSON merge semantics, plus lists merged by key and the `$patch`, `$retainKeys`,
/// `$deleteFromPrimitiveList/` and `$setElementOrder/` directives.
pub fn strategic_merge(target: &mut Value, patch: &Value) -> Result<(), PatchError> {
    let Value::Object(patch_map) = patch else {
        *target = patch.clone();
        return Ok(());
    };
    match patch_map.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            let mut replaced = patch_map.clone();
            replaced.remove("$patch");
            *target = Value::Object(replaced);
            return Ok(());
        }
        Some("delete") => {
            *target = Value::Null;
            return Ok(());
        }
        Some("merge") | None => {}
        Some(other) => return Err(PatchError::UnknownDirective(other.to_string())),
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(target_map) = target else {
        return Ok(());
    };
    let mut order_directives = vec![];
    for (key, value) in patch_map {
        if key == "$patch" {
            continue;
        }
        if key == "$retainKeys" {
            continue;
        }
        if let Some(field) = key.strip_prefix("$deleteFromPrimitiveList/") {
            let remove: Vec<&Value> = value
                .as_array()
                .map(|a| a.iter().collect())
                .unwrap_or_default();
            if let Some(Value::Array(items)) = target_map.get_mut(field) {
                items.retain(|item| !remove.contains(&item));
            }
            continue;
        }
        if let Some(field) = key.strip_prefix("$setElementOrder/") {
            order_directives.push((field.to_string(), value.clone()));
            continue;
        }
        if key.starts_with('$') {
            return Err(PatchError::UnknownDirective(key.clone()));
        }
        if value.is_null() {
            target_map.remove(key);
            continue;
        }
        match value {
            Value::Object(_) => {
                let entry = target_map.entry(key.clone()).or_insert(Value::Null);
                strategic_merge(entry, value)?;
                if entry.is_null() {
                    target_map.remove(key);
                }
            }
            Value::Array(patch_items) => {
                let current = target_map.remove(key);
                let merged = merge_list(key, current, patch_items)?;
                target_map.insert(key.clone(), merged);
            }
            _ => {
                target_map.insert(key.clone(), value.clone());
            }
        }
    }
    for (field, order) in order_directives {
        if let (Some(Value::Array(items)), ListStrategy::MergeKey(merge_key)) =
            (target_map.get_mut(&field), list_strategy(&field))
        {
            let position = |item: &Value| {
                order
                    .as_array()
                    .and_then(|o| {
                        o.iter()
                            .position(|e| e.get(merge_key) == item.get(merge_key))
                    })
                    .unwrap_or(usize::MAX)
            };
            items.sort_by_key(position);
        }
    }
    if let Some(Value::Array(keep)) = patch_map.get("$retainKeys") {
        let keep: Vec<&str> = keep.iter().filter_map(Value::as_str).collect();
        target_map.retain(|k, _| keep.contains(&k.as_str()));
    }
    Ok(())
}

fn merge_list(
    field: &str,
    current: Option<Value>,
    patch_items: &[Value],
) -> Result<Value, PatchError> {
    let replace_directive = patch_items
        .iter()
        .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"));
    let mut items = match current {
        Some(Value::Array(items)) if !replace_directive => items,
        _ => vec![],
    };
    match list_strategy(field) {
        ListStrategy::Replace => Ok(Value::Array(
            patch_items
                .iter()
                .filter(|i| i.get("$patch").is_none())
                .cloned()
                .collect(),
        )),
        ListStrategy::PrimitiveMerge => {
            for item in patch_items {
                if !items.contains(item) {
                    items.push(item.clone());
                }
            }
            Ok(Value::Array(items))
        }
        ListStrategy::MergeKey(merge_key) => {
            for item in patch_items {
                let directive = item.get("$patch").and_then(Value::as_str);
                if directive == Some("replace") {
                    continue;
                }
                let key = item.get(merge_key);
                let position =
                    key.and_then(|k| items.iter().position(|t| t.get(merge_key) == Some(k)));
                match (directive, position) {
                    (Some("delete"), Some(p)) => {
                        items.remove(p);
                    }
                    (Some("delete"), None) => {}
                    (_, Some(p)) => strategic_merge(&mut items[p], item)?,
                    (_, None) => {
                        let mut fresh = Value::Null;
                        strategic_merge(&mut fresh, item)?;
                        items.push(fresh);
                    }
                }
            }
            Ok(Value::Array(items))
        }
    }
}

/// Server-side apply, approximated: the applied configuration is merged into the live object like a strategic
/// merge patch (lists with a known merge key, including `conditions` by `type`, merge by key; other lists are
/// replaced). Field ownership (`managedFields`), conflicts between managers and removal of fields a manager
/// stopped applying are not simulated.
pub fn server_side_apply(target: &mut Value, applied: &Value) {
    match (target, applied) {
        (Value::Object(t), Value::Object(a)) => {
            for (key, value) in a {
                if key == "managedFields" {
                    continue;
                }
                match value {
                    Value::Null => {
                        t.remove(key);
                    }
                    Value::Object(_) => {
                        let entry = t.entry(key.clone()).or_insert(Value::Object(Map::new()));
                        if !entry.is_object() {
                            *entry = Value::Object(Map::new());
                        }
                        server_side_apply(entry, value);
                    }
                    Value::Array(items) => {
                        let merged = match (list_strategy(key), t.remove(key)) {
                            (ListStrategy::MergeKey(merge_key), Some(Value::Array(mut live))) => {
                                for item in items {
                                    match live.iter().position(|l| {
                                        l.get(merge_key).is_some()
                                            && l.get(merge_key) == item.get(merge_key)
                                    }) {
                                        Some(p) => server_side_apply(&mut live[p], item),
                                        None => live.push(item.clone()),
                                    }
                                }
                                live
                            }
                            (ListStrategy::PrimitiveMerge, Some(Value::Array(mut live))) => {
                                for item in items {
                                    if !live.contains(item) {
                                        live.push(item.clone());
                                    }
                                }
                                live
                            }
                            _ => items.clone(),
                        };
                        t.insert(key.clone(), Value::Array(merged));
                    }
                    _ => {
                        t.insert(key.clone(), value.clone());
                    }
                }
            }
        }
        (target, applied) => *target = applied.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn content_types_are_recognised() {
        assert_eq!(
            PatchKind::from_content_type("application/merge-patch+json; charset=utf-8"),
            Some(PatchKind::Merge)
        );
        assert_eq!(
            PatchKind::from_content_type("application/apply-patch+yaml"),
            Some(PatchKind::Apply)
        );
        assert_eq!(PatchKind::from_content_type("application/json"), None);
    }

    #[test]
    fn json_patch_test_failure_leaves_no_change() {
        let doc = json!({"metadata": {"finalizers": ["a"]}});
        let patch = json!([{"op": "test", "path": "/metadata/finalizers/0", "value": "b"}, {"op": "remove", "path": "/metadata/finalizers/0"}]);
        assert!(matches!(
            apply_patch(PatchKind::Json, &doc, &patch),
            Err(PatchError::JsonPatch(_))
        ));
        let ok = json!([{"op": "test", "path": "/metadata/finalizers/0", "value": "a"}, {"op": "remove", "path": "/metadata/finalizers/0"}]);
        assert_eq!(
            apply_patch(PatchKind::Json, &doc, &ok).unwrap(),
            json!({"metadata": {"finalizers": []}})
        );
    }

    #[test]
    fn json_patch_test_of_missing_path_against_null_passes() {
        let doc = json!({"metadata": {"name": "a"}});
        let patch = json!([{"op": "test", "path": "/metadata/finalizers", "value": null}, {"op": "add", "path": "/metadata/finalizers", "value": ["f"]}]);
        assert_eq!(
            apply_patch(PatchKind::Json, &doc, &patch).unwrap()["metadata"]["finalizers"],
            json!(["f"])
        );
        let wrong = json!([{"op": "test", "path": "/metadata/name", "value": null}]);
        assert!(apply_patch(PatchKind::Json, &doc, &wrong).is_err());
    }

    #[test]
    fn merge_patch_replaces_lists_and_null_deletes() {
        let doc = json!({"a": 1, "l": [1, 2], "m": {"x": 1}});
        let out = apply_patch(
            PatchKind::Merge,
            &doc,
            &json!({"a": null, "l": [3], "m": {"y": 2}}),
        )
        .unwrap();
        assert_eq!(out, json!({"l": [3], "m": {"x": 1, "y": 2}}));
    }

    #[test]
    fn strategic_merge_merges_keyed_lists_and_honours_directives() {
        let doc = json!({"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}], "taints": [{"key": "t"}]},
            "metadata": {"finalizers": ["f1"], "labels": {"k": "v", "drop": "me"}}});
        let patch = json!({
            "spec": {"containers": [{"name": "b", "image": "z"}, {"name": "a", "$patch": "delete"}, {"name": "c", "image": "w"}], "taints": [{"key": "u"}]},
            "metadata": {"finalizers": ["f2"], "labels": {"drop": null}},
        });
        let out = apply_patch(PatchKind::Strategic, &doc, &patch).unwrap();
        assert_eq!(
            out["spec"]["containers"],
            json!([{"name": "b", "image": "z"}, {"name": "c", "image": "w"}])
        );
        assert_eq!(out["spec"]["taints"], json!([{"key": "u"}]));
        assert_eq!(out["metadata"]["finalizers"], json!(["f1", "f2"]));
        assert_eq!(out["metadata"]["labels"], json!({"k": "v"}));
    }

    #[test]
    fn strategic_merge_primitive_delete_set_order_and_replace() {
        let doc = json!({"metadata": {"finalizers": ["a", "b"]}, "spec": {"m": {"x": 1, "y": 2}},
            "status": {"conditions": [{"type": "A"}, {"type": "B"}]}});
        let patch = json!({
            "metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]},
            "spec": {"m": {"$patch": "replace", "z": 3}},
            "status": {"$setElementOrder/conditions": [{"type": "B"}, {"type": "A"}], "conditions": [{"type": "A", "status": "True"}]},
        });
        let out = apply_patch(PatchKind::Strategic, &doc, &patch).unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["b"]));
        assert_eq!(out["spec"]["m"], json!({"z": 3}));
        assert_eq!(
            out["status"]["conditions"],
            json!([{"type": "B"}, {"type": "A", "status": "True"}])
        );
        assert!(matches!(
            apply_patch(PatchKind::Strategic, &doc, &json!({"$bogus": 1})),
            Err(PatchError::UnknownDirective(_))
        ));
    }

    #[test]
    fn apply_merges_conditions_by_type_and_parses_yaml() {
        let live = json!({"status": {"conditions": [{"type": "A", "status": "False"}, {"type": "B", "status": "True"}], "phase": "x"}});
        let applied = parse_body(
            PatchKind::Apply,
            b"status:\n  conditions:\n  - type: A\n    status: \"True\"\n",
        )
        .unwrap();
        let out = apply_patch(PatchKind::Apply, &live, &applied).unwrap();
        assert_eq!(
            out["status"]["conditions"],
            json!([{"type": "A", "status": "True"}, {"type": "B", "status": "True"}])
        );
        assert_eq!(out["status"]["phase"], json!("x"));
    }
}
