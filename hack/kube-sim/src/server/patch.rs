//! PATCH of an object or its status: JSON, merge, strategic merge and server-side apply, with
//! apply conflicts answered as the real server does.

use std::sync::Arc;

use http::Response;
use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult};
use crate::meta::now_rfc3339;
use crate::patch::{PatchKind, apply_patch};
use crate::resources::ResourceDef;
use crate::store::{WriteTarget, field_scope};

use super::request::object_bytes;
use super::subresources::{check_approval, stamp_conditions, to_scale, write_scale};
use super::{Body, Shared, json_bytes, json_response};

#[allow(clippy::too_many_arguments)]
pub(super) fn patch_request(
    shared: &Shared,
    def: &Arc<ResourceDef>,
    version: &str,
    namespace: &str,
    name: &str,
    sub: Option<&str>,
    kind: PatchKind,
    patch: &Value,
    dry_run: bool,
    (manager, force): (&str, bool),
) -> ApiResult<Response<Body>> {
    let store = &shared.store;
    let patch_error = |e: crate::patch::PatchError| match e {
        crate::patch::PatchError::JsonPatch(m) => ApiError {
            code: 422,
            reason: "Invalid",
            message: m,
            details: None,
        },
        other => ApiError::bad_request(other.to_string()),
    };
    if sub == Some("scale") {
        let stored = write_scale(store, def, namespace, name, dry_run, manager, |scale| {
            apply_patch(kind, scale, patch).map_err(patch_error)
        })?;
        return Ok(json_response(200, &to_scale(def, &stored.value)?));
    }
    let target = match sub {
        None => WriteTarget::Main,
        Some("status" | "approval") => WriteTarget::Status,
        Some(_) => {
            return Err(ApiError::method_not_allowed(
                "the subresource does not support patch",
            ));
        }
    };
    let scope = field_scope(def, target);
    let subresource = sub.unwrap_or_default();
    let now = now_rfc3339();
    let result = store.modify(def, namespace, name, target, dry_run, |current| {
        let mut patched = apply_patch(kind, current, patch).map_err(patch_error)?;
        if sub == Some("approval") {
            check_approval(def, name, &patched)?;
            patched = stamp_conditions(patched);
        }
        if kind == PatchKind::Apply {
            crate::fields::record_apply(
                current,
                patch,
                &mut patched,
                manager,
                force,
                scope,
                subresource,
                &now,
            )
            .map_err(|conflicts| apply_conflict(def, name, &conflicts))?;
        } else {
            crate::fields::record_update(current, &mut patched, manager, scope, subresource, &now);
        }
        Ok(patched)
    });
    match result {
        Ok(stored) => Ok(json_bytes(200, object_bytes(def, version, &stored))),
        Err(e) if e.code == 404 && kind == PatchKind::Apply && sub.is_none() => {
            let mut object = patch.clone();
            let meta = crate::meta::metadata_mut(&mut object);
            meta.insert("name".into(), json!(name));
            crate::fields::record_apply(
                &json!({}),
                patch,
                &mut object,
                manager,
                force,
                scope,
                "",
                &now,
            )
            .map_err(|conflicts| apply_conflict(def, name, &conflicts))?;
            shared.admit_create(def, &mut object)?;
            let stored = store.create(def, namespace, object, dry_run)?;
            Ok(json_bytes(201, object_bytes(def, version, &stored)))
        }
        Err(e) => Err(e),
    }
}

/// 409 for a server-side apply that conflicts with other field managers.
pub(super) fn apply_conflict(
    def: &ResourceDef,
    name: &str,
    conflicts: &[crate::fields::Conflict],
) -> ApiError {
    let causes: Vec<Value> = conflicts
        .iter()
        .map(|c| json!({"reason": "FieldManagerConflict", "message": format!("conflict with \"{}\"", c.manager), "field": c.field}))
        .collect();
    ApiError {
        code: 409,
        reason: "Conflict",
        message: crate::fields::conflict_message(conflicts),
        details: Some(
            json!({"name": name, "group": def.group, "kind": def.plural, "causes": causes}),
        ),
    }
}
