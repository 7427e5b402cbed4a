//! Subresources with rules of their own: a CSR's approval and an object's scale.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult, Subject};
use crate::meta::{json_path, meta_str, now_rfc3339, set_json_path};
use crate::resources::ResourceDef;
use crate::store::{Store, Stored, WriteTarget, field_scope};

/// CSR approval: Approved and Denied together are invalid.
pub(super) fn check_approval(def: &ResourceDef, name: &str, csr: &Value) -> ApiResult<()> {
    let types: Vec<&str> = csr
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .map(|cs| {
            cs.iter()
                .filter_map(|c| c.get("type").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default();
    if types.contains(&"Approved") && types.contains(&"Denied") {
        return Err(ApiError::invalid(
            Subject {
                group: &def.group,
                resource: &def.plural,
                name,
            },
            &def.kind,
            "status.conditions",
            "Invalid value: Approved and Denied conditions are mutually exclusive",
        ));
    }
    Ok(())
}

/// Fills `lastUpdateTime`/`lastTransitionTime` of CSR conditions that lack them (the registry does this).
pub(super) fn stamp_conditions(mut csr: Value) -> Value {
    let now = now_rfc3339();
    if let Some(conditions) = csr
        .pointer_mut("/status/conditions")
        .and_then(Value::as_array_mut)
    {
        for c in conditions {
            for field in ["lastUpdateTime", "lastTransitionTime"] {
                if c.get(field).is_none_or(Value::is_null) {
                    c[field] = json!(now);
                }
            }
        }
    }
    csr
}

pub(super) fn to_scale(def: &ResourceDef, object: &Value) -> ApiResult<Value> {
    let paths = def
        .scale
        .as_ref()
        .ok_or_else(|| ApiError::unknown_path("scale"))?;
    let spec_replicas = json_path(object, &paths.spec_replicas)
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let status_replicas = json_path(object, &paths.status_replicas)
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let mut status = json!({"replicas": status_replicas});
    if let Some(selector) = paths
        .label_selector
        .as_ref()
        .and_then(|p| json_path(object, p))
        .and_then(Value::as_str)
    {
        status["selector"] = json!(selector);
    }
    let meta = object.get("metadata").cloned().unwrap_or(json!({}));
    let mut scale_meta = json!({});
    for field in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(v) = meta.get(field) {
            scale_meta[field] = v.clone();
        }
    }
    // `spec.replicas` is omitted at 0, `status.replicas` never (k8s.io/api v0.34.2
    // `autoscaling/v1` `ScaleSpec`: `json:"replicas,omitempty"`; `ScaleStatus`: `json:"replicas"`).
    let spec = if spec_replicas == 0 {
        json!({})
    } else {
        json!({"replicas": spec_replicas})
    };
    Ok(
        json!({"kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": scale_meta, "spec": spec, "status": status}),
    )
}

/// Reads the Scale of an object, lets `change` produce the desired Scale, and writes `spec.replicas` back.
pub(super) fn write_scale<F>(
    store: &Store,
    def: &Arc<ResourceDef>,
    namespace: &str,
    name: &str,
    dry_run: bool,
    manager: &str,
    change: F,
) -> ApiResult<Stored>
where
    F: FnOnce(&Value) -> ApiResult<Value>,
{
    let paths = def
        .scale
        .clone()
        .ok_or_else(|| ApiError::unknown_path("scale"))?;
    store.modify(
        def,
        namespace,
        name,
        WriteTarget::Main,
        dry_run,
        |current| {
            let desired = change(&to_scale(def, current)?)?;
            let subject = Subject {
                group: &def.group,
                resource: &def.plural,
                name,
            };
            let replicas = desired
                .pointer("/spec/replicas")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            if replicas < 0 {
                return Err(ApiError::invalid(
                    subject,
                    "Scale",
                    "spec.replicas",
                    &format!("Invalid value: {replicas}: must be greater than or equal to 0"),
                ));
            }
            let mut next = current.clone();
            let wanted_rv = meta_str(&desired, "resourceVersion");
            if !wanted_rv.is_empty() {
                next["metadata"]["resourceVersion"] = json!(wanted_rv);
            }
            set_json_path(&mut next, &paths.spec_replicas, json!(replicas));
            let scope = field_scope(def, WriteTarget::Main);
            crate::fields::record_update(
                current,
                &mut next,
                manager,
                scope,
                "scale",
                &now_rfc3339(),
            );
            Ok(next)
        },
    )
}
