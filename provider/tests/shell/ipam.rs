//! A Machine with a static address from an IP pool: the claim before the VM, the VM only once
//! the claim is bound, the bound address as the Machine's, and the claim gone with the Machine.
//! The test plays the pool's IPAM controller (it binds the claim by hand).

use std::time::{Duration, Instant};

use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use nutanix_machine_controller::api::IP_POOL_ANNOTATION;
use nutanix_machine_controller::api::ipam::{IPAddress, IPAddressClaim};
use serde_json::json;

use crate::controller::InProcessController;
use crate::harness::{Env, NS, choices, linux_spec};

async fn wait_claim(claims: &Api<IPAddressClaim>, name: &str, present: bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while claims.get_opt(name).await.unwrap().is_some() != present {
        assert!(
            Instant::now() < deadline,
            "IPAddressClaim {name} present: {}",
            !present
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The IPAM controller's part: an `IPAddress` of pool `workers` in vm-network (10.40.0.0/20,
/// outside Prism's DHCP range) named as the claim, and the claim's status naming it.
async fn bind_claim(env: &Env, claim: &str, ip: &str) {
    let addresses: Api<IPAddress> = Api::namespaced(env.client.clone(), NS);
    let address: IPAddress = serde_json::from_value(json!({
        "apiVersion": "ipam.cluster.x-k8s.io/v1beta1", "kind": "IPAddress",
        "metadata": {"name": claim, "namespace": NS},
        "spec": {
            "claimRef": {"name": claim},
            "poolRef": {"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": "workers"},
            "address": ip, "prefix": 20, "gateway": "10.40.0.1"
        }
    }))
    .unwrap();
    addresses
        .create(&PostParams::default(), &address)
        .await
        .unwrap();
    let claims: Api<IPAddressClaim> = Api::namespaced(env.client.clone(), NS);
    claims
        .patch_status(
            claim,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"addressRef": {"name": claim}}})),
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_with_a_pool_is_created_only_once_its_claim_is_bound_and_releases_it() {
    let mut env = Env::start().await;
    env.start_nodelink();
    let _controller = InProcessController::start(&env, "controller").await;
    env.create_machine_with(
        "static-0",
        linux_spec(),
        false,
        choices(&[(
            IP_POOL_ANNOTATION,
            "ipam.cluster.x-k8s.io/InClusterIPPool/workers",
        )]),
    )
    .await;
    let claims: Api<IPAddressClaim> = Api::namespaced(env.client.clone(), NS);
    wait_claim(&claims, "static-0-claim-0-0", true).await;
    let claim = claims.get("static-0-claim-0-0").await.unwrap();
    assert_eq!(claim.spec.pool_ref.name, "workers");
    assert_eq!(
        claim.metadata.finalizers,
        Some(vec!["machine.openshift.io/ip-claim-protection".to_owned()])
    );
    env.wait_machine("static-0", "waiting for its address", |m| {
        m["status"]["providerStatus"]["conditions"]
            .as_array()
            .is_some_and(|all| {
                all.iter().any(|c| {
                    c["type"] == "IPAddressClaimed"
                        && c["status"] == "False"
                        && c["reason"] == "WaitingForIPAddress"
                })
            })
    })
    .await;
    env.wait_event("static-0", "WaitingForIPAddress", "static-0-claim-0-0")
        .await;
    assert!(
        env.vms_named("static-0").is_empty(),
        "no VM before the bind"
    );

    // The IPAM controller's part.
    bind_claim(&env, "static-0-claim-0-0", "10.40.0.50").await;

    let machine = env.wait_phase("static-0", "Running").await;
    assert_eq!(
        machine["status"]["addresses"][0],
        json!({"type": "InternalIP", "address": "10.40.0.50"}),
        "the claimed address is the Machine's first"
    );
    assert_eq!(env.vms_named("static-0").len(), 1);

    env.machines_api()
        .delete("static-0", &DeleteParams::default())
        .await
        .unwrap();
    env.wait_machine("static-0", "gone", serde_json::Value::is_null)
        .await;
    wait_claim(&claims, "static-0-claim-0-0", false).await;
}

/// A claim bound by its IPAM controller reconciles its Machine at once (the claims are watched),
/// not at the next look a poll interval later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_claim_lets_its_machine_go_on_before_the_next_poll() {
    let env = Env::start().await;
    let _controller =
        InProcessController::start_polling(&env, "controller", Duration::from_secs(120)).await;
    env.create_machine_with(
        "static-1",
        linux_spec(),
        false,
        choices(&[(
            IP_POOL_ANNOTATION,
            "ipam.cluster.x-k8s.io/InClusterIPPool/workers",
        )]),
    )
    .await;
    let claims: Api<IPAddressClaim> = Api::namespaced(env.client.clone(), NS);
    wait_claim(&claims, "static-1-claim-0-0", true).await;
    env.wait_event("static-1", "WaitingForIPAddress", "static-1-claim-0-0")
        .await;
    // Settled: the Machine's next look is a poll interval away.
    tokio::time::sleep(Duration::from_secs(1)).await;

    bind_claim(&env, "static-1-claim-0-0", "10.40.0.51").await;
    let deadline = Instant::now() + Duration::from_secs(15);
    while env.vms_named("static-1").is_empty() {
        assert!(
            Instant::now() < deadline,
            "no VM 15 s after the claim was bound (the poll interval is 120 s)"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A claim made ahead of its Machine with no owner (an administrator pinning the address, or a
/// restore without owner references), already bound, is adopted before the VM takes its
/// address, and released with the Machine instead of holding the address forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_made_ahead_without_an_owner_is_adopted_and_released_with_the_machine() {
    let mut env = Env::start().await;
    env.start_nodelink();
    let claims: Api<IPAddressClaim> = Api::namespaced(env.client.clone(), NS);
    let pool_ref =
        json!({"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": "workers"});
    let claim: IPAddressClaim = serde_json::from_value(json!({
        "apiVersion": "ipam.cluster.x-k8s.io/v1beta1", "kind": "IPAddressClaim",
        "metadata": {"name": "pinned-0-claim-0-0", "namespace": NS},
        "spec": {"poolRef": pool_ref},
    }))
    .unwrap();
    claims.create(&PostParams::default(), &claim).await.unwrap();
    bind_claim(&env, "pinned-0-claim-0-0", "10.40.0.60").await;

    let _controller = InProcessController::start(&env, "controller").await;
    env.create_machine_with(
        "pinned-0",
        linux_spec(),
        false,
        choices(&[(
            IP_POOL_ANNOTATION,
            "ipam.cluster.x-k8s.io/InClusterIPPool/workers",
        )]),
    )
    .await;
    let machine = env.wait_phase("pinned-0", "Running").await;
    assert_eq!(
        machine["status"]["addresses"][0],
        json!({"type": "InternalIP", "address": "10.40.0.60"}),
        "the pinned address is the Machine's"
    );
    let claim = claims.get("pinned-0-claim-0-0").await.unwrap();
    let owner = &claim.metadata.owner_references.clone().unwrap_or_default()[..];
    assert!(
        matches!(owner, [o] if o.kind == "Machine" && o.name == "pinned-0"
            && o.uid == machine["metadata"]["uid"].as_str().unwrap_or_default()
            && o.controller == Some(true)),
        "{owner:?}"
    );
    assert_eq!(
        claim.metadata.finalizers,
        Some(vec!["machine.openshift.io/ip-claim-protection".to_owned()])
    );
    assert_eq!(env.vms_named("pinned-0").len(), 1);

    env.machines_api()
        .delete("pinned-0", &DeleteParams::default())
        .await
        .unwrap();
    env.wait_machine("pinned-0", "gone", serde_json::Value::is_null)
        .await;
    wait_claim(&claims, "pinned-0-claim-0-0", false).await;
}
