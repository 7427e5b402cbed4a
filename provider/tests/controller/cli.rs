//! The command line: `validate` against Prism, `--version`, help, and a failing start.

use std::process::Command;

use base64::Engine as _;

use serde_json::json;

use crate::harness::{
    Env, INFRA_ID, NS, PRISM_PASSWORD, credentials_json, linux_spec, linux_user_data,
};

const BINARY: &str = env!("CARGO_BIN_EXE_nutanix-machine-controller");

fn machine_yaml(provider_spec: serde_json::Value) -> String {
    serde_json::to_string(&json!({
        "apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
        "metadata": {"name": "check-0", "namespace": NS,
                     "labels": {"machine.openshift.io/cluster-api-cluster": INFRA_ID}},
        "spec": {"providerSpec": {"value": provider_spec}},
    }))
    .unwrap()
}

#[tokio::test]
async fn validate_prints_the_errors_the_controller_would_raise() {
    let env = Env::start().await;
    let dir = env.dir.path();
    let credentials = dir.join("credentials.json");
    std::fs::write(&credentials, credentials_json(PRISM_PASSWORD)).unwrap();
    let user_data = dir.join("user-data.ign");
    std::fs::write(&user_data, linux_user_data()).unwrap();
    // The mock answers on this test's runtime: the binary runs without blocking it.
    let run = async |spec: serde_json::Value| {
        let machine = dir.join("machine.yaml");
        std::fs::write(&machine, machine_yaml(spec)).unwrap();
        let output = tokio::process::Command::new(BINARY)
            .arg("validate")
            .arg("--machine")
            .arg(&machine)
            .arg("--credentials-file")
            .arg(&credentials)
            .arg("--user-data")
            .arg(&user_data)
            .arg("--prism-endpoint")
            .arg(env.mock.base_url())
            .arg("--prism-ca-file")
            .arg(env.ca_file())
            .output()
            .await
            .unwrap();
        (
            output.status.code(),
            String::from_utf8(output.stdout).unwrap(),
            String::from_utf8(output.stderr).unwrap(),
        )
    };

    let (code, stdout, stderr) = run(linux_spec()).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.contains("valid: POST /api/nutanix/v3/vms"),
        "{stdout}"
    );

    let mut unknown = linux_spec();
    unknown["image"] = json!({"type": "name", "name": "no-such-image"});
    let (code, _, stderr) = run(unknown).await;
    assert_eq!(code, Some(2));
    assert_eq!(
        stderr.trim(),
        "providerSpec.image: image \"no-such-image\": no image named \"no-such-image\" (unresolved)"
    );

    let mut invalid = linux_spec();
    invalid["vcpuSockets"] = 0.into();
    invalid["image"] = json!({"type": "name", "name": "no-such-image"});
    let (code, _, stderr) = run(invalid).await;
    assert_eq!(code, Some(2));
    assert_eq!(
        stderr.trim(),
        "providerSpec.vcpuSockets: must be at least 1, got 0 (invalid)",
        "what is wrong in the Machine itself comes alone, as the controller fails it"
    );
    assert!(!stderr.contains(PRISM_PASSWORD));

    // Without --user-data the rest is checked, and the user data is said not to be; the
    // credentials Secret's manifest is read as well as its value.
    let machine = dir.join("machine.yaml");
    std::fs::write(&machine, machine_yaml(linux_spec())).unwrap();
    let secret = dir.join("nutanix-credentials.yaml");
    std::fs::write(
        &secret,
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: nutanix-credentials\ndata:\n  credentials: {}\n",
            base64::engine::general_purpose::STANDARD.encode(credentials_json(PRISM_PASSWORD))
        ),
    )
    .unwrap();
    let output = tokio::process::Command::new(BINARY)
        .arg("validate")
        .arg("--machine")
        .arg(&machine)
        .arg("--credentials-file")
        .arg(&secret)
        .arg("--prism-endpoint")
        .arg(env.mock.base_url())
        .arg("--prism-ca-file")
        .arg(env.ca_file())
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert_eq!(
        stderr.trim(),
        "warning: user data not checked: pass --user-data with the userData of Secret \"worker-user-data\""
    );
}

/// Prism unreachable, or refusing the credentials, is said once with its fix, not once per
/// reference.
#[tokio::test]
async fn validate_says_once_that_prism_cannot_be_used() {
    let env = Env::start().await;
    let dir = env.dir.path();
    let machine = dir.join("machine.yaml");
    std::fs::write(&machine, machine_yaml(linux_spec())).unwrap();
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("https://{}", listener.local_addr().unwrap())
    };
    for (password, endpoint, expected) in [
        (
            PRISM_PASSWORD,
            closed.as_str(),
            "error: cannot reach Prism Central at",
        ),
        (
            "Wrong-Pass-41",
            env.mock.base_url(),
            "error: Prism Central at",
        ),
    ] {
        let credentials = dir.join("credentials.json");
        std::fs::write(&credentials, credentials_json(password)).unwrap();
        let output = tokio::process::Command::new(BINARY)
            .arg("validate")
            .arg("--machine")
            .arg(&machine)
            .arg("--credentials-file")
            .arg(&credentials)
            .arg("--prism-endpoint")
            .arg(endpoint)
            .arg("--prism-ca-file")
            .arg(env.ca_file())
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert_eq!(output.status.code(), Some(1), "{stderr}");
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{stderr}");
        assert!(lines[0].starts_with(expected), "{stderr}");
        assert!(!stderr.contains("providerSpec."), "{stderr}");
        assert!(!stderr.contains(password), "{stderr}");
    }
}

#[test]
fn version_help_and_a_failing_start() {
    let version = Command::new(BINARY).arg("--version").output().unwrap();
    assert!(version.status.success());
    assert!(
        String::from_utf8(version.stdout)
            .unwrap()
            .contains(env!("CARGO_PKG_VERSION"))
    );

    let help = Command::new(BINARY).arg("--help").output().unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    for flag in [
        "--leader-elect",
        "--leader-elect-lease-duration",
        "--leader-elect-resource-namespace",
        "--namespace",
        "--v",
        "--logtostderr",
        "--feature-gates",
        "--metrics-bind-address",
        "--health-addr",
        "--kubeconfig",
        "--prism-endpoint",
        "--prism-ca-file",
        "--insecure-skip-tls-verify",
        "validate",
        "render",
        "run",
    ] {
        assert!(help.contains(flag), "{flag} missing from --help");
    }

    // No subcommand runs the controller: an unreadable kubeconfig stops it with an error.
    let failed = Command::new(BINARY)
        .args(["--kubeconfig", "/nonexistent/kubeconfig"])
        .output()
        .unwrap();
    assert_eq!(failed.status.code(), Some(1));
    assert!(
        String::from_utf8(failed.stderr)
            .unwrap()
            .contains("/nonexistent/kubeconfig")
    );
}
