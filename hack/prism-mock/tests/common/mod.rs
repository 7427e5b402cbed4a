//! Helpers shared by the integration tests: a mock, a reqwest client trusting its CA, small request helpers.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // test helpers; not every test file uses all

pub mod python;
pub mod unmanaged;

use std::sync::Arc;
use std::time::Duration;

use prism_mock::{MockConfig, MockPrism, RunningMock};
use reqwest::{Client, Method, StatusCode};
use rustls_pki_types::pem::PemObject as _;
use serde_json::{Value, json};

pub const V3: &str = "/api/nutanix/v3";

/// A reqwest client trusting only `ca_pem` (ring provider, no process-wide default); with `None` it trusts
/// nothing, which is enough for plain HTTP.
pub fn client_trusting(ca_pem: Option<&str>) -> Client {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::CertificateDer::pem_slice_iter(ca_pem.unwrap_or("").as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    Client::builder()
        .timeout(Duration::from_secs(20))
        .tls_backend_preconfigured(config)
        .build()
        .unwrap()
}

/// A response: status, headers, body (JSON when it parses, else a string value).
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
    pub text: String,
}

impl Reply {
    /// `status.execution_context.task_uuid` of a create/update/delete answer (a string there).
    pub fn task_uuid(&self) -> &str {
        self.body["status"]["execution_context"]["task_uuid"]
            .as_str()
            .unwrap_or_else(|| panic!("no task_uuid string in {}", self.text))
    }

    /// `metadata.uuid` of an entity answer.
    pub fn uuid(&self) -> String {
        self.body["metadata"]["uuid"]
            .as_str()
            .unwrap_or_else(|| panic!("no metadata.uuid in {}", self.text))
            .to_owned()
    }
}

/// Talks to a mock with basic auth (or a cookie, or an API key).
pub struct Api {
    pub client: Client,
    pub base: String,
    pub user: String,
    pub password: String,
    pub auth: Auth,
}

#[derive(Clone, Debug)]
pub enum Auth {
    Basic,
    Cookie(String),
    ApiKey(String),
    None,
}

impl Api {
    pub fn new(mock: &RunningMock) -> Self {
        Self {
            client: client_trusting(mock.ca_pem()),
            base: mock.base_url().to_owned(),
            user: mock.credentials().username.clone(),
            password: mock.credentials().password.clone(),
            auth: Auth::Basic,
        }
    }

    pub fn with_auth(&self, auth: Auth) -> Self {
        Self {
            client: self.client.clone(),
            base: self.base.clone(),
            user: self.user.clone(),
            password: self.password.clone(),
            auth,
        }
    }

    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        headers: &[(&str, &str)],
    ) -> Reply {
        let mut request = self.client.request(method, format!("{}{path}", self.base));
        request = match &self.auth {
            Auth::Basic => request.basic_auth(&self.user, Some(&self.password)),
            Auth::Cookie(cookie) => request.header("Cookie", cookie),
            Auth::ApiKey(key) => request.header("X-ntnx-api-key", key),
            Auth::None => request,
        };
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.expect("request failed");
        let status = response.status();
        let headers = response.headers().clone();
        let text = response.text().await.unwrap();
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Reply {
            status,
            headers,
            body,
            text,
        }
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.call(Method::GET, path, None, &[]).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> Reply {
        self.call(Method::POST, path, Some(body), &[]).await
    }

    pub async fn put(&self, path: &str, body: &Value) -> Reply {
        self.call(Method::PUT, path, Some(body), &[]).await
    }

    pub async fn delete(&self, path: &str) -> Reply {
        self.call(Method::DELETE, path, None, &[]).await
    }

    /// UUID of the first entity of a v3 kind whose name is `name`.
    pub async fn uuid_of(&self, kind: &str, name: &str) -> String {
        let reply = self
            .post(
                &format!("{V3}/{kind}s/list"),
                &json!({"kind": kind, "length": 500}),
            )
            .await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        reply.body["entities"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["spec"]["name"] == name || e["status"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} named {name}"))["metadata"]["uuid"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// Polls `GET /tasks/{uuid}` until the task ends; returns the task body.
    pub async fn wait_task(&self, task: &str) -> Value {
        wait_for(|| async {
            let reply = self.get(&format!("{V3}/tasks/{task}")).await;
            assert_eq!(reply.status, 200, "{}", reply.text);
            let status = reply.body["status"].as_str().unwrap().to_owned();
            (status == "SUCCEEDED" || status == "FAILED").then_some(reply.body)
        })
        .await
    }

    /// The seeded Prism Element, vm-network subnet and RHCOS image.
    pub async fn seeded(&self) -> Seeded {
        Seeded {
            pe: self.uuid_of("cluster", "pe-1").await,
            subnet: self.uuid_of("subnet", "vm-network").await,
            other_subnet: self.uuid_of("subnet", "storage-network").await,
            rhcos: self.uuid_of("image", "rhcos-4.20").await,
            windows: self.uuid_of("image", "windows-server-2022").await,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Seeded {
    pub pe: String,
    pub subnet: String,
    pub other_subnet: String,
    pub rhcos: String,
    pub windows: String,
}

impl Seeded {
    /// A create body like the provider sends.
    pub fn vm_body(&self, name: &str, image: &str, power: &str) -> Value {
        json!({
            "api_version": "3.1",
            "metadata": {"kind": "vm", "spec_version": 1},
            "spec": {
                "name": name,
                "cluster_reference": {"kind": "cluster", "uuid": self.pe},
                "resources": {
                    "num_sockets": 2,
                    "num_vcpus_per_socket": 1,
                    "memory_size_mib": 8192,
                    "power_state": power,
                    "disk_list": [{"data_source_reference": {"kind": "image", "uuid": image}, "disk_size_mib": 122880}],
                    "nic_list": [{"subnet_reference": {"kind": "subnet", "uuid": self.subnet}}],
                },
            },
        })
    }
}

/// Polls `check` every 10 ms until it returns `Some`, for at most 20 s (generous: the machine is shared).
pub async fn wait_for<T, F, Fut>(mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "condition not reached within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub async fn start() -> RunningMock {
    MockPrism::start(MockConfig::default()).await.unwrap()
}

pub async fn start_with(config: MockConfig) -> RunningMock {
    MockPrism::start(config).await.unwrap()
}
