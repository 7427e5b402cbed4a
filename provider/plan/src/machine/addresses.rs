//! `status.addresses` of a Machine from what Prism reports about its VM.
//!
//! Order matters: WMCO connects to the first `InternalIP`, and nodelink falls back to it to match
//! the Node. So the primary NIC's (the first subnet's) address comes first: of its addresses,
//! those inside the primary subnet's CIDR, and `ASSIGNED` before `LEARNED` (a VIP or secondary
//! address Prism happens to list first must not win); then the other NICs' in subnet order. The
//! cluster's primary IP family goes first (IPv4, or IPv6 on an IPv6-primary cluster).
//! `InternalDNS` and `Hostname` (the Machine name, which the cluster-machine-approver matches the
//! kubelet's CSR against) come last. While the primary NIC has no usable address, the previous
//! addresses are kept, so a second NIC's address is never promoted to first.
//!
//! Dropped: link-local (169.254.0.0/16, where Windows puts APIPA addresses before DHCP answers,
//! and fe80::/10), loopback, unspecified and multicast addresses, and anything inside the
//! excluded CIDRs (cluster network, service network, hybrid overlay network: addresses that
//! belong to the pod network, not to the VM). IPv6 unique-local addresses (fc00::/7) are kept:
//! dual-stack clusters on private networks use them.
//!
//! A reading with no usable IP (a VM between DHCP leases, a guest agent restarting) keeps the last
//! good IPs instead of erasing them.

use std::collections::BTreeSet;
use std::net::IpAddr;

use ipnet::IpNet;
use k8s_openapi::api::core::v1::NodeAddress;
use prism_types::v3::{IpEndpointType, Subnet, Vm};

/// Address types of `NodeAddress`.
pub mod address_type {
    pub const INTERNAL_IP: &str = "InternalIP";
    pub const EXTERNAL_IP: &str = "ExternalIP";
    pub const INTERNAL_DNS: &str = "InternalDNS";
    pub const HOSTNAME: &str = "Hostname";
}

/// One address of a NIC as Prism reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IpReading {
    pub ip: String,
    /// `ASSIGNED` (by Prism's IP address management, or as the create asked) rather than
    /// `LEARNED` (seen on the wire: a VIP, a secondary address, a container bridge).
    pub assigned: bool,
}

/// One NIC as Prism reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NicReading {
    pub subnet_uuid: Option<String>,
    pub ips: Vec<IpReading>,
}

/// The NICs in a VM's `status.resources.nic_list`, in Prism's order.
pub fn nics_of(vm: &Vm) -> Vec<NicReading> {
    let nics = vm
        .status
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .map(|r| r.nic_list.as_slice())
        .unwrap_or_default();
    nics.iter()
        .map(|nic| NicReading {
            subnet_uuid: nic.subnet_reference.as_ref().map(|r| r.uuid.clone()),
            ips: nic
                .ip_endpoint_list
                .iter()
                .filter_map(|e| {
                    Some(IpReading {
                        ip: e.ip.clone()?,
                        assigned: e.endpoint_type == Some(IpEndpointType::Assigned),
                    })
                })
                .collect(),
        })
        .collect()
}

/// A subnet's CIDR, when Prism manages its addresses: `spec.resources.ip_config.subnet_ip` and
/// `prefix_length` (as in the recorded `GET /subnets/{uuid}` of a real Prism Central,
/// hack/prism-mock/recorded/get_subnet.json). A subnet without IP address management has none.
pub fn subnet_cidr(subnet: &Subnet) -> Option<IpNet> {
    let config = subnet
        .spec
        .as_ref()
        .and_then(|spec| spec.resources.as_ref())
        .and_then(|resources| resources.ip_config.as_ref())?;
    let ip: IpAddr = config.subnet_ip.as_deref()?.parse().ok()?;
    IpNet::new(ip, config.prefix_length?)
        .ok()
        .map(|net| net.trunc())
}

/// What the addresses are computed from.
#[derive(Clone, Copy, Debug)]
pub struct AddressInput<'a> {
    pub machine_name: &'a str,
    /// The VM's NICs as Prism reports them.
    pub nics: &'a [NicReading],
    /// The Machine's subnet UUIDs in providerSpec order; the first is the primary NIC's.
    pub subnet_order: &'a [String],
    /// The primary subnet's CIDR, when Prism manages its addresses.
    pub primary_cidr: Option<IpNet>,
    /// Networks whose addresses never belong to the Machine.
    pub excluded: &'a [IpNet],
    /// The cluster's primary IP family is IPv6: IPv6 addresses come first.
    pub ipv6_primary: bool,
    /// The Machine's current `status.addresses`.
    pub previous: &'a [NodeAddress],
}

/// Whether `ip` can be a Machine address at all.
fn is_usable(ip: IpAddr, excluded: &[IpNet]) -> bool {
    let special = match ip {
        IpAddr::V4(v4) => {
            v4.is_link_local()
                || v4.is_loopback()
                || v4.is_unspecified()
                || v4.is_multicast()
                || v4.is_broadcast()
        }
        IpAddr::V6(v6) => {
            v6.is_unicast_link_local()
                || v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
        }
    };
    !special && !excluded.iter().any(|net| net.contains(&ip))
}

/// The usable addresses of one NIC, best first: inside `cidr` (the primary subnet's, for the
/// primary NIC) before outside it, `ASSIGNED` before `LEARNED`, otherwise Prism's order.
fn usable_ips(nic: &NicReading, cidr: Option<IpNet>, excluded: &[IpNet]) -> Vec<IpAddr> {
    let mut ips: Vec<(bool, bool, IpAddr)> = nic
        .ips
        .iter()
        .filter_map(|reading| {
            let ip = reading.ip.trim().parse::<IpAddr>().ok()?;
            let outside = cidr.is_some_and(|net| !net.contains(&ip));
            Some((outside, !reading.assigned, ip))
        })
        .filter(|(_, _, ip)| is_usable(*ip, excluded))
        .collect();
    ips.sort_by_key(|(outside, learned, _)| (*outside, *learned));
    ips.into_iter().map(|(_, _, ip)| ip).collect()
}

/// The Machine's addresses.
pub fn machine_addresses(input: &AddressInput<'_>) -> Vec<NodeAddress> {
    let position = |nic: &NicReading| {
        nic.subnet_uuid
            .as_deref()
            .and_then(|uuid| {
                input
                    .subnet_order
                    .iter()
                    .position(|s| s.eq_ignore_ascii_case(uuid))
            })
            .unwrap_or(input.subnet_order.len())
    };
    // Stable: NICs on the same subnet, and NICs on no known subnet, keep Prism's order.
    let mut nics: Vec<&NicReading> = input.nics.iter().collect();
    nics.sort_by_key(|nic| position(nic));

    let mut primary_seen = false;
    let mut primary_has_ip = false;
    let mut ips: Vec<IpAddr> = Vec::new();
    for nic in &nics {
        let primary = position(nic) == 0 && !input.subnet_order.is_empty();
        let usable = usable_ips(nic, input.primary_cidr.filter(|_| primary), input.excluded);
        primary_seen |= primary;
        primary_has_ip |= primary && !usable.is_empty();
        ips.extend(usable);
    }
    // A primary NIC without an address yet (DHCP not answered, the guest agent starting) must
    // not let the second NIC's address become the first InternalIP, which WMCO connects to:
    // keep what was reported until it has one.
    if primary_seen && !primary_has_ip {
        ips.clear();
    }
    let mut seen = BTreeSet::new();
    let (first, second): (Vec<IpAddr>, Vec<IpAddr>) = ips
        .iter()
        .partition(|ip| ip.is_ipv6() == input.ipv6_primary);
    let ordered: Vec<IpAddr> = first
        .into_iter()
        .chain(second)
        .filter(|ip| seen.insert(*ip))
        .collect();

    let mut addresses: Vec<NodeAddress> = if ordered.is_empty() {
        input
            .previous
            .iter()
            .filter(|a| {
                a.type_ == address_type::INTERNAL_IP || a.type_ == address_type::EXTERNAL_IP
            })
            .cloned()
            .collect()
    } else {
        ordered
            .iter()
            .map(|ip| NodeAddress {
                type_: address_type::INTERNAL_IP.to_owned(),
                address: ip.to_string(),
            })
            .collect()
    };
    for type_ in [address_type::INTERNAL_DNS, address_type::HOSTNAME] {
        addresses.push(NodeAddress {
            type_: type_.to_owned(),
            address: input.machine_name.to_owned(),
        });
    }
    addresses
}

#[cfg(test)]
mod tests;
