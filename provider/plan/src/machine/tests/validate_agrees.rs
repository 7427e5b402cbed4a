//! `validate` refuses the Machines the controller refuses (issue 38): the same Machines, static
//! addresses included, go through the plan `validate` makes (its in-itself check, then
//! [`plan_unclaimed`] with the lookups of the world's Prism, as `resolve_and_plan` runs them) and
//! through the protocol in the world, which fails a Machine it refuses before any VM is made.
//!
//! What only the claimed address can tell (an address outside its subnet, an IPv6 address) is
//! the pool's to hand out: `validate` cannot know it before a claim is bound.

use pretty_assertions::assert_eq;

use super::*;
use crate::vm::secret::UserData;
use crate::vm::validate::{UnreadUserData, invalid_in_itself, plan_unclaimed};

/// Whether `validate` refuses the world's Machine.
fn validate_refuses(world: &World) -> bool {
    let machine: Machine = serde_json::from_value(world.machine.clone()).unwrap();
    let spec = ParsedSpec::of(&machine);
    if invalid_in_itself(&machine, &spec).is_some() {
        return true;
    }
    let user_data = UserData::new(world.user_data_secret.clone());
    let password = AdminPassword::new(GENERATED_PASSWORD).unwrap();
    plan_unclaimed(
        &machine,
        &spec,
        &world.resolved(),
        Some(&user_data),
        UnreadUserData::NotChecked,
        Some(&password),
    )
    .is_err()
}

/// Whether the controller refuses it: the Machine fails before any VM is made.
fn controller_refuses(world: &mut World) -> bool {
    world.run_until(10, |w| w.phase() == phase::FAILED || !w.vms.is_empty());
    world.phase() == phase::FAILED
}

fn pool(world: World) -> World {
    let mut world = world.with_pool(&["10.0.0.21"]);
    world.auto_bind = true;
    world
}

fn unmanaged(mut world: World) -> World {
    world.subnet_cidr = None;
    world
}

fn windows(mut world: World) -> World {
    world.make_windows();
    world
}

fn annotate(mut world: World, key: &str, value: &str) -> World {
    world.machine["metadata"]["annotations"][key] = json!(value);
    world
}

#[test]
fn validate_refuses_exactly_the_machines_the_controller_refuses() {
    let nameservers = crate::api::NAMESERVERS_ANNOTATION;
    let ip_pool = crate::api::IP_POOL_ANNOTATION;
    let sysprep = crate::api::GUEST_CUSTOMIZATION_ANNOTATION;
    let table: Vec<(&str, World, bool)> = vec![
        ("a Linux Machine from an image", World::new("image"), false),
        (
            "a Linux Machine from a template",
            World::new("template"),
            false,
        ),
        (
            "a pool on a subnet Prism manages",
            pool(World::new("image")),
            false,
        ),
        (
            "an ip-pool annotation that does not parse",
            annotate(World::new("image"), ip_pool, "InClusterIPPool/workers"),
            true,
        ),
        (
            "more pools than NICs",
            annotate(
                World::new("image"),
                ip_pool,
                "ipam.cluster.x-k8s.io/InClusterIPPool/a,ipam.cluster.x-k8s.io/InClusterIPPool/b",
            ),
            true,
        ),
        (
            "a Linux Machine's pool on a subnet Prism does not manage",
            unmanaged(pool(World::new("image"))),
            true,
        ),
        (
            "a Windows Machine's pool on an unmanaged subnet without its DNS servers",
            unmanaged(pool(windows(World::new("image")))),
            true,
        ),
        (
            "a Windows Machine's pool on an unmanaged subnet with DNS servers that do not parse",
            annotate(
                unmanaged(pool(windows(World::new("image")))),
                nameservers,
                "10.0.0.2,dns",
            ),
            true,
        ),
        (
            "a Windows Machine's pool on an unmanaged subnet with its DNS servers",
            annotate(
                unmanaged(pool(windows(World::new("image")))),
                nameservers,
                "10.0.0.2",
            ),
            false,
        ),
        (
            "a Sysprep Machine's pool on an unmanaged subnet",
            annotate(
                annotate(
                    unmanaged(pool(windows(World::new("image")))),
                    nameservers,
                    "10.0.0.2",
                ),
                sysprep,
                "Sysprep",
            ),
            true,
        ),
        (
            "a Windows Machine with the Linux workers' user data",
            {
                let mut world = World::new("image");
                world.machine["metadata"]["labels"]["machine.openshift.io/os-id"] =
                    json!("Windows");
                world
            },
            true,
        ),
        (
            "Sysprep on a Linux Machine",
            annotate(World::new("image"), sysprep, "Sysprep"),
            true,
        ),
        (
            "memory below the minimum",
            {
                let mut world = World::new("image");
                world.machine["spec"]["providerSpec"]["value"]["memorySize"] = json!("1Gi");
                world
            },
            true,
        ),
    ];
    for (case, mut world, refused) in table {
        assert_eq!(validate_refuses(&world), refused, "validate: {case}");
        assert_eq!(
            controller_refuses(&mut world),
            refused,
            "controller: {case}: {:?}",
            world.log
        );
    }
}
