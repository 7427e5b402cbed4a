//! A measurement, not run by default: Prism calls per Machine from create to Running, and in
//! steady state, with production-like intervals scaled down (poll 2 s, requeue 5 s, inventory
//! refresh 10 s). Prints the numbers; asserts only what must hold (every Machine Running, one VM
//! each).
//!
//! ```sh
//! MEASURE_MACHINES=20 MEASURE_KIND=image|clone|template \
//!   cargo test -p nutanix-machine-controller --test controller -- --ignored --nocapture prism_calls
//! ```

use std::time::Duration;

use crate::harness::{Env, linux_spec, windows_clone, windows_template};

#[tokio::test]
#[ignore = "measurement: run with --ignored --nocapture"]
async fn prism_calls_per_machine() {
    let machines: usize = std::env::var("MEASURE_MACHINES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let kind = std::env::var("MEASURE_KIND").unwrap_or_else(|_| "image".into());
    let ((spec, choices), windows) = match kind.as_str() {
        "clone" => (windows_clone(), true),
        "template" => (windows_template(), true),
        _ => ((linux_spec(), serde_json::json!({})), false),
    };
    let mut env = Env::start().await;
    env.start_nodelink();
    let controller = env.controller(
        "controller",
        &[
            "--poll-interval",
            "2s",
            "--requeue-interval",
            "5s",
            "--inventory-refresh-interval",
            "10s",
        ],
    );
    controller.wait_log("metrics listening").await;
    for index in 0..machines {
        env.create_machine_with(
            &format!("m-{index}"),
            spec.clone(),
            windows,
            choices.clone(),
        )
        .await;
    }
    for index in 0..machines {
        env.wait_phase(&format!("m-{index}"), "Running").await;
        assert_eq!(env.vms_named(&format!("m-{index}")).len(), 1);
    }
    let total = env.prism_calls();
    println!(
        "{machines} Machines ({kind}) from create to Running: {total} Prism calls, {:.2} per Machine",
        total as f64 / machines as f64
    );
    for counter in env.mock.admin().counters() {
        println!(
            "  {} {} {}: {}",
            counter.method, counter.endpoint, counter.status, counter.count
        );
    }
    let mut kube: std::collections::BTreeMap<String, usize> = Default::default();
    for request in env.sim.requests().iter().filter(|r| r.user == "controller") {
        let what = format!(
            "{} {}{}",
            request.verb,
            request.resource,
            if request.subresource.is_empty() {
                String::new()
            } else {
                format!("/{}", request.subresource)
            }
        );
        *kube.entry(what).or_default() += 1;
    }
    println!(
        "Kubernetes API requests of the controller: {} ({:.1} per Machine)",
        kube.values().sum::<usize>(),
        kube.values().sum::<usize>() as f64 / machines as f64
    );
    for (what, count) in &kube {
        println!("  {what}: {count}");
    }
    let before = env.prism_calls();
    tokio::time::sleep(Duration::from_secs(30)).await;
    println!(
        "steady state: {} Prism calls in 30 s for {machines} Running Machines (inventory refresh 10 s)",
        env.prism_calls() - before
    );
    env.assert_no_secrets_logged(&[]);
}
