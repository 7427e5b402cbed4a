//! Volume groups attached to a VM (as Nutanix CSI 3.x attaches them): the VM's disk list shows them, Prism
//! refuses to delete the VM while one is attached, and the v4 volumes API detaches them, keeping the group.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use common::{Api, V3, start, wait_for};
use http::Method;
use serde_json::{Value, json};

const VOLUMES: &str = "/api/volumes/v4.0/config/volume-groups";

async fn create_and_wait(api: &Api, body: &Value) -> String {
    let created = api.post(&format!("{V3}/vms"), body).await;
    assert_eq!(created.status, 202, "{}", created.text);
    let task = api.wait_task(created.task_uuid()).await;
    assert_eq!(task["status"], "SUCCEEDED", "{task}");
    created.uuid()
}

fn volume_groups_in(disks: &Value) -> Vec<(String, i64)> {
    disks
        .as_array()
        .unwrap()
        .iter()
        .filter(|disk| disk["device_properties"]["device_type"] == "VOLUME_GROUP")
        .map(|disk| {
            (
                disk["volume_group_reference"]["uuid"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
                disk["device_properties"]["disk_address"]["device_index"]
                    .as_i64()
                    .unwrap(),
            )
        })
        .collect()
}

async fn detach(api: &Api, group: &str, vm: &str, request_id: &str) -> common::Reply {
    api.call(
        Method::POST,
        &format!("{VOLUMES}/{group}/$actions/detach-vm"),
        Some(&json!({"extId": vm})),
        &[("NTNX-Request-Id", request_id)],
    )
    .await
}

#[tokio::test]
async fn a_vm_holding_a_volume_group_is_not_deleted_until_the_group_is_detached_and_the_group_stays()
 {
    let mock = start().await;
    let api = Api::new(&mock);
    let seeded = api.seeded().await;
    let vm = create_and_wait(&api, &seeded.vm_body("csi-node", &seeded.rhcos, "ON")).await;
    let group = mock
        .admin()
        .create_volume_group("pvc-0f3c", std::slice::from_ref(&vm))
        .expect("the VM exists");

    // The VM shows the group as a VOLUME_GROUP disk beside its system disk at scsi.0, in spec and status.
    let read = api.get(&format!("{V3}/vms/{vm}")).await.body;
    let expected = vec![(group.clone(), 1)];
    assert_eq!(
        volume_groups_in(&read["spec"]["resources"]["disk_list"]),
        expected
    );
    assert_eq!(
        volume_groups_in(&read["status"]["resources"]["disk_list"]),
        expected
    );

    // Prism accepts the DELETE and its task fails with its own error; the VM stays.
    let refused = api.delete(&format!("{V3}/vms/{vm}")).await;
    assert_eq!(refused.status, 202, "{}", refused.text);
    let task = api.wait_task(refused.task_uuid()).await;
    assert_eq!(task["status"], "FAILED", "{task}");
    assert_eq!(task["error_code"], "INVALID_ARGUMENT");
    assert_eq!(
        task["error_detail"],
        "INVALID_ARGUMENT: Invalid Argument: 6\n:Volume group at scsi.1 must be detached before deleting VM."
    );
    let still = api.get(&format!("{V3}/vms/{vm}")).await;
    assert_eq!(still.status, 200);
    assert_eq!(still.body["status"]["state"], "COMPLETE");

    // The detach answers a task; the same request id answers the same task.
    let accepted = detach(&api, &group, &vm, "detach-1").await;
    assert_eq!(accepted.status, 202, "{}", accepted.text);
    assert_eq!(
        accepted.body["$objectType"],
        "volumes.v4.config.DetachVmApiResponse"
    );
    let task = accepted.body["data"]["extId"].as_str().unwrap().to_owned();
    let repeated = detach(&api, &group, &vm, "detach-1").await;
    assert_eq!(repeated.body["data"]["extId"], task.as_str());
    let ended = wait_for(|| async {
        let reply = api
            .get(&format!("/api/prism/v4.0/config/tasks/{task}"))
            .await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        (reply.body["data"]["status"] == "SUCCEEDED" || reply.body["data"]["status"] == "FAILED")
            .then_some(reply.body)
    })
    .await;
    assert_eq!(ended["data"]["status"], "SUCCEEDED", "{ended}");

    // Detached: the VM lists no group, the group lists no VM, and it still exists.
    let read = api.get(&format!("{V3}/vms/{vm}")).await.body;
    assert!(volume_groups_in(&read["spec"]["resources"]["disk_list"]).is_empty());
    let attachments = api.get(&format!("{VOLUMES}/{group}/vm-attachments")).await;
    assert_eq!(attachments.status, 200, "{}", attachments.text);
    assert!(
        attachments.body.get("data").is_none(),
        "{}",
        attachments.text
    );
    let kept = api.get(&format!("{VOLUMES}/{group}")).await;
    assert_eq!(kept.status, 200, "{}", kept.text);
    assert_eq!(kept.body["data"]["name"], "pvc-0f3c");

    let deleted = api.delete(&format!("{V3}/vms/{vm}")).await;
    assert_eq!(
        api.wait_task(deleted.task_uuid()).await["status"],
        "SUCCEEDED"
    );
    assert_eq!(api.get(&format!("{V3}/vms/{vm}")).await.status, 404);
    assert!(mock.admin().volume_group(&group).is_some());
}

#[tokio::test]
async fn a_detach_needs_a_request_id_and_a_known_group() {
    let mock = start().await;
    let api = Api::new(&mock);
    let seeded = api.seeded().await;
    let vm = create_and_wait(&api, &seeded.vm_body("csi-node", &seeded.rhcos, "OFF")).await;
    let group = mock
        .admin()
        .create_volume_group("pvc-1", std::slice::from_ref(&vm))
        .unwrap();
    let without_id = api
        .post(
            &format!("{VOLUMES}/{group}/$actions/detach-vm"),
            &json!({"extId": vm}),
        )
        .await;
    assert_eq!(without_id.status, 400, "{}", without_id.text);
    let unknown = detach(&api, "6c1a0a4e-0000-4000-8000-000000000000", &vm, "r-2").await;
    assert_eq!(unknown.status, 404, "{}", unknown.text);
    assert_eq!(
        mock.admin().volume_group(&group).unwrap().attached_vms,
        vec![vm]
    );
}
