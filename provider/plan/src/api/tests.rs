use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::core::DeserializeGuard;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::*;

fn fixture(name: &str) -> String {
    let path = format!("{}/../tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn documented_linux_machineset_parses_with_upstream_quirks() {
    let set: MachineSet = serde_saphyr::from_str(&fixture("machineset-linux.yaml")).unwrap();
    assert!(!set.is_windows());
    let config = set.provider_config().unwrap().unwrap();
    assert_eq!(config.boot_type, BootType::Unset);
    assert!(config.project.is_unset());
    assert_eq!(config.categories, None);
    assert_eq!(
        config.image,
        NutanixResourceIdentifier::by_name("ocp-7x2kq-rhcos")
    );
    assert_eq!(config.vcpu_sockets, 4);
    assert_eq!(config.memory_size.0, "16Gi");
    assert!(
        config.metadata.is_some(),
        "metadata: {{creationTimestamp: null}} parses"
    );
}

#[test]
fn documented_windows_machineset_is_windows() {
    let set: MachineSet = serde_saphyr::from_str(&fixture("machineset-windows.yaml")).unwrap();
    assert!(set.is_windows());
    let config = set.provider_config().unwrap().unwrap();
    assert_eq!(config.user_data_secret.unwrap().name, "windows-user-data");
}

#[test]
fn provider_config_serialises_like_upstream() {
    let config = NutanixMachineProviderConfig::from_value(&json!({
        "cluster": {"type": "uuid", "uuid": "u1"},
        "image": {"type": "name", "name": "rhcos"},
        "subnets": [{"type": "uuid", "uuid": "s1"}],
        "vcpusPerSocket": 1, "vcpuSockets": 2, "memorySize": "8Gi", "systemDiskSize": "120Gi",
        "credentialsSecret": {"name": "nutanix-credentials"},
        "dataDisks": [{"diskSize": "10Gi", "deviceProperties": {"deviceType": "Disk", "adapterType": "SCSI"},
                       "storageConfig": {"diskMode": "Standard"}}]
    }))
    .unwrap();
    // Go has no omitempty on bootType, project, categories, gpus and failureDomain, nor on
    // storageContainer; deviceIndex 0 is omitted.
    assert_eq!(
        config.to_value(),
        json!({
            "cluster": {"type": "uuid", "uuid": "u1"},
            "image": {"type": "name", "name": "rhcos"},
            "subnets": [{"type": "uuid", "uuid": "s1"}],
            "vcpusPerSocket": 1, "vcpuSockets": 2, "memorySize": "8Gi", "systemDiskSize": "120Gi",
            "bootType": "",
            "project": {"type": ""},
            "categories": null,
            "gpus": null,
            "dataDisks": [{"diskSize": "10Gi", "deviceProperties": {"deviceType": "Disk", "adapterType": "SCSI"},
                           "storageConfig": {"diskMode": "Standard", "storageContainer": null}}],
            "credentialsSecret": {"name": "nutanix-credentials"},
            "failureDomain": null
        })
    );
}

#[test]
fn unknown_enum_values_are_kept_for_validation_and_written_back() {
    let config = NutanixMachineProviderConfig::from_value(&json!({
        "bootType": "Bios", "imageKind": "Snapshot", "cluster": {"type": "id"}
    }))
    .unwrap();
    assert_eq!(config.boot_type, BootType::Unknown("Bios".into()));
    assert_eq!(
        config.image_kind,
        Some(ImageKind::Unknown("Snapshot".into()))
    );
    assert_eq!(config.to_value()["bootType"], "Bios");
    assert_eq!(config.to_value()["cluster"]["type"], "id");
}

#[test]
fn a_wrong_json_type_is_reported_with_its_path() {
    let error = NutanixMachineProviderConfig::from_value(&json!({
        "vcpuSockets": 2,
        "dataDisks": [{"diskSize": "1Gi"}, {"diskSize": "1Gi", "deviceProperties": {"deviceIndex": "one"}}]
    }))
    .unwrap_err();
    assert_eq!(error.path, "dataDisks[1].deviceProperties.deviceIndex");
    assert!(error.message.contains("expected i32"), "{}", error.message);
}

fn machine_with_everything() -> Value {
    json!({
        "apiVersion": "machine.openshift.io/v1beta1",
        "kind": "Machine",
        "metadata": {"name": "m1", "namespace": "openshift-machine-api", "uid": "abc",
                     "labels": {"machine.openshift.io/os-id": "Windows"}},
        "spec": {
            "metadata": {"labels": {"node-role.kubernetes.io/worker": ""}},
            "lifecycleHooks": {"preDrain": [{"name": "hook", "owner": "me"}]},
            "taints": [{"key": "k", "effect": "NoSchedule"}],
            "providerSpec": {"value": {"cluster": {"type": "uuid", "uuid": "u"}, "futureField": {"x": 1}}},
            "providerID": "nutanix://abc",
            "authoritativeAPI": "MachineAPI",
            "nodeDrainTimeoutSeconds": 30
        },
        "status": {
            "nodeRef": {"kind": "Node", "name": "n1"},
            "lastUpdated": "2026-01-02T03:04:05Z",
            "addresses": [{"type": "InternalIP", "address": "10.0.0.5"}],
            "phase": "Running",
            "conditions": [{"type": "Drainable", "status": "True"}],
            "providerStatus": {"vmUUID": "abc", "instanceState": "Unknown",
                               "conditions": [{"type": "MachineInstanceReady", "status": "True",
                                               "reason": "Machine instance is ready", "message": "",
                                               "lastTransitionTime": "2026-01-02T03:04:05Z"}]},
            "lastOperation": {"type": "Create", "state": "Succeeded"},
            "synchronizedGeneration": 3
        }
    })
}

#[test]
fn a_machine_round_trips_without_losing_fields() {
    let original = machine_with_everything();
    let machine: Machine = serde_json::from_value(original.clone()).unwrap();
    assert!(machine.is_windows());
    assert_eq!(machine.phase(), "Running");
    assert_eq!(machine.spec.lifecycle_hooks.pre_drain.len(), 1);
    assert_eq!(serde_json::to_value(&machine).unwrap(), original);
}

#[test]
fn provider_status_keeps_unknown_fields_and_merges_conditions() {
    let machine: Machine = serde_json::from_value(machine_with_everything()).unwrap();
    let mut status = machine.provider_status().unwrap();
    assert_eq!(status.vm_uuid.as_deref(), Some("abc"));
    let first_time = status.conditions[0].last_transition_time.clone();
    let later = Time("2026-02-01T00:00:00Z".parse().unwrap());

    // Same status: the transition time stays.
    status.set_condition(ProviderCondition {
        type_: "MachineInstanceReady".into(),
        status: "True".into(),
        reason: "MachineInstanceReady".into(),
        last_transition_time: Some(later.clone()),
        ..ProviderCondition::default()
    });
    // Another type is added, not substituted.
    status.set_condition(ProviderCondition {
        type_: "MachineCreation".into(),
        status: "True".into(),
        reason: "MachineCreationSucceeded".into(),
        last_transition_time: Some(later.clone()),
        ..ProviderCondition::default()
    });
    assert_eq!(status.conditions.len(), 2);
    assert_eq!(status.conditions[0].last_transition_time, first_time);
    assert_eq!(status.conditions[0].reason, "MachineInstanceReady");

    // A status change moves the transition time.
    status.set_condition(ProviderCondition {
        type_: "MachineInstanceReady".into(),
        status: "False".into(),
        reason: "MachineInstanceNotReady".into(),
        last_transition_time: Some(later.clone()),
        ..ProviderCondition::default()
    });
    assert_eq!(status.conditions[0].last_transition_time, Some(later));

    let written = status.to_value();
    assert_eq!(written["instanceState"], "Unknown");
    assert_eq!(written["apiVersion"], PROVIDER_API_VERSION);
    assert_eq!(written["kind"], PROVIDER_STATUS_KIND);
}

#[test]
fn machine_conditions_merge_by_type_with_the_provider_conditions_rule() {
    let at = |text: &str| Some(Time(text.parse().unwrap()));
    let condition = |type_: &str, status: &str, when: &str| MachineCondition {
        type_: type_.into(),
        status: status.into(),
        last_transition_time: at(when),
        reason: Some(format!("{type_}{status}")),
        ..MachineCondition::default()
    };
    let mut conditions = vec![condition("Drainable", "True", "2026-01-01T00:00:00Z")];
    merge_condition(
        &mut conditions,
        condition("Drainable", "True", "2026-01-02T00:00:00Z"),
    );
    merge_condition(
        &mut conditions,
        condition("Terminable", "False", "2026-01-02T00:00:00Z"),
    );
    assert_eq!(conditions.len(), 2);
    assert_eq!(
        conditions[0].last_transition_time,
        at("2026-01-01T00:00:00Z")
    );
    merge_condition(
        &mut conditions,
        condition("Drainable", "False", "2026-01-03T00:00:00Z"),
    );
    assert_eq!(
        conditions[0].last_transition_time,
        at("2026-01-03T00:00:00Z")
    );
    assert_eq!(conditions[0].reason.as_deref(), Some("DrainableFalse"));
}

#[test]
fn one_malformed_machine_does_not_fail_the_list() {
    let good = machine_with_everything();
    let mut bad = machine_with_everything();
    bad["metadata"]["name"] = json!("broken");
    bad["spec"]["taints"] = json!("not a list");
    let list: Vec<DeserializeGuard<Machine>> = serde_json::from_value(json!([good, bad])).unwrap();
    assert!(list[0].0.is_ok());
    let invalid = list[1].0.as_ref().unwrap_err();
    assert_eq!(invalid.metadata.name.as_deref(), Some("broken"));
}

#[test]
fn provider_status_absent_is_empty() {
    assert_eq!(
        NutanixMachineProviderStatus::from_value(None).unwrap(),
        NutanixMachineProviderStatus::default()
    );
    assert_eq!(
        NutanixMachineProviderStatus::from_value(Some(&Value::Null)).unwrap(),
        NutanixMachineProviderStatus::default()
    );
}

#[test]
fn annotations_carry_our_choices_and_win_over_the_provider_spec() {
    let set: MachineSet =
        serde_saphyr::from_str(&fixture("machineset-windows-template.yaml")).unwrap();
    let config = set.provider_config().unwrap().unwrap();
    assert_eq!(config.image_kind, Some(ImageKind::Template));
    let settings = config.guest_customization.unwrap();
    assert_eq!(settings.type_, Some(GuestCustomizationType::Sysprep));
    assert_eq!(
        settings.time_zone.as_deref(),
        Some("W. Europe Standard Time")
    );

    let machine: Machine = serde_json::from_value(json!({
        "apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
        "metadata": {"name": "m", "annotations": {
            IMAGE_KIND_ANNOTATION: "VM",
            GUEST_CUSTOMIZATION_ANNOTATION: "Snapshot",
            SYSPREP_ADMIN_PASSWORD_SECRET_ANNOTATION: "win-admin"}},
        "spec": {"providerSpec": {"value": {
            "imageKind": "Template",
            "guestCustomization": {"type": "Sysprep", "timeZone": "UTC"}}}},
    }))
    .unwrap();
    let config = machine.provider_config().unwrap().unwrap();
    assert_eq!(
        config.image_kind,
        Some(ImageKind::Vm),
        "the annotation wins"
    );
    let settings = config.guest_customization.unwrap();
    assert_eq!(
        settings.type_,
        Some(GuestCustomizationType::Sysprep),
        "an unknown annotation value is not applied (validation reports it)"
    );
    assert_eq!(
        settings.time_zone.as_deref(),
        Some("UTC"),
        "kept from providerSpec"
    );
    assert_eq!(settings.admin_password_secret.unwrap().name, "win-admin");
    assert_eq!(
        machine.annotated_choices().guest_customization,
        Some(GuestCustomizationType::Unknown("Snapshot".into()))
    );
}

/// `PROVIDER_SPEC_FIELDS` is exactly what the type writes when every field is set, so a field
/// added to the type is never warned about as unknown.
#[test]
fn provider_spec_fields_are_the_fields_of_the_type() {
    let config = NutanixMachineProviderConfig {
        api_version: Some(PROVIDER_API_VERSION.into()),
        kind: Some(PROVIDER_CONFIG_KIND.into()),
        metadata: Some(Default::default()),
        categories: Some(Vec::new()),
        gpus: Some(Vec::new()),
        data_disks: Some(Vec::new()),
        user_data_secret: Some(Default::default()),
        credentials_secret: Some(Default::default()),
        failure_domain: Some(Default::default()),
        image_kind: Some(ImageKind::Image),
        guest_customization: Some(Default::default()),
        ..Default::default()
    };
    let value = serde_json::to_value(&config).unwrap();
    let mut written: Vec<&str> = value
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let mut listed = PROVIDER_SPEC_FIELDS.to_vec();
    written.sort_unstable();
    listed.sort_unstable();
    assert_eq!(written, listed);
}

#[test]
fn annotations_under_our_prefix_that_we_do_not_read_are_unknown() {
    let annotations: std::collections::BTreeMap<String, String> = [
        (IMAGE_KIND_ANNOTATION, "Template"),
        (
            "nutanix.machine.openshift.io/guest-customisation",
            "Sysprep",
        ),
        (VTPM_ANNOTATION, "Enabled"),
        (
            SYSTEM_DISK_STORAGE_CONTAINER_ANNOTATION,
            "c0c0c0c0-0000-4000-8000-000000000001",
        ),
        ("nutanix.machine.openshift.io/system-disk-container", "x"),
        ("machine.openshift.io/exclude-node-draining", ""),
        ("nutanix.machine.openshift.io/", "x"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    assert_eq!(
        unknown_annotations(Some(&annotations)),
        [
            "nutanix.machine.openshift.io/",
            "nutanix.machine.openshift.io/guest-customisation",
            "nutanix.machine.openshift.io/system-disk-container"
        ]
    );
    assert!(unknown_annotations(None).is_empty());
    for key in KNOWN_ANNOTATIONS {
        assert!(key.starts_with(ANNOTATION_PREFIX), "{key}");
    }
}

#[test]
fn every_providerstatus_shape_the_go_provider_writes_is_read_with_its_vm_uuid() {
    let uuid = "5c867413-e578-4052-8499-4eda74b868b4";
    for (shape, value, vm_uuid) in super::go_provider_status::all(uuid) {
        let status = NutanixMachineProviderStatus::from_value(Some(&value))
            .unwrap_or_else(|error| panic!("{shape}: {error}"));
        assert_eq!(status.vm_uuid, vm_uuid, "{shape}");
        assert!(
            status.unreadable.is_empty(),
            "{shape}: {:?}",
            status.unreadable
        );
        let conditions = value["conditions"].as_array().map_or(0, Vec::len);
        assert_eq!(
            status.conditions.len(),
            conditions,
            "{shape}: every condition kept"
        );
        for condition in &status.conditions {
            assert_eq!(condition.last_transition_time, None, "{shape}");
            assert!(!condition.reason.is_empty(), "{shape}");
        }
        // Written back as it was read (apiVersion and kind added), with no time invented.
        let mut written = status.to_value();
        let object = written.as_object_mut().unwrap();
        assert_eq!(
            object.remove("apiVersion"),
            Some(json!(PROVIDER_API_VERSION))
        );
        assert_eq!(object.remove("kind"), Some(json!(PROVIDER_STATUS_KIND)));
        let mut expected = value.clone();
        let listed = expected.get_mut("conditions").and_then(Value::as_array_mut);
        for condition in listed.into_iter().flatten() {
            condition
                .as_object_mut()
                .unwrap()
                .remove("lastTransitionTime");
        }
        assert_eq!(written, expected, "{shape}");
    }
}

#[test]
fn a_providerstatus_value_that_cannot_be_read_costs_nothing_else() {
    let value = json!({
        "vmUUID": "abc",
        "pendingTask": "not an object",
        "deletionSent": {"vmUUID": 7},
        "conditions": [
            {"type": "MachineUpdate", "status": "True"},
            {"status": "True"},
            "garbage"
        ],
        "instanceState": "Unknown"
    });
    let status = NutanixMachineProviderStatus::from_value(Some(&value)).unwrap();
    assert_eq!(status.vm_uuid.as_deref(), Some("abc"));
    assert_eq!(status.pending_task, None);
    assert_eq!(
        status.unreadable.keys().collect::<Vec<_>>(),
        ["deletionSent", "pendingTask"]
    );
    assert_eq!(
        status.unreadable["deletionSent"].error.path,
        "deletionSent.vmUUID"
    );
    assert_eq!(status.conditions.len(), 1, "the readable condition is kept");
    assert_eq!(status.other["instanceState"], json!("Unknown"));
    // What could not be read is written back as it was, unless set again.
    let written = status.to_value();
    assert_eq!(written["pendingTask"], json!("not an object"));
    assert_eq!(written["deletionSent"], json!({"vmUUID": 7}));
    let mut cleared = status.clone();
    cleared.deletion_sent = Some(DeletionSent {
        vm_uuid: "abc".into(),
        at: Time("2026-12-06T00:00:00Z".parse().unwrap()),
    });
    assert_eq!(cleared.to_value()["deletionSent"]["vmUUID"], json!("abc"));

    // Only a vmUUID that is not a string, or a status that is not an object, is refused.
    assert!(matches!(
        NutanixMachineProviderStatus::from_value(Some(&json!({"vmUUID": 5}))),
        Err(ProviderStatusError::VmUuidUnreadable(_))
    ));
    assert_eq!(
        NutanixMachineProviderStatus::from_value(Some(&json!("text"))),
        Err(ProviderStatusError::NotAnObject)
    );
}
