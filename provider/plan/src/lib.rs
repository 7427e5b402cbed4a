//! The provider's pure half: what a Machine means and what to do about it, with no I/O.
//!
//! - [`api`]: serde types for Machine, MachineSet and the Nutanix provider spec and status;
//! - [`plan`]: synchronous decisions (validation, Prism request bodies, unattend.xml, cloud-init,
//!   addresses, MachineSet annotations, lifecycle steps, CSR checks).
//!
//! This crate depends on no async runtime, Kubernetes client or HTTP client (`kube` only for its
//! types and derive, Prism's data through `prism-types`), so that "pure" is the compiler's to
//! check: `tests/purity.rs` fails when such a dependency creeps in. The controller crate
//! (`nutanix-machine-controller`) re-exports both modules.

pub mod api;
pub mod plan;
