//! A clone and a template deploy: what identifies the VM is recorded before the call that
//! carries it, and the follow-up update comes once its VM is recorded.

use serde_json::Value;

use crate::controller::InProcessController;
use crate::harness::{Env, windows_clone, windows_template};
use crate::journal::{Journal, MachineVersion, PrismCall, route};

/// Running, with nothing left to apply to the VM.
async fn wait_settled(env: &Env, name: &str) {
    env.wait_machine(name, "Running with the follow-up applied", |m: &Value| {
        m["status"]["phase"] == "Running"
            && m["status"]["providerStatus"]["pendingFollowUp"].is_null()
            && m["status"]["providerStatus"]["pendingTask"].is_null()
    })
    .await;
}

fn is_deploy(call: &PrismCall) -> bool {
    call.method() == "POST" && call.endpoint().ends_with("/$actions/deploy")
}

/// The follow-up `PUT`s of VM `uuid`: after `recorded` (a version naming the VM, with the
/// follow-up pending), their task recorded after the first is answered, and the follow-up
/// cleared only after that.
fn assert_follow_up_after(journal: &Journal, uuid: &str, recorded: &MachineVersion) {
    assert!(
        !recorded.provider_status()["pendingFollowUp"].is_null(),
        "the follow-up is pending when the VM is recorded; journal:\n{}",
        journal.render()
    );
    let updates = journal.prism_calls(|p| p.is("PUT", route::VM) && p.vm() == Some(uuid));
    assert!(
        !updates.is_empty(),
        "a follow-up update of {uuid}; journal:\n{}",
        journal.render()
    );
    journal.assert_before(
        recorded,
        updates[0],
        "the VM recorded before its follow-up update",
    );
    let task = journal.first_version("with the follow-up task", |v| {
        v.pending_task_operation() == Some("FollowUp")
    });
    journal.assert_before(
        updates[0],
        task,
        "the update answered before its task is recorded",
    );
    let cleared = journal.first_version("with the follow-up cleared", |v| {
        v.0.rv > recorded.0.rv && v.provider_status()["pendingFollowUp"].is_null()
    });
    journal.assert_before(
        updates[0],
        cleared,
        "the follow-up cleared only once it was sent",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clone_records_its_uuid_and_follow_up_before_the_clone_and_updates_after() {
    let mut env = Env::start().await;
    env.start_nodelink();
    let controller = InProcessController::start(&env, "controller").await;
    let (spec, choices) = windows_clone();
    env.create_machine_with("clone-0", spec, true, choices)
        .await;
    wait_settled(&env, "clone-0").await;
    let journal = Journal::of(&env, "clone-0", &[&controller.user]);

    let recorded = journal.first_version("with a vmUUID", |v| v.vm_uuid().is_some());
    let uuid = recorded.vm_uuid().unwrap().to_owned();
    assert!(
        !recorded.provider_status()["pendingFollowUp"].is_null(),
        "what the clone cannot set is recorded with its UUID; journal:\n{}",
        journal.render()
    );
    let clones = journal.prism_calls(|p| p.is("POST", route::CLONE));
    assert!(!clones.is_empty(), "journal:\n{}", journal.render());
    for clone in &clones {
        assert_eq!(
            clone.vm(),
            Some(uuid.as_str()),
            "every clone makes the recorded UUID"
        );
    }
    journal.assert_before(
        recorded,
        clones[0],
        "the UUID recorded before the clone is sent",
    );
    // The clone's task is kept in the controller's memory, never written.
    assert!(
        journal
            .versions
            .iter()
            .all(|v| v.pending_task_operation() != Some("Clone")),
        "no version records the clone's task; journal:\n{}",
        journal.render()
    );
    assert_follow_up_after(&journal, &uuid, recorded);

    let vms = env.vms_named("clone-0");
    assert_eq!(vms.len(), 1);
    assert_eq!(vms[0].uuid, uuid);
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deploy_records_its_request_id_before_the_deploy_and_updates_once_its_vm_is_recorded() {
    let mut env = Env::start().await;
    env.start_nodelink();
    let controller = InProcessController::start(&env, "controller").await;
    let (spec, choices) = windows_template();
    env.create_machine_with("deploy-0", spec, true, choices)
        .await;
    wait_settled(&env, "deploy-0").await;
    let journal = Journal::of(&env, "deploy-0", &[&controller.user]);

    let recorded = journal.first_version("with a deploy request id", |v| {
        v.provider_status()["deployRequestId"].is_string()
    });
    let request_id = recorded.provider_status()["deployRequestId"]
        .as_str()
        .unwrap()
        .to_owned();
    let deploys = journal.prism_calls(is_deploy);
    assert!(!deploys.is_empty(), "journal:\n{}", journal.render());
    for deploy in &deploys {
        assert_eq!(
            deploy.0.request_id.as_deref(),
            Some(request_id.as_str()),
            "every deploy carries the recorded request id"
        );
    }
    journal.assert_before(
        recorded,
        deploys[0],
        "the request id recorded before the deploy",
    );
    // The deploy's task is kept in the controller's memory, never written.
    assert!(
        journal
            .versions
            .iter()
            .all(|v| v.pending_task_operation() != Some("Deploy")),
        "no version records the deploy's task; journal:\n{}",
        journal.render()
    );

    // The deployed VM's UUID comes from Prism: recorded after the deploy, before its update.
    let vm_recorded = journal.first_version("with a vmUUID", |v| v.vm_uuid().is_some());
    let uuid = vm_recorded.vm_uuid().unwrap().to_owned();
    journal.assert_before(
        deploys[0],
        vm_recorded,
        "the deploy answered before its VM is recorded",
    );
    assert_follow_up_after(&journal, &uuid, vm_recorded);

    let vms = env.vms_named("deploy-0");
    assert_eq!(vms.len(), 1);
    assert_eq!(vms[0].uuid, uuid);
    controller.stop().await;
}
