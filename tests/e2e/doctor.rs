//! `doctor` against the sandbox: nothing on the healthy cluster, then each fault planted alone
//! (and taken away again) is found by its own check, with the object it concerns.

use std::collections::BTreeSet;
use std::process::Command;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch};
use kube::api::{PatchParams, PostParams};
use serde_json::{Value, json};

use sandbox::cluster_objects::{WMCO_NAMESPACE, wmco_csv_name};
use sandbox::manifests::{CREDENTIALS_SECRET, WINDOWS_IMAGE_SET, WINDOWS_USER_DATA_SECRET};
use sandbox::world::World;

use crate::support::{options, start};

/// Runs `doctor --output json` as an administrator would, against the world.
fn doctor(world: &World) -> (Option<i32>, Value) {
    let output = Command::new(env!("CARGO_BIN_EXE_e2e-controller"))
        .arg("doctor")
        .arg("--kubeconfig")
        .arg(world.kubeconfig())
        .args(["--namespace", world.namespace(), "--output", "json"])
        .arg("--prism-ca-file")
        .arg(world.work_dir().join("prism-ca.pem"))
        .output()
        .unwrap();
    let report = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "doctor's output is not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (output.status.code(), report)
}

/// (check, severity, object) of every finding.
fn findings(report: &Value) -> BTreeSet<(String, String, String)> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let text = |key: &str| f[key].as_str().unwrap().to_owned();
            (text("check"), text("severity"), text("object"))
        })
        .collect()
}

fn finding(check: &str, severity: &str, object: &str) -> (String, String, String) {
    (check.to_owned(), severity.to_owned(), object.to_owned())
}

fn dynamic(
    world: &World,
    gvk: (&str, &str, &str, &str),
    namespace: Option<&str>,
) -> Api<DynamicObject> {
    let (group, version, kind, plural) = gvk;
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    match namespace {
        Some(namespace) => Api::namespaced_with(world.client().clone(), namespace, &resource),
        None => Api::all_with(world.client().clone(), &resource),
    }
}

async fn merge(api: &Api<DynamicObject>, name: &str, patch: Value) {
    api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_finds_each_planted_fault_and_nothing_on_a_healthy_sandbox() {
    let mut options = options("doctor");
    // The controller's own doctor too, often enough to see it here.
    options
        .controller_args
        .push("--doctor-interval=1s".to_owned());
    let world = start(options).await;
    let namespace = world.namespace().to_owned();
    let check = |expected: &[(String, String, String)], code: i32| {
        let (status, report) = tokio::task::block_in_place(|| doctor(&world));
        let found = findings(&report);
        let expected: BTreeSet<_> = expected.iter().cloned().collect();
        assert_eq!(found, expected, "{report:#}");
        assert_eq!(status, Some(code), "{report:#}");
        for f in report["findings"].as_array().unwrap() {
            assert!(!f["fix"].as_str().unwrap().is_empty(), "{f}");
        }
        report
    };

    let healthy = check(&[], 0);
    assert_eq!(healthy["skipped"], json!([]), "{healthy:#}");
    assert_eq!(healthy["passed"].as_array().unwrap().len(), 9);

    // Prism Central refuses the credentials.
    let secrets: Api<Secret> = Api::namespaced(world.client().clone(), &namespace);
    let credentials = secrets.get(CREDENTIALS_SECRET).await.unwrap();
    let wrong = json!([{"type": "basic_auth", "data": {"prismCentral":
        {"username": "admin", "password": "not-the-password"}}}]);
    secrets
        .patch(
            CREDENTIALS_SECRET,
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"credentials": wrong.to_string()}})),
        )
        .await
        .unwrap();
    let report = check(&[finding("prism-central", "error", "Prism Central")], 2);
    assert!(
        !report.to_string().contains("not-the-password"),
        "doctor never quotes a credential"
    );
    secrets
        .replace(CREDENTIALS_SECRET, &PostParams::default(), &{
            let mut restored = credentials.clone();
            restored.metadata.resource_version = None;
            restored
        })
        .await
        .unwrap();
    check(&[], 0);

    // No hybrid overlay; then a VXLAN port set on Nutanix.
    let network = dynamic(
        &world,
        ("operator.openshift.io", "v1", "Network", "networks"),
        None,
    );
    let original = network.get("cluster").await.unwrap();
    let hybrid =
        original.data["spec"]["defaultNetwork"]["ovnKubernetesConfig"]["hybridOverlayConfig"]
            .clone();
    let set_hybrid = |value: Value| json!({"spec": {"defaultNetwork": {"ovnKubernetesConfig": {"hybridOverlayConfig": value}}}});
    merge(&network, "cluster", set_hybrid(Value::Null)).await;
    let object = "Network.operator.openshift.io/cluster";
    check(&[finding("hybrid-overlay", "error", object)], 2);
    let mut with_port = hybrid.clone();
    with_port["hybridOverlayVXLANPort"] = json!(9898);
    merge(&network, "cluster", set_hybrid(with_port)).await;
    check(&[finding("vxlan-port", "warning", object)], 0);
    merge(&network, "cluster", set_hybrid(Value::Null)).await;
    merge(&network, "cluster", set_hybrid(hybrid)).await;
    check(&[], 0);

    // WMCO built for another OpenShift.
    let csvs = dynamic(
        &world,
        (
            "operators.coreos.com",
            "v1alpha1",
            "ClusterServiceVersion",
            "clusterserviceversions",
        ),
        Some(WMCO_NAMESPACE),
    );
    let csv = wmco_csv_name();
    merge(&csvs, &csv, json!({"spec": {"version": "10.19.0"}})).await;
    check(
        &[finding(
            "wmco",
            "error",
            &format!("ClusterServiceVersion/{csv}"),
        )],
        2,
    );
    merge(
        &csvs,
        &csv,
        json!({"spec": {"version": sandbox::cluster_objects::WMCO_VERSION}}),
    )
    .await;

    // WMCO's Secrets: cloud-private-key, then windows-user-data (which the Windows MachineSets
    // name, so they cannot be planned either).
    let wmco_secrets: Api<Secret> = Api::namespaced(world.client().clone(), WMCO_NAMESPACE);
    let key = wmco_secrets.get("cloud-private-key").await.unwrap();
    wmco_secrets
        .delete("cloud-private-key", &DeleteParams::default())
        .await
        .unwrap();
    check(
        &[finding(
            "cloud-private-key",
            "error",
            &format!("Secret/cloud-private-key in {WMCO_NAMESPACE}"),
        )],
        2,
    );
    wmco_secrets
        .create(&PostParams::default(), &fresh(key))
        .await
        .unwrap();
    let user_data = secrets.get(WINDOWS_USER_DATA_SECRET).await.unwrap();
    secrets
        .delete(WINDOWS_USER_DATA_SECRET, &DeleteParams::default())
        .await
        .unwrap();
    let report = check(
        &[
            finding(
                "windows-user-data",
                "error",
                &format!("Secret/{WINDOWS_USER_DATA_SECRET}"),
            ),
            finding(
                "machineset",
                "error",
                &format!("MachineSet/{WINDOWS_IMAGE_SET}"),
            ),
            finding(
                "machineset",
                "error",
                &format!("MachineSet/{}", sandbox::manifests::WINDOWS_TEMPLATE_SET),
            ),
        ],
        2,
    );
    assert!(report.to_string().contains("does not exist"), "{report:#}");
    secrets
        .create(&PostParams::default(), &fresh(user_data))
        .await
        .unwrap();
    check(&[], 0);

    // A MachineSet naming an image Prism does not have.
    let sets = dynamic(
        &world,
        (
            "machine.openshift.io",
            "v1beta1",
            "MachineSet",
            "machinesets",
        ),
        Some(&namespace),
    );
    let mut bad = serde_json::to_value(sets.get(WINDOWS_IMAGE_SET).await.unwrap()).unwrap();
    bad["metadata"] = json!({"name": "doctor-bad", "namespace": namespace});
    bad["spec"]["replicas"] = json!(0);
    bad["spec"]["template"]["spec"]["providerSpec"]["value"]["image"] =
        json!({"type": "name", "name": "no-such-image"});
    sets.create(
        &PostParams::default(),
        &serde_json::from_value(bad).unwrap(),
    )
    .await
    .unwrap();
    let report = check(
        &[finding("machineset", "error", "MachineSet/doctor-bad")],
        2,
    );
    assert!(report.to_string().contains("no-such-image"), "{report:#}");
    sets.delete("doctor-bad", &DeleteParams::default())
        .await
        .unwrap();

    // A static-address pool annotation the controller would refuse.
    let mut pooled = serde_json::to_value(sets.get(WINDOWS_IMAGE_SET).await.unwrap()).unwrap();
    pooled["metadata"] = json!({"name": "doctor-pool", "namespace": namespace});
    pooled["spec"]["replicas"] = json!(0);
    pooled["spec"]["template"]["metadata"]["annotations"]["nutanix.machine.openshift.io/ip-pool"] =
        json!("workers");
    sets.create(
        &PostParams::default(),
        &serde_json::from_value(pooled).unwrap(),
    )
    .await
    .unwrap();
    let report = check(
        &[finding("machineset", "error", "MachineSet/doctor-pool")],
        2,
    );
    assert!(report.to_string().contains("ip-pool"), "{report:#}");
    sets.delete("doctor-pool", &DeleteParams::default())
        .await
        .unwrap();

    // A MachineHealthCheck over the Windows Machines with the default 10 minutes.
    let checks = dynamic(
        &world,
        (
            "machine.openshift.io",
            "v1beta1",
            "MachineHealthCheck",
            "machinehealthchecks",
        ),
        Some(&namespace),
    );
    let mhc: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "machine.openshift.io/v1beta1", "kind": "MachineHealthCheck",
        "metadata": {"name": "workers", "namespace": namespace},
        "spec": {"selector": {"matchLabels": {"machine.openshift.io/os-id": "Windows"}},
                 "unhealthyConditions": [{"type": "Ready", "status": "False", "timeout": "300s"}]},
    }))
    .unwrap();
    checks.create(&PostParams::default(), &mhc).await.unwrap();
    let report = check(
        &[finding(
            "health-check",
            "warning",
            "MachineHealthCheck/workers",
        )],
        0,
    );
    assert!(
        report.to_string().contains("10m (the default)"),
        "{report:#}"
    );
    checks
        .delete("workers", &DeleteParams::default())
        .await
        .unwrap();
    check(&[], 0);

    // Last, since a pool cannot be given back: the subnet's IP pool exhausted.
    let taken = world.mock().admin().take_free_pool_addresses("vm-network");
    assert!(taken.is_some_and(|n| n > 0), "{taken:?}");
    check(&[finding("subnet-pool", "error", "subnet/vm-network")], 2);

    // The controller's doctor, with its ServiceAccount's reads, finds the same and logs it once.
    let deadline = std::time::Instant::now() + crate::support::TIMEOUT;
    loop {
        let log = world.controller_log();
        let found = log
            .lines()
            .filter(|l| l.contains("doctor:") && l.contains("subnet-pool"))
            .count();
        if found == 1 && log.contains("doctor ran") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the controller's doctor logged the exhausted pool {found} times"
        );
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
}

/// `object` without what the API server set, to create it again.
fn fresh(mut object: Secret) -> Secret {
    object.metadata.resource_version = None;
    object.metadata.uid = None;
    object.metadata.creation_timestamp = None;
    object.metadata.managed_fields = None;
    object
}
