//! What the API server's registry strategies do to every write of a built-in kind: decoding
//! (Secret `stringData`), create defaults, the update rules (immutable metadata, status or spec
//! kept per target, generation bumped), and the server-side apply scope of a write.

use base64::Engine as _;
use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult};
use crate::meta::{finalizers, is_deleting, meta_str, metadata_mut, now_rfc3339};
use crate::resources::ResourceDef;

use super::{WriteTarget, subject};

/// The object without its metadata and status: what a spec change is judged on.
pub(super) fn spec_part(object: &Value) -> Value {
    let mut copy = object.clone();
    if let Some(map) = copy.as_object_mut() {
        map.remove("metadata");
        map.remove("status");
    }
    copy
}

/// Which fields a write to `target` of a resource may own (server-side apply bookkeeping).
pub fn field_scope(def: &ResourceDef, target: WriteTarget) -> crate::fields::Scope {
    match target {
        WriteTarget::Status => crate::fields::Scope::StatusOnly,
        WriteTarget::Main if def.status_subresource => crate::fields::Scope::MainWithoutStatus,
        WriteTarget::Main | WriteTarget::Whole => crate::fields::Scope::Everything,
    }
}

/// What decoding a write into the server's internal type does to a built-in kind, for every write
/// (create, update, patch result).
///
/// Secret: `stringData` is folded into `data`, its values winning over `data`'s, and is never
/// stored (kubernetes/kubernetes `pkg/apis/core/v1/conversion.go`,
/// `Convert_v1_Secret_To_core_Secret`: "StringData overwrites Data"; the internal type has no
/// `stringData`).
pub(super) fn decode_builtin(def: &ResourceDef, object: &mut Value) -> ApiResult<()> {
    if !(def.group.is_empty() && def.plural == "secrets") {
        return Ok(());
    }
    let Some(map) = object.as_object_mut() else {
        return Ok(());
    };
    let string_data = match map.remove("stringData") {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Object(entries)) => entries,
        Some(_) => {
            return Err(ApiError::bad_request(
                "Secret in version \"v1\" cannot be handled as a Secret: stringData: expected a map of strings",
            ));
        }
    };
    if string_data.is_empty() {
        return Ok(());
    }
    let data = map
        .entry("data")
        .or_insert_with(|| Value::Object(serde_json::Map::new()));
    if data.is_null() {
        *data = Value::Object(serde_json::Map::new());
    }
    let Some(data) = data.as_object_mut() else {
        return Err(ApiError::bad_request(
            "Secret in version \"v1\" cannot be handled as a Secret: data: expected a map of base64 strings",
        ));
    };
    for (key, value) in string_data {
        let Value::String(text) = value else {
            return Err(ApiError::bad_request(format!(
                "Secret in version \"v1\" cannot be handled as a Secret: stringData.{key}: expected a string"
            )));
        };
        data.insert(
            key,
            Value::String(base64::engine::general_purpose::STANDARD.encode(text)),
        );
    }
    Ok(())
}

/// Type-specific create rules (what the real registry strategies do in PrepareForCreate).
pub(super) fn prepare_create(def: &ResourceDef, object: &mut Value) -> ApiResult<()> {
    let Some(map) = object.as_object_mut() else {
        return Ok(());
    };
    match (def.group.as_str(), def.plural.as_str()) {
        ("", "namespaces") => {
            map.insert("status".into(), json!({"phase": "Active"}));
        }
        ("", "pods") => {
            map.insert("status".into(), json!({"phase": "Pending"}));
        }
        ("certificates.k8s.io", _) | ("policy", _) => {
            map.insert("status".into(), json!({}));
        }
        _ if def.custom && def.status_subresource => {
            map.remove("status");
        }
        _ => {}
    }
    Ok(())
}

pub(super) fn crd_status(crd: &Value) -> Value {
    let now = now_rfc3339();
    let names = crd.pointer("/spec/names").cloned().unwrap_or(json!({}));
    let stored: Vec<Value> = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .map(|vs| {
            vs.iter()
                .filter(|v| v.get("storage") == Some(&json!(true)))
                .filter_map(|v| v.get("name").cloned())
                .collect()
        })
        .unwrap_or_default();
    json!({
        "acceptedNames": names,
        "storedVersions": stored,
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": now},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": now},
        ],
    })
}

/// Equal except for the `time` of managedFields entries.
pub(super) fn same_but_managed_times(a: &Value, b: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(entries) = v
            .pointer_mut("/metadata/managedFields")
            .and_then(Value::as_array_mut)
        {
            for entry in entries.iter_mut().filter_map(Value::as_object_mut) {
                entry.remove("time");
            }
        }
        v
    };
    a.pointer("/metadata/managedFields").is_some() && strip(a) == strip(b)
}

/// Makes `to`'s status that of `from` (absent if `from` has none).
pub(super) fn copy_status(from: &Value, to: &mut Value) {
    match (from.get("status"), to.as_object_mut()) {
        (Some(status), Some(map)) => {
            map.insert("status".into(), status.clone());
        }
        (None, Some(map)) => {
            map.remove("status");
        }
        (_, None) => {}
    }
}

/// Applies the rules of an update: immutable metadata kept, status or main part kept per target, generation
/// bumped on spec change, finalizers not added while deleting.
pub(super) fn merge_for_update(
    def: &ResourceDef,
    current: &Value,
    desired: &mut Value,
    target: WriteTarget,
) -> ApiResult<Value> {
    let name = meta_str(current, "name").to_string();
    let mut next = match target {
        WriteTarget::Status => {
            let mut next = current.clone();
            if let Some(managed) = desired.pointer("/metadata/managedFields") {
                metadata_mut(&mut next).insert("managedFields".into(), managed.clone());
            }
            copy_status(desired, &mut next);
            next
        }
        WriteTarget::Main | WriteTarget::Whole => {
            let mut next = desired.clone();
            if target == WriteTarget::Main
                && def.status_subresource
                && def.group != "apiextensions.k8s.io"
            {
                copy_status(current, &mut next);
            }
            next
        }
    };
    let current_meta = current.get("metadata").cloned().unwrap_or(json!({}));
    let meta = metadata_mut(&mut next);
    for field in [
        "name",
        "namespace",
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
    ] {
        match current_meta.get(field) {
            Some(v) => meta.insert(field.into(), v.clone()),
            None => meta.remove(field),
        };
    }
    meta.insert(
        "resourceVersion".into(),
        current_meta
            .get("resourceVersion")
            .cloned()
            .unwrap_or(json!("")),
    );
    if let Some(map) = next.as_object_mut() {
        map.insert(
            "apiVersion".into(),
            current.get("apiVersion").cloned().unwrap_or(Value::Null),
        );
        map.insert("kind".into(), json!(def.kind));
    }
    if def.group == "apiextensions.k8s.io" {
        next["status"] = crd_status(&next);
    }
    if let Some((field, message)) = crate::meta::invalid_labels_or_annotations(&next) {
        return Err(ApiError::invalid(
            subject(def, &name),
            &def.kind,
            &field,
            &message,
        ));
    }
    // k8s.io/kubernetes `pkg/apis/core/validation/validation.go`, `ValidateNodeUpdate` (v1.34.2
    // lines 6970-6973): a Node's providerID may change only from empty.
    if def.group.is_empty() && def.kind == "Node" {
        let provider_id = |node: &Value| {
            node.pointer("/spec/providerID")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let before = provider_id(current);
        if !before.is_empty() && before != provider_id(&next) {
            return Err(ApiError::invalid(
                subject(def, &name),
                &def.kind,
                "spec.providerID",
                "Forbidden: node updates may not change providerID except from \"\" to valid",
            ));
        }
    }
    if is_deleting(current) {
        let before = finalizers(current);
        if let Some(added) = finalizers(&next).into_iter().find(|f| !before.contains(f)) {
            return Err(ApiError::invalid(
                subject(def, &name),
                &def.kind,
                "metadata.finalizers",
                &format!(
                    "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers [\"{added}\"]"
                ),
            ));
        }
    }
    if let Some(schema) = &def.schema {
        crate::schema::apply_to_object(&mut next, schema);
    }
    if def.spec_generation && spec_part(current) != spec_part(&next) {
        let generation = current
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0)
            + 1;
        metadata_mut(&mut next).insert("generation".into(), json!(generation));
    }
    Ok(next)
}
