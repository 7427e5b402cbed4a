use k8s_openapi::jiff::Timestamp;
use pretty_assertions::assert_eq;

use super::*;

fn at(seconds: i64) -> Time {
    Time(Timestamp::from_second(seconds).unwrap())
}

fn machine(status: Value) -> Machine {
    serde_json::from_value(json!({
        "apiVersion": "machine.openshift.io/v1beta1",
        "kind": "Machine",
        "metadata": {"name": "m", "namespace": "ns", "resourceVersion": "42",
                     "labels": {"machine.openshift.io/zone": "pe-1", "other": "x"}},
        "spec": {"providerID": "nutanix://u"},
        "status": status,
    }))
    .unwrap()
}

#[test]
fn nothing_changed_means_no_patch() {
    let m = machine(json!({
        "phase": "Running",
        "nodeRef": {"kind": "Node", "name": "n"},
        "addresses": [{"type": "InternalIP", "address": "10.0.0.5"}],
        "providerStatus": {"vmUUID": "u", "conditions": [
            {"type": "MachineCreation", "status": "True", "reason": "MachineCreationSucceeded",
             "message": "", "lastTransitionTime": "2024-01-01T00:00:00Z"}]},
    }));
    let provider_status = m.provider_status().unwrap();
    let update = StatusUpdate {
        phase: Some(phase::RUNNING),
        addresses: Some(vec![NodeAddress {
            type_: "InternalIP".into(),
            address: "10.0.0.5".into(),
        }]),
        provider_status: Some(provider_status),
        ..StatusUpdate::default()
    };
    assert_eq!(status_patch(&m, &update, &at(1_000)), None);
}

#[test]
fn a_change_is_a_minimal_patch_with_a_precondition_and_last_updated() {
    let m = machine(json!({
        "phase": "Provisioned",
        "nodeRef": {"kind": "Node", "name": "n"},
        "lastOperation": {"description": "kept"},
    }));
    let update = StatusUpdate {
        phase: Some(phase::RUNNING),
        ..StatusUpdate::default()
    };
    let patch = status_patch(&m, &update, &at(1_000)).unwrap();
    assert_eq!(
        patch,
        json!({
            "metadata": {"resourceVersion": "42"},
            "status": {"phase": "Running", "lastUpdated": "1970-01-01T00:16:40Z"},
        }),
        "nodeRef and lastOperation are not written"
    );
}

#[test]
fn errors_are_kept_only_in_phase_failed() {
    let failed = machine(json!({"phase": "Provisioning"}));
    let update = StatusUpdate {
        phase: Some(phase::FAILED),
        error: Some((
            Some("InvalidConfiguration".into()),
            "providerSpec.vcpuSockets: must be at least 1".into(),
        )),
        ..StatusUpdate::default()
    };
    let patch = status_patch(&failed, &update, &at(0)).unwrap();
    assert_eq!(patch["status"]["errorReason"], "InvalidConfiguration");
    assert_eq!(
        patch["status"]["errorMessage"],
        "providerSpec.vcpuSockets: must be at least 1"
    );

    let recovered = machine(json!({"phase": "Provisioning", "errorMessage": "old"}));
    let patch = status_patch(&recovered, &StatusUpdate::default(), &at(0)).unwrap();
    assert_eq!(patch["status"]["errorMessage"], Value::Null);
    assert!(
        patch["status"]
            .as_object()
            .unwrap()
            .contains_key("errorMessage"),
        "cleared with an explicit null"
    );
}

#[test]
fn conditions_merge_by_type_and_keep_their_transition_time() {
    let m = machine(json!({
        "phase": "Deleting",
        "conditions": [
            {"type": "Drained", "status": "False", "reason": "DrainBlocked", "severity": "Warning",
             "lastTransitionTime": "1970-01-01T00:00:10Z"},
            {"type": "Other", "status": "True", "lastTransitionTime": "1970-01-01T00:00:05Z"},
        ],
    }));
    let still_blocked = StatusUpdate {
        conditions: vec![machine_condition(
            conditions::INSTANCE_EXISTS,
            true,
            None,
            None,
            &at(50),
        )],
        ..StatusUpdate::default()
    };
    let patch = status_patch(&m, &still_blocked, &at(50)).unwrap();
    let written = patch["status"]["conditions"].as_array().unwrap();
    assert_eq!(written.len(), 3, "other types are kept: {written:?}");

    let drained = StatusUpdate {
        conditions: vec![machine_condition(
            "Drained",
            true,
            Some(conditions::DRAINED),
            None,
            &at(60),
        )],
        ..StatusUpdate::default()
    };
    let patch = status_patch(&m, &drained, &at(60)).unwrap();
    let written = &patch["status"]["conditions"];
    assert_eq!(written[0]["status"], "True");
    assert_eq!(written[0]["lastTransitionTime"], "1970-01-01T00:01:00Z");
    assert_eq!(written[0].get("severity"), None);
    assert_eq!(written[1]["type"], "Other");

    let blocked_again = StatusUpdate {
        conditions: vec![machine_condition(
            "Drained",
            false,
            Some(conditions::DRAIN_BLOCKED),
            Some("pod p: disruption budget".into()),
            &at(70),
        )],
        ..StatusUpdate::default()
    };
    let patch = status_patch(&m, &blocked_again, &at(70)).unwrap();
    assert_eq!(
        patch["status"]["conditions"][0]["lastTransitionTime"], "1970-01-01T00:00:10Z",
        "same status: the transition time stays"
    );
}

#[test]
fn provider_status_keys_removed_are_sent_as_null() {
    let m = machine(json!({
        "phase": "Provisioning",
        "providerStatus": {"apiVersion": "machine.openshift.io/v1",
                           "kind": "NutanixMachineProviderStatus",
                           "vmUUID": "u", "pendingTask": {"id": "t", "operation": "Create"},
                           "instanceState": "kept"},
    }));
    let mut provider_status = m.provider_status().unwrap();
    provider_status.pending_task = None;
    let update = StatusUpdate {
        provider_status: Some(provider_status),
        ..StatusUpdate::default()
    };
    let patch = status_patch(&m, &update, &at(0)).unwrap();
    assert_eq!(
        patch["status"]["providerStatus"],
        json!({"pendingTask": null})
    );
}

#[test]
fn provider_condition_merge_keeps_transition_time() {
    let mut status = NutanixMachineProviderStatus::default();
    status.set_condition(provider_condition(
        conditions::MACHINE_CREATION,
        true,
        conditions::CREATION_SUCCEEDED,
        "",
        &at(10),
    ));
    status.set_condition(provider_condition(
        conditions::MACHINE_CREATION,
        true,
        conditions::CREATION_SUCCEEDED,
        "",
        &at(20),
    ));
    assert_eq!(status.conditions.len(), 1);
    assert_eq!(status.conditions[0].last_transition_time, Some(at(10)));
}

#[test]
fn metadata_patch_touches_only_changed_keys() {
    let m = machine(json!({}));
    let labels = BTreeMap::from([
        (ZONE_LABEL.to_owned(), "pe-1".to_owned()),
        (REGION_LABEL.to_owned(), "pc".to_owned()),
    ]);
    let annotations =
        BTreeMap::from([(INSTANCE_STATE_ANNOTATION.to_owned(), "COMPLETE".to_owned())]);
    assert_eq!(
        metadata_patch(&m, &labels, &annotations, Some("nutanix://u")).unwrap(),
        json!({"metadata": {"labels": {"machine.openshift.io/region": "pc"},
                            "annotations": {"machine.openshift.io/instance-state": "COMPLETE"}}})
    );
    assert_eq!(
        metadata_patch(&m, &BTreeMap::new(), &BTreeMap::new(), Some("nutanix://v")).unwrap(),
        json!({"spec": {"providerID": "nutanix://v"}})
    );
    let zone_only = BTreeMap::from([(ZONE_LABEL.to_owned(), "pe-1".to_owned())]);
    assert_eq!(
        metadata_patch(&m, &zone_only, &BTreeMap::new(), Some("nutanix://u")),
        None
    );
}

#[test]
fn labels_and_annotations_from_the_vm() {
    let vm: Vm = serde_json::from_value(json!({
        "metadata": {"kind": "vm", "uuid": "u"},
        "status": {"state": "COMPLETE", "cluster_reference": {"kind": "cluster", "uuid": "c", "name": "pe-1"},
                   "resources": {"power_state": "ON", "hypervisor_type": "AHV"}},
    }))
    .unwrap();
    assert_eq!(
        vm_labels(&vm, Some("prism-central")),
        BTreeMap::from([
            (INSTANCE_TYPE_LABEL.to_owned(), "AHV".to_owned()),
            (REGION_LABEL.to_owned(), "prism-central".to_owned()),
            (ZONE_LABEL.to_owned(), "pe-1".to_owned()),
        ])
    );
    assert_eq!(
        vm_annotations(&vm),
        BTreeMap::from([
            (INSTANCE_POWER_STATE_ANNOTATION.to_owned(), "ON".to_owned()),
            (INSTANCE_STATE_ANNOTATION.to_owned(), "COMPLETE".to_owned()),
        ])
    );
    let bare: Vm = serde_json::from_value(json!({"metadata": {"kind": "vm"}})).unwrap();
    assert!(vm_labels(&bare, None).is_empty());
    assert!(vm_annotations(&bare).is_empty());
}

#[test]
fn merge_diff_rules() {
    assert_eq!(merge_diff(&json!({"a": 1}), &json!({"a": 1})), None);
    assert_eq!(
        merge_diff(
            &json!({"a": 1, "b": {"c": 1, "d": 2}, "e": [1]}),
            &json!({"a": 1, "b": {"c": 2}, "e": [1, 2], "f": "new"})
        ),
        Some(json!({"b": {"c": 2, "d": null}, "e": [1, 2], "f": "new"}))
    );
}

#[test]
fn failed_reconciles_are_named_as_the_go_provider_names_them_and_notes_fit() {
    let with = |phase: Option<&str>, deleting: bool| -> Machine {
        let mut value = json!({"apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
            "metadata": {"name": "m", "namespace": "ns"}, "spec": {}});
        if let Some(phase) = phase {
            value["status"] = json!({"phase": phase});
        }
        if deleting {
            value["metadata"]["deletionTimestamp"] = json!("2026-12-01T00:00:00Z");
        }
        serde_json::from_value(value).unwrap()
    };
    assert_eq!(failure_event_reason(&with(None, false)), "FailedCreate");
    assert_eq!(
        failure_event_reason(&with(Some("Provisioning"), false)),
        "FailedCreate"
    );
    assert_eq!(
        failure_event_reason(&with(Some("Provisioned"), false)),
        "FailedUpdate"
    );
    assert_eq!(
        failure_event_reason(&with(Some("Running"), false)),
        "FailedUpdate"
    );
    assert_eq!(
        failure_event_reason(&with(Some("Running"), true)),
        "FailedDelete"
    );

    assert_eq!(event_note("short"), "short");
    let long = "é".repeat(EVENT_NOTE_LIMIT);
    let note = event_note(&long);
    assert!(
        note.len() <= EVENT_NOTE_LIMIT && note.ends_with("..."),
        "{}",
        note.len()
    );
}

/// The executor and the protocol's simulated world fold a reconcile's changes with this one
/// rule: the later decision's values win, conditions accumulate.
#[test]
fn a_later_change_wins_and_conditions_accumulate() {
    let condition = |type_: &str| MachineCondition {
        type_: type_.to_owned(),
        status: "True".to_owned(),
        ..MachineCondition::default()
    };
    let mut pending = StatusUpdate {
        phase: Some("Provisioning"),
        error: Some((None, "first".to_owned())),
        conditions: vec![condition("A")],
        ..StatusUpdate::default()
    };
    pending.absorb(StatusUpdate {
        phase: Some("Provisioned"),
        conditions: vec![condition("B")],
        ..StatusUpdate::default()
    });
    assert_eq!(pending.phase, Some("Provisioned"));
    assert_eq!(
        pending.error,
        Some((None, "first".to_owned())),
        "kept where the later change says nothing"
    );
    assert_eq!(
        pending
            .conditions
            .iter()
            .map(|c| c.type_.as_str())
            .collect::<Vec<_>>(),
        ["A", "B"]
    );
}
