//! The Windows join reconciler against the real binary: the test plays the node side (the
//! kubelet's CSRs with real PKCS#10 requests, the Node, WMCO's annotation), nodelink and the
//! approver, and watches the `WindowsJoin` condition walk its stages (the cloud controller
//! manager's initialisation among them) with an event per transition; a Node registered with an address the VM lacks; a join that times out.

use std::time::Duration;

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair};
use serde_json::{Value, json};

use crate::harness::{Env, NS, provider_spec, scrape};

const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
const SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";
const VERSION_ANNOTATION: &str = "windowsmachineconfig.openshift.io/version";

fn windows_image_spec() -> Value {
    provider_spec(
        json!({"type": "name", "name": "windows-server-2022"}),
        "120Gi",
        "windows-user-data",
    )
}

/// The condition, in the providerStatus key only the join reconciler writes; never in the
/// Machine controller's `conditions` list.
fn join_condition(machine: &Value) -> Option<&Value> {
    let provider_status = &machine["status"]["providerStatus"];
    let in_list = provider_status["conditions"]
        .as_array()
        .is_some_and(|list| list.iter().any(|c| c["type"] == "WindowsJoin"));
    assert!(!in_list, "WindowsJoin in providerStatus.conditions");
    provider_status
        .get("windowsJoin")
        .filter(|c| c["type"] == "WindowsJoin")
}

async fn wait_join(env: &Env, name: &str, reason: &str) -> Value {
    env.wait_machine(name, &format!("WindowsJoin {reason}"), |m| {
        join_condition(m).is_some_and(|c| c["reason"] == reason)
    })
    .await
}

fn first_ip(machine: &Value) -> String {
    machine["status"]["addresses"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["type"] == "InternalIP")
        .unwrap()["address"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// A kubelet's PKCS#10 request for `system:node:<node>` with these SANs.
fn request_pem(node: &str, sans: Vec<String>) -> String {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(sans).unwrap();
    let mut subject = DistinguishedName::new();
    subject.push(DnType::OrganizationName, "system:nodes");
    subject.push(DnType::CommonName, format!("system:node:{node}"));
    params.distinguished_name = subject;
    params.serialize_request(&key).unwrap().pem().unwrap()
}

fn csrs(env: &Env) -> Api<CertificateSigningRequest> {
    Api::all(env.client.clone())
}

/// Creates the kubelet's client CSR (as the node-bootstrapper service account) for `node`.
async fn client_csr(env: &Env, name: &str, node: &str) {
    let csr = serde_json::from_value(json!({
        "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {
            "request": base64_of(&request_pem(node, vec![])),
            "signerName": CLIENT_SIGNER,
            "usages": ["digital signature", "client auth"],
            "username": "system:serviceaccount:openshift-machine-config-operator:node-bootstrapper",
            "groups": ["system:serviceaccounts:openshift-machine-config-operator",
                       "system:serviceaccounts", "system:authenticated"],
        },
    }))
    .unwrap();
    csrs(env)
        .create(&PostParams::default(), &csr)
        .await
        .unwrap();
}

/// Creates the kubelet's serving CSR for `node` with its name and `ip`.
async fn serving_csr(env: &Env, name: &str, node: &str, ip: &str) {
    let csr = serde_json::from_value(json!({
        "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {
            "request": base64_of(&request_pem(node, vec![node.to_owned(), ip.to_owned()])),
            "signerName": SERVING_SIGNER,
            "usages": ["digital signature", "server auth"],
            "username": format!("system:node:{node}"),
            "groups": ["system:nodes", "system:authenticated"],
        },
    }))
    .unwrap();
    csrs(env)
        .create(&PostParams::default(), &csr)
        .await
        .unwrap();
}

fn base64_of(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// Plays the cluster-machine-approver.
async fn approve(env: &Env, name: &str) {
    csrs(env)
        .patch_approval(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": [{
                "type": "Approved", "status": "True",
                "reason": "NodeCSRApprove", "message": "approved by the test"}]}})),
        )
        .await
        .unwrap();
}

/// Taint of a kubelet started with `--cloud-provider=external`, until the cloud controller
/// manager initialises its Node.
const UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";

/// Plays the kubelet registering its Node (no providerID), `uninitialized` as a kubelet with an
/// external cloud provider registers it.
async fn register_node(env: &Env, name: &str, ip: &str, uninitialized: bool) {
    let taints = if uninitialized {
        json!([{"key": UNINITIALIZED, "value": "true", "effect": "NoSchedule"}])
    } else {
        json!([])
    };
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/os": "windows"}},
        "spec": {"taints": taints},
        "status": {"conditions": [{"type": "Ready", "status": "True"}],
                   "addresses": [{"type": "InternalIP", "address": ip},
                                 {"type": "Hostname", "address": name}]},
    }))
    .unwrap();
    Api::<Node>::all(env.client.clone())
        .create(&PostParams::default(), &node)
        .await
        .unwrap();
}

/// Plays nodelink: the Node's annotation and the Machine's nodeRef.
async fn link(env: &Env, name: &str) {
    Api::<Node>::all(env.client.clone())
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"machine.openshift.io/machine": format!("{NS}/{name}")}}}),
            ),
        )
        .await
        .unwrap();
    env.machines_api()
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"nodeRef": {"kind": "Node", "name": name}}})),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn a_windows_join_walks_its_stages_with_an_event_per_transition() {
    let mut env = Env::start().await;
    let _controller = env.controller("controller", &[]);
    let name = "win-join-0";
    env.create_machine(name, windows_image_spec(), true).await;

    let machine = wait_join(&env, name, "Provisioned").await;
    let ip = first_ip(&machine);
    assert_eq!(machine["status"]["phase"], "Provisioned");
    assert_eq!(join_condition(&machine).unwrap()["status"], "False");

    // The kubelet asks for its client certificate; the approver would approve it.
    client_csr(&env, "csr-client-0", name).await;
    env.wait_machine(name, "the client CSR noticed", |m| {
        join_condition(m).is_some_and(|c| {
            c["message"]
                .as_str()
                .unwrap()
                .contains("csr-client-0 for node win-join-0 meets")
        })
    })
    .await;
    approve(&env, "csr-client-0").await;

    // The Node registers, tainted until the cloud controller manager initialises it; the
    // Machine controller sets its providerID (its name and address are the Machine's) before
    // nodelink links it, so that nodelink can match it by providerID.
    register_node(&env, name, &ip, true).await;
    let machine = wait_join(&env, name, "NodeRegistered").await;
    let message = join_condition(&machine).unwrap()["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.contains("cloud controller manager") && message.contains(UNINITIALIZED),
        "{message}"
    );
    let provider_id = machine["spec"]["providerID"].as_str().unwrap().to_owned();
    let node = env
        .wait_node(name, |n| n["spec"]["providerID"].is_string())
        .await;
    assert_eq!(node["spec"]["providerID"], provider_id.as_str());

    // The cloud controller manager initialises it (drops the taint).
    Api::<Node>::all(env.client.clone())
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"taints": null}})),
        )
        .await
        .unwrap();
    wait_join(&env, name, "NodeInitialized").await;

    link(&env, name).await;
    let machine = wait_join(&env, name, "NodeLinked").await;
    env.wait_phase(name, "Running").await;
    assert!(
        join_condition(&machine).unwrap()["message"]
            .as_str()
            .unwrap()
            .contains("serving certificate")
    );

    serving_csr(&env, "csr-serving-0", name, &ip).await;
    approve(&env, "csr-serving-0").await;
    wait_join(&env, name, "ServingCertificate").await;

    // WMCO (WICD) marks the node configured.
    Api::<Node>::all(env.client.clone())
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {VERSION_ANNOTATION: "10.18.1"}}})),
        )
        .await
        .unwrap();
    let machine = wait_join(&env, name, "Configured").await;
    let condition = join_condition(&machine).unwrap();
    assert_eq!(condition["status"], "True");
    assert!(
        condition["message"]
            .as_str()
            .unwrap()
            .contains("configured by WMCO 10.18.1")
    );
    // Merged, never replacing the Machine controller's conditions.
    let conditions = machine["status"]["providerStatus"]["conditions"]
        .as_array()
        .unwrap();
    assert!(
        conditions
            .iter()
            .any(|c| c["type"] == "MachineCreation" && c["status"] == "True"),
        "{conditions:?}"
    );

    for reason in [
        "Provisioned",
        "NodeRegistered",
        "NodeInitialized",
        "NodeLinked",
        "ServingCertificate",
        "Configured",
    ] {
        let (_, kind, note) = env.wait_event(name, reason, "Windows join: ").await;
        assert_eq!(kind, "Normal", "{reason}: {note}");
    }

    // Steady state: no status write, no event; nothing WMCO owns is touched.
    let writes = env.settled_machine_patches().await;
    let node_writes = env
        .sim
        .requests()
        .iter()
        // A patch answered 409 wrote nothing: it was decided on a cached Node that changed
        // since (the next reconcile sees the providerID already set).
        .filter(|r| {
            r.resource == "nodes" && r.verb == "patch" && r.user == "controller" && r.status < 300
        })
        .count();
    println!(
        "Windows join from create to Configured: {writes} Machine writes (both controllers), {node_writes} Node write(s), {} Prism calls",
        env.prism_calls()
    );
    assert_eq!(
        node_writes, 1,
        "one providerID patch, nothing else on the Node"
    );
    let events: Vec<u64> = ["NodeLinked", "Configured"]
        .iter()
        .map(|reason| env.event_count(name, reason))
        .collect();
    assert_eq!(events, [1, 1], "one event per transition");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        env.controller_machine_patches(),
        writes,
        "no writes in steady state"
    );
    assert_eq!(env.event_count(name, "Configured"), 1);
    let node = env.node(name).unwrap();
    assert_eq!(
        node["metadata"]["annotations"][VERSION_ANNOTATION],
        "10.18.1"
    );
    for csr in ["csr-client-0", "csr-serving-0"] {
        let object = env
            .sim
            .get("certificates.k8s.io", "certificatesigningrequests", "", csr)
            .unwrap();
        assert_eq!(
            object["status"]["conditions"].as_array().unwrap().len(),
            1,
            "{csr}: only the test's approval"
        );
    }
    let csr_writes = env
        .sim
        .requests()
        .iter()
        .filter(|r| {
            r.user == "controller"
                && r.resource == "certificatesigningrequests"
                && r.verb != "list"
                && r.verb != "watch"
        })
        .count();
    assert_eq!(csr_writes, 0, "the controller only reads CSRs");

    env.assert_no_secrets_logged(&[]);
    env.assert_permissions("controller");
}

#[tokio::test]
async fn a_host_name_or_a_node_ip_the_vm_lacks_is_explained() {
    let mut env = Env::start().await;
    let _controller = env.controller("controller", &[]);
    let name = "win-wrong-0";
    env.create_machine(name, windows_image_spec(), true).await;
    wait_join(&env, name, "Provisioned").await;

    // The host kept its image's name: its client CSR matches no Machine.
    client_csr(&env, "csr-golden", "win-2022-golden").await;
    let machine = wait_join(&env, name, "ClientCSRNameMismatch").await;
    let message = join_condition(&machine).unwrap()["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.contains("csr-golden")
            && message.contains("no Machine has InternalDNS win-2022-golden"),
        "{message}"
    );
    let (_, kind, _) = env
        .wait_event(name, "ClientCSRNameMismatch", "win-2022-golden")
        .await;
    assert_eq!(kind, "Warning");

    // Renamed, it registers with the hybrid-overlay interface's address.
    register_node(&env, name, "10.132.0.9", false).await;
    let machine = wait_join(&env, name, "NodeIPMismatch").await;
    let message = join_condition(&machine).unwrap()["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(message.contains("IP 10.132.0.9"), "{message}");
    assert!(
        message.contains("not among the VM's addresses in Prism"),
        "{message}"
    );
    assert!(message.contains("WMCO older than 10.16"), "{message}");
    let (_, kind, _) = env.wait_event(name, "NodeIPMismatch", "10.132.0.9").await;
    assert_eq!(kind, "Warning");
    // Not provably the Machine's Node: its providerID is left alone.
    let node = env.node(name).unwrap();
    assert!(node["spec"]["providerID"].is_null(), "{node}");

    env.assert_no_secrets_logged(&[]);
    env.assert_permissions("controller");
}

#[tokio::test]
async fn a_join_that_times_out_is_reported_and_with_the_flag_fails_the_machine() {
    let mut env = Env::start().await;
    let mut reporting = env.controller("reporting", &["--windows-join-timeout", "4s"]);
    let metrics_line = reporting.wait_log("metrics listening").await;
    let name = "win-slow-0";
    env.create_machine(name, windows_image_spec(), true).await;
    let machine = wait_join(&env, name, "JoinTimedOut").await;
    let message = join_condition(&machine).unwrap()["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.starts_with("no Node linked to the Machine 4s after its creation"),
        "{message}"
    );
    env.wait_event(name, "JoinTimedOut", "no Node linked").await;
    // The alert NutanixWindowsJoinTimedOut (manifests/monitoring/) reads this.
    let metrics = scrape(&metrics_line, "/metrics").await;
    assert!(
        metrics.contains(&format!(
            r#"nutanix_windows_join_timed_out{{name="{name}",namespace="{NS}"}} 1"#
        )),
        "{metrics}"
    );
    // Without the flag the Machine stays as it is.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let machine = env.machine(name).unwrap();
    assert_eq!(machine["status"]["phase"], "Provisioned");
    assert!(machine["status"]["errorReason"].is_null());
    reporting.kill();

    let _failing = env.controller(
        "failing",
        &[
            "--windows-join-timeout",
            "4s",
            "--fail-timed-out-windows-joins",
        ],
    );
    let machine = env.wait_phase(name, "Failed").await;
    assert_eq!(machine["status"]["errorReason"], "JoinTimedOut");
    let error = machine["status"]["errorMessage"].as_str().unwrap();
    assert!(error.starts_with("Windows join timed out"), "{error}");
    // The Machine controller fails it (phase has one writer): the annotation is written by the
    // same reconcile, before the phase.
    assert_eq!(
        machine["metadata"]["annotations"]["machine.openshift.io/instance-state"],
        "Unknown"
    );
    env.wait_event(name, "JoinTimedOut", "marked Failed").await;

    // Deleting it deletes its VM, as for any Failed Machine.
    env.machines_api()
        .delete(name, &Default::default())
        .await
        .unwrap();
    env.wait_machine(name, "deletion", Value::is_null).await;
    assert!(env.vms_named(name).is_empty());
    env.assert_no_secrets_logged(&[]);
    env.assert_permissions("failing");
}
