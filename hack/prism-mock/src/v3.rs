//! Prism Central v3 endpoints under `/api/nutanix/v3`.

use std::time::Instant;

use axum::Router;
use axum::extract::{Extension, Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use http::{HeaderValue, StatusCode, header};
use serde_json::Value;

use crate::app::{App, AuthMethod, Directives, SESSION_COOKIE, attribute, parse_json};
use crate::errors::{ApiError, json_ok};
use crate::store::list::ListQuery;
use crate::store::{Store, Table};

type Answer = Result<Response, ApiError>;
/// Picks one entity table out of the store.
type TableSelector = fn(&Store) -> &Table;
/// Renders a stored entity as GET and list answer it.
type Render = fn(&Store, &Value) -> Value;

pub(crate) fn routes() -> Router<App> {
    let mut router = Router::new();
    let stored: Render = |_, e| e.clone();
    let tables: [(&str, TableSelector, Render); 5] = [
        ("images", |s| &s.images, stored),
        ("subnets", |s| &s.subnets, Store::subnet_json),
        ("clusters", |s| &s.clusters, stored),
        ("projects", |s| &s.projects, stored),
        ("hosts", |s| &s.hosts, stored),
    ];
    for (name, select, render) in tables {
        router = router
            .route(
                &format!("/api/nutanix/v3/{name}/list"),
                post(move |app: State<App>, body: Bytes| async move {
                    list_table(app, body, select, render)
                }),
            )
            .route(
                &format!("/api/nutanix/v3/{name}/{{uuid}}"),
                get(move |app: State<App>, uuid: Path<String>| async move {
                    get_table(app, uuid, select, render)
                }),
            );
    }
    router
        .route("/api/nutanix/v3/users/me", get(users_me))
        .route(
            "/api/nutanix/v3/prism_central",
            get(|State(app): State<App>| async move {
                json_ok(StatusCode::OK, app.lock().prism_central_json())
            }),
        )
        .route("/api/nutanix/v3/vms", post(create_vm))
        .route("/api/nutanix/v3/vms/list", post(list_vms))
        .route(
            "/api/nutanix/v3/vms/{uuid}",
            get(get_vm).put(update_vm).delete(delete_vm),
        )
        .route("/api/nutanix/v3/vms/{uuid}/clone", post(clone_vm))
        .route("/api/nutanix/v3/tasks/{uuid}", get(get_task))
        .route("/api/nutanix/v3/categories/list", post(list_category_keys))
        .route(
            "/api/nutanix/v3/categories/{key}",
            get(get_category_key)
                .put(put_category_key)
                .delete(delete_category_key),
        )
        .route(
            "/api/nutanix/v3/categories/{key}/list",
            post(list_category_values),
        )
        .route(
            "/api/nutanix/v3/categories/{key}/{value}",
            get(get_category_value)
                .put(put_category_value)
                .delete(delete_category_value),
        )
        .route(
            "/api/nutanix/v3/idempotence_identifiers",
            post(reserve_uuids),
        )
        .route(
            "/api/nutanix/v3/idempotence_identifiers/{client_identifier}",
            get(get_reservation).delete(delete_reservation),
        )
}

async fn users_me(
    State(app): State<App>,
    Extension(directives): Extension<Directives>,
) -> Response {
    let mut store = app.lock();
    let body = store.user_json();
    let mut response = json_ok(StatusCode::OK, body);
    if directives.auth == AuthMethod::Basic {
        let token = store.new_session(Instant::now());
        let max_age = store.session_ttl.as_secs();
        let secure = if app.tls { "; Secure" } else { "" };
        let cookie =
            format!("{SESSION_COOKIE}={token}; Path=/; Max-Age={max_age}{secure}; HttpOnly");
        if let Ok(value) = HeaderValue::from_str(&cookie) {
            response.headers_mut().insert(header::SET_COOKIE, value);
        }
    }
    response
}

async fn create_vm(
    State(app): State<App>,
    Extension(d): Extension<Directives>,
    body: Bytes,
) -> Answer {
    let body = parse_json("vm", &body)?;
    let mut store = app.lock();
    let response = store.create_vm(Instant::now(), &body, d.fail_task)?;
    let vm = response["metadata"]["uuid"].as_str().map(str::to_owned);
    Ok(attribute(json_ok(StatusCode::ACCEPTED, response), vm))
}

async fn list_vms(State(app): State<App>, body: Bytes) -> Answer {
    Ok(json_ok(StatusCode::OK, app.lock().list_vms(&body)?))
}

async fn get_vm(State(app): State<App>, Path(uuid): Path<String>) -> Answer {
    Ok(json_ok(StatusCode::OK, app.lock().get_vm(&uuid)?))
}

async fn update_vm(
    State(app): State<App>,
    Extension(d): Extension<Directives>,
    Path(uuid): Path<String>,
    body: Bytes,
) -> Answer {
    let body = parse_json("vm", &body)?;
    let response = app
        .lock()
        .update_vm(Instant::now(), &uuid, &body, d.fail_task)?;
    Ok(json_ok(StatusCode::ACCEPTED, response))
}

async fn delete_vm(
    State(app): State<App>,
    Extension(d): Extension<Directives>,
    Path(uuid): Path<String>,
) -> Answer {
    let response = app.lock().delete_vm(Instant::now(), &uuid, d.fail_task)?;
    Ok(json_ok(StatusCode::ACCEPTED, response))
}

async fn clone_vm(
    State(app): State<App>,
    Extension(d): Extension<Directives>,
    Path(uuid): Path<String>,
    body: Bytes,
) -> Answer {
    let body = parse_json("vm", &body)?;
    let mut store = app.lock();
    let response = store.clone_vm(Instant::now(), &uuid, &body, d.fail_task)?;
    let vm = response["task_uuid"]
        .as_str()
        .and_then(|task| store.task_vm(task));
    Ok(attribute(json_ok(StatusCode::ACCEPTED, response), vm))
}

/// Takes the bare task UUID only (a v4 `<prefix>:<uuid>` extId is a 404 here, as v3 knows no prefixes).
async fn get_task(State(app): State<App>, Path(uuid): Path<String>) -> Answer {
    let store = app.lock();
    let task = store
        .tasks
        .get(&uuid)
        .ok_or_else(|| ApiError::not_found("task", format!("task {uuid} was not found")))?;
    Ok(json_ok(StatusCode::OK, store.task_v3_json(task)))
}

fn list_table(State(app): State<App>, body: Bytes, table: TableSelector, render: Render) -> Answer {
    let store = app.lock();
    let answer = table(&store).list(&body, |e| render(&store, e))?;
    Ok(json_ok(StatusCode::OK, answer))
}

fn get_table(
    State(app): State<App>,
    Path(uuid): Path<String>,
    table: TableSelector,
    render: Render,
) -> Answer {
    let store = app.lock();
    let table = table(&store);
    let entity = table.get(&uuid).ok_or_else(|| {
        ApiError::not_found(table.kind, format!("{} {uuid} was not found", table.kind))
    })?;
    Ok(json_ok(StatusCode::OK, render(&store, entity)))
}

// ---- categories ----

fn key_not_found(key: &str) -> ApiError {
    ApiError::not_found("category", format!("category key {key} was not found"))
}

/// Lists (name, item) pairs with the query's filter, order and page; `render` turns an item into JSON.
fn list_by_name<'a, T>(
    query: &ListQuery,
    items: impl Iterator<Item = (&'a str, T)>,
    render: impl Fn(&str, T) -> Value,
) -> Value {
    let matching: Vec<(&str, T)> = items
        .filter(|(name, _)| {
            query
                .filter
                .as_ref()
                .is_none_or(|f| f.matches(|_| Some(*name)))
        })
        .collect();
    let (total, page) = query.page(matching, |(name, _)| name);
    let entities = page
        .into_iter()
        .map(|(name, item)| render(name, item))
        .collect();
    query.response(total, entities)
}

async fn list_category_keys(State(app): State<App>, body: Bytes) -> Answer {
    let query = ListQuery::parse(&body, "category", &["name"])?;
    let store = app.lock();
    let keys = store
        .categories
        .iter()
        .map(|(name, key)| (name.as_str(), key));
    let response = list_by_name(&query, keys, |name, key| {
        Store::category_key_json(name, key)
    });
    Ok(json_ok(StatusCode::OK, response))
}

async fn get_category_key(State(app): State<App>, Path(key): Path<String>) -> Answer {
    let store = app.lock();
    let found = store
        .categories
        .get(&key)
        .ok_or_else(|| key_not_found(&key))?;
    Ok(json_ok(
        StatusCode::OK,
        Store::category_key_json(&key, found),
    ))
}

async fn put_category_key(State(app): State<App>, Path(key): Path<String>, body: Bytes) -> Answer {
    let body = parse_json("category", &body)?;
    if let Some(name) = body.get("name").and_then(Value::as_str)
        && name != key
    {
        return Err(ApiError::invalid_one(
            "category",
            "name",
            format!("'{name}' does not match the key in the path '{key}'"),
        ));
    }
    let mut store = app.lock();
    let entry = store.categories.entry(key.clone()).or_default();
    if let Some(description) = body.get("description").and_then(Value::as_str) {
        entry.description = description.to_owned();
    }
    let answer = Store::category_key_json(&key, entry);
    Ok(json_ok(StatusCode::OK, answer))
}

async fn delete_category_key(State(app): State<App>, Path(key): Path<String>) -> Answer {
    let mut store = app.lock();
    let found = store
        .categories
        .get(&key)
        .ok_or_else(|| key_not_found(&key))?;
    if !found.values.is_empty() {
        return Err(ApiError::invalid_one(
            "category",
            "name",
            format!("category key {key} still has values"),
        ));
    }
    store.categories.remove(&key);
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn list_category_values(
    State(app): State<App>,
    Path(key): Path<String>,
    body: Bytes,
) -> Answer {
    let query = ListQuery::parse(&body, "category", &["value", "name"])?;
    let store = app.lock();
    let found = store
        .categories
        .get(&key)
        .ok_or_else(|| key_not_found(&key))?;
    let values = found
        .values
        .iter()
        .map(|(value, description)| (value.as_str(), description));
    let response = list_by_name(&query, values, |value, description| {
        Store::category_value_json(&key, value, description)
    });
    Ok(json_ok(StatusCode::OK, response))
}

async fn get_category_value(
    State(app): State<App>,
    Path((key, value)): Path<(String, String)>,
) -> Answer {
    let store = app.lock();
    let description = store
        .categories
        .get(&key)
        .and_then(|k| k.values.get(&value))
        .ok_or_else(|| {
            ApiError::not_found("category", format!("category {key}:{value} was not found"))
        })?;
    Ok(json_ok(
        StatusCode::OK,
        Store::category_value_json(&key, &value, description),
    ))
}

async fn put_category_value(
    State(app): State<App>,
    Path((key, value)): Path<(String, String)>,
    body: Bytes,
) -> Answer {
    let body = parse_json("category", &body)?;
    if let Some(given) = body.get("value").and_then(Value::as_str)
        && given != value
    {
        return Err(ApiError::invalid_one(
            "category",
            "value",
            format!("'{given}' does not match the value in the path '{value}'"),
        ));
    }
    let mut store = app.lock();
    let found = store
        .categories
        .get_mut(&key)
        .ok_or_else(|| key_not_found(&key))?;
    let description = body
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    found.values.insert(value.clone(), description.clone());
    Ok(json_ok(
        StatusCode::OK,
        Store::category_value_json(&key, &value, &description),
    ))
}

async fn delete_category_value(
    State(app): State<App>,
    Path((key, value)): Path<(String, String)>,
) -> Answer {
    let mut store = app.lock();
    if !store.category_exists(&key, &value) {
        return Err(ApiError::not_found(
            "category",
            format!("category {key}:{value} was not found"),
        ));
    }
    let in_use = store
        .vms
        .values()
        .any(|vm| vm.meta.categories.get(&key).and_then(Value::as_str) == Some(value.as_str()));
    if in_use {
        return Err(ApiError::invalid_one(
            "category",
            "value",
            format!("category {key}:{value} is assigned to VMs"),
        ));
    }
    if let Some(found) = store.categories.get_mut(&key) {
        found.values.remove(&value);
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

// ---- idempotence identifiers ----

async fn reserve_uuids(State(app): State<App>, body: Bytes) -> Answer {
    let body = parse_json("idempotence_identifier", &body)?;
    let response = app.lock().reserve_uuids(&body, Instant::now())?;
    Ok(json_ok(StatusCode::OK, response))
}

fn reservation_not_found(client_identifier: &str) -> ApiError {
    ApiError::not_found(
        "idempotence_identifier",
        format!("client identifier {client_identifier} was not found"),
    )
}

async fn get_reservation(State(app): State<App>, Path(client_identifier): Path<String>) -> Answer {
    let found = app
        .lock()
        .get_reservation(&client_identifier)
        .ok_or_else(|| reservation_not_found(&client_identifier))?;
    Ok(json_ok(StatusCode::OK, found))
}

async fn delete_reservation(
    State(app): State<App>,
    Path(client_identifier): Path<String>,
) -> Answer {
    if !app.lock().delete_reservation(&client_identifier) {
        return Err(reservation_not_found(&client_identifier));
    }
    // 200 without a body, as recorded (delete_idempotence_identifiers.json).
    Ok(StatusCode::OK.into_response())
}
