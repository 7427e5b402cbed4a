//! The node agent: the kubelet of every VM running in prism-mock, and WMCO for the Windows ones.
//!
//! The agent plays the guest. It reads prism-mock's VMs through the mock's admin handle (what a
//! guest would know about itself: that it runs, its addresses, its size, the customization it
//! booted with) and, for each VM that is powered on with an address, registers a Node the way a
//! kubelet does:
//!
//! 1. Windows only: WMCO's part ([`wmco`], [`wmco_gate`]). WMCO keeps the `windows-user-data`
//!    Secret as it generates it for Nutanix (creating or rewriting it), and configures the VM only
//!    once the Machine of the same name passes its checks (labelled
//!    `machine.openshift.io/os-id=Windows` and not `windowsmachineconfig.openshift.io/ignore`,
//!    `Provisioned` (or `Running` with a nodeRef), an IPv4 `InternalIP`, a providerID, the Secret
//!    valid) and its SSH reaches the guest: the first IPv4 `InternalIP` must be the VM's, and the
//!    guest must have run WMCO's user data (cloudbase-init's rules, [`cloudbase_init_run`]);
//! 2. pick the node IP (by default the guest's primary address, what `--node-ip` from the default
//!    route gives);
//! 3. create a client CSR (signer `kubernetes.io/kube-apiserver-client-kubelet`, the
//!    node-bootstrapper identity, CN `system:node:<vm name>`) and wait for `Approved`;
//! 4. create the Node (name = VM name, `InternalIP` and `Hostname` addresses, OS and arch labels,
//!    the VM's capacity with the kubelet's `maxPods`; for Windows WMCO's kubelet configuration:
//!    the `os=Windows:NoSchedule` taint, 250 pods, its reserved resources off the allocatable);
//! 5. create a serving CSR (signer `kubernetes.io/kubelet-serving`, SANs from the Node's
//!    addresses) and wait for `Approved`;
//! 6. Windows only: annotate the Node `windowsmachineconfig.openshift.io/version` (WMCO is done).
//!
//! A VM that disappears or powers off stops its join; a joined VM is left alone (the Machine
//! controller, not the kubelet, deletes Nodes), except that its kubelet ends the graceful
//! deletion of its pods ([`pods`]). A failed step starts the join again after a
//! second. [`JoinBehaviour`] provokes faults: register with the hybrid-overlay address or a fixed
//! wrong IP (the provider's join reconciler must report `NodeIPMismatch`), or wait before joining.

mod guest;
pub mod lease;
mod pods;
pub mod wmco;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ipnet::Ipv4Net;
use jiff::Timestamp;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{Node, NodeAddress, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::wait::await_condition;
use kube::{Client, ResourceExt};
use prism_mock::Admin;
use serde_json::json;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::actor::ActorHandle;
use crate::csr::{self, CsrError};
use crate::machine_api::Machine;
use crate::real_cluster::{
    ControlPlane, NODE_BOOTSTRAPPER, NODE_BOOTSTRAPPER_NAMESPACE, RealClusterError,
};
pub use guest::{
    Guest, GuestSide, NodeIpChoice, UserDataRun, WmcoWait, choose_node_ip, cloudbase_init_run,
    user_data_run, wmco_gate,
};
use wmco::SecretAction;

/// Node annotation WICD sets when WMCO has configured the node.
pub const WMCO_VERSION_ANNOTATION: &str = "windowsmachineconfig.openshift.io/version";
/// Node annotation of the IP given to the kubelet with `--node-ip` (with an external cloud
/// provider).
pub const PROVIDED_NODE_IP_ANNOTATION: &str = "alpha.kubernetes.io/provided-node-ip";

/// How the agent joins a VM; the defaults join it correctly at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoinBehaviour {
    /// Which address the kubelet registers.
    pub node_ip: NodeIpChoice,
    /// Wait this long before the first CSR (after the WMCO gate for Windows).
    pub delay: Duration,
}

impl Default for JoinBehaviour {
    fn default() -> Self {
        Self {
            node_ip: NodeIpChoice::Primary,
            delay: Duration::ZERO,
        }
    }
}

/// Settings of the node agent.
#[derive(Clone, Debug)]
pub struct NodeAgentConfig {
    /// Namespace of the Machines (WMCO reads them).
    pub namespace: String,
    /// How often VMs, Machines and guest addresses are looked at.
    pub poll_interval: Duration,
    /// The OVN-Kubernetes hybrid-overlay network (prism-mock's default), never a primary address.
    pub hybrid_overlay_cidr: Ipv4Net,
    /// What the Windows Nodes' `windowsmachineconfig.openshift.io/version` says.
    pub wmco_version: String,
    /// WMCO's public key as an authorized-keys line: the key its user data authorizes.
    pub wmco_public_key: String,
    /// The behaviour of every VM without an override.
    pub behaviour: JoinBehaviour,
    /// Behaviours for VMs whose name starts with the prefix (first match wins), e.g. a
    /// MachineSet name followed by `-`.
    pub overrides: Vec<(String, JoinBehaviour)>,
    /// Whose credentials the kubelets' requests carry.
    pub identities: KubeletIdentities,
}

/// Whose credentials the kubelets' requests carry.
#[derive(Clone, Default)]
pub enum KubeletIdentities {
    /// The agent's own client for everything; each CSR's spec names its requester (kube-sim
    /// keeps what the client writes there).
    #[default]
    Agent,
    /// As on a cluster, where the API server writes the requester into the CSR: the client CSR
    /// asked with the node-bootstrapper's token (`bootstrap`), then the Node registered and the
    /// serving CSR asked as `system:node:<name>`, with the client certificate issued for the first
    /// request and its key (kubernetes `pkg/kubelet/certificate/bootstrap/bootstrap.go`).
    Real {
        bootstrap: Client,
        api_url: String,
        ca_pem: String,
    },
}

impl std::fmt::Debug for KubeletIdentities {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Agent => f.write_str("Agent"),
            Self::Real { api_url, .. } => f
                .debug_struct("Real")
                .field("api_url", api_url)
                .finish_non_exhaustive(),
        }
    }
}

impl KubeletIdentities {
    /// The kubelets' identities on a real API server: the node-bootstrapper's token, then each
    /// Node's own certificate.
    pub async fn of_real_cluster(plane: &ControlPlane) -> Result<Self, RealClusterError> {
        let token = plane
            .service_account_token(NODE_BOOTSTRAPPER_NAMESPACE, NODE_BOOTSTRAPPER)
            .await?;
        Ok(Self::Real {
            bootstrap: plane.client_as(&json!({"token": token})).await?,
            api_url: plane.url().to_owned(),
            ca_pem: plane.ca_pem().to_owned(),
        })
    }
}

impl Default for NodeAgentConfig {
    fn default() -> Self {
        Self {
            namespace: crate::MACHINE_API_NAMESPACE.to_owned(),
            poll_interval: Duration::from_millis(200),
            hybrid_overlay_cidr: Ipv4Net::new(std::net::Ipv4Addr::new(10, 132, 0, 0), 14)
                .unwrap_or_default(),
            wmco_version: "10.20.0-sandbox".to_owned(),
            wmco_public_key: wmco::SANDBOX_PUBLIC_KEY.to_owned(),
            behaviour: JoinBehaviour::default(),
            overrides: Vec::new(),
            identities: KubeletIdentities::Agent,
        }
    }
}

impl NodeAgentConfig {
    fn behaviour_for(&self, vm_name: &str) -> &JoinBehaviour {
        self.overrides
            .iter()
            .find(|(prefix, _)| vm_name.starts_with(prefix.as_str()))
            .map_or(&self.behaviour, |(_, b)| b)
    }
}

/// Where a VM's join is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JoinStage {
    /// Windows: WMCO would not act yet, for this reason.
    WaitingForWmco { reason: WmcoWait },
    /// The guest has no address of the kind the behaviour asks for yet.
    WaitingForAddress,
    /// Waiting out the configured delay.
    Delayed,
    /// The client CSR is created and not approved yet.
    ClientCsrPending,
    /// The Node exists; the serving CSR is next.
    NodeRegistered,
    /// The serving CSR is created and not approved yet.
    ServingCsrPending,
    /// Done (for Windows: configured by WMCO).
    Joined,
    /// The VM disappeared or powered off before the join ended.
    Stopped,
    /// A step failed; the join starts again shortly.
    Failed { error: String },
}

/// One VM's join, for progress displays and tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoinRecord {
    pub vm_uuid: String,
    /// VM name = Machine name = Node name.
    pub node: String,
    pub windows: bool,
    pub stage: JoinStage,
    /// The address the kubelet registers with, once chosen.
    pub node_ip: Option<IpAddr>,
    pub client_csr: Option<String>,
    pub serving_csr: Option<String>,
    pub started: Timestamp,
    pub joined: Option<Timestamp>,
}

/// Why a join step failed.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Csr(#[from] CsrError),
    #[error("node {node}: {action}: {source}")]
    Api {
        node: String,
        action: String,
        source: Box<kube::Error>,
    },
    #[error("node {node}: waiting for CSR {csr}: {message}")]
    Wait {
        node: String,
        csr: String,
        message: String,
    },
    #[error("node {node}: CSR {csr} was denied")]
    Denied { node: String, csr: String },
    #[error("node {node}: CSR {csr} was deleted while the kubelet waited for it")]
    CsrDeleted { node: String, csr: String },
    #[error("node {node}: the VM disappeared from prism-mock")]
    VmGone { node: String },
    #[error("node {node}: cannot build the Node object: {message}")]
    NodeObject { node: String, message: String },
    #[error("node {node}: no client with the certificate issued for CSR {csr}: {source}")]
    KubeletClient {
        node: String,
        csr: String,
        source: Box<RealClusterError>,
    },
}

type Records = Arc<Mutex<BTreeMap<String, JoinRecord>>>;

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A running node agent.
#[derive(Debug)]
pub struct NodeAgentHandle {
    actor: ActorHandle,
    records: Records,
}

impl NodeAgentHandle {
    /// Every join so far, by VM name.
    pub fn joins(&self) -> Vec<JoinRecord> {
        let mut joins: Vec<JoinRecord> = lock(&self.records).values().cloned().collect();
        joins.sort_by(|a, b| a.node.cmp(&b.node));
        joins
    }

    /// The latest join of the VM named `node`.
    pub fn join(&self, node: &str) -> Option<JoinRecord> {
        lock(&self.records)
            .values()
            .filter(|r| r.node == node)
            .max_by_key(|r| r.started)
            .cloned()
    }

    /// Stops the agent (and every join in progress) and waits for it.
    pub async fn stop(self) {
        self.actor.stop().await;
    }
}

struct Shared {
    client: Client,
    admin: Admin,
    config: NodeAgentConfig,
    records: Records,
    heartbeats: lease::Heartbeats,
}

impl Shared {
    fn update(&self, uuid: &str, change: impl FnOnce(&mut JoinRecord)) {
        if let Some(record) = lock(&self.records).get_mut(uuid) {
            change(record);
        }
    }

    fn stage(&self, uuid: &str, stage: JoinStage) {
        self.update(uuid, |r| {
            if r.stage != stage {
                tracing::debug!(node = %r.node, ?stage, "join stage");
            }
            r.stage = stage;
        });
    }
}

/// Starts the agent for the VMs of the prism-mock behind `admin`.
pub fn start(client: Client, admin: Admin, config: NodeAgentConfig) -> NodeAgentHandle {
    let records: Records = Arc::new(Mutex::new(BTreeMap::new()));
    let shared = Arc::new(Shared {
        client,
        admin,
        config,
        records: records.clone(),
        heartbeats: Arc::default(),
    });
    let actor = ActorHandle::spawn("node-agent", move |cancel| supervise(shared, cancel));
    NodeAgentHandle { actor, records }
}

const RETRY_AFTER: Duration = Duration::from_secs(1);

async fn supervise(shared: Arc<Shared>, cancel: CancellationToken) {
    let kubelet_nodes: pods::KubeletNodes = {
        let records = shared.records.clone();
        Arc::new(move || lock(&records).values().map(|r| r.node.clone()).collect())
    };
    let pods = tokio::spawn(pods::finish_terminating_pods(
        shared.client.clone(),
        kubelet_nodes,
        cancel.clone(),
    ));
    let beating: Arc<dyn Fn(&str) -> bool + Send + Sync> = {
        let records = shared.records.clone();
        Arc::new(move |node: &str| {
            lock(&records)
                .values()
                .any(|r| r.node == node && r.stage != JoinStage::Stopped)
        })
    };
    let leases = tokio::spawn(lease::renew_leases(
        shared.heartbeats.clone(),
        beating,
        cancel.clone(),
    ));
    let mut running: HashMap<String, JoinHandle<Result<(), AgentError>>> = HashMap::new();
    let mut done: HashSet<String> = HashSet::new();
    let mut retry_at: HashMap<String, Instant> = HashMap::new();
    loop {
        let guests: HashMap<String, Guest> = guest::running_guests(&shared.admin)
            .into_iter()
            .map(|g| (g.uuid.clone(), g))
            .collect();

        running.retain(|uuid, task| {
            if guests.contains_key(uuid) {
                return true;
            }
            task.abort();
            shared.stage(uuid, JoinStage::Stopped);
            false
        });
        let finished: Vec<String> = running
            .iter()
            .filter(|(_, t)| t.is_finished())
            .map(|(u, _)| u.clone())
            .collect();
        for uuid in finished {
            let Some(task) = running.remove(&uuid) else {
                continue;
            };
            match task.await {
                Ok(Ok(())) => {
                    done.insert(uuid);
                }
                Ok(Err(error)) => {
                    tracing::warn!(%error, "join failed; starting it again");
                    shared.stage(
                        &uuid,
                        JoinStage::Failed {
                            error: error.to_string(),
                        },
                    );
                    retry_at.insert(uuid, Instant::now() + RETRY_AFTER);
                }
                Err(error) => {
                    shared.stage(
                        &uuid,
                        JoinStage::Failed {
                            error: error.to_string(),
                        },
                    );
                    retry_at.insert(uuid, Instant::now() + RETRY_AFTER);
                }
            }
        }
        for (uuid, guest) in &guests {
            if done.contains(uuid)
                || running.contains_key(uuid)
                || retry_at.get(uuid).is_some_and(|t| *t > Instant::now())
            {
                continue;
            }
            retry_at.remove(uuid);
            lock(&shared.records).insert(
                uuid.clone(),
                JoinRecord {
                    vm_uuid: uuid.clone(),
                    node: guest.name.clone(),
                    windows: guest.windows,
                    stage: JoinStage::WaitingForAddress,
                    node_ip: None,
                    client_csr: None,
                    serving_csr: None,
                    started: Timestamp::now(),
                    joined: None,
                },
            );
            tracing::info!(node = %guest.name, windows = guest.windows, "guest running: joining");
            running.insert(
                uuid.clone(),
                tokio::spawn(join(shared.clone(), guest.clone())),
            );
        }

        tokio::select! {
            () = cancel.cancelled() => break,
            () = tokio::time::sleep(shared.config.poll_interval) => {}
        }
    }
    for (_, task) in running {
        task.abort();
    }
    pods.abort();
    leases.abort();
}

fn api_error(node: &str, action: &str) -> impl FnOnce(kube::Error) -> AgentError {
    let (node, action) = (node.to_owned(), action.to_owned());
    move |source| AgentError::Api {
        node,
        action,
        source: Box::new(source),
    }
}

async fn join(shared: Arc<Shared>, guest: Guest) -> Result<(), AgentError> {
    let node_name = guest.name.clone();
    let uuid = guest.uuid.clone();
    let config = &shared.config;
    let nodes: Api<Node> = Api::all(shared.client.clone());
    if let Some(node) = nodes
        .get_opt(&node_name)
        .await
        .map_err(api_error(&node_name, "read Node"))?
    {
        // The kubelet kept its certificates from an earlier run: nothing to register, only the
        // heartbeat to go on with.
        lock(&shared.heartbeats).insert(
            node_name.clone(),
            lease::Heartbeat::new(shared.client.clone(), node.uid().unwrap_or_default()),
        );
        shared.update(&uuid, |r| {
            r.stage = JoinStage::Joined;
            r.joined = Some(Timestamp::now());
        });
        return Ok(());
    }

    if guest.windows {
        wait_for_wmco(&shared, &guest).await?;
    }

    let behaviour = config.behaviour_for(&node_name).clone();
    shared.stage(&uuid, JoinStage::WaitingForAddress);
    let node_ip = loop {
        let addresses =
            guest::addresses_of(&shared.admin, &uuid).ok_or_else(|| AgentError::VmGone {
                node: node_name.clone(),
            })?;
        if let Some(ip) = choose_node_ip(&behaviour.node_ip, &addresses, config.hybrid_overlay_cidr)
        {
            break ip;
        }
        tokio::time::sleep(config.poll_interval).await;
    };
    shared.update(&uuid, |r| r.node_ip = Some(node_ip));
    if !behaviour.delay.is_zero() {
        shared.stage(&uuid, JoinStage::Delayed);
        tokio::time::sleep(behaviour.delay).await;
    }

    let bootstrap = match &config.identities {
        KubeletIdentities::Agent => shared.client.clone(),
        KubeletIdentities::Real { bootstrap, .. } => bootstrap.clone(),
    };
    let bootstrap_csrs: Api<CertificateSigningRequest> = Api::all(bootstrap);
    let (request, key_pem) = csr::client_csr(&node_name)?;
    let client_csr = bootstrap_csrs
        .create(&PostParams::default(), &request)
        .await
        .map_err(api_error(&node_name, "create client CSR"))?
        .name_any();
    shared.update(&uuid, |r| {
        r.client_csr = Some(client_csr.clone());
        r.stage = JoinStage::ClientCsrPending;
    });
    wait_for_approval(&bootstrap_csrs, &node_name, &client_csr).await?;
    let kubelet = match &config.identities {
        KubeletIdentities::Agent => shared.client.clone(),
        KubeletIdentities::Real {
            api_url, ca_pem, ..
        } => {
            let certificate =
                wait_for_certificate(&bootstrap_csrs, &node_name, &client_csr).await?;
            let user = json!({
                "client-certificate-data": STANDARD.encode(certificate),
                "client-key-data": STANDARD.encode(&key_pem),
            });
            crate::real_cluster::client_of_identity(api_url, ca_pem, &user)
                .await
                .map_err(|source| AgentError::KubeletClient {
                    node: node_name.clone(),
                    csr: client_csr.clone(),
                    source: Box::new(source),
                })?
        }
    };
    let csrs: Api<CertificateSigningRequest> = Api::all(kubelet.clone());

    let size = guest::size_of(&shared.admin, &uuid).ok_or_else(|| AgentError::VmGone {
        node: node_name.clone(),
    })?;
    let node = node_object(&node_name, &guest, node_ip, size)?;
    let registered = Api::<Node>::all(kubelet.clone())
        .create(&PostParams::default(), &node)
        .await
        .map_err(api_error(&node_name, "register Node"))?;
    lock(&shared.heartbeats).insert(
        node_name.clone(),
        lease::Heartbeat::new(kubelet, registered.uid().unwrap_or_default()),
    );
    shared.stage(&uuid, JoinStage::NodeRegistered);
    tracing::info!(node = %node_name, %node_ip, "registered Node");

    let serving_csr = csrs
        .create(
            &PostParams::default(),
            &csr::serving_csr(&node_name, &node_addresses(&node_name, node_ip))?,
        )
        .await
        .map_err(api_error(&node_name, "create serving CSR"))?
        .name_any();
    shared.update(&uuid, |r| {
        r.serving_csr = Some(serving_csr.clone());
        r.stage = JoinStage::ServingCsrPending;
    });
    wait_for_approval(&csrs, &node_name, &serving_csr).await?;

    if guest.windows {
        let patch =
            json!({"metadata": {"annotations": {WMCO_VERSION_ANNOTATION: config.wmco_version}}});
        nodes
            .patch(&node_name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map_err(api_error(&node_name, "annotate Node as configured"))?;
    }
    shared.update(&uuid, |r| {
        r.stage = JoinStage::Joined;
        r.joined = Some(Timestamp::now());
    });
    tracing::info!(node = %node_name, "joined");
    Ok(())
}

/// WMCO's secret controller (`controllers/secret_controller.go`, `reconcileUserDataSecret`):
/// create the Secret when missing, rewrite its user data when it differs. Returns whether it was
/// valid (`validateUserData`) before anything was written.
async fn reconcile_user_data_secret(shared: &Shared, node: &str) -> Result<bool, AgentError> {
    let namespace = &shared.config.namespace;
    let key = &shared.config.wmco_public_key;
    let secrets: Api<Secret> = Api::namespaced(shared.client.clone(), namespace);
    let found = secrets
        .get_opt(wmco::USER_DATA_SECRET)
        .await
        .map_err(api_error(node, "read the windows-user-data Secret"))?;
    let wanted = wmco::user_data_secret(namespace, key);
    match wmco::secret_action(found.as_ref(), key) {
        SecretAction::Keep => return Ok(true),
        SecretAction::Create => {
            secrets
                .create(&PostParams::default(), &wanted)
                .await
                .map_err(api_error(node, "create the windows-user-data Secret"))?;
        }
        SecretAction::Update => {
            let patch = json!({"data": wanted.data});
            secrets
                .patch(
                    wmco::USER_DATA_SECRET,
                    &PatchParams::default(),
                    &Patch::Merge(patch),
                )
                .await
                .map_err(api_error(node, "rewrite the windows-user-data Secret"))?;
        }
    }
    tracing::info!(namespace = %namespace, "WMCO wrote its windows-user-data Secret");
    Ok(false)
}

/// Waits until WMCO would configure the guest (see [`wmco_gate`]).
async fn wait_for_wmco(shared: &Shared, guest: &Guest) -> Result<(), AgentError> {
    let config = &shared.config;
    let name = &guest.name;
    let machines: Api<Machine> = Api::namespaced(shared.client.clone(), &config.namespace);
    loop {
        let machine = machines
            .get_opt(name)
            .await
            .map_err(api_error(name, "read Machine"))?;
        let secret_valid = reconcile_user_data_secret(shared, name).await?;
        let addresses = guest::addresses_of(&shared.admin, &guest.uuid)
            .ok_or_else(|| AgentError::VmGone { node: name.clone() })?;
        let customization = guest::customization_of(&shared.admin, &guest.uuid);
        let run = user_data_run(customization.as_ref());
        let side = GuestSide {
            addresses: &addresses,
            run: &run,
        };
        match wmco_gate(
            machine.as_ref(),
            secret_valid,
            &side,
            &config.wmco_public_key,
        ) {
            Ok(_) => return Ok(()),
            Err(reason) => shared.stage(&guest.uuid, JoinStage::WaitingForWmco { reason }),
        }
        tokio::time::sleep(config.poll_interval).await;
    }
}

/// The Node's addresses as the kubelet reports them before a cloud controller does: the node
/// IP and the host name.
fn node_addresses(name: &str, ip: IpAddr) -> Vec<NodeAddress> {
    vec![
        NodeAddress {
            type_: "InternalIP".to_owned(),
            address: ip.to_string(),
        },
        NodeAddress {
            type_: "Hostname".to_owned(),
            address: name.to_owned(),
        },
    ]
}

fn condition(csr: &CertificateSigningRequest, type_: &str) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True")
}

/// The CSR once `done` holds for it (`None` when it was deleted).
async fn await_csr(
    csrs: &Api<CertificateSigningRequest>,
    node: &str,
    name: &str,
    done: impl Fn(Option<&CertificateSigningRequest>) -> bool,
) -> Result<Option<CertificateSigningRequest>, AgentError> {
    await_condition(csrs.clone(), name, done)
        .await
        .map_err(|e| AgentError::Wait {
            node: node.to_owned(),
            csr: name.to_owned(),
            message: e.to_string(),
        })
}

/// The certificate kube-controller-manager's signer issues once the request is approved.
async fn wait_for_certificate(
    csrs: &Api<CertificateSigningRequest>,
    node: &str,
    name: &str,
) -> Result<Vec<u8>, AgentError> {
    let issued = |csr: Option<&CertificateSigningRequest>| {
        csr.is_none_or(|c| {
            c.status
                .as_ref()
                .and_then(|s| s.certificate.as_ref())
                .is_some_and(|pem| !pem.0.is_empty())
        })
    };
    let seen = await_csr(csrs, node, name, issued).await?;
    seen.and_then(|c| c.status)
        .and_then(|s| s.certificate)
        .map(|pem| pem.0)
        .ok_or_else(|| AgentError::CsrDeleted {
            node: node.to_owned(),
            csr: name.to_owned(),
        })
}

async fn wait_for_approval(
    csrs: &Api<CertificateSigningRequest>,
    node: &str,
    name: &str,
) -> Result<(), AgentError> {
    let decided = |csr: Option<&CertificateSigningRequest>| {
        csr.is_none_or(|c| condition(c, "Approved") || condition(c, "Denied"))
    };
    let seen = await_csr(csrs, node, name, decided).await?;
    match seen {
        None => Err(AgentError::CsrDeleted {
            node: node.to_owned(),
            csr: name.to_owned(),
        }),
        Some(csr) if condition(&csr, "Denied") => Err(AgentError::Denied {
            node: node.to_owned(),
            csr: name.to_owned(),
        }),
        Some(_) => Ok(()),
    }
}

/// The kubelet's `maxPods` on an OpenShift Linux worker (openshift/machine-config-operator
/// `templates/worker/01-worker-kubelet/_base/files/kubelet.yaml`). Its `systemReserved` varies by
/// release and node size and is not simulated: a Linux Node's allocatable is its capacity.
const LINUX_MAX_PODS: u64 = 250;
/// `node.kubernetes.io/windows-build`, which the kubelet sets on Windows to the Windows Server
/// build (kubernetes.io documentation, "Well-Known Labels, Annotations and Taints"): Windows
/// Server 2022's.
const WINDOWS_BUILD: &str = "10.0.20348";

const MIB: u64 = 1 << 20;

fn quantity_bytes(bytes: u64) -> String {
    format!("{}Ki", bytes / 1024)
}

fn node_object(
    name: &str,
    guest: &Guest,
    ip: IpAddr,
    size: guest::GuestSize,
) -> Result<Node, AgentError> {
    let memory = size.memory_mib * MIB;
    let disk = size.boot_disk_mib.map(|mib| mib * MIB);
    let cpu_millis = size.vcpus * 1000;
    let mut capacity = json!({"cpu": size.vcpus.to_string(), "memory": quantity_bytes(memory)});
    let mut allocatable = capacity.clone();
    if let Some(disk) = disk {
        capacity["ephemeral-storage"] = json!(quantity_bytes(disk));
        allocatable["ephemeral-storage"] = capacity["ephemeral-storage"].clone();
    }
    let (os, os_id, taints) = if guest.windows {
        // WMCO's kubelet configuration (`pkg/nodeconfig/nodeconfig.go`,
        // `generateKubeletConfiguration`): maxPods, systemReserved, RegisterWithTaints.
        capacity["pods"] = json!(wmco::WINDOWS_MAX_PODS.to_string());
        allocatable["pods"] = capacity["pods"].clone();
        allocatable["cpu"] = json!(format!(
            "{}m",
            cpu_millis.saturating_sub(wmco::WINDOWS_RESERVED_CPU_MILLIS)
        ));
        allocatable["memory"] = json!(quantity_bytes(
            memory.saturating_sub(wmco::WINDOWS_RESERVED_MEMORY_BYTES)
        ));
        if let Some(disk) = disk {
            allocatable["ephemeral-storage"] = json!(quantity_bytes(
                disk.saturating_sub(wmco::WINDOWS_RESERVED_EPHEMERAL_BYTES)
            ));
        }
        let (key, value, effect) = wmco::WINDOWS_TAINT;
        (
            "windows",
            "Windows",
            json!([{"key": key, "value": value, "effect": effect}]),
        )
    } else {
        capacity["pods"] = json!(LINUX_MAX_PODS.to_string());
        allocatable["pods"] = capacity["pods"].clone();
        ("linux", "rhcos", json!([]))
    };
    let now = Timestamp::now().to_string();
    let mut labels = json!({
        "kubernetes.io/os": os, "beta.kubernetes.io/os": os,
        "kubernetes.io/arch": "amd64", "beta.kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        // WMCO passes `--node-labels=node.openshift.io/os_id=Windows` (`pkg/services/services.go`);
        // RHCOS's kubelet sets `rhcos`.
        "node.openshift.io/os_id": os_id,
    });
    if guest.windows {
        labels["node.kubernetes.io/windows-build"] = json!(WINDOWS_BUILD);
    }
    let value = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {PROVIDED_NODE_IP_ANNOTATION: ip.to_string()},
        },
        "spec": {"taints": taints},
        "status": {
            "addresses": node_addresses(name, ip),
            "capacity": capacity,
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                "message": "kubelet is posting ready status", "lastHeartbeatTime": now, "lastTransitionTime": now}],
            "nodeInfo": {
                "operatingSystem": os, "architecture": "amd64",
                "kubeletVersion": "v1.33.0", "kubeProxyVersion": "",
                "containerRuntimeVersion": if guest.windows { "containerd://1.7.0" } else { "cri-o://1.33.0" },
                "osImage": if guest.windows { "Windows Server 2022 Datacenter" } else { "Red Hat Enterprise Linux CoreOS" },
                "kernelVersion": "", "machineID": guest.uuid.replace('-', ""), "bootID": "",
                // A VM's firmware UUID; whether Windows reports Prism's VM UUID here is unverified
                // (reference/03 §1).
                "systemUUID": guest.uuid,
            },
        },
    });
    serde_json::from_value(value).map_err(|e| AgentError::NodeObject {
        node: name.to_owned(),
        message: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guest(windows: bool) -> Guest {
        Guest {
            uuid: "6f1c2a3b-0000-4000-8000-000000000001".to_owned(),
            name: "win-a".to_owned(),
            windows,
        }
    }

    /// What WMCO's kubelet registers a Windows Node with (windows-machine-config-operator
    /// `pkg/nodeconfig/nodeconfig.go` `generateKubeletConfiguration`, HEAD 0be4b9c: MaxPods 250,
    /// RegisterWithTaints os=Windows:NoSchedule, SystemReserved 500m / 2Gi / 1Gi): the autoscaler's
    /// scale-from-zero template must promise the same, or it grows the wrong set.
    #[test]
    fn windows_nodes_carry_wmcos_kubelet_configuration() {
        let size = guest::GuestSize {
            vcpus: 4,
            memory_mib: 16384,
            boot_disk_mib: Some(122_880),
        };
        let ip: IpAddr = "10.40.1.7".parse().unwrap();
        let node = node_object("win-a", &guest(true), ip, size).unwrap();
        let taints = node.spec.clone().unwrap().taints.unwrap();
        assert_eq!(
            (
                taints[0].key.as_str(),
                taints[0].value.as_deref(),
                taints[0].effect.as_str()
            ),
            ("os", Some("Windows"), "NoSchedule")
        );
        let status = node.status.unwrap();
        let capacity = status.capacity.unwrap();
        let allocatable = status.allocatable.unwrap();
        assert_eq!(capacity["pods"].0, "250");
        assert_eq!(allocatable["pods"].0, "250");
        assert_eq!(capacity["cpu"].0, "4");
        assert_eq!(allocatable["cpu"].0, "3500m");
        assert_eq!(capacity["memory"].0, "16777216Ki");
        assert_eq!(allocatable["memory"].0, "14680064Ki");
        assert_eq!(capacity["ephemeral-storage"].0, "125829120Ki");
        assert_eq!(allocatable["ephemeral-storage"].0, "124780544Ki");
        let labels = node.metadata.labels.unwrap();
        assert_eq!(labels["node.openshift.io/os_id"], "Windows");
        assert_eq!(labels["node.kubernetes.io/windows-build"], WINDOWS_BUILD);

        let linux = node_object("lin-a", &guest(false), ip, size).unwrap();
        assert!(linux.spec.unwrap().taints.unwrap_or_default().is_empty());
        let status = linux.status.unwrap();
        assert_eq!(status.capacity.unwrap()["pods"].0, "250");
        assert_eq!(status.allocatable.unwrap()["cpu"].0, "4");
    }
}
