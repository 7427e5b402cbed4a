#![no_main]
//! Arbitrary Prism responses through the real client: a server on 127.0.0.1 answers every request
//! with the status, headers and body the input gives, and one client call (each endpoint that
//! decodes a body: VM, list, v3 and v4 tasks with their subtask reads, templates, deploy,
//! idempotence ids, categories, users/me, delete) reads it. This covers the private paths no
//! other target reaches: status → error classification, error-body parsing (`message_list`, v4
//! `data.error`), decode errors, header parsing (`Retry-After` as any bytes: numbers past
//! `u64::MAX`, dates, repeated headers), the body limit, task progress. Nothing may panic, and:
//! - a body longer than the client's limit is refused with `BodyTooLarge` and the status;
//! - a non-2xx response is an error carrying that status (or, for a task read, a 404 is a
//!   terminal "not found");
//! - a 2xx response that fails is a decode error;
//! - a `Retry-After` is read as at most `MAX_RETRY_AFTER`;
//! - an error's message stays bounded, whatever the body's size.
//!
//! Input layout: byte 0 selects the call, bytes 1..2 the status, byte 3 the number of headers
//! (modulo 9); each header is a byte selecting its name, a length byte and that many bytes of
//! value (a value HTTP cannot carry is dropped); the rest is the body. Headers that frame the
//! body (`Content-Length`, `Transfer-Encoding`) are left to the server. Calls that page until the
//! server says stop (`list_all`, name lookups) are left out: with one fixed answer they would
//! page forever.

use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, Response, StatusCode, header};
use libfuzzer_sys::fuzz_target;
use prism_client::v3::{
    self, IdempotenceIdentifiersRequest, ListRequest, VmCloneInput, VmIntentInput,
};
use prism_client::v4::TemplateDeployRequest;
use prism_client::{
    Client, ClientConfig, Credentials, Error, MAX_RETRY_AFTER, ProxyConfig, RateLimit, RetryPolicy,
    TaskProgress,
};

/// Longest error message accepted: five Prism messages of at most 300 characters, a 160-character
/// excerpt, the endpoint and some words.
const MAX_ERROR_CHARS: usize = 2_500;

/// The client's body limit here: small, so that the fuzzer reaches it.
const MAX_BODY_BYTES: u64 = 4_096;

/// Header names an answer may carry; `Retry-After` twice as often as the others.
const HEADER_NAMES: [HeaderName; 8] = [
    header::RETRY_AFTER,
    header::RETRY_AFTER,
    header::CONTENT_TYPE,
    header::SET_COOKIE,
    header::LOCATION,
    header::CACHE_CONTROL,
    header::WWW_AUTHENTICATE,
    HeaderName::from_static("ntnx-request-id"),
];

struct Answer {
    status: u16,
    headers: Vec<(HeaderName, HeaderValue)>,
    body: Vec<u8>,
}

static ANSWER: Mutex<Option<Answer>> = Mutex::new(None);

struct Harness {
    runtime: tokio::runtime::Runtime,
    client: Client,
}

fn harness() -> &'static Harness {
    static HARNESS: OnceLock<Harness> = OnceLock::new();
    HARNESS.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let address = runtime.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            let address = listener.local_addr().expect("address");
            let app = axum::Router::new().fallback(|| async {
                let answer = ANSWER.lock().expect("answer lock");
                let answer = answer.as_ref().expect("an answer is set");
                let mut response = Response::new(Body::from(answer.body.clone()));
                *response.status_mut() = StatusCode::from_u16(answer.status).expect("status");
                for (name, value) in &answer.headers {
                    response.headers_mut().append(name.clone(), value.clone());
                }
                response
            });
            tokio::spawn(async move { axum::serve(listener, app).await });
            address
        });
        let mut config = ClientConfig::new(
            &format!("http://{address}"),
            Credentials::basic("fuzz", "fuzz-password"),
        )
        .expect("config");
        config.proxy = ProxyConfig::Direct;
        config.retry = RetryPolicy::none();
        config.rate_limit = RateLimit {
            requests_per_second: 1e9,
            burst: 1_000_000,
        };
        config.request_timeout = Duration::from_secs(20);
        config.list_page_size = 2;
        config.max_body_bytes = MAX_BODY_BYTES;
        config.allow_plain_http = true;
        let client = Client::new(config).expect("client");
        Harness { runtime, client }
    })
}

/// What a call returned, reduced to what the checks need.
enum Outcome {
    Ok,
    Task(TaskProgress),
    Err(Error),
}

fn outcome<T>(result: Result<T, Error>) -> Outcome {
    match result {
        Ok(_) => Outcome::Ok,
        Err(error) => Outcome::Err(error),
    }
}

async fn call(client: &Client, selector: u8) -> Outcome {
    const UUID: &str = "6f1c2a1e-3d4b-4c5d-8e9f-0a1b2c3d4e5f";
    match selector % 18 {
        0 => outcome(client.get_vm(UUID).await),
        1 => outcome(client.list::<v3::Vm>(&ListRequest::page("vm", 0, 2)).await),
        2 => outcome(
            client
                .list::<v3::Host>(&ListRequest::page("host", 0, 2))
                .await,
        ),
        3 => match client.get_task(UUID).await {
            Ok(progress) => Outcome::Task(progress),
            Err(error) => Outcome::Err(error),
        },
        4 => match client.get_v4_task(UUID).await {
            Ok(progress) => Outcome::Task(progress),
            Err(error) => Outcome::Err(error),
        },
        5 => outcome(client.get_template(UUID).await),
        6 => outcome(client.list_templates(0, 2).await),
        7 => outcome(
            client
                .deploy_template(UUID, &TemplateDeployRequest::default(), Some(UUID))
                .await,
        ),
        8 => outcome(
            client
                .reserve_uuids(&IdempotenceIdentifiersRequest {
                    client_identifier: "fuzz".to_owned(),
                    count: 1,
                    ..IdempotenceIdentifiersRequest::default()
                })
                .await,
        ),
        9 => outcome(client.get_reserved_uuids("fuzz").await),
        10 => outcome(client.whoami().await),
        11 => outcome(client.create_vm(&VmIntentInput::default()).await),
        12 => outcome(client.update_vm(UUID, &VmIntentInput::default()).await),
        13 => outcome(client.delete_vm(UUID).await),
        14 => outcome(client.clone_vm(UUID, &VmCloneInput::default()).await),
        15 => outcome(client.get_category_value("key", "value").await),
        16 => outcome(client.get::<v3::Subnet>(UUID).await),
        _ => outcome(client.release_reserved_uuids("fuzz").await),
    }
}

/// The headers at the start of `data` (see the input layout), and the rest.
fn headers(data: &[u8]) -> (Vec<(HeaderName, HeaderValue)>, &[u8]) {
    let Some((count, mut rest)) = data.split_first() else {
        return (Vec::new(), data);
    };
    let mut headers = Vec::new();
    for _ in 0..count % 9 {
        let [name, length, after @ ..] = rest else {
            break;
        };
        let (value, after) = after.split_at(usize::from(*length).min(after.len()));
        if let Ok(value) = HeaderValue::from_bytes(value) {
            headers.push((
                HEADER_NAMES[usize::from(*name) % HEADER_NAMES.len()].clone(),
                value,
            ));
        }
        rest = after;
    }
    (headers, rest)
}

fn run(data: &[u8]) {
    let [selector, status_high, status_low, rest @ ..] = data else {
        return;
    };
    let status = 200 + u16::from_be_bytes([*status_high, *status_low]) % 400;
    let (headers, body) = headers(rest);
    *ANSWER.lock().expect("answer lock") = Some(Answer {
        status,
        headers,
        body: body.to_vec(),
    });
    let harness = harness();
    let outcome = harness.runtime.block_on(call(&harness.client, *selector));
    let success = (200..300).contains(&status);
    // HTTP sends no body with a 204 or a 304, whatever the input holds.
    let sent = if matches!(status, 204 | 304) {
        0
    } else {
        body.len()
    };
    if sent as u64 > MAX_BODY_BYTES {
        let Outcome::Err(error) = &outcome else {
            panic!("a {sent}-byte body above the limit was read");
        };
        assert!(
            matches!(error, Error::BodyTooLarge { status: refused, limit: MAX_BODY_BYTES, .. } if *refused == status),
            "a {sent}-byte body gave {error:?}"
        );
        return;
    }
    match outcome {
        Outcome::Ok => assert!(success, "status {status} was taken for success"),
        Outcome::Task(progress) => {
            if !success {
                assert_eq!(status, 404, "status {status} was read as a task");
                assert!(progress.is_terminal(), "a task that is not found is over");
            }
            if let TaskProgress::Failed(failure) = &progress {
                let _ = failure.to_string();
            }
        }
        Outcome::Err(error) => {
            let message = error.to_string();
            assert!(
                message.chars().count() <= MAX_ERROR_CHARS,
                "a {}-character error message from a {}-byte body",
                message.chars().count(),
                body.len()
            );
            if success {
                assert!(
                    matches!(error, Error::Decode { .. }),
                    "a {status} answer failed with {error:?}"
                );
            } else {
                assert_eq!(error.status(), Some(status), "{error:?}");
                assert_eq!(error.is_retryable(), status == 429 || status >= 500);
                assert!(
                    error
                        .retry_after()
                        .is_none_or(|wait| wait <= MAX_RETRY_AFTER),
                    "{error:?}"
                );
            }
        }
    }
}

fuzz_target!(|data: &[u8]| run(data));
