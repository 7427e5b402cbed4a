//! The entities a mock starts with: from a YAML file or the built-in default.
//!
//! UUIDs left out are drawn from the mock's seeded random-number generator, so the same seed gives the same UUIDs.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::behaviour::{GuestBehaviour, Timings};

mod entities;

pub use entities::{
    CategorySeed, ClusterSeed, GpuSeed, HostSeed, ImageSeed, PrismCentralSeed, ProjectSeed,
    SubnetSeed, TemplateSeed, VmSeed,
};

/// Guest operating system family, used for the Windows-only misbehaviours.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GuestOs {
    /// Linux (RHCOS and others).
    #[default]
    Linux,
    /// Windows Server.
    Windows,
}

/// Error loading a seed file.
#[derive(Debug, thiserror::Error)]
pub enum SeedError {
    /// The file could not be read.
    #[error("cannot read seed file {path}: {source}")]
    Read {
        /// File path.
        path: String,
        /// Underlying error.
        source: std::io::Error,
    },
    /// The file is not a valid seed document.
    #[error("seed file {path} is not a valid seed: {message}")]
    Parse {
        /// File path.
        path: String,
        /// Parser message.
        message: String,
    },
    /// The seed refers to something it does not define, or defines something twice.
    #[error("seed: {0}")]
    Reference(String),
    /// The seed asks for more than the mock can hold.
    #[error("seed: {0}")]
    TooMany(String),
}

/// The whole seed document.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Seed {
    /// Seed of the random-number generator (overridden by `MockConfig::rng_seed` / `--rng-seed`).
    #[serde(default)]
    pub rng_seed: Option<u64>,
    /// Optional timings (overridden by explicit configuration).
    #[serde(default)]
    pub timings: Option<Timings>,
    /// Optional guest misbehaviours.
    #[serde(default)]
    pub guest_behaviour: Option<GuestBehaviour>,
    /// The Prism Central itself, which also appears as a cluster entity.
    #[serde(default)]
    pub prism_central: PrismCentralSeed,
    /// Prism Elements.
    #[serde(default)]
    pub clusters: Vec<ClusterSeed>,
    /// Hosts with their GPUs.
    #[serde(default)]
    pub hosts: Vec<HostSeed>,
    /// Subnets, with an address pool or unmanaged.
    #[serde(default)]
    pub subnets: Vec<SubnetSeed>,
    /// Image-service images.
    #[serde(default)]
    pub images: Vec<ImageSeed>,
    /// Projects.
    #[serde(default)]
    pub projects: Vec<ProjectSeed>,
    /// Category keys and their values.
    #[serde(default)]
    pub categories: Vec<CategorySeed>,
    /// v4 VM templates.
    #[serde(default)]
    pub templates: Vec<TemplateSeed>,
    /// VMs present at start (COMPLETE, no task).
    #[serde(default)]
    pub vms: Vec<VmSeed>,
    /// How many VMs of other tenants of the Prism Central to add (`foreign-vm-000001`, …), which
    /// belong to no Machine: powered on, spread over the seeded subnets (at most
    /// [`MAX_FOREIGN_VMS`]; see the README, "Foreign VMs").
    #[serde(default)]
    pub foreign_vms: u32,
}

/// The most foreign VMs a seed may ask for (their names have six digits).
pub const MAX_FOREIGN_VMS: u32 = 999_999;

impl Seed {
    /// Reads and parses a YAML seed file.
    pub fn from_file(path: &Path) -> Result<Self, SeedError> {
        let display = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| SeedError::Read {
            path: display.clone(),
            source,
        })?;
        Self::from_yaml(&text).map_err(|message| SeedError::Parse {
            path: display,
            message,
        })
    }

    /// Parses a YAML seed document.
    pub fn from_yaml(text: &str) -> Result<Self, String> {
        serde_saphyr::from_str::<Seed>(text).map_err(|e| e.to_string())
    }

    /// The built-in seed: one Prism Element, two subnets, an RHCOS and a Windows Server 2022 image, a Windows
    /// template, a powered-off Windows source VM, a project, a few categories, a host with one GPU.
    pub fn builtin() -> Self {
        Self::from_yaml(BUILTIN_SEED_YAML).unwrap_or_else(|_| Self::empty())
    }

    /// A seed with only the Prism Central entity.
    pub fn empty() -> Self {
        Self {
            rng_seed: None,
            timings: None,
            guest_behaviour: None,
            prism_central: PrismCentralSeed::default(),
            clusters: Vec::new(),
            hosts: Vec::new(),
            subnets: Vec::new(),
            images: Vec::new(),
            projects: Vec::new(),
            categories: Vec::new(),
            templates: Vec::new(),
            vms: Vec::new(),
            foreign_vms: 0,
        }
    }
}

impl Default for Seed {
    fn default() -> Self {
        Self::builtin()
    }
}

/// The built-in seed (`seeds/default.yaml`, compiled in; a unit test checks that it parses).
pub const BUILTIN_SEED_YAML: &str = include_str!("../seeds/default.yaml");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_seed_parses_and_has_what_the_issue_lists() {
        let seed = Seed::from_yaml(BUILTIN_SEED_YAML).unwrap();
        assert_eq!(seed.clusters.len(), 1);
        assert_eq!(seed.subnets.len(), 2);
        assert_eq!(
            seed.images.iter().map(|i| i.os).collect::<Vec<_>>(),
            vec![GuestOs::Linux, GuestOs::Windows]
        );
        assert_eq!(seed.templates.len(), 1);
        assert_eq!(seed.vms.len(), 1);
        assert_eq!(seed.vms[0].power_state, "OFF");
        assert_eq!(seed.projects.len(), 1);
        assert!(seed.categories.len() >= 2);
        assert_eq!(seed.hosts[0].gpus.len(), 1);
    }

    #[test]
    fn unknown_fields_are_refused() {
        let err = Seed::from_yaml("clusters:\n  - name: a\n    colour: red\n").unwrap_err();
        assert!(err.contains("colour"), "{err}");
    }
}
