//! The MachineSet controller against the real binary: capacity annotations written on both key
//! sets, recomputed when the template changes (a key no longer wanted removed), the
//! MachineAutoscaler's annotations untouched, nothing written in steady state, and a Warning
//! event (once) for a providerSpec they cannot be computed from. A Windows set announces WMCO's
//! taint and pod limit, and both sets their system disk as ephemeral storage.

use std::time::{Duration, Instant};

use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::harness::{Env, NS, TIMEOUT, linux_spec, windows_template};

const MIN: &str = "machine.openshift.io/cluster-api-autoscaler-node-group-min-size";
const MAX: &str = "machine.openshift.io/cluster-api-autoscaler-node-group-max-size";
const OWNER: &str = "autoscaling.openshift.io/machineautoscaler";
const TAINTS: &str = "capacity.cluster-autoscaler.kubernetes.io/taints";
const MAX_PODS: &str = "capacity.cluster-autoscaler.kubernetes.io/maxPods";
const OLD_MAX_PODS: &str = "machine.openshift.io/maxPods";
const EPHEMERAL_DISK: &str = "capacity.cluster-autoscaler.kubernetes.io/ephemeral-disk";

/// Creates a MachineSet through the API (so the machine-api-operator's defaulting applies).
async fn create_machine_set(
    env: &Env,
    name: &str,
    (provider_spec, choices): (Value, Value),
    windows: bool,
) {
    let mut labels = json!({"machine.openshift.io/cluster-api-cluster": "sandbox",
                            "machine.openshift.io/cluster-api-machineset": name});
    if windows {
        labels["machine.openshift.io/os-id"] = json!("Windows");
    }
    let set: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "machine.openshift.io/v1beta1", "kind": "MachineSet",
        "metadata": {"name": name, "namespace": NS, "annotations": {
            MIN: "0", MAX: "3", OWNER: format!("{NS}/{name}")}},
        "spec": {"replicas": 0,
                 "selector": {"matchLabels": {"machine.openshift.io/cluster-api-machineset": name}},
                 "template": {"metadata": {"labels": labels, "annotations": choices},
                              "spec": {"providerSpec": {"value": provider_spec}}}},
    }))
    .unwrap();
    machine_sets(env)
        .create(&PostParams::default(), &set)
        .await
        .unwrap();
}

fn annotations(env: &Env, name: &str) -> Value {
    env.sim
        .get("machine.openshift.io", "machinesets", NS, name)
        .unwrap()["metadata"]["annotations"]
        .clone()
}

async fn wait_annotations(
    env: &Env,
    name: &str,
    what: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let current = annotations(env, name);
        if check(&current) {
            return current;
        }
        assert!(
            Instant::now() < deadline,
            "MachineSet {name}: timed out waiting for {what}: {current}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn machine_sets(env: &Env) -> Api<DynamicObject> {
    let resource = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("machine.openshift.io", "v1beta1", "MachineSet"),
        "machinesets",
    );
    Api::namespaced_with(env.client.clone(), NS, &resource)
}

async fn patch_provider_spec(env: &Env, name: &str, value: Value) {
    machine_sets(env)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"template": {"spec": {"providerSpec": {"value": value}}}}}),
            ),
        )
        .await
        .unwrap();
}

fn applies(env: &Env) -> usize {
    env.sim
        .requests()
        .iter()
        .filter(|r| r.resource == "machinesets" && r.verb == "patch" && r.user == "controller")
        .count()
}

#[tokio::test]
async fn capacity_annotations_follow_the_template_and_leave_other_keys_alone() {
    let mut env = Env::start().await;
    let _controller = env.controller("controller", &[]);
    create_machine_set(&env, "win-set", windows_template(), true).await;
    create_machine_set(&env, "linux-set", (linux_spec(), json!({})), false).await;
    let mut foreign = linux_spec();
    foreign["kind"] = json!("VSphereMachineProviderSpec");
    create_machine_set(&env, "vsphere-set", (foreign, json!({})), false).await;

    let written = wait_annotations(&env, "win-set", "capacity annotations", |a| {
        a["machine.openshift.io/vCPU"] == "2"
    })
    .await;
    assert_eq!(written["machine.openshift.io/memoryMb"], "8192");
    assert_eq!(written["machine.openshift.io/GPU"], "0");
    assert_eq!(
        written["capacity.cluster-autoscaler.kubernetes.io/cpu"],
        "2"
    );
    assert_eq!(
        written["capacity.cluster-autoscaler.kubernetes.io/memory"],
        "8Gi"
    );
    assert_eq!(
        written["capacity.cluster-autoscaler.kubernetes.io/gpu-count"],
        "0"
    );
    assert_eq!(
        written["capacity.cluster-autoscaler.kubernetes.io/labels"],
        "kubernetes.io/arch=amd64,kubernetes.io/os=windows,node.openshift.io/os_id=Windows"
    );
    for (key, value) in [
        (MIN, "0"),
        (MAX, "3"),
        (OWNER, "openshift-machine-api/win-set"),
    ] {
        assert_eq!(written[key], value, "{key} survives");
    }
    let linux = wait_annotations(&env, "linux-set", "capacity annotations", |a| {
        a["capacity.cluster-autoscaler.kubernetes.io/labels"].is_string()
    })
    .await;
    assert_eq!(
        linux["capacity.cluster-autoscaler.kubernetes.io/labels"],
        "kubernetes.io/arch=amd64,kubernetes.io/os=linux"
    );
    assert_eq!(linux[EPHEMERAL_DISK], "120Gi");
    for key in [TAINTS, MAX_PODS, OLD_MAX_PODS] {
        assert!(linux.get(key).is_none(), "{key} on a Linux set: {linux}");
    }
    assert_eq!(written[TAINTS], "os=Windows:NoSchedule");
    assert_eq!(
        (&written[MAX_PODS], &written[OLD_MAX_PODS]),
        (&json!("250"), &json!("250"))
    );
    assert_eq!(written[EPHEMERAL_DISK], "120Gi");

    // The template takes WMCO's taint itself: the annotation would list it twice, so it goes,
    // and the pod limit stays.
    machine_sets(&env)
        .patch(
            "win-set",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"spec": {"taints": [
                {"key": "os", "value": "Windows", "effect": "NoSchedule"}]}}}})),
        )
        .await
        .unwrap();
    let written = wait_annotations(&env, "win-set", "the taints key removed", |a| {
        a.get(TAINTS).is_none()
    })
    .await;
    assert_eq!(written[MAX_PODS], "250");

    // The template changes: more CPUs and a GPU, then the GPU removed again.
    let (mut spec, _) = windows_template();
    spec["vcpuSockets"] = json!(4);
    spec["gpus"] = json!([{"type": "Name", "name": "Tesla T4"}]);
    patch_provider_spec(&env, "win-set", spec.clone()).await;
    let written = wait_annotations(&env, "win-set", "4 vCPU and a GPU", |a| {
        a["machine.openshift.io/vCPU"] == "4" && a["machine.openshift.io/GPU"] == "1"
    })
    .await;
    assert_eq!(
        written["capacity.cluster-autoscaler.kubernetes.io/gpu-type"],
        "nvidia.com/gpu"
    );
    spec["gpus"] = Value::Null;
    patch_provider_spec(&env, "win-set", spec).await;
    let written = wait_annotations(&env, "win-set", "the GPU type removed", |a| {
        a["machine.openshift.io/GPU"] == "0"
            && a.get("capacity.cluster-autoscaler.kubernetes.io/gpu-type")
                .is_none()
    })
    .await;
    assert_eq!(
        written[MAX], "3",
        "the autoscaler's keys survive every apply"
    );
    assert_eq!(written[OWNER], "openshift-machine-api/win-set");

    // Steady state, even when someone else changes their own keys: no write.
    let before = applies(&env);
    machine_sets(&env)
        .patch(
            "win-set",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {MAX: "5"}}})),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(applies(&env), before, "no write in steady state");
    assert_eq!(annotations(&env, "win-set")[MAX], "5");

    // Another provider's MachineSet is left alone.
    let vsphere = annotations(&env, "vsphere-set");
    assert!(
        vsphere.get("machine.openshift.io/vCPU").is_none(),
        "{vsphere}"
    );

    // An unusable providerSpec: one Warning event naming the field, the last annotations kept,
    // no retry loop.
    let (mut bad, _) = windows_template();
    bad["vcpuSockets"] = json!(0);
    patch_provider_spec(&env, "win-set", bad).await;
    let (_, kind, note) = env
        .wait_event(
            "win-set",
            "InvalidConfiguration",
            "providerSpec.value.vcpuSockets",
        )
        .await;
    assert_eq!(kind, "Warning", "{note}");
    let before = applies(&env);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(applies(&env), before);
    assert_eq!(env.event_count("win-set", "InvalidConfiguration"), 1);
    assert_eq!(
        annotations(&env, "win-set")["machine.openshift.io/vCPU"],
        "4"
    );

    env.assert_no_secrets_logged(&[]);
    env.assert_permissions("controller");
}
