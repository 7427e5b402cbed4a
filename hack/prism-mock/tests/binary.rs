//! The `prism-mock` binary: first stdout line is the base URL once it answers; `--ca-out` writes the CA.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

#[tokio::test]
async fn the_binary_prints_its_url_first_and_serves_https_with_the_written_ca() {
    let dir = tempfile::tempdir().unwrap();
    let ca_path = dir.path().join("ca.pem");
    let mut child = Command::new(env!("CARGO_BIN_EXE_prism-mock"))
        .args(["--listen", "127.0.0.1:0", "--ca-out"])
        .arg(&ca_path)
        .args([
            "--username",
            "ops",
            "--password",
            "s3cret",
            "--rng-seed",
            "3",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let first = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(first.starts_with("https://127.0.0.1:"), "{first}");
    assert!(!first.ends_with(":0"), "a real port was picked: {first}");

    let ca = std::fs::read_to_string(&ca_path).unwrap();
    assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"));
    let client = common::client_trusting(Some(&ca));
    let me = client
        .get(format!("{first}/api/nutanix/v3/users/me"))
        .basic_auth("ops", Some("s3cret"))
        .send()
        .await
        .unwrap();
    assert_eq!(me.status(), 200, "ready as soon as the URL is printed");
    let localhost = first.replace("127.0.0.1", "localhost");
    let me = client
        .get(format!("{localhost}/api/nutanix/v3/users/me"))
        .basic_auth("ops", Some("s3cret"))
        .send()
        .await
        .unwrap();
    assert_eq!(me.status(), 200, "the certificate also names localhost");
    let wrong = client
        .get(format!("{first}/api/nutanix/v3/users/me"))
        .basic_auth("admin", Some("mock-password"))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    child.kill().await.unwrap();
}
