//! v4 endpoints: VM templates (`/api/vmm/{v4.0,v4.3}/content/templates`) and tasks
//! (`/api/prism/{v4.0,v4.4}/config/tasks`).
//!
//! Each path is served under v4.0 (what pc.2024.3 ships, reference/02 §8) and under the version Nutanix's current
//! Python SDKs call: ntnx-vmm-py-client 4.3.2 (`/api/vmm/v4.3/…`, TemplatesApi) and ntnx-prism-py-client 4.4.2
//! (`/api/prism/v4.4/…`, TasksApi).

use std::collections::HashMap;
use std::time::Instant;

use axum::Router;
use axum::extract::{Extension, Path, Query, State};
use axum::http::Uri;
use axum::response::Response;
use axum::routing::{get, post};
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use serde_json::{Map, Value, json};

use crate::app::{App, Directives, attribute};
use crate::errors::{ApiError, json_ok};

type Answer = Result<Response, ApiError>;

/// Header carrying the client's request id on v4 mutating calls.
pub(crate) const REQUEST_ID_HEADER: &str = "NTNX-Request-Id";

/// A v4 API version a path is served under, with the object version its answers carry in `$reserved.$fv`
/// (the SDKs' models: vmm 4.3 objects default to `v4.r3`, prism 4.4 objects to `v4.r4`; v4.0 to `v4.r0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct V4Version {
    /// Path segment, e.g. `v4.3`.
    pub(crate) path: &'static str,
    /// `$reserved.$fv` of the answers.
    pub(crate) fv: &'static str,
}

pub(crate) const VMM_VERSIONS: [V4Version; 2] = [
    V4Version {
        path: "v4.0",
        fv: "v4.r0",
    },
    V4Version {
        path: "v4.3",
        fv: "v4.r3",
    },
];

pub(crate) const PRISM_VERSIONS: [V4Version; 2] = [
    V4Version {
        path: "v4.0",
        fv: "v4.r0",
    },
    V4Version {
        path: "v4.4",
        fv: "v4.r4",
    },
];

impl V4Version {
    /// An object with its `$objectType` and `$reserved` (every v4 model carries both; the SDK reads the
    /// `$objectType` to pick the class).
    pub(crate) fn object<'a>(
        &self,
        object_type: &str,
        fields: impl IntoIterator<Item = (&'a str, Value)>,
    ) -> Value {
        let map: Map<String, Value> = fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        self.wrap(object_type, map)
    }

    /// `map` with `$objectType` and `$reserved` added. Objects of the `common.v1` namespace (a response's
    /// metadata and its flags) carry their own namespace's version, `v1.r0`, under every API version: so do
    /// `common.v1.response.ApiResponseMetadata` and `common.v1.config.Flag` in ntnx-vmm-py-client 4.0.1 and
    /// 4.3.2 (`_initialize_object_version`; sdk-check/check_v4.py).
    pub(crate) fn wrap(&self, object_type: &str, mut map: Map<String, Value>) -> Value {
        let fv = if object_type.starts_with("common.v1.") {
            "v1.r0"
        } else {
            self.fv
        };
        map.insert("$objectType".to_owned(), json!(object_type));
        map.insert("$reserved".to_owned(), json!({"$fv": fv}));
        Value::Object(map)
    }

    /// Whether this is the first v4 version (`v4.0`), whose models lack the fields later revisions added.
    pub(crate) fn is_v4_0(&self) -> bool {
        self.path == "v4.0"
    }

    /// The response envelope `{data, metadata, $objectType, $reserved}`; `data` is left out when `None`
    /// (an empty list answers without `data`: prism-go-client converged/v4/utils.go `CallListAPI` treats a nil
    /// `data` as no results, and the Ansible collection's ntnx_templates_info_v2 checks
    /// `getattr(resp, "data", None)` before reading it).
    pub(crate) fn envelope(
        &self,
        object_type: &str,
        data: Option<Value>,
        metadata: Map<String, Value>,
    ) -> Value {
        let mut map = Map::new();
        if let Some(data) = data {
            map.insert("data".to_owned(), data);
        }
        map.insert(
            "metadata".to_owned(),
            self.wrap("common.v1.response.ApiResponseMetadata", metadata),
        );
        self.wrap(object_type, map)
    }

    /// A single-entity response (`hasError` and `isPaginated` false).
    pub(crate) fn response(&self, object_type: &str, data: Value) -> Value {
        let mut metadata = Map::new();
        metadata.insert("flags".to_owned(), self.flags(false));
        self.envelope(object_type, Some(data), metadata)
    }

    /// The `flags` of a response's metadata (common.v1.response.ApiResponseMetadata).
    pub(crate) fn flags(&self, paginated: bool) -> Value {
        json!([
            self.object(
                "common.v1.config.Flag",
                [("name", json!("hasError")), ("value", json!(false))]
            ),
            self.object(
                "common.v1.config.Flag",
                [("name", json!("isPaginated")), ("value", json!(paginated))]
            ),
        ])
    }
}

/// An ETag for an answer: a hash of its content, so it changes when the entity does (the value of a real ETag
/// is opaque to clients; the SDKs only copy it back).
pub(crate) fn etag_of(body: &Value) -> String {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    format!("\"{hash:016x}\"")
}

pub(crate) fn routes() -> Router<App> {
    let mut router = Router::new();
    for version in VMM_VERSIONS {
        let base = format!("/api/vmm/{}/content/templates", version.path);
        router = router
            .route(
                &base,
                get(
                    move |app: State<App>, query: Query<HashMap<String, String>>| async move {
                        list_templates(app, query, version)
                    },
                ),
            )
            .route(
                &format!("{base}/{{ext_id}}"),
                get(move |app: State<App>, ext_id: Path<String>| async move {
                    get_template(app, ext_id, version)
                }),
            )
            .route(
                &format!("{base}/{{ext_id}}/$actions/deploy"),
                post(
                    move |app: State<App>,
                          d: Extension<Directives>,
                          ext_id: Path<String>,
                          headers: HeaderMap,
                          body: Bytes| async move {
                        deploy_template(app, d, ext_id, headers, body, version)
                    },
                ),
            );
    }
    // Nutanix's SDKs first ask `OPTIONS /api/{namespace}/unversioned/info` for the newest version the server
    // serves (`{"data": "v4.x"}`) and use the lower of that and their own (ApiClient.negotiate_version of
    // ntnx-vmm-py-client 4.3.2 and ntnx-prism-py-client 4.4.2); the mock answers the newest it serves.
    for (namespace, versions) in [("vmm", VMM_VERSIONS), ("prism", PRISM_VERSIONS)] {
        let newest = versions[versions.len() - 1].path;
        router = router.route(
            &format!("/api/{namespace}/unversioned/info"),
            axum::routing::options(move || async move {
                json_ok(StatusCode::OK, json!({"data": newest}))
            }),
        );
    }
    for version in PRISM_VERSIONS {
        router = router.route(
            &format!("/api/prism/{}/config/tasks/{{ext_id}}", version.path),
            get(
                move |app: State<App>, ext_id: Path<String>, headers: HeaderMap, uri: Uri| async move {
                    get_task(app, ext_id, &headers, &uri, version)
                },
            ),
        );
    }
    router
}

/// Every v4 GET of one entity carries an `ETag` (the SDKs copy it into `$reserved` and send it back as
/// `If-Match`; the Ansible collection's ntnx_templates_deploy_v2 fails without one).
fn with_etag(mut response: Response, etag: &str) -> Response {
    if let Ok(value) = HeaderValue::from_str(etag) {
        response.headers_mut().insert(header::ETAG, value);
    }
    response
}

fn list_templates(
    State(app): State<App>,
    Query(query): Query<HashMap<String, String>>,
    version: V4Version,
) -> Answer {
    let store = app.lock();
    let body = store.list_templates(
        query.get("$page").map(String::as_str),
        query.get("$limit").map(String::as_str),
        query.get("$filter").map(String::as_str),
        &version,
    )?;
    Ok(json_ok(StatusCode::OK, body))
}

fn get_template(State(app): State<App>, Path(ext_id): Path<String>, version: V4Version) -> Answer {
    let store = app.lock();
    let (body, etag) = store.get_template(&ext_id, &version)?;
    Ok(with_etag(json_ok(StatusCode::OK, body), &etag))
}

fn deploy_template(
    State(app): State<App>,
    Extension(d): Extension<Directives>,
    Path(ext_id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
    version: V4Version,
) -> Answer {
    let body: Value = if body.iter().all(u8::is_ascii_whitespace) {
        Value::Object(serde_json::Map::new())
    } else {
        serde_json::from_slice(&body).map_err(|e| {
            ApiError::v4(
                StatusCode::BAD_REQUEST,
                "INVALID_INPUT",
                "VMM-30100",
                format!("request body is not valid JSON: {e}"),
            )
        })?
    };
    let request_id = headers.get(REQUEST_ID_HEADER).and_then(|v| v.to_str().ok());
    let mut store = app.lock();
    let response = store.deploy_template(
        Instant::now(),
        &ext_id,
        request_id,
        &body,
        d.fail_task,
        &version,
    )?;
    let vm = response["data"]["extId"]
        .as_str()
        .and_then(|task| store.task_vm(task));
    Ok(attribute(json_ok(StatusCode::ACCEPTED, response), vm))
}

fn get_task(
    State(app): State<App>,
    Path(ext_id): Path<String>,
    headers: &HeaderMap,
    uri: &Uri,
    version: V4Version,
) -> Answer {
    let host = uri
        .authority()
        .map(|a| a.as_str().to_owned())
        .or_else(|| {
            headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "localhost:9440".to_owned());
    let store = app.lock();
    let (body, etag) = store.get_task_v4(&ext_id, &version, &host)?;
    Ok(with_etag(json_ok(StatusCode::OK, body), &etag))
}
