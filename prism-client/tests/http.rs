//! The client against local HTTP(S) servers: paging, retries, errors, sessions, TLS, v4 deploy and tasks.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post, put};
use prism_client::v3::{ListRequest, Vm, VmIntentInput};
use prism_client::v4::{TemplateDeployRequest, VmConfigOverride};
use prism_client::{
    AuthMode, CaBundle, Client, Credentials, Error, RequestEvent, TaskEnd, TaskProgress,
    TransportKind, endpoints,
};
use serde_json::{Value, json};

use common::{Sessions, base64_encode, http_config, serve, vm_json};

fn client(addr: std::net::SocketAddr) -> Client {
    Client::new(http_config(addr)).unwrap()
}

/// A server holding `vms`, answering `POST /vms/list` by offset and length (capped at `max_length`).
fn vm_list_router(vms: Vec<Value>, max_length: usize) -> Router {
    let vms = Arc::new(vms);
    Router::new().route(
        "/api/nutanix/v3/vms/list",
        post(move |Json(body): Json<Value>| {
            let vms = vms.clone();
            async move {
                let offset = body["offset"].as_u64().unwrap_or(0) as usize;
                let length = (body["length"].as_u64().unwrap_or(20) as usize).min(max_length);
                let page: Vec<Value> = vms.iter().skip(offset).take(length).cloned().collect();
                Json(json!({
                    "api_version": "3.1",
                    "metadata": {"kind": "vm", "total_matches": vms.len(), "offset": offset, "length": page.len()},
                    "entities": page
                }))
            }
        }),
    )
}

#[tokio::test]
async fn list_all_pages_until_total_matches() {
    let vms: Vec<Value> = (0..250)
        .map(|i| vm_json(&format!("uuid-{i}"), &format!("vm-{i}")))
        .collect();
    let (addr, seen) = serve(vm_list_router(vms, 1000)).await;
    let all = client(addr).list_all::<Vm>().await.unwrap();
    assert_eq!(all.len(), 250);
    assert_eq!(all[249].uuid(), Some("uuid-249"));
    let offsets: Vec<(Value, Value, Value)> = seen
        .to("POST", "/api/nutanix/v3/vms/list")
        .iter()
        .map(|request| {
            let body = request.json();
            (
                body["kind"].clone(),
                body["offset"].clone(),
                body["length"].clone(),
            )
        })
        .collect();
    assert_eq!(
        offsets,
        [
            (json!("vm"), json!(0), json!(100)),
            (json!("vm"), json!(100), json!(100)),
            (json!("vm"), json!(200), json!(100))
        ]
    );
}

#[tokio::test]
async fn list_all_follows_a_server_that_returns_shorter_pages() {
    let vms: Vec<Value> = (0..120)
        .map(|i| vm_json(&format!("uuid-{i}"), &format!("vm-{i}")))
        .collect();
    let (addr, seen) = serve(vm_list_router(vms, 50)).await;
    let all = client(addr).list_all::<Vm>().await.unwrap();
    assert_eq!(all.len(), 120);
    assert_eq!(seen.to("POST", "/api/nutanix/v3/vms/list").len(), 3);
}

#[tokio::test]
async fn a_server_that_never_stops_announcing_more_cannot_keep_the_client_paging_for_ever() {
    // Always a full page of new entities, always "more to come": without a bound `list_all` would page for ever.
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let router = Router::new().route(
        "/api/nutanix/v3/vms/list",
        post(move |Json(body): Json<Value>| {
            counter.fetch_add(1, Ordering::SeqCst);
            async move {
                let offset = body["offset"].as_u64().unwrap_or(0) as usize;
                let length = body["length"].as_u64().unwrap_or(20) as usize;
                let page: Vec<Value> = (offset..offset + length)
                    .map(|i| vm_json(&format!("uuid-{i}"), &format!("vm-{i}")))
                    .collect();
                Json(json!({"metadata": {"kind": "vm", "total_matches": u64::MAX}, "entities": page}))
            }
        }),
    );
    let (addr, _) = serve(router).await;
    let mut config = http_config(addr);
    config.list_page_size = 2;
    let error = Client::new(config)
        .unwrap()
        .list_all::<Vm>()
        .await
        .unwrap_err();
    let Error::ListDidNotEnd {
        pages, collected, ..
    } = &error
    else {
        panic!("{error:?}")
    };
    assert_eq!(*pages, prism_client::MAX_LIST_PAGES);
    assert_eq!(*collected, 2 * prism_client::MAX_LIST_PAGES as usize);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        prism_client::MAX_LIST_PAGES as usize
    );
    assert!(error.to_string().contains("POST /vms/list"), "{error}");
}

#[tokio::test]
async fn find_by_exact_name_ignores_partial_matches_and_reports_duplicates() {
    let vms = vec![
        vm_json("u-1", "worker-1"),
        vm_json("u-10", "worker-10"),
        vm_json("u-100", "worker-100"),
        vm_json("twin-a", "twin"),
        vm_json("twin-b", "twin"),
    ];
    let (addr, _) = serve(vm_list_router(vms, 1000)).await;
    let client = client(addr);
    let found = client
        .find_by_exact_name::<Vm>("worker-1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(found.uuid(), Some("u-1"));
    assert!(
        client
            .find_by_exact_name::<Vm>("worker")
            .await
            .unwrap()
            .is_none()
    );
    let error = client.find_by_exact_name::<Vm>("twin").await.unwrap_err();
    let Error::DuplicateName { kind, name, uuids } = &error else {
        panic!("{error:?}")
    };
    assert_eq!(
        (*kind, name.as_str(), uuids.clone()),
        ("vm", "twin", vec!["twin-a".to_owned(), "twin-b".to_owned()])
    );
    assert_eq!(
        error.to_string(),
        "2 vm entities are named \"twin\": twin-a, twin-b"
    );
}

#[tokio::test]
async fn a_429_is_retried_after_the_delay_it_asks_for() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let router = Router::new().route(
        "/api/nutanix/v3/vms/{uuid}",
        get(move |Path(uuid): Path<String>| {
            let counter = counter.clone();
            async move {
                if counter.fetch_add(1, Ordering::SeqCst) == 0 {
                    (
                        StatusCode::TOO_MANY_REQUESTS,
                        [("retry-after", "1")],
                        "slow down",
                    )
                        .into_response()
                } else {
                    Json(vm_json(&uuid, "vm")).into_response()
                }
            }
        }),
    );
    let (addr, seen) = serve(router).await;
    let vm = client(addr).get_vm("u1").await.unwrap();
    assert_eq!(vm.uuid(), Some("u1"));
    let requests = seen.to("GET", "/api/nutanix/v3/vms/u1");
    assert_eq!(requests.len(), 2);
    // The backoff alone would wait at most 50 ms; Retry-After asked for a second.
    let gap = requests[1].at - requests[0].at;
    assert!(gap >= Duration::from_secs(1), "retried after {gap:?}");
}

#[tokio::test]
async fn a_429_asking_for_more_than_the_retry_budget_is_returned_to_the_caller() {
    let router = Router::new().route(
        "/api/nutanix/v3/vms/list",
        post(|| async {
            (StatusCode::TOO_MANY_REQUESTS, [("retry-after", "3600")], "").into_response()
        }),
    );
    let (addr, seen) = serve(router).await;
    let error = client(addr)
        .list::<Vm>(&ListRequest::default())
        .await
        .unwrap_err();
    // Clamped where it is parsed: still longer than the retry budget.
    assert_eq!(error.retry_after(), Some(prism_client::MAX_RETRY_AFTER));
    assert!(error.is_retryable());
    assert_eq!(seen.all().len(), 1);
}

/// A 429 answered after a second and more, asking to wait 2^64 - 1 seconds: once the elapsed time has a
/// whole second, elapsed + Retry-After overflowed `Duration` and the call panicked (under the controller, a
/// crash loop). It must end in the rate-limit error, at once.
#[tokio::test]
async fn a_slow_429_asking_to_wait_for_ever_ends_in_a_clear_error() {
    let router = Router::new().route(
        "/api/nutanix/v3/vms/{uuid}",
        get(|| async {
            tokio::time::sleep(Duration::from_millis(1_100)).await;
            (
                StatusCode::TOO_MANY_REQUESTS,
                [("retry-after", "18446744073709551615")],
                "",
            )
                .into_response()
        }),
    );
    let (addr, seen) = serve(router).await;
    let started = std::time::Instant::now();
    let call = tokio::spawn(async move { client(addr).get_vm("u1").await });
    let error = call
        .await
        .expect("the call returns instead of panicking")
        .unwrap_err();
    assert!(matches!(error, Error::RateLimited { .. }), "{error:?}");
    assert_eq!(error.retry_after(), Some(prism_client::MAX_RETRY_AFTER));
    assert_eq!(
        error.to_string(),
        "GET /vms/{uuid}: rate limited (429), retry after 300s"
    );
    assert_eq!(seen.all().len(), 1, "longer than the retry budget");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

/// A server answering `/vms/{uuid}` with `size` bytes of VM JSON, streamed in 64 KiB chunks without a
/// `Content-Length` when `chunked`.
fn large_vm_router(size: usize, chunked: bool) -> Router {
    Router::new().route(
        "/api/nutanix/v3/vms/{uuid}",
        get(move |Path(uuid): Path<String>| async move {
            let mut vm = vm_json(&uuid, "vm");
            let padding = size.saturating_sub(vm.to_string().len() + 20);
            vm["spec"]["description"] = json!("p".repeat(padding));
            let body = vm.to_string().into_bytes();
            if chunked {
                let chunks: Vec<Result<Vec<u8>, std::io::Error>> = body
                    .chunks(64 << 10)
                    .map(|chunk| Ok(chunk.to_vec()))
                    .collect();
                axum::body::Body::from_stream(futures::stream::iter(chunks)).into_response()
            } else {
                body.into_response()
            }
        }),
    )
}

#[tokio::test]
async fn a_body_above_the_limit_is_refused_with_its_endpoint_and_the_limit() {
    for chunked in [false, true] {
        let (addr, seen) = serve(large_vm_router(3 << 20, chunked)).await;
        let mut config = http_config(addr);
        config.max_body_bytes = 1 << 20;
        let error = Client::new(config).unwrap().get_vm("u1").await.unwrap_err();
        let Error::BodyTooLarge {
            endpoint,
            status,
            limit,
        } = &error
        else {
            panic!("chunked {chunked}: {error:?}")
        };
        assert_eq!(
            (*endpoint, *status, *limit),
            ("GET /vms/{uuid}", 200, 1 << 20)
        );
        assert_eq!(
            error.to_string(),
            "GET /vms/{uuid}: the answer (200) has a body longer than the limit of 1048576 bytes; it was not read"
        );
        assert_eq!(
            seen.all().len(),
            1,
            "not retried: the same answer would come back"
        );

        // The same answer under the limit is read whole.
        let mut config = http_config(addr);
        config.max_body_bytes = 4 << 20;
        let vm = Client::new(config).unwrap().get_vm("u2").await.unwrap();
        assert_eq!(vm.uuid(), Some("u2"), "chunked {chunked}");
    }
    assert_eq!(
        prism_client::ClientConfig::new("pc", Credentials::basic("u", "p"))
            .unwrap()
            .max_body_bytes,
        prism_client::DEFAULT_MAX_BODY_BYTES
    );
}

#[tokio::test]
async fn a_503_is_retried_after_the_delay_it_asks_for_and_a_long_one_is_returned() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let router = Router::new().route(
        "/api/nutanix/v3/vms/{uuid}",
        get(move |Path(uuid): Path<String>| {
            let counter = counter.clone();
            async move {
                if uuid == "busy" {
                    return (
                        StatusCode::SERVICE_UNAVAILABLE,
                        [("retry-after", "3600")],
                        "",
                    )
                        .into_response();
                }
                if counter.fetch_add(1, Ordering::SeqCst) == 0 {
                    (
                        StatusCode::SERVICE_UNAVAILABLE,
                        [("retry-after", "1")],
                        "<html>busy</html>",
                    )
                        .into_response()
                } else {
                    Json(vm_json(&uuid, "vm")).into_response()
                }
            }
        }),
    );
    let (addr, seen) = serve(router).await;
    let client = client(addr);
    client.get_vm("u1").await.unwrap();
    let requests = seen.to("GET", "/api/nutanix/v3/vms/u1");
    assert_eq!(requests.len(), 2);
    // The backoff alone would wait at most 50 ms; Retry-After asked for a second.
    let gap = requests[1].at - requests[0].at;
    assert!(gap >= Duration::from_secs(1), "retried after {gap:?}");

    let error = client.get_vm("busy").await.unwrap_err();
    assert_eq!(error.retry_after(), Some(prism_client::MAX_RETRY_AFTER));
    assert!(
        matches!(error, Error::Server { status: 503, .. }),
        "{error:?}"
    );
    assert_eq!(
        seen.to("GET", "/api/nutanix/v3/vms/busy").len(),
        1,
        "beyond the retry budget"
    );
}

#[tokio::test]
async fn repeated_429s_slow_the_client_down_and_successes_bring_it_back() {
    // Three 429s, then answers: the client's own rate halves at each 429 and comes back after successes.
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let router = Router::new().route(
        "/api/nutanix/v3/vms/{uuid}",
        get(move |Path(uuid): Path<String>| {
            let counter = counter.clone();
            async move {
                if counter.fetch_add(1, Ordering::SeqCst) < 3 {
                    (StatusCode::TOO_MANY_REQUESTS, [("retry-after", "0")], "").into_response()
                } else {
                    Json(vm_json(&uuid, "vm")).into_response()
                }
            }
        }),
    );
    let (addr, seen) = serve(router).await;
    let mut config = http_config(addr);
    config.retry.max_attempts = 4;
    config.rate_limit = prism_client::RateLimit {
        requests_per_second: 40.0,
        burst: 40,
    };
    let client = Client::new(config).unwrap();
    assert_eq!(client.rate_limit_per_second(), 40.0);
    client.get_vm("first").await.unwrap();
    assert_eq!(seen.all().len(), 4);
    // 40 → 20 → 10 → 5 after the three 429s, then one success gives back 40/16.
    assert_eq!(client.rate_limit_per_second(), 7.5);

    // Five requests at once: at 40 per second with a burst of 40 they would all go at once; slowed down, and
    // with the saved burst given up, they are spread over most of a second. Only a lower bound on the spread is
    // asserted: a slow machine can only spread them more.
    let calls = (0..5).map(|i| {
        let clone = client.clone();
        tokio::spawn(async move { clone.get_vm(&format!("after-{i}")).await.unwrap() })
    });
    for call in calls.collect::<Vec<_>>() {
        call.await.unwrap();
    }
    let after: Vec<_> = seen
        .all()
        .into_iter()
        .filter(|request| request.path.contains("after-"))
        .map(|request| request.at)
        .collect();
    assert_eq!(after.len(), 5);
    let spread = *after.iter().max().unwrap() - *after.iter().min().unwrap();
    assert!(
        spread >= Duration::from_millis(300),
        "five requests within {spread:?}"
    );

    for i in 0..20 {
        client.get_vm(&format!("later-{i}")).await.unwrap();
    }
    assert_eq!(
        client.rate_limit_per_second(),
        40.0,
        "back to the configured rate"
    );
}

#[tokio::test]
async fn create_is_never_retried_but_reads_are() {
    let router = Router::new()
        .route(
            "/api/nutanix/v3/vms",
            post(|| async { StatusCode::SERVICE_UNAVAILABLE }),
        )
        .route(
            "/api/nutanix/v3/vms/{uuid}",
            get(|| async { StatusCode::BAD_GATEWAY }),
        );
    let (addr, seen) = serve(router).await;
    let client = client(addr);
    let input: VmIntentInput =
        serde_json::from_str(include_str!("fixtures/v3/vm_create_request.json")).unwrap();
    let error = client.create_vm(&input).await.unwrap_err();
    assert!(
        matches!(
            error,
            Error::Server {
                status: 503,
                endpoint: endpoints::VMS_CREATE,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(error.is_retryable(), "the caller may decide to retry");
    assert_eq!(
        seen.to("POST", "/api/nutanix/v3/vms").len(),
        1,
        "POST /vms must be sent exactly once"
    );

    let error = client.get_vm("u").await.unwrap_err();
    assert!(matches!(error, Error::Server { status: 502, .. }));
    assert_eq!(
        seen.to("GET", "/api/nutanix/v3/vms/u").len(),
        3,
        "max_attempts reads"
    );
}

#[tokio::test]
async fn a_409_on_update_is_a_conflict_sent_once() {
    let router = Router::new().route(
        "/api/nutanix/v3/vms/{uuid}",
        put(|| async {
            (
                StatusCode::CONFLICT,
                Json(json!({"api_version": "3.1", "code": 409, "state": "ERROR", "message_list": [
                    {"reason": "CONCURRENT_REQUESTS_NOT_ALLOWED", "message": "Edit conflict: please retry change."}]})),
            )
        }),
    );
    let (addr, seen) = serve(router).await;
    let vm: Vm = serde_json::from_str(include_str!("fixtures/v3/vm_get.json")).unwrap();
    let uuid = vm.uuid().unwrap().to_owned();
    let error = client(addr)
        .update_vm(&uuid, &vm.into_update_input().unwrap())
        .await
        .unwrap_err();
    let Error::Conflict { endpoint, messages } = &error else {
        panic!("{error:?}")
    };
    assert_eq!(*endpoint, "PUT /vms/{uuid}");
    assert!(messages.has_reason("CONCURRENT_REQUESTS_NOT_ALLOWED"));
    let puts = seen.to("PUT", &format!("/api/nutanix/v3/vms/{uuid}"));
    assert_eq!(puts.len(), 1);
    let sent = puts[0].json();
    assert_eq!(sent["metadata"]["spec_version"], json!(3));
    assert!(sent.get("status").is_none() && sent["metadata"].get("spec_hash").is_none());
    assert_eq!(
        sent["spec"]["resources"]["power_state_mechanism"],
        json!({"mechanism": "HARD"})
    );
}

#[tokio::test]
async fn error_statuses_map_to_their_variants() {
    let router = Router::new()
        .route(
            "/api/nutanix/v3/vms/missing",
            get(|| async {
                (
                    StatusCode::NOT_FOUND,
                    include_str!("fixtures/v3/error_404.json").to_owned(),
                )
                    .into_response()
            }),
        )
        .route(
            "/api/nutanix/v3/vms/denied",
            get(|| async { (StatusCode::UNAUTHORIZED, "<html>nope</html>") }),
        )
        .route(
            "/api/nutanix/v3/vms/forbidden",
            get(|| async { StatusCode::FORBIDDEN }),
        )
        .route(
            "/api/nutanix/v3/vms/broken",
            get(|| async { StatusCode::INTERNAL_SERVER_ERROR }),
        )
        .route(
            "/api/nutanix/v3/vms/garbage",
            get(|| async { "<html>login page</html>" }),
        )
        .route(
            "/api/nutanix/v3/vms",
            post(|| async {
                (
                    StatusCode::UNPROCESSABLE_ENTITY,
                    include_str!("fixtures/v3/error_422.json").to_owned(),
                )
                    .into_response()
            }),
        );
    let (addr, seen) = serve(router).await;
    let client = client(addr);
    let error = client.get_vm("missing").await.unwrap_err();
    assert!(error.is_not_found(), "{error:?}");
    let error = client.get_vm("denied").await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "GET /vms/{uuid}: unauthorized (401): the credentials were refused"
    );
    assert!(matches!(
        client.get_vm("forbidden").await.unwrap_err(),
        Error::Forbidden { .. }
    ));
    let error = client.get_vm("broken").await.unwrap_err();
    assert!(matches!(error, Error::Server { status: 500, .. }));
    assert_eq!(
        seen.to("GET", "/api/nutanix/v3/vms/broken").len(),
        1,
        "a 500 is not retried by the client"
    );
    let error = client.get_vm("garbage").await.unwrap_err();
    let Error::Decode {
        endpoint,
        status,
        excerpt,
        ..
    } = &error
    else {
        panic!("{error:?}")
    };
    assert_eq!(
        (*endpoint, *status, excerpt.as_str()),
        ("GET /vms/{uuid}", 200, "<html>login page</html>")
    );
    let error = client
        .create_vm(&VmIntentInput::default())
        .await
        .unwrap_err();
    let Error::Invalid {
        status: 422,
        messages,
        ..
    } = &error
    else {
        panic!("{error:?}")
    };
    assert!(messages.has_reason("INVALID_REQUEST"));
    assert!(
        error
            .to_string()
            .contains("'api_version' is a required property")
    );
}

#[tokio::test]
async fn transport_failures_are_retried_for_reads_and_classified() {
    // A port that was just free: nothing listens there.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    let mut config = http_config(addr);
    config.observer = Some(Arc::new(move |event: &RequestEvent| {
        sink.lock().unwrap().push(event.clone())
    }));
    let error = Client::new(config).unwrap().get_vm("u").await.unwrap_err();
    assert!(
        matches!(
            error,
            Error::Transport {
                kind: TransportKind::Connect,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(error.is_retryable());
    let events = events.lock().unwrap();
    assert_eq!(events.len(), 3);
    assert!(
        events
            .iter()
            .all(|event| event.status.is_none() && event.endpoint == "GET /vms/{uuid}")
    );
    assert_eq!(
        events.iter().map(|event| event.attempt).collect::<Vec<_>>(),
        [1, 2, 3]
    );
}

#[tokio::test]
async fn session_logs_in_once_then_again_after_expiry() {
    let sessions = Sessions::default();
    let (addr, seen) = serve(sessions.router()).await;
    let mut config = http_config(addr);
    config.auth_mode = AuthMode::Session;
    let client = Client::new(config).unwrap();

    client.get_vm("a").await.unwrap();
    client.clone().get_vm("b").await.unwrap();
    assert_eq!(
        sessions.logins.load(Ordering::SeqCst),
        1,
        "clones share the session"
    );
    let reads = seen.to("GET", "/api/nutanix/v3/vms/b");
    assert!(
        reads[0].header("authorization").is_none(),
        "only the cookie is sent after login"
    );

    sessions.expire();
    let vm = client.get_vm("c").await.unwrap();
    assert_eq!(vm.uuid(), Some("c"));
    assert_eq!(sessions.logins.load(Ordering::SeqCst), 2);
    let reads = seen.to("GET", "/api/nutanix/v3/vms/c");
    assert_eq!(
        reads.len(),
        2,
        "refused once, resent once after the new login"
    );
    assert_eq!(
        reads[1].header("cookie"),
        Some("NTNX_IGW_SESSION=session-2-Zq9")
    );
}

#[tokio::test]
async fn session_with_wrong_password_is_unauthorized_without_looping() {
    let sessions = Sessions::default();
    let (addr, seen) = serve(sessions.router()).await;
    let mut config = http_config(addr);
    config.auth_mode = AuthMode::Session;
    config.credentials = Credentials::basic(common::USERNAME, "wrong");
    let error = Client::new(config).unwrap().get_vm("a").await.unwrap_err();
    assert!(
        matches!(
            error,
            Error::Unauthorized {
                endpoint: "GET /users/me"
            }
        ),
        "{error:?}"
    );
    assert_eq!(seen.all().len(), 1);
}

#[tokio::test]
async fn basic_and_api_key_headers() {
    let router = Router::new().route(
        "/api/nutanix/v3/users/me",
        get(|| async { Json(json!({})) }),
    );
    let (addr, seen) = serve(router).await;
    client(addr).whoami().await.unwrap();
    let mut config = http_config(addr);
    config.credentials = Credentials::basic("X-ntnx-api-key", "key-123");
    Client::new(config).unwrap().whoami().await.unwrap();
    let requests = seen.to("GET", "/api/nutanix/v3/users/me");
    let basic = format!(
        "Basic {}",
        base64_encode(&format!("{}:{}", common::USERNAME, common::PASSWORD))
    );
    assert_eq!(requests[0].header("authorization"), Some(basic.as_str()));
    assert_eq!(requests[0].header("accept"), Some("application/json"));
    assert_eq!(requests[1].header("x-ntnx-api-key"), Some("key-123"));
    assert!(requests[1].header("authorization").is_none());
}

#[tokio::test]
async fn https_with_a_custom_ca_is_accepted_and_an_unknown_ca_refused() {
    let pki = common::test_pki();
    let router = Router::new().route(
        "/api/nutanix/v3/users/me",
        get(|| async { Json(json!({"status": {"name": "admin"}})) }),
    );
    let (addr, _) = common::serve_tls(router, pki.server_config.clone()).await;
    let endpoint = format!("https://localhost:{}", addr.port());

    let mut trusted = common::config(&endpoint);
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, &pki.ca_pem).unwrap();
    trusted.ca_bundle = Some(CaBundle::File(ca_file));
    let me = Client::new(trusted).unwrap().whoami().await.unwrap();
    assert_eq!(me.name(), Some("admin"));

    let by_ip = format!("https://127.0.0.1:{}", addr.port());
    let mut trusted_pem = common::config(&by_ip);
    trusted_pem.ca_bundle = Some(CaBundle::Pem {
        origin: "configmap".to_owned(),
        pem: pki.ca_pem.clone().into_bytes(),
    });
    Client::new(trusted_pem).unwrap().whoami().await.unwrap();

    let error = Client::new(common::config(&endpoint))
        .unwrap()
        .whoami()
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            Error::Transport {
                kind: TransportKind::Tls,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(!error.is_retryable());
    assert!(error.to_string().contains("UnknownIssuer"), "{error}");

    let mut insecure = common::config(&endpoint);
    insecure.insecure = true;
    Client::new(insecure).unwrap().whoami().await.unwrap();
}

#[tokio::test]
async fn deploy_sends_the_request_id_and_templates_page() {
    let router = Router::new()
        .route(
            "/api/vmm/v4.0/content/templates",
            get(|axum::extract::RawQuery(query): axum::extract::RawQuery| async move {
                let query = query.unwrap_or_default();
                let page: usize = query
                    .split('&')
                    .find_map(|pair| pair.strip_prefix("$page="))
                    .and_then(|value| value.parse().ok())
                    .unwrap_or(0);
                let all: Vec<Value> = (0..150)
                    .map(|i| json!({"extId": format!("tpl-{i}"), "templateName": if i == 149 { "win".to_owned() } else { format!("t{i}") }}))
                    .collect();
                let data: Vec<Value> = all.into_iter().skip(page * 100).take(100).collect();
                Json(json!({"data": data, "metadata": {"totalAvailableResults": 150}}))
            }),
        )
        .route(
            "/api/vmm/v4.0/content/templates/{ext_id}/$actions/deploy",
            post(|| async { (StatusCode::ACCEPTED, Json(json!({"data": {"extId": "ZXJnb24=:task-1"}}))) }),
        )
        .route(
            "/api/prism/v4.0/config/tasks/{ext_id}",
            get(|Path(ext_id): Path<String>| async move {
                Json(json!({"data": {"extId": ext_id, "status": "SUCCEEDED", "entitiesAffected": [
                    {"extId": "tpl-149", "rel": "vmm:content:template"},
                    {"extId": "vm-9", "rel": "vmm:ahv:config:vm"},
                    {"extId": "vm-9", "rel": "vmm:ahv:config:vm"}]}}))
            }),
        );
    let (addr, seen) = serve(router).await;
    let client = client(addr);
    let template = client.find_template_by_name("win").await.unwrap().unwrap();
    assert_eq!(template.ext_id.as_deref(), Some("tpl-149"));
    let queries: Vec<Option<String>> = seen
        .to("GET", "/api/vmm/v4.0/content/templates")
        .into_iter()
        .map(|seen| seen.query)
        .collect();
    assert_eq!(
        queries,
        [
            Some("$page=0&$limit=100".to_owned()),
            Some("$page=1&$limit=100".to_owned())
        ]
    );

    let request = TemplateDeployRequest::single(
        "pe-1",
        VmConfigOverride {
            name: "vm1".to_owned(),
            num_sockets: 1,
            num_cores_per_socket: 1,
            num_threads_per_core: 1,
            memory_size_bytes: 4 << 30,
            ..VmConfigOverride::default()
        },
    );
    let given = client
        .deploy_template(
            "tpl-149",
            &request,
            Some("9b1c7a52-3e0e-4d7a-b1a2-5f0d7c1e2a3b"),
        )
        .await
        .unwrap();
    assert_eq!(given.task_ext_id, "ZXJnb24=:task-1");
    assert_eq!(given.request_id, "9b1c7a52-3e0e-4d7a-b1a2-5f0d7c1e2a3b");
    let generated = client
        .deploy_template("tpl-149", &request, None)
        .await
        .unwrap();
    let deploys = seen.to(
        "POST",
        "/api/vmm/v4.0/content/templates/tpl-149/$actions/deploy",
    );
    assert_eq!(deploys.len(), 2);
    assert_eq!(
        deploys[0].header("ntnx-request-id"),
        Some("9b1c7a52-3e0e-4d7a-b1a2-5f0d7c1e2a3b")
    );
    assert_eq!(
        deploys[1].header("ntnx-request-id"),
        Some(generated.request_id.as_str())
    );
    assert!(uuid_like(&generated.request_id), "{}", generated.request_id);
    assert_eq!(
        deploys[0].json()["overrideVmConfigMap"]["0"]["name"],
        json!("vm1")
    );

    let progress = client.get_v4_task(&given.task_ext_id).await.unwrap();
    let TaskProgress::Succeeded { entities, .. } = progress else {
        panic!("{progress:?}")
    };
    let vms: Vec<&str> = entities
        .iter()
        .filter(|entity| entity.kind == "vmm:ahv:config:vm")
        .map(|entity| entity.uuid.as_str())
        .collect();
    assert_eq!(vms, ["vm-9"]);
    assert_eq!(
        seen.to("GET", "/api/prism/v4.0/config/tasks/ZXJnb24=:task-1")
            .len(),
        1
    );
}

/// A v4 task body: `status`, entities as `(extId, rel)`, subtask extIds (shaped like the RETURN sample of
/// nutanix/nutanix.ansible `plugins/modules/ntnx_templates_deploy_v2.py`).
fn v4_task(ext_id: &str, status: &str, entities: &[(&str, &str)], subtasks: &[String]) -> Value {
    json!({"data": {"extId": ext_id, "status": status, "operation": "kVmTemplateDeploy",
        "entitiesAffected": entities.iter().map(|(id, rel)| json!({"extId": id, "rel": rel})).collect::<Vec<_>>(),
        "subTasks": subtasks.iter().map(|id| json!({"extId": id, "rel": "subtask",
            "href": format!("https://pc:9440/api/prism/v4.0/config/tasks/{id}")})).collect::<Vec<_>>()}})
}

#[tokio::test]
async fn a_succeeded_deploy_names_the_vms_of_its_subtasks_and_says_which_it_could_not_read() {
    // The parent names only the template; one subtask (and its own subtask) names the VM, one cannot be read.
    let router = Router::new().route(
        "/api/prism/v4.0/config/tasks/{ext_id}",
        get(|Path(ext_id): Path<String>| async move {
            match ext_id.as_str() {
                "deploy" => Json(v4_task(
                    "deploy",
                    "SUCCEEDED",
                    &[("tpl-1", "vmm:content:templates")],
                    &["create".to_owned(), "lost".to_owned(), "power".to_owned()],
                ))
                .into_response(),
                "create" => Json(v4_task(
                    "create",
                    "SUCCEEDED",
                    &[("vm-1", "vmm:ahv:config:vm")],
                    &["disk".to_owned()],
                ))
                .into_response(),
                "disk" => Json(v4_task(
                    "disk",
                    "SUCCEEDED",
                    &[("vm-1", "vmm:ahv:config:vm")],
                    &[],
                ))
                .into_response(),
                "power" => Json(v4_task(
                    "power",
                    "SUCCEEDED",
                    &[("vm-2", "vmm:ahv:config:vm")],
                    &[],
                ))
                .into_response(),
                _ => StatusCode::NOT_FOUND.into_response(),
            }
        }),
    );
    let (addr, seen) = serve(router).await;
    let client = client(addr);
    let TaskProgress::Succeeded {
        entities,
        unread_subtasks,
    } = client.get_v4_task("deploy").await.unwrap()
    else {
        panic!()
    };
    let named: Vec<(&str, &str)> = entities
        .iter()
        .map(|e| (e.kind.as_str(), e.uuid.as_str()))
        .collect();
    assert_eq!(
        named,
        [
            ("vmm:content:templates", "tpl-1"),
            ("vmm:ahv:config:vm", "vm-1"),
            ("vmm:ahv:config:vm", "vm-2")
        ]
    );
    assert_eq!(unread_subtasks, ["lost"]);
    assert_eq!(
        seen.all().len(),
        5,
        "the parent and its four subtasks, once each"
    );
}

#[tokio::test]
async fn subtask_reads_for_entities_are_bounded_and_the_rest_is_reported_unread() {
    let router = Router::new().route(
        "/api/prism/v4.0/config/tasks/{ext_id}",
        get(|Path(ext_id): Path<String>| async move {
            if ext_id == "deploy" {
                let subtasks: Vec<String> = (0..20).map(|i| format!("sub-{i}")).collect();
                Json(v4_task("deploy", "SUCCEEDED", &[], &subtasks))
            } else {
                Json(v4_task(
                    &ext_id,
                    "SUCCEEDED",
                    &[(&ext_id.replace("sub", "vm"), "vmm:ahv:config:vm")],
                    &[],
                ))
            }
        }),
    );
    let (addr, seen) = serve(router).await;
    let TaskProgress::Succeeded {
        entities,
        unread_subtasks,
    } = client(addr).get_v4_task("deploy").await.unwrap()
    else {
        panic!()
    };
    assert_eq!(entities.len(), prism_client::MAX_SUBTASK_READS);
    assert_eq!(unread_subtasks, ["sub-16", "sub-17", "sub-18", "sub-19"]);
    assert_eq!(seen.all().len(), 1 + prism_client::MAX_SUBTASK_READS);
}

#[tokio::test]
async fn a_prism_central_without_templates_lists_none() {
    // An empty v4 list may omit `data` (nutanix.ansible ntnx_templates_info_v2); `null` is read the same way.
    let router = Router::new().route(
        "/api/vmm/v4.0/content/templates",
        get(|axum::extract::RawQuery(query): axum::extract::RawQuery| async move {
            if query.unwrap_or_default().contains("$limit=7") {
                Json(json!({"data": null, "metadata": {"totalAvailableResults": 0}}))
            } else {
                Json(json!({"metadata": {"totalAvailableResults": 0, "flags": []},
                    "$reserved": {"$fv": "v4.r0"}, "$objectType": "vmm.v4.content.ListTemplatesApiResponse"}))
            }
        }),
    );
    let (addr, seen) = serve(router).await;
    let client = client(addr);
    assert_eq!(client.list_all_templates().await.unwrap(), []);
    assert!(client.find_template_by_name("win").await.unwrap().is_none());
    assert!(client.list_templates(0, 7).await.unwrap().data.is_empty());
    assert_eq!(seen.to("GET", "/api/vmm/v4.0/content/templates").len(), 3);
}

fn uuid_like(text: &str) -> bool {
    text.len() == 36 && text.chars().filter(|c| *c == '-').count() == 4
}

#[tokio::test]
async fn a_deploy_failing_with_503_is_not_resent() {
    let router = Router::new().route(
        "/api/vmm/v4.0/content/templates/{ext_id}/$actions/deploy",
        post(|| async { StatusCode::SERVICE_UNAVAILABLE }),
    );
    let (addr, seen) = serve(router).await;
    let error = client(addr)
        .deploy_template("t", &TemplateDeployRequest::default(), None)
        .await
        .unwrap_err();
    assert!(matches!(
        error,
        Error::Server {
            status: 503,
            endpoint: endpoints::TEMPLATES_DEPLOY,
            ..
        }
    ));
    assert_eq!(seen.all().len(), 1);
}

#[tokio::test]
async fn failed_task_names_its_failed_subtasks_and_missing_tasks_are_terminal() {
    let router = Router::new().route(
        "/api/nutanix/v3/tasks/{uuid}",
        get(|Path(uuid): Path<String>| async move {
            match uuid.as_str() {
                "parent" => Json(json!({"uuid": "parent", "status": "FAILED", "error_detail": "Internal error",
                    "error_code": "500", "subtask_reference_list": [
                        {"kind": "task", "uuid": "ok-child"}, {"kind": "task", "uuid": "bad-child"}]}))
                .into_response(),
                "ok-child" => Json(json!({"uuid": "ok-child", "status": "SUCCEEDED"})).into_response(),
                "bad-child" => Json(json!({"uuid": "bad-child", "status": "FAILED",
                    "error_detail": "no free IP address in the DHCP pool", "error_code": "IP_POOL_EXHAUSTED",
                    "subtask_reference_list": [{"kind": "task", "uuid": "grandchild"}]}))
                .into_response(),
                "grandchild" => Json(json!({"uuid": "grandchild", "status": "ABORTED"})).into_response(),
                _ => (StatusCode::NOT_FOUND, include_str!("fixtures/v3/error_404.json").to_owned()).into_response(),
            }
        }),
    );
    let (addr, _) = serve(router).await;
    let client = client(addr);
    let progress = client.get_task("parent").await.unwrap();
    let TaskProgress::Failed(failure) = progress else {
        panic!("{progress:?}")
    };
    assert_eq!(
        failure.to_string(),
        "task parent FAILED: Internal error (code 500); subtask bad-child FAILED: no free IP address in the DHCP \
         pool (code IP_POOL_EXHAUSTED); subtask grandchild ABORTED"
    );
    let progress = client.get_task("gone").await.unwrap();
    assert!(
        matches!(progress, TaskProgress::Failed(ref failure) if failure.end == TaskEnd::NotFound)
    );
    let error = client
        .wait_task("parent", Duration::from_secs(30))
        .await
        .unwrap_err();
    assert!(matches!(error, Error::TaskFailed(_)));
}

#[tokio::test]
async fn wait_task_polls_until_success_and_gives_up_at_the_deadline() {
    let reads = Arc::new(AtomicUsize::new(0));
    let counter = reads.clone();
    let router = Router::new().route(
        "/api/nutanix/v3/tasks/{uuid}",
        get(move |Path(uuid): Path<String>| {
            let counter = counter.clone();
            async move {
                if uuid == "stuck" {
                    return Json(
                        json!({"uuid": uuid, "status": "RUNNING", "percentage_complete": 10}),
                    )
                    .into_response();
                }
                match counter.fetch_add(1, Ordering::SeqCst) {
                    0 => Json(json!({"uuid": uuid, "status": "QUEUED"})).into_response(),
                    1 => StatusCode::SERVICE_UNAVAILABLE.into_response(),
                    _ => Json(json!({"uuid": uuid, "status": "SUCCEEDED",
                        "entity_reference_list": [{"kind": "vm", "uuid": "new-vm"}]}))
                    .into_response(),
                }
            }
        }),
    );
    let (addr, _) = serve(router).await;
    let mut config = http_config(addr);
    config.retry = prism_client::RetryPolicy::none();
    let client = Client::new(config).unwrap();
    let entities = client
        .wait_task("t", Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(entities[0].uuid, "new-vm");
    let error = client
        .wait_task("stuck", Duration::from_secs(2))
        .await
        .unwrap_err();
    let Error::TaskTimeout { last_status, .. } = &error else {
        panic!("{error:?}")
    };
    assert_eq!(last_status, "RUNNING");
}

#[tokio::test]
async fn the_observer_sees_endpoint_templates_and_statuses() {
    let router = Router::new()
        .route(
            "/api/nutanix/v3/vms/{uuid}",
            get(|Path(uuid): Path<String>| async move { Json(vm_json(&uuid, "x")) }),
        )
        .route(
            "/api/nutanix/v3/subnets/{uuid}",
            get(|| async { StatusCode::NOT_FOUND }),
        )
        .route(
            "/api/nutanix/v3/idempotence_identifiers",
            post(|| async {
                Json(json!({"uuid_list": ["r-1"], "expiration_time": "2030-01-01T00:00:00Z"}))
            }),
        );
    let (addr, _) = serve(router).await;
    let events = Arc::new(Mutex::new(Vec::<RequestEvent>::new()));
    let sink = events.clone();
    let mut config = http_config(addr);
    config.observer = Some(Arc::new(move |event: &RequestEvent| {
        sink.lock().unwrap().push(event.clone())
    }));
    let client = Client::new(config).unwrap();
    client
        .get_vm("0b5e0c1e-aaaa-4bbb-8ccc-000000000001")
        .await
        .unwrap();
    client
        .get::<prism_client::v3::Subnet>("s")
        .await
        .unwrap_err();
    let reserved = client
        .reserve_uuids(&prism_client::v3::IdempotenceIdentifiersRequest {
            client_identifier: "machine-a".to_owned(),
            count: 1,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(reserved.uuid_list, ["r-1"]);
    let seen: Vec<(&str, Option<u16>)> = events
        .lock()
        .unwrap()
        .iter()
        .map(|event| (event.endpoint, event.status))
        .collect();
    assert_eq!(
        seen,
        [
            ("GET /vms/{uuid}", Some(200)),
            ("GET /subnets/{uuid}", Some(404)),
            ("POST /idempotence_identifiers", Some(200))
        ]
    );
    for endpoint in seen.iter().map(|(endpoint, _)| endpoint) {
        assert!(endpoints::ALL.contains(endpoint));
    }
}

#[test]
fn the_readme_documents_every_endpoint_template() {
    let readme = include_str!("../README.md");
    for endpoint in endpoints::ALL {
        assert!(
            readme.contains(&format!("`{endpoint}`")),
            "README.md lacks `{endpoint}`"
        );
    }
}

#[test]
fn construction_errors_are_clear() {
    let error = Client::new(prism_client::ClientConfig {
        ca_bundle: Some(CaBundle::File("/no/such/ca.pem".into())),
        ..common::config("pc.example.com")
    })
    .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("cannot read the CA bundle /no/such/ca.pem"),
        "{error}"
    );
    let error = Client::new(prism_client::ClientConfig {
        ca_bundle: Some(CaBundle::Pem {
            origin: "configmap prism-ca".to_owned(),
            pem: b"hello".to_vec(),
        }),
        ..common::config("pc.example.com")
    })
    .unwrap_err();
    assert_eq!(
        error.to_string(),
        "the CA bundle configmap prism-ca holds no CERTIFICATE block"
    );
    let error = prism_client::ClientConfig::new(
        "https://pc.example.com/prism",
        Credentials::basic("u", "p"),
    )
    .unwrap_err();
    assert!(
        error.to_string().contains("must not have a path"),
        "{error}"
    );
    let error = Client::new(prism_client::ClientConfig {
        auth_mode: AuthMode::Session,
        credentials: Credentials::api_key("k"),
        ..common::config("pc.example.com")
    })
    .unwrap_err();
    assert_eq!(
        error.to_string(),
        "session auth needs a user name and password, not an API key"
    );
    let error = Client::new(prism_client::ClientConfig {
        max_body_bytes: 0,
        ..common::config("pc.example.com")
    })
    .unwrap_err();
    assert_eq!(
        error.to_string(),
        "invalid max_body_bytes 0: it must be at least 1"
    );
}

#[tokio::test]
async fn plain_http_is_refused_unless_allowed() {
    let (addr, seen) = serve(Sessions::default().router()).await;
    let error = Client::new(common::config(&format!("http://{addr}"))).unwrap_err();
    assert!(
        matches!(&error, prism_client::ConfigError::PlainHttpRefused { endpoint } if *endpoint == format!("http://{addr}")),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        format!(
            "Prism Central endpoint http://{addr} is plain http://, which would send the credentials in clear \
             text: use https://, or allow plain HTTP explicitly (a lab or test server only)"
        )
    );
    let mut allowed = common::config(&format!("http://{addr}"));
    allowed.allow_plain_http = true;
    Client::new(allowed).unwrap().whoami().await.unwrap();
    assert_eq!(seen.all().len(), 1, "only the allowed client sent anything");
}

#[tokio::test]
async fn clones_share_one_rate_limit() {
    let router = Router::new().route(
        "/api/nutanix/v3/vms/{uuid}",
        get(|Path(uuid): Path<String>| async move { Json(vm_json(&uuid, "x")) }),
    );
    let (addr, _) = serve(router).await;
    let mut config = http_config(addr);
    config.rate_limit = prism_client::RateLimit {
        requests_per_second: 10.0,
        burst: 1,
    };
    let client = Client::new(config).unwrap();
    let start = std::time::Instant::now();
    let calls = (0..6).map(|i| {
        let clone = client.clone();
        tokio::spawn(async move { clone.get_vm(&format!("u{i}")).await.unwrap() })
    });
    for call in calls.collect::<Vec<_>>() {
        call.await.unwrap();
    }
    // One token at once, then one every 100 ms for all clones together: the sixth request cannot start before
    // 500 ms, however the tasks are scheduled (separate buckets would let all six go at once).
    let elapsed = start.elapsed();
    assert!(
        elapsed >= Duration::from_millis(500),
        "six requests in {elapsed:?}"
    );
}
