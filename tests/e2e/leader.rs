//! Two replicas with leader election on the real control plane, and the leader cut off from the
//! API server while its path to Prism Central stays open (issue 35): the day leader election
//! exists for. Each replica reaches kube-apiserver through its own `sandbox::api_proxy`, so the
//! leader's path alone is black-holed; the other actors talk to the API server directly.
//!
//! Checked from what the API server stored (the Lease, read every 100 ms by the administrator)
//! and what prism-mock received (each request names its replica in its `User-Agent`), never from
//! the controller's own account: the old leader's last Prism write comes before the moment the
//! Lease could pass (its last renewal plus the lease duration), and so does its exit; every
//! Prism write of the run came from a replica inside its lease; the survivor takes over and
//! finishes every Machine, with one VM each.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::ListParams;
use nutanix_machine_controller::runtime::EXIT_LEASE_LOST;
use nutanix_machine_controller::runtime::leader::LEASE_NAME;
use prism_mock::{FaultKind, FaultRule};
use sandbox::api_proxy::{ApiProxy, PathMode};
use sandbox::leadership::{self, LeaseHistory};
use sandbox::manifests;
use sandbox::node_agent::NodeAgentConfig;
use sandbox::world::ControllerProcess;

use crate::real_cluster::{RealWorld, running_and_linked, scale};

const NAMESPACE: &str = sandbox::MACHINE_API_NAMESPACE;

/// Short enough for a test; the margin (lease duration − renew deadline) is 3 s.
const LEASE_FLAGS: [&str; 4] = [
    "--leader-elect",
    "--leader-elect-lease-duration=8s",
    "--leader-elect-renew-deadline=5s",
    "--leader-elect-retry-period=1s",
];

fn unix_ms_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// One replica: its process, its own path to the API server, the identity prefix it runs with.
struct Replica {
    process: ControllerProcess,
    proxy: ApiProxy,
    pod_name: String,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_cut_off_from_the_api_server_stops_writing_to_prism_before_its_lease_can_pass() {
    let Some(mut world) = RealWorld::start("partitioned_leader", NodeAgentConfig::default()).await
    else {
        return;
    };
    // The world's single replica makes way for two with leader election.
    world.provider.kill().await;
    let api_server: std::net::SocketAddr = world
        .plane
        .url()
        .trim_start_matches("https://")
        .parse()
        .unwrap();
    let kubeconfig = std::fs::read_to_string(&world.controller_kubeconfig).unwrap();
    let mut replicas = Vec::new();
    for number in 1..=2_u32 {
        let proxy = ApiProxy::start(api_server).await.unwrap();
        let mut launch = (*world.provider.launch).clone();
        launch.kubeconfig = world
            .controller_kubeconfig
            .with_file_name(format!("kubeconfig-replica-{number}"));
        std::fs::write(
            &launch.kubeconfig,
            kubeconfig.replace(world.plane.url(), &proxy.url()),
        )
        .unwrap();
        launch.log_file = launch
            .log_file
            .with_file_name(format!("controller-replica-{number}.log"));
        launch.extra_args.extend(LEASE_FLAGS.map(str::to_owned));
        let process = ControllerProcess::start(&launch, number).unwrap();
        replicas.push(Replica {
            process,
            proxy,
            // `ControllerProcess::start` names the pod after its start number; the identity is
            // the pod name, `_`, and a random suffix.
            pod_name: format!("sandbox-controller-{number}_"),
        });
    }
    let history = LeaseHistory::record(
        Api::<Lease>::namespaced(world.admin.clone(), NAMESPACE),
        LEASE_NAME,
        Duration::from_millis(100),
    );

    let leader_identity = world
        .wait_for("a leader", async |_| {
            history
                .observations()
                .last()
                .map(|seen| seen.holder.clone())
                .filter(|holder| !holder.is_empty())
        })
        .await;
    let leader = replicas
        .iter()
        .position(|replica| leader_identity.starts_with(&replica.pod_name))
        .expect("the leader is one of the replicas");
    let survivor = 1 - leader;

    // Prism refuses every create for now (503 with Retry-After, as a busy Prism Central answers):
    // the leader keeps sending the creates it has recorded, so it is writing to Prism when it is
    // cut off, and until it stops.
    let busy = world.mock.admin().add_fault(FaultRule::new(
        Some("POST"),
        "/api/nutanix/v3/vms",
        FaultKind::Error {
            status: 503,
            retry_after_secs: Some(1),
        },
    ));
    scale(&world.admin, manifests::LINUX_SET, 3).await;
    world
        .wait_for("the leader's creates refused", async |world| {
            let requests = world.mock.admin().requests_since(0);
            let refused = requests
                .iter()
                .filter(|request| request.status == 503)
                .count();
            (refused >= 3).then_some(())
        })
        .await;
    let cut_at = unix_ms_now();
    replicas[leader].proxy.set_mode(PathMode::BlackHole);

    let exited_at = world
        .wait_for("the cut-off leader's exit", async |_| {
            replicas[leader]
                .process
                .exited()
                .map(|status| (status, unix_ms_now()))
        })
        .await;
    let (status, exited_at) = exited_at;
    assert!(world.mock.admin().remove_fault(busy));
    assert_eq!(
        status.code(),
        Some(i32::from(EXIT_LEASE_LOST)),
        "the cut-off leader exits as one that lost its lease"
    );

    let running = world
        .wait_for(
            "3 Machines Running and linked under the survivor",
            async |world| {
                let list = world.machines().list(&ListParams::default()).await.ok()?;
                let linked = list.items.iter().filter(|m| running_and_linked(m)).count();
                (linked == 3).then_some(list.items)
            },
        )
        .await;
    assert!(
        replicas[survivor].process.exited().is_none(),
        "the survivor kept running"
    );

    let observations = history.observations();
    let requests = world.mock.admin().requests_since(0);
    let last_renewal = leadership::renewal_before(&observations, &leader_identity, exited_at)
        .expect("the old leader renewed its lease")
        .clone();
    let could_pass = last_renewal.could_pass_unix_ms();
    let last_write = leadership::last_write_by(&requests, &leader_identity)
        .expect("the old leader wrote to Prism")
        .received_unix_ms;
    println!(
        "cut off at {cut_at}; last renewal {}; last Prism write {last_write}; exit {exited_at}; \
         the Lease could pass at {could_pass}: margin {} ms before the write, {} ms before the exit",
        last_renewal.renewed_unix_ms,
        could_pass.saturating_sub(last_write),
        could_pass.saturating_sub(exited_at),
    );
    assert!(
        last_renewal.renewed_unix_ms <= cut_at + 1_000,
        "no renewal got through the black hole"
    );
    assert!(
        last_write < could_pass,
        "the old leader wrote to Prism at {last_write}, after its Lease could pass at {could_pass}"
    );
    assert!(
        exited_at < could_pass,
        "the old leader stopped at {exited_at}, after its Lease could pass at {could_pass}"
    );
    let outside = leadership::writes_outside_lease(&observations, &requests);
    assert!(
        outside.is_empty(),
        "Prism writes outside their sender's lease:\n{}",
        outside
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    );
    let new_holder = observations
        .iter()
        .rev()
        .find(|seen| !seen.holder.is_empty())
        .unwrap();
    assert!(
        new_holder.holder.starts_with(&replicas[survivor].pod_name),
        "the survivor holds the Lease: {new_holder:?}"
    );
    let writes_after_cut = leadership::writes_by(&requests, &leader_identity)
        .filter(|request| request.received_unix_ms >= cut_at)
        .count();
    println!("the old leader's Prism writes after it was cut off: {writes_after_cut}");
    assert!(
        leadership::last_write_by(&requests, &new_holder.holder).is_some(),
        "the survivor made the VMs the old leader could not"
    );

    // One VM per Machine: the old leader's creates in flight were not made again.
    let mut vms_by_name: BTreeMap<String, usize> = BTreeMap::new();
    for vm in world.mock.admin().vms() {
        *vms_by_name.entry(vm.name).or_default() += 1;
    }
    for machine in &running {
        let name = kube::ResourceExt::name_any(machine);
        assert_eq!(vms_by_name.get(&name), Some(&1), "VMs named {name}");
    }

    // The path heals; the survivor also deletes every Machine with its VM.
    replicas[leader].proxy.set_mode(PathMode::Open);
    world.scale_all_to_zero().await;
    world.stop().await;
}
