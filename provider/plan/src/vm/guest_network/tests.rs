use super::*;
use crate::vm::cloud_init::cloudbase_init_runs;

/// The shape of WMCO's `windows-user-data`: one `<powershell>` block (openshift/
/// windows-machine-config-operator `pkg/secrets/secrets.go`, `generateUserData`).
const WMCO_USER_DATA: &str = "<powershell>\nfunction Get-RandomPassword { }\nAdd-Content -Path C:\\ProgramData\\ssh\\administrators_authorized_keys -Value 'ssh-rsa AAAA'\n</powershell>\n<persist>true</persist>\n";

fn address(gateway: Option<&str>) -> GuestAddress {
    GuestAddress {
        claim: "win-0-claim-0-0".into(),
        ip: "10.50.0.21".parse().unwrap(),
        prefix: 24,
        gateway: gateway.map(|g| g.parse().unwrap()),
        nameservers: vec!["10.50.0.2".parse().unwrap(), "10.50.0.3".parse().unwrap()],
    }
}

/// The `<powershell>` blocks cloudbase-init runs, in order (`execcmd.py`'s regex:
/// `<powershell>([\s\S]+?)</powershell>`).
fn powershell_blocks(data: &str) -> Vec<&str> {
    let mut blocks = Vec::new();
    let mut rest = data;
    while let Some(start) = rest.find("<powershell>") {
        let after = &rest[start + "<powershell>".len()..];
        let Some(end) = after.find("</powershell>") else {
            break;
        };
        blocks.push(&after[..end]);
        rest = &after[end + "</powershell>".len()..];
    }
    blocks
}

#[test]
fn the_address_runs_as_its_own_block_before_wmcos() {
    let out = with_guest_address(WMCO_USER_DATA.as_bytes(), &address(Some("10.50.0.1"))).unwrap();
    let out = String::from_utf8(out).unwrap();
    let blocks = powershell_blocks(&out);
    assert_eq!(blocks.len(), 2, "{out}");
    assert!(
        blocks[0].contains(
            "New-NetIPAddress -InterfaceIndex $index -AddressFamily IPv4 -IPAddress 10.50.0.21 -PrefixLength 24 -DefaultGateway 10.50.0.1\n"
        ),
        "{}",
        blocks[0]
    );
    assert!(
        blocks[0].contains("-ServerAddresses @('10.50.0.2', '10.50.0.3')"),
        "{}",
        blocks[0]
    );
    assert!(blocks[0].contains("Get-NetAdapter -Physical"));
    assert!(
        blocks[0].contains("throw"),
        "more than one adapter is refused in the guest"
    );
    assert_eq!(
        blocks[1],
        powershell_blocks(WMCO_USER_DATA)[0],
        "WMCO's block unchanged"
    );
    assert!(
        out.ends_with(WMCO_USER_DATA),
        "everything of WMCO's kept, in order"
    );
    assert!(cloudbase_init_runs(out.as_bytes()));
}

#[test]
fn no_gateway_means_no_default_route_argument() {
    let commands = powershell_commands(&address(None));
    assert!(!commands.contains("-DefaultGateway"), "{commands}");
    assert!(commands.contains("-IPAddress 10.50.0.21 -PrefixLength 24\n"));
}

#[test]
fn a_ps1_script_gets_the_commands_after_its_header_line() {
    for header in ["#ps1", "#ps1_sysnative", "#ps1_x86"] {
        let data = format!("{header}\nWrite-Output hello\n");
        let out = String::from_utf8(with_guest_address(data.as_bytes(), &address(None)).unwrap())
            .unwrap();
        assert!(
            out.starts_with(&format!("{header}\n# Static address")),
            "{out}"
        );
        assert!(out.ends_with("Write-Output hello\n"));
        assert!(!out.contains("<powershell>"), "still one script: {out}");
    }
    // A header alone, without a line end.
    let out = with_guest_address(b"#ps1 ", &address(None)).unwrap();
    assert!(
        String::from_utf8(out)
            .unwrap()
            .starts_with("#ps1 \n# Static")
    );
}

#[test]
fn what_is_not_powershell_is_refused() {
    for data in [
        "rem cmd\necho hi\n",
        "#!/bin/bash\necho hi\n",
        "#cloud-config\nruncmd: []\n",
        "Content-Type: multipart/mixed; boundary=x\n",
        "Write-Output no tags\n",
        "#ps1notspace\n",
        // Taken as cloud-config before any tag is looked for.
        "#cloud-config\n<powershell>\nWrite-Output hi\n</powershell>\n",
    ] {
        assert_eq!(
            with_guest_address(data.as_bytes(), &address(None)),
            Err(GuestAddressError::NotPowerShell),
            "{data:?}"
        );
    }
}
