//! Static addresses of a VM's NICs, from the IP pools the Machine names
//! ([`IP_POOL_ANNOTATION`]): which NIC takes one, and how it gets it ([`nic_addressing`]): as an
//! `ASSIGNED` address Prism hands out on a subnet whose addresses it manages, or set by the guest
//! itself ([`guest`]) on one it does not. These are rules of the VM's plan
//! ([`crate::vm::validate::plan_vm`] reports their errors with the others); claiming the
//! addresses is the Machine protocol's (`crate::machine::ipam`).

use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;
use kube::ResourceExt;

use crate::api::{IP_POOL_ANNOTATION, Machine};

pub mod guest;

pub use guest::{
    GuestAddressing, NameserversError, NoGuestAddressing, guest_addressing, machine_nameservers,
    parse_nameservers,
};

/// A pool as a claim names it: `spec.poolRef` (`apiGroup`, `kind`, `name`), in the pool's
/// namespace, which is the Machine's (cluster-api-ipam-provider-in-cluster
/// `internal/controllers/ipaddressclaim_address.go`, `FetchPool`, reads an `InClusterIPPool` in
/// the claim's namespace and a `GlobalInClusterIPPool` cluster-wide, by `kind`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolRef {
    pub api_group: String,
    pub kind: String,
    pub name: String,
}

impl fmt::Display for PoolRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.api_group, self.kind, self.name)
    }
}

/// Why the annotation cannot be read; each names the annotation and the entry.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IpPoolError {
    #[error(
        "metadata.annotations[{IP_POOL_ANNOTATION}] entry {nic} {entry:?}: expected <apiGroup>/<kind>/<name> (for example ipam.cluster.x-k8s.io/InClusterIPPool/workers), or nothing for a NIC without a pool"
    )]
    Malformed { nic: usize, entry: String },
    #[error(
        "metadata.annotations[{IP_POOL_ANNOTATION}] entry {nic}: {part} {value:?} is not a lower-case DNS name"
    )]
    BadGroup {
        nic: usize,
        part: &'static str,
        value: String,
    },
    #[error(
        "metadata.annotations[{IP_POOL_ANNOTATION}] entry {nic}: kind {value:?} is not a kind name (letters and digits, starting with an upper-case letter)"
    )]
    BadKind { nic: usize, value: String },
    #[error("metadata.annotations[{IP_POOL_ANNOTATION}] names no pool")]
    NoPool,
    #[error(
        "metadata.annotations[{IP_POOL_ANNOTATION}] has {entries} entries but the Machine has {nics} NICs (one entry per subnet, in order)"
    )]
    TooManyEntries { entries: usize, nics: usize },
}

fn dns_subdomain(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= 253
        && value.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// Reads [`IP_POOL_ANNOTATION`]: one entry per NIC, in `subnets` order, separated by commas;
/// each `<apiGroup>/<kind>/<name>`, or empty for a NIC addressed as before (by Prism, or DHCP).
/// `None` when the annotation is absent.
pub fn parse_ip_pools(value: &str) -> Result<Vec<Option<PoolRef>>, IpPoolError> {
    let pools = value
        .split(',')
        .enumerate()
        .map(|(nic, entry)| {
            let entry = entry.trim();
            if entry.is_empty() {
                return Ok(None);
            }
            let parts: Vec<&str> = entry.split('/').collect();
            let [group, kind, name] = parts[..] else {
                return Err(IpPoolError::Malformed {
                    nic,
                    entry: entry.to_owned(),
                });
            };
            if !dns_subdomain(group) {
                return Err(IpPoolError::BadGroup {
                    nic,
                    part: "apiGroup",
                    value: group.to_owned(),
                });
            }
            if !kind.starts_with(|c: char| c.is_ascii_uppercase())
                || !kind.chars().all(|c| c.is_ascii_alphanumeric())
            {
                return Err(IpPoolError::BadKind {
                    nic,
                    value: kind.to_owned(),
                });
            }
            if !dns_subdomain(name) {
                return Err(IpPoolError::BadGroup {
                    nic,
                    part: "name",
                    value: name.to_owned(),
                });
            }
            Ok(Some(PoolRef {
                api_group: group.to_owned(),
                kind: kind.to_owned(),
                name: name.to_owned(),
            }))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if pools.iter().all(Option::is_none) {
        return Err(IpPoolError::NoPool);
    }
    Ok(pools)
}

/// The pools of `machine`'s NICs: `None` without the annotation.
pub fn machine_ip_pools(machine: &Machine) -> Option<Result<Vec<Option<PoolRef>>, IpPoolError>> {
    machine
        .annotations()
        .get(IP_POOL_ANNOTATION)
        .map(|value| parse_ip_pools(value))
}

/// An address bound to a claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BoundAddress {
    pub ip: IpAddr,
    pub prefix: u8,
    pub gateway: Option<IpAddr>,
}

impl BoundAddress {
    /// The address with its prefix.
    pub fn network(&self) -> Option<IpNet> {
        IpNet::new(self.ip, self.prefix).ok()
    }
}

/// How a NIC gets its address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NicAddressing {
    /// As before: Prism's IPAM or the network's DHCP picks it.
    Dynamic,
    /// Sent as the NIC's `ASSIGNED` address (v3 `vm_nic.ip_endpoint_list[]`: prism-go-client
    /// `v3/swagger.json`, definition `ip_address`, an IPv4 `ip` and a `type` that "can only be
    /// ASSIGNED in the spec"; nutanix/nutanix.ansible `plugins/module_utils/v3/prism/vms.py` sends
    /// a NIC's `private_ip` the same way). AHV's DHCP answers the guest with it.
    Assigned(IpAddr),
    /// Set by the guest itself, with its prefix, gateway and DNS servers: the NIC is on a subnet
    /// Prism does not manage, so Prism is sent no address ([`guest`]).
    Guest(BoundAddress),
}

/// Why a bound address cannot be given to its NIC.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StaticAddressError {
    #[error(
        "NIC {nic} (subnet {subnet}) takes a static address from pool {pool}, but Prism does not manage the subnet's addresses (no IPAM), so it cannot assign one, and the guest cannot set it itself: {why}"
    )]
    UnmanagedSubnet {
        nic: usize,
        subnet: String,
        pool: PoolRef,
        why: NoGuestAddressing,
    },
    #[error(
        "NIC {nic}: address {ip} from pool {pool} is not IPv4, and static addresses are IPv4 only (Prism assigns IPv4 addresses only, v3 ip_endpoint_list)"
    )]
    NotIpv4 {
        nic: usize,
        ip: IpAddr,
        pool: PoolRef,
    },
    #[error("NIC {nic}: address {ip}/{prefix} from pool {pool} is not in subnet {subnet} ({cidr})")]
    OutsideSubnet {
        nic: usize,
        ip: IpAddr,
        prefix: u8,
        pool: PoolRef,
        subnet: String,
        cidr: IpNet,
    },
}

/// The addressing of each NIC: `subnets` are the VM's subnets in NIC order with the CIDR Prism
/// manages for each (`None`: Prism does not manage it), `bound` the claimed addresses in NIC
/// order, `guest` what the guest can do where Prism does not manage the subnet. A bound address
/// must lie in its subnet's CIDR: Prism refuses any other.
pub fn nic_addressing(
    pools: &[Option<PoolRef>],
    subnets: &[(String, Option<IpNet>)],
    bound: &[Option<BoundAddress>],
    guest: &GuestAddressing,
) -> Result<Vec<NicAddressing>, Vec<StaticAddressError>> {
    let mut errors = Vec::new();
    let addressing = subnets
        .iter()
        .enumerate()
        .map(|(nic, (subnet, cidr))| {
            let (Some(Some(pool)), Some(Some(address))) = (pools.get(nic), bound.get(nic)) else {
                return NicAddressing::Dynamic;
            };
            if !address.ip.is_ipv4() {
                errors.push(StaticAddressError::NotIpv4 {
                    nic,
                    ip: address.ip,
                    pool: pool.clone(),
                });
                return NicAddressing::Dynamic;
            }
            match (cidr, guest) {
                (None, GuestAddressing::Windows { .. }) => {
                    return NicAddressing::Guest(*address);
                }
                (None, GuestAddressing::Unsupported(why)) => {
                    errors.push(StaticAddressError::UnmanagedSubnet {
                        nic,
                        subnet: subnet.clone(),
                        pool: pool.clone(),
                        why: why.clone(),
                    });
                }
                (Some(cidr), _) if !cidr.contains(&address.ip) => {
                    errors.push(StaticAddressError::OutsideSubnet {
                        nic,
                        ip: address.ip,
                        prefix: address.prefix,
                        pool: pool.clone(),
                        subnet: subnet.clone(),
                        cidr: *cidr,
                    });
                }
                (Some(_), _) => {}
            }
            NicAddressing::Assigned(address.ip)
        })
        .collect();
    if errors.is_empty() {
        Ok(addressing)
    } else {
        Err(errors)
    }
}

/// The NICs whose pool can serve no address, known before any is claimed: on a subnet Prism
/// does not manage (`None` in `subnets`, as in [`nic_addressing`]) whose guest cannot set the
/// address itself.
pub fn unserved_pools(
    pools: &[Option<PoolRef>],
    subnets: &[(String, Option<IpNet>)],
    guest: &GuestAddressing,
) -> Vec<StaticAddressError> {
    let GuestAddressing::Unsupported(why) = guest else {
        return Vec::new();
    };
    subnets
        .iter()
        .enumerate()
        .filter_map(|(nic, (subnet, cidr))| match (pools.get(nic), cidr) {
            (Some(Some(pool)), None) => Some(StaticAddressError::UnmanagedSubnet {
                nic,
                subnet: subnet.clone(),
                pool: pool.clone(),
                why: why.clone(),
            }),
            _ => None,
        })
        .collect()
}

/// The claim of NIC `nic` of Machine `machine` (vSphere's `GetIPAddressClaimName` with pool 0).
pub fn claim_name(machine: &str, nic: usize) -> String {
    format!("{machine}-claim-{nic}-0")
}

/// Checks the annotation against the number of NICs.
pub fn check_nic_count(pools: &[Option<PoolRef>], nics: usize) -> Result<(), IpPoolError> {
    if pools.len() > nics {
        return Err(IpPoolError::TooManyEntries {
            entries: pools.len(),
            nics,
        });
    }
    Ok(())
}
