//! The actuator against prism-mock over HTTPS (its generated CA trusted through a file): the
//! shared inventory, cached lookups, reserved UUIDs and the create-protocol calls.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use std::sync::Arc;
use std::time::Duration;

use nutanix_machine_controller::actuator::address_watch::listed_addresses;
use nutanix_machine_controller::actuator::credentials::PrismCredentials;
use nutanix_machine_controller::actuator::task_watch::MachineKey;
use nutanix_machine_controller::actuator::{
    Actuator, ActuatorSettings, Connection, DeleteOutcome, FollowUpOutcome,
};
use nutanix_machine_controller::api::{Machine, PendingTask, TaskOperation};
use nutanix_machine_controller::plan::machine::provision::{
    CreateCallOutcome, TaskContext, TaskReading, classify_create_error, read_task,
};
use nutanix_machine_controller::plan::vm::VmPlan;
use nutanix_machine_controller::plan::vm::request::{VmRequest, build_request};
use nutanix_machine_controller::plan::vm::resolve::{RequiredLookups, ResolutionMode};
use nutanix_machine_controller::plan::vm::scope::NameClause;
use nutanix_machine_controller::plan::vm::secret::AdminPassword;
use nutanix_machine_controller::plan::vm::spec::ParsedSpec;
use nutanix_machine_controller::plan::vm::unattend::PasswordValue;
use nutanix_machine_controller::plan::vm::validate::{
    ClaimedAddresses, PlanContext, UnreadUserData, plan_vm,
};
use prism_client::TaskProgress;
use prism_mock::{FaultKind, FaultRule, MockConfig, MockPrism, RunningMock};
use serde_json::json;

const VMS: &str = "/api/nutanix/v3/vms";
const VMS_LIST: &str = "/api/nutanix/v3/vms/list";
const RESERVE: &str = "/api/nutanix/v3/idempotence_identifiers";

struct Fixture {
    mock: RunningMock,
    _dir: tempfile::TempDir,
    connection: Arc<Connection>,
}

async fn fixture(settings: ActuatorSettings) -> Fixture {
    fixture_with(settings, 0).await
}

/// A fixture whose Prism Central also holds `foreign` VMs of other tenants.
async fn fixture_with(settings: ActuatorSettings, foreign: u32) -> Fixture {
    let mut config = MockConfig::default();
    config.seed.foreign_vms = foreign;
    let mock = MockPrism::start(config).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, mock.ca_pem().unwrap()).unwrap();
    let actuator = Actuator::new(
        ActuatorSettings {
            ca_file: Some(ca),
            ..settings
        },
        None,
    );
    let credentials = PrismCredentials::new("admin", "mock-password");
    let connection = actuator
        .connection(mock.base_url(), "ns/credentials", &credentials)
        .unwrap();
    Fixture {
        mock,
        _dir: dir,
        connection,
    }
}

/// A Prism Central, a connection to it, and what its shared task and address watches wake.
struct Watched {
    mock: RunningMock,
    connection: Arc<Connection>,
    woken: tokio::sync::broadcast::Receiver<MachineKey>,
    _dir: tempfile::TempDir,
}

async fn watched(config: MockConfig) -> Watched {
    let mock = MockPrism::start(config).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, mock.ca_pem().unwrap()).unwrap();
    let actuator = Actuator::new(
        ActuatorSettings {
            ca_file: Some(ca),
            ..ActuatorSettings::default()
        },
        None,
    );
    let woken = actuator.task_ends();
    let connection = actuator
        .connection(
            mock.base_url(),
            "ns/credentials",
            &PrismCredentials::new("admin", "mock-password"),
        )
        .unwrap();
    Watched {
        mock,
        connection,
        woken,
        _dir: dir,
    }
}

fn machine(name: &str, uid: &str, provider_spec: serde_json::Value, windows: bool) -> Machine {
    let mut labels = json!({"machine.openshift.io/cluster-api-cluster": "sandbox"});
    if windows {
        labels["machine.openshift.io/os-id"] = json!("Windows");
    }
    serde_json::from_value(json!({
        "apiVersion": "machine.openshift.io/v1beta1",
        "kind": "Machine",
        "metadata": {"name": name, "namespace": "openshift-machine-api", "uid": uid, "labels": labels},
        "spec": {"providerSpec": {"value": provider_spec}},
    }))
    .unwrap()
}

fn spec(image: serde_json::Value, kind: Option<&str>, disk: &str) -> serde_json::Value {
    let mut spec = json!({
        "cluster": {"type": "name", "name": "pe-1"},
        "image": image,
        "subnets": [{"type": "name", "name": "vm-network"}],
        "vcpuSockets": 2, "vcpusPerSocket": 1, "memorySize": "8Gi", "systemDiskSize": disk,
        "categories": [{"key": "AppType", "value": "Kubernetes"}],
        "credentialsSecret": {"name": "nutanix-credentials"},
    });
    if let Some(kind) = kind {
        spec["imageKind"] = json!(kind);
    }
    spec
}

async fn plan_for(connection: &Connection, machine: &Machine) -> VmPlan {
    let config = machine.provider_config().unwrap().unwrap();
    let lookups = RequiredLookups::of(&config, "sandbox", Some(&[]));
    let resolved = connection
        .lookups
        .resolve(connection.client(), &lookups, &[])
        .await;
    let password = AdminPassword::new("Unused-in-these-tests-1").unwrap();
    plan_vm(
        machine,
        &ParsedSpec::of(machine),
        &PlanContext {
            resolved: &resolved,
            mode: ResolutionMode::Strict,
            user_data: None,
            unread_user_data: UnreadUserData::Unresolved,
            admin_password: Some(PasswordValue::Secret(&password)),
            claims: ClaimedAddresses::NotClaimed,
        },
    )
    .unwrap_or_else(|errors| panic!("{errors}"))
}

async fn wait_task(
    connection: &Connection,
    task: &PendingTask,
    recorded_vm: Option<&str>,
) -> TaskReading {
    for _ in 0..200 {
        let progress = connection.read_task(task).await.unwrap();
        if !matches!(progress, TaskProgress::Running { .. }) {
            return read_task(
                task,
                &progress,
                TaskContext {
                    recorded_vm,
                    ..TaskContext::default()
                },
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("task {} did not end", task.id)
}

#[tokio::test]
async fn concurrent_inventory_reads_share_one_refresh() {
    let f = fixture(ActuatorSettings {
        page_length: 1,
        ..ActuatorSettings::default()
    })
    .await;
    // The seed's one VM, as if a Machine were named after it.
    let golden = NameClause::Exact("windows-golden".into());
    let reads = (0..8).map(|_| {
        f.connection
            .inventory
            .snapshot(f.connection.client(), &golden)
    });
    let snapshots = futures::future::join_all(reads).await;
    let golden_listing = snapshots[0].as_ref().unwrap();
    assert_eq!(golden_listing.len(), 1, "the seed has one VM");
    assert!(snapshots.iter().all(|s| s.as_ref().unwrap().len() == 1));
    // One refresh, paging one VM at a time: a page with the VM, and nothing more.
    assert_eq!(f.mock.admin().count("POST", VMS_LIST), 1);
    f.connection
        .inventory
        .snapshot(f.connection.client(), &golden)
        .await
        .unwrap();
    assert_eq!(
        f.mock.admin().count("POST", VMS_LIST),
        1,
        "fresh enough: no new list"
    );
}

#[tokio::test]
async fn the_inventory_keeps_only_the_clusters_vms_and_survives_a_refused_filter() {
    let f = fixture(ActuatorSettings::default()).await;
    let client = f.connection.client();
    // A Machine set whose names do not match the seed's VM: the filtered listing is empty.
    let workers = NameClause::of_machine("workers-abcde", Some("workers"));
    let listing = f
        .connection
        .inventory
        .snapshot(client, &workers)
        .await
        .unwrap();
    assert!(listing.is_empty(), "windows-golden is not the cluster's");
    assert!(listing.covers(&workers));

    // A Prism Central that refuses the filter: listed whole once more, kept to the scope.
    f.mock.admin().add_fault(FaultRule {
        times: Some(1),
        ..FaultRule::new(
            Some("POST"),
            VMS_LIST,
            FaultKind::Error {
                status: 422,
                retry_after_secs: None,
            },
        )
    });
    let golden = NameClause::Exact("windows-golden".into());
    let listing = f
        .connection
        .inventory
        .snapshot_within(client, &golden, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(
        listing.len(),
        1,
        "the seed's VM, named as a Machine would be"
    );
    assert!(
        listing.covers(&workers),
        "the scope keeps the earlier names"
    );
}

#[tokio::test]
async fn the_inventorys_calls_do_not_grow_with_other_tenants_vms() {
    for foreign in [0, 20_000] {
        let f = fixture_with(ActuatorSettings::default(), foreign).await;
        let golden = NameClause::Exact("windows-golden".into());
        let listing = f
            .connection
            .inventory
            .snapshot(f.connection.client(), &golden)
            .await
            .unwrap();
        assert_eq!(listing.len(), 1, "{foreign} foreign VMs");
        assert_eq!(
            f.mock.admin().count("POST", VMS_LIST),
            1,
            "one page whatever the {foreign} foreign VMs (unfiltered: 41 pages of 500)"
        );
    }
}

#[tokio::test]
async fn a_refresh_does_not_hold_up_a_reader_content_with_the_last_listing() {
    let f = fixture(ActuatorSettings {
        inventory_max_age: Duration::from_millis(400),
        ..ActuatorSettings::default()
    })
    .await;
    let client = f.connection.client();
    let golden = NameClause::Exact("windows-golden".into());
    let inventory = &f.connection.inventory;
    let first = inventory.snapshot(client, &golden).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Prism now answers lists slowly.
    f.mock.admin().add_fault(FaultRule::new(
        Some("POST"),
        VMS_LIST,
        FaultKind::Latency { millis: 3_000 },
    ));
    let served = tokio::time::timeout(Duration::from_secs(2), inventory.snapshot(client, &golden))
        .await
        .expect("served the last listing, not held up by the slow refresh")
        .unwrap();
    assert!(Arc::ptr_eq(&first, &served));
    // The background refresh lands.
    let mut refreshed = None;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = inventory.snapshot(client, &golden).await.unwrap();
        if !Arc::ptr_eq(&first, &now) {
            refreshed = Some(now);
            break;
        }
    }
    let refreshed = refreshed.expect("the refresh started in the background ended");
    assert!(refreshed.listed_at() > first.listed_at());
    assert_eq!(
        f.mock.admin().count("POST", VMS_LIST),
        2,
        "one refresh, not one per reader"
    );
}

#[tokio::test]
async fn a_changed_ca_file_is_trusted_without_a_restart() {
    let mock = MockPrism::start(MockConfig::default()).await.unwrap();
    // Another mock's CA, which did not sign this mock's certificate.
    let other = MockPrism::start(MockConfig::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, other.ca_pem().unwrap()).unwrap();
    let actuator = Actuator::new(
        ActuatorSettings {
            ca_file: Some(ca.clone()),
            ca_recheck: Duration::ZERO,
            ..ActuatorSettings::default()
        },
        None,
    );
    let credentials = PrismCredentials::new("admin", "mock-password");
    let untrusted = actuator
        .connection(mock.base_url(), "ns/credentials", &credentials)
        .unwrap();
    let error = untrusted
        .client()
        .list_all::<prism_client::v3::Cluster>()
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            prism_client::Error::Transport {
                kind: prism_client::TransportKind::Tls,
                ..
            }
        ),
        "{error:?}"
    );
    // The bundle is corrected in place (as the kubelet updates a mounted ConfigMap).
    std::fs::write(&ca, mock.ca_pem().unwrap()).unwrap();
    let trusted = actuator
        .connection(mock.base_url(), "ns/credentials", &credentials)
        .unwrap();
    assert!(!Arc::ptr_eq(&untrusted, &trusted), "a new client");
    assert!(
        Arc::ptr_eq(&untrusted.lookups, &trusted.lookups),
        "the caches are kept"
    );
    let clusters = trusted
        .client()
        .list_all::<prism_client::v3::Cluster>()
        .await
        .unwrap();
    assert!(!clusters.is_empty());
    // A file gone after a good read keeps the last bundle.
    std::fs::remove_file(&ca).unwrap();
    let kept = actuator
        .connection(mock.base_url(), "ns/credentials", &credentials)
        .unwrap();
    assert!(Arc::ptr_eq(&trusted, &kept));
}

/// OpenShift's trusted CA bundle reaches the controller as the system roots' file (the
/// machine-api-operator mounts it where the image's bundle is); a change of that file gives new
/// clients, which load the roots again, without a restart.
#[tokio::test]
async fn a_changed_system_bundle_gives_new_clients_and_keeps_the_caches() {
    let mock = MockPrism::start(MockConfig::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let system = dir.path().join("tls-ca-bundle.pem");
    std::fs::write(&system, "# the image's public roots\n").unwrap();
    let actuator = Actuator::new(
        ActuatorSettings {
            ca_file: None,
            system_ca_file: Some(system.clone()),
            ca_recheck: Duration::ZERO,
            insecure: true,
            ..ActuatorSettings::default()
        },
        None,
    );
    let credentials = PrismCredentials::new("admin", "mock-password");
    let connect = || {
        actuator
            .connection(mock.base_url(), "ns/credentials", &credentials)
            .unwrap()
    };
    let first = connect();
    assert!(
        Arc::ptr_eq(&first, &connect()),
        "nothing changed: the same client"
    );
    std::fs::write(
        &system,
        "# the image's public roots and the cluster's proxy CA\n",
    )
    .unwrap();
    let second = connect();
    assert!(!Arc::ptr_eq(&first, &second), "a new client");
    assert!(
        Arc::ptr_eq(&first.lookups, &second.lookups),
        "the caches are kept"
    );
    // A bundle gone after a good read keeps the last one: no new client.
    std::fs::remove_file(&system).unwrap();
    assert!(Arc::ptr_eq(&second, &connect()));
}

#[tokio::test]
async fn concurrent_lookups_of_one_listing_share_one_fetch() {
    let f = fixture(ActuatorSettings::default()).await;
    // As the reconciles of a restarted controller each want the region label at once.
    let names = (0..8).map(|_| {
        f.connection
            .lookups
            .prism_central_name(f.connection.client())
    });
    let names = futures::future::join_all(names).await;
    assert!(names.iter().all(|n| n.as_ref().unwrap().is_some()));
    assert_eq!(
        f.mock
            .admin()
            .count("POST", "/api/nutanix/v3/clusters/list"),
        1
    );
}

#[tokio::test]
async fn reserved_uuids_come_in_batches() {
    let f = fixture(ActuatorSettings {
        uuid_batch: 4,
        ..ActuatorSettings::default()
    })
    .await;
    let mut uuids = Vec::new();
    for _ in 0..5 {
        uuids.push(
            f.connection
                .uuids
                .take(f.connection.client())
                .await
                .unwrap(),
        );
    }
    uuids.sort();
    uuids.dedup();
    assert_eq!(uuids.len(), 5);
    assert_eq!(f.mock.admin().count("POST", RESERVE), 2);
    // The pool emptied at once, so the second reservation was twice the first.
    assert_eq!(f.connection.uuids.available(), 7);
}

#[tokio::test]
async fn lookups_are_cached_until_invalidated() {
    let f = fixture(ActuatorSettings::default()).await;
    let m = machine(
        "worker-a",
        "uid-a",
        spec(json!({"type": "name", "name": "rhcos-4.20"}), None, "120Gi"),
        false,
    );
    let plan = plan_for(&f.connection, &m).await;
    assert!(plan.categories.contains_key("AppType"));
    assert!(
        plan.categories
            .contains_key("kubernetes-io-cluster-sandbox"),
        "the owned category exists in the seed"
    );
    let calls = |f: &Fixture| -> u64 { f.mock.admin().counters().iter().map(|c| c.count).sum() };
    let first = calls(&f);
    plan_for(&f.connection, &m).await;
    assert_eq!(calls(&f), first, "second resolution from the cache");
    f.connection.lookups.invalidate();
    plan_for(&f.connection, &m).await;
    assert_eq!(
        calls(&f),
        2 * first,
        "after a 404 everything is looked up again"
    );
}

#[tokio::test]
async fn a_missing_name_is_unresolved_not_invalid() {
    let f = fixture(ActuatorSettings::default()).await;
    let m = machine(
        "worker-b",
        "uid-b",
        spec(
            json!({"type": "name", "name": "no-such-image"}),
            None,
            "120Gi",
        ),
        false,
    );
    let config = m.provider_config().unwrap().unwrap();
    let lookups = RequiredLookups::of(&config, "sandbox", Some(&[]));
    let resolved = f
        .connection
        .lookups
        .resolve(f.connection.client(), &lookups, &[])
        .await;
    let errors = plan_vm(
        &m,
        &ParsedSpec::of(&m),
        &PlanContext {
            resolved: &resolved,
            mode: ResolutionMode::Strict,
            user_data: None,
            unread_user_data: UnreadUserData::Unresolved,
            admin_password: None,
            claims: ClaimedAddresses::NotClaimed,
        },
    )
    .unwrap_err();
    assert_eq!(
        errors.class(),
        nutanix_machine_controller::plan::vm::errors::ErrorClass::Unresolved
    );
    assert!(
        errors
            .to_string()
            .contains("no image named \"no-such-image\""),
        "{errors}"
    );
}

#[tokio::test]
async fn create_then_500_and_a_repeat_with_the_same_uuid_make_one_vm() {
    let f = fixture(ActuatorSettings::default()).await;
    let m = machine(
        "worker-c",
        "uid-c",
        spec(json!({"type": "name", "name": "rhcos-4.20"}), None, "120Gi"),
        false,
    );
    let plan = plan_for(&f.connection, &m).await;
    let uuid = f
        .connection
        .uuids
        .take(f.connection.client())
        .await
        .unwrap();
    let request = build_request(&plan, &uuid);
    f.mock
        .admin()
        .add_fault(FaultRule::new(Some("POST"), VMS, FaultKind::CreateThen500).times(1));
    let error = f.connection.send_create(&request, None).await.unwrap_err();
    assert_eq!(
        classify_create_error(&error, true),
        CreateCallOutcome::Retry
    );
    // The next reconcile reads the recorded UUID: the VM is there (PENDING, not yet listed).
    let vm = f.connection.get_vm(&uuid).await.unwrap();
    assert!(vm.is_some(), "GET finds a VM the list does not show yet");
    let repeat = f.connection.send_create(&request, None).await.unwrap_err();
    assert_eq!(
        classify_create_error(&repeat, true),
        CreateCallOutcome::Conflict
    );
    let vms: Vec<_> = f
        .mock
        .admin()
        .vms()
        .into_iter()
        .filter(|vm| vm.name == "worker-c")
        .collect();
    assert_eq!(vms.len(), 1);
    assert_eq!(vms[0].uuid, uuid);
}

#[tokio::test]
async fn an_expired_reservation_is_recognised() {
    let f = fixture(ActuatorSettings::default()).await;
    let m = machine(
        "worker-d",
        "uid-d",
        spec(json!({"type": "name", "name": "rhcos-4.20"}), None, "120Gi"),
        false,
    );
    let plan = plan_for(&f.connection, &m).await;
    let never_reserved = "6a1d3c44-0000-4000-8000-000000000099";
    let request = build_request(&plan, never_reserved);
    let error = f.connection.send_create(&request, None).await.unwrap_err();
    assert_eq!(
        classify_create_error(&error, true),
        CreateCallOutcome::ReservationRejected
    );
}

#[tokio::test]
async fn clone_then_follow_up_is_applied_once() {
    let f = fixture(ActuatorSettings::default()).await;
    let m = machine(
        "win-clone",
        "uid-e",
        spec(
            json!({"type": "name", "name": "windows-golden"}),
            Some("VM"),
            "140Gi",
        ),
        true,
    );
    let plan = plan_for(&f.connection, &m).await;
    let uuid = f
        .connection
        .uuids
        .take(f.connection.client())
        .await
        .unwrap();
    let request = build_request(&plan, &uuid);
    let VmRequest::Clone { follow_up, .. } = &request else {
        panic!("a clone")
    };
    assert_eq!(follow_up.resize_system_disk_mib, Some(140 * 1024));
    let sent = f.connection.send_create(&request, None).await.unwrap();
    let task = PendingTask {
        id: sent.task.unwrap(),
        operation: TaskOperation::Clone,
        started: None,
        source_vm: None,
    };
    assert_eq!(
        wait_task(&f.connection, &task, Some(&uuid)).await,
        TaskReading::Created {
            vm_uuid: Some(uuid.clone())
        },
        "the clone task names the VM with the reserved UUID"
    );
    let outcome = f
        .connection
        .apply_follow_up(&uuid, follow_up, None)
        .await
        .unwrap();
    let FollowUpOutcome::Sent { task: Some(update) } = outcome else {
        panic!("{outcome:?}")
    };
    let update = PendingTask {
        id: update,
        operation: TaskOperation::FollowUp,
        started: None,
        source_vm: None,
    };
    assert_eq!(
        wait_task(&f.connection, &update, Some(&uuid)).await,
        TaskReading::FollowUpApplied
    );
    assert_eq!(
        f.connection
            .apply_follow_up(&uuid, follow_up, None)
            .await
            .unwrap(),
        FollowUpOutcome::NothingLeft
    );
    let vm = f.connection.get_vm(&uuid).await.unwrap().unwrap();
    let spec = vm.spec.unwrap();
    assert_eq!(spec.description.as_deref(), Some(plan.description.as_str()));
    assert_eq!(
        spec.resources.power_state,
        Some(prism_client::v3::PowerState::On)
    );
    assert!(matches!(
        f.connection.delete_vm(&uuid).await.unwrap(),
        DeleteOutcome::Accepted { task: Some(_) }
    ));
}

#[tokio::test]
async fn a_repeated_deploy_with_the_recorded_request_id_returns_the_same_task() {
    let f = fixture(ActuatorSettings::default()).await;
    let m = machine(
        "win-tpl",
        "uid-f",
        spec(
            json!({"type": "name", "name": "windows-server-2022-template"}),
            Some("Template"),
            "120Gi",
        ),
        true,
    );
    let plan = plan_for(&f.connection, &m).await;
    let request = build_request(&plan, "");
    let request_id = uuid::Uuid::new_v4().to_string();
    let first = f
        .connection
        .send_create(&request, Some(&request_id))
        .await
        .unwrap();
    let again = f
        .connection
        .send_create(&request, Some(&request_id))
        .await
        .unwrap();
    assert_eq!(first, again);
    let task = PendingTask {
        id: first.task.unwrap(),
        operation: TaskOperation::Deploy,
        started: None,
        source_vm: None,
    };
    let TaskReading::Created { vm_uuid: Some(vm) } = wait_task(&f.connection, &task, None).await
    else {
        panic!("the deploy names its VM")
    };
    assert!(f.connection.get_vm(&vm).await.unwrap().is_some());
    assert_eq!(
        f.mock
            .admin()
            .vms()
            .iter()
            .filter(|v| v.name == "win-tpl")
            .count(),
        1
    );
    assert_eq!(
        f.connection
            .delete_vm("6a1d3c44-0000-4000-8000-000000000098")
            .await
            .unwrap(),
        DeleteOutcome::AlreadyGone
    );
}

#[tokio::test]
async fn projects_and_gpus_are_resolved_against_prism() {
    let f = fixture(ActuatorSettings::default()).await;
    let mut provider_spec = spec(json!({"type": "name", "name": "rhcos-4.20"}), None, "120Gi");
    provider_spec["project"] = json!({"type": "name", "name": "openshift"});
    provider_spec["gpus"] = json!([{"type": "Name", "name": "Tesla T4"}]);
    let m = machine("gpu-0", "uid-g", provider_spec, false);
    let plan = plan_for(&f.connection, &m).await;
    assert!(matches!(
        plan.project,
        Some(nutanix_machine_controller::plan::vm::EntityRef::Uuid(_))
    ));
    assert!(
        matches!(
            plan.gpus.as_slice(),
            [nutanix_machine_controller::plan::vm::PlannedGpu::Assigned {
                device_id: Some(7864),
                ..
            }]
        ),
        "{:?}",
        plan.gpus
    );
    // The host inventory is read for each plan (GPU status changes), never cached.
    plan_for(&f.connection, &m).await;
    assert_eq!(
        f.mock.admin().count("POST", "/api/nutanix/v3/hosts/list"),
        2
    );
}

/// The shared task watch (issue 37, item 2): the tasks of several Machines are followed by
/// listings of them all (`GET /config/tasks?$filter=extId in (...)`), each Machine is woken when
/// its task ends, and a listed success stands in for the Machine's own `GET` of its task.
#[tokio::test]
async fn the_task_watch_wakes_each_machine_and_hands_over_its_listed_task() {
    let Watched {
        mock,
        connection,
        mut woken,
        _dir,
    } = watched(MockConfig::default()).await;
    let key = |name: &str| MachineKey {
        namespace: "openshift-machine-api".to_owned(),
        name: name.to_owned(),
    };
    let mut created = Vec::new();
    for name in ["worker-w0", "worker-w1", "worker-w2"] {
        let m = machine(
            name,
            &format!("uid-{name}"),
            spec(json!({"type": "name", "name": "rhcos-4.20"}), None, "120Gi"),
            false,
        );
        let plan = plan_for(&connection, &m).await;
        let uuid = connection.uuids.take(connection.client()).await.unwrap();
        let sent = connection
            .send_create(&build_request(&plan, &uuid), None)
            .await
            .unwrap();
        let task = sent.task.unwrap();
        connection.watch_task(&task, false, key(name));
        created.push((name, uuid, task));
    }
    let mut ended = Vec::new();
    while ended.len() < created.len() {
        let machine = tokio::time::timeout(Duration::from_secs(30), woken.recv())
            .await
            .expect("every Machine is woken when its task ends")
            .unwrap();
        ended.push(machine.name);
    }
    ended.sort();
    assert_eq!(ended, ["worker-w0", "worker-w1", "worker-w2"]);
    let listings = mock.admin().count("GET", "/api/prism/v4.0/config/tasks");
    assert!(listings >= 1);
    for (_, uuid, task) in &created {
        assert!(connection.task_end_seen(task));
        let pending = PendingTask {
            id: task.clone(),
            operation: TaskOperation::Create,
            started: None,
            source_vm: None,
        };
        let progress = connection.read_task(&pending).await.unwrap();
        let reading = read_task(
            &pending,
            &progress,
            TaskContext {
                recorded_vm: Some(uuid),
                ..TaskContext::default()
            },
        );
        assert_eq!(
            reading,
            TaskReading::Created {
                vm_uuid: Some(uuid.clone())
            }
        );
        assert!(!connection.task_end_seen(task), "read, it leaves the watch");
    }
    assert_eq!(
        mock.admin().count("GET", "/api/nutanix/v3/tasks/{uuid}"),
        0,
        "the listed tasks stood in for the Machines' own reads"
    );

    // A VM's DELETE: its Machine is woken when the delete task ends, and the end is known by VM.
    let (_, vm, _) = &created[0];
    let DeleteOutcome::Accepted { task: Some(task) } = connection.delete_vm(vm).await.unwrap()
    else {
        panic!("Prism names the delete's task");
    };
    assert!(!connection.delete_end_seen(vm));
    connection.watch_delete(&task, vm, key("worker-w0"));
    let woken_by_delete = tokio::time::timeout(Duration::from_secs(30), woken.recv())
        .await
        .expect("woken when the delete ends")
        .unwrap();
    assert_eq!(woken_by_delete, key("worker-w0"));
    assert!(connection.delete_end_seen(vm));
    assert!(connection.get_vm(vm).await.unwrap().is_none());

    // A template deploy names only its template; its subtasks name the VM. The watch lists
    // them when the deploy ends and hands the deploy over with the VM: no `GET` of the task or
    // of a subtask.
    let m = machine(
        "win-tpl-w",
        "uid-win-tpl-w",
        spec(
            json!({"type": "name", "name": "windows-server-2022-template"}),
            Some("Template"),
            "120Gi",
        ),
        true,
    );
    let plan = plan_for(&connection, &m).await;
    let request_id = uuid::Uuid::new_v4().to_string();
    let sent = connection
        .send_create(&build_request(&plan, ""), Some(&request_id))
        .await
        .unwrap();
    let task = sent.task.unwrap();
    connection.watch_task(&task, true, key("win-tpl-w"));
    let woken_by_deploy = tokio::time::timeout(Duration::from_secs(30), woken.recv())
        .await
        .expect("woken when the deploy and its subtasks are listed")
        .unwrap();
    assert_eq!(woken_by_deploy, key("win-tpl-w"));
    assert!(connection.task_end_seen(&task));
    let pending = PendingTask {
        id: task,
        operation: TaskOperation::Deploy,
        started: None,
        source_vm: None,
    };
    let progress = connection.read_task(&pending).await.unwrap();
    let TaskReading::Created { vm_uuid: Some(vm) } =
        read_task(&pending, &progress, TaskContext::default())
    else {
        panic!("the handed-over deploy names its VM: {progress:?}")
    };
    let deployed: Vec<String> = mock
        .admin()
        .vms()
        .into_iter()
        .filter(|listed| listed.name == "win-tpl-w")
        .map(|listed| listed.uuid)
        .collect();
    assert_eq!(deployed, [vm]);
    let task_reads = mock
        .admin()
        .count("GET", "/api/prism/v4.0/config/tasks/{ext_id}")
        + mock
            .admin()
            .count("GET", "/api/prism/v4.4/config/tasks/{ext_id}");
    assert_eq!(
        task_reads, 0,
        "the listings stood in for the deploy's reads"
    );
}

/// The shared address watch (issue 37, item 2): a Machine whose VM lists no address yet is woken
/// when a shared listing shows one, with listings that do not grow with the waiting Machines,
/// and without a `GET` of its VM.
#[tokio::test]
async fn the_address_watch_wakes_a_machine_when_its_vm_lists_an_address() {
    let mut config = MockConfig::default();
    config.timings.boot_to_address_ms = 1500;
    let Watched {
        mock,
        connection,
        mut woken,
        _dir,
    } = watched(config).await;
    let mut waiting = Vec::new();
    for name in ["addr-a0", "addr-a1", "addr-a2"] {
        let m = machine(
            name,
            &format!("uid-{name}"),
            spec(json!({"type": "name", "name": "rhcos-4.20"}), None, "120Gi"),
            false,
        );
        let plan = plan_for(&connection, &m).await;
        let uuid = connection.uuids.take(connection.client()).await.unwrap();
        let sent = connection
            .send_create(&build_request(&plan, &uuid), None)
            .await
            .unwrap();
        let task = PendingTask {
            id: sent.task.unwrap(),
            operation: TaskOperation::Create,
            started: None,
            source_vm: None,
        };
        wait_task(&connection, &task, Some(&uuid)).await;
        waiting.push((name, uuid));
    }
    for (name, uuid) in &waiting {
        let vm = connection.get_vm(uuid).await.unwrap().unwrap();
        let seen = listed_addresses(&vm);
        assert!(seen.is_empty(), "read before its guest has an address");
        connection.await_addresses(
            uuid,
            seen,
            NameClause::Exact((*name).to_owned()),
            MachineKey {
                namespace: "openshift-machine-api".to_owned(),
                name: (*name).to_owned(),
            },
        );
    }
    let gets_before = mock.admin().count("GET", "/api/nutanix/v3/vms/{uuid}");
    let mut names = Vec::new();
    while names.len() < waiting.len() {
        let machine = tokio::time::timeout(Duration::from_secs(30), woken.recv())
            .await
            .expect("every Machine is woken when its VM lists an address")
            .unwrap();
        names.push(machine.name);
    }
    names.sort();
    assert_eq!(names, ["addr-a0", "addr-a1", "addr-a2"]);
    for (_, uuid) in &waiting {
        assert!(
            !connection.address_watched(uuid),
            "woken, it leaves the watch"
        );
    }
    assert_eq!(
        mock.admin().count("GET", "/api/nutanix/v3/vms/{uuid}"),
        gets_before,
        "the listings stood in for the Machines' reads"
    );
    // Three VMs, one listing a second over about 1.5 s of waiting (plus one for slack per
    // second of a slow host): not three per look.
    let listings = mock.admin().count("POST", "/api/nutanix/v3/vms/list");
    assert!((1..=6).contains(&listings), "{listings} listings");
}

/// A Machine waiting on a VM whose create it just saw end is served a listing begun since,
/// not a younger-than-its-bound one that predates the VM: Prism lists a VM only once its create
/// has ended, and the VM's absence from the listing would cost a `GET`.
#[tokio::test]
async fn a_waiter_on_a_vm_just_made_is_served_a_listing_begun_since() {
    let mut config = MockConfig::default();
    config.timings.task_running_ms = 400;
    let Watched {
        mock,
        connection,
        _dir,
        ..
    } = watched(config).await;
    let name = "made-a0";
    let names = NameClause::Exact(name.to_owned());
    let m = machine(
        name,
        "uid-made-a0",
        spec(json!({"type": "name", "name": "rhcos-4.20"}), None, "120Gi"),
        false,
    );
    let plan = plan_for(&connection, &m).await;
    let uuid = connection.uuids.take(connection.client()).await.unwrap();
    let sent = connection
        .send_create(&build_request(&plan, &uuid), None)
        .await
        .unwrap();
    let window = Duration::from_secs(60);
    let before = connection
        .listing_for_waiter(&uuid, &names, window, window)
        .await
        .unwrap()
        .expect("one waiter: the listing pays");
    assert!(before.vm(&uuid).is_none(), "listed before its create ended");
    let task = PendingTask {
        id: sent.task.unwrap(),
        operation: TaskOperation::Create,
        started: None,
        source_vm: None,
    };
    wait_task(&connection, &task, Some(&uuid)).await;
    let listings = mock.admin().count("POST", "/api/nutanix/v3/vms/list");
    let after = connection
        .listing_for_waiter(&uuid, &names, window, window)
        .await
        .unwrap()
        .expect("the listing pays");
    assert!(after.vm(&uuid).is_some(), "a listing begun since shows it");
    assert_eq!(
        mock.admin().count("POST", "/api/nutanix/v3/vms/list"),
        listings + 1
    );
    // Served again, the listing begun since does.
    let again = connection
        .listing_for_waiter(&uuid, &names, window, window)
        .await
        .unwrap()
        .expect("the listing pays");
    assert!(again.vm(&uuid).is_some());
    assert_eq!(
        mock.admin().count("POST", "/api/nutanix/v3/vms/list"),
        listings + 1
    );
}
