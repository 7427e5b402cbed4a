//! Two replicas: only the holder of the Lease acts; the other takes over when the holder
//! dies; a holder that loses the Lease stops (exits non-zero).

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::harness::{ControllerProcess, Env, NS, TIMEOUT, linux_spec};

const LEASE: &str = "cluster-api-provider-nutanix-leader";
const ELECTION: &[&str] = &["--leader-elect", "--leader-elect-lease-duration", "3s"];

/// Users that wrote to this Machine (create, update, patch), the test's own client excluded.
fn writers_of(env: &Env, machine: &str) -> Vec<String> {
    let mut users: Vec<String> = env
        .sim
        .requests()
        .into_iter()
        .filter(|r| {
            r.resource == "machines"
                && r.name == machine
                && matches!(r.verb.as_str(), "update" | "patch")
                && r.user != "kube-sim-admin"
        })
        .map(|r| r.user)
        .collect();
    users.sort();
    users.dedup();
    users
}

async fn wait_for_leader<'a>(candidates: &'a [&'a ControllerProcess]) -> &'a ControllerProcess {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Some(leader) = candidates
            .iter()
            .find(|c| c.logs().iter().any(|l| l.contains("became the leader")))
        {
            return leader;
        }
        assert!(Instant::now() < deadline, "nobody became the leader");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn only_the_leader_acts_and_a_successor_takes_over() {
    let mut env = Env::start().await;
    env.start_nodelink();
    let mut a = env.controller("replica-a", ELECTION);
    let mut b = env.controller("replica-b", ELECTION);
    let leader_user = wait_for_leader(&[&a, &b]).await.user.clone();
    let (leader, follower) = if leader_user == a.user {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };

    env.create_machine("led-0", linux_spec(), false).await;
    env.wait_phase("led-0", "Running").await;
    assert_eq!(
        writers_of(&env, "led-0"),
        std::slice::from_ref(&leader.user)
    );
    assert!(
        !follower.logs().iter().any(|l| l.contains("next step")),
        "the follower reconciled nothing"
    );
    let lease: Lease = Api::namespaced(env.client.clone(), NS)
        .get(LEASE)
        .await
        .unwrap();
    let holder = lease.spec.unwrap().holder_identity.unwrap();
    assert!(holder.starts_with(&format!("{}_", leader.user)), "{holder}");

    // The leader dies without releasing: the follower takes over once the Lease expires.
    leader.kill();
    follower.wait_log("became the leader").await;
    env.create_machine("led-1", linux_spec(), false).await;
    env.wait_phase("led-1", "Running").await;
    assert_eq!(
        writers_of(&env, "led-1"),
        std::slice::from_ref(&follower.user)
    );
    assert_eq!(env.vms_named("led-0").len(), 1);
    assert_eq!(env.vms_named("led-1").len(), 1);

    // Someone else takes the Lease: the holder stops working, with a non-zero exit.
    Api::<Lease>::namespaced(env.client.clone(), NS)
        .patch(
            LEASE,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {
                "holderIdentity": "intruder",
                "leaseDurationSeconds": 3600,
                "renewTime": MicroTime(Timestamp::now()),
            }})),
        )
        .await
        .unwrap();
    let deadline = Instant::now() + TIMEOUT;
    let status = loop {
        if let Some(status) = follower.exited() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the replica kept running without the Lease"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(!status.success(), "{status}");
    env.assert_no_secrets_logged(&[]);
    env.assert_permissions("replica-a");
    env.assert_permissions("replica-b");
}
