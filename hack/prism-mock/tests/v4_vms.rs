//! A VM's v4 GET and PUT (`/api/vmm/{v4.0,v4.3}/ahv/config/vms/{extId}`): the read-then-update flow of Nutanix's
//! own clients (ntnx-vmm-py-client `VmApi`, prism-go-client `converged/v4/vms.go` `UpdateAsync`), the GET's ETag
//! sent back as `If-Match`. The SDKs themselves run this flow in sdk-check/run.sh.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use common::{Api, V3, start};
use reqwest::Method;
use serde_json::{Value, json};

async fn created_vm(api: &Api) -> String {
    let seeded = api.seeded().await;
    let created = api
        .post(
            &format!("{V3}/vms"),
            &seeded.vm_body("v4-vm", &seeded.rhcos, "OFF"),
        )
        .await;
    assert_eq!(created.status, 202, "{}", created.text);
    let task = api.wait_task(created.task_uuid()).await;
    assert_eq!(task["status"], "SUCCEEDED", "{task}");
    created.uuid()
}

fn etag(reply: &common::Reply) -> String {
    reply
        .headers
        .get("etag")
        .expect("a v4 GET of one entity carries an ETag")
        .to_str()
        .unwrap()
        .to_owned()
}

async fn put(api: &Api, path: &str, body: &Value, if_match: Option<&str>) -> common::Reply {
    let headers: Vec<(&str, &str)> = if_match.map(|e| ("If-Match", e)).into_iter().collect();
    api.call(Method::PUT, path, Some(body), &headers).await
}

// ntnx-vmm-py-client's ApiClient copies the ETag header into `data.$reserved` only when `data` has a `$reserved`
// (`__add_header_to_reserved`), which is where `get_etag` finds it.
#[tokio::test]
async fn a_vms_v4_get_has_the_vm_model_its_reserved_and_an_etag() {
    let mock = start().await;
    let api = Api::new(&mock);
    let vm = created_vm(&api).await;
    for (version, fv) in [("v4.0", "v4.r0"), ("v4.3", "v4.r3")] {
        let reply = api
            .get(&format!("/api/vmm/{version}/ahv/config/vms/{vm}"))
            .await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        assert!(etag(&reply).starts_with('"'), "{:?}", reply.headers);
        let data = &reply.body["data"];
        assert_eq!(
            reply.body["$objectType"],
            "vmm.v4.ahv.config.GetVmApiResponse"
        );
        assert_eq!(data["$objectType"], "vmm.v4.ahv.config.Vm");
        assert_eq!(data["$reserved"], json!({"$fv": fv}));
        assert_eq!(data["extId"], vm.as_str());
        assert_eq!(data["name"], "v4-vm");
        assert_eq!(data["numSockets"], 2);
        assert_eq!(data["memorySizeBytes"], 8192_u64 << 20);
        assert_eq!(data["powerState"], "OFF");
    }
    let missing = api
        .get("/api/vmm/v4.0/ahv/config/vms/00000000-0000-0000-0000-000000000000")
        .await;
    assert_eq!(missing.status, 404, "{}", missing.text);
    assert_eq!(missing.body["data"]["error"][0]["code"], "VMM-20404");
}

// The read-then-update flow: prism-go-client converged/v4/vms.go UpdateAsync; the refusals of a missing and of a
// stale If-Match: nutanix/terraform-provider-nutanix#1231 (PLAT-10004 MISSING_ETAG_HEADER), nutanix/nutanix.ansible#706
// (412 PLAT-10005 "Invalid eTag header"), terraform-provider-nutanix#1089 (the ETag moves when the VM changes).
#[tokio::test]
async fn a_vms_v4_update_takes_the_etag_of_its_read_and_refuses_a_missing_or_stale_one() {
    let mock = start().await;
    let api = Api::new(&mock);
    let vm = created_vm(&api).await;
    let path = format!("/api/vmm/v4.0/ahv/config/vms/{vm}");
    let read = api.get(&path).await;
    let before = etag(&read);
    let mut body = read.body["data"].clone();
    body["name"] = json!("v4-vm-renamed");
    body["numSockets"] = json!(4);

    let missing = put(&api, &path, &body, None).await;
    assert_eq!(missing.status, 428, "{}", missing.text);
    assert_eq!(missing.body["data"]["error"][0]["code"], "PLAT-10004");
    let wrong = put(&api, &path, &body, Some("\"not-the-etag\"")).await;
    assert_eq!(wrong.status, 412, "{}", wrong.text);
    assert_eq!(wrong.body["data"]["error"][0]["code"], "PLAT-10005");
    assert_eq!(
        api.get(&path).await.body["data"]["name"],
        "v4-vm",
        "a refused update changes nothing"
    );

    let accepted = put(&api, &path, &body, Some(&before)).await;
    assert_eq!(accepted.status, 202, "{}", accepted.text);
    assert_eq!(
        accepted.body["$objectType"],
        "vmm.v4.ahv.config.UpdateVmApiResponse"
    );
    let task = accepted.body["data"]["extId"].as_str().unwrap();
    assert_eq!(
        accepted.body["data"]["$objectType"],
        "prism.v4.config.TaskReference"
    );
    let task = api
        .wait_task(task.rsplit_once(':').map_or(task, |(_, u)| u))
        .await;
    assert_eq!(task["status"], "SUCCEEDED", "{task}");
    let after = api.get(&path).await;
    assert_eq!(after.body["data"]["name"], "v4-vm-renamed");
    assert_eq!(after.body["data"]["numSockets"], 4);
    assert_ne!(etag(&after), before, "the changed VM has a new ETag");
    let v3 = api.get(&format!("{V3}/vms/{vm}")).await;
    assert_eq!(v3.body["spec"]["name"], "v4-vm-renamed");
    assert_eq!(v3.body["spec"]["resources"]["num_sockets"], 4);

    let stale = put(&api, &path, &body, Some(&before)).await;
    assert_eq!(stale.status, 412, "{}", stale.text);
    let bad = put(
        &api,
        &path,
        &json!({"memorySizeBytes": 1000}),
        Some(&etag(&after)),
    )
    .await;
    assert_eq!(bad.status, 400, "{}", bad.text);
}
