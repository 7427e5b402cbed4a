//! What the actuator looked up in Prism, as an input to the pure plan.
//!
//! Entities are keyed by how the providerSpec names them: the UUID for `type: uuid`, the name for
//! `type: name`. The actuator fills this from Prism (names compared exactly, client-side);
//! `render --resolve FILE.json` reads it from a file in this same JSON shape, for example:
//!
//! ```json
//! {
//!   "clusters": {"0005b0f1-8f43-a0f2-02b7-3cecef193712": {"uuid": "0005b0f1-8f43-a0f2-02b7-3cecef193712"}},
//!   "images": {"ocp-7x2kq-rhcos": {"uuid": "f2a1c0de-0000-4000-8000-000000000001", "sizeBytes": 17179869184}},
//!   "subnets": {"c7938dc6-7659-453e-a688-e26020c68e43":
//!               {"uuid": "c7938dc6-7659-453e-a688-e26020c68e43", "clusterUuid": "0005b0f1-8f43-a0f2-02b7-3cecef193712"}},
//!   "projects": {"ocp": {"error": "no project named \"ocp\""}},
//!   "categories": {"kubernetes-io-cluster-ocp-7x2kq": {"owned": true}},
//!   "hostGpus": [{"name": "Tesla T4", "vendor": "NVIDIA", "mode": "PASSTHROUGH_COMPUTE", "device_id": 7864, "status": "UNUSED"}],
//!   "failureDomains": [{"name": "fd-a", "cluster": {"type": "uuid", "uuid": "…"}, "subnets": [{"type": "name", "name": "vlan-10"}]}]
//! }
//! ```
//!
//! A lookup that failed carries `{"error": "…"}`. What is absent was not looked up: the plan
//! reports it as unresolved, except in [`ResolutionMode::Preview`], where names stay names.

use std::collections::{BTreeMap, BTreeSet};

use prism_types::quote::quoted;
use prism_types::v3::HostGpu;
use serde::{Deserialize, Serialize};

use crate::api::{
    BootType, IdentifierType, ImageKind, NutanixMachineProviderConfig, NutanixResourceIdentifier,
};

/// How to treat references the actuator did not resolve.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResolutionMode {
    /// Everything must be resolved before a request is built (the actuator).
    Strict,
    /// Unresolved names stay names in the request (the `render` preview); lookups that failed are
    /// still errors.
    Preview,
}

/// The outcome of one lookup.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Lookup<T> {
    /// Not found, more than one match, or Prism did not answer. The message says which.
    Failed {
        error: String,
    },
    Found(T),
}

impl<T> Lookup<T> {
    /// Transforms what was found; a failure stays as it is.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Lookup<U> {
        match self {
            Self::Found(found) => Lookup::Found(f(found)),
            Self::Failed { error } => Lookup::Failed { error },
        }
    }
}

/// Results of the Prism lookups one Machine needs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResolvedReferences {
    #[serde(default)]
    pub clusters: BTreeMap<String, Lookup<ResolvedEntity>>,
    /// Image-service images: the boot image (`imageKind: Image`) and data disk sources.
    #[serde(default)]
    pub images: BTreeMap<String, Lookup<ResolvedSource>>,
    /// VM templates (`imageKind: Template`), by template UUID (extId) or name.
    #[serde(default)]
    pub templates: BTreeMap<String, Lookup<ResolvedSource>>,
    /// Source VMs (`imageKind: VM`).
    #[serde(default)]
    pub source_vms: BTreeMap<String, Lookup<ResolvedSource>>,
    #[serde(default)]
    pub subnets: BTreeMap<String, Lookup<ResolvedSubnet>>,
    #[serde(default)]
    pub projects: BTreeMap<String, Lookup<ResolvedEntity>>,
    /// Category key → value → whether the pair exists in Prism.
    #[serde(default)]
    pub categories: BTreeMap<String, BTreeMap<String, Lookup<bool>>>,
    /// The GPUs of the target cluster's hosts (`gpu_list` entries of `/hosts/list`); absent when
    /// not looked up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_gpus: Option<Lookup<Vec<HostGpu>>>,
    /// The failure domains of `Infrastructure/cluster`, identifiers mapped to `uuid`/`name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_domains: Option<Vec<FailureDomain>>,
}

/// An entity found in Prism.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedEntity {
    pub uuid: String,
}

/// An image, template or source VM: where the system disk comes from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedSource {
    pub uuid: String,
    /// Size of the image, or of the template's or source VM's boot disk, when Prism reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
    /// Boot type of a template or source VM, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_type: Option<BootType>,
    /// The template version to deploy; the active version when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version_id: Option<String>,
    /// The cluster a source VM runs on: its clones land there (`vm_clone_input` has no cluster
    /// reference in the v3 schema, nutanix-cloud-native/prism-go-client `v3/swagger.json`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_uuid: Option<String>,
}

/// A subnet and the cluster it belongs to (subnet lists span every Prism Element).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedSubnet {
    pub uuid: String,
    /// `None` for overlay (VPC) subnets, which belong to no single cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_uuid: Option<String>,
    /// Whether Prism manages the subnet's addresses (what a static address from a pool needs);
    /// `None`: not known (a `--resolve` file that does not say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipam: Option<SubnetIpam>,
}

/// Whether Prism manages a subnet's addresses (IPAM: its `ip_config`), and in which CIDR.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SubnetIpam {
    Managed {
        cidr: ipnet::IpNet,
    },
    /// The network's own DHCP, or none, hands out addresses.
    Unmanaged,
}

impl SubnetIpam {
    /// The CIDR Prism manages (`None`: unmanaged).
    pub fn managed_cidr(&self) -> Option<ipnet::IpNet> {
        match self {
            Self::Managed { cidr } => Some(*cidr),
            Self::Unmanaged => None,
        }
    }
}

/// A failure domain of `Infrastructure/cluster`: its cluster and subnets replace the
/// providerSpec's.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FailureDomain {
    pub name: String,
    pub cluster: NutanixResourceIdentifier,
    #[serde(default)]
    pub subnets: Vec<NutanixResourceIdentifier>,
}

impl FailureDomain {
    /// A failure domain from `Infrastructure.spec.platformSpec.nutanix.failureDomains`, whose
    /// identifiers are config/v1 (`type: UUID|Name`), in the machine/v1 form (`uuid|name`).
    pub fn from_infrastructure(
        name: String,
        cluster: (&str, Option<String>, Option<String>),
        subnets: impl IntoIterator<Item = (String, Option<String>, Option<String>)>,
    ) -> Self {
        let identifier =
            |type_: &str, uuid: Option<String>, name: Option<String>| NutanixResourceIdentifier {
                type_: match type_ {
                    "UUID" => IdentifierType::Uuid,
                    "Name" => IdentifierType::Name,
                    other => IdentifierType::Unknown(other.to_owned()),
                },
                uuid,
                name,
            };
        Self {
            name,
            cluster: identifier(cluster.0, cluster.1, cluster.2),
            subnets: subnets
                .into_iter()
                .map(|(type_, uuid, name)| identifier(&type_, uuid, name))
                .collect(),
        }
    }
}

/// The lookups the actuator must make before [`crate::vm::validate::plan_vm`] can decide, keyed as
/// [`ResolvedReferences`] expects them. Identifiers that are malformed are left out: validation
/// reports them without any lookup.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequiredLookups {
    pub clusters: BTreeSet<NutanixResourceIdentifier>,
    pub images: BTreeSet<NutanixResourceIdentifier>,
    pub templates: BTreeSet<NutanixResourceIdentifier>,
    pub source_vms: BTreeSet<NutanixResourceIdentifier>,
    pub subnets: BTreeSet<NutanixResourceIdentifier>,
    pub projects: BTreeSet<NutanixResourceIdentifier>,
    /// Category pairs whose existence must be checked (the user's and the owned one).
    pub categories: BTreeSet<(String, String)>,
    /// The target cluster's host GPU inventory is needed.
    pub host_gpus: bool,
    /// Infrastructure's failure domains are needed (read them, then ask again: the failure
    /// domain's cluster and subnets replace the providerSpec's).
    pub failure_domains: bool,
}

impl RequiredLookups {
    /// What `config` needs looked up. `failure_domains` are Infrastructure's, once read.
    pub fn of(
        config: &NutanixMachineProviderConfig,
        infra_id: &str,
        failure_domains: Option<&[FailureDomain]>,
    ) -> Self {
        let usable = |id: &NutanixResourceIdentifier| id.key().is_some_and(|key| !key.is_empty());
        let add = |set: &mut BTreeSet<NutanixResourceIdentifier>,
                   id: &NutanixResourceIdentifier| {
            if usable(id) {
                set.insert(id.clone());
            }
        };
        let mut lookups = Self::default();
        match (&config.failure_domain, failure_domains) {
            (None, _) => {
                add(&mut lookups.clusters, &config.cluster);
                config
                    .subnets
                    .iter()
                    .for_each(|s| add(&mut lookups.subnets, s));
            }
            (Some(_), None) => lookups.failure_domains = true,
            (Some(reference), Some(domains)) => {
                if let Some(domain) = domains.iter().find(|d| d.name == reference.name) {
                    add(&mut lookups.clusters, &domain.cluster);
                    domain
                        .subnets
                        .iter()
                        .for_each(|s| add(&mut lookups.subnets, s));
                }
            }
        }
        let sources = match config.source_kind() {
            ImageKind::Template => &mut lookups.templates,
            ImageKind::Vm => &mut lookups.source_vms,
            ImageKind::Image | ImageKind::Unknown(_) => &mut lookups.images,
        };
        add(sources, &config.image);
        for disk in config.data_disks.iter().flatten() {
            if let Some(source) = &disk.data_source {
                add(&mut lookups.images, source);
            }
        }
        if !config.project.is_unset() {
            add(&mut lookups.projects, &config.project);
        }
        lookups.categories = config
            .categories
            .iter()
            .flatten()
            .map(|c| (c.key.clone(), c.value.clone()))
            .chain([(
                format!("kubernetes-io-cluster-{infra_id}"),
                "owned".to_owned(),
            )])
            .collect();
        lookups.host_gpus = config.gpus.as_ref().is_some_and(|g| !g.is_empty());
        lookups
    }
}

/// How one reference came out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Resolution<'a, T> {
    Found(&'a T),
    /// Left as written (preview only).
    AsWritten,
    Failed(String),
}

/// Resolves `identifier` in `table`. `what` names the kind of entity in messages.
pub(crate) fn resolve<'a, T>(
    table: &'a BTreeMap<String, Lookup<T>>,
    identifier: &NutanixResourceIdentifier,
    what: &str,
    mode: ResolutionMode,
) -> Resolution<'a, T> {
    let Some(key) = identifier.key() else {
        return Resolution::Failed(format!("{what} has no usable identifier"));
    };
    match (table.get(key), mode) {
        (Some(Lookup::Found(found)), _) => Resolution::Found(found),
        (Some(Lookup::Failed { error }), _) => {
            Resolution::Failed(format!("{what} {key:?}: {error}", key = quoted(key)))
        }
        (None, ResolutionMode::Preview) => Resolution::AsWritten,
        (None, ResolutionMode::Strict) => Resolution::Failed(format!(
            "{what} {key:?} has not been looked up in Prism",
            key = quoted(key)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_file_shape_parses() {
        let text = r#"{
            "clusters": {"pe": {"uuid": "c-1"}},
            "images": {"rhcos": {"uuid": "i-1", "sizeBytes": 17179869184}},
            "projects": {"ocp": {"error": "no project named \"ocp\""}},
            "categories": {"k": {"v": true, "w": false}},
            "hostGpus": [{"name": "Tesla T4", "vendor": "NVIDIA", "mode": "PASSTHROUGH_COMPUTE", "device_id": 7864, "status": "UNUSED"}],
            "failureDomains": [{"name": "fd-a", "cluster": {"type": "uuid", "uuid": "c-1"}, "subnets": [{"type": "name", "name": "vlan-10"}]}]
        }"#;
        let resolved: ResolvedReferences = serde_json::from_str(text).unwrap();
        assert_eq!(
            resolved.images["rhcos"],
            Lookup::Found(ResolvedSource {
                uuid: "i-1".into(),
                size_bytes: Some(16 << 30),
                boot_type: None,
                version_id: None,
                cluster_uuid: None,
            })
        );
        assert!(matches!(resolved.projects["ocp"], Lookup::Failed { .. }));
        assert_eq!(resolved.categories["k"]["w"], Lookup::Found(false));
        let Some(Lookup::Found(gpus)) = &resolved.host_gpus else {
            panic!()
        };
        assert!(gpus[0].is_unused());
        assert_eq!(
            resolved.failure_domains.unwrap()[0].subnets[0],
            NutanixResourceIdentifier::by_name("vlan-10")
        );
    }

    #[test]
    fn infrastructure_identifiers_are_mapped_to_machine_v1() {
        let domain = FailureDomain::from_infrastructure(
            "fd-a".into(),
            ("UUID", Some("c-1".into()), None),
            [("Name".to_owned(), None, Some("vlan-10".into()))],
        );
        assert_eq!(domain.cluster, NutanixResourceIdentifier::by_uuid("c-1"));
        assert_eq!(
            domain.subnets,
            [NutanixResourceIdentifier::by_name("vlan-10")]
        );
    }

    #[test]
    fn required_lookups_follow_the_spec() {
        let config = NutanixMachineProviderConfig::from_value(&serde_json::json!({
            "cluster": {"type": "uuid", "uuid": "c-1"},
            "image": {"type": "name", "name": "golden"},
            "imageKind": "VM",
            "subnets": [{"type": "name", "name": "vlan-10"}, {"type": "uuid"}],
            "project": {"type": ""},
            "categories": [{"key": "Team", "value": "infra"}],
            "dataDisks": [{"diskSize": "1Gi", "dataSource": {"type": "name", "name": "tools"}}],
            "gpus": [{"type": "Name", "name": "T4"}]
        }))
        .unwrap();
        let lookups = RequiredLookups::of(&config, "ocp", None);
        assert_eq!(
            lookups.clusters,
            BTreeSet::from([NutanixResourceIdentifier::by_uuid("c-1")])
        );
        assert_eq!(
            lookups.source_vms,
            BTreeSet::from([NutanixResourceIdentifier::by_name("golden")])
        );
        assert_eq!(
            lookups.images,
            BTreeSet::from([NutanixResourceIdentifier::by_name("tools")])
        );
        assert_eq!(
            lookups.subnets,
            BTreeSet::from([NutanixResourceIdentifier::by_name("vlan-10")]),
            "malformed ones left to validation"
        );
        assert!(lookups.projects.is_empty() && lookups.templates.is_empty());
        assert_eq!(
            lookups.categories,
            BTreeSet::from([
                ("Team".into(), "infra".into()),
                ("kubernetes-io-cluster-ocp".into(), "owned".into())
            ])
        );
        assert!(lookups.host_gpus && !lookups.failure_domains);
    }

    #[test]
    fn a_failure_domain_is_read_first_then_replaces_placement() {
        let config = NutanixMachineProviderConfig::from_value(&serde_json::json!({
            "cluster": {"type": "uuid", "uuid": "c-1"},
            "subnets": [{"type": "uuid", "uuid": "s-1"}],
            "failureDomain": {"name": "fd-a"}
        }))
        .unwrap();
        let first = RequiredLookups::of(&config, "ocp", None);
        assert!(first.failure_domains && first.clusters.is_empty() && first.subnets.is_empty());
        let domains = [FailureDomain {
            name: "fd-a".into(),
            cluster: NutanixResourceIdentifier::by_uuid("c-2"),
            subnets: vec![NutanixResourceIdentifier::by_name("vlan-20")],
        }];
        let then = RequiredLookups::of(&config, "ocp", Some(&domains));
        assert_eq!(
            then.clusters,
            BTreeSet::from([NutanixResourceIdentifier::by_uuid("c-2")])
        );
        assert_eq!(
            then.subnets,
            BTreeSet::from([NutanixResourceIdentifier::by_name("vlan-20")])
        );
    }

    #[test]
    fn unknown_sections_are_refused_so_typos_show() {
        assert!(serde_json::from_str::<ResolvedReferences>(r#"{"image": {}}"#).is_err());
    }

    #[test]
    fn resolution_by_mode() {
        let table = BTreeMap::from([
            (
                "a".to_owned(),
                Lookup::Found(ResolvedEntity { uuid: "u".into() }),
            ),
            (
                "b".to_owned(),
                Lookup::Failed {
                    error: "2 matches".into(),
                },
            ),
        ]);
        let by_name = |n: &str| NutanixResourceIdentifier::by_name(n);
        for mode in [ResolutionMode::Strict, ResolutionMode::Preview] {
            assert!(
                matches!(resolve(&table, &by_name("a"), "cluster", mode), Resolution::Found(e) if e.uuid == "u")
            );
            assert_eq!(
                resolve(&table, &by_name("b"), "cluster", mode),
                Resolution::Failed("cluster \"b\": 2 matches".into())
            );
        }
        assert_eq!(
            resolve(&table, &by_name("c"), "cluster", ResolutionMode::Preview),
            Resolution::AsWritten
        );
        assert!(matches!(
            resolve(&table, &by_name("c"), "cluster", ResolutionMode::Strict),
            Resolution::Failed(_)
        ));
    }
}
