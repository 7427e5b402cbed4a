//! events.k8s.io requests, served from the core events (see [`crate::events`]).

use std::collections::HashMap;
use std::sync::Arc;

use http::{Method, Request, Response};
use hyper::body::Incoming;
use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult};
use crate::meta::now_rfc3339;
use crate::patch::{PatchKind, apply_patch, parse_body};
use crate::store::{Stored, WriteTarget, field_scope};
use crate::table;
use crate::watch;

use super::collections::watch_response;
use super::patch::apply_conflict;
use super::request::{
    delete_options, dry_run, paged_list_params, parse_object, read_body, selectors,
};
use super::routing::ResourcePath;
use super::{Body, Shared, is_watch, json_response, json_response_value, with_status};

/// An events.k8s.io request, served from the core events (see [`crate::events`]).
pub(super) struct EventsCall<'a> {
    pub(super) path: &'a ResourcePath,
    pub(super) query: &'a HashMap<String, String>,
    pub(super) accept: &'a str,
    pub(super) content_type: &'a str,
    pub(super) manager: &'a str,
    pub(super) force: bool,
}

pub(super) async fn events_v1_request(
    shared: &Arc<Shared>,
    call: EventsCall<'_>,
    request: Request<Incoming>,
) -> ApiResult<Response<Body>> {
    use crate::events::{from_core, to_core};
    let store = &shared.store;
    let core = store
        .resource("", "events")
        .ok_or_else(|| ApiError::internal("core events are not served"))?;
    let namespace = call.path.namespace.clone().unwrap_or_default();
    let mut query = call.query.clone();
    if let Some(selector) = call.query.get("fieldSelector") {
        query.insert(
            "fieldSelector".into(),
            crate::events::core_field_selector(selector),
        );
    }
    let view = |stored: &Stored| json_response_value(&from_core(&stored.value));
    let scope = field_scope(&core, WriteTarget::Main);
    let now = now_rfc3339();
    let body_in = |body: &[u8]| -> ApiResult<Value> {
        let object = parse_object(call.content_type, body)?;
        let api_version = object
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("events.k8s.io/v1");
        if api_version != "events.k8s.io/v1" {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({api_version}) does not match the expected API version (events.k8s.io/v1)"
            )));
        }
        Ok(to_core(&object))
    };
    match (request.method().clone(), call.path.name.clone()) {
        (Method::GET, None) if is_watch(&query) => {
            let view = watch::View {
                api_version: "events.k8s.io/v1".into(),
                convert: from_core,
            };
            watch_response(
                shared,
                core,
                "v1".into(),
                call.path.namespace.clone(),
                &query,
                call.accept,
                Some(view),
            )
        }
        (Method::GET, None) => {
            let (labels, fields) = selectors(&core, &query)?;
            let params =
                paged_list_params(call.path.namespace.as_deref(), &labels, &fields, &query);
            let result = store.list(&core, &params)?;
            if table::wants_table(call.accept) {
                let values: Vec<&Value> = result.items.iter().map(|s| s.value.as_ref()).collect();
                let full = query.get("includeObject").is_some_and(|v| v == "Object");
                return Ok(json_response(
                    200,
                    &table::table(
                        &core,
                        &values,
                        result.resource_version,
                        result.continue_token.as_deref(),
                        full,
                    ),
                ));
            }
            let mut metadata = json!({"resourceVersion": result.resource_version.to_string()});
            if let Some(token) = &result.continue_token {
                metadata["continue"] = json!(token);
            }
            let items: Vec<Value> = result.items.iter().map(|s| from_core(&s.value)).collect();
            Ok(json_response(
                200,
                &json!({"kind": "EventList", "apiVersion": "events.k8s.io/v1", "metadata": metadata, "items": items}),
            ))
        }
        (Method::GET, Some(name)) => Ok(view(&store.get(&core, &namespace, &name)?)),
        (Method::POST, None) => {
            let mut object = body_in(&read_body(request).await?)?;
            crate::fields::record_update(&json!({}), &mut object, call.manager, scope, "", &now);
            let stored = store.create(&core, &namespace, object, dry_run(&query))?;
            Ok(with_status(201, view(&stored)))
        }
        (Method::PUT, Some(name)) => {
            let object = body_in(&read_body(request).await?)?;
            Ok(view(&store.update(
                &core,
                &namespace,
                &name,
                object,
                WriteTarget::Main,
                dry_run(&query),
                Some(call.manager),
            )?))
        }
        (Method::PATCH, Some(name)) => {
            let kind = PatchKind::from_content_type(call.content_type).ok_or_else(|| {
                ApiError::unsupported_media_type(format!(
                    "unknown patch content type {:?}",
                    call.content_type
                ))
            })?;
            let patch = parse_body(kind, &read_body(request).await?)
                .map_err(|e| ApiError::bad_request(e.to_string()))?;
            let patch_error = |e: crate::patch::PatchError| ApiError::bad_request(e.to_string());
            let result = store.modify(
                &core,
                &namespace,
                &name,
                WriteTarget::Main,
                dry_run(&query),
                |current| {
                    let mut next = to_core(
                        &apply_patch(kind, &from_core(current), &patch).map_err(patch_error)?,
                    );
                    if kind == PatchKind::Apply {
                        crate::fields::record_apply(
                            current,
                            &to_core(&patch),
                            &mut next,
                            call.manager,
                            call.force,
                            scope,
                            "",
                            &now,
                        )
                        .map_err(|conflicts| apply_conflict(&core, &name, &conflicts))?;
                    } else {
                        crate::fields::record_update(
                            current,
                            &mut next,
                            call.manager,
                            scope,
                            "",
                            &now,
                        );
                    }
                    Ok(next)
                },
            );
            match result {
                Ok(stored) => Ok(view(&stored)),
                Err(e) if e.code == 404 && kind == PatchKind::Apply => {
                    let mut object = to_core(&patch);
                    crate::meta::metadata_mut(&mut object).insert("name".into(), json!(name));
                    crate::fields::record_update(
                        &json!({}),
                        &mut object,
                        call.manager,
                        scope,
                        "",
                        &now,
                    );
                    Ok(with_status(
                        201,
                        view(&store.create(&core, &namespace, object, dry_run(&query))?),
                    ))
                }
                Err(e) => Err(e),
            }
        }
        (Method::DELETE, Some(name)) => {
            let body = read_body(request).await?;
            let body = if body.is_empty() {
                None
            } else {
                Some(parse_object(call.content_type, &body)?)
            };
            Ok(view(&store.delete(
                &core,
                &namespace,
                &name,
                &delete_options(body.as_ref(), &query),
            )?))
        }
        _ => Err(ApiError::method_not_allowed(
            "the server does not allow this method on events.k8s.io events",
        )),
    }
}
