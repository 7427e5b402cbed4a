//! Whether a Machine's guest can set its static address itself, where Prism cannot assign it: on
//! a subnet whose addresses Prism does not manage, Prism refuses an `ASSIGNED` address ("Cannot
//! assign IP address on an unmanaged network": nutanix/terraform-provider-nutanix#1167,
//! nutanix/nutanix.ansible#593), and no DHCP of Prism's serves the guest.
//!
//! Only a Windows guest with cloud-init can: cloudbase-init runs the user data's PowerShell from
//! the config drive before the guest needs the network (`crate::vm::guest_network` writes the
//! commands). An OpenShift Linux worker cannot: its Ignition is a pointer to the machine config
//! server, fetched from the initramfs, so the address must be up before anything of the user data
//! is applied; the vSphere provider passes it as kernel arguments through guestinfo, which
//! Afterburn reads on VMware, Proxmox VE and KubeVirt only (coreos/afterburn
//! `src/initrd/mod.rs`, `fetch_network_kargs`).

use std::net::IpAddr;

use kube::ResourceExt;

use crate::api::{GuestCustomizationType, Machine, NAMESERVERS_ANNOTATION};

/// Whether the guest sets its own static address on a subnet Prism does not manage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GuestAddressing {
    /// A Windows guest with cloud-init and one NIC: it sets the address, its prefix and gateway,
    /// and these DNS servers itself.
    Windows { nameservers: Vec<IpAddr> },
    /// It cannot, for this reason.
    Unsupported(NoGuestAddressing),
}

/// Why a Machine's guest cannot set its own static address.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NoGuestAddressing {
    #[error(
        "only a Windows guest sets its own address: an OpenShift Linux worker fetches its Ignition over the network from its initramfs, and Nutanix has no channel for kernel network arguments (Afterburn reads them on VMware, Proxmox VE and KubeVirt only)"
    )]
    Linux,
    #[error(
        "the guest sets its own address only with cloud-init (cloudbase-init), and this Machine uses Sysprep"
    )]
    Sysprep,
    #[error(
        "the guest sets its own address only on a VM with one NIC (nothing known before the create tells its network adapters apart), and this Machine has {nics}"
    )]
    SeveralNics { nics: usize },
    #[error(
        "metadata.annotations[{NAMESERVERS_ANNOTATION}] is not set: a guest that sets its own address needs its DNS servers (comma-separated addresses)"
    )]
    NoNameservers,
    #[error(transparent)]
    Nameservers(#[from] NameserversError),
}

/// Why [`NAMESERVERS_ANNOTATION`] cannot be read; each names the annotation.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NameserversError {
    #[error(
        "metadata.annotations[{NAMESERVERS_ANNOTATION}] entry {index} {entry} is not an IP address"
    )]
    /// `entry`: the entry as written, quoted and bounded.
    NotAnAddress { index: usize, entry: String },
    #[error("metadata.annotations[{NAMESERVERS_ANNOTATION}] names no server")]
    Empty,
}

/// Reads [`NAMESERVERS_ANNOTATION`]: addresses separated by commas, in the order the guest asks
/// them.
pub fn parse_nameservers(value: &str) -> Result<Vec<IpAddr>, NameserversError> {
    let servers = value
        .split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .enumerate()
        .map(|(index, entry)| {
            entry
                .parse::<IpAddr>()
                .map_err(|_| NameserversError::NotAnAddress {
                    index,
                    entry: format!("{:?}", prism_types::quote::quoted(entry)),
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    if servers.is_empty() {
        return Err(NameserversError::Empty);
    }
    Ok(servers)
}

/// The Machine's [`NAMESERVERS_ANNOTATION`]; `None` without it.
pub fn machine_nameservers(machine: &Machine) -> Option<Result<Vec<IpAddr>, NameserversError>> {
    machine
        .annotations()
        .get(NAMESERVERS_ANNOTATION)
        .map(|value| parse_nameservers(value))
}

/// What a Machine's guest can do with a static address on a subnet Prism does not manage:
/// `windows` its OS label, `customization` the customization it asks for, `nics` its NICs,
/// `nameservers` its annotation as read.
pub fn guest_addressing(
    windows: bool,
    customization: &GuestCustomizationType,
    nics: usize,
    nameservers: Option<&Result<Vec<IpAddr>, NameserversError>>,
) -> GuestAddressing {
    let unsupported = |why| GuestAddressing::Unsupported(why);
    if !windows {
        return unsupported(NoGuestAddressing::Linux);
    }
    if *customization == GuestCustomizationType::Sysprep {
        return unsupported(NoGuestAddressing::Sysprep);
    }
    if nics != 1 {
        return unsupported(NoGuestAddressing::SeveralNics { nics });
    }
    match nameservers {
        None => unsupported(NoGuestAddressing::NoNameservers),
        Some(Err(error)) => unsupported(NoGuestAddressing::Nameservers(error.clone())),
        Some(Ok(servers)) => GuestAddressing::Windows {
            nameservers: servers.clone(),
        },
    }
}
