//! Static addresses from IP pools ([`crate::vm::addressing`]): the annotation, the pools against
//! the NICs and their subnets, and, once the claims are bound, each address against its NIC.
//! A rule that needs what is not known yet (a subnet not looked up, an address not claimed) is
//! checked once it is.

use std::net::{IpAddr, Ipv4Addr};

use super::*;
use crate::api::IP_POOL_ANNOTATION;
use crate::vm::addressing::{
    GuestAddressing, NicAddressing, StaticAddressError, check_nic_count, claim_name,
    guest_addressing, nic_addressing, unserved_pools,
};
use crate::vm::guest_network::GuestAddress;

/// What the static addresses give the plan.
#[derive(Default)]
pub(super) struct StaticAddressing {
    /// The address Prism assigns each NIC (`None`: Prism or DHCP picks it).
    pub assigned: Vec<Option<Ipv4Addr>>,
    /// The address the guest sets itself, written into its user data.
    pub guest: Option<GuestAddress>,
}

impl Validator<'_, '_> {
    /// `machine`: the Machine's name; `nics`: the NICs the providerSpec (or its failure domain) gives; `subnets`: their
    /// subnets, once resolved.
    pub(super) fn static_addresses(
        &mut self,
        machine: &str,
        nics: usize,
        subnets: Option<&[(EntityRef, Option<SubnetIpam>)]>,
        windows: bool,
    ) -> Option<StaticAddressing> {
        let path = annotation_path(IP_POOL_ANNOTATION);
        let pools = match &self.pools {
            None => return Some(StaticAddressing::default()),
            Some(Err(error)) => {
                self.errors.invalid(&path, error.to_string());
                return None;
            }
            Some(Ok(pools)) => pools.clone(),
        };
        if let Err(error) = check_nic_count(&pools, nics) {
            self.errors.invalid(&path, error.to_string());
            return None;
        }
        let subnets = subnets?;
        // Each subnet with whether Prism manages it; the rules wait for every subnet to be known.
        let Some(managed) = subnets
            .iter()
            .map(|(subnet, ipam)| ipam.map(|ipam| (subnet.id().to_owned(), ipam.managed_cidr())))
            .collect::<Option<Vec<_>>>()
        else {
            if self.mode() == ResolutionMode::Strict {
                self.errors.unresolved(
                    &path,
                    "whether Prism manages the subnets' addresses has not been read",
                );
                return None;
            }
            self.warnings.push(format!(
                "{path}: the subnets' address management is not known (--resolve subnets' ipam): the static addresses are not checked"
            ));
            return Some(StaticAddressing::default());
        };
        let guest = guest_addressing(
            windows,
            &customization_of(self.config),
            subnets.len(),
            self.nameservers.as_ref(),
        );
        let problems = |errors: &mut Collector, problems: Vec<StaticAddressError>| {
            for problem in problems {
                errors.invalid(&path, problem.to_string());
            }
        };
        let bound = match self.context.claims {
            ClaimedAddresses::NotClaimed => {
                let unserved = unserved_pools(&pools, &managed, &guest);
                if unserved.is_empty() {
                    return Some(StaticAddressing::default());
                }
                problems(&mut self.errors, unserved);
                return None;
            }
            ClaimedAddresses::Bound(bound) => bound,
        };
        let addressing = match nic_addressing(&pools, &managed, bound, &guest) {
            Ok(addressing) => addressing,
            Err(unusable) => {
                problems(&mut self.errors, unusable);
                return None;
            }
        };
        let assigned = addressing
            .iter()
            .map(|nic| match nic {
                NicAddressing::Assigned(IpAddr::V4(ip)) => Some(*ip),
                _ => None,
            })
            .collect();
        let guest = addressing.iter().enumerate().find_map(|(nic, addressing)| {
            match (addressing, &guest) {
                (NicAddressing::Guest(bound), GuestAddressing::Windows { nameservers }) => {
                    match bound.ip {
                        IpAddr::V4(ip) => Some(GuestAddress {
                            claim: claim_name(machine, nic),
                            ip,
                            prefix: bound.prefix,
                            gateway: bound.gateway,
                            nameservers: nameservers.clone(),
                        }),
                        IpAddr::V6(_) => None,
                    }
                }
                _ => None,
            }
        });
        Some(StaticAddressing { assigned, guest })
    }
}
