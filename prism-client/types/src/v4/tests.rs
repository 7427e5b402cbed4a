//! Decoding of v4 bodies (reference/02 §8) and the exact deploy body this crate sends.

use pretty_assertions::assert_eq;
use serde_json::json;

use super::*;
use crate::v3::SysprepInstallType;

const TEMPLATE_LIST: &str = include_str!("../../../tests/fixtures/v4/template_list.json");
const TASK_FAILED: &str = include_str!("../../../tests/fixtures/v4/task_failed.json");
const ERROR_LIST: &str = include_str!("../../../tests/fixtures/v4/error_list.json");
const ERROR_SCHEMA: &str = include_str!("../../../tests/fixtures/v4/error_schema.json");

fn overrides(guest_customization: Option<GuestCustomization>) -> VmConfigOverride {
    VmConfigOverride {
        name: "vm1".to_owned(),
        num_sockets: 2,
        num_cores_per_socket: 1,
        num_threads_per_core: 1,
        memory_size_bytes: 8_589_934_592,
        nics: vec![Nic::on_subnet("d2d2d2d2-0000-4000-8000-000000000002")],
        guest_customization,
        ..VmConfigOverride::default()
    }
}

#[test]
fn template_list_decodes_and_keeps_unknown_fields() {
    let list: Envelope<Vec<Template>> = serde_json::from_str(TEMPLATE_LIST).unwrap();
    assert_eq!(
        list.metadata.as_ref().unwrap().total_available_results,
        Some(1)
    );
    let template = &list.data[0];
    assert_eq!(template.template_name.as_deref(), Some("win2022-golden"));
    let version = template.template_version_spec.as_ref().unwrap();
    assert_eq!(version.is_gc_override_enabled, Some(true));
    assert_eq!(version.vm_spec.as_ref().unwrap()["numSockets"], json!(2));
    assert_eq!(
        template.extra["$objectType"],
        json!("vmm.v4.content.Template")
    );
    let back = serde_json::to_value(&list).unwrap();
    assert_eq!(
        back,
        serde_json::from_str::<serde_json::Value>(TEMPLATE_LIST).unwrap()
    );
}

#[test]
fn deploy_request_with_sysprep_is_shaped_as_prism_expects() {
    let request = TemplateDeployRequest::single(
        "0005f1a2-b3c4-d5e6-0000-000000000001",
        overrides(Some(GuestCustomization::new(
            GuestCustomizationConfig::Sysprep(Sysprep::prepared_unattend_xml("PHVuYXR0ZW5kLz4=")),
        ))),
    );
    assert_eq!(
        serde_json::to_value(&request).unwrap(),
        json!({
            "numberOfVms": 1,
            "clusterReference": "0005f1a2-b3c4-d5e6-0000-000000000001",
            "overrideVmConfigMap": {"0": {
                "name": "vm1", "numSockets": 2, "numCoresPerSocket": 1, "numThreadsPerCore": 1,
                "memorySizeBytes": 8589934592u64,
                "nics": [{"networkInfo": {"nicType": "NORMAL_NIC", "subnet": {"extId": "d2d2d2d2-0000-4000-8000-000000000002"}}}],
                "guestCustomization": {"config": {
                    "$objectType": "vmm.v4.ahv.config.Sysprep",
                    "installType": "PREPARED",
                    "sysprepScript": {"$objectType": "vmm.v4.ahv.config.Unattendxml", "value": "PHVuYXR0ZW5kLz4="}
                }}
            }}
        })
    );
}

#[test]
fn deploy_request_with_cloud_init_and_round_trip() {
    let config = GuestCustomizationConfig::CloudInit(CloudInit::config_drive(
        "I2Nsb3VkLWNvbmZpZw==",
        Some("eyJob3N0bmFtZSI6InZtMSJ9".into()),
    ));
    let request =
        TemplateDeployRequest::single("pe", overrides(Some(GuestCustomization::new(config))));
    let sent = serde_json::to_value(&request).unwrap();
    assert_eq!(
        sent["overrideVmConfigMap"]["0"]["guestCustomization"]["config"],
        json!({
            "$objectType": "vmm.v4.ahv.config.CloudInit",
            "datasourceType": "CONFIG_DRIVE_V2",
            "metadata": "eyJob3N0bmFtZSI6InZtMSJ9",
            "cloudInitScript": {"$objectType": "vmm.v4.ahv.config.Userdata", "value": "I2Nsb3VkLWNvbmZpZw=="}
        })
    );
    let back: TemplateDeployRequest = serde_json::from_value(sent).unwrap();
    assert_eq!(back, request);
    assert!(!format!("{back:?}").contains("I2Nsb3VkLWNvbmZpZw=="));
}

#[test]
fn unknown_guest_customization_type_is_kept_and_not_printed() {
    let body =
        json!({"config": {"$objectType": "vmm.v4.ahv.config.Ignition", "value": "c2VjcmV0"}});
    let decoded: GuestCustomization = serde_json::from_value(body.clone()).unwrap();
    assert!(matches!(decoded.config, GuestCustomizationConfig::Other(_)));
    assert_eq!(serde_json::to_value(&decoded).unwrap(), body);
    let debug = format!("{decoded:?}");
    assert!(debug.contains("vmm.v4.ahv.config.Ignition"));
    assert!(!debug.contains("c2VjcmV0"));
    let sysprep: Sysprep = serde_json::from_value(json!({"installType": "FRESH"})).unwrap();
    assert_eq!(sysprep.install_type, Some(SysprepInstallType::Fresh));
}

#[test]
fn failed_task_carries_errors_entities_and_subtasks() {
    let task: Envelope<Task> = serde_json::from_str(TASK_FAILED).unwrap();
    let task = task.data;
    assert_eq!(task.status, Some(TaskStatus::Failed));
    assert!(task.status.as_ref().unwrap().is_terminal());
    assert_eq!(task.error_messages[0].code.as_deref(), Some("VMM-30100"));
    assert_eq!(task.legacy_error_message.as_deref(), Some("kInternalError"));
    assert_eq!(
        task.entities_affected[1].rel.as_deref(),
        Some("vmm:ahv:config:vm")
    );
    assert_eq!(
        task.sub_tasks[0].ext_id.as_deref(),
        Some("ZXJnb24=:e5e5e5e5-0000-4000-8000-000000000022")
    );
    for (status, terminal) in [
        ("QUEUED", false),
        ("RUNNING", false),
        ("CANCELING", false),
        ("SUSPENDED", false),
        ("SUCCEEDED", true),
        ("FAILED", true),
        ("CANCELED", true),
        ("SOMETHING_NEW", false),
    ] {
        assert_eq!(TaskStatus::from(status).is_terminal(), terminal, "{status}");
    }
}

#[test]
fn error_bodies_decode_as_a_list_or_a_single_schema_error() {
    let list: Envelope<ErrorData> = serde_json::from_str(ERROR_LIST).unwrap();
    assert_eq!(
        list.data.error[0].error_group.as_deref(),
        Some("ENTITY_NOT_FOUND")
    );
    let schema: Envelope<ErrorData> = serde_json::from_str(ERROR_SCHEMA).unwrap();
    assert_eq!(
        schema.data.error[0].message.as_deref(),
        Some("numberOfVms must be at least 1")
    );
    assert!(
        schema.data.error[0]
            .extra
            .contains_key("validationErrorMessages")
    );
}

#[test]
fn deploy_response_is_a_task_reference() {
    let response: Envelope<ExtIdReference> = serde_json::from_value(
        json!({"data": {"extId": "ZXJnb24=:c3c3", "$objectType": "prism.v4.config.TaskReference"}}),
    )
    .unwrap();
    assert_eq!(response.data.ext_id, "ZXJnb24=:c3c3");
}
