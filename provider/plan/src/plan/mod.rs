//! The plan layer: pure, synchronous decisions. Nothing here talks to Prism or Kubernetes; what
//! the actuator looked up comes in as [`ResolvedReferences`], and what the controller must do
//! goes out as values.

pub mod addresses;
pub mod annotations;
pub mod cloud_init;
pub mod csr;
pub mod csr_pem;
pub mod drain;
pub mod errors;
pub mod guest;
pub mod identity;
pub mod join;
pub mod lifecycle;
pub mod machine;
pub mod machine_status;
pub mod machineset;
pub mod networks;
pub mod node_link;
pub mod provision;
pub mod request;
pub mod resolve;
pub mod secret;
pub mod unattend;
pub mod validate;
pub mod vm_plan;

pub use errors::{ErrorClass, FieldError, ValidationErrors};
pub use identity::{MachineIdentity, identity_of};
pub use resolve::{Lookup, RequiredLookups, ResolutionMode, ResolvedReferences};
pub use secret::{AdminPassword, UserData};
pub use validate::{PlanContext, plan_vm};
pub use vm_plan::VmPlan;
