//! Configuration of a mock instance: where it listens, credentials, timings, guest misbehaviours.

use std::fmt;
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::seed::Seed;

/// How long the simulated asynchronous work takes. All values are milliseconds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Timings {
    /// Time a task spends in QUEUED before it starts.
    pub task_queued_ms: u64,
    /// Time a task spends in RUNNING before it ends.
    pub task_running_ms: u64,
    /// Time from a VM powering on to its NICs reporting addresses.
    pub boot_to_address_ms: u64,
}

impl Timings {
    /// Short timings for in-process tests: tens of milliseconds.
    pub fn for_tests() -> Self {
        Self {
            task_queued_ms: 10,
            task_running_ms: 30,
            boot_to_address_ms: 40,
        }
    }

    /// "Shortened" timings for the sandbox and manual use: a second or two.
    pub fn sandbox() -> Self {
        Self {
            task_queued_ms: 300,
            task_running_ms: 1200,
            boot_to_address_ms: 2000,
        }
    }
}

impl Default for Timings {
    fn default() -> Self {
        Self::for_tests()
    }
}

/// Misbehaviours of guests seen in the field, all off by default.
///
/// `apipa_first_ms` and the hybrid-overlay address concern Windows guests only (the VM's image, template or
/// source VM is marked `os: windows`, or its guest customization is sysprep).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GuestBehaviour {
    /// Windows: first report a 169.254.x.y LEARNED address for this long, then the pool address.
    pub apipa_first_ms: Option<u64>,
    /// Windows: this long after the pool address appears, an extra LEARNED address from `hybrid_overlay_cidr`
    /// appears on the first NIC (the OVN-Kubernetes hybrid-overlay interface).
    pub hybrid_overlay_after_ms: Option<u64>,
    /// IPv4 network (`a.b.c.d/len`) the hybrid-overlay addresses come from.
    pub hybrid_overlay_cidr: String,
    /// Extra time, on top of `boot_to_address_ms`, during which no address at all is reported (all guests).
    pub no_address_ms: u64,
}

impl Default for GuestBehaviour {
    fn default() -> Self {
        Self {
            apipa_first_ms: None,
            hybrid_overlay_after_ms: None,
            hybrid_overlay_cidr: "10.132.0.0/14".to_owned(),
            no_address_ms: 0,
        }
    }
}

/// How `POST /vms/{uuid}/clone` behaves where real Prism Central's behaviour is not established; both off by
/// default.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CloneBehaviour {
    /// The clone gets a UUID of its own instead of the `metadata.uuid` the request asked for; the task's
    /// `entity_reference_list` names the real one. The v3 swagger's `vm_clone_input` says only that a client
    /// "can provide the optional UUID"; whether every Prism honours it is not established.
    pub ignores_requested_uuid: bool,
    /// A clone of a VM that is already the source of a running clone answers 409
    /// `CONCURRENT_REQUESTS_NOT_ALLOWED`. No source says whether a real Prism serializes clones of one VM.
    pub concurrent_clones_conflict: bool,
}

/// Where a template deploy's task names the VMs it made: both shapes appear in real sources.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeployTaskShape {
    /// The parent task lists only the template (`vmm:content:templates`); each VM is named by a subtask of
    /// its own. The Ansible collection's ntnx_templates_deploy_v2 RETURN block shows a real deploy task with
    /// the template alone in `entities_affected` and its work in `sub_tasks` (reference/02, corrections).
    #[default]
    VmsInSubtasks,
    /// The parent task lists the template and each VM (`vmm:ahv:config:vm`), with no per-VM subtask:
    /// terraform-provider-nutanix takes the deployed VM from the parent task's `entitiesAffected` with rel
    /// `vmm:ahv:config:vm` (nutanix/services/vmmv2/resource_nutanix_template_deploy_v2.go calling
    /// `common.ExtractEntityUUIDFromTask`, since its release 2.4.0, 6af3af8f of 2026-01-08).
    VmsOnParentTask,
}

/// Credentials the mock accepts. `Debug` never shows the secrets.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// Basic-auth user name.
    pub username: String,
    /// Basic-auth password.
    pub password: String,
    /// Value accepted in the `X-ntnx-api-key` header; `None` disables API-key auth.
    pub api_key: Option<String>,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl Default for Credentials {
    fn default() -> Self {
        Self {
            username: "admin".to_owned(),
            password: "mock-password".to_owned(),
            api_key: Some("mock-api-key".to_owned()),
        }
    }
}

/// Everything needed to start a mock.
#[derive(Clone, Debug)]
pub struct MockConfig {
    /// Address to bind; port 0 picks a free port.
    pub listen: SocketAddr,
    /// Serve HTTPS with a generated CA (default) or plain HTTP.
    pub tls: bool,
    /// Accepted credentials.
    pub credentials: Credentials,
    /// Entities present at start.
    pub seed: Seed,
    /// Seed of the one random-number generator (UUIDs, MACs, session tokens, fault draws).
    /// `None` uses the seed file's `rng_seed`, else 0.
    pub rng_seed: Option<u64>,
    /// Durations of simulated work.
    pub timings: Timings,
    /// Guest misbehaviours.
    pub guest: GuestBehaviour,
    /// Lifetime of a session cookie (real Prism Central: about 15 minutes).
    pub session_ttl_secs: u64,
}

impl Default for MockConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            tls: true,
            credentials: Credentials::default(),
            seed: Seed::default(),
            rng_seed: None,
            timings: Timings::for_tests(),
            guest: GuestBehaviour::default(),
            session_ttl_secs: 900,
        }
    }
}
