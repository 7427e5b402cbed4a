//! The malformed-Machine corpus in `tests/fixtures/malformed/`: one Machine per file (wrong types,
//! missing fields, huge values, unknown enum values, negative numbers, invalid quantities,
//! duplicates, injection attempts in names, time zone and user data), each followed by its
//! user-data Secret as a second YAML document.
//!
//! Line 1 of each file is machine-readable: `# expect: <field path>` names the field the
//! Machine's error must name (the controller's end-to-end test reuses it: that Machine must go
//! Failed naming the field, with no VM created), or `# expect: ok` for an injection attempt that
//! is accepted because its metacharacters are inert. Each file is checked twice:
//! - through the plan layer in Strict mode (what the controller does), against a Prism where
//!   every lookup succeeds, so every error comes from the Machine itself: the expected path must
//!   be among the errors, as *invalid* (the Machine fails; it is not retried);
//! - through the real binary's `render`: exit code 2 (never a panic's 101), with a stderr line
//!   for the expected path.
//!
//! No error message may carry a control character or a bidirectional override (a newline would
//! break "one error per line" in status and logs), nor grow without bound.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use nutanix_machine_controller::api::{CLUSTER_ID_LABEL, Machine, NutanixMachineProviderConfig};
use nutanix_machine_controller::plan::vm::errors::{ErrorClass, ValidationErrors};
use nutanix_machine_controller::plan::vm::resolve::{
    FailureDomain, Lookup, RequiredLookups, ResolutionMode, ResolvedEntity, ResolvedReferences,
    ResolvedSource, ResolvedSubnet,
};
use nutanix_machine_controller::plan::vm::secret::{AdminPassword, UserData};
use nutanix_machine_controller::plan::vm::spec::ParsedSpec;
use nutanix_machine_controller::plan::vm::unattend::{
    ENCODED_SCRIPT_PATH, PasswordValue, landing_commands, powershell_body,
};
use nutanix_machine_controller::plan::vm::validate::{
    ClaimedAddresses, PlanContext, UnreadUserData, plan_vm,
};
use nutanix_machine_controller::plan::vm::{GuestPlan, VmPlan};
use prism_client::v3::{GpuMode, GpuVendor, HostGpu};
use quick_xml::escape::resolve_predefined_entity;
use quick_xml::events::Event;
use serde_json::Value;

const BINARY: &str = env!("CARGO_BIN_EXE_nutanix-machine-controller");

/// Longest error message accepted: a status `errorMessage` must stay readable.
const MAX_MESSAGE_CHARS: usize = 1_000;

/// What a corpus file expects.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Expect {
    /// Rejected, with an invalid-class error at this field path.
    Field(String),
    /// Accepted, with the metacharacters inert.
    Ok,
}

struct Case {
    file: PathBuf,
    expect: Expect,
    machine_yaml: String,
    user_data: Vec<u8>,
}

impl Case {
    fn name(&self) -> String {
        self.file
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned()
    }
}

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/malformed")
}

/// Reads every corpus file: header, Machine document, user-data Secret document.
fn corpus() -> Vec<Case> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(corpus_dir())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|file| {
            let text = std::fs::read_to_string(&file).unwrap();
            let first = text.lines().next().unwrap_or_default();
            let expect = match first.strip_prefix("# expect: ") {
                Some("ok") => Expect::Ok,
                Some(path) => Expect::Field(path.trim().to_owned()),
                None => panic!("{}: line 1 must be `# expect: ...`", file.display()),
            };
            let (machine_yaml, secret_yaml) = text
                .split_once("\n---\n")
                .unwrap_or_else(|| panic!("{}: no user-data Secret document", file.display()));
            let secret: Value = serde_saphyr::from_str(secret_yaml).unwrap();
            let user_data = secret["stringData"]["userData"]
                .as_str()
                .unwrap_or_else(|| panic!("{}: Secret without stringData.userData", file.display()))
                .as_bytes()
                .to_vec();
            Case {
                file,
                expect,
                machine_yaml: machine_yaml.to_owned(),
                user_data,
            }
        })
        .collect()
}

/// A Prism where every lookup the spec needs succeeds: subnets on the Machine's cluster, a 16 GiB
/// image, every category present, a free matching GPU for each one asked for.
fn prism_that_has_everything(
    config: &NutanixMachineProviderConfig,
    infra_id: &str,
) -> ResolvedReferences {
    let domains = config.failure_domain.as_ref().map(|reference| {
        vec![FailureDomain {
            name: reference.name.clone(),
            cluster: config.cluster.clone(),
            subnets: config.subnets.clone(),
        }]
    });
    let lookups = RequiredLookups::of(config, infra_id, domains.as_deref());
    let uuid = |n: usize| format!("00000000-0000-4000-8000-{n:012x}");
    let cluster_uuid = uuid(1);
    let keys = |ids: &std::collections::BTreeSet<_>| -> Vec<String> {
        ids.iter()
            .filter_map(
                |id: &nutanix_machine_controller::api::NutanixResourceIdentifier| {
                    id.key().map(str::to_owned)
                },
            )
            .collect()
    };
    let source = |n: usize| {
        Lookup::Found(ResolvedSource {
            uuid: uuid(n),
            size_bytes: Some(16 << 30),
            boot_type: None,
            version_id: None,
            cluster_uuid: None,
        })
    };
    ResolvedReferences {
        clusters: keys(&lookups.clusters)
            .into_iter()
            .map(|k| {
                (
                    k,
                    Lookup::Found(ResolvedEntity {
                        uuid: cluster_uuid.clone(),
                    }),
                )
            })
            .collect(),
        images: keys(&lookups.images)
            .into_iter()
            .map(|k| (k, source(2)))
            .collect(),
        templates: keys(&lookups.templates)
            .into_iter()
            .map(|k| (k, source(3)))
            .collect(),
        source_vms: keys(&lookups.source_vms)
            .into_iter()
            .map(|k| (k, source(4)))
            .collect(),
        subnets: keys(&lookups.subnets)
            .into_iter()
            .enumerate()
            .map(|(i, k)| {
                let subnet = ResolvedSubnet {
                    uuid: uuid(100 + i),
                    cluster_uuid: Some(cluster_uuid.clone()),
                    ipam: None,
                };
                (k, Lookup::Found(subnet))
            })
            .collect(),
        projects: keys(&lookups.projects)
            .into_iter()
            .map(|k| (k, Lookup::Found(ResolvedEntity { uuid: uuid(5) })))
            .collect(),
        categories: lookups
            .categories
            .iter()
            .fold(BTreeMap::new(), |mut table, (key, value)| {
                table
                    .entry(key.clone())
                    .or_insert_with(BTreeMap::new)
                    .insert(value.clone(), Lookup::Found(true));
                table
            }),
        host_gpus: lookups.host_gpus.then(|| {
            Lookup::Found(
                config
                    .gpus
                    .iter()
                    .flatten()
                    .map(|gpu| HostGpu {
                        name: gpu.name.clone(),
                        device_id: gpu.device_id.map(i64::from),
                        vendor: Some(GpuVendor::Nvidia),
                        mode: Some(GpuMode::PassthroughCompute),
                        status: Some("UNUSED".to_owned()),
                        ..HostGpu::default()
                    })
                    .collect(),
            )
        }),
        failure_domains: domains,
    }
}

/// Plans the case's Machine as the controller would (Strict, user data and a password given).
fn plan(case: &Case) -> Result<VmPlan, ValidationErrors> {
    let document: Value = serde_saphyr::from_str(&case.machine_yaml)
        .unwrap_or_else(|e| panic!("{}: not YAML: {e}", case.name()));
    let machine: Machine = serde_json::from_value(document)
        .unwrap_or_else(|e| panic!("{}: not a Machine object: {e}", case.name()));
    let infra_id = machine
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(CLUSTER_ID_LABEL))
        .cloned()
        .unwrap_or_default();
    let resolved = match machine.provider_config() {
        Some(Ok(config)) => prism_that_has_everything(&config, &infra_id),
        Some(Err(_)) | None => ResolvedReferences::default(),
    };
    let user_data = UserData::new(case.user_data.clone());
    let password = AdminPassword::new("Corpus-Pa55word!").unwrap();
    let context = PlanContext {
        resolved: &resolved,
        mode: ResolutionMode::Strict,
        user_data: Some(&user_data),
        unread_user_data: UnreadUserData::Unresolved,
        admin_password: Some(PasswordValue::Secret(&password)),
        claims: ClaimedAddresses::NotClaimed,
    };
    plan_vm(&machine, &ParsedSpec::of(&machine), &context)
}

/// Why `message` is not a clean one-line error, if it is not.
fn unclean(message: &str) -> Option<String> {
    if let Some(c) = message.chars().find(|c| {
        c.is_control()
            || ('\u{202a}'..='\u{202e}').contains(c)
            || ('\u{2066}'..='\u{2069}').contains(c)
    }) {
        return Some(format!("contains {c:?}"));
    }
    let length = message.chars().count();
    (length > MAX_MESSAGE_CHARS).then(|| format!("is {length} characters long"))
}

/// The unattend.xml is well-formed, has no element the Machine could have smuggled in, and
/// carries the user-data script only as base64 chunks in fixed command forms, which decode back
/// to the script byte for byte.
fn assert_sysprep_inert(name: &str, xml: &str, user_data: &[u8]) {
    let script = powershell_body(user_data).unwrap();
    let mut reader = quick_xml::Reader::from_str(xml);
    // The text of the `<Path>` element being read; quick-xml reports `&gt;` and friends as
    // separate reference events.
    let mut path: Option<String> = None;
    let mut paths = Vec::new();
    loop {
        match reader
            .read_event()
            .unwrap_or_else(|e| panic!("{name}: unattend.xml: {e}"))
        {
            Event::Start(start) => {
                let element = start.name().0;
                assert!(
                    !["AutoLogon", "FirstLogonCommands", "LogonCommands"].contains(&element),
                    "{name}: unattend.xml has {element}"
                );
                path = (element == "Path").then(String::new);
            }
            Event::Text(text) => {
                if let Some(path) = &mut path {
                    path.push_str(&text.xml10_content());
                }
            }
            Event::GeneralRef(reference) => {
                if let Some(path) = &mut path {
                    let entity = reference.xml10_content();
                    let character = resolve_predefined_entity(&entity)
                        .unwrap_or_else(|| panic!("{name}: unexpected entity &{entity};"));
                    path.push_str(character);
                }
            }
            Event::End(_) => paths.extend(path.take()),
            Event::Eof => break,
            _ => {}
        }
    }
    assert_eq!(
        paths,
        landing_commands(script),
        "{name}: the commands are the fixed forms"
    );
    let prefix = "cmd /c (echo ";
    let suffix = format!(")>>{ENCODED_SCRIPT_PATH}");
    let mut encoded = String::new();
    for chunk in paths
        .iter()
        .filter_map(|p| p.strip_prefix(prefix)?.strip_suffix(suffix.as_str()))
    {
        assert!(
            chunk
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"+/=".contains(&b)),
            "{name}: a script chunk outside the base64 alphabet: {chunk:?}"
        );
        encoded.push_str(chunk);
    }
    assert_eq!(
        STANDARD.decode(encoded).unwrap(),
        script,
        "{name}: the script round-trips"
    );
}

#[test]
fn the_corpus_is_large_and_machine_readable() {
    let cases = corpus();
    let rejected = cases.iter().filter(|c| c.expect != Expect::Ok).count();
    assert!(rejected >= 30, "only {rejected} malformed Machines");
    for case in &cases {
        if let Expect::Field(path) = &case.expect {
            assert!(
                path.starts_with("metadata.") || path.starts_with("providerSpec"),
                "{}: {path} is not a field path",
                case.name()
            );
        }
    }
}

#[test]
fn each_malformed_machine_is_rejected_naming_its_field() {
    let mut failures = Vec::new();
    for case in corpus() {
        let name = case.name();
        let outcome = std::panic::catch_unwind(|| plan(&case));
        let result = match outcome {
            Ok(result) => result,
            Err(_) => {
                failures.push(format!("{name}: the plan layer panicked"));
                continue;
            }
        };
        match (&case.expect, result) {
            (Expect::Field(path), Err(errors)) => {
                for error in &errors.0 {
                    if let Some(problem) = unclean(&error.message) {
                        failures.push(format!("{name}: the message for {} {problem}", error.path));
                    }
                }
                if !errors
                    .0
                    .iter()
                    .any(|e| &e.path == path && e.class == ErrorClass::Invalid)
                {
                    failures.push(format!("{name}: no invalid error at {path}; got {errors}"));
                }
            }
            (Expect::Field(path), Ok(_)) => {
                failures.push(format!("{name}: accepted, but {path} is wrong"))
            }
            (Expect::Ok, Err(errors)) => failures.push(format!("{name}: rejected: {errors}")),
            (Expect::Ok, Ok(plan)) => {
                if let GuestPlan::Sysprep(unattend) = &plan.guest {
                    assert_sysprep_inert(&name, unattend.xml.expose(), &case.user_data);
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn render_exits_2_naming_the_field_and_never_panics() {
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for case in corpus() {
        let name = case.name();
        let machine = dir.path().join("machine.yaml");
        let user_data = dir.path().join("user-data");
        std::fs::write(&machine, &case.machine_yaml).unwrap();
        std::fs::write(&user_data, &case.user_data).unwrap();
        let output = Command::new(BINARY)
            .arg("render")
            .arg("--machine")
            .arg(&machine)
            .arg("--user-data")
            .arg(&user_data)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        let stdout = String::from_utf8_lossy(&output.stdout);
        match &case.expect {
            Expect::Field(path) => {
                if output.status.code() != Some(2) {
                    failures.push(format!(
                        "{name}: exit {:?}, not 2: {stderr}",
                        output.status.code()
                    ));
                    continue;
                }
                let lines: Vec<&str> = stderr
                    .lines()
                    .filter(|l| !l.starts_with("warning: "))
                    .collect();
                if !lines.iter().any(|l| l.starts_with(&format!("{path}: "))) {
                    failures.push(format!("{name}: no line for {path} in: {stderr}"));
                }
                if let Some(line) = lines
                    .iter()
                    .find(|l| !l.ends_with("(invalid)") && !l.ends_with("(unresolved)"))
                {
                    failures.push(format!("{name}: not one error per line: {line:?}"));
                }
            }
            Expect::Ok => {
                if !output.status.success() {
                    failures.push(format!("{name}: exit {:?}: {stderr}", output.status.code()));
                    continue;
                }
                let json = stdout.split("<?xml").next().unwrap_or_default();
                let request: Value = serde_json::from_str(json)
                    .unwrap_or_else(|e| panic!("{name}: the request is not JSON: {e}"));
                // Every category value reaches the body unchanged, as a JSON string.
                let machine: Value = serde_saphyr::from_str(&case.machine_yaml).unwrap();
                for category in machine["spec"]["providerSpec"]["value"]["categories"]
                    .as_array()
                    .into_iter()
                    .flatten()
                {
                    let key = category["key"].as_str().unwrap();
                    assert_eq!(
                        request["body"]["metadata"]["categories"][key], category["value"],
                        "{name}: category {key}"
                    );
                }
                if let Some(at) = stdout.find("<?xml") {
                    assert_sysprep_inert(&name, stdout[at..].trim_end(), &case.user_data);
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
