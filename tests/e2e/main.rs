//! End-to-end tests: the Nutanix machine controller as a process (this package's `e2e-controller`
//! binary) against prism-mock and kube-sim, with the sandbox's simulated cluster actors (MachineSet
//! replica controller, nodelink, kubelet/WMCO node agent, approver, autoscaler), driven through
//! the sandbox's scenario library.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a panic is the failure report

mod bench;
mod chaos;
mod dashboard;
mod doctor;
mod examples;
mod leader;
mod mao_operator;
mod misbehaviours;
mod node_ip_mismatch;
mod official_samples;
mod real_cluster;
mod scenario;
mod secret_policy;
mod static_addresses;
mod support;
mod takeover;
mod writes;
