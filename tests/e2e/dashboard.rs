//! The console dashboard and the alerts of `manifests/monitoring/` on a real Prometheus: the
//! server built from the module `hack/promtool/` pins (`hack/promtool/build.sh prometheus`, its
//! path in `PROMETHEUS`) scrapes the controller's `/metrics` every second while the sandbox's
//! scenario runs on kube-sim; then every alert's expression must parse, and every query of every
//! panel must parse and return series over the scenario's span, as the console's graphs ask
//! (`/api/v1/query_range`). A panel query with no data is a wrong query or a missing metric.
//!
//! Skipped with a message without `PROMETHEUS`; failed without it when `PROMETHEUS_REQUIRED`
//! is set (CI sets both).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prism_mock::{FaultKind, FaultRule};
use sandbox::bench::process::metrics_address;
use sandbox::prometheus::Prometheus;
use sandbox::scenario::{self, ScenarioOptions};
use serde_json::Value;

use crate::support::{TIMEOUT, options, start};

fn repository(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

fn prometheus_binary() -> Option<PathBuf> {
    match std::env::var_os("PROMETHEUS") {
        Some(path) => Some(PathBuf::from(path)),
        None => {
            assert!(
                std::env::var_os("PROMETHEUS_REQUIRED").is_none(),
                "PROMETHEUS_REQUIRED is set but PROMETHEUS is not: run hack/promtool/build.sh prometheus"
            );
            eprintln!(
                "SKIPPED: PROMETHEUS is not set (export PROMETHEUS=\"$(bash hack/promtool/build.sh prometheus)\")"
            );
            None
        }
    }
}

fn documents(path: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(repository(path)).unwrap();
    kube_sim::load::documents(&text).unwrap()
}

/// Every query of the dashboard: (panel title, expression).
fn panel_queries() -> Vec<(String, String)> {
    let [config_map] = documents("manifests/monitoring/dashboard.yaml")
        .try_into()
        .unwrap();
    let model = config_map["data"].as_object().unwrap().values().next();
    let model: Value = serde_json::from_str(model.unwrap().as_str().unwrap()).unwrap();
    let mut queries = Vec::new();
    for panel in model["rows"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|row| row["panels"].as_array().unwrap())
    {
        for target in panel["targets"].as_array().unwrap() {
            queries.push((
                panel["title"].as_str().unwrap().to_owned(),
                target["expr"].as_str().unwrap().to_owned(),
            ));
        }
    }
    queries
}

/// Every alert's expression: (alert, expression).
fn alert_expressions() -> Vec<(String, String)> {
    let [rule] = documents("manifests/monitoring/prometheus-rule.yaml")
        .try_into()
        .unwrap();
    rule["spec"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|group| group["rules"].as_array().unwrap())
        .map(|rule| {
            (
                rule["alert"].as_str().unwrap().to_owned(),
                rule["expr"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_panel_has_data_and_every_alert_parses_on_a_real_prometheus_scraping_a_sandbox_run() {
    let Some(binary) = prometheus_binary() else {
        return;
    };
    let mut options = options("dashboard");
    // doctor's first run comes one interval after the controller leads.
    options
        .controller_args
        .push("--doctor-interval=5s".to_owned());
    let world = start(options).await;
    let deadline = std::time::Instant::now() + TIMEOUT;
    let address = loop {
        if let Some(address) = metrics_address(&world.controller_log()) {
            break address;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the controller never logged its metrics address"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let dir = tempfile::tempdir().unwrap();
    let prometheus = Prometheus::start(&binary, dir.path(), &address, Duration::from_secs(1))
        .await
        .unwrap();
    eprintln!("Prometheus at {}", prometheus.url());
    prometheus
        .wait_for_scrape(Duration::from_secs(30))
        .await
        .unwrap();
    let began = unix_now();

    // Prism Central throttles (429 with Retry-After) and fails now and then (500): a few of each,
    // so that the errors panel has something to show (faults of prism-mock, which answers them
    // as Prism does: hack/prism-mock/src/faults.rs).
    let admin = world.mock().admin();
    admin.add_fault(
        FaultRule::new(
            Some("POST"),
            "/api/nutanix/v3/vms/list",
            FaultKind::Error {
                status: 429,
                retry_after_secs: Some(1),
            },
        )
        .times(2),
    );
    admin.add_fault(
        FaultRule::new(
            Some("GET"),
            "/api/nutanix/v3/tasks/{uuid}",
            FaultKind::Error {
                status: 500,
                retry_after_secs: None,
            },
        )
        .times(2),
    );

    let report = scenario::run(
        &world,
        ScenarioOptions {
            step_timeout: TIMEOUT,
            ..ScenarioOptions::default()
        },
    )
    .await;
    assert!(report.outcome.is_ok(), "{}", report.render());
    // Two scrapes more, so that the last changes are in.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let ended = unix_now();

    // The machine-api-operator's own Machine count, which this controller does not serve: no
    // data, as a panel reading it would show (what the check below catches).
    let foreign = prometheus
        .query_range(
            "sum(mapi_machine_items)",
            began,
            ended,
            Duration::from_secs(1),
        )
        .await
        .unwrap();
    assert!(foreign.is_empty(), "{foreign:?}");

    let mut failures = Vec::new();
    for (alert, expr) in alert_expressions() {
        if let Err(error) = prometheus.query(&expr, None).await {
            failures.push(format!("alert {alert}: {error}"));
        }
    }
    for (panel, expr) in panel_queries() {
        match prometheus
            .query_range(&expr, began, ended, Duration::from_secs(1))
            .await
        {
            Ok(series) if series.is_empty() => {
                failures.push(format!("panel {panel:?}: no data from {expr}"));
            }
            Ok(series) => eprintln!("panel {panel:?}: {} series from {expr}", series.len()),
            Err(error) => failures.push(format!("panel {panel:?}: {error}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{}\n(Prometheus's log: {})",
        failures.join("\n"),
        prometheus.log().display()
    );
    drop(prometheus);
    world.shutdown().await;
}
