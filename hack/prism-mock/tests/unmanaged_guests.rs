//! What guests report on a subnet Prism Central does not manage, where no DHCP answers: nothing from Prism; a
//! Windows guest's APIPA address, or the static address its cloudbase-init user data sets; nothing from a
//! Linux guest. The rules are in `src/store/record.rs` (`Vm::reported_addresses`) and
//! `src/store/vm/cloudbase.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use common::V3;
use common::unmanaged::{STATIC_USER_DATA, env, nic};
use common::wait_for;
use prism_mock::GuestBehaviour;
use serde_json::json;

fn apipa(nic: &[(String, String)]) -> bool {
    matches!(nic, [(ip, ty)] if ip.starts_with("169.254.") && ty == "LEARNED")
}

fn learned(ip: &str) -> Vec<Vec<(String, String)>> {
    vec![vec![(ip.to_owned(), "LEARNED".to_owned())]]
}

// Prism learns what the guest sets on a network it does not manage (nutanix/terraform-provider-nutanix#871:
// LEARNED addresses of a Windows VM served by another DHCP server, APIPA first). With exactly one adapter,
// the `New-NetIPAddress` line of a Windows guest's `<powershell>` user data sets its address (cloudbase-init
// `userdata.py`, `userdatautils.py`); a Linux guest reports nothing.
#[tokio::test]
async fn a_windows_guest_reports_its_user_data_address_after_apipa_and_linux_nothing() {
    let e = env(GuestBehaviour {
        apipa_first_ms: Some(1000),
        ..GuestBehaviour::default()
    })
    .await;
    let one_nic = vec![nic(&e.plain, None)];
    let linux = e
        .create(&e.vm_body("linux", &e.rhcos, one_nic.clone(), Some(STATIC_USER_DATA)))
        .await;
    let windows = e
        .create(&e.vm_body("win-static", &e.windows, one_nic, Some(STATIC_USER_DATA)))
        .await;
    let first = e.booted(&windows).await;
    assert!(apipa(&first[0]), "APIPA first, as configured: {first:?}");
    let then = wait_for(|| async {
        let a = e.addresses(&windows).await;
        (!apipa(&a[0])).then_some(a)
    })
    .await;
    assert_eq!(then, learned("10.40.0.21"));
    assert_eq!(
        e.addresses(&linux).await,
        vec![Vec::new()],
        "booted before the Windows VM, and reports nothing"
    );
}

// Without the command, or with two adapters (the script throws), a Windows guest keeps only its APIPA
// addresses (nutanix-cloud-native/packer-plugin-nutanix#228 and #249: Windows VMs without DHCP report
// 169.254.x.y); on a managed subnet the DHCP address counts, whatever the user data says.
#[tokio::test]
async fn without_the_command_or_with_two_nics_a_windows_guest_keeps_apipa() {
    let e = env(GuestBehaviour::default()).await;
    let without_command = e
        .create(&e.vm_body(
            "win-plain",
            &e.windows,
            vec![nic(&e.plain, None)],
            Some("<powershell>\nWrite-Host hello\n</powershell>\n"),
        ))
        .await;
    let two_nics = e
        .create(&e.vm_body(
            "win-two",
            &e.windows,
            vec![nic(&e.plain, None), nic(&e.plain_2, None)],
            Some(STATIC_USER_DATA),
        ))
        .await;
    let on_managed = e
        .create(&e.vm_body(
            "win-managed",
            &e.windows,
            vec![nic(&e.managed, None)],
            Some(STATIC_USER_DATA),
        ))
        .await;
    let plain = e.booted(&without_command).await;
    assert!(apipa(&plain[0]), "only APIPA: {plain:?}");
    let two = e.booted(&two_nics).await;
    assert!(
        apipa(&two[0]) && apipa(&two[1]) && two[0] != two[1],
        "each adapter keeps an APIPA address of its own: {two:?}"
    );
    let managed = e.booted(&on_managed).await;
    assert!(
        managed[0][0].0.starts_with("10.41.0.") && managed[0][0].1 == "LEARNED",
        "{managed:?}"
    );
    assert_eq!(e.addresses(&without_command).await, plain, "APIPA stays");
}

// The provider's path for Windows: a template deploy with the CloudInit user data and no address; once
// powered on, the guest has the address its user data sets.
#[tokio::test]
async fn a_deployed_windows_vm_reports_its_user_data_address_once_powered_on() {
    let e = env(GuestBehaviour::default()).await;
    let task = e.deploy("win-deployed", None).await;
    assert_eq!(task["status"], "SUCCEEDED", "{task}");
    let uuid = e
        .mock
        .admin()
        .vms()
        .into_iter()
        .find(|v| v.name == "win-deployed")
        .unwrap()
        .uuid;
    let current = e.api.get(&format!("{V3}/vms/{uuid}")).await.body;
    let mut spec = current["spec"].clone();
    spec["resources"]["power_state"] = json!("ON");
    let on = e
        .api
        .put(
            &format!("{V3}/vms/{uuid}"),
            &json!({"metadata": current["metadata"], "spec": spec}),
        )
        .await;
    assert_eq!(on.status, 202, "{}", on.text);
    assert_eq!(e.booted(&uuid).await, learned("10.40.0.21"));
}
