//! Structural-schema pruning and defaulting for custom resources, as the real server does on every write:
//! fields the CRD's `openAPIV3Schema` does not declare are dropped (unless `x-kubernetes-preserve-unknown-fields`),
//! and absent fields with a `default` are set. Types and other validations are not checked.

use serde_json::{Map, Value};

/// Fields every object keeps at its root (and embedded resources keep at theirs).
const ROOT_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

fn preserves_unknown(schema: &Value) -> bool {
    schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        == Some(true)
}

fn prune_object(
    map: &mut Map<String, Value>,
    schema: &Value,
    keep: &[&str],
    path: &str,
    removed: &mut Vec<String>,
) {
    let properties = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties").filter(|a| a.is_object());
    let preserve = preserves_unknown(schema)
        || schema.get("additionalProperties").and_then(Value::as_bool) == Some(true);
    if !preserve {
        map.retain(|key, _| {
            let known = keep.contains(&key.as_str())
                || properties.is_some_and(|p| p.contains_key(key))
                || additional.is_some();
            if !known {
                removed.push(format!("{path}{key}"));
            }
            known
        });
    }
    for (key, value) in map.iter_mut() {
        if keep.contains(&key.as_str()) {
            continue;
        }
        match (properties.and_then(|p| p.get(key)), additional) {
            (Some(sub), _) | (None, Some(sub)) => {
                prune_value(value, sub, &format!("{path}{key}"), removed)
            }
            (None, None) => {}
        }
    }
    if let Some(properties) = properties {
        for (key, sub) in properties {
            if !map.contains_key(key)
                && let Some(default) = sub.get("default")
            {
                map.insert(key.clone(), default.clone());
            }
        }
    }
}

fn prune_value(value: &mut Value, schema: &Value, path: &str, removed: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            let embedded = schema
                .get("x-kubernetes-embedded-resource")
                .and_then(Value::as_bool)
                == Some(true);
            let keep: &[&str] = if embedded { &ROOT_FIELDS } else { &[] };
            prune_object(map, schema, keep, &format!("{path}."), removed);
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    prune_value(item, item_schema, &format!("{path}[{i}]"), removed);
                }
            }
        }
        _ => {}
    }
}

/// Prunes and defaults a whole custom resource (its `metadata` is left alone). Returns the dotted paths of the
/// fields it dropped.
pub fn apply_to_object(object: &mut Value, schema: &Value) -> Vec<String> {
    let mut removed = vec![];
    if let Value::Object(map) = object {
        prune_object(map, schema, &ROOT_FIELDS, "", &mut removed);
    }
    removed
}

/// The fields of `object` that the schema does not declare (what `fieldValidation=Strict` refuses).
pub fn unknown_fields(object: &Value, schema: &Value) -> Vec<String> {
    apply_to_object(&mut object.clone(), schema)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "replicas": {"type": "integer"},
                "authoritativeAPI": {"type": "string", "default": "MachineAPI"},
                "providerSpec": {"type": "object", "properties": {"value": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}},
                "taints": {"type": "array", "items": {"type": "object", "properties": {"key": {"type": "string"}}}},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            }},
            "status": {"type": "object", "properties": {"phase": {"type": "string"}}},
        }})
    }

    #[test]
    fn unknown_fields_are_dropped_and_defaults_set() {
        let mut object = json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "n", "anything": 1},
            "spec": {"replicas": 1, "typo": true, "providerSpec": {"value": {"free": {"form": 1}}, "extra": 2},
                "taints": [{"key": "k", "junk": 1}], "labels": {"a": "b"}},
            "status": {"phase": "Running", "notInSchema": "x"}, "topLevelJunk": 1});
        let removed = apply_to_object(&mut object, &schema());
        assert_eq!(
            removed,
            vec![
                "topLevelJunk",
                "spec.typo",
                "spec.providerSpec.extra",
                "spec.taints[0].junk",
                "status.notInSchema"
            ]
        );
        assert_eq!(
            object,
            json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "n", "anything": 1},
                "spec": {"replicas": 1, "authoritativeAPI": "MachineAPI", "providerSpec": {"value": {"free": {"form": 1}}},
                    "taints": [{"key": "k"}], "labels": {"a": "b"}},
                "status": {"phase": "Running"}})
        );
    }

    #[test]
    fn preserve_unknown_fields_at_the_root_keeps_everything() {
        let mut object = json!({"apiVersion": "x/v1", "kind": "K", "spec": {"whatever": [1, 2]}});
        let before = object.clone();
        apply_to_object(
            &mut object,
            &json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
        );
        assert_eq!(object, before);
    }
}
