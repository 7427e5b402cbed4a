//! A kubelet that registers its Node with an IP the Machine does not report (the hybrid-overlay
//! address, as WMCO before 10.16 let happen on Nutanix, or any wrong address): the join cannot
//! finish, and the controller's `WindowsJoin` condition says why (`NodeIPMismatch`), naming the
//! IP and the fix.

use std::net::IpAddr;

use kube::ResourceExt;
use nutanix_machine_controller::api::phase;
use nutanix_machine_controller::plan::windows_join;
use prism_mock::GuestBehaviour;
use sandbox::manifests::{WINDOWS_IMAGE_SET, WINDOWS_TEMPLATE_SET};
use sandbox::node_agent::{JoinBehaviour, NodeIpChoice};
use sandbox::world::{Snapshot, join_condition};

use crate::support::{TIMEOUT, options, start, wait_event};

/// In the subnet, but no VM's address.
const WRONG_IP: &str = "10.40.15.249";

fn mismatch(snapshot: &Snapshot, set: &str) -> Result<(String, String), String> {
    let machines = snapshot.machines_of(set);
    let machine = machines.first().ok_or(format!("no Machine in {set}"))?;
    let name = machine.name_any();
    match join_condition(machine) {
        Some((status, reason, message)) if reason == windows_join::reasons::NODE_IP_MISMATCH => {
            assert_eq!(status, "False");
            Ok((name, message))
        }
        other => Err(format!("{name}: WindowsJoin is {other:?}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_registered_with_an_ip_the_machine_lacks_is_node_ip_mismatch() {
    let mut options = options("node-ip-mismatch");
    options.guest_behaviour = GuestBehaviour {
        hybrid_overlay_after_ms: Some(100),
        ..GuestBehaviour::default()
    };
    let wrong: IpAddr = WRONG_IP.parse().unwrap();
    options.node_agent.overrides = vec![
        (
            format!("{WINDOWS_IMAGE_SET}-"),
            JoinBehaviour {
                node_ip: NodeIpChoice::Fixed(wrong),
                ..JoinBehaviour::default()
            },
        ),
        (
            format!("{WINDOWS_TEMPLATE_SET}-"),
            JoinBehaviour {
                node_ip: NodeIpChoice::HybridOverlay,
                ..JoinBehaviour::default()
            },
        ),
    ];
    let world = start(options).await;
    world.scale(WINDOWS_IMAGE_SET, 1).await.unwrap();
    world.scale(WINDOWS_TEMPLATE_SET, 1).await.unwrap();

    let snapshot = world
        .wait_for("NodeIPMismatch on both Machines", TIMEOUT, |s| {
            mismatch(s, WINDOWS_IMAGE_SET)?;
            mismatch(s, WINDOWS_TEMPLATE_SET).map(drop)
        })
        .await
        .unwrap();

    let (name, message) = mismatch(&snapshot, WINDOWS_IMAGE_SET).unwrap();
    assert!(message.contains(WRONG_IP), "{message}");
    assert!(
        message.contains("10.16"),
        "names the WMCO version: {message}"
    );
    let (overlay_name, overlay_message) = mismatch(&snapshot, WINDOWS_TEMPLATE_SET).unwrap();
    let overlay_ip = snapshot
        .join(&overlay_name)
        .and_then(|j| j.node_ip)
        .unwrap()
        .to_string();
    assert!(overlay_ip.starts_with("10.13"), "{overlay_ip}");
    assert!(overlay_message.contains(&overlay_ip), "{overlay_message}");

    for machine_name in [&name, &overlay_name] {
        let machine = snapshot.machine(machine_name).unwrap();
        // Never linked: nodelink finds no Machine with the Node's IP, and the controller does
        // not give the Node a providerID that would link it anyway.
        assert_ne!(machine.phase(), phase::RUNNING);
        let node = snapshot.node(machine_name).expect("the kubelet registered");
        assert!(
            node.spec
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .is_none_or(str::is_empty),
            "{machine_name}: the Node got a providerID"
        );
        wait_event(
            &world,
            machine_name,
            windows_join::reasons::NODE_IP_MISMATCH,
            "Warning",
        )
        .await;
    }
    world.shutdown().await;
}
