//! The alerts of manifests/monitoring/ against promtool, Prometheus's own rule checker and rule
//! unit-test runner (built from its Go module by hack/promtool/build.sh; its path in `PROMTOOL`).
//! Skipped with a message without it, failed without it when `PROMTOOL_REQUIRED` is set (CI).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn repo(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(relative)
}

fn promtool() -> Option<PathBuf> {
    match std::env::var_os("PROMTOOL") {
        Some(path) => Some(PathBuf::from(path)),
        None if std::env::var_os("PROMTOOL_REQUIRED").is_some() => {
            panic!("PROMTOOL_REQUIRED is set but PROMTOOL is not: run hack/promtool/build.sh")
        }
        None => {
            eprintln!(
                "skipped: PROMTOOL is not set (export PROMTOOL=\"$(bash hack/promtool/build.sh)\")"
            );
            None
        }
    }
}

fn run(promtool: &Path, dir: &Path, args: &[&str]) {
    let output = Command::new(promtool)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "promtool {}: {}\n{}",
        args.join(" "),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn the_alerts_pass_promtools_check_and_their_unit_tests() {
    let Some(promtool) = promtool() else {
        return;
    };
    let manifest =
        std::fs::read_to_string(repo("manifests/monitoring/prometheus-rule.yaml")).unwrap();
    let rule: Value = serde_saphyr::from_str(&manifest).unwrap();
    assert_eq!(rule["kind"], "PrometheusRule");
    let alerts: Vec<&str> = rule["spec"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|group| group["rules"].as_array().unwrap())
        .filter_map(|rule| rule["alert"].as_str())
        .collect();
    let dir = tempfile::tempdir().unwrap();
    // The PrometheusRule's spec is a Prometheus rule file (JSON is YAML).
    std::fs::write(
        dir.path().join("rules.yaml"),
        serde_json::to_string_pretty(&rule["spec"]).unwrap(),
    )
    .unwrap();
    let tests =
        std::fs::read_to_string(repo("manifests/monitoring/prometheus-rule.test.yaml")).unwrap();
    std::fs::write(dir.path().join("tests.yaml"), &tests).unwrap();
    run(&promtool, dir.path(), &["check", "rules", "rules.yaml"]);
    run(&promtool, dir.path(), &["test", "rules", "tests.yaml"]);
    // Every alert has unit tests and a runbook.
    let troubleshooting = std::fs::read_to_string(repo("docs/troubleshooting.md")).unwrap();
    for alert in alerts {
        assert!(
            tests.contains(&format!("alertname: {alert}")),
            "{alert} has no unit test"
        );
        assert!(
            troubleshooting.contains(&format!("### {alert}")),
            "{alert} has no runbook in docs/troubleshooting.md"
        );
    }
}
