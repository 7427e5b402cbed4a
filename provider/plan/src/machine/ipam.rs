//! Static addresses from an IP pool, claimed the way the machine-api-operator's vSphere provider
//! claims them (openshift/machine-api-operator `pkg/controller/vsphere/reconciler.go`, `create`,
//! and `pkg/util/ipam/util.go`):
//!
//! - a NIC names a pool (openshift/api `machine/v1beta1/types_vsphereprovider.go`,
//!   `AddressesFromPool`: group, resource and name); here the annotation [`IP_POOL_ANNOTATION`]
//!   on the Machine (template) carries it, since a providerSpec field would not survive the
//!   machine-api-operator's webhook (`crate::api::choices`);
//! - one `IPAddressClaim` per Machine and NIC, named `<machine>-claim-<nic>-<pool>`
//!   (`GetIPAddressClaimName`; one pool per NIC here, so `<pool>` is always 0), controlled by the
//!   Machine and protected by the finalizer [`IP_CLAIM_PROTECTION_FINALIZER`]
//!   (`EnsureIPAddressClaim`); the fixed name is what makes a second claim impossible after a
//!   crash: creating it again answers 409;
//! - the VM is made only once every claim is bound; until then condition [`IP_ADDRESS_CLAIMED`]
//!   is `False` with reason [`WAITING_FOR_IP_ADDRESS`] (openshift/api
//!   `machine/v1beta1/types_provider.go`, `IPAddressClaimedCondition`, `WaitingForIPAddressReason`,
//!   `IPAddressClaimedReason`);
//! - the claims are released with the Machine: their finalizer is removed once the VM is gone
//!   (`RemoveFinalizersForIPAddressClaims`); this provider deletes them too, so the address goes
//!   back to the pool at once rather than when the garbage collector gets to the owner reference.
//!
//! The bound address goes to Prism as an `ASSIGNED` address of the NIC ([`nic_addressing`]): on a
//! subnet whose addresses Prism manages (IPAM), AHV's DHCP then hands the guest exactly that
//! address, so no guest configuration is needed. On a subnet Prism does not manage, a Windows
//! guest with cloud-init sets it itself ([`guest`]); any other Machine is refused, naming why.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;
use k8s_openapi::api::core::v1::TypedLocalObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::ResourceExt;

use crate::api::ipam::{IPAddress, IPAddressClaim, IpAddressClaimSpec};
use crate::api::{IP_POOL_ANNOTATION, Machine};
use crate::vm::identity::MachineIdentity;

pub mod guest;

pub use guest::{
    GuestAddressing, NameserversError, NoGuestAddressing, guest_addressing, guest_addressing_of,
    machine_nameservers, parse_nameservers,
};

/// The Machine's condition about its claims (openshift/api `IPAddressClaimedCondition`).
pub const IP_ADDRESS_CLAIMED: &str = "IPAddressClaimed";
/// Reason while a claim is not bound (openshift/api `WaitingForIPAddressReason`); also the
/// Warning event's reason.
pub const WAITING_FOR_IP_ADDRESS: &str = "WaitingForIPAddress";
/// Reason once every claim is bound (openshift/api `IPAddressClaimedReason`).
pub const IP_ADDRESSES_CLAIMED: &str = "IPAddressesClaimed";
/// The finalizer on each claim while its Machine exists (openshift/api
/// `machine/v1beta1/types_machine.go`, `IPClaimProtectionFinalizer`).
pub const IP_CLAIM_PROTECTION_FINALIZER: &str = "machine.openshift.io/ip-claim-protection";

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

/// The claim of NIC `nic` of Machine `machine` (vSphere's `GetIPAddressClaimName` with pool 0).
pub fn claim_name(machine: &str, nic: usize) -> String {
    format!("{machine}-claim-{nic}-0")
}

/// The Machine as the controller of its claims.
fn controller_reference(identity: &MachineIdentity) -> OwnerReference {
    OwnerReference {
        api_version: "machine.openshift.io/v1beta1".into(),
        kind: "Machine".into(),
        name: identity.name.clone(),
        uid: identity.uid.clone(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// The claim to create for NIC `nic`: controlled by the Machine (so the garbage collector
/// deletes it with the Machine, whatever happens to this controller), protected by
/// [`IP_CLAIM_PROTECTION_FINALIZER`] until the VM is gone.
pub fn claim_object(identity: &MachineIdentity, nic: usize, pool: &PoolRef) -> IPAddressClaim {
    IPAddressClaim {
        metadata: ObjectMeta {
            name: Some(claim_name(&identity.name, nic)),
            namespace: Some(identity.namespace.clone()),
            owner_references: Some(vec![controller_reference(identity)]),
            finalizers: Some(vec![IP_CLAIM_PROTECTION_FINALIZER.into()]),
            ..ObjectMeta::default()
        },
        spec: IpAddressClaimSpec {
            pool_ref: TypedLocalObjectReference {
                api_group: Some(pool.api_group.clone()),
                kind: pool.kind.clone(),
                name: pool.name.clone(),
            },
            extra: Default::default(),
        },
        status: None,
    }
}

/// What adopting a claim of the Machine's name that nothing controls writes: the Machine as its
/// controller beside the owners it has, and the protection finalizer beside its finalizers,
/// against the version read (so that a change in between is refused, not overwritten).
///
/// The machine-api-operator adopts such a claim too (`pkg/util/ipam/util.go`,
/// `EnsureIPAddressClaim` → `AdoptOrphanClaim`, which sets the owner references when there are
/// none). Without it the claim would give the VM its address but never be released with the
/// Machine (release takes the claims the Machine controls), leaking the address. Such claims
/// come from a restore without owner references, or an administrator creating a Machine's
/// claim ahead of it to pin its address.
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimAdoption {
    pub nic: usize,
    pub name: String,
    pub resource_version: Option<String>,
    pub owner_references: Vec<OwnerReference>,
    pub finalizers: Vec<String>,
}

fn adoption(identity: &MachineIdentity, nic: usize, claim: &IPAddressClaim) -> ClaimAdoption {
    let mut owner_references = claim.owner_references().to_vec();
    owner_references.push(controller_reference(identity));
    let mut finalizers = claim.finalizers().to_vec();
    if !finalizers
        .iter()
        .any(|f| f == IP_CLAIM_PROTECTION_FINALIZER)
    {
        finalizers.push(IP_CLAIM_PROTECTION_FINALIZER.into());
    }
    ClaimAdoption {
        nic,
        name: claim_name(&identity.name, nic),
        resource_version: claim.resource_version(),
        owner_references,
        finalizers,
    }
}

/// A claim as the executor read it: the claim (`None`: there is none) and, when it names one,
/// its `IPAddress` (`None`: not found); for an unbound claim, its pool's usage when the pool
/// reports one.
#[derive(Clone, Debug, Default)]
pub struct ClaimReading {
    pub claim: Option<IPAddressClaim>,
    pub address: Option<IPAddress>,
    pub pool_usage: Option<PoolUsage>,
}

/// What a pool reports of its addresses: `status.ipAddresses` of an `InClusterIPPool` or
/// `GlobalInClusterIPPool` (cluster-api-ipam-provider-in-cluster
/// `api/v1alpha2/inclusterippool_types.go`, `InClusterIPPoolStatusIPAddresses`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolUsage {
    pub total: u64,
    pub free: u64,
}

/// The pool kinds whose usage is read: (kind, plural, namespaced), all `v1alpha2` of
/// [`crate::api::ipam::IPAM_GROUP`].
pub const POOLS_WITH_USAGE: [(&str, &str, bool); 2] = [
    ("InClusterIPPool", "inclusterippools", true),
    ("GlobalInClusterIPPool", "globalinclusterippools", false),
];

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

/// Where the Machine's claims stand.
#[derive(Clone, Debug, PartialEq)]
pub enum ClaimsState {
    /// These NICs have no claim yet: create them (their [`claim_object`]).
    Create(Vec<(usize, PoolRef)>),
    /// These claims of the Machine's names have no controller: adopt them before using them.
    Adopt(Vec<ClaimAdoption>),
    /// Every claim exists, some are not bound: the message says which, and from which pool.
    Waiting { message: String },
    /// Every claim is bound: the address of each NIC with a pool, in NIC order.
    Bound(Vec<Option<BoundAddress>>),
    /// A claim or its address is not usable as it is (the message names it).
    Invalid(String),
}

fn parse_address(address: &IPAddress, claim: &str) -> Result<BoundAddress, String> {
    let name = address.name_any();
    let ip: IpAddr = address.spec.address.parse().map_err(|_| {
        format!(
            "IPAddress {name} bound to claim {claim}: spec.address {:?} is not an IP address",
            address.spec.address
        )
    })?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let prefix = u8::try_from(address.spec.prefix)
        .ok()
        .filter(|p| *p <= max)
        .ok_or_else(|| {
            format!(
                "IPAddress {name} bound to claim {claim}: spec.prefix {} is not a prefix length of {ip}",
                address.spec.prefix
            )
        })?;
    let gateway = match address.spec.gateway.as_deref().filter(|g| !g.is_empty()) {
        None => None,
        Some(text) => Some(text.parse::<IpAddr>().map_err(|_| {
            format!("IPAddress {name} bound to claim {claim}: spec.gateway {text:?} is not an IP address")
        })?),
    };
    Ok(BoundAddress {
        ip,
        prefix,
        gateway,
    })
}

/// What the claims of a Machine with `pools` and the executor's `readings` (one per NIC with a
/// pool, in NIC order) call for. A claim controlled by another object (a Machine of the same
/// name, deleted and not yet gone) or being deleted is waited for, never taken over; one that
/// nothing controls, from the Machine's pool, is adopted ([`ClaimAdoption`]).
pub fn claims_state(
    identity: &MachineIdentity,
    pools: &[Option<PoolRef>],
    readings: &BTreeMap<usize, ClaimReading>,
) -> ClaimsState {
    let mut missing = Vec::new();
    let mut orphans = Vec::new();
    let mut waiting = Vec::new();
    let mut bound = Vec::with_capacity(pools.len());
    for (nic, pool) in pools.iter().enumerate() {
        let Some(pool) = pool else {
            bound.push(None);
            continue;
        };
        let name = claim_name(&identity.name, nic);
        let reading = readings.get(&nic).cloned().unwrap_or_default();
        let Some(claim) = reading.claim else {
            missing.push((nic, pool.clone()));
            continue;
        };
        let owner = claim
            .owner_references()
            .iter()
            .find(|owner| owner.controller == Some(true));
        if owner.is_some_and(|owner| owner.uid != identity.uid)
            || claim.metadata.deletion_timestamp.is_some()
        {
            waiting.push(format!(
                "IPAddressClaim {name} belongs to an earlier Machine of this name and is being released"
            ));
            continue;
        }
        let wanted = &claim.spec.pool_ref;
        if wanted.api_group.as_deref() != Some(pool.api_group.as_str())
            || wanted.kind != pool.kind
            || wanted.name != pool.name
        {
            return ClaimsState::Invalid(format!(
                "IPAddressClaim {name} claims from pool {}/{}/{}, but metadata.annotations[{IP_POOL_ANNOTATION}] names {pool} for NIC {nic}: delete the Machine to claim from the new pool",
                wanted.api_group.as_deref().unwrap_or_default(),
                wanted.kind,
                wanted.name
            ));
        }
        if owner.is_none() {
            orphans.push(adoption(identity, nic, &claim));
            continue;
        }
        let address_name = claim
            .status
            .as_ref()
            .and_then(|status| status.address_ref.as_ref())
            .map(|r| r.name.as_str())
            .filter(|n| !n.is_empty());
        match (address_name, reading.address) {
            (None, _) => waiting.push(match reading.pool_usage {
                Some(PoolUsage { total, free: 0 }) => format!(
                    "IPAddressClaim {name} is not bound: pool {pool} is exhausted (0 of its {total} addresses free); add addresses to the pool or free some"
                ),
                _ => format!(
                    "IPAddressClaim {name} is not bound yet: pool {pool} has given it no address (is the pool's IPAM controller running, and has the pool a free address?)"
                ),
            }),
            (Some(address), None) => waiting.push(format!(
                "IPAddressClaim {name} names IPAddress {address}, which cannot be read yet"
            )),
            (Some(_), Some(address)) => match parse_address(&address, &name) {
                Ok(found) => bound.push(Some(found)),
                Err(message) => return ClaimsState::Invalid(message),
            },
        }
    }
    if !missing.is_empty() {
        return ClaimsState::Create(missing);
    }
    if !orphans.is_empty() {
        return ClaimsState::Adopt(orphans);
    }
    if !waiting.is_empty() {
        return ClaimsState::Waiting {
            message: format!(
                "waiting on {} IP address claim(s) to be bound: {}",
                waiting.len(),
                waiting.join("; ")
            ),
        };
    }
    ClaimsState::Bound(bound)
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

#[cfg(test)]
mod tests;
