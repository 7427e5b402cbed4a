//! HTTP routing and request handlers: [`handle`] logs a request, checks it and dispatches it by
//! its path (`routing`) to discovery, the resource handlers (`resource`, `patch`,
//! `subresources`, `events_v1`) or list and watch answers (`collections`).

mod collections;
mod events_v1;
mod patch;
mod request;
mod resource;
mod routing;
mod subresources;

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::discovery;
use crate::error::{ApiError, ApiResult};
use crate::reqlog::{RequestLog, RequestRecord, TimedRequest};
use crate::resources::ResourceDef;
use crate::store::Store;

use resource::resource_request;
use routing::{ResourcePath, Route, route};

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

fn json_response_value(value: &Value) -> Response<Body> {
    json_response(200, value)
}

fn with_status(code: u16, mut response: Response<Body>) -> Response<Body> {
    *response.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
    response
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_auth_user_is_decoded() {
        assert_eq!(
            base64_decode::decode("YWxpY2U6c2VjcmV0").as_deref(),
            Some("alice:secret")
        );
    }
}
