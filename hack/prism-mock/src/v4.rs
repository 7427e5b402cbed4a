//! v4 endpoints: VM templates (`/api/vmm/v4.0/content/templates`) and tasks (`/api/prism/v4.0/config/tasks`).

use std::collections::HashMap;
use std::time::Instant;

use axum::Router;
use axum::extract::{Extension, Path, Query, State};
use axum::response::Response;
use axum::routing::{get, post};
use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use serde_json::Value;

use crate::app::{App, Directives, attribute};
use crate::errors::{ApiError, json_ok};

type Answer = Result<Response, ApiError>;

/// Header carrying the client's request id on v4 mutating calls.
pub(crate) const REQUEST_ID_HEADER: &str = "NTNX-Request-Id";

pub(crate) fn routes() -> Router<App> {
    Router::new()
        .route("/api/vmm/v4.0/content/templates", get(list_templates))
        .route(
            "/api/vmm/v4.0/content/templates/{ext_id}",
            get(get_template),
        )
        .route(
            "/api/vmm/v4.0/content/templates/{ext_id}/$actions/deploy",
            post(deploy_template),
        )
        .route("/api/prism/v4.0/config/tasks/{ext_id}", get(get_task))
}

async fn list_templates(
    State(app): State<App>,
    Query(query): Query<HashMap<String, String>>,
) -> Answer {
    let store = app.lock();
    let body = store.list_templates(
        query.get("$page").map(String::as_str),
        query.get("$limit").map(String::as_str),
        query.get("$filter").map(String::as_str),
    )?;
    Ok(json_ok(StatusCode::OK, body))
}

async fn get_template(State(app): State<App>, Path(ext_id): Path<String>) -> Answer {
    Ok(json_ok(StatusCode::OK, app.lock().get_template(&ext_id)?))
}

async fn deploy_template(
    State(app): State<App>,
    Extension(d): Extension<Directives>,
    Path(ext_id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
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
    let response =
        store.deploy_template(Instant::now(), &ext_id, request_id, &body, d.fail_task)?;
    let vm = response["data"]["extId"]
        .as_str()
        .and_then(|task| store.task_vm(task));
    Ok(attribute(json_ok(StatusCode::ACCEPTED, response), vm))
}

async fn get_task(State(app): State<App>, Path(ext_id): Path<String>) -> Answer {
    Ok(json_ok(StatusCode::OK, app.lock().get_task_v4(&ext_id)?))
}
