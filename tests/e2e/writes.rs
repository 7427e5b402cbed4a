//! kube-sim and its stand-ins against the real ones: the same scenario played on kube-sim and on
//! the real control plane, and every kind of write (who, which verb on which resource, and what
//! the API server answered) compared: the same kinds on both sides, for every actor that exists
//! on both (`sandbox::writes::ONE_SIDED_ACTORS` names the others and why). Both start from the
//! same cluster objects, checked first.

use kube::api::{Api, DynamicObject, GroupVersionKind};
use sandbox::cluster_objects;
use sandbox::manifests::INFRASTRUCTURE_ID;
use sandbox::scenario::{self, ScenarioOptions};
use sandbox::world::{ControlPlaneChoice, World};
use sandbox::writes::{self, Tally};
use serde_json::Value;

use crate::support::{TIMEOUT, options, real_control_plane, start};

/// Whether every field of `expected` is in `actual` with the same value (an API server may add
/// defaults, never change what was applied).
fn holds(actual: &Value, expected: &Value) -> bool {
    match (actual, expected) {
        (Value::Object(actual), Value::Object(expected)) => expected
            .iter()
            .all(|(key, value)| actual.get(key).is_some_and(|found| holds(found, value))),
        (Value::Array(actual), Value::Array(expected)) => {
            actual.len() == expected.len() && actual.iter().zip(expected).all(|(a, e)| holds(a, e))
        }
        _ => actual == expected,
    }
}

/// Both control planes start from the one list of the cluster's objects
/// (`sandbox::cluster_objects`), applied through their APIs: each reads back as listed.
async fn assert_cluster_objects(world: &World) {
    let listed = cluster_objects::openshift_on_nutanix(
        world.namespace(),
        INFRASTRUCTURE_ID,
        world.mock().addr().port(),
    );
    for listed in listed {
        let object = &listed.object;
        let api_version = object["apiVersion"].as_str().unwrap();
        let kind = object["kind"].as_str().unwrap();
        let name = object["metadata"]["name"].as_str().unwrap();
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let (resource, _) = kube::discovery::pinned_kind(
            world.client(),
            &GroupVersionKind::gvk(group, version, kind),
        )
        .await
        .unwrap_or_else(|e| panic!("{api_version} {kind} is served: {e}"));
        let api: Api<DynamicObject> = match object["metadata"]["namespace"].as_str() {
            Some(namespace) => Api::namespaced_with(world.client().clone(), namespace, &resource),
            None => Api::all_with(world.client().clone(), &resource),
        };
        let found = serde_json::to_value(
            api.get(name)
                .await
                .unwrap_or_else(|e| panic!("{kind}/{name} exists: {e}")),
        )
        .unwrap();
        for part in ["spec", "status"] {
            if let Some(expected) = object.get(part) {
                assert!(
                    holds(&found[part], expected),
                    "{kind}/{name} {part}: {found}"
                );
            }
        }
        if let Some(status) = &listed.status {
            assert!(
                holds(&found["status"], status),
                "{kind}/{name} status: {found}"
            );
        }
    }
}

async fn scenario_writes(options: sandbox::world::WorldOptions) -> Tally {
    let world = start(options).await;
    assert_cluster_objects(&world).await;
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
