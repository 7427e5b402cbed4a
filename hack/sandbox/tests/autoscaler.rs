//! The autoscaler's actions against kube-sim: refusing to scale from zero without capacity
//! annotations, scaling up through `/scale`, growing the group whose template runs the pending
//! pods, and scaling down the annotated Machine with the replica controller and nodelink running.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

mod common;

use common::{NS, eventually, kube, machine_set, node};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use nutanix_machine_controller::api::{Machine, MachineSet};
use sandbox::autoscaler::{
    Autoscaler, AutoscalerError, MAX_SIZE_ANNOTATION, MIN_SIZE_ANNOTATION, NotAGroup, TemplateError,
};
use sandbox::machineset::{
    self, DELETE_MACHINE_ANNOTATION, MachineSetControllerConfig, OLD_DELETE_MACHINE_ANNOTATION,
};
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
        matches!(
            &refused,
            AutoscalerError::NotANodeGroup {
                why: NotAGroup::CannotScaleFromZero(TemplateError::NoCpu),
                ..
            }
        ),
        "{refused}"
    );
    assert_eq!(replicas(&client, "bare").await, Some(0));
    // Without bounds the set at zero is skipped first for want of a template
    // (`newNodeGroupFromScalableResource` checks that before the bounds).
    assert!(matches!(
        autoscaler.scale_up("manual", 1).await,
        Err(AutoscalerError::NotANodeGroup {
            why: NotAGroup::CannotScaleFromZero(TemplateError::NoCpu),
            ..
        })
    ));
    // Neither is a node group yet: a group at zero needs a template.
    assert!(autoscaler.node_groups().await.unwrap().is_empty());

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
    let groups = autoscaler.node_groups().await.unwrap();
    assert_eq!(
        groups.iter().map(|g| g.name.as_str()).collect::<Vec<_>>(),
        ["bare"]
    );
    assert!(groups[0].can_scale());
    assert_eq!(autoscaler.scale_up("bare", 2).await.unwrap(), 2);
    assert_eq!(replicas(&client, "bare").await, Some(2));
    let too_many = autoscaler.scale_up("bare", 2).await.unwrap_err();
    assert_eq!(
        too_many.to_string(),
        "MachineSet bare: size increase too large - desired:4 max:3"
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
    // Play the provider and the kubelet: providerIDs and addresses on the Machines, a Node each
    // with the same providerID (the autoscaler finds a Node's Machine through it).
    for (i, m) in list().await.iter().enumerate() {
        let ip = format!("10.40.1.{}", i + 10);
        let id = format!("nutanix://0000000{i}-0000-4000-8000-000000000000");
        machines
            .patch(
                &m.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"providerID": id}})),
            )
            .await
            .unwrap();
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
        sim.create(node(&format!("node-{i}"), &ip, &id)).unwrap();
    }
    // A Node without a providerID belongs to no node group, whatever nodelink says.
    sim.create(node("stray", "10.40.9.9", "")).unwrap();
    assert!(matches!(
        autoscaler.scale_down_node("stray").await,
        Err(AutoscalerError::NoNodeGroupForNode { .. })
    ));
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
    // `MarkMachineForDeletion` updates the whole Machine (PUT), not a patch.
    let requests = sim.requests();
    let update = requests
        .iter()
        .find(|r| r.verb == "update" && r.resource == "machines")
        .expect("the Machine updated");
    assert_eq!(update.name, target);
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
    let kept = machines.get(&last.name_any()).await.unwrap();
    assert!(
        !kept.annotations().contains_key(DELETE_MACHINE_ANNOTATION)
            && !kept
                .annotations()
                .contains_key(OLD_DELETE_MACHINE_ANNOTATION)
    );
    assert_eq!(replicas(&client, "workers").await, Some(1));

    controller.stop().await;
    link.stop().await;
    sim.shutdown().await;
}

fn pending_pod(name: &str, spec: Value) -> Pod {
    let mut spec = spec;
    spec["containers"] =
        json!([{"name": "app", "resources": {"requests": {"cpu": "1", "memory": "2Gi"}}}]);
    serde_json::from_value(
        json!({"metadata": {"name": name, "namespace": "default"}, "spec": spec}),
    )
    .unwrap()
}

#[tokio::test]
async fn pending_pods_grow_the_group_whose_template_runs_them() {
    let (sim, client) = kube().await;
    let autoscaler = Autoscaler::new(client.clone(), NS);
    // What the provider writes for a Windows set (with WMCO's taint and maxPods) and a Linux set.
    let capacity = json!({
        "capacity.cluster-autoscaler.kubernetes.io/cpu": "4",
        "capacity.cluster-autoscaler.kubernetes.io/memory": "16Gi",
    });
    let mut windows = capacity.clone();
    windows["capacity.cluster-autoscaler.kubernetes.io/labels"] =
        json!("kubernetes.io/os=windows,kubernetes.io/arch=amd64,node.openshift.io/os_id=Windows");
    windows["capacity.cluster-autoscaler.kubernetes.io/taints"] = json!("os=Windows:NoSchedule");
    windows["capacity.cluster-autoscaler.kubernetes.io/maxPods"] = json!("250");
    // A Windows set announced without WMCO's os_id label (as the provider did before).
    let mut windows_without_os_id = windows.clone();
    windows_without_os_id["capacity.cluster-autoscaler.kubernetes.io/labels"] =
        json!("kubernetes.io/os=windows,kubernetes.io/arch=amd64");
    sim.create(autoscaled("win", 0, "0", "3", windows)).unwrap();
    sim.create(autoscaled("win-old", 0, "0", "3", windows_without_os_id))
        .unwrap();
    sim.create(autoscaled("linux", 0, "0", "3", capacity))
        .unwrap();

    let linux_pods: Vec<Pod> = (0..5)
        .map(|i| pending_pod(&format!("web-{i}"), json!({})))
        .collect();
    let grown = autoscaler
        .scale_up_for_pods(&linux_pods)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            grown.chosen.group.as_str(),
            grown.chosen.nodes,
            grown.replicas
        ),
        ("linux", 2, 2),
        "{grown:?}"
    );
    assert_eq!(
        grown
            .options
            .iter()
            .map(|o| o.group.as_str())
            .collect::<Vec<_>>(),
        ["linux"],
        "the Windows template's taint keeps Linux pods off it"
    );
    assert_eq!(replicas(&client, "win").await, Some(0));

    // A Windows workload selecting the nodes WMCO labels: only the set announcing the label runs it.
    let windows_pod = pending_pod(
        "iis",
        json!({"nodeSelector": {"kubernetes.io/os": "windows", "node.openshift.io/os_id": "Windows"},
            "tolerations": [{"key": "os", "operator": "Equal", "value": "Windows", "effect": "NoSchedule"}]}),
    );
    let grown = autoscaler
        .scale_up_for_pods(std::slice::from_ref(&windows_pod))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((grown.chosen.group.as_str(), grown.replicas), ("win", 1));
    assert_eq!(
        grown
            .options
            .iter()
            .map(|o| o.group.as_str())
            .collect::<Vec<_>>(),
        ["win"],
        "a template without node.openshift.io/os_id cannot run it"
    );
    assert_eq!(replicas(&client, "win").await, Some(1));
    assert_eq!(replicas(&client, "win-old").await, Some(0));
    assert_eq!(replicas(&client, "linux").await, Some(2));

    // Nothing runs a pod that fits no template.
    let huge = serde_json::from_value::<Pod>(
        json!({"metadata": {"name": "huge"}, "spec": {"containers": [
        {"name": "a", "resources": {"requests": {"cpu": "64"}}}]}}),
    )
    .unwrap();
    assert!(
        autoscaler
            .scale_up_for_pods(&[huge])
            .await
            .unwrap()
            .is_none()
    );
    sim.shutdown().await;
}
