//! Nutanix's own clients against the mock: the Python SDKs `ntnx-vmm-py-client` and `ntnx-prism-py-client`,
//! installed by package name into a venv under the target directory, list, get and deploy a template and read
//! the deploy task and its subtask over HTTPS, trusting only the mock's CA (tests/sdk/templates_and_tasks.py).
//! Skipped, with the reason printed, where Python 3 or its venv module is missing or the packages cannot be
//! installed (no network).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::python::sdk_python;
use common::{Api, start};
use serde_json::Value;
use tokio::process::Command;

/// The SDKs' newest releases.
const PACKAGES: [&str; 2] = ["ntnx-vmm-py-client", "ntnx-prism-py-client"];

#[tokio::test]
async fn nutanix_python_sdks_deploy_a_template_and_read_its_tasks() {
    let python = match sdk_python("ntnx-sdk-venv", &PACKAGES).await {
        Ok(python) => python,
        Err(reason) => {
            eprintln!("skipped: {reason}");
            return;
        }
    };
    let mock = start().await;
    let api = Api::new(&mock);
    let cluster = api.uuid_of("cluster", "pe-1").await;
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, mock.ca_pem().unwrap()).unwrap();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/sdk/templates_and_tasks.py"
    );
    let credentials = mock.credentials();
    let output = Command::new(&python)
        .arg(script)
        .env("PRISM_HOST", mock.addr().ip().to_string())
        .env("PRISM_PORT", mock.addr().port().to_string())
        .env("PRISM_USERNAME", &credentials.username)
        .env("PRISM_PASSWORD", &credentials.password)
        .env("PRISM_CA_FILE", &ca)
        .env("PRISM_CLUSTER", &cluster)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(120), output)
        .await
        .expect("the SDK script ends within 120 s")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the SDK script failed:\n{stdout}\n{stderr}"
    );
    let summary: Value = serde_json::from_str(stdout.lines().last().unwrap_or("")).unwrap();
    assert_eq!(summary["templates"], 1, "{summary}");
    assert_eq!(summary["template_name"], "windows-server-2022-template");
    assert!(
        summary["etag"].as_str().is_some_and(|e| !e.is_empty()),
        "the SDK found the GET's ETag: {summary}"
    );
    assert_eq!(summary["status"], "SUCCEEDED", "{summary}");
    assert_eq!(summary["affected"][0][1], "vmm:content:templates");
    assert_eq!(summary["subtask_status"], "SUCCEEDED");
    let vm = mock
        .admin()
        .vm(summary["vm"].as_str().unwrap())
        .expect("the subtask names the deployed VM");
    assert_eq!(vm["spec"]["name"], "sdk-vm-1");
    assert_eq!(vm["spec"]["resources"]["num_sockets"], 2);
    assert!(
        !stderr.contains("Traceback"),
        "the SDKs logged an error: {stderr}"
    );
}
