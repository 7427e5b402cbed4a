#![no_main]
//! Arbitrary bytes through everything the controller does with a Machine before it calls Prism:
//! YAML or JSON → `Machine` (and `MachineSet`, and the watch's `GuardedMachine`) → typed
//! providerSpec and providerStatus → `RequiredLookups::of` → `plan_vm` with `ResolvedReferences`
//! derived from those lookups (each found, failed or missing as the input says, consistent or
//! contradicting the spec) → `build_request` → unattend.xml / cloud-init; plus the `render`
//! command's function and the MachineSet annotations. Nothing may panic, and:
//! - every validation error names a field under `metadata.` or `providerSpec`;
//! - a Strict plan refers to Prism entities by UUID only;
//! - the unattend.xml is well-formed XML whose `ComputerName` is the Machine name, within
//!   Prism's size limit;
//! - cloud-init user data is valid base64 (and, for Linux, an Ignition config naming the host);
//! - the Administrator password appears in no error, warning or `Debug` output.
//!
//! Short documents also go straight to the quantity parser.
//!
//! Input layout: byte 0 holds flags (format, mode, user data, password), bytes 1..4 seed the
//! lookup outcomes, the rest is the document; a NUL byte in it starts the user data.

use std::collections::{BTreeMap, BTreeSet};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use libfuzzer_sys::fuzz_target;
use nutanix_machine_controller::api::quantity::parse_units;
use nutanix_machine_controller::api::{
    BootType, CLUSTER_ID_LABEL, GuardedMachine, IdentifierType, Machine, MachineSet,
    NutanixMachineProviderConfig, NutanixResourceIdentifier,
};
use nutanix_machine_controller::plan::machine::lifecycle::MachineState;
use nutanix_machine_controller::plan::machineset::annotations::machine_set_annotations;
use nutanix_machine_controller::plan::vm::request::build_request;
use nutanix_machine_controller::plan::vm::resolve::{
    FailureDomain, Lookup, RequiredLookups, ResolutionMode, ResolvedEntity, ResolvedReferences,
    ResolvedSource, ResolvedSubnet,
};
use nutanix_machine_controller::plan::vm::secret::{AdminPassword, UserData};
use nutanix_machine_controller::plan::vm::unattend::{PasswordValue, UNATTEND_BASE64_LIMIT};
use nutanix_machine_controller::plan::vm::spec::ParsedSpec;
use nutanix_machine_controller::plan::vm::validate::{ClaimedAddresses, PlanContext, UnreadUserData, plan_vm};
use nutanix_machine_controller::plan::vm::{EntityRef, GuestPlan};
use nutanix_machine_controller::render::render;
use prism_client::v3::{GpuMode, GpuVendor, HostGpu};
use quick_xml::events::Event;
use serde_json::Value;

/// A password no input contains by chance; it must never show up in errors or `Debug`.
const PASSWORD: &str = "Fz-adm1n!pw#7Q-never-logged";

const POWERSHELL_USER_DATA: &[u8] =
    b"<powershell>\r\nWrite-Output \"a & b <c> ]]> %PATH% ^ |\"\r\n</powershell>\r\n<persist>true</persist>";
const IGNITION_USER_DATA: &[u8] = br#"{"ignition":{"version":"3.2.0"},"storage":{"files":[]}}"#;

/// Deterministic pseudo-randomness per lookup key: the same input always resolves the same way.
struct Seed([u8; 3]);

impl Seed {
    fn pick(&self, key: &str, salt: u8, choices: u32) -> u32 {
        let mut hash: u32 = 0x811c_9dc5;
        for byte in key.bytes().chain(self.0).chain([salt]) {
            hash = (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193);
        }
        hash % choices
    }

    fn uuid(&self, key: &str, salt: u8) -> String {
        format!(
            "{:08x}-0000-4000-8000-{:012x}",
            self.pick(key, salt, u32::MAX),
            u64::from(salt)
        )
    }
}

/// One lookup's outcome: found (as `found` builds it), failed, or not looked up.
fn outcome<T>(seed: &Seed, key: &str, salt: u8, found: impl FnOnce() -> T) -> Option<Lookup<T>> {
    match seed.pick(key, salt, 8) {
        0 => None,
        1 => Some(Lookup::Failed {
            error: format!("2 entities are named {key:?}"),
        }),
        _ => Some(Lookup::Found(found())),
    }
}

fn entities(
    seed: &Seed,
    ids: &BTreeSet<NutanixResourceIdentifier>,
    salt: u8,
) -> BTreeMap<String, Lookup<ResolvedEntity>> {
    ids.iter()
        .filter_map(|id| id.key())
        .filter_map(|key| {
            outcome(seed, key, salt, || ResolvedEntity {
                uuid: seed.uuid(key, salt),
            })
            .map(|lookup| (key.to_owned(), lookup))
        })
        .collect()
}

/// Images, templates or source VMs; a source VM runs on the Machine's cluster, another one, or
/// one Prism did not name (`cluster_uuid` is the Machine's cluster, when it resolved).
fn sources(
    seed: &Seed,
    ids: &BTreeSet<NutanixResourceIdentifier>,
    salt: u8,
    cluster_uuid: Option<&str>,
) -> BTreeMap<String, Lookup<ResolvedSource>> {
    const SIZES: [Option<u64>; 6] = [
        None,
        Some(0),
        Some(1 << 30),
        Some(16 << 30),
        Some(120 << 30),
        Some(u64::MAX),
    ];
    ids.iter()
        .filter_map(|id| id.key())
        .filter_map(|key| {
            outcome(seed, key, salt, || ResolvedSource {
                uuid: seed.uuid(key, salt),
                size_bytes: SIZES[seed.pick(key, salt + 1, 6) as usize],
                boot_type: match seed.pick(key, salt + 2, 5) {
                    0 => None,
                    1 => Some(BootType::Legacy),
                    2 => Some(BootType::Uefi),
                    3 => Some(BootType::SecureBoot),
                    _ => Some(BootType::Unset),
                },
                version_id: (seed.pick(key, salt + 3, 2) == 0).then(|| seed.uuid(key, salt + 3)),
                cluster_uuid: match seed.pick(key, salt + 4, 4) {
                    0 => None,
                    1 => Some(seed.uuid("another cluster", 1)),
                    _ => cluster_uuid.map(str::to_ascii_uppercase),
                },
            })
            .map(|lookup| (key.to_owned(), lookup))
        })
        .collect()
}

/// Failure domains for a spec that names one: the named one (or another name), with the spec's
/// placement or a different one.
fn failure_domains(
    seed: &Seed,
    config: &NutanixMachineProviderConfig,
) -> Option<Vec<FailureDomain>> {
    let reference = config.failure_domain.as_ref()?;
    let key = &reference.name;
    match seed.pick(key, 40, 5) {
        0 => None,
        1 => Some(Vec::new()),
        choice => Some(vec![FailureDomain {
            name: if choice == 2 {
                format!("{key}-other")
            } else {
                key.clone()
            },
            cluster: if choice == 3 {
                NutanixResourceIdentifier::by_name("fd-cluster")
            } else {
                config.cluster.clone()
            },
            subnets: if choice == 3 {
                vec![NutanixResourceIdentifier::by_name("fd-subnet")]
            } else {
                config.subnets.clone()
            },
        }]),
    }
}

fn resolved_references(
    seed: &Seed,
    config: &NutanixMachineProviderConfig,
    infra_id: &str,
) -> ResolvedReferences {
    let domains = failure_domains(seed, config);
    let lookups = RequiredLookups::of(config, infra_id, domains.as_deref());
    let clusters = entities(seed, &lookups.clusters, 1);
    let cluster_uuid = clusters.values().find_map(|lookup| match lookup {
        Lookup::Found(entity) => Some(entity.uuid.clone()),
        Lookup::Failed { .. } => None,
    });
    let subnets = lookups
        .subnets
        .iter()
        .filter_map(|id| id.key())
        .filter_map(|key| {
            outcome(seed, key, 10, || ResolvedSubnet {
                uuid: seed.uuid(key, 10),
                cluster_uuid: match seed.pick(key, 11, 4) {
                    0 => None,
                    1 => Some(seed.uuid("another cluster", 1)),
                    _ => cluster_uuid.clone().map(|uuid| uuid.to_ascii_uppercase()),
                },
                ipam: None,
            })
            .map(|lookup| (key.to_owned(), lookup))
        })
        .collect();
    let categories = lookups.categories.iter().fold(
        BTreeMap::<String, BTreeMap<String, Lookup<bool>>>::new(),
        |mut table, (key, value)| {
            let pair = format!("{key}={value}");
            if let Some(lookup) = outcome(seed, &pair, 20, || seed.pick(&pair, 21, 4) != 0) {
                table
                    .entry(key.clone())
                    .or_default()
                    .insert(value.clone(), lookup);
            }
            table
        },
    );
    let host_gpus = lookups.host_gpus.then(|| {
        let gpus = config.gpus.as_deref().unwrap_or_default();
        let inventory = gpus
            .iter()
            .enumerate()
            .map(|(index, gpu)| {
                let key = format!("gpu{index}");
                HostGpu {
                    name: gpu.name.clone(),
                    device_id: gpu.device_id.map(i64::from),
                    vendor: (seed.pick(&key, 30, 4) != 0).then_some(GpuVendor::Nvidia),
                    mode: (seed.pick(&key, 31, 4) != 0).then_some(GpuMode::PassthroughCompute),
                    status: Some(
                        if seed.pick(&key, 32, 3) == 0 {
                            "USED"
                        } else {
                            "UNUSED"
                        }
                        .to_owned(),
                    ),
                    ..HostGpu::default()
                }
            })
            .collect();
        if seed.pick("gpus", 33, 6) == 0 {
            Lookup::Failed {
                error: "hosts/list answered 500".to_owned(),
            }
        } else {
            Lookup::Found(inventory)
        }
    });
    ResolvedReferences {
        clusters,
        images: sources(seed, &lookups.images, 2, cluster_uuid.as_deref()),
        templates: sources(seed, &lookups.templates, 6, cluster_uuid.as_deref()),
        source_vms: sources(seed, &lookups.source_vms, 14, cluster_uuid.as_deref()),
        subnets,
        projects: entities(seed, &lookups.projects, 3),
        categories,
        host_gpus,
        failure_domains: domains,
    }
}

/// What must hold of a successful plan and the request built from it.
fn check_plan(
    machine: &Machine,
    plan: &nutanix_machine_controller::plan::vm::VmPlan,
    mode: ResolutionMode,
    windows: bool,
) {
    if mode == ResolutionMode::Strict {
        assert!(
            matches!(plan.cluster, EntityRef::Uuid(_)),
            "strict plan names its cluster"
        );
        assert!(
            plan.subnets.iter().all(|s| matches!(s, EntityRef::Uuid(_))),
            "strict plan names a subnet"
        );
    }
    let name = machine.metadata.name.as_deref().unwrap_or_default();
    match &plan.guest {
        GuestPlan::None => {}
        GuestPlan::CloudInit {
            user_data,
            meta_data,
        } => {
            let decoded = STANDARD
                .decode(user_data.expose())
                .expect("cloud-init user data is base64");
            if !windows {
                let ignition: Value =
                    serde_json::from_slice(&decoded).expect("Linux user data is Ignition JSON");
                let files = ignition["storage"]["files"].as_array().expect("files list");
                assert!(
                    files.iter().any(|f| f["path"] == "/etc/hostname"),
                    "Ignition names the host"
                );
            }
            if let Some(meta_data) = meta_data {
                let decoded = STANDARD
                    .decode(meta_data.expose())
                    .expect("meta data is base64");
                let meta: Value = serde_json::from_slice(&decoded).expect("meta data is JSON");
                assert_eq!(meta["hostname"], name);
            }
        }
        GuestPlan::Sysprep(unattend) => {
            let xml = unattend.xml.expose();
            assert!(unattend.to_base64().expose().len() <= UNATTEND_BASE64_LIMIT);
            let mut reader = quick_xml::Reader::from_str(xml);
            let mut depth = 0usize;
            let mut in_computer_name = false;
            loop {
                match reader.read_event().expect("unattend.xml is well-formed") {
                    Event::Start(start) => {
                        depth += 1;
                        in_computer_name = start.name().0 == "ComputerName";
                    }
                    Event::End(_) => {
                        depth = depth.checked_sub(1).expect("balanced tags");
                        in_computer_name = false;
                    }
                    Event::Text(text) if in_computer_name => {
                        let text = text.xml10_content();
                        assert_eq!(text, name, "ComputerName is the Machine name");
                    }
                    Event::Eof => break,
                    _ => {}
                }
            }
            assert_eq!(depth, 0, "every element is closed");
        }
    }
    let request = build_request(plan, "00000000-0000-4000-8000-000000000001");
    let (_, path) = request.endpoint();
    assert!(path.starts_with("/api/"));
    assert!(request.body_json().is_object(), "the body serialises");
    if let Some(follow_up) = request.follow_up() {
        let value = serde_json::to_value(follow_up).expect("follow-up serialises");
        let back = serde_json::from_value(value).expect("follow-up reads back");
        assert_eq!(follow_up, &back);
        let mut input = prism_client::v3::VmIntentInput::default();
        let _ = follow_up.apply(&mut input);
    }
}

/// Fails when `text` carries the password, unless the input itself does (a name or a field
/// holding the password is quoted back in errors legitimately; the fuzzer learns the string from
/// this very comparison and puts it into inputs).
fn check_no_password(text: &str, what: &str, input_has_password: bool) {
    assert!(
        input_has_password || !text.contains(PASSWORD),
        "the Administrator password leaked into {what}"
    );
}

fn run_machine(
    machine: &Machine,
    flags: u8,
    seed: &Seed,
    user_data: Option<&UserData>,
    input_has_password: bool,
) {
    let _ = MachineState::of(machine);
    let _ = machine.provider_status();
    let _ = machine.phase();
    let windows = machine.is_windows();
    let infra_id = machine
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(CLUSTER_ID_LABEL))
        .cloned()
        .unwrap_or_default();
    let resolved = match machine.provider_config() {
        Some(Ok(config)) => {
            // Malformed identifiers are never looked up.
            let lookups = RequiredLookups::of(&config, &infra_id, None);
            for id in lookups.clusters.iter().chain(&lookups.subnets) {
                assert!(matches!(
                    id.type_,
                    IdentifierType::Uuid | IdentifierType::Name
                ));
            }
            resolved_references(seed, &config, &infra_id)
        }
        Some(Err(error)) => {
            assert!(!error.path.is_empty());
            ResolvedReferences::default()
        }
        None => ResolvedReferences::default(),
    };
    let password = AdminPassword::new(PASSWORD).expect("a valid password");
    let mode = if flags & 0b10 == 0 {
        ResolutionMode::Strict
    } else {
        ResolutionMode::Preview
    };
    let context = PlanContext {
        resolved: &resolved,
        mode,
        user_data,
        unread_user_data: if flags & 0b100_0000 == 0 {
            UnreadUserData::Unresolved
        } else {
            UnreadUserData::NotChecked
        },
        admin_password: match (flags >> 4) & 0b11 {
            0 => None,
            1 => Some(PasswordValue::Placeholder),
            _ => Some(PasswordValue::Secret(&password)),
        },
        claims: ClaimedAddresses::NotClaimed,
    };
    match plan_vm(machine, &ParsedSpec::of(machine), &context) {
        Ok(plan) => {
            check_no_password(&format!("{plan:?}"), "the plan's Debug", input_has_password);
            for warning in &plan.warnings {
                check_no_password(warning, "a warning", input_has_password);
            }
            check_plan(machine, &plan, mode, windows);
        }
        Err(errors) => {
            assert!(!errors.0.is_empty(), "an error list is never empty");
            for error in &errors.0 {
                assert!(
                    error.path.starts_with("metadata.") || error.path.starts_with("providerSpec"),
                    "error path {:?} names no field",
                    error.path
                );
                check_no_password(&error.to_string(), "an error", input_has_password);
            }
            let _ = errors.class();
        }
    }
    // The resolve file of `render` has the same shape.
    let json = serde_json::to_string(&resolved).expect("resolved references serialise");
    let back: ResolvedReferences = serde_json::from_str(&json).expect("and read back");
    assert_eq!(back, resolved);
}

fn run(data: &[u8]) {
    let [flags, s0, s1, s2, rest @ ..] = data else {
        return;
    };
    let seed = Seed([*s0, *s1, *s2]);
    let input_has_password = rest
        .windows(PASSWORD.len())
        .any(|window| window == PASSWORD.as_bytes());
    let (document, tail) = match rest.iter().position(|b| *b == 0) {
        Some(at) => (&rest[..at], Some(&rest[at + 1..])),
        None => (rest, None),
    };
    let user_data = match (tail, (flags >> 2) & 0b11) {
        (Some(tail), _) => Some(UserData::new(tail)),
        (None, 0) => None,
        (None, 1) => Some(UserData::new(POWERSHELL_USER_DATA)),
        (None, 2) => Some(UserData::new(IGNITION_USER_DATA)),
        (None, _) => Some(UserData::new(Vec::new())),
    };
    // Quantities are parsed deep inside the pipeline; short inputs also go to the parser
    // directly, so the fuzzer reaches its corner cases (exponents, fractions) sooner.
    if let Ok(text) = std::str::from_utf8(document)
        && text.len() <= 64
    {
        let _ = parse_units(text);
    }
    let yaml = flags & 1 == 0;
    let value: Value = if yaml {
        let Ok(text) = std::str::from_utf8(document) else {
            return;
        };
        if let Ok(rendered) = render(text, user_data.as_ref().map(UserData::expose), None) {
            check_no_password(
                &rendered.request_json,
                "the render output",
                input_has_password,
            );
        }
        match serde_saphyr::from_str(text) {
            Ok(value) => value,
            Err(_) => return,
        }
    } else {
        match serde_json::from_slice(document) {
            Ok(value) => value,
            Err(_) => return,
        }
    };
    let _ = serde_json::from_value::<GuardedMachine>(value.clone());
    if let Ok(set) = serde_json::from_value::<MachineSet>(value.clone()) {
        let _ = machine_set_annotations(&set);
        let _ = set.provider_config();
    }
    if let Ok(machine) = serde_json::from_value::<Machine>(value) {
        run_machine(
            &machine,
            *flags,
            &seed,
            user_data.as_ref(),
            input_has_password,
        );
    }
}

fuzz_target!(|data: &[u8]| run(data));
