//! A deletion: drained (or the drain skipped) before the VM's DELETE, the DELETE before the
//! finalizer goes, and the finalizer only once Prism has no VM any more; a Machine whose
//! create never got through is deleted without a Prism write.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::api::DeleteParams;
use prism_mock::{FaultKind, FaultRule, Timings};

use crate::controller::InProcessController;
use crate::harness::{Env, linux_spec};
use crate::journal::{Journal, Span, route};

/// Watches prism-mock for VM `uuid` until it is gone; the last moment it was seen there.
fn watch_vm(env: &Env, uuid: &str) -> (Arc<Mutex<Option<Instant>>>, tokio::task::JoinHandle<()>) {
    let admin = env.mock.admin().clone();
    let uuid = uuid.to_owned();
    let last_seen = Arc::new(Mutex::new(None));
    let seen = last_seen.clone();
    let task = tokio::spawn(async move {
        loop {
            let looked = Instant::now();
            if admin.vm_summary(&uuid).is_none() {
                return;
            }
            *seen.lock().unwrap() = Some(looked);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    (last_seen, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deletion_drains_then_deletes_the_vm_then_drops_the_finalizer_once_the_vm_is_gone() {
    let mut env = Env::start().await;
    env.start_nodelink();
    let controller = InProcessController::start(&env, "controller").await;
    env.create_machine("delete-0", linux_spec(), false).await;
    let machine = env.wait_phase("delete-0", "Running").await;
    let uuid = machine["status"]["providerStatus"]["vmUUID"]
        .as_str()
        .unwrap()
        .to_owned();
    // A delete task that takes a while: a finalizer dropped on the DELETE's answer alone
    // would go while the VM is still there.
    env.mock.admin().set_timings(Timings {
        task_running_ms: 1_500,
        ..Timings::for_tests()
    });
    let (last_seen, vm_watch) = watch_vm(&env, &uuid);
    env.machines_api()
        .delete("delete-0", &DeleteParams::default())
        .await
        .unwrap();
    env.wait_machine("delete-0", "gone", serde_json::Value::is_null)
        .await;
    vm_watch.await.unwrap();
    let journal = Journal::of(&env, "delete-0", &[&controller.user]);

    let drained = journal.first_version("drained", |v| v.deleting() && v.drained());
    let deletes = journal.prism_calls(|p| p.is("DELETE", route::VM) && p.vm() == Some(&uuid));
    assert!(!deletes.is_empty(), "journal:\n{}", journal.render());
    journal.assert_before(drained, deletes[0], "drained before the VM is deleted");
    let released = journal.first_version("without the finalizer while deleting", |v| {
        v.deleting() && !v.has_finalizer()
    });
    journal.assert_before(
        deletes[0],
        released,
        "the VM deleted before the finalizer goes",
    );
    let last_seen = last_seen
        .lock()
        .unwrap()
        .expect("the VM was there at first");
    assert!(
        last_seen < released.0.at,
        "the finalizer went while Prism still had VM {uuid}; journal:\n{}",
        journal.render()
    );
    // The in-process controller's calls are what manifests/rbac/ allows its ServiceAccount.
    env.assert_permissions(&controller.user);
    assert!(env.vms_named("delete-0").is_empty());
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_whose_create_never_got_through_is_deleted_without_a_prism_write() {
    let env = Env::start().await;
    // Every create is refused before it reaches the VM store.
    env.mock.admin().add_fault(FaultRule::new(
        Some("POST"),
        route::VMS,
        FaultKind::Error {
            status: 500,
            retry_after_secs: None,
        },
    ));
    let controller = InProcessController::start(&env, "controller").await;
    env.create_machine("never-0", linux_spec(), false).await;
    let deadline = Instant::now() + crate::harness::TIMEOUT;
    while env.mock.admin().count("POST", route::VMS) == 0 {
        assert!(Instant::now() < deadline, "no create was tried");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    env.machines_api()
        .delete("never-0", &DeleteParams::default())
        .await
        .unwrap();
    env.wait_machine("never-0", "gone", serde_json::Value::is_null)
        .await;
    let journal = Journal::of(&env, "never-0", &[&controller.user]);

    let deleting = journal.first_version("being deleted", |v| v.deleting());
    assert!(
        deleting.vm_uuid().is_some(),
        "the create had its UUID recorded; journal:\n{}",
        journal.render()
    );
    // The deletion may send the VM's DELETE without reading it first (a DELETE of a UUID Prism
    // does not have answers 404 and is what a GET would have told); nothing else may change Prism.
    let uuid = deleting.vm_uuid().map(str::to_owned);
    let writes = journal.prism_calls(|p| {
        p.is_write()
            && p.start() > deleting.0.at
            && !(p.method() == "DELETE" && p.0.record.status == 404 && p.vm() == uuid.as_deref())
    });
    assert!(
        writes.is_empty(),
        "no Prism write but a DELETE answered 404 once the Machine is deleted; journal:\n{}",
        journal.render()
    );
    assert!(env.mock.admin().vms().iter().all(|vm| vm.name != "never-0"));
    controller.stop().await;
}
