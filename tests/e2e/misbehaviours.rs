//! Guests that misbehave as seen in the field: a Windows VM that reports an APIPA (169.254)
//! address first, then grows a hybrid-overlay address after its real one. The Machine must still
//! report the primary NIC's address first (and never the others), and the Node must join with it.

use std::sync::Mutex;

use kube::ResourceExt;
use nutanix_machine_controller::plan::windows_join;
use prism_mock::GuestBehaviour;
use sandbox::manifests::WINDOWS_IMAGE_SET;
use sandbox::world::Snapshot;

use crate::support::{TIMEOUT, VM_NETWORK, addresses, events_of, in_network, options, start};

const HYBRID_OVERLAY: (std::net::Ipv4Addr, u8) = (std::net::Ipv4Addr::new(10, 132, 0, 0), 14);

fn is_link_local(ip: &str) -> bool {
    ip.starts_with("169.254.")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apipa_first_and_a_late_hybrid_overlay_address_still_give_the_primary_ip_and_a_joined_node()
{
    let mut options = options("misbehaviours");
    options.guest_behaviour = GuestBehaviour {
        apipa_first_ms: Some(1500),
        hybrid_overlay_after_ms: Some(500),
        ..GuestBehaviour::default()
    };
    let world = start(options).await;
    world.scale(WINDOWS_IMAGE_SET, 1).await.unwrap();

    // Watch every snapshot: the VM must misbehave, the Machine must never show it.
    let vm_reported_apipa_first = Mutex::new(false);
    let machine_addresses_seen = Mutex::new(Vec::<String>::new());
    let observe = |snapshot: &Snapshot| {
        for vm in &snapshot.vms {
            if vm.addresses.first().is_some_and(|ip| is_link_local(ip)) {
                *vm_reported_apipa_first.lock().unwrap() = true;
            }
        }
        for machine in &snapshot.machines {
            machine_addresses_seen
                .lock()
                .unwrap()
                .extend(addresses(machine, "InternalIP"));
        }
    };
    let snapshot = world
        .wait_until("the Windows Machine joined", TIMEOUT, |s| {
            observe(s);
            s.set_joined(WINDOWS_IMAGE_SET, 1)
        })
        .await
        .unwrap();
    let name = snapshot.machines_of(WINDOWS_IMAGE_SET)[0].name_any();

    // The overlay address comes after the real one; wait until the VM has it, then until the
    // controller has listed the VMs twice more (a Running Machine is checked at each refresh).
    let lists = || world.admin().count("POST", "/api/nutanix/v3/vms/list");
    world
        .wait_until("the hybrid-overlay address on the VM", TIMEOUT, |s| {
            observe(s);
            s.vm(&name)
                .is_some_and(|vm| vm.addresses.iter().any(|ip| in_network(ip, HYBRID_OVERLAY)))
        })
        .await
        .unwrap();
    let lists_then = lists();
    let snapshot = world
        .wait_until("two more inventory refreshes", TIMEOUT, |s| {
            observe(s);
            lists() >= lists_then + 2
        })
        .await
        .unwrap();

    assert!(
        *vm_reported_apipa_first.lock().unwrap(),
        "the VM never reported an APIPA address first: the misbehaviour did not happen"
    );
    let vm = snapshot.vm(&name).unwrap();
    assert!(
        vm.addresses.len() >= 2 && in_network(&vm.addresses[0], VM_NETWORK),
        "the VM reports its pool address, then the overlay one: {:?}",
        vm.addresses
    );
    for ip in machine_addresses_seen.lock().unwrap().iter() {
        assert!(
            in_network(ip, VM_NETWORK),
            "Machine {name} reported {ip}, not its primary NIC's address"
        );
    }
    let machine = snapshot.machine(&name).unwrap();
    let ips = addresses(machine, "InternalIP");
    assert_eq!(ips, [vm.addresses[0].clone()], "only the primary address");
    assert_eq!(
        snapshot.join_gap(machine),
        None,
        "still joined after the overlay address appeared"
    );
    let node_ip = snapshot.join(&name).unwrap().node_ip.unwrap().to_string();
    assert_eq!(
        node_ip, ips[0],
        "the kubelet registered the primary address"
    );
    let events = events_of(&world, &name).await;
    assert!(
        !events
            .iter()
            .any(|(reason, _, _)| reason == windows_join::reasons::NODE_IP_MISMATCH),
        "no NodeIPMismatch on the way: {events:?}"
    );
    world.shutdown().await;
}
