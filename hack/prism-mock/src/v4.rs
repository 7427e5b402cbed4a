//! v4 endpoints: VM templates (`/api/vmm/{v4.0,v4.3}/content/templates`), a VM's GET and PUT
//! (`/api/vmm/{v4.0,v4.3}/ahv/config/vms/{extId}`), tasks (`/api/prism/{v4.0,v4.4}/config/tasks`) and volume
//! groups (`/api/volumes/{v4.0,v4.3}/config/volume-groups`: get, VM attachments, detach-vm).
//!
//! Each path is served under v4.0 (what pc.2024.3 ships, reference/02 §8) and under the version Nutanix's current
//! Python SDKs call: ntnx-vmm-py-client 4.3.2 (`/api/vmm/v4.3/…`, TemplatesApi), ntnx-prism-py-client 4.4.2
//! (`/api/prism/v4.4/…`, TasksApi) and ntnx-volumes-py-client 4.3.2 (`/api/volumes/v4.3/…`, VolumeGroupsApi).

use std::collections::HashMap;
use std::time::Instant;

use axum::Router;
use axum::extract::{Extension, Path, Query, State};
use axum::http::Uri;
use axum::response::Response;
use axum::routing::{get, post};
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use serde_json::{Value, json};

use crate::app::{App, Directives, REQUEST_ID_HEADER, attribute};
use crate::errors::{ApiError, json_ok};
use crate::store::V4Version;

type Answer = Result<Response, ApiError>;

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

pub(crate) const VOLUMES_VERSIONS: [V4Version; 2] = [
    V4Version {
        path: "v4.0",
        fv: "v4.r0",
    },
    V4Version {
        path: "v4.3",
        fv: "v4.r3",
    },
];

pub(crate) fn routes() -> Router<App> {
    let mut router = Router::new();
    for version in VOLUMES_VERSIONS {
        let base = format!("/api/volumes/{}/config/volume-groups", version.path);
        router = router
            .route(
                &format!("{base}/{{ext_id}}"),
                get(move |app: State<App>, ext_id: Path<String>| async move {
                    let store = app.lock();
                    let body = store.get_volume_group(&ext_id, &version)?;
                    Ok::<_, ApiError>(json_ok(StatusCode::OK, body))
                }),
            )
            .route(
                &format!("{base}/{{ext_id}}/vm-attachments"),
                get(move |app: State<App>, ext_id: Path<String>| async move {
                    let store = app.lock();
                    let body = store.list_vm_attachments(&ext_id, &version)?;
                    Ok::<_, ApiError>(json_ok(StatusCode::OK, body))
                }),
            )
            .route(
                &format!("{base}/{{ext_id}}/$actions/detach-vm"),
                post(
                    move |app: State<App>,
                          d: Extension<Directives>,
                          ext_id: Path<String>,
                          headers: HeaderMap,
                          body: Bytes| async move {
                        detach_vm(app, d, ext_id, headers, body, version)
                    },
                ),
            );
    }
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
                &format!("/api/vmm/{}/ahv/config/vms/{{ext_id}}", version.path),
                get(move |app: State<App>, ext_id: Path<String>| async move {
                    get_vm(app, ext_id, version)
                })
                .put(
                    move |app: State<App>,
                          d: Extension<Directives>,
                          ext_id: Path<String>,
                          headers: HeaderMap,
                          body: Bytes| async move {
                        update_vm(app, d, ext_id, &headers, &body, version)
                    },
                ),
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
    for (namespace, versions) in [
        ("vmm", VMM_VERSIONS),
        ("prism", PRISM_VERSIONS),
        ("volumes", VOLUMES_VERSIONS),
    ] {
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
            &format!("/api/prism/{}/config/tasks", version.path),
            get(
                move |app: State<App>,
                      query: Query<HashMap<String, String>>,
                      headers: HeaderMap,
                      uri: Uri| async move {
                    list_tasks(app, query, &headers, &uri, version)
                },
            ),
        );
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

/// Every v4 GET of one entity carries an `ETag` (the Ansible collection's ntnx_templates_deploy_v2 fails without
/// one). Nutanix's Python SDKs (ntnx-vmm-py-client and ntnx-prism-py-client, 4.0.1 to 4.3.2/4.4.2,
/// `ApiClient.__add_header_to_reserved`) copy the header into the `$reserved` of the body's `data` only when that
/// object already has a `$reserved`, which is where `ApiClient.get_etag` then finds it and from where
/// `__call_api` sends it back as `If-Match`: so the entity carries `$reserved` too (`V4Version::wrap`).
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

/// A v4 request body: empty is `{}`, anything else must be JSON (`code` names the namespace's error code).
fn v4_body(body: &Bytes, code: &'static str) -> Result<Value, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Object(serde_json::Map::new()));
    }
    serde_json::from_slice(body).map_err(|e| {
        ApiError::v4(
            StatusCode::BAD_REQUEST,
            "INVALID_INPUT",
            code,
            format!("request body is not valid JSON: {e}"),
        )
    })
}

fn detach_vm(
    State(app): State<App>,
    Extension(d): Extension<Directives>,
    Path(ext_id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
    version: V4Version,
) -> Answer {
    let body = v4_body(&body, "VOL-10001")?;
    let request_id = headers.get(REQUEST_ID_HEADER).and_then(|v| v.to_str().ok());
    let mut store = app.lock();
    let response = store.detach_vm(
        Instant::now(),
        &ext_id,
        request_id,
        &body,
        d.fail_task,
        &version,
    )?;
    let vm = body.get("extId").and_then(Value::as_str).map(str::to_owned);
    Ok(attribute(json_ok(StatusCode::ACCEPTED, response), vm))
}

fn deploy_template(
    State(app): State<App>,
    Extension(d): Extension<Directives>,
    Path(ext_id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
    version: V4Version,
) -> Answer {
    let body = v4_body(&body, "VMM-30100")?;
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

/// The host the answer's links name: the request's authority, else its `Host`.
fn request_host(headers: &HeaderMap, uri: &Uri) -> String {
    uri.authority()
        .map(|a| a.as_str().to_owned())
        .or_else(|| {
            headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "localhost:9440".to_owned())
}

fn list_tasks(
    State(app): State<App>,
    Query(query): Query<HashMap<String, String>>,
    headers: &HeaderMap,
    uri: &Uri,
    version: V4Version,
) -> Answer {
    let host = request_host(headers, uri);
    let store = app.lock();
    let body = store.list_tasks_v4(
        query.get("$page").map(String::as_str),
        query.get("$limit").map(String::as_str),
        query.get("$filter").map(String::as_str),
        &version,
        &host,
    )?;
    Ok(json_ok(StatusCode::OK, body))
}

fn get_task(
    State(app): State<App>,
    Path(ext_id): Path<String>,
    headers: &HeaderMap,
    uri: &Uri,
    version: V4Version,
) -> Answer {
    let host = request_host(headers, uri);
    let store = app.lock();
    let (body, etag) = store.get_task_v4(&ext_id, &version, &host)?;
    Ok(with_etag(json_ok(StatusCode::OK, body), &etag))
}

fn get_vm(State(app): State<App>, Path(ext_id): Path<String>, version: V4Version) -> Answer {
    let store = app.lock();
    let (body, etag) = store.get_vm_v4(&ext_id, &version)?;
    Ok(with_etag(json_ok(StatusCode::OK, body), &etag))
}

fn update_vm(
    State(app): State<App>,
    Extension(d): Extension<Directives>,
    Path(ext_id): Path<String>,
    headers: &HeaderMap,
    body: &Bytes,
    version: V4Version,
) -> Answer {
    let body: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::v4(
            StatusCode::BAD_REQUEST,
            "INVALID_INPUT",
            "VMM-30100",
            format!("request body is not valid JSON: {e}"),
        )
    })?;
    let if_match = headers.get(header::IF_MATCH).and_then(|v| v.to_str().ok());
    let mut store = app.lock();
    let response = store.update_vm_v4(
        Instant::now(),
        &ext_id,
        if_match,
        &body,
        d.fail_task,
        &version,
    )?;
    Ok(attribute(
        json_ok(StatusCode::ACCEPTED, response),
        Some(ext_id),
    ))
}
