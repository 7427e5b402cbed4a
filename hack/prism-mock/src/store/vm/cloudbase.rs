//! What cloudbase-init does with a Windows guest's cloud-init user data, as far as the guest's address goes:
//! the static IPv4 address a `New-NetIPAddress` line of a `<powershell>` block sets. The mock reads that one
//! cmdlet line itself (the provider's code is not used); what the guest then reports is in
//! `record::Vm::reported_addresses`.

use std::net::Ipv4Addr;

use crate::seed::GuestOs;
use crate::store::record::GuestCustomization;

const OPEN: &str = "<powershell>";
const CLOSE: &str = "</powershell>";

/// The static address a VM's guest sets itself: a Windows guest's cloud-init user data, run by cloudbase-init,
/// with a `New-NetIPAddress` line in a `<powershell>` block (see [`static_ipv4`]). Other guests set none.
pub(super) fn guest_static_ipv4(os: GuestOs, guest: Option<&GuestCustomization>) -> Option<u32> {
    if os != GuestOs::Windows {
        return None;
    }
    let user_data = guest
        .filter(|g| g.kind == "cloud_init")
        .and_then(|g| g.user_data.as_deref())?;
    static_ipv4(user_data).map(u32::from)
}

/// The address the first `New-NetIPAddress` line of the user data's `<powershell>` blocks sets, when
/// cloudbase-init runs those blocks.
fn static_ipv4(user_data: &str) -> Option<Ipv4Addr> {
    if !runs_tagged_blocks(user_data) {
        return None;
    }
    powershell_blocks(user_data)
        .flat_map(str::lines)
        .find_map(new_net_ip_address)
}

/// Whether cloudbase-init runs the user data's tagged blocks (its `EC2Config` executor).
/// `UserDataPlugin._process_user_data` (cloudbase/cloudbase-init `cloudbaseinit/plugins/common/userdata.py`)
/// gives a MIME multipart document to its part plugins (which the mock does not read) and a `#cloud-config`
/// one to the cloud-config plugin; anything else goes to `execute_user_data_script`, which takes the first of
/// `_SCRIPTS` (`cloudbaseinit/plugins/common/userdatautils.py`) whose pattern matches: `^rem\s+cmd\s`, `^#!`
/// (Python or Bash), `^#(ps1|ps1_sysnative)\s` and `^#ps1_x86\s` run the whole data as one script; only then
/// does a `<powershell>` tag anywhere select the tagged blocks.
fn runs_tagged_blocks(data: &str) -> bool {
    let then_space = |rest: &str| rest.starts_with(char::is_whitespace);
    let headed = |head: &str| data.strip_prefix(head).is_some_and(then_space);
    let rem_cmd = data
        .strip_prefix("rem")
        .filter(|rest| then_space(rest))
        .and_then(|rest| rest.trim_start().strip_prefix("cmd"))
        .is_some_and(then_space);
    let whole_script = rem_cmd
        || data.starts_with("#!")
        || ["#ps1", "#ps1_sysnative", "#ps1_x86"]
            .into_iter()
            .any(headed);
    !(whole_script
        || data.starts_with("Content-Type: multipart")
        || data.starts_with("#cloud-config"))
}

/// The code of each `<powershell>…</powershell>` block in turn: `TAG_REGEX` of
/// `cloudbaseinit/plugins/common/execcmd.py` (`<powershell>([\s\S]+?)</powershell>`), each block run as a
/// PowerShell script.
fn powershell_blocks(data: &str) -> impl Iterator<Item = &str> {
    let mut rest = data;
    std::iter::from_fn(move || {
        let start = rest.find(OPEN)? + OPEN.len();
        let len = rest.get(start..)?.find(CLOSE)?;
        let block = rest.get(start..start + len)?;
        rest = rest.get(start + len + CLOSE.len()..)?;
        Some(block)
    })
}

/// The address of a `New-NetIPAddress` command on one line carrying `-IPAddress <IPv4>` and `-PrefixLength
/// <0-32>` (`-InterfaceIndex`, `-AddressFamily`, `-DefaultGateway` may come too): named parameters, in any
/// order, as Microsoft's `New-NetIPAddress` reference (NetTCPIP module) gives them; PowerShell matches
/// command and parameter names whatever their case, and a value may be quoted. The command ends at a `|` or
/// `;`; a line commented out with `#` runs nothing.
fn new_net_ip_address(line: &str) -> Option<Ipv4Addr> {
    let line = line.trim();
    if line.starts_with('#') {
        return None;
    }
    let mut words = line.split_whitespace();
    words.find(|word| word.eq_ignore_ascii_case("New-NetIPAddress"))?;
    let args: Vec<&str> = words
        .take_while(|word| !matches!(*word, "|" | ";"))
        .collect();
    let value = |name: &str| {
        let at = args.iter().position(|word| {
            word.strip_prefix('-')
                .is_some_and(|given| given.eq_ignore_ascii_case(name))
        })?;
        args.get(at + 1)
            .map(|v| v.trim_matches(|c| c == '\'' || c == '"'))
    };
    value("PrefixLength")?
        .parse::<u8>()
        .ok()
        .filter(|len| *len <= 32)?;
    value("IPAddress")?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = "New-NetIPAddress -InterfaceIndex $index -AddressFamily IPv4 -IPAddress 10.40.0.21 -PrefixLength 20 -DefaultGateway 10.40.0.1";

    fn script(body: &str) -> String {
        format!(
            "<powershell>\n$adapters = @(Get-NetAdapter -Physical)\n{body}\n</powershell>\n<persist>true</persist>\n"
        )
    }

    #[test]
    fn the_provider_line_in_a_powershell_block_sets_its_address() {
        assert_eq!(
            static_ipv4(&script(LINE)),
            Some(Ipv4Addr::new(10, 40, 0, 21))
        );
        let reordered = "new-netipaddress -prefixlength 24 -ipaddress '192.0.2.7' -InterfaceIndex $i | Out-Null";
        assert_eq!(
            static_ipv4(&script(reordered)),
            Some(Ipv4Addr::new(192, 0, 2, 7)),
            "any order, any case, quoted, no gateway"
        );
        let second_block = format!(
            "<powershell>\nWrite-Host hi\n</powershell>\n{}",
            script(LINE)
        );
        assert_eq!(
            static_ipv4(&second_block),
            Some(Ipv4Addr::new(10, 40, 0, 21))
        );
    }

    #[test]
    fn nothing_without_both_parameters_or_outside_a_block_that_runs() {
        for line in [
            "New-NetIPAddress -InterfaceIndex $index -IPAddress 10.40.0.21",
            "New-NetIPAddress -IPAddress 10.40.0.21 -PrefixLength 33",
            "New-NetIPAddress -IPAddress 10.40.0.300 -PrefixLength 20",
            "# New-NetIPAddress -IPAddress 10.40.0.21 -PrefixLength 20",
            "Get-NetIPAddress -IPAddress 10.40.0.21 -PrefixLength 20",
        ] {
            assert_eq!(static_ipv4(&script(line)), None, "{line}");
        }
        assert_eq!(static_ipv4(LINE), None, "not in a <powershell> block");
        for head in [
            "#cloud-config\n",
            "#ps1_sysnative\n",
            "#ps1 \n",
            "#!/bin/bash\n",
            "rem cmd\n",
        ] {
            let data = format!("{head}{}", script(LINE));
            assert_eq!(static_ipv4(&data), None, "{head:?} runs as another kind");
        }
        assert_eq!(
            static_ipv4(&format!("#ps1x\n{}", script(LINE))),
            Some(Ipv4Addr::new(10, 40, 0, 21)),
            "no header cloudbase-init knows: the tags decide"
        );
    }

    #[test]
    fn only_windows_guests_with_cloud_init_user_data_set_it() {
        let guest = |kind: &str| GuestCustomization {
            kind: kind.to_owned(),
            user_data: Some(script(LINE)),
            meta_data: None,
            unattend_xml: None,
            install_type: None,
            custom_key_values: None,
            is_overridable: false,
        };
        let cloud_init = guest("cloud_init");
        assert_eq!(
            guest_static_ipv4(GuestOs::Windows, Some(&cloud_init)),
            Some(u32::from(Ipv4Addr::new(10, 40, 0, 21)))
        );
        assert_eq!(guest_static_ipv4(GuestOs::Linux, Some(&cloud_init)), None);
        assert_eq!(
            guest_static_ipv4(GuestOs::Windows, Some(&guest("sysprep"))),
            None
        );
        assert_eq!(guest_static_ipv4(GuestOs::Windows, None), None);
    }
}
