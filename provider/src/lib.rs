//! The Nutanix machine-api provider.
//!
//! Layers, each depending only on the ones above it:
//! - [`api`]: serde types for Machine, MachineSet and the Nutanix provider spec and status;
//! - [`plan`]: pure, synchronous decisions (validation, Prism request bodies, unattend.xml,
//!   cloud-init, addresses, MachineSet annotations, lifecycle steps, CSR checks);
//!   both live in the `nutanix-machine-plan` crate, which has no I/O dependency;
//! - [`render`]: the `render` command, which previews a plan without contacting Prism;
//! - [`actuator`]: everything asked of Prism Central;
//! - [`metrics`]: the Prometheus registry;
//! - [`controller`]: the kube-rs controllers and what they share;
//! - [`runtime`]: command line, logging, leader election, endpoints, `validate`, `doctor`;
//! - [`cli_main`]: the command line's dispatch (the binary's `main`, also run by the sandbox and
//!   the end-to-end tests to start the controller as a process of their own).

mod cli_main;

/// jemalloc, with the options in `.cargo/config.toml`: glibc's allocator kept much of what a
/// scale-up's bursts freed in its per-thread arenas (at 1,000 Machines the controller's peak was
/// 117.6 MiB with it, 87.5 MiB with this one, and half the CPU: docs/performance.md). Declared in
/// the library, so that every binary that runs the controller (the shipped one, and the sandbox
/// that re-executes itself as the controller for the benchmark) has the same allocator. The
/// `system-allocator` feature leaves it out for heap profilers that follow malloc (heaptrack:
/// docs/performance.md).
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

pub use cli_main::cli_main;

pub mod actuator;
pub use nutanix_machine_plan as plan;
pub use nutanix_machine_plan::api;
pub mod controller;
pub mod metrics;
pub mod render;
pub mod runtime;
