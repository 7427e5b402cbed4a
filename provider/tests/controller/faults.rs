//! Prism failures during create, a controller killed mid-create, a VM deleted behind the
//! controller's back: always exactly one VM per Machine, and the Machine ends where MAO says.

use std::time::Duration;

use prism_mock::{FaultKind, FaultRule};
use serde_json::Value;

use crate::harness::{Env, linux_spec, scrape, windows_template};

const VMS: &str = "/api/nutanix/v3/vms";

pub(crate) fn count_with_status(env: &Env, method: &str, endpoint: &str, status: u16) -> u64 {
    env.mock
        .admin()
        .counters()
        .iter()
        .filter(|c| c.method == method && c.endpoint == endpoint && c.status == status)
        .map(|c| c.count)
        .sum()
}

#[tokio::test]
async fn prism_500s_and_429s_during_create_are_retried() {
    let mut env = Env::start().await;
    env.start_nodelink();
    // Every matching rule counts a firing, the first error answers: the 500s answer the first
    // two creates (counting two of the 429 rule's three firings), the 429 the third.
    env.mock.admin().add_fault(
        FaultRule::new(
            Some("POST"),
            VMS,
            FaultKind::Error {
                status: 500,
                retry_after_secs: None,
            },
        )
        .times(2),
    );
    env.mock.admin().add_fault(
        FaultRule::new(
            Some("POST"),
            VMS,
            FaultKind::Error {
                status: 429,
                retry_after_secs: Some(1),
            },
        )
        .times(3),
    );
    let controller = env.controller("controller", &[]);
    let metrics_line = controller.wait_log("metrics listening").await;
    let health_line = controller.wait_log("health endpoints listening").await;

    env.create_machine("retry-0", linux_spec(), false).await;
    let machine = env.wait_phase("retry-0", "Running").await;
    assert_eq!(env.vms_named("retry-0").len(), 1);
    assert_eq!(count_with_status(&env, "POST", VMS, 429), 1);
    assert_eq!(count_with_status(&env, "POST", VMS, 500), 2);
    assert_eq!(count_with_status(&env, "POST", VMS, 202), 1);
    let uuid = machine["status"]["providerStatus"]["vmUUID"]
        .as_str()
        .unwrap();
    assert_eq!(
        env.vms_named("retry-0")[0].uuid,
        uuid,
        "the reserved UUID was kept across retries"
    );
    env.wait_event("retry-0", "FailedCreate", "server error (500)")
        .await;

    // The phase's metric is observed right after the status write the test saw: scrape until it
    // is there (seen missing once when the host was loaded).
    let running = r#"mapi_machine_phase_transition_seconds_count{phase="Running"} 1"#;
    let mut metrics = scrape(&metrics_line, "/metrics").await;
    for _ in 0..50 {
        if metrics.contains(running) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        metrics = scrape(&metrics_line, "/metrics").await;
    }
    assert!(
        metrics.contains(r#"mapi_instance_create_failed{name="retry-0",namespace="openshift-machine-api",reason="PrismError"} 3"#),
        "{metrics}"
    );
    assert!(metrics.contains(running), "{metrics}");
    assert!(
        metrics.contains(
            r#"nutanix_prism_requests_total{api="v3",code="500",endpoint="POST /vms"} 2"#
        )
    );
    assert!(metrics.contains("nutanix_prism_task_duration_seconds_count"));
    assert!(metrics.contains("nutanix_machine_reconcile_duration_seconds_count"));
    assert_eq!(scrape(&health_line, "/healthz").await, "ok");
    assert_eq!(scrape(&health_line, "/readyz").await, "ok");
    env.assert_no_secrets_logged(&[]);
}

#[tokio::test]
async fn create_then_500_ends_with_exactly_one_vm() {
    let mut env = Env::start().await;
    env.start_nodelink();
    env.mock
        .admin()
        .add_fault(FaultRule::new(Some("POST"), VMS, FaultKind::CreateThen500).times(1));
    let _controller = env.controller("controller", &[]);
    env.create_machine("c500-0", linux_spec(), false).await;
    env.wait_phase("c500-0", "Running").await;
    assert_eq!(env.vms_named("c500-0").len(), 1);
    assert_eq!(
        env.mock.admin().count("POST", VMS),
        1,
        "the VM was found by its recorded UUID: no second create"
    );
    env.assert_no_secrets_logged(&[]);
}

#[tokio::test]
async fn controllers_killed_around_the_create_leave_exactly_one_vm() {
    let mut env = Env::start().await;
    env.start_nodelink();

    // 1. Killed after recording the UUID, while the create is still on its way (Prism holds
    //    the request for 2 s): the next controller finds no VM and sends it again, same UUID.
    env.mock
        .admin()
        .add_fault(FaultRule::new(Some("POST"), VMS, FaultKind::Latency { millis: 2000 }).times(1));
    let mut first = env.controller("first", &[]);
    env.create_machine("killed-0", linux_spec(), false).await;
    let recorded = env
        .wait_machine("killed-0", "a recorded VM UUID", |m| {
            m["status"]["providerStatus"]["vmUUID"].is_string()
        })
        .await;
    let uuid = recorded["status"]["providerStatus"]["vmUUID"]
        .as_str()
        .unwrap()
        .to_owned();
    tokio::time::sleep(Duration::from_millis(300)).await;
    first.kill();

    // 2. Killed as soon as Prism has the VM, whether or not the task got recorded.
    let mut second = env.controller("second", &[]);
    env.wait_phase("killed-0", "Running").await;
    let vms = env.vms_named("killed-0");
    assert_eq!(vms.len(), 1);
    assert_eq!(vms[0].uuid, uuid);

    env.create_machine("killed-1", linux_spec(), false).await;
    let deadline = std::time::Instant::now() + crate::harness::TIMEOUT;
    while env.vms_named("killed-1").is_empty() {
        assert!(std::time::Instant::now() < deadline, "no VM for killed-1");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    second.kill();
    let task_recorded = env.machine("killed-1").unwrap()["status"]["providerStatus"]
        .get("pendingTask")
        .is_some();
    println!("killed-1: controller killed with the create task recorded: {task_recorded}");

    let _third = env.controller("third", &[]);
    env.wait_phase("killed-1", "Running").await;
    assert_eq!(env.vms_named("killed-1").len(), 1);
    assert_eq!(env.vms_named("killed-0").len(), 1);
    env.assert_no_secrets_logged(&[]);
}

/// A template deploy whose answer was lost (Prism deployed, then answered 500) and whose Machine
/// is deleted before a retry records the task: the deletion sends the deploy again with the
/// recorded request id, learns the first deploy's task and VM, and deletes that VM. (Before
/// this was handled, the deletion found no VM and finished, leaving the deployed VM behind.)
#[tokio::test]
async fn a_deploy_whose_answer_was_lost_is_found_and_deleted_with_its_machine() {
    let mut env = Env::start().await;
    let lost_answers = env.mock.admin().add_fault(FaultRule::new(
        Some("POST"),
        "*/$actions/deploy",
        FaultKind::CreateThen500,
    ));
    let mut first = env.controller("first", &[]);
    let (spec, choices) = windows_template();
    env.create_machine_with("lost-0", spec, true, choices).await;
    env.wait_event("lost-0", "FailedCreate", "500").await;
    let deadline = std::time::Instant::now() + crate::harness::TIMEOUT;
    while env.vms_named("lost-0").is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "no VM deployed for lost-0"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.kill();
    let deployed = env.vms_named("lost-0");
    assert_eq!(
        deployed.len(),
        1,
        "repeats with the same request id deploy nothing more"
    );
    let uuid = deployed[0].uuid.clone();
    assert!(env.mock.admin().remove_fault(lost_answers));

    env.machines_api()
        .delete("lost-0", &Default::default())
        .await
        .unwrap();
    let status = env.machine("lost-0").unwrap()["status"]["providerStatus"].clone();
    assert!(status["deployRequestId"].is_string(), "{status}");
    assert!(status.get("pendingTask").is_none(), "{status}");
    assert!(status.get("vmUUID").is_none(), "{status}");

    let _second = env.controller("second", &[]);
    env.wait_machine("lost-0", "deletion", Value::is_null).await;
    assert!(
        env.vms_named("lost-0").is_empty(),
        "the deployed VM was deleted with its Machine"
    );
    env.wait_event("lost-0", "Delete", &uuid).await;
    env.assert_no_secrets_logged(&[]);
}

#[tokio::test]
async fn a_vm_deleted_out_of_band_fails_its_machine() {
    let mut env = Env::start().await;
    env.start_nodelink();
    let _controller = env.controller("controller", &[]);
    for index in 0..3 {
        env.create_machine(&format!("oob-{index}"), linux_spec(), false)
            .await;
    }
    let mut uuid = String::new();
    for index in 0..3 {
        let machine = env.wait_phase(&format!("oob-{index}"), "Running").await;
        uuid = machine["status"]["providerStatus"]["vmUUID"]
            .as_str()
            .unwrap()
            .to_owned();
    }
    // Steady state: Running Machines cost the shared inventory list, not a GET each, and
    // nothing is written when nothing changed (no status patch, no event).
    let writes = |env: &Env| env.controller_machine_patches();
    let events = |env: &Env| -> u64 {
        let reasons: std::collections::BTreeSet<String> = env
            .events_of("oob-0")
            .into_iter()
            .map(|(reason, _, _)| reason)
            .collect();
        reasons
            .iter()
            .map(|reason| env.event_count("oob-0", reason))
            .sum()
    };
    env.settled_machine_patches().await;
    let (calls_before, writes_before) = (env.prism_calls(), writes(&env));
    tokio::time::sleep(Duration::from_secs(5)).await;
    let steady = env.prism_calls() - calls_before;
    println!(
        "steady state: {steady} Prism calls in 5 s for 3 Running Machines (inventory refresh 2 s)"
    );
    assert_eq!(
        writes(&env),
        writes_before,
        "no writes in steady state: {:?}",
        env.sim
            .requests()
            .iter()
            .filter(|r| r.resource == "machines" && r.verb == "patch" && r.user == "controller")
            .map(|r| format!("{} {} {}", r.name, r.subresource, r.status))
            .collect::<Vec<_>>()
    );
    // Events are published after their write: count them once the writes have settled.
    let events_before = events(&env);
    assert!(events_before >= 1, "the create's event");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(events(&env), events_before, "no event without a change");

    assert!(env.mock.admin().delete_vm_out_of_band(&uuid));
    let machine = env.wait_phase("oob-2", "Failed").await;
    assert_eq!(
        machine["status"]["errorMessage"],
        "Can't find created instance."
    );
    let conditions = machine["status"]["conditions"].as_array().unwrap();
    assert!(
        conditions.iter().any(|c| c["type"] == "InstanceExists"
            && c["status"] == "False"
            && c["reason"] == "InstanceMissing"),
        "{conditions:?}"
    );
    env.wait_event("oob-2", "FailedUpdate", "Can't find created instance.")
        .await;
    assert_eq!(env.machine("oob-0").unwrap()["status"]["phase"], "Running");

    env.machines_api()
        .delete("oob-2", &Default::default())
        .await
        .unwrap();
    env.wait_machine("oob-2", "deletion", Value::is_null).await;
    assert!(env.node("oob-2").is_none(), "its Node is deleted");
    env.assert_no_secrets_logged(&[]);
}

fn provider_condition<'a>(machine: &'a Value, type_: &str) -> Option<&'a Value> {
    machine["status"]["providerStatus"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

#[tokio::test]
async fn a_failed_create_task_is_explained_and_retried_or_fails_the_machine() {
    let mut env = Env::start().await;
    env.start_nodelink();
    // Capacity: the subtask's error is the cause; the create is retried with a new UUID.
    env.mock.admin().add_fault(
        FaultRule::new(
            Some("POST"),
            VMS,
            FaultKind::FailTask {
                error: "IP pool of subnet 'vm-network' is exhausted".into(),
                leave_vm_in_error: false,
            },
        )
        .times(1),
    );
    let _controller = env.controller("controller", &[]);
    env.create_machine("pool-0", linux_spec(), false).await;
    let failed_once = env
        .wait_machine("pool-0", "the task failure in the condition", |m| {
            provider_condition(m, "MachineCreation").is_some_and(|c| {
                c["reason"] == "MachineCreationFailed"
                    && c["message"].as_str().unwrap_or("").contains("exhausted")
            })
        })
        .await;
    let first_uuid = failed_once["status"]["providerStatus"]["vmUUID"].clone();
    env.wait_event(
        "pool-0",
        "FailedCreate",
        "IP pool of subnet 'vm-network' is exhausted",
    )
    .await;
    let running = env.wait_phase("pool-0", "Running").await;
    assert_eq!(env.vms_named("pool-0").len(), 1);
    assert_ne!(
        running["status"]["providerStatus"]["vmUUID"], first_uuid,
        "the failed VM's UUID is not reused"
    );

    // Prism says the request itself is invalid: the Machine fails, with Prism's words.
    env.mock.admin().add_fault(
        FaultRule::new(
            Some("POST"),
            VMS,
            FaultKind::FailTask {
                error: "Invalid argument: memory must be a multiple of 4 MiB for this host".into(),
                leave_vm_in_error: false,
            },
        )
        .times(1),
    );
    env.create_machine("refused-0", linux_spec(), false).await;
    let failed = env.wait_phase("refused-0", "Failed").await;
    assert_eq!(failed["status"]["errorReason"], "InvalidConfiguration");
    assert!(
        failed["status"]["errorMessage"]
            .as_str()
            .unwrap()
            .contains("multiple of 4 MiB"),
        "{failed}"
    );

    // A VM left in state ERROR fails its Machine (deleting the Machine deletes the VM).
    env.mock.admin().add_fault(
        FaultRule::new(
            Some("POST"),
            VMS,
            FaultKind::FailTask {
                error: "Host went away during the create".into(),
                leave_vm_in_error: true,
            },
        )
        .times(1),
    );
    env.create_machine("broken-0", linux_spec(), false).await;
    let broken = env.wait_phase("broken-0", "Failed").await;
    assert!(
        broken["status"]["errorMessage"]
            .as_str()
            .unwrap()
            .contains("state ERROR"),
        "{broken}"
    );
    env.machines_api()
        .delete("broken-0", &Default::default())
        .await
        .unwrap();
    env.wait_machine("broken-0", "deletion", Value::is_null)
        .await;
    assert!(env.vms_named("broken-0").is_empty());
    env.assert_no_secrets_logged(&[]);
}

/// Another writer changes the Machine all the time (as nodelink does on a cluster): the
/// controller's resourceVersion-guarded status writes lose races, and each loss is reconciled
/// again at once, counted as `Conflict`, never a `reconcile failed` warning nor a Warning event
/// (on the real API server they were one per scale-up and Machine).
#[tokio::test]
async fn a_write_that_loses_a_race_is_retried_without_a_warning() {
    let mut env = Env::start().await;
    env.start_nodelink();
    let controller = env.controller("controller", &[]);
    let metrics_line = controller.wait_log("metrics listening").await;

    env.create_machine("race-0", linux_spec(), false).await;
    let machines = env.machines_api();
    let writer = tokio::spawn(async move {
        for round in 0u32.. {
            let patch =
                serde_json::json!({"metadata": {"labels": {"other-writer": round.to_string()}}});
            let _ = machines
                .patch(
                    "race-0",
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(patch),
                )
                .await;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    env.wait_phase("race-0", "Running").await;
    let conflicts =
        r#"nutanix_machine_reconcile_errors_total{controller="machine",reason="Conflict"}"#;
    let mut metrics = scrape(&metrics_line, "/metrics").await;
    for _ in 0..50 {
        if metrics.contains(conflicts) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        metrics = scrape(&metrics_line, "/metrics").await;
    }
    writer.abort();
    assert!(
        metrics.contains(conflicts),
        "no write lost a race, the test proved nothing: {metrics}"
    );
    let warnings: Vec<String> = env
        .all_logs()
        .into_iter()
        .filter(|line| line.contains("reconcile failed"))
        .collect();
    assert!(warnings.is_empty(), "{warnings:#?}");
    // Nor a Warning event: each is a write to etcd, announcing a race the next reconcile wins.
    let warning_events: Vec<(String, String, String)> = env
        .events_of("race-0")
        .into_iter()
        .filter(|(_, kind, _)| kind == "Warning")
        .collect();
    assert!(warning_events.is_empty(), "{warning_events:#?}");
    assert_eq!(env.vms_named("race-0").len(), 1);
}

#[tokio::test]
async fn a_create_prism_failed_at_once_shows_soon_with_the_default_intervals() {
    let mut env = Env::start().await;
    env.start_nodelink();
    let poll = Duration::from_secs(10);
    let _controller = env.controller(
        "controller",
        &["--poll-interval", "10s", "--requeue-interval", "30s"],
    );
    // A recorded UUID without a task is also the moment between the record and the create's
    // send: only the VM's existence (its providerID, written from it) says the create ended.
    // Waiting for less let the fault below take quick-0's create when a loaded host held the
    // send back (seen under CPU load: pool-1 was then created at once and never failed).
    let task_ended = |m: &Value| {
        let status = &m["status"]["providerStatus"];
        !status["vmUUID"].is_null()
            && status["pendingTask"].is_null()
            && !m["spec"]["providerID"].is_null()
    };
    // A first create teaches the controller how long creates take on this Prism Central.
    env.create_machine("quick-0", linux_spec(), false).await;
    env.wait_machine("quick-0", "its create ended", task_ended)
        .await;

    // Prism fails the next create at once; its VM is never listed.
    env.mock.admin().add_fault(
        FaultRule::new(
            Some("POST"),
            VMS,
            FaultKind::FailTask {
                error: "IP pool of subnet 'vm-network' is exhausted".into(),
                leave_vm_in_error: false,
            },
        )
        .times(1),
    );
    env.create_machine("pool-1", linux_spec(), false).await;
    // Its UUID is recorded just before the create is sent (its task is kept in memory).
    env.wait_machine("pool-1", "its create recorded", |m| {
        !m["status"]["providerStatus"]["vmUUID"].is_null()
    })
    .await;
    let recorded = std::time::Instant::now();
    env.wait_machine("pool-1", "the task failure in the condition", |m| {
        provider_condition(m, "MachineCreation").is_some_and(|c| {
            c["reason"] == "MachineCreationFailed"
                && c["message"].as_str().unwrap_or("").contains("exhausted")
        })
    })
    .await;
    // Read at the first look after which the first create's VM was listed (at most two poll
    // intervals), not after three requeue intervals (90 s) of looking at a listing that never
    // shows the failed VM.
    let took = recorded.elapsed();
    assert!(
        took < 2 * poll + Duration::from_secs(8),
        "the failure showed after {took:?}"
    );
}
