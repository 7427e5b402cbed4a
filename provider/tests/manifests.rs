//! The install manifests (`manifests/`): `kubectl kustomize` renders exactly the install set;
//! every built-in object survives a round trip through its typed k8s-openapi struct (a misspelt
//! or misplaced field would be dropped); the Deployment agrees with the binary's flags, its RBAC
//! and its Service, ServiceMonitor, NetworkPolicy and PodDisruptionBudget; the admission policy on
//! the ServiceAccount's Secrets agrees with the Secret the code creates and with the Role; and
//! `kubectl apply -k manifests/` applies cleanly to kube-sim, twice (client-side and server-side).
//! (The policy itself runs on the real API server: tests/e2e/secret_policy.rs.)
//!
//! The tests that run kubectl are skipped, with a message, when kubectl is not installed.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

#[path = "support/rbac.rs"]
mod rbac;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Output;

use clap::Parser;
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Secret, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube_sim::{KubeSim, RequestRecord};
use nutanix_machine_controller::api::Machine;
use nutanix_machine_controller::controller::prepare::{
    ADMIN_PASSWORD_KEY, generated_password_object, random_admin_password,
};
use nutanix_machine_controller::plan::vm::secret::GENERATED_PASSWORD_SUFFIX;
use nutanix_machine_controller::runtime::cli::Cli;
use serde_json::{Value, json};

const NS: &str = "openshift-machine-api";
const LEASE: &str = "cluster-api-provider-nutanix-leader";

fn repo(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(relative)
}

fn documents(yaml: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(yaml)
        .unwrap()
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

/// Every document of every YAML file under `dir` (not kustomization files), with its file.
fn documents_under(dir: &Path) -> Vec<(PathBuf, Value)> {
    let mut found = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "yaml")
                && path.file_name().is_some_and(|n| n != "kustomization.yaml")
            {
                let text = std::fs::read_to_string(&path).unwrap();
                found.extend(documents(&text).into_iter().map(|d| (path.clone(), d)));
            }
        }
    }
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}

fn id(object: &Value) -> (String, String, String) {
    let text = |pointer: &str| {
        object
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    (
        text("/kind"),
        text("/metadata/namespace"),
        text("/metadata/name"),
    )
}

fn kubectl_present() -> bool {
    std::process::Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `kubectl kustomize DIR`, parsed.
fn kustomize(dir: &Path) -> Vec<Value> {
    let out = std::process::Command::new("kubectl")
        .arg("kustomize")
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kubectl kustomize {} failed: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    documents(&String::from_utf8(out.stdout).unwrap())
}

fn the<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

/// The install set, (kind, namespace, name).
fn expected_install_set() -> BTreeSet<(String, String, String)> {
    [
        (
            "CustomResourceDefinition",
            "",
            "machines.machine.openshift.io",
        ),
        (
            "CustomResourceDefinition",
            "",
            "machinesets.machine.openshift.io",
        ),
        ("ServiceAccount", NS, "nutanix-machine-controller"),
        ("ClusterRole", "", "nutanix-machine-controller"),
        ("ClusterRoleBinding", "", "nutanix-machine-controller"),
        ("Role", NS, "nutanix-machine-controller"),
        ("RoleBinding", NS, "nutanix-machine-controller"),
        (
            "ValidatingAdmissionPolicy",
            "",
            "nutanix-machine-controller-secrets",
        ),
        (
            "ValidatingAdmissionPolicyBinding",
            "",
            "nutanix-machine-controller-secrets",
        ),
        ("Deployment", NS, "nutanix-machine-controller"),
        ("PodDisruptionBudget", NS, "nutanix-machine-controller"),
        ("Service", NS, "nutanix-machine-controller-metrics"),
        ("ServiceMonitor", NS, "nutanix-machine-controller"),
        ("NetworkPolicy", NS, "nutanix-machine-controller"),
    ]
    .into_iter()
    .map(|(k, n, m)| (k.to_owned(), n.to_owned(), m.to_owned()))
    .collect()
}

#[test]
fn kustomize_renders_exactly_the_install_set() {
    if !kubectl_present() {
        eprintln!("kubectl is not installed: skipped");
        return;
    }
    let rendered = kustomize(&repo("manifests"));
    let ids: BTreeSet<_> = rendered.iter().map(id).collect();
    assert_eq!(ids.len(), rendered.len(), "an object is rendered twice");
    assert_eq!(
        ids,
        expected_install_set(),
        "the examples are not installed, nothing is missing"
    );
    // What kustomize renders is what the files say (no transformer rewrites them), so the
    // files the end-to-end permission check reads are what gets installed.
    // (manifests/rbac/machine-api-operator/ is a separate overlay, for OpenShift.)
    let files: Vec<Value> = documents_under(&repo("manifests/rbac"))
        .into_iter()
        .chain(documents_under(&repo("manifests/deploy")))
        .filter(|(path, _)| !path.starts_with(repo("manifests/rbac/machine-api-operator")))
        .map(|(_, d)| d)
        .collect();
    assert_eq!(files.len(), ids.len() - 2, "every file object but the CRDs");
    for object in &files {
        let (kind, _, name) = id(object);
        let installed = rendered
            .iter()
            .find(|o| id(o) == id(object))
            .unwrap_or_else(|| panic!("{kind} {name} is in the files but not rendered"));
        assert_eq!(installed, object, "{kind} {name} is rendered as written");
    }
}

#[test]
fn the_machine_api_operator_overlay_grants_the_same_roles_to_its_service_account() {
    if !kubectl_present() {
        eprintln!("kubectl is not installed: skipped");
        return;
    }
    let rendered = kustomize(&repo("manifests/rbac/machine-api-operator"));
    let ids: BTreeSet<_> = rendered.iter().map(id).collect();
    let expected: BTreeSet<_> = [
        ("ClusterRole", "", "nutanix-machine-controller"),
        ("Role", NS, "nutanix-machine-controller"),
        (
            "ClusterRoleBinding",
            "",
            "nutanix-machine-controller-machine-api-controllers",
        ),
        (
            "RoleBinding",
            NS,
            "nutanix-machine-controller-machine-api-controllers",
        ),
    ]
    .into_iter()
    .map(|(k, n, m)| (k.to_owned(), n.to_owned(), m.to_owned()))
    .collect();
    assert_eq!(
        ids, expected,
        "roles and bindings only: no ServiceAccount, no Deployment"
    );

    let controller = rbac::Permissions::controller().unwrap();
    let operator = rbac::Permissions::of_service_account(
        &repo("manifests/rbac"),
        NS,
        "machine-api-controllers",
    )
    .unwrap();
    let rules = |p: &rbac::Permissions| {
        let mut rules: Vec<String> = p
            .grants
            .iter()
            .map(|g| format!("{:?}", (&g.namespace, &g.rule)))
            .collect();
        rules.sort();
        rules
    };
    assert!(!controller.grants.is_empty());
    assert_eq!(rules(&operator), rules(&controller));
}

/// `manifests/monitoring/`: the alerts and the console dashboard.
fn expected_monitoring_set() -> BTreeSet<(String, String, String)> {
    [
        ("PrometheusRule", NS, "nutanix-machine-controller"),
        (
            "ConfigMap",
            DASHBOARD_NAMESPACE,
            "grafana-dashboard-nutanix-machine-controller",
        ),
    ]
    .into_iter()
    .map(|(k, n, m)| (k.to_owned(), n.to_owned(), m.to_owned()))
    .collect()
}

/// Where the OpenShift console looks for dashboards (and the label it looks for).
const DASHBOARD_NAMESPACE: &str = "openshift-config-managed";
const DASHBOARD_LABEL: &str = "console.openshift.io/dashboard";

#[test]
fn kustomize_renders_the_alerts_and_the_dashboard_as_written() {
    if !kubectl_present() {
        eprintln!("kubectl is not installed: skipped");
        return;
    }
    let rendered = kustomize(&repo("manifests/monitoring"));
    let ids: BTreeSet<_> = rendered.iter().map(id).collect();
    assert_eq!(ids.len(), rendered.len(), "an object is rendered twice");
    assert_eq!(ids, expected_monitoring_set());
    for file in ["prometheus-rule.yaml", "dashboard.yaml"] {
        let text = std::fs::read_to_string(repo("manifests/monitoring").join(file)).unwrap();
        for object in documents(&text) {
            let installed = rendered.iter().find(|o| id(o) == id(&object)).unwrap();
            assert_eq!(installed, &object, "{file} is rendered as written");
        }
    }
}

/// The metric names the controller documents (docs/configuration.md, "Metrics"), with the
/// series names a histogram adds.
fn documented_metrics() -> BTreeSet<String> {
    let docs = std::fs::read_to_string(repo("docs/configuration.md")).unwrap();
    let mut names = BTreeSet::new();
    for line in docs.lines() {
        let Some(rest) = line.strip_prefix("| `") else {
            continue;
        };
        let Some((name, rest)) = rest.split_once('`') else {
            continue;
        };
        if !(name.starts_with("mapi_") || name.starts_with("nutanix_")) {
            continue;
        }
        names.insert(name.to_owned());
        if rest.starts_with(" | histogram") {
            for suffix in ["_bucket", "_sum", "_count"] {
                names.insert(format!("{name}{suffix}"));
            }
        }
    }
    names
}

/// Every identifier of `expr` that looks like a metric name (words joined by `_`), but PromQL's
/// own functions.
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    for c in expr.chars().chain(std::iter::once(' ')) {
        if c == '"' {
            quoted = !quoted;
            word.clear();
        } else if !quoted && (c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            word.push(c);
        } else {
            if word.contains('_') && !["histogram_quantile"].contains(&word.as_str()) {
                names.push(std::mem::take(&mut word));
            }
            word.clear();
        }
    }
    names
}

#[test]
fn the_dashboard_is_a_console_dashboard_reading_only_the_controllers_metrics() {
    let text = std::fs::read_to_string(repo("manifests/monitoring/dashboard.yaml")).unwrap();
    let [object] = documents(&text).try_into().unwrap();
    round_trips::<ConfigMap>(Path::new("manifests/monitoring/dashboard.yaml"), &object);
    let config_map: ConfigMap = serde_json::from_value(object).unwrap();
    assert_eq!(
        config_map.metadata.namespace.as_deref(),
        Some(DASHBOARD_NAMESPACE)
    );
    assert_eq!(
        config_map.metadata.labels.unwrap().get(DASHBOARD_LABEL),
        Some(&"true".to_owned())
    );
    let data = config_map.data.unwrap();
    let [(key, model)] = data.into_iter().collect::<Vec<_>>().try_into().unwrap();
    assert!(key.ends_with(".json"), "{key}");
    let model: Value = serde_json::from_str(&model).unwrap();
    // The console's Prometheus is the `$datasource` variable every panel names.
    assert_eq!(model["templating"]["list"][0]["type"], "datasource");
    assert_eq!(model["templating"]["list"][0]["name"], "datasource");
    assert!(model["title"].as_str().is_some_and(|t| !t.is_empty()));

    let documented = documented_metrics();
    assert!(documented.contains("nutanix_machines"), "{documented:?}");
    let mut ids = BTreeSet::new();
    let mut titles = Vec::new();
    for panel in model["rows"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|row| row["panels"].as_array().unwrap())
    {
        let title = panel["title"].as_str().unwrap();
        titles.push(title);
        assert!(
            ids.insert(panel["id"].as_u64().unwrap()),
            "{title}: id twice"
        );
        assert_eq!(panel["datasource"], "$datasource", "{title}");
        let targets = panel["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{title}: no query");
        for target in targets {
            let expr = target["expr"].as_str().unwrap();
            let names = metric_names(expr);
            assert!(!names.is_empty(), "{title}: {expr} reads no metric");
            for name in names {
                assert!(
                    documented.contains(&name),
                    "{title}: {expr} reads {name}, which the controller does not export"
                );
            }
        }
    }
    for wanted in [
        "Machines by phase",
        "Machines by MachineSet",
        "Prism calls per second by endpoint and answer code",
        "Prism errors and 429s",
        "Windows joins by stage",
        "Windows joins timed out",
        "Inventory age",
        "doctor findings",
    ] {
        assert!(titles.contains(&wanted), "no panel {wanted:?}: {titles:?}");
    }
}

/// Deserializes `object` as `T` and serializes it back: anything the type does not know (a
/// misspelt or misplaced field) is lost, and the comparison names the object.
fn round_trips<T: serde::de::DeserializeOwned + serde::Serialize>(path: &Path, object: &Value) {
    let typed: T = serde_json::from_value(object.clone())
        .unwrap_or_else(|e| panic!("{}: {:?}: {e}", path.display(), id(object)));
    let back = serde_json::to_value(&typed).unwrap();
    pretty_assertions::assert_eq!(
        &back,
        object,
        "{}: {:?} has fields its type does not know",
        path.display(),
        id(object)
    );
}

#[test]
fn every_built_in_object_round_trips_through_its_type() {
    let mut checked = 0;
    for dir in ["manifests/rbac", "manifests/deploy", "manifests/crds"] {
        for (path, object) in documents_under(&repo(dir)) {
            match object["kind"].as_str().unwrap_or_default() {
                "ServiceAccount" => round_trips::<ServiceAccount>(&path, &object),
                "Service" => round_trips::<Service>(&path, &object),
                "Deployment" => round_trips::<Deployment>(&path, &object),
                "NetworkPolicy" => round_trips::<NetworkPolicy>(&path, &object),
                "Role" => round_trips::<Role>(&path, &object),
                "ClusterRole" => round_trips::<ClusterRole>(&path, &object),
                "RoleBinding" => round_trips::<RoleBinding>(&path, &object),
                "ClusterRoleBinding" => round_trips::<ClusterRoleBinding>(&path, &object),
                "ValidatingAdmissionPolicy" => {
                    round_trips::<ValidatingAdmissionPolicy>(&path, &object)
                }
                "ValidatingAdmissionPolicyBinding" => {
                    round_trips::<ValidatingAdmissionPolicyBinding>(&path, &object)
                }
                "PodDisruptionBudget" => round_trips::<PodDisruptionBudget>(&path, &object),
                "CustomResourceDefinition" => {
                    round_trips::<CustomResourceDefinition>(&path, &object)
                }
                // Checked against its (test) CRD's schema by kube-sim in the apply tests.
                "ServiceMonitor" => {}
                other => panic!("{}: no check for kind {other}", path.display()),
            }
            checked += 1;
        }
    }
    assert!(checked >= 16, "{checked} objects checked");
}

fn deploy_object(kind: &str, name: &str) -> Value {
    let objects: Vec<Value> = documents_under(&repo("manifests/deploy"))
        .into_iter()
        .map(|(_, d)| d)
        .collect();
    the(&objects, kind, name).clone()
}

fn port_of(address: &str) -> i32 {
    address.rsplit(':').next().unwrap().parse().unwrap()
}

fn container_port(container: &Container, name: &str) -> i32 {
    container
        .ports
        .iter()
        .flatten()
        .find(|p| p.name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("no container port {name}"))
        .container_port
}

#[test]
fn the_deployment_agrees_with_the_binary_its_rbac_and_its_service() {
    let deployment: Deployment =
        serde_json::from_value(deploy_object("Deployment", "nutanix-machine-controller")).unwrap();
    let spec = deployment.spec.as_ref().unwrap();
    let pod = spec.template.spec.as_ref().unwrap();
    let pod_labels = spec
        .template
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .clone()
        .unwrap();
    assert_eq!(spec.selector.match_labels.as_ref(), Some(&pod_labels));
    let [container] = pod.containers.as_slice() else {
        panic!("one container")
    };

    // The flags are the binary's own (parsed by its command line).
    let args = container.args.clone().unwrap_or_default();
    let cli = Cli::try_parse_from(
        std::iter::once("nutanix-machine-controller".to_owned()).chain(args.clone()),
    )
    .unwrap_or_else(|e| panic!("the Deployment's arguments {args:?}: {e}"));
    assert!(cli.command.is_none(), "runs the controller");
    let run = cli.run;
    assert!(run.leader_elect, "leader election on");
    assert_eq!(run.namespace.as_deref(), Some(NS));
    assert!(run.kubeconfig.is_none(), "in-cluster configuration");
    assert!(!run.prism.insecure_skip_tls_verify);

    // Probes and ports.
    assert_eq!(port_of(&run.health_addr), 9440);
    assert_eq!(container_port(container, "health"), 9440);
    assert_eq!(
        container_port(container, "metrics"),
        port_of(&run.metrics_bind_address)
    );
    for (probe, path) in [
        (container.liveness_probe.as_ref(), "/healthz"),
        (container.readiness_probe.as_ref(), "/readyz"),
    ] {
        let get = probe
            .and_then(|p| p.http_get.as_ref())
            .expect("an HTTP probe");
        assert_eq!(get.path.as_deref(), Some(path));
        assert_eq!(get.port, IntOrString::String("health".into()));
    }

    // Hardening.
    let pod_security = pod.security_context.as_ref().unwrap();
    assert_eq!(pod_security.run_as_non_root, Some(true));
    assert_eq!(
        pod_security
            .seccomp_profile
            .as_ref()
            .map(|s| s.type_.as_str()),
        Some("RuntimeDefault")
    );
    assert!(
        pod_security.run_as_user.is_none(),
        "the image's user (OpenShift assigns its own)"
    );
    let security = container.security_context.as_ref().unwrap();
    assert_eq!(security.allow_privilege_escalation, Some(false));
    assert_eq!(security.read_only_root_filesystem, Some(true));
    assert_eq!(security.privileged, None);
    assert_eq!(
        security.capabilities.as_ref().and_then(|c| c.drop.clone()),
        Some(vec!["ALL".to_owned()])
    );
    assert!(security.capabilities.as_ref().unwrap().add.is_none());
    assert_eq!(
        pod.node_selector.as_ref().unwrap()["kubernetes.io/os"],
        "linux"
    );

    // Requests and limits for CPU and memory, requests within limits.
    let resources = container.resources.as_ref().unwrap();
    let (requests, limits) = (
        resources.requests.clone().unwrap(),
        resources.limits.clone().unwrap(),
    );
    let millicores = |q: &Quantity| -> f64 {
        q.0.strip_suffix('m').map_or_else(
            || q.0.parse::<f64>().unwrap() * 1000.0,
            |m| m.parse().unwrap(),
        )
    };
    let mebibytes = |q: &Quantity| -> f64 { q.0.strip_suffix("Mi").unwrap().parse().unwrap() };
    assert!(millicores(&requests["cpu"]) <= millicores(&limits["cpu"]));
    assert!(mebibytes(&requests["memory"]) <= mebibytes(&limits["memory"]));

    // The image is the placeholder an overlay replaces.
    assert_eq!(
        container.image.as_deref(),
        Some("nutanix-machine-controller:latest")
    );

    // RBAC: the ServiceAccount exists in the manifests and may do what the flags ask.
    let permissions = rbac::Permissions::controller().unwrap();
    assert_eq!(
        pod.service_account_name.as_deref(),
        Some(permissions.service_account.1.as_str())
    );
    assert_eq!(
        deployment.metadata.namespace.as_deref(),
        Some(permissions.service_account.0.as_str())
    );
    let call = |verb: &str, group: &str, resource: &str, name: &str| RequestRecord {
        verb: verb.into(),
        method: String::new(),
        path: String::new(),
        api_group: group.into(),
        api_version: "v1".into(),
        resource: resource.into(),
        subresource: String::new(),
        namespace: NS.into(),
        name: name.into(),
        user_agent: String::new(),
        user: String::new(),
        status: 200,
    };
    for verb in ["get", "update"] {
        assert!(
            permissions.allows(&call(verb, "coordination.k8s.io", "leases", LEASE)),
            "{verb} the Lease"
        );
        assert!(!permissions.allows(&call(
            verb,
            "coordination.k8s.io",
            "leases",
            "another-lease"
        )));
    }
    assert!(permissions.allows(&call("watch", "machine.openshift.io", "machines", "")));
    assert!(
        !permissions.allows(&call("update", "machine.openshift.io", "machines", "m")),
        "patches only"
    );
    assert!(
        !permissions.allows(&call("patch", "", "secrets", "s")),
        "Secrets are read only"
    );
    let mut elsewhere = call("watch", "machine.openshift.io", "machines", "");
    elsewhere.namespace = "default".into();
    assert!(
        !permissions.allows(&elsewhere),
        "Machines in --namespace only"
    );

    // The metrics Service, ServiceMonitor and NetworkPolicy select these pods and these ports.
    let service: Service = serde_json::from_value(deploy_object(
        "Service",
        "nutanix-machine-controller-metrics",
    ))
    .unwrap();
    let service_spec = service.spec.unwrap();
    assert_eq!(service_spec.selector.as_ref(), Some(&pod_labels));
    let [service_port] = service_spec.ports.unwrap().try_into().unwrap();
    assert_eq!(
        service_port.target_port,
        Some(IntOrString::String("metrics".into()))
    );
    let monitor = deploy_object("ServiceMonitor", "nutanix-machine-controller");
    assert_eq!(
        monitor["spec"]["endpoints"][0]["port"],
        service_port.name.clone().unwrap().as_str()
    );
    assert_eq!(monitor["spec"]["endpoints"][0]["path"], "/metrics");
    assert_eq!(
        monitor["spec"]["namespaceSelector"]["matchNames"],
        json!([NS])
    );
    let service_labels = serde_json::to_value(service.metadata.labels.unwrap()).unwrap();
    for (key, value) in monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .unwrap()
    {
        assert_eq!(
            &service_labels[key], value,
            "the ServiceMonitor selects the Service"
        );
    }
    let policy: NetworkPolicy =
        serde_json::from_value(deploy_object("NetworkPolicy", "nutanix-machine-controller"))
            .unwrap();
    let policy_spec = policy.spec.unwrap();
    assert_eq!(
        policy_spec.pod_selector.unwrap().match_labels.as_ref(),
        Some(&pod_labels)
    );
    let admitted: BTreeSet<i32> = policy_spec
        .ingress
        .unwrap()
        .iter()
        .flat_map(|rule| rule.ports.clone().unwrap_or_default())
        .filter_map(|p| match p.port {
            Some(IntOrString::Int(port)) => Some(port),
            _ => None,
        })
        .collect();
    assert_eq!(
        admitted,
        BTreeSet::from([
            container_port(container, "metrics"),
            container_port(container, "health")
        ])
    );

    // The PodDisruptionBudget covers these pods, lets one go at a time whatever the replica
    // count (minAvailable would block every eviction of a single replica) and never holds a
    // drain for a replica that is not Ready.
    let budget: PodDisruptionBudget = serde_json::from_value(deploy_object(
        "PodDisruptionBudget",
        "nutanix-machine-controller",
    ))
    .unwrap();
    let budget_spec = budget.spec.unwrap();
    assert_eq!(
        budget_spec.selector.and_then(|s| s.match_labels).as_ref(),
        Some(&pod_labels)
    );
    assert_eq!(budget_spec.max_unavailable, Some(IntOrString::Int(1)));
    assert_eq!(budget_spec.min_available, None);
    assert_eq!(
        budget_spec.unhealthy_pod_eviction_policy.as_deref(),
        Some("AlwaysAllow")
    );
    assert!(spec.replicas.unwrap_or(1) > 1, "a standby to take over");
    // A class the API server creates itself (scheduling/v1 SystemPriorityClasses).
    assert_eq!(
        pod.priority_class_name.as_deref(),
        Some("system-node-critical")
    );
}

/// `manifests/rbac/admission/secret-policy.yaml`: the policy (and its binding).
fn secret_policy() -> (ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding) {
    let objects: Vec<Value> = documents_under(&repo("manifests/rbac/admission"))
        .into_iter()
        .map(|(_, d)| d)
        .collect();
    let name = "nutanix-machine-controller-secrets";
    (
        serde_json::from_value(the(&objects, "ValidatingAdmissionPolicy", name).clone()).unwrap(),
        serde_json::from_value(the(&objects, "ValidatingAdmissionPolicyBinding", name).clone())
            .unwrap(),
    )
}

#[test]
fn the_secret_policy_binds_the_controllers_service_account_and_allows_the_secret_the_code_writes() {
    let (policy, binding) = secret_policy();
    let spec = policy.spec.unwrap();
    let binding_spec = binding.spec.unwrap();
    assert_eq!(binding_spec.policy_name, policy.metadata.name);
    assert_eq!(
        binding_spec.validation_actions,
        Some(vec!["Deny".to_owned()])
    );
    assert_eq!(spec.failure_policy.as_deref(), Some("Fail"));

    // It applies to the ServiceAccount the manifests define, and to nobody else.
    let permissions = rbac::Permissions::controller().unwrap();
    let (namespace, account) = &permissions.service_account;
    let [condition] = spec.match_conditions.unwrap().try_into().unwrap();
    let username = format!("'system:serviceaccount:{namespace}:{account}'");
    assert_eq!(
        condition.expression,
        format!("request.userInfo.username == {username}")
    );

    // It matches every write the Role lets that ServiceAccount make on a Secret: create only.
    let [rule] = spec
        .match_constraints
        .unwrap()
        .resource_rules
        .unwrap()
        .try_into()
        .unwrap();
    assert_eq!(rule.api_groups, Some(vec![String::new()]));
    assert_eq!(rule.resources, Some(vec!["secrets".to_owned()]));
    assert_eq!(rule.operations, Some(vec!["CREATE".to_owned()]));
    let on_secrets = |verb: &str| RequestRecord {
        verb: verb.into(),
        method: String::new(),
        path: String::new(),
        api_group: String::new(),
        api_version: "v1".into(),
        resource: "secrets".into(),
        subresource: String::new(),
        namespace: namespace.clone(),
        name: "any".into(),
        user_agent: String::new(),
        user: String::new(),
        status: 200,
    };
    assert!(permissions.allows(&on_secrets("create")));
    for verb in ["update", "patch", "delete", "deletecollection"] {
        assert!(
            !permissions.allows(&on_secrets(verb)),
            "the Role allows {verb} on Secrets, which the policy does not check"
        );
    }

    // Every value of the Secret the code creates is the one the policy asks for: its name's
    // suffix, type, key and owner (read from the code, not repeated here).
    let machine: Machine = serde_json::from_value(json!({
        "apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
        "metadata": {"name": "windows-0", "namespace": NS, "uid": "0b1c"},
        "spec": {},
    }))
    .unwrap();
    let secret: Secret = generated_password_object(&machine, &random_admin_password());
    let owner = &secret.metadata.owner_references.as_ref().unwrap()[0];
    let keys: Vec<&String> = secret.data.as_ref().unwrap().keys().collect();
    assert_eq!(keys, [ADMIN_PASSWORD_KEY]);
    assert_eq!(
        secret.metadata.name.as_deref(),
        Some(format!("{}{GENERATED_PASSWORD_SUFFIX}", owner.name).as_str())
    );
    let validations = spec.validations.unwrap();
    let expressions: String = validations
        .iter()
        .map(|v| v.expression.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    for quoted in [
        format!("'{GENERATED_PASSWORD_SUFFIX}'"),
        format!("'{ADMIN_PASSWORD_KEY}'"),
        format!("'{}'", secret.type_.as_deref().unwrap()),
        format!("'{}'", owner.api_version),
        format!("'{}'", owner.kind),
        "'kubernetes.io/service-account-token'".to_owned(),
    ] {
        assert!(
            expressions.contains(&quoted),
            "no validation checks {quoted}: {expressions}"
        );
    }

    // Each refusal says what was refused and why, as a 403.
    for validation in &validations {
        let message = validation.message.as_deref().unwrap_or_default();
        assert!(
            message.starts_with(&format!("{account} may ")) && !message.contains('\n'),
            "{message:?}"
        );
        assert_eq!(validation.reason.as_deref(), Some("Forbidden"));
    }
}

#[test]
fn an_overlay_sets_the_image() {
    if !kubectl_present() {
        eprintln!("kubectl is not installed: skipped");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // kustomize takes relative paths only: from the overlay up to `/`, then down to manifests/.
    let overlay = dir.path().canonicalize().unwrap();
    let up = "../".repeat(overlay.components().count() - 1);
    let manifests = repo("manifests").canonicalize().unwrap();
    let down = manifests.strip_prefix("/").unwrap().display();
    std::fs::write(
        overlay.join("kustomization.yaml"),
        format!(
            "resources:\n- {up}{down}\nimages:\n- name: nutanix-machine-controller\n  newName: registry.example.com/nutanix-machine-controller\n  newTag: v0.1.0\n"
        ),
    )
    .unwrap();
    let rendered = kustomize(dir.path());
    let deployment = the(&rendered, "Deployment", "nutanix-machine-controller");
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"][0]["image"],
        "registry.example.com/nutanix-machine-controller:v0.1.0"
    );
}

// ---- kubectl apply against kube-sim ----

/// A CRD standing in for a built-in kind kube-sim does not serve (Deployments, NetworkPolicies,
/// RBAC, admission policies): any content is kept, so only kubectl's handling and kube-sim's generic checks (names,
/// namespaces, labels) apply; the field check is `every_built_in_object_round_trips_through_its_type`.
fn stand_in_crd(group: &str, kind: &str, plural: &str, namespaced: bool) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {
            "group": group,
            "names": {"kind": kind, "listKind": format!("{kind}List"), "plural": plural,
                      "singular": kind.to_lowercase()},
            "scope": if namespaced { "Namespaced" } else { "Cluster" },
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                "type": "object", "x-kubernetes-preserve-unknown-fields": true}}}],
        },
    })
}

struct Kubectl {
    kubeconfig: PathBuf,
    cache: PathBuf,
}

impl Kubectl {
    fn run(&self, args: &[&str]) -> Output {
        std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(&self.cache)
            .args(args)
            .env_remove("KUBECONFIG")
            .output()
            .unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "kubectl {args:?} failed:\nstdout: {stdout}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }
}

/// kube-sim with the namespace, the stand-in CRDs and the test-only ServiceMonitor CRD, and a
/// kubectl pointed at it.
async fn cluster(dir: &Path) -> (kube_sim::RunningKubeSim, Kubectl) {
    let sim = KubeSim::start(kube_sim::Config {
        namespaces: vec![NS.to_owned()],
        ..kube_sim::Config::default()
    })
    .await
    .unwrap();
    for crd in [
        stand_in_crd("apps", "Deployment", "deployments", true),
        stand_in_crd(
            "networking.k8s.io",
            "NetworkPolicy",
            "networkpolicies",
            true,
        ),
        stand_in_crd("rbac.authorization.k8s.io", "Role", "roles", true),
        stand_in_crd(
            "rbac.authorization.k8s.io",
            "RoleBinding",
            "rolebindings",
            true,
        ),
        stand_in_crd(
            "rbac.authorization.k8s.io",
            "ClusterRole",
            "clusterroles",
            false,
        ),
        stand_in_crd(
            "rbac.authorization.k8s.io",
            "ClusterRoleBinding",
            "clusterrolebindings",
            false,
        ),
        stand_in_crd(
            "admissionregistration.k8s.io",
            "ValidatingAdmissionPolicy",
            "validatingadmissionpolicies",
            false,
        ),
        stand_in_crd(
            "admissionregistration.k8s.io",
            "ValidatingAdmissionPolicyBinding",
            "validatingadmissionpolicybindings",
            false,
        ),
    ] {
        sim.create(crd).unwrap();
    }
    let monitor_crd =
        std::fs::read_to_string(repo("hack/crds/monitoring.coreos.com_servicemonitors.yaml"))
            .unwrap();
    for document in documents(&monitor_crd) {
        sim.create(document).unwrap();
    }
    let kubeconfig = dir.join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig).unwrap();
    let kubectl = Kubectl {
        kubeconfig,
        cache: dir.join("cache"),
    };
    (sim, kubectl)
}

/// `kind.group/name` as kubectl prints it, for each object of the install set.
fn kubectl_names() -> Vec<String> {
    expected_install_set()
        .into_iter()
        .map(|(kind, _, name)| {
            let resource = match kind.as_str() {
                "CustomResourceDefinition" => "customresourcedefinition.apiextensions.k8s.io",
                "ServiceAccount" => "serviceaccount",
                "Service" => "service",
                "Deployment" => "deployment.apps",
                "NetworkPolicy" => "networkpolicy.networking.k8s.io",
                "ServiceMonitor" => "servicemonitor.monitoring.coreos.com",
                "Role" => "role.rbac.authorization.k8s.io",
                "RoleBinding" => "rolebinding.rbac.authorization.k8s.io",
                "ClusterRole" => "clusterrole.rbac.authorization.k8s.io",
                "ClusterRoleBinding" => "clusterrolebinding.rbac.authorization.k8s.io",
                "ValidatingAdmissionPolicy" => {
                    "validatingadmissionpolicy.admissionregistration.k8s.io"
                }
                "ValidatingAdmissionPolicyBinding" => {
                    "validatingadmissionpolicybinding.admissionregistration.k8s.io"
                }
                "PodDisruptionBudget" => "poddisruptionbudget.policy",
                other => panic!("{other}"),
            };
            format!("{resource}/{name}")
        })
        .collect()
}

/// Every object of the install set is in kubectl's `output`, with the `outcome` of its name.
fn assert_every_object(output: &str, outcome: impl Fn(&str) -> &'static str) {
    for name in kubectl_names() {
        let outcome = outcome(&name);
        assert!(
            output
                .lines()
                .any(|line| line == format!("{name} {outcome}")),
            "{name} not {outcome}:\n{output}"
        );
    }
    assert_eq!(output.lines().count(), kubectl_names().len(), "{output}");
}

fn assert_installed(sim: &kube_sim::RunningKubeSim) {
    let deployment = sim
        .get("apps", "deployments", NS, "nutanix-machine-controller")
        .unwrap();
    assert_eq!(
        deployment["spec"]["template"]["spec"]["serviceAccountName"],
        "nutanix-machine-controller"
    );
    let monitor = sim
        .get(
            "monitoring.coreos.com",
            "servicemonitors",
            NS,
            "nutanix-machine-controller",
        )
        .unwrap();
    assert_eq!(
        monitor["spec"]["endpoints"][0]["port"], "metrics",
        "kept by the CRD's schema"
    );
    sim.get(
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        "",
        "machines.machine.openshift.io",
    )
    .unwrap();
    sim.get("", "serviceaccounts", NS, "nutanix-machine-controller")
        .unwrap();
    sim.get("", "services", NS, "nutanix-machine-controller-metrics")
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_k_installs_the_manifests_and_a_second_apply_changes_nothing() {
    if !kubectl_present() {
        eprintln!("kubectl is not installed: skipped");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (sim, kubectl) = cluster(dir.path()).await;
    let manifests = repo("manifests").display().to_string();

    let first = kubectl.ok(&["apply", "-k", &manifests]);
    assert_every_object(&first, |_| "created");
    assert_installed(&sim);
    let second = kubectl.ok(&["apply", "-k", &manifests]);
    // kubectl's client-side apply puts a PodDisruptionBudget's selector in every patch, changed
    // or not (its patch strategy is `replace`: k8s.io/api policy/v1 types.go; apimachinery
    // pkg/util/strategicpatch/patch.go, handleMapDiff), so it says `configured`, on a real API
    // server too (tests/e2e/secret_policy.rs); the object is the same (its generation stays 1).
    assert_every_object(&second, |name| {
        if name.starts_with("poddisruptionbudget.") {
            "configured"
        } else {
            "unchanged"
        }
    });
    let budget = sim
        .get(
            "policy",
            "poddisruptionbudgets",
            NS,
            "nutanix-machine-controller",
        )
        .unwrap();
    assert_eq!(budget["metadata"]["generation"], 1);

    // The Machine CRDs are served once applied.
    let machines = kubectl.ok(&["get", "machines", "-n", NS]);
    assert!(
        machines.is_empty() || machines.contains("No resources"),
        "{machines}"
    );
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_apply_installs_the_manifests_without_conflicts() {
    if !kubectl_present() {
        eprintln!("kubectl is not installed: skipped");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (sim, kubectl) = cluster(dir.path()).await;
    let manifests = repo("manifests").display().to_string();

    for _ in 0..2 {
        let output = kubectl.ok(&[
            "apply",
            "--server-side",
            "--field-manager=nutanix-install",
            "-k",
            &manifests,
        ]);
        assert_every_object(&output, |_| "serverside-applied");
    }
    assert_installed(&sim);
    sim.shutdown().await;
}
