//! Admission webhooks of components kube-sim stands in for, applied where the real API server
//! calls them. Off unless configured ([`crate::Config::machine_api_webhooks`]).

pub mod go_json;
pub mod machine_api;

#[cfg(test)]
mod tests;

pub use machine_api::MachineApiWebhooks;
