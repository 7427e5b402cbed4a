//! The `sandbox` binary: its help; `sandbox actors` running the replica controller against a
//! kube-sim through a kubeconfig until SIGINT; the hidden `controller` subcommand; the scenario
//! (with prism-mock's test delays) exiting 0 with its progress lines and closing table; `--keep`
//! leaving the world running for kubectl until SIGINT.
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

#[tokio::test]
async fn the_hidden_controller_subcommand_is_the_controllers_command_line() {
    for args in [
        &["controller", "--", "--version"][..],
        &["controller", "--version"][..],
    ] {
        let output = Command::new(BINARY).args(args).output().await.unwrap();
        assert!(output.status.success(), "{args:?}: {output:?}");
        let text = String::from_utf8(output.stdout).unwrap();
        assert!(text.starts_with("nutanix-machine-controller "), "{text}");
    }
    let output = Command::new(BINARY)
        .args(["controller", "--", "--no-such-flag"])
        .output()
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "a usage error, as clap's");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scenario_holds_and_exits_0_with_plain_progress_lines_and_the_closing_table() {
    let dir = tempfile::tempdir().unwrap();
    let run = Command::new(BINARY)
        .args(["--timings", "tests", "--work-dir"])
        .arg(dir.path())
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(180), run)
        .await
        .expect("the scenario ends")
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(
        output.status.success(),
        "{}\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    // Progress: plain lines (stdout is a pipe here), one per change.
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with('[') && l.contains("autoscaler: win-image 0 → 3")),
        "{stdout}"
    );
    assert!(
        !stdout.contains('\r') && !stdout.contains('\x1b'),
        "{stdout}"
    );
    assert!(stdout.contains("The scenario held in "), "{stdout}");
    let table_rows = stdout
        .lines()
        .filter(|l| {
            l.starts_with("win-image-")
                || l.starts_with("win-tmpl-")
                || l.starts_with("sandbox-worker-")
        })
        .count();
    assert_eq!(table_rows, 6, "one row per Machine:\n{stdout}");
    assert!(stdout.contains("Prism calls by endpoint"), "{stdout}");
    // The given work directory keeps the controller's log.
    let log = std::fs::read_to_string(dir.path().join("controller.log")).unwrap();
    assert!(
        log.contains("--- sandbox: controller start #1 ---"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_leaves_the_world_running_for_kubectl_until_sigint() {
    let mut child = Command::new(BINARY)
        .args(["--timings", "tests", "--keep"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let kubeconfig = tokio::time::timeout(Duration::from_secs(180), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(path) = line.trim().strip_prefix("export KUBECONFIG=") {
                return path.to_owned();
            }
        }
        panic!("no KUBECONFIG line before the end of the output");
    })
    .await
    .expect("the KUBECONFIG line");
    // Keep reading so that the progress lines never fill the pipe.
    let drain = tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });

    let config = kube::config::Kubeconfig::read_from(&kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(config, &Default::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let sets: Api<nutanix_machine_controller::api::MachineSet> = Api::namespaced(client, NS);
    let names: Vec<String> = sets
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(kube::ResourceExt::name_any)
        .collect();
    assert_eq!(names, ["sandbox-worker", "win-image", "win-tmpl"]);

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
    drain.await.unwrap();
    // --keep kept the work directory (a temporary one): clean it up.
    let dir = std::path::Path::new(&kubeconfig).parent().unwrap();
    std::fs::remove_dir_all(dir).unwrap();
}

/// `sandbox bench` stopped with SIGTERM (as a CI job's timeout or `kill` stops it) stops the
/// controller process it started, as Ctrl-C does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_the_benchmark_and_its_controller_process() {
    let mut child = Command::new(BINARY)
        .args(["bench", "--machines", "2", "--timings", "tests"])
        .args(["--steady-seconds", "600"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    // Up to the steady-state window: the controller was started (and restarted) by then. Its
    // flags name the benchmark's work directory (its kubeconfig), printed with its log's path.
    let work_dir = tokio::time::timeout(Duration::from_secs(180), async {
        let mut dir = None;
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(rest) = line.split("(log ").nth(1) {
                dir = rest
                    .strip_suffix("/controller.log)")
                    .or_else(|| rest.split("/controller.log").next())
                    .map(str::to_owned);
            }
            if line.contains("steady state for") {
                return dir;
            }
        }
        panic!("the benchmark ended before its steady state");
    })
    .await
    .expect("the steady state began")
    .expect("the benchmark printed its controller's log path");
    let drain = tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });

    let pid = child.id().unwrap().to_string();
    let signalled = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .await
        .unwrap();
    assert!(signalled.success());
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(130), "{status}");
    drain.await.unwrap();
    // The first controller was replaced at the restart; none may outlive the benchmark.
    let controllers_left = || {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter(|entry| {
                std::fs::read(entry.path().join("cmdline"))
                    .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).contains(&work_dir))
            })
            .count()
    };
    eventually("no controller process left", || async {
        controllers_left() == 0
    })
    .await;
}
