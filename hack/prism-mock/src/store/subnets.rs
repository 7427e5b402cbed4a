//! Subnets: seeded as Prism-managed (IPAM: an address pool that AHV's DHCP hands out) or unmanaged (a plain
//! VLAN, no address from Prism), and answered in the shapes real Prism Central gives each.

use std::net::Ipv4Addr;

use serde_json::{Value, json};

use super::entities::{ADMIN_UUID, reference};
use super::net::{Ipv4Net, Pool};
use super::{SPEC_HASH, Store, derived_uuid};
use crate::seed::{SeedError, SubnetSeed};

/// The addresses of a managed subnet, as its seed gives them.
struct Ipam<'a> {
    net: Ipv4Net,
    gateway: &'a str,
    pool_start: &'a str,
    pool_end: &'a str,
    pool: Pool,
}

/// Checks a subnet seed: a managed subnet needs a gateway and a pool inside its cidr; an unmanaged one takes
/// neither, since Prism keeps no IPAM for it. `None` for an unmanaged subnet.
fn ipam_of(subnet: &SubnetSeed) -> Result<Option<Ipam<'_>>, SeedError> {
    let bad = |what: &str| SeedError::Reference(format!("subnet '{}': {what}", subnet.name));
    let net = Ipv4Net::parse(&subnet.cidr).ok_or_else(|| bad("invalid cidr"))?;
    let fields = (
        subnet.gateway.as_deref(),
        subnet.pool_start.as_deref(),
        subnet.pool_end.as_deref(),
    );
    let (gateway, pool_start, pool_end) = match (subnet.managed, fields) {
        (true, (Some(gateway), Some(start), Some(end))) => (gateway, start, end),
        (true, _) => {
            return Err(bad(
                "a managed subnet needs gateway, pool_start and pool_end",
            ));
        }
        (false, (None, None, None)) => return Ok(None),
        (false, _) => {
            return Err(bad(
                "an unmanaged subnet (managed: false) takes no gateway, pool_start or pool_end",
            ));
        }
    };
    let start: Ipv4Addr = pool_start.parse().map_err(|_| bad("invalid pool_start"))?;
    let end: Ipv4Addr = pool_end.parse().map_err(|_| bad("invalid pool_end"))?;
    let gateway_ip: Ipv4Addr = gateway.parse().map_err(|_| bad("invalid gateway"))?;
    let mut pool = Pool::new(net, start, end)
        .ok_or_else(|| bad("invalid pool range (outside the cidr or reversed)"))?;
    pool.reserve(u32::from(gateway_ip));
    Ok(Some(Ipam {
        net,
        gateway,
        pool_start,
        pool_end,
        pool,
    }))
}

impl Store {
    /// Adds a seeded subnet, its pool kept when Prism manages it.
    pub(super) fn seed_subnet(&mut self, subnet: &SubnetSeed) -> Result<(), SeedError> {
        let uuid = self.seed_uuid(&subnet.uuid);
        let cluster = self.cluster_uuid(&subnet.cluster, &format!("subnet '{}'", subnet.name))?;
        let ipam = ipam_of(subnet)?;
        // The shape of a recorded VLAN subnet (get_subnet.json). An unmanaged one has no `ip_config` at all, as
        // real Prism Central lists its VLAN subnets without IPAM (nutanix/nutanix.ansible#466: `subnet_type`,
        // `virtual_switch_uuid`, `vlan_id`, `vswitch_name` only); prism-go-client's recordings have none.
        let mut resources = json!({
            "subnet_type": "VLAN",
            "vlan_id": subnet.vlan_id,
            "vswitch_name": "br0",
            "virtual_switch_uuid": derived_uuid("virtual_switch", &cluster),
        });
        if let (Some(ipam), Some(res)) = (&ipam, resources.as_object_mut()) {
            let net = ipam.net;
            let dhcp_server = net.host(u64::from(u32::MAX >> net.prefix_len).saturating_sub(1));
            res.insert(
                "ip_config".to_owned(),
                json!({
                    "subnet_ip": net.address().to_string(),
                    "prefix_length": net.prefix_len,
                    "default_gateway_ip": ipam.gateway,
                    "pool_list": [{"range": format!("{} {}", ipam.pool_start, ipam.pool_end)}],
                    "dhcp_options": {"domain_name_server_list": [ipam.gateway]},
                    "dhcp_server_address": {"ip": dhcp_server.to_string()},
                }),
            );
        }
        if let Some(ipam) = ipam {
            self.pools.insert(uuid.clone(), ipam.pool);
        }
        let mut metadata = self.metadata("subnet", &uuid);
        if let Some(obj) = metadata.as_object_mut() {
            obj.insert("spec_hash".to_owned(), json!(SPEC_HASH));
            obj.insert(
                "owner_reference".to_owned(),
                reference("user", ADMIN_UUID, Some("admin")),
            );
        }
        let entity = json!({
            "api_version": "3.1",
            "metadata": metadata,
            "spec": {
                "name": subnet.name,
                "cluster_reference": reference("cluster", &cluster, Some(&subnet.cluster)),
                "resources": resources,
            },
            "status": {
                "name": subnet.name,
                "state": "COMPLETE",
                "cluster_reference": reference("cluster", &cluster, Some(&subnet.cluster)),
                "resources": resources,
                "execution_context": {"task_uuid": [derived_uuid("subnet_create", &uuid)]},
            },
        });
        self.subnets.insert(uuid, entity);
        Ok(())
    }

    /// A subnet as GET and list answer it: its address usage is counted now (`ip_usage_stats`,
    /// get_subnet.json). An unmanaged subnet's usage has only `num_macs`, as nutanix/nutanix.ansible#466 shows
    /// a real one: Prism counts no addresses where it hands out none.
    pub(crate) fn subnet_json(&self, entity: &Value) -> Value {
        let mut entity = entity.clone();
        let uuid = entity
            .pointer("/metadata/uuid")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let range = entity
            .pointer("/spec/resources/ip_config/pool_list/0/range")
            .cloned()
            .unwrap_or(Value::Null);
        let macs = self
            .vms
            .values()
            .flat_map(|vm| vm.nics.iter())
            .filter(|nic| nic.subnet_uuid == uuid)
            .count()
            + self.foreign.on_subnet(&uuid);
        let usage = match self.pools.get(&uuid) {
            Some(pool) => {
                let (total, free) = pool.usage();
                let size = u64::from(u32::MAX >> pool.net.prefix_len) + 1;
                json!({
                    "num_free_ips": size.saturating_sub(pool.in_use()),
                    "num_macs": macs,
                    "num_assigned_ips": pool.in_use(),
                    "ip_pools_stats": [{"num_total_ips": total, "range": range, "num_free_ips": free}],
                })
            }
            None => json!({"num_macs": macs}),
        };
        if let Some(res) = entity
            .pointer_mut("/status/resources")
            .and_then(Value::as_object_mut)
        {
            res.insert("ip_usage_stats".to_owned(), usage);
        }
        entity
    }

    pub(crate) fn subnet_cluster(&self, uuid: &str) -> Option<&str> {
        self.subnets
            .get(uuid)?
            .pointer("/spec/cluster_reference/uuid")
            .and_then(Value::as_str)
    }

    /// Whether Prism manages the subnet's addresses (IPAM): only a managed subnet has a pool.
    pub(crate) fn is_managed_subnet(&self, uuid: &str) -> bool {
        self.pools.contains_key(uuid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subnet(fields: &str) -> SubnetSeed {
        serde_saphyr::from_str(&format!("{{name: s, cluster: pe-1, {fields}}}")).unwrap()
    }

    fn refusal(fields: &str) -> String {
        ipam_of(&subnet(fields))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    }

    #[test]
    fn a_managed_subnet_needs_a_pool_and_an_unmanaged_one_takes_none() {
        let managed = subnet(
            "cidr: 10.0.0.0/24, gateway: 10.0.0.1, pool_start: 10.0.0.10, pool_end: 10.0.0.20",
        );
        assert!(managed.managed, "managed unless told otherwise");
        assert!(ipam_of(&managed).unwrap().is_some());
        assert!(
            ipam_of(&subnet("managed: false, cidr: 10.0.0.0/24"))
                .unwrap()
                .is_none()
        );
        assert_eq!(
            refusal("cidr: 10.0.0.0/24, gateway: 10.0.0.1"),
            "seed: subnet 's': a managed subnet needs gateway, pool_start and pool_end"
        );
        assert_eq!(
            refusal("managed: false, cidr: 10.0.0.0/24, pool_start: 10.0.0.10"),
            "seed: subnet 's': an unmanaged subnet (managed: false) takes no gateway, pool_start or pool_end"
        );
        assert_eq!(
            refusal("managed: false, cidr: 10.0.0.0/33"),
            "seed: subnet 's': invalid cidr"
        );
    }
}
