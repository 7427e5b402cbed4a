//! The node agent, the approver and nodelink together against kube-sim and prism-mock: VMs
//! created in prism-mock through prism-client, Machines written by hand (the test plays the
//! provider), and Nodes that register through the kubelet's CSR flow.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

mod common;

use std::net::IpAddr;

use base64::Engine as _;
use common::{NS, eventually, kube, machine};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use nutanix_machine_controller::api::Machine;
use prism_client::v3::{Image, Subnet, VmIntentInput};
use prism_mock::{MockConfig, MockPrism, RunningMock};
use sandbox::approver::{self, ApproverConfig, CsrKind, Decision, PendingReason};
use sandbox::node_agent::{
    self, JoinBehaviour, JoinStage, NodeAgentConfig, NodeIpChoice, PROVIDED_NODE_IP_ANNOTATION,
    WMCO_VERSION_ANNOTATION, WmcoWait, wmco,
};
use sandbox::nodelink::{self, NodeLinkConfig};
use serde_json::json;

fn prism(mock: &RunningMock) -> prism_client::Client {
    let mut config = prism_client::ClientConfig::new(
        mock.base_url(),
        prism_client::Credentials::basic(
            mock.credentials().username.clone(),
            mock.credentials().password.clone(),
        ),
    )
    .unwrap();
    config.ca_bundle = Some(prism_client::CaBundle::Pem {
        origin: "prism-mock".to_owned(),
        pem: mock.ca_pem().unwrap().as_bytes().to_vec(),
    });
    prism_client::Client::new(config).unwrap()
}

/// Creates a powered-on VM from `image` on `vm-network`, with `user_data` as its cloud-init
/// (cloudbase-init for Windows) user data when given, and returns its UUID.
async fn create_vm(
    prism: &prism_client::Client,
    name: &str,
    image: &str,
    user_data: Option<&str>,
) -> String {
    let image = prism
        .find_by_exact_name::<Image>(image)
        .await
        .unwrap()
        .unwrap();
    let subnet = prism
        .find_by_exact_name::<Subnet>("vm-network")
        .await
        .unwrap()
        .unwrap();
    let cluster = prism.list_prism_elements().await.unwrap().remove(0);
    let mut input = json!({
        "metadata": {"kind": "vm"},
        "spec": {
            "name": name,
            "cluster_reference": {"kind": "cluster", "uuid": cluster.uuid().unwrap()},
            "resources": {
                "num_sockets": 2, "num_vcpus_per_socket": 2, "memory_size_mib": 8192,
                "power_state": "ON",
                "disk_list": [{"data_source_reference": {"kind": "image", "uuid": image.uuid().unwrap()}}],
                "nic_list": [{"subnet_reference": {"kind": "subnet", "uuid": subnet.uuid().unwrap()}}]
            }
        }
    });
    if let Some(user_data) = user_data {
        let encoded = base64::engine::general_purpose::STANDARD.encode(user_data);
        input["spec"]["resources"]["guest_customization"] =
            json!({"is_overridable": true, "cloud_init": {"user_data": encoded}});
    }
    let input: VmIntentInput = serde_json::from_value(input).unwrap();
    prism
        .create_vm(&input)
        .await
        .unwrap()
        .uuid()
        .unwrap()
        .to_owned()
}

/// Waits for the guest's first address.
async fn guest_ip(mock: &RunningMock, uuid: &str) -> String {
    let mut ip = String::new();
    eventually("the VM reports an address", || {
        let found = mock
            .admin()
            .vms()
            .into_iter()
            .find(|vm| vm.uuid == uuid)
            .and_then(|vm| vm.addresses.first().cloned());
        if let Some(found) = found.clone() {
            ip = found;
        }
        async move { found.is_some() }
    })
    .await;
    ip
}

/// What the provider writes once the VM has its address.
async fn provision(client: &Client, name: &str, uuid: &str, ip: &str, internal_dns: &str) {
    let machines: Api<Machine> = Api::namespaced(client.clone(), NS);
    machines
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"providerID": format!("nutanix://{uuid}")}})),
        )
        .await
        .unwrap();
    machines
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Provisioned", "addresses": [
                {"type": "InternalIP", "address": ip},
                {"type": "InternalDNS", "address": internal_dns},
                {"type": "Hostname", "address": internal_dns}]}})),
        )
        .await
        .unwrap();
}

struct Cluster {
    sim: kube_sim::RunningKubeSim,
    client: Client,
    mock: RunningMock,
    approver: approver::ApproverHandle,
    agent: node_agent::NodeAgentHandle,
    link: sandbox::ActorHandle,
}

async fn cluster(agent: NodeAgentConfig) -> Cluster {
    let mock = MockPrism::start(MockConfig::default()).await.unwrap();
    let (sim, client) = kube().await;
    let approver = approver::start(client.clone(), ApproverConfig::default());
    let link = nodelink::start(client.clone(), NodeLinkConfig::default());
    let agent = node_agent::start(client.clone(), mock.admin().clone(), agent);
    Cluster {
        sim,
        client,
        mock,
        approver,
        agent,
        link,
    }
}

impl Cluster {
    async fn stop(self) {
        self.agent.stop().await;
        self.approver.stop().await;
        self.link.stop().await;
        self.sim.shutdown().await;
        self.mock.shutdown().await;
    }
}

#[tokio::test]
async fn a_windows_vm_joins_through_both_csrs_once_its_machine_is_provisioned() {
    let c = cluster(NodeAgentConfig::default()).await;
    let name = "win-abcde";
    c.sim
        .create(machine(
            name,
            json!({"machine.openshift.io/os-id": "Windows"}),
        ))
        .unwrap();
    let user_data = wmco::user_data(wmco::SANDBOX_PUBLIC_KEY);
    let uuid = create_vm(
        &prism(&c.mock),
        name,
        "windows-server-2022",
        Some(&user_data),
    )
    .await;
    let ip = guest_ip(&c.mock, &uuid).await;

    // WMCO waits for the provider: no CSR before the Machine is Provisioned.
    eventually("WMCO waiting for the Machine", || async {
        matches!(
            c.agent.join(name).map(|j| j.stage),
            Some(JoinStage::WaitingForWmco {
                reason: WmcoWait::NoPhase
            })
        )
    })
    .await;
    // WMCO's secret controller wrote its user data meanwhile.
    let secret = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(c.client.clone(), NS)
        .get(wmco::USER_DATA_SECRET)
        .await
        .unwrap();
    assert_eq!(
        secret.data.unwrap()[wmco::USER_DATA_KEY].0,
        user_data.as_bytes()
    );
    let csrs: Api<CertificateSigningRequest> = Api::all(c.client.clone());
    assert!(
        csrs.list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );

    provision(&c.client, name, &uuid, &ip, name).await;
    eventually("the Windows node joined", || async {
        c.agent
            .join(name)
            .is_some_and(|j| j.stage == JoinStage::Joined)
    })
    .await;

    let join = c.agent.join(name).unwrap();
    assert!(join.windows);
    assert_eq!(join.node_ip, Some(ip.parse::<IpAddr>().unwrap()));
    let decision = |csr: &Option<String>| c.approver.decision(csr.as_deref().unwrap());
    assert_eq!(
        decision(&join.client_csr),
        Some(Decision::Approved {
            kind: Some(CsrKind::Client),
            machine: Some(name.to_owned())
        })
    );
    assert_eq!(
        decision(&join.serving_csr),
        Some(Decision::Approved {
            kind: Some(CsrKind::Serving),
            machine: Some(name.to_owned())
        })
    );
    let approved = csrs.get(join.client_csr.as_deref().unwrap()).await.unwrap();
    let conditions = approved.status.unwrap().conditions.unwrap();
    assert_eq!(
        (
            conditions[0].type_.as_str(),
            conditions[0].reason.as_deref()
        ),
        ("Approved", Some("NodeCSRApprove"))
    );

    let node = Api::<Node>::all(c.client.clone()).get(name).await.unwrap();
    assert_eq!(node.labels()["kubernetes.io/os"], "windows");
    assert_eq!(node.labels()["node.openshift.io/os_id"], "Windows");
    let taints = node.spec.clone().unwrap().taints.unwrap();
    assert_eq!(
        (taints[0].key.as_str(), taints[0].effect.as_str()),
        ("os", "NoSchedule"),
        "WMCO's kubelet registers with its taint"
    );
    assert_eq!(
        node.annotations()[WMCO_VERSION_ANNOTATION],
        "10.20.0-sandbox"
    );
    assert_eq!(node.annotations()[PROVIDED_NODE_IP_ANNOTATION], ip);
    let status = node.status.unwrap();
    assert_eq!(status.addresses.unwrap()[0].address, ip);
    let capacity = status.capacity.unwrap();
    assert_eq!(
        (
            capacity["cpu"].0.as_str(),
            capacity["memory"].0.as_str(),
            capacity["pods"].0.as_str()
        ),
        ("4", "8388608Ki", "250")
    );
    let machine = Api::<Machine>::namespaced(c.client.clone(), NS)
        .get(name)
        .await
        .unwrap();
    assert_eq!(
        machine.status.unwrap().node_ref.unwrap().name.as_deref(),
        Some(name)
    );
    c.stop().await;
}

#[tokio::test]
async fn a_windows_vm_that_did_not_run_wmcos_user_data_never_joins() {
    let c = cluster(NodeAgentConfig::default()).await;
    let prism = prism(&c.mock);
    // One VM booted without user data, one with WMCO's script for another key.
    let other = wmco::user_data("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAnotTheSandboxKey");
    let mut machines = Vec::new();
    for (name, user_data) in [("win-nodata", None), ("win-otherkey", Some(other.as_str()))] {
        c.sim
            .create(machine(
                name,
                json!({"machine.openshift.io/os-id": "Windows"}),
            ))
            .unwrap();
        let uuid = create_vm(&prism, name, "windows-server-2022", user_data).await;
        let ip = guest_ip(&c.mock, &uuid).await;
        provision(&c.client, name, &uuid, &ip, name).await;
        machines.push(name);
    }
    for name in machines {
        eventually("WMCO unable to reach the guest over SSH", || async {
            matches!(
                c.agent.join(name).map(|j| j.stage),
                Some(JoinStage::WaitingForWmco {
                    reason: WmcoWait::UserDataNotRun
                })
            )
        })
        .await;
        assert!(c.agent.join(name).unwrap().client_csr.is_none());
    }
    c.stop().await;
}

#[tokio::test]
async fn a_client_csr_whose_name_is_not_the_machines_internal_dns_stays_pending() {
    let c = cluster(NodeAgentConfig::default()).await;
    let name = "linux-fghij";
    c.sim.create(machine(name, json!({}))).unwrap();
    let uuid = create_vm(&prism(&c.mock), name, "rhcos-4.20", None).await;
    let ip = guest_ip(&c.mock, &uuid).await;
    // The provider reports a host name the kubelet does not use.
    provision(&c.client, name, &uuid, &ip, "linux-fghij.example.com.wrong").await;

    let mut client_csr = String::new();
    eventually("the Linux kubelet's client CSR", || {
        let found = c.agent.join(name).and_then(|j| j.client_csr);
        if let Some(found) = found.clone() {
            client_csr = found;
        }
        async move { found.is_some() }
    })
    .await;
    eventually("the approver's verdict", || async {
        matches!(
            c.approver.decision(&client_csr),
            Some(Decision::Pending { .. })
        )
    })
    .await;
    let Some(Decision::Pending { reason }) = c.approver.decision(&client_csr) else {
        unreachable!()
    };
    assert_eq!(
        reason,
        PendingReason::NoMachineWithInternalDns {
            node: name.to_owned()
        }
    );
    assert_eq!(
        c.agent.join(name).unwrap().stage,
        JoinStage::ClientCsrPending
    );
    let csrs: Api<CertificateSigningRequest> = Api::all(c.client.clone());
    assert!(
        csrs.get(&client_csr)
            .await
            .unwrap()
            .status
            .and_then(|s| s.conditions)
            .is_none()
    );

    // The approver retries (it reported an error); once the Machine reports the right name, the
    // next retry approves.
    provision(&c.client, name, &uuid, &ip, name).await;
    eventually("the Linux node joined", || async {
        c.agent
            .join(name)
            .is_some_and(|j| j.stage == JoinStage::Joined)
    })
    .await;
    let node = Api::<Node>::all(c.client.clone()).get(name).await.unwrap();
    assert_eq!(node.labels()["kubernetes.io/os"], "linux");
    assert!(!node.annotations().contains_key(WMCO_VERSION_ANNOTATION));
    c.stop().await;
}

#[tokio::test]
async fn a_node_registered_with_a_wrong_ip_gets_no_serving_certificate() {
    let wrong: IpAddr = "192.0.2.55".parse().unwrap();
    let c = cluster(NodeAgentConfig {
        overrides: vec![(
            "bad-".to_owned(),
            JoinBehaviour {
                node_ip: NodeIpChoice::Fixed(wrong),
                ..JoinBehaviour::default()
            },
        )],
        ..NodeAgentConfig::default()
    })
    .await;
    let name = "bad-klmno";
    c.sim.create(machine(name, json!({}))).unwrap();
    let uuid = create_vm(&prism(&c.mock), name, "rhcos-4.20", None).await;
    let ip = guest_ip(&c.mock, &uuid).await;
    provision(&c.client, name, &uuid, &ip, name).await;

    eventually("the Node registered, its serving CSR pending", || async {
        c.agent
            .join(name)
            .is_some_and(|j| j.stage == JoinStage::ServingCsrPending)
    })
    .await;
    let node = Api::<Node>::all(c.client.clone()).get(name).await.unwrap();
    assert_eq!(
        node.status.unwrap().addresses.unwrap()[0].address,
        wrong.to_string()
    );
    let serving = c.agent.join(name).unwrap().serving_csr.unwrap();
    // nodelink cannot match the Node by IP, and the Node has no providerID: no nodeRef.
    eventually("the approver's verdict", || async {
        c.approver.decision(&serving)
            == Some(Decision::Pending {
                reason: PendingReason::NoMachineForNode {
                    node: name.to_owned(),
                },
            })
    })
    .await;

    // Playing the provider's join reconciler: set the Node's providerID, so nodelink links it;
    // the IP SAN still is not one of the Machine's addresses.
    Api::<Node>::all(c.client.clone())
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"providerID": format!("nutanix://{uuid}")}})),
        )
        .await
        .unwrap();
    eventually("the IP mismatch reported", || async {
        matches!(c.approver.decision(&serving), Some(Decision::Pending {
            reason: PendingReason::IpNotInMachine { san, .. }
        }) if san == "192.0.2.55")
    })
    .await;
    assert_eq!(
        c.agent.join(name).unwrap().stage,
        JoinStage::ServingCsrPending
    );
    c.stop().await;
}

#[tokio::test]
async fn a_delayed_join_creates_no_csr_until_the_delay_is_over() {
    let c = cluster(NodeAgentConfig {
        overrides: vec![(
            "slow-".to_owned(),
            JoinBehaviour {
                delay: std::time::Duration::from_secs(600),
                ..JoinBehaviour::default()
            },
        )],
        ..NodeAgentConfig::default()
    })
    .await;
    let name = "slow-pqrst";
    c.sim.create(machine(name, json!({}))).unwrap();
    create_vm(&prism(&c.mock), name, "rhcos-4.20", None).await;
    eventually("the join waiting out its delay", || async {
        c.agent
            .join(name)
            .is_some_and(|j| j.stage == JoinStage::Delayed)
    })
    .await;
    let join = c.agent.join(name).unwrap();
    assert!(join.node_ip.is_some() && join.client_csr.is_none());
    let csrs: Api<CertificateSigningRequest> = Api::all(c.client.clone());
    assert!(
        csrs.list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    c.stop().await;
}
