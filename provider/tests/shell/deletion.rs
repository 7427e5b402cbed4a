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

/// A deletion ends with a status write and then the finalizer's removal, two versions whose
/// watch events reach the controller's cache one after the other. A reconcile woken by the
/// first ran on it after the Machine was already gone: it read the VM again and sent a
/// finalizer removal that kube-sim answered 404 (725 `reconcile failed` warnings in a
/// 1,000-Machine scale-down). Released Machines must see no further call or write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_machine_gets_no_read_and_no_write_from_a_cache_that_still_holds_it() {
    let mut env = Env::start().await;
    env.start_nodelink();
    let controller = InProcessController::start(&env, "controller").await;
    let names: Vec<String> = (0..3).map(|i| format!("released-{i}")).collect();
    for name in &names {
        env.create_machine(name, linux_spec(), false).await;
    }
    let mut uuids = Vec::new();
    for name in &names {
        let machine = env.wait_phase(name, "Running").await;
        uuids.push(
            machine["status"]["providerStatus"]["vmUUID"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    // A loaded API server: each write takes a while, and a watch event arrives later than the
    // write's answer. A reconcile woken by the last status write then starts while the cache
    // still has that version and the finalizer's removal is not in it yet.
    env.sim
        .store()
        .set_write_latency(Duration::from_millis(150));
    env.sim.store().set_watch_delay(Duration::from_millis(400));
    for name in &names {
        env.machines_api()
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }
    for name in &names {
        env.wait_machine(name, "gone", serde_json::Value::is_null)
            .await;
    }
    // Longer than a reconcile that found a stale Machine waits before it looks again.
    tokio::time::sleep(Duration::from_millis(1_500)).await;

    for (name, uuid) in names.iter().zip(&uuids) {
        let journal = Journal::of(&env, name, &[&controller.user]);
        let released = journal.first_version("without the finalizer while deleting", |v| {
            v.deleting() && !v.has_finalizer()
        });
        let later_calls =
            journal.prism_calls(|p| p.vm() == Some(uuid) && p.start() > released.0.at);
        assert!(
            later_calls.is_empty(),
            "Prism was asked about VM {uuid} after Machine {name} was released; journal:\n{}",
            journal.render()
        );
        let refused = journal.kube.iter().find(|k| {
            k.is_write()
                && k.0.record.resource == "machines"
                && k.0.record.name == *name
                && k.0.record.status >= 400
        });
        assert!(
            refused.is_none(),
            "a write to Machine {name} was refused; journal:\n{}",
            journal.render()
        );
    }
    controller.stop().await;
}

/// Which of a deletion's two last writes finds the Machine gone.
#[derive(Clone, Copy)]
enum GoneBefore {
    /// The status write that precedes the finalizer's removal.
    StatusWrite,
    /// The finalizer's removal itself.
    FinalizerRemoval,
}

/// Deletes a Machine (once it reached `phase`) while another writer (a reconcile of an earlier
/// process, or an administrator's `oc patch`) removes the finalizer just before one of the
/// controller's last writes, once Prism has no VM of it. The API server removes a deleting
/// object whose finalizers are empty, so that write is answered 404: the deletion is then done,
/// not failed.
async fn released_by_another_writer(
    name: &'static str,
    spec: serde_json::Value,
    phase: &str,
    announced: Option<(&str, &str)>,
    gone_before: GoneBefore,
) {
    let mut env = Env::start().await;
    env.start_nodelink();
    let controller = InProcessController::start(&env, "controller").await;
    env.create_machine(name, spec, false).await;
    let machine = env.wait_phase(name, phase).await;
    // The reconcile that wrote the phase publishes its events after the status write: they
    // belong to the time before the deletion.
    if let Some((reason, text)) = announced {
        env.wait_event(name, reason, text).await;
    }
    let uuid = machine["status"]["providerStatus"]["vmUUID"]
        .as_str()
        .map(str::to_owned);
    let errors_before = reconcile_errors(&controller);
    let warnings_before = warnings(&env, name);
    let admin = env.mock.admin().clone();
    let acted = Arc::new(Mutex::new(false));
    let acted_flag = acted.clone();
    let subresource = match gone_before {
        GoneBefore::StatusWrite => "status",
        GoneBefore::FinalizerRemoval => "",
    };
    env.sim
        .store()
        .interleave_before_write(Box::new(move |store, write| {
            let ours = write.method == "PATCH"
                && write.plural == "machines"
                && write.name == name
                && write.subresource == subresource;
            let vm_gone = uuid
                .as_ref()
                .is_none_or(|uuid| admin.vm_summary(uuid).is_none());
            let def = store.resource("machine.openshift.io", "machines").unwrap();
            let deleting = store
                .get(&def, crate::harness::NS, name)
                .is_ok_and(|m| !m.value["metadata"]["deletionTimestamp"].is_null());
            if !(ours && vm_gone && deleting) {
                return false;
            }
            store
                .modify(
                    &def,
                    crate::harness::NS,
                    name,
                    kube_sim::store::WriteTarget::Main,
                    false,
                    |current| {
                        let mut next = current.clone();
                        next["metadata"]["finalizers"] = serde_json::json!([]);
                        Ok(next)
                    },
                )
                .unwrap();
            *acted_flag.lock().unwrap() = true;
            true
        }));
    env.machines_api()
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
    env.wait_machine(name, "gone", serde_json::Value::is_null)
        .await;
    // Longer than a failed reconcile waits before its retry.
    tokio::time::sleep(Duration::from_millis(1_500)).await;

    let journal = Journal::of(&env, name, &[&controller.user]);
    assert!(
        *acted.lock().unwrap(),
        "the controller made no such write once the VM was gone; journal:\n{}",
        journal.render()
    );
    let refused: Vec<_> = journal
        .kube
        .iter()
        .filter(|k| k.is_write() && k.0.record.name == name && k.0.record.status >= 400)
        .collect();
    assert_eq!(
        refused.len(),
        1,
        "one write found the Machine gone; journal:\n{}",
        journal.render()
    );
    assert_eq!(refused[0].0.record.status, 404);
    let later = journal.kube.iter().find(|k| {
        k.is_write()
            && k.0.record.resource == "machines"
            && k.0.record.name == name
            && k.0.received > refused[0].0.answered
    });
    assert!(
        later.is_none(),
        "the controller wrote to the gone Machine again; journal:\n{}",
        journal.render()
    );
    assert_eq!(
        reconcile_errors(&controller),
        errors_before,
        "a Machine gone at the end of its deletion failed a reconcile; journal:\n{}",
        journal.render()
    );
    assert_eq!(warnings(&env, name), warnings_before);
    controller.stop().await;
}

fn reconcile_errors(controller: &InProcessController) -> u64 {
    controller
        .metrics
        .reconcile_duration
        .with_label_values(&["machine", "error"])
        .get_sample_count()
}

fn warnings(env: &Env, name: &str) -> Vec<(String, String)> {
    env.events_of(name)
        .into_iter()
        .filter(|(_, kind, _)| kind == "Warning")
        .map(|(reason, _, note)| (reason, note))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_gone_before_the_last_status_write_of_its_deletion_is_deleted_not_failed() {
    // A Failed Machine has no VM: its deletion writes phase Deleting and removes the finalizer
    // in one reconcile.
    let mut spec = linux_spec();
    spec["vcpuSockets"] = 0.into();
    released_by_another_writer(
        "gone-status-0",
        spec,
        "Failed",
        Some(("FailedCreate", "vcpuSockets")),
        GoneBefore::StatusWrite,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_gone_before_its_finalizer_removal_is_deleted_not_failed() {
    released_by_another_writer(
        "gone-finalizer-0",
        linux_spec(),
        "Running",
        None,
        GoneBefore::FinalizerRemoval,
    )
    .await;
}
