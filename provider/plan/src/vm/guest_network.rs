//! A static IPv4 address a Windows guest sets itself, on a subnet whose addresses Prism does not
//! manage (`crate::vm::addressing::guest` decides when).
//!
//! cloudbase-init runs the user data from the config drive, before the guest needs the network.
//! Data that starts with `#ps1`, `#ps1_sysnative` or `#ps1_x86` and whitespace is one PowerShell
//! script; data with `<powershell>` or `<script>` tags (WMCO's `windows-user-data` is a
//! `<powershell>` block) is run block by block: the `<script>` blocks, then each `<powershell>`
//! block in order, each as a script of its own (cloudbase/cloudbase-init
//! `cloudbaseinit/plugins/common/userdatautils.py` `_SCRIPTS`, `execcmd.py`
//! `_ec2_find_sections`, `EC2Config`). So the address goes in as a `<powershell>` block of its
//! own ahead of the others, or as the first lines of a `#ps1` script: it is set before WMCO's
//! script runs, and a failure in it never stops WMCO's block.
//!
//! The commands are Microsoft's NetAdapter, NetTCPIP and DnsClient cmdlets (`Get-NetAdapter
//! -Physical`, `Set-NetIPInterface -Dhcp Disabled`, `Remove-NetIPAddress`, `Remove-NetRoute`,
//! `New-NetIPAddress -IPAddress -PrefixLength -DefaultGateway`, `Set-DnsClientServerAddress
//! -ServerAddresses`), on the VM's one network adapter (a Machine with more NICs is refused
//! before: nothing known before the create tells the guest's adapters apart). Run again, they
//! give the same result: whatever IPv4 address and default route the adapter had are removed
//! first.

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr};

use super::cloud_init::{CloudbaseForm, cloudbase_form};

/// The address a guest sets: the claimed address, its prefix and gateway, and the DNS servers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuestAddress {
    /// The claim the address came from, named in a comment of the script.
    pub claim: String,
    pub ip: Ipv4Addr,
    pub prefix: u8,
    pub gateway: Option<IpAddr>,
    pub nameservers: Vec<IpAddr>,
}

/// Why the address cannot be given to the guest. Never quotes the user data.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GuestAddressError {
    #[error(
        "the Machine has no user data to carry its static address (cloudbase-init sets it from a PowerShell block of the user data)"
    )]
    NoUserData,
    #[error(
        "the guest sets its own address only with cloud-init (cloudbase-init), and this Machine uses Sysprep"
    )]
    Sysprep,
    #[error(
        "the user data is neither a #ps1 script nor <powershell> blocks (WMCO's is a <powershell> block), so the static address cannot be added to it"
    )]
    NotPowerShell,
}

/// The PowerShell that sets `address` on the VM's one network adapter, one command per line.
pub fn powershell_commands(address: &GuestAddress) -> String {
    let mut script = String::new();
    // Names only the claim (a Machine name: a DNS subdomain), so nothing written here can close
    // the block early.
    let _ = writeln!(
        script,
        "# Static address of IPAddressClaim {}, set by the guest: Prism does not manage this subnet's addresses.",
        address.claim
    );
    script.push_str("$ErrorActionPreference = 'Stop'\n");
    script.push_str("$adapters = @(Get-NetAdapter -Physical)\n");
    script.push_str("if ($adapters.Count -ne 1) { throw \"static address: expected one network adapter, found $($adapters.Count)\" }\n");
    script.push_str("$index = $adapters[0].ifIndex\n");
    script
        .push_str("Set-NetIPInterface -InterfaceIndex $index -AddressFamily IPv4 -Dhcp Disabled\n");
    script.push_str("Get-NetIPAddress -InterfaceIndex $index -AddressFamily IPv4 -ErrorAction SilentlyContinue | Remove-NetIPAddress -Confirm:$false\n");
    script.push_str("Get-NetRoute -InterfaceIndex $index -DestinationPrefix '0.0.0.0/0' -ErrorAction SilentlyContinue | Remove-NetRoute -Confirm:$false\n");
    let _ = write!(
        script,
        "New-NetIPAddress -InterfaceIndex $index -AddressFamily IPv4 -IPAddress {} -PrefixLength {}",
        address.ip, address.prefix
    );
    if let Some(gateway) = address.gateway {
        let _ = write!(script, " -DefaultGateway {gateway}");
    }
    script.push('\n');
    let servers: Vec<String> = address
        .nameservers
        .iter()
        .map(|server| format!("'{server}'"))
        .collect();
    let _ = writeln!(
        script,
        "Set-DnsClientServerAddress -InterfaceIndex $index -ServerAddresses @({})",
        servers.join(", ")
    );
    script
}

/// `user_data` with the commands of `address` run first: as a `<powershell>` block ahead of the
/// others, or as the first lines after a `#ps1` script's header line.
pub fn with_guest_address(
    user_data: &[u8],
    address: &GuestAddress,
) -> Result<Vec<u8>, GuestAddressError> {
    let commands = powershell_commands(address);
    match cloudbase_form(user_data) {
        CloudbaseForm::PowerShellScript => {
            let line_end = user_data
                .iter()
                .position(|b| *b == b'\n')
                .map_or(user_data.len(), |at| at + 1);
            let (header, rest) = user_data.split_at(line_end);
            let mut out = header.to_vec();
            if !header.ends_with(b"\n") {
                out.push(b'\n');
            }
            out.extend_from_slice(commands.as_bytes());
            out.extend_from_slice(rest);
            Ok(out)
        }
        CloudbaseForm::TaggedBlocks => {
            let mut out = format!("<powershell>\n{commands}</powershell>\n").into_bytes();
            out.extend_from_slice(user_data);
            Ok(out)
        }
        CloudbaseForm::Gzip
        | CloudbaseForm::Multipart
        | CloudbaseForm::CloudConfig
        | CloudbaseForm::Cmd
        | CloudbaseForm::Shebang
        | CloudbaseForm::Unsupported => Err(GuestAddressError::NotPowerShell),
    }
}

#[cfg(test)]
mod tests;
