//! Listings against servers that page oddly or hand out an entity the client cannot decode.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Json;
use axum::Router;
use axum::routing::post;
use prism_client::v3::{Host, ListRequest, Vm};
use prism_client::{Client, Error};
use serde_json::{Value, json};

use common::{http_config, serve, vm_json};

fn host_json(uuid: &str, name: &str) -> Value {
    json!({"metadata": {"kind": "host", "uuid": uuid}, "status": {"name": name,
        "cluster_reference": {"kind": "cluster", "uuid": "pe-1"}}})
}

#[tokio::test]
async fn a_server_that_ignores_offset_gives_each_entity_once_and_is_not_paged_again() {
    // Real `hosts/list` does not paginate (cluster-api-provider-nutanix#577): it answers every request with
    // the same entities, whatever the offset. Here: the first `length` of five, and a total of five.
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let router = Router::new().route(
        "/api/nutanix/v3/hosts/list",
        post(move |Json(body): Json<Value>| {
            counter.fetch_add(1, Ordering::SeqCst);
            async move {
                let length = body["length"].as_u64().unwrap_or(20) as usize;
                let page: Vec<Value> = (0..5.min(length))
                    .map(|i| host_json(&format!("h-{i}"), &format!("host-{i}")))
                    .collect();
                Json(json!({"metadata": {"kind": "host", "total_matches": 5}, "entities": page}))
            }
        }),
    );
    let (addr, _) = serve(router).await;
    let mut config = http_config(addr);
    config.list_page_size = 2;
    let client = Client::new(config).unwrap();
    let hosts = client.list_all::<Host>().await.unwrap();
    let uuids: Vec<&str> = hosts.iter().filter_map(Host::uuid).collect();
    assert_eq!(uuids, ["h-0", "h-1"]);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "the second page brought nothing new"
    );
    let found = client.find_by_exact_name::<Host>("host-1").await.unwrap();
    assert_eq!(
        found
            .and_then(|host| host.uuid().map(str::to_owned))
            .as_deref(),
        Some("h-1")
    );
}

#[tokio::test]
async fn an_entity_repeated_across_pages_is_listed_once() {
    // An entity created between two page reads shifts the others: the second page starts with one already seen.
    let router = Router::new().route(
        "/api/nutanix/v3/vms/list",
        post(|Json(body): Json<Value>| async move {
            let page = match body["offset"].as_u64() {
                Some(0) => vec![vm_json("a", "vm-a"), vm_json("b", "vm-b")],
                _ => vec![vm_json("b", "vm-b"), vm_json("c", "vm-c")],
            };
            Json(json!({"metadata": {"kind": "vm", "total_matches": 3}, "entities": page}))
        }),
    );
    let (addr, _) = serve(router).await;
    let mut config = http_config(addr);
    config.list_page_size = 2;
    let vms = Client::new(config).unwrap().list_all::<Vm>().await.unwrap();
    let uuids: Vec<&str> = vms.iter().filter_map(Vm::uuid).collect();
    assert_eq!(uuids, ["a", "b", "c"]);
}

/// A VM whose `spec.resources` is not an object: no VM type can decode it.
fn odd_vm(uuid: &str, name: &str) -> Value {
    json!({"metadata": {"kind": "vm", "uuid": uuid}, "spec": {"name": name, "resources": "unavailable"}})
}

#[tokio::test]
async fn an_entity_that_cannot_be_decoded_is_skipped_and_reported_not_fatal() {
    let router = Router::new().route(
        "/api/nutanix/v3/vms/list",
        post(|| async {
            Json(
                json!({"api_version": "3.1", "metadata": {"kind": "vm", "total_matches": 3},
                "entities": [vm_json("a", "vm-a"), odd_vm("odd", "vm-odd"), vm_json("c", "vm-c")]}),
            )
        }),
    );
    let (addr, _) = serve(router).await;
    let client = Client::new(http_config(addr)).unwrap();

    let page = client.list::<Vm>(&ListRequest::default()).await.unwrap();
    assert_eq!(page.entities.len(), 2);
    assert_eq!(page.skipped.len(), 1);
    assert_eq!(page.skipped[0].uuid.as_deref(), Some("odd"));
    assert_eq!(page.skipped[0].name.as_deref(), Some("vm-odd"));
    assert!(
        page.skipped[0].reason.contains("invalid type"),
        "{}",
        page.skipped[0].reason
    );

    let listing = client.list_all_with_skipped::<Vm>().await.unwrap();
    let uuids: Vec<&str> = listing.items.iter().filter_map(Vm::uuid).collect();
    assert_eq!(uuids, ["a", "c"]);
    assert_eq!(listing.skipped.len(), 1);
    assert_eq!(client.list_all::<Vm>().await.unwrap().len(), 2);

    let found = client.find_by_exact_name::<Vm>("vm-c").await.unwrap();
    assert_eq!(
        found.and_then(|vm| vm.uuid().map(str::to_owned)).as_deref(),
        Some("c")
    );
    // Answering "no such VM" for the unreadable one could make a caller create a second one.
    let error = client.find_by_exact_name::<Vm>("vm-odd").await.unwrap_err();
    let Error::UnreadableMatch { kind, name, entity } = &error else {
        panic!("{error:?}")
    };
    assert_eq!(
        (*kind, name.as_str(), entity.uuid.as_deref()),
        ("vm", "vm-odd", Some("odd"))
    );
}
