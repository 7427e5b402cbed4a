//! End-to-end tests of the real `nutanix-machine-controller` binary against prism-mock (HTTPS)
//! and kube-sim, both in-process. Each test has its own mock, API server and controller
//! process; they poll for conditions with generous timeouts and assert no timing.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod cli;
mod credentials;
mod drain;
mod faults;
mod harness;
mod leader;
mod lifecycle;
mod machineset;
mod measure;
mod prism_answers;
#[path = "../support/rbac.rs"]
mod rbac;
mod windows_join;
