//! Helpers shared by the integration tests: a kube-sim with the machine-api CRDs, object builders,
//! and polling for a condition.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // test helpers; not every test file uses all

use std::path::Path;
use std::time::Duration;

use kube::Client;
use kube_sim::{Config, KubeSim, RunningKubeSim};
use serde_json::{Value, json};

pub const NS: &str = sandbox::MACHINE_API_NAMESPACE;

/// A kube-sim with the `openshift-machine-api` namespace and the CRDs of `manifests/crds`.
pub async fn kube() -> (RunningKubeSim, Client) {
    let sim = KubeSim::start(Config {
        namespaces: vec![NS.to_owned()],
        ..Config::default()
    })
    .await
    .expect("kube-sim starts");
    let crds = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../manifests/crds");
    for entry in std::fs::read_dir(crds).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        for object in kube_sim::load::documents(&text).unwrap() {
            sim.create(object).unwrap();
        }
    }
    let client = sim.client().expect("client");
    (sim, client)
}

/// Polls `check` every 50 ms for up to 30 s; panics naming `what` when it never holds.
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..600 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for: {what}");
}

/// A MachineSet selecting `machine.openshift.io/cluster-api-machineset: <name>`.
pub fn machine_set(name: &str, replicas: i32) -> Value {
    json!({
        "apiVersion": "machine.openshift.io/v1beta1", "kind": "MachineSet",
        "metadata": {"name": name, "namespace": NS,
            "labels": {"machine.openshift.io/cluster-api-cluster": "sandbox"}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"machine.openshift.io/cluster-api-machineset": name}},
            "template": {
                "metadata": {"labels": {
                    "machine.openshift.io/cluster-api-machineset": name,
                    "machine.openshift.io/cluster-api-cluster": "sandbox"}},
                "spec": {"providerSpec": {"value": {"vcpuSockets": 2, "vcpusPerSocket": 1, "memorySize": "8Gi"}}}
            }
        }
    })
}

/// A Machine with the given labels and, when set, status addresses and providerID.
pub fn machine(name: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "spec": {"providerSpec": {"value": {}}}
    })
}

/// A Ready Node with one InternalIP and, when not empty, a providerID.
pub fn node(name: &str, ip: &str, provider_id: &str) -> Value {
    let mut node = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {},
        "status": {
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                "lastTransitionTime": "2026-01-01T00:00:00Z"}]
        }
    });
    if !provider_id.is_empty() {
        node["spec"]["providerID"] = json!(provider_id);
    }
    node
}
