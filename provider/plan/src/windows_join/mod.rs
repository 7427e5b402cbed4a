//! Where a Windows Machine's join stands, and why it is stuck: the `WindowsJoin` condition of
//! the Windows join reconciler.
//!
//! A Windows Machine joins in these stages (reference/03 §1, §2): the VM is created; it reports
//! an IPv4 address; the Machine is Provisioned (WMCO then configures the VM over SSH and starts
//! its kubelet, which asks for a client certificate); the Node registers; the cloud controller
//! manager initialises it (removes the taint `node.cloudprovider.kubernetes.io/uninitialized`,
//! which a kubelet started with `--cloud-provider=external` registers with: k8s.io/cloud-provider
//! `api/well_known_taints.go`); nodelink links it (nodeRef) and the Node carries the Machine's
//! providerID; the kubelet gets its serving certificate; WMCO marks the Node configured
//! (annotation `windowsmachineconfig.openshift.io/version`). The condition names the stage
//! reached and what is awaited next, or why the join cannot go on, in the
//! cluster-machine-approver's terms (see [`csr`]): the client CSR's name is not the
//! Machine's `InternalDNS`; a serving CSR asks for an IP the Machine does not report; the 2-hour
//! window for client CSRs has passed; the Node registered with an IP the VM does not have in
//! Prism, or one the Machine does not report (`NodeIPMismatch`). A
//! Machine without a linked Node after the join timeout gets `JoinTimedOut`.
//!
//! IPs are compared as addresses (an IPv4-mapped IPv6 address is its IPv4 address, as Go's
//! `net.IP` treats it), except where the approver compares text ([`csr`]).
//!
//! Everything here reads; the reconciler approves no CSR and changes nothing WMCO owns.

pub mod csr;
pub mod csr_pem;

use std::net::IpAddr;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use serde_json::{Value, json};

use self::csr::{
    CLIENT_SIGNER, Csr, CsrContext, CsrVerdict, MAX_MACHINE_CLOCK_SKEW, MAX_MACHINE_DELTA,
    MachineFacts, SERVING_SIGNER, check_csr, same_address,
};
use self::csr_pem::CsrState;
use crate::api::{Machine, NutanixMachineProviderStatus, ProviderCondition, TypedCondition, phase};
use crate::machine::addresses::address_type;
use crate::machine::node_link::{
    PROVIDED_NODE_IP_ANNOTATION, machine_ips, machine_node_names, node_ips, node_ref, same_dns_name,
};
use crate::machine::status::{event_note, provider_condition};
// What the Machine protocol reads of this reconciler's report lives beside the protocol, so
// that the two capabilities depend one way only (this one on the Machine's).
pub use crate::machine::join_report::{
    CONDITION, IGNORE_LABEL, JOIN_TIMED_OUT_ERROR, STATUS_FIELD, applies_to, recorded_condition,
    timed_out_join,
};

/// Node annotation WMCO sets once the node is configured: its version.
pub const WMCO_VERSION_ANNOTATION: &str = "windowsmachineconfig.openshift.io/version";
/// Taint of a Node the cloud controller manager has not initialised yet.
pub const UNINITIALIZED_TAINT: &str = "node.cloudprovider.kubernetes.io/uninitialized";
/// `--windows-join-timeout` default: reference/03 §5 suggests failing a Machine with no Node
/// after about 90 minutes (the approver's client CSR window is 2 hours).
pub const DEFAULT_JOIN_TIMEOUT: Duration = Duration::from_secs(90 * 60);
/// The approver counts pending node CSRs created within this long.
const RECENT_PENDING_WINDOW: SignedDuration = SignedDuration::from_hours(1);
const NODE_USER_PREFIX: &str = "system:node:";

/// Condition reasons: one per stage, then one per way of being stuck.
pub mod reasons {
    pub const VM_CREATED: &str = "VMCreated";
    pub const ADDRESS_REPORTED: &str = "AddressReported";
    pub const PROVISIONED: &str = "Provisioned";
    pub const NODE_REGISTERED: &str = "NodeRegistered";
    pub const NODE_INITIALIZED: &str = "NodeInitialized";
    pub const NODE_LINKED: &str = "NodeLinked";
    pub const SERVING_CERTIFICATE: &str = "ServingCertificate";
    pub const CONFIGURED: &str = "Configured";

    pub const CLIENT_CSR_NAME_MISMATCH: &str = "ClientCSRNameMismatch";
    pub const CLIENT_CSR_WINDOW_EXPIRED: &str = "ClientCSRWindowExpired";
    pub const SERVING_CSR_ADDRESS_MISMATCH: &str = "ServingCSRAddressMismatch";
    pub const CSR_PENDING: &str = "CSRPending";
    pub const NODE_IP_MISMATCH: &str = "NodeIPMismatch";
    pub const JOIN_TIMED_OUT: &str = super::JOIN_TIMED_OUT_ERROR;
}

/// The stages, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stage {
    VmCreated,
    AddressReported,
    Provisioned,
    /// The Node exists; the cloud controller manager has not initialised it.
    NodeRegistered,
    /// Initialised (or never tainted); not linked to the Machine yet.
    NodeInitialized,
    NodeLinked,
    ServingCertificate,
    Configured,
}

impl Stage {
    /// The condition reason while the join is at this stage and not stuck.
    pub fn reason(self) -> &'static str {
        match self {
            Self::VmCreated => reasons::VM_CREATED,
            Self::AddressReported => reasons::ADDRESS_REPORTED,
            Self::Provisioned => reasons::PROVISIONED,
            Self::NodeRegistered => reasons::NODE_REGISTERED,
            Self::NodeInitialized => reasons::NODE_INITIALIZED,
            Self::NodeLinked => reasons::NODE_LINKED,
            Self::ServingCertificate => reasons::SERVING_CERTIFICATE,
            Self::Configured => reasons::CONFIGURED,
        }
    }
}

/// A CSR with where it stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObservedCsr {
    pub csr: Csr,
    pub state: CsrState,
}

impl ObservedCsr {
    /// The node a kubelet CSR is for: the CN of a client request, the user of a serving one.
    pub fn node_name(&self) -> Option<&str> {
        let identity = match self.csr.signer_name.as_str() {
            CLIENT_SIGNER => &self.csr.common_name,
            SERVING_SIGNER => &self.csr.username,
            _ => return None,
        };
        identity
            .strip_prefix(NODE_USER_PREFIX)
            .filter(|name| !name.is_empty())
    }
}

/// The Machine as the cluster-machine-approver sees it.
pub fn machine_facts(machine: &Machine) -> MachineFacts {
    let status = machine.status.as_ref();
    MachineFacts {
        name: machine.name_any(),
        created: created(machine),
        addresses: status.map(|s| s.addresses.clone()).unwrap_or_default(),
        node_ref: node_ref(machine).map(str::to_owned),
    }
}

/// The Machine's Node among `nodes`: the one its nodeRef names, else one named as the Machine.
pub fn node_of<'a>(machine: &Machine, nodes: &'a [&'a Node]) -> Option<&'a Node> {
    if let Some(linked) = node_ref(machine) {
        return nodes.iter().copied().find(|n| n.name_any() == linked);
    }
    let names = machine_node_names(machine);
    nodes
        .iter()
        .copied()
        .find(|n| names.iter().any(|name| same_dns_name(name, &n.name_any())))
}

/// What the join state is computed from.
#[derive(Clone, Copy, Debug)]
pub struct JoinInput<'a> {
    pub machine: &'a Machine,
    /// The Machine's Node ([`node_of`]).
    pub node: Option<&'a Node>,
    /// The cluster's kubelet CSRs that could be read.
    pub csrs: &'a [ObservedCsr],
    /// Every Machine, as the approver sees them.
    pub machines: &'a [MachineFacts],
    /// Every Node's name.
    pub node_names: &'a [String],
    /// The VM's IP addresses as Prism reports them, before any filtering; `None` when not known
    /// (then the Node's IP is not checked).
    pub vm_ips: Option<&'a [IpAddr]>,
    /// The `WindowsJoin` condition as written last.
    pub previous: Option<&'a ProviderCondition>,
    pub now: Timestamp,
    /// `--windows-join-timeout`.
    pub timeout: Duration,
}

/// Where the join stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoinState {
    pub stage: Stage,
    /// The condition reason: the stage's, or why it is stuck.
    pub reason: &'static str,
    pub message: String,
    /// Something is wrong (a Warning event), beyond waiting; a timeout is the reason
    /// [`reasons::JOIN_TIMED_OUT`].
    pub stuck: bool,
}

impl JoinState {
    /// Whether the join is done (the condition is `True`).
    pub fn complete(&self) -> bool {
        self.reason == reasons::CONFIGURED
    }
}

fn waiting(stage: Stage, message: String) -> JoinState {
    JoinState {
        stage,
        reason: stage.reason(),
        message,
        stuck: false,
    }
}

fn stuck(stage: Stage, reason: &'static str, message: String) -> JoinState {
    JoinState {
        stage,
        reason,
        message,
        stuck: true,
    }
}

/// A duration as people write it: `90m`, `45s`, `1500ms`.
pub fn human_duration(duration: Duration) -> String {
    let seconds = duration.as_secs();
    if duration.subsec_nanos() != 0 {
        format!("{}ms", duration.as_millis())
    } else if seconds >= 60 && seconds.is_multiple_of(60) {
        format!("{}m", seconds / 60)
    } else {
        format!("{seconds}s")
    }
}

/// The address WMCO connects to: the first `InternalIP` that is IPv4, an IPv4-mapped IPv6 one
/// included (openshift/windows-machine-config-operator `controllers/windowsmachine_controller.go`
/// `getInternalIPAddress`: `net.ParseIP(address).To4() != nil`), as written.
fn first_ipv4(machine: &Machine) -> Option<String> {
    machine
        .status
        .iter()
        .flat_map(|s| &s.addresses)
        .filter(|a| a.type_ == address_type::INTERNAL_IP)
        .find(|a| {
            a.address
                .parse::<IpAddr>()
                .is_ok_and(|ip| ip.to_canonical().is_ipv4())
        })
        .map(|a| a.address.clone())
}

fn among(ips: &[IpAddr], ip: IpAddr) -> bool {
    ips.iter().any(|other| same_address(*other, ip))
}

fn list(ips: &[IpAddr]) -> String {
    if ips.is_empty() {
        return "none".into();
    }
    ips.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The join state of `input.machine`; `None` before its VM exists (no providerID yet: the
/// Machine controller's conditions tell that part).
pub fn join_state(input: &JoinInput<'_>) -> Option<JoinState> {
    let machine = input.machine;
    let provider_id = machine
        .spec
        .provider_id
        .as_deref()
        .filter(|id| !id.is_empty())?;
    let name = machine.name_any();
    let state = match first_ipv4(machine) {
        None => waiting(
            Stage::VmCreated,
            format!(
                "VM {provider_id} created; waiting for it to report an IPv4 address (WMCO connects to the Machine's first IPv4 InternalIP)"
            ),
        ),
        Some(ip) if ![phase::PROVISIONED, phase::RUNNING].contains(&machine.phase()) => waiting(
            Stage::AddressReported,
            format!("the VM reports {ip}; waiting for the Machine to be Provisioned"),
        ),
        Some(ip) => match input.node {
            None => client_side(input, &name, &ip),
            Some(node) => node_side(input, node, provider_id, &ip),
        },
    };
    Some(with_timeout(input, state))
}

/// `at - by`, saturating at the start of jiff's range (its `-` panics past it).
fn before(at: Timestamp, by: SignedDuration) -> Timestamp {
    at.checked_sub(by).unwrap_or(Timestamp::MIN)
}

/// `at + by`, saturating at the end of jiff's range.
fn after(at: Timestamp, by: SignedDuration) -> Timestamp {
    at.checked_add(by).unwrap_or(Timestamp::MAX)
}

fn created(machine: &Machine) -> Option<Timestamp> {
    machine.metadata.creation_timestamp.as_ref().map(|t| t.0)
}

fn with_timeout(input: &JoinInput<'_>, state: JoinState) -> JoinState {
    let Some(created) = created(input.machine) else {
        return state;
    };
    let timeout = SignedDuration::try_from(input.timeout).unwrap_or(SignedDuration::MAX);
    let past = input.now.duration_since(created) >= timeout;
    if !past || node_ref(input.machine).is_some() || state.complete() {
        return state;
    }
    JoinState {
        reason: reasons::JOIN_TIMED_OUT,
        message: format!(
            "no Node linked to the Machine {} after its creation ({created}); {}: {}",
            human_duration(input.timeout),
            state.reason,
            state.message
        ),
        stuck: true,
        ..state
    }
}

fn csr_context<'a>(input: &JoinInput<'a>) -> CsrContext<'a> {
    let since = before(input.now, RECENT_PENDING_WINDOW);
    let recent_pending = input
        .csrs
        .iter()
        .filter(|c| c.state == CsrState::Pending && c.node_name().is_some())
        .filter(|c| c.csr.created.is_some_and(|t| t > since))
        .count();
    CsrContext {
        machines: input.machines,
        node_names: input.node_names,
        recent_pending,
        current_serving_cert: None,
    }
}

/// The latest CSR of `signer` for one of `names` in `state`.
fn latest<'a>(
    csrs: &'a [ObservedCsr],
    signer: &str,
    names: &[String],
    state: CsrState,
) -> Option<&'a ObservedCsr> {
    csrs.iter()
        .filter(|c| c.csr.signer_name == signer && c.state == state)
        .filter(|c| {
            c.node_name()
                .is_some_and(|node| names.iter().any(|n| same_dns_name(n, node)))
        })
        .max_by_key(|c| (c.csr.created, c.csr.name.clone()))
}

fn approver_reason(verdict: CsrVerdict) -> Option<String> {
    match verdict {
        CsrVerdict::Pending { reason } => Some(reason),
        CsrVerdict::Approvable { .. } | CsrVerdict::NotNodeCsr => None,
    }
}

const REPLACE_HINT: &str = "delete the Machine so that its MachineSet creates a new one";

/// Provisioned, no Node yet: the kubelet's client certificate.
fn client_side(input: &JoinInput<'_>, name: &str, ip: &str) -> JoinState {
    let names = machine_node_names(input.machine);
    let node_name = names.first().cloned().unwrap_or_else(|| name.to_owned());
    if let Some(approved) = latest(input.csrs, CLIENT_SIGNER, &names, CsrState::Approved) {
        return waiting(
            Stage::Provisioned,
            format!(
                "client certificate for node {node_name} approved (CSR {}); waiting for the kubelet to register the Node",
                approved.csr.name
            ),
        );
    }
    let context = csr_context(input);
    let created = created(input.machine);
    if let Some(pending) = latest(input.csrs, CLIENT_SIGNER, &names, CsrState::Pending) {
        let csr = &pending.csr;
        return match approver_reason(check_csr(csr, &context)) {
            Some(reason) => {
                let outside = match (created, csr.created) {
                    (Some(machine), Some(at)) => {
                        at <= before(machine, MAX_MACHINE_CLOCK_SKEW)
                            || at >= after(machine, MAX_MACHINE_DELTA)
                    }
                    _ => false,
                };
                if outside {
                    stuck(
                        Stage::Provisioned,
                        reasons::CLIENT_CSR_WINDOW_EXPIRED,
                        format!(
                            "client CSR {} for node {node_name} stays pending: {reason}; {REPLACE_HINT}",
                            csr.name
                        ),
                    )
                } else {
                    stuck(
                        Stage::Provisioned,
                        reasons::CSR_PENDING,
                        format!(
                            "client CSR {} for node {node_name} stays pending: {reason}",
                            csr.name
                        ),
                    )
                }
            }
            None => waiting(
                Stage::Provisioned,
                format!(
                    "client CSR {} for node {node_name} meets the cluster-machine-approver's rules; waiting for its approval",
                    csr.name
                ),
            ),
        };
    }
    // A pending client CSR that no Machine's InternalDNS matches, asked since this Machine was
    // created, is most likely this Machine's kubelet under another host name.
    let unmatched = input
        .csrs
        .iter()
        .filter(|c| c.csr.signer_name == CLIENT_SIGNER && c.state == CsrState::Pending)
        .filter(|c| match (created, c.csr.created) {
            (Some(machine), Some(at)) => at > before(machine, MAX_MACHINE_CLOCK_SKEW),
            _ => false,
        })
        .filter_map(|c| c.node_name().map(|node| (c, node)))
        .filter(|(_, node)| !input.node_names.iter().any(|n| n == node))
        .filter(|(_, node)| {
            !input.machines.iter().any(|m| {
                m.addresses.iter().any(|a| {
                    a.type_ == address_type::INTERNAL_DNS && same_dns_name(&a.address, node)
                })
            })
        })
        .max_by_key(|(c, _)| (c.csr.created, c.csr.name.clone()));
    if let Some((csr, requested)) = unmatched {
        let reason = approver_reason(check_csr(&csr.csr, &context)).unwrap_or_else(|| {
            format!("failed to find machine for node {requested}: no Machine has InternalDNS {requested}")
        });
        return stuck(
            Stage::Provisioned,
            reasons::CLIENT_CSR_NAME_MISMATCH,
            format!(
                "client CSR {} asks for node {requested}, probably from this Machine's host, whose name is not the Machine's InternalDNS {node_name}; the approver says: {reason}",
                csr.csr.name
            ),
        );
    }
    if let Some(created) = created
        && input.now >= after(created, MAX_MACHINE_DELTA)
    {
        return stuck(
            Stage::Provisioned,
            reasons::CLIENT_CSR_WINDOW_EXPIRED,
            format!(
                "no client CSR for node {node_name} within 2 h of the Machine's creation ({created}); the cluster-machine-approver approves none asked later: {REPLACE_HINT}"
            ),
        );
    }
    waiting(
        Stage::Provisioned,
        format!(
            "Provisioned with {ip}; waiting for WMCO to configure the VM over SSH and for its kubelet to ask for a client certificate as node {node_name}"
        ),
    )
}

/// The likely cause and the fix of a Node registered with an IP the VM does not have.
const NODE_IP_CAUSE: &str = "the kubelet took another interface's address. Likely cause: WMCO older than 10.16 (OpenShift 4.16), which starts the kubelet on Nutanix without --node-ip, or the hybrid-overlay (vEthernet) interface. Fix: upgrade to OpenShift 4.16 / WMCO 10.16 or later, which sets --node-ip from the interface of the default route (a --node-ip added by hand is reverted by WICD), then delete the Machine so that a new one joins";

/// Why the Node's IP is wrong, if it is.
///
/// With `alpha.kubernetes.io/provided-node-ip` (a kubelet started with `--node-ip`, as WMCO 10.16
/// and later start it) that IP is the kubelet's choice, whatever other addresses the Node lists:
/// it must be one of the VM's addresses in Prism (the cloud controller fails to initialise the
/// Node otherwise, "failed to get node address from cloud provider that matches ip",
/// k8s.io/cloud-provider `node/helpers/address.go` `GetNodeAddressesFromNodeIP`) and one the
/// Machine reports (the serving certificate carries it). Without it (WMCO before 10.16 sets no `--node-ip`), the
/// Node's `InternalIP`s are either the kubelet's own pick or the cloud controller's copy of
/// every address Prism lists for the VM (nutanix-cloud-native/cloud-provider-nutanix
/// `pkg/provider/manager.go` `getNodeAddresses`: each NIC's IPs, link-local and secondary ones
/// included), which legitimately holds addresses the Machine filters out. So there, only an IP
/// Prism does not list for the VM, or a Node none of whose IPs the Machine reports, is wrong.
fn node_ip_mismatch(input: &JoinInput<'_>, node: &Node) -> Option<String> {
    let vm_ips = input.vm_ips?;
    let node_name = node.name_any();
    let registered = node_ips(node);
    if let Some(foreign) = registered.iter().find(|ip| !among(vm_ips, **ip)) {
        return Some(format!(
            "Node {node_name} registered with IP {foreign}, which is not among the VM's addresses in Prism ({}): {NODE_IP_CAUSE}",
            list(vm_ips)
        ));
    }
    let reported = machine_ips(input.machine);
    let provided = node
        .annotations()
        .get(PROVIDED_NODE_IP_ANNOTATION)
        .is_some_and(|value| {
            value
                .split(',')
                .any(|ip| ip.trim().parse::<IpAddr>().is_ok())
        });
    let dropped = if provided {
        registered.iter().find(|ip| !among(&reported, **ip))
    } else if registered.iter().any(|ip| among(&reported, *ip)) {
        None
    } else {
        registered.first()
    };
    dropped.map(|dropped| {
        format!(
            "Node {node_name} registered with IP {dropped}, which the VM has in Prism but the Machine does not report (link-local, or in --excluded-address-cidrs such as the hybrid-overlay network; the Machine reports {}): {NODE_IP_CAUSE}",
            list(&reported)
        )
    })
}

/// Whether the Node still has the cloud controller manager's `uninitialized` taint.
fn is_uninitialized(node: &Node) -> bool {
    node.spec
        .iter()
        .flat_map(|s| s.taints.iter().flatten())
        .any(|t| t.key == UNINITIALIZED_TAINT)
}

/// What a Node the cloud controller manager has not initialised waits for. The Nutanix CCM finds
/// the Node's VM by `status.nodeInfo.systemUUID` (cloud-provider-nutanix `pkg/provider/manager.go`
/// `getNutanixInstanceIDForNode`, lower-cased), so a systemUUID that is not the VM's UUID is named.
fn uninitialized_message(node: &Node, provider_id: &str) -> String {
    let node_name = node.name_any();
    let mut message = format!(
        "Node {node_name} registered; waiting for the cloud controller manager to initialise it (taint {UNINITIALIZED_TAINT}): it finds the VM by the Node's systemUUID and sets its addresses and providerID"
    );
    let vm_uuid = provider_id.rsplit('/').next().unwrap_or_default();
    let system_uuid = node
        .status
        .as_ref()
        .and_then(|s| s.node_info.as_ref())
        .map(|i| i.system_uuid.as_str())
        .filter(|u| !u.is_empty());
    if let Some(system_uuid) = system_uuid
        && !vm_uuid.is_empty()
        && !system_uuid.eq_ignore_ascii_case(vm_uuid)
    {
        message.push_str(&format!(
            "; the Node reports systemUUID {system_uuid}, not the VM's UUID {vm_uuid}, so the Nutanix CCM cannot find the VM by it"
        ));
    }
    message
}

/// A Node exists: linking, the serving certificate, WMCO's configuration.
fn node_side(input: &JoinInput<'_>, node: &Node, provider_id: &str, ip: &str) -> JoinState {
    let node_name = node.name_any();
    let node_provider_id = node
        .spec
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .unwrap_or_default();
    let linked_by_ref = node_ref(input.machine) == Some(node_name.as_str());
    let stage = if is_uninitialized(node) {
        Stage::NodeRegistered
    } else if !(linked_by_ref && node_provider_id == provider_id) {
        Stage::NodeInitialized
    } else if node.annotations().contains_key(WMCO_VERSION_ANNOTATION) {
        Stage::Configured
    } else {
        Stage::NodeLinked
    };
    if let Some(message) = node_ip_mismatch(input, node) {
        return stuck(stage, reasons::NODE_IP_MISMATCH, message);
    }
    if stage == Stage::NodeRegistered {
        return waiting(stage, uninitialized_message(node, provider_id));
    }
    if stage == Stage::NodeInitialized {
        let message = if linked_by_ref {
            let current = if node_provider_id.is_empty() {
                "none".to_owned()
            } else {
                node_provider_id.to_owned()
            };
            format!(
                "Node {node_name} linked by nodeRef; waiting for its providerID to be the Machine's {provider_id} (it has {current})"
            )
        } else if node_provider_id.is_empty() || node_provider_id == provider_id {
            format!(
                "Node {node_name} registered; waiting for nodelink to set the Machine's nodeRef (it matches by providerID {provider_id}, then by the Machine's first InternalIP {ip})"
            )
        } else {
            format!(
                "Node {node_name} registered with providerID {node_provider_id}, not the Machine's {provider_id}: nodelink can only match it by the Machine's first InternalIP {ip}"
            )
        };
        return waiting(stage, message);
    }
    let names = [node_name.clone()];
    let context = csr_context(input);
    let mut awaiting_approval = None;
    if let Some(pending) = latest(input.csrs, SERVING_SIGNER, &names, CsrState::Pending) {
        let csr = &pending.csr;
        match approver_reason(check_csr(csr, &context)) {
            Some(reason) => {
                let reported = machine_ips(input.machine);
                let unknown_ip = csr.ip_addresses.iter().any(|ip| !among(&reported, *ip));
                let reason_code = if unknown_ip {
                    reasons::SERVING_CSR_ADDRESS_MISMATCH
                } else {
                    reasons::CSR_PENDING
                };
                return stuck(
                    stage,
                    reason_code,
                    format!(
                        "serving CSR {} for node {node_name} stays pending: {reason}",
                        csr.name
                    ),
                );
            }
            None => awaiting_approval = Some(csr.name.clone()),
        }
    }
    if stage == Stage::Configured {
        let version = node
            .annotations()
            .get(WMCO_VERSION_ANNOTATION)
            .cloned()
            .unwrap_or_default();
        return waiting(
            stage,
            format!("Node {node_name} configured by WMCO {version}"),
        );
    }
    // Approved CSRs are garbage-collected after an hour: once seen, the stage is kept.
    let served = latest(input.csrs, SERVING_SIGNER, &names, CsrState::Approved).is_some()
        || input.previous.is_some_and(|c| {
            c.reason == reasons::SERVING_CERTIFICATE || c.reason == reasons::CONFIGURED
        });
    if served {
        return waiting(
            Stage::ServingCertificate,
            format!(
                "serving certificate of Node {node_name} approved; waiting for WMCO to finish configuring it (annotation {WMCO_VERSION_ANNOTATION})"
            ),
        );
    }
    let next = match awaiting_approval {
        Some(csr) => format!(
            "serving CSR {csr} meets the cluster-machine-approver's rules; waiting for its approval"
        ),
        None => "waiting for the kubelet to ask for its serving certificate".to_owned(),
    };
    waiting(
        stage,
        format!("Node {node_name} linked (nodeRef, providerID {provider_id}); {next}"),
    )
}

/// An event about a transition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoinEvent {
    pub warning: bool,
    pub reason: &'static str,
    pub note: String,
}

/// What the reconciler writes.
#[derive(Clone, Debug, PartialEq)]
pub struct JoinDecision {
    pub state: JoinState,
    /// The condition as it is to be written into the providerStatus ([`condition_patch`]): its
    /// `lastTransitionTime` moves only when its status changes.
    pub condition: ProviderCondition,
    /// Published when the reason changed since the condition was written last.
    pub event: Option<JoinEvent>,
}

/// The condition and event for `input`; `None` before the VM exists. A timed-out join is only
/// reported here: failing the Machine for it is the Machine controller's decision
/// ([`timed_out_join`]), as phase is its field.
pub fn decide(input: &JoinInput<'_>, now: &Time) -> Option<JoinDecision> {
    let state = join_state(input)?;
    let condition = next_condition(
        input.previous,
        provider_condition(
            CONDITION,
            state.complete(),
            state.reason,
            state.message.clone(),
            now,
        ),
    );
    let transition = input
        .previous
        .is_none_or(|previous| previous.reason != state.reason);
    let event = transition.then(|| JoinEvent {
        warning: state.stuck,
        reason: state.reason,
        note: event_note(&format!("Windows join: {}", state.message)),
    });
    Some(JoinDecision {
        state,
        condition,
        event,
    })
}

/// `condition` as it is to be written: `lastTransitionTime` moves only when the status changes.
fn next_condition(
    previous: Option<&ProviderCondition>,
    mut condition: ProviderCondition,
) -> ProviderCondition {
    if let Some(previous) = previous
        && previous.condition_status() == condition.condition_status()
    {
        condition.keep_transition_of(previous);
    }
    condition
}

/// The status merge patch that writes `condition` into [`STATUS_FIELD`]; `None` when it is
/// there already. It touches no other key, so it carries no resourceVersion, except when it also
/// takes an earlier version's copy out of `providerStatus.conditions` (the Machine controller's
/// list): then it names the version it was computed from (`resource_version`, the Machine's),
/// and a write in between makes it fail. The join reconciler writes nothing else.
pub fn condition_patch(
    status: &NutanixMachineProviderStatus,
    condition: &ProviderCondition,
    resource_version: Option<&str>,
) -> Option<Value> {
    let legacy = status.conditions.iter().any(|c| c.type_ == CONDITION);
    let written = status
        .other
        .get(STATUS_FIELD)
        .and_then(|value| serde_json::from_value::<ProviderCondition>(value.clone()).ok());
    if !legacy && written.as_ref() == Some(condition) {
        return None;
    }
    let mut provider_status = json!({ STATUS_FIELD: condition });
    let mut patch = json!({});
    if legacy {
        let kept: Vec<&ProviderCondition> = status
            .conditions
            .iter()
            .filter(|c| c.type_ != CONDITION)
            .collect();
        provider_status["conditions"] = json!(kept);
        patch["metadata"] = json!({"resourceVersion": resource_version});
    }
    patch["status"] = json!({"providerStatus": provider_status});
    Some(patch)
}

impl JoinDecision {
    /// How soon the Machine is looked at again: at the steady pace (`running`) once the join is
    /// complete, else at the pace of a Machine waiting for something (`requeue`).
    pub fn next_look(&self, running: Duration, requeue: Duration) -> Duration {
        if self.state.complete() {
            running
        } else {
            requeue
        }
    }
}

#[cfg(test)]
mod tests;
