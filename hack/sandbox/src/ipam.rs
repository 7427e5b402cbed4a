//! The IPAM controller of `InClusterIPPool`s and `GlobalInClusterIPPool`s, stood in for:
//! kubernetes-sigs/cluster-api-ipam-provider-in-cluster (read at
//! bc27dd724e20a0543f441d55183778a73db26294), each rule cited where it is simulated. It gives each
//! `IPAddressClaim` (of its namespace) naming an `InClusterIPPool` of the claim's namespace, or a
//! cluster-wide `GlobalInClusterIPPool`, an `IPAddress` from the pool, and releases it when the
//! claim is deleted, after the pool's `addressReuseGracePeriodSeconds`.
//!
//! It stands in because the real controller cannot run here: the Go module proxy does not serve
//! `sigs.k8s.io/cluster-api-ipam-provider-in-cluster` (403).
//!
//! Differences, all of them simplifications: IPv4 pools only, of at most 65,536 addresses; no
//! paused pools or clusters; every claim is looked at every `every` (the real controller watches
//! claims, addresses and pools, and requeues a held release for the rest of its grace period) from
//! one listing of each.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::time::Duration;

use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use kube::core::GroupVersionKind;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::actor::ActorHandle;

/// The group of the claim, address and pool kinds.
pub const IPAM_GROUP: &str = "ipam.cluster.x-k8s.io";
/// The pool kinds served (`internal/controllers/ipaddressclaim_address.go`, `FetchPool`:
/// `inClusterIPPoolKind` in the claim's namespace, `globalInClusterIPPoolKind` cluster-wide).
pub const POOL_KIND: &str = "InClusterIPPool";
pub const GLOBAL_POOL_KIND: &str = "GlobalInClusterIPPool";
/// On each claim it serves until the address is released (`pkg/ipamutil/reconciler.go`,
/// `ReleaseAddressFinalizer`).
pub const RELEASE_ADDRESS_FINALIZER: &str = "ipam.cluster.x-k8s.io/ReleaseAddress";
/// On each address it makes until its claim is deleted (`ProtectAddressFinalizer`).
pub const PROTECT_ADDRESS_FINALIZER: &str = "ipam.cluster.x-k8s.io/ProtectAddress";

/// The largest pool simulated.
const MAX_POOL: usize = 1 << 16;

/// Settings of the IPAM controller.
#[derive(Clone, Debug)]
pub struct IpamConfig {
    pub namespace: String,
    /// How often every claim is looked at.
    pub every: Duration,
}

impl Default for IpamConfig {
    fn default() -> Self {
        Self {
            namespace: crate::MACHINE_API_NAMESPACE.to_owned(),
            every: Duration::from_millis(200),
        }
    }
}

fn resource(version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(IPAM_GROUP, version, kind), plural)
}

struct Apis {
    claims: Api<DynamicObject>,
    addresses: Api<DynamicObject>,
    /// Every namespace's addresses: a global pool's in use are all of them (`EnsureAddress` lists
    /// them in the pool's namespace, which is none for a cluster-scoped pool).
    all_addresses: Api<DynamicObject>,
    pools: Api<DynamicObject>,
    global_pools: Api<DynamicObject>,
}

impl Apis {
    fn new(client: &Client, namespace: &str) -> Self {
        let api = |r: ApiResource| Api::namespaced_with(client.clone(), namespace, &r);
        let address = resource("v1beta1", "IPAddress", "ipaddresses");
        Self {
            claims: api(resource("v1beta1", "IPAddressClaim", "ipaddressclaims")),
            addresses: api(address.clone()),
            all_addresses: Api::all_with(client.clone(), &address),
            pools: api(resource("v1alpha2", POOL_KIND, "inclusterippools")),
            global_pools: Api::all_with(
                client.clone(),
                &resource("v1alpha2", GLOBAL_POOL_KIND, "globalinclusterippools"),
            ),
        }
    }

    fn pools_of(&self, kind: &str) -> &Api<DynamicObject> {
        if kind == GLOBAL_POOL_KIND {
            &self.global_pools
        } else {
            &self.pools
        }
    }
}

/// A pool by kind and name (namespaced pools are those of the served namespace).
type PoolKey = (String, String);
/// An address by namespace and name.
type AddressKey = (String, String);

fn address_key(object: &DynamicObject) -> AddressKey {
    (object.namespace().unwrap_or_default(), object.name_any())
}

/// The addresses in use of a pool (`poolutil.ListAddressesInUse`: those whose `poolRef` names
/// the pool, in its namespace; every namespace for a global pool).
fn addresses_of<'a>(
    kind: &'a str,
    pool: &'a DynamicObject,
    addresses: &'a BTreeMap<AddressKey, DynamicObject>,
) -> impl Iterator<Item = u32> + 'a {
    let name = pool.name_any();
    let namespace = pool.namespace();
    addresses
        .values()
        .filter(move |a| {
            pool_ref_of(a, "spec")
                .is_some_and(|(g, k, n)| g == IPAM_GROUP && k == kind && n == name)
                && (kind == GLOBAL_POOL_KIND || a.namespace() == namespace)
        })
        .filter_map(|a| a.data["spec"]["address"].as_str()?.parse::<Ipv4Addr>().ok())
        .map(u32::from)
}

/// Starts the controller.
pub fn start(client: Client, config: IpamConfig) -> ActorHandle {
    ActorHandle::spawn("ipam", move |cancel| async move {
        let apis = Apis::new(&client, &config.namespace);
        loop {
            if let Err(error) = reconcile_all(&apis).await {
                tracing::debug!(%error, "ipam: round failed; retried");
            }
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(config.every) => {}
            }
        }
    })
}

/// The addresses a pool hands out, lowest first (`internal/poolutil/pool.go`, `PoolSpecToIPSet`):
/// `spec.addresses` (single addresses, `a-b` ranges, CIDRs) less `spec.excludedAddresses`; less
/// the network and broadcast addresses of the subnet `spec.prefix` makes of the first address,
/// unless `spec.allocateReservedIPAddresses`; less `spec.gateway`. `None` for a pool the stand-in
/// does not simulate (IPv6, unreadable, too large).
pub fn pool_addresses(spec: &Value) -> Option<BTreeSet<u32>> {
    let set = |key: &str| -> Option<BTreeSet<u32>> {
        let mut set = BTreeSet::new();
        for entry in spec[key].as_array().into_iter().flatten() {
            let (from, to) = range_of(entry.as_str()?)?;
            if u64::from(to - from) + set.len() as u64 >= MAX_POOL as u64 {
                return None;
            }
            set.extend(from..=to);
        }
        Some(set)
    };
    let mut addresses = set("addresses")?;
    for excluded in set("excludedAddresses")? {
        addresses.remove(&excluded);
    }
    let prefix = u32::try_from(spec["prefix"].as_u64()?)
        .ok()
        .filter(|p| *p <= 32)?;
    if !spec["allocateReservedIPAddresses"]
        .as_bool()
        .unwrap_or(false)
        && let Some(first) = addresses.first().copied()
    {
        let mask = if prefix == 0 {
            0
        } else {
            u32::MAX << (32 - prefix)
        };
        addresses.remove(&(first & mask));
        addresses.remove(&(first | !mask));
    }
    if let Some(gateway) = spec["gateway"].as_str().filter(|g| !g.is_empty()) {
        addresses.remove(&u32::from(gateway.parse::<Ipv4Addr>().ok()?));
    }
    Some(addresses)
}

/// An address, `a-b` range or CIDR as `[from, to]` (`AddressToIPSet`).
fn range_of(text: &str) -> Option<(u32, u32)> {
    let text = text.trim();
    if let Some((from, to)) = text.split_once('-') {
        let (from, to) = (
            u32::from(from.trim().parse::<Ipv4Addr>().ok()?),
            u32::from(to.trim().parse::<Ipv4Addr>().ok()?),
        );
        return (from <= to).then_some((from, to));
    }
    if let Some((addr, len)) = text.split_once('/') {
        let addr = u32::from(addr.parse::<Ipv4Addr>().ok()?);
        let len: u32 = len.parse().ok().filter(|l| *l <= 32)?;
        let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
        return Some((addr & mask, addr | !mask));
    }
    let addr = u32::from(text.parse::<Ipv4Addr>().ok()?);
    Some((addr, addr))
}

/// The lowest address of the pool not in use (`FindFreeAddress` walks the pool's ranges from
/// the lowest); `in_use` holds the addresses of the pool's `IPAddress`es and its gateway
/// (`buildAddressList`).
pub fn free_address(pool: &BTreeSet<u32>, in_use: &BTreeSet<u32>) -> Option<Ipv4Addr> {
    pool.iter()
        .find(|a| !in_use.contains(a))
        .map(|a| Ipv4Addr::from(*a))
}

fn pool_ref_of(object: &DynamicObject, path: &str) -> Option<(String, String, String)> {
    let r = &object.data[path]["poolRef"];
    Some((
        r["apiGroup"].as_str().unwrap_or_default().to_owned(),
        r["kind"].as_str()?.to_owned(),
        r["name"].as_str()?.to_owned(),
    ))
}

async fn reconcile_all(apis: &Apis) -> Result<(), kube::Error> {
    let params = ListParams::default();
    let claims = apis.claims.list(&params).await?.items;
    if claims.is_empty() {
        return Ok(());
    }
    let mut pools: BTreeMap<PoolKey, DynamicObject> = BTreeMap::new();
    for kind in [POOL_KIND, GLOBAL_POOL_KIND] {
        for pool in apis.pools_of(kind).list(&params).await?.items {
            pools.insert((kind.to_owned(), pool.name_any()), pool);
        }
    }
    let mut addresses: BTreeMap<AddressKey, DynamicObject> = apis
        .all_addresses
        .list(&params)
        .await?
        .items
        .into_iter()
        .map(|a| (address_key(&a), a))
        .collect();
    for claim in &claims {
        // Only claims of this provider's kinds (`ClaimHandlerFor` / `FetchPool` switch on it).
        let Some((group, kind, pool_name)) = pool_ref_of(claim, "spec") else {
            continue;
        };
        if group != IPAM_GROUP || (kind != POOL_KIND && kind != GLOBAL_POOL_KIND) {
            continue;
        }
        let pool = pools.get(&(kind.clone(), pool_name));
        reconcile_claim(apis, claim, &kind, pool, &mut addresses).await?;
    }
    for ((kind, _), pool) in &pools {
        write_pool_status(apis, kind, pool, &addresses).await?;
    }
    Ok(())
}

/// Whether the release of a deleted claim's address is held: the pool asks for a grace period
/// (`spec.addressReuseGracePeriodSeconds` above 0) that has not passed since the claim's
/// deletion, and the pool itself is not being deleted (`IPAddressClaimHandler.ReleaseAddress`).
pub fn release_held(
    claim_deleted_at: jiff::Timestamp,
    pool: &DynamicObject,
    now: jiff::Timestamp,
) -> bool {
    if pool.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let grace = pool.data["spec"]["addressReuseGracePeriodSeconds"]
        .as_i64()
        .unwrap_or(0);
    grace > 0
        && claim_deleted_at
            .checked_add(jiff::SignedDuration::from_secs(grace))
            .is_ok_and(|released_at| now < released_at)
}

/// One claim, as `ClaimReconciler.Reconcile` (`pkg/ipamutil/reconciler.go`) handles it.
async fn reconcile_claim(
    apis: &Apis,
    claim: &DynamicObject,
    kind: &str,
    pool: Option<&DynamicObject>,
    addresses: &mut BTreeMap<AddressKey, DynamicObject>,
) -> Result<(), kube::Error> {
    let name = claim.name_any();
    let key = address_key(claim);
    let deleting = claim.metadata.deletion_timestamp.is_some();
    let finalizers = claim.finalizers();
    // The finalizer first, and nothing else in that round.
    if !deleting && !finalizers.iter().any(|f| f == RELEASE_ADDRESS_FINALIZER) {
        let mut with = finalizers.to_vec();
        with.push(RELEASE_ADDRESS_FINALIZER.to_owned());
        return patch_finalizers(&apis.claims, claim, &with).await;
    }
    if deleting {
        if let (Some(deleted_at), Some(pool)) = (&claim.metadata.deletion_timestamp, pool)
            && release_held(deleted_at.0, pool, jiff::Timestamp::now())
        {
            return Ok(());
        }
        // `reconcileDelete`: the address (named as the claim) loses its finalizer and is
        // deleted, then the claim loses its own.
        if let Some(address) = addresses.remove(&key) {
            let rest: Vec<String> = address
                .finalizers()
                .iter()
                .filter(|f| *f != PROTECT_ADDRESS_FINALIZER)
                .cloned()
                .collect();
            patch_finalizers(&apis.addresses, &address, &rest).await?;
            ignore_missing(apis.addresses.delete(&name, &DeleteParams::default()).await)?;
        }
        if finalizers.iter().any(|f| f == RELEASE_ADDRESS_FINALIZER) {
            let rest: Vec<String> = finalizers
                .iter()
                .filter(|f| *f != RELEASE_ADDRESS_FINALIZER)
                .cloned()
                .collect();
            patch_finalizers(&apis.claims, claim, &rest).await?;
        }
        return Ok(());
    }
    // A claim of a pool that does not exist is left alone ("pool not found").
    let Some(pool) = pool else {
        return Ok(());
    };
    if !addresses.contains_key(&key) {
        let spec = &pool.data["spec"];
        let Some(pool_set) = pool_addresses(spec) else {
            return Ok(());
        };
        let pool_name = pool.name_any();
        let in_use: BTreeSet<u32> = addresses_of(kind, pool, addresses)
            .chain(
                spec["gateway"]
                    .as_str()
                    .and_then(|g| g.parse::<Ipv4Addr>().ok())
                    .map(u32::from),
            )
            .collect();
        // An exhausted pool: the real controller's `EnsureAddress` fails with "no address
        // available" and retries; the claim stays without an address.
        let Some(free) = free_address(&pool_set, &in_use) else {
            tracing::debug!(claim = %name, pool = %pool_name, "ipam: no address available");
            return Ok(());
        };
        let address = new_address(claim, kind, pool, free, spec);
        let created = match apis
            .addresses
            .create(&PostParams::default(), &address)
            .await
        {
            Ok(created) => created,
            Err(kube::Error::Api(status)) if status.code == 409 => return Ok(()),
            Err(error) => return Err(error),
        };
        addresses.insert(key, created);
    }
    let bound = claim.data["status"]["addressRef"]["name"].as_str() == Some(name.as_str());
    if !bound {
        apis.claims
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"addressRef": {"name": name}}})),
            )
            .await?;
    }
    Ok(())
}

/// The `IPAddress` of a claim (`pkg/ipamutil/address.go`, `NewIPAddress`: named as the claim,
/// `claimRef` and `poolRef`; `ensureIPAddressOwnerReferences`: the claim as controller, the pool
/// as a blocking non-controller owner; the `ProtectAddress` finalizer) with the pool's prefix and
/// gateway (`EnsureAddress`).
fn new_address(
    claim: &DynamicObject,
    kind: &str,
    pool: &DynamicObject,
    ip: Ipv4Addr,
    spec: &Value,
) -> DynamicObject {
    let mut gateway = spec["gateway"].as_str().unwrap_or_default().to_owned();
    gateway.retain(|c| !c.is_whitespace());
    let object = json!({
        "apiVersion": format!("{IPAM_GROUP}/v1beta1"), "kind": "IPAddress",
        "metadata": {
            "name": claim.name_any(),
            "namespace": claim.namespace(),
            "finalizers": [PROTECT_ADDRESS_FINALIZER],
            "ownerReferences": [
                {"apiVersion": format!("{IPAM_GROUP}/v1beta1"), "kind": "IPAddressClaim",
                 "name": claim.name_any(), "uid": claim.uid(), "controller": true,
                 "blockOwnerDeletion": true},
                {"apiVersion": format!("{IPAM_GROUP}/v1alpha2"), "kind": kind,
                 "name": pool.name_any(), "uid": pool.uid(), "controller": false,
                 "blockOwnerDeletion": true},
            ],
        },
        "spec": {
            "claimRef": {"name": claim.name_any()},
            "poolRef": {"apiGroup": IPAM_GROUP, "kind": kind, "name": pool.name_any()},
            "address": ip.to_string(),
            "prefix": spec["prefix"],
            "gateway": gateway,
        },
    });
    serde_json::from_value(object).unwrap_or_else(|_| DynamicObject {
        types: None,
        metadata: Default::default(),
        data: Value::Null,
    })
}

/// `status.ipAddresses` of a pool (`internal/controllers/inclusterippool.go`, `Reconcile`:
/// total, used, free, outOfRange), written when it changes.
async fn write_pool_status(
    apis: &Apis,
    kind: &str,
    pool: &DynamicObject,
    addresses: &BTreeMap<AddressKey, DynamicObject>,
) -> Result<(), kube::Error> {
    let Some(set) = pool_addresses(&pool.data["spec"]) else {
        return Ok(());
    };
    let name = pool.name_any();
    let mine: Vec<u32> = addresses_of(kind, pool, addresses).collect();
    let in_range = mine.iter().filter(|a| set.contains(a)).count();
    let status = json!({
        "total": set.len(),
        "used": in_range,
        "free": set.len() - in_range,
        "outOfRange": mine.len() - in_range,
    });
    if pool.data["status"]["ipAddresses"] == status {
        return Ok(());
    }
    apis.pools_of(kind)
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"ipAddresses": status}})),
        )
        .await?;
    Ok(())
}

/// Sets the finalizers, with the object's resourceVersion: a list changed since is refused.
async fn patch_finalizers(
    api: &Api<DynamicObject>,
    object: &DynamicObject,
    finalizers: &[String],
) -> Result<(), kube::Error> {
    let patch = json!({"metadata": {
        "finalizers": finalizers,
        "resourceVersion": object.resource_version(),
    }});
    ignore_missing(
        api.patch(
            &object.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await,
    )
}

fn ignore_missing<T>(result: Result<T, kube::Error>) -> Result<(), kube::Error> {
    match result {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(error) => Err(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> u32 {
        u32::from(text.parse::<Ipv4Addr>().unwrap())
    }

    #[test]
    fn a_pool_leaves_out_the_network_broadcast_gateway_and_exclusions() {
        let spec = json!({
            "addresses": ["10.40.0.0/29", "10.40.0.20-10.40.0.21"],
            "excludedAddresses": ["10.40.0.3"],
            "prefix": 20,
            "gateway": "10.40.0.1",
        });
        let set = pool_addresses(&spec).unwrap();
        let expected: BTreeSet<u32> = [
            "10.40.0.2",
            "10.40.0.4",
            "10.40.0.5",
            "10.40.0.6",
            "10.40.0.7",
            "10.40.0.20",
            "10.40.0.21",
        ]
        .iter()
        .map(|a| ip(a))
        .collect();
        assert_eq!(set, expected, "10.40.0.0 is the /20's network address");
        let reserved = pool_addresses(&json!({
            "addresses": ["10.40.0.0/30"], "prefix": 30, "allocateReservedIPAddresses": true
        }))
        .unwrap();
        assert_eq!(reserved.len(), 4);
        assert!(pool_addresses(&json!({"addresses": ["fd00::1"], "prefix": 64})).is_none());
    }

    #[test]
    fn the_lowest_free_address_is_given_and_none_once_exhausted() {
        let pool: BTreeSet<u32> = [ip("10.0.0.5"), ip("10.0.0.6")].into();
        assert_eq!(
            free_address(&pool, &[ip("10.0.0.5")].into()),
            Some("10.0.0.6".parse().unwrap())
        );
        assert_eq!(free_address(&pool, &pool.clone()), None);
    }

    #[test]
    fn a_release_is_held_for_the_pool_s_grace_period_unless_the_pool_goes() {
        let pool = |grace: Value, deleting: bool| {
            let mut pool: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": GLOBAL_POOL_KIND,
                "metadata": {"name": "shared"},
                "spec": {"addresses": ["10.0.0.2"], "prefix": 24, "addressReuseGracePeriodSeconds": grace},
            }))
            .unwrap();
            if deleting {
                pool.metadata.deletion_timestamp =
                    Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        jiff::Timestamp::UNIX_EPOCH,
                    ));
            }
            pool
        };
        let deleted = jiff::Timestamp::from_second(1_000).unwrap();
        let after = |s: i64| {
            deleted
                .checked_add(jiff::SignedDuration::from_secs(s))
                .unwrap()
        };
        assert!(release_held(deleted, &pool(json!(30), false), after(29)));
        assert!(!release_held(deleted, &pool(json!(30), false), after(30)));
        assert!(!release_held(deleted, &pool(json!(0), false), after(0)));
        assert!(!release_held(deleted, &pool(Value::Null, false), after(0)));
        assert!(
            !release_held(deleted, &pool(json!(30), true), after(1)),
            "a pool being deleted holds nothing"
        );
    }
}
