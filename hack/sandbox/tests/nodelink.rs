//! nodelink against kube-sim: a Node linked to its Machine by providerID and by InternalIP, a
//! Machine whose address arrives after its Node, and what is copied onto the Node.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

mod common;

use common::{NS, eventually, kube, machine, node};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use nutanix_machine_controller::api::Machine;
use sandbox::nodelink::{self, MACHINE_ANNOTATION, NodeLinkConfig};
use serde_json::json;

async fn node_ref(client: &Client, machine: &str) -> Option<String> {
    let machines: Api<Machine> = Api::namespaced(client.clone(), NS);
    machines
        .get(machine)
        .await
        .unwrap()
        .status
        .and_then(|s| s.node_ref)
        .and_then(|r| r.name)
}

#[tokio::test]
async fn links_by_provider_id_and_by_internal_ip() {
    let (sim, client) = kube().await;
    let link = nodelink::start(client.clone(), NodeLinkConfig::default());
    let machines: Api<Machine> = Api::namespaced(client.clone(), NS);
    let nodes: Api<Node> = Api::all(client.clone());

    // By providerID: the Node's IP matches nothing, its providerID does.
    let mut by_id = machine("win-a", json!({"machine.openshift.io/os-id": "Windows"}));
    by_id["spec"]["providerID"] = json!("nutanix://1111");
    by_id["spec"]["metadata"] = json!({"labels": {"node-role.kubernetes.io/worker": ""}});
    by_id["spec"]["taints"] = json!([{"key": "os", "value": "Windows", "effect": "NoSchedule"}]);
    sim.create(by_id).unwrap();
    sim.create(node("win-a", "192.168.9.9", "nutanix://1111"))
        .unwrap();
    eventually("nodeRef set by providerID", || async {
        node_ref(&client, "win-a").await.as_deref() == Some("win-a")
    })
    .await;
    eventually("Node annotated, labelled and tainted", || async {
        let n = nodes.get("win-a").await.unwrap();
        n.annotations().get(MACHINE_ANNOTATION).map(String::as_str)
            == Some("openshift-machine-api/win-a")
            && n.labels().contains_key("node-role.kubernetes.io/worker")
            && n.spec
                .and_then(|s| s.taints)
                .is_some_and(|t| t.iter().any(|t| t.key == "os"))
    })
    .await;
    let linked = machines.get("win-a").await.unwrap();
    let reference = linked.status.as_ref().unwrap().node_ref.as_ref().unwrap();
    assert_eq!(reference.uid, nodes.get("win-a").await.unwrap().uid());
    assert_eq!(reference.kind.as_deref(), Some("Node"));
    assert!(linked.status.unwrap().last_updated.is_some());

    // By IP, with the Machine's address arriving after the Node registered (the Machine event
    // must bring the link about).
    sim.create(machine("linux-b", json!({}))).unwrap();
    sim.create(node("some-host", "10.40.1.7", "")).unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(node_ref(&client, "linux-b").await, None);
    machines
        .patch_status(
            "linux-b",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"addresses": [
                {"type": "InternalIP", "address": "10.40.1.7"},
                {"type": "InternalDNS", "address": "linux-b"}]}})),
        )
        .await
        .unwrap();
    eventually("nodeRef set by InternalIP", || async {
        node_ref(&client, "linux-b").await.as_deref() == Some("some-host")
    })
    .await;
    eventually("Node annotated", || async {
        nodes
            .get("some-host")
            .await
            .unwrap()
            .annotations()
            .get(MACHINE_ANNOTATION)
            .map(String::as_str)
            == Some("openshift-machine-api/linux-b")
    })
    .await;

    link.stop().await;
    sim.shutdown().await;
}
