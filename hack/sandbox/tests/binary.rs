//! The `sandbox` binary: its help, and `sandbox actors` running the replica controller against a
//! kube-sim through a kubeconfig until SIGINT.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::{NS, eventually, kube, machine_set};
use kube::api::{Api, ListParams};
use nutanix_machine_controller::api::Machine;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

const BINARY: &str = env!("CARGO_BIN_EXE_sandbox");

#[tokio::test]
async fn help_names_the_actors() {
    let output = Command::new(BINARY).arg("--help").output().await.unwrap();
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.contains("actors"), "{text}");
    let output = Command::new(BINARY)
        .args(["actors", "--help"])
        .output()
        .await
        .unwrap();
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(
        text.contains("--kubeconfig") && text.contains("--namespace"),
        "{text}"
    );
}

#[tokio::test]
async fn actors_run_against_a_kubeconfig_until_sigint() {
    let (sim, client) = kube().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig).unwrap();
    let mut child = Command::new(BINARY)
        .args(["actors", "--kubeconfig"])
        .arg(&kubeconfig)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        first.as_deref(),
        Some("actors running: machineset-controller, nodelink, approver")
    );

    sim.create(machine_set("workers", 2)).unwrap();
    let machines: Api<Machine> = Api::namespaced(client.clone(), NS);
    eventually(
        "the binary's replica controller created two Machines",
        || async {
            machines
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .len()
                == 2
        },
    )
    .await;

    let pid = child.id().unwrap().to_string();
    let signalled = Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .await
        .unwrap();
    assert!(signalled.success());
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status}");
    sim.shutdown().await;
}
