//! The real `kubectl` against a started kube-sim: apply CRDs and objects, get with printer columns, scale a
//! MachineSet, patch status, wait for a condition, delete an object held by a finalizer, drain a node whose pod
//! is guarded by a PodDisruptionBudget, approve a CSR. Skipped (with a message) when kubectl is not installed.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::path::{Path, PathBuf};
use std::process::Output;

use kube_sim::{Config, KubeSim};
use serde_json::Value;
use tokio::process::Command;

struct Kubectl {
    kubeconfig: PathBuf,
    cache: PathBuf,
}

impl Kubectl {
    async fn run(&self, args: &[&str]) -> Output {
        Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(&self.cache)
            .args(args)
            .env_remove("KUBECONFIG")
            .output()
            .await
            .expect("kubectl runs")
    }

    /// Runs kubectl and returns stdout; panics with stderr on failure.
    async fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args).await;
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed:\nstdout: {stdout}\nstderr: {stderr}"
        );
        stdout
    }
}

fn kubectl_present() -> bool {
    std::process::Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn repo_path(relative: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(relative)
        .display()
        .to_string()
}

/// The header line's column names.
fn header(table: &str) -> Vec<String> {
    table
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// The row whose first column is `name`, split on whitespace.
fn row(table: &str, name: &str) -> Vec<String> {
    table
        .lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .find(|cells| cells.first().is_some_and(|c| c == name))
        .unwrap_or_else(|| panic!("no row {name} in:\n{table}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_drives_machines_nodes_pods_and_csrs() {
    if !kubectl_present() {
        eprintln!("SKIPPED: kubectl is not installed; this test needs the real kubectl on PATH");
        return;
    }
    let sim = KubeSim::start(Config::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig).unwrap();
    let k = Kubectl {
        kubeconfig,
        cache: dir.path().join("cache"),
    };
    let ns = "openshift-machine-api";

    // CRDs and objects
    let applied = k
        .ok(&["apply", "-f", &repo_path("../../manifests/crds")])
        .await;
    assert!(
        applied.contains("machinesets.machine.openshift.io created"),
        "{applied}"
    );
    k.ok(&[
        "wait",
        "--for=condition=Established",
        "crd/machines.machine.openshift.io",
        "crd/machinesets.machine.openshift.io",
        "--timeout=20s",
    ])
    .await;
    k.ok(&[
        "apply",
        "-f",
        &repo_path("tests/fixtures/kubectl-objects.yaml"),
    ])
    .await;
    let again = k
        .ok(&[
            "apply",
            "-f",
            &repo_path("tests/fixtures/kubectl-objects.yaml"),
        ])
        .await;
    assert!(
        again.contains("machineset.machine.openshift.io/win unchanged"),
        "{again}"
    );
    let ms = sim
        .get("machine.openshift.io", "machinesets", ns, "win")
        .unwrap();
    assert_eq!(
        ms["spec"]["template"]["spec"]["providerSpec"]["value"]["somethingUpstreamAddsLater"]["kept"],
        true
    );

    // Fields the CRD schema does not declare: refused under kubectl's default strict validation, pruned otherwise
    let typo = dir.path().join("typo.yaml");
    std::fs::write(
        &typo,
        "apiVersion: machine.openshift.io/v1beta1\nkind: Machine\nmetadata:\n  name: typo\n  namespace: openshift-machine-api\nspec:\n  providerID: x\n  provderSpec: {}\n",
    )
    .unwrap();
    let refused = k.run(&["apply", "-f", typo.to_str().unwrap()]).await;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && stderr.contains("unknown field \"spec.provderSpec\""),
        "{stderr}"
    );
    k.ok(&["apply", "--validate=false", "-f", typo.to_str().unwrap()])
        .await;
    let pruned = sim
        .get("machine.openshift.io", "machines", ns, "typo")
        .unwrap();
    assert!(
        pruned["spec"].get("provderSpec").is_none() && pruned["spec"]["providerID"] == "x",
        "{pruned}"
    );
    k.ok(&["delete", "machine", "typo", "-n", ns]).await;

    // Printer columns
    let machinesets = k.ok(&["get", "machinesets", "-n", ns]).await;
    assert_eq!(
        header(&machinesets),
        ["NAME", "DESIRED", "CURRENT", "READY", "AVAILABLE", "AGE"]
    );
    let machines = k.ok(&["get", "machines", "-n", ns, "-o", "wide"]).await;
    assert_eq!(
        header(&machines),
        [
            "NAME",
            "PHASE",
            "TYPE",
            "REGION",
            "ZONE",
            "AGE",
            "NODE",
            "PROVIDERID",
            "STATE"
        ]
    );
    let cells = row(&machines, "win-abc");
    assert_eq!(
        &cells[1..4],
        ["m4x16", "pc-1", "pe-1"],
        "phase is empty, so the row starts with the type: {machines}"
    );

    // Scale through the scale subresource
    let scaled = k
        .ok(&["scale", "machineset", "win", "-n", ns, "--replicas=3"])
        .await;
    assert!(scaled.contains("scaled"), "{scaled}");
    assert_eq!(
        sim.get("machine.openshift.io", "machinesets", ns, "win")
            .unwrap()["spec"]["replicas"],
        3
    );

    // Status patch and wait for a condition
    let status = r#"{"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}"#;
    k.ok(&[
        "patch",
        "machine",
        "win-abc",
        "-n",
        ns,
        "--subresource=status",
        "--type=merge",
        "-p",
        status,
    ])
    .await;
    k.ok(&[
        "wait",
        "--for=condition=Ready",
        "machine/win-abc",
        "-n",
        ns,
        "--timeout=20s",
    ])
    .await;
    assert_eq!(
        row(&k.ok(&["get", "machines", "-n", ns]).await, "win-abc")[1],
        "Running"
    );
    // A plain patch of status is ignored: the CRD declares the status subresource
    k.ok(&[
        "patch",
        "machine",
        "win-abc",
        "-n",
        ns,
        "--type=merge",
        "-p",
        r#"{"status":{"phase":"Failed"}}"#,
    ])
    .await;
    assert_eq!(
        sim.get("machine.openshift.io", "machines", ns, "win-abc")
            .unwrap()["status"]["phase"],
        "Running"
    );

    // An event published through events.k8s.io (as the controller does) shows in get events and describe
    let machine = sim
        .get("machine.openshift.io", "machines", ns, "win-abc")
        .unwrap();
    let reference: k8s_openapi::api::core::v1::ObjectReference = serde_json::from_value(serde_json::json!({
        "apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine", "name": "win-abc", "namespace": ns,
        "uid": machine["metadata"]["uid"],
    }))
    .unwrap();
    let recorder = kube::runtime::events::Recorder::new(
        sim.client().unwrap(),
        "nutanix-machine-controller".into(),
    );
    let event = kube::runtime::events::Event {
        type_: kube::runtime::events::EventType::Normal,
        reason: "Created".into(),
        note: Some("VM created on Prism".into()),
        action: "Create".into(),
        secondary: None,
    };
    recorder.publish(&event, &reference).await.unwrap();
    let events = k.ok(&["get", "events", "-n", ns]).await;
    assert_eq!(
        header(&events),
        ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    );
    assert!(
        events.contains("machine/win-abc") && events.contains("VM created on Prism"),
        "{events}"
    );
    let described = k.ok(&["describe", "machine", "win-abc", "-n", ns]).await;
    assert!(described.contains("VM created on Prism"), "{described}");

    // Label, annotate
    k.ok(&["label", "machine", "win-abc", "-n", ns, "env=test"])
        .await;
    k.ok(&[
        "annotate",
        "machine",
        "win-abc",
        "-n",
        ns,
        "machine.openshift.io/instance-state=running",
    ])
    .await;
    let machine = sim
        .get("machine.openshift.io", "machines", ns, "win-abc")
        .unwrap();
    assert_eq!(machine["metadata"]["labels"]["env"], "test");
    assert_eq!(
        machine["metadata"]["annotations"]["machine.openshift.io/instance-state"],
        "running"
    );

    // Delete held by a finalizer
    k.ok(&["delete", "machine", "win-abc", "-n", ns, "--wait=false"])
        .await;
    let machine = sim
        .get("machine.openshift.io", "machines", ns, "win-abc")
        .unwrap();
    assert!(machine["metadata"]["deletionTimestamp"].is_string());
    k.ok(&[
        "patch",
        "machine",
        "win-abc",
        "-n",
        ns,
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
    ])
    .await;
    k.ok(&[
        "wait",
        "--for=delete",
        "machine/win-abc",
        "-n",
        ns,
        "--timeout=20s",
    ])
    .await;
    assert_eq!(
        sim.get("machine.openshift.io", "machines", ns, "win-abc")
            .unwrap_err()
            .code,
        404
    );

    // Drain a node whose only pod is guarded by a PodDisruptionBudget
    let ready = r#"{"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True"}]}}"#;
    k.ok(&[
        "patch",
        "pod",
        "web-0",
        "--subresource=status",
        "--type=merge",
        "-p",
        ready,
    ])
    .await;
    let pdb = k.ok(&["get", "pdb", "web"]).await;
    assert_eq!(
        header(&pdb),
        [
            "NAME",
            "MIN",
            "AVAILABLE",
            "MAX",
            "UNAVAILABLE",
            "ALLOWED",
            "DISRUPTIONS",
            "AGE"
        ]
    );
    assert_eq!(
        k.ok(&[
            "get",
            "pdb",
            "web",
            "-o",
            "jsonpath={.status.disruptionsAllowed}"
        ])
        .await,
        "0"
    );
    // The first eviction is tried at once and refused (429); the timeout leaves room for a slow start.
    let blocked = k
        .run(&[
            "drain",
            "worker-0",
            "--ignore-daemonsets",
            "--force",
            "--timeout=10s",
        ])
        .await;
    assert!(!blocked.status.success());
    let stderr = String::from_utf8_lossy(&blocked.stderr);
    assert!(stderr.contains("disruption budget"), "{stderr}");
    assert!(sim.get("", "pods", "default", "web-0").is_ok());
    let nodes = k.ok(&["get", "nodes"]).await;
    assert_eq!(row(&nodes, "worker-0")[1], "Ready,SchedulingDisabled");
    k.ok(&[
        "patch",
        "pdb",
        "web",
        "--type=merge",
        "-p",
        r#"{"spec":{"minAvailable":0}}"#,
    ])
    .await;
    let drained = k
        .ok(&[
            "drain",
            "worker-0",
            "--ignore-daemonsets",
            "--force",
            "--timeout=30s",
        ])
        .await;
    assert!(drained.contains("evicted"), "{drained}");
    assert_eq!(
        sim.get("", "pods", "default", "web-0").unwrap_err().code,
        404
    );
    k.ok(&["uncordon", "worker-0"]).await;
    assert_eq!(row(&k.ok(&["get", "nodes"]).await, "worker-0")[1], "Ready");

    // CSR approval
    k.ok(&["certificate", "approve", "csr-worker-0"]).await;
    let csr = sim
        .get(
            "certificates.k8s.io",
            "certificatesigningrequests",
            "",
            "csr-worker-0",
        )
        .unwrap();
    let conditions = csr["status"]["conditions"].as_array().unwrap();
    assert_eq!(conditions[0]["type"], "Approved");
    assert_eq!(
        row(&k.ok(&["get", "csr"]).await, "csr-worker-0")
            .last()
            .unwrap(),
        "Approved"
    );

    // describe works on a custom resource and a node
    let described = k.ok(&["describe", "machineset", "win", "-n", ns]).await;
    assert!(
        described
            .lines()
            .any(|l| l.trim_start().starts_with("Replicas:") && l.trim_end().ends_with(" 3")),
        "{described}"
    );
    k.ok(&["describe", "node", "worker-0"]).await;

    // A cluster-scoped custom resource (test-only Infrastructure CRD)
    k.ok(&[
        "apply",
        "-f",
        &repo_path("tests/fixtures/infrastructure-crd.yaml"),
    ])
    .await;
    k.ok(&[
        "wait",
        "--for=condition=Established",
        "crd/infrastructures.config.openshift.io",
        "--timeout=20s",
    ])
    .await;
    k.ok(&[
        "apply",
        "-f",
        &repo_path("tests/fixtures/infrastructure-cluster.yaml"),
    ])
    .await;
    let address = k
        .ok(&[
            "get",
            "infrastructure",
            "cluster",
            "-o",
            "jsonpath={.spec.platformSpec.nutanix.prismCentral.address}",
        ])
        .await;
    assert_eq!(address, "prism-central.example");
    let infra = sim
        .get("config.openshift.io", "infrastructures", "", "cluster")
        .unwrap();
    assert!(
        infra.get("status").is_none(),
        "status is dropped on create when the CRD has a status subresource"
    );

    // The request log saw kubectl's calls, named as RBAC would name them
    let log = sim.requests();
    // Everything but the event the test published through kube-rs came from kubectl
    assert!(
        log.iter()
            .filter(|r| r.api_group != "events.k8s.io")
            .all(|r| r.user_agent.starts_with("kubectl"))
    );
    let saw = |verb: &str, resource: &str, sub: &str, status: u16| {
        log.iter().any(|r| {
            r.verb == verb && r.resource == resource && r.subresource == sub && r.status == status
        })
    };
    assert!(saw("create", "pods", "eviction", 429));
    assert!(saw("create", "pods", "eviction", 201));
    assert!(saw("patch", "machinesets", "scale", 200));
    assert!(saw("patch", "machines", "status", 200));
    assert!(saw("update", "certificatesigningrequests", "approval", 200));
    assert!(saw("watch", "machines", "", 200));

    let admin: Value =
        serde_json::from_str(&k.ok(&["get", "--raw", "/kube-sim/requests"]).await).unwrap();
    assert!(admin.as_array().unwrap().len() >= log.len());
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_over_https_trusts_the_kubeconfig_ca() {
    if !kubectl_present() {
        eprintln!("SKIPPED: kubectl is not installed; this test needs the real kubectl on PATH");
        return;
    }
    let sim = KubeSim::start(Config {
        tls: true,
        ..Config::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig).unwrap();
    let k = Kubectl {
        kubeconfig,
        cache: dir.path().join("cache"),
    };
    let namespaces = k.ok(&["get", "namespaces"]).await;
    assert_eq!(row(&namespaces, "kube-system")[1], "Active");
    k.ok(&["apply", "-f", &repo_path("../../manifests/crds")])
        .await;
    assert!(
        sim.requests()
            .iter()
            .any(|r| r.resource == "customresourcedefinitions" && r.verb == "create")
    );
    sim.shutdown().await;
}

/// `kubectl apply -f` of a `kind: List` validates its items on the client against `/openapi/v2`
/// (kubernetes/kubectl `pkg/validation/schema.go`), as against a real server: a List of good items
/// is applied (a Secret's `stringData` stored folded into `data`), and a List with an item the CRD
/// schema refuses is refused whole, before any item is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_a_list_validated_against_openapi_v2() {
    if !kubectl_present() {
        eprintln!("SKIPPED: kubectl is not installed; this test needs the real kubectl on PATH");
        return;
    }
    let sim = KubeSim::start(Config {
        namespaces: vec!["openshift-machine-api".to_owned()],
        ..Config::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig).unwrap();
    let k = Kubectl {
        kubeconfig,
        cache: dir.path().join("cache"),
    };
    k.ok(&["apply", "-f", &repo_path("../../manifests/crds")])
        .await;
    let list = |extra_spec_field: &str| {
        format!(
            r#"apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Secret
  metadata: {{name: nutanix-credentials, namespace: openshift-machine-api}}
  stringData: {{credentials: '[{{"type": "basic_auth"}}]'}}
- apiVersion: machine.openshift.io/v1beta1
  kind: MachineSet
  metadata: {{name: listed, namespace: openshift-machine-api}}
  spec:
    {extra_spec_field}replicas: 0
    selector: {{matchLabels: {{set: listed}}}}
    template:
      metadata: {{labels: {{set: listed}}}}
      spec:
        providerSpec:
          value: {{anyField: kept}}
"#
        )
    };
    let bad = dir.path().join("bad-list.yaml");
    std::fs::write(&bad, list("bogusField: 1\n    ")).unwrap();
    let out = k.run(&["apply", "-f", bad.to_str().unwrap()]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains(
            r#"unknown field "bogusField" in io.openshift.machine.v1beta1.MachineSet.spec"#
        ),
        "{stderr}"
    );
    assert!(
        sim.get(
            "",
            "secrets",
            "openshift-machine-api",
            "nutanix-credentials"
        )
        .is_err(),
        "nothing of the refused List was sent"
    );

    let good = dir.path().join("list.yaml");
    std::fs::write(&good, list("")).unwrap();
    let applied = k.ok(&["apply", "-f", good.to_str().unwrap()]).await;
    assert!(
        applied.contains("machineset.machine.openshift.io/listed created"),
        "{applied}"
    );
    let secret = sim
        .get(
            "",
            "secrets",
            "openshift-machine-api",
            "nutanix-credentials",
        )
        .unwrap();
    assert!(secret.get("stringData").is_none(), "{secret}");
    assert_eq!(
        secret["data"]["credentials"],
        "W3sidHlwZSI6ICJiYXNpY19hdXRoIn1d"
    );
    sim.shutdown().await;
}
