//! Every answer recorded from a real Prism Central (`hack/prism-mock/recorded/*.json`: nutanix-cloud-native/
//! prism-go-client's keploy recordings of pc.2024.x, see that folder's README) decoded through this crate's typed
//! call for its path. A local server answers each request with the recorded status and body, so the answer goes
//! through the client's real HTTP path (status mapping, decoding, paging).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, StatusCode, Uri};
use axum::response::Response;
use pretty_assertions::assert_eq;
use prism_client::v3::{
    Cluster, EntityState, IdempotenceIdentifiersRequest, ListResponse, Subnet, Vm, VmIntentInput,
};
use prism_client::{Client, Listing};
use serde_json::{Value, json};

use common::{Recorder, http_config, serve};

/// Recordings with no typed call in this crate, and why.
const WITHOUT_TYPED_CALL: &[(&str, &str)] = &[(
    "get_prism_central.json",
    "GET /prism_central: the client has no call for it (the provider never reads it)",
)];

/// Recordings decoded by the tests below.
const DECODED: &[&str] = &[
    "create_idempotence_identifiers.json",
    "create_vm.json",
    "delete_idempotence_identifiers.json",
    "get_cluster.json",
    "get_idempotence_identifiers.json",
    "get_subnet.json",
    "get_vm.json",
    "list_cluster.json",
    "list_subnet.json",
    "list_vm.json",
    "update_vm.json",
];

fn recorded_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../hack/prism-mock/recorded")
}

#[derive(Debug, Clone)]
struct Exchange {
    method: String,
    path: String,
    request: Value,
    status: u16,
    body: Value,
}

fn exchanges(file: &str) -> Vec<Exchange> {
    let text = std::fs::read_to_string(recorded_dir().join(file)).unwrap();
    let recording: Value = serde_json::from_str(&text).unwrap();
    recording["exchanges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|exchange| Exchange {
            method: exchange["request"]["method"].as_str().unwrap().to_owned(),
            path: exchange["request"]["path"].as_str().unwrap().to_owned(),
            request: exchange["request"]["body"].clone(),
            status: exchange["response"]["status"].as_u64().unwrap() as u16,
            body: exchange["response"]["body"].clone(),
        })
        .collect()
}

/// The recorded response body of the one exchange of `method path` in `file`.
fn response(file: &str, method: &str) -> Value {
    exchanges(file)
        .into_iter()
        .find(|exchange| exchange.method == method)
        .unwrap()
        .body
}

/// A server answering every request to a recorded method and path with the recorded answer (whatever the
/// request body: a list is answered the same at every offset, as recorded); anything else is a 404.
async fn serve_recorded(files: &[&str]) -> (Client, Recorder) {
    let recorded: Arc<Vec<Exchange>> = Arc::new(files.iter().flat_map(|f| exchanges(f)).collect());
    let router = Router::new().fallback(move |method: Method, uri: Uri| {
        let recorded = recorded.clone();
        async move {
            let found = recorded
                .iter()
                .find(|exchange| exchange.method == method.as_str() && exchange.path == uri.path());
            let Some(exchange) = found else {
                return Response::builder()
                    .status(StatusCode::NOT_FOUND)
                    .body(Body::empty())
                    .unwrap();
            };
            let body = if exchange.body.is_null() {
                Body::empty()
            } else {
                Body::from(serde_json::to_vec(&exchange.body).unwrap())
            };
            Response::builder()
                .status(exchange.status)
                .header("content-type", "application/json")
                .body(body)
                .unwrap()
        }
    });
    let (addr, seen) = serve(router).await;
    (Client::new(http_config(addr)).unwrap(), seen)
}

/// The paths (under `at`) where `expected` has a value that `actual` lacks or holds differently.
fn missing_from(actual: &Value, expected: &Value, at: &str) -> Vec<String> {
    match (actual, expected) {
        (Value::Object(actual), Value::Object(expected)) => expected
            .iter()
            .flat_map(|(key, value)| match actual.get(key) {
                Some(found) => missing_from(found, value, &format!("{at}/{key}")),
                None => vec![format!("{at}/{key}")],
            })
            .collect(),
        (Value::Array(actual), Value::Array(expected)) if actual.len() == expected.len() => actual
            .iter()
            .zip(expected)
            .enumerate()
            .flat_map(|(index, (found, value))| {
                missing_from(found, value, &format!("{at}[{index}]"))
            })
            .collect(),
        _ if actual == expected => Vec::new(),
        _ => vec![format!("{at}: {actual} instead of {expected}")],
    }
}

#[test]
fn every_recording_is_decoded_here_or_has_no_typed_call() {
    let mut files: Vec<String> = std::fs::read_dir(recorded_dir())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".json"))
        .collect();
    files.sort();
    let mut known: Vec<String> = DECODED
        .iter()
        .chain(WITHOUT_TYPED_CALL.iter().map(|(file, _)| file))
        .map(|file| (*file).to_owned())
        .collect();
    known.sort();
    assert_eq!(
        files, known,
        "a recording was added or removed: decode it here"
    );
    for (file, _) in WITHOUT_TYPED_CALL {
        assert!(response(file, "GET").is_object(), "{file}");
    }
}

#[tokio::test]
async fn create_vm_echo_without_vcpus_per_socket_or_power_state_decodes() {
    let (client, seen) = serve_recorded(&["create_vm.json"]).await;
    let recorded = exchanges("create_vm.json").remove(0);
    let input: VmIntentInput = serde_json::from_value(recorded.request.clone()).unwrap();
    let vm = client.create_vm(&input).await.unwrap();
    assert_eq!(vm.uuid(), Some("bdbbad7a-a401-4f9a-a789-2b8406905b56"));
    assert_eq!(vm.state(), Some(&EntityState::Pending));
    assert_eq!(vm.task_uuid(), Some("e074cb94-1123-4dca-82b0-b842f019a825"));
    let resources = &vm.spec.as_ref().unwrap().resources;
    assert_eq!(
        (
            resources.num_vcpus_per_socket,
            resources.power_state.as_ref()
        ),
        (None, None)
    );
    assert_eq!(resources.num_sockets, Some(1));
    // The request the client sent holds the recorded one, field for field (the client adds the empty lists).
    let sent = seen.to("POST", "/api/nutanix/v3/vms")[0].json();
    assert_eq!(
        missing_from(&sent, &recorded.request, ""),
        Vec::<String>::new()
    );
}

#[tokio::test]
async fn get_and_list_vm_decode() {
    let (client, _) = serve_recorded(&["get_vm.json", "list_vm.json"]).await;
    let vm = client
        .get_vm("bdbbad7a-a401-4f9a-a789-2b8406905b56")
        .await
        .unwrap();
    assert_eq!(vm.name(), Some("test-vm"));
    assert_eq!(vm.state(), Some(&EntityState::Complete));
    // What goes back on an update (metadata and spec) is kept as read; the status is only read.
    let back = serde_json::to_value(&vm).unwrap();
    let recorded = response("get_vm.json", "GET");
    for part in ["metadata", "spec"] {
        assert_eq!(
            missing_from(&back[part], &recorded[part], part),
            Vec::<String>::new()
        );
        assert_eq!(
            missing_from(&recorded[part], &back[part], part),
            Vec::<String>::new()
        );
    }
    assert_eq!(
        missing_from(&back["status"], &recorded["status"], "status"),
        ["status/resources/gpu_list"],
        "an empty status list is not written back, nothing else is lost"
    );

    let listing: Listing<Vm> = client.list_all_with_skipped::<Vm>().await.unwrap();
    assert!(listing.skipped.is_empty(), "{:?}", listing.skipped);
    let recorded: ListResponse<Value> =
        serde_json::from_value(response("list_vm.json", "POST")).unwrap();
    assert_eq!(listing.items.len(), recorded.entities.len());
    assert_eq!(
        listing.items[0].uuid(),
        Some("bdbbad7a-a401-4f9a-a789-2b8406905b56")
    );
}

#[tokio::test]
async fn update_vm_after_a_typed_get_keeps_every_field_of_the_recorded_vm() {
    let (client, seen) = serve_recorded(&["update_vm.json"]).await;
    let uuid = "bdbbad7a-a401-4f9a-a789-2b8406905b56";
    let mut vm = client.get_vm(uuid).await.unwrap();
    // The change the recording made.
    vm.spec.as_mut().unwrap().description = Some("updated-test-vm-description".to_owned());
    let accepted = client
        .update_vm(uuid, &vm.into_update_input().unwrap())
        .await
        .unwrap();
    assert_eq!(accepted.state(), Some(&EntityState::Pending));
    assert!(accepted.task_uuid().is_some());

    let mut expected = response("update_vm.json", "GET");
    let object = expected.as_object_mut().unwrap();
    object.remove("status");
    object["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("spec_hash");
    object["spec"]["description"] = json!("updated-test-vm-description");
    let sent = seen.to("PUT", &format!("/api/nutanix/v3/vms/{uuid}"))[0].json();
    assert_eq!(sent, expected);
}

#[tokio::test]
async fn clusters_decode_and_prism_central_is_told_apart() {
    let (client, _) = serve_recorded(&["get_cluster.json", "list_cluster.json"]).await;
    let cluster: Cluster = client
        .get("0005b0f1-8f43-a0f2-02b7-3cecef193712")
        .await
        .unwrap();
    assert_eq!(cluster.name(), Some("ganon"));
    assert!(!cluster.is_prism_central());

    // The recording announces 5 matches but hands out 2, at any offset: the listing still ends.
    let listing = client.list_all_with_skipped::<Cluster>().await.unwrap();
    assert!(listing.skipped.is_empty(), "{:?}", listing.skipped);
    let names: Vec<&str> = listing.items.iter().filter_map(Cluster::name).collect();
    assert_eq!(names, ["ganon", "ncn-dev-pc"]);
    let elements = client.list_prism_elements().await.unwrap();
    let names: Vec<&str> = elements.iter().filter_map(Cluster::name).collect();
    assert_eq!(names, ["ganon"]);
}

#[tokio::test]
async fn subnets_decode() {
    let (client, _) = serve_recorded(&["get_subnet.json", "list_subnet.json"]).await;
    let subnet: Subnet = client
        .get("c7938dc6-7659-453e-a688-e26020c68e43")
        .await
        .unwrap();
    assert_eq!(subnet.name(), Some("sherlock_net"));
    assert_eq!(
        subnet
            .spec
            .as_ref()
            .and_then(|spec| spec.resources.as_ref())
            .and_then(|resources| resources.subnet_type.as_deref()),
        Some("VLAN")
    );
    // The recorded subnet's pool: 201 addresses, 168 free (what `doctor` reads).
    assert!(subnet.has_ip_pools());
    assert_eq!(subnet.pool_usage(), Some((201, 168)));
    let listing = client.list_all_with_skipped::<Subnet>().await.unwrap();
    assert!(listing.skipped.is_empty(), "{:?}", listing.skipped);
    let names: Vec<&str> = listing.items.iter().filter_map(Subnet::name).collect();
    assert_eq!(names, ["sherlock_net", "vpc_ext_net", "airgap"]);
}

#[tokio::test]
async fn idempotence_identifiers_decode() {
    let (client, _) = serve_recorded(&[
        "create_idempotence_identifiers.json",
        "get_idempotence_identifiers.json",
        "delete_idempotence_identifiers.json",
    ])
    .await;
    let request: IdempotenceIdentifiersRequest = serde_json::from_value(
        exchanges("create_idempotence_identifiers.json")
            .remove(0)
            .request,
    )
    .unwrap();
    let reserved = client.reserve_uuids(&request).await.unwrap();
    assert_eq!(reserved.uuid_list.len(), 2);
    assert_eq!(reserved.client_identifier.as_deref(), Some("testclient"));
    let again = client.get_reserved_uuids("testclient").await.unwrap();
    assert_eq!(again.uuid_list, reserved.uuid_list);
    client.release_reserved_uuids("testclient").await.unwrap();
}
