//! The `render` command, run as the real binary on the documented MachineSets, compared with the
//! golden files in `tests/golden/`. Regenerate those with `UPDATE_GOLDEN=1 cargo test -p
//! nutanix-machine-controller --test render` and review the diff.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::Value;

const BINARY: &str = env!("CARGO_BIN_EXE_nutanix-machine-controller");

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn render(args: &[&str]) -> Output {
    Command::new(BINARY)
        .arg("render")
        .args(args)
        .output()
        .expect("the binary runs")
}

fn render_fixture(machine: &str, user_data: &str) -> (String, String) {
    let machine = fixture(machine);
    let user_data = fixture(user_data);
    let resolve = fixture("resolve.json");
    let output = render(&[
        "--machine",
        machine.to_str().unwrap(),
        "--user-data",
        user_data.to_str().unwrap(),
        "--resolve",
        resolve.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(output.status.success(), "render failed: {stderr}");
    (String::from_utf8(output.stdout).unwrap(), stderr)
}

/// Splits stdout into the request JSON and the unattend.xml that may follow it.
fn split(stdout: &str) -> (Value, Option<&str>) {
    let (json, xml) = match stdout.find("<?xml") {
        Some(at) => (&stdout[..at], Some(&stdout[at..])),
        None => (stdout, None),
    };
    (
        serde_json::from_str(json).expect("stdout starts with one JSON document"),
        xml,
    )
}

/// Compares `actual` with the golden file, or rewrites it when UPDATE_GOLDEN is set.
fn golden(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with UPDATE_GOLDEN=1 to create it)",
            path.display()
        )
    });
    pretty_assertions::assert_eq!(expected, actual, "{name} differs from its golden file");
}

fn decode(value: &Value) -> Vec<u8> {
    STANDARD
        .decode(value.as_str().expect("a base64 string"))
        .unwrap()
}

#[test]
fn documented_linux_machineset_renders_an_image_create() {
    let (stdout, stderr) = render_fixture("machineset-linux.yaml", "worker-user-data.ign");
    assert_eq!(stderr, "", "no warnings");
    let (request, xml) = split(&stdout);
    assert!(xml.is_none());
    golden("image-create.json", &stdout);

    assert_eq!(request["path"], "/api/nutanix/v3/vms");
    let spec = &request["body"]["spec"];
    assert_eq!(spec["name"], "ocp-7x2kq-worker-0-xxxxx");
    assert_eq!(
        spec["resources"]["disk_list"][0]["data_source_reference"]["uuid"],
        "3c6d8a7e-5b1f-4c2a-9e0d-7f4b2a1c9d01"
    );
    let ignition: Value = serde_json::from_slice(&decode(
        &spec["resources"]["guest_customization"]["cloud_init"]["user_data"],
    ))
    .unwrap();
    assert_eq!(ignition["storage"]["files"][0]["path"], "/etc/hostname");
    assert_eq!(
        ignition["ignition"]["config"]["merge"][0]["source"],
        "https://api-int.ocp.example.com:22623/config/worker"
    );
}

#[test]
fn documented_windows_machineset_renders_cloud_init_like_the_go_provider() {
    let (stdout, stderr) = render_fixture("machineset-windows.yaml", "windows-user-data.txt");
    assert_eq!(stderr, "", "no warnings");
    let (request, xml) = split(&stdout);
    assert!(xml.is_none(), "cloud-init, no unattend");
    golden("windows-image-create.json", &stdout);
    let cloud_init = &request["body"]["spec"]["resources"]["guest_customization"]["cloud_init"];
    assert_eq!(
        decode(&cloud_init["user_data"]),
        std::fs::read(fixture("windows-user-data.txt")).unwrap(),
        "WMCO's user data, unchanged"
    );
    let meta: Value = serde_json::from_slice(&decode(&cloud_init["meta_data"])).unwrap();
    assert_eq!(meta["hostname"], "winworker-xxxxx");
}

#[test]
fn windows_machineset_opting_into_sysprep_renders_the_unattend() {
    let (stdout, stderr) =
        render_fixture("machineset-windows-sysprep.yaml", "windows-user-data.txt");
    assert_eq!(
        stderr, "",
        "no warnings: winworker-xxxxx is a valid computer name"
    );
    let (request, xml) = split(&stdout);
    let xml = xml.expect("the unattend.xml follows the request");
    golden(
        "windows-sysprep-create.json",
        &stdout[..stdout.find("<?xml").unwrap()],
    );
    golden("unattend.xml", xml);

    let sysprep = &request["body"]["spec"]["resources"]["guest_customization"]["sysprep"];
    assert_eq!(sysprep["install_type"], "PREPARED");
    assert_eq!(
        decode(&sysprep["unattend_xml"]),
        xml.trim_end().as_bytes(),
        "the body carries the XML shown"
    );
    assert!(xml.contains("<ComputerName>winworker-xxxxx</ComputerName>"));
    assert!(
        xml.contains("generated per VM, not shown"),
        "the password is a placeholder"
    );
}

#[test]
fn windows_machineset_with_a_source_vm_renders_a_clone_and_its_follow_up() {
    let (stdout, stderr) = render_fixture("machineset-windows-clone.yaml", "windows-user-data.txt");
    assert_eq!(stderr, "", "the annotation carries imageKind: no warning");
    let (request, xml) = split(&stdout);
    assert!(xml.is_none(), "cloud-init, no unattend");
    golden("clone.json", &stdout);
    assert_eq!(
        request["path"],
        "/api/nutanix/v3/vms/6e8a0c2f-4d6b-4f8a-0c2e-3a5b7d9f1c04/clone"
    );
    assert_eq!(request["followUp"]["resizeSystemDiskMib"], 204_800);
    let meta: Value = serde_json::from_slice(&decode(
        &request["body"]["override_spec"]["guest_customization"]["cloud_init"]["meta_data"],
    ))
    .unwrap();
    assert_eq!(meta["hostname"], "winclone-xxxxx");
}

#[test]
fn windows_machineset_with_a_template_renders_a_v4_deploy() {
    let (stdout, stderr) =
        render_fixture("machineset-windows-template.yaml", "windows-user-data.txt");
    assert_eq!(stderr, "", "the annotations carry the choices: no warning");
    let (request, xml) = split(&stdout);
    golden(
        "template-deploy.json",
        &stdout[..stdout.find("<?xml").unwrap()],
    );
    assert_eq!(
        request["path"],
        "/api/vmm/v4.0/content/templates/5d7f9b1e-3c5a-4e7f-9b1d-2f4a6c8e0b03/$actions/deploy"
    );
    assert_eq!(
        request["body"]["versionId"],
        "a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c05"
    );
    let config = &request["body"]["overrideVmConfigMap"]["0"]["guestCustomization"]["config"];
    assert_eq!(config["$objectType"], "vmm.v4.ahv.config.Sysprep");
    assert!(
        xml.unwrap()
            .contains("<TimeZone>W. Europe Standard Time</TimeZone>")
    );
    assert_eq!(request["followUp"]["resizeSystemDiskMib"], 122_880);
}

#[test]
fn validation_errors_go_to_stderr_with_exit_code_2() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    let text = std::fs::read_to_string(fixture("machineset-linux.yaml"))
        .unwrap()
        .replace("vcpuSockets: 4", "vcpuSockets: 0")
        .replace("memorySize: 16Gi", "memorySize: 1Gi");
    std::fs::write(&bad, text).unwrap();
    let output = render(&["--machine", bad.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(output.stdout, b"");
    assert_eq!(
        String::from_utf8(output.stderr).unwrap(),
        "providerSpec.vcpuSockets: must be at least 1, got 0 (invalid)\n\
         providerSpec.memorySize: 1Gi is below the minimum of 2Gi (invalid)\n"
    );
}

#[test]
fn a_failed_lookup_in_the_resolve_file_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let resolve = dir.path().join("resolve.json");
    std::fs::write(
        &resolve,
        r#"{"images": {"ocp-7x2kq-rhcos": {"error": "2 images named \"ocp-7x2kq-rhcos\""}}}"#,
    )
    .unwrap();
    let machine = fixture("machineset-linux.yaml");
    let output = render(&[
        "--machine",
        machine.to_str().unwrap(),
        "--resolve",
        resolve.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        stderr.contains("providerSpec.image: image \"ocp-7x2kq-rhcos\": 2 images named"),
        "{stderr}"
    );
}

#[test]
fn unreadable_input_is_exit_code_1() {
    let output = render(&["--machine", "/nonexistent/machine.yaml"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        String::from_utf8(output.stderr)
            .unwrap()
            .starts_with("error: /nonexistent/machine.yaml:")
    );
}

/// The Windows MachineSet with a vTPM and its boot disk's container chosen by annotation, and
/// `bootType` as given.
fn windows_with_vtpm(boot_type: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("win11.yaml");
    let text = std::fs::read_to_string(fixture("machineset-windows.yaml"))
        .unwrap()
        .replace(
            "  template:\n    metadata:\n",
            "  template:\n    metadata:\n      annotations:\n        \
             nutanix.machine.openshift.io/vtpm: Enabled\n        \
             nutanix.machine.openshift.io/system-disk-storage-container: \
             5a5a5a5a-3333-4000-8000-000000000004\n",
        )
        .replace("bootType: \"\"", &format!("bootType: {boot_type:?}"));
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

#[test]
fn a_vtpm_and_the_boot_disks_container_show_in_the_rendered_create() {
    let (_dir, machine) = windows_with_vtpm("UEFI");
    let resolve = fixture("resolve.json");
    let output = render(&[
        "--machine",
        machine.to_str().unwrap(),
        "--resolve",
        resolve.to_str().unwrap(),
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let (request, _) = split(std::str::from_utf8(&output.stdout).unwrap());
    let resources = &request["body"]["spec"]["resources"];
    assert_eq!(
        resources["vtpm_config"],
        serde_json::json!({"vtpm_enabled": true})
    );
    assert_eq!(
        resources["disk_list"][0]["storage_config"]["storage_container_reference"]["uuid"],
        "5a5a5a5a-3333-4000-8000-000000000004"
    );

    let (_dir, legacy) = windows_with_vtpm("");
    let output = render(&["--machine", legacy.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        stderr.starts_with(
            "metadata.annotations[nutanix.machine.openshift.io/vtpm]: Enabled needs UEFI firmware"
        ),
        "{stderr}"
    );
}
