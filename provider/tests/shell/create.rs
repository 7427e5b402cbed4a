//! A Machine from an image: what is written where, in which order.

use std::sync::{Arc, Mutex};

use kube_sim::store::WriteTarget;
use serde_json::json;

use crate::controller::InProcessController;
use crate::harness::{Env, NS, linux_spec};
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

    // The create's task is kept in the controller's memory, never written: the recorded UUID
    // is what makes the create safe to repeat.
    assert!(
        journal
            .versions
            .iter()
            .all(|v| v.pending_task_operation().is_none()),
        "no version records the create's task; journal:\n{}",
        journal.render()
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

/// The Node's providerID is set at the first try while another writer changes the Node between
/// the controller's read of it and its write: nodelink, which updates the Node it has just
/// linked (its annotation, the Machine's labels and taints: machine-api-operator
/// `pkg/controller/nodelink/nodelink_controller.go`, `Reconcile`, after `updateNodeRef`), so at
/// the very moment the controller reacts to the link. A write against the Node's cached
/// resourceVersion was answered 409 there (0.48 per Machine on the real control plane); the
/// API server itself keeps a providerID from changing once set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_nodes_provider_id_is_set_at_once_though_nodelink_wrote_the_node_since_it_was_read() {
    let mut env = Env::start().await;
    let name = "linked-0";
    let interleaved = Arc::new(Mutex::new(false));
    let acted = interleaved.clone();
    env.sim
        .store()
        .interleave_before_write(Box::new(move |store, write| {
            if !(write.method == "PATCH" && write.plural == "nodes" && write.name == name) {
                return false;
            }
            let def = store.resource("", "nodes").unwrap();
            store
                .modify(&def, "", name, WriteTarget::Main, false, |current| {
                    let mut next = current.clone();
                    next["metadata"]["labels"]["node-role.kubernetes.io/worker"] = json!("");
                    Ok(next)
                })
                .unwrap();
            *acted.lock().unwrap() = true;
            true
        }));
    env.start_nodelink();
    let controller = InProcessController::start(&env, "controller").await;
    env.create_machine(name, linux_spec(), false).await;
    env.wait_phase(name, "Running").await;
    let node = env
        .wait_node(name, |node| node["spec"]["providerID"].is_string())
        .await;
    let machine = env.wait_phase(name, "Running").await;
    assert_eq!(node["spec"]["providerID"], machine["spec"]["providerID"]);
    assert!(
        *interleaved.lock().unwrap(),
        "the Node was written in between"
    );

    let node_writes: Vec<u16> = env
        .sim
        .requests()
        .into_iter()
        .filter(|r| r.user == controller.user && r.resource == "nodes" && r.verb == "patch")
        .map(|r| r.status)
        .collect();
    assert_eq!(
        node_writes,
        [200],
        "one Node write, answered at once: {node_writes:?}"
    );
    assert_eq!(warnings(&env, name), Vec::<String>::new());
    controller.stop().await;
}

/// A Machine write that loses a race (another writer changed the Machine since the reconcile
/// read it: its resourceVersion precondition fails, 409) is decided again on the Machine as
/// the other writer left it, and is no failure to announce: no Warning event, each of which is
/// a write to etcd.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_write_that_lost_a_race_is_retried_without_a_warning() {
    let env = Env::start().await;
    let name = "raced-0";
    let interleaved = Arc::new(Mutex::new(false));
    let acted = interleaved.clone();
    env.sim
        .store()
        .interleave_before_write(Box::new(move |store, write| {
            let ours = write.method == "PATCH"
                && write.plural == "machines"
                && write.name == name
                && write.subresource == "status";
            if !ours {
                return false;
            }
            let def = store.resource("machine.openshift.io", "machines").unwrap();
            store
                .modify(&def, NS, name, WriteTarget::Main, false, |current| {
                    let mut next = current.clone();
                    next["metadata"]["labels"]["example.com/touched"] = json!("yes");
                    Ok(next)
                })
                .unwrap();
            *acted.lock().unwrap() = true;
            true
        }));
    let controller = InProcessController::start(&env, "controller").await;
    env.create_machine(name, linux_spec(), false).await;
    env.wait_phase(name, "Provisioned").await;
    assert!(
        *interleaved.lock().unwrap(),
        "the Machine was written in between"
    );
    let refused = env
        .sim
        .requests()
        .into_iter()
        .filter(|r| r.user == controller.user && r.resource == "machines" && r.status == 409)
        .count();
    assert_eq!(refused, 1, "the status write lost the race once");
    assert_eq!(warnings(&env, name), Vec::<String>::new());
    assert_eq!(env.vms_named(name).len(), 1);
    controller.stop().await;
}

fn warnings(env: &Env, name: &str) -> Vec<String> {
    env.events_of(name)
        .into_iter()
        .filter(|(_, kind, _)| kind == "Warning")
        .map(|(reason, _, note)| format!("{reason}: {note}"))
        .collect()
}
