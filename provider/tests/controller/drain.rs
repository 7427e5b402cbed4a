//! Deleting a Machine drains its Node first: cordon, evictions that respect
//! PodDisruptionBudgets (retried while blocked), DaemonSet pods left alone; lifecycle hooks and
//! the exclude annotation. The VM then waits for the Node's attached volumes to be detached,
//! except on a Node that is gone or has been unreachable too long.

use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

use crate::harness::{Env, linux_spec};

fn condition<'a>(machine: &'a Value, type_: &str) -> Option<&'a Value> {
    machine["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

async fn running_machine_with_pods(env: &Env, name: &str) {
    env.create_machine(name, linux_spec(), false).await;
    env.wait_phase(name, "Running").await;
    let node = name;
    // A real DaemonSet owns the logger pod (the garbage collector deletes pods whose owner is
    // missing).
    let daemon_set = env
        .sim
        .create(json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": format!("logger-{name}"), "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "logger"}},
                     "template": {"metadata": {"labels": {"app": "logger"}},
                                  "spec": {"containers": [{"name": "c", "image": "registry.example/c"}]}}}}))
        .unwrap();
    for (pod, owner) in [("web-0", false), ("logger-0", true)] {
        let mut metadata = json!({"name": format!("{pod}-{name}"), "namespace": "default",
                                  "labels": {"app": format!("web-{name}")}});
        if owner {
            metadata["labels"] = json!({"app": "logger"});
            metadata["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "DaemonSet",
                "name": format!("logger-{name}"), "uid": daemon_set["metadata"]["uid"],
                "controller": true}]);
        }
        env.sim
            .create(json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
                "spec": {"nodeName": node, "containers": [{"name": "c", "image": "registry.example/c"}]}}))
            .unwrap();
        env.sim
            .set_status(
                "",
                "pods",
                "default",
                &format!("{pod}-{name}"),
                json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}),
            )
            .unwrap();
    }
}

#[tokio::test]
async fn delete_waits_for_a_pdb_blocked_eviction_then_completes() {
    let mut env = Env::start().await;
    env.start_nodelink();
    let _controller = env.controller("controller", &[]);
    running_machine_with_pods(&env, "drain-0").await;
    env.sim
        .create(
            json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web-drain-0"}}}}),
        )
        .unwrap();

    env.machines_api()
        .delete("drain-0", &Default::default())
        .await
        .unwrap();
    let blocked = env
        .wait_machine("drain-0", "a blocked drain", |m| {
            condition(m, "Drained")
                .is_some_and(|c| c["status"] == "False" && c["reason"] == "DrainBlocked")
        })
        .await;
    assert_eq!(blocked["status"]["phase"], "Deleting");
    let message = condition(&blocked, "Drained").unwrap()["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(message.contains("default/web-0-drain-0"), "{message}");
    assert_eq!(env.node("drain-0").unwrap()["spec"]["unschedulable"], true);
    assert_eq!(
        env.vms_named("drain-0").len(),
        1,
        "the VM waits for the drain"
    );
    env.wait_event("drain-0", "DrainRequeued", "web-0-drain-0")
        .await;

    // Relaxing the budget lets the eviction through: drain, delete the VM, the Node, the Machine.
    Api::<k8s_openapi::api::policy::v1::PodDisruptionBudget>::namespaced(
        env.client.clone(),
        "default",
    )
    .patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"minAvailable": 0}})),
    )
    .await
    .unwrap();
    env.wait_machine("drain-0", "deletion", Value::is_null)
        .await;
    assert!(env.vms_named("drain-0").is_empty());
    assert!(env.node("drain-0").is_none());
    assert!(
        env.sim.get("", "pods", "default", "web-0-drain-0").is_err(),
        "the pod was evicted"
    );
    assert!(
        env.sim
            .get("", "pods", "default", "logger-0-drain-0")
            .is_ok(),
        "the DaemonSet pod was left alone"
    );
    env.assert_no_secrets_logged(&[]);
    env.assert_permissions("controller");
}

fn cordoned(env: &Env, node: &str) -> bool {
    env.node(node)
        .is_some_and(|n| n["spec"]["unschedulable"] == true)
}

/// MAO's `isDrainAllowed` (`drain_controller.go`): two control-plane Machines deleted at once
/// are drained one after the other, whichever label their Nodes carry; the second waits, with
/// MAO's `DrainError` and `DrainRequeued`, until the first's Node is gone.
#[tokio::test]
async fn control_plane_nodes_are_drained_one_at_a_time() {
    let mut env = Env::start().await;
    env.start_nodelink();
    let _controller = env.controller("controller", &[]);
    let masters = ["master-0", "master-1"];
    for (name, label) in masters.iter().zip([
        "node-role.kubernetes.io/master",
        "node-role.kubernetes.io/control-plane",
    ]) {
        running_machine_with_pods(&env, name).await;
        env.wait_node(name, |_| true).await;
        Api::<k8s_openapi::api::core::v1::Node>::all(env.client.clone())
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {label: ""}}})),
            )
            .await
            .unwrap();
        // Each drain holds on a budget until the test lets it through.
        env.sim
            .create(json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                "metadata": {"name": format!("web-{name}"), "namespace": "default"},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": format!("web-{name}")}}}}))
            .unwrap();
    }
    for name in masters {
        env.machines_api()
            .delete(name, &Default::default())
            .await
            .unwrap();
    }
    let refused = |m: &Value| {
        condition(m, "Drained")
            .is_some_and(|c| c["status"] == "False" && c["reason"] == "DrainError")
    };
    let (mut first, mut second) = (masters[0], masters[1]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let (a, b) = (env.machine(first).unwrap(), env.machine(second).unwrap());
        if refused(&a) {
            (first, second) = (second, first);
            break;
        }
        if refused(&b) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no drain was refused");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // The first is draining (cordoned, held by its budget); the second is not even cordoned.
    env.wait_machine(first, "the first drain under way", |m| {
        condition(m, "Drained").is_some_and(|c| c["reason"] == "DrainBlocked")
    })
    .await;
    assert!(cordoned(&env, first));
    assert!(!cordoned(&env, second), "one control-plane Node at a time");
    let (_, kind, note) = env.wait_event(second, "DrainRequeued", first).await;
    assert_eq!(kind, "Normal");
    assert!(note.contains("drain not permitted"), "{note}");
    assert!(
        env.sim
            .get("", "pods", "default", &format!("web-0-{second}"))
            .is_ok(),
        "nothing of the second was evicted"
    );

    // The first drain ends and its Machine goes; only then does the second drain.
    Api::<k8s_openapi::api::policy::v1::PodDisruptionBudget>::namespaced(
        env.client.clone(),
        "default",
    )
    .delete(&format!("web-{first}"), &Default::default())
    .await
    .unwrap();
    env.wait_machine(first, "the first deletion", Value::is_null)
        .await;
    assert!(!cordoned(&env, second));
    env.wait_machine(second, "the second drain under way", |m| {
        condition(m, "Drained").is_some_and(|c| c["reason"] == "DrainBlocked")
    })
    .await;
    assert!(cordoned(&env, second));
    Api::<k8s_openapi::api::policy::v1::PodDisruptionBudget>::namespaced(
        env.client.clone(),
        "default",
    )
    .delete(&format!("web-{second}"), &Default::default())
    .await
    .unwrap();
    env.wait_machine(second, "the second deletion", Value::is_null)
        .await;
    env.assert_permissions("controller");
}

/// The etcd operator's pre-drain hook on a control-plane Machine (cluster-etcd-operator
/// `pkg/operator/ceohelpers`: `EtcdQuorumOperator`, owner `clusteroperator/etcd`): `Drainable`
/// says so (MAO's `setLifecycleHookConditions`), the deletion holds before the cordon with MAO's
/// `DrainBlocked` event, and drains once the operator removes the hook.
#[tokio::test]
async fn the_etcd_quorum_hook_holds_a_control_plane_drain_and_drainable_says_so() {
    let mut env = Env::start().await;
    env.start_nodelink();
    let _controller = env.controller("controller", &[]);
    let name = "master-0";
    running_machine_with_pods(&env, name).await;
    env.wait_node(name, |_| true).await;
    Api::<k8s_openapi::api::core::v1::Node>::all(env.client.clone())
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"node-role.kubernetes.io/master": ""}}})),
        )
        .await
        .unwrap();
    let machines = env.machines_api();
    machines
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"lifecycleHooks": {"preDrain": [
                {"name": "EtcdQuorumOperator", "owner": "clusteroperator/etcd"}]}}})),
        )
        .await
        .unwrap();
    let held = env
        .wait_machine(name, "Drainable=False", |m| {
            condition(m, "Drainable").is_some_and(|c| c["status"] == "False")
        })
        .await;
    let drainable = condition(&held, "Drainable").unwrap();
    assert_eq!(drainable["reason"], "HookPresent");
    assert_eq!(drainable["severity"], "Warning");
    assert_eq!(
        drainable["message"],
        "Drain operation currently blocked by: [{Name:EtcdQuorumOperator Owner:clusteroperator/etcd}]"
    );
    assert_eq!(condition(&held, "Terminable").unwrap()["status"], "True");

    machines.delete(name, &Default::default()).await.unwrap();
    env.wait_event(name, "DrainBlocked", "pre-drain hook").await;
    let deleting = env.wait_phase(name, "Deleting").await;
    assert!(condition(&deleting, "Drained").is_none());
    assert!(
        env.node(name)
            .is_some_and(|n| n["spec"]["unschedulable"] != true),
        "the hook holds the cordon"
    );
    assert_eq!(env.vms_named(name).len(), 1);
    // The etcd operator moves the member and removes its hook.
    machines
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"lifecycleHooks": {"preDrain": null}}})),
        )
        .await
        .unwrap();
    env.wait_machine(name, "deletion", Value::is_null).await;
    assert!(env.vms_named(name).is_empty());
    // The drain's end is told in the deletion's one event (MAO's `DrainSucceeded` is left out:
    // each event is an etcd write).
    env.wait_event(name, "Delete", &format!("Node {name} drained"))
        .await;
}

#[tokio::test]
async fn lifecycle_hooks_hold_the_deletion_and_exclusion_skips_the_drain() {
    let mut env = Env::start().await;
    env.start_nodelink();
    let _controller = env.controller("controller", &[]);
    running_machine_with_pods(&env, "hooked-0").await;
    let machines = env.machines_api();
    machines
        .patch(
            "hooked-0",
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": {"annotations": {"machine.openshift.io/exclude-node-draining": ""}},
                "spec": {"lifecycleHooks": {"preTerminate": [{"name": "backup", "owner": "tests"}]}},
            })),
        )
        .await
        .unwrap();
    machines
        .delete("hooked-0", &Default::default())
        .await
        .unwrap();
    let held = env
        .wait_machine("hooked-0", "drain skipped", |m| {
            condition(m, "Drained")
                .is_some_and(|c| c["status"] == "True" && c["reason"] == "DrainSkipped")
        })
        .await;
    assert_eq!(held["status"]["phase"], "Deleting");
    assert!(
        env.sim.get("", "pods", "default", "web-0-hooked-0").is_ok(),
        "excluded from draining: no eviction"
    );
    assert_eq!(
        env.vms_named("hooked-0").len(),
        1,
        "preTerminate holds the VM"
    );
    machines
        .patch(
            "hooked-0",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"lifecycleHooks": {"preTerminate": null}}})),
        )
        .await
        .unwrap();
    env.wait_machine("hooked-0", "deletion", Value::is_null)
        .await;
    assert!(env.vms_named("hooked-0").is_empty());
    env.assert_no_secrets_logged(&[]);
}

const VOLUME: &str = "kubernetes.io/csi/csi.nutanix.com^NutanixVolumes-vg-1";

/// Sets the Node's status: its `Ready` condition (with a transition time) and attached volumes.
fn set_node_status(env: &Env, name: &str, ready: &str, since: &str, volumes: &[&str]) {
    let attached: Vec<Value> = volumes
        .iter()
        .map(|v| json!({"name": v, "devicePath": ""}))
        .collect();
    let ip = env.machine(name).unwrap()["status"]["addresses"][0]["address"].clone();
    env.sim
        .set_status(
            "",
            "nodes",
            "",
            name,
            json!({"conditions": [{"type": "Ready", "status": ready, "lastTransitionTime": since}],
                   "addresses": [{"type": "InternalIP", "address": ip}],
                   "volumesAttached": attached}),
        )
        .unwrap();
}

fn deletion_condition(machine: &Value) -> Option<&Value> {
    machine["status"]["providerStatus"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "MachineDeletion")
}

#[tokio::test]
async fn the_vm_waits_until_the_nodes_volumes_are_detached() {
    let mut env = Env::start().await;
    env.start_nodelink();
    let _controller = env.controller("controller", &[]);
    env.create_machine("vol-0", linux_spec(), false).await;
    env.wait_phase("vol-0", "Running").await;
    set_node_status(&env, "vol-0", "True", "2026-01-01T00:00:00Z", &[VOLUME]);

    env.machines_api()
        .delete("vol-0", &Default::default())
        .await
        .unwrap();
    let waiting = env
        .wait_machine("vol-0", "waiting for volumes", |m| {
            deletion_condition(m).is_some_and(|c| c["reason"] == "WaitingForVolumeDetach")
        })
        .await;
    let message = deletion_condition(&waiting).unwrap()["message"].to_string();
    assert!(message.contains(VOLUME), "{message}");
    env.wait_event("vol-0", "WaitingForVolumeDetach", VOLUME)
        .await;
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert_eq!(
        env.vms_named("vol-0").len(),
        1,
        "no VM deleted while its Node lists a volume"
    );

    // The attach/detach controller detaches it: the deletion goes on at once (the Node's change
    // triggers it).
    set_node_status(&env, "vol-0", "True", "2026-01-01T00:00:00Z", &[]);
    env.wait_machine("vol-0", "deletion", Value::is_null).await;
    assert!(env.vms_named("vol-0").is_empty());
    assert!(env.node("vol-0").is_none());
    assert_eq!(env.event_count("vol-0", "VolumeDetachTimedOut"), 0);
    env.assert_no_secrets_logged(&[]);
    env.assert_permissions("controller");
}

#[tokio::test]
async fn a_node_unreachable_for_long_or_gone_does_not_hold_the_vm() {
    let mut env = Env::start().await;
    env.start_nodelink();
    let _controller = env.controller("controller", &[]);
    for name in ["lost-0", "gone-0"] {
        env.create_machine(name, linux_spec(), false).await;
    }
    for name in ["lost-0", "gone-0"] {
        env.wait_phase(name, "Running").await;
    }
    // Its kubelet stopped posting an hour ago (a MachineHealthCheck's remediation): nothing will
    // ever detach its volume but the attach/detach controller's forced detach.
    let an_hour_ago = k8s_openapi::jiff::Timestamp::now()
        .checked_sub(k8s_openapi::jiff::SignedDuration::from_hours(1))
        .unwrap()
        .to_string();
    set_node_status(&env, "lost-0", "Unknown", &an_hour_ago, &[VOLUME]);
    // Deleted by someone: nothing reports its volumes any more.
    set_node_status(&env, "gone-0", "True", "2026-01-01T00:00:00Z", &[VOLUME]);
    Api::<k8s_openapi::api::core::v1::Node>::all(env.client.clone())
        .delete("gone-0", &Default::default())
        .await
        .unwrap();

    for name in ["lost-0", "gone-0"] {
        env.machines_api()
            .delete(name, &Default::default())
            .await
            .unwrap();
    }
    for name in ["lost-0", "gone-0"] {
        env.wait_machine(name, "deletion", Value::is_null).await;
        assert!(env.vms_named(name).is_empty(), "{name}");
    }
    let (_, kind, note) = env
        .wait_event("lost-0", "VolumeDetachTimedOut", VOLUME)
        .await;
    assert_eq!(kind, "Warning");
    assert!(
        note.contains("unreachable since") && note.contains("not Ready after 6m"),
        "{note}"
    );
    let (_, kind, _) = env
        .wait_event("gone-0", "VolumeCheckSkipped", "gone-0 is gone")
        .await;
    assert_eq!(kind, "Normal");
    env.assert_no_secrets_logged(&[]);
}

/// Nutanix CSI 3.x attaches a PersistentVolume's volume group to the VM itself, and Prism refuses
/// to delete a VM holding one (its delete task fails: terraform-provider-nutanix#568). The VM's
/// volume groups are detached first (as CAPX #460, #477): the Machine ends with no VM, and the
/// volume group (the PersistentVolume's data) is kept, attached to nothing.
#[tokio::test]
async fn a_vm_holding_a_csi_volume_group_is_deleted_after_its_detach_and_the_group_is_kept() {
    let mut env = Env::start().await;
    env.start_nodelink();
    let _controller = env.controller("controller", &[]);
    env.create_machine("csi-0", linux_spec(), false).await;
    env.wait_phase("csi-0", "Running").await;
    let vm = env.vms_named("csi-0")[0].uuid.clone();
    let group = env
        .mock
        .admin()
        .create_volume_group("pvc-5e1d", std::slice::from_ref(&vm))
        .unwrap();

    env.machines_api()
        .delete("csi-0", &Default::default())
        .await
        .unwrap();
    env.wait_machine("csi-0", "deletion", Value::is_null).await;
    assert!(env.vms_named("csi-0").is_empty(), "no VM left");
    let kept = env.mock.admin().volume_group(&group).unwrap();
    assert!(kept.attached_vms.is_empty(), "{kept:?}");
    let (_, kind, note) = env.wait_event("csi-0", "DetachVolumeGroups", &group).await;
    assert_eq!(kind, "Normal");
    assert!(note.contains(&vm), "{note}");
    let detaches: u64 = env
        .mock
        .admin()
        .counters()
        .iter()
        .filter(|c| c.method == "POST" && c.endpoint.ends_with("/$actions/detach-vm"))
        .map(|c| c.count)
        .sum();
    assert!(detaches >= 1, "{:?}", env.mock.admin().counters());
    env.assert_no_secrets_logged(&[]);
    env.assert_permissions("controller");
}
