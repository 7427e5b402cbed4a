#![no_main]
//! Arbitrary bytes through every response type the Prism client decodes (the same
//! `serde_json::from_slice` the client's `call_json` runs), and through what the provider derives
//! from a decoded VM. Nothing may panic, and a body that decodes must survive the client's own
//! GET → change → PUT path: it serialises, and the serialised form decodes to an equal value
//! (unknown fields and enum values kept).
//!
//! Byte 0 selects the type; the rest is the body.

use libfuzzer_sys::fuzz_target;
use nutanix_machine_controller::plan::machine::addresses::nics_of;
use nutanix_machine_controller::plan::machine::lifecycle::VmState;
use nutanix_machine_controller::plan::vm::identity::identity_of;
use nutanix_machine_controller::plan::vm::request::FollowUpUpdate;
use prism_client::{v3, v4};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Decodes `body` as `T`; when it decodes, checks the round trip and returns the value.
fn decode<T>(body: &[u8]) -> Option<T>
where
    T: DeserializeOwned + Serialize + PartialEq + std::fmt::Debug,
{
    let value: T = serde_json::from_slice(body).ok()?;
    let encoded = serde_json::to_vec(&value).expect("a decoded body serialises");
    let again: T = serde_json::from_slice(&encoded).expect("a serialised body decodes");
    assert_eq!(value, again, "round trip changed the value");
    let _ = format!("{value:?}");
    Some(value)
}

/// Decodes `body` as a v3 list page. Its entities, metadata and unknown fields survive the round
/// trip; the entities that did not decode (`skipped`) are a report for the caller, never sent,
/// so the serialised page has none, and each says briefly why.
fn decode_list<T>(body: &[u8]) -> Option<v3::ListResponse<T>>
where
    T: DeserializeOwned + Serialize + PartialEq + std::fmt::Debug,
{
    let page: v3::ListResponse<T> = serde_json::from_slice(body).ok()?;
    let encoded = serde_json::to_vec(&page).expect("a decoded page serialises");
    let again: v3::ListResponse<T> =
        serde_json::from_slice(&encoded).expect("a serialised page decodes");
    assert!(again.skipped.is_empty(), "skipped entities were sent");
    assert_eq!(
        (&page.api_version, &page.metadata, &page.entities, &page.extra),
        (&again.api_version, &again.metadata, &again.entities, &again.extra),
        "round trip changed the page"
    );
    for skipped in &page.skipped {
        // 300 characters of the decoder's message, then at most "… (N characters)".
        assert!(
            skipped.reason.chars().count() <= 340,
            "a skipped entity's reason is long: {} characters",
            skipped.reason.chars().count()
        );
        let _ = skipped.to_string();
    }
    Some(page)
}

fn vm_checks(vm: v3::Vm) {
    let _ = nics_of(&vm);
    let _ = VmState::of(&vm);
    let _ = (vm.state(), vm.name(), vm.uuid(), vm.task_uuid());
    if let Some(description) = vm
        .spec
        .as_ref()
        .and_then(|spec| spec.description.as_deref())
    {
        let _ = identity_of(description);
    }
    let Some(mut input) = vm.into_update_input() else {
        return;
    };
    let follow_up = FollowUpUpdate {
        description: "openshift-machine: ns/m uid=u".to_owned(),
        categories: [("k".to_owned(), "v".to_owned())].into(),
        project_uuid: Some("p".to_owned()),
        resize_system_disk_mib: Some(1 << 20),
        vtpm_enabled: true,
        power_on: true,
        // A reasserted power-on sends a PUT each time on purpose; only the plain follow-up must
        // be idempotent.
        reassert_power: false,
    };
    if follow_up.apply(&mut input).is_ok() {
        // Applying twice changes nothing: a follow-up repeated after a crash sends no PUT.
        assert_eq!(
            follow_up.apply(&mut input),
            Ok(false),
            "follow-up is not idempotent"
        );
    }
    serde_json::to_vec(&input).expect("the update body serialises");
}

fn run(data: &[u8]) {
    let [selector, body @ ..] = data else {
        return;
    };
    match selector % 24 {
        0 => {
            if let Some(vm) = decode::<v3::Vm>(body) {
                vm_checks(vm);
            }
        }
        1 => {
            if let Some(list) = decode_list::<v3::Vm>(body) {
                list.entities.into_iter().for_each(vm_checks);
            }
        }
        2 => {
            let _ = decode::<v3::Task>(body);
        }
        3 => {
            let _ = decode::<v3::IdempotenceIdentifiers>(body);
        }
        4 => {
            let _ = decode::<v3::User>(body);
        }
        5 => {
            if let Some(image) = decode::<v3::Image>(body) {
                let _ = image.name();
            }
        }
        6 => {
            let _ = decode_list::<v3::Image>(body);
        }
        7 => {
            if let Some(subnet) = decode::<v3::Subnet>(body) {
                let _ = (subnet.name(), subnet.cluster_uuid());
            }
        }
        8 => {
            let _ = decode_list::<v3::Subnet>(body);
        }
        9 => {
            let _ = decode::<v3::Cluster>(body);
        }
        10 => {
            if let Some(clusters) = decode_list::<v3::Cluster>(body) {
                for cluster in &clusters.entities {
                    let _ = (
                        cluster.name(),
                        cluster.services(),
                        cluster.is_prism_central(),
                    );
                }
            }
        }
        11 => {
            let _ = decode_list::<v3::Project>(body);
        }
        12 => {
            if let Some(hosts) = decode_list::<v3::Host>(body) {
                for host in &hosts.entities {
                    let _ = host.gpus().iter().filter(|gpu| gpu.is_unused()).count();
                }
            }
        }
        13 => {
            let _ = decode::<v3::CategoryKey>(body);
        }
        14 => {
            let _ = decode::<v3::CategoryValue>(body);
        }
        15 => {
            let _ = decode_list::<v3::CategoryValue>(body);
        }
        16 => {
            let _ = decode::<v3::DeleteResponse>(body);
        }
        17 => {
            let _ = decode::<v3::VmIntentInput>(body);
        }
        18 => {
            let _ = decode::<v4::Envelope<v4::Template>>(body);
        }
        19 => {
            let _ = decode::<v4::Envelope<Vec<v4::Template>>>(body);
        }
        20 => {
            let _ = decode::<v4::Envelope<v4::Task>>(body);
        }
        21 => {
            let _ = decode::<v4::Envelope<v4::ExtIdReference>>(body);
        }
        22 => {
            let _ = decode::<v4::ErrorData>(body);
        }
        _ => {
            let _ = decode::<v4::TemplateDeployRequest>(body);
        }
    }
}

fuzz_target!(|data: &[u8]| run(data));
