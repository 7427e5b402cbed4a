//! Field ownership for server-side apply (`metadata.managedFields`, FieldsV1 format), simplified: leaf fields are
//! owned per (manager, operation); lists with a known merge key are owned item by item, primitive merge lists
//! (finalizers) value by value, other lists as a whole.
//!
//! This is what makes apply conflicts (409) and the removal of fields a manager stopped applying work.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use crate::patch::{ListStrategy, list_strategy};

/// A path of FieldsV1 keys (`f:spec`, `k:{"type":"Ready"}`, `v:"finalizer"`).
pub type FieldPath = Vec<String>;

/// A set of owned leaf paths.
pub type FieldSet = BTreeSet<FieldPath>;

/// Which parts of an object a write may own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Everything but status (the main resource of a type with a status subresource).
    MainWithoutStatus,
    /// Everything (types without a status subresource).
    Everything,
    /// Only status (the status subresource).
    StatusOnly,
}

/// Metadata fields the server owns.
const SERVER_METADATA: [&str; 10] = [
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
];

fn collect(value: &Value, field: Option<&str>, prefix: &mut FieldPath, out: &mut FieldSet) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (key, child) in map {
                prefix.push(format!("f:{key}"));
                collect(child, Some(key), prefix, out);
                prefix.pop();
            }
        }
        Value::Array(items) if !items.is_empty() => match field.map(list_strategy) {
            Some(ListStrategy::MergeKey(key)) if items.iter().all(|i| i.get(key).is_some()) => {
                for item in items {
                    let mut key_map = Map::new();
                    key_map.insert(
                        key.to_string(),
                        item.get(key).cloned().unwrap_or(Value::Null),
                    );
                    prefix.push(format!("k:{}", Value::Object(key_map)));
                    out.insert(prefix.clone());
                    collect(item, None, prefix, out);
                    prefix.pop();
                }
            }
            Some(ListStrategy::PrimitiveMerge) => {
                for item in items {
                    prefix.push(format!("v:{item}"));
                    out.insert(prefix.clone());
                    prefix.pop();
                }
            }
            _ => {
                out.insert(prefix.clone());
            }
        },
        _ => {
            out.insert(prefix.clone());
        }
    }
}

/// The leaf fields of an object that a write in `scope` may own.
pub fn leaves(object: &Value, scope: Scope) -> FieldSet {
    let mut out = FieldSet::new();
    let Value::Object(map) = object else {
        return out;
    };
    for (key, value) in map {
        let counted = match (key.as_str(), scope) {
            ("apiVersion" | "kind", _) => false,
            ("status", Scope::StatusOnly | Scope::Everything) => true,
            (_, Scope::StatusOnly) | ("status", Scope::MainWithoutStatus) => false,
            _ => true,
        };
        if !counted {
            continue;
        }
        if key == "metadata" {
            let mut meta = value.as_object().cloned().unwrap_or_default();
            meta.retain(|k, _| !SERVER_METADATA.contains(&k.as_str()));
            let mut prefix = vec!["f:metadata".to_string()];
            collect(&Value::Object(meta), None, &mut prefix, &mut out);
            out.remove(&vec!["f:metadata".to_string()]);
            continue;
        }
        let mut prefix = vec![format!("f:{key}")];
        collect(value, Some(key), &mut prefix, &mut out);
    }
    out
}

/// The value at a field path, if present.
pub fn value_at<'a>(object: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut current = object;
    for step in path {
        current = if let Some(key) = step.strip_prefix("f:") {
            current.get(key)?
        } else if let Some(key) = step.strip_prefix("k:") {
            let key: Map<String, Value> = serde_json::from_str(key).ok()?;
            current
                .as_array()?
                .iter()
                .find(|item| key.iter().all(|(k, v)| item.get(k) == Some(v)))?
        } else if let Some(v) = step.strip_prefix("v:") {
            let v: Value = serde_json::from_str(v).ok()?;
            current.as_array()?.iter().find(|item| **item == v)?
        } else {
            return None;
        };
    }
    Some(current)
}

/// Removes the field at a path (no-op if absent).
pub fn remove_at(object: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut current = object;
    for step in parents {
        let next = if let Some(key) = step.strip_prefix("f:") {
            current.get_mut(key)
        } else if let Some(key) = step.strip_prefix("k:") {
            let Ok(key) = serde_json::from_str::<Map<String, Value>>(key) else {
                return;
            };
            current.as_array_mut().and_then(|items| {
                items
                    .iter_mut()
                    .find(|item| key.iter().all(|(k, v)| item.get(k) == Some(v)))
            })
        } else {
            None
        };
        match next {
            Some(next) => current = next,
            None => return,
        }
    }
    if let Some(key) = last.strip_prefix("f:") {
        if let Some(map) = current.as_object_mut() {
            map.remove(key);
        }
    } else if let Some(key) = last.strip_prefix("k:") {
        let Ok(key) = serde_json::from_str::<Map<String, Value>>(key) else {
            return;
        };
        if let Some(items) = current.as_array_mut() {
            items.retain(|item| !key.iter().all(|(k, v)| item.get(k) == Some(v)));
        }
    } else if let Some(v) = last.strip_prefix("v:") {
        let Ok(v) = serde_json::from_str::<Value>(v) else {
            return;
        };
        if let Some(items) = current.as_array_mut() {
            items.retain(|item| *item != v);
        }
    }
}

fn to_tree(set: &FieldSet) -> Value {
    let mut root = Value::Object(Map::new());
    for path in set {
        let mut node = &mut root;
        for step in path {
            let Value::Object(map) = node else { break };
            node = map
                .entry(step.clone())
                .or_insert_with(|| Value::Object(Map::new()));
        }
    }
    // A leaf that also has children (a keyed list item and its fields) is marked with ".".
    for path in set {
        let mut node = Some(&mut root);
        for step in path {
            node = node.and_then(|n| n.get_mut(step.as_str()));
        }
        if let Some(Value::Object(map)) = node
            && !map.is_empty()
        {
            map.insert(".".into(), json!({}));
        }
    }
    root
}

fn from_tree(tree: &Value, prefix: &mut FieldPath, out: &mut FieldSet) {
    let Some(map) = tree.as_object() else { return };
    if (map.is_empty() || map.contains_key(".")) && !prefix.is_empty() {
        out.insert(prefix.clone());
    }
    for (key, child) in map {
        if key == "." {
            continue;
        }
        prefix.push(key.clone());
        from_tree(child, prefix, out);
        prefix.pop();
    }
}

/// One `managedFields` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// Field manager name.
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    /// Owned leaf fields.
    pub fields: FieldSet,
    /// `apiVersion` of the write.
    pub api_version: String,
    /// When it was last written.
    pub time: String,
    /// `status` for writes to the status subresource.
    pub subresource: String,
}

/// Reads `metadata.managedFields`.
pub fn read(object: &Value) -> Vec<Entry> {
    let Some(entries) = object
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
    else {
        return vec![];
    };
    entries
        .iter()
        .map(|e| {
            let mut fields = FieldSet::new();
            if let Some(tree) = e.get("fieldsV1") {
                from_tree(tree, &mut vec![], &mut fields);
            }
            let text = |k: &str| {
                e.get(k)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            Entry {
                manager: text("manager"),
                operation: text("operation"),
                fields,
                api_version: text("apiVersion"),
                time: text("time"),
                subresource: text("subresource"),
            }
        })
        .collect()
}

/// Writes `metadata.managedFields` (entries without fields are dropped, as the real server does).
pub fn write(object: &mut Value, entries: &[Entry]) {
    let list: Vec<Value> = entries
        .iter()
        .filter(|e| !e.fields.is_empty())
        .map(|e| {
            let mut v = json!({"manager": e.manager, "operation": e.operation, "apiVersion": e.api_version, "time": e.time,
                "fieldsType": "FieldsV1", "fieldsV1": to_tree(&e.fields)});
            if !e.subresource.is_empty() {
                v["subresource"] = json!(e.subresource);
            }
            v
        })
        .collect();
    let meta = crate::meta::metadata_mut(object);
    if list.is_empty() {
        meta.remove("managedFields");
    } else {
        meta.insert("managedFields".into(), Value::Array(list));
    }
}

/// A field another manager owns with a different value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The other manager.
    pub manager: String,
    /// Dotted field path for the message.
    pub field: String,
}

fn dotted(path: &[String]) -> String {
    path.iter()
        .map(|s| match s.strip_prefix("f:") {
            Some(f) => format!(".{f}"),
            None => format!("[{}]", &s[2..]),
        })
        .collect()
}

/// The ownership change of a non-apply write by `manager`: changed leaves move to (manager, Update), removed
/// leaves leave every entry.
pub fn record_update(
    before: &Value,
    after: &mut Value,
    manager: &str,
    scope: Scope,
    subresource: &str,
    now: &str,
) {
    let mut entries = read(before);
    let old = leaves(before, scope);
    let new = leaves(after, scope);
    let changed: FieldSet = new
        .iter()
        .filter(|p| value_at(before, p) != value_at(after, p))
        .cloned()
        .collect();
    let removed: FieldSet = old.difference(&new).cloned().collect();
    for entry in &mut entries {
        entry.fields.retain(|p| {
            !changed.contains(p)
                && !removed.contains(p)
                && !removed.iter().any(|r| p.starts_with(r))
        });
    }
    if !changed.is_empty() {
        let api_version = after
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        match entries.iter_mut().find(|e| {
            e.manager == manager && e.operation == "Update" && e.subresource == subresource
        }) {
            Some(e) => {
                e.fields.extend(changed);
                e.time = now.to_string();
            }
            None => entries.push(Entry {
                manager: manager.to_string(),
                operation: "Update".into(),
                fields: changed,
                api_version,
                time: now.to_string(),
                subresource: subresource.to_string(),
            }),
        }
    }
    write(after, &entries);
}

/// Applies ownership rules of server-side apply. `merged` is the live object with the applied configuration merged
/// in. Returns the conflicts (when not forced), or updates `merged`: fields this manager applied before and no
/// longer applies (and nobody else owns) are removed, and ownership is recorded.
#[allow(clippy::too_many_arguments)]
pub fn record_apply(
    live: &Value,
    applied: &Value,
    merged: &mut Value,
    manager: &str,
    force: bool,
    scope: Scope,
    subresource: &str,
    now: &str,
) -> Result<(), Vec<Conflict>> {
    let mut entries = read(live);
    let wanted = leaves(applied, scope);
    let mut conflicts = vec![];
    let mut conflicting = FieldSet::new();
    for entry in entries
        .iter()
        .filter(|e| !(e.manager == manager && e.operation == "Apply"))
    {
        for path in wanted.intersection(&entry.fields) {
            if value_at(live, path) != value_at(applied, path) {
                conflicts.push(Conflict {
                    manager: entry.manager.clone(),
                    field: dotted(path),
                });
                conflicting.insert(path.clone());
            }
        }
    }
    if !conflicts.is_empty() && !force {
        return Err(conflicts);
    }
    let previously: FieldSet = entries
        .iter()
        .find(|e| e.manager == manager && e.operation == "Apply" && e.subresource == subresource)
        .map(|e| e.fields.clone())
        .unwrap_or_default();
    for path in previously.difference(&wanted) {
        let owned_elsewhere = entries
            .iter()
            .any(|e| !(e.manager == manager && e.operation == "Apply") && e.fields.contains(path));
        if !owned_elsewhere {
            remove_at(merged, path);
        }
    }
    for entry in &mut entries {
        if entry.manager == manager && entry.operation == "Apply" {
            continue;
        }
        // Forcing takes over only the conflicting fields; equal values stay co-owned.
        entry.fields.retain(|p| !conflicting.contains(p));
    }
    let api_version = merged
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    entries.retain(|e| {
        !(e.manager == manager && e.operation == "Apply" && e.subresource == subresource)
    });
    entries.push(Entry {
        manager: manager.to_string(),
        operation: "Apply".into(),
        fields: wanted,
        api_version,
        time: now.to_string(),
        subresource: subresource.to_string(),
    });
    write(merged, &entries);
    Ok(())
}

/// The `409 Conflict` message of an apply, as the real server words it.
pub fn conflict_message(conflicts: &[Conflict]) -> String {
    let list: Vec<String> = conflicts
        .iter()
        .map(|c| format!("conflict with \"{}\": {}", c.manager, c.field))
        .collect();
    let count = conflicts.len();
    let noun = if count == 1 { "conflict" } else { "conflicts" };
    format!("Apply failed with {count} {noun}: {}", list.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply(
        live: &Value,
        applied: &Value,
        merged: &mut Value,
        manager: &str,
        force: bool,
    ) -> Result<(), Vec<Conflict>> {
        record_apply(
            live,
            applied,
            merged,
            manager,
            force,
            Scope::Everything,
            "",
            "t",
        )
    }

    fn lease(holder: &str) -> Value {
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l", "uid": "u", "labels": {"a": "b"}},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 10}})
    }

    #[test]
    fn leaves_skip_server_fields_and_key_lists() {
        let object = json!({"apiVersion": "v1", "kind": "X", "metadata": {"name": "n", "finalizers": ["f"], "labels": {"a": "b"}},
            "spec": {"taints": [{"key": "k"}]}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        let main: Vec<String> = leaves(&object, Scope::MainWithoutStatus)
            .iter()
            .map(|p| p.join(">"))
            .collect();
        assert_eq!(
            main,
            vec![
                "f:metadata>f:finalizers>v:\"f\"",
                "f:metadata>f:labels>f:a",
                "f:spec>f:taints"
            ]
        );
        let status: Vec<String> = leaves(&object, Scope::StatusOnly)
            .iter()
            .map(|p| p.join(">"))
            .collect();
        assert_eq!(
            status,
            vec![
                "f:status>f:conditions>k:{\"type\":\"Ready\"}",
                "f:status>f:conditions>k:{\"type\":\"Ready\"}>f:status",
                "f:status>f:conditions>k:{\"type\":\"Ready\"}>f:type"
            ]
        );
    }

    #[test]
    fn managed_fields_round_trip_through_fields_v1() {
        let mut object = lease("a");
        object["status"] = json!({"conditions": [{"type": "Ready", "status": "True"}]});
        let set = leaves(&object, Scope::Everything);
        let entry = Entry {
            manager: "m".into(),
            operation: "Apply".into(),
            fields: set.clone(),
            api_version: "v1".into(),
            time: "t".into(),
            subresource: String::new(),
        };
        write(&mut object, &[entry]);
        let tree = &object["metadata"]["managedFields"][0]["fieldsV1"];
        assert_eq!(tree["f:spec"]["f:holderIdentity"], json!({}));
        assert_eq!(
            tree["f:status"]["f:conditions"]["k:{\"type\":\"Ready\"}"]["."],
            json!({})
        );
        assert_eq!(read(&object)[0].fields, set);
    }

    #[test]
    fn apply_conflicts_with_another_manager_unless_forced_or_equal() {
        let mut live = lease("a");
        let mut merged = live.clone();
        apply(&json!({}), &lease("a"), &mut merged, "mgr-a", false).unwrap();
        live = merged;
        // Same leaseDurationSeconds as live, different holder.
        let applied = json!({"spec": {"holderIdentity": "b", "leaseDurationSeconds": 10}});
        let mut merged = live.clone();
        merged["spec"]["holderIdentity"] = json!("b");
        let conflicts = apply(&live, &applied, &mut merged, "mgr-b", false).unwrap_err();
        assert_eq!(
            conflicts,
            vec![Conflict {
                manager: "mgr-a".into(),
                field: ".spec.holderIdentity".into()
            }]
        );
        assert_eq!(
            conflict_message(&conflicts),
            "Apply failed with 1 conflict: conflict with \"mgr-a\": .spec.holderIdentity"
        );
        // The same value is shared ownership, not a conflict.
        let same = json!({"spec": {"holderIdentity": "a"}});
        let mut merged_same = live.clone();
        apply(&live, &same, &mut merged_same, "mgr-b", false).unwrap();
        apply(&live, &applied, &mut merged, "mgr-b", true).unwrap();
        let entries = read(&merged);
        let mgr_a = &entries
            .iter()
            .find(|e| e.manager == "mgr-a")
            .unwrap()
            .fields;
        assert!(
            mgr_a.contains(&vec![
                "f:spec".to_string(),
                "f:leaseDurationSeconds".to_string()
            ]),
            "co-owned fields stay"
        );
        assert!(
            !entries
                .iter()
                .find(|e| e.manager == "mgr-a")
                .unwrap()
                .fields
                .contains(&vec!["f:spec".into(), "f:holderIdentity".into()])
        );
    }

    #[test]
    fn apply_removes_fields_the_manager_stopped_applying() {
        let mut live = lease("a");
        apply(&json!({}), &lease("a"), &mut live, "m", false).unwrap();
        let applied = json!({"spec": {"holderIdentity": "a"}});
        let mut merged = live.clone();
        apply(&live, &applied, &mut merged, "m", false).unwrap();
        assert!(merged["spec"].get("leaseDurationSeconds").is_none());
        assert!(merged["metadata"]["labels"].get("a").is_none());
    }

    #[test]
    fn updates_take_ownership_of_changed_fields() {
        let mut live = lease("a");
        apply(&json!({}), &lease("a"), &mut live, "applier", false).unwrap();
        let mut after = live.clone();
        after["spec"]["holderIdentity"] = json!("z");
        record_update(&live, &mut after, "editor", Scope::Everything, "", "t");
        let entries = read(&after);
        let editor = entries.iter().find(|e| e.manager == "editor").unwrap();
        assert_eq!(
            editor.fields,
            FieldSet::from([vec!["f:spec".to_string(), "f:holderIdentity".to_string()]])
        );
        let applier = entries.iter().find(|e| e.manager == "applier").unwrap();
        assert!(
            !applier
                .fields
                .contains(&vec!["f:spec".to_string(), "f:holderIdentity".to_string()])
        );
    }
}
