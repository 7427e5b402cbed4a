//! kube-sim and its stand-ins against the real ones: the same scenario played on kube-sim and on
//! the real control plane, and every kind of write (who, which verb on which resource, and what
//! the API server answered) compared: the same kinds on both sides, for every actor that exists
//! on both (`sandbox::writes::ONE_SIDED_ACTORS` names the others and why).

use sandbox::scenario::{self, ScenarioOptions};
use sandbox::world::ControlPlaneChoice;
use sandbox::writes::{self, Tally};

use crate::support::{TIMEOUT, options, real_control_plane, start};

async fn scenario_writes(options: sandbox::world::WorldOptions) -> Tally {
    let world = start(options).await;
    let report = scenario::run(
        &world,
        ScenarioOptions {
            step_timeout: TIMEOUT,
            ..ScenarioOptions::default()
        },
    )
    .await;
    assert!(report.outcome.is_ok(), "{}", report.render());
    let tally = world.writes().expect("the writes are readable");
    world.shutdown().await;
    tally
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_sim_and_the_real_api_server_see_the_same_writes() {
    let Some(binaries) = real_control_plane() else {
        return;
    };
    let sim = scenario_writes(options("writes-kube-sim")).await;
    let mut real_options = options("writes-real");
    real_options.control_plane = ControlPlaneChoice::Real(binaries);
    let real = scenario_writes(real_options).await;
    eprintln!("{}", writes::render(&sim, &real));
    let differences: Vec<String> = writes::compare(&sim, &real)
        .into_iter()
        .map(|difference| {
            format!(
                "only on {:?}: {} ({}×)",
                difference.side, difference.kind, difference.count
            )
        })
        .collect();
    assert!(
        differences.is_empty(),
        "writes seen on one side only:\n{}",
        differences.join("\n")
    );
}
