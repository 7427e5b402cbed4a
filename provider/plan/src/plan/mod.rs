//! The plan layer: pure, synchronous decisions. Nothing here talks to Prism or Kubernetes; what
//! the actuator looked up comes in as [`vm::resolve::ResolvedReferences`], and what the
//! controller must do goes out as values.
//!
//! One folder per capability, named as the controller module that carries it out:
//! - [`vm`]: a providerSpec validated into a VM plan and written as a Prism request body
//!   (with its unattend.xml or cloud-init);
//! - [`machine`]: the Machine protocol ([`machine::decide`]) and its building blocks
//!   (lifecycle steps, the create protocol's readings, status patches, addresses, drain, Node
//!   link);
//! - [`machineset`]: a MachineSet's capacity annotations;
//! - [`windows_join`]: the `WindowsJoin` condition and the CSR checks behind it;
//! - [`doctor`]: the `doctor` command's findings about a cluster and its Prism Central.

pub mod doctor;
pub mod machine;
pub mod machineset;
pub mod vm;
pub mod windows_join;
