//! A controller stopped in the middle of a create and another started: one VM, with the UUID
//! the first one recorded.

use std::time::{Duration, Instant};

use prism_mock::{FaultKind, FaultRule};
use serde_json::Value;

use crate::controller::InProcessController;
use crate::harness::{Env, TIMEOUT, linux_spec};
use crate::journal::{Journal, route};

/// Polls every few milliseconds (a step of the controller takes about as long) until `check`
/// holds for the Machine.
async fn wait_closely(env: &Env, name: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let machine = env.machine(name).unwrap_or(Value::Null);
        if check(&machine) {
            return machine;
        }
        assert!(Instant::now() < deadline, "Machine {name}: no {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// After the restart: Running, one VM in Prism, with the UUID recorded first, which no version
/// of the Machine and no create ever changed.
async fn assert_one_vm_with_the_recorded_uuid(env: &Env, name: &str, uuid: &str, users: &[&str]) {
    env.wait_phase(name, "Running").await;
    let journal = Journal::of(env, name, users);
    assert!(
        journal
            .versions
            .iter()
            .filter_map(|v| v.vm_uuid())
            .all(|v| v == uuid),
        "the recorded UUID never changes; journal:\n{}",
        journal.render()
    );
    for create in journal.prism_calls(|p| p.is("POST", route::VMS)) {
        assert_eq!(create.vm(), Some(uuid), "journal:\n{}", journal.render());
    }
    let vms = env.vms_named(name);
    assert_eq!(
        vms.len(),
        1,
        "exactly one VM; journal:\n{}",
        journal.render()
    );
    assert_eq!(vms[0].uuid, uuid);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_stopped_with_its_uuid_recorded_and_its_create_in_flight_is_replaced_without_a_second_vm()
 {
    let mut env = Env::start().await;
    env.start_nodelink();
    // The first create stalls in the mock before it reaches the VM store; the controller is
    // stopped while it stalls: its UUID recorded, the create sent and not made.
    let stall = env.mock.admin().add_fault(
        FaultRule::new(
            Some("POST"),
            route::VMS,
            FaultKind::Latency { millis: 5_000 },
        )
        .times(1),
    );
    let first = InProcessController::start(&env, "controller-a").await;
    env.create_machine("restart-0", linux_spec(), false).await;
    let machine = wait_closely(&env, "restart-0", "vmUUID", |m| {
        m["status"]["providerStatus"]["vmUUID"].is_string()
    })
    .await;
    let deadline = Instant::now() + TIMEOUT;
    while !env
        .mock
        .admin()
        .faults()
        .iter()
        .any(|rule| rule.id == stall && rule.fired > 0)
    {
        assert!(
            Instant::now() < deadline,
            "the create never reached the mock"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    first.stop().await;
    assert!(
        env.mock
            .admin()
            .vms()
            .iter()
            .all(|vm| vm.name != "restart-0"),
        "stopped before the create was made"
    );
    let uuid = machine["status"]["providerStatus"]["vmUUID"]
        .as_str()
        .unwrap()
        .to_owned();

    let second = InProcessController::start(&env, "controller-b").await;
    assert_one_vm_with_the_recorded_uuid(
        &env,
        "restart-0",
        &uuid,
        &["controller-a", "controller-b"],
    )
    .await;
    second.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_stopped_after_a_create_whose_answer_was_lost_is_replaced_without_a_second_vm()
{
    let mut env = Env::start().await;
    env.start_nodelink();
    // The create makes the VM, but its answer is a 500: the task is never recorded.
    env.mock
        .admin()
        .add_fault(FaultRule::new(Some("POST"), route::VMS, FaultKind::CreateThen500).times(1));
    let first = InProcessController::start(&env, "controller-a").await;
    env.create_machine("restart-1", linux_spec(), false).await;
    let deadline = Instant::now() + TIMEOUT;
    while env.mock.admin().count("POST", route::VMS) == 0 {
        assert!(Instant::now() < deadline, "no create was sent");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    first.stop().await;
    let machine = env.machine("restart-1").unwrap();
    assert!(
        machine["status"]["providerStatus"]["pendingTask"].is_null(),
        "stopped before a task was recorded"
    );
    let uuid = machine["status"]["providerStatus"]["vmUUID"]
        .as_str()
        .unwrap()
        .to_owned();

    let second = InProcessController::start(&env, "controller-b").await;
    assert_one_vm_with_the_recorded_uuid(
        &env,
        "restart-1",
        &uuid,
        &["controller-a", "controller-b"],
    )
    .await;
    second.stop().await;
}
