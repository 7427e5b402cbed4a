//! The autoscaler's actions against kube-sim: refusing to scale from zero without capacity
//! annotations, scaling up through `/scale`, and scaling down the annotated Machine with the
//! replica controller and nodelink running.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

mod common;

use common::{NS, eventually, kube, machine_set, node};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use nutanix_machine_controller::api::{Machine, MachineSet};
use sandbox::autoscaler::{Autoscaler, AutoscalerError, MAX_SIZE_ANNOTATION, MIN_SIZE_ANNOTATION};
use sandbox::machineset::{self, DELETE_MACHINE_ANNOTATION, MachineSetControllerConfig};
use sandbox::nodelink::{self, NodeLinkConfig};
use serde_json::{Value, json};

fn autoscaled(name: &str, replicas: i32, min: &str, max: &str, extra: Value) -> Value {
    let mut set = machine_set(name, replicas);
    let mut annotations = json!({MIN_SIZE_ANNOTATION: min, MAX_SIZE_ANNOTATION: max});
    for (k, v) in extra.as_object().unwrap() {
        annotations[k] = v.clone();
    }
    set["metadata"]["annotations"] = annotations;
    set
}

async fn replicas(client: &Client, set: &str) -> Option<i32> {
    let sets: Api<MachineSet> = Api::namespaced(client.clone(), NS);
    sets.get(set).await.unwrap().spec.replicas
}

#[tokio::test]
async fn refuses_to_scale_from_zero_without_capacity_then_scales_up_within_max() {
    let (sim, client) = kube().await;
    let autoscaler = Autoscaler::new(client.clone(), NS);
    sim.create(autoscaled("bare", 0, "0", "3", json!({})))
        .unwrap();
    sim.create(machine_set("manual", 0)).unwrap();

    let refused = autoscaler.scale_up("bare", 1).await.unwrap_err();
    assert!(
        matches!(&refused, AutoscalerError::CannotScaleFromZero { reason, .. } if reason.contains("capacity.cluster-autoscaler.kubernetes.io/cpu")),
        "{refused}"
    );
    assert_eq!(replicas(&client, "bare").await, Some(0));
    assert!(matches!(
        autoscaler.scale_up("manual", 1).await,
        Err(AutoscalerError::NotANodeGroup { .. })
    ));
    let groups = autoscaler.node_groups().await.unwrap();
    assert_eq!(
        groups.iter().map(|g| g.name.as_str()).collect::<Vec<_>>(),
        ["bare"]
    );
    assert!(!groups[0].can_scale());

    // What the provider's MachineSet controller writes (the deprecated keys are enough).
    let sets: Api<MachineSet> = Api::namespaced(client.clone(), NS);
    sets.patch(
        "bare",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {
            "machine.openshift.io/vCPU": "2", "machine.openshift.io/memoryMb": "8192"}}})),
    )
    .await
    .unwrap();
    assert_eq!(autoscaler.scale_up("bare", 2).await.unwrap(), 2);
    assert_eq!(replicas(&client, "bare").await, Some(2));
    let too_many = autoscaler.scale_up("bare", 2).await.unwrap_err();
    assert_eq!(
        too_many.to_string(),
        "MachineSet bare: size increase too large: desired 4, max 3"
    );
    assert_eq!(autoscaler.scale_up("bare", 1).await.unwrap(), 3);
    let scale_patches = sim
        .requests()
        .iter()
        .filter(|r| r.verb == "patch" && r.subresource == "scale")
        .count();
    assert_eq!(scale_patches, 2);
    sim.shutdown().await;
}

#[tokio::test]
async fn scales_down_the_nodes_machine_and_stops_at_min() {
    let (sim, client) = kube().await;
    let controller = machineset::start(client.clone(), MachineSetControllerConfig::default());
    let link = nodelink::start(client.clone(), NodeLinkConfig::default());
    let autoscaler = Autoscaler::new(client.clone(), NS);
    sim.create(autoscaled("workers", 3, "1", "5", json!({})))
        .unwrap();

    let machines: Api<Machine> = Api::namespaced(client.clone(), NS);
    let list = || async {
        let mut items = machines.list(&ListParams::default()).await.unwrap().items;
        items.sort_by_key(|m| m.name_any());
        items
    };
    eventually("three Machines", || async { list().await.len() == 3 }).await;
    // Play the provider and the kubelet: addresses on the Machines, a Node each.
    for (i, m) in list().await.iter().enumerate() {
        let ip = format!("10.40.1.{}", i + 10);
        machines
            .patch_status(
                &m.name_any(),
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"status": {"addresses": [{"type": "InternalIP", "address": ip}]}}),
                ),
            )
            .await
            .unwrap();
        sim.create(node(&format!("node-{i}"), &ip, "")).unwrap();
    }
    eventually("nodelink linked the Nodes", || async {
        list().await.iter().all(|m| {
            m.status
                .as_ref()
                .and_then(|s| s.node_ref.as_ref())
                .is_some()
        })
    })
    .await;

    let before = list().await;
    // The middle Machine by name: neither what Random picks first among equals nor last.
    let target = before[1].name_any();
    let node_name = before[1]
        .status
        .as_ref()
        .unwrap()
        .node_ref
        .as_ref()
        .unwrap()
        .name
        .clone()
        .unwrap();
    let done = autoscaler.scale_down_node(&node_name).await.unwrap();
    assert_eq!(
        (
            done.machine.as_str(),
            done.machine_set.as_str(),
            done.replicas
        ),
        (target.as_str(), "workers", 2)
    );
    eventually("the annotated Machine deleted", || async {
        let names: Vec<String> = list().await.iter().map(ResourceExt::name_any).collect();
        names.len() == 2 && !names.contains(&target)
    })
    .await;

    let second = list().await[0].clone();
    let second_node = second
        .status
        .as_ref()
        .unwrap()
        .node_ref
        .as_ref()
        .unwrap()
        .name
        .clone()
        .unwrap();
    autoscaler.scale_down_node(&second_node).await.unwrap();
    eventually("one Machine left", || async { list().await.len() == 1 }).await;

    let last = list().await[0].clone();
    let last_node = last
        .status
        .as_ref()
        .unwrap()
        .node_ref
        .as_ref()
        .unwrap()
        .name
        .clone()
        .unwrap();
    let refused = autoscaler.scale_down_node(&last_node).await.unwrap_err();
    assert!(
        matches!(
            refused,
            AutoscalerError::AtMinSize {
                replicas: 1,
                min: 1,
                ..
            }
        ),
        "{refused}"
    );
    assert!(
        !machines
            .get(&last.name_any())
            .await
            .unwrap()
            .annotations()
            .contains_key(DELETE_MACHINE_ANNOTATION)
    );
    assert_eq!(replicas(&client, "workers").await, Some(1));

    controller.stop().await;
    link.stop().await;
    sim.shutdown().await;
}
