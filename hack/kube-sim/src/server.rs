//! HTTP routing and request handlers.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::discovery;
use crate::error::{ApiError, ApiResult, Subject};
use crate::meta::{json_path, meta_str, now_rfc3339, set_json_path};
use crate::patch::{PatchKind, apply_patch, parse_body};
use crate::reqlog::{RequestLog, RequestRecord, TimedRequest};
use crate::resources::ResourceDef;
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{
    DeleteOptions, ListParams, PendingWrite, Store, Stored, WriteTarget, field_scope,
};
use crate::table;
use crate::watch::{self, WatchRequest, WatchStart};

/// Response body type.
pub type Body = BoxBody<Bytes, Infallible>;

/// What handlers share.
#[derive(Debug)]
pub struct Shared {
    /// The store.
    pub store: Arc<Store>,
    /// The request log.
    pub log: Arc<RequestLog>,
    /// `host:port` the server listens on.
    pub address: String,
    /// Interval between watch bookmarks.
    pub bookmark_interval: Duration,
    /// Longest a watch runs when the client gives no `timeoutSeconds`.
    pub max_watch: Duration,
    /// Cancelled on shutdown (ends watches).
    pub shutdown: CancellationToken,
    /// The machine-api-operator's defaulting webhooks, when the cluster has them.
    pub machine_api_webhooks: Option<crate::webhooks::MachineApiWebhooks>,
}

impl Shared {
    /// The mutating admission a create goes through (after strict field validation, before
    /// the object is pruned, defaulted and stored, as in the real API server).
    fn admit_create(&self, def: &ResourceDef, object: &mut Value) -> ApiResult<()> {
        match &self.machine_api_webhooks {
            Some(webhooks) => webhooks.admit_create(def, object),
            None => Ok(()),
        }
    }
}

/// A parsed resource path.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct ResourcePath {
    group: String,
    version: String,
    namespace: Option<String>,
    plural: String,
    name: Option<String>,
    subresource: Option<String>,
}

#[derive(Debug, PartialEq, Eq)]
enum Route {
    Version,
    Health,
    CoreVersions,
    Groups,
    Group(String),
    ResourceList(String, String),
    Resource(ResourcePath),
    AdminRequests,
    AdminObjects,
    OpenApiRoot,
    OpenApiGroupVersion(String, String),
    OpenApiV2,
    Unknown,
}

fn route(path: &str) -> Route {
    let segments: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    match segments.as_slice() {
        ["version"] => Route::Version,
        ["healthz" | "readyz" | "livez", ..] => Route::Health,
        ["kube-sim", "requests"] => Route::AdminRequests,
        ["kube-sim", "objects"] => Route::AdminObjects,
        ["openapi", "v2"] => Route::OpenApiV2,
        ["openapi", "v3"] => Route::OpenApiRoot,
        ["openapi", "v3", "api", version] => {
            Route::OpenApiGroupVersion(String::new(), version.to_string())
        }
        ["openapi", "v3", "apis", group, version] => {
            Route::OpenApiGroupVersion(group.to_string(), version.to_string())
        }
        ["api"] => Route::CoreVersions,
        ["apis"] => Route::Groups,
        ["apis", group] => Route::Group(group.to_string()),
        ["api", version] => Route::ResourceList(String::new(), version.to_string()),
        ["apis", group, version] => Route::ResourceList(group.to_string(), version.to_string()),
        ["api", version, rest @ ..] => resource_route("", version, rest),
        ["apis", group, version, rest @ ..] => resource_route(group, version, rest),
        _ => Route::Unknown,
    }
}

fn resource_route(group: &str, version: &str, rest: &[&str]) -> Route {
    let mut p = ResourcePath {
        group: group.to_string(),
        version: version.to_string(),
        ..Default::default()
    };
    let rest = match rest {
        ["namespaces", ns, plural, tail @ ..]
            if !(group.is_empty() && matches!(*plural, "status" | "finalize")) =>
        {
            p.namespace = Some(ns.to_string());
            p.plural = plural.to_string();
            tail
        }
        [plural, tail @ ..] => {
            p.plural = plural.to_string();
            tail
        }
        [] => return Route::Unknown,
    };
    match rest {
        [] => {}
        [name] => p.name = Some(name.to_string()),
        [name, sub] => {
            p.name = Some(name.to_string());
            p.subresource = Some(sub.to_string());
        }
        _ => return Route::Unknown,
    }
    Route::Resource(p)
}

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

fn json_bytes(code: u16, bytes: Bytes) -> Response<Body> {
    let mut response = Response::new(full(bytes));
    *response.status_mut() =
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

fn json_response(code: u16, value: &Value) -> Response<Body> {
    json_bytes(
        code,
        Bytes::from(serde_json::to_vec(value).unwrap_or_default()),
    )
}

fn error_response(error: &ApiError) -> Response<Body> {
    json_response(error.code, &error.to_status())
}

/// The user named by the request's credentials, never the credential itself.
fn user_of(request: &Request<Incoming>) -> String {
    let auth = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if let Some(token) = auth.strip_prefix("Bearer ") {
        return token
            .strip_prefix("user:")
            .map(str::to_string)
            .unwrap_or_else(|| "bearer".to_string());
    }
    if let Some(basic) = auth.strip_prefix("Basic ") {
        use base64_decode::decode;
        return decode(basic)
            .and_then(|s| s.split_once(':').map(|(u, _)| u.to_string()))
            .unwrap_or_else(|| "basic".to_string());
    }
    "anonymous".to_string()
}

/// Tiny base64 decoder for the user name of basic auth (the password is dropped at once).
mod base64_decode {
    pub fn decode(text: &str) -> Option<String> {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut bits = 0u32;
        let mut count = 0;
        let mut out = vec![];
        for c in text.trim_end_matches('=').bytes() {
            let value = ALPHABET.iter().position(|&a| a == c)? as u32;
            bits = (bits << 6) | value;
            count += 6;
            if count >= 8 {
                count -= 8;
                out.push((bits >> count) as u8);
                bits &= (1 << count) - 1;
            }
        }
        String::from_utf8(out).ok()
    }
}

/// Serves one request and logs it.
pub async fn handle(shared: Arc<Shared>, request: Request<Incoming>) -> Response<Body> {
    let received = Instant::now();
    let path = request.uri().path().to_string();
    let method = request.method().clone();
    let user_agent = request
        .headers()
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let user = user_of(&request);
    let query: HashMap<String, String> = request
        .uri()
        .query()
        .map(|q| {
            url::form_urlencoded::parse(q.as_bytes())
                .into_owned()
                .collect()
        })
        .unwrap_or_default();
    let route = route(&path);
    let mut record = RequestRecord {
        verb: method.as_str().to_ascii_lowercase(),
        method: method.to_string(),
        path: path.clone(),
        api_group: String::new(),
        api_version: String::new(),
        resource: String::new(),
        subresource: String::new(),
        namespace: String::new(),
        name: String::new(),
        user_agent,
        user,
        status: 0,
    };
    if let Route::Resource(p) = &route {
        record.verb = rbac_verb(&method, p, &query).to_string();
        record.api_group = p.group.clone();
        record.api_version = p.version.clone();
        record.resource = p.plural.clone();
        record.subresource = p.subresource.clone().unwrap_or_default();
        record.namespace = p.namespace.clone().unwrap_or_default();
        record.name = p.name.clone().unwrap_or_default();
    }
    let response = match dispatch(&shared, route, request, &query).await {
        Ok(response) => response,
        Err(error) => error_response(&error),
    };
    record.status = response.status().as_u16();
    tracing::debug!(verb = %record.verb, path = %record.path, status = record.status, "request");
    if !matches!(
        record.path.as_str(),
        "/kube-sim/requests" | "/kube-sim/objects"
    ) {
        shared.log.push(TimedRequest {
            received,
            answered: Instant::now(),
            record,
        });
    }
    response
}

fn is_watch(query: &HashMap<String, String>) -> bool {
    matches!(query.get("watch").map(String::as_str), Some("true" | "1"))
}

fn rbac_verb(
    method: &Method,
    path: &ResourcePath,
    query: &HashMap<String, String>,
) -> &'static str {
    match (method.as_str(), path.name.is_some()) {
        ("GET" | "HEAD", false) if is_watch(query) => "watch",
        ("GET" | "HEAD", false) => "list",
        ("GET" | "HEAD", true) if is_watch(query) => "watch",
        ("GET" | "HEAD", true) => "get",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => "unknown",
    }
}

async fn dispatch(
    shared: &Arc<Shared>,
    route: Route,
    request: Request<Incoming>,
    query: &HashMap<String, String>,
) -> ApiResult<Response<Body>> {
    let store = &shared.store;
    match route {
        Route::Version => Ok(json_response(200, &discovery::version())),
        Route::Health => Ok(json_bytes(200, Bytes::from_static(b"ok"))),
        Route::CoreVersions => Ok(json_response(
            200,
            &discovery::core_versions(&shared.address),
        )),
        Route::Groups => Ok(json_response(
            200,
            &discovery::group_list(&store.resources()),
        )),
        Route::Group(group) => discovery::group(&store.resources(), &group)
            .map(|g| json_response(200, &g))
            .ok_or_else(|| ApiError::unknown_path(request.uri().path())),
        Route::ResourceList(group, version) => {
            discovery::resource_list(&store.resources(), &group, &version)
                .map(|l| json_response(200, &l))
                .ok_or_else(|| ApiError::unknown_path(request.uri().path()))
        }
        Route::OpenApiRoot => Ok(json_response(
            200,
            &discovery::openapi_v3_root(&store.resources(), store.resource_version()),
        )),
        Route::OpenApiGroupVersion(group, version) => {
            discovery::openapi_v3_group_version(&store.resources(), &group, &version)
                .map(|d| json_response(200, &d))
                .ok_or_else(|| ApiError::unknown_path(request.uri().path()))
        }
        Route::OpenApiV2 => {
            let document = crate::openapi_v2::document(&store.resources());
            let accept = request
                .headers()
                .get(header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            if !crate::openapi_v2::wants_protobuf(accept) {
                return Ok(json_response(200, &document));
            }
            let mut response =
                Response::new(full(Bytes::from(crate::openapi_v2::to_protobuf(&document))));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                http::HeaderValue::from_static(crate::openapi_v2::PROTOBUF_CONTENT_TYPE),
            );
            Ok(response)
        }
        Route::AdminRequests => Ok(json_response(200, &json!(shared.log.records()))),
        Route::AdminObjects => Ok(json_response(
            200,
            &json!({"resourceVersion": store.resource_version(), "counts": store.counts()}),
        )),
        Route::Unknown => Err(ApiError::unknown_path(request.uri().path())),
        Route::Resource(path) => resource_request(shared, path, request, query).await,
    }
}

async fn read_body(request: Request<Incoming>) -> ApiResult<Bytes> {
    request
        .into_body()
        .collect()
        .await
        .map(|c| c.to_bytes())
        .map_err(|e| ApiError::bad_request(format!("cannot read the request body: {e}")))
}

/// Parses a request body: JSON, or the Kubernetes protobuf envelope for the kinds kubectl sends that way.
fn parse_object(content_type: &str, body: &[u8]) -> ApiResult<Value> {
    if content_type.starts_with("application/vnd.kubernetes.protobuf") {
        return crate::protobuf::decode(body).map_err(|e| match e {
            crate::protobuf::ProtobufError::UnsupportedKind(_) => {
                ApiError::unsupported_media_type(e.to_string())
            }
            crate::protobuf::ProtobufError::Malformed(_) => ApiError::bad_request(e.to_string()),
        });
    }
    if content_type.starts_with("application/cbor") {
        return Err(ApiError::unsupported_media_type(
            "CBOR bodies are not supported by kube-sim; send JSON",
        ));
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))
}

fn dry_run(query: &HashMap<String, String>) -> bool {
    query.get("dryRun").is_some_and(|v| v == "All")
}

/// The object serialized for a requested version (the stored bytes when the version is the stored one).
fn object_bytes(def: &ResourceDef, version: &str, stored: &Stored) -> Bytes {
    let wanted = def.api_version(version);
    if stored.value.get("apiVersion").and_then(Value::as_str) == Some(wanted.as_str()) {
        return stored.json.clone();
    }
    let mut copy = (*stored.value).clone();
    copy["apiVersion"] = json!(wanted);
    Bytes::from(serde_json::to_vec(&copy).unwrap_or_default())
}

fn selectors(
    def: &ResourceDef,
    query: &HashMap<String, String>,
) -> ApiResult<(LabelSelector, FieldSelector)> {
    let labels = LabelSelector::parse(
        query
            .get("labelSelector")
            .map(String::as_str)
            .unwrap_or_default(),
    )
    .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let fields = FieldSelector::parse(
        query
            .get("fieldSelector")
            .map(String::as_str)
            .unwrap_or_default(),
        &def.group,
        &def.plural,
    )
    .map_err(|e| ApiError::bad_request(format!("{e} for {}", def.plural)))?;
    Ok((labels, fields))
}

async fn resource_request(
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
            let body = parse_object(&read_body(request).await?)?;
            strict_fields(&def, &version, query, &body)?;
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

/// `fieldValidation=Strict` (what kubectl sends by default): a custom resource body with fields its schema does
/// not declare is refused, as the real server does (without it, such fields are silently pruned).
fn strict_fields(
    def: &ResourceDef,
    version: &str,
    query: &HashMap<String, String>,
    body: &Value,
) -> ApiResult<()> {
    let Some(schema) = def
        .schema
        .as_ref()
        .filter(|_| query.get("fieldValidation").is_some_and(|v| v == "Strict"))
    else {
        return Ok(());
    };
    let unknown = crate::schema::unknown_fields(body, schema);
    if unknown.is_empty() {
        return Ok(());
    }
    let fields: Vec<String> = unknown
        .iter()
        .map(|f| format!("unknown field \"{f}\""))
        .collect();
    Err(ApiError::bad_request(format!(
        "{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: {}",
        fields.join(", "),
        kind = def.kind
    )))
}

/// Does the `Accept` header ask for `PartialObjectMetadata` (kube-rs `get_metadata`, `list_metadata`,
/// `metadata_watcher`)?
fn wants_metadata_only(accept: &str) -> bool {
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
fn metadata_only(
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
    let params = ListParams {
        namespace: path.namespace.as_deref(),
        labels: Some(&labels),
        fields: Some(&fields),
        limit: query.get("limit").and_then(|l| l.parse().ok()),
        continue_token: query
            .get("continue")
            .map(String::as_str)
            .filter(|c| !c.is_empty()),
    };
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

/// An events.k8s.io request, served from the core events (see [`crate::events`]).
struct EventsCall<'a> {
    path: &'a ResourcePath,
    query: &'a HashMap<String, String>,
    accept: &'a str,
    content_type: &'a str,
    manager: &'a str,
    force: bool,
}

async fn events_v1_request(
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
            let params = ListParams {
                namespace: call.path.namespace.as_deref(),
                labels: Some(&labels),
                fields: Some(&fields),
                limit: query.get("limit").and_then(|l| l.parse().ok()),
                continue_token: query
                    .get("continue")
                    .map(String::as_str)
                    .filter(|c| !c.is_empty()),
            };
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

fn json_response_value(value: &Value) -> Response<Body> {
    json_response(200, value)
}

fn with_status(code: u16, mut response: Response<Body>) -> Response<Body> {
    *response.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
    response
}

fn delete_options(body: Option<&Value>, query: &HashMap<String, String>) -> DeleteOptions {
    let from_body = |pointer: &str| {
        body.and_then(|b| b.pointer(pointer))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    DeleteOptions {
        uid: from_body("/preconditions/uid"),
        resource_version: from_body("/preconditions/resourceVersion"),
        propagation: from_body("/propagationPolicy")
            .or_else(|| query.get("propagationPolicy").cloned()),
        dry_run: body
            .and_then(|b| b.get("dryRun"))
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(|v| v == "All"))
            || dry_run(query),
    }
}

#[allow(clippy::too_many_arguments)]
fn patch_request(
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
fn apply_conflict(
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

/// CSR approval: Approved and Denied together are invalid.
fn check_approval(def: &ResourceDef, name: &str, csr: &Value) -> ApiResult<()> {
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
fn stamp_conditions(mut csr: Value) -> Value {
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

fn to_scale(def: &ResourceDef, object: &Value) -> ApiResult<Value> {
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
fn write_scale<F>(
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

fn list_bytes(
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

fn list_response(
    store: &Store,
    def: &ResourceDef,
    version: &str,
    namespace: Option<&str>,
    query: &HashMap<String, String>,
    accept: &str,
) -> ApiResult<Response<Body>> {
    let (labels, fields) = selectors(def, query)?;
    let limit = query.get("limit").and_then(|l| l.parse::<usize>().ok());
    let params = ListParams {
        namespace,
        labels: Some(&labels),
        fields: Some(&fields),
        limit,
        continue_token: query
            .get("continue")
            .map(String::as_str)
            .filter(|c| !c.is_empty()),
    };
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

fn watch_response(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_resource_paths() {
        let p =
            |group: &str, ns: Option<&str>, plural: &str, name: Option<&str>, sub: Option<&str>| {
                Route::Resource(ResourcePath {
                    group: group.into(),
                    version: if group.is_empty() {
                        "v1".into()
                    } else {
                        "v1beta1".into()
                    },
                    namespace: ns.map(Into::into),
                    plural: plural.into(),
                    name: name.map(Into::into),
                    subresource: sub.map(Into::into),
                })
            };
        assert_eq!(
            route("/api/v1/namespaces/ns1/pods/p/eviction"),
            p("", Some("ns1"), "pods", Some("p"), Some("eviction"))
        );
        assert_eq!(
            route("/api/v1/namespaces/ns1"),
            p("", None, "namespaces", Some("ns1"), None)
        );
        assert_eq!(
            route("/api/v1/namespaces/ns1/status"),
            p("", None, "namespaces", Some("ns1"), Some("status"))
        );
        assert_eq!(route("/api/v1/pods"), p("", None, "pods", None, None));
        assert_eq!(
            route("/apis/machine.openshift.io/v1beta1/namespaces/x/machinesets/m/scale"),
            p(
                "machine.openshift.io",
                Some("x"),
                "machinesets",
                Some("m"),
                Some("scale")
            )
        );
        assert_eq!(
            route("/apis/machine.openshift.io/v1beta1"),
            Route::ResourceList("machine.openshift.io".into(), "v1beta1".into())
        );
        assert_eq!(route("/api"), Route::CoreVersions);
        assert_eq!(route("/openapi/v2"), Route::OpenApiV2);
    }

    #[test]
    fn basic_auth_user_is_decoded() {
        assert_eq!(
            base64_decode::decode("YWxpY2U6c2VjcmV0").as_deref(),
            Some("alice:secret")
        );
    }
}
