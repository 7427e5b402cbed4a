//! A Machine from an image: what is written where, in which order.

use crate::controller::InProcessController;
use crate::harness::{Env, linux_spec};
use crate::journal::{Journal, route};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_records_the_finalizer_then_the_uuid_then_sends_then_records_the_task() {
    let mut env = Env::start().await;
    env.start_nodelink();
    let controller = InProcessController::start(&env, "controller").await;
    env.create_machine("create-0", linux_spec(), false).await;
    env.wait_phase("create-0", "Running").await;
    let journal = Journal::of(&env, "create-0", &[&controller.user]);

    // Nothing reaches Prism before the Machine holds the finalizer (else a deletion racing
    // the create could leave the VM behind).
    let finalizer = journal.first_version("with the finalizer", |v| v.has_finalizer());
    let first_prism = journal.first_prism_call("at all", |_| true);
    journal.assert_before(
        finalizer,
        first_prism,
        "the finalizer before any Prism call",
    );

    // The UUID is recorded by a status write before the create naming it is sent.
    let recorded = journal.first_version("with a vmUUID", |v| v.vm_uuid().is_some());
    let uuid = recorded.vm_uuid().unwrap().to_owned();
    let write = journal.write_of(recorded);
    assert_eq!(
        (
            write.0.record.verb.as_str(),
            write.0.record.subresource.as_str()
        ),
        ("patch", "status"),
        "the UUID is recorded in a status patch"
    );
    let creates = journal.prism_calls(|p| p.is("POST", route::VMS));
    assert!(!creates.is_empty(), "journal:\n{}", journal.render());
    for create in &creates {
        assert_eq!(
            create.vm(),
            Some(uuid.as_str()),
            "every create names the recorded UUID"
        );
    }
    journal.assert_before(
        recorded,
        creates[0],
        "the UUID recorded before the create is sent",
    );

    // The create's task is recorded once the create was answered.
    let task = journal.first_version("with the create task", |v| {
        v.pending_task_operation() == Some("Create")
    });
    journal.assert_before(
        creates[0],
        task,
        "the create answered before its task is recorded",
    );

    // One UUID for the Machine's whole life, and the VM has it.
    assert!(
        journal
            .versions
            .iter()
            .filter_map(|v| v.vm_uuid())
            .all(|v| v == uuid),
        "the recorded UUID never changes; journal:\n{}",
        journal.render()
    );
    let vms = env.vms_named("create-0");
    assert_eq!(vms.len(), 1);
    assert_eq!(vms[0].uuid, uuid);

    let mut phases: Vec<&str> = journal.versions.iter().filter_map(|v| v.phase()).collect();
    phases.dedup();
    // The in-process controller's calls are what manifests/rbac/ allows its ServiceAccount.
    env.assert_permissions(&controller.user);
    assert_eq!(
        phases,
        ["Provisioning", "Provisioned", "Running"],
        "journal:\n{}",
        journal.render()
    );
    controller.stop().await;
}
