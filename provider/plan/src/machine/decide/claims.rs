//! Static addresses in the create and the deletion (`plan::machine::ipam`): the claims are made
//! and bound before anything is asked of Prism for the VM, and released once the VM is gone.
//! What the bound addresses may be, and how each NIC gets its own, is the plan's
//! (`crate::vm::validate`, with [`Claimed::Bound`]).

use super::draft::{Ask, Draft, MachineFailure, fail};
use crate::machine::decision::{Change, Event, Next, Read};
use crate::machine::ipam::{
    BoundAddress, ClaimsState, IP_ADDRESS_CLAIMED, IP_ADDRESSES_CLAIMED, WAITING_FOR_IP_ADDRESS,
    claim_name, claim_object, claims_state,
};
use crate::machine::lifecycle::INVALID_CONFIGURATION;

/// Where a create with static addresses stands.
pub(super) enum Claimed {
    /// The Machine takes no address from a pool.
    NoPools,
    /// Every claim is bound: the addresses by NIC.
    Bound(Vec<Option<BoundAddress>>),
}

fn invalid(d: &mut Draft<'_>, message: String) -> Ask {
    Ask::Done(fail(
        d,
        MachineFailure::Create {
            reason: Some(INVALID_CONFIGURATION),
            message,
        },
    ))
}

/// The condition `IPAddressClaimed`, written when it changes; `warn` with a Warning event of
/// the same note, once per change.
fn condition(d: &mut Draft<'_>, bound: bool, message: String) {
    let reason = if bound {
        IP_ADDRESSES_CLAIMED
    } else {
        WAITING_FOR_IP_ADDRESS
    };
    let shown = d
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == IP_ADDRESS_CLAIMED);
    if shown.is_some_and(|c| c.reason == reason && c.message == message) {
        return;
    }
    d.provider_condition(IP_ADDRESS_CLAIMED, bound, reason, message.clone());
    if !bound {
        // Published once the condition is written: a failed write shows it again next time.
        d.events.push(Event {
            warning: true,
            reason: WAITING_FOR_IP_ADDRESS,
            note: message,
            only_if_written: true,
        });
    }
}

/// Makes sure each NIC with a pool has a bound claim before the create: asks to read the
/// claims, to create the missing ones, or ends the reconcile while one is not bound (looked at
/// again every poll interval).
pub(super) fn claimed(d: &mut Draft<'_>) -> Result<Claimed, Ask> {
    let s = d.s;
    let pools = match &s.machine.ip_pools {
        None => return Ok(Claimed::NoPools),
        Some(Err(error)) => return Err(invalid(d, error.to_string())),
        Some(Ok(pools)) => pools,
    };
    let identity = &s.machine.identity;
    let Some(readings) = &s.seen.create.claims else {
        let names = pools
            .iter()
            .enumerate()
            .filter(|(_, pool)| pool.is_some())
            .map(|(nic, _)| (nic, claim_name(&identity.name, nic)))
            .collect();
        return Err(Ask::Read(Read::Claims { names }));
    };
    match claims_state(identity, pools, readings) {
        ClaimsState::Create(missing) => {
            let names: Vec<String> = missing
                .iter()
                .map(|(nic, _)| claim_name(&identity.name, *nic))
                .collect();
            if !s.seen.create.claims_created {
                let claims = missing
                    .iter()
                    .map(|(nic, pool)| claim_object(identity, *nic, pool))
                    .collect();
                return Err(Ask::Send(Change::CreateClaims { claims }));
            }
            condition(
                d,
                false,
                format!(
                    "created IP address claim(s) {}: waiting for them to be bound",
                    names.join(", ")
                ),
            );
            Err(Ask::Done(Next::Requeue(d.poll())))
        }
        ClaimsState::Adopt(adoptions) => Err(Ask::Send(Change::AdoptClaims { adoptions })),
        ClaimsState::Waiting { message } => {
            condition(d, false, message);
            Err(Ask::Done(Next::Requeue(d.poll())))
        }
        ClaimsState::Invalid(message) => Err(invalid(d, message)),
        ClaimsState::Bound(bound) => {
            condition(d, true, "All IP address claims are bound".into());
            Ok(Claimed::Bound(bound))
        }
    }
}

/// Releases the Machine's claims before its finalizer goes (asks once per reconcile); nothing
/// for a Machine that names no pool.
pub(super) fn release(d: &Draft<'_>) -> Result<(), Ask> {
    if d.s.machine.ip_pools.is_some() && !d.s.seen.delete.claims_released {
        return Err(Ask::Send(Change::ReleaseClaims));
    }
    Ok(())
}
