//! Would the cluster-machine-approver approve this CSR, and if not, why not?
//!
//! The approver (not this provider) approves kubelet CSRs of Machine-backed nodes; this check
//! repeats its rules so the Windows join reconciler can explain a CSR that stays pending, in the
//! approver's words plus what to look at. It never approves anything itself.
//!
//! The rules are openshift/cluster-machine-approver's (`pkg/controller/csr_check.go` and
//! `node_client.go`).
//!
//! Client certificates (signer `kubernetes.io/kube-apiserver-client-kubelet`): requested by the
//! node-bootstrapper service account with exactly its three groups; subject
//! `O=system:nodes, CN=system:node:<name>`, no SANs; usages exactly
//! `digital signature, client auth` or those and `key encipherment` (`hasExactUsages`: as many
//! as the set, each in it); no Node of that name yet; a Machine whose `InternalDNS` is `<name>`
//! (any case, trailing dot ignored), without a nodeRef, created between 10 s after and 2 h before
//! the CSR.
//!
//! Serving certificates (signer `kubernetes.io/kubelet-serving`): requested by `system:node:<name>`
//! in groups `system:nodes` and `system:authenticated`, CN equal to the user, `O=system:nodes`;
//! usages that contain `digital signature` and `server auth`, two or three of them
//! (`validateCSRContents` counts them against its two usage sets, then checks the set holds
//! either: a third usage of any kind is accepted, a fourth is not); approved as a renewal when
//! its SANs equal the current serving certificate's, otherwise every DNS SAN must be an
//! `InternalDNS`, `ExternalDNS` or `Hostname` and every IP SAN an `InternalIP` or `ExternalIP` of
//! the Machine whose nodeRef is the node. The approver compares an IP SAN as text, Go's
//! `net.IP.String()` against the Machine's address as written: the same address written another
//! way (`FD00::5` for `fd00::5`) does not match, and is reported as that.
//!
//! The caller parses the PEM request and reads the current serving certificate; this module only
//! compares.

use std::collections::BTreeSet;
use std::net::IpAddr;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::NodeAddress;
use prism_types::quote::{MAX_QUOTED_CHARS, bounded, quoted};

use crate::machine::addresses::address_type;

pub const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
pub const SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";
pub const NODE_BOOTSTRAPPER: &str =
    "system:serviceaccount:openshift-machine-config-operator:node-bootstrapper";
const NODE_BOOTSTRAPPER_GROUPS: [&str; 3] = [
    "system:serviceaccounts:openshift-machine-config-operator",
    "system:serviceaccounts",
    "system:authenticated",
];
const NODE_USER_PREFIX: &str = "system:node:";
const NODES_GROUP: &str = "system:nodes";

/// How far before the Machine's creation a client CSR may be (clock skew).
pub const MAX_MACHINE_CLOCK_SKEW: SignedDuration = SignedDuration::from_secs(10);
/// How long after the Machine's creation a client CSR is still approved.
pub const MAX_MACHINE_DELTA: SignedDuration = SignedDuration::from_hours(2);
/// Approval stops when recent pending CSRs exceed max(Machines, Nodes) by this many.
pub const MAX_PENDING_OVER_MACHINES: usize = 100;

/// A CSR: the object's fields and what its PEM request says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Csr {
    pub name: String,
    pub signer_name: String,
    pub username: String,
    pub groups: Vec<String>,
    /// `spec.usages`, such as `digital signature`, `client auth`.
    pub usages: Vec<String>,
    pub created: Option<Timestamp>,
    pub common_name: String,
    pub organizations: Vec<String>,
    pub dns_names: Vec<String>,
    pub ip_addresses: Vec<IpAddr>,
    /// Email and URI SANs (a client certificate must have none).
    pub other_sans: Vec<String>,
}

/// A Machine as the approver sees it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MachineFacts {
    pub name: String,
    pub created: Option<Timestamp>,
    pub addresses: Vec<NodeAddress>,
    /// `status.nodeRef.name`.
    pub node_ref: Option<String>,
}

/// The kubelet's current serving certificate (read over TLS from the node), when there is one
/// that the cluster CA signed and that has not expired.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServingCert {
    pub common_name: String,
    pub dns_names: Vec<String>,
    pub ip_addresses: Vec<IpAddr>,
    pub other_sans: Vec<String>,
}

/// Everything besides the CSR.
#[derive(Clone, Copy, Debug)]
pub struct CsrContext<'a> {
    pub machines: &'a [MachineFacts],
    pub node_names: &'a [String],
    /// Node CSRs created in the last hour and not yet approved.
    pub recent_pending: usize,
    pub current_serving_cert: Option<&'a ServingCert>,
}

/// Which approval path applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CsrKind {
    Client,
    Serving,
    ServingRenewal,
}

/// The verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CsrVerdict {
    /// The approver's rules hold (for a renewal there may be no Machine to name).
    Approvable {
        kind: CsrKind,
        machine: Option<String>,
    },
    /// The approver will leave it pending, for this reason.
    Pending { reason: String },
    /// Not a kubelet CSR: none of the approver's business.
    NotNodeCsr,
}

fn pending(reason: impl Into<String>) -> CsrVerdict {
    CsrVerdict::Pending {
        reason: reason.into(),
    }
}

/// A list from the CSR (organizations, groups, usages) for a message, as `{:?}` writes it, cut to
/// a bounded length: its author chose it.
fn listed(values: &[String]) -> String {
    bounded(&format!("{values:?}"), MAX_QUOTED_CHARS).to_string()
}

/// The approver's `hasExactUsages`: as many usages as `expected`, each one of them (so a
/// repeated usage can stand in for a missing one, as there).
fn has_exact_usages(usages: &[String], expected: &[&str]) -> bool {
    usages.len() == expected.len() && usages.iter().all(|u| expected.contains(&u.as_str()))
}

/// The approver's serving usages check: two or three usages (the sizes of its two usage sets)
/// among which `digital signature` and `server auth` (the legacy set's `key encipherment` is then
/// one allowed third usage among any).
fn serving_usages_accepted(usages: &[String]) -> bool {
    let has = |wanted: &str| usages.iter().any(|u| u == wanted);
    (usages.len() == 2 || usages.len() == 3) && has("digital signature") && has("server auth")
}

/// An IP address as Go's `net.IP.String()` writes it, the text the approver compares: RFC 5952
/// for IPv6 (as Rust writes it) and dotted IPv4 for an IPv4-mapped IPv6 address.
pub fn approver_ip_text(ip: IpAddr) -> String {
    ip.to_canonical().to_string()
}

/// Whether two addresses are the same address (an IPv4-mapped IPv6 one is its IPv4 address).
pub fn same_address(a: IpAddr, b: IpAddr) -> bool {
    a.to_canonical() == b.to_canonical()
}

fn dns_equal(san: &str, address: &str) -> bool {
    san.eq_ignore_ascii_case(address.trim_end_matches('.'))
}

/// Checks `csr` against the cluster-machine-approver's rules.
pub fn check_csr(csr: &Csr, context: &CsrContext<'_>) -> CsrVerdict {
    let kind = match csr.signer_name.as_str() {
        CLIENT_SIGNER => CsrKind::Client,
        SERVING_SIGNER => CsrKind::Serving,
        _ => return CsrVerdict::NotNodeCsr,
    };
    let limit = context.machines.len().max(context.node_names.len()) + MAX_PENDING_OVER_MACHINES;
    if context.recent_pending > limit {
        return pending(format!(
            "{} recent pending node CSRs exceed the approver's limit of {limit} (Machines or Nodes + {MAX_PENDING_OVER_MACHINES}): it approves nothing until they are cleaned up",
            context.recent_pending
        ));
    }
    match kind {
        CsrKind::Client => check_client(csr, context),
        CsrKind::Serving | CsrKind::ServingRenewal => check_serving(csr, context),
    }
}

fn check_client(csr: &Csr, context: &CsrContext<'_>) -> CsrVerdict {
    if csr.organizations != [NODES_GROUP] {
        return pending(format!(
            "subject organizations {} are not exactly [\"system:nodes\"]",
            listed(&csr.organizations)
        ));
    }
    if !csr.dns_names.is_empty() || !csr.ip_addresses.is_empty() || !csr.other_sans.is_empty() {
        return pending(
            "a kubelet client certificate request must have no subject alternative names",
        );
    }
    let current = ["digital signature", "client auth"];
    let legacy = ["digital signature", "key encipherment", "client auth"];
    if !has_exact_usages(&csr.usages, &current) && !has_exact_usages(&csr.usages, &legacy) {
        return pending(format!(
            "usages {} are not a kubelet client's",
            listed(&csr.usages)
        ));
    }
    let groups: BTreeSet<&str> = csr.groups.iter().map(String::as_str).collect();
    if csr.username != NODE_BOOTSTRAPPER || groups != BTreeSet::from(NODE_BOOTSTRAPPER_GROUPS) {
        return pending(format!(
            "requested by {:?}, not by the node-bootstrapper service account with its groups",
            quoted(&csr.username)
        ));
    }
    let node = csr
        .common_name
        .strip_prefix(NODE_USER_PREFIX)
        .unwrap_or_default();
    if node.is_empty() {
        return pending(format!(
            "common name {:?} does not name a node (system:node:<name>)",
            quoted(&csr.common_name)
        ));
    }
    if context.node_names.iter().any(|n| n == node) {
        return pending(format!(
            "node {node} already exists: a client CSR is only approved for a new node",
            node = quoted(node)
        ));
    }
    let Some(machine) = context.machines.iter().find(|m| {
        m.addresses
            .iter()
            .any(|a| a.type_ == address_type::INTERNAL_DNS && dns_equal(node, &a.address))
    }) else {
        return pending(format!(
            "failed to find machine for node {node}: no Machine has InternalDNS {node}; the host name the kubelet registers must equal the Machine's InternalDNS (on Windows, check that the host was renamed to the Machine name)",
            node = bounded(node, MAX_QUOTED_CHARS)
        ));
    };
    if let Some(linked) = &machine.node_ref {
        return pending(format!(
            "Machine {} already has node {linked}",
            machine.name
        ));
    }
    let (Some(machine_created), Some(csr_created)) = (machine.created, csr.created) else {
        return pending("the CSR or the Machine has no creation time");
    };
    // jiff's `+` and `-` panic past the ends of its range: saturate there instead.
    let start = machine_created
        .checked_sub(MAX_MACHINE_CLOCK_SKEW)
        .unwrap_or(Timestamp::MIN);
    let end = machine_created
        .checked_add(MAX_MACHINE_DELTA)
        .unwrap_or(Timestamp::MAX);
    if !(start < csr_created && csr_created < end) {
        return pending(format!(
            "CSR created at {csr_created}, outside {start} .. {end} (Machine {} created at {machine_created}): a node that joins more than 2 h after its Machine is never approved",
            machine.name
        ));
    }
    CsrVerdict::Approvable {
        kind: CsrKind::Client,
        machine: Some(machine.name.clone()),
    }
}

fn check_serving(csr: &Csr, context: &CsrContext<'_>) -> CsrVerdict {
    let node = csr
        .username
        .strip_prefix(NODE_USER_PREFIX)
        .unwrap_or_default();
    if node.is_empty() {
        return pending(format!(
            "requested by {:?}, not by a node (system:node:<name>)",
            quoted(&csr.username)
        ));
    }
    if !csr.groups.iter().any(|g| g == NODES_GROUP)
        || !csr.groups.iter().any(|g| g == "system:authenticated")
    {
        return pending(format!(
            "groups {} lack system:nodes or system:authenticated",
            listed(&csr.groups)
        ));
    }
    if !serving_usages_accepted(&csr.usages) {
        return pending(format!(
            "usages {:?} are not a kubelet server's (two or three, among them \"digital signature\" and \"server auth\")",
            listed(&csr.usages)
        ));
    }
    if csr.common_name != csr.username {
        return pending(format!(
            "common name {:?} differs from the requesting user {:?}",
            quoted(&csr.common_name),
            quoted(&csr.username)
        ));
    }
    if !csr.organizations.iter().any(|o| o == NODES_GROUP) {
        return pending(format!(
            "organizations {} do not include system:nodes",
            listed(&csr.organizations)
        ));
    }
    if let Some(cert) = context.current_serving_cert {
        // The approver's equalStrings / equalIPAddresses: the same values as many times, in any
        // order, IPs as Go writes them.
        let sorted = |v: &[String]| {
            let mut v = v.to_vec();
            v.sort();
            v
        };
        let ips = |v: &[IpAddr]| {
            let mut v: Vec<String> = v.iter().copied().map(approver_ip_text).collect();
            v.sort();
            v
        };
        if cert.common_name == csr.common_name
            && sorted(&cert.dns_names) == sorted(&csr.dns_names)
            && ips(&cert.ip_addresses) == ips(&csr.ip_addresses)
            && sorted(&cert.other_sans) == sorted(&csr.other_sans)
        {
            return CsrVerdict::Approvable {
                kind: CsrKind::ServingRenewal,
                machine: None,
            };
        }
    }
    let Some(machine) = context
        .machines
        .iter()
        .find(|m| m.node_ref.as_deref() == Some(node))
    else {
        return pending(format!(
            "unable to find machine for node {node}: no Machine's nodeRef names it yet (nodelink matches by providerID, then by the Machine's first InternalIP)"
        ));
    };
    let of_types = |types: &[&str]| -> Vec<&str> {
        machine
            .addresses
            .iter()
            .filter(|a| types.contains(&a.type_.as_str()))
            .map(|a| a.address.as_str())
            .collect()
    };
    let names = of_types(&[
        address_type::INTERNAL_DNS,
        "ExternalDNS",
        address_type::HOSTNAME,
    ]);
    for san in csr.dns_names.iter().filter(|s| !s.is_empty()) {
        if !names.iter().any(|name| dns_equal(san, name)) {
            return pending(format!(
                "DNS name '{san}' not in machine names: {}",
                names.join(" "),
                san = bounded(san, MAX_QUOTED_CHARS)
            ));
        }
    }
    let ips = of_types(&[address_type::INTERNAL_IP, address_type::EXTERNAL_IP]);
    for san in &csr.ip_addresses {
        let text = approver_ip_text(*san);
        if ips.contains(&text.as_str()) {
            continue;
        }
        let written_otherwise = ips.iter().find(|written| {
            written
                .parse::<IpAddr>()
                .is_ok_and(|ip| same_address(ip, *san))
        });
        return pending(match written_otherwise {
            Some(written) => format!(
                "IP address '{text}' not in machine addresses: {}; the Machine has it written as '{written}', and the approver compares the text",
                ips.join(" ")
            ),
            None => format!(
                "IP address '{text}' not in machine addresses: {} (an address the node has but the Machine lacks, such as a hybrid-overlay, APIPA or second-NIC address)",
                ips.join(" ")
            ),
        });
    }
    CsrVerdict::Approvable {
        kind: CsrKind::Serving,
        machine: Some(machine.name.clone()),
    }
}

#[cfg(test)]
mod tests;
