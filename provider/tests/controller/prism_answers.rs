//! The controller against Prism Central as it really answers (prism-mock's recorded shapes and
//! real-world behaviours, hack/prism-mock/recorded and docs/reliability.md): a clone that Prism
//! gives another UUID, concurrent clones of one source VM refused with a 409, a Flash data disk,
//! a create whose power-on fails, Secure Boot with guest customization, a resent Sysprep
//! create that must carry the same Administrator password, a follow-up PUT refused for a stale
//! `entity_version`, a GET that lags behind finished tasks, both shapes of a deploy task, and a
//! vTPM with the boot disk in a chosen storage container.

use base64::Engine as _;
use prism_mock::{CloneBehaviour, DeployTaskShape, FaultKind, FaultRule};
use serde_json::{Value, json};

use nutanix_machine_controller::api::{
    GUEST_CUSTOMIZATION_ANNOTATION, SYSTEM_DISK_STORAGE_CONTAINER_ANNOTATION, VTPM_ANNOTATION,
};

use crate::faults::count_with_status;
use crate::harness::{
    Env, NS, admin_password_of, choices, linux_spec, provider_spec, windows_clone, windows_template,
};

const VMS: &str = "/api/nutanix/v3/vms";

fn vm_uuid(machine: &Value) -> String {
    machine["status"]["providerStatus"]["vmUUID"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// A Windows Machine from the seed's image with Sysprep: its providerSpec and annotations.
fn sysprep_image() -> (Value, Value) {
    (
        provider_spec(
            json!({"type": "name", "name": "windows-server-2022"}),
            "120Gi",
            "windows-user-data",
        ),
        choices(&[(GUEST_CUSTOMIZATION_ANNOTATION, "Sysprep")]),
    )
}

#[tokio::test]
async fn a_clone_that_prism_gives_another_uuid_is_recorded_with_it_and_not_cloned_again() {
    let mut env = Env::start().await;
    env.start_nodelink();
    env.mock.admin().set_clone_behaviour(CloneBehaviour {
        ignores_requested_uuid: true,
        ..CloneBehaviour::default()
    });
    let _controller = env.controller("controller", &[]);
    let (spec, annotations) = windows_clone();
    env.create_machine_with("clone-uuid-0", spec, true, annotations)
        .await;
    let machine = env.wait_phase("clone-uuid-0", "Running").await;
    let vms = env.vms_named("clone-uuid-0");
    assert_eq!(vms.len(), 1, "one clone, whatever UUID Prism gave it");
    assert_eq!(
        vm_uuid(&machine),
        vms[0].uuid,
        "the UUID Prism gave is recorded"
    );
    assert_eq!(
        machine["spec"]["providerID"],
        format!("nutanix://{}", vms[0].uuid)
    );
    assert_eq!(
        env.mock
            .admin()
            .count("POST", "/api/nutanix/v3/vms/{uuid}/clone"),
        1,
        "no second clone"
    );
    env.wait_event("clone-uuid-0", "Adopted", "instead of the reserved UUID")
        .await;
}

#[tokio::test]
async fn concurrent_clones_refused_with_a_conflict_back_off_and_each_get_one_vm() {
    let mut env = Env::start().await;
    env.start_nodelink();
    env.mock.admin().set_clone_behaviour(CloneBehaviour {
        concurrent_clones_conflict: true,
        ..CloneBehaviour::default()
    });
    let _controller = env.controller("controller", &[]);
    let names = ["clone-a-0", "clone-b-0", "clone-c-0"];
    for name in names {
        let (spec, annotations) = windows_clone();
        env.create_machine_with(name, spec, true, annotations).await;
    }
    for name in names {
        env.wait_phase(name, "Running").await;
        assert_eq!(env.vms_named(name).len(), 1, "{name}");
    }
    let conflicts = count_with_status(&env, "POST", "/api/nutanix/v3/vms/{uuid}/clone", 409);
    assert!(conflicts >= 1, "the mock refused a concurrent clone");
    let refused = names
        .iter()
        .flat_map(|name| env.events_of(name))
        .filter(|(reason, _, note)| reason == "FailedCreate" && note.contains("conflict"))
        .count();
    assert!(refused >= 1, "a refused clone is explained, then retried");
}

#[tokio::test]
async fn a_flash_data_disk_is_created_with_the_schemas_flash_mode() {
    let mut env = Env::start().await;
    env.start_nodelink();
    let _controller = env.controller("controller", &[]);
    let mut spec = linux_spec();
    spec["dataDisks"] = json!([{"diskSize": "10Gi", "storageConfig": {"diskMode": "Flash"}}]);
    env.create_machine("flash-0", spec, false).await;
    let machine = env.wait_phase("flash-0", "Running").await;
    let vm = env.mock.admin().vm(&vm_uuid(&machine)).unwrap();
    let disks = vm["spec"]["resources"]["disk_list"].as_array().unwrap();
    assert!(
        disks
            .iter()
            .any(|disk| disk["storage_config"]["flash_mode"] == "ENABLED"),
        "{disks:?}"
    );
}

#[tokio::test]
async fn a_create_whose_power_on_failed_is_powered_on_again() {
    let mut env = Env::start().await;
    env.start_nodelink();
    env.mock.admin().add_fault(
        FaultRule::new(
            Some("POST"),
            VMS,
            FaultKind::FailPowerOn {
                error: "Failed to power on the VM: host out of memory".into(),
            },
        )
        .times(1),
    );
    let _controller = env.controller("controller", &[]);
    env.create_machine("power-0", linux_spec(), false).await;
    let machine = env.wait_phase("power-0", "Running").await;
    let uuid = vm_uuid(&machine);
    let vm = env.mock.admin().vm_summary(&uuid).unwrap();
    assert_eq!(vm.power_state, "ON", "the failed power-on was retried");
    assert_eq!(
        env.vms_named("power-0").len(),
        1,
        "the VM was kept, not made again"
    );
    assert_eq!(env.mock.admin().count("POST", VMS), 1);
    env.wait_event("power-0", "FailedCreate", "power on").await;
}

#[tokio::test]
async fn secure_boot_with_guest_customization_fails_the_machine_naming_cause_and_fix() {
    let mut env = Env::start().await;
    let _controller = env.controller("controller", &[]);
    let (mut spec, annotations) = sysprep_image();
    spec["bootType"] = json!("SecureBoot");
    env.create_machine_with("secure-0", spec, true, annotations)
        .await;
    let machine = env.wait_phase("secure-0", "Failed").await;
    assert_eq!(machine["status"]["errorReason"], "InvalidConfiguration");
    let message = machine["status"]["errorMessage"].as_str().unwrap();
    assert!(
        message.contains("VMM-30102") && message.contains("bootType UEFI"),
        "{message}"
    );
    assert!(env.vms_named("secure-0").is_empty(), "Prism removed the VM");
    // The plan's warning came first, where an admin looks: a Warning event and a condition.
    let (_, kind, _) = env
        .wait_event("secure-0", "ConfigurationWarning", "VMM-30102")
        .await;
    assert_eq!(kind, "Warning");
    assert_eq!(env.event_count("secure-0", "ConfigurationWarning"), 1);
    let warning = machine["status"]["providerStatus"]["conditions"]
        .as_array()
        .and_then(|all| all.iter().find(|c| c["type"] == "ConfigurationWarning"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(warning["status"], "True", "{warning}");
    assert_eq!(warning["reason"], "PlanWarnings", "{warning}");
    assert!(
        warning["message"]
            .as_str()
            .is_some_and(|m| m.contains("bootType UEFI")),
        "{warning}"
    );
}

#[tokio::test]
async fn a_resent_sysprep_create_carries_the_same_administrator_password() {
    let mut env = Env::start().await;
    env.start_nodelink();
    env.mock
        .admin()
        .add_fault(FaultRule::new(Some("POST"), VMS, FaultKind::CreateThen500).times(1));
    let mut controller = env.controller("controller", &[]);
    let (spec, annotations) = sysprep_image();
    env.create_machine_with("sysprep-0", spec, true, annotations)
        .await;
    // The create got through and its answer was lost; kill the controller too, so that the
    // retry is a new process's.
    env.wait_machine("sysprep-0", "a recorded create", |m| {
        !m["status"]["providerStatus"]["vmUUID"].is_null()
    })
    .await;
    controller.kill();
    let _controller = env.controller("restarted", &[]);
    let machine = env.wait_phase("sysprep-0", "Running").await;
    assert_eq!(env.vms_named("sysprep-0").len(), 1);

    let secret = env
        .sim
        .get("", "secrets", NS, "sysprep-0-admin-password")
        .expect("the generated password is kept in a Secret");
    assert_eq!(secret["metadata"]["ownerReferences"][0]["kind"], "Machine");
    assert_eq!(
        secret["metadata"]["ownerReferences"][0]["uid"],
        machine["metadata"]["uid"]
    );
    let kept = base64::engine::general_purpose::STANDARD
        .decode(secret["data"]["password"].as_str().unwrap())
        .unwrap();
    let guest = env
        .mock
        .admin()
        .guest_customization(&vm_uuid(&machine))
        .unwrap();
    let sent = admin_password_of(&guest.unattend_xml.unwrap()).unwrap();
    assert_eq!(sent.as_bytes(), kept.as_slice());
    env.assert_no_secrets_logged(&[sent]);
}

/// The VM changes through another API namespace between the controller's read and its follow-up
/// PUT (the deploy's identity description and power on): Prism refuses the PUT, whose
/// `entity_version` is now stale, with a 409, and the controller reads the VM again and retries
/// with the fresh version. The 409 shows that the controller sends the `entity_version` it read:
/// its `spec_version` is still current, and alone it would have let the stale PUT through.
#[tokio::test]
async fn a_follow_up_put_refused_for_a_stale_entity_version_is_read_again_and_retried() {
    let mut env = Env::start().await;
    env.start_nodelink();
    let one_vm = "/api/nutanix/v3/vms/{uuid}";
    env.mock
        .admin()
        .add_fault(FaultRule::new(Some("PUT"), one_vm, FaultKind::EditedElsewhere).times(1));
    let _controller = env.controller("controller", &[]);
    let (spec, choices) = windows_template();
    env.create_machine_with("stale-0", spec, true, choices)
        .await;
    let machine = env.wait_phase("stale-0", "Running").await;
    let uuid = vm_uuid(&machine);
    let vms = env.vms_named("stale-0");
    assert_eq!(vms.len(), 1, "one VM");
    assert_eq!(vms[0].power_state, "ON", "the follow-up got through");
    let vm = env.mock.admin().vm(&uuid).unwrap();
    assert!(
        vm["spec"]["description"]
            .as_str()
            .unwrap()
            .contains("openshift-machine:"),
        "{vm}"
    );
    assert_eq!(count_with_status(&env, "PUT", one_vm, 409), 1);
    let log: Vec<_> = env
        .mock
        .admin()
        .timed_requests_since(0)
        .into_iter()
        .map(|r| r.record)
        .filter(|r| r.vm.as_deref() == Some(uuid.as_str()) && r.endpoint == one_vm)
        .collect();
    let refused = log
        .iter()
        .position(|r| r.method == "PUT" && r.status == 409)
        .unwrap();
    let retried = refused
        + log[refused..]
            .iter()
            .position(|r| r.method == "PUT" && r.status == 202)
            .expect("the follow-up was sent again");
    assert!(
        log[refused..retried]
            .iter()
            .any(|r| r.method == "GET" && r.status == 200),
        "read again before the retry: {log:?}"
    );
}

/// A VM's GET lags behind its tasks (terraform-provider-nutanix polls the GET after a task
/// succeeded until the state is `COMPLETE` and the power state the one asked for): for a while
/// after each create, deploy or follow-up task ended, prism-mock's GET still answers the state
/// and power state from before. The controller creates one VM per Machine all the same, and its
/// Machines end Running with the VM's real state, not the lagging one.
#[tokio::test]
async fn a_get_that_lags_behind_finished_tasks_creates_no_duplicate_and_converges() {
    let mut env = Env::start().await;
    env.start_nodelink();
    env.mock
        .admin()
        .set_read_lag(std::time::Duration::from_secs(5));
    let _controller = env.controller("controller", &[]);
    env.create_machine("lag-linux-0", linux_spec(), false).await;
    let (spec, choices) = windows_template();
    env.create_machine_with("lag-tpl-0", spec, true, choices)
        .await;
    for name in ["lag-linux-0", "lag-tpl-0"] {
        let machine = env.wait_phase(name, "Running").await;
        let vms = env.vms_named(name);
        assert_eq!(vms.len(), 1, "{name}: exactly one VM");
        assert_eq!(vms[0].uuid, vm_uuid(&machine));
        assert_eq!(vms[0].power_state, "ON");
        let annotations = &machine["metadata"]["annotations"];
        assert_eq!(
            annotations["machine.openshift.io/instance-state"], "COMPLETE",
            "{name}"
        );
        assert_eq!(
            annotations["machine.openshift.io/instance-power-state"], "ON",
            "{name}"
        );
    }
    // The lag was met: the deployed VM was read (for its follow-up) well within the lag after
    // its deploy task ended (some 40 ms after the deploy was answered), so that GET showed it
    // PENDING and powered off while its task had succeeded.
    let log = env.mock.admin().timed_requests_since(0);
    let deploy = log
        .iter()
        .find(|r| r.record.endpoint.ends_with("/$actions/deploy"))
        .unwrap();
    let deployed = deploy.record.vm.clone().unwrap();
    assert!(
        log.iter().any(|r| r.record.method == "GET"
            && r.record.endpoint == "/api/nutanix/v3/vms/{uuid}"
            && r.record.vm.as_ref() == Some(&deployed)
            && r.answered < deploy.answered + std::time::Duration::from_secs(4)),
        "the deployed VM was read during the lag"
    );
    assert_eq!(env.mock.admin().count("POST", VMS), 1, "one create");
    assert_eq!(
        env.mock.admin().count(
            "POST",
            "/api/vmm/v4.0/content/templates/{ext_id}/$actions/deploy"
        ) + env.mock.admin().count(
            "POST",
            "/api/vmm/v4.3/content/templates/{ext_id}/$actions/deploy"
        ),
        1,
        "one deploy"
    );
}

/// Both shapes of a deploy task seen in real sources: the VM named only by a subtask (the
/// Ansible collection's recorded ntnx_templates_deploy_v2 answer), and the VM on the parent
/// task's entities (what terraform-provider-nutanix reads since its 2.4.0). Lists lag long
/// behind (prism-mock's list lag), so the controller cannot find the VM by name and must read
/// it from the task: either way it records the deployed VM and finishes it, one VM, Running.
#[tokio::test]
async fn a_deployed_vm_is_found_on_a_subtask_or_on_the_deploy_task_itself() {
    for shape in [
        DeployTaskShape::VmsInSubtasks,
        DeployTaskShape::VmsOnParentTask,
    ] {
        let mut env = Env::start().await;
        env.start_nodelink();
        env.mock.admin().set_deploy_task_shape(shape);
        env.mock
            .admin()
            .set_list_lag(std::time::Duration::from_secs(600));
        let _controller = env.controller("controller", &[]);
        let (spec, choices) = windows_template();
        env.create_machine_with("shape-0", spec, true, choices)
            .await;
        let machine = env.wait_phase("shape-0", "Running").await;
        let vms = env.vms_named("shape-0");
        assert_eq!(vms.len(), 1, "{shape:?}: one VM");
        assert_eq!(vms[0].uuid, vm_uuid(&machine), "{shape:?}");
        assert_eq!(vms[0].power_state, "ON", "{shape:?}");
        // The listing by name lags by ten minutes: the VM was found through the deploy's
        // task, read by the Machine or listed by the shared task watch with its subtasks.
        let deploy_task_looks = env
            .mock
            .admin()
            .requests_since(0)
            .iter()
            .filter(|r| {
                (r.endpoint.ends_with("/config/tasks/{ext_id}")
                    && r.vm.as_deref() == Some(vms[0].uuid.as_str()))
                    || r.endpoint.ends_with("/config/tasks")
            })
            .count();
        assert!(deploy_task_looks >= 1, "{shape:?}: found through the task");
    }
}

/// Windows 11 and Server 2025 need a TPM: a Machine from an image with both annotations gets a
/// UEFI VM with a vTPM and its boot disk in the container asked for.
#[tokio::test]
async fn a_vtpm_and_the_boot_disks_storage_container_come_from_annotations() {
    const CONTAINER: &str = "c0c0c0c0-0000-4000-8000-0000000000b1";
    let mut env = Env::start().await;
    env.start_nodelink();
    let _controller = env.controller("controller", &[]);
    let mut spec = provider_spec(
        json!({"type": "name", "name": "windows-server-2022"}),
        "120Gi",
        "windows-user-data",
    );
    spec["bootType"] = json!("UEFI");
    let annotations = choices(&[
        (VTPM_ANNOTATION, "Enabled"),
        (
            SYSTEM_DISK_STORAGE_CONTAINER_ANNOTATION,
            &CONTAINER.to_ascii_uppercase(),
        ),
    ]);
    env.create_machine_with("tpm-0", spec, true, annotations)
        .await;
    let machine = env.wait_phase("tpm-0", "Running").await;
    let vm = env.mock.admin().vm(&vm_uuid(&machine)).unwrap();
    let resources = &vm["status"]["resources"];
    assert_eq!(
        resources["vtpm_config"]["vtpm_enabled"], true,
        "{resources}"
    );
    assert_eq!(resources["boot_config"]["boot_type"], "UEFI");
    let boot_disk = &vm["spec"]["resources"]["disk_list"][0];
    assert_eq!(
        boot_disk["storage_config"]["storage_container_reference"],
        json!({"kind": "storage_container", "uuid": CONTAINER}),
        "{boot_disk}"
    );
}

/// A clone cannot take a vTPM (`vm_clone_override_spec` has no `vtpm_config`): its follow-up
/// update turns it on.
#[tokio::test]
async fn a_cloned_vm_gets_its_vtpm_from_the_follow_up_update() {
    let mut env = Env::start().await;
    env.start_nodelink();
    let _controller = env.controller("controller", &[]);
    let (spec, mut annotations) = windows_clone();
    annotations[VTPM_ANNOTATION] = json!("Enabled");
    env.create_machine_with("tpm-clone-0", spec, true, annotations)
        .await;
    let machine = env.wait_phase("tpm-clone-0", "Running").await;
    let vm = env.mock.admin().vm(&vm_uuid(&machine)).unwrap();
    assert_eq!(
        vm["status"]["resources"]["vtpm_config"],
        json!({"vtpm_enabled": true, "version": "2.0"})
    );
    assert_eq!(vm["status"]["resources"]["power_state"], "ON");
}
