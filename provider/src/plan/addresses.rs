//! `status.addresses` of a Machine from what Prism reports about its VM.
//!
//! Order matters: WMCO connects to the first IPv4 `InternalIP`, and nodelink falls back to it to
//! match the Node. So the primary NIC's (the first subnet's) IPv4 comes first, then the other
//! IPv4 in subnet order, then IPv6; `InternalDNS` and `Hostname` (the Machine name, which the
//! cluster-machine-approver matches the kubelet's CSR against) come last.
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
use prism_client::v3::Vm;

/// Address types of `NodeAddress`.
pub mod address_type {
    pub const INTERNAL_IP: &str = "InternalIP";
    pub const EXTERNAL_IP: &str = "ExternalIP";
    pub const INTERNAL_DNS: &str = "InternalDNS";
    pub const HOSTNAME: &str = "Hostname";
}

/// One NIC as Prism reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NicReading {
    pub subnet_uuid: Option<String>,
    pub ips: Vec<String>,
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
                .filter_map(|e| e.ip.clone())
                .collect(),
        })
        .collect()
}

/// What the addresses are computed from.
#[derive(Clone, Copy, Debug)]
pub struct AddressInput<'a> {
    pub machine_name: &'a str,
    /// The VM's NICs as Prism reports them.
    pub nics: &'a [NicReading],
    /// The Machine's subnet UUIDs in providerSpec order; the first is the primary NIC's.
    pub subnet_order: &'a [String],
    /// Networks whose addresses never belong to the Machine.
    pub excluded: &'a [IpNet],
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

    let ips: Vec<IpAddr> = nics
        .iter()
        .flat_map(|nic| &nic.ips)
        .filter_map(|ip| ip.trim().parse::<IpAddr>().ok())
        .filter(|ip| is_usable(*ip, input.excluded))
        .collect();
    let mut seen = BTreeSet::new();
    let ordered: Vec<IpAddr> = ips
        .iter()
        .filter(|ip| ip.is_ipv4())
        .chain(ips.iter().filter(|ip| ip.is_ipv6()))
        .copied()
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
