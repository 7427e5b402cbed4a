//! Machines the Go provider (openshift/machine-api-provider-nutanix) made, taken over: as it
//! leaves them (its providerStatus from [`crate::api::go_provider_status`], its labels and annotations
//! from `pkg/actuators/machine/reconciler.go` `updateMachineWithVMState`, its providerID
//! `nutanix://<uuid>` from `setProviderID`) and its VMs as `vm.go` `createVM` makes them: named
//! after the Machine, no description, the cluster's category from `utils.go` `addCategories`.

use pretty_assertions::assert_eq;

use super::*;
use crate::api::go_provider_status;

const GO_VM: &str = "5c867413-e578-4052-8499-4eda74b868b4";

/// A VM as the Go provider's `createVM` makes it, made at `created`, `owned` carrying the
/// cluster's category.
fn go_vm(world: &mut World, uuid: &str, created: &str, owned: bool) {
    let categories = if owned {
        json!({"kubernetes-io-cluster-ocp-7x2kq": "owned"})
    } else {
        json!({})
    };
    world.vms.insert(
        uuid.to_owned(),
        json!({
            "metadata": {"kind": "vm", "uuid": uuid, "creation_time": created,
                         "categories": categories},
            "spec": {"name": NAME, "resources": {"power_state": "ON",
                     "nic_list": [{"subnet_reference": {"kind": "subnet", "uuid": SUBNET}}]}},
            "status": {"state": "COMPLETE",
                       "cluster_reference": {"kind": "cluster", "uuid": CLUSTER, "name": "pe-1"},
                       "resources": {"power_state": "ON", "hypervisor_type": "AHV",
                           "nic_list": [{"subnet_reference": {"kind": "subnet", "uuid": SUBNET},
                                         "ip_endpoint_list": [{"ip": "10.0.0.7", "type": "ASSIGNED"}]}]}}
        }),
    );
}

/// The Machine as the Go provider leaves a Running one, linked to its Node; `provider_status`
/// as it wrote it. Without a providerID it is left as it was before its VM was recorded:
/// Provisioning, no addresses.
fn go_running_machine(world: &mut World, provider_status: Value, provider_id: Option<&str>) {
    let machine = &mut world.machine;
    machine["metadata"]["finalizers"] = json!(["machine.machine.openshift.io"]);
    let labels = &mut machine["metadata"]["labels"];
    labels["machine.openshift.io/zone"] = json!("pe-1");
    labels["machine.openshift.io/instance-type"] = json!("AHV");
    machine["metadata"]["annotations"] = json!({
        "machine.openshift.io/instance-state": "COMPLETE",
        "machine.openshift.io/instance-power-state": "ON"
    });
    if let Some(id) = provider_id {
        machine["spec"]["providerID"] = json!(id);
    }
    machine["status"] = json!({
        "phase": "Running",
        "lastUpdated": "2026-01-01T00:05:00Z",
        // `machine_scope.go` `buildNodeAddresses`: the sorted IPs, then the VM's name.
        "addresses": [
            {"type": "InternalIP", "address": "10.0.0.7"},
            {"type": "InternalDNS", "address": NAME},
            {"type": "Hostname", "address": NAME}
        ],
        "providerStatus": provider_status
    });
    if provider_id.is_none() {
        machine["status"]["phase"] = json!("Provisioning");
        machine["status"]["addresses"] = json!([]);
    }
    world.link_node();
    world.nodes.insert(
        "node-0".into(),
        json!({"metadata": {"name": "node-0"},
               "spec": {"providerID": provider_id.unwrap_or_default()}}),
    );
}

fn prism_writes(log: &[String]) -> Vec<&String> {
    log.iter()
        .filter(|step| {
            [
                "reserve",
                "create",
                "clone",
                "deploy",
                "follow-up",
                "DELETE",
            ]
            .iter()
            .any(|write| step.starts_with(write))
        })
        .collect()
}

#[test]
fn a_running_machine_of_the_go_provider_stays_running_with_no_prism_write() {
    for (shape, provider_status, vm_uuid) in go_provider_status::all(GO_VM) {
        let Some(vm_uuid) = vm_uuid else { continue };
        let mut world = World::new("image");
        go_vm(&mut world, GO_VM, "2026-01-01T00:00:10Z", true);
        let provider_id = format!("nutanix://{vm_uuid}");
        go_running_machine(&mut world, provider_status, Some(&provider_id));
        let mut log = Vec::new();
        for _ in 0..3 {
            let (steps, outcome) = world.steps();
            assert!(
                !matches!(outcome.next, Some(Next::Retry(_))),
                "{shape}: {outcome:?}"
            );
            log.extend(steps);
            world.tick();
        }
        assert_eq!(prism_writes(&log), Vec::<&String>::new(), "{shape}");
        assert_eq!(world.phase(), phase::RUNNING, "{shape}");
        let status = world.status();
        assert_eq!(status.vm_uuid.as_deref(), Some(GO_VM), "{shape}");
        assert_eq!(world.machine["spec"]["providerID"], json!(provider_id));
        assert_eq!(world.machine["status"]["nodeRef"]["name"], "node-0");
        assert_eq!(world.vms.len(), 1, "{shape}");
        // Its conditions are the Go provider's types, now with this controller's messages;
        // none lost its place, none got a time it never had.
        let types: Vec<&str> = status.conditions.iter().map(|c| c.type_.as_str()).collect();
        assert!(
            types.contains(&"MachineInstanceReady"),
            "{shape}: {types:?}"
        );
    }
}

#[test]
fn a_running_machine_of_the_go_provider_is_written_only_where_the_two_differ() {
    let mut world = World::new("image");
    go_vm(&mut world, GO_VM, "2026-01-01T00:00:10Z", true);
    go_running_machine(
        &mut world,
        go_provider_status::running(GO_VM, false),
        Some(&format!("nutanix://{GO_VM}")),
    );
    let before = world.machine.clone();
    let (first, _) = world.steps();
    assert_eq!(
        first,
        strings(&["env", "list Vm", "addresses", "node", "write status"]),
        "one status write, no metadata write, no Prism call but the shared listing"
    );
    // The one write, and its only differences (docs/migration.md, "What changes on a taken-over
    // Machine"): this controller's providerStatus conditions (CamelCase reasons, as
    // `metav1.Condition` requires, the VM's state in the message, `MachineCreation` added),
    // `lastUpdated`, and MAO's `InstanceExists`, which MAO itself writes on every update of
    // such a Machine on a real cluster.
    let diff = crate::machine::status::merge_diff(&before, &world.machine).unwrap();
    assert_eq!(
        diff.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["status"]
    );
    let status = diff["status"].as_object().unwrap();
    let mut changed: Vec<&String> = status.keys().collect();
    changed.sort();
    assert_eq!(changed, ["conditions", "lastUpdated", "providerStatus"]);
    assert_eq!(
        status["providerStatus"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        ["conditions"]
    );
    let ready = world
        .status()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "MachineInstanceReady");
    assert_eq!(ready.map(|c| c.status), Some("True".to_owned()));

    world.tick();
    let (steps, _) = world.steps();
    assert!(
        !steps.iter().any(|step| step.starts_with("write")),
        "steady after one reconcile: {steps:?}"
    );
}

#[test]
fn a_go_provider_vm_never_recorded_is_adopted_by_name_never_made_twice() {
    // The Go provider's crash window: its VM made, vmUUID not yet written. With a providerID
    // (written in the same patch as vmUUID, so seen only if another writer set it) and without.
    for provider_id in [Some(format!("nutanix://{GO_VM}")), None] {
        let mut world = World::new("image");
        go_vm(&mut world, GO_VM, "2026-01-01T00:00:10Z", true);
        go_running_machine(
            &mut world,
            go_provider_status::create_failed(),
            provider_id.as_deref(),
        );
        if provider_id.is_none() {
            world.machine["status"]["phase"] = json!("Provisioning");
            world.machine["status"]["addresses"] = json!([]);
        }
        let (_, outcome) = world.steps();
        assert_eq!(outcome.events, ["Adopted"], "{provider_id:?}");
        assert_eq!(world.status().vm_uuid.as_deref(), Some(GO_VM));
        world.run_until(6, |w| w.phase() == phase::RUNNING);
        assert_eq!(world.vms.len(), 1, "no second VM: {provider_id:?}");
        assert_ne!(world.phase(), phase::FAILED);
    }
}

#[test]
fn only_a_vm_the_go_provider_would_have_made_is_adopted_by_name() {
    // Older than the Machine (another cluster's, or a VM renamed since), or without the
    // cluster's category: not this Machine's. The Machine has no providerID: a VM is made.
    for (created, owned) in [
        ("2025-06-01T00:00:00Z", true),
        ("2026-01-01T00:00:10Z", false),
    ] {
        let mut world = World::new("image");
        go_vm(&mut world, "foreign", created, owned);
        world.run_until(8, |w| w.phase() == phase::PROVISIONED);
        assert_ne!(
            world.status().vm_uuid.as_deref(),
            Some("foreign"),
            "{created} owned {owned}"
        );
        assert_eq!(world.vms.len(), 2, "its own VM is made: {created} {owned}");
    }
}

#[test]
fn two_vms_the_go_provider_could_have_made_are_an_error_on_the_machine_not_a_guess() {
    for provider_id in [Some(format!("nutanix://{GO_VM}")), None] {
        let mut world = World::new("image");
        go_vm(&mut world, GO_VM, "2026-01-01T00:00:10Z", true);
        go_vm(&mut world, "second", "2026-01-01T00:00:20Z", true);
        go_running_machine(
            &mut world,
            go_provider_status::create_failed(),
            provider_id.as_deref(),
        );
        let mut log = Vec::new();
        for _ in 0..3 {
            let (steps, outcome) = world.steps();
            log.extend(steps);
            let Some(Next::Retry(Failure::AmbiguousVm(message))) = outcome.next else {
                panic!("{provider_id:?}: {outcome:?}");
            };
            assert!(
                message.contains(GO_VM) && message.contains("second"),
                "{message}"
            );
            let event = if provider_id.is_some() {
                "FailedUpdate"
            } else {
                "FailedCreate"
            };
            assert_eq!(outcome.events, [event]);
            world.tick();
        }
        assert_eq!(prism_writes(&log), Vec::<&String>::new());
        assert_eq!(world.vms.len(), 2);
        assert_eq!(world.status().vm_uuid, None);
        assert_ne!(world.phase(), phase::FAILED, "{provider_id:?}");
    }
}

#[test]
fn a_go_provider_machine_never_recorded_is_deleted_with_its_vm() {
    let mut world = World::new("image");
    go_vm(&mut world, GO_VM, "2026-01-01T00:00:10Z", true);
    go_running_machine(
        &mut world,
        go_provider_status::create_failed(),
        Some(&format!("nutanix://{GO_VM}")),
    );
    world.delete();
    world.run_until(20, World::finalized);
    assert!(world.vms.is_empty(), "no VM left: {:?}", world.log);
}
