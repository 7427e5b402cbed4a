//! The Machine's IP address claims in the API server (`plan::machine::ipam` decides): read with
//! their bound addresses, created by their fixed names, released with the Machine.

use std::collections::BTreeMap;

use futures::StreamExt;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use kube::core::GroupVersionKind;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::Error;
use crate::api::ipam::{IPAM_GROUP, IPAddress, IPAddressClaim};
use crate::api::{GuardedMachine, Machine};
use crate::plan::machine::ipam::{
    ClaimAdoption, ClaimReading, IP_CLAIM_PROTECTION_FINALIZER, POOLS_WITH_USAGE, PoolUsage,
};

fn claims_api(client: &kube::Client, machine: &Machine) -> Api<IPAddressClaim> {
    Api::namespaced(client.clone(), &machine.namespace().unwrap_or_default())
}

/// Each claim named (by NIC), with the `IPAddress` it names once bound.
pub(super) async fn read_claims(
    client: &kube::Client,
    machine: &Machine,
    names: &BTreeMap<usize, String>,
) -> Result<BTreeMap<usize, ClaimReading>, Error> {
    let claims = claims_api(client, machine);
    let addresses: Api<IPAddress> =
        Api::namespaced(client.clone(), &machine.namespace().unwrap_or_default());
    let mut readings = BTreeMap::new();
    for (nic, name) in names {
        let claim = claims
            .get_opt(name)
            .await
            .map_err(|e| Error::kube(format!("read IPAddressClaim {name}"), e))?;
        let bound = claim
            .as_ref()
            .and_then(|c| c.status.as_ref())
            .and_then(|s| s.address_ref.as_ref())
            .map(|r| r.name.clone())
            .filter(|n| !n.is_empty());
        let (address, pool_usage) = match bound {
            Some(address) => (
                addresses.get_opt(&address).await.map_err(|e| {
                    Error::kube(format!("read IPAddress {address} of claim {name}"), e)
                })?,
                None,
            ),
            None => (None, pool_usage(client, machine, claim.as_ref()).await),
        };
        readings.insert(
            *nic,
            ClaimReading {
                claim,
                address,
                pool_usage,
            },
        );
    }
    Ok(readings)
}

/// What the pool of an unbound claim reports of its addresses, for the kinds that report it
/// ([`POOLS_WITH_USAGE`]); `None` for any other pool, or one that cannot be read (it only makes
/// the waiting Machine's message more precise).
async fn pool_usage(
    client: &kube::Client,
    machine: &Machine,
    claim: Option<&IPAddressClaim>,
) -> Option<PoolUsage> {
    let pool = &claim?.spec.pool_ref;
    if pool.api_group.as_deref() != Some(IPAM_GROUP) {
        return None;
    }
    let (kind, plural, namespaced) = POOLS_WITH_USAGE
        .into_iter()
        .find(|(kind, ..)| *kind == pool.kind)?;
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(IPAM_GROUP, "v1alpha2", kind),
        plural,
    );
    let api: Api<DynamicObject> = if namespaced {
        Api::namespaced_with(
            client.clone(),
            &machine.namespace().unwrap_or_default(),
            &resource,
        )
    } else {
        Api::all_with(client.clone(), &resource)
    };
    let found = match api.get_opt(&pool.name).await {
        Ok(found) => found?,
        Err(error) => {
            tracing::debug!(machine = %machine.name_any(), pool = %pool.name, %error, "cannot read the pool's usage");
            return None;
        }
    };
    let usage = &found.data["status"]["ipAddresses"];
    Some(PoolUsage {
        total: usage["total"].as_u64()?,
        free: usage["free"].as_u64()?,
    })
}

/// Creates the claims; one that exists already (an earlier attempt made it) is no error: its
/// name is fixed, so there is never a second.
pub(super) async fn create_claims(
    client: &kube::Client,
    machine: &Machine,
    claims: &[IPAddressClaim],
) -> Result<(), Error> {
    let api = claims_api(client, machine);
    for claim in claims {
        let name = claim.name_any();
        match api.create(&PostParams::default(), claim).await {
            Ok(_) => {
                tracing::info!(machine = %machine.name_any(), claim = %name, "created IPAddressClaim")
            }
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(error) => {
                return Err(Error::kube(format!("create IPAddressClaim {name}"), error));
            }
        }
    }
    Ok(())
}

/// Writes each adoption against the claim's version read; answers each claim as the API server
/// now has it, by NIC (`None`: gone meanwhile). A claim changed since it was read is refused
/// (409) and the error goes to the Machine's backoff; the next reconcile reads it again.
pub(super) async fn adopt_claims(
    client: &kube::Client,
    machine: &Machine,
    adoptions: &[ClaimAdoption],
) -> Result<Vec<(usize, Option<IPAddressClaim>)>, Error> {
    let api = claims_api(client, machine);
    let mut adopted = Vec::with_capacity(adoptions.len());
    for adoption in adoptions {
        let patch = json!({"metadata": {
            "ownerReferences": adoption.owner_references,
            "finalizers": adoption.finalizers,
            "resourceVersion": adoption.resource_version,
        }});
        let name = &adoption.name;
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(claim) => {
                tracing::info!(machine = %machine.name_any(), claim = %name, "adopted IPAddressClaim that no controller owned");
                adopted.push((adoption.nic, Some(claim)));
            }
            Err(kube::Error::Api(status)) if status.code == 404 => {
                adopted.push((adoption.nic, None));
            }
            Err(error) => return Err(Error::kube(format!("adopt IPAddressClaim {name}"), error)),
        }
    }
    Ok(adopted)
}

/// Deletes every claim the Machine controls and removes its protection finalizer (the
/// machine-api-operator's `RemoveFinalizersForIPAddressClaims` finds them the same way: listed in
/// the namespace, controlled by the Machine). Without the claim API (no IPAM CRDs), there is
/// nothing to release.
pub(super) async fn release_claims(client: &kube::Client, machine: &Machine) -> Result<(), Error> {
    let api = claims_api(client, machine);
    let uid = machine.uid().unwrap_or_default();
    let listed = match api.list(&ListParams::default()).await {
        Ok(list) => list,
        Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
        Err(error) => return Err(Error::kube("list IPAddressClaims", error)),
    };
    for claim in listed.items.iter().filter(|claim| {
        claim
            .owner_references()
            .iter()
            .any(|owner| owner.controller == Some(true) && owner.uid == uid)
    }) {
        let name = claim.name_any();
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => return Err(Error::kube(format!("delete IPAddressClaim {name}"), error)),
        }
        if claim
            .finalizers()
            .iter()
            .any(|f| f == IP_CLAIM_PROTECTION_FINALIZER)
        {
            let rest: Vec<&String> = claim
                .finalizers()
                .iter()
                .filter(|f| *f != IP_CLAIM_PROTECTION_FINALIZER)
                .collect();
            // With the listed resourceVersion: a list changed since is refused (409), not lost.
            let patch = json!({"metadata": {
                "finalizers": rest,
                "resourceVersion": claim.resource_version(),
            }});
            match api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => {
                    return Err(Error::kube(
                        format!("remove the finalizer of IPAddressClaim {name}"),
                        error,
                    ));
                }
            }
        }
        tracing::info!(machine = %machine.name_any(), claim = %name, "released IPAddressClaim");
    }
    Ok(())
}

/// The Machines whose IP address claims changed (a claim bound by its IPAM controller above
/// all), so that a Machine waiting for its address is created at once rather than at its next
/// look. Claims are watched only where the API serves them (discovery at start); without the
/// IPAM CRDs the stream is empty and Machines waiting for an address (none can exist then) are
/// looked at every poll interval.
pub(super) async fn claim_changes(
    client: kube::Client,
    namespace: Option<String>,
) -> futures::stream::BoxStream<'static, ObjectRef<GuardedMachine>> {
    let served = match kube::discovery::group(&client, IPAM_GROUP).await {
        Ok(group) => group
            .versioned_resources(crate::api::ipam::IPAM_VERSION)
            .iter()
            .any(|(resource, _)| resource.plural == "ipaddressclaims"),
        Err(error) => {
            tracing::info!(%error, "IPAddressClaims are not served: static addresses are not watched");
            false
        }
    };
    if !served {
        return futures::stream::empty().boxed();
    }
    let api: Api<IPAddressClaim> = match &namespace {
        Some(namespace) => Api::namespaced(client, namespace),
        None => Api::all(client),
    };
    watcher(api, watcher::Config::default())
        .default_backoff()
        .touched_objects()
        .filter_map(|claim| async move {
            let claim = claim.ok()?;
            let owner = claim
                .owner_references()
                .iter()
                .find(|o| o.controller == Some(true) && o.kind == "Machine")?;
            Some(ObjectRef::new(&owner.name).within(&claim.namespace()?))
        })
        .boxed()
}
