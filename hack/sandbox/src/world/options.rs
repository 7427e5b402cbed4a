//! How to build the world: which control plane, prism-mock's behaviour, the controller's command
//! and flags, the actors' settings, where files and progress lines go.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use prism_mock::{GuestBehaviour, Timings};

use super::cluster::ControlPlaneChoice;
use super::controller::{ControllerCommand, ControllerIntervals};
use super::observe::OBSERVE_EVERY;
use crate::node_agent::NodeAgentConfig;

/// Prints progress lines (the sandbox binary prints them on stdout).
pub type ProgressSink = Arc<dyn Fn(&str) + Send + Sync>;

/// How to build the world.
#[derive(Clone)]
pub struct WorldOptions {
    /// kube-sim with the stand-ins (the default), or the real control plane.
    pub control_plane: ControlPlaneChoice,
    /// Namespace of the machine API objects.
    pub namespace: String,
    /// prism-mock's delays.
    pub mock_timings: Timings,
    /// prism-mock's guest misbehaviours (APIPA first, late hybrid-overlay address).
    pub guest_behaviour: GuestBehaviour,
    /// Seed of prism-mock's random-number generator (UUIDs, fault draws); 0 when `None`.
    pub mock_rng_seed: Option<u64>,
    /// What prism-mock holds at start (its built-in seed, which the examples name, by default).
    pub mock_seed: prism_mock::Seed,
    /// The Prism password prism-mock accepts and the credentials Secret carries (prism-mock's
    /// default when `None`); a distinctive one makes a search of the logs for it meaningful.
    pub prism_password: Option<String>,
    pub controller: ControllerCommand,
    pub intervals: ControllerIntervals,
    /// The controller's `--v`.
    pub controller_verbosity: u8,
    /// Extra controller flags, after the sandbox's.
    pub controller_args: Vec<String>,
    /// How many replicas of the controller run (1; more only make sense with `--leader-elect`
    /// in `controller_args`).
    pub controller_replicas: usize,
    /// Each replica reaches the real API server through a proxy of its own
    /// ([`crate::api_proxy`]), which a run can slow down, reset or black-hole; the other actors go
    /// direct. Ignored on kube-sim.
    pub controller_api_proxies: bool,
    /// The node agent (its namespace is set to `namespace`).
    pub node_agent: NodeAgentConfig,
    /// Where kubeconfigs, the CA and the controller's log go; a temporary directory (deleted at
    /// shutdown) when `None`.
    pub work_dir: Option<PathBuf>,
    /// Where progress lines go while waiting; none when `None`.
    pub progress: Option<ProgressSink>,
    /// How often the background task takes a snapshot for the history (each lists every
    /// Machine, Node and VM: a benchmark with a thousand Machines looks less often).
    pub observe_every: Duration,
}

impl std::fmt::Debug for WorldOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorldOptions")
            .field("control_plane", &self.control_plane)
            .field("namespace", &self.namespace)
            .field("mock_timings", &self.mock_timings)
            .field("guest_behaviour", &self.guest_behaviour)
            .field("controller", &self.controller)
            .field("intervals", &self.intervals)
            .field("work_dir", &self.work_dir)
            .finish_non_exhaustive()
    }
}

impl WorldOptions {
    /// prism-mock's "shortened" delays (tasks 1.5 s, addresses 2 s after power-on), as the sandbox
    /// command runs.
    pub fn sandbox(controller: ControllerCommand) -> Self {
        Self {
            control_plane: ControlPlaneChoice::KubeSim,
            namespace: crate::MACHINE_API_NAMESPACE.to_owned(),
            mock_timings: Timings::sandbox(),
            guest_behaviour: GuestBehaviour::default(),
            mock_rng_seed: None,
            mock_seed: prism_mock::Seed::default(),
            prism_password: None,
            controller,
            intervals: ControllerIntervals::sandbox(),
            controller_verbosity: 2,
            controller_args: Vec::new(),
            controller_replicas: 1,
            controller_api_proxies: false,
            node_agent: NodeAgentConfig::default(),
            work_dir: None,
            progress: None,
            observe_every: OBSERVE_EVERY,
        }
    }

    /// prism-mock's test delays (tens of milliseconds), for the end-to-end tests.
    pub fn tests(controller: ControllerCommand) -> Self {
        Self {
            mock_timings: Timings::for_tests(),
            intervals: ControllerIntervals::tests(),
            // Trace level, so that a secrets check over the log sees everything logged.
            controller_verbosity: 6,
            ..Self::sandbox(controller)
        }
    }
}
