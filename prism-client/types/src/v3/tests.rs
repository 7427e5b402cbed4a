//! Decoding of bodies shaped like real Prism Central v3 responses (reference/02 §3), and what a round trip keeps.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::*;

const CREATE_REQUEST: &str = include_str!("../../../tests/fixtures/v3/vm_create_request.json");
const CREATE_RESPONSE: &str = include_str!("../../../tests/fixtures/v3/vm_create_response.json");
const VM_GET: &str = include_str!("../../../tests/fixtures/v3/vm_get.json");
const VM_LIST: &str = include_str!("../../../tests/fixtures/v3/vm_list.json");
const TASK_FAILED: &str = include_str!("../../../tests/fixtures/v3/task_failed.json");
const CLUSTER_LIST: &str = include_str!("../../../tests/fixtures/v3/cluster_list.json");
const HOST_LIST: &str = include_str!("../../../tests/fixtures/v3/host_list.json");
const USERS_ME: &str = include_str!("../../../tests/fixtures/v3/users_me.json");

fn value(text: &str) -> Value {
    serde_json::from_str(text).unwrap()
}

#[test]
fn create_request_round_trips_unchanged() {
    let input: VmIntentInput = serde_json::from_str(CREATE_REQUEST).unwrap();
    assert_eq!(input.spec.resources.machine_type, Some(MachineType::Q35));
    assert_eq!(
        input.spec.resources.boot_config.as_ref().unwrap().boot_type,
        Some(BootType::Uefi)
    );
    assert_eq!(input.spec.resources.gpu_list[0].device_id, Some(8195));
    assert_eq!(
        input.metadata.categories_mapping.as_ref().unwrap()["KubernetesClusterName"],
        vec!["c1".to_owned()]
    );
    assert_eq!(serde_json::to_value(&input).unwrap(), value(CREATE_REQUEST));
}

#[test]
fn create_response_has_task_uuid_as_a_string() {
    let vm: Vm = serde_json::from_str(CREATE_RESPONSE).unwrap();
    assert_eq!(vm.state(), Some(&EntityState::Pending));
    assert_eq!(vm.task_uuid(), Some("a1b2c3d4-0000-4000-8000-00000000aaaa"));
    assert_eq!(vm.metadata.spec_version, Some(0));
    assert_eq!(vm.uuid(), Some("7f4e3a2b-1c0d-4e5f-8a9b-0c1d2e3f4a5b"));
}

#[test]
fn get_response_decodes_defaults_and_task_uuid_list() {
    let vm: Vm = serde_json::from_str(VM_GET).unwrap();
    assert_eq!(vm.task_uuid(), Some("a1b2c3d4-0000-4000-8000-00000000aaaa"));
    assert_eq!(vm.state(), Some(&EntityState::Complete));
    let spec = vm.spec.as_ref().unwrap();
    assert_eq!(spec.resources.machine_type, Some(MachineType::Pc));
    assert_eq!(
        spec.resources.nic_list[0].nic_type,
        Some(NicType::NormalNic)
    );
    assert_eq!(
        spec.resources.disk_list[0].disk_size_bytes,
        Some(122_880 * 1024 * 1024)
    );
    let status = vm.status.as_ref().unwrap();
    assert_eq!(
        status.cluster_reference.as_ref().unwrap().name.as_deref(),
        Some("pe1")
    );
    let resources = status.resources.as_ref().unwrap();
    assert_eq!(resources.hypervisor_type.as_deref(), Some("AHV"));
    assert_eq!(resources.power_state, Some(PowerState::On));
    assert_eq!(
        resources.ip_addresses().collect::<Vec<_>>(),
        ["169.254.10.20", "10.0.0.5", "10.0.0.6"]
    );
    assert_eq!(
        resources.nic_list[0].ip_endpoint_list[0].endpoint_type,
        Some(IpEndpointType::Learned)
    );
}

#[test]
fn update_input_keeps_unknown_fields_and_drops_status_and_spec_hash() {
    let mut vm: Vm = serde_json::from_str(VM_GET).unwrap();
    vm.spec.as_mut().unwrap().resources.memory_size_mib = Some(16384);
    let input = vm.into_update_input().unwrap();
    let sent = serde_json::to_value(&input).unwrap();

    let mut expected = value(VM_GET);
    let object = expected.as_object_mut().unwrap();
    object.remove("status");
    object["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("spec_hash");
    object["spec"]["resources"]["memory_size_mib"] = json!(16384);
    assert_eq!(sent, expected);
    // The fields this crate does not model are among those kept.
    assert_eq!(
        sent["spec"]["resources"]["power_state_mechanism"],
        json!({"mechanism": "HARD"})
    );
    assert_eq!(sent["metadata"]["entity_version"], json!("2"));
    assert_eq!(sent["metadata"]["spec_version"], json!(3));
}

#[test]
fn list_response_and_empty_task_list() {
    let list: ListResponse<Vm> = serde_json::from_str(VM_LIST).unwrap();
    assert_eq!(list.metadata.total_matches, Some(3));
    assert_eq!(list.metadata.length, Some(1));
    assert_eq!(list.entities.len(), 1);
    assert_eq!(list.entities[0].task_uuid(), None);
    assert_eq!(list.entities[0].name(), Some("a"));
}

#[test]
fn unknown_enum_values_decode_and_serialise_back() {
    let mut body = value(VM_GET);
    body["spec"]["resources"]["machine_type"] = json!("ARM_VIRT");
    body["spec"]["resources"]["power_state"] = json!("PAUSED");
    body["status"]["state"] = json!("HIBERNATING");
    let vm: Vm = serde_json::from_value(body).unwrap();
    let resources = &vm.spec.as_ref().unwrap().resources;
    assert_eq!(
        resources.machine_type,
        Some(MachineType::Other("ARM_VIRT".to_owned()))
    );
    assert_eq!(
        resources.power_state,
        Some(PowerState::Other("PAUSED".to_owned()))
    );
    assert_eq!(
        vm.state(),
        Some(&EntityState::Other("HIBERNATING".to_owned()))
    );
    let back = serde_json::to_value(&vm).unwrap();
    assert_eq!(back["spec"]["resources"]["machine_type"], json!("ARM_VIRT"));
}

#[test]
fn a_minimal_intent_sends_only_what_is_set() {
    let input = VmIntentInput {
        metadata: VmMetadata::of_kind("vm"),
        spec: VmSpec {
            name: "m".to_owned(),
            resources: VmResources {
                num_sockets: Some(1),
                num_vcpus_per_socket: Some(2),
                memory_size_mib: Some(4096),
                power_state: Some(PowerState::On),
                nic_list: vec![Nic::on_subnet("s")],
                ..VmResources::default()
            },
            ..VmSpec::default()
        },
        ..VmIntentInput::default()
    };
    assert_eq!(
        serde_json::to_value(&input).unwrap(),
        json!({
            "metadata": {"kind": "vm"},
            "spec": {"name": "m", "resources": {
                "num_sockets": 1, "num_vcpus_per_socket": 2, "memory_size_mib": 4096, "power_state": "ON",
                "disk_list": [], "nic_list": [{"subnet_reference": {"kind": "subnet", "uuid": "s"}}], "gpu_list": []
            }}
        })
    );
}

#[test]
fn debug_output_hides_user_data_and_unattend_xml() {
    let mut input: VmIntentInput = serde_json::from_str(CREATE_REQUEST).unwrap();
    let user_data = "I2Nsb3VkLWNvbmZpZwpwYXNzd29yZDogc2VjcmV0LXVzZXItZGF0YQo=";
    assert!(format!("{input:?}").contains("<redacted>"));
    assert!(!format!("{input:?}").contains(user_data));
    input.spec.resources.guest_customization = Some(GuestCustomization {
        sysprep: Some(Sysprep {
            install_type: Some(SysprepInstallType::Prepared),
            unattend_xml: Some("PHVuYXR0ZW5kIHBhc3N3b3JkPSJ4Ii8+".into()),
            custom_key_values: Some([("AdminPassword".to_owned(), "p@ss".into())].into()),
            ..Sysprep::default()
        }),
        ..GuestCustomization::default()
    });
    let debug = format!("{input:?}");
    assert!(
        !debug.contains("PHVuYXR0ZW5kIHBhc3N3b3JkPSJ4Ii8+"),
        "{debug}"
    );
    assert!(!debug.contains("p@ss"), "{debug}");
}

#[test]
fn task_with_subtasks_and_unknown_status() {
    let task: Task = serde_json::from_str(TASK_FAILED).unwrap();
    assert_eq!(task.status, Some(TaskStatus::Failed));
    assert!(task.status.as_ref().unwrap().is_terminal());
    assert_eq!(task.error_detail.as_deref(), Some("Internal error"));
    assert_eq!(
        task.subtask_reference_list[0].uuid,
        "b1b2b3b4-0000-4000-8000-00000000bbbb"
    );
    assert_eq!(
        task.completion_time.as_deref(),
        Some("2025-05-01T10:00:30Z")
    );

    let odd: Task = serde_json::from_value(json!({"uuid": "t", "status": "PAUSING"})).unwrap();
    assert_eq!(odd.status, Some(TaskStatus::Other("PAUSING".to_owned())));
    assert!(!odd.status.unwrap().is_terminal());
    for terminal in ["SUCCEEDED", "FAILED", "ABORTED", "INVALID_UUID"] {
        assert!(TaskStatus::from(terminal).is_terminal(), "{terminal}");
    }
    for running in ["QUEUED", "RUNNING", "SUSPENDED"] {
        assert!(!TaskStatus::from(running).is_terminal(), "{running}");
    }
}

#[test]
fn prism_central_is_told_apart_from_prism_elements() {
    let list: ListResponse<Cluster> = serde_json::from_str(CLUSTER_LIST).unwrap();
    let kinds: Vec<(Option<&str>, bool)> = list
        .entities
        .iter()
        .map(|cluster| (cluster.name(), cluster.is_prism_central()))
        .collect();
    assert_eq!(kinds, [(Some("pe1"), false), (Some("Unnamed"), true)]);
}

#[test]
fn host_gpu_inventory() {
    let list: ListResponse<Host> = serde_json::from_str(HOST_LIST).unwrap();
    let host = &list.entities[0];
    assert_eq!(
        host.cluster_uuid(),
        Some("0005f1a2-b3c4-d5e6-0000-000000000001")
    );
    let gpus = host.gpus();
    assert_eq!(gpus.len(), 2);
    assert!(gpus[0].is_unused());
    assert!(!gpus[1].is_unused());
    assert_eq!(gpus[0].vendor, Some(GpuVendor::Nvidia));
    assert_eq!(gpus[0].mode, Some(GpuMode::PassthroughCompute));
    assert_eq!(gpus[0].extra["pci_address"], json!("0000:3b:00.0"));
}

#[test]
fn users_me_and_idempotence_identifiers() {
    let me: User = serde_json::from_str(USERS_ME).unwrap();
    assert_eq!(me.name(), Some("admin"));
    assert_eq!(
        me.status
            .as_ref()
            .unwrap()
            .resources
            .as_ref()
            .unwrap()
            .display_name
            .as_deref(),
        Some("Administrator")
    );
    let request = IdempotenceIdentifiersRequest {
        client_identifier: "machine-1".to_owned(),
        count: 1,
        valid_duration_in_minutes: Some(60),
        ..IdempotenceIdentifiersRequest::default()
    };
    assert_eq!(
        serde_json::to_value(&request).unwrap(),
        json!({"client_identifier": "machine-1", "count": 1, "valid_duration_in_minutes": 60})
    );
    let reserved: IdempotenceIdentifiers = serde_json::from_value(
        json!({"uuid_list": ["u1"], "expiration_time": "2025-05-01T11:00:00Z"}),
    )
    .unwrap();
    assert_eq!(reserved.uuid_list, ["u1"]);
}

#[test]
fn clone_input_sends_only_overrides() {
    let input = VmCloneInput {
        metadata: Some(VmCloneMetadata {
            uuid: Some("u".to_owned()),
            ..VmCloneMetadata::default()
        }),
        override_spec: VmCloneOverrideSpec {
            name: Some("clone".to_owned()),
            num_sockets: Some(2),
            memory_size_mib: Some(4096),
            ..VmCloneOverrideSpec::default()
        },
        ..VmCloneInput::default()
    };
    assert_eq!(
        serde_json::to_value(&input).unwrap(),
        json!({"metadata": {"uuid": "u"}, "override_spec": {"name": "clone", "num_sockets": 2, "memory_size_mib": 4096}})
    );
    let response: TaskReference = serde_json::from_value(json!({"task_uuid": "t"})).unwrap();
    assert_eq!(response.task_uuid, "t");
}

#[test]
fn delete_response_names_its_task() {
    let response: DeleteResponse = serde_json::from_value(json!({
        "status": {"state": "DELETE_PENDING", "execution_context": {"task_uuid": "t"}},
        "spec": "",
        "api_version": "3.1",
        "metadata": {"kind": "vm"}
    }))
    .unwrap();
    assert_eq!(response.task_uuid(), Some("t"));
    assert_eq!(
        response.status.unwrap().state,
        Some(EntityState::DeletePending)
    );
}

#[test]
fn fields_the_schema_leaves_optional_may_be_absent_and_stay_absent_on_the_way_back() {
    // What v3/swagger.json (prism-go-client) requires: `vm` needs `name` and `resources`; `vm_resources`, `vm_gpu`
    // and the generic `reference` need nothing; `disk_address` needs `adapter_type` and `device_index`.
    let body = json!({
        "api_version": "3.1",
        "metadata": {"kind": "vm", "uuid": "u"},
        "spec": {"name": "bare", "resources": {
            "disk_list": [{"device_properties": {"disk_address": {"adapter_type": "SCSI", "device_index": 0}}}],
            "nic_list": [], "gpu_list": [{"device_id": 7}]}},
        "status": {"state": "COMPLETE", "resources": {"host_reference": {"kind": "host"}}}
    });
    let vm: Vm = serde_json::from_value(body.clone()).unwrap();
    let resources = &vm.spec.as_ref().unwrap().resources;
    assert_eq!(
        (
            resources.num_sockets,
            resources.num_vcpus_per_socket,
            resources.memory_size_mib,
            resources.power_state.as_ref()
        ),
        (None, None, None, None)
    );
    assert_eq!(
        resources.disk_list[0]
            .device_properties
            .as_ref()
            .unwrap()
            .device_type,
        None
    );
    assert_eq!(
        (
            resources.gpu_list[0].vendor.as_ref(),
            resources.gpu_list[0].mode.as_ref()
        ),
        (None, None)
    );
    let host = vm
        .status
        .as_ref()
        .unwrap()
        .resources
        .as_ref()
        .unwrap()
        .host_reference
        .as_ref();
    assert_eq!(host.and_then(|host| host.uuid.as_deref()), None);
    assert_eq!(serde_json::to_value(&vm).unwrap(), body);

    let task: Task = serde_json::from_value(json!({
        "status": "SUCCEEDED", "entity_reference_list": [{"kind": "vm"}, {"kind": "vm", "uuid": "v"}]
    }))
    .unwrap();
    assert_eq!(task.entity_reference_list[1].uuid.as_deref(), Some("v"));
}

#[test]
fn attached_volume_groups_are_read_from_spec_and_status_once_each() {
    let group_disk = |uuid: &str, index: u32| {
        json!({
            "device_properties": {"device_type": "VOLUME_GROUP",
                "disk_address": {"adapter_type": "SCSI", "device_index": index}},
            "volume_group_reference": {"kind": "volume_group", "uuid": uuid},
        })
    };
    let mut vm = value(VM_GET);
    let system_disk = vm["spec"]["resources"]["disk_list"][0].clone();
    vm["spec"]["resources"]["disk_list"] = json!([
        system_disk,
        group_disk("7A1C2B3D-0000-4000-8000-000000000001", 1)
    ]);
    vm["status"]["resources"]["disk_list"] = json!([
        group_disk("7a1c2b3d-0000-4000-8000-000000000001", 1),
        group_disk("7a1c2b3d-0000-4000-8000-000000000002", 2)
    ]);
    let vm: Vm = serde_json::from_value(vm).unwrap();
    assert_eq!(
        vm.attached_volume_groups(),
        vec![
            "7a1c2b3d-0000-4000-8000-000000000001".to_owned(),
            "7a1c2b3d-0000-4000-8000-000000000002".to_owned(),
        ]
    );
    let plain: Vm = serde_json::from_str(VM_GET).unwrap();
    assert!(plain.attached_volume_groups().is_empty());
}
