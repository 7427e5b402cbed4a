//! VM behaviour over HTTPS: tasks, list lag, defaults, errors, idempotence, update, delete, clone, addresses.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use base64::Engine as _;
use common::{Api, V3, start, start_with, wait_for};
use prism_mock::{GuestBehaviour, MockConfig, Seed, Timings};
use serde_json::{Value, json};

fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

async fn listed_names(api: &Api, filter: &str) -> Vec<String> {
    let reply = api
        .post(
            &format!("{V3}/vms/list"),
            &json!({"kind": "vm", "filter": filter, "length": 500}),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    reply.body["entities"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["spec"]["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn create_goes_through_queued_running_succeeded_and_is_listed_only_after_its_task() {
    let mock = start().await;
    let api = Api::new(&mock);
    let seeded = api.seeded().await;
    mock.admin().set_timings(Timings {
        task_queued_ms: 2000,
        task_running_ms: 2000,
        boot_to_address_ms: 10,
    });

    let reply = api
        .post(
            &format!("{V3}/vms"),
            &seeded.vm_body("lag-vm", &seeded.rhcos, "OFF"),
        )
        .await;
    assert_eq!(reply.status, 202, "{}", reply.text);
    assert_eq!(reply.body["status"]["state"], "PENDING");
    let task = reply.body["status"]["execution_context"]["task_uuid"]
        .as_str()
        .expect("task_uuid is a string on create")
        .to_owned();
    let uuid = reply.uuid();
    assert_eq!(reply.body["metadata"]["spec_version"], 0);

    let task_reply = api.get(&format!("{V3}/tasks/{task}")).await;
    assert_eq!(task_reply.body["status"], "QUEUED");
    assert_eq!(
        task_reply.body["entity_reference_list"][0]["uuid"],
        uuid.as_str()
    );
    let vm = api.get(&format!("{V3}/vms/{uuid}")).await;
    assert_eq!(vm.status, 200);
    assert_eq!(vm.body["status"]["state"], "PENDING");
    assert_eq!(
        vm.body["status"]["execution_context"]["task_uuid"],
        json!([task]),
        "task_uuid is a list on GET"
    );
    assert!(
        listed_names(&api, "vm_name==lag-vm").await.is_empty(),
        "a VM whose create task runs is not listed"
    );

    wait_for(|| async {
        let t = api.get(&format!("{V3}/tasks/{task}")).await;
        (t.body["status"] == "RUNNING").then_some(())
    })
    .await;
    assert!(listed_names(&api, "vm_name==lag-vm").await.is_empty());
    let done = api.wait_task(&task).await;
    assert_eq!(done["status"], "SUCCEEDED");
    assert_eq!(done["percentage_complete"], 100);
    assert!(done["completion_time"].is_string());
    assert_eq!(listed_names(&api, "vm_name==lag-vm").await, vec!["lag-vm"]);

    let vm = api.get(&format!("{V3}/vms/{uuid}")).await.body;
    assert_eq!(vm["status"]["state"], "COMPLETE");
    let res = &vm["spec"]["resources"];
    assert_eq!(res["num_threads_per_core"], 1, "server default filled");
    assert_eq!(res["machine_type"], "PC");
    assert_eq!(res["power_state_mechanism"]["mechanism"], "HARD");
    assert_eq!(res["boot_config"]["boot_type"], "LEGACY");
    assert_eq!(res["disk_list"][0]["disk_size_bytes"], 122880u64 << 20);
    assert!(res["disk_list"][0]["uuid"].is_string());
    assert_eq!(
        res["disk_list"][0]["device_properties"]["disk_address"],
        json!({"adapter_type": "SCSI", "device_index": 0})
    );
    assert!(
        res["nic_list"][0]["mac_address"]
            .as_str()
            .unwrap()
            .starts_with("50:6b:8d:")
    );
    assert_eq!(res["nic_list"][0]["nic_type"], "NORMAL_NIC");
    assert_eq!(vm["status"]["cluster_reference"]["name"], "pe-1");
    assert_eq!(vm["metadata"]["spec_version"], 0);
}

#[tokio::test]
async fn with_a_list_lag_a_created_vm_is_listed_only_that_long_after_its_task() {
    let mock = start().await;
    let api = Api::new(&mock);
    let seeded = api.seeded().await;
    mock.admin().set_timings(Timings {
        task_queued_ms: 10,
        task_running_ms: 10,
        boot_to_address_ms: 10,
    });
    mock.admin()
        .set_list_lag(std::time::Duration::from_millis(1500));
    let uuid = create_and_wait(&api, &seeded.vm_body("lagged", &seeded.rhcos, "OFF")).await;
    assert!(
        listed_names(&api, "vm_name==lagged").await.is_empty(),
        "the task ended, the list does not show the VM yet"
    );
    let vm = api.get(&format!("{V3}/vms/{uuid}")).await;
    assert_eq!(vm.body["status"]["state"], "COMPLETE", "a GET sees it");
    wait_for(|| async {
        (listed_names(&api, "vm_name==lagged").await == vec!["lagged"]).then_some(())
    })
    .await;
}

#[tokio::test]
async fn lists_page_with_a_default_of_twenty_and_filter_partially() {
    let mock = start().await;
    let api = Api::new(&mock);
    let seeded = api.seeded().await;
    let mut tasks = Vec::new();
    for i in 0..25 {
        let reply = api
            .post(
                &format!("{V3}/vms"),
                &seeded.vm_body(&format!("page-vm-{i:02}"), &seeded.rhcos, "OFF"),
            )
            .await;
        assert_eq!(reply.status, 202, "{}", reply.text);
        tasks.push(reply.task_uuid().to_owned());
    }
    for task in &tasks {
        api.wait_task(task).await;
    }
    let first = api
        .post(&format!("{V3}/vms/list"), &json!({"kind": "vm"}))
        .await
        .body;
    assert_eq!(
        first["entities"].as_array().unwrap().len(),
        20,
        "default page size is 20"
    );
    assert_eq!(
        first["metadata"]["total_matches"], 26,
        "25 created + the seeded source VM"
    );
    assert_eq!(first["metadata"]["length"], 20);
    let rest = api
        .post(
            &format!("{V3}/vms/list"),
            &json!({"kind": "vm", "offset": 20, "length": 100}),
        )
        .await
        .body;
    assert_eq!(rest["entities"].as_array().unwrap().len(), 6);

    let mut partial = listed_names(&api, "vm_name==page-vm-1").await;
    partial.sort();
    let expected: Vec<String> = (10..20).map(|i| format!("page-vm-{i}")).collect();
    assert_eq!(
        partial, expected,
        "== matches partially, as real Prism's filter does"
    );

    let sorted = api
        .post(&format!("{V3}/vms/list"), &json!({"kind": "vm", "filter": "name==page-vm", "sort_attribute": "name", "sort_order": "DESCENDING", "length": 3}))
        .await
        .body;
    let names: Vec<&str> = sorted["entities"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["spec"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["page-vm-24", "page-vm-23", "page-vm-22"]);

    let too_long = api
        .post(
            &format!("{V3}/vms/list"),
            &json!({"kind": "vm", "length": 501}),
        )
        .await;
    assert_eq!(too_long.status, 422);
    assert_eq!(
        too_long.body["message_list"][0]["reason"],
        "INVALID_REQUEST"
    );
    assert!(too_long.body["message_list"][0]["details"]["length"].is_array());
}

const TWO_CLUSTER_SEED: &str = r#"
clusters:
  - name: pe-a
  - name: pe-b
subnets:
  - {name: net-a, cluster: pe-a, cidr: 10.1.0.0/24, gateway: 10.1.0.1, pool_start: 10.1.0.10, pool_end: 10.1.0.20}
  - {name: net-b, cluster: pe-b, cidr: 10.2.0.0/24, gateway: 10.2.0.1, pool_start: 10.2.0.10, pool_end: 10.2.0.11}
images:
  - {name: img, size_mib: 1024}
categories:
  - {key: Team, values: [blue]}
"#;

#[tokio::test]
async fn errors_have_the_shapes_and_codes_real_prism_uses() {
    let seed = Seed::from_yaml(TWO_CLUSTER_SEED).unwrap();
    let mock = start_with(MockConfig {
        seed,
        ..MockConfig::default()
    })
    .await;
    let api = Api::new(&mock);
    let pe_a = api.uuid_of("cluster", "pe-a").await;
    let net_a = api.uuid_of("subnet", "net-a").await;
    let net_b = api.uuid_of("subnet", "net-b").await;
    let image = api.uuid_of("image", "img").await;

    let missing = api
        .get(&format!("{V3}/vms/00000000-0000-4000-8000-000000000000"))
        .await;
    assert_eq!(missing.status, 404);
    assert_eq!(missing.body["api_version"], "3.1");
    assert_eq!(missing.body["code"], 404);
    assert_eq!(missing.body["kind"], "vm");
    assert_eq!(missing.body["state"], "ERROR");
    assert_eq!(
        missing.body["message_list"][0]["reason"],
        "ENTITY_NOT_FOUND"
    );
    assert_eq!(api.get(&format!("{V3}/tasks/nope")).await.status, 404);
    assert_eq!(
        api.get(&format!("{V3}/images/nope")).await.body["message_list"][0]["reason"],
        "ENTITY_NOT_FOUND"
    );

    let body = |resources: Value| json!({"metadata": {"kind": "vm"}, "spec": {"name": "bad", "cluster_reference": {"kind": "cluster", "uuid": pe_a}, "resources": resources}});
    let disk =
        json!([{"data_source_reference": {"kind": "image", "uuid": image}, "disk_size_mib": 2048}]);
    let cases = [
        (
            "unknown image",
            body(
                json!({"disk_list": [{"data_source_reference": {"kind": "image", "uuid": "nope"}}]}),
            ),
            "spec.resources.disk_list[0].data_source_reference.uuid",
        ),
        (
            "subnet on another PE",
            body(
                json!({"disk_list": disk, "nic_list": [{"subnet_reference": {"kind": "subnet", "uuid": net_b}}]}),
            ),
            "spec.resources.nic_list[0].subnet_reference.uuid",
        ),
        (
            "secure boot without Q35",
            body(json!({"disk_list": disk, "boot_config": {"boot_type": "SECURE_BOOT"}})),
            "spec.resources.machine_type",
        ),
        (
            "cloud_init and sysprep",
            body(
                json!({"disk_list": disk, "guest_customization": {"cloud_init": {"user_data": b64("#cloud-config")}, "sysprep": {"unattend_xml": b64("<x/>")}}}),
            ),
            "spec.resources.guest_customization",
        ),
        (
            "memory out of range",
            body(json!({"disk_list": disk, "memory_size_mib": 0})),
            "spec.resources.memory_size_mib",
        ),
        (
            "disk smaller than image",
            body(
                json!({"disk_list": [{"data_source_reference": {"kind": "image", "uuid": image}, "disk_size_mib": 10}]}),
            ),
            "spec.resources.disk_list[0].disk_size_mib",
        ),
        (
            "vTPM on Legacy BIOS (AHV's default)",
            body(json!({"disk_list": disk, "vtpm_config": {"vtpm_enabled": true}})),
            "spec.resources.vtpm_config.vtpm_enabled",
        ),
        (
            "vTPM flag not a boolean",
            body(
                json!({"disk_list": disk, "boot_config": {"boot_type": "UEFI"}, "vtpm_config": {"vtpm_enabled": "yes"}}),
            ),
            "spec.resources.vtpm_config.vtpm_enabled",
        ),
        (
            "user data too long",
            body(
                json!({"disk_list": disk, "guest_customization": {"cloud_init": {"user_data": "A".repeat(128_004)}}}),
            ),
            "spec.resources.guest_customization.cloud_init.user_data",
        ),
    ];
    for (what, request, field) in cases {
        let reply = api.post(&format!("{V3}/vms"), &request).await;
        assert_eq!(reply.status, 422, "{what}: {}", reply.text);
        assert_eq!(
            reply.body["message_list"][0]["reason"], "INVALID_REQUEST",
            "{what}"
        );
        assert!(
            reply.body["message_list"][0]["details"][field].is_array(),
            "{what}: details name {field}: {}",
            reply.text
        );
    }
    let unknown_category = json!({"metadata": {"kind": "vm", "categories": {"Team": "red"}}, "spec": body(json!({"disk_list": disk}))["spec"]});
    assert_eq!(
        api.post(&format!("{V3}/vms"), &unknown_category)
            .await
            .status,
        422
    );
    let bad_json = api
        .client
        .post(format!("{}{V3}/vms", api.base))
        .basic_auth(&api.user, Some(&api.password))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(bad_json.status(), 422);

    // Guest customization is create-only; a newer spec_version than the VM's is accepted (the recorded PUT of
    // update_vm.json sent 1 to a VM at 0); a stale one conflicts (see the PUT test).
    let good = json!({"metadata": {"kind": "vm", "categories": {"Team": "blue"}}, "spec": {"name": "good", "cluster_reference": {"kind": "cluster", "uuid": pe_a},
        "resources": {"disk_list": disk, "nic_list": [{"subnet_reference": {"kind": "subnet", "uuid": net_a}}],
            "guest_customization": {"cloud_init": {"user_data": b64("#cloud-config\n")}}}}});
    let created = api.post(&format!("{V3}/vms"), &good).await;
    assert_eq!(created.status, 202, "{}", created.text);
    let uuid = created.uuid();
    api.wait_task(created.task_uuid()).await;
    let vm = api.get(&format!("{V3}/vms/{uuid}")).await.body;
    assert_eq!(
        vm["metadata"]["categories_mapping"],
        json!({"Team": ["blue"]}),
        "categories are mirrored"
    );
    let mut changed = json!({"metadata": vm["metadata"], "spec": vm["spec"]});
    changed["spec"]["resources"]["guest_customization"]["cloud_init"]["user_data"] =
        json!(b64("#cloud-config\nchanged"));
    let reply = api.put(&format!("{V3}/vms/{uuid}"), &changed).await;
    assert_eq!(reply.status, 422, "{}", reply.text);
    assert!(
        reply.body["message_list"][0]["details"]["spec.resources.guest_customization"].is_array()
    );
    let mut newer = json!({"metadata": vm["metadata"], "spec": vm["spec"]});
    newer["metadata"]["spec_version"] = json!(7);
    let reply = api.put(&format!("{V3}/vms/{uuid}"), &newer).await;
    assert_eq!(reply.status, 202, "{}", reply.text);
    assert_eq!(
        reply.body["metadata"]["spec_version"], 0,
        "the answer names the version the update applies to"
    );
}

#[tokio::test]
async fn reserved_uuids_are_used_and_a_duplicate_uuid_conflicts() {
    let mock = start().await;
    let api = Api::new(&mock);
    let seeded = api.seeded().await;
    let reserved = api
        .post(
            &format!("{V3}/idempotence_identifiers"),
            &json!({"client_identifier": "machine-1", "count": 2, "valid_duration_in_minutes": 60}),
        )
        .await;
    assert_eq!(reserved.status, 200, "{}", reserved.text);
    let uuids: Vec<String> = reserved.body["uuid_list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(uuids.len(), 2);
    assert!(reserved.body["expiration_time"].is_string());
    let again = api
        .post(
            &format!("{V3}/idempotence_identifiers"),
            &json!({"client_identifier": "machine-1", "count": 2}),
        )
        .await;
    assert_eq!(
        again.body["uuid_list"], reserved.body["uuid_list"],
        "a repeated reservation returns the same UUIDs"
    );
    assert_eq!(
        api.get(&format!("{V3}/idempotence_identifiers/machine-1"))
            .await
            .body["uuid_list"],
        reserved.body["uuid_list"]
    );

    let mut body = seeded.vm_body("reserved-vm", &seeded.rhcos, "OFF");
    body["metadata"]["uuid"] = json!(uuids[0]);
    let created = api.post(&format!("{V3}/vms"), &body).await;
    assert_eq!(created.status, 202, "{}", created.text);
    assert_eq!(created.body["metadata"]["uuid"], uuids[0].as_str());
    let duplicate = api.post(&format!("{V3}/vms"), &body).await;
    assert_eq!(duplicate.status, 409, "{}", duplicate.text);
    assert_eq!(
        duplicate.body["message_list"][0]["reason"],
        "ENTITY_ALREADY_EXISTS"
    );

    body["metadata"]["uuid"] = json!("11111111-2222-4333-8444-555555555555");
    let unreserved = api.post(&format!("{V3}/vms"), &body).await;
    assert_eq!(unreserved.status, 422, "{}", unreserved.text);
    assert!(unreserved.body["message_list"][0]["details"]["metadata.uuid"].is_array());

    let bad = api
        .post(
            &format!("{V3}/idempotence_identifiers"),
            &json!({"client_identifier": "x", "count": 5000}),
        )
        .await;
    assert_eq!(bad.status, 422);
    assert_eq!(
        api.delete(&format!("{V3}/idempotence_identifiers/machine-1"))
            .await
            .status,
        200
    );
    assert_eq!(
        api.get(&format!("{V3}/idempotence_identifiers/machine-1"))
            .await
            .status,
        404
    );
    body["metadata"]["uuid"] = json!(uuids[1]);
    assert_eq!(
        api.post(&format!("{V3}/vms"), &body).await.status,
        422,
        "a released reservation no longer allows the UUID"
    );
}

async fn create_and_wait(api: &Api, body: &Value) -> String {
    let created = api.post(&format!("{V3}/vms"), body).await;
    assert_eq!(created.status, 202, "{}", created.text);
    let task = api.wait_task(created.task_uuid()).await;
    assert_eq!(task["status"], "SUCCEEDED", "{task}");
    created.uuid()
}

async fn addresses(api: &Api, uuid: &str) -> Vec<(String, String)> {
    let vm = api.get(&format!("{V3}/vms/{uuid}")).await.body;
    vm["status"]["resources"]["nic_list"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|nic| {
            nic["ip_endpoint_list"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .map(|ep| {
            (
                ep["ip"].as_str().unwrap().to_owned(),
                ep["type"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn put_changes_power_and_grows_disks_and_moves_spec_version() {
    let mock = start().await;
    let api = Api::new(&mock);
    let seeded = api.seeded().await;
    let uuid = create_and_wait(&api, &seeded.vm_body("resize-vm", &seeded.rhcos, "ON")).await;
    let ips = wait_for(|| async {
        let a = addresses(&api, &uuid).await;
        (!a.is_empty()).then_some(a)
    })
    .await;
    assert_eq!(ips[0].1, "LEARNED");
    assert!(ips[0].0.starts_with("10.40."), "{ips:?}");

    let vm = api.get(&format!("{V3}/vms/{uuid}")).await.body;
    assert_eq!(vm["status"]["resources"]["power_state"], "ON");
    let mut update = json!({"api_version": "3.1", "metadata": vm["metadata"], "spec": vm["spec"]});
    update["spec"]["resources"]["power_state"] = json!("OFF");
    update["spec"]["resources"]["disk_list"][0]["disk_size_mib"] = json!(204800);
    update["spec"]["resources"]["disk_list"][0]
        .as_object_mut()
        .unwrap()
        .remove("disk_size_bytes");
    let reply = api.put(&format!("{V3}/vms/{uuid}"), &update).await;
    assert_eq!(reply.status, 202, "{}", reply.text);
    assert_eq!(reply.body["status"]["state"], "PENDING");
    assert_eq!(
        reply.body["metadata"]["spec_version"], 0,
        "as recorded (update_vm.json): the version the update was applied to"
    );
    api.wait_task(reply.task_uuid()).await;
    let vm = api.get(&format!("{V3}/vms/{uuid}")).await.body;
    assert_eq!(vm["metadata"]["spec_version"], 1);
    assert_eq!(vm["status"]["resources"]["power_state"], "OFF");
    assert_eq!(
        vm["spec"]["resources"]["disk_list"][0]["disk_size_bytes"],
        204800u64 << 20
    );
    assert!(
        addresses(&api, &uuid).await.is_empty(),
        "a powered-off guest reports no address"
    );

    let mut shrink = json!({"metadata": vm["metadata"], "spec": vm["spec"]});
    shrink["spec"]["resources"]["disk_list"][0]["disk_size_mib"] = json!(1024);
    shrink["spec"]["resources"]["disk_list"][0]
        .as_object_mut()
        .unwrap()
        .remove("disk_size_bytes");
    assert_eq!(
        api.put(&format!("{V3}/vms/{uuid}"), &shrink).await.status,
        422
    );

    // Power on again, then an out-of-band power off makes the client's spec_version stale.
    let mut on = json!({"metadata": vm["metadata"], "spec": vm["spec"]});
    on["spec"]["resources"]["power_state"] = json!("ON");
    let reply = api.put(&format!("{V3}/vms/{uuid}"), &on).await;
    assert_eq!(reply.status, 202, "{}", reply.text);
    api.wait_task(reply.task_uuid()).await;
    let again = wait_for(|| async {
        let a = addresses(&api, &uuid).await;
        (!a.is_empty()).then_some(a)
    })
    .await;
    assert_eq!(
        again, ips,
        "the NIC keeps its pool address across a power cycle"
    );
    let vm = api.get(&format!("{V3}/vms/{uuid}")).await.body;
    assert!(mock.admin().power_off_out_of_band(&uuid));
    let stale = json!({"metadata": vm["metadata"], "spec": vm["spec"]});
    let reply = api.put(&format!("{V3}/vms/{uuid}"), &stale).await;
    assert_eq!(reply.status, 409, "{}", reply.text);
    assert_eq!(
        reply.body["message_list"][0]["reason"],
        "CONCURRENT_REQUESTS_NOT_ALLOWED"
    );
    let fresh = api.get(&format!("{V3}/vms/{uuid}")).await.body;
    assert_eq!(
        fresh["metadata"]["spec_version"],
        vm["metadata"]["spec_version"].as_u64().unwrap() + 1
    );
    assert_eq!(fresh["status"]["resources"]["power_state"], "OFF");
}

#[tokio::test]
async fn delete_passes_through_delete_pending_then_404_and_frees_the_address() {
    let mock = start().await;
    let api = Api::new(&mock);
    let seeded = api.seeded().await;
    let uuid = create_and_wait(&api, &seeded.vm_body("doomed", &seeded.rhcos, "OFF")).await;
    assert_eq!(
        mock.admin().subnet_addresses_in_use(&seeded.subnet).len(),
        2,
        "the seeded VM's and this one's"
    );
    mock.admin().set_timings(Timings {
        task_queued_ms: 1500,
        task_running_ms: 1500,
        boot_to_address_ms: 10,
    });
    let reply = api.delete(&format!("{V3}/vms/{uuid}")).await;
    assert_eq!(reply.status, 202, "{}", reply.text);
    assert_eq!(reply.body["status"]["state"], "DELETE_PENDING");
    let task = reply.task_uuid().to_owned();
    assert_eq!(
        api.get(&format!("{V3}/vms/{uuid}")).await.body["status"]["state"],
        "DELETE_PENDING"
    );
    let repeated = api.delete(&format!("{V3}/vms/{uuid}")).await;
    assert_eq!(
        repeated.body["status"]["execution_context"]["task_uuid"],
        task.as_str(),
        "a repeated DELETE returns the same task"
    );
    assert_eq!(api.wait_task(&task).await["status"], "SUCCEEDED");
    let gone = api.get(&format!("{V3}/vms/{uuid}")).await;
    assert_eq!(gone.status, 404);
    assert_eq!(gone.body["message_list"][0]["reason"], "ENTITY_NOT_FOUND");
    assert_eq!(
        mock.admin().subnet_addresses_in_use(&seeded.subnet).len(),
        1
    );
    assert_eq!(api.delete(&format!("{V3}/vms/{uuid}")).await.status, 404);
}

#[tokio::test]
async fn clone_takes_the_source_disks_and_the_overrides() {
    let mock = start().await;
    let api = Api::new(&mock);
    let seeded = api.seeded().await;
    let source = mock
        .admin()
        .vms()
        .into_iter()
        .find(|v| v.name == "windows-golden")
        .unwrap();
    let source_vm = api.get(&format!("{V3}/vms/{}", source.uuid)).await.body;
    let unattend = "<unattend><settings pass=\"specialize\"><ComputerName>win-1</ComputerName></settings></unattend>";
    let reserved = api
        .post(
            &format!("{V3}/idempotence_identifiers"),
            &json!({"client_identifier": "win-1", "count": 1}),
        )
        .await;
    let new_uuid = reserved.body["uuid_list"][0].as_str().unwrap().to_owned();
    let clone = json!({
        "metadata": {"uuid": new_uuid},
        "override_spec": {
            "name": "win-1",
            "num_sockets": 4,
            "memory_size_mib": 16384,
            "nic_list": [{"subnet_reference": {"kind": "subnet", "uuid": seeded.subnet}}],
            "guest_customization": {"sysprep": {"install_type": "PREPARED", "unattend_xml": b64(unattend)}},
        },
    });
    let reply = api
        .post(&format!("{V3}/vms/{}/clone", source.uuid), &clone)
        .await;
    assert_eq!(reply.status, 202, "{}", reply.text);
    let task = api
        .wait_task(reply.body["task_uuid"].as_str().unwrap())
        .await;
    assert_eq!(task["status"], "SUCCEEDED");
    assert_eq!(task["operation_type"], "kVmClone");
    assert_eq!(task["entity_reference_list"][0]["uuid"], new_uuid.as_str());
    let vm = api.get(&format!("{V3}/vms/{new_uuid}")).await.body;
    assert_eq!(vm["spec"]["name"], "win-1");
    assert_eq!(vm["spec"]["resources"]["num_sockets"], 4);
    assert_eq!(vm["spec"]["resources"]["memory_size_mib"], 16384);
    assert_eq!(
        vm["spec"]["resources"]["disk_list"][0]["data_source_reference"],
        source_vm["spec"]["resources"]["disk_list"][0]["data_source_reference"]
    );
    assert_ne!(
        vm["spec"]["resources"]["disk_list"][0]["uuid"],
        source_vm["spec"]["resources"]["disk_list"][0]["uuid"]
    );
    assert_eq!(vm["spec"]["resources"]["boot_config"]["boot_type"], "UEFI");
    assert_eq!(
        vm["status"]["resources"]["power_state"], "OFF",
        "clones come up powered off"
    );
    let gc = mock.admin().guest_customization(&new_uuid).unwrap();
    assert_eq!(gc.kind, "sysprep");
    assert_eq!(gc.unattend_xml.as_deref(), Some(unattend));
    assert_eq!(
        api.post(&format!("{V3}/vms/{}/clone", source.uuid), &clone)
            .await
            .status,
        409,
        "the reserved UUID is taken now"
    );
    assert_eq!(
        api.post(&format!("{V3}/vms/nope/clone"), &json!({}))
            .await
            .status,
        404
    );
}

#[tokio::test]
async fn addresses_appear_after_boot_learned_or_assigned() {
    let mock = start().await;
    let api = Api::new(&mock);
    let seeded = api.seeded().await;
    mock.admin().set_timings(Timings {
        task_queued_ms: 5,
        task_running_ms: 5,
        boot_to_address_ms: 1500,
    });
    let mut assigned = seeded.vm_body("assigned-vm", &seeded.rhcos, "ON");
    assigned["spec"]["resources"]["nic_list"][0]["ip_endpoint_list"] =
        json!([{"ip": "10.40.0.50", "type": "ASSIGNED"}]);
    let uuid = create_and_wait(&api, &assigned).await;
    assert!(
        addresses(&api, &uuid).await.is_empty(),
        "no address right after power-on"
    );
    let ips = wait_for(|| async {
        let a = addresses(&api, &uuid).await;
        (!a.is_empty()).then_some(a)
    })
    .await;
    assert_eq!(ips, vec![("10.40.0.50".to_owned(), "ASSIGNED".to_owned())]);
    let mut clash = seeded.vm_body("clash-vm", &seeded.rhcos, "ON");
    clash["spec"]["resources"]["nic_list"][0]["ip_endpoint_list"] = json!([{"ip": "10.40.0.50"}]);
    assert_eq!(
        api.post(&format!("{V3}/vms"), &clash).await.status,
        422,
        "an address in use is refused"
    );
}

#[tokio::test]
async fn windows_guests_misbehave_as_in_the_field_when_asked() {
    let mock = start().await;
    let api = Api::new(&mock);
    let seeded = api.seeded().await;
    mock.admin().set_timings(Timings {
        task_queued_ms: 5,
        task_running_ms: 5,
        boot_to_address_ms: 20,
    });
    mock.admin().set_guest_behaviour(GuestBehaviour {
        apipa_first_ms: Some(1500),
        hybrid_overlay_after_ms: Some(1500),
        no_address_ms: 0,
        ..GuestBehaviour::default()
    });
    let uuid = create_and_wait(&api, &seeded.vm_body("win-vm", &seeded.windows, "ON")).await;
    let first = wait_for(|| async {
        let a = addresses(&api, &uuid).await;
        (!a.is_empty()).then_some(a)
    })
    .await;
    assert_eq!(first.len(), 1);
    assert!(first[0].0.starts_with("169.254."), "APIPA first: {first:?}");
    let real = wait_for(|| async {
        let a = addresses(&api, &uuid).await;
        (!a[0].0.starts_with("169.254.")).then_some(a)
    })
    .await;
    assert!(real[0].0.starts_with("10.40."), "{real:?}");
    let with_overlay = wait_for(|| async {
        let a = addresses(&api, &uuid).await;
        (a.len() == 2).then_some(a)
    })
    .await;
    assert_eq!(with_overlay[0], real[0], "the pool address stays first");
    assert!(
        with_overlay[1].0.starts_with("10.13"),
        "hybrid-overlay address from 10.132.0.0/14: {with_overlay:?}"
    );

    // Linux guests are not affected by the Windows misbehaviours; "no address for a while" applies to all.
    mock.admin().set_guest_behaviour(GuestBehaviour {
        no_address_ms: 1500,
        ..GuestBehaviour::default()
    });
    let linux = create_and_wait(&api, &seeded.vm_body("linux-vm", &seeded.rhcos, "ON")).await;
    assert!(addresses(&api, &linux).await.is_empty());
    let ips = wait_for(|| async {
        let a = addresses(&api, &linux).await;
        (!a.is_empty()).then_some(a)
    })
    .await;
    assert!(ips[0].0.starts_with("10.40."), "{ips:?}");
}

#[tokio::test]
async fn put_counts_entity_version_when_sent_and_spec_version_otherwise() {
    let mock = start().await;
    let api = Api::new(&mock);
    let seeded = api.seeded().await;
    let uuid = create_and_wait(&api, &seeded.vm_body("token-vm", &seeded.rhcos, "OFF")).await;
    let path = format!("{V3}/vms/{uuid}");
    let read = api.get(&path).await.body;
    assert_eq!(
        (
            &read["metadata"]["spec_version"],
            &read["metadata"]["entity_version"]
        ),
        (&json!(0), &json!("1")),
        "as recorded (get_vm.json)"
    );

    // A change through another API namespace moves entity_version only.
    assert!(mock.admin().edit_elsewhere(&uuid));
    let now = api.get(&path).await.body;
    assert_eq!(now["metadata"]["spec_version"], 0);
    assert_eq!(now["metadata"]["entity_version"], "2");

    // Stale entity_version, current spec_version: the entity_version counts.
    let mut stale = json!({"metadata": read["metadata"], "spec": read["spec"]});
    stale["spec"]["description"] = json!("stale writer");
    let reply = api.put(&path, &stale).await;
    assert_eq!(reply.status, 409, "{}", reply.text);
    assert_eq!(
        reply.body["message_list"][0]["reason"],
        "CONCURRENT_REQUESTS_NOT_ALLOWED"
    );
    assert!(
        reply.body["message_list"][0]["message"]
            .as_str()
            .unwrap()
            .starts_with("Edit conflict: please retry change."),
        "{}",
        reply.text
    );
    assert_eq!(
        api.get(&path).await.body["spec"]["description"],
        read["spec"]["description"],
        "the refused PUT changed nothing"
    );

    // Absent entity_version: the (current) spec_version counts.
    let mut absent = stale.clone();
    absent["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("entity_version");
    let reply = api.put(&path, &absent).await;
    assert_eq!(reply.status, 202, "{}", reply.text);
    api.wait_task(reply.task_uuid()).await;
    let after = api.get(&path).await.body;
    assert_eq!(after["metadata"]["spec_version"], 1);
    assert_eq!(
        after["metadata"]["entity_version"], "3",
        "entity_version moves on every update"
    );

    // Current entity_version with a stale spec_version: accepted, the entity_version overrides.
    let mut current = json!({"metadata": after["metadata"], "spec": after["spec"]});
    current["metadata"]["spec_version"] = json!(0);
    current["spec"]["description"] = json!("current writer");
    let reply = api.put(&path, &current).await;
    assert_eq!(reply.status, 202, "{}", reply.text);
    api.wait_task(reply.task_uuid()).await;
    let last = api.get(&path).await.body;
    assert_eq!(last["spec"]["description"], "current writer");
    assert_eq!(last["metadata"]["entity_version"], "4");
    assert_eq!(last["metadata"]["spec_version"], 2);

    // A stale one read before the last update is refused, even with a newer spec_version.
    let mut old = json!({"metadata": after["metadata"], "spec": after["spec"]});
    old["metadata"]["spec_version"] = json!(9);
    assert_eq!(api.put(&path, &old).await.status, 409);
}

#[tokio::test]
async fn under_a_read_lag_the_get_after_a_finished_task_shows_the_previous_state_for_a_while() {
    let mock = start().await;
    let api = Api::new(&mock);
    let seeded = api.seeded().await;
    assert_eq!(
        mock.admin().read_lag(),
        std::time::Duration::ZERO,
        "off by default"
    );
    let lag = std::time::Duration::from_millis(800);
    mock.admin().set_read_lag(lag);
    let reply = api
        .post(
            &format!("{V3}/vms"),
            &seeded.vm_body("laggy", &seeded.rhcos, "ON"),
        )
        .await;
    assert_eq!(reply.status, 202, "{}", reply.text);
    let uuid = reply.uuid();
    let task = api.wait_task(reply.task_uuid()).await;
    assert_eq!(task["status"], "SUCCEEDED");
    let ended = std::time::Instant::now();
    let path = format!("{V3}/vms/{uuid}");
    let vm = api.get(&path).await.body;
    assert_eq!(
        vm["status"]["state"], "PENDING",
        "the state before the task ended"
    );
    assert_eq!(vm["status"]["resources"]["power_state"], "OFF");
    let summary = mock.admin().vm_summary(&uuid).unwrap();
    assert_eq!(
        (summary.state.as_str(), summary.power_state.as_str()),
        ("COMPLETE", "ON"),
        "the VM itself has moved on"
    );
    let vm = wait_for(|| async {
        let vm = api.get(&path).await.body;
        (vm["status"]["state"] == "COMPLETE").then_some(vm)
    })
    .await;
    assert!(ended.elapsed() >= lag / 2, "the lag lasted");
    assert_eq!(vm["status"]["resources"]["power_state"], "ON");

    // An update's task: the power state asked for shows only after the lag.
    let mut off = json!({"metadata": vm["metadata"], "spec": vm["spec"]});
    off["spec"]["resources"]["power_state"] = json!("OFF");
    let reply = api.put(&path, &off).await;
    assert_eq!(reply.status, 202, "{}", reply.text);
    api.wait_task(reply.task_uuid()).await;
    let vm = api.get(&path).await.body;
    assert_eq!(vm["status"]["state"], "PENDING");
    assert_eq!(vm["status"]["resources"]["power_state"], "ON");
    let vm = wait_for(|| async {
        let vm = api.get(&path).await.body;
        (vm["status"]["state"] == "COMPLETE").then_some(vm)
    })
    .await;
    assert_eq!(vm["status"]["resources"]["power_state"], "OFF");
}

#[tokio::test]
async fn a_vtpm_and_a_boot_disk_container_are_kept_and_shown_as_prism_shows_them() {
    let mock = start().await;
    let api = Api::new(&mock);
    let seeded = api.seeded().await;
    let container = "c0c0c0c0-0000-4000-8000-00000000000a";
    let mut body = seeded.vm_body("tpm-vm", &seeded.windows, "OFF");
    body["spec"]["resources"]["boot_config"] = json!({"boot_type": "UEFI"});
    body["spec"]["resources"]["vtpm_config"] = json!({"vtpm_enabled": true});
    body["spec"]["resources"]["disk_list"][0]["storage_config"] =
        json!({"storage_container_reference": {"kind": "storage_container", "uuid": container}});
    let uuid = create_and_wait(&api, &body).await;
    let vm = api.get(&format!("{V3}/vms/{uuid}")).await.body;
    assert_eq!(
        vm["spec"]["resources"]["vtpm_config"],
        json!({"vtpm_enabled": true})
    );
    assert_eq!(
        vm["status"]["resources"]["vtpm_config"],
        json!({"vtpm_enabled": true, "version": "2.0"})
    );
    assert_eq!(
        vm["spec"]["resources"]["disk_list"][0]["storage_config"]["storage_container_reference"]["uuid"],
        container,
        "the boot disk stays in the container asked for"
    );

    // A VM without one shows it off, as the recorded GET does; an update can turn it on.
    let uuid = create_and_wait(&api, &seeded.vm_body("plain-vm", &seeded.windows, "OFF")).await;
    let vm = api.get(&format!("{V3}/vms/{uuid}")).await.body;
    assert_eq!(
        vm["status"]["resources"]["vtpm_config"],
        json!({"vtpm_enabled": false, "version": ""})
    );
    assert_ne!(
        vm["spec"]["resources"]["disk_list"][0]["storage_config"]["storage_container_reference"]["uuid"],
        container
    );
    let mut update = json!({"metadata": vm["metadata"], "spec": vm["spec"]});
    update["spec"]["resources"]["vtpm_config"] = json!({"vtpm_enabled": true});
    let reply = api.put(&format!("{V3}/vms/{uuid}"), &update).await;
    assert_eq!(reply.status, 422, "a Legacy BIOS VM: {}", reply.text);
    update["spec"]["resources"]["boot_config"] = json!({"boot_type": "UEFI"});
    let reply = api.put(&format!("{V3}/vms/{uuid}"), &update).await;
    assert_eq!(reply.status, 202, "{}", reply.text);
    api.wait_task(reply.task_uuid()).await;
    let vm = api.get(&format!("{V3}/vms/{uuid}")).await.body;
    assert_eq!(
        vm["status"]["resources"]["vtpm_config"]["vtpm_enabled"],
        true
    );
}
