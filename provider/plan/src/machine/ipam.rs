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
use std::net::IpAddr;

use k8s_openapi::api::core::v1::TypedLocalObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::ResourceExt;

use crate::api::IP_POOL_ANNOTATION;
use crate::api::ipam::{IPAddress, IPAddressClaim, IpAddressClaimSpec};
use crate::vm::identity::MachineIdentity;

pub use crate::vm::addressing::{
    BoundAddress, GuestAddressing, IpPoolError, NameserversError, NicAddressing, NoGuestAddressing,
    PoolRef, StaticAddressError, check_nic_count, claim_name, guest_addressing, machine_ip_pools,
    machine_nameservers, nic_addressing, parse_ip_pools, parse_nameservers,
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

#[cfg(test)]
mod tests;
