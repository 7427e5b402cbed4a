//! Deleting a Machine drains its Node first: cordon, evictions that respect
//! PodDisruptionBudgets (retried while blocked), DaemonSet pods left alone; lifecycle hooks and
//! the exclude annotation.

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
    env.wait_event("drain-0", "FailedDrain", "web-0-drain-0")
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
