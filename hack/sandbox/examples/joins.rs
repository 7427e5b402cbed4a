//! Measures the simulated join path: N Linux and N Windows VMs created in prism-mock, their
//! Machines written by hand (playing the provider), and the node agent, approver and nodelink
//! joining them. Prints the time to join, per-join latencies, and the Kubernetes API requests
//! each actor made (each actor has its own identity in kube-sim's request log).
//!
//! `cargo run --release -p sandbox --example joins -- [N]` (default 10 of each)
#![allow(clippy::unwrap_used, clippy::expect_used)] // a measuring tool: a panic is the report

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use kube::api::{Api, Patch, PatchParams};
use kube_sim::{Config, KubeSim, RunningKubeSim};
use nutanix_machine_controller::api::Machine;
use prism_client::v3::{Image, Subnet, VmIntentInput};
use prism_mock::{MockConfig, MockPrism};
use sandbox::approver::{self, ApproverConfig};
use sandbox::node_agent::{self, JoinStage, NodeAgentConfig, wmco};
use sandbox::nodelink::{self, NodeLinkConfig};
use serde_json::json;

const NS: &str = sandbox::MACHINE_API_NAMESPACE;

fn client_as(sim: &RunningKubeSim, user: &str) -> kube::Client {
    let mut config = sim.kube_config();
    config.auth_info.token = Some(format!("user:{user}").into());
    kube::Client::try_from(config).unwrap()
}

#[tokio::main]
async fn main() {
    let per_os: usize = std::env::args().nth(1).map_or(10, |n| n.parse().unwrap());
    let mock = MockPrism::start(MockConfig::default()).await.unwrap();
    let sim = KubeSim::start(Config {
        namespaces: vec![NS.to_owned()],
        ..Config::default()
    })
    .await
    .unwrap();
    let crds = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../manifests/crds");
    for entry in std::fs::read_dir(crds).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        for object in kube_sim::load::documents(&text).unwrap() {
            sim.create(object).unwrap();
        }
    }
    let provider = client_as(&sim, "provider");
    let approver = approver::start(client_as(&sim, "approver"), ApproverConfig::default());
    let link = nodelink::start(client_as(&sim, "nodelink"), NodeLinkConfig::default());
    let agent = node_agent::start(
        client_as(&sim, "node-agent"),
        mock.admin().clone(),
        NodeAgentConfig::default(),
    );

    let mut config = prism_client::ClientConfig::new(
        mock.base_url(),
        prism_client::Credentials::basic("admin", "mock-password"),
    )
    .unwrap();
    config.ca_bundle = Some(prism_client::CaBundle::Pem {
        origin: "prism-mock".to_owned(),
        pem: mock.ca_pem().unwrap().as_bytes().to_vec(),
    });
    let prism = prism_client::Client::new(config).unwrap();
    let subnet = prism
        .find_by_exact_name::<Subnet>("vm-network")
        .await
        .unwrap()
        .unwrap();
    let cluster = prism.list_prism_elements().await.unwrap().remove(0);
    let machines: Api<Machine> = Api::namespaced(provider.clone(), NS);

    let start = Instant::now();
    let mut vms = BTreeMap::new();
    for (os, image_name) in [("linux", "rhcos-4.20"), ("win", "windows-server-2022")] {
        let image = prism
            .find_by_exact_name::<Image>(image_name)
            .await
            .unwrap()
            .unwrap();
        for i in 0..per_os {
            let name = format!("{os}-{i:03}");
            let labels = if os == "win" {
                json!({"machine.openshift.io/os-id": "Windows"})
            } else {
                json!({})
            };
            machines
                .create(
                    &Default::default(),
                    &serde_json::from_value(json!({
                        "apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
                        "metadata": {"name": name, "namespace": NS, "labels": labels},
                        "spec": {"providerSpec": {"value": {}}}
                    }))
                    .unwrap(),
                )
                .await
                .unwrap();
            let mut input = json!({
                "metadata": {"kind": "vm"},
                "spec": {"name": name,
                    "cluster_reference": {"kind": "cluster", "uuid": cluster.uuid().unwrap()},
                    "resources": {"num_sockets": 2, "num_vcpus_per_socket": 1, "memory_size_mib": 8192, "power_state": "ON",
                        "disk_list": [{"data_source_reference": {"kind": "image", "uuid": image.uuid().unwrap()}}],
                        "nic_list": [{"subnet_reference": {"kind": "subnet", "uuid": subnet.uuid().unwrap()}}]}}
            });
            if os == "win" {
                // WMCO's user data, which the guest's cloudbase-init must run for WMCO to act.
                input["spec"]["resources"]["guest_customization"] = json!({"cloud_init": {
                    "user_data": STANDARD.encode(wmco::user_data(wmco::SANDBOX_PUBLIC_KEY))}});
            }
            let input: VmIntentInput = serde_json::from_value(input).unwrap();
            let uuid = prism
                .create_vm(&input)
                .await
                .unwrap()
                .uuid()
                .unwrap()
                .to_owned();
            vms.insert(name, uuid);
        }
    }

    // Play the provider: report each VM's address, providerID and phase once it has one.
    let mut provisioned = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while provisioned.len() < vms.len()
        || agent
            .joins()
            .iter()
            .filter(|j| j.stage == JoinStage::Joined)
            .count()
            < vms.len()
    {
        assert!(
            Instant::now() < deadline,
            "joins did not finish: {:?}",
            agent.joins()
        );
        let reported: BTreeMap<String, String> = mock
            .admin()
            .vms()
            .into_iter()
            .filter_map(|vm| vm.addresses.first().cloned().map(|ip| (vm.uuid, ip)))
            .collect();
        for (name, uuid) in &vms {
            let Some(ip) = reported.get(uuid) else {
                continue;
            };
            if provisioned.contains_key(name) {
                continue;
            }
            machines
                .patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"providerID": format!("nutanix://{uuid}")}})),
                )
                .await
                .unwrap();
            machines
                .patch_status(name, &PatchParams::default(), &Patch::Merge(json!({"status": {"phase": "Provisioned",
                    "addresses": [{"type": "InternalIP", "address": ip}, {"type": "InternalDNS", "address": name},
                                  {"type": "Hostname", "address": name}]}})))
                .await
                .unwrap();
            provisioned.insert(name.clone(), Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let elapsed = start.elapsed();

    let mut latencies: Vec<f64> = agent
        .joins()
        .iter()
        .map(|j| j.joined.unwrap().duration_since(j.started).as_secs_f64() * 1000.0)
        .collect();
    latencies.sort_by(f64::total_cmp);
    let percentile = |p: f64| latencies[((latencies.len() - 1) as f64 * p).round() as usize];
    println!(
        "{} VMs ({per_os} Linux, {per_os} Windows) joined in {:.2} s after the first create",
        vms.len(),
        elapsed.as_secs_f64()
    );
    println!(
        "join time from the agent seeing the VM running to Joined, ms: p50 {:.0}, p90 {:.0}, max {:.0}",
        percentile(0.5),
        percentile(0.9),
        percentile(1.0)
    );
    let mut by_user: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    for record in sim.requests() {
        *by_user
            .entry(record.user.clone())
            .or_default()
            .entry(record.verb.clone())
            .or_default() += 1;
    }
    println!("Kubernetes API requests by actor (verb: count):");
    for (user, verbs) in by_user {
        let total: usize = verbs.values().sum();
        let detail: Vec<String> = verbs.iter().map(|(v, n)| format!("{v} {n}")).collect();
        println!(
            "  {user}: {total} ({}) = {:.1} per VM",
            detail.join(", "),
            total as f64 / vms.len() as f64
        );
    }
    agent.stop().await;
    approver.stop().await;
    link.stop().await;
    sim.shutdown().await;
    mock.shutdown().await;
}
