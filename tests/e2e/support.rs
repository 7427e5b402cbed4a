//! Shared by the end-to-end tests: the world with prism-mock's test delays and the controller
//! started from this package's `e2e-controller` binary, and readers of what reached the VMs.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use kube::ResourceExt;
use nutanix_machine_controller::api::Machine;
use sandbox::real_cluster::{self, Binaries};
use sandbox::world::{
    self, ControllerCommand, LINUX_USER_DATA_MARKER, WINDOWS_USER_DATA_MARKER, World, WorldOptions,
};
use serde_json::Value;

/// How long one wait may take: generous, the machine is shared.
pub const TIMEOUT: Duration = Duration::from_secs(90);
/// The subnet of prism-mock's seed (`vm-network`).
pub const VM_NETWORK: (Ipv4Addr, u8) = (Ipv4Addr::new(10, 40, 0, 0), 20);

/// The world as the tests run it: prism-mock's test delays, short controller intervals, the
/// controller at trace level (so the secrets check sees everything), progress on stderr (shown
/// when a test fails). With `E2E_WORK_DIR` set, the kubeconfig and the controller's log are kept
/// in `$E2E_WORK_DIR/<test>` (named by `test`).
pub fn options(test: &str) -> WorldOptions {
    let mut options = WorldOptions::tests(ControllerCommand::binary(env!(
        "CARGO_BIN_EXE_e2e-controller"
    )));
    options.progress = Some(Arc::new(|line: &str| eprintln!("{line}")));
    options.work_dir = std::env::var_os("E2E_WORK_DIR").map(|dir| PathBuf::from(dir).join(test));
    options
}

/// The real control plane's build (`REAL_CLUSTER_DIR`, what `hack/real-cluster/build.sh`
/// prints), or `None` with a message saying the test is skipped; without it a test fails when
/// `REAL_CLUSTER_REQUIRED` is set (CI sets both).
pub fn real_control_plane() -> Option<Binaries> {
    let binaries = Binaries::from_env();
    match &binaries {
        Some(binaries) => eprintln!("real control plane:\n{}", binaries.versions()),
        None => {
            assert!(
                std::env::var_os("REAL_CLUSTER_REQUIRED").is_none(),
                "REAL_CLUSTER_REQUIRED is set but {} is not: run hack/real-cluster/build.sh",
                real_cluster::DIR_VARIABLE
            );
            eprintln!(
                "skipped: {} is not set (hack/real-cluster/build.sh prints it)",
                real_cluster::DIR_VARIABLE
            );
        }
    }
    binaries
}

pub async fn start(options: WorldOptions) -> World {
    World::start(options).await.expect("the world starts")
}

pub fn in_network(ip: &str, (network, prefix): (Ipv4Addr, u8)) -> bool {
    let Ok(ip) = ip.parse::<Ipv4Addr>() else {
        return false;
    };
    let mask = u32::MAX << (32 - u32::from(prefix));
    u32::from(ip) & mask == u32::from(network) & mask
}

/// The Machine's addresses of one type, in order.
pub fn addresses(machine: &Machine, type_: &str) -> Vec<String> {
    machine
        .status
        .as_ref()
        .map(|s| {
            s.addresses
                .iter()
                .filter(|a| a.type_ == type_)
                .map(|a| a.address.clone())
                .collect()
        })
        .unwrap_or_default()
}

/// The VM UUID of a Machine's providerID (`nutanix://<uuid>`).
pub fn vm_uuid(machine: &Machine) -> String {
    machine
        .spec
        .provider_id
        .as_deref()
        .and_then(|p| p.strip_prefix("nutanix://"))
        .unwrap_or_else(|| panic!("Machine {} has no nutanix providerID", machine.name_any()))
        .to_owned()
}

/// The script a Sysprep unattend.xml lands on the VM: the base64 chunks its `RunSynchronous`
/// commands append to `user-data.b64`, in order, decoded (what the PowerShell step does).
pub fn landed_script(unattend_xml: &str) -> Vec<u8> {
    const APPEND: &str = "cmd /c (echo ";
    const INTO: &str = ")&gt;&gt;C:\\Windows\\Setup\\Scripts\\user-data.b64";
    let encoded: String = unattend_xml
        .split("<Path>")
        .skip(1)
        .filter_map(|rest| rest.split_once("</Path>").map(|(path, _)| path))
        .filter_map(|path| path.strip_prefix(APPEND)?.strip_suffix(INTO))
        .collect();
    STANDARD.decode(encoded).expect("the chunks are base64")
}

/// The text of the first `<name>` element.
pub fn element<'x>(xml: &'x str, name: &str) -> Option<&'x str> {
    let open = format!("<{name}>");
    let start = xml.find(&open)? + open.len();
    let end = xml[start..].find('<')?;
    Some(&xml[start..start + end])
}

/// The Administrator password of an unattend.xml: Windows stores base64 of the UTF-16LE of the
/// password followed by `AdministratorPassword`.
pub fn admin_password(unattend_xml: &str) -> String {
    let section = &unattend_xml[unattend_xml
        .find("<AdministratorPassword>")
        .expect("an AdministratorPassword")..];
    let bytes = STANDARD
        .decode(element(section, "Value").expect("a Value"))
        .expect("base64");
    let units: Vec<u16> = bytes
        .chunks(2)
        .map(|pair| u16::from_le_bytes([pair[0], pair[1]]))
        .collect();
    let text = String::from_utf16(&units).expect("UTF-16");
    text.strip_suffix("AdministratorPassword")
        .expect("the suffix Windows appends")
        .to_owned()
}

/// Events about the object named `name`: (reason, type, note).
pub async fn events_of(world: &World, name: &str) -> Vec<(String, String, String)> {
    world
        .events()
        .await
        .expect("Events are listed")
        .into_iter()
        .filter(|e| e["involvedObject"]["name"] == name || e["regarding"]["name"] == name)
        .map(|e| {
            let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
            let note = if e["note"].is_string() {
                &e["note"]
            } else {
                &e["message"]
            };
            (text(&e["reason"]), text(&e["type"]), text(note))
        })
        .collect()
}

/// Polls until an event about `name` has this reason and type (events are published after the
/// write they report); returns the events about `name`.
pub async fn wait_event(
    world: &World,
    name: &str,
    reason: &str,
    type_: &str,
) -> Vec<(String, String, String)> {
    let deadline = std::time::Instant::now() + TIMEOUT;
    loop {
        let events = events_of(world, name).await;
        if events.iter().any(|(r, t, _)| r == reason && t == type_) {
            return events;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{name}: no {type_} event {reason} in {events:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Fails if the controller's log holds the Prism password, user data (markers or whole, in
/// clear or base64) or one of `extra`.
pub fn assert_no_secrets_logged(world: &World, extra: &[String]) {
    let log = world.controller_log();
    assert!(
        log.lines().count() > 20,
        "the controller logged almost nothing"
    );
    let mut secrets = vec![
        world.mock().credentials().password.clone(),
        WINDOWS_USER_DATA_MARKER.to_owned(),
        LINUX_USER_DATA_MARKER.to_owned(),
        STANDARD.encode(world::windows_user_data()),
        STANDARD.encode(world::linux_user_data()),
    ];
    secrets.extend(extra.iter().cloned());
    for line in log.lines() {
        for secret in &secrets {
            assert!(
                !line.contains(secret.as_str()),
                "a secret appears in the controller's log: {line}"
            );
        }
    }
}
