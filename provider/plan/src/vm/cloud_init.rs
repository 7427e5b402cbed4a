//! cloud-init guest customization: Ignition for Linux, cloudbase-init user and meta data for
//! Windows.
//!
//! Prism puts `user_data` (and `meta_data`) on a config drive. RHCOS reads the user data as
//! Ignition; upstream appends an `/etc/hostname` file so that the node name does not depend on
//! DHCP (OCPBUGS-6727), and so do we. Windows images with cloudbase-init run the user data's
//! `<powershell>` block and read `meta_data` (`hostname`, `uuid`).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value, json};

/// Prism's limit on `cloud_init.user_data`, in base64 characters.
pub const USER_DATA_BASE64_LIMIT: usize = 128_000;
/// Prism's limit on `cloud_init.meta_data`, in base64 characters.
pub const META_DATA_BASE64_LIMIT: usize = 32_000;

/// Why user data cannot be used. Never quotes the user data.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CloudInitError {
    #[error("user data is not an Ignition config (a JSON object): {0}")]
    NotIgnition(String),
    #[error("user data has a `storage.files` that is not a list")]
    FilesNotAList,
    #[error("user data is {base64_len} characters in base64; Prism accepts at most {limit}")]
    TooLarge { base64_len: usize, limit: usize },
}

/// The Secret the machine-api-operator's defaulting webhook names when a Nutanix providerSpec
/// has no `userDataSecret`: the Linux workers' Ignition (openshift/machine-api-operator
/// `pkg/webhooks/machine_webhook.go`, `defaultUserDataSecret = "worker-user-data"`, set by
/// `defaultNutanix` when `providerSpec.UserDataSecret == nil`).
pub const LINUX_DEFAULT_USER_DATA_SECRET: &str = "worker-user-data";

/// The user data Secret of Windows Machines, which the Windows Machine Config Operator creates
/// and keeps in `openshift-machine-api` (openshift/windows-machine-config-operator
/// `pkg/secrets/secrets.go`, `controllers/secret_controller.go`).
pub const WINDOWS_USER_DATA_SECRET: &str = "windows-user-data";

/// Why a Windows Machine's user data would boot a VM that never joins. Never quotes the user
/// data.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WindowsUserDataError {
    #[error(
        "Secret \"{LINUX_DEFAULT_USER_DATA_SECRET}\" is the Linux workers' Ignition (the \
         machine-api-operator's webhook names it when userDataSecret is left out): a Windows \
         image ignores it, so the VM would boot and never join; set userDataSecret to \
         {{name: {WINDOWS_USER_DATA_SECRET}}}, the Secret the Windows Machine Config Operator \
         creates"
    )]
    LinuxDefaultSecret,
    #[error(
        "user data is an Ignition config, which a Windows image ignores, so the VM would boot \
         and never join; set userDataSecret to {{name: {WINDOWS_USER_DATA_SECRET}}}, the Secret \
         the Windows Machine Config Operator creates"
    )]
    Ignition,
}

/// Whether `user_data` is Ignition: a JSON object with an `ignition` object (coreos/ignition
/// `docs/configuration-v3_*.md`: "**ignition** (object): metadata about the configuration
/// itself", holding `version`).
pub fn is_ignition(user_data: &[u8]) -> bool {
    serde_json::from_slice::<Value>(user_data)
        .is_ok_and(|config| config.get("ignition").is_some_and(Value::is_object))
}

/// Refuses the Linux workers' user data for a Windows Machine: the default Secret by name
/// (even before it is read), or any Ignition config by content.
pub fn check_windows_user_data(
    secret_name: &str,
    user_data: Option<&[u8]>,
) -> Result<(), WindowsUserDataError> {
    if secret_name == LINUX_DEFAULT_USER_DATA_SECRET {
        return Err(WindowsUserDataError::LinuxDefaultSecret);
    }
    if user_data.is_some_and(is_ignition) {
        return Err(WindowsUserDataError::Ignition);
    }
    Ok(())
}

/// What cloudbase-init takes `user_data` for, in the order it tries them (cloudbase/cloudbase-init
/// `cloudbaseinit/plugins/common/userdata.py`, `_process_user_data` and `_process_non_multi_part`:
/// gzip, MIME multipart, `#cloud-config`; then `userdatautils.py`, `_SCRIPTS`: `rem cmd`, `#!`,
/// `#ps1`, `#ps1_sysnative`, `#ps1_x86` at the start, and last a `<script>` or `<powershell>` tag
/// anywhere). Anything else it logs as "Unsupported user_data format" and skips.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloudbaseForm {
    /// Gzip: its content cannot be told without unpacking it.
    Gzip,
    Multipart,
    CloudConfig,
    /// A `rem cmd` script.
    Cmd,
    /// A `#!` script (Python or Bash).
    Shebang,
    /// One PowerShell script, from a `#ps1`, `#ps1_sysnative` or `#ps1_x86` header line.
    PowerShellScript,
    /// `<script>` and `<powershell>` blocks, run block by block (`execcmd.py`, `EC2Config`).
    TaggedBlocks,
    /// Nothing cloudbase-init runs.
    Unsupported,
}

/// The form cloudbase-init takes `user_data` in ([`CloudbaseForm`]).
pub fn cloudbase_form(user_data: &[u8]) -> CloudbaseForm {
    const GZIP_MAGIC: &[u8] = b"\x1f\x8b";
    const TAGS: [&[u8]; 4] = [b"<script>", b"</script>", b"<powershell>", b"</powershell>"];
    let starts_with_word = |prefix: &[u8]| {
        user_data
            .strip_prefix(prefix)
            .and_then(|rest| rest.first())
            .is_some_and(u8::is_ascii_whitespace)
    };
    let rem_cmd = user_data.strip_prefix(b"rem").is_some_and(|rest| {
        let trimmed = rest.trim_ascii_start();
        trimmed.len() < rest.len() && starts_with_cmd(trimmed)
    });
    if user_data.starts_with(GZIP_MAGIC) {
        CloudbaseForm::Gzip
    } else if user_data.starts_with(b"Content-Type: multipart") {
        CloudbaseForm::Multipart
    } else if user_data.starts_with(b"#cloud-config") {
        CloudbaseForm::CloudConfig
    } else if rem_cmd {
        CloudbaseForm::Cmd
    } else if user_data.starts_with(b"#!") {
        CloudbaseForm::Shebang
    } else if ["#ps1", "#ps1_sysnative", "#ps1_x86"]
        .iter()
        .any(|prefix| starts_with_word(prefix.as_bytes()))
    {
        CloudbaseForm::PowerShellScript
    } else if TAGS
        .iter()
        .any(|tag| user_data.windows(tag.len()).any(|window| window == *tag))
    {
        CloudbaseForm::TaggedBlocks
    } else {
        CloudbaseForm::Unsupported
    }
}

/// Whether a Windows image's cloudbase-init does anything with `user_data` (gzip counted as
/// recognised).
pub fn cloudbase_init_runs(user_data: &[u8]) -> bool {
    cloudbase_form(user_data) != CloudbaseForm::Unsupported
}

/// `cmd` followed by whitespace (after `rem` and whitespace: `^rem\s+cmd\s`).
fn starts_with_cmd(rest: &[u8]) -> bool {
    rest.strip_prefix(b"cmd")
        .and_then(|after| after.first())
        .is_some_and(u8::is_ascii_whitespace)
}

/// The length of `bytes` in base64 (with padding).
pub fn base64_len(bytes: usize) -> usize {
    bytes.div_ceil(3) * 4
}

/// Ignition user data with an `/etc/hostname` file set to `hostname`, replacing any earlier
/// `/etc/hostname` entry (Ignition rejects duplicate paths).
pub fn ignition_with_hostname(user_data: &[u8], hostname: &str) -> Result<Vec<u8>, CloudInitError> {
    let mut config: Value = serde_json::from_slice(user_data)
        .map_err(|e| CloudInitError::NotIgnition(e.to_string()))?;
    let Value::Object(root) = &mut config else {
        return Err(CloudInitError::NotIgnition(
            "the top level is not an object".into(),
        ));
    };
    let storage = root
        .entry("storage")
        .or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(storage) = storage else {
        return Err(CloudInitError::NotIgnition(
            "`storage` is not an object".into(),
        ));
    };
    let files = storage
        .entry("files")
        .or_insert_with(|| Value::Array(Vec::new()));
    let Value::Array(files) = files else {
        return Err(CloudInitError::FilesNotAList);
    };
    files.retain(|file| file.get("path").and_then(Value::as_str) != Some("/etc/hostname"));
    files.push(json!({
        "path": "/etc/hostname",
        "contents": {"source": format!("data:,{}", percent_encode(hostname))},
        "mode": 420,
        "overwrite": true,
    }));
    serde_json::to_vec(&config).map_err(|e| CloudInitError::NotIgnition(e.to_string()))
}

/// Percent-encodes everything but RFC 3986 unreserved characters, for a data URL.
fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// cloudbase-init meta data: the host name and an instance ID (a new ID re-runs first-boot
/// plugins, so it must stay the same for the life of the VM).
pub fn meta_data(hostname: &str, instance_id: &str) -> String {
    json!({"hostname": hostname, "uuid": instance_id}).to_string()
}

/// Base64 of user data, checked against Prism's limit.
pub fn encode_user_data(user_data: &[u8]) -> Result<String, CloudInitError> {
    let base64_len = base64_len(user_data.len());
    if base64_len > USER_DATA_BASE64_LIMIT {
        return Err(CloudInitError::TooLarge {
            base64_len,
            limit: USER_DATA_BASE64_LIMIT,
        });
    }
    Ok(STANDARD.encode(user_data))
}

/// Base64 of meta data, checked against Prism's limit.
pub fn encode_meta_data(meta_data: &str) -> Result<String, CloudInitError> {
    let base64_len = base64_len(meta_data.len());
    if base64_len > META_DATA_BASE64_LIMIT {
        return Err(CloudInitError::TooLarge {
            base64_len,
            limit: META_DATA_BASE64_LIMIT,
        });
    }
    Ok(STANDARD.encode(meta_data))
}

#[cfg(test)]
mod tests {
    use super::*;

    const POINTER_CONFIG: &str = r#"{"ignition":{"config":{"merge":[{"source":"https://api-int.ocp.example.com:22623/config/worker"}]},"version":"3.2.0"}}"#;

    #[test]
    fn adds_the_hostname_file_to_a_pointer_config() {
        let out = ignition_with_hostname(POINTER_CONFIG.as_bytes(), "ocp-worker-0-abcde").unwrap();
        let out: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            out["ignition"]["version"], "3.2.0",
            "the rest of the config is kept"
        );
        assert_eq!(
            out["storage"]["files"],
            json!([{"path": "/etc/hostname", "contents": {"source": "data:,ocp-worker-0-abcde"},
                    "mode": 420, "overwrite": true}])
        );
    }

    #[test]
    fn replaces_an_earlier_hostname_file_and_keeps_others() {
        let config = json!({"ignition": {"version": "3.2.0"}, "storage": {"files": [
            {"path": "/etc/hostname", "contents": {"source": "data:,old"}},
            {"path": "/etc/motd", "contents": {"source": "data:,hi"}}
        ]}});
        let out = ignition_with_hostname(config.to_string().as_bytes(), "new").unwrap();
        let out: Value = serde_json::from_slice(&out).unwrap();
        let files = out["storage"]["files"].as_array().unwrap();
        assert_eq!(files.len(), 2);
        assert_eq!(files[0]["path"], "/etc/motd");
        assert_eq!(files[1]["contents"]["source"], "data:,new");
    }

    #[test]
    fn rejects_what_is_not_ignition_without_quoting_it() {
        let secret = "#cloud-config\npassword: hunter2";
        let error = ignition_with_hostname(secret.as_bytes(), "h").unwrap_err();
        assert!(matches!(error, CloudInitError::NotIgnition(_)));
        assert!(!error.to_string().contains("hunter2"));
        assert!(matches!(
            ignition_with_hostname(b"[]", "h"),
            Err(CloudInitError::NotIgnition(_))
        ));
        assert_eq!(
            ignition_with_hostname(br#"{"storage":{"files":{}}}"#, "h"),
            Err(CloudInitError::FilesNotAList)
        );
    }

    #[test]
    fn windows_refuses_the_linux_default_secret_and_any_ignition() {
        let powershell = b"<powershell>\nWrite-Host hi\n</powershell>".as_slice();
        type Case<'a> = (&'a str, Option<&'a [u8]>, Result<(), WindowsUserDataError>);
        let cases: [Case<'_>; 7] = [
            ("windows-user-data", Some(powershell), Ok(())),
            ("windows-user-data", None, Ok(())),
            ("windows-user-data", Some(b"#cloud-config\n"), Ok(())),
            (
                "worker-user-data",
                None,
                Err(WindowsUserDataError::LinuxDefaultSecret),
            ),
            (
                "worker-user-data",
                Some(powershell),
                Err(WindowsUserDataError::LinuxDefaultSecret),
            ),
            (
                "my-data",
                Some(POINTER_CONFIG.as_bytes()),
                Err(WindowsUserDataError::Ignition),
            ),
            // JSON that is not Ignition is left to cloudbase-init.
            ("my-data", Some(br#"{"storage":{}}"#), Ok(())),
        ];
        for (name, user_data, expected) in cases {
            assert_eq!(
                check_windows_user_data(name, user_data),
                expected,
                "{name} {user_data:?}"
            );
        }
        for error in [
            WindowsUserDataError::LinuxDefaultSecret,
            WindowsUserDataError::Ignition,
        ] {
            assert!(error.to_string().contains("windows-user-data"), "{error}");
        }
    }

    #[test]
    fn what_cloudbase_init_runs() {
        for runs in [
            "<powershell>\nWrite-Host hi\n</powershell>\n<persist>true</persist>",
            "# WMCO\n<powershell>x</powershell>",
            "#cloud-config\nusers: []",
            "#ps1\nWrite-Host hi",
            "#ps1_sysnative\r\nWrite-Host hi",
            "#ps1_x86 \nWrite-Host hi",
            "rem cmd\necho hi",
            "rem   cmd echo",
            "#!/usr/bin/env python\nprint(1)",
            "Content-Type: multipart/mixed; boundary=x\n",
            "<script>echo hi</script>",
        ] {
            assert!(cloudbase_init_runs(runs.as_bytes()), "{runs:?}");
        }
        assert!(cloudbase_init_runs(b"\x1f\x8b\x08\x00"), "gzip");
        for skipped in [
            "",
            "Write-Host hi",
            "#ps1Write-Host",
            "#ps1",
            "remcmd echo",
            "rem cmd",
            " #cloud-config",
            "<PowerShell>x</PowerShell>",
            "{\"storage\":{}}",
        ] {
            assert!(!cloudbase_init_runs(skipped.as_bytes()), "{skipped:?}");
        }
    }

    #[test]
    fn hostname_is_percent_encoded_in_the_data_url() {
        assert_eq!(percent_encode("a b/c"), "a%20b%2Fc");
    }

    #[test]
    fn user_data_limit_is_prisms_base64_limit() {
        let largest = USER_DATA_BASE64_LIMIT / 4 * 3;
        assert_eq!(
            encode_user_data(&vec![b'x'; largest]).unwrap().len(),
            USER_DATA_BASE64_LIMIT
        );
        assert_eq!(
            encode_user_data(&vec![b'x'; largest + 1]),
            Err(CloudInitError::TooLarge {
                base64_len: USER_DATA_BASE64_LIMIT + 4,
                limit: USER_DATA_BASE64_LIMIT
            })
        );
    }

    #[test]
    fn meta_data_names_host_and_instance() {
        let meta: Value = serde_json::from_str(&meta_data("win-abcde", "uuid-1")).unwrap();
        assert_eq!(meta, json!({"hostname": "win-abcde", "uuid": "uuid-1"}));
    }
}
