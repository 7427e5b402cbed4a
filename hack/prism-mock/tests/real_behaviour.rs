//! Behaviours taken from real Prism Central answers and field reports (the README's "Prism Central as it really
//! answers"): each test names its source.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use base64::Engine as _;
use common::{Api, V3, start, start_with, wait_for};
use prism_mock::{CloneBehaviour, FaultKind, FaultRule, MockConfig, Seed};
use serde_json::{Value, json};

fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

const THREE_HOSTS: &str = r#"
clusters:
  - name: pe-1
  - name: pe-2
hosts:
  - {name: h-1, cluster: pe-1}
  - {name: h-2, cluster: pe-1}
  - {name: h-3, cluster: pe-1}
subnets:
  - {name: net-1, cluster: pe-1, cidr: 10.1.0.0/24, gateway: 10.1.0.1, pool_start: 10.1.0.10, pool_end: 10.1.0.90}
  - {name: net-2, cluster: pe-2, cidr: 10.2.0.0/24, gateway: 10.2.0.1, pool_start: 10.2.0.10, pool_end: 10.2.0.90}
images:
  - {name: img, size_mib: 1024}
"#;

// CAPX #577 (nutanix-cloud-native/cluster-api-provider-nutanix): "the API endpoint does not even support
// pagination".
#[tokio::test]
async fn hosts_list_ignores_offset_and_length() {
    let mock = start_with(MockConfig {
        seed: Seed::from_yaml(THREE_HOSTS).unwrap(),
        ..MockConfig::default()
    })
    .await;
    let api = Api::new(&mock);
    let reply = api
        .post(
            &format!("{V3}/hosts/list"),
            &json!({"kind": "host", "offset": 1, "length": 1}),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.body["entities"].as_array().unwrap().len(), 3);
    assert_eq!(reply.body["metadata"]["total_matches"], 3);
    assert_eq!(reply.body["metadata"]["offset"], 0);
    let clusters = api
        .post(
            &format!("{V3}/clusters/list"),
            &json!({"kind": "cluster", "offset": 1, "length": 1}),
        )
        .await;
    assert_eq!(
        clusters.body["entities"].as_array().unwrap().len(),
        1,
        "other lists still page"
    );
}

fn create_body(pe: &str, subnet: &str, image: &str, resources: Value) -> Value {
    let mut body = json!({"metadata": {"kind": "vm"}, "spec": {"name": "vm-1",
        "cluster_reference": {"kind": "cluster", "uuid": pe},
        "resources": {"disk_list": [{"data_source_reference": {"kind": "image", "uuid": image}, "disk_size_mib": 20480}],
            "nic_list": [{"subnet_reference": {"kind": "subnet", "uuid": subnet}}]}}});
    if let (Some(res), Some(extra)) = (
        body["spec"]["resources"].as_object_mut(),
        resources.as_object(),
    ) {
        for (k, v) in extra {
            res.insert(k.clone(), v.clone());
        }
    }
    body
}

// The v3 schema (prism-go-client v3/swagger.json): `flash_mode` is `ENABLED | DISABLED`, `vm_intent_input`
// requires `metadata` and `spec`, `vm.name` is at most 256 characters; 422 in the shape of `vm_status`.
#[tokio::test]
async fn request_bodies_are_checked_against_the_v3_schema() {
    let mock = start().await;
    let api = Api::new(&mock);
    let s = api.seeded().await;

    let mut on = create_body(&s.pe, &s.subnet, &s.rhcos, json!({}));
    on["spec"]["resources"]["disk_list"][0]["storage_config"] = json!({"flash_mode": "ON"});
    let reply = api.post(&format!("{V3}/vms"), &on).await;
    assert_eq!(reply.status, 422, "{}", reply.text);
    let body = &reply.body;
    assert_eq!(body["api_version"], "3.1");
    assert_eq!(body["code"], 422);
    assert_eq!(body["kind"], "vm");
    assert_eq!(body["state"], "ERROR");
    let message = &body["message_list"][0];
    assert_eq!(message["reason"], "INVALID_REQUEST");
    assert_eq!(message["message"], "Request could not be processed.");
    assert_eq!(
        message["details"]["spec.resources.disk_list[0].storage_config.flash_mode"],
        json!(["\"ON\" is not one of ['ENABLED', 'DISABLED']"])
    );

    let no_metadata = json!({"spec": create_body(&s.pe, &s.subnet, &s.rhcos, json!({}))["spec"]});
    let reply = api.post(&format!("{V3}/vms"), &no_metadata).await;
    assert_eq!(reply.status, 422);
    assert_eq!(
        reply.body["message_list"][0]["details"][""],
        json!(["'metadata' is a required property"])
    );

    let mut accepted = create_body(&s.pe, &s.subnet, &s.rhcos, json!({}));
    accepted["spec"]["name"] = json!("n".repeat(200));
    accepted["spec"]["resources"]["disk_list"][0]["storage_config"] =
        json!({"flash_mode": "DISABLED"});
    accepted["spec"]["resources"]["disk_list"]
        .as_array_mut()
        .unwrap()
        .push(json!({"disk_size_bytes": 4u64 << 30}));
    accepted["spec"]["resources"]["disk_list"]
        .as_array_mut()
        .unwrap()
        .push(json!({"disk_size_bytes": (1u64 << 20) + 1}));
    let reply = api.post(&format!("{V3}/vms"), &accepted).await;
    assert_eq!(reply.status, 202, "{}", reply.text);
    api.wait_task(reply.task_uuid()).await;
    let vm = api.get(&format!("{V3}/vms/{}", reply.uuid())).await.body;
    let data_disk = &vm["spec"]["resources"]["disk_list"][1];
    assert_eq!(
        data_disk["disk_size_mib"], 4096,
        "a disk given only by bytes"
    );
    assert_eq!(data_disk["disk_size_bytes"], 4u64 << 30);
    let odd = &vm["spec"]["resources"]["disk_list"][2];
    assert_eq!(
        (
            odd["disk_size_mib"].as_u64(),
            odd["disk_size_bytes"].as_u64()
        ),
        (Some(2), Some(2 << 20)),
        "a size that is not a whole MiB is rounded up (the mock's choice)"
    );

    let bad_clone = api
        .post(
            &format!("{V3}/vms/{}/clone", reply.uuid()),
            &json!({"override_spec": {"num_sockets": 0, "name": "c".repeat(81)}}),
        )
        .await;
    assert_eq!(bad_clone.status, 422, "{}", bad_clone.text);
    let details = &bad_clone.body["message_list"][0]["details"];
    assert!(details["override_spec.num_sockets"].is_array(), "{details}");
    assert!(details["override_spec.name"].is_array(), "{details}");
}

// nutanix/nutanix.ansible#876 and nutanix/terraform-provider-nutanix#908: Secure Boot with guest
// customization is accepted, then the task fails with VMM-30102 / VM_INVALID_ARGUMENT (the customization
// CD-ROM is IDE, which Secure Boot forbids).
#[tokio::test]
async fn secure_boot_with_guest_customization_fails_its_task_with_vmm_30102() {
    let mock = start().await;
    let api = Api::new(&mock);
    let s = api.seeded().await;
    let body = create_body(
        &s.pe,
        &s.subnet,
        &s.rhcos,
        json!({"machine_type": "Q35", "boot_config": {"boot_type": "SECURE_BOOT"},
            "guest_customization": {"cloud_init": {"user_data": b64("#cloud-config\n")}}}),
    );
    let reply = api.post(&format!("{V3}/vms"), &body).await;
    assert_eq!(reply.status, 202, "accepted, then refused: {}", reply.text);
    let uuid = reply.uuid();
    let task = api.wait_task(reply.task_uuid()).await;
    assert_eq!(task["status"], "FAILED");
    assert_eq!(task["error_code"], "VM_INVALID_ARGUMENT");
    assert!(
        task["error_detail"]
            .as_str()
            .unwrap()
            .starts_with("Failed to perform the operation on the VM"),
        "{task}"
    );
    let v4 = api
        .get(&format!(
            "/api/prism/v4.4/config/tasks/ZXJnb24=:{}",
            reply.task_uuid()
        ))
        .await
        .body;
    let message = &v4["data"]["errorMessages"][0];
    assert_eq!(message["code"], "VMM-30102");
    assert_eq!(message["errorGroup"], "VM_INVALID_ARGUMENT");
    assert_eq!(api.get(&format!("{V3}/vms/{uuid}")).await.status, 404);

    let without = create_body(
        &s.pe,
        &s.subnet,
        &s.rhcos,
        json!({"machine_type": "Q35", "boot_config": {"boot_type": "SECURE_BOOT"}}),
    );
    let reply = api.post(&format!("{V3}/vms"), &without).await;
    assert_eq!(
        api.wait_task(reply.task_uuid()).await["status"],
        "SUCCEEDED",
        "Secure Boot alone is fine"
    );
}

// vm_clone_input (v3 swagger) has no cluster reference: the clone lands on the source's cluster.
#[tokio::test]
async fn clones_land_on_the_source_cluster_and_the_knobs_change_uuid_and_concurrency() {
    let mock = start_with(MockConfig {
        seed: Seed::from_yaml(THREE_HOSTS).unwrap(),
        ..MockConfig::default()
    })
    .await;
    let api = Api::new(&mock);
    let pe_1 = api.uuid_of("cluster", "pe-1").await;
    let pe_2 = api.uuid_of("cluster", "pe-2").await;
    let net_1 = api.uuid_of("subnet", "net-1").await;
    let image = api.uuid_of("image", "img").await;
    let source = api
        .post(
            &format!("{V3}/vms"),
            &create_body(&pe_1, &net_1, &image, json!({})),
        )
        .await;
    api.wait_task(source.task_uuid()).await;
    let source_uuid = source.uuid();
    let clone_path = format!("{V3}/vms/{source_uuid}/clone");

    let reply = api
        .post(
            &clone_path,
            &json!({"override_spec": {"name": "c-1", "cluster_reference": {"kind": "cluster", "uuid": pe_2}}}),
        )
        .await;
    assert_eq!(reply.status, 202, "{}", reply.text);
    let task = api
        .wait_task(reply.body["task_uuid"].as_str().unwrap())
        .await;
    let clone = task["entity_reference_list"][0]["uuid"].as_str().unwrap();
    let vm = api.get(&format!("{V3}/vms/{clone}")).await.body;
    assert_eq!(vm["spec"]["cluster_reference"]["uuid"], pe_1.as_str());

    // Two clones at once are fine by default.
    let a = api
        .post(&clone_path, &json!({"override_spec": {"name": "c-2"}}))
        .await;
    let b = api
        .post(&clone_path, &json!({"override_spec": {"name": "c-3"}}))
        .await;
    assert_eq!((a.status.as_u16(), b.status.as_u16()), (202, 202));
    api.wait_task(a.body["task_uuid"].as_str().unwrap()).await;
    api.wait_task(b.body["task_uuid"].as_str().unwrap()).await;

    mock.admin().set_clone_behaviour(CloneBehaviour {
        ignores_requested_uuid: true,
        concurrent_clones_conflict: true,
    });
    let reserved = api
        .post(
            &format!("{V3}/idempotence_identifiers"),
            &json!({"client_identifier": "c", "count": 1}),
        )
        .await;
    let wanted = reserved.body["uuid_list"][0].as_str().unwrap().to_owned();
    let first = api
        .post(
            &clone_path,
            &json!({"metadata": {"uuid": wanted}, "override_spec": {"name": "c-4"}}),
        )
        .await;
    assert_eq!(first.status, 202, "{}", first.text);
    let second = api
        .post(&clone_path, &json!({"override_spec": {"name": "c-5"}}))
        .await;
    assert_eq!(second.status, 409, "{}", second.text);
    assert_eq!(
        second.body["message_list"][0]["reason"],
        "CONCURRENT_REQUESTS_NOT_ALLOWED"
    );
    let task = api
        .wait_task(first.body["task_uuid"].as_str().unwrap())
        .await;
    let real = task["entity_reference_list"][0]["uuid"].as_str().unwrap();
    assert_ne!(real, wanted, "the clone got a UUID of its own");
    assert_eq!(api.get(&format!("{V3}/vms/{real}")).await.status, 200);
    assert_eq!(api.get(&format!("{V3}/vms/{wanted}")).await.status, 404);
    let after = api
        .post(&clone_path, &json!({"override_spec": {"name": "c-6"}}))
        .await;
    assert_eq!(after.status, 202, "once the clone ended: {}", after.text);
}

// A create whose power-on fails leaves the VM: CAPX #783 (the cause is in a failed subtask).
#[tokio::test]
async fn a_failed_power_on_fails_the_task_and_leaves_the_vm_powered_off() {
    let mock = start().await;
    let api = Api::new(&mock);
    let s = api.seeded().await;
    mock.admin().add_fault(
        FaultRule::new(
            Some("POST"),
            "/api/nutanix/v3/vms",
            FaultKind::FailPowerOn {
                error: "Not enough memory on the host".to_owned(),
            },
        )
        .times(1),
    );
    let reply = api
        .post(
            &format!("{V3}/vms"),
            &s.vm_body("power-fails", &s.rhcos, "ON"),
        )
        .await;
    assert_eq!(reply.status, 202, "{}", reply.text);
    let uuid = reply.uuid();
    let task = api.wait_task(reply.task_uuid()).await;
    assert_eq!(task["status"], "FAILED");
    let sub_uuid = task["subtask_reference_list"][0]["uuid"].as_str().unwrap();
    let sub = api.get(&format!("{V3}/tasks/{sub_uuid}")).await.body;
    assert_eq!(sub["status"], "FAILED");
    assert_eq!(sub["operation_type"], "kVmSetPowerState");
    assert_eq!(sub["error_detail"], "Not enough memory on the host");
    let vm = wait_for(|| async {
        let vm = api.get(&format!("{V3}/vms/{uuid}")).await;
        (vm.status == 200).then_some(vm.body)
    })
    .await;
    assert_eq!(vm["status"]["state"], "COMPLETE", "not in ERROR");
    assert_eq!(vm["status"]["resources"]["power_state"], "OFF");
    assert_eq!(vm["spec"]["resources"]["power_state"], "OFF");
    let listed = api
        .post(
            &format!("{V3}/vms/list"),
            &json!({"kind": "vm", "filter": "vm_name==power-fails"}),
        )
        .await;
    assert_eq!(listed.body["metadata"]["total_matches"], 1);
}

// Nutanix's current SDKs call vmm v4.3 and prism v4.4 (ntnx-vmm-py-client 4.3.2 TemplatesApi,
// ntnx-prism-py-client 4.4.2 TasksApi); their models read `$reserved`/`$objectType` and copy the `ETag` of a
// GET into `If-Match` (the Ansible collection's ntnx_templates_deploy_v2 fails without one).
#[tokio::test]
async fn v4_answers_carry_etag_and_reserved_under_v4_0_and_the_sdk_versions() {
    let mock = start().await;
    let api = Api::new(&mock);
    let s = api.seeded().await;
    for (version, fv) in [("v4.0", "v4.r0"), ("v4.3", "v4.r3")] {
        let list = api
            .get(&format!("/api/vmm/{version}/content/templates"))
            .await;
        assert_eq!(list.status, 200, "{version}: {}", list.text);
        assert_eq!(list.body["$reserved"]["$fv"], fv);
        assert_eq!(
            list.body["$objectType"],
            "vmm.v4.content.ListTemplatesApiResponse"
        );
        let ext_id = list.body["data"][0]["extId"].as_str().unwrap().to_owned();
        let one = api
            .get(&format!("/api/vmm/{version}/content/templates/{ext_id}"))
            .await;
        assert!(
            one.headers.contains_key("etag"),
            "{version}: {:?}",
            one.headers
        );
        assert_eq!(one.body["data"]["$reserved"]["$fv"], fv);
        assert_eq!(one.body["data"]["$objectType"], "vmm.v4.content.Template");
    }
    let ext_id = api.get("/api/vmm/v4.3/content/templates").await.body["data"][0]["extId"]
        .as_str()
        .unwrap()
        .to_owned();
    let deploy = api
        .call(
            reqwest::Method::POST,
            &format!("/api/vmm/v4.3/content/templates/{ext_id}/$actions/deploy"),
            Some(&json!({"numberOfVms": 1, "clusterReference": s.pe})),
            &[("NTNX-Request-Id", "sdk-version-1")],
        )
        .await;
    assert_eq!(deploy.status, 202, "{}", deploy.text);
    let task_id = deploy.body["data"]["extId"].as_str().unwrap();
    let task = api
        .get(&format!("/api/prism/v4.4/config/tasks/{task_id}"))
        .await;
    assert_eq!(task.status, 200, "{}", task.text);
    assert!(task.headers.contains_key("etag"));
    assert_eq!(task.body["data"]["$reserved"]["$fv"], "v4.r4");
    assert_eq!(task.body["data"]["$objectType"], "prism.v4.config.Task");
    let href = task.body["data"]["subTasks"][0]["href"].as_str().unwrap();
    assert!(href.contains("/api/prism/v4.4/config/tasks/"), "{href}");
}
