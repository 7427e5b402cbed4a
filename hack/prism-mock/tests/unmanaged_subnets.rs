//! Subnets Prism Central does not manage (no IPAM): their shape, and Prism's refusal of an ASSIGNED address on
//! them (what guests report there is in `tests/unmanaged_guests.rs`). Each test names its source; the rules
//! are in `src/store/subnets.rs` and `src/store/vm/nics.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use common::V3;
use common::unmanaged::{env, nic};
use prism_mock::GuestBehaviour;
use serde_json::json;

const MESSAGE: &str = "(15, Cannot assign IP address on an unmanaged network)";

// nutanix/nutanix.ansible#466: Prism Central lists a VLAN subnet without IPAM with no `ip_config` and
// `ip_usage_stats` of `num_macs` only.
#[tokio::test]
async fn an_unmanaged_subnet_is_a_plain_vlan_without_ip_config() {
    let e = env(GuestBehaviour::default()).await;
    e.create(&e.vm_body("on-plain", &e.rhcos, vec![nic(&e.plain, None)], None))
        .await;
    let subnet = e.api.get(&format!("{V3}/subnets/{}", e.plain)).await;
    assert_eq!(subnet.status, 200, "{}", subnet.text);
    let body = subnet.body;
    for side in ["spec", "status"] {
        let res = &body[side]["resources"];
        assert_eq!(res["subnet_type"], "VLAN", "{body}");
        assert_eq!(res["vlan_id"], 40);
        assert!(res.get("ip_config").is_none(), "{side}: {body}");
    }
    assert_eq!(
        body["status"]["resources"]["ip_usage_stats"],
        json!({"num_macs": 1})
    );
    assert!(
        !subnet.text.contains("10.40."),
        "the cidr is the mock's own: {}",
        subnet.text
    );
    let listed = e
        .api
        .post(&format!("{V3}/subnets/list"), &json!({"kind": "subnet"}))
        .await
        .body;
    let by_name = |name: &str| {
        listed["entities"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["spec"]["name"] == name)
            .unwrap()
            .clone()
    };
    assert!(by_name("plain-vlan")["spec"]["resources"]["ip_config"].is_null());
    let managed = by_name("managed-net");
    assert_eq!(
        managed["spec"]["resources"]["ip_config"]["pool_list"][0]["range"],
        "10.41.0.100 10.41.0.199"
    );
    assert!(managed["status"]["resources"]["ip_usage_stats"]["ip_pools_stats"].is_array());
}

// Prism Central refuses an ASSIGNED address on a subnet it does not manage: "Cannot assign IP address on an
// unmanaged network" in the FAILED task of an accepted request (nutanix/terraform-provider-nutanix#1167, a
// create by clone; nutanix/nutanix.ansible#593, a PUT).
#[tokio::test]
async fn an_assigned_address_on_an_unmanaged_subnet_fails_create_clone_and_update() {
    let e = env(GuestBehaviour::default()).await;
    let api = &e.api;
    let body = e.vm_body(
        "assigned-plain",
        &e.rhcos,
        vec![nic(&e.plain, Some("10.40.0.30"))],
        None,
    );
    let reply = api.post(&format!("{V3}/vms"), &body).await;
    assert_eq!(reply.status, 202, "accepted, then refused: {}", reply.text);
    let uuid = reply.uuid();
    let task = api.wait_task(reply.task_uuid()).await;
    assert_eq!(task["status"], "FAILED", "{task}");
    assert_eq!(task["error_code"], "VM_INVALID_ARGUMENT");
    assert_eq!(
        task["error_detail"],
        format!("Failed to create VM {uuid}: {MESSAGE}")
    );
    assert_eq!(api.get(&format!("{V3}/vms/{uuid}")).await.status, 404);

    let source = e
        .create(&e.vm_body("source", &e.rhcos, vec![nic(&e.managed, None)], None))
        .await;
    let clone = json!({"override_spec": {"name": "clone", "nic_list": [nic(&e.plain, Some("10.40.0.31"))]}});
    let reply = api.post(&format!("{V3}/vms/{source}/clone"), &clone).await;
    assert_eq!(reply.status, 202, "{}", reply.text);
    let task = api
        .wait_task(reply.body["task_uuid"].as_str().unwrap())
        .await;
    assert_eq!(task["status"], "FAILED", "{task}");
    let clone_uuid = task["entity_reference_list"][0]["uuid"].as_str().unwrap();
    assert_eq!(
        task["error_detail"],
        format!("Failed to clone {source}: Failed to create VM {clone_uuid}: {MESSAGE}")
    );
    assert_eq!(api.get(&format!("{V3}/vms/{clone_uuid}")).await.status, 404);

    let current = api.get(&format!("{V3}/vms/{source}")).await.body;
    let mut spec = current["spec"].clone();
    spec["resources"]["nic_list"]
        .as_array_mut()
        .unwrap()
        .push(nic(&e.plain, Some("10.40.0.32")));
    let put = json!({"metadata": current["metadata"], "spec": spec});
    let reply = api.put(&format!("{V3}/vms/{source}"), &put).await;
    assert_eq!(reply.status, 202, "{}", reply.text);
    let task = api.wait_task(reply.task_uuid()).await;
    assert_eq!(task["status"], "FAILED", "{task}");
    assert_eq!(
        task["error_detail"],
        format!("Failed to update VM {source}: {MESSAGE}")
    );
    let after = api.get(&format!("{V3}/vms/{source}")).await.body;
    assert_eq!(
        after["spec"]["resources"]["nic_list"]
            .as_array()
            .unwrap()
            .len(),
        1,
        "the failed update is undone"
    );

    // The same NIC without an address is fine: Prism just hands out none.
    e.create(&e.vm_body("plain", &e.rhcos, vec![nic(&e.plain, None)], None))
        .await;
}

// A template deploy's NIC address (`networkInfo.ipv4Config.ipAddress`) is an ASSIGNED one (ntnx-vmm-py-client
// `Ipv4Config`): refused on an unmanaged subnet as above, in the deploy task.
#[tokio::test]
async fn a_template_deploy_with_an_address_on_an_unmanaged_subnet_fails_its_task() {
    let e = env(GuestBehaviour::default()).await;
    let task = e.deploy("win-assigned", Some("10.40.0.21")).await;
    assert_eq!(task["status"], "FAILED", "{task}");
    let error = &task["errorMessages"][0];
    assert!(
        error["message"].as_str().unwrap().ends_with(MESSAGE),
        "{task}"
    );
    assert_eq!(error["code"], "VMM-30102");
    assert!(
        e.mock
            .admin()
            .vms()
            .iter()
            .all(|v| v.name != "win-assigned"),
        "the refused VM is gone"
    );
    let task = e.deploy("win-plain", None).await;
    assert_eq!(task["status"], "SUCCEEDED", "without the address: {task}");
}
