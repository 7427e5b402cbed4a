//! The sandbox's scenario, step by step, with what each step must have produced: Machines,
//! VMs (boot configuration, guest customization), Nodes (capacity and labels against the
//! MachineSet's capacity annotations), CSR approvals, the drain on scale-down, and nothing left
//! at the end.

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use nutanix_machine_controller::api::Machine;
use nutanix_machine_controller::api::quantity::parse_units;
use nutanix_machine_controller::plan::vm::unattend::powershell_body;
use sandbox::approver::Decision;
use sandbox::autoscaler::{MAX_SIZE_ANNOTATION, MIN_SIZE_ANNOTATION, node_template};
use sandbox::machine_autoscaler::OWNER_ANNOTATION;
use sandbox::manifests::{LINUX_SET, WINDOWS_IMAGE_SET, WINDOWS_TEMPLATE_SET};
use sandbox::scenario::{Scenario, ScenarioOptions, scale_down_candidate};
use sandbox::world::{self, ControlPlaneChoice, LINUX_USER_DATA_MARKER, Snapshot, World};
use serde_json::json;

use crate::support::{
    TIMEOUT, VM_NETWORK, addresses, admin_password, assert_no_secrets_logged, element, in_network,
    landed_script, options, real_control_plane, start, vm_uuid, wait_event,
};

/// What every joined Machine must show, whatever its kind; returns its Node.
fn check_machine(world: &World, snapshot: &Snapshot, machine: &Machine) -> Node {
    let name = machine.name_any();
    let uuid = vm_uuid(machine);
    assert_eq!(
        uuid,
        uuid.to_lowercase(),
        "{name}: providerID in lower case"
    );
    let vm = snapshot
        .vm(&name)
        .unwrap_or_else(|| panic!("{name}: a VM named after the Machine"));
    assert_eq!(vm.uuid, uuid, "{name}: providerID names its VM");
    let ips = addresses(machine, "InternalIP");
    assert!(
        in_network(&ips[0], VM_NETWORK),
        "{name}: the first InternalIP {ips:?} is the primary NIC's"
    );
    assert_eq!(addresses(machine, "InternalDNS"), [name.as_str()]);
    assert_eq!(addresses(machine, "Hostname"), [name.as_str()]);

    let node = snapshot.node(&name).expect("a Node named as the Machine");
    let node_ips: Vec<String> = node
        .status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .unwrap()
        .iter()
        .filter(|a| a.type_ == "InternalIP")
        .map(|a| a.address.clone())
        .collect();
    assert_eq!(node_ips, [ips[0].clone()], "{name}: the Node's IP");

    // Both of the kubelet's CSRs were approved by the approver, for this Machine.
    let join = snapshot.join(&name).expect("a join");
    for csr in [&join.client_csr, &join.serving_csr] {
        let csr = csr.as_ref().expect("a CSR");
        match world.approver().decision(csr) {
            Some(Decision::Approved {
                machine: Some(m), ..
            }) => assert_eq!(m, name),
            other => panic!("{name}: CSR {csr}: {other:?}"),
        }
    }
    node.clone()
}

/// The Node carries what the MachineSet's capacity annotations promised the autoscaler.
fn check_capacity(snapshot: &Snapshot, set: &str, node: &Node) {
    let template = node_template(snapshot.machine_set(set).unwrap()).unwrap();
    let capacity = node.status.as_ref().unwrap().capacity.as_ref().unwrap();
    let cpu: u64 = capacity["cpu"].0.parse().unwrap();
    assert_eq!(cpu * 1000, template.cpu_millis, "{set}: CPU");
    assert_eq!(
        parse_units(&capacity["memory"].0).unwrap(),
        template.memory_bytes,
        "{set}: memory"
    );
    let labels = node.labels();
    // The template node's host name is its own (`buildGenericLabels`), never a real Node's.
    for (key, value) in template
        .labels
        .iter()
        .filter(|(key, _)| key.as_str() != "kubernetes.io/hostname")
    {
        assert_eq!(
            labels.get(key),
            Some(value),
            "{set}: the Node lacks the label {key}={value} the autoscaler simulates"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scenario_holds_step_by_step() {
    scenario_holds_step_by_step(start(options("scenario")).await).await;
}

/// The same scenario with the same assertions on the real control plane: etcd, kube-apiserver,
/// kube-controller-manager, the machine-api-operator's MachineSet controller, webhooks and
/// nodelink, our controller under its ServiceAccount and roles.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scenario_holds_step_by_step_on_the_real_control_plane() {
    let Some(binaries) = real_control_plane() else {
        return;
    };
    let mut options = options("scenario-real");
    options.control_plane = ControlPlaneChoice::Real(binaries);
    scenario_holds_step_by_step(start(options).await).await;
}

async fn scenario_holds_step_by_step(world: World) {
    let mut scenario = Scenario::new(
        &world,
        ScenarioOptions {
            step_timeout: TIMEOUT,
            ..ScenarioOptions::default()
        },
    );
    let mut admin_passwords = Vec::new();

    // 1. Capacity annotations on every set; the MachineAutoscaler's bounds kept beside them.
    scenario.machine_sets_annotated().await.unwrap();
    let snapshot = world.snapshot();
    let windows_set = snapshot.machine_set(WINDOWS_IMAGE_SET).unwrap();
    let annotations = windows_set.annotations();
    assert_eq!(annotations[MIN_SIZE_ANNOTATION], "0");
    assert_eq!(annotations[MAX_SIZE_ANNOTATION], "4");
    assert_eq!(
        annotations[OWNER_ANNOTATION],
        format!("{}/{WINDOWS_IMAGE_SET}", world.namespace())
    );
    // The autoscaler would grow the Windows set for a Windows pod, from the provider's
    // annotations alone, and for no pod that selects Linux nodes.
    let pod = |name: &str, spec: serde_json::Value| -> Pod {
        let mut spec = spec;
        spec["containers"] =
            json!([{"name": "app", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]);
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
    };
    let pending = [
        pod(
            "windows-app",
            json!({"nodeSelector": {"kubernetes.io/os": "windows"},
                "tolerations": [{"key": "os", "value": "Windows", "effect": "NoSchedule"}]}),
        ),
        pod(
            "linux-app",
            json!({"nodeSelector": {"kubernetes.io/os": "linux"}}),
        ),
    ];
    let (options, chosen) = world.autoscaler().plan_for_pods(&pending).await.unwrap();
    let chosen = chosen.expect("a group for the Windows pod");
    assert_eq!(
        (chosen.group.as_str(), chosen.nodes, chosen.pods.as_slice()),
        (WINDOWS_IMAGE_SET, 1, ["windows-app".to_owned()].as_slice()),
        "{options:?}"
    );
    // A plain pod (no node selector, no toleration) never grows the Windows set: the provider
    // announces WMCO's taint os=Windows:NoSchedule in the set's capacity annotations.
    let (options, _) = world
        .autoscaler()
        .plan_for_pods(&[pod("plain-app", json!({}))])
        .await
        .unwrap();
    assert!(
        options
            .iter()
            .all(|option| option.group != WINDOWS_IMAGE_SET),
        "a Linux pod would grow the Windows set: {options:?}"
    );
    let windows = node_template(windows_set).unwrap();
    assert_eq!((windows.cpu_millis, windows.memory_bytes), (4000, 16 << 30));
    assert_eq!(windows.labels["kubernetes.io/os"], "windows");
    assert_eq!(windows.labels["kubernetes.io/arch"], "amd64");
    let linux = node_template(snapshot.machine_set(LINUX_SET).unwrap()).unwrap();
    assert_eq!(linux.labels["kubernetes.io/os"], "linux");

    // 2. The autoscaler scales the Windows image set from zero.
    let names = scenario
        .autoscaler_scale_up(WINDOWS_IMAGE_SET, 3)
        .await
        .unwrap();
    assert_eq!(names.len(), 3);
    let snapshot = world.snapshot();
    for name in &names {
        assert!(name.len() <= 15, "{name}: a Windows computer name");
        let machine = snapshot.machine(name).unwrap();
        let node = check_machine(&world, &snapshot, machine);
        check_capacity(&snapshot, WINDOWS_IMAGE_SET, &node);
        assert!(
            node.annotations()
                .contains_key(sandbox::node_agent::WMCO_VERSION_ANNOTATION),
            "{name}: configured by WMCO"
        );
        let uuid = vm_uuid(machine);
        // bootType UEFI (the example avoids SecureBoot with guest customization, which AHV
        // refuses: VMM-30102).
        let vm = world.admin().vm(&uuid).unwrap();
        let resources = &vm["spec"]["resources"];
        assert_eq!(resources["boot_config"]["boot_type"], "UEFI", "{name}");
        // The Go provider's customization: WMCO's user data unchanged as cloud-init, for the
        // image's cloudbase-init, with the Machine name in the meta data.
        let guest = world.admin().guest_customization(&uuid).unwrap();
        assert_eq!(guest.kind, "cloud_init", "{name}");
        assert_eq!(
            guest.user_data.as_deref(),
            Some(world::windows_user_data().as_str()),
            "{name}: WMCO's user data, unchanged"
        );
        let meta: serde_json::Value = serde_json::from_str(&guest.meta_data.unwrap()).unwrap();
        assert_eq!(meta["hostname"], name.as_str());
    }

    // 3. The template set, by hand.
    let names = scenario
        .scale_by_hand(WINDOWS_TEMPLATE_SET, 1)
        .await
        .unwrap();
    let snapshot = world.snapshot();
    let machine = snapshot.machine(&names[0]).unwrap();
    let node = check_machine(&world, &snapshot, machine);
    check_capacity(&snapshot, WINDOWS_TEMPLATE_SET, &node);
    let uuid = vm_uuid(machine);
    let vm = world.admin().vm(&uuid).unwrap();
    // Deployed from the template: its UEFI boot, the MachineSet's size; Sysprep, chosen by the
    // template's annotations (which survived the machine-api-operator's webhook).
    assert_eq!(vm["spec"]["resources"]["boot_config"]["boot_type"], "UEFI");
    assert_eq!(vm["spec"]["resources"]["memory_size_mib"], 16384);
    let xml = world
        .admin()
        .guest_customization(&uuid)
        .unwrap()
        .unattend_xml
        .unwrap();
    assert_eq!(element(&xml, "ComputerName"), Some(names[0].as_str()));
    assert_eq!(
        landed_script(&xml),
        powershell_body(world::windows_user_data().as_bytes()).unwrap(),
        "the script the unattend.xml lands is the user data's PowerShell"
    );
    admin_passwords.push(admin_password(&xml));

    // 4. The Linux set, by hand: cloud-init with the worker Ignition.
    let names = scenario.scale_by_hand(LINUX_SET, 1).await.unwrap();
    let snapshot = world.snapshot();
    let machine = snapshot.machine(&names[0]).unwrap();
    let node = check_machine(&world, &snapshot, machine);
    check_capacity(&snapshot, LINUX_SET, &node);
    let guest = world
        .admin()
        .guest_customization(&vm_uuid(machine))
        .unwrap();
    assert_eq!(guest.kind, "cloud_init");
    let user_data = guest.user_data.unwrap();
    assert!(user_data.contains(LINUX_USER_DATA_MARKER));
    assert!(user_data.contains("/etc/hostname"), "{user_data}");

    // 5. Static addresses: one more Linux Machine, its address from the pool, sent to Prism as
    // the NIC's ASSIGNED address.
    let (name, claimed) = scenario.static_address(LINUX_SET).await.unwrap();
    let snapshot = world.snapshot();
    check_machine(&world, &snapshot, snapshot.machine(&name).unwrap());
    assert!(claimed.starts_with("10.40.0."), "{claimed}");

    // 6. The autoscaler removes one Windows Node: a workload on it is evicted first.
    let snapshot = world.snapshot();
    let victim = scale_down_candidate(&snapshot, WINDOWS_IMAGE_SET).unwrap();
    let pods: Api<Pod> = Api::namespaced(world.client().clone(), world.namespace());
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "workload", "namespace": world.namespace()},
        "spec": {"nodeName": victim, "containers": [{"name": "app", "image": "registry.example/app:1"}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let scaled = scenario
        .autoscaler_scale_down(WINDOWS_IMAGE_SET)
        .await
        .unwrap();
    assert_eq!(scaled.machine, victim);
    assert_eq!(scaled.replicas, 2);
    assert!(
        pods.get_opt("workload").await.unwrap().is_none(),
        "the drain evicted the workload"
    );
    // The drain's end is told in the `Delete` event (MAO's `DrainSucceeded` is left out: each
    // event is an etcd write).
    wait_event(&world, &victim, "Delete", "Normal").await;
    let snapshot = world.snapshot();
    assert_eq!(
        snapshot
            .machine_set(WINDOWS_IMAGE_SET)
            .unwrap()
            .spec
            .replicas,
        Some(2)
    );

    // 7. Everything to zero (every claim released); then the whole run checked from the history.
    scenario.everything_to_zero().await.unwrap();
    scenario.final_checks(6).unwrap();
    let report = scenario.report(Ok(()));
    assert_eq!(report.steps.len(), 7);
    assert!(report.steps.iter().all(|s| s.succeeded));
    assert!(report.total_prism_calls() > 0);
    assert_no_secrets_logged(&world, &admin_passwords);
    world.shutdown().await;
}
