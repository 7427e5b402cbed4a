//! `meta.k8s.io/v1 Table` output, which `kubectl get` asks for, from a resource's printer columns.

use serde_json::{Value, json};

use crate::meta::{age_seconds, human_age, json_path};
use crate::resources::{ColumnSource, PrinterColumn, ResourceDef};
use crate::store::pod_ready;

/// Does the `Accept` header ask for a Table?
pub fn wants_table(accept: &str) -> bool {
    accept
        .split(',')
        .next()
        .is_some_and(|first| first.contains("as=Table"))
}

fn cell(column: &PrinterColumn, object: &Value) -> Value {
    match &column.source {
        ColumnSource::Age => object
            .pointer("/metadata/creationTimestamp")
            .and_then(Value::as_str)
            .and_then(age_seconds)
            .map(|s| json!(human_age(s)))
            .unwrap_or(Value::Null),
        ColumnSource::JsonPath(path) => match json_path(object, path) {
            Some(Value::String(s)) if column.type_ == "date" => age_seconds(s)
                .map(|a| json!(human_age(a)))
                .unwrap_or(Value::Null),
            Some(v @ (Value::String(_) | Value::Number(_) | Value::Bool(_))) => v.clone(),
            Some(Value::Null) | None => Value::Null,
            Some(other) => json!(other.to_string()),
        },
        ColumnSource::NodeStatus => {
            let ready = object
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .and_then(|cs| cs.iter().find(|c| c.get("type") == Some(&json!("Ready"))))
                .map(|c| {
                    if c.get("status") == Some(&json!("True")) {
                        "Ready"
                    } else {
                        "NotReady"
                    }
                })
                .unwrap_or("Unknown");
            let cordoned = object.pointer("/spec/unschedulable") == Some(&json!(true));
            json!(if cordoned {
                format!("{ready},SchedulingDisabled")
            } else {
                ready.to_string()
            })
        }
        ColumnSource::PodReady => {
            let total = object
                .pointer("/spec/containers")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            let ready = object
                .pointer("/status/containerStatuses")
                .and_then(Value::as_array)
                .map_or(0, |cs| {
                    cs.iter()
                        .filter(|c| c.get("ready") == Some(&json!(true)))
                        .count()
                });
            let ready = if ready == 0 && pod_ready(object) {
                total
            } else {
                ready
            };
            json!(format!("{ready}/{total}"))
        }
        ColumnSource::EventLastSeen => [
            "/series/lastObservedTime",
            "/lastTimestamp",
            "/eventTime",
            "/metadata/creationTimestamp",
        ]
        .iter()
        .find_map(|p| object.pointer(p).and_then(Value::as_str))
        .and_then(age_seconds)
        .map(|s| json!(human_age(s)))
        .unwrap_or(Value::Null),
        ColumnSource::EventObject => {
            let kind = object
                .pointer("/involvedObject/kind")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let name = object
                .pointer("/involvedObject/name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            json!(format!("{}/{name}", kind.to_ascii_lowercase()))
        }
        ColumnSource::CsrCondition => {
            let mut parts: Vec<String> = object
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .map(|cs| {
                    cs.iter()
                        .filter_map(|c| c.get("type").and_then(Value::as_str).map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            if parts.is_empty() {
                parts.push("Pending".to_string());
            }
            if object
                .pointer("/status/certificate")
                .is_some_and(|c| !c.is_null())
            {
                parts.push("Issued".to_string());
            }
            json!(parts.join(","))
        }
    }
}

/// A Table for objects of a resource. `full_objects` embeds each object (`includeObject=Object`), otherwise
/// `PartialObjectMetadata`.
pub fn table(
    def: &ResourceDef,
    objects: &[&Value],
    resource_version: u64,
    continue_token: Option<&str>,
    full_objects: bool,
) -> Value {
    // A resource whose columns name their own Name column (events: a wide-only column last) gets no leading one.
    let leading_name = !def.columns.iter().any(|c| c.name == "Name");
    let mut columns = vec![];
    if leading_name {
        columns.push(json!({"name": "Name", "type": "string", "format": "name", "description": "Name must be unique within a namespace.", "priority": 0}));
    }
    for c in &def.columns {
        let format = if c.name == "Name" { "name" } else { "" };
        columns.push(json!({"name": c.name, "type": c.type_, "format": format, "description": "", "priority": c.priority}));
    }
    let rows: Vec<Value> = objects
        .iter()
        .map(|object| {
            let mut cells = vec![];
            if leading_name {
                cells.push(object.pointer("/metadata/name").cloned().unwrap_or(Value::Null));
            }
            cells.extend(def.columns.iter().map(|c| cell(c, object)));
            let embedded = if full_objects {
                (*object).clone()
            } else {
                json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": object.get("metadata").cloned().unwrap_or(json!({}))})
            };
            json!({"cells": cells, "object": embedded})
        })
        .collect();
    let mut metadata = json!({"resourceVersion": resource_version.to_string()});
    if let Some(token) = continue_token {
        metadata["continue"] = json!(token);
    }
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": metadata, "columnDefinitions": columns, "rows": rows})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::builtin_resources;

    #[test]
    fn kubectl_accept_header_asks_for_table() {
        assert!(wants_table(
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
        ));
        assert!(!wants_table("application/json"));
    }

    #[test]
    fn node_table_shows_cordon_and_readiness() {
        let defs = builtin_resources();
        let nodes = defs.iter().find(|d| d.plural == "nodes").unwrap();
        let node = json!({"metadata": {"name": "n1"}, "spec": {"unschedulable": true},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], "nodeInfo": {"kubeletVersion": "v1.33.2"}}});
        let t = table(nodes, &[&node], 7, None, false);
        assert_eq!(t["rows"][0]["cells"][0], "n1");
        assert_eq!(t["rows"][0]["cells"][1], "Ready,SchedulingDisabled");
        assert_eq!(t["rows"][0]["cells"][3], "v1.33.2");
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(t["metadata"]["resourceVersion"], "7");
    }
}
