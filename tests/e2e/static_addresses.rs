//! Static addresses from one IP pool (issue 26): Windows and Linux Machines claim their address
//! from an `InClusterIPPool` served by the sandbox's stand-in of the in-cluster IPAM controller;
//! every Node's InternalIP is its Machine's claimed address; a pool one address too small leaves
//! exactly one Machine waiting, with its condition and event; a controller killed between the
//! claim and the create makes no second claim and no second VM; scaling to 0 releases every claim.

use std::collections::{BTreeMap, BTreeSet};

use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use nutanix_machine_controller::api::{IP_POOL_ANNOTATION, Machine, NAMESERVERS_ANNOTATION};
use sandbox::manifests::{LINUX_SET, WINDOWS_IMAGE_SET, WINDOWS_TEMPLATE_SET};
use sandbox::world::{ControlPlaneChoice, Snapshot, World, provider_condition};
use serde_json::json;

use crate::support::{TIMEOUT, addresses, options, real_control_plane, start, wait_event};

const POOL: &str = "workers";
/// 10.40.0.20 to 10.40.0.38: 19 addresses of vm-network, outside prism-mock's DHCP range.
const FIRST_RANGE: &str = "10.40.0.20-10.40.0.38";
const PER_SET: i32 = 10;
/// A subnet whose addresses Prism does not manage (10.50.0.0/24), added to prism-mock's seed.
const UNMANAGED_SUBNET: &str = "external-network";

fn api(world: &World, version: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("ipam.cluster.x-k8s.io", version, kind),
        plural,
    );
    Api::namespaced_with(world.client().clone(), world.namespace(), &resource)
}

async fn set_pool(world: &World, ranges: &[&str]) {
    let pools = api(world, "v1alpha2", "InClusterIPPool", "inclusterippools");
    let pool = json!({
        "apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": "InClusterIPPool",
        "metadata": {"name": POOL, "namespace": world.namespace()},
        "spec": {"addresses": ranges, "prefix": 20, "gateway": "10.40.0.1"},
    });
    if pools.get_opt(POOL).await.unwrap().is_none() {
        pools
            .create(
                &PostParams::default(),
                &serde_json::from_value(pool).unwrap(),
            )
            .await
            .unwrap();
    } else {
        pools
            .patch(
                POOL,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"addresses": ranges}})),
            )
            .await
            .unwrap();
    }
}

/// The address bound to each claim, by claim name.
async fn bound_addresses(world: &World) -> BTreeMap<String, String> {
    api(world, "v1beta1", "IPAddress", "ipaddresses")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|a| {
            (
                a.data["spec"]["claimRef"]["name"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
                a.data["spec"]["address"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

async fn claims(world: &World) -> Vec<DynamicObject> {
    api(world, "v1beta1", "IPAddressClaim", "ipaddressclaims")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
}

fn waiting(machine: &Machine) -> bool {
    provider_condition(machine, "IPAddressClaimed")
        .is_some_and(|(status, reason, _)| status == "False" && reason == "WaitingForIPAddress")
}

fn static_machines(snapshot: &Snapshot) -> Vec<&Machine> {
    machines_of_sets(snapshot, &[WINDOWS_IMAGE_SET, LINUX_SET])
}

fn machines_of_sets<'s>(snapshot: &'s Snapshot, sets: &[&str]) -> Vec<&'s Machine> {
    sets.iter()
        .flat_map(|set| snapshot.machines_of(set))
        .collect()
}

/// Joined Machines, and Machines waiting for an address.
fn count(snapshot: &Snapshot) -> (usize, Vec<String>) {
    let machines = static_machines(snapshot);
    let joined = machines
        .iter()
        .filter(|m| snapshot.join_gap(m).is_none())
        .count();
    let waiting = machines
        .iter()
        .filter(|m| waiting(m))
        .map(|m| m.name_any())
        .collect();
    (joined, waiting)
}

/// Every joined Machine's Node reports, as its InternalIP, the address bound to the Machine's
/// claim, and that address is the Machine's first InternalIP.
fn assert_nodes_have_claimed_addresses(snapshot: &Snapshot, bound: &BTreeMap<String, String>) {
    assert_claimed_addresses_of(snapshot, static_machines(snapshot), bound);
}

fn assert_claimed_addresses_of(
    snapshot: &Snapshot,
    machines: Vec<&Machine>,
    bound: &BTreeMap<String, String>,
) {
    let mut seen = BTreeSet::new();
    for machine in machines {
        if snapshot.join_gap(machine).is_some() {
            continue;
        }
        let name = machine.name_any();
        let claimed = &bound[&format!("{name}-claim-0-0")];
        assert_eq!(&addresses(machine, "InternalIP")[0], claimed, "{name}");
        let node_name = &machine
            .status
            .as_ref()
            .unwrap()
            .node_ref
            .as_ref()
            .unwrap()
            .name;
        let node = snapshot.node(node_name.as_deref().unwrap()).unwrap();
        let node_ips: Vec<&str> = node
            .status
            .as_ref()
            .and_then(|s| s.addresses.as_ref())
            .into_iter()
            .flatten()
            .filter(|a| a.type_ == "InternalIP")
            .map(|a| a.address.as_str())
            .collect();
        assert_eq!(node_ips, [claimed.as_str()], "Node of {name}");
        assert!(seen.insert(claimed.clone()), "{claimed} given twice");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_windows_and_linux_machines_from_one_pool() {
    static_addresses(start(options("static-addresses")).await).await;
}

/// The same on the real control plane (the machine-api-operator's MachineSet controller,
/// webhooks and nodelink; the IPAM CRDs as it ships them), when it is built.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_windows_and_linux_machines_from_one_pool_on_the_real_control_plane() {
    let Some(binaries) = real_control_plane() else {
        return;
    };
    let mut options = options("static-addresses-real");
    options.control_plane = ControlPlaneChoice::Real(binaries);
    static_addresses(start(options).await).await;
}

/// Windows Machines deployed from a template take their claimed address too (in the deploy's
/// v4 NIC `ipv4Config`), and their Nodes report it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn template_machines_take_their_claimed_addresses() {
    let world = start(options("static-template")).await;
    set_pool(&world, &[FIRST_RANGE]).await;
    let sets: Api<nutanix_machine_controller::api::MachineSet> =
        Api::namespaced(world.client().clone(), world.namespace());
    sets.patch(
        WINDOWS_TEMPLATE_SET,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"template": {"metadata": {"annotations": {
            IP_POOL_ANNOTATION: format!("ipam.cluster.x-k8s.io/InClusterIPPool/{POOL}")
        }}}}})),
    )
    .await
    .unwrap();
    world.scale(WINDOWS_TEMPLATE_SET, 2).await.unwrap();
    let snapshot = world
        .wait_until("2 template Machines joined", TIMEOUT * 2, |s| {
            s.set_joined(WINDOWS_TEMPLATE_SET, 2)
        })
        .await
        .unwrap();
    let machines = machines_of_sets(&snapshot, &[WINDOWS_TEMPLATE_SET]);
    assert_eq!(machines.len(), 2);
    assert_claimed_addresses_of(&snapshot, machines, &bound_addresses(&world).await);
    world.shutdown().await;
}

/// On a subnet Prism does not manage, a Windows Machine with cloud-init sets its claimed address
/// itself: the provider sends Prism no address (it would refuse one) and puts a `<powershell>`
/// block ahead of WMCO's; prism-mock's Windows guest applies it and Prism reports it `LEARNED`.
/// Its Machine and Node show the claimed address, and a Linux Machine on that subnet fails,
/// naming why, with no VM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_windows_guest_sets_its_claimed_address_on_an_unmanaged_subnet() {
    let mut options = options("static-unmanaged");
    options.mock_seed.subnets.push(prism_mock::SubnetSeed {
        name: UNMANAGED_SUBNET.into(),
        uuid: None,
        cluster: "pe-1".into(),
        vlan_id: 50,
        managed: false,
        cidr: "10.50.0.0/24".into(),
        gateway: None,
        pool_start: None,
        pool_end: None,
    });
    let world = start(options).await;
    let pools = api(&world, "v1alpha2", "InClusterIPPool", "inclusterippools");
    create(
        &pools,
        json!({
            "apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": "InClusterIPPool",
            "metadata": {"name": "external", "namespace": world.namespace()},
            "spec": {"addresses": ["10.50.0.20-10.50.0.29"], "prefix": 24, "gateway": "10.50.0.1"},
        }),
    )
    .await;
    let sets: Api<nutanix_machine_controller::api::MachineSet> =
        Api::namespaced(world.client().clone(), world.namespace());
    for set in [WINDOWS_IMAGE_SET, LINUX_SET] {
        sets.patch(
            set,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {
                "metadata": {"annotations": {
                    IP_POOL_ANNOTATION: "ipam.cluster.x-k8s.io/InClusterIPPool/external",
                    NAMESERVERS_ANNOTATION: "10.50.0.2,10.50.0.3",
                }},
                "spec": {"providerSpec": {"value": {
                    "subnets": [{"type": "name", "name": UNMANAGED_SUBNET}]
                }}},
            }}})),
        )
        .await
        .unwrap();
        world.scale(set, 1).await.unwrap();
    }
    let snapshot = world
        .wait_until("the Windows Machine joined", TIMEOUT * 2, |s| {
            s.set_joined(WINDOWS_IMAGE_SET, 1)
        })
        .await
        .unwrap();
    let machines = machines_of_sets(&snapshot, &[WINDOWS_IMAGE_SET]);
    assert_claimed_addresses_of(&snapshot, machines, &bound_addresses(&world).await);

    let snapshot = world
        .wait_until("the Linux Machine failed", TIMEOUT, |s| {
            machines_of_sets(s, &[LINUX_SET])
                .iter()
                .any(|m| m.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed"))
        })
        .await
        .unwrap();
    let linux = machines_of_sets(&snapshot, &[LINUX_SET]);
    let message = linux[0]
        .status
        .as_ref()
        .and_then(|s| s.error_message.as_deref())
        .unwrap_or_default();
    assert!(
        message.contains("only a Windows guest sets its own address"),
        "{message}"
    );
    let linux_name = linux[0].name_any();
    assert!(
        !world
            .mock()
            .admin()
            .vms()
            .iter()
            .any(|vm| vm.name == linux_name),
        "no VM for the refused Machine"
    );
    world.shutdown().await;
}

async fn static_addresses(world: World) {
    set_pool(&world, &[FIRST_RANGE]).await;
    let sets: Api<nutanix_machine_controller::api::MachineSet> =
        Api::namespaced(world.client().clone(), world.namespace());
    for set in [WINDOWS_IMAGE_SET, LINUX_SET] {
        sets.patch(
            set,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"metadata": {"annotations": {
                IP_POOL_ANNOTATION: format!("ipam.cluster.x-k8s.io/InClusterIPPool/{POOL}")
            }}}}})),
        )
        .await
        .unwrap();
        world.scale(set, PER_SET).await.unwrap();
    }

    // 20 Machines, 19 addresses: exactly one waits, with no VM.
    world.set_label("20 Machines from a pool of 19");
    let snapshot = world
        .wait_for(
            "19 joined, 1 waiting on an exhausted pool",
            TIMEOUT * 3,
            |s| {
                let (joined, waiting) = count(s);
                let exhausted = waiting.iter().all(|name| {
                    s.machine(name)
                        .and_then(|m| provider_condition(m, "IPAddressClaimed"))
                        .is_some_and(|(_, _, message)| message.contains("is exhausted"))
                });
                if joined == 19 && waiting.len() == 1 && exhausted {
                    Ok(())
                } else {
                    Err(format!("{joined} joined, waiting: {waiting:?}"))
                }
            },
        )
        .await
        .unwrap();
    let (_, waiting_now) = count(&snapshot);
    let stuck = &waiting_now[0];
    assert!(
        snapshot.vm(stuck).is_none(),
        "{stuck} has no VM while it waits"
    );
    let (_, _, message) =
        provider_condition(snapshot.machine(stuck).unwrap(), "IPAddressClaimed").unwrap();
    assert!(
        message.contains(&format!("{stuck}-claim-0-0")) && message.contains(POOL),
        "{message}"
    );
    wait_event(&world, stuck, "WaitingForIPAddress", "Warning").await;
    assert_nodes_have_claimed_addresses(&snapshot, &bound_addresses(&world).await);

    // One more address: the waiting Machine goes on.
    world.set_label("the pool grows by one");
    set_pool(&world, &[FIRST_RANGE, "10.40.0.39"]).await;
    let snapshot = world
        .wait_until("20 joined", TIMEOUT * 2, |s| {
            s.set_joined(WINDOWS_IMAGE_SET, 10) && s.set_joined(LINUX_SET, 10)
        })
        .await
        .unwrap();
    assert_nodes_have_claimed_addresses(&snapshot, &bound_addresses(&world).await);
    assert_eq!(snapshot.vms.len(), 20);

    // A controller killed between the claim and the create: the pool is full, so the new
    // Machine's claim stays unbound; the controller dies; the pool grows; a new controller
    // finds the claim it made and makes one VM.
    world.set_label("a crash between claim and create");
    world.scale(LINUX_SET, PER_SET + 1).await.unwrap();
    let snapshot = world
        .wait_until("the 21st Machine waits", TIMEOUT, |s| count(s).1.len() == 1)
        .await
        .unwrap();
    let late = count(&snapshot).1[0].clone();
    world.kill_controller().await.unwrap();
    set_pool(&world, &[FIRST_RANGE, "10.40.0.39-10.40.0.40"]).await;
    world.restart_controller().await.unwrap();
    world
        .wait_until("21 joined", TIMEOUT * 2, |s| s.set_joined(LINUX_SET, 11))
        .await
        .unwrap();
    let mine: Vec<String> = claims(&world)
        .await
        .iter()
        .map(ResourceExt::name_any)
        .filter(|n| n.starts_with(&format!("{late}-")))
        .collect();
    assert_eq!(mine, [format!("{late}-claim-0-0")], "one claim");
    assert_eq!(
        world
            .admin()
            .vms()
            .iter()
            .filter(|vm| vm.name == late)
            .count(),
        1,
        "one VM"
    );

    // Scaled to 0: every claim and address is released.
    world.set_label("everything → 0");
    world.scale(WINDOWS_IMAGE_SET, 0).await.unwrap();
    world.scale(LINUX_SET, 0).await.unwrap();
    world
        .wait_until("no Machine, no VM", TIMEOUT * 2, |s| {
            static_machines(s).is_empty() && s.vms.is_empty()
        })
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + TIMEOUT;
    while !claims(&world).await.is_empty() || !bound_addresses(&world).await.is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "claims left: {:?}",
            claims(&world)
                .await
                .iter()
                .map(ResourceExt::name_any)
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    world.shutdown().await;
}

/// A `GlobalInClusterIPPool` (cluster-wide) serves Machines; an address of the pool in use in
/// another namespace is never given again; a released address is held for the pool's
/// `addressReuseGracePeriodSeconds`, so a Machine made meanwhile waits rather than reuse it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_global_pool_serves_machines_and_holds_released_addresses_for_its_grace_period() {
    global_pool(start(options("static-global")).await).await;
}

/// The same on the real control plane (a cluster-scoped pool, listed across namespaces by the
/// real API server), when it is built.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_global_pool_serves_machines_on_the_real_control_plane() {
    let Some(binaries) = real_control_plane() else {
        return;
    };
    let mut options = options("static-global-real");
    options.control_plane = ControlPlaneChoice::Real(binaries);
    global_pool(start(options).await).await;
}

const GLOBAL_POOL: &str = "shared";
const GRACE_SECONDS: u64 = 8;

fn cluster_api(world: &World, version: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("ipam.cluster.x-k8s.io", version, kind),
        plural,
    );
    Api::all_with(world.client().clone(), &resource)
}

async fn create(api: &Api<DynamicObject>, object: serde_json::Value) {
    api.create(
        &PostParams::default(),
        &serde_json::from_value(object).unwrap(),
    )
    .await
    .unwrap();
}

async fn global_pool(world: World) {
    let pools = cluster_api(
        &world,
        "v1alpha2",
        "GlobalInClusterIPPool",
        "globalinclusterippools",
    );
    create(
        &pools,
        json!({
            "apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": "GlobalInClusterIPPool",
            "metadata": {"name": GLOBAL_POOL},
            "spec": {"addresses": ["10.40.0.20-10.40.0.22"], "prefix": 20, "gateway": "10.40.0.1",
                     "addressReuseGracePeriodSeconds": GRACE_SECONDS},
        }),
    )
    .await;
    // Another team's namespace holds 10.40.0.20 of the same pool.
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(world.client().clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "other-team"}})).unwrap(),
        )
        .await
        .unwrap();
    let pool_ref = json!({"apiGroup": "ipam.cluster.x-k8s.io", "kind": "GlobalInClusterIPPool", "name": GLOBAL_POOL});
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("ipam.cluster.x-k8s.io", "v1beta1", "IPAddress"),
        "ipaddresses",
    );
    create(
        &Api::namespaced_with(world.client().clone(), "other-team", &resource),
        json!({
            "apiVersion": "ipam.cluster.x-k8s.io/v1beta1", "kind": "IPAddress",
            "metadata": {"name": "elsewhere", "namespace": "other-team"},
            "spec": {"claimRef": {"name": "elsewhere"}, "poolRef": pool_ref,
                     "address": "10.40.0.20", "prefix": 20, "gateway": "10.40.0.1"},
        }),
    )
    .await;

    let sets: Api<nutanix_machine_controller::api::MachineSet> =
        Api::namespaced(world.client().clone(), world.namespace());
    sets.patch(
        LINUX_SET,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"template": {"metadata": {"annotations": {
            IP_POOL_ANNOTATION: format!("ipam.cluster.x-k8s.io/GlobalInClusterIPPool/{GLOBAL_POOL}")
        }}}}})),
    )
    .await
    .unwrap();
    world.scale(LINUX_SET, 2).await.unwrap();
    let snapshot = world
        .wait_until("2 Machines from the global pool joined", TIMEOUT * 2, |s| {
            s.set_joined(LINUX_SET, 2)
        })
        .await
        .unwrap();
    let bound = bound_addresses(&world).await;
    let machines = machines_of_sets(&snapshot, &[LINUX_SET]);
    assert_claimed_addresses_of(&snapshot, machines, &bound);
    let given: BTreeSet<&str> = bound.values().map(String::as_str).collect();
    assert_eq!(
        given,
        BTreeSet::from(["10.40.0.21", "10.40.0.22"]),
        "the address in use in another namespace is not given again"
    );
    let deadline = std::time::Instant::now() + TIMEOUT;
    loop {
        let pool = pools.get(GLOBAL_POOL).await.unwrap();
        let usage = &pool.data["status"]["ipAddresses"];
        if usage["total"] == 3 && usage["used"] == 3 && usage["free"] == 0 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "pool status {usage}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }

    // One Machine goes; a new one comes at once. The released address is held for the grace
    // period, so the new Machine's claim stays unbound while the old address exists.
    world.set_label("scale down and up within the grace period");
    world.scale(LINUX_SET, 1).await.unwrap();
    let snapshot = world
        .wait_until("one Machine left", TIMEOUT * 2, |s| {
            s.machines_of(LINUX_SET).len() == 1 && s.vms.len() == 1
        })
        .await
        .unwrap();
    let kept = snapshot.machines_of(LINUX_SET)[0].name_any();
    let released = bound
        .iter()
        .find(|(claim, _)| !claim.starts_with(&format!("{kept}-")))
        .map(|(claim, address)| (claim.clone(), address.clone()))
        .unwrap();
    world.scale(LINUX_SET, 2).await.unwrap();
    let mut seen_held = false;
    let deadline = std::time::Instant::now() + TIMEOUT * 2;
    loop {
        let now = bound_addresses(&world).await;
        let waiting_claims: Vec<String> = claims(&world)
            .await
            .iter()
            .filter(|c| c.data["status"]["addressRef"]["name"].as_str().is_none())
            .map(ResourceExt::name_any)
            .collect();
        if now.contains_key(&released.0) {
            // Still held: nobody else got it.
            assert_eq!(now.values().filter(|a| **a == released.1).count(), 1);
            seen_held |= !waiting_claims.is_empty();
        } else if now.len() == 2 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "addresses {now:?}, unbound {waiting_claims:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert!(
        seen_held,
        "a new claim waited while the released address was held"
    );
    let snapshot = world
        .wait_until("2 Machines joined again", TIMEOUT * 2, |s| {
            s.set_joined(LINUX_SET, 2)
        })
        .await
        .unwrap();
    let bound = bound_addresses(&world).await;
    assert!(
        bound.values().any(|a| *a == released.1),
        "the released address is given again after its grace period: {bound:?}"
    );
    assert_claimed_addresses_of(&snapshot, machines_of_sets(&snapshot, &[LINUX_SET]), &bound);
    world.shutdown().await;
}
