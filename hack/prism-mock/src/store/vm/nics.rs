//! A VM's NICs validated, given UUIDs and MACs, and their addresses taken from and given back to the subnets'
//! pools.

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;

use rand::Rng;
use serde_json::{Map, Value, json};

use super::{Details, NicPlan, detail};
use crate::store::Store;
use crate::store::entities::reference;
use crate::store::record::{NicRuntime, Vm};
use crate::store::tasks::{FailCause, FailOutcome, FailPlan};

/// Prism Central's message for an ASSIGNED address on a subnet it does not manage (see
/// [`Store::unmanaged_assignment`]).
const UNMANAGED_ASSIGNMENT: &str = "Cannot assign IP address on an unmanaged network";

fn mac_from(rng: &mut rand::rngs::StdRng) -> String {
    let bytes: [u8; 3] = rng.random();
    format!(
        "50:6b:8d:{:02x}:{:02x}:{:02x}",
        bytes[0], bytes[1], bytes[2]
    )
}

fn parse_ipv4(text: &str) -> Option<u32> {
    text.parse::<Ipv4Addr>().ok().map(u32::from)
}

impl Store {
    pub(super) fn prepare_nics(
        &mut self,
        res: &mut Map<String, Value>,
        cluster_uuid: &str,
        existing: Option<&Vm>,
        details: &mut Details,
    ) -> Vec<NicPlan> {
        let existing_nics: HashMap<&str, &NicRuntime> = existing
            .map(|vm| vm.nics.iter().map(|n| (n.uuid.as_str(), n)).collect())
            .unwrap_or_default();
        let existing_macs: HashMap<String, String> = existing
            .and_then(|vm| {
                vm.spec
                    .pointer("/resources/nic_list")
                    .and_then(Value::as_array)
            })
            .into_iter()
            .flatten()
            .filter_map(|n| {
                Some((
                    n.get("uuid")?.as_str()?.to_owned(),
                    n.get("mac_address")?.as_str()?.to_owned(),
                ))
            })
            .collect();
        let mut nics: Vec<Value> = match res.get("nic_list") {
            Some(Value::Array(list)) => list.clone(),
            None | Some(Value::Null) => Vec::new(),
            Some(_) => {
                detail(details, "spec.resources.nic_list", "must be a list");
                Vec::new()
            }
        };
        let mut plans = Vec::new();
        let mut requested: HashSet<u32> = HashSet::new();
        for (i, nic) in nics.iter_mut().enumerate() {
            let field = format!("spec.resources.nic_list[{i}]");
            let Some(n) = nic.as_object_mut() else {
                detail(details, &field, "must be an object");
                continue;
            };
            let subnet_uuid = n
                .get("subnet_reference")
                .and_then(|s| s.get("uuid"))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            match self.subnet_cluster(&subnet_uuid) {
                None => detail(
                    details,
                    format!("{field}.subnet_reference.uuid"),
                    format!("subnet '{subnet_uuid}' does not exist"),
                ),
                Some(c) if c != cluster_uuid => detail(
                    details,
                    format!("{field}.subnet_reference.uuid"),
                    format!("subnet '{subnet_uuid}' is not on cluster '{cluster_uuid}'"),
                ),
                Some(_) => {}
            }
            let subnet_name = self.subnets.name_of(&subnet_uuid).map(str::to_owned);
            n.insert(
                "subnet_reference".to_owned(),
                reference("subnet", &subnet_uuid, subnet_name.as_deref()),
            );
            let kept = n
                .get("uuid")
                .and_then(Value::as_str)
                .and_then(|u| existing_nics.get(u))
                .map(|r| (*r).clone());
            if let Some(uuid) = n.get("uuid").and_then(Value::as_str)
                && kept.is_none()
            {
                detail(
                    details,
                    format!("{field}.uuid"),
                    format!("NIC '{uuid}' does not belong to this VM"),
                );
            }
            if let Some(k) = &kept
                && k.subnet_uuid != subnet_uuid
            {
                detail(
                    details,
                    format!("{field}.subnet_reference"),
                    "cannot change the subnet of an existing NIC",
                );
            }
            let mut requested_ip = None;
            // A spec's address is ASSIGNED, the type's default (prism-go-client `v3/swagger.json`,
            // `ip_address.type`: "It can only be ASSIGNED in the spec"), and an IPv4 `ip`; AHV's
            // IPAM then gives the guest that address (nutanix/nutanix.ansible
            // `plugins/module_utils/v3/prism/vms.py` sends a NIC's `private_ip` so).
            if let Some(list) = n.get("ip_endpoint_list").and_then(Value::as_array) {
                for (j, endpoint) in list.iter().enumerate() {
                    let efield = format!("{field}.ip_endpoint_list[{j}]");
                    let ty = endpoint
                        .get("type")
                        .and_then(Value::as_str)
                        .unwrap_or("ASSIGNED");
                    if ty != "ASSIGNED" {
                        detail(
                            details,
                            format!("{efield}.type"),
                            format!("'{ty}' is not allowed in a spec (only ASSIGNED)"),
                        );
                    }
                    let Some(ip) = endpoint
                        .get("ip")
                        .and_then(Value::as_str)
                        .and_then(parse_ipv4)
                    else {
                        detail(details, format!("{efield}.ip"), "is not an IPv4 address");
                        continue;
                    };
                    if j > 0 {
                        detail(details, &efield, "the mock supports one address per NIC");
                        continue;
                    }
                    let same_as_kept = kept.as_ref().is_some_and(|k| k.ip == Some(ip));
                    match self.pools.get(&subnet_uuid) {
                        Some(pool) if !pool.net.contains(ip) => detail(
                            details,
                            format!("{efield}.ip"),
                            format!("{} is not in the subnet", Ipv4Addr::from(ip)),
                        ),
                        Some(pool)
                            if (pool.is_used(ip) && !same_as_kept) || !requested.insert(ip) =>
                        {
                            detail(
                                details,
                                format!("{efield}.ip"),
                                format!("{} is already in use", Ipv4Addr::from(ip)),
                            )
                        }
                        // On a subnet Prism does not manage, the request is accepted and its task
                        // fails (`unmanaged_assignment`).
                        _ => requested_ip = Some(ip),
                    }
                }
            }
            if let Some(k) = &kept
                && k.assigned != requested_ip.is_some()
            {
                detail(
                    details,
                    format!("{field}.ip_endpoint_list"),
                    "cannot change the address of an existing NIC",
                );
            }
            let uuid = match &kept {
                Some(k) => k.uuid.clone(),
                None => self.new_uuid(),
            };
            let mac = existing_macs
                .get(&uuid)
                .cloned()
                .unwrap_or_else(|| mac_from(&mut self.rng));
            n.insert("uuid".to_owned(), json!(uuid));
            n.insert("mac_address".to_owned(), json!(mac));
            n.entry("nic_type").or_insert_with(|| json!("NORMAL_NIC"));
            n.entry("vlan_mode").or_insert_with(|| json!("ACCESS"));
            n.entry("is_connected").or_insert_with(|| json!(true));
            n.entry("trunked_vlan_list").or_insert_with(|| json!([]));
            n.entry("num_queues").or_insert_with(|| json!(1));
            plans.push(NicPlan {
                uuid,
                subnet_uuid,
                requested_ip,
                kept,
            });
        }
        res.insert("nic_list".to_owned(), Value::Array(nics));
        plans
    }

    pub(super) fn allocate_nics(
        &mut self,
        plans: &[NicPlan],
        exhausted: &mut Option<String>,
    ) -> Vec<NicRuntime> {
        let mut nics = Vec::new();
        for plan in plans {
            if let Some(kept) = &plan.kept {
                nics.push(kept.clone());
                continue;
            }
            let managed = self.is_managed_subnet(&plan.subnet_uuid);
            let pool = self.pools.get_mut(&plan.subnet_uuid);
            let ip = match (pool, plan.requested_ip) {
                (Some(pool), Some(ip)) => {
                    pool.reserve(ip);
                    Some(ip)
                }
                (Some(pool), None) => {
                    let ip = pool.allocate();
                    if ip.is_none() {
                        *exhausted = Some(
                            self.subnets
                                .name_of(&plan.subnet_uuid)
                                .unwrap_or(&plan.subnet_uuid)
                                .to_owned(),
                        );
                    }
                    ip
                }
                // No IPAM: Prism hands out no address (and refuses an ASSIGNED one, see
                // `unmanaged_assignment`); the guest may set one itself (`Vm::reported_addresses`).
                (None, _) => None,
            };
            nics.push(NicRuntime {
                uuid: plan.uuid.clone(),
                subnet_uuid: plan.subnet_uuid.clone(),
                managed,
                ip,
                assigned: plan.requested_ip.is_some(),
            });
        }
        nics
    }

    /// Prism's refusal of an ASSIGNED address on a subnet it does not manage: "Cannot assign IP address on an
    /// unmanaged network", from Prism Central itself (nutanix/terraform-provider-nutanix#1167, on a create from
    /// a clone; nutanix/nutanix.ansible#593, on a `PUT` since pc.2024.2.0.3). Both show the request accepted and
    /// its task failed: #1167's text is terraform-provider-nutanix's `taskStateRefreshFunc` reporting a FAILED
    /// task's `error_detail`, "Failed to clone <source>: Failed to create VM <uuid>: (15, Cannot assign IP
    /// address on an unmanaged network)", and #593's `PUT` was answered with the usual accepted body
    /// (`metadata`, `spec`, …). So the mock fails the task
    /// with that `error_detail` (`what` is its "Failed to …" head; the update's wording is the mock's, after
    /// #1167's) and removes a new VM as a failed create does. The reports show no error code: the task carries
    /// the code and group of AHV's other refusal of a VM's argument, VMM-30102 / `VM_INVALID_ARGUMENT`
    /// (`FailCause::InvalidArgument`). No network is checked first: Prism knows none for such a subnet.
    pub(super) fn unmanaged_assignment(&self, nics: &[NicPlan], what: String) -> Option<FailPlan> {
        nics.iter()
            .any(|nic| nic.requested_ip.is_some() && !self.is_managed_subnet(&nic.subnet_uuid))
            .then(|| FailPlan {
                error: format!("{what}: (15, {UNMANAGED_ASSIGNMENT})"),
                outcome: FailOutcome::RemoveVm,
                cause: FailCause::InvalidArgument,
            })
    }

    pub(super) fn release_nics(&mut self, nics: &[NicRuntime]) {
        for nic in nics {
            if let (Some(ip), Some(pool)) = (nic.ip, self.pools.get_mut(&nic.subnet_uuid)) {
                pool.release(ip);
            }
        }
    }
}
