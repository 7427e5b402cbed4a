//! The provider's pure half: what a Machine means and what to do about it, with no I/O. Nothing
//! here talks to Prism or Kubernetes; what the actuator looked up comes in as
//! [`vm::resolve::ResolvedReferences`], and what the controller must do goes out as values.
//!
//! - [`api`]: serde types for Machine, MachineSet and the Nutanix provider spec and status;
//!
//! then one module per capability, named as the controller module that carries it out:
//! - [`vm`]: a providerSpec validated into a VM plan and written as a Prism request body
//!   (with its unattend.xml or cloud-init);
//! - [`machine`]: the Machine protocol ([`machine::decide`]) and its building blocks
//!   (lifecycle steps, the create protocol's readings, status patches, addresses, drain, Node
//!   link);
//! - [`machineset`]: a MachineSet's capacity annotations;
//! - [`windows_join`]: the `WindowsJoin` condition and the CSR checks behind it;
//! - [`doctor`]: the `doctor` command's findings about a cluster and its Prism Central.
//!
//! This crate depends on no async runtime, Kubernetes client or HTTP client (`kube` only for its
//! types and derive, Prism's data through `prism-types`), so that "pure" is the compiler's to
//! check: `tests/purity.rs` fails when such a dependency creeps in. The controller crate
//! (`nutanix-machine-controller`) re-exports `api`, and the rest as `plan`
//! (`nutanix_machine_controller::plan::machine` is this crate's `machine`).

pub mod api;
pub mod doctor;
pub mod machine;
pub mod machineset;
pub mod vm;
pub mod windows_join;
