//! The controllers of this binary and what they share.
//!
//! [`controllers`] lists them; the runtime starts every one of them under the leader lease (and
//! only there): the Machine controller ([`machine`]: lifecycle, drain, node link), the
//! MachineSet controller ([`machineset`]: capacity annotations) and the Windows join reconciler
//! ([`windows_join`]: the `WindowsJoin` condition); the first and the last share one Machine
//! cache ([`machine_cache`]) and one Node cache ([`nodes`]).
//! Another controller is added by writing a function `fn(Arc<Shared>) -> ControllerFuture` and
//! listing it in [`controllers`]; what its reconcile is wrapped in (keys, metrics, backoff, the
//! run loop's log, events) is [`kit`]'s.

// The ground floor, which knows no controller: what they share and how a reconcile is wrapped.
pub mod backoff;
pub mod cluster_config;
pub mod error;
pub mod events;
pub mod inputs;
pub mod kit;
pub mod machine_cache;
pub mod nodes;
pub mod shared;
pub mod stores_ready;

// What the Machine controller does besides its protocol, also used by the `validate` and
// `doctor` commands (prepare) and the Windows join reconciler (node_link).
pub mod drain;
pub mod node_link;
pub mod prepare;

// The controllers.
pub mod machine;
pub mod machineset;
pub mod windows_join;

pub use shared::{CONTROLLER_NAME, ControllerSettings, Shared, WatchedSecrets};

use std::sync::Arc;

use futures::future::BoxFuture;
use kube::Api;

use crate::api::GuardedMachine;
use machine_cache::MachineCache;
use nodes::NodeCache;

/// A running controller.
pub type ControllerFuture = BoxFuture<'static, ()>;

/// Every controller of the binary, by name. The runtime runs them all while it leads.
/// The Machine controller and the Windows join reconciler read one Machine cache and one Node
/// cache, whose watches run beside them ("machine-cache", "node-cache").
pub fn controllers(shared: Arc<Shared>) -> Vec<(&'static str, ControllerFuture)> {
    let machines: Api<GuardedMachine> = match &shared.settings.namespace {
        Some(namespace) => Api::namespaced(shared.client.clone(), namespace),
        None => Api::all(shared.client.clone()),
    };
    let cache = MachineCache::new();
    shared.actuator.set_vm_scope(cache.vm_scope());
    shared.metrics.count_machines_of(cache.store());
    let (for_machine, for_join) = (cache.subscribe(), cache.subscribe());
    let mut nodes = NodeCache::new();
    let (nodes_for_machine, nodes_for_join) = (nodes.subscribe(), nodes.subscribe());
    vec![
        ("machine-cache", Box::pin(cache.run(machines))),
        ("node-cache", Box::pin(nodes.run(shared.client.clone()))),
        (
            "machine",
            Box::pin(machine::run(shared.clone(), for_machine, nodes_for_machine)),
        ),
        ("machineset", Box::pin(machineset::run(shared.clone()))),
        (
            "windows-join",
            Box::pin(windows_join::run(shared, for_join, nodes_for_join)),
        ),
    ]
}
