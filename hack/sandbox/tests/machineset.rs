//! The MachineSet replica controller against kube-sim: scaling through `/scale`, the delete
//! annotation, adoption of orphans, and the status it writes.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

mod common;

use common::{NS, eventually, kube, machine, machine_set, node};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use nutanix_machine_controller::api::{Machine, MachineSet};
use sandbox::machineset::{self, DELETE_MACHINE_ANNOTATION, MachineSetControllerConfig};
use serde_json::json;

async fn machines_of(client: &Client, set: &str) -> Vec<Machine> {
    let machines: Api<Machine> = Api::namespaced(client.clone(), NS);
    let mut list: Vec<Machine> = machines
        .list(&ListParams::default().labels(&format!(
            "machine.openshift.io/cluster-api-machineset={set}"
        )))
        .await
        .unwrap()
        .items;
    list.sort_by_key(|m| m.name_any());
    list
}

async fn scale(client: &Client, set: &str, replicas: i32) {
    let sets: Api<MachineSet> = Api::namespaced(client.clone(), NS);
    sets.patch_scale(
        set,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": replicas}})),
    )
    .await
    .unwrap();
}

async fn status_of(client: &Client, set: &str) -> serde_json::Value {
    let sets: Api<MachineSet> = Api::namespaced(client.clone(), NS);
    serde_json::to_value(sets.get(set).await.unwrap().status).unwrap()
}

#[tokio::test]
async fn scales_zero_three_one_deleting_the_annotated_machine_first() {
    let (sim, client) = kube().await;
    let controller = machineset::start(client.clone(), MachineSetControllerConfig::default());
    sim.create(machine_set("workers", 0)).unwrap();

    eventually("status of the empty set", || async {
        let status = status_of(&client, "workers").await;
        status["replicas"] == 0
            && status["observedGeneration"] == 1
            && status["labelSelector"] == "machine.openshift.io/cluster-api-machineset=workers"
    })
    .await;

    scale(&client, "workers", 3).await;
    eventually("three Machines", || async {
        machines_of(&client, "workers").await.len() == 3
    })
    .await;
    let created = machines_of(&client, "workers").await;
    let set_uid = Api::<MachineSet>::namespaced(client.clone(), NS)
        .get("workers")
        .await
        .unwrap()
        .uid()
        .unwrap();
    for m in &created {
        assert!(m.name_any().starts_with("workers-"), "{}", m.name_any());
        let owner = &m.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.uid.as_str(), owner.controller),
            (set_uid.as_str(), Some(true))
        );
        assert_eq!(
            m.labels()["machine.openshift.io/cluster-api-cluster"],
            "sandbox"
        );
        assert_eq!(
            m.spec.provider_spec.value.as_ref().unwrap()["memorySize"],
            "8Gi"
        );
    }
    eventually("status.replicas 3, none ready", || async {
        let status = status_of(&client, "workers").await;
        status["replicas"] == 3
            && status["fullyLabeledReplicas"] == 3
            && status["readyReplicas"] == 0
            && status["observedGeneration"] == 2
    })
    .await;

    // Give every Machine a Ready Node, as nodelink would.
    let machines: Api<Machine> = Api::namespaced(client.clone(), NS);
    for (i, m) in created.iter().enumerate() {
        let name = m.name_any();
        sim.create(node(&name, &format!("10.0.0.{}", i + 10), ""))
            .unwrap();
        machines
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"nodeRef": {"kind": "Node", "name": name}}})),
            )
            .await
            .unwrap();
    }
    eventually("three ready and available replicas", || async {
        let status = status_of(&client, "workers").await;
        status["readyReplicas"] == 3 && status["availableReplicas"] == 3
    })
    .await;

    // Without the annotation the first two by name would go; the annotated last one must go
    // first, leaving the middle one.
    let annotated = created[2].name_any();
    machines
        .patch(
            &annotated,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {DELETE_MACHINE_ANNOTATION: "2026-01-01T00:00:00Z"}}})),
        )
        .await
        .unwrap();
    scale(&client, "workers", 1).await;
    eventually("one Machine left", || async {
        machines_of(&client, "workers").await.len() == 1
    })
    .await;
    let left = machines_of(&client, "workers").await;
    assert_eq!(left[0].name_any(), created[1].name_any());
    eventually("status.replicas 1", || async {
        let status = status_of(&client, "workers").await;
        status["replicas"] == 1 && status["readyReplicas"] == 1 && status["observedGeneration"] == 3
    })
    .await;

    controller.stop().await;
    sim.shutdown().await;
}

#[tokio::test]
async fn adopts_matching_orphans_and_leaves_other_machines_alone() {
    let (sim, client) = kube().await;
    let labels = json!({"machine.openshift.io/cluster-api-machineset": "workers",
        "machine.openshift.io/cluster-api-cluster": "sandbox"});
    sim.create(machine("orphan", labels.clone())).unwrap();
    let mut foreign = machine("foreign", labels);
    foreign["metadata"]["ownerReferences"] = json!([{"apiVersion": "machine.openshift.io/v1beta1",
        "kind": "MachineSet", "name": "other", "uid": "0000", "controller": true}]);
    sim.create(foreign).unwrap();
    sim.create(machine("unrelated", json!({"app": "x"})))
        .unwrap();

    let controller = machineset::start(client.clone(), MachineSetControllerConfig::default());
    sim.create(machine_set("workers", 2)).unwrap();
    let machines: Api<Machine> = Api::namespaced(client.clone(), NS);
    eventually("orphan adopted and one Machine created", || async {
        let orphan = machines.get("orphan").await.unwrap();
        let adopted = orphan.metadata.owner_references.is_some_and(|o| {
            o.iter()
                .any(|r| r.name == "workers" && r.controller == Some(true))
        });
        let created = machines
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter(|m| m.name_any().starts_with("workers-"))
            .count();
        adopted && created == 1
    })
    .await;
    eventually("status counts the adopted Machine", || async {
        status_of(&client, "workers").await["replicas"] == 2
    })
    .await;
    let foreign = machines.get("foreign").await.unwrap();
    assert_eq!(foreign.metadata.owner_references.unwrap()[0].name, "other");
    assert!(
        machines
            .get("unrelated")
            .await
            .unwrap()
            .metadata
            .owner_references
            .is_none()
    );

    controller.stop().await;
    sim.shutdown().await;
}
