//! Foreign VMs (a seed's `foreign_vms`): the other tenants of a shared Prism Central, listed by an
//! unfiltered list, left out by a name filter, answered by GET, made ordinary by a change.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use std::collections::{BTreeSet, HashSet};

use common::{Api, Seeded, V3, start_with};
use prism_mock::{MockConfig, RunningMock, Seed};
use serde_json::{Value, json};

async fn with_foreign(count: u32) -> RunningMock {
    let mut seed = Seed::builtin();
    seed.foreign_vms = count;
    start_with(MockConfig {
        seed,
        ..MockConfig::default()
    })
    .await
}

/// One page of `POST /vms/list`.
async fn list(api: &Api, filter: Option<&str>, offset: usize) -> Value {
    let mut body = json!({"kind": "vm", "length": 500, "offset": offset});
    if let Some(filter) = filter {
        body["filter"] = json!(filter);
    }
    let reply = api.post(&format!("{V3}/vms/list"), &body).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    reply.body
}

fn names(page: &Value) -> Vec<String> {
    page["entities"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["spec"]["name"].as_str().unwrap().to_owned())
        .collect()
}

/// Creates a VM the way the provider does (its identity marker in the description) and waits for
/// its task.
async fn create(api: &Api, seeded: &Seeded, name: &str) -> String {
    let mut body = seeded.vm_body(name, &seeded.rhcos, "ON");
    body["spec"]["description"] = json!(format!(
        "openshift-machine: openshift-machine-api/{name} uid=6f1c3c4e-2f59-4c43-9a55-0b1f2a3c4d5e"
    ));
    let reply = api.post(&format!("{V3}/vms"), &body).await;
    assert_eq!(reply.status, 202, "{}", reply.text);
    assert_eq!(
        api.wait_task(reply.task_uuid()).await["status"],
        "SUCCEEDED"
    );
    reply.uuid()
}

fn keys(value: &Value) -> BTreeSet<String> {
    value.as_object().unwrap().keys().cloned().collect()
}

#[tokio::test]
async fn an_unfiltered_list_pages_through_every_foreign_vm_shaped_as_any_vm() {
    let mock = with_foreign(1200).await;
    let api = Api::new(&mock);
    let seeded = api.seeded().await;
    let ours = create(&api, &seeded, "ocp-worker-a1b2c").await;

    let mut foreign = Vec::new();
    let mut offset = 0;
    loop {
        let page = list(&api, None, offset).await;
        assert_eq!(
            page["metadata"]["total_matches"], 1202,
            "the seeded VM, 1,200 foreign VMs and ours"
        );
        let entities = page["entities"].as_array().unwrap().clone();
        assert!(entities.len() <= 500);
        if entities.is_empty() {
            break;
        }
        offset += entities.len();
        foreign.extend(entities.into_iter().filter(|e| {
            e["spec"]["name"]
                .as_str()
                .unwrap()
                .starts_with("foreign-vm-")
        }));
    }
    assert_eq!(offset, 1202);
    let listed: Vec<&str> = foreign
        .iter()
        .map(|e| e["spec"]["name"].as_str().unwrap())
        .collect();
    let expected: Vec<String> = (1..=1200).map(|i| format!("foreign-vm-{i:06}")).collect();
    assert_eq!(listed, expected, "each once, in creation order");

    let descriptions: HashSet<&str> = foreign
        .iter()
        .map(|e| e["spec"]["description"].as_str().unwrap())
        .collect();
    assert_eq!(
        descriptions.len(),
        1200,
        "each has a description of its own"
    );
    let subnets: BTreeSet<&str> = foreign
        .iter()
        .map(|e| {
            e["spec"]["resources"]["nic_list"][0]["subnet_reference"]["uuid"]
                .as_str()
                .unwrap()
        })
        .collect();
    assert_eq!(
        subnets,
        BTreeSet::from([seeded.subnet.as_str(), seeded.other_subnet.as_str()]),
        "spread over the seeded subnets"
    );
    for vm in &foreign {
        assert_eq!(vm["status"]["state"], "COMPLETE");
        assert_eq!(vm["status"]["resources"]["power_state"], "ON");
        assert_eq!(
            vm["status"]["cluster_reference"]["uuid"],
            seeded.pe.as_str()
        );
        assert_eq!(
            vm["metadata"]["categories"],
            json!({}),
            "no cluster category"
        );
        let description = vm["status"]["description"].as_str().unwrap();
        assert!(
            !description.contains("openshift-machine"),
            "no provider identity marker: {description}"
        );
        assert_eq!(
            vm["status"]["resources"]["nic_list"][0]["ip_endpoint_list"],
            json!([]),
            "no address taken from the pools"
        );
    }

    // The same JSON shape as an ordinary powered-on VM's, level by level.
    let page = list(&api, Some("vm_name==ocp-worker-a1b2c"), 0).await;
    let ordinary = &page["entities"][0];
    assert_eq!(ordinary["metadata"]["uuid"], ours.as_str());
    let sample = &foreign[0];
    for pointer in [
        "",
        "/metadata",
        "/spec",
        "/spec/resources",
        "/spec/resources/nic_list/0",
        "/status",
        "/status/resources",
        "/status/resources/nic_list/0",
    ] {
        assert_eq!(
            keys(sample.pointer(pointer).unwrap()),
            keys(ordinary.pointer(pointer).unwrap()),
            "keys at '{pointer}'"
        );
    }
}

#[tokio::test]
async fn a_name_filter_leaves_100000_foreign_vms_out_and_an_or_filter_returns_the_union() {
    let mock = with_foreign(100_000).await;
    let api = Api::new(&mock);
    let seeded = api.seeded().await;
    create(&api, &seeded, "ocp-worker-a1b2c").await;
    create(&api, &seeded, "win-image-x9y8z").await;

    let everything = list(&api, None, 100_000).await;
    assert_eq!(everything["metadata"]["total_matches"], 100_003);
    assert_eq!(
        names(&everything),
        vec!["foreign-vm-100000", "ocp-worker-a1b2c", "win-image-x9y8z"],
        "the last page: the last foreign VM, then the VMs created after them"
    );

    let one = list(&api, Some("vm_name==ocp-worker-"), 0).await;
    assert_eq!(one["metadata"]["total_matches"], 1);
    assert_eq!(names(&one), vec!["ocp-worker-a1b2c"]);

    let union = list(&api, Some("vm_name==ocp-worker-,vm_name==win-image-"), 0).await;
    assert_eq!(union["metadata"]["total_matches"], 2);
    assert_eq!(names(&union), vec!["ocp-worker-a1b2c", "win-image-x9y8z"]);
    assert_eq!(
        union["metadata"]["filter"],
        "vm_name==ocp-worker-,vm_name==win-image-"
    );

    let some = list(&api, Some("vm_name==foreign-vm-0999"), 0).await;
    assert_eq!(
        some["metadata"]["total_matches"], 100,
        "the filter reads foreign VMs' names too: foreign-vm-099900 to 099999"
    );
}

#[tokio::test]
async fn a_get_answers_a_foreign_vm_which_the_admin_side_does_not_show() {
    let mock = with_foreign(10).await;
    let api = Api::new(&mock);
    let page = list(&api, Some("vm_name==foreign-vm-000007"), 0).await;
    let listed = &page["entities"][0];
    let uuid = listed["metadata"]["uuid"].as_str().unwrap();

    let reply = api.get(&format!("{V3}/vms/{uuid}")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let vm = &reply.body;
    assert_eq!(vm["api_version"], "3.1");
    assert_eq!(vm["spec"]["name"], "foreign-vm-000007");
    assert_eq!(vm["spec"]["description"], listed["spec"]["description"]);
    assert_eq!(vm["status"]["state"], "COMPLETE");
    assert_eq!(vm["status"]["resources"]["power_state"], "ON");
    assert!(vm["status"]["resources"]["host_reference"]["uuid"].is_string());
    assert_eq!(vm["metadata"]["spec_version"], 0);
    assert_eq!(
        vm["spec"]["resources"]["nic_list"][0]["uuid"],
        listed["spec"]["resources"]["nic_list"][0]["uuid"],
        "the same VM every time it is read"
    );
    let upper = uuid.to_uppercase();
    assert_eq!(api.get(&format!("{V3}/vms/{upper}")).await.status, 404);

    assert!(
        mock.admin().vms().iter().all(|v| v.uuid != uuid),
        "the admin side shows the clients' VMs"
    );
    assert!(mock.admin().vm(uuid).is_none());

    let seeded = api.seeded().await;
    let mut body = seeded.vm_body("taken", &seeded.rhcos, "OFF");
    body["metadata"]["uuid"] = json!(uuid);
    let reply = api.post(&format!("{V3}/vms"), &body).await;
    assert_eq!(reply.status, 409, "{}", reply.text);
    assert_eq!(
        reply.body["message_list"][0]["reason"],
        "ENTITY_ALREADY_EXISTS"
    );
}

#[tokio::test]
async fn a_change_makes_a_foreign_vm_an_ordinary_one_in_its_place() {
    let mock = with_foreign(10).await;
    let api = Api::new(&mock);
    let before = names(&list(&api, None, 0).await);
    let page = list(&api, Some("vm_name==foreign-vm-000003"), 0).await;
    let uuid = page["entities"][0]["metadata"]["uuid"]
        .as_str()
        .unwrap()
        .to_owned();

    let vm = api.get(&format!("{V3}/vms/{uuid}")).await.body;
    let mut spec = vm["spec"].clone();
    spec["resources"]["power_state"] = json!("OFF");
    let reply = api
        .put(
            &format!("{V3}/vms/{uuid}"),
            &json!({"metadata": vm["metadata"], "spec": spec}),
        )
        .await;
    assert_eq!(reply.status, 202, "{}", reply.text);
    assert_eq!(
        api.wait_task(reply.task_uuid()).await["status"],
        "SUCCEEDED"
    );
    let vm = api.get(&format!("{V3}/vms/{uuid}")).await.body;
    assert_eq!(vm["status"]["resources"]["power_state"], "OFF");
    assert_eq!(vm["metadata"]["spec_version"], 1);
    assert_eq!(
        names(&list(&api, None, 0).await),
        before,
        "it keeps its place"
    );
    let summary = mock.admin().vm_summary(&uuid).unwrap();
    assert_eq!(
        (summary.name.as_str(), summary.power_state.as_str()),
        ("foreign-vm-000003", "OFF"),
        "changed, it is an ordinary VM of the admin side"
    );

    let reply = api.delete(&format!("{V3}/vms/{uuid}")).await;
    assert_eq!(reply.status, 202, "{}", reply.text);
    assert_eq!(
        api.wait_task(reply.task_uuid()).await["status"],
        "SUCCEEDED"
    );
    assert_eq!(api.get(&format!("{V3}/vms/{uuid}")).await.status, 404);
    let after = list(&api, None, 0).await;
    assert_eq!(after["metadata"]["total_matches"], before.len() - 1);
    assert!(!names(&after).contains(&"foreign-vm-000003".to_owned()));
}

#[tokio::test]
async fn a_seed_without_a_subnet_cannot_hold_foreign_vms() {
    let mut seed = Seed::empty();
    seed.foreign_vms = 1;
    let error = prism_mock::MockPrism::start(MockConfig {
        seed,
        ..MockConfig::default()
    })
    .await
    .unwrap_err();
    assert!(error.to_string().contains("foreign_vms"), "{error}");
}
