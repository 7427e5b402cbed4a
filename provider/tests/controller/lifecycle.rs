//! Machines from an image, a template and a source VM reach Running and are deleted; what
//! the controller writes on the Machine and the Node; calls to Prism.

use serde_json::{Value, json};

use nutanix_machine_controller::api::SYSPREP_ADMIN_PASSWORD_SECRET_ANNOTATION;

use crate::harness::{
    Env, INFRA_ID, NS, admin_password_of, linux_spec, provider_spec, windows_clone,
    windows_template,
};

const ADMIN_PASSWORD: &str = "Given-Admin-Pass-83f1";

fn has_vm_uuid(machine: &Value) -> bool {
    machine["status"]["providerStatus"]["vmUUID"].is_string()
}

#[tokio::test]
async fn machines_from_image_template_and_source_vm_reach_running_and_are_deleted() {
    let mut env = Env::start().await;
    env.start_nodelink();
    let controller = env.controller("controller", &[]);
    controller.wait_log("metrics listening").await;

    env.create_machine("linux-0", linux_spec(), false).await;
    let (spec, choices) = windows_template();
    env.create_machine_with("win-tpl-0", spec, true, choices)
        .await;
    // The clone's Administrator password comes from a Secret; the template's is random.
    env.put_secret("windows-admin", "password", ADMIN_PASSWORD)
        .await;
    let (spec, mut choices) = windows_clone();
    choices[SYSPREP_ADMIN_PASSWORD_SECRET_ANNOTATION] = "windows-admin".into();
    env.create_machine_with("win-clone-0", spec, true, choices)
        .await;

    let mut admin_passwords = Vec::new();
    for name in ["linux-0", "win-tpl-0", "win-clone-0"] {
        let machine = env.wait_phase(name, "Running").await;
        let uuid = machine["status"]["providerStatus"]["vmUUID"]
            .as_str()
            .unwrap()
            .to_owned();
        assert_eq!(machine["spec"]["providerID"], format!("nutanix://{uuid}"));
        let vms = env.vms_named(name);
        assert_eq!(vms.len(), 1, "{name}: exactly one VM");
        assert_eq!(vms[0].uuid, uuid);
        assert_eq!(vms[0].power_state, "ON", "{name}: powered on");
        let addresses = machine["status"]["addresses"].as_array().unwrap();
        assert_eq!(addresses[0]["type"], "InternalIP");
        assert_eq!(addresses[0]["address"], vms[0].addresses[0].as_str());
        assert!(
            addresses
                .iter()
                .any(|a| a["type"] == "InternalDNS" && a["address"] == name)
        );
        let labels = &machine["metadata"]["labels"];
        assert_eq!(labels["machine.openshift.io/zone"], "pe-1");
        assert_eq!(labels["machine.openshift.io/region"], "prism-central");
        assert_eq!(labels["machine.openshift.io/instance-type"], "AHV");
        let annotations = &machine["metadata"]["annotations"];
        assert_eq!(
            annotations["machine.openshift.io/instance-state"],
            "COMPLETE"
        );
        assert_eq!(
            annotations["machine.openshift.io/instance-power-state"],
            "ON"
        );
        let provider_status = &machine["status"]["providerStatus"];
        assert!(provider_status.get("pendingTask").is_none());
        assert!(provider_status.get("pendingFollowUp").is_none());
        let conditions = provider_status["conditions"].as_array().unwrap();
        assert!(conditions.iter().any(|c| c["type"] == "MachineCreation"
            && c["status"] == "True"
            && c["reason"] == "MachineCreationSucceeded"));
        assert!(
            machine["metadata"]["finalizers"]
                .as_array()
                .unwrap()
                .contains(&Value::from("machine.machine.openshift.io"))
        );
        assert!(machine["status"]["lastUpdated"].is_string());

        // The VM carries the identity marker and the owned category.
        let vm = env.mock.admin().vm(&uuid).unwrap();
        let description = vm["spec"]["description"].as_str().unwrap();
        assert!(
            description.contains(&format!("{NS}/{name} uid=")),
            "{description}"
        );
        assert_eq!(
            vm["metadata"]["categories"][format!("kubernetes-io-cluster-{INFRA_ID}")],
            "owned"
        );
        assert_eq!(vm["metadata"]["categories"]["AppType"], "Kubernetes");

        // The Node got the Machine's providerID.
        let node = env
            .wait_node(name, |node| node["spec"]["providerID"].is_string())
            .await;
        assert_eq!(node["spec"]["providerID"], format!("nutanix://{uuid}"));

        env.wait_event(name, "Create", "").await;
        if name != "linux-0" {
            let guest = env.mock.admin().guest_customization(&uuid).unwrap();
            let xml = guest.unattend_xml.expect("Windows uses Sysprep");
            let password = admin_password_of(&xml).expect("a password in unattend.xml");
            if name == "win-clone-0" {
                assert_eq!(password, ADMIN_PASSWORD);
            } else {
                assert_ne!(password, ADMIN_PASSWORD);
                assert_eq!(password.len(), 20, "generated");
            }
            admin_passwords.push(password);
        }
    }
    // The clone's boot disk was grown to systemDiskSize by the follow-up update.
    let clone = env.machine("win-clone-0").unwrap();
    let clone_uuid = clone["status"]["providerStatus"]["vmUUID"]
        .as_str()
        .unwrap();
    let vm = env.mock.admin().vm(clone_uuid).unwrap();
    let sizes: Vec<u64> = vm["spec"]["resources"]["disk_list"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["disk_size_mib"].as_u64())
        .collect();
    assert!(sizes.contains(&(140 * 1024)), "{sizes:?}");

    println!(
        "Prism calls for 3 Machines from create to Running: {} ({:?})",
        env.prism_calls(),
        env.mock
            .admin()
            .counters()
            .iter()
            .map(|c| format!("{} {} {}: {}", c.method, c.endpoint, c.status, c.count))
            .collect::<Vec<_>>()
    );

    for name in ["linux-0", "win-tpl-0", "win-clone-0"] {
        env.machines_api()
            .delete(name, &Default::default())
            .await
            .unwrap();
    }
    for name in ["linux-0", "win-tpl-0", "win-clone-0"] {
        env.wait_machine(name, "deletion", Value::is_null).await;
        assert!(env.vms_named(name).is_empty(), "{name}: VM deleted");
        assert!(env.node(name).is_none(), "{name}: Node deleted");
    }
    env.assert_no_secrets_logged(&admin_passwords);
    env.assert_permissions("controller");
    drop(controller);
}

#[tokio::test]
async fn an_invalid_spec_fails_the_machine_naming_the_field_and_creates_no_vm() {
    let mut env = Env::start().await;
    let _controller = env.controller("controller", &[]);
    let mut spec = linux_spec();
    spec["vcpuSockets"] = 0.into();
    env.create_machine("bad-0", spec, false).await;
    let machine = env.wait_phase("bad-0", "Failed").await;
    assert_eq!(machine["status"]["errorReason"], "InvalidConfiguration");
    let message = machine["status"]["errorMessage"].as_str().unwrap();
    assert!(message.contains("providerSpec.vcpuSockets"), "{message}");
    assert_eq!(
        machine["metadata"]["annotations"]["machine.openshift.io/instance-state"],
        "Unknown"
    );
    assert!(!has_vm_uuid(&machine));
    assert!(env.vms_named("bad-0").is_empty());
    assert_eq!(env.mock.admin().count("POST", "/api/nutanix/v3/vms"), 0);
    let (_, kind, _) = env
        .wait_event("bad-0", "FailedCreate", "providerSpec.vcpuSockets")
        .await;
    assert_eq!(kind, "Warning");
    // A Failed Machine is deleted without asking Prism anything.
    env.machines_api()
        .delete("bad-0", &Default::default())
        .await
        .unwrap();
    env.wait_machine("bad-0", "deletion", Value::is_null).await;
    env.assert_no_secrets_logged(&[]);
}

/// A Windows MachineSet that names no userDataSecret gets `worker-user-data` from the
/// machine-api-operator's webhook (`machine_webhook.go`, `defaultNutanix`): its Machine fails
/// before any VM is made, naming WMCO's Secret.
#[tokio::test]
async fn a_windows_machine_with_the_linux_workers_user_data_fails_and_creates_no_vm() {
    let mut env = Env::start().await;
    let _controller = env.controller("controller", &[]);
    let spec = provider_spec(
        json!({"type": "name", "name": "windows-server-2022"}),
        "120Gi",
        "worker-user-data",
    );
    env.create_machine("win-linux-data-0", spec, true).await;
    let machine = env.wait_phase("win-linux-data-0", "Failed").await;
    assert_eq!(machine["status"]["errorReason"], "InvalidConfiguration");
    let message = machine["status"]["errorMessage"].as_str().unwrap();
    assert!(message.contains("providerSpec.userDataSecret"), "{message}");
    assert!(message.contains("windows-user-data"), "{message}");
    assert!(!has_vm_uuid(&machine));
    assert!(env.vms_named("win-linux-data-0").is_empty());
    assert_eq!(env.mock.admin().count("POST", "/api/nutanix/v3/vms"), 0);
    env.wait_event("win-linux-data-0", "FailedCreate", "windows-user-data")
        .await;
    env.assert_no_secrets_logged(&[]);
}

#[tokio::test]
async fn a_failure_domain_replaces_cluster_and_subnets() {
    let mut env = Env::start().await;
    // Set before the controller starts: Infrastructure is read at most once a minute.
    let resource = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("config.openshift.io", "v1", "Infrastructure"),
        "infrastructures",
    );
    kube::Api::<kube::api::DynamicObject>::all_with(env.client.clone(), &resource)
        .patch(
            "cluster",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({"spec": {"platformSpec": {"nutanix": {
                "failureDomains": [{"name": "fd-a",
                    "cluster": {"type": "Name", "name": "pe-1"},
                    "subnets": [{"type": "Name", "name": "storage-network"}]}]}}}})),
        )
        .await
        .unwrap();
    env.start_nodelink();
    let _controller = env.controller("controller", &[]);
    let mut spec = linux_spec();
    spec["failureDomain"] = serde_json::json!({"name": "fd-a"});
    // Replaced by the failure domain's, as upstream does.
    spec["cluster"] = serde_json::json!({"type": "name", "name": "no-such-cluster"});
    env.create_machine("fd-0", spec, false).await;
    let machine = env.wait_phase("fd-0", "Running").await;
    let address = machine["status"]["addresses"][0]["address"]
        .as_str()
        .unwrap();
    assert!(
        address.starts_with("10.41.0."),
        "the NIC is on the failure domain's storage-network: {address}"
    );
    env.assert_no_secrets_logged(&[]);
}

/// A providerStatus whose `vmUUID` is not a string records a VM in a shape this controller
/// cannot read: the Machine is left as it is, with an event saying how to fix it; no VM is made
/// and it is never failed.
#[tokio::test]
async fn a_vm_uuid_that_cannot_be_read_leaves_the_machine_alone_with_an_event() {
    let mut env = Env::start().await;
    env.create_machine("odd-0", linux_spec(), false).await;
    env.machines_api()
        .patch_status(
            "odd-0",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"status": {"phase": "Running",
                "providerStatus": {"vmUUID": 42}}})),
        )
        .await
        .unwrap();
    let _controller = env.controller("controller", &[]);
    let (_, kind, note) = env
        .wait_event(
            "odd-0",
            "FailedUpdate",
            "status.providerStatus.vmUUID cannot be read",
        )
        .await;
    assert_eq!(kind, "Warning");
    assert!(
        note.contains("Fix: write status.providerStatus.vmUUID"),
        "{note}"
    );
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert!(env.vms_named("odd-0").is_empty(), "no VM made");
    let machine = env.machine("odd-0").unwrap();
    assert_eq!(machine["status"]["phase"], "Running", "never failed");
    assert_eq!(
        machine["status"]["providerStatus"]["vmUUID"], 42,
        "left as it is"
    );
    assert!(
        machine["metadata"]["finalizers"].is_null(),
        "nothing written"
    );
}
