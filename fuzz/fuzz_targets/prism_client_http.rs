#![no_main]
//! Arbitrary Prism responses through the real client: a server on 127.0.0.1 answers every request
//! with the status, `Retry-After` and body the input gives, and one client call (each endpoint
//! that decodes a body: VM, list, v3 and v4 tasks with their subtask reads, templates, deploy,
//! idempotence ids, categories, users/me, delete) reads it. This covers the private paths no
//! other target reaches: status → error classification, error-body parsing (`message_list`, v4
//! `data.error`), decode errors, `Retry-After`, task progress. Nothing may panic, and:
//! - a non-2xx response is an error carrying that status (or, for a task read, a 404 is a
//!   terminal "not found");
//! - a 2xx response that fails is a decode error;
//! - an error's message stays bounded, whatever the body's size.
//!
//! Input layout: byte 0 selects the call, bytes 1..2 the status, byte 3 the `Retry-After`, the
//! rest is the body. Calls that page until the server says stop (`list_all`, name lookups) are
//! left out: with one fixed answer they would page forever.

use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, Response, StatusCode, header};
use libfuzzer_sys::fuzz_target;
use prism_client::v3::{
    self, IdempotenceIdentifiersRequest, ListRequest, VmCloneInput, VmIntentInput,
};
use prism_client::v4::TemplateDeployRequest;
use prism_client::{
    Client, ClientConfig, Credentials, Error, ProxyConfig, RateLimit, RetryPolicy, TaskProgress,
};

/// Longest error message accepted: five Prism messages of at most 300 characters, a 160-character
/// excerpt, the endpoint and some words.
const MAX_ERROR_CHARS: usize = 2_500;

const RETRY_AFTER: [Option<&str>; 8] = [
    None,
    Some("7"),
    Some("0"),
    Some("18446744073709551615"),
    Some("Wed, 21 Oct 2015 07:28:00 GMT"),
    Some("Fri, 31 Dec 9999 23:59:59 GMT"),
    Some("-1"),
    Some("soon"),
];

struct Answer {
    status: u16,
    retry_after: Option<&'static str>,
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
                if let Some(retry_after) = answer.retry_after {
                    response
                        .headers_mut()
                        .insert(header::RETRY_AFTER, HeaderValue::from_static(retry_after));
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

fn run(data: &[u8]) {
    let [selector, status_high, status_low, retry_after, body @ ..] = data else {
        return;
    };
    let status = 200 + u16::from_be_bytes([*status_high, *status_low]) % 400;
    *ANSWER.lock().expect("answer lock") = Some(Answer {
        status,
        retry_after: RETRY_AFTER[usize::from(*retry_after) % RETRY_AFTER.len()],
        body: body.to_vec(),
    });
    let harness = harness();
    let outcome = harness.runtime.block_on(call(&harness.client, *selector));
    let success = (200..300).contains(&status);
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
                let _ = error.retry_after();
            }
        }
    }
}

fuzz_target!(|data: &[u8]| run(data));
