//! The Nutanix machine-api provider.
//!
//! Layers, each depending only on the ones above it:
//! - [`api`]: serde types for Machine, MachineSet and the Nutanix provider spec and status;
//! - [`plan`]: pure, synchronous decisions (validation, Prism request bodies, unattend.xml,
//!   cloud-init, addresses, MachineSet annotations, lifecycle steps, CSR checks);
//!   both live in the `nutanix-machine-plan` crate, which has no I/O dependency;
//! - [`render`]: the `render` command, which previews a plan without contacting Prism;
//! - [`actuator`]: everything asked of Prism Central (and the create protocol's documentation);
//! - [`metrics`]: the Prometheus registry;
//! - [`controller`]: the kube-rs controllers and what they share;
//! - [`runtime`]: command line, logging, leader election, endpoints, `validate`;
//! - [`cli_main`]: the command line's dispatch (the binary's `main`, also run by the sandbox and
//!   the end-to-end tests to start the controller as a process of their own).

mod cli_main;

pub use cli_main::cli_main;

pub mod actuator;
pub use nutanix_machine_plan::{api, plan};
pub mod controller;
pub mod metrics;
pub mod render;
pub mod runtime;
