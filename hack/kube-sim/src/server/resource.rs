//! The resource handler: get, list, watch, create, update, delete and delete collection of any
//! served resource, with its subresources dispatched.

use std::collections::HashMap;
use std::sync::Arc;

use http::{Method, Request, Response, header};
use hyper::body::Incoming;
use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult, Subject};
use crate::meta::{meta_str, now_rfc3339};
use crate::patch::{PatchKind, parse_body};
use crate::store::{ListParams, PendingWrite, WriteTarget, field_scope};
use crate::table;

use super::collections::{
    list_bytes, list_response, metadata_only, wants_metadata_only, watch_response,
};
use super::events_v1::{EventsCall, events_v1_request};
use super::patch::patch_request;
use super::request::{
    delete_options, dry_run, object_bytes, parse_object, read_body, selectors, strict_fields,
};
use super::routing::ResourcePath;
use super::subresources::{check_approval, stamp_conditions, to_scale, write_scale};
use super::{Body, Shared, is_watch, json_bytes, json_response};

pub(super) async fn resource_request(
    shared: &Arc<Shared>,
    path: ResourcePath,
    request: Request<Incoming>,
    query: &HashMap<String, String>,
) -> ApiResult<Response<Body>> {
    let store = &shared.store;
    let not_found = || ApiError::unknown_path(request.uri().path());
    let def = store
        .resource(&path.group, &path.plural)
        .filter(|d| d.serves(&path.version))
        .ok_or_else(not_found)?;
    if (path.namespace.is_some() && !def.namespaced)
        || (def.namespaced && path.name.is_some() && path.namespace.is_none())
    {
        return Err(not_found());
    }
    if let Some(sub) = &path.subresource
        && !def.has_subresource(sub)
    {
        return Err(not_found());
    }
    let latency = store.write_latency();
    if !latency.is_zero() && request.method() != Method::GET {
        tokio::time::sleep(latency).await;
    }
    let namespace = path.namespace.clone().unwrap_or_default();
    if request.method() != Method::GET {
        store.run_interleavings(&PendingWrite {
            method: request.method().as_str(),
            group: &def.group,
            plural: &def.plural,
            namespace: &namespace,
            name: path.name.as_deref().unwrap_or_default(),
            subresource: path.subresource.as_deref().unwrap_or_default(),
        });
    }
    let accept = request
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let content_type = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let method = request.method().clone();
    let version = path.version.clone();
    // The field manager: as given, or the user agent's product name (what the real server defaults to).
    let user_agent = request
        .headers()
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let manager = query
        .get("fieldManager")
        .filter(|m| !m.is_empty())
        .cloned()
        .unwrap_or_else(|| {
            user_agent
                .split('/')
                .next()
                .filter(|m| !m.is_empty())
                .unwrap_or("unknown")
                .to_string()
        });
    let force = query.get("force").is_some_and(|v| v == "true");
    if def.group == "events.k8s.io" && path.subresource.is_none() {
        let call = EventsCall {
            path: &path,
            query,
            accept: &accept,
            content_type: &content_type,
            manager: &manager,
            force,
        };
        return events_v1_request(shared, call, request).await;
    }
    let parse_object = |body: &[u8]| parse_object(&content_type, body);
    if method == Method::GET && path.subresource.is_none() && wants_metadata_only(&accept) {
        return metadata_only(shared, &def, &path, query, &accept);
    }
    match (method, path.name.clone(), path.subresource.as_deref()) {
        (Method::GET, None, None) if is_watch(query) => {
            watch_response(shared, def, version, path.namespace, query, &accept, None)
        }
        (Method::GET, None, None) => list_response(
            store,
            &def,
            &version,
            path.namespace.as_deref(),
            query,
            &accept,
        ),
        (Method::GET, Some(name), Some("scale")) => {
            let stored = store.get(&def, &namespace, &name)?;
            Ok(json_response(200, &to_scale(&def, &stored.value)?))
        }
        (Method::GET, Some(name), _) => {
            let stored = store.get(&def, &namespace, &name)?;
            if table::wants_table(&accept) {
                let full = query.get("includeObject").is_some_and(|v| v == "Object");
                return Ok(json_response(
                    200,
                    &table::table(&def, &[&stored.value], store.resource_version(), None, full),
                ));
            }
            Ok(json_bytes(200, object_bytes(&def, &version, &stored)))
        }
        (Method::POST, None, None) => {
            let mut body = parse_object(&read_body(request).await?)?;
            strict_fields(&def, &version, query, &body)?;
            let scope = field_scope(&def, WriteTarget::Main);
            crate::fields::record_update(
                &json!({}),
                &mut body,
                &manager,
                scope,
                "",
                &now_rfc3339(),
            );
            shared.admit_create(&def, &mut body)?;
            let stored = store.create(&def, &namespace, body, dry_run(query))?;
            Ok(json_bytes(201, object_bytes(&def, &version, &stored)))
        }
        (Method::POST, Some(name), Some("eviction")) => {
            let body = parse_object(&read_body(request).await?)?;
            let body_name = meta_str(&body, "name");
            if !body_name.is_empty() && body_name != name {
                return Err(ApiError::bad_request(format!(
                    "name in URL does not match name in Eviction object ({body_name} != {name})"
                )));
            }
            let mut options = delete_options(body.get("deleteOptions"), query);
            options.dry_run |= dry_run(query);
            store.evict(&namespace, &name, &options)?;
            Ok(json_response(
                201,
                &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
            ))
        }
        (Method::PUT, Some(name), sub) => {
            let mut body = parse_object(&read_body(request).await?)?;
            strict_fields(&def, &version, query, &body)?;
            if sub.is_none() && def.create_on_update && store.get(&def, &namespace, &name).is_err()
            {
                // The real store's update of a missing object (k8s.io/apiserver v0.34.2
                // `pkg/registry/generic/registry/store.go`, `Update`): the body's UID is a
                // precondition (`rest.defaultUpdatedObjectInfo.Preconditions`), which a missing
                // object fails as an invalid object (`storage.Preconditions.Check`), answered 409
                // (`storage/errors`, `InterpretUpdateError`); without one, the object is created.
                let uid = body
                    .pointer("/metadata/uid")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                if !uid.is_empty() {
                    return Err(ApiError::conflict(
                        Subject {
                            group: &def.group,
                            resource: &def.plural,
                            name: &name,
                        },
                        &format!(
                            "Precondition failed: UID in precondition: {uid}, UID in object meta: "
                        ),
                    ));
                }
                if let Some(metadata) = body.get_mut("metadata").and_then(Value::as_object_mut) {
                    metadata.remove("resourceVersion");
                }
                crate::fields::record_update(
                    &json!({}),
                    &mut body,
                    &manager,
                    field_scope(&def, WriteTarget::Main),
                    "",
                    &now_rfc3339(),
                );
                shared.admit_create(&def, &mut body)?;
                let stored = store.create(&def, &namespace, body, dry_run(query))?;
                return Ok(json_bytes(201, object_bytes(&def, &version, &stored)));
            }
            let stored = match sub {
                None => store.update(
                    &def,
                    &namespace,
                    &name,
                    body,
                    WriteTarget::Main,
                    dry_run(query),
                    Some(&manager),
                )?,
                Some("status") => store.update(
                    &def,
                    &namespace,
                    &name,
                    body,
                    WriteTarget::Status,
                    dry_run(query),
                    Some(&manager),
                )?,
                Some("approval") => {
                    check_approval(&def, &name, &body)?;
                    store.update(
                        &def,
                        &namespace,
                        &name,
                        stamp_conditions(body),
                        WriteTarget::Status,
                        dry_run(query),
                        Some(&manager),
                    )?
                }
                Some("scale") => {
                    let stored = write_scale(
                        store,
                        &def,
                        &namespace,
                        &name,
                        dry_run(query),
                        &manager,
                        |_| Ok(body),
                    )?;
                    return Ok(json_response(200, &to_scale(&def, &stored.value)?));
                }
                Some(_) => {
                    return Err(ApiError::method_not_allowed(
                        "the subresource does not support update",
                    ));
                }
            };
            Ok(json_bytes(200, object_bytes(&def, &version, &stored)))
        }
        (Method::PATCH, Some(name), sub) => {
            let kind = PatchKind::from_content_type(&content_type).ok_or_else(|| {
                ApiError::unsupported_media_type(format!("the body of the request was in an unknown format ({content_type:?}) - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"))
            })?;
            if kind == PatchKind::Strategic && def.custom {
                return Err(ApiError::unsupported_media_type(
                    "strategic merge patch is not supported for custom resources - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
                ));
            }
            if kind == PatchKind::Apply && query.get("fieldManager").is_none_or(String::is_empty) {
                return Err(ApiError::bad_request(
                    "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
                ));
            }
            let body = read_body(request).await?;
            let patch =
                parse_body(kind, &body).map_err(|e| ApiError::bad_request(e.to_string()))?;
            if kind != PatchKind::Json {
                strict_fields(&def, &version, query, &patch)?;
            }
            patch_request(
                shared,
                &def,
                &version,
                &namespace,
                &name,
                sub,
                kind,
                &patch,
                dry_run(query),
                (&manager, force),
            )
        }
        (Method::DELETE, Some(name), None) => {
            let body = read_body(request).await?;
            let body = if body.is_empty() {
                None
            } else {
                Some(parse_object(&body)?)
            };
            let options = delete_options(body.as_ref(), query);
            let stored = store.delete(&def, &namespace, &name, &options)?;
            Ok(json_bytes(200, object_bytes(&def, &version, &stored)))
        }
        (Method::DELETE, None, None) => {
            let body = read_body(request).await?;
            let body = if body.is_empty() {
                None
            } else {
                Some(parse_object(&body)?)
            };
            let options = delete_options(body.as_ref(), query);
            let (labels, fields) = selectors(&def, query)?;
            let params = ListParams {
                namespace: path.namespace.as_deref(),
                labels: Some(&labels),
                fields: Some(&fields),
                limit: None,
                continue_token: None,
            };
            let deleted = store.delete_collection(&def, &params, &options)?;
            Ok(json_bytes(
                200,
                list_bytes(
                    &def,
                    &version,
                    &deleted,
                    store.resource_version(),
                    None,
                    None,
                ),
            ))
        }
        _ => Err(ApiError::method_not_allowed(format!(
            "the server does not allow this method on the requested resource ({})",
            path.plural
        ))),
    }
}
