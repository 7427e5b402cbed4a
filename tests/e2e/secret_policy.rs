//! The install manifests on the real API server (`sandbox::real_cluster`): the admission policy
//! of `manifests/rbac/admission/` lets the controller's ServiceAccount create the Administrator
//! password Secret the controller writes and refuses every other Secret it creates, without
//! touching anyone else; and `kubectl apply -k manifests/` installs everything, the
//! PodDisruptionBudget and a Deployment whose pods get their priority class, and the console
//! dashboard of `manifests/monitoring/` applies.
//!
//! Needs `REAL_CLUSTER_DIR` (what `hack/real-cluster/build.sh` prints): skipped with a message
//! without it, and failed without it when `REAL_CLUSTER_REQUIRED` is set (CI sets both).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, ResourceExt};
use nutanix_machine_controller::api::Machine;
use nutanix_machine_controller::controller::prepare::{
    generated_password_object, random_admin_password,
};
use sandbox::manifests;
use sandbox::real_cluster::{self, ControlPlane};
use serde_json::{Value, json};

use crate::real_cluster::kubectl;
use crate::support::{TIMEOUT, real_control_plane};

const NAMESPACE: &str = sandbox::MACHINE_API_NAMESPACE;
const SERVICE_ACCOUNT: &str = "nutanix-machine-controller";
const POLICY: &str = "nutanix-machine-controller-secrets";

fn repository(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

/// The real control plane in a temporary directory (kept under `E2E_WORK_DIR/<test>` when that
/// is set), or `None` when it is not built. Nothing here talks to Prism Central: the
/// Infrastructure names a port nobody listens on.
async fn start_plane(test: &str) -> Option<(ControlPlane, Option<tempfile::TempDir>)> {
    let binaries = real_control_plane()?;
    let (dir, temp) = match std::env::var_os("E2E_WORK_DIR") {
        Some(dir) => (PathBuf::from(dir).join(test), None),
        None => {
            let temp = tempfile::tempdir().expect("a temporary directory");
            (temp.path().to_owned(), Some(temp))
        }
    };
    let plane = ControlPlane::start(
        binaries,
        &dir.join("control-plane"),
        NAMESPACE,
        manifests::INFRASTRUCTURE_ID,
        9,
    )
    .await
    .expect("the real control plane starts");
    Some((plane, temp))
}

/// The `message` of each validation of the shipped policy, in order.
fn policy_messages() -> Vec<String> {
    let text =
        std::fs::read_to_string(repository("manifests/rbac/admission/secret-policy.yaml")).unwrap();
    let policy = kube_sim::load::documents(&text)
        .unwrap()
        .into_iter()
        .find(|d| d["kind"] == "ValidatingAdmissionPolicy")
        .expect("the policy");
    policy["spec"]["validations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["message"].as_str().unwrap().to_owned())
        .collect()
}

/// The shipped policy's message that contains `words`.
fn message_with(words: &str) -> String {
    let messages = policy_messages();
    let found: Vec<&String> = messages.iter().filter(|m| m.contains(words)).collect();
    let [message] = found.as_slice() else {
        panic!("not one message of the policy contains {words:?}: {messages:#?}")
    };
    (*message).clone()
}

/// A Secret as JSON: `name`, `type`, `data` keys (each with the value `x`), owners.
fn secret(name: &str, type_: &str, keys: &[&str], owners: Value) -> Secret {
    let data: serde_json::Map<String, Value> = keys
        .iter()
        .map(|k| ((*k).to_owned(), json!("eA==")))
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": NAMESPACE, "ownerReferences": owners},
        "type": type_,
        "data": data,
    }))
    .unwrap()
}

/// Creates `secret` as `client`; the refusal's (code, reason, message), or `None` if created.
async fn refusal(client: &Client, secret: &Secret, dry_run: bool) -> Option<(u16, String, String)> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    let params = PostParams {
        dry_run,
        ..PostParams::default()
    };
    match secrets.create(&params, secret).await {
        Ok(_) => None,
        Err(kube::Error::Api(status)) => Some((status.code, status.reason, status.message)),
        Err(other) => panic!("create Secret {}: {other}", secret.name_any()),
    }
}

/// A Machine of the Windows template MachineSet (Sysprep without an adminPasswordSecret: the
/// controller would generate its password), created by the administrator.
async fn sysprep_machine(admin: &Client, name: &str) -> Machine {
    let set = manifests::example("MachineSet", manifests::WINDOWS_TEMPLATE_SET).unwrap();
    let mut machine = json!({
        "apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
        "metadata": set["spec"]["template"]["metadata"].clone(),
        "spec": set["spec"]["template"]["spec"].clone(),
    });
    machine["metadata"]["name"] = json!(name);
    machine["metadata"]["namespace"] = json!(NAMESPACE);
    let created = real_cluster::create(admin, machine)
        .await
        .expect("the Machine is created");
    serde_json::from_value(created).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controllers_service_account_creates_only_its_own_secrets_on_the_real_api_server() {
    let Some((plane, _temp)) = start_plane("secret_policy").await else {
        return;
    };
    let admin = plane.admin_client().await.unwrap();
    // What the end-to-end tests and the sandbox apply: the controller's identity, with the policy.
    plane
        .apply_kustomization(&repository("manifests/rbac"))
        .await
        .expect("manifests/rbac applies");
    let token = plane
        .service_account_token(NAMESPACE, SERVICE_ACCOUNT)
        .await
        .unwrap();
    let controller = plane.client_as(&json!({"token": token})).await.unwrap();

    // Every expression type-checks against the Secret's schema without a warning
    // (kube-controller-manager's validatingadmissionpolicy-status-controller writes
    // status.typeChecking).
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(admin.clone());
    let deadline = Instant::now() + TIMEOUT;
    let type_checking = loop {
        let policy = policies.get(POLICY).await.unwrap();
        let status = policy.status.unwrap_or_default();
        if status.observed_generation == policy.metadata.generation
            && let Some(checking) = status.type_checking
        {
            break checking;
        }
        assert!(
            Instant::now() < deadline,
            "the policy is never type-checked"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(
        type_checking.expression_warnings.unwrap_or_default(),
        Vec::new()
    );

    let machine = sysprep_machine(&admin, "windows-0").await;
    let uid = machine.uid().unwrap();
    let owned_by = |name: &str| {
        json!([{"apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
                "name": name, "uid": uid}])
    };

    // The admission plugin reads policies through an informer: wait (dry runs, nothing stored)
    // until a Secret the policy refuses is refused.
    let credentials = secret(
        "nutanix-credentials",
        "Opaque",
        &["credentials"],
        json!(null),
    );
    let deadline = Instant::now() + TIMEOUT;
    while refusal(&controller, &credentials, true).await.is_none() {
        assert!(Instant::now() < deadline, "the policy is never enforced");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Every Secret other than the generated password, and why: the first rule it breaks.
    let token_secret = {
        let mut token = secret(
            "windows-0-admin-password",
            "kubernetes.io/service-account-token",
            &[],
            owned_by("windows-0"),
        );
        token.metadata.annotations = Some(
            [(
                "kubernetes.io/service-account.name".to_owned(),
                "machine-api-controllers".to_owned(),
            )]
            .into(),
        );
        token
    };
    let refused = [
        (
            "a token for another ServiceAccount, even under the password's name",
            token_secret.clone(),
            message_with("kubernetes.io/service-account-token"),
        ),
        (
            "another Opaque Secret",
            credentials.clone(),
            message_with("named <machine>-admin-password"),
        ),
        (
            "the password's name, another type",
            secret(
                "windows-0-admin-password",
                "example.com/other",
                &["password"],
                owned_by("windows-0"),
            ),
            message_with("only Opaque Secrets"),
        ),
        (
            "the password's name, no owner",
            secret(
                "windows-0-admin-password",
                "Opaque",
                &["password"],
                json!(null),
            ),
            message_with("whose one owner is a Machine"),
        ),
        (
            "another Machine's password name",
            secret(
                "windows-1-admin-password",
                "Opaque",
                &["password"],
                owned_by("windows-0"),
            ),
            message_with("of the Machine that owns it"),
        ),
        (
            "a key besides the password",
            secret(
                "windows-0-admin-password",
                "Opaque",
                &["password", "token"],
                owned_by("windows-0"),
            ),
            message_with("the one key password"),
        ),
    ];
    for (what, object, message) in &refused {
        let (code, reason, text) = refusal(&controller, object, false)
            .await
            .unwrap_or_else(|| panic!("{what}: created"));
        assert_eq!(
            (code, reason.as_str()),
            (403, "Forbidden"),
            "{what}: {text}"
        );
        assert!(
            text.contains(&format!("ValidatingAdmissionPolicy '{POLICY}'"))
                && text.contains(message.as_str()),
            "{what}: refused for another reason: {text}"
        );
    }

    // The Secret the controller writes (its own code builds it) is created.
    let own = generated_password_object(&machine, &random_admin_password());
    assert_eq!(
        refusal(&controller, &own, false).await,
        None,
        "the generated password's Secret"
    );

    // The administrator is not bound by it: another Opaque Secret and a token Secret are created.
    let mut admin_token = token_secret;
    admin_token.metadata.name = Some("machine-api-controllers-token".to_owned());
    admin_token.metadata.owner_references = None;
    for object in [&credentials, &admin_token] {
        assert_eq!(
            refusal(&admin, object, false).await,
            None,
            "the administrator creates Secret {}",
            object.name_any()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_k_manifests_installs_on_the_real_api_server() {
    let Some((plane, _temp)) = start_plane("install_manifests").await else {
        return;
    };
    let admin = plane.admin_client().await.unwrap();
    // The ServiceMonitor's CRD (the Prometheus operator's), which manifests/ expects.
    let monitor_crd = std::fs::read_to_string(repository(
        "hack/crds/monitoring.coreos.com_servicemonitors.yaml",
    ))
    .unwrap();
    plane
        .add_crds(&admin, kube_sim::load::documents(&monitor_crd).unwrap())
        .await
        .unwrap();
    let manifests = repository("manifests");
    let manifests = manifests.to_str().unwrap();
    kubectl(&plane, &["apply", "-k", manifests]);
    // Again: nothing changes. kubectl says `configured` of the PodDisruptionBudget all the same:
    // its selector's patch strategy is `replace`, so every client-side apply patch carries it
    // (k8s.io/api policy/v1 types.go; apimachinery pkg/util/strategicpatch/patch.go,
    // handleMapDiff); the API server leaves the object as it was.
    let second = kubectl(&plane, &["apply", "-k", manifests]);
    for line in second.lines() {
        let expected = if line.starts_with("poddisruptionbudget.") {
            "configured"
        } else {
            "unchanged"
        };
        assert!(line.ends_with(&format!(" {expected}")), "{second}");
    }
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(admin.clone(), NAMESPACE);
    let budget = budgets
        .get("nutanix-machine-controller")
        .await
        .expect("the PodDisruptionBudget");
    assert_eq!(budget.metadata.generation, Some(1));
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(admin.clone());
    policies.get(POLICY).await.expect("the Secret policy");

    // The console dashboard of manifests/monitoring/ goes to openshift-config-managed (which
    // OpenShift has, and this cluster is given); the PrometheusRule beside it needs the
    // Prometheus operator's CRD, which promtool checks instead (provider/tests/monitoring.rs).
    kubectl(&plane, &["create", "namespace", "openshift-config-managed"]);
    let dashboard = repository("manifests/monitoring/dashboard.yaml");
    let dashboard = dashboard.to_str().unwrap();
    let name = "grafana-dashboard-nutanix-machine-controller";
    for outcome in ["created", "unchanged"] {
        let applied = kubectl(&plane, &["apply", "-f", dashboard]);
        assert_eq!(applied.trim(), format!("configmap/{name} {outcome}"));
    }
    let stored = Api::<ConfigMap>::namespaced(admin.clone(), "openshift-config-managed")
        .get(name)
        .await
        .expect("the dashboard ConfigMap");
    assert_eq!(
        stored
            .labels()
            .get("console.openshift.io/dashboard")
            .map(String::as_str),
        Some("true")
    );
    let model = stored.data.unwrap_or_default();
    let model: Value = serde_json::from_str(model.values().next().expect("a dashboard")).unwrap();
    assert!(
        model["rows"]
            .as_array()
            .is_some_and(|rows| !rows.is_empty())
    );

    // kube-controller-manager makes the Deployment's pods (nothing schedules them here): the
    // priority admission plugin resolved their class to its value.
    let class: PriorityClass = Api::all(admin.clone())
        .get("system-node-critical")
        .await
        .expect("the API server's own priority class");
    let pods: Api<Pod> = Api::namespaced(admin.clone(), NAMESPACE);
    let deadline = Instant::now() + TIMEOUT;
    let pods = loop {
        let list = pods
            .list(
                &ListParams::default().labels("app.kubernetes.io/name=nutanix-machine-controller"),
            )
            .await
            .unwrap();
        if list.items.len() == 2 {
            break list.items;
        }
        plane.check_running().unwrap();
        assert!(
            Instant::now() < deadline,
            "the Deployment's 2 pods are never created; logs in {}",
            plane.dir().display()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    for pod in pods {
        let spec = pod.spec.unwrap();
        assert_eq!(
            spec.priority_class_name.as_deref(),
            Some("system-node-critical")
        );
        assert_eq!(spec.priority, Some(class.value));
    }
}
