//! The cluster-machine-approver's decision on one CSR, from its own source
//! (openshift/cluster-machine-approver HEAD a9edd69: `pkg/controller/controller.go`,
//! `csr_check.go`, `node_client.go`, `pkg/machinehandler/machinehandler.go`), each rule cited at
//! the code that simulates it. Pure: the caller reads the CSRs, Machines and Nodes.
//!
//! Not simulated: the serving-certificate renewal path (`authorizeServingRenewal`, which dials the
//! kubelet on its port to compare SANs with the current certificate: there is no kubelet to dial,
//! so `getServingCert` always finds none, as it does on a cluster without the kubelet CA), hence
//! also the egress-IP renewal path, which needs a current certificate; the `NodeClientCert.Disabled`
//! configuration (off by default).

use std::fmt;
use std::net::IpAddr;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::NodeAddress;
use kube::ResourceExt;

use crate::csr::{CLIENT_SIGNER, ParsedRequest, SERVING_SIGNER};
use crate::machine_api::Machine;

/// The reason of the approver's `Approved` condition (`controller.go`, `approve`).
pub const APPROVED_REASON: &str = "NodeCSRApprove";
/// Its message (`csrConditionApproveMessage`), also how the approver tells its own approvals.
pub const APPROVED_MESSAGE: &str =
    "This CSR was approved by the Node CSR Approver (cluster-machine-approver)";

// `csr_check.go` constants.
const NODE_USER_PREFIX: &str = "system:node:";
const NODE_GROUP: &str = "system:nodes";
const AUTHENTICATED_GROUP: &str = "system:authenticated";
const NODE_BOOTSTRAPPER_USERNAME: &str =
    "system:serviceaccount:openshift-machine-config-operator:node-bootstrapper";
const NODE_BOOTSTRAPPER_GROUPS: [&str; 3] = [
    "system:serviceaccounts:openshift-machine-config-operator",
    "system:serviceaccounts",
    "system:authenticated",
];
const MAX_PENDING_DELTA: SignedDuration = SignedDuration::from_hours(1);
const MAX_APPROVED_DELTA: SignedDuration = SignedDuration::from_secs(30);
const MAX_DIFF_BETWEEN_PENDING_CSRS_AND_MACHINES: usize = 100;
const MAX_MACHINE_CLOCK_SKEW: SignedDuration = SignedDuration::from_secs(10);
const MAX_MACHINE_DELTA: SignedDuration = SignedDuration::from_hours(2);

/// Which path approved a CSR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CsrKind {
    /// A new node's client certificate (`authorizeNodeClientCSR`).
    Client,
    /// A serving certificate, authorized against the node's Machine
    /// (`authorizeServingCertWithMachine`).
    Serving,
}

/// Why the approver does not look at a CSR at all (`controller.go`, `pendingNodeCertFilter`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IgnoreReason {
    /// "Ignoring csr because of unsupported signerName".
    Signer(String),
    /// "Ignoring csr because it does not have the system:nodes group".
    ServingWithoutNodesGroup,
    /// "Ignoring csr because it is not from the node bootstrapper".
    ClientNotFromBootstrapper,
}

impl fmt::Display for IgnoreReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Signer(signer) => write!(f, "unsupported signerName: {signer}"),
            Self::ServingWithoutNodesGroup => write!(f, "it does not have the system:nodes group"),
            Self::ClientNotFromBootstrapper => write!(f, "it is not from the node bootstrapper"),
        }
    }
}

/// Why the approver leaves a CSR pending, in its own words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PendingReason {
    /// `reconcileLimits`: "Ignoring all CSRs as too many recent pending CSRs seen".
    TooManyPending { pending: usize, max: usize },
    /// `parseCSR`: the request is not a PEM `CERTIFICATE REQUEST` holding a PKCS#10 request.
    UnparsableRequest { message: String },
    /// `authorizeNodeClientCSR`: not the node-bootstrapper with exactly its groups, or an empty
    /// node name.
    NotNodeBootstrapper,
    /// "node %s already exists, cannot approve".
    NodeExists { node: String },
    /// "failed to find machine with InternalDNS matching %s, cannot approve".
    NoMachineWithInternalDns { node: String },
    /// "machine for node %v already has node ref, cannot approve".
    MachineHasNodeRef { machine: String, node_ref: String },
    /// "CSR creation time %s not in range (%s, %s)".
    CreatedOutsideWindow {
        machine: String,
        created: Option<Timestamp>,
        machine_created: Option<Timestamp>,
    },
    /// `validateCSRContents`: "CSR does not appear to be a node serving cert".
    NotServingCert,
    /// "too few groups".
    TooFewGroups,
    /// "%q not in %q and %q".
    MissingGroups { groups: Vec<String> },
    /// "too few usages" (the count is neither 2 nor 3).
    UsageCount { usages: Vec<String> },
    /// "%q is missing usages".
    MissingUsages { usages: Vec<String> },
    /// "mismatched CommonName %s != %s".
    MismatchedCommonName {
        common_name: String,
        username: String,
    },
    /// "organization %v doesn't include %s".
    MissingOrganization { organizations: Vec<String> },
    /// "unable to find machine for node": no Machine's nodeRef names the node.
    NoMachineForNode { node: String },
    /// "DNS name '%s' not in machine names: %s".
    DnsNameNotInMachine { san: String, attempted: Vec<String> },
    /// "IP address '%s' not in machine addresses: %s".
    IpNotInMachine { san: String, attempted: Vec<String> },
}

impl PendingReason {
    /// Whether the approver returns it as an error, so controller-runtime retries the CSR with
    /// backoff (`reconcileCSR` returns `authorizeCSR`'s error: a parse error, no Machine by
    /// InternalDNS, or every serving authorization failed); the other outcomes are
    /// `false, nil`, and the CSR waits for a change of its own.
    pub fn is_retried(&self) -> bool {
        matches!(
            self,
            Self::UnparsableRequest { .. }
                | Self::NoMachineWithInternalDns { .. }
                | Self::NoMachineForNode { .. }
                | Self::DnsNameNotInMachine { .. }
                | Self::IpNotInMachine { .. }
        )
    }
}

impl fmt::Display for PendingReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let time = |t: &Option<Timestamp>| t.map_or_else(|| "(none)".to_owned(), |t| t.to_string());
        match self {
            Self::TooManyPending { pending, max } => write!(
                f,
                "Pending CSRs: {pending}; Max pending allowed: {max}. Difference between pending CSRs and machines > {MAX_DIFF_BETWEEN_PENDING_CSRS_AND_MACHINES}. Ignoring all CSRs as too many recent pending CSRs seen"
            ),
            Self::UnparsableRequest { message } => {
                write!(f, "error parsing request CSR: {message}")
            }
            Self::NotNodeBootstrapper => write!(
                f,
                "CSR does not appear to be a valid node bootstrapper client cert request"
            ),
            Self::NodeExists { node } => write!(f, "node {node} already exists, cannot approve"),
            Self::NoMachineWithInternalDns { node } => write!(
                f,
                "failed to find machine with InternalDNS matching {node}, cannot approve"
            ),
            Self::MachineHasNodeRef { machine, node_ref } => write!(
                f,
                "machine {machine} for node {node_ref} already has node ref, cannot approve"
            ),
            Self::CreatedOutsideWindow {
                machine,
                created,
                machine_created,
            } => write!(
                f,
                "CSR creation time {} not in range of Machine {machine}'s creation time {} -10s … +2h",
                time(created),
                time(machine_created)
            ),
            Self::NotServingCert => write!(f, "CSR does not appear to be a node serving cert"),
            Self::TooFewGroups => write!(f, "too few groups"),
            Self::MissingGroups { groups } => write!(
                f,
                "{groups:?} not in \"system:authenticated\" and \"system:nodes\""
            ),
            Self::UsageCount { usages } => write!(f, "too few usages: {usages:?}"),
            Self::MissingUsages { usages } => write!(f, "{usages:?} is missing usages"),
            Self::MismatchedCommonName {
                common_name,
                username,
            } => write!(f, "mismatched CommonName {common_name} != {username}"),
            Self::MissingOrganization { organizations } => write!(
                f,
                "organization {organizations:?} doesn't include {NODE_GROUP}"
            ),
            Self::NoMachineForNode { node } => {
                write!(f, "unable to find machine for node {node}")
            }
            Self::DnsNameNotInMachine { san, attempted } => write!(
                f,
                "DNS name '{san}' not in machine names: {}",
                attempted.join(" ")
            ),
            Self::IpNotInMachine { san, attempted } => write!(
                f,
                "IP address '{san}' not in machine addresses: {}",
                attempted.join(" ")
            ),
        }
    }
}

/// A Machine as the approver reads it (`machinehandler.Machine`: metadata, `status.nodeRef` and
/// `status.addresses` only).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ApproverMachine {
    pub name: String,
    pub created: Option<Timestamp>,
    /// `status.nodeRef.name`, when there is a nodeRef (with or without a name).
    pub node_ref: Option<String>,
    pub addresses: Vec<NodeAddress>,
}

impl From<&Machine> for ApproverMachine {
    fn from(machine: &Machine) -> Self {
        Self {
            name: machine.name_any(),
            created: machine.metadata.creation_timestamp.as_ref().map(|t| t.0),
            node_ref: machine
                .node_ref()
                .map(|r| r.name.clone().unwrap_or_default()),
            addresses: machine.addresses().to_vec(),
        }
    }
}

/// An approved CSR: the path, and the Machine it was approved for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Authorized {
    pub kind: CsrKind,
    pub machine: String,
}

fn condition_message<'a>(csr: &'a CertificateSigningRequest, type_: &str) -> Option<&'a str> {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default()
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.message.as_deref().unwrap_or_default())
}

/// `isApproved`: an `Approved` condition, whatever its status.
pub fn is_approved(csr: &CertificateSigningRequest) -> bool {
    condition_message(csr, "Approved").is_some()
}

/// `inTimeSpan`: strictly after `start` and strictly before `end`.
fn in_time_span(start: Timestamp, end: Timestamp, check: Timestamp) -> bool {
    check > start && check < end
}

/// `isRecentlyApproved` && !`isApprovedByCMA`: approved by someone else within the last 30 s.
fn recently_approved_by_another(csr: &CertificateSigningRequest, now: Timestamp) -> bool {
    let Some(approved) = csr
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default()
        .iter()
        .find(|c| c.type_ == "Approved")
    else {
        return false;
    };
    let recent = approved
        .last_transition_time
        .as_ref()
        .is_some_and(|t| in_time_span(now - MAX_APPROVED_DELTA, now + MAX_MACHINE_CLOCK_SKEW, t.0));
    recent && approved.message.as_deref() != Some(APPROVED_MESSAGE)
}

/// `pendingNodeCertFilter`'s signer checks: `Ok` when the approver reconciles the CSR.
pub fn signer_filter(csr: &CertificateSigningRequest) -> Result<(), IgnoreReason> {
    let spec = &csr.spec;
    match spec.signer_name.as_str() {
        SERVING_SIGNER => {
            if spec.groups.iter().flatten().any(|g| g == NODE_GROUP) {
                Ok(())
            } else {
                Err(IgnoreReason::ServingWithoutNodesGroup)
            }
        }
        CLIENT_SIGNER => {
            if spec.username.as_deref() == Some(NODE_BOOTSTRAPPER_USERNAME) {
                Ok(())
            } else {
                Err(IgnoreReason::ClientNotFromBootstrapper)
            }
        }
        other => Err(IgnoreReason::Signer(other.to_owned())),
    }
}

/// `pendingNodeCertFilter`: not approved (or just approved by another), and past the signer
/// checks.
pub fn pending_node_cert(csr: &CertificateSigningRequest, now: Timestamp) -> bool {
    (!is_approved(csr) || recently_approved_by_another(csr, now)) && signer_filter(csr).is_ok()
}

/// `recentlyPendingNodeCSRs`: the CSRs `pendingNodeCertFilter` keeps that were created within the
/// last hour (up to 10 s ahead for clock skew).
pub fn recently_pending<'a>(
    csrs: impl IntoIterator<Item = &'a CertificateSigningRequest>,
    now: Timestamp,
) -> usize {
    csrs.into_iter()
        .filter(|csr| {
            csr.metadata.creation_timestamp.as_ref().is_some_and(|t| {
                in_time_span(now - MAX_PENDING_DELTA, now + MAX_MACHINE_CLOCK_SKEW, t.0)
            })
        })
        .filter(|csr| pending_node_cert(csr, now))
        .count()
}

/// `reconcileLimits`: approval stops while recent pending CSRs exceed
/// max(Machines, Nodes) + 100 (`getMaxPending`).
pub fn limit_reached(pending: usize, machines: usize, nodes: usize) -> Option<PendingReason> {
    let max = machines.max(nodes) + MAX_DIFF_BETWEEN_PENDING_CSRS_AND_MACHINES;
    (pending > max).then_some(PendingReason::TooManyPending { pending, max })
}

fn usage_set(usages: &[String]) -> std::collections::BTreeSet<&str> {
    usages.iter().map(String::as_str).collect()
}

/// `node_client.go`, `hasExactUsages`: as many usages as required, each one of them (a repeated
/// usage passes, as in the Go code).
fn has_exact_usages(usages: &[String], required: &[&str]) -> bool {
    usages.len() == required.len() && usages.iter().all(|u| required.contains(&u.as_str()))
}

/// `node_client.go`, `isNodeClientCert`: what makes a request a client one (the signer is not
/// looked at): O exactly `[system:nodes]`, no DNS, email or IP SANs, exactly the legacy or the
/// current kubelet client usages, CN `system:node:…`.
fn is_node_client_cert(usages: &[String], request: &ParsedRequest) -> bool {
    request.organizations == [NODE_GROUP]
        && request.dns_names.is_empty()
        && request.email_addresses.is_empty()
        && request.ip_addresses.is_empty()
        && (has_exact_usages(
            usages,
            &["key encipherment", "digital signature", "client auth"],
        ) || has_exact_usages(usages, &["digital signature", "client auth"]))
        && request.common_name.starts_with(NODE_USER_PREFIX)
}

/// `machinehandler.go`, `FindMatchingMachineFromInternalDNS`: the first Machine with an
/// `InternalDNS` equal to the node name, ignoring case and the address's trailing dot.
fn machine_by_internal_dns<'a>(
    machines: &'a [ApproverMachine],
    node: &str,
) -> Option<&'a ApproverMachine> {
    machines.iter().find(|m| {
        m.addresses.iter().any(|a| {
            a.type_ == "InternalDNS"
                && a.address
                    .strip_suffix('.')
                    .unwrap_or(&a.address)
                    .eq_ignore_ascii_case(node)
        })
    })
}

/// `csr_check.go`, `authorizeNodeClientCSR`.
fn authorize_client(
    csr: &CertificateSigningRequest,
    request: &ParsedRequest,
    machines: &[ApproverMachine],
    node_exists: &dyn Fn(&str) -> bool,
) -> Result<Authorized, PendingReason> {
    // `isReqFromNodeBootstrapper`: the user name, and exactly its groups (as a set).
    let groups: std::collections::BTreeSet<&str> = csr
        .spec
        .groups
        .iter()
        .flatten()
        .map(String::as_str)
        .collect();
    if csr.spec.username.as_deref() != Some(NODE_BOOTSTRAPPER_USERNAME)
        || groups != NODE_BOOTSTRAPPER_GROUPS.into_iter().collect()
    {
        return Err(PendingReason::NotNodeBootstrapper);
    }
    let node = request
        .common_name
        .strip_prefix(NODE_USER_PREFIX)
        .unwrap_or_default();
    if node.is_empty() {
        return Err(PendingReason::NotNodeBootstrapper);
    }
    if node_exists(node) {
        return Err(PendingReason::NodeExists {
            node: node.to_owned(),
        });
    }
    let Some(machine) = machine_by_internal_dns(machines, node) else {
        return Err(PendingReason::NoMachineWithInternalDns {
            node: node.to_owned(),
        });
    };
    if let Some(node_ref) = &machine.node_ref {
        return Err(PendingReason::MachineHasNodeRef {
            machine: machine.name.clone(),
            node_ref: node_ref.clone(),
        });
    }
    // The CSR must come between 10 s before and 2 h after the Machine's creation; a Machine
    // without a creation time (Go's zero time) never qualifies.
    let created = csr.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let in_window = match (machine.created, created) {
        (Some(machine_created), Some(created)) => in_time_span(
            machine_created - MAX_MACHINE_CLOCK_SKEW,
            machine_created + MAX_MACHINE_DELTA,
            created,
        ),
        _ => false,
    };
    if !in_window {
        return Err(PendingReason::CreatedOutsideWindow {
            machine: machine.name.clone(),
            created,
            machine_created: machine.created,
        });
    }
    Ok(Authorized {
        kind: CsrKind::Client,
        machine: machine.name.clone(),
    })
}

/// `csr_check.go`, `validateCSRContents`: the node asking for a serving certificate.
fn validate_serving_contents(
    csr: &CertificateSigningRequest,
    request: &ParsedRequest,
) -> Result<String, PendingReason> {
    let username = csr.spec.username.as_deref().unwrap_or_default();
    let node = username.strip_prefix(NODE_USER_PREFIX).unwrap_or_default();
    if node.is_empty() {
        return Err(PendingReason::NotServingCert);
    }
    let groups = csr.spec.groups.clone().unwrap_or_default();
    if groups.len() < 2 {
        return Err(PendingReason::TooFewGroups);
    }
    if !groups.iter().any(|g| g == NODE_GROUP) || !groups.iter().any(|g| g == AUTHENTICATED_GROUP) {
        return Err(PendingReason::MissingGroups { groups });
    }
    // Two or three usages, a set holding the current or the legacy required ones: a superset
    // such as `digital signature, server auth, client auth` passes.
    let usages = csr.spec.usages.clone().unwrap_or_default();
    if usages.len() != 2 && usages.len() != 3 {
        return Err(PendingReason::UsageCount { usages });
    }
    let set = usage_set(&usages);
    let current = ["digital signature", "server auth"];
    let legacy = ["digital signature", "key encipherment", "server auth"];
    if !current.iter().all(|u| set.contains(u)) && !legacy.iter().all(|u| set.contains(u)) {
        return Err(PendingReason::MissingUsages { usages });
    }
    if request.common_name != username {
        return Err(PendingReason::MismatchedCommonName {
            common_name: request.common_name.clone(),
            username: username.to_owned(),
        });
    }
    if !request.organizations.iter().any(|o| o == NODE_GROUP) {
        return Err(PendingReason::MissingOrganization {
            organizations: request.organizations.clone(),
        });
    }
    Ok(node.to_owned())
}

/// Go's `net.IP.String()`: an IPv4-mapped IPv6 address prints as IPv4; others as Rust prints
/// them (RFC 5952 for IPv6, as Go).
pub fn go_ip_string(ip: &IpAddr) -> String {
    match ip {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map_or_else(|| v6.to_string(), |v4| v4.to_string()),
        IpAddr::V4(v4) => v4.to_string(),
    }
}

/// `csr_check.go`, `authorizeServingCertWithMachine`: the Machine whose nodeRef names the node
/// (`FindMatchingMachineFromNodeRef`); every non-empty DNS SAN equal (any case) to one of its
/// `InternalDNS`/`ExternalDNS`/`Hostname` addresses without their trailing dot; every IP SAN, as
/// Go prints it, equal as text to one of its `InternalIP`/`ExternalIP` addresses.
fn authorize_serving(
    node: &str,
    request: &ParsedRequest,
    machines: &[ApproverMachine],
) -> Result<Authorized, PendingReason> {
    let Some(machine) = machines
        .iter()
        .find(|m| m.node_ref.as_deref() == Some(node))
    else {
        return Err(PendingReason::NoMachineForNode {
            node: node.to_owned(),
        });
    };
    let of_types = |types: &[&str]| -> Vec<&NodeAddress> {
        machine
            .addresses
            .iter()
            .filter(|a| types.contains(&a.type_.as_str()))
            .collect()
    };
    let names = of_types(&["InternalDNS", "ExternalDNS", "Hostname"]);
    for san in request.dns_names.iter().filter(|s| !s.is_empty()) {
        let found = names
            .iter()
            .any(|a| san.eq_ignore_ascii_case(a.address.strip_suffix('.').unwrap_or(&a.address)));
        if !found {
            return Err(PendingReason::DnsNameNotInMachine {
                san: san.clone(),
                attempted: names.iter().map(|a| a.address.clone()).collect(),
            });
        }
    }
    let ips = of_types(&["InternalIP", "ExternalIP"]);
    for san in &request.ip_addresses {
        let text = go_ip_string(san);
        if !ips.iter().any(|a| a.address == text) {
            return Err(PendingReason::IpNotInMachine {
                san: text,
                attempted: ips.iter().map(|a| a.address.clone()).collect(),
            });
        }
    }
    Ok(Authorized {
        kind: CsrKind::Serving,
        machine: machine.name.clone(),
    })
}

/// `csr_check.go`, `authorizeCSR`: the client path when the request looks like a client one
/// (whatever its signer), the serving path otherwise.
pub fn authorize(
    csr: &CertificateSigningRequest,
    request: &ParsedRequest,
    machines: &[ApproverMachine],
    node_exists: &dyn Fn(&str) -> bool,
) -> Result<Authorized, PendingReason> {
    let usages = csr.spec.usages.clone().unwrap_or_default();
    if is_node_client_cert(&usages, request) {
        return authorize_client(csr, request, machines, node_exists);
    }
    let node = validate_serving_contents(csr, request)?;
    authorize_serving(&node, request, machines)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::csr::{CLIENT_USAGES, NODE_BOOTSTRAPPER_GROUPS as AGENT_GROUPS, SERVING_USAGES};

    fn object(
        signer: &str,
        username: &str,
        groups: &[&str],
        usages: &[&str],
        created: Timestamp,
    ) -> CertificateSigningRequest {
        serde_json::from_value(json!({
            "metadata": {"name": "csr-x", "creationTimestamp": created.to_string()},
            "spec": {"request": "", "signerName": signer, "username": username,
                "groups": groups, "usages": usages}
        }))
        .unwrap()
    }

    fn client(created: Timestamp) -> CertificateSigningRequest {
        object(
            CLIENT_SIGNER,
            NODE_BOOTSTRAPPER_USERNAME,
            &AGENT_GROUPS,
            &CLIENT_USAGES,
            created,
        )
    }

    fn serving(node: &str, created: Timestamp) -> CertificateSigningRequest {
        object(
            SERVING_SIGNER,
            &format!("system:node:{node}"),
            &["system:nodes", "system:authenticated"],
            &SERVING_USAGES,
            created,
        )
    }

    fn client_request(node: &str) -> ParsedRequest {
        ParsedRequest {
            common_name: format!("system:node:{node}"),
            organizations: vec!["system:nodes".to_owned()],
            ..ParsedRequest::default()
        }
    }

    fn serving_request(node: &str, dns: &[&str], ips: &[&str]) -> ParsedRequest {
        ParsedRequest {
            dns_names: dns.iter().map(|s| (*s).to_owned()).collect(),
            ip_addresses: ips.iter().map(|s| s.parse().unwrap()).collect(),
            ..client_request(node)
        }
    }

    fn machine(
        name: &str,
        created: Timestamp,
        node_ref: Option<&str>,
        addresses: Value,
    ) -> ApproverMachine {
        ApproverMachine {
            name: name.to_owned(),
            created: Some(created),
            node_ref: node_ref.map(str::to_owned),
            addresses: serde_json::from_value(addresses).unwrap(),
        }
    }

    fn no_node(_: &str) -> bool {
        false
    }

    /// A rule, the CSR, the Machines, and the approver's verdict.
    type ClientRule = (
        &'static str,
        CertificateSigningRequest,
        Vec<ApproverMachine>,
        Result<Authorized, PendingReason>,
    );

    /// The client-certificate rules of openshift/cluster-machine-approver
    /// `pkg/controller/csr_check.go` (`authorizeNodeClientCSR`) and `node_client.go`
    /// (`isNodeClientCert`), HEAD a9edd69. A provider whose Machines do not carry the
    /// `InternalDNS` the kubelet registers fails the e2e suite through these.
    #[test]
    fn client_rules_are_the_approvers() {
        let now = Timestamp::now();
        let created = now - SignedDuration::from_mins(5);
        let win = |addresses: Value| vec![machine("win-a", created, None, addresses)];
        let dns = |name: &str| json!([{"type": "InternalDNS", "address": name}]);
        let ok = |machine: &str| {
            Ok(Authorized {
                kind: CsrKind::Client,
                machine: machine.to_owned(),
            })
        };
        let mut legacy = client(now);
        legacy.spec.usages = Some(vec![
            "key encipherment".into(),
            "digital signature".into(),
            "client auth".into(),
        ]);
        let mut other_groups = client(now);
        other_groups.spec.groups = Some(vec!["system:authenticated".into()]);
        let table: Vec<ClientRule> = vec![
            (
                "FindMatchingMachineFromInternalDNS: InternalDNS equals the node name",
                client(now),
                win(dns("win-a")),
                ok("win-a"),
            ),
            (
                "FindMatchingMachineFromInternalDNS: any case, the address's trailing dot ignored",
                client(now),
                win(dns("WIN-A.")),
                ok("win-a"),
            ),
            (
                "FindMatchingMachineFromInternalDNS: a Hostname address is not enough",
                client(now),
                win(json!([{"type": "Hostname", "address": "win-a"}])),
                Err(PendingReason::NoMachineWithInternalDns {
                    node: "win-a".into(),
                }),
            ),
            (
                "isNodeClientCert: the legacy usages with key encipherment",
                legacy,
                win(dns("win-a")),
                ok("win-a"),
            ),
            (
                "isReqFromNodeBootstrapper: exactly the three groups",
                other_groups,
                win(dns("win-a")),
                Err(PendingReason::NotNodeBootstrapper),
            ),
            (
                "authorizeNodeClientCSR: the Machine must have no NodeRef",
                client(now),
                vec![machine("win-a", created, Some("win-a"), dns("win-a"))],
                Err(PendingReason::MachineHasNodeRef {
                    machine: "win-a".into(),
                    node_ref: "win-a".into(),
                }),
            ),
            (
                "maxMachineDelta: at most 2 h after the Machine's creation",
                client(created + SignedDuration::from_hours(2)),
                win(dns("win-a")),
                Err(PendingReason::CreatedOutsideWindow {
                    machine: "win-a".into(),
                    created: Some(created + SignedDuration::from_hours(2)),
                    machine_created: Some(created),
                }),
            ),
            (
                "maxMachineClockSkew: up to 10 s before the Machine's creation",
                client(created - SignedDuration::from_secs(9)),
                win(dns("win-a")),
                ok("win-a"),
            ),
            (
                "maxMachineClockSkew: not 11 s before",
                client(created - SignedDuration::from_secs(11)),
                win(dns("win-a")),
                Err(PendingReason::CreatedOutsideWindow {
                    machine: "win-a".into(),
                    created: Some(created - SignedDuration::from_secs(11)),
                    machine_created: Some(created),
                }),
            ),
        ];
        for (rule, csr, machines, expected) in table {
            assert_eq!(
                authorize(&csr, &client_request("win-a"), &machines, &no_node),
                expected,
                "{rule}"
            );
        }
        assert_eq!(
            authorize(
                &client(now),
                &client_request("win-a"),
                &win(dns("win-a")),
                &|n| n == "win-a"
            ),
            Err(PendingReason::NodeExists {
                node: "win-a".into()
            }),
            "authorizeNodeClientCSR: no Node of that name may exist"
        );
        // `isNodeClientCert` fails with a SAN: the request is then judged as a serving one.
        let with_san = serving_request("win-a", &["win-a"], &[]);
        assert_eq!(
            authorize(&client(now), &with_san, &win(dns("win-a")), &no_node),
            Err(PendingReason::NotServingCert)
        );
    }

    /// A rule, the CSR, its parsed request, and the approver's verdict.
    type ServingRule = (
        &'static str,
        CertificateSigningRequest,
        ParsedRequest,
        Result<Authorized, PendingReason>,
    );

    /// The serving-certificate rules of `csr_check.go` (`validateCSRContents`,
    /// `authorizeServingCertWithMachine`), HEAD a9edd69. A provider that leaves out the node's IP
    /// from the Machine's addresses, or compares IPs more loosely than the approver, fails here
    /// only if the rule changed, and in the e2e suite through the pending serving CSR.
    #[test]
    fn serving_rules_are_the_approvers() {
        let now = Timestamp::now();
        let linked = |addresses: Value| vec![machine("win-a", now, Some("win-a"), addresses)];
        let addresses = json!([
            {"type": "InternalIP", "address": "10.40.1.7"},
            {"type": "InternalDNS", "address": "win-a"},
            {"type": "Hostname", "address": "win-a."},
            {"type": "ExternalIP", "address": "fd00::7"}
        ]);
        let ok = Ok(Authorized {
            kind: CsrKind::Serving,
            machine: "win-a".into(),
        });
        let with_usages = |usages: &[&str]| {
            let mut csr = serving("win-a", now);
            csr.spec.usages = Some(usages.iter().map(|u| (*u).to_owned()).collect());
            csr
        };
        let table: Vec<ServingRule> = vec![
            (
                "DNS SANs against InternalDNS/ExternalDNS/Hostname, IP SANs against InternalIP/ExternalIP",
                serving("win-a", now),
                serving_request("win-a", &["win-a", "WIN-A"], &["10.40.1.7", "fd00::7"]),
                ok.clone(),
            ),
            (
                "usages: a superset holding the current ones (2 or 3 in all)",
                with_usages(&["digital signature", "server auth", "client auth"]),
                serving_request("win-a", &["win-a"], &["10.40.1.7"]),
                ok.clone(),
            ),
            (
                "usages: the current ones alone",
                with_usages(&["digital signature", "server auth"]),
                serving_request("win-a", &["win-a"], &["10.40.1.7"]),
                ok.clone(),
            ),
            (
                "usages: four are refused",
                with_usages(&[
                    "digital signature",
                    "key encipherment",
                    "server auth",
                    "client auth",
                ]),
                serving_request("win-a", &["win-a"], &["10.40.1.7"]),
                Err(PendingReason::UsageCount {
                    usages: vec![
                        "digital signature".into(),
                        "key encipherment".into(),
                        "server auth".into(),
                        "client auth".into(),
                    ],
                }),
            ),
            (
                "usages: server auth is required",
                with_usages(&["digital signature", "key encipherment"]),
                serving_request("win-a", &["win-a"], &["10.40.1.7"]),
                Err(PendingReason::MissingUsages {
                    usages: vec!["digital signature".into(), "key encipherment".into()],
                }),
            ),
            (
                "an IP SAN the Machine does not have",
                serving("win-a", now),
                serving_request("win-a", &["win-a"], &["10.132.0.9"]),
                Err(PendingReason::IpNotInMachine {
                    san: "10.132.0.9".into(),
                    attempted: vec!["10.40.1.7".into(), "fd00::7".into()],
                }),
            ),
            (
                "a DNS SAN the Machine does not have",
                serving("win-a", now),
                serving_request("win-a", &["win-a.example.com"], &[]),
                Err(PendingReason::DnsNameNotInMachine {
                    san: "win-a.example.com".into(),
                    attempted: vec!["win-a".into(), "win-a.".into()],
                }),
            ),
            (
                "CN must equal the user name",
                serving("win-a", now),
                serving_request("win-b", &["win-a"], &[]),
                Err(PendingReason::MismatchedCommonName {
                    common_name: "system:node:win-b".into(),
                    username: "system:node:win-a".into(),
                }),
            ),
        ];
        for (rule, csr, request, expected) in table {
            assert_eq!(
                authorize(&csr, &request, &linked(addresses.clone()), &no_node),
                expected,
                "{rule}"
            );
        }
        // IPs compare as Go prints them against the Machine's text: a Machine address written
        // in another form does not match.
        let long_form = linked(json!([{"type": "InternalIP", "address": "fd00:0:0:0:0:0:0:7"}]));
        assert!(matches!(
            authorize(
                &serving("win-a", now),
                &serving_request("win-a", &[], &["fd00::7"]),
                &long_form,
                &no_node
            ),
            Err(PendingReason::IpNotInMachine { .. })
        ));
        assert_eq!(
            go_ip_string(&"::ffff:10.0.0.1".parse().unwrap()),
            "10.0.0.1"
        );
        assert_eq!(
            authorize(
                &serving("win-a", now),
                &serving_request("win-a", &["win-a"], &[]),
                &[machine("win-a", now, None, addresses.clone())],
                &no_node
            ),
            Err(PendingReason::NoMachineForNode {
                node: "win-a".into()
            }),
            "FindMatchingMachineFromNodeRef: the Machine's nodeRef must name the node"
        );
        let mut few = serving("win-a", now);
        few.spec.groups = Some(vec!["system:nodes".into()]);
        assert_eq!(
            authorize(&few, &serving_request("win-a", &[], &[]), &[], &no_node),
            Err(PendingReason::TooFewGroups)
        );
    }

    #[test]
    fn filter_and_limits_are_the_approvers() {
        let now = Timestamp::now();
        assert_eq!(signer_filter(&client(now)), Ok(()));
        let mut not_bootstrapper = client(now);
        not_bootstrapper.spec.username = Some("system:node:x".into());
        assert_eq!(
            signer_filter(&not_bootstrapper),
            Err(IgnoreReason::ClientNotFromBootstrapper)
        );
        let mut no_nodes_group = serving("n", now);
        no_nodes_group.spec.groups = Some(vec!["system:authenticated".into()]);
        assert_eq!(
            signer_filter(&no_nodes_group),
            Err(IgnoreReason::ServingWithoutNodesGroup)
        );
        let other = object("example.com/other", "u", &[], &[], now);
        assert_eq!(
            signer_filter(&other),
            Err(IgnoreReason::Signer("example.com/other".into()))
        );

        let with_condition = |created: Timestamp, message: &str, approved_at: Timestamp| {
            let mut csr = client(created);
            csr.status = serde_json::from_value(
                json!({"conditions": [{"type": "Approved", "status": "True",
                "message": message, "lastTransitionTime": approved_at.to_string()}]}),
            )
            .unwrap();
            csr
        };
        let csrs = [
            client(now - SignedDuration::from_mins(5)),
            serving("n", now - SignedDuration::from_mins(59)),
            client(now - SignedDuration::from_mins(61)),
            other,
            with_condition(now, APPROVED_MESSAGE, now),
            with_condition(now, "approved by hand", now - SignedDuration::from_secs(5)),
            with_condition(now, "approved by hand", now - SignedDuration::from_mins(5)),
        ];
        assert_eq!(
            recently_pending(&csrs, now),
            3,
            "recentlyPendingNodeCSRs: created within the hour, pending or just approved by another"
        );
        assert_eq!(limit_reached(105, 5, 3), None);
        assert_eq!(
            limit_reached(106, 5, 3),
            Some(PendingReason::TooManyPending {
                pending: 106,
                max: 105
            })
        );
    }
}
