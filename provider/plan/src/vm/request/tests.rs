use pretty_assertions::assert_eq;
use prism_types::Sensitive;
use prism_types::v3::{GpuMode, GpuVendor, Vm};
use serde_json::{Value, json};

use super::*;
use crate::vm::DiskAddressPlan;
use crate::vm::identity::MachineIdentity;

const VM_UUID: &str = "aaaaaaaa-0000-4000-8000-000000000001";

fn plan(source: SourcePlan, boot: BootPlan) -> VmPlan {
    let identity = MachineIdentity {
        namespace: "ns".into(),
        name: "vm-1".into(),
        uid: "uid-1".into(),
    };
    VmPlan {
        description: identity.description(),
        name: "vm-1".into(),
        identity,
        cluster: EntityRef::Uuid("cluster-1".into()),
        source,
        subnets: vec![
            EntityRef::Uuid("subnet-1".into()),
            EntityRef::Name("vlan-20".into()),
        ],
        assigned_ips: Vec::new(),
        num_sockets: 4,
        vcpus_per_socket: 2,
        memory_mib: 16_384,
        system_disk_mib: 122_880,
        system_disk_storage_container: None,
        vtpm_enabled: false,
        data_disks: vec![PlannedDataDisk {
            size_mib: 10_240,
            address: Some(DiskAddressPlan {
                device_type: DiskDeviceType::Disk,
                adapter: DiskAdapterType::Scsi,
                index: 1,
            }),
            flash_mode: true,
            storage_container_uuid: Some("container-1".into()),
            data_source: None,
        }],
        gpus: vec![PlannedGpu::Assigned {
            vendor: GpuVendor::Nvidia,
            mode: GpuMode::PassthroughCompute,
            device_id: Some(7864),
        }],
        boot,
        project: Some(EntityRef::Uuid("project-1".into())),
        categories: BTreeMap::from([("kubernetes-io-cluster-ocp".into(), "owned".into())]),
        guest: GuestPlan::CloudInit {
            user_data: Sensitive::new("dXNlcg=="),
            meta_data: None,
        },
        warnings: Vec::new(),
    }
}

fn image() -> SourcePlan {
    SourcePlan::Image(EntityRef::Uuid("image-1".into()))
}

#[test]
fn create_body_carries_the_whole_vm() {
    let request = build_request(&plan(image(), BootPlan::Legacy), VM_UUID);
    assert_eq!(
        request.endpoint(),
        ("POST", "/api/nutanix/v3/vms".to_owned())
    );
    assert_eq!(request.follow_up(), None);
    let body = request.body_json();
    assert_eq!(body["api_version"], "3.1");
    assert_eq!(
        body["metadata"],
        json!({"kind": "vm", "uuid": VM_UUID, "project_reference": {"kind": "project", "uuid": "project-1"},
               "categories": {"kubernetes-io-cluster-ocp": "owned"}})
    );
    assert_eq!(body["spec"]["name"], "vm-1");
    assert_eq!(
        body["spec"]["description"],
        "openshift-machine: ns/vm-1 uid=uid-1"
    );
    assert_eq!(
        body["spec"]["cluster_reference"],
        json!({"kind": "cluster", "uuid": "cluster-1"})
    );
    let resources = &body["spec"]["resources"];
    assert_eq!(
        (
            &resources["num_sockets"],
            &resources["num_vcpus_per_socket"],
            &resources["memory_size_mib"]
        ),
        (&json!(4), &json!(2), &json!(16_384))
    );
    assert_eq!(
        (
            &resources["power_state"],
            &resources["hardware_clock_timezone"]
        ),
        (&json!("ON"), &json!("UTC"))
    );
    assert_eq!(
        resources["boot_config"],
        json!({"boot_type": "LEGACY", "boot_device_order_list": ["CDROM", "DISK", "NETWORK"]})
    );
    assert_eq!(resources.get("machine_type"), None);
    assert_eq!(
        resources["disk_list"],
        json!([
            {"data_source_reference": {"kind": "image", "uuid": "image-1"}, "disk_size_mib": 122_880},
            {"disk_size_mib": 10_240,
             "device_properties": {"device_type": "DISK", "disk_address": {"adapter_type": "SCSI", "device_index": 1}},
             "storage_config": {"flash_mode": "ENABLED", "storage_container_reference": {"kind": "storage_container", "uuid": "container-1"}}}
        ])
    );
    assert_eq!(
        resources["nic_list"],
        json!([{"subnet_reference": {"kind": "subnet", "uuid": "subnet-1"}},
               {"subnet_reference": {"kind": "subnet", "uuid": "", "name": "vlan-20"}}]),
        "one NIC per subnet in order; an unresolved name stays a name"
    );
    assert_eq!(
        resources["gpu_list"],
        json!([{"vendor": "NVIDIA", "mode": "PASSTHROUGH_COMPUTE", "device_id": 7864}])
    );
    assert_eq!(
        resources["guest_customization"],
        json!({"is_overridable": true, "cloud_init": {"user_data": "dXNlcg=="}})
    );
}

#[test]
fn boot_types_map_to_prism() {
    let resources = |boot| {
        build_request(&plan(image(), boot), VM_UUID).body_json()["spec"]["resources"].clone()
    };
    let uefi = resources(BootPlan::Uefi);
    assert_eq!(
        (
            uefi["boot_config"].clone(),
            uefi.get("machine_type").cloned()
        ),
        (json!({"boot_type": "UEFI"}), None)
    );
    let secure = resources(BootPlan::SecureBoot);
    assert_eq!(secure["boot_config"], json!({"boot_type": "SECURE_BOOT"}));
    assert_eq!(
        secure["machine_type"], "Q35",
        "AHV refuses secure boot without Q35"
    );
    assert_eq!(
        resources(BootPlan::Default).get("boot_config"),
        None,
        "bootType \"\" keeps AHV's default"
    );
}

#[test]
fn sysprep_goes_into_guest_customization_as_base64() {
    let unattend = crate::vm::unattend::Unattend {
        xml: Sensitive::new("<unattend/>"),
        warnings: Vec::new(),
    };
    let mut plan = plan(image(), BootPlan::Uefi);
    plan.guest = GuestPlan::Sysprep(unattend);
    let body = build_request(&plan, VM_UUID).body_json();
    assert_eq!(
        body["spec"]["resources"]["guest_customization"],
        json!({"is_overridable": true, "sysprep": {"install_type": "PREPARED", "unattend_xml": "PHVuYXR0ZW5kLz4="}})
    );
}

#[test]
fn clone_takes_the_reserved_uuid_and_defers_the_rest() {
    let source = SourcePlan::Vm {
        source_vm: EntityRef::Uuid("golden-1".into()),
        resize_system_disk_mib: Some(204_800),
    };
    let mut plan = plan(source, BootPlan::FromSource);
    plan.data_disks.clear();
    plan.gpus.clear();
    let request = build_request(&plan, VM_UUID);
    assert_eq!(
        request.endpoint(),
        ("POST", "/api/nutanix/v3/vms/golden-1/clone".to_owned())
    );
    assert_eq!(
        request.body_json(),
        json!({
            "metadata": {"uuid": VM_UUID},
            "override_spec": {
                "name": "vm-1", "num_sockets": 4, "num_vcpus_per_socket": 2, "memory_size_mib": 16_384,
                "nic_list": [{"subnet_reference": {"kind": "subnet", "uuid": "subnet-1"}},
                             {"subnet_reference": {"kind": "subnet", "uuid": "", "name": "vlan-20"}}],
                "guest_customization": {"is_overridable": true, "cloud_init": {"user_data": "dXNlcg=="}}
            }
        })
    );
    assert_eq!(
        request.follow_up(),
        Some(&FollowUpUpdate {
            description: "openshift-machine: ns/vm-1 uid=uid-1".into(),
            categories: BTreeMap::from([("kubernetes-io-cluster-ocp".into(), "owned".into())]),
            project_uuid: Some("project-1".into()),
            resize_system_disk_mib: Some(204_800),
            vtpm_enabled: false,
            power_on: true,
            reassert_power: false,
        })
    );
}

#[test]
fn a_static_address_is_the_nics_assigned_endpoint_in_create_and_clone() {
    let mut create = plan(image(), BootPlan::Default);
    create.assigned_ips = vec![Some("10.0.0.21".parse().unwrap())];
    let body = build_request(&create, VM_UUID).body_json();
    assert_eq!(
        body["spec"]["resources"]["nic_list"],
        json!([
            {"subnet_reference": {"kind": "subnet", "uuid": "subnet-1"},
             "ip_endpoint_list": [{"ip": "10.0.0.21", "type": "ASSIGNED"}]},
            {"subnet_reference": {"kind": "subnet", "uuid": "", "name": "vlan-20"}}
        ])
    );
    let mut clone = plan(
        SourcePlan::Vm {
            source_vm: EntityRef::Uuid("golden-1".into()),
            resize_system_disk_mib: None,
        },
        BootPlan::FromSource,
    );
    clone.assigned_ips = vec![None, Some("10.0.1.5".parse().unwrap())];
    let body = build_request(&clone, VM_UUID).body_json();
    assert_eq!(
        body["override_spec"]["nic_list"][1]["ip_endpoint_list"],
        json!([{"ip": "10.0.1.5", "type": "ASSIGNED"}])
    );
    assert!(
        body["override_spec"]["nic_list"][0]
            .get("ip_endpoint_list")
            .is_none()
    );
}

#[test]
fn deploy_is_a_v4_body_with_typed_guest_customization() {
    let source = SourcePlan::Template {
        template: EntityRef::Uuid("tmpl-1".into()),
        version_id: Some("ver-2".into()),
        resize_system_disk_mib: None,
    };
    let mut plan = plan(source, BootPlan::FromSource);
    plan.data_disks.clear();
    plan.gpus.clear();
    plan.guest = GuestPlan::CloudInit {
        user_data: Sensitive::new("dXNlcg=="),
        meta_data: Some(Sensitive::new("bWV0YQ==")),
    };
    let request = build_request(&plan, VM_UUID);
    assert_eq!(
        request.endpoint(),
        (
            "POST",
            "/api/vmm/v4.0/content/templates/tmpl-1/$actions/deploy".to_owned()
        )
    );
    assert_eq!(
        request.body_json(),
        json!({
            "numberOfVms": 1,
            "clusterReference": "cluster-1",
            "versionId": "ver-2",
            "overrideVmConfigMap": {"0": {
                "name": "vm-1", "numSockets": 4, "numCoresPerSocket": 2, "numThreadsPerCore": 1,
                "memorySizeBytes": 17_179_869_184u64,
                "nics": [{"networkInfo": {"nicType": "NORMAL_NIC", "subnet": {"extId": "subnet-1"}}},
                         {"networkInfo": {"nicType": "NORMAL_NIC", "subnet": {"extId": "vlan-20"}}}],
                "guestCustomization": {"config": {
                    "$objectType": "vmm.v4.ahv.config.CloudInit", "datasourceType": "CONFIG_DRIVE_V2", "metadata": "bWV0YQ==",
                    "cloudInitScript": {"$objectType": "vmm.v4.ahv.config.Userdata", "value": "dXNlcg=="}}}
            }}
        })
    );
    assert!(
        request
            .follow_up()
            .is_some_and(|f| f.power_on && f.resize_system_disk_mib.is_none())
    );
}

/// A cloned VM as GET returns it (trimmed): a CD-ROM first, the boot disk at SCSI 0.
fn cloned_vm() -> Vm {
    serde_json::from_value(json!({
        "api_version": "3.1",
        "metadata": {"kind": "vm", "uuid": VM_UUID, "spec_version": 3, "spec_hash": "h",
                     "categories": {"Team": "infra"}, "categories_mapping": {"Team": ["infra"]}, "use_categories_mapping": false},
        "spec": {"name": "vm-1", "cluster_reference": {"kind": "cluster", "uuid": "cluster-1"},
                 "resources": {"num_sockets": 4, "num_vcpus_per_socket": 2, "memory_size_mib": 16384, "power_state": "OFF",
                               "disk_list": [
                                   {"uuid": "cd", "device_properties": {"device_type": "CDROM", "disk_address": {"adapter_type": "IDE", "device_index": 0}}},
                                   {"uuid": "d1", "disk_size_mib": 65536, "disk_size_bytes": 68719476736u64,
                                    "device_properties": {"device_type": "DISK", "disk_address": {"adapter_type": "SCSI", "device_index": 0}}}
                               ],
                               "nic_list": [], "vendor_field": {"kept": true}}},
        "status": {"state": "COMPLETE"}
    }))
    .unwrap()
}

#[test]
fn follow_up_update_changes_what_clone_could_not_and_only_once() {
    let follow_up = FollowUpUpdate {
        description: "openshift-machine: ns/vm-1 uid=uid-1".into(),
        categories: BTreeMap::from([("kubernetes-io-cluster-ocp".into(), "owned".into())]),
        project_uuid: Some("project-1".into()),
        resize_system_disk_mib: Some(102_400),
        vtpm_enabled: false,
        power_on: true,
        reassert_power: false,
    };
    let mut input = cloned_vm().into_update_input().unwrap();
    assert_eq!(follow_up.apply(&mut input), Ok(true));
    let body: Value = serde_json::to_value(&input).unwrap();
    assert_eq!(body.get("status"), None, "PUT never sends status");
    assert_eq!(
        body["metadata"]["spec_version"], 3,
        "the version read is sent back"
    );
    assert_eq!(
        body["metadata"]["categories"],
        json!({"Team": "infra", "kubernetes-io-cluster-ocp": "owned"})
    );
    assert_eq!(
        body["metadata"]["categories_mapping"]["kubernetes-io-cluster-ocp"],
        json!(["owned"])
    );
    assert_eq!(
        body["metadata"]["project_reference"],
        json!({"kind": "project", "uuid": "project-1"})
    );
    assert_eq!(
        body["spec"]["description"],
        "openshift-machine: ns/vm-1 uid=uid-1"
    );
    assert_eq!(body["spec"]["resources"]["power_state"], "ON");
    let boot_disk = &body["spec"]["resources"]["disk_list"][1];
    assert_eq!(
        (&boot_disk["disk_size_mib"], &boot_disk["disk_size_bytes"]),
        (&json!(102_400), &json!(107_374_182_400u64))
    );
    assert_eq!(
        body["spec"]["resources"]["disk_list"][0].get("disk_size_mib"),
        None,
        "the CD-ROM is left alone"
    );
    assert_eq!(
        body["spec"]["resources"]["vendor_field"],
        json!({"kept": true}),
        "unknown fields survive"
    );

    assert_eq!(
        follow_up.apply(&mut input),
        Ok(false),
        "applied already: no second PUT"
    );
}

#[test]
fn follow_up_never_shrinks_and_needs_a_disk_to_grow() {
    let mut follow_up = FollowUpUpdate {
        description: "d".into(),
        categories: BTreeMap::new(),
        project_uuid: None,
        resize_system_disk_mib: Some(1024),
        vtpm_enabled: false,
        power_on: false,
        reassert_power: false,
    };
    let mut input = cloned_vm().into_update_input().unwrap();
    follow_up.apply(&mut input).unwrap();
    assert_eq!(
        input.spec.resources.disk_list[1].disk_size_mib,
        Some(65_536)
    );

    follow_up.resize_system_disk_mib = Some(200_000);
    input.spec.resources.disk_list.remove(1);
    assert_eq!(
        follow_up.apply(&mut input),
        Err(FollowUpError::NoSystemDisk(200_000))
    );
}

#[test]
fn a_reasserted_power_on_is_sent_although_the_spec_already_asks_for_it() {
    let update = FollowUpUpdate::reassert_power("d".into());
    let mut input = cloned_vm().into_update_input().unwrap();
    input.spec.description = Some("d".into());
    input.spec.resources.power_state = Some(PowerState::On);
    assert_eq!(
        update.apply(&mut input),
        Ok(true),
        "a create whose power-on failed leaves the spec ON and the VM OFF: only a new PUT retries it"
    );
    let plain = FollowUpUpdate {
        reassert_power: false,
        ..update
    };
    assert_eq!(plain.apply(&mut input), Ok(false));
}

#[test]
fn the_system_disk_container_and_the_vtpm_go_into_the_create_body() {
    let mut plan = plan(image(), BootPlan::Uefi);
    plan.system_disk_storage_container = Some("c0c0c0c0-0000-4000-8000-000000000002".into());
    plan.vtpm_enabled = true;
    let body = build_request(&plan, VM_UUID).body_json();
    let resources = &body["spec"]["resources"];
    assert_eq!(
        resources["disk_list"][0],
        json!({"data_source_reference": {"kind": "image", "uuid": "image-1"}, "disk_size_mib": 122_880,
               "storage_config": {"storage_container_reference":
                   {"kind": "storage_container", "uuid": "c0c0c0c0-0000-4000-8000-000000000002"}}}),
        "the boot disk names its container as a data disk does"
    );
    assert_eq!(resources["vtpm_config"], json!({"vtpm_enabled": true}));

    plan.vtpm_enabled = false;
    let body = build_request(&plan, VM_UUID).body_json();
    assert_eq!(
        body["spec"]["resources"].get("vtpm_config"),
        None,
        "no vTPM: nothing sent, AHV's default (off) applies"
    );
}

#[test]
fn a_clone_or_deploy_gets_its_vtpm_from_the_follow_up_update() {
    let source = SourcePlan::Vm {
        source_vm: EntityRef::Uuid("golden-1".into()),
        resize_system_disk_mib: None,
    };
    let mut plan = plan(source, BootPlan::FromSource);
    plan.data_disks.clear();
    plan.gpus.clear();
    plan.vtpm_enabled = true;
    let request = build_request(&plan, VM_UUID);
    assert_eq!(
        request.body_json()["override_spec"].get("vtpm_config"),
        None,
        "vm_clone_override_spec has no vtpm_config"
    );
    let follow_up = request.follow_up().unwrap().clone();
    assert!(follow_up.vtpm_enabled);
    assert_eq!(
        serde_json::to_value(&follow_up).unwrap()["vtpmEnabled"],
        true,
        "recorded on the Machine with the rest of the follow-up"
    );

    let mut input = cloned_vm().into_update_input().unwrap();
    input.spec.resources.vtpm_config = Some(VtpmConfig {
        vtpm_enabled: Some(false),
        ..VtpmConfig::default()
    });
    assert_eq!(follow_up.apply(&mut input), Ok(true));
    assert_eq!(
        serde_json::to_value(&input).unwrap()["spec"]["resources"]["vtpm_config"],
        json!({"vtpm_enabled": true})
    );
    assert_eq!(follow_up.apply(&mut input), Ok(false), "applied already");

    let without = FollowUpUpdate {
        vtpm_enabled: false,
        ..follow_up
    };
    let mut input = cloned_vm().into_update_input().unwrap();
    without.apply(&mut input).unwrap();
    assert_eq!(
        input.spec.resources.vtpm_config, None,
        "left as the source has it"
    );
}

/// A follow-up's effects read from a real listed entity (`list_vm.json`, pc.2024.3.0.1: OFF,
/// description `test-vm-description`, an 8,192 MiB disk at SCSI 0), then from the same entity
/// once each effect is there.
#[test]
fn a_follow_up_is_shown_by_a_listing_only_with_every_effect_it_asks_for() {
    let recorded: Value = serde_json::from_str(include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../hack/prism-mock/recorded/list_vm.json"
    )))
    .unwrap();
    let entity = recorded["exchanges"][0]["response"]["body"]["entities"][0].clone();
    let listed = |change: &dyn Fn(&mut Value)| -> Vm {
        let mut entity = entity.clone();
        change(&mut entity);
        serde_json::from_value(entity).unwrap()
    };
    let update = FollowUpUpdate {
        description: "test-vm-description".into(),
        categories: BTreeMap::new(),
        project_uuid: None,
        resize_system_disk_mib: None,
        vtpm_enabled: false,
        power_on: true,
        reassert_power: false,
    };
    let on = |vm: &mut Value| vm["status"]["resources"]["power_state"] = json!("ON");
    assert!(!update.shown_by(&listed(&|_| {})), "still OFF");
    assert!(update.shown_by(&listed(&on)));
    let other_description = FollowUpUpdate {
        description: "openshift-machine: ns/vm-1 uid=uid-1".into(),
        ..update.clone()
    };
    assert!(
        !other_description.shown_by(&listed(&on)),
        "the intent is not the update's"
    );
    let categorised = FollowUpUpdate {
        categories: BTreeMap::from([("kubernetes-io-cluster-x".into(), "owned".into())]),
        ..update.clone()
    };
    assert!(!categorised.shown_by(&listed(&on)));
    assert!(categorised.shown_by(&listed(&|vm| {
        on(vm);
        vm["metadata"]["categories"]["kubernetes-io-cluster-x"] = json!("owned");
    })));
    let resized = FollowUpUpdate {
        resize_system_disk_mib: Some(122_880),
        ..update.clone()
    };
    assert!(
        !resized.shown_by(&listed(&on)),
        "the disk is still 8,192 MiB"
    );
    assert!(resized.shown_by(&listed(&|vm| {
        on(vm);
        vm["spec"]["resources"]["disk_list"][0]["disk_size_mib"] = json!(122_880);
    })));
    let with_vtpm = FollowUpUpdate {
        vtpm_enabled: true,
        ..update
    };
    assert!(
        !with_vtpm.shown_by(&listed(&on)),
        "a listing never shows the vTPM"
    );
}
