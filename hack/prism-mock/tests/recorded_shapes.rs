//! Contract test against real Prism Central answers: replays every recorded request of `recorded/*.json`
//! (pc.2024.3.0.1, from prism-go-client's keploy recordings, see recorded/README.md) against the mock, seeded
//! so the entities the requests name exist under the recorded UUIDs, and compares the answers' shapes: the
//! status, the key set of every object level, the JSON type of every value (arrays by their first element).
//! Every intended difference is listed once, with its reason, in [`INTENDED`]; an entry that no longer matches a
//! difference fails the test too, so the table stays true.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use std::collections::BTreeSet;

use common::{Api, start_with};
use prism_mock::{MockConfig, Seed};
use reqwest::Method;
use serde_json::Value;

/// The entities the recorded requests refer to, under their recorded UUIDs and names. Subnets and clusters are
/// seeded in the order the recorded lists show them.
const RECORDED_WORLD: &str = r#"
prism_central:
  name: ncn-dev-pc
  uuid: 710e3779-0030-4d55-9827-be11e7fd2d0e
clusters:
  - {name: ganon, uuid: 0005b0f1-8f43-a0f2-02b7-3cecef193712, aos_version: "6.5.4.5"}
  - {name: ncn-dev-sandbox, uuid: 00061f7f-44f7-19dc-3be1-7cc25586ee44}
subnets:
  - {name: sherlock_net, uuid: c7938dc6-7659-453e-a688-e26020c68e43, cluster: ganon, vlan_id: 508,
     cidr: 10.40.142.0/24, gateway: 10.40.142.1, pool_start: 10.40.142.50, pool_end: 10.40.142.250}
  - {name: vlan173, uuid: b2e46975-2cde-4a49-9dda-815eb4fcd679, cluster: ncn-dev-sandbox, vlan_id: 173,
     cidr: 10.23.128.0/17, gateway: 10.23.128.1, pool_start: 10.23.129.10, pool_end: 10.23.129.200}
images:
  - {name: test-image, uuid: 70cfd137-a8d9-4169-a5ac-cf9ad6ddb03a, size_mib: 4096}
"#;

/// The VM the recordings created (create_vm.json) and then read, listed and updated.
const RECORDED_VM: &str = "bdbbad7a-a401-4f9a-a789-2b8406905b56";

/// Recordings in replay order: the create first, so the VM the later ones name exists.
const FILES: [&str; 12] = [
    "create_vm.json",
    "get_vm.json",
    "list_vm.json",
    "update_vm.json",
    "get_cluster.json",
    "list_cluster.json",
    "get_subnet.json",
    "list_subnet.json",
    "get_prism_central.json",
    "create_idempotence_identifiers.json",
    "get_idempotence_identifiers.json",
    "delete_idempotence_identifiers.json",
];

/// Every intended difference: (recording, difference as reported, reason). A difference reads
/// `<kind> <path>`: `missing` (the recorded answer has the key, the mock's not), `extra` (the other way),
/// `empty` (a list the recording fills is empty in the mock), `type` (the JSON types differ).
const INTENDED: &[(&str, &str, &str)] = &[
    (
        "get_vm.json",
        "missing .spec.resources.nic_list[].ip_endpoint_list",
        "the recorded VM was on an IPAM-managed subnet, which writes an ASSIGNED address into the spec at \
         create; the mock's subnets hand out addresses as DHCP would (LEARNED, in status, after boot) unless \
         the request asks for an IP",
    ),
    (
        "get_vm.json",
        "empty .status.resources.nic_list[].ip_endpoint_list",
        "same: the recorded powered-off VM shows its IPAM address; the mock's powered-off guest reports none",
    ),
    (
        "list_vm.json",
        "missing .entities[].spec.resources.nic_list[].ip_endpoint_list",
        "as in get_vm.json: IPAM-managed subnet in the recording",
    ),
    (
        "list_vm.json",
        "empty .entities[].status.resources.nic_list[].ip_endpoint_list",
        "as in get_vm.json: IPAM-managed subnet in the recording",
    ),
    (
        "update_vm.json",
        "missing .spec.resources.nic_list[].ip_endpoint_list",
        "as in get_vm.json: IPAM-managed subnet in the recording",
    ),
    (
        "update_vm.json",
        "empty .status.resources.nic_list[].ip_endpoint_list",
        "as in get_vm.json: IPAM-managed subnet in the recording",
    ),
];

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Difference(String);

fn type_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The shape differences between a recorded answer and the mock's.
fn differences(recorded: &Value, mock: &Value, path: &str, out: &mut BTreeSet<Difference>) {
    match (recorded, mock) {
        (Value::Null, _) => {}
        (Value::Object(r), Value::Object(m)) => {
            for (key, value) in r {
                let child = format!("{path}.{key}");
                match m.get(key) {
                    Some(other) => differences(value, other, &child, out),
                    None => {
                        out.insert(Difference(format!("missing {child}")));
                    }
                }
            }
            for key in m.keys().filter(|k| !r.contains_key(*k)) {
                out.insert(Difference(format!("extra {path}.{key}")));
            }
        }
        (Value::Array(r), Value::Array(m)) => match (r.first(), m.first()) {
            (Some(a), Some(b)) => differences(a, b, &format!("{path}[]"), out),
            (Some(_), None) => {
                out.insert(Difference(format!("empty {path}")));
            }
            _ => {}
        },
        (r, m) if type_of(r) != type_of(m) => {
            out.insert(Difference(format!(
                "type {path}: {} vs {}",
                type_of(r),
                type_of(m)
            )));
        }
        _ => {}
    }
}

fn recorded(file: &str) -> Value {
    let path = format!("{}/recorded/{file}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

#[tokio::test]
async fn the_mock_answers_every_recorded_request_in_the_recorded_shape() {
    let mock = start_with(MockConfig {
        seed: Seed::from_yaml(RECORDED_WORLD).unwrap(),
        ..MockConfig::default()
    })
    .await;
    let api = Api::new(&mock);
    // Recorded identifiers the mock draws itself (the VM, its disk and NIC UUIDs, its MAC), replaced by the
    // mock's in later requests.
    let mut replace: Vec<(String, String)> = Vec::new();
    let mut mock_vm = Value::Null;
    let mut found: Vec<(String, Difference)> = Vec::new();
    for file in FILES {
        for exchange in recorded(file)["exchanges"].as_array().unwrap() {
            let request = &exchange["request"];
            let method =
                Method::from_bytes(request["method"].as_str().unwrap().as_bytes()).unwrap();
            let substitute = |text: &str| {
                replace
                    .iter()
                    .fold(text.to_owned(), |t, (from, to)| t.replace(from, to))
            };
            let path = substitute(request["path"].as_str().unwrap());
            let mut body: Value =
                serde_json::from_str(&substitute(&request["body"].to_string())).unwrap();
            if method == Method::PUT {
                // The recorded NIC carries the address its IPAM-managed subnet assigned; the mock's NIC has
                // none in its spec (see INTENDED), so the PUT sends the mock's own, as a client sends what it read.
                let nics = body["spec"]["resources"]["nic_list"]
                    .as_array_mut()
                    .unwrap();
                for (nic, read) in nics
                    .iter_mut()
                    .zip(mock_vm["spec"]["resources"]["nic_list"].as_array().unwrap())
                {
                    let nic = nic.as_object_mut().unwrap();
                    match read.get("ip_endpoint_list") {
                        Some(list) => nic.insert("ip_endpoint_list".to_owned(), list.clone()),
                        None => nic.remove("ip_endpoint_list"),
                    };
                }
            }
            let body = body.as_object().map(|_| &body);
            let reply = api.call(method.clone(), &path, body, &[]).await;
            let expected = &exchange["response"];
            let mut diffs = BTreeSet::new();
            let status = u64::from(reply.status.as_u16());
            if status != expected["status"].as_u64().unwrap() {
                diffs.insert(Difference(format!(
                    "status {} vs {status}: {}",
                    expected["status"], reply.text
                )));
            } else if expected["body"].is_null() {
                if !reply.text.is_empty() {
                    diffs.insert(Difference(format!(
                        "body where the recording has none: {}",
                        reply.text
                    )));
                }
            } else {
                differences(&expected["body"], &reply.body, "", &mut diffs);
            }
            found.extend(diffs.into_iter().map(|d| (file.to_owned(), d)));
            if file == "create_vm.json" {
                replace.push((RECORDED_VM.to_owned(), reply.uuid()));
                api.wait_task(reply.task_uuid()).await;
                let read = api
                    .get(&format!("/api/nutanix/v3/vms/{}", reply.uuid()))
                    .await
                    .body;
                let recorded_vm = &recorded("get_vm.json")["exchanges"][0]["response"]["body"];
                for pointer in [
                    "/spec/resources/disk_list/0/uuid",
                    "/spec/resources/nic_list/0/uuid",
                    "/spec/resources/nic_list/0/mac_address",
                ] {
                    let from = recorded_vm
                        .pointer(pointer)
                        .and_then(Value::as_str)
                        .unwrap();
                    let to = read.pointer(pointer).and_then(Value::as_str).unwrap();
                    replace.push((from.to_owned(), to.to_owned()));
                }
            }
            if method == Method::GET && path.contains("/vms/") {
                mock_vm = reply.body.clone();
            }
        }
    }
    let unexpected: Vec<String> = found
        .iter()
        .filter(|(file, d)| {
            !INTENDED
                .iter()
                .any(|(f, text, _)| f == file && *text == d.0)
        })
        .map(|(file, d)| format!("{file}: {}", d.0))
        .collect();
    assert!(
        unexpected.is_empty(),
        "shape differences from the recorded answers (fix the mock or list them in INTENDED with a reason):\n{}",
        unexpected.join("\n")
    );
    let unused: Vec<String> = INTENDED
        .iter()
        .filter(|(f, text, _)| !found.iter().any(|(file, d)| file == f && d.0 == *text))
        .map(|(f, text, _)| format!("{f}: {text}"))
        .collect();
    assert!(
        unused.is_empty(),
        "INTENDED lists differences that no longer occur:\n{}",
        unused.join("\n")
    );
}
