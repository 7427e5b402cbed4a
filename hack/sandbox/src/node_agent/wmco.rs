//! The Windows Machine Config Operator's part of the node agent: the `windows-user-data` Secret as
//! WMCO generates it for Nutanix, the check that a Secret holds exactly that, and what WMCO
//! configures on the kubelet it installs (its taint, maxPods and reserved resources).
//!
//! Sources: openshift/windows-machine-config-operator HEAD 0be4b9c, `pkg/secrets/secrets.go`
//! (`GenerateUserData`, `generateUserDataWithPubKey`, `processTags`, `applyTag`),
//! `controllers/secret_controller.go` (`reconcileUserDataSecret`),
//! `controllers/windowsmachine_controller.go` (`validateUserData`), `pkg/nodeconfig/nodeconfig.go`
//! (`generateKubeletConfiguration`).
//!
//! Not simulated: the key pair itself. WMCO derives the public key from the private key in
//! `cloud-private-key`; the sandbox's WMCO has only a public key ([`SANDBOX_PUBLIC_KEY`]), since
//! nothing here opens an SSH session.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The Secret WMCO keeps its user data in (`secrets.UserDataSecret`), in the machine API's
/// namespace.
pub const USER_DATA_SECRET: &str = "windows-user-data";
/// Its only key.
pub const USER_DATA_KEY: &str = "userData";

/// The sandbox WMCO's public key, as an authorized-keys line without a comment
/// (`ssh.MarshalAuthorizedKey` writes none). Generated for the sandbox with `ssh-keygen -t
/// ed25519`; the private half was never kept.
pub const SANDBOX_PUBLIC_KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOQr8h6wG4CauqEpRnpW+n7iAaX7cGSguySTwhq1I9Yt";

/// The taint WMCO's kubelet registers Windows Nodes with (`RegisterWithTaints`), so that Linux
/// pods are not scheduled on them.
pub const WINDOWS_TAINT: (&str, &str, &str) = ("os", "Windows", "NoSchedule");
/// The kubelet's `maxPods` on a Windows Node.
pub const WINDOWS_MAX_PODS: u64 = 250;
/// The kubelet's `systemReserved` on a Windows Node: 500m CPU, 2Gi memory, 1Gi ephemeral storage,
/// taken off the capacity to give the allocatable resources.
pub const WINDOWS_RESERVED_CPU_MILLIS: u64 = 500;
pub const WINDOWS_RESERVED_MEMORY_BYTES: u64 = 2 << 30;
pub const WINDOWS_RESERVED_EPHEMERAL_BYTES: u64 = 1 << 30;

/// `applyTag`: `<tag>data</tag>` and a newline.
fn apply_tag(tag: &str, data: &str) -> String {
    format!("<{tag}>{data}</{tag}>\n")
}

/// The PowerShell WMCO runs on first boot, for `authorized_key` (an authorized-keys line). Its
/// steps are `generateUserDataWithPubKey`'s: enable `Administrator` with a random password unless
/// a `capi` user exists, install the OpenSSH server (retried: the network may not be up yet), open
/// the kubelet's port 10250, the Windows exporter's 9182 and SSH's 22, start sshd on every boot,
/// allow key and refuse password logins, authorize the key for administrators (ASCII, readable by
/// Administrators and SYSTEM only) and restart sshd. The text is the sandbox's; its shape is
/// WMCO's: a Go raw string indented with tabs after its first line, the key followed by the
/// newline `MarshalAuthorizedKey` ends it with inside the quotes, no AWS or GCP part.
fn script(authorized_key: &str) -> String {
    let lines = [
        "function New-SandboxPassword {",
        "\tAdd-Type -AssemblyName 'System.Web'",
        "\treturn [System.Web.Security.Membership]::GeneratePassword(16, 2)",
        "}",
        "",
        "# Azure images log in as capi; elsewhere the Administrator account is enabled.",
        "if ((Get-LocalUser | Where-Object {$_.Name -eq \"capi\"}) -eq $null) {",
        "\t$admin = Get-LocalUser -Name \"Administrator\"",
        "\tif (($admin -ne $null) -and (!$admin.Enabled)) {",
        "\t\t$secret = ConvertTo-SecureString (New-SandboxPassword) -AsPlainText -Force",
        "\t\t$admin | Set-LocalUser -Password $secret",
        "\t\t$admin | Enable-LocalUser",
        "\t}",
        "}",
        "",
        "# Windows Server 2019 and 2022 need the OpenSSH server from the network, which may not be up yet.",
        "$tries = 0",
        "$installed = $false",
        "while (-not $installed -and $tries -lt 10) {",
        "\ttry {",
        "\t\tAdd-WindowsCapability -Online -Name OpenSSH.Server~~~~0.0.1.0 -ErrorAction Stop",
        "\t\t$installed = $true",
        "\t} catch {",
        "\t\t$tries++",
        "\t\tStart-Sleep -Seconds 5",
        "\t}",
        "}",
        "New-NetFirewallRule -DisplayName \"ContainerLogsPort\" -Direction Inbound -Action Allow -Protocol TCP -LocalPort \"10250\" -EdgeTraversalPolicy Allow",
        "New-NetFirewallRule -DisplayName \"WindowsExporter\" -Direction Inbound -Action Allow -Protocol TCP -LocalPort \"9182\" -EdgeTraversalPolicy Allow",
        "$sshRule = \"OpenSSH-Server-In-TCP\"",
        "if (!(Get-NetFirewallRule -Name $sshRule -ErrorAction SilentlyContinue)) {",
        "\tNew-NetFirewallRule -Name $sshRule -DisplayName 'OpenSSH Server (sshd)' -Enabled True -Direction Inbound -Protocol TCP -Action Allow -LocalPort 22",
        "}",
        "Enable-NetFirewallRule -Name $sshRule",
        "Set-NetFirewallRule -Name $sshRule -Profile Any",
        "",
        "Set-Service -Name sshd -StartupType 'Automatic'",
        "Start-Service sshd",
        "$sshdConfig = \"$env:ProgramData\\ssh\\sshd_config\"",
        "(Get-Content -Path $sshdConfig) | ForEach-Object {",
        "\t$_.Replace('#PubkeyAuthentication yes', 'PubkeyAuthentication yes').Replace('#PasswordAuthentication yes', 'PasswordAuthentication no')",
        "} | Set-Content -Path $sshdConfig",
        "$keys = \"$env:ProgramData\\ssh\\administrators_authorized_keys\"",
        "New-Item -Force $keys",
    ];
    let after_key = [
        "$keysAcl = Get-Acl $keys",
        "$keysAcl.SetAccessRuleProtection($true, $false)",
        "$keysAcl.SetAccessRule((New-Object System.Security.AccessControl.FileSystemAccessRule(\"Administrators\", \"FullControl\", \"Allow\")))",
        "$keysAcl.SetAccessRule((New-Object System.Security.AccessControl.FileSystemAccessRule(\"SYSTEM\", \"FullControl\", \"Allow\")))",
        "$keysAcl | Set-Acl",
        "Restart-Service sshd",
    ];
    let key_line = format!("echo \"{authorized_key}\n\"| Out-File $keys -Encoding ascii");
    let mut text = String::new();
    for (index, line) in lines
        .iter()
        .copied()
        .chain([key_line.as_str()])
        .chain(after_key)
        .enumerate()
    {
        if index > 0 {
            text.push_str("\n\t\t\t");
        }
        text.push_str(line);
    }
    // The raw string's closing line: a newline and the indentation of its backquote.
    text.push_str("\n\t\t\t");
    text
}

/// `windows-user-data`'s `userData` as WMCO generates it on Nutanix (every platform but GCP):
/// the script inside `<powershell>` and, after it, `<persist>true</persist>`, each tag ending its
/// line (`processTags`).
pub fn user_data(authorized_key: &str) -> String {
    let mut data = apply_tag("powershell", &script(authorized_key));
    data.push_str(&apply_tag("persist", "true"));
    data
}

/// The Secret WMCO creates (`GenerateUserData`): only the name, namespace and the `userData` key
/// (no type: the API server makes it `Opaque`).
pub fn user_data_secret(namespace: &str, authorized_key: &str) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(USER_DATA_SECRET.to_owned()),
            namespace: Some(namespace.to_owned()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(
            USER_DATA_KEY.to_owned(),
            ByteString(user_data(authorized_key).into_bytes()),
        )])),
        ..Secret::default()
    }
}

/// What WMCO's secret controller does about the Secret it finds (`reconcileUserDataSecret`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SecretAction {
    /// Nothing: it holds the user data WMCO generates.
    Keep,
    /// It is missing: create it.
    Create,
    /// Its `userData` differs (or is missing): write WMCO's.
    Update,
}

/// The secret controller's decision, and `validateUserData`'s check (`Keep` is valid).
pub fn secret_action(found: Option<&Secret>, authorized_key: &str) -> SecretAction {
    let Some(secret) = found else {
        return SecretAction::Create;
    };
    let current = secret
        .data
        .as_ref()
        .and_then(|d| d.get(USER_DATA_KEY))
        .map(|b| b.0.as_slice());
    if current == Some(user_data(authorized_key).as_bytes()) {
        SecretAction::Keep
    } else {
        SecretAction::Update
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape of WMCO's user data for Nutanix (`pkg/secrets/secrets.go`, HEAD 0be4b9c), each
    /// rule with its place in the source: a provider that re-wraps, trims or re-encodes the Secret
    /// hands the guest something else, and the Windows join stops at the WMCO gate.
    #[test]
    fn user_data_has_wmcos_shape() {
        let data = user_data(SANDBOX_PUBLIC_KEY);
        let rules: [(&str, bool); 8] = [
            (
                "processTags: <powershell> opens the data, with no newline before the script",
                data.starts_with("<powershell>function "),
            ),
            (
                "processTags: <persist>true</persist> and a newline close it",
                data.ends_with("</powershell>\n<persist>true</persist>\n"),
            ),
            (
                "applyTag: one powershell block only",
                data.matches("<powershell>").count() == 1,
            ),
            (
                "generateUserDataWithPubKey: a Go raw string indented with tabs",
                data.contains("\n\t\t\tNew-NetFirewallRule -DisplayName \"ContainerLogsPort\""),
            ),
            (
                "generateUserDataWithPubKey: the key and MarshalAuthorizedKey's newline inside the quotes",
                data.contains(&format!(
                    "echo \"{SANDBOX_PUBLIC_KEY}\n\"| Out-File $keys -Encoding ascii"
                )),
            ),
            (
                "generateUserDataWithPubKey: the kubelet's port 10250 and the exporter's 9182",
                data.contains("\"10250\"") && data.contains("\"9182\""),
            ),
            (
                "generateUserDataWithPubKey: the raw string's last line is its indentation",
                data.contains("Restart-Service sshd\n\t\t\t</powershell>"),
            ),
            (
                "no AWS EC2Launch part on Nutanix",
                !data.contains("EC2Launch"),
            ),
        ];
        for (rule, holds) in rules {
            assert!(holds, "{rule}");
        }
        assert!(
            (2500..4500).contains(&data.len()),
            "about WMCO's size: {} bytes",
            data.len()
        );
        assert!(
            data.contains(crate::world::WINDOWS_USER_DATA_MARKER),
            "the marker the log searches look for is in the user data"
        );
        let secret = user_data_secret("openshift-machine-api", SANDBOX_PUBLIC_KEY);
        assert_eq!(secret.metadata.name.as_deref(), Some(USER_DATA_SECRET));
        assert_eq!(secret.type_, None);
        assert_eq!(secret.data.as_ref().unwrap().len(), 1);
    }

    #[test]
    fn the_secret_controller_creates_or_rewrites_anything_else() {
        let good = user_data_secret("ns", SANDBOX_PUBLIC_KEY);
        assert_eq!(
            secret_action(Some(&good), SANDBOX_PUBLIC_KEY),
            SecretAction::Keep
        );
        assert_eq!(
            secret_action(None, SANDBOX_PUBLIC_KEY),
            SecretAction::Create
        );
        let mut trimmed = good.clone();
        let text = user_data(SANDBOX_PUBLIC_KEY);
        trimmed.data = Some(BTreeMap::from([(
            USER_DATA_KEY.to_owned(),
            ByteString(text.trim_end().as_bytes().to_vec()),
        )]));
        assert_eq!(
            secret_action(Some(&trimmed), SANDBOX_PUBLIC_KEY),
            SecretAction::Update
        );
        let other_key =
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAnotTheSandboxKeyAtAllAnotTheSandboxKeyAt";
        assert_eq!(secret_action(Some(&good), other_key), SecretAction::Update);
    }
}
