//! What the store keeps of a VM: the record, the metadata a client controls, its NICs at run time, its decoded
//! guest customization, what its guest reports and what a GET still shows for a while after a task. Tasks,
//! the foreign VMs and the VM requests (`vm`) all work on these.

use std::net::Ipv4Addr;
use std::time::Instant;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::seed::GuestOs;

/// What the guest currently reports on its NICs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum AddressPhase {
    /// Nothing yet (booting, powered off).
    None,
    /// Windows APIPA misbehaviour: a 169.254.x.y address on the first NIC only.
    Apipa,
    /// The pool addresses.
    Real,
    /// The pool addresses plus a hybrid-overlay address on the first NIC.
    Overlay,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NicRuntime {
    pub(crate) uuid: String,
    pub(crate) subnet_uuid: String,
    /// Prism manages the subnet's addresses (IPAM): AHV's DHCP gives the guest `ip`. Otherwise Prism hands out
    /// nothing and only learns what the guest sets itself (see [`Vm::reported_addresses`]).
    pub(crate) managed: bool,
    /// The pool or ASSIGNED address of a NIC on a managed subnet.
    pub(crate) ip: Option<u32>,
    pub(crate) assigned: bool,
}

/// Metadata fields a client controls.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct VmMeta {
    pub(crate) categories: Map<String, Value>,
    pub(crate) categories_mapping: Map<String, Value>,
    pub(crate) use_categories_mapping: bool,
    pub(crate) project: Option<Value>,
}

/// What a `GET` of a VM still shows for a while after its task ended (the store's read lag).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StaleView {
    pub(crate) until: Instant,
    pub(crate) state: &'static str,
    pub(crate) power_state: &'static str,
}

#[derive(Debug, Clone)]
pub(crate) struct Vm {
    pub(crate) uuid: String,
    pub(crate) seq: u64,
    pub(crate) spec: Value,
    pub(crate) meta: VmMeta,
    pub(crate) spec_version: u64,
    /// `metadata.entity_version` (a string in answers): "1" beside spec_version 0 on a new VM (get_vm.json);
    /// moves on every change, including one made outside v3 (see [`Store::edit_elsewhere`]).
    pub(crate) entity_version: u64,
    /// The create task ended successfully (or the VM was seeded): it appears in lists.
    pub(crate) listed: bool,
    /// With a list lag, the moment a listed VM starts to appear in lists.
    pub(crate) listed_from: Option<Instant>,
    pub(crate) pending_updates: u32,
    pub(crate) deleting: Option<String>,
    pub(crate) error: Option<String>,
    pub(crate) task_uuids: Vec<String>,
    pub(crate) powered_on: bool,
    pub(crate) boot_gen: u64,
    pub(crate) phase: AddressPhase,
    /// The link-local address a Windows guest reports first under the APIPA misbehaviour (drawn at create),
    /// and keeps on a first NIC that no DHCP serves.
    pub(crate) apipa: u32,
    /// The IPv4 address a Windows guest's cloudbase-init user data sets with `New-NetIPAddress` (see
    /// `vm::cloudbase`); only Windows guests have one.
    pub(crate) static_ipv4: Option<u32>,
    pub(crate) overlay: Option<u32>,
    pub(crate) nics: Vec<NicRuntime>,
    pub(crate) gpus: Vec<(String, usize)>,
    pub(crate) os: GuestOs,
    pub(crate) guest: Option<GuestCustomization>,
    pub(crate) creation_time: String,
    pub(crate) last_update_time: String,
    pub(crate) host_uuid: Option<String>,
    pub(crate) bios_uuid: String,
    /// Under a read lag: the state and power state a GET shows until then.
    pub(crate) stale_view: Option<StaleView>,
}

impl Vm {
    pub(crate) fn name(&self) -> &str {
        self.spec.get("name").and_then(Value::as_str).unwrap_or("")
    }

    pub(crate) fn cluster_uuid(&self) -> &str {
        self.spec
            .pointer("/cluster_reference/uuid")
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    /// `status.state` as a `GET` shows it: `PENDING` until the task that makes the VM ends (and
    /// while an update runs), then `COMPLETE`; v3 clients waited for a created VM by reading it
    /// until it was `COMPLETE` (openshift/machine-api-provider-nutanix `pkg/client/state.go`
    /// `WaitForGetVMComplete`, uncalled since its 9df9b5f2 of October 2024: it now waits for the
    /// create task; nutanix-cloud-native/packer-plugin-nutanix `builder/nutanix/driver.go` up to
    /// daf8428, before its February 2026 move to v4), and `ERROR` carries `message_list` (the
    /// latter). An update reads `PENDING` from its acceptance (the recorded `PUT` answer,
    /// `recorded/update_vm.json`, is `PENDING`) until its task ends; Nutanix's Terraform provider
    /// waits after `UpdateVM` for the VM to read `COMPLETE` again
    /// (nutanix/terraform-provider-nutanix `nutanix/resource_nutanix_virtual_machine.go`,
    /// `vmStateRefreshFunc`).
    pub(crate) fn state(&self) -> &'static str {
        if self.deleting.is_some() {
            "DELETE_PENDING"
        } else if self.error.is_some() {
            "ERROR"
        } else if !self.listed || self.pending_updates > 0 {
            "PENDING"
        } else {
            "COMPLETE"
        }
    }

    pub(crate) fn power_state(&self) -> &'static str {
        if self.powered_on { "ON" } else { "OFF" }
    }

    /// The addresses the guest reports now, per NIC, as (ip, type). On a subnet Prism manages, the address its
    /// DHCP hands out; on one it does not, what the guest sets itself (see [`Vm::self_configured`]).
    pub(crate) fn reported_addresses(&self) -> Vec<Vec<(String, &'static str)>> {
        self.nics
            .iter()
            .enumerate()
            .map(|(index, nic)| {
                let mut list = Vec::new();
                match self.phase {
                    AddressPhase::None => {}
                    AddressPhase::Apipa => {
                        if index == 0 {
                            list.push((Ipv4Addr::from(self.apipa).to_string(), "LEARNED"));
                        }
                    }
                    AddressPhase::Real | AddressPhase::Overlay => {
                        if nic.managed {
                            if let Some(ip) = nic.ip {
                                list.push((
                                    Ipv4Addr::from(ip).to_string(),
                                    if nic.assigned { "ASSIGNED" } else { "LEARNED" },
                                ));
                            }
                        } else if let Some(ip) = self.self_configured(index) {
                            list.push((Ipv4Addr::from(ip).to_string(), "LEARNED"));
                        }
                        if let (AddressPhase::Overlay, 0, Some(ip)) =
                            (self.phase, index, self.overlay)
                        {
                            list.push((Ipv4Addr::from(ip).to_string(), "LEARNED"));
                        }
                    }
                }
                list
            })
            .collect()
    }

    /// What the guest puts on its NIC `index` of a subnet Prism does not manage, where no DHCP answers: Prism
    /// learns guest addresses on networks it does not manage (nutanix/terraform-provider-nutanix#871: a Windows
    /// VM served by an external Windows DHCP server shows its addresses in `learned_ip_addresses`, APIPA
    /// first), so the address is `LEARNED`.
    ///
    /// - A Linux guest reports nothing: NetworkManager (RHCOS's) adds a 169.254 address only when asked
    ///   (libnm `NMSettingIP4Config` `ipv4.link-local`, whose "auto" follows `ipv4.method`: DHCP's `auto` gets
    ///   none).
    /// - A Windows guest gives itself a 169.254.x.y address (APIPA) when no DHCP server answers, and Prism
    ///   reports it: Windows VMs on subnets without DHCP show only their 169.254 address
    ///   (nutanix-cloud-native/packer-plugin-nutanix#228 and #249, "Found IP for virtual machine:
    ///   169.254.66.226"). Each NIC has its own; the first NIC's is the one of the APIPA misbehaviour.
    /// - Unless its cloudbase-init user data sets a static address with `New-NetIPAddress` on the VM's one
    ///   adapter (`vm::cloudbase`): with exactly one NIC the guest has that address once booted. The script
    ///   selects the one physical adapter and throws when there is not exactly one, so a VM with more NICs
    ///   keeps its APIPA addresses.
    fn self_configured(&self, index: usize) -> Option<u32> {
        if self.os != GuestOs::Windows {
            return None;
        }
        match self.static_ipv4 {
            Some(ip) if self.nics.len() == 1 => Some(ip),
            _ => Some(self.apipa_of(index)),
        }
    }

    /// The APIPA address of NIC `index`: the VM's drawn one moved by the index in its last octet (kept in
    /// 1..=254: RFC 3927 picks from 169.254.1.0-169.254.254.255).
    fn apipa_of(&self, index: usize) -> u32 {
        let [a, b, c, d] = self.apipa.to_be_bytes();
        let step = u8::try_from(index % 254).unwrap_or(0);
        let moved = (u16::from(d.saturating_sub(1)) + u16::from(step)) % 254 + 1;
        u32::from_be_bytes([a, b, c, u8::try_from(moved).unwrap_or(1)])
    }
}

/// A VM's guest customization, decoded from base64, as the guest would receive it. `Debug` shows only sizes:
/// user data carries secrets.
#[derive(Clone, PartialEq, Eq, Serialize)]
pub struct GuestCustomization {
    /// `cloud_init` or `sysprep`.
    pub kind: String,
    /// Decoded cloud-init user data.
    pub user_data: Option<String>,
    /// Decoded cloud-init meta data.
    pub meta_data: Option<String>,
    /// Decoded sysprep unattend.xml.
    pub unattend_xml: Option<String>,
    /// Sysprep install type (PREPARED or FRESH).
    pub install_type: Option<String>,
    /// `custom_key_values` as sent (not decoded).
    pub custom_key_values: Option<Value>,
    /// `is_overridable` as sent.
    pub is_overridable: bool,
}

impl std::fmt::Debug for GuestCustomization {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let size = |text: &Option<String>| text.as_ref().map(|t| format!("<{} bytes>", t.len()));
        f.debug_struct("GuestCustomization")
            .field("kind", &self.kind)
            .field("user_data", &size(&self.user_data))
            .field("meta_data", &size(&self.meta_data))
            .field("unattend_xml", &size(&self.unattend_xml))
            .field("install_type", &self.install_type)
            .field(
                "custom_key_values",
                &self.custom_key_values.as_ref().map(|_| "<redacted>"),
            )
            .field("is_overridable", &self.is_overridable)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn guest_customization_debug_shows_no_content() {
        let gc = GuestCustomization {
            kind: "cloud_init".to_owned(),
            user_data: Some("password: hunter2".to_owned()),
            meta_data: None,
            unattend_xml: None,
            install_type: None,
            custom_key_values: Some(json!({"k": "secret"})),
            is_overridable: false,
        };
        let text = format!("{gc:?}");
        assert!(
            !text.contains("hunter2") && !text.contains("secret"),
            "{text}"
        );
        assert!(text.contains("<17 bytes>"), "{text}");
    }
}
