//! Sysprep `unattend.xml` for Windows Server 2022/2025, carrying the user-data PowerShell.
//!
//! Prism's sysprep customization takes one unattend.xml (at most 32,000 characters once base64
//! encoded) and no files, and a `RunSynchronousCommand` path holds at most 259 characters, so the
//! user-data script cannot be inlined. The specialize pass (run as SYSTEM before OOBE) therefore
//! rebuilds it byte for byte:
//!
//! 1. `cmd /c if not exist <dir> mkdir <dir>` creates `C:\Windows\Setup\Scripts`;
//! 2. `cmd /c type nul><b64>` empties the base64 file (also when setup runs the pass again);
//! 3. `cmd /c (echo <chunk>)>><b64>` appends the base64 of the script, one chunk per command.
//!    A chunk holds only base64 characters, which cmd.exe never treats specially; its length is a
//!    multiple of 4, so it is never empty, never `ON`/`OFF`, and never starts with `=`. The
//!    parentheses end the echoed text, so a chunk ending in a digit is not read as a stream
//!    number (`echo abc1>>f` would redirect stream 1 and write `abc`);
//! 4. one PowerShell command decodes the file (`[Convert]::FromBase64String` skips the CR LF that
//!    `echo` appends, and decodes an empty file to an empty script) into `user-data.ps1`;
//! 5. `cmd /c (echo powershell.exe ... -File <ps1>)><SetupComplete.cmd>` writes the launcher:
//!    Windows runs `SetupComplete.cmd` as SYSTEM after setup, with the network up, before anyone
//!    logs on. It replaces any `SetupComplete.cmd` the image carries.
//!
//! The oobeSystem pass sets the locale (which is what skips OOBE's region and keyboard pages), skips
//! the rest of OOBE and sets the Administrator password (Windows' obfuscated form,
//! not plain text); there is no AutoLogon. `ComputerName` is the Machine name only when that is a
//! valid computer name of at most 15 characters; otherwise Windows picks a name and WMCO renames
//! the host to the Machine name over SSH.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use prism_types::Sensitive;
use prism_types::quote::quoted;
use quick_xml::Writer;
use quick_xml::escape::partial_escape;
use quick_xml::events::{BytesDecl, BytesText, Event};

use super::cloud_init::base64_len;
use super::secret::AdminPassword;

/// Prism's limit on `sysprep.unattend_xml`, in base64 characters.
pub const UNATTEND_BASE64_LIMIT: usize = 32_000;
/// Windows' limit on a `RunSynchronousCommand` path, in characters.
pub const COMMAND_LIMIT: usize = 259;

/// Where the script and its helpers land on the VM.
pub const SCRIPTS_DIR: &str = r"C:\Windows\Setup\Scripts";
pub const ENCODED_SCRIPT_PATH: &str = r"C:\Windows\Setup\Scripts\user-data.b64";
pub const SCRIPT_PATH: &str = r"C:\Windows\Setup\Scripts\user-data.ps1";
pub const SETUP_COMPLETE_PATH: &str = r"C:\Windows\Setup\Scripts\SetupComplete.cmd";

const APPEND_PREFIX: &str = "cmd /c (echo ";
const APPEND_INFIX: &str = ")>>";

/// Base64 characters per append command: the most that fits in [`COMMAND_LIMIT`], rounded down to
/// a multiple of 4 (see the module documentation for why).
pub const CHUNK_LEN: usize =
    (COMMAND_LIMIT - APPEND_PREFIX.len() - APPEND_INFIX.len() - ENCODED_SCRIPT_PATH.len()) / 4 * 4;

/// The line `SetupComplete.cmd` holds.
pub const LAUNCHER: &str = concat!(
    "powershell.exe -NoProfile -NonInteractive -ExecutionPolicy Bypass -File ",
    r"C:\Windows\Setup\Scripts\user-data.ps1"
);

/// The component attributes every Windows Server amd64 unattend uses.
const COMPONENT_ATTRIBUTES: [(&str, &str); 4] = [
    ("processorArchitecture", "amd64"),
    ("publicKeyToken", "31bf3856ad364e35"),
    ("language", "neutral"),
    ("versionScope", "nonSxS"),
];

/// The Administrator password to write.
#[derive(Clone, Copy, Debug)]
pub enum PasswordValue<'a> {
    /// The real password, written in Windows' obfuscated form.
    Secret(&'a AdminPassword),
    /// A visible placeholder for previews (`render`); never sent to Prism.
    Placeholder,
}

/// Text written instead of the password in previews.
pub const PASSWORD_PLACEHOLDER: &str = "(Administrator password: generated per VM, not shown)";

/// What the unattend.xml is made from. Its `Debug` shows the script's length only (the password
/// redacts itself).
#[derive(Clone, Copy)]
pub struct UnattendInput<'a> {
    /// The Machine name: used as ComputerName when Windows accepts it.
    pub machine_name: &'a str,
    /// A Windows time zone ID, such as `UTC` or `W. Europe Standard Time`.
    pub time_zone: &'a str,
    /// The PowerShell to run at first boot (see [`powershell_body`]); `None` runs nothing.
    pub script: Option<&'a [u8]>,
    pub password: PasswordValue<'a>,
}

impl fmt::Debug for UnattendInput<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let script = self
            .script
            .map(|script| format!("<{} bytes redacted>", script.len()));
        f.debug_struct("UnattendInput")
            .field("machine_name", &self.machine_name)
            .field("time_zone", &self.time_zone)
            .field(
                "script",
                &format_args!("{}", script.as_deref().unwrap_or("None")),
            )
            .field("password", &self.password)
            .finish()
    }
}

/// A rendered unattend.xml.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unattend {
    /// The XML (it carries the obfuscated password, so `Debug` redacts it).
    pub xml: Sensitive,
    /// Things the administrator should know (for example: ComputerName left out).
    pub warnings: Vec<String>,
}

impl Unattend {
    /// The base64 form Prism takes in `unattend_xml`.
    pub fn to_base64(&self) -> Sensitive {
        Sensitive::new(STANDARD.encode(self.xml.expose()))
    }
}

/// Why an unattend.xml cannot be made. Never quotes the script or the password.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UnattendError {
    #[error("user data has no <powershell>...</powershell> block to run through Sysprep")]
    NoPowerShellBlock,
    #[error("user data has {0} <powershell> blocks; Sysprep runs exactly one")]
    SeveralPowerShellBlocks(usize),
    #[error("user data has <powershell> without a matching </powershell>")]
    UnclosedPowerShellBlock,
    #[error(
        "the user-data script is {script_bytes} bytes, but at most {max_script_bytes} bytes fit: \
         Prism limits unattend_xml to {UNATTEND_BASE64_LIMIT} base64 characters and this one would be {base64_len}"
    )]
    TooLarge {
        script_bytes: usize,
        max_script_bytes: usize,
        base64_len: usize,
    },
    #[error("writing the unattend.xml failed: {0}")]
    Xml(String),
}

/// The body of the first `<powershell>...</powershell>` block of WMCO-style user data, byte for
/// byte. `<persist>` and anything outside the block are ignored: cloudbase-init and EC2Launch tags
/// mean nothing to Sysprep.
pub fn powershell_body(user_data: &[u8]) -> Result<&[u8], UnattendError> {
    const OPEN: &[u8] = b"<powershell>";
    const CLOSE: &[u8] = b"</powershell>";
    let find = |haystack: &[u8], needle: &[u8]| {
        haystack
            .windows(needle.len())
            .position(|window| window.eq_ignore_ascii_case(needle))
    };
    let count = {
        let mut count = 0;
        let mut rest = user_data;
        while let Some(at) = find(rest, OPEN) {
            count += 1;
            rest = &rest[at + OPEN.len()..];
        }
        count
    };
    match count {
        0 => Err(UnattendError::NoPowerShellBlock),
        1 => {
            let start = find(user_data, OPEN)
                .map(|at| at + OPEN.len())
                .ok_or(UnattendError::NoPowerShellBlock)?;
            let length =
                find(&user_data[start..], CLOSE).ok_or(UnattendError::UnclosedPowerShellBlock)?;
            Ok(&user_data[start..start + length])
        }
        many => Err(UnattendError::SeveralPowerShellBlocks(many)),
    }
}

/// Whether Windows accepts `name` as a computer name: 1 to 15 letters, digits or hyphens, not
/// starting or ending with a hyphen, not all digits.
pub fn is_valid_computer_name(name: &str) -> bool {
    (1..=15).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.bytes().all(|b| b.is_ascii_digit())
}

/// The `RunSynchronous` commands that land `script` at [`SCRIPT_PATH`] and launch it from
/// `SetupComplete.cmd`. Each is at most [`COMMAND_LIMIT`] characters.
pub fn landing_commands(script: &[u8]) -> Vec<String> {
    let encoded = STANDARD.encode(script);
    let mut commands = vec![
        format!("cmd /c if not exist {SCRIPTS_DIR} mkdir {SCRIPTS_DIR}"),
        format!("cmd /c type nul>{ENCODED_SCRIPT_PATH}"),
    ];
    // Base64 is ASCII, so byte chunks are whole characters.
    commands.extend(encoded.as_bytes().chunks(CHUNK_LEN).map(|chunk| {
        format!(
            "{APPEND_PREFIX}{}{APPEND_INFIX}{ENCODED_SCRIPT_PATH}",
            String::from_utf8_lossy(chunk)
        )
    }));
    commands.push(format!(
        "powershell.exe -NoProfile -NonInteractive -ExecutionPolicy Bypass -Command \
         \"[IO.File]::WriteAllBytes('{SCRIPT_PATH}',[Convert]::FromBase64String([IO.File]::ReadAllText('{ENCODED_SCRIPT_PATH}')))\""
    ));
    commands.push(format!("cmd /c (echo {LAUNCHER})>{SETUP_COMPLETE_PATH}"));
    commands
}

/// Renders the unattend.xml, or says why it cannot be made.
pub fn render_unattend(input: &UnattendInput<'_>) -> Result<Unattend, UnattendError> {
    let xml = write_xml(input)?;
    let encoded_len = base64_len(xml.len());
    if encoded_len > UNATTEND_BASE64_LIMIT {
        let script_bytes = input.script.map_or(0, <[u8]>::len);
        return Err(UnattendError::TooLarge {
            script_bytes,
            max_script_bytes: max_script_len(input),
            base64_len: encoded_len,
        });
    }
    let mut warnings = Vec::new();
    if !is_valid_computer_name(input.machine_name) {
        warnings.push(format!(
            "Machine name {:?} is not a valid Windows computer name (1 to 15 letters, digits or hyphens): \
             ComputerName is left out, so Windows picks one and WMCO renames the host to the Machine name",
            quoted(input.machine_name)
        ));
    }
    Ok(Unattend {
        xml: Sensitive::new(xml),
        warnings,
    })
}

/// The longest script that fits with these other inputs (the XML grows with the script's length
/// only, never with its bytes: base64 needs no XML escaping).
pub fn max_script_len(input: &UnattendInput<'_>) -> usize {
    let fits = |length: usize| {
        let script = vec![0u8; length];
        let probe = UnattendInput {
            script: Some(&script),
            ..*input
        };
        write_xml(&probe).is_ok_and(|xml| base64_len(xml.len()) <= UNATTEND_BASE64_LIMIT)
    };
    if !fits(0) {
        return 0;
    }
    // Invariant: fits(low) and !fits(high). The base64 of the script alone is under the limit
    // for any length that fits.
    let (mut low, mut high) = (0, UNATTEND_BASE64_LIMIT);
    while high - low > 1 {
        let middle = low + (high - low) / 2;
        if fits(middle) {
            low = middle
        } else {
            high = middle
        }
    }
    low
}

/// The obfuscated form Windows writes for `PlainText=false`: base64 of the UTF-16LE of the
/// password followed by the element name. It keeps the password out of plain sight, nothing more.
fn obfuscated_password(password: &AdminPassword) -> String {
    let text = format!("{}AdministratorPassword", password.expose());
    let utf16: Vec<u8> = text.encode_utf16().flat_map(u16::to_le_bytes).collect();
    STANDARD.encode(utf16)
}

type XmlResult = std::io::Result<()>;

fn text_element(writer: &mut Writer<Vec<u8>>, name: &str, text: &str) -> XmlResult {
    writer
        .create_element(name)
        .write_text_content(BytesText::from_escaped(partial_escape(text)))?;
    Ok(())
}

fn component(
    writer: &mut Writer<Vec<u8>>,
    name: &str,
    body: impl FnOnce(&mut Writer<Vec<u8>>) -> XmlResult,
) -> XmlResult {
    writer
        .create_element("component")
        .with_attribute(("name", name))
        .with_attributes(COMPONENT_ATTRIBUTES)
        .write_inner_content(body)?;
    Ok(())
}

fn write_xml(input: &UnattendInput<'_>) -> Result<String, UnattendError> {
    let mut writer = Writer::new_with_indent(Vec::new(), b' ', 1);
    write_document(&mut writer, input).map_err(|e| UnattendError::Xml(e.to_string()))?;
    String::from_utf8(writer.into_inner()).map_err(|e| UnattendError::Xml(e.to_string()))
}

fn write_document(writer: &mut Writer<Vec<u8>>, input: &UnattendInput<'_>) -> XmlResult {
    writer.write_event(Event::Decl(BytesDecl::new("1.0", Some("utf-8"), None)))?;
    writer
        .create_element("unattend")
        .with_attribute(("xmlns", "urn:schemas-microsoft-com:unattend"))
        .with_attribute((
            "xmlns:wcm",
            "http://schemas.microsoft.com/WMIConfig/2002/State",
        ))
        .write_inner_content(|writer| {
            writer
                .create_element("settings")
                .with_attribute(("pass", "specialize"))
                .write_inner_content(|writer| write_specialize(writer, input))?;
            writer
                .create_element("settings")
                .with_attribute(("pass", "oobeSystem"))
                .write_inner_content(|writer| write_oobe(writer, input.password))?;
            Ok(())
        })?;
    Ok(())
}

fn write_specialize(writer: &mut Writer<Vec<u8>>, input: &UnattendInput<'_>) -> XmlResult {
    component(writer, "Microsoft-Windows-Shell-Setup", |writer| {
        if is_valid_computer_name(input.machine_name) {
            text_element(writer, "ComputerName", input.machine_name)?;
        }
        text_element(writer, "TimeZone", input.time_zone)
    })?;
    let Some(script) = input.script else {
        return Ok(());
    };
    component(writer, "Microsoft-Windows-Deployment", |writer| {
        writer
            .create_element("RunSynchronous")
            .write_inner_content(|writer| {
                for (index, command) in landing_commands(script).iter().enumerate() {
                    writer
                        .create_element("RunSynchronousCommand")
                        .with_attribute(("wcm:action", "add"))
                        .write_inner_content(|writer| {
                            text_element(writer, "Order", &(index + 1).to_string())?;
                            text_element(writer, "Path", command)?;
                            text_element(writer, "WillReboot", "Never")
                        })?;
                }
                Ok(())
            })?;
        Ok(())
    })
}

/// The locale set in the oobeSystem pass. `SkipMachineOOBE` (deprecated) is not what skips the
/// region and keyboard pages of Windows Server 2022's OOBE: `Microsoft-Windows-International-Core`
/// is, as image builders set it (rwgb/hashicorp.packer.builds
/// `builds/proxmox/windows/server/2019/base/data/unattend.pkrtpl.hcl`, rancher/windows
/// `vsphere-templates/builds/windows/server/2025/data/sysprep_unattend.pkrtpl.hcl`).
pub const OOBE_LOCALE: &str = "en-US";

fn write_oobe(writer: &mut Writer<Vec<u8>>, password: PasswordValue<'_>) -> XmlResult {
    component(writer, "Microsoft-Windows-International-Core", |writer| {
        for element in ["InputLocale", "SystemLocale", "UILanguage", "UserLocale"] {
            text_element(writer, element, OOBE_LOCALE)?;
        }
        Ok(())
    })?;
    component(writer, "Microsoft-Windows-Shell-Setup", |writer| {
        writer
            .create_element("OOBE")
            .write_inner_content(|writer| {
                for hidden in [
                    "HideEULAPage",
                    "HideLocalAccountScreen",
                    "HideOEMRegistrationScreen",
                    "HideOnlineAccountScreens",
                    "HideWirelessSetupInOOBE",
                ] {
                    text_element(writer, hidden, "true")?;
                }
                text_element(writer, "ProtectYourPC", "1")?;
                text_element(writer, "SkipMachineOOBE", "true")?;
                text_element(writer, "SkipUserOOBE", "true")
            })?;
        writer
            .create_element("UserAccounts")
            .write_inner_content(|writer| {
                writer
                    .create_element("AdministratorPassword")
                    .write_inner_content(|writer| match password {
                        PasswordValue::Secret(password) => {
                            text_element(writer, "Value", &obfuscated_password(password))?;
                            text_element(writer, "PlainText", "false")
                        }
                        PasswordValue::Placeholder => {
                            text_element(writer, "Value", PASSWORD_PLACEHOLDER)?;
                            text_element(writer, "PlainText", "true")
                        }
                    })?;
                Ok(())
            })?;
        Ok(())
    })
}

#[cfg(test)]
mod tests;
