//! Passwords, API keys, session cookies and proxy credentials never appear in logs, `Debug` output or errors.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use prism_client::{AuthMode, Client, ClientConfig, Credentials, ProxyConfig, Sensitive};

use common::{PASSWORD, Sessions, USERNAME, base64_encode, http_config, serve};

const API_KEY: &str = "key-Secr3t-0a1b2c";
const PROXY_PASSWORD: &str = "ProxyPa55-9z8y";

/// A log sink the subscriber writes into.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

// current_thread: the thread-local subscriber sees every task of the test, the servers' included.
#[tokio::test(flavor = "current_thread")]
async fn no_secret_in_logs_debug_or_errors() {
    let captured = Captured::default();
    let sink = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || sink.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let mut shown: Vec<String> = Vec::new();

    // A session: login, use, expiry, login again.
    let sessions = Sessions::default();
    let (addr, _) = serve(sessions.router()).await;
    let mut config = http_config(addr);
    config.auth_mode = AuthMode::Session;
    shown.push(format!("{config:?}"));
    let client = Client::new(config).unwrap();
    client.get_vm("a").await.unwrap();
    sessions.expire();
    client.get_vm("b").await.unwrap();
    shown.push(format!("{client:?}"));

    // Refused credentials: basic, API key, and a failed session login.
    let refuse = Router::new().route(
        "/api/nutanix/v3/users/me",
        get(|| async { StatusCode::UNAUTHORIZED }),
    );
    let (refusing, _) = serve(refuse).await;
    let basic = Client::new(http_config(refusing)).unwrap();
    let mut api_key_config = http_config(refusing);
    api_key_config.credentials = Credentials::api_key(API_KEY);
    shown.push(format!("{api_key_config:?}"));
    let api_key = Client::new(api_key_config).unwrap();
    let mut session_config = http_config(refusing);
    session_config.auth_mode = AuthMode::Session;
    let session = Client::new(session_config).unwrap();
    for client in [&basic, &api_key, &session] {
        let error = client.whoami().await.unwrap_err();
        shown.push(format!("{error} {error:?}"));
        shown.push(format!("{client:?}"));
    }

    // A proxy with credentials that cannot be reached.
    let mut proxied = http_config(addr);
    proxied.proxy = ProxyConfig::Url(Sensitive::new(format!(
        "http://proxyuser:{PROXY_PASSWORD}@127.0.0.1:9"
    )));
    shown.push(format!("{proxied:?}"));
    let error = Client::new(proxied).unwrap().whoami().await.unwrap_err();
    shown.push(format!("{error} {error:?}"));

    // An invalid proxy URL and an endpoint with credentials in it.
    let mut bad_proxy = http_config(addr);
    bad_proxy.proxy = ProxyConfig::Url(Sensitive::new(format!("::not a url {PROXY_PASSWORD}")));
    let error = Client::new(bad_proxy).unwrap_err();
    shown.push(format!("{error} {error:?}"));
    let error = ClientConfig::new(
        &format!("https://{USERNAME}:{PASSWORD}@pc"),
        Credentials::basic("u", "p"),
    )
    .unwrap_err();
    shown.push(format!("{error} {error:?}"));

    // Insecure TLS logs its warning.
    let mut insecure = http_config(addr);
    insecure.insecure = true;
    shown.push(format!("{:?}", Client::new(insecure).unwrap()));

    let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(
        logs.contains("Prism Central request"),
        "the capture works: {logs}"
    );
    assert!(logs.contains("logged in to Prism Central"));
    assert!(logs.contains("TLS verification of Prism Central is disabled"));
    let secrets = [
        PASSWORD.to_owned(),
        base64_encode(&format!("{USERNAME}:{PASSWORD}")),
        API_KEY.to_owned(),
        PROXY_PASSWORD.to_owned(),
        "session-1-Zq9".to_owned(),
        "session-2-Zq9".to_owned(),
    ];
    shown.push(logs);
    for text in &shown {
        for secret in &secrets {
            assert!(
                !text.contains(secret.as_str()),
                "{secret:?} leaked in: {text}"
            );
        }
    }
}
