//! What the guest knows about itself (read from prism-mock's admin handle) and the pure decisions
//! the agent takes from it: which address the kubelet registers, and whether WMCO would act.

use std::net::IpAddr;

use ipnet::Ipv4Net;
use kube::ResourceExt;
use nutanix_machine_controller::api::{Machine, OS_ID_LABEL, OS_ID_WINDOWS, phase};
use prism_mock::{Admin, GuestOs};
use serde_json::Value;

/// WMCO skips Machines with this label set to `true`.
pub const WMCO_IGNORE_LABEL: &str = "windowsmachineconfig.openshift.io/ignore";

/// A running VM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Guest {
    pub uuid: String,
    pub name: String,
    pub windows: bool,
}

/// The VM's size, as the guest OS sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GuestSize {
    pub vcpus: u64,
    pub memory_mib: u64,
}

fn is_running(state: &str, power_state: &str) -> bool {
    state == "COMPLETE" && power_state == "ON"
}

/// The VMs that are created and powered on.
pub(crate) fn running_guests(admin: &Admin) -> Vec<Guest> {
    admin
        .vms()
        .into_iter()
        .filter(|vm| is_running(&vm.state, &vm.power_state))
        .map(|vm| Guest {
            uuid: vm.uuid,
            name: vm.name,
            windows: vm.os == GuestOs::Windows,
        })
        .collect()
}

/// The addresses the guest has now (all NICs, in order); `None` when the VM is gone.
pub(crate) fn addresses_of(admin: &Admin, uuid: &str) -> Option<Vec<IpAddr>> {
    admin
        .vms()
        .into_iter()
        .find(|vm| vm.uuid == uuid)
        .map(|vm| vm.addresses.iter().filter_map(|a| a.parse().ok()).collect())
}

/// vCPUs (sockets × vCPUs per socket × threads per core) and memory of the VM.
pub(crate) fn size_of(admin: &Admin, uuid: &str) -> Option<GuestSize> {
    let vm = admin.vm(uuid)?;
    let resources = &vm["spec"]["resources"];
    let number = |key: &str| resources.get(key).and_then(Value::as_u64).unwrap_or(1);
    Some(GuestSize {
        vcpus: number("num_sockets")
            * number("num_vcpus_per_socket")
            * number("num_threads_per_core"),
        memory_mib: resources
            .get("memory_size_mib")
            .and_then(Value::as_u64)
            .unwrap_or(0),
    })
}

/// Which address the kubelet registers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeIpChoice {
    /// The guest's first IPv4 address that is neither link-local nor in the hybrid-overlay
    /// network (the address of the interface holding the default route: WMCO ≥ 10.16's
    /// `--node-ip`).
    Primary,
    /// The hybrid-overlay address (waits for the guest to have one): what a kubelet without
    /// `--node-ip` may pick, the field's `NodeIPMismatch`.
    HybridOverlay,
    /// This address, whatever the guest has.
    Fixed(IpAddr),
}

fn in_overlay(ip: &IpAddr, overlay: Ipv4Net) -> bool {
    matches!(ip, IpAddr::V4(v4) if overlay.contains(v4))
}

/// The address to register, or `None` while the guest has none of that kind.
pub fn choose_node_ip(
    choice: &NodeIpChoice,
    addresses: &[IpAddr],
    overlay: Ipv4Net,
) -> Option<IpAddr> {
    match choice {
        NodeIpChoice::Fixed(ip) => Some(*ip),
        NodeIpChoice::HybridOverlay => addresses.iter().copied().find(|ip| in_overlay(ip, overlay)),
        NodeIpChoice::Primary => addresses.iter().copied().find(|ip| {
            matches!(ip, IpAddr::V4(v4) if !v4.is_link_local()) && !in_overlay(ip, overlay)
        }),
    }
}

/// Whether WMCO would configure the VM now: `Ok`, or the reason it would not.
pub fn wmco_gate(
    name: &str,
    machine: Option<&Machine>,
    guest_addresses: &[IpAddr],
) -> Result<(), String> {
    let Some(machine) = machine else {
        return Err(format!("no Machine named {name}"));
    };
    let labels = machine.labels();
    if labels.get(OS_ID_LABEL).map(String::as_str) != Some(OS_ID_WINDOWS) {
        return Err(format!(
            "Machine {name} is not labelled {OS_ID_LABEL}={OS_ID_WINDOWS}, so WMCO ignores it"
        ));
    }
    if labels.get(WMCO_IGNORE_LABEL).map(String::as_str) == Some("true") {
        return Err(format!(
            "Machine {name} is labelled {WMCO_IGNORE_LABEL}=true"
        ));
    }
    let current = machine.phase();
    if current != phase::PROVISIONED && current != phase::RUNNING {
        return Err(format!(
            "Machine {name} is in phase {current:?}; WMCO waits for Provisioned"
        ));
    }
    if machine.spec.provider_id.as_deref().unwrap_or("").is_empty() {
        return Err(format!("Machine {name} has no spec.providerID"));
    }
    let first_ipv4 = machine
        .status
        .as_ref()
        .map(|s| s.addresses.as_slice())
        .unwrap_or_default()
        .iter()
        .filter(|a| a.type_ == "InternalIP")
        .filter_map(|a| a.address.parse::<IpAddr>().ok())
        .find(IpAddr::is_ipv4);
    let Some(ip) = first_ipv4 else {
        return Err(format!("Machine {name} has no IPv4 InternalIP"));
    };
    if !guest_addresses.contains(&ip) {
        return Err(format!(
            "WMCO would connect to {ip}, the Machine's first IPv4 InternalIP, which the VM does not have"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    fn overlay() -> Ipv4Net {
        "10.132.0.0/14".parse().unwrap()
    }

    #[test]
    fn primary_skips_link_local_overlay_and_ipv6() {
        let guest = ips(&[
            "fd00::1",
            "169.254.3.4",
            "10.132.0.9",
            "10.40.1.7",
            "10.41.0.100",
        ]);
        assert_eq!(
            choose_node_ip(&NodeIpChoice::Primary, &guest, overlay()),
            Some("10.40.1.7".parse().unwrap())
        );
        assert_eq!(
            choose_node_ip(&NodeIpChoice::HybridOverlay, &guest, overlay()),
            Some("10.132.0.9".parse().unwrap())
        );
        assert_eq!(
            choose_node_ip(&NodeIpChoice::Primary, &ips(&["169.254.1.1"]), overlay()),
            None
        );
        assert_eq!(
            choose_node_ip(
                &NodeIpChoice::HybridOverlay,
                &ips(&["10.40.1.7"]),
                overlay()
            ),
            None
        );
        let fixed: IpAddr = "192.0.2.1".parse().unwrap();
        assert_eq!(
            choose_node_ip(&NodeIpChoice::Fixed(fixed), &[], overlay()),
            Some(fixed)
        );
    }

    fn machine(
        labels: serde_json::Value,
        phase: &str,
        provider_id: &str,
        addresses: serde_json::Value,
    ) -> Machine {
        serde_json::from_value(json!({
            "apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
            "metadata": {"name": "win", "namespace": "openshift-machine-api", "labels": labels},
            "spec": {"providerID": provider_id},
            "status": {"phase": phase, "addresses": addresses}
        }))
        .unwrap()
    }

    #[test]
    fn wmco_waits_for_a_provisioned_windows_machine_with_a_reachable_ipv4() {
        let windows = json!({"machine.openshift.io/os-id": "Windows"});
        let good_addresses = json!([{"type": "InternalIP", "address": "fd00::5"},
            {"type": "InternalIP", "address": "10.40.1.7"}, {"type": "InternalDNS", "address": "win"}]);
        let guest = ips(&["10.40.1.7"]);
        let good = machine(
            windows.clone(),
            "Provisioned",
            "nutanix://u",
            good_addresses.clone(),
        );
        assert_eq!(wmco_gate("win", Some(&good), &guest), Ok(()));
        let running = machine(
            windows.clone(),
            "Running",
            "nutanix://u",
            good_addresses.clone(),
        );
        assert_eq!(wmco_gate("win", Some(&running), &guest), Ok(()));

        let reason = |m: &Machine, guest: &[IpAddr]| wmco_gate("win", Some(m), guest).unwrap_err();
        assert_eq!(
            wmco_gate("win", None, &guest).unwrap_err(),
            "no Machine named win"
        );
        assert!(
            reason(
                &machine(
                    json!({}),
                    "Provisioned",
                    "nutanix://u",
                    good_addresses.clone()
                ),
                &guest
            )
            .contains("not labelled machine.openshift.io/os-id=Windows")
        );
        let ignored = json!({"machine.openshift.io/os-id": "Windows", WMCO_IGNORE_LABEL: "true"});
        assert!(
            reason(
                &machine(
                    ignored,
                    "Provisioned",
                    "nutanix://u",
                    good_addresses.clone()
                ),
                &guest
            )
            .contains("ignore=true")
        );
        assert!(
            reason(
                &machine(
                    windows.clone(),
                    "Provisioning",
                    "nutanix://u",
                    good_addresses.clone()
                ),
                &guest
            )
            .contains("phase \"Provisioning\"")
        );
        assert!(
            reason(
                &machine(windows.clone(), "Provisioned", "", good_addresses.clone()),
                &guest
            )
            .contains("no spec.providerID")
        );
        assert!(
            reason(
                &machine(windows.clone(), "Provisioned", "nutanix://u", json!([])),
                &guest
            )
            .contains("no IPv4 InternalIP")
        );
        let apipa_first = json!([{"type": "InternalIP", "address": "169.254.3.4"},
            {"type": "InternalIP", "address": "10.40.1.7"}]);
        assert!(
            reason(
                &machine(windows, "Provisioned", "nutanix://u", apipa_first),
                &guest
            )
            .contains("WMCO would connect to 169.254.3.4")
        );
    }
}
