//! What the guest knows about itself (read from prism-mock's admin handle) and the pure decisions
//! the agent takes from it: what the guest's first-boot agent ran, which address the kubelet
//! registers, and whether WMCO would act.

use std::fmt;
use std::net::IpAddr;

use ipnet::Ipv4Net;
use kube::ResourceExt;
use prism_mock::{Admin, GuestCustomization, GuestOs};
use serde_json::Value;

use super::wmco;
use crate::machine_api::{Machine, OS_ID_LABEL};

/// WMCO skips Machines with this label set to `true` (windows-machine-config-operator
/// `controllers/windowsmachine_controller.go`, `IgnoreLabel`).
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
    /// The first disk's size, the system drive's (the kubelet reports its filesystem's size as
    /// `ephemeral-storage`; a partition table and recovery partition make that a little less,
    /// which is not simulated).
    pub boot_disk_mib: Option<u64>,
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
    // The one VM, not a summary of every VM of the mock per waiting guest and poll.
    admin
        .vm_summary(uuid)
        .map(|vm| vm.addresses.iter().filter_map(|a| a.parse().ok()).collect())
}

/// vCPUs (sockets × vCPUs per socket × threads per core), memory and boot disk of the VM.
pub(crate) fn size_of(admin: &Admin, uuid: &str) -> Option<GuestSize> {
    let vm = admin.vm(uuid)?;
    let resources = &vm["spec"]["resources"];
    let number = |key: &str| resources.get(key).and_then(Value::as_u64).unwrap_or(1);
    let boot_disk_mib = resources["disk_list"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|disk| {
            disk["device_properties"]["device_type"]
                .as_str()
                .is_none_or(|t| t == "DISK")
        })
        .and_then(|disk| disk["disk_size_mib"].as_u64())
        .filter(|mib| *mib > 0);
    Some(GuestSize {
        vcpus: number("num_sockets")
            * number("num_vcpus_per_socket")
            * number("num_threads_per_core"),
        memory_mib: resources
            .get("memory_size_mib")
            .and_then(Value::as_u64)
            .unwrap_or(0),
        boot_disk_mib,
    })
}

/// What reached the guest as its guest customization.
pub(crate) fn customization_of(admin: &Admin, uuid: &str) -> Option<GuestCustomization> {
    admin.guest_customization(uuid)
}

/// What the guest's first-boot agent ran of its customization.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UserDataRun {
    /// No guest customization at all: nothing ran.
    Nothing,
    /// cloudbase-init ran these PowerShell scripts, in order.
    PowerShell(Vec<String>),
    /// cloudbase-init found no script it runs as PowerShell: a `#cloud-config`, multipart MIME
    /// (not simulated), or a cmd, Python or shell script.
    NoPowerShell,
    /// Sysprep: Windows Setup runs the unattend.xml's commands. How a script landed through them
    /// runs is the provider's own invention and is not simulated: the guest is taken to have run
    /// the PowerShell the commands carry (the e2e scenario checks that they carry WMCO's).
    SysprepCommands,
}

/// The body of each `<powershell>…</powershell>` block, stripped, empty ones skipped
/// (cloudbase/cloudbase-init `cloudbaseinit/plugins/common/execcmd.py`, `_ec2_find_sections`: a
/// case-sensitive, non-greedy match; `<script>` blocks run first as cmd, so they are left out).
fn powershell_blocks(data: &str) -> Vec<String> {
    const OPEN: &str = "<powershell>";
    const CLOSE: &str = "</powershell>";
    let mut blocks = Vec::new();
    let mut rest = data;
    while let Some(start) = rest.find(OPEN) {
        let body = &rest[start + OPEN.len()..];
        let Some(end) = body.find(CLOSE) else {
            break;
        };
        let code = body[..end].trim();
        if !code.is_empty() {
            blocks.push(code.to_owned());
        }
        rest = &body[end + CLOSE.len()..];
    }
    blocks
}

/// What cloudbase-init does with `user_data` (cloudbase-init
/// `cloudbaseinit/plugins/common/userdata.py`, `_process_user_data` and
/// `_process_non_multi_part`; `cloudbaseinit/plugins/common/userdatautils.py`, `_SCRIPTS` tried in
/// order, each `^` anchored at the start of the data).
pub fn cloudbase_init_run(user_data: &str) -> UserDataRun {
    if user_data.contains("Content-Type: multipart") || user_data.starts_with("#cloud-config") {
        return UserDataRun::NoPowerShell;
    }
    let whitespace_after = |text: &str, prefix: &str| {
        text.strip_prefix(prefix)
            .and_then(|rest| rest.chars().next())
            .is_some_and(char::is_whitespace)
    };
    // `^rem\s+cmd\s`: a cmd script.
    let cmd = user_data.strip_prefix("rem").is_some_and(|rest| {
        let words = rest.trim_start();
        words.len() < rest.len() && whitespace_after(words, "cmd")
    });
    // `^#!\s*/usr/bin/env\s+python\s` and `^#!`: Python or shell.
    if cmd || user_data.starts_with("#!") {
        return UserDataRun::NoPowerShell;
    }
    // `^#(ps1|ps1_sysnative)\s` and `^#ps1_x86\s`: the whole data is a PowerShell script.
    if ["#ps1", "#ps1_sysnative", "#ps1_x86"]
        .iter()
        .any(|prefix| whitespace_after(user_data, prefix))
    {
        return UserDataRun::PowerShell(vec![user_data.to_owned()]);
    }
    // `</?(script|powershell)>`: EC2Config sections.
    if ["<script>", "</script>", "<powershell>", "</powershell>"]
        .iter()
        .any(|tag| user_data.contains(tag))
    {
        let blocks = powershell_blocks(user_data);
        if blocks.is_empty() {
            return UserDataRun::NoPowerShell;
        }
        return UserDataRun::PowerShell(blocks);
    }
    UserDataRun::NoPowerShell
}

/// What the guest ran of `customization`.
pub fn user_data_run(customization: Option<&GuestCustomization>) -> UserDataRun {
    match customization {
        None => UserDataRun::Nothing,
        Some(c) if c.kind == "sysprep" => UserDataRun::SysprepCommands,
        Some(c) => c
            .user_data
            .as_deref()
            .map_or(UserDataRun::Nothing, cloudbase_init_run),
    }
}

/// Whether what the guest ran authorized WMCO's key for SSH: it ran WMCO's own script for that
/// key, byte for byte (WMCO generated it; any other script authorizes nothing WMCO knows).
pub fn authorizes_wmco(run: &UserDataRun, authorized_key: &str) -> bool {
    match run {
        UserDataRun::PowerShell(scripts) => {
            let expected = powershell_blocks(&wmco::user_data(authorized_key));
            expected.iter().all(|block| scripts.contains(block)) && !expected.is_empty()
        }
        UserDataRun::SysprepCommands => true,
        UserDataRun::Nothing | UserDataRun::NoPowerShell => false,
    }
}

/// Which address the kubelet registers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeIpChoice {
    /// The first IPv4 address of the interface holding the default route: what WMCO ≥ 10.16
    /// gives the kubelet as `--node-ip` (windows-machine-config-operator `pkg/services/services.go`,
    /// the `NODE_IP` pre-script `Get-NetRoute -DestinationPrefix '0.0.0.0/0'`). The guest's first
    /// IPv4 address that is neither link-local nor in the hybrid-overlay network stands for it.
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

/// Why WMCO would not configure the VM yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WmcoWait {
    NoMachine,
    /// `isWindowsMachine`: not labelled `machine.openshift.io/os-id=Windows`.
    NotWindows,
    /// `isValidMachine`: labelled `windowsmachineconfig.openshift.io/ignore=true`.
    Ignored,
    /// `isValidMachine`: no `status.phase`.
    NoPhase,
    /// `getInternalIPAddress`: no `InternalIP` that parses as IPv4.
    NoIpv4InternalIp,
    /// `Reconcile`: a `Running` Machine without a nodeRef.
    RunningWithoutNodeRef,
    /// `Reconcile`: neither `Provisioned` nor `Running`.
    NotProvisioned {
        phase: String,
    },
    /// `validateUserData`: the Secret is missing or holds other user data.
    UserDataSecretInvalid,
    /// `Reconcile`: empty providerID, or nothing after its last `/`.
    NoInstanceId,
    /// WMCO's SSH to the Machine's address: no guest answers there.
    AddressNotTheGuests {
        ip: String,
    },
    /// WMCO's SSH: the guest did not run WMCO's user data, so no SSH server holds WMCO's key.
    UserDataNotRun,
}

impl fmt::Display for WmcoWait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoMachine => write!(f, "no Machine of the VM's name"),
            Self::NotWindows => write!(f, "the Machine is not labelled {OS_ID_LABEL}=Windows"),
            Self::Ignored => write!(f, "the Machine is labelled {WMCO_IGNORE_LABEL}=true"),
            Self::NoPhase => write!(f, "the Machine has no phase"),
            Self::NoIpv4InternalIp => write!(f, "the Machine has no IPv4 InternalIP"),
            Self::RunningWithoutNodeRef => write!(f, "ready Windows machine missing NodeRef"),
            Self::NotProvisioned { phase } => {
                write!(
                    f,
                    "the Machine is in phase {phase:?}; WMCO waits for Provisioned"
                )
            }
            Self::UserDataSecretInvalid => {
                write!(
                    f,
                    "invalid content for userData secret {}",
                    wmco::USER_DATA_SECRET
                )
            }
            Self::NoInstanceId => write!(f, "empty provider ID associated with the Machine"),
            Self::AddressNotTheGuests { ip } => write!(
                f,
                "WMCO would connect to {ip}, the Machine's first IPv4 InternalIP, which the VM does not have"
            ),
            Self::UserDataNotRun => write!(
                f,
                "the VM did not run WMCO's user data: no SSH server accepts WMCO's key"
            ),
        }
    }
}

/// `getInternalIPAddress`: the first `InternalIP` that Go's `net.ParseIP(..).To4()` accepts (an
/// IPv4-mapped IPv6 address counts).
fn first_ipv4_internal_ip(machine: &Machine) -> Option<IpAddr> {
    machine
        .addresses()
        .iter()
        .filter(|a| a.type_ == "InternalIP")
        .filter_map(|a| a.address.parse::<IpAddr>().ok())
        .find(|ip| match ip {
            IpAddr::V4(_) => true,
            IpAddr::V6(v6) => v6.to_ipv4_mapped().is_some(),
        })
}

fn same_host(a: &IpAddr, b: &IpAddr) -> bool {
    a.to_canonical() == b.to_canonical()
}

/// What the guest offers WMCO's SSH.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuestSide<'a> {
    pub addresses: &'a [IpAddr],
    pub run: &'a UserDataRun,
}

/// Whether WMCO would configure the VM now (windows-machine-config-operator
/// `controllers/windowsmachine_controller.go`: the predicates `isWindowsMachine` and
/// `isValidMachine`, then `Reconcile` up to `configureMachine`): the address it connects to, or
/// why it would not. `secret_valid` is `validateUserData`'s verdict. A `Running` Machine whose
/// Node WMCO already configured never gets here: the agent leaves existing Nodes alone.
pub fn wmco_gate(
    machine: Option<&Machine>,
    secret_valid: bool,
    guest: &GuestSide<'_>,
    authorized_key: &str,
) -> Result<IpAddr, WmcoWait> {
    let machine = machine.ok_or(WmcoWait::NoMachine)?;
    let labels = machine.labels();
    if labels.get(OS_ID_LABEL).map(String::as_str) != Some("Windows") {
        return Err(WmcoWait::NotWindows);
    }
    if labels.get(WMCO_IGNORE_LABEL).map(String::as_str) == Some("true") {
        return Err(WmcoWait::Ignored);
    }
    let phase = machine.status.as_ref().and_then(|s| s.phase.clone());
    let Some(phase) = phase else {
        return Err(WmcoWait::NoPhase);
    };
    let Some(ip) = first_ipv4_internal_ip(machine) else {
        return Err(WmcoWait::NoIpv4InternalIp);
    };
    match phase.as_str() {
        "Running" if machine.node_ref().is_none() => return Err(WmcoWait::RunningWithoutNodeRef),
        "Running" | "Provisioned" => {}
        _ => return Err(WmcoWait::NotProvisioned { phase }),
    }
    if !secret_valid {
        return Err(WmcoWait::UserDataSecretInvalid);
    }
    let provider_id = machine.spec.provider_id.as_deref().unwrap_or_default();
    if provider_id
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .is_empty()
    {
        return Err(WmcoWait::NoInstanceId);
    }
    if !guest.addresses.iter().any(|a| same_host(a, &ip)) {
        return Err(WmcoWait::AddressNotTheGuests { ip: ip.to_string() });
    }
    if !authorizes_wmco(guest.run, authorized_key) {
        return Err(WmcoWait::UserDataNotRun);
    }
    Ok(ip)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::node_agent::wmco::SANDBOX_PUBLIC_KEY;

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
        let fixed: IpAddr = "192.0.2.1".parse().unwrap();
        assert_eq!(
            choose_node_ip(&NodeIpChoice::Fixed(fixed), &[], overlay()),
            Some(fixed)
        );
    }

    /// cloudbase-init's handling of user data (cloudbase/cloudbase-init
    /// `cloudbaseinit/plugins/common/userdatautils.py` `_SCRIPTS`, `execcmd.py`
    /// `_ec2_find_sections`, `userdata.py` `_process_user_data`), each rule with its place: a
    /// provider that sends WMCO's user data in another shape leaves the guest without WMCO's SSH
    /// key, and the Windows join stops at the WMCO gate.
    #[test]
    fn cloudbase_init_runs_what_it_recognizes() {
        let wmco = wmco::user_data(SANDBOX_PUBLIC_KEY);
        let table: [(&str, &str, bool); 8] = [
            (
                "_SCRIPTS: </?(script|powershell)> → EC2Config, the block's body runs",
                "<powershell>Write-Output 1</powershell>",
                true,
            ),
            (
                "_ec2_find_sections: the tags are case-sensitive",
                "<PowerShell>Write-Output 1</PowerShell>",
                false,
            ),
            (
                "_SCRIPTS: ^#ps1 runs the whole data as PowerShell",
                "#ps1\nWrite-Output 1",
                true,
            ),
            (
                "_SCRIPTS: ^#! is a shell script",
                "#!/bin/bash\n<powershell>x</powershell>",
                false,
            ),
            (
                "_SCRIPTS: ^rem\\s+cmd\\s is a cmd script",
                "rem cmd\n<powershell>x</powershell>",
                false,
            ),
            (
                "_process_non_multi_part: #cloud-config goes to the cloud-config plugin",
                "#cloud-config\nruncmd: []",
                false,
            ),
            (
                "_ec2_find_sections: empty blocks are skipped",
                "<powershell>  </powershell>",
                false,
            ),
            ("WMCO's user data runs", wmco.as_str(), true),
        ];
        for (rule, data, runs) in table {
            assert_eq!(
                matches!(cloudbase_init_run(data), UserDataRun::PowerShell(_)),
                runs,
                "{rule}"
            );
        }
        assert!(authorizes_wmco(
            &cloudbase_init_run(&wmco),
            SANDBOX_PUBLIC_KEY
        ));
        let without_persist = wmco.replace("<persist>true</persist>\n", "");
        assert!(
            authorizes_wmco(&cloudbase_init_run(&without_persist), SANDBOX_PUBLIC_KEY),
            "<persist> means nothing to cloudbase-init"
        );
        let other_script = wmco.replace(SANDBOX_PUBLIC_KEY, "ssh-ed25519 AAAAother");
        assert!(!authorizes_wmco(
            &cloudbase_init_run(&other_script),
            SANDBOX_PUBLIC_KEY
        ));
        assert!(authorizes_wmco(
            &UserDataRun::SysprepCommands,
            SANDBOX_PUBLIC_KEY
        ));
        assert!(!authorizes_wmco(&UserDataRun::Nothing, SANDBOX_PUBLIC_KEY));
    }

    fn machine(
        labels: serde_json::Value,
        phase: Option<&str>,
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

    /// WMCO's conditions before it configures a Machine (windows-machine-config-operator
    /// `controllers/windowsmachine_controller.go`, HEAD 0be4b9c), each with its place.
    #[test]
    fn wmco_gate_rules_are_wmcos() {
        let windows = json!({"machine.openshift.io/os-id": "Windows"});
        let addresses = json!([{"type": "InternalIP", "address": "fd00::5"},
            {"type": "InternalIP", "address": "10.40.1.7"}, {"type": "InternalDNS", "address": "win"}]);
        let guest_ips = ips(&["10.40.1.7"]);
        let ran = cloudbase_init_run(&wmco::user_data(SANDBOX_PUBLIC_KEY));
        let guest = GuestSide {
            addresses: &guest_ips,
            run: &ran,
        };
        let gate = |m: &Machine, valid: bool, guest: &GuestSide<'_>| {
            wmco_gate(Some(m), valid, guest, SANDBOX_PUBLIC_KEY)
        };
        let good = machine(
            windows.clone(),
            Some("Provisioned"),
            "nutanix://u",
            addresses.clone(),
        );
        let ignored = json!({"machine.openshift.io/os-id": "Windows", WMCO_IGNORE_LABEL: "true"});
        let table: Vec<(&str, Machine, bool, Result<IpAddr, WmcoWait>)> = vec![
            (
                "Reconcile: Provisioned, the first IPv4 InternalIP (getInternalIPAddress skips IPv6)",
                good.clone(),
                true,
                Ok("10.40.1.7".parse().unwrap()),
            ),
            (
                "isWindowsMachine: os-id must be Windows",
                machine(
                    json!({}),
                    Some("Provisioned"),
                    "nutanix://u",
                    addresses.clone(),
                ),
                true,
                Err(WmcoWait::NotWindows),
            ),
            (
                "isValidMachine: IgnoreLabel=true",
                machine(
                    ignored,
                    Some("Provisioned"),
                    "nutanix://u",
                    addresses.clone(),
                ),
                true,
                Err(WmcoWait::Ignored),
            ),
            (
                "isValidMachine: a phase is required",
                machine(windows.clone(), None, "nutanix://u", addresses.clone()),
                true,
                Err(WmcoWait::NoPhase),
            ),
            (
                "getInternalIPAddress: an IPv4 InternalIP is required",
                machine(
                    windows.clone(),
                    Some("Provisioned"),
                    "nutanix://u",
                    json!([{"type": "InternalIP", "address": "fd00::5"}]),
                ),
                true,
                Err(WmcoWait::NoIpv4InternalIp),
            ),
            (
                "Reconcile: Provisioning is not acted on",
                machine(
                    windows.clone(),
                    Some("Provisioning"),
                    "nutanix://u",
                    addresses.clone(),
                ),
                true,
                Err(WmcoWait::NotProvisioned {
                    phase: "Provisioning".into(),
                }),
            ),
            (
                "Reconcile: Running needs a NodeRef",
                machine(
                    windows.clone(),
                    Some("Running"),
                    "nutanix://u",
                    addresses.clone(),
                ),
                true,
                Err(WmcoWait::RunningWithoutNodeRef),
            ),
            (
                "validateUserData: the Secret must hold WMCO's user data",
                good.clone(),
                false,
                Err(WmcoWait::UserDataSecretInvalid),
            ),
            (
                "Reconcile: the instance ID after the providerID's last /",
                machine(
                    windows.clone(),
                    Some("Provisioned"),
                    "nutanix://",
                    addresses.clone(),
                ),
                true,
                Err(WmcoWait::NoInstanceId),
            ),
        ];
        for (rule, m, valid, expected) in table {
            assert_eq!(gate(&m, valid, &guest), expected, "{rule}");
        }
        assert_eq!(
            wmco_gate(None, true, &guest, SANDBOX_PUBLIC_KEY),
            Err(WmcoWait::NoMachine)
        );
        let apipa_first = machine(
            windows.clone(),
            Some("Provisioned"),
            "nutanix://u",
            json!([{"type": "InternalIP", "address": "169.254.3.4"}, {"type": "InternalIP", "address": "10.40.1.7"}]),
        );
        assert_eq!(
            gate(&apipa_first, true, &guest),
            Err(WmcoWait::AddressNotTheGuests {
                ip: "169.254.3.4".into()
            })
        );
        let nothing = UserDataRun::Nothing;
        assert_eq!(
            gate(
                &good,
                true,
                &GuestSide {
                    addresses: &guest_ips,
                    run: &nothing
                }
            ),
            Err(WmcoWait::UserDataNotRun)
        );
        let mapped = machine(
            windows,
            Some("Provisioned"),
            "nutanix://u",
            json!([{"type": "InternalIP", "address": "::ffff:10.40.1.7"}]),
        );
        assert!(
            gate(&mapped, true, &guest).is_ok(),
            "To4() accepts an IPv4-mapped address"
        );
    }
}
