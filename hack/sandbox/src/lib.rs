//! Simulators of the cluster's other actors, for the sandbox and the end-to-end tests.
//!
//! The Nutanix machine controller is one actor among several in a real cluster. These simulate
//! the others, each as a task talking to the Kubernetes API over HTTP with kube-rs, as the real
//! component does (so they run against kube-sim and would against a real cluster):
//! - [`machineset`]: the machine-api-operator's MachineSet replica controller;
//! - [`nodelink`]: the machine-api-operator's nodelink controller;
//! - [`node_agent`]: the kubelet of each VM (and WMCO for Windows VMs), registering Nodes through
//!   the kubelet's CSR flow for the VMs running in prism-mock;
//! - [`approver`]: the cluster-machine-approver;
//! - [`autoscaler`]: the OpenShift cluster autoscaler's node groups, templates, scale-up decision and
//!   API actions (commands, not a loop);
//! - [`machine_autoscaler`]: the cluster-autoscaler-operator's part for MachineAutoscalers.
//!
//! The actors read Machines and MachineSets through [`machine_api`], openshift/api's Go types,
//! and decide from their own component's rules, cited at the code: none calls the provider's code
//! (the sandbox only runs the controller's binary).
//!
//! On top of them, the one-command sandbox:
//! - [`world`]: prism-mock and kube-sim in-process, the CRDs and [`manifests`] applied, the actors
//!   running, and the controller as a separate process (killable, restartable);
//! - [`scenario`]: the scenario's steps, checks and closing report;
//! - [`chaos`]: the chaos soak (`sandbox chaos`): faults on, the controller killed, invariants checked;
//! - [`bench`]: the scale benchmark (`sandbox bench --machines N`);
//! - [`real_cluster`]: the real control plane (etcd, kube-apiserver, kube-controller-manager, the
//!   machine-api-operator's binaries) the world can run on instead of kube-sim;
//! - [`writes`]: who wrote what on kube-sim and on the real API server, compared.
//!
//! See the README for what each simulates and what it does not.

pub mod actor;
pub mod api_proxy;
pub mod approver;
pub mod autoscaler;
pub mod bench;
pub mod chaos;
pub mod cluster_objects;
pub mod csr;
pub mod ipam;
pub mod leadership;
pub mod machine_api;
pub mod machine_autoscaler;
pub mod machineset;
pub mod manifests;
pub mod node_agent;
pub mod nodelink;
pub mod plots;
pub mod prometheus;
pub mod real_cluster;
pub mod scenario;
pub mod world;
pub mod writes;

pub use actor::ActorHandle;

/// The namespace of the machine API's objects in OpenShift.
pub const MACHINE_API_NAMESPACE: &str = "openshift-machine-api";
