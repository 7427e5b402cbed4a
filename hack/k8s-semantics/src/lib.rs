//! What the cluster stand-ins (kube-sim, the sandbox, prism-mock) share of the real components'
//! rules, so that each rule is simulated once: Kubernetes resource quantities as Go reads them
//! ([`quantity`]) and the throw-away certificate authority that signs the stand-ins' serving and
//! client certificates ([`pki`]).
//!
//! Stand-ins only: the provider's crates keep their own readings and never depend on this one, so
//! that a test compares the provider against an independent simulation of the real rule.

pub mod pki;
pub mod quantity;
