//! The day of the switch, on the real control plane: Machines, Nodes and VMs as the Go provider
//! (openshift/machine-api-provider-nutanix, main 246b53b) leaves them, taken over by ours.
//!
//! What the Go provider leaves, from its source:
//! - the VM (`pkg/actuators/machine/vm.go` `createVM`): a v3 `POST /vms` named after the Machine,
//!   no description, power ON, `hardware_clock_timezone: UTC`, the image's disk, the subnets'
//!   NICs, the user data as cloud-init, and the category `kubernetes-io-cluster-<infraID>: owned`
//!   (`utils.go` `addCategories`), sent here as that body to prism-mock's v3 API;
//! - the Machine (`machine_scope.go` `patchMachine`: the spec and metadata patch first, then the
//!   status): the providerID `nutanix://<uuid>` (`reconciler.go` `setProviderID`), the region,
//!   zone and instance-type labels and the instance-state and power-state annotations
//!   (`updateMachineWithVMState`), the addresses (`buildNodeAddresses`: the sorted IPs, then
//!   InternalDNS and Hostname, the VM's name), and the providerStatus of
//!   `nutanix_machine_controller::api` tests' shapes (no `lastTransitionTime`, no apiVersion);
//!   MAO's finalizer and phase;
//! - the Node: registered by its kubelet (the sandbox's node agent), linked by MAO's nodelink,
//!   its providerID `nutanix://<uuid>` as Nutanix's cloud-controller-manager sets it
//!   (nutanix-cloud-native/cloud-provider-nutanix `generateProviderID`).
//!
//! Ours is stopped while these are written (the Go provider's pod is gone), then started as MAO
//! starts it. The Machines are standalone (no MachineSet): MAO's MachineSet controller, adopting
//! Machines made before their set, may act on a cache that does not show them yet and create
//! Machines of its own, whose creates would be Prism writes this test must not see. The real Go
//! provider's test (`the_real_go_providers_…`) scales its MachineSets.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use nutanix_machine_controller::api::Machine;
use prism_mock::RequestRecord;
use sandbox::manifests;
use sandbox::node_agent::NodeAgentConfig;
use sandbox::real_cluster;
use serde_json::{Value, json};

use crate::real_cluster::{Provider, RealWorld, running_and_linked, scale};

const NAMESPACE: &str = sandbox::MACHINE_API_NAMESPACE;
/// The MachineSet that adopts the Go provider's Machines.
const GO_SET: &str = "go-workers";
/// The condition reason only ours writes (the Go provider's is "Machine instance is ready").
const OUR_READY_REASON: &str = "MachineInstanceReady";

/// prism-mock's seed as the example Linux MachineSet names it: the cluster, image and subnet.
pub(crate) struct Seed {
    cluster: String,
    image: String,
    subnet: String,
}

pub(crate) async fn seed(world: &RealWorld) -> Seed {
    let client = prism(world);
    let uuid_of = |found: Option<Value>, what: &str| -> String {
        found
            .and_then(|entity| entity["metadata"]["uuid"].as_str().map(str::to_owned))
            .unwrap_or_else(|| panic!("prism-mock's seed has {what}"))
    };
    Seed {
        cluster: uuid_of(list_named(&client, "clusters", "pe-1").await, "pe-1"),
        image: uuid_of(
            list_named(&client, "images", "rhcos-4.20").await,
            "rhcos-4.20",
        ),
        subnet: uuid_of(
            list_named(&client, "subnets", "vm-network").await,
            "vm-network",
        ),
    }
}

/// A client of prism-mock's v3 API, as prism-go-client is to the Go provider.
struct Prism {
    http: reqwest::Client,
    base: String,
    username: String,
    password: String,
}

fn prism(world: &RealWorld) -> Prism {
    let ca = reqwest::Certificate::from_pem(world.mock.ca_pem().unwrap_or_default().as_bytes())
        .expect("prism-mock's CA");
    let _ = rustls::crypto::ring::default_provider().install_default();
    Prism {
        http: reqwest::Client::builder()
            .add_root_certificate(ca)
            .build()
            .expect("an HTTPS client"),
        base: format!("https://{}/api/nutanix/v3", world.mock.addr()),
        username: world.mock.credentials().username.clone(),
        password: world.mock.credentials().password.clone(),
    }
}

impl Prism {
    async fn post(&self, path: &str, body: &Value) -> Value {
        let answer = self
            .http
            .post(format!("{}/{path}", self.base))
            .basic_auth(&self.username, Some(&self.password))
            .json(body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {path}: {e}"));
        let status = answer.status();
        let body: Value = answer.json().await.unwrap_or(Value::Null);
        assert!(status.is_success(), "POST {path}: {status} {body}");
        body
    }
}

async fn list_named(client: &Prism, kind: &str, name: &str) -> Option<Value> {
    let kind_name = kind.trim_end_matches('s');
    let body = json!({"kind": kind_name, "length": 500});
    let listed = client.post(&format!("{kind}/list"), &body).await;
    listed["entities"]
        .as_array()?
        .iter()
        .find(|entity| entity["spec"]["name"] == name || entity["status"]["name"] == name)
        .cloned()
}

/// A VM as the Go provider's `createVM` makes it for Machine `name`; its UUID.
pub(crate) async fn go_vm(world: &RealWorld, seed: &Seed, name: &str) -> String {
    let user_data = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        b"{\"ignition\":{\"version\":\"3.2.0\"}}",
    );
    let body = json!({
        "api_version": "3.1.0",
        "metadata": {
            "kind": "vm",
            "spec_version": 1,
            "categories": {format!("kubernetes-io-cluster-{}", manifests::INFRASTRUCTURE_ID): "owned"}
        },
        "spec": {
            "name": name,
            "cluster_reference": {"kind": "cluster", "uuid": seed.cluster},
            "resources": {
                "power_state": "ON",
                "hardware_clock_timezone": "UTC",
                "num_vcpus_per_socket": 1,
                "num_sockets": 4,
                "memory_size_mib": 16384,
                "nic_list": [{"subnet_reference": {"kind": "subnet", "uuid": seed.subnet}}],
                "disk_list": [{
                    "device_properties": {"device_type": "DISK",
                                          "disk_address": {"adapter_type": "SCSI", "device_index": 0}},
                    "data_source_reference": {"kind": "image", "uuid": seed.image},
                    "disk_size_mib": 122880
                }],
                "guest_customization": {"cloud_init": {"user_data": user_data}, "is_overridable": true}
            }
        }
    });
    let created = prism(world).post("vms", &body).await;
    created["metadata"]["uuid"]
        .as_str()
        .expect("the create's answer names the VM")
        .to_owned()
}

/// The Machine as the Go provider and MAO leave it once it runs `uuid` (`None`: in the Go
/// provider's crash window, its spec patched, its status not: Provisioning, no vmUUID).
pub(crate) async fn go_machine(
    client: &Client,
    name: &str,
    uuid: &str,
    address: &str,
    provider_status: Value,
    recorded: bool,
) {
    let linux_set = manifests::example("MachineSet", manifests::LINUX_SET).unwrap();
    let template = &linux_set["spec"]["template"];
    let mut labels: BTreeMap<String, String> =
        serde_json::from_value(template["metadata"]["labels"].clone()).unwrap();
    labels.insert(manifests::MACHINE_SET_LABEL.into(), GO_SET.into());
    labels.insert("machine.openshift.io/region".into(), "prism-central".into());
    labels.insert("machine.openshift.io/zone".into(), "pe-1".into());
    labels.insert("machine.openshift.io/instance-type".into(), "AHV".into());
    real_cluster::create(
        client,
        json!({
            "apiVersion": "machine.openshift.io/v1beta1",
            "kind": "Machine",
            "metadata": {
                "name": name, "namespace": NAMESPACE, "labels": labels,
                "annotations": {
                    "machine.openshift.io/instance-state": "COMPLETE",
                    "machine.openshift.io/instance-power-state": "ON"
                },
                "finalizers": ["machine.machine.openshift.io"]
            },
            "spec": {
                "providerSpec": template["spec"]["providerSpec"],
                "providerID": format!("nutanix://{uuid}")
            }
        }),
    )
    .await
    .unwrap_or_else(|e| panic!("Machine {name}: {e}"));
    let status = if recorded {
        json!({
            "phase": "Running",
            "addresses": [
                {"type": "InternalIP", "address": address},
                {"type": "InternalDNS", "address": name},
                {"type": "Hostname", "address": name}
            ],
            "providerStatus": provider_status
        })
    } else {
        json!({"phase": "Provisioning", "providerStatus": provider_status})
    };
    let machines: Api<Machine> = Api::namespaced(client.clone(), NAMESPACE);
    machines
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status})),
        )
        .await
        .unwrap_or_else(|e| panic!("Machine {name} status: {e}"));
}

/// A VM's address as its guest reports it, once it has booted.
pub(crate) async fn booted(world: &mut RealWorld, uuid: &str) -> String {
    world
        .wait_for(&format!("VM {uuid} boots with an address"), async |world| {
            let vm = world.mock.admin().vm_summary(uuid)?;
            (vm.power_state == "ON" && vm.listed)
                .then(|| vm.addresses.first().cloned())
                .flatten()
        })
        .await
}

/// Waits until nodelink linked `name` to its Node, then gives the Node its providerID as the
/// cloud-controller-manager does.
async fn linked(world: &mut RealWorld, name: &str, uuid: &str) {
    world
        .wait_for(&format!("{name} linked to its Node"), async |world| {
            let machine = world.machines().get(name).await.ok()?;
            machine.status?.node_ref.map(|_| ())
        })
        .await;
    let nodes: Api<Node> = Api::all(world.admin.clone());
    nodes
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"providerID": format!("nutanix://{uuid}")}})),
        )
        .await
        .unwrap_or_else(|e| panic!("Node {name}: {e}"));
}

/// The Prism writes among `requests`: anything but a read or a listing.
fn prism_writes(requests: &[RequestRecord]) -> Vec<String> {
    requests
        .iter()
        .filter(|r| r.method != "GET" && !r.endpoint.ends_with("/list"))
        .map(|r| format!("{} {} -> {}", r.method, r.endpoint, r.status))
        .collect()
}

/// What of a Machine the takeover must leave as it was.
fn kept(machine: &Machine) -> Value {
    let status = machine.status.clone().unwrap_or_default();
    json!({
        "labels": machine.labels(),
        "annotations": machine.annotations(),
        "finalizers": machine.finalizers(),
        "providerID": machine.spec.provider_id,
        "phase": status.phase,
        "addresses": status.addresses,
        "nodeRef": status.node_ref,
        "vmUUID": machine.provider_status().ok().and_then(|s| s.vm_uuid),
    })
}

/// The notes of the events with `reason` about `name`.
async fn event_notes(client: &Client, name: &str, reason: &str) -> Vec<String> {
    let events: Api<Event> = Api::namespaced(client.clone(), NAMESPACE);
    let listed = events.list(&ListParams::default()).await;
    listed
        .map(|list| list.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some(reason)
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
        })
        .filter_map(|e| e.note)
        .collect()
}

/// The notes of the `FailedUpdate` events about `name`, once there is one.
async fn failed_update_notes(world: &mut RealWorld, name: &str) -> String {
    world
        .wait_for(
            &format!("a FailedUpdate event about {name}"),
            async |world| {
                let notes = event_notes(&world.admin, name, "FailedUpdate").await;
                (!notes.is_empty()).then(|| notes.join("\n"))
            },
        )
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn machines_the_go_provider_made_stay_running_and_linked_with_no_prism_write() {
    let Some(mut world) = RealWorld::start("takeover", NodeAgentConfig::default()).await else {
        return;
    };
    world.provider.kill().await;
    let admin = world.admin.clone();
    let seed = seed(&world).await;
    let names = ["go-workers-a1b2c", "go-workers-d3e4f"];
    let mut vms = Vec::new();
    for name in names {
        vms.push(go_vm(&world, &seed, name).await);
    }
    for (name, uuid) in names.iter().zip(&vms) {
        let address = booted(&mut world, uuid).await;
        let shape = nutanix_machine_controller::api::go_provider_status::running(uuid, false);
        go_machine(&admin, name, uuid, &address, shape, true).await;
    }
    for (name, uuid) in names.iter().zip(&vms) {
        linked(&mut world, name, uuid).await;
    }
    let before = machine_states(&world).await;
    assert_eq!(before.len(), 2);
    let calls_before = world.mock.admin().request_count();

    world.provider.restart(2);
    world
        .wait_for("ours reconciled both Machines", async |world| {
            let list = world.machines().list(&ListParams::default()).await.ok()?;
            let ours = list.items.iter().filter(|machine| {
                machine.provider_status().ok().is_some_and(|status| {
                    status
                        .conditions
                        .iter()
                        .any(|c| c.reason == OUR_READY_REASON)
                })
            });
            (ours.count() == 2).then_some(())
        })
        .await;
    // Long enough for a wrong decision to show (the tests' poll interval is well under this).
    tokio::time::sleep(Duration::from_secs(5)).await;

    let after = machine_states(&world).await;
    assert_eq!(
        after, before,
        "phase, addresses, providerID, labels, annotations, Node link kept"
    );
    for name in names {
        // Its recorded VM was read from the Go provider's providerStatus, never looked for.
        assert_eq!(
            event_notes(&admin, name, "Adopted").await,
            Vec::<String>::new()
        );
    }
    let machines = world.machines().list(&ListParams::default()).await.unwrap();
    assert!(
        machines
            .items
            .iter()
            .filter(|m| running_and_linked(m))
            .count()
            >= 2
    );
    let requests = world.mock.admin().requests_since(calls_before);
    assert_eq!(
        prism_writes(&requests),
        Vec::<String>::new(),
        "no Prism write"
    );
    assert_eq!(world.mock.admin().vms().len(), world.seed_vms + 2);

    // Deleted (as a scale-down deletes them): ours drains, deletes the VMs, and no VM is left.
    for name in names {
        world
            .machines()
            .delete(name, &Default::default())
            .await
            .unwrap_or_else(|e| panic!("delete {name}: {e}"));
    }
    world.wait_until_all_gone().await;
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_go_provider_vm_it_never_recorded_is_adopted_and_two_are_an_error_not_a_guess() {
    let Some(mut world) = RealWorld::start("takeover_unrecorded", NodeAgentConfig::default()).await
    else {
        return;
    };
    world.provider.kill().await;
    let admin = world.admin.clone();
    let seed = seed(&world).await;
    // The crash window: its VM made, its spec patched (providerID), its status not.
    let adopted = "go-workers-g5h6i";
    let uuid = go_vm(&world, &seed, adopted).await;
    booted(&mut world, &uuid).await;
    let failed = nutanix_machine_controller::api::go_provider_status::create_failed();
    go_machine(&admin, adopted, &uuid, "", failed.clone(), false).await;
    // Two VMs of one Machine's name: which is its VM cannot be told.
    let ambiguous = "go-workers-j7k8l";
    let first = go_vm(&world, &seed, ambiguous).await;
    let second = go_vm(&world, &seed, ambiguous).await;
    booted(&mut world, &first).await;
    booted(&mut world, &second).await;
    go_machine(&admin, ambiguous, &first, "", failed, false).await;
    let calls_before = world.mock.admin().request_count();

    world.provider.restart(2);
    world
        .wait_for("the unrecorded VM adopted and Running", async |world| {
            let machine = world.machines().get(adopted).await.ok()?;
            let status = machine.provider_status().ok()?;
            (status.vm_uuid.as_deref() == Some(uuid.as_str())
                && machine.status.as_ref()?.phase.as_deref() == Some("Running"))
            .then_some(())
        })
        .await;
    let events = failed_update_notes(&mut world, ambiguous).await;
    assert!(
        events.contains(&first) && events.contains(&second),
        "the error names both VMs: {events}"
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    let machine = world.machines().get(ambiguous).await.unwrap();
    assert_ne!(
        machine.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Failed"),
        "not failed on a guess"
    );
    assert_eq!(
        machine.provider_status().ok().and_then(|s| s.vm_uuid),
        None,
        "neither VM taken"
    );
    let requests = world.mock.admin().requests_since(calls_before);
    assert_eq!(
        prism_writes(&requests),
        Vec::<String>::new(),
        "no VM made, none deleted"
    );
    assert_eq!(world.mock.admin().vms().len(), world.seed_vms + 3);
    world.stop().await;
}

/// The Go provider's conditions' reason once it has reconciled a Machine (`utils.go`
/// `conditionInstanceReady`).
const GO_READY_REASON: &str = "Machine instance is ready";

/// Waits until every Machine's providerStatus carries `reason` (the provider that writes it has
/// reconciled them all), then a while longer for a wrong decision to show.
async fn reconciled_by(world: &mut RealWorld, count: usize, reason: &'static str) {
    world
        .wait_for(
            &format!("{count} Machines reconciled ({reason})"),
            async |world| {
                let list = world.machines().list(&ListParams::default()).await.ok()?;
                let done = list.items.iter().filter(|machine| {
                    machine
                        .provider_status()
                        .ok()
                        .is_some_and(|status| status.conditions.iter().any(|c| c.reason == reason))
                });
                (done.count() == count).then_some(())
            },
        )
        .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
}

/// Each Machine's name with its VM, phase and Node.
async fn machine_states(world: &RealWorld) -> BTreeMap<String, Value> {
    let list = world.machines().list(&ListParams::default()).await.unwrap();
    list.items
        .iter()
        .map(|machine| (machine.name_any(), kept(machine)))
        .collect()
}

/// Gives each linked Node its Machine's providerID, as the cloud-controller-manager does.
async fn provider_ids_as_the_ccm_sets_them(world: &RealWorld) {
    let nodes: Api<Node> = Api::all(world.admin.clone());
    for machine in world
        .machines()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
    {
        let status = machine.status.clone().unwrap_or_default();
        let (Some(node), Some(id)) = (status.node_ref, machine.spec.provider_id.clone()) else {
            continue;
        };
        let name = node.name.unwrap_or_default();
        nodes
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"providerID": id}})),
            )
            .await
            .unwrap_or_else(|e| panic!("Node {name}: {e}"));
    }
}

/// One direction of the switch: `first` makes two Linux and one Windows-image Machine, Running
/// and linked; `second` takes them over with no Prism write and no Machine's VM, phase or Node
/// lost, then scales them to 0 with no VM left.
async fn switch(world: &mut RealWorld, second: Provider, label: &str, reason: &'static str) {
    scale(&world.admin, manifests::LINUX_SET, 2).await;
    scale(&world.admin, manifests::WINDOWS_IMAGE_SET, 1).await;
    world
        .wait_for("3 Machines Running and linked", async |world| {
            let list = world.machines().list(&ListParams::default()).await.ok()?;
            (list.items.iter().filter(|m| running_and_linked(m)).count() == 3).then_some(())
        })
        .await;
    provider_ids_as_the_ccm_sets_them(world).await;
    let before = machine_states(world).await;
    let calls_before = world.mock.admin().request_count();

    world.switch_to(second, label).await;
    reconciled_by(world, 3, reason).await;
    assert_eq!(
        machine_states(world).await,
        before,
        "{label}: every Machine kept"
    );
    let requests = world.mock.admin().requests_since(calls_before);
    assert_eq!(
        prism_writes(&requests),
        Vec::<String>::new(),
        "{label}: no Prism write"
    );
    eprintln!(
        "{label}: 3 Machines taken over with {} Prism calls, none a write",
        requests.len()
    );
    world.scale_all_to_zero().await;
}

/// The real Go provider makes the Machines, ours takes them over and scales them to 0; then
/// ours makes them and the Go provider takes them over and scales them to 0. Needs
/// `GO_PROVIDER_BIN` (a `cmd/manager` built by hand from openshift/machine-api-provider-nutanix:
/// hack/real-cluster/README.md); skipped with a message without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_real_go_providers_machines_are_taken_over_and_handed_back() {
    let Some(program) = std::env::var_os("GO_PROVIDER_BIN") else {
        eprintln!("skipped: GO_PROVIDER_BIN is not set");
        return;
    };
    let program = std::path::PathBuf::from(program);
    let go = Provider::Go(program.clone());
    let Some(mut world) =
        RealWorld::start_with("takeover_real_go", NodeAgentConfig::default(), go).await
    else {
        return;
    };
    switch(&mut world, Provider::Ours, "go-to-ours", OUR_READY_REASON).await;
    world.switch_to(Provider::Ours, "ours").await;
    switch(
        &mut world,
        Provider::Go(program),
        "ours-to-go",
        GO_READY_REASON,
    )
    .await;
    world.stop().await;
}
