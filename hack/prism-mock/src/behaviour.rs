//! How the simulation behaves: the timings of asynchronous work, the guests' misbehaviours, and the
//! choices where real Prism Central's behaviour is not established. The seed and the configuration both
//! carry these, so they sit below both.

use serde::{Deserialize, Serialize};

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
