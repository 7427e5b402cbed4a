//! In-process tests of the Machine controller shell: the controller runs in this process
//! (`controller::machine::run` on `controller::Shared`) against kube-sim and prism-mock, and
//! each test asserts the order of the writes one Machine causes on both servers, from one
//! journal ([`journal`]). They assert behaviour seen from outside (what reaches the servers,
//! in which order), never the controller's internals.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod controller;
mod create;
mod deletion;
mod deploy;
#[path = "../controller/harness.rs"]
#[allow(
    dead_code,
    reason = "shared with the subprocess tests; these tests use the environment, not the process"
)]
mod harness;
mod ipam;
mod journal;
#[path = "../support/rbac.rs"]
mod rbac;
mod restart;
mod steady;
