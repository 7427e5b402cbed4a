//! The unattend.xml is parsed back and its commands run through an interpreter of exactly the
//! command forms [`landing_commands`] emits, with cmd.exe's rules for the characters that can
//! appear in them; anything else is refused, so a change to the forms fails here first.

use std::collections::{BTreeMap, BTreeSet};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use proptest::prelude::*;
use serde::Deserialize;

use super::*;

// ---------------------------------------------------------------------------------------------
// The XML, parsed back.

#[derive(Debug, Deserialize)]
struct Document {
    #[serde(rename = "settings")]
    settings: Vec<Settings>,
}

#[derive(Debug, Deserialize)]
struct Settings {
    #[serde(rename = "@pass")]
    pass: String,
    #[serde(rename = "component", default)]
    components: Vec<Component>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Component {
    #[serde(rename = "@name")]
    name: String,
    computer_name: Option<String>,
    time_zone: Option<String>,
    run_synchronous: Option<RunSynchronous>,
    user_accounts: Option<UserAccounts>,
    #[serde(rename = "OOBE")]
    oobe: Option<BTreeMap<String, String>>,
    input_locale: Option<String>,
    system_locale: Option<String>,
    #[serde(rename = "UILanguage")]
    ui_language: Option<String>,
    user_locale: Option<String>,
}

#[derive(Debug, Deserialize)]
struct RunSynchronous {
    #[serde(rename = "RunSynchronousCommand")]
    commands: Vec<RunSynchronousCommand>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct RunSynchronousCommand {
    order: u32,
    path: String,
    will_reboot: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct UserAccounts {
    administrator_password: PasswordElement,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct PasswordElement {
    value: String,
    plain_text: String,
}

fn parse(xml: &str) -> Document {
    quick_xml::de::from_str(xml).unwrap()
}

fn component<'a>(document: &'a Document, pass: &str, name: &str) -> Option<&'a Component> {
    document
        .settings
        .iter()
        .filter(|s| s.pass == pass)
        .flat_map(|s| &s.components)
        .find(|c| c.name == name)
}

/// The commands in the order Windows runs them (by `Order`), checked to be numbered 1..n.
fn commands(document: &Document) -> Vec<String> {
    let Some(run) = component(document, "specialize", "Microsoft-Windows-Deployment")
        .and_then(|c| c.run_synchronous.as_ref())
    else {
        return Vec::new();
    };
    let mut commands: Vec<&RunSynchronousCommand> = run.commands.iter().collect();
    commands.sort_by_key(|c| c.order);
    for (index, command) in commands.iter().enumerate() {
        assert_eq!(command.order as usize, index + 1, "Order values are 1..n");
        assert_eq!(command.will_reboot, "Never");
    }
    commands.into_iter().map(|c| c.path.clone()).collect()
}

// ---------------------------------------------------------------------------------------------
// A Windows machine that understands exactly the emitted command forms.

#[derive(Debug, Default)]
struct Windows {
    /// Lower-cased paths: Windows paths are case-insensitive.
    directories: BTreeSet<String>,
    files: BTreeMap<String, Vec<u8>>,
}

/// Characters cmd.exe treats specially on a command line (with delayed expansion off, `!` is
/// literal, but it is refused too so that the model stays small).
const CMD_SPECIAL: &[char] = &['&', '|', '<', '>', '^', '(', ')', '%', '!', '"'];

const POWERSHELL_PREFIX: &str =
    "powershell.exe -NoProfile -NonInteractive -ExecutionPolicy Bypass -Command \"";

impl Windows {
    fn new() -> Self {
        let mut windows = Self::default();
        windows.directories.insert(r"c:\windows".into());
        windows.directories.insert(r"c:\windows\setup".into());
        windows
    }

    fn key(path: &str) -> String {
        path.to_ascii_lowercase()
    }

    fn parent_exists(&self, path: &str) -> Result<(), String> {
        let (parent, _) = path
            .rsplit_once('\\')
            .ok_or_else(|| format!("not a path: {path}"))?;
        if self.directories.contains(&Self::key(parent)) {
            Ok(())
        } else {
            Err(format!(
                "the system cannot find the path specified: {parent}"
            ))
        }
    }

    /// A path operand: plain characters only (no spaces, no cmd specials).
    fn path_operand(path: &str) -> Result<&str, String> {
        if path.is_empty() || path.contains(CMD_SPECIAL) || path.contains(char::is_whitespace) {
            return Err(format!("path operand outside the model: {path:?}"));
        }
        Ok(path)
    }

    fn run(&mut self, command: &str) -> Result<(), String> {
        if command.chars().count() > COMMAND_LIMIT {
            return Err(format!("command longer than {COMMAND_LIMIT} characters"));
        }
        if let Some(body) = command.strip_prefix("cmd /c ") {
            self.run_cmd(body)
        } else if let Some(rest) = command.strip_prefix(POWERSHELL_PREFIX) {
            let expression = rest
                .strip_suffix('"')
                .ok_or("unterminated -Command string")?;
            self.run_decode(expression)
        } else {
            Err(format!("unknown command form: {command}"))
        }
    }

    fn run_cmd(&mut self, body: &str) -> Result<(), String> {
        if let Some(rest) = body.strip_prefix("if not exist ") {
            let (dir, made) = rest.split_once(" mkdir ").ok_or("unknown if form")?;
            if dir != made {
                return Err("if/mkdir name different directories".into());
            }
            let dir = Self::path_operand(dir)?;
            self.parent_exists(dir)?;
            self.directories.insert(Self::key(dir));
            return Ok(());
        }
        if let Some(path) = body.strip_prefix("type nul>") {
            let path = Self::path_operand(path)?;
            self.parent_exists(path)?;
            self.files.insert(Self::key(path), Vec::new());
            return Ok(());
        }
        if let Some(rest) = body.strip_prefix("(echo ") {
            // `(echo TEXT)>>PATH` appends, `(echo TEXT)>PATH` replaces. The text ends at the
            // first `)`: cmd closes the block there.
            let close = rest.find(')').ok_or("unclosed block")?;
            let (text, redirect) = (&rest[..close], &rest[close + 1..]);
            let (append, path) = if let Some(path) = redirect.strip_prefix(">>") {
                (true, path)
            } else if let Some(path) = redirect.strip_prefix('>') {
                (false, path)
            } else {
                return Err(format!("unknown redirect: {redirect:?}"));
            };
            let path = Self::path_operand(path)?;
            let line = echo_output(text)?;
            self.parent_exists(path)?;
            let file = self.files.entry(Self::key(path)).or_default();
            if !append {
                file.clear();
            }
            file.extend_from_slice(&line);
            return Ok(());
        }
        Err(format!("unknown cmd form: {body}"))
    }

    /// `[IO.File]::WriteAllBytes('OUT',[Convert]::FromBase64String([IO.File]::ReadAllText('IN')))`
    fn run_decode(&mut self, expression: &str) -> Result<(), String> {
        let rest = expression
            .strip_prefix("[IO.File]::WriteAllBytes('")
            .ok_or("unknown expression")?;
        let (output, rest) = rest.split_once("',").ok_or("unknown expression")?;
        let rest = rest
            .strip_prefix("[Convert]::FromBase64String([IO.File]::ReadAllText('")
            .ok_or("unknown expression")?;
        let input = rest.strip_suffix("')))").ok_or("unknown expression")?;
        let text = self
            .files
            .get(&Self::key(input))
            .ok_or_else(|| format!("file not found: {input}"))?;
        let text = std::str::from_utf8(text).map_err(|_| "ReadAllText: not UTF-8")?;
        let bytes = dotnet_from_base64_string(text)?;
        self.parent_exists(output)?;
        self.files.insert(Self::key(output), bytes);
        Ok(())
    }

    fn file(&self, path: &str) -> Option<&[u8]> {
        self.files.get(&Self::key(path)).map(Vec::as_slice)
    }
}

/// What `echo TEXT` writes, under cmd.exe's rules for the text this model admits.
fn echo_output(text: &str) -> Result<Vec<u8>, String> {
    if let Some(c) = text.chars().find(|c| CMD_SPECIAL.contains(c)) {
        return Err(format!("echo text has cmd special character {c:?}"));
    }
    if !text
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "+/= -.\\:_".contains(c))
    {
        return Err(format!("echo text outside the model: {text:?}"));
    }
    if text.trim().is_empty() {
        return Err("`echo` with no text prints the echo state".into());
    }
    if text.eq_ignore_ascii_case("on") || text.eq_ignore_ascii_case("off") {
        return Err("`echo on`/`echo off` switch echoing instead of printing".into());
    }
    if text.starts_with("/?") {
        return Err("`echo /?` prints help".into());
    }
    Ok(format!("{text}\r\n").into_bytes())
}

/// `Convert.FromBase64String`: white space (space, tab, CR, LF) is skipped; the rest must be
/// whole groups of four with correct padding.
fn dotnet_from_base64_string(text: &str) -> Result<Vec<u8>, String> {
    let compact: String = text
        .chars()
        .filter(|c| !matches!(c, ' ' | '\t' | '\r' | '\n'))
        .collect();
    if !compact.len().is_multiple_of(4) {
        return Err("FormatException: not a multiple of 4 characters".into());
    }
    STANDARD
        .decode(compact)
        .map_err(|e| format!("FormatException: {e}"))
}

// ---------------------------------------------------------------------------------------------
// Rendering and landing.

const NAME: &str = "winworker-abcde";

fn password() -> AdminPassword {
    AdminPassword::new("Ex4mple-Passw0rd!xyz").unwrap()
}

fn input<'a>(script: Option<&'a [u8]>, password: &'a AdminPassword) -> UnattendInput<'a> {
    UnattendInput {
        machine_name: NAME,
        time_zone: "UTC",
        script,
        password: PasswordValue::Secret(password),
    }
}

#[test]
fn debug_of_the_input_shows_neither_the_script_nor_the_password() {
    let password = password();
    let script = b"$token = 'Scr1pt-Secret-Value'";
    let shown = format!("{:?}", input(Some(script), &password));
    assert!(!shown.contains("Scr1pt-Secret-Value"), "{shown}");
    assert!(!shown.contains("Ex4mple-Passw0rd!xyz"), "{shown}");
    // Nor as the bytes a derived Debug of `&[u8]` prints.
    assert!(!shown.contains(&format!("{:?}", &script[..4])), "{shown}");
    assert!(shown.contains(NAME), "{shown}");
    assert!(
        shown.contains(&format!("<{} bytes redacted>", script.len())),
        "{shown}"
    );
    assert!(format!("{:?}", input(None, &password)).contains("script: None"));
}

/// Renders, parses back and runs the commands; returns what lands at SCRIPT_PATH.
fn land(script: &[u8]) -> Vec<u8> {
    let password = password();
    let unattend = render_unattend(&input(Some(script), &password)).unwrap();
    let document = parse(unattend.xml.expose());
    let mut windows = Windows::new();
    for command in commands(&document) {
        windows
            .run(&command)
            .unwrap_or_else(|e| panic!("{e}\n in: {command}"));
    }
    assert_eq!(
        windows.file(SETUP_COMPLETE_PATH),
        Some(format!("{LAUNCHER}\r\n").as_bytes()),
        "SetupComplete.cmd launches the script"
    );
    windows
        .file(SCRIPT_PATH)
        .expect("the script landed")
        .to_vec()
}

/// A script as long as WMCO's user data with an RSA-4096 key (about 2.6 KB of PowerShell plus a
/// 740-byte key line, rounded up), with every byte value present.
const WMCO_SCRIPT_LEN: usize = 4096;

#[test]
fn an_empty_script_lands_as_an_empty_file() {
    assert_eq!(land(b""), b"");
}

#[test]
fn a_one_byte_script_lands() {
    assert_eq!(land(b"x"), b"x");
    assert_eq!(land(&[0xff]), [0xff]);
}

#[test]
fn a_wmco_sized_script_lands_byte_for_byte() {
    let script: Vec<u8> = (0..WMCO_SCRIPT_LEN).map(|i| (i * 7 % 256) as u8).collect();
    assert_eq!(land(&script), script);
}

#[test]
fn the_largest_script_that_fits_lands_and_one_byte_more_is_refused() {
    let password = password();
    let max = max_script_len(&input(None, &password));
    assert!(
        max > WMCO_SCRIPT_LEN * 3 / 2,
        "room for WMCO's script to grow by half, got {max}"
    );

    let script: Vec<u8> = (0..max).map(|i| (i * 13 % 251) as u8).collect();
    assert_eq!(land(&script), script);
    let xml_len = render_unattend(&input(Some(&script), &password))
        .unwrap()
        .xml
        .expose()
        .len();
    assert!(base64_len(xml_len) <= UNATTEND_BASE64_LIMIT);

    let too_long = vec![b'a'; max + 1];
    let error = render_unattend(&input(Some(&too_long), &password)).unwrap_err();
    let UnattendError::TooLarge {
        script_bytes,
        max_script_bytes,
        base64_len,
    } = error.clone()
    else {
        panic!("expected TooLarge, got {error:?}");
    };
    assert_eq!((script_bytes, max_script_bytes), (max + 1, max));
    assert!(base64_len > UNATTEND_BASE64_LIMIT);
    let message = error.to_string();
    assert!(
        message.contains(&format!("{} bytes", max + 1))
            && message.contains(&format!("{max} bytes")),
        "{message}"
    );
}

#[test]
fn every_command_fits_windows_limit_and_chunks_are_multiples_of_four() {
    assert_eq!(CHUNK_LEN % 4, 0);
    let script = vec![b'z'; 5000];
    let commands = landing_commands(&script);
    assert!(commands.iter().all(|c| c.chars().count() <= COMMAND_LIMIT));
    let longest = commands
        .iter()
        .map(|c| c.chars().count())
        .max()
        .unwrap_or(0);
    assert!(
        longest > COMMAND_LIMIT - 4,
        "chunks use the room there is: longest {longest}"
    );
}

#[test]
fn the_interpreter_refuses_forms_cmd_would_misread() {
    let mut windows = Windows::new();
    windows
        .run(&format!(
            "cmd /c if not exist {SCRIPTS_DIR} mkdir {SCRIPTS_DIR}"
        ))
        .unwrap();
    // `echo abc1>>file`: cmd takes `1>>` as a redirect of stream 1.
    assert!(
        windows
            .run(&format!("cmd /c echo abc1>>{ENCODED_SCRIPT_PATH}"))
            .is_err()
    );
    assert!(
        windows
            .run(&format!("cmd /c (echo a&b)>>{ENCODED_SCRIPT_PATH}"))
            .is_err()
    );
    assert!(
        windows
            .run(&format!("cmd /c (echo OFF)>>{ENCODED_SCRIPT_PATH}"))
            .is_err()
    );
    assert!(
        windows
            .run(&format!("cmd /c (echo 50%)>>{ENCODED_SCRIPT_PATH}"))
            .is_err()
    );
    assert!(
        windows
            .run(&format!("cmd /c (echo )>>{ENCODED_SCRIPT_PATH}"))
            .is_err()
    );
    assert!(
        windows
            .run(&format!(
                "cmd /c (echo {})>>{ENCODED_SCRIPT_PATH}",
                "A".repeat(300)
            ))
            .is_err()
    );
    assert!(dotnet_from_base64_string("QQ=").is_err());
    assert_eq!(dotnet_from_base64_string("QQ\r\n==\r\n").unwrap(), b"A");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn any_script_lands_byte_for_byte(script in proptest::collection::vec(any::<u8>(), 0..3000)) {
        prop_assert_eq!(land(&script), script);
    }
}

// ---------------------------------------------------------------------------------------------
// The rest of the document.

#[test]
fn computer_name_is_set_only_when_windows_accepts_it() {
    let password = password();
    let unattend = render_unattend(&input(None, &password)).unwrap();
    let document = parse(unattend.xml.expose());
    let shell = component(&document, "specialize", "Microsoft-Windows-Shell-Setup").unwrap();
    assert_eq!(shell.computer_name.as_deref(), Some(NAME));
    assert_eq!(shell.time_zone.as_deref(), Some("UTC"));
    assert!(unattend.warnings.is_empty());

    let long = UnattendInput {
        machine_name: "ocp-7x2kq-worker-0-abcde",
        ..input(None, &password)
    };
    let unattend = render_unattend(&long).unwrap();
    let document = parse(unattend.xml.expose());
    let shell = component(&document, "specialize", "Microsoft-Windows-Shell-Setup").unwrap();
    assert_eq!(shell.computer_name, None);
    assert_eq!(unattend.warnings.len(), 1);
    assert!(
        unattend.warnings[0].contains("WMCO renames"),
        "{}",
        unattend.warnings[0]
    );
}

#[test]
fn computer_name_rules() {
    for good in ["a", "win-1", "WINWORKER-ABCDE", "123a"] {
        assert!(is_valid_computer_name(good), "{good}");
    }
    for bad in [
        "",
        "winworker-abcdef",
        "-win",
        "win-",
        "1234",
        "win.x",
        "win_x",
        "wïn",
    ] {
        assert!(!is_valid_computer_name(bad), "{bad}");
    }
}

#[test]
fn oobe_is_skipped_and_the_password_is_obfuscated_not_plain() {
    let password = password();
    let unattend = render_unattend(&input(Some(b"Write-Host hi"), &password)).unwrap();
    let xml = unattend.xml.expose();
    assert!(
        !xml.contains(password.expose()),
        "the plain password never appears"
    );
    assert!(!xml.contains("AutoLogon"));
    let document = parse(xml);
    let shell = component(&document, "oobeSystem", "Microsoft-Windows-Shell-Setup").unwrap();
    let oobe = shell.oobe.as_ref().unwrap();
    assert_eq!(
        oobe.get("SkipMachineOOBE").map(String::as_str),
        Some("true")
    );
    assert_eq!(oobe.get("SkipUserOOBE").map(String::as_str), Some("true"));
    assert_eq!(oobe.get("HideEULAPage").map(String::as_str), Some("true"));
    // The locale is what skips the region and keyboard pages of Windows Server 2022's OOBE.
    let international = component(
        &document,
        "oobeSystem",
        "Microsoft-Windows-International-Core",
    )
    .unwrap();
    for value in [
        &international.input_locale,
        &international.system_locale,
        &international.ui_language,
        &international.user_locale,
    ] {
        assert_eq!(value.as_deref(), Some("en-US"));
    }
    let element = &shell.user_accounts.as_ref().unwrap().administrator_password;
    assert_eq!(element.plain_text, "false");
    let utf16 = STANDARD.decode(&element.value).unwrap();
    let units: Vec<u16> = utf16
        .chunks_exact(2)
        .map(|p| u16::from_le_bytes([p[0], p[1]]))
        .collect();
    assert_eq!(
        String::from_utf16(&units).unwrap(),
        format!("{}AdministratorPassword", password.expose())
    );
    assert!(
        !format!("{unattend:?}").contains(&element.value),
        "Debug redacts the XML"
    );
}

#[test]
fn placeholder_password_is_visible_text_for_previews() {
    let unattend = render_unattend(&UnattendInput {
        machine_name: NAME,
        time_zone: "W. Europe Standard Time",
        script: None,
        password: PasswordValue::Placeholder,
    })
    .unwrap();
    let document = parse(unattend.xml.expose());
    let shell = component(&document, "oobeSystem", "Microsoft-Windows-Shell-Setup").unwrap();
    let element = &shell.user_accounts.as_ref().unwrap().administrator_password;
    assert_eq!(
        (element.value.as_str(), element.plain_text.as_str()),
        (PASSWORD_PLACEHOLDER, "true")
    );
    assert!(
        component(&document, "specialize", "Microsoft-Windows-Deployment").is_none(),
        "no script, no commands"
    );
}

#[test]
fn powershell_body_is_taken_byte_for_byte() {
    let user_data = b"<powershell>\r\nWrite-Host 'a<b'\n</powershell>\n<persist>true</persist>\n";
    assert_eq!(
        powershell_body(user_data).unwrap(),
        b"\r\nWrite-Host 'a<b'\n"
    );
    assert_eq!(
        powershell_body(b"<PowerShell>x</PowerShell>").unwrap(),
        b"x"
    );
    assert_eq!(powershell_body(b"<powershell></powershell>").unwrap(), b"");
    assert_eq!(
        powershell_body(b"Write-Host hi"),
        Err(UnattendError::NoPowerShellBlock)
    );
    assert_eq!(
        powershell_body(b"<powershell>x"),
        Err(UnattendError::UnclosedPowerShellBlock)
    );
    assert_eq!(
        powershell_body(b"<powershell>a</powershell><powershell>b</powershell>"),
        Err(UnattendError::SeveralPowerShellBlocks(2))
    );
}
