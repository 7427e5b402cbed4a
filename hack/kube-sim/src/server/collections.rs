//! List and watch answers, in full or reduced to `PartialObjectMetadata`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use http::{Response, header};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::error::{ApiError, ApiResult, Subject};
use crate::resources::ResourceDef;
use crate::store::{Store, Stored};
use crate::table;
use crate::watch::{self, WatchRequest, WatchStart};

use super::request::{object_bytes, paged_list_params, selectors};
use super::routing::ResourcePath;
use super::{Body, Shared, is_watch, json_bytes, json_response};

/// Does the `Accept` header ask for `PartialObjectMetadata` (kube-rs `get_metadata`, `list_metadata`,
/// `metadata_watcher`)?
pub(super) fn wants_metadata_only(accept: &str) -> bool {
    accept
        .split(',')
        .next()
        .is_some_and(|first| first.contains("as=PartialObjectMetadata"))
}

/// An object reduced to `PartialObjectMetadata`.
fn partial_metadata(object: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": object.get("metadata").cloned().unwrap_or(json!({}))})
}

/// GET, list and watch answering `PartialObjectMetadata(List)`.
pub(super) fn metadata_only(
    shared: &Arc<Shared>,
    def: &Arc<ResourceDef>,
    path: &ResourcePath,
    query: &HashMap<String, String>,
    accept: &str,
) -> ApiResult<Response<Body>> {
    let store = &shared.store;
    if let Some(name) = &path.name {
        let stored = store.get(def, path.namespace.as_deref().unwrap_or_default(), name)?;
        return Ok(json_response(200, &partial_metadata(&stored.value)));
    }
    if is_watch(query) {
        let view = watch::View {
            api_version: "meta.k8s.io/v1".into(),
            convert: partial_metadata,
        };
        return watch_response(
            shared,
            def.clone(),
            path.version.clone(),
            path.namespace.clone(),
            query,
            accept,
            Some(view),
        );
    }
    let (labels, fields) = selectors(def, query)?;
    let params = paged_list_params(path.namespace.as_deref(), &labels, &fields, query);
    let result = store.list(def, &params)?;
    let mut metadata = json!({"resourceVersion": result.resource_version.to_string()});
    if let Some(token) = &result.continue_token {
        metadata["continue"] = json!(token);
    }
    let items: Vec<Value> = result
        .items
        .iter()
        .map(|s| partial_metadata(&s.value))
        .collect();
    Ok(json_response(
        200,
        &json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": metadata, "items": items}),
    ))
}

pub(super) fn list_bytes(
    def: &ResourceDef,
    version: &str,
    items: &[Stored],
    rv: u64,
    continue_token: Option<&str>,
    remaining: Option<usize>,
) -> Bytes {
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if let Some(token) = continue_token {
        metadata["continue"] = json!(token);
    }
    if let Some(remaining) = remaining {
        metadata["remainingItemCount"] = json!(remaining);
    }
    let head = json!({"kind": def.list_kind, "apiVersion": def.api_version(version), "metadata": metadata});
    let head = serde_json::to_vec(&head).unwrap_or_default();
    let total: usize = items.iter().map(|s| s.json.len() + 1).sum();
    let mut out = BytesMut::with_capacity(head.len() + total + 16);
    // The head is an object: open it again to append "items".
    out.put_slice(&head[..head.len().saturating_sub(1)]);
    out.put_slice(b",\"items\":[");
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.put_u8(b',');
        }
        out.put_slice(&object_bytes(def, version, item));
    }
    out.put_slice(b"]}");
    out.freeze()
}

pub(super) fn list_response(
    store: &Store,
    def: &ResourceDef,
    version: &str,
    namespace: Option<&str>,
    query: &HashMap<String, String>,
    accept: &str,
) -> ApiResult<Response<Body>> {
    let (labels, fields) = selectors(def, query)?;
    let params = paged_list_params(namespace, &labels, &fields, query);
    let result = store.list(def, &params)?;
    if table::wants_table(accept) {
        let full = query.get("includeObject").is_some_and(|v| v == "Object");
        let values: Vec<&Value> = result.items.iter().map(|s| s.value.as_ref()).collect();
        return Ok(json_response(
            200,
            &table::table(
                def,
                &values,
                result.resource_version,
                result.continue_token.as_deref(),
                full,
            ),
        ));
    }
    Ok(json_bytes(
        200,
        list_bytes(
            def,
            version,
            &result.items,
            result.resource_version,
            result.continue_token.as_deref(),
            result.remaining,
        ),
    ))
}

pub(super) fn watch_response(
    shared: &Arc<Shared>,
    def: Arc<ResourceDef>,
    version: String,
    namespace: Option<String>,
    query: &HashMap<String, String>,
    accept: &str,
    view: Option<watch::View>,
) -> ApiResult<Response<Body>> {
    let (labels, fields) = selectors(&def, query)?;
    let table = table::wants_table(accept).then(|| watch::TableOutput {
        full_objects: query.get("includeObject").is_some_and(|v| v == "Object"),
        columns_sent: std::sync::atomic::AtomicBool::new(false),
    });
    let bookmarks = query
        .get("allowWatchBookmarks")
        .is_some_and(|v| v == "true" || v == "1");
    let initial = query
        .get("sendInitialEvents")
        .is_some_and(|v| v == "true" || v == "1");
    let rv = query
        .get("resourceVersion")
        .map(String::as_str)
        .unwrap_or_default();
    let start = if initial {
        if !bookmarks {
            return Err(ApiError::invalid(
                Subject {
                    group: "",
                    resource: &def.plural,
                    name: "",
                },
                "ListOptions",
                "allowWatchBookmarks",
                "Required value: allowWatchBookmarks must be true when sendInitialEvents is true",
            ));
        }
        WatchStart::InitialEvents
    } else if rv.is_empty() || rv == "0" {
        WatchStart::Now
    } else {
        WatchStart::After(rv.parse().map_err(|_| {
            ApiError::bad_request(format!("resourceVersion {rv:?} is not a number"))
        })?)
    };
    let timeout = query
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map(Duration::from_secs)
        .map_or(shared.max_watch, |t| t.min(shared.max_watch));
    let request = WatchRequest {
        def,
        version,
        namespace,
        labels,
        fields,
        start,
        bookmarks,
        timeout,
        bookmark_interval: shared.bookmark_interval,
        table,
        view,
    };
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    tokio::spawn(watch::run(
        shared.store.clone(),
        request,
        tx,
        shared.shutdown.clone(),
    ));
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|line| (Ok::<_, Infallible>(Frame::data(line)), rx))
    });
    let mut response = Response::new(BodyExt::boxed(StreamBody::new(stream)));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-cache, private"),
    );
    Ok(response)
}
