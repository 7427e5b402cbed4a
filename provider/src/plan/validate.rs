//! Validates a Machine's providerSpec, together with what Prism said about it, into a [`VmPlan`].
//!
//! Every rule of the Go provider is here, plus ours; all problems are collected, each with its
//! field path and class. The class rule: *invalid* when the Machine itself is wrong or
//! contradicts a fact Prism reported (a subnet on another cluster, a disk smaller than its
//! source); *unresolved* when something in Prism is missing, ambiguous, not looked up yet, or has
//! no free capacity now (it may appear later, so the Machine is retried, never failed).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use prism_client::Sensitive;
use prism_client::v3::HostGpu;

use super::cloud_init::{self, CloudInitError};
use super::errors::{Collector, Path, ValidationErrors};
use super::guest::customization_of;
use super::identity::MachineIdentity;
use super::resolve::{
    Lookup, Resolution, ResolutionMode, ResolvedReferences, ResolvedSource, resolve,
};
use super::secret::UserData;
use super::unattend::{self, PasswordValue, UnattendInput};
use super::vm_plan::{
    BootPlan, DiskAddressPlan, EntityRef, GuestPlan, PlannedDataDisk, PlannedGpu, SourcePlan,
    VmPlan,
};
use crate::api::quantity::{GIB, mib_floor, quantity_bytes};
use crate::api::{
    AnnotatedChoices, BootType, CLUSTER_ID_LABEL, DiskAdapterType, DiskDeviceType, DiskMode,
    GUEST_CUSTOMIZATION_ANNOTATION, GpuIdentifierType, GuestCustomizationType,
    IMAGE_KIND_ANNOTATION, IdentifierType, ImageKind, Machine, NutanixGpu,
    NutanixMachineProviderConfig, NutanixResourceIdentifier, NutanixVmDisk,
    SYSPREP_ADMIN_PASSWORD_SECRET_ANNOTATION, SYSPREP_TIME_ZONE_ANNOTATION,
};

/// At most this many NICs (upstream and Prism).
pub const MAX_SUBNETS: usize = 32;
/// Smallest memory upstream accepts.
pub const MIN_MEMORY_BYTES: u64 = 2 * GIB;
/// Smallest system disk upstream accepts.
pub const MIN_SYSTEM_DISK_BYTES: u64 = 20 * GIB;
/// Smallest data disk upstream accepts.
pub const MIN_DATA_DISK_BYTES: u64 = GIB;
/// Time zone of Sysprep Machines unless `guestCustomization.timeZone` says otherwise.
pub const DEFAULT_TIME_ZONE: &str = "UTC";

/// Inputs besides the Machine.
#[derive(Clone, Copy, Debug)]
pub struct PlanContext<'a> {
    pub resolved: &'a ResolvedReferences,
    pub mode: ResolutionMode,
    /// The user-data Secret's `userData`, when the providerSpec names one and it was read.
    pub user_data: Option<&'a UserData>,
    /// The Administrator password for Sysprep. In [`ResolutionMode::Strict`] a placeholder is
    /// refused: a VM never gets one.
    pub admin_password: Option<PasswordValue<'a>>,
}

/// Why a Secure Boot VM with guest customization may be refused, and what to do instead.
pub const SECURE_BOOT_CUSTOMIZATION_WARNING: &str = "bootType SecureBoot with guest customization: AHV \
     refuses this on many versions (VMM-30102: the customization CD-ROM is IDE, which Secure Boot \
     forbids); use bootType UEFI, or a template or source VM with Secure Boot whose guest needs no \
     customization";

/// The category that marks a VM as owned by the cluster (the installer's teardown uses it).
pub fn owned_category_key(infra_id: &str) -> String {
    format!("kubernetes-io-cluster-{infra_id}")
}

/// Value of [`owned_category_key`].
pub const OWNED_CATEGORY_VALUE: &str = "owned";

/// Validates `machine` and decides its VM.
pub fn plan_vm(machine: &Machine, context: &PlanContext<'_>) -> Result<VmPlan, ValidationErrors> {
    let mut errors = Collector::default();
    let name = machine.metadata.name.clone().unwrap_or_default();
    let metadata = Path::root("metadata");
    if !is_dns_label(&name) {
        errors.invalid(
            &metadata.field("name"),
            format!("{name:?} cannot name a VM and its host: use at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit"),
        );
    }
    let infra_id = machine
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(CLUSTER_ID_LABEL))
        .filter(|id| !id.is_empty());
    if infra_id.is_none() {
        errors.invalid(
            &metadata.field("labels"),
            format!("label {CLUSTER_ID_LABEL} (the cluster's infrastructure ID) is required"),
        );
    }

    let spec_path = Path::root("providerSpec");
    let config = match machine.provider_config() {
        None => {
            errors.invalid(&spec_path.field("value"), "is required");
            None
        }
        Some(Err(error)) => {
            let path = if error.path == "." {
                spec_path.clone()
            } else {
                spec_path.field(&error.path)
            };
            errors.invalid(&path, error.message);
            None
        }
        Some(Ok(config)) => Some(config),
    };
    let (Some(config), Some(infra_id)) = (config, infra_id) else {
        return Err(errors.into_errors());
    };

    let identity = MachineIdentity {
        namespace: machine.metadata.namespace.clone().unwrap_or_default(),
        name: name.clone(),
        uid: machine.metadata.uid.clone().unwrap_or_default(),
    };
    let choices = machine.annotated_choices();
    let warnings = in_spec_choice_warnings(machine, &choices);
    let mut validator = Validator {
        errors,
        warnings,
        context,
        spec: spec_path,
        config: &config,
        choices: &choices,
    };
    let plan = validator.plan(identity, infra_id, machine.is_windows());
    let Validator {
        mut errors,
        warnings,
        ..
    } = validator;
    match plan {
        Some(plan) if errors.is_empty() => Ok(VmPlan { warnings, ..plan }),
        _ => {
            if errors.is_empty() {
                // Every part that yields nothing records why; reaching this is a bug, and
                // retrying is safer than failing the Machine for it.
                errors.unresolved(
                    &Path::root("providerSpec"),
                    "the plan could not be completed (a bug in the provider)",
                );
            }
            Err(errors.into_errors())
        }
    }
}

/// An RFC 1123 label: what a VM name and a host name can be.
pub fn is_dns_label(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

/// Warnings for our choices written in `providerSpec`: the machine-api-operator's webhook drops
/// them when a Machine is created on OpenShift, and an annotation overrides them.
fn in_spec_choice_warnings(machine: &Machine, choices: &AnnotatedChoices) -> Vec<String> {
    let Some(value) = machine.spec.provider_spec.value.as_ref() else {
        return Vec::new();
    };
    let written = |field: &str| value.get(field).is_some_and(|v| !v.is_null());
    let mut warnings = Vec::new();
    let mut check = |field: &str, annotation: &str, annotated: bool| {
        if !written(field) {
            return;
        }
        warnings.push(if annotated {
            format!("providerSpec.{field} is overridden by the annotation {annotation}")
        } else {
            format!(
                "providerSpec.{field} is dropped by the machine-api-operator's webhook when a Machine is created on OpenShift: set the annotation {annotation} on the MachineSet's spec.template.metadata instead"
            )
        });
    };
    check(
        "imageKind",
        IMAGE_KIND_ANNOTATION,
        choices.image_kind.is_some(),
    );
    check(
        "guestCustomization",
        GUEST_CUSTOMIZATION_ANNOTATION,
        choices.guest_customization.is_some()
            || choices.time_zone.is_some()
            || choices.admin_password_secret.is_some(),
    );
    warnings
}

/// Where an annotation's errors are reported.
fn annotation_path(key: &str) -> Path {
    Path::root("metadata").field("annotations").key(key)
}

struct Validator<'c, 'a> {
    errors: Collector,
    warnings: Vec<String>,
    context: &'c PlanContext<'a>,
    spec: Path,
    config: &'c NutanixMachineProviderConfig,
    /// What the annotations chose (already applied to `config`): errors about a choice are
    /// reported where it was made.
    choices: &'c AnnotatedChoices,
}

impl Validator<'_, '_> {
    fn mode(&self) -> ResolutionMode {
        self.context.mode
    }

    fn plan(&mut self, identity: MachineIdentity, infra_id: &str, windows: bool) -> Option<VmPlan> {
        let config = self.config;
        let spec = self.spec.clone();

        let image_kind = match (&self.choices.image_kind, &config.image_kind) {
            (Some(ImageKind::Unknown(other)), _) => {
                self.errors.invalid(
                    &annotation_path(IMAGE_KIND_ANNOTATION),
                    unknown_value("image kind", other, ImageKind::KNOWN),
                );
                ImageKind::Image
            }
            (_, None) => ImageKind::Image,
            (_, Some(ImageKind::Unknown(other))) => {
                self.errors.invalid(
                    &spec.field("imageKind"),
                    unknown_value("image kind", other, ImageKind::KNOWN),
                );
                ImageKind::Image
            }
            (_, Some(kind)) => kind.clone(),
        };

        // Failure domain: its cluster and subnets replace the providerSpec's.
        let (cluster_id, cluster_path, subnet_ids) = self.placement();

        let resolved = self.context.resolved;
        let cluster = cluster_id
            .and_then(|id| self.resolve_entity(&resolved.clusters, &id, "cluster", &cluster_path));
        let source = self.source(&image_kind);
        if let (Some(EntityRef::Uuid(cluster)), Some((_, Some(found)))) =
            (cluster.as_ref(), source.as_ref())
            && image_kind == ImageKind::Vm
        {
            self.clone_lands_on(found, cluster, &cluster_path);
        }
        let subnets = self.subnets(subnet_ids, cluster.as_ref());

        let num_sockets = self.positive(config.vcpu_sockets, "vcpuSockets");
        let vcpus_per_socket = self.positive(config.vcpus_per_socket, "vcpusPerSocket");
        let memory = self.size(&config.memory_size, "memorySize", MIN_MEMORY_BYTES);
        let system_disk = self.size(
            &config.system_disk_size,
            "systemDiskSize",
            MIN_SYSTEM_DISK_BYTES,
        );

        let boot = self.boot(&image_kind, source.as_ref().map(|(_, resolved)| resolved));
        let data_disks = self.data_disks(&image_kind, boot);
        let gpus = self.gpus(&image_kind);
        let project = self.project();
        let categories = self.categories(infra_id);
        self.secrets();
        let guest = self.guest(&identity, windows);
        let source = source.and_then(|(source, resolved)| {
            self.source_plan(source, resolved.as_ref(), system_disk)
        });
        if boot == BootPlan::SecureBoot && guest.as_ref().is_some_and(|g| *g != GuestPlan::None) {
            // Field reports (nutanix/nutanix.ansible#876, nutanix/terraform-provider-nutanix#908):
            // AHV refuses it with VMM-30102, as the customization CD-ROM is IDE, which Secure Boot
            // forbids. A warning, not an error: the refusal depends on the AHV version.
            self.warnings.push(SECURE_BOOT_CUSTOMIZATION_WARNING.into());
        }

        Some(VmPlan {
            description: identity.description(),
            name: identity.name.clone(),
            identity,
            cluster: cluster?,
            source: source?,
            subnets: subnets?,
            num_sockets: num_sockets?,
            vcpus_per_socket: vcpus_per_socket?,
            memory_mib: mib_floor(memory?),
            system_disk_mib: mib_floor(system_disk?),
            data_disks: data_disks?,
            gpus: gpus?,
            boot,
            project: project?,
            categories: categories?,
            guest: guest?,
            warnings: Vec::new(),
        })
    }

    // ---- identifiers and lookups -------------------------------------------------------------

    /// Checks an identifier's shape. `None` when it is unusable (an error was recorded) or, for
    /// an optional one, unset.
    fn identifier(
        &mut self,
        id: &NutanixResourceIdentifier,
        path: &Path,
        required: bool,
    ) -> Option<NutanixResourceIdentifier> {
        match &id.type_ {
            IdentifierType::Unset if id.uuid.is_none() && id.name.is_none() => {
                if required {
                    self.errors.invalid(path, "is required");
                }
                None
            }
            IdentifierType::Unset => {
                self.errors.invalid(
                    &path.field("type"),
                    "type is required: \"uuid\" or \"name\"",
                );
                None
            }
            IdentifierType::Unknown(other) => {
                self.errors.invalid(
                    &path.field("type"),
                    format!("unknown identifier type {other:?}, expected \"uuid\" or \"name\""),
                );
                None
            }
            IdentifierType::Uuid => match id.uuid.as_deref() {
                None | Some("") => {
                    self.errors.invalid(
                        &path.field("uuid"),
                        "uuid is required when type is \"uuid\"",
                    );
                    None
                }
                Some(uuid) if uuid::Uuid::try_parse(uuid).is_err() => {
                    self.errors
                        .invalid(&path.field("uuid"), format!("{uuid:?} is not a UUID"));
                    None
                }
                Some(uuid) => Some(NutanixResourceIdentifier::by_uuid(
                    uuid.to_ascii_lowercase(),
                )),
            },
            IdentifierType::Name => match id.name.as_deref() {
                None | Some("") => {
                    self.errors.invalid(
                        &path.field("name"),
                        "name is required when type is \"name\"",
                    );
                    None
                }
                Some(name) => Some(NutanixResourceIdentifier::by_name(name)),
            },
        }
    }

    /// Resolves an identifier whose shape is valid to an entity reference.
    fn resolve_entity<T: HasUuid>(
        &mut self,
        table: &BTreeMap<String, Lookup<T>>,
        id: &NutanixResourceIdentifier,
        what: &str,
        path: &Path,
    ) -> Option<EntityRef> {
        match resolve(table, id, what, self.mode()) {
            Resolution::Found(found) => Some(EntityRef::Uuid(found.uuid().to_owned())),
            Resolution::AsWritten => Some(as_written(id)),
            Resolution::Failed(message) => {
                self.errors.unresolved(path, message);
                None
            }
        }
    }

    /// The cluster and subnets, each with the path its errors are reported at: the
    /// providerSpec's, or those of its failure domain, which replace them.
    fn placement(
        &mut self,
    ) -> (
        Option<NutanixResourceIdentifier>,
        Path,
        Vec<(Path, NutanixResourceIdentifier)>,
    ) {
        let Some(reference) = &self.config.failure_domain else {
            return self.spec_placement();
        };
        let fd_path = self.spec.field("failureDomain").field("name");
        let name = &reference.name;
        if !is_failure_domain_name(name) {
            self.errors.invalid(&fd_path, format!("{name:?} is not a failure domain name: 1 to 64 lower-case letters, digits and '-', starting and ending with a letter or digit"));
            return (None, fd_path, Vec::new());
        }
        let domain = match (&self.context.resolved.failure_domains, self.mode()) {
            (Some(domains), _) => match domains.iter().find(|d| &d.name == name) {
                Some(domain) => domain,
                None => {
                    self.errors.unresolved(
                        &fd_path,
                        format!("Infrastructure/cluster has no failure domain named {name:?}"),
                    );
                    return (None, fd_path, Vec::new());
                }
            },
            (None, ResolutionMode::Strict) => {
                self.errors.unresolved(
                    &fd_path,
                    "the failure domains of Infrastructure/cluster have not been read",
                );
                return (None, fd_path, Vec::new());
            }
            (None, ResolutionMode::Preview) => {
                self.warnings.push(format!(
                    "failure domain {name:?} not given (--resolve failureDomains): the providerSpec's cluster and subnets are shown, but the failure domain's replace them"
                ));
                return self.spec_placement();
            }
        };
        // The failure domain comes from Infrastructure, not from the Machine: fixing it there
        // heals the Machine, so its problems are unresolved, not invalid.
        let usable = |id: &NutanixResourceIdentifier, what: &str, errors: &mut Collector| {
            if id.key().is_some_and(|key| !key.is_empty()) {
                Some(id.clone())
            } else {
                errors.unresolved(
                    &fd_path,
                    format!("failure domain {name:?} has an unusable {what} identifier"),
                );
                None
            }
        };
        let cluster = usable(&domain.cluster, "cluster", &mut self.errors);
        let subnets = domain
            .subnets
            .iter()
            .filter_map(|s| usable(s, "subnet", &mut self.errors).map(|id| (fd_path.clone(), id)))
            .collect();
        if domain.subnets.is_empty() || domain.subnets.len() > MAX_SUBNETS {
            self.errors.unresolved(
                &fd_path,
                format!(
                    "failure domain {name:?} has {} subnets; 1 to {MAX_SUBNETS} are needed",
                    domain.subnets.len()
                ),
            );
        }
        (cluster, fd_path, subnets)
    }

    fn spec_placement(
        &mut self,
    ) -> (
        Option<NutanixResourceIdentifier>,
        Path,
        Vec<(Path, NutanixResourceIdentifier)>,
    ) {
        let config = self.config;
        let cluster_path = self.spec.field("cluster");
        let cluster = self.identifier(&config.cluster, &cluster_path, true);
        let subnets_path = self.spec.field("subnets");
        let subnets = config
            .subnets
            .iter()
            .enumerate()
            .filter_map(|(i, subnet)| {
                let path = subnets_path.index(i);
                self.identifier(subnet, &path, true).map(|id| (path, id))
            })
            .collect();
        if config.subnets.is_empty() {
            self.errors
                .invalid(&subnets_path, "at least one subnet is required");
        } else if config.subnets.len() > MAX_SUBNETS {
            self.errors.invalid(
                &subnets_path,
                format!(
                    "{} subnets given; at most {MAX_SUBNETS} are allowed",
                    config.subnets.len()
                ),
            );
        }
        (cluster, cluster_path, subnets)
    }

    fn subnets(
        &mut self,
        ids: Vec<(Path, NutanixResourceIdentifier)>,
        cluster: Option<&EntityRef>,
    ) -> Option<Vec<EntityRef>> {
        let mut subnets = Vec::new();
        let mut complete = true;
        for (path, id) in ids {
            match resolve(&self.context.resolved.subnets, &id, "subnet", self.mode()) {
                Resolution::Found(found) => {
                    if let (Some(subnet_cluster), Some(EntityRef::Uuid(cluster))) =
                        (&found.cluster_uuid, cluster)
                        && !subnet_cluster.eq_ignore_ascii_case(cluster)
                    {
                        self.errors.invalid(&path, format!("subnet {} belongs to cluster {subnet_cluster}, not to the Machine's cluster {cluster}", found.uuid));
                        complete = false;
                    }
                    subnets.push(EntityRef::Uuid(found.uuid.clone()));
                }
                Resolution::AsWritten => subnets.push(as_written(&id)),
                Resolution::Failed(message) => {
                    self.errors.unresolved(&path, message);
                    complete = false;
                }
            }
        }
        (complete && !subnets.is_empty()).then_some(subnets)
    }

    // ---- sizes and counts --------------------------------------------------------------------

    fn positive(&mut self, value: i32, field: &str) -> Option<u32> {
        match u32::try_from(value) {
            Ok(value) if value >= 1 => Some(value),
            _ => {
                self.errors.invalid(
                    &self.spec.field(field),
                    format!("must be at least 1, got {value}"),
                );
                None
            }
        }
    }

    fn size_at(&mut self, quantity: &Quantity, path: &Path, minimum: u64) -> Option<u64> {
        if quantity.0.is_empty() {
            self.errors.invalid(path, "is required");
            return None;
        }
        match quantity_bytes(quantity) {
            Err(error) => {
                self.errors.invalid(path, error.to_string());
                None
            }
            Ok(bytes) if bytes < minimum => {
                self.errors.invalid(
                    path,
                    format!("{} is below the minimum of {}Gi", quantity.0, minimum / GIB),
                );
                None
            }
            Ok(bytes) => Some(bytes),
        }
    }

    fn size(&mut self, quantity: &Quantity, field: &str, minimum: u64) -> Option<u64> {
        let path = self.spec.field(field);
        self.size_at(quantity, &path, minimum)
    }

    // ---- source, boot, disks, GPUs -----------------------------------------------------------

    /// The image, template or source VM, resolved.
    fn source(&mut self, kind: &ImageKind) -> Option<(EntityRef, Option<ResolvedSource>)> {
        let path = self.spec.field("image");
        let config = self.config;
        let id = self.identifier(&config.image, &path, true)?;
        let (table, what) = match kind {
            ImageKind::Template => (&self.context.resolved.templates, "template"),
            ImageKind::Vm => (&self.context.resolved.source_vms, "source VM"),
            ImageKind::Image | ImageKind::Unknown(_) => (&self.context.resolved.images, "image"),
        };
        match resolve(table, &id, what, self.mode()) {
            Resolution::Found(found) => {
                Some((EntityRef::Uuid(found.uuid.clone()), Some(found.clone())))
            }
            Resolution::AsWritten => Some((as_written(&id), None)),
            Resolution::Failed(message) => {
                self.errors.unresolved(&path, message);
                None
            }
        }
    }

    /// A clone lands on its source VM's cluster, whatever the Machine's cluster is: a source
    /// VM on another cluster is an error naming both.
    fn clone_lands_on(&mut self, source: &ResolvedSource, cluster: &str, cluster_path: &Path) {
        if let Some(source_cluster) = &source.cluster_uuid
            && !source_cluster.eq_ignore_ascii_case(cluster)
        {
            let path = self.spec.field("image");
            self.errors.invalid(
                &path,
                format!(
                    "source VM {} runs on cluster {source_cluster}, but the Machine's cluster ({cluster_path}) is {cluster}; a clone always lands on its source VM's cluster: use a source VM on cluster {cluster}, or an image or template",
                    source.uuid
                ),
            );
        }
    }

    fn source_plan(
        &mut self,
        source: EntityRef,
        resolved: Option<&ResolvedSource>,
        system_disk: Option<u64>,
    ) -> Option<SourcePlan> {
        let kind = self.config.image_kind.clone().unwrap_or(ImageKind::Image);
        let path = self.spec.field("systemDiskSize");
        let source_size = resolved.and_then(|r| r.size_bytes);
        if let ImageKind::Image | ImageKind::Unknown(_) = kind {
            if let (Some(wanted), Some(image)) = (system_disk, source_size)
                && wanted < image
            {
                self.errors.invalid(
                    &path,
                    format!(
                        "{} is smaller than the image ({} bytes)",
                        self.config.system_disk_size.0, image
                    ),
                );
                return None;
            }
            return Some(SourcePlan::Image(source));
        }
        let what = if kind == ImageKind::Template {
            "template"
        } else {
            "source VM"
        };
        // Neither clone nor deploy can size disks: a larger system disk is a resize afterwards,
        // a smaller one is impossible.
        let resize = match (system_disk, source_size) {
            (None, _) => return None,
            (Some(wanted), Some(have)) if wanted < have => {
                self.errors.invalid(&path, format!("{} is smaller than the {what}'s boot disk ({have} bytes); disks cannot shrink", self.config.system_disk_size.0));
                return None;
            }
            (Some(wanted), Some(have)) => {
                (mib_floor(wanted) > mib_floor(have)).then(|| mib_floor(wanted))
            }
            (Some(_), None) if self.mode() == ResolutionMode::Strict => {
                self.errors.unresolved(&path, format!("the size of the {what}'s boot disk is not known, so a resize cannot be planned"));
                return None;
            }
            (Some(_), None) => {
                self.warnings.push(format!("the {what}'s boot disk size is not known: no resize is shown; the controller resizes it to systemDiskSize when it is larger"));
                None
            }
        };
        Some(match kind {
            ImageKind::Template => SourcePlan::Template {
                template: source,
                version_id: resolved.and_then(|r| r.version_id.clone()),
                resize_system_disk_mib: resize,
            },
            _ => SourcePlan::Vm {
                source_vm: source,
                resize_system_disk_mib: resize,
            },
        })
    }

    fn boot(&mut self, kind: &ImageKind, source: Option<&Option<ResolvedSource>>) -> BootPlan {
        let path = self.spec.field("bootType");
        let wanted = &self.config.boot_type;
        if let BootType::Unknown(other) = wanted {
            self.errors
                .invalid(&path, unknown_value("boot type", other, BootType::KNOWN));
            return BootPlan::Default;
        }
        if matches!(kind, ImageKind::Template | ImageKind::Vm) {
            // Boot settings belong to the installed OS: a clone or deploy keeps the source's.
            let known = source
                .and_then(Option::as_ref)
                .and_then(|s| s.boot_type.as_ref());
            match known {
                Some(have) if *wanted != BootType::Unset && have != wanted => {
                    self.errors.invalid(&path, format!("{:?} differs from the source's {:?}; a cloned or deployed VM keeps its source's boot settings", wanted.as_str(), have.as_str()));
                }
                None if *wanted != BootType::Unset => self.warnings.push(format!(
                    "bootType {:?} is not applied: a cloned or deployed VM keeps its source's boot settings",
                    wanted.as_str()
                )),
                _ => {}
            }
            return BootPlan::FromSource;
        }
        match wanted {
            BootType::Legacy => BootPlan::Legacy,
            BootType::Uefi => BootPlan::Uefi,
            BootType::SecureBoot => BootPlan::SecureBoot,
            BootType::Unset | BootType::Unknown(_) => BootPlan::Default,
        }
    }

    fn data_disks(&mut self, kind: &ImageKind, boot: BootPlan) -> Option<Vec<PlannedDataDisk>> {
        let disks = self.config.data_disks.as_deref().unwrap_or_default();
        let path = self.spec.field("dataDisks");
        if !disks.is_empty() && matches!(kind, ImageKind::Template | ImageKind::Vm) {
            self.errors.invalid(
                &path,
                format!(
                    "dataDisks cannot be used with imageKind {kind}: the VM gets its source's disks"
                ),
            );
            return None;
        }
        let mut planned = Vec::new();
        let mut complete = true;
        let mut addresses: BTreeMap<(String, u32), usize> = BTreeMap::new();
        for (index, disk) in disks.iter().enumerate() {
            let disk_path = path.index(index);
            match self.data_disk(disk, &disk_path, boot) {
                Some(disk) => {
                    if let Some(address) = &disk.address {
                        let slot = (address.adapter.to_string(), address.index);
                        if let Some(first) = addresses.insert(slot, index) {
                            self.errors.invalid(
                                &disk_path.field("deviceProperties"),
                                format!(
                                    "{}.{} is already used by dataDisks[{first}]",
                                    address.adapter, address.index
                                ),
                            );
                            complete = false;
                        }
                    }
                    planned.push(disk);
                }
                None => complete = false,
            }
        }
        complete.then_some(planned)
    }

    fn data_disk(
        &mut self,
        disk: &NutanixVmDisk,
        path: &Path,
        boot: BootPlan,
    ) -> Option<PlannedDataDisk> {
        let size = self.size_at(
            &disk.disk_size,
            &path.field("diskSize"),
            MIN_DATA_DISK_BYTES,
        );
        let address = match &disk.device_properties {
            None => Some(None),
            Some(properties) => {
                let properties_path = path.field("deviceProperties");
                let device_type = match &properties.device_type {
                    DiskDeviceType::Unknown(other) => {
                        self.errors.invalid(
                            &properties_path.field("deviceType"),
                            unknown_value("device type", other, DiskDeviceType::KNOWN),
                        );
                        None
                    }
                    known => Some(known.clone()),
                };
                let adapter_path = properties_path.field("adapterType");
                let adapter = match &properties.adapter_type {
                    None => {
                        self.errors
                            .invalid(&adapter_path, "adapterType is required");
                        None
                    }
                    Some(DiskAdapterType::Unknown(other)) => {
                        self.errors.invalid(
                            &adapter_path,
                            unknown_value("adapter type", other, DiskAdapterType::KNOWN),
                        );
                        None
                    }
                    Some(adapter) => Some(adapter.clone()),
                };
                let index_path = properties_path.field("deviceIndex");
                let index = u32::try_from(properties.device_index).ok();
                if index.is_none() {
                    self.errors.invalid(
                        &index_path,
                        format!("must be 0 or more, got {}", properties.device_index),
                    );
                }
                match (device_type, adapter, index) {
                    (Some(device_type), Some(adapter), Some(index)) => self
                        .check_address(
                            &device_type,
                            &adapter,
                            index,
                            boot,
                            &adapter_path,
                            &index_path,
                        )
                        .then_some(Some(DiskAddressPlan {
                            device_type,
                            adapter,
                            index,
                        })),
                    _ => None,
                }
            }
        };
        let storage = match &disk.storage_config {
            None => Some((false, None)),
            Some(storage) => {
                let storage_path = path.field("storageConfig");
                let flash = match &storage.disk_mode {
                    DiskMode::Unknown(other) => {
                        self.errors.invalid(
                            &storage_path.field("diskMode"),
                            unknown_value("disk mode", other, DiskMode::KNOWN),
                        );
                        None
                    }
                    mode => Some(*mode == DiskMode::Flash),
                };
                let container = match &storage.storage_container {
                    None => Some(None),
                    Some(container) => {
                        let container_path = storage_path.field("storageContainer");
                        match (&container.type_, container.uuid.as_deref()) {
                            (IdentifierType::Uuid, Some(uuid))
                                if uuid::Uuid::try_parse(uuid).is_ok() =>
                            {
                                Some(Some(uuid.to_ascii_lowercase()))
                            }
                            (IdentifierType::Uuid, None | Some("")) => {
                                self.errors
                                    .invalid(&container_path.field("uuid"), "uuid is required");
                                None
                            }
                            (IdentifierType::Uuid, Some(uuid)) => {
                                self.errors.invalid(
                                    &container_path.field("uuid"),
                                    format!("{uuid:?} is not a UUID"),
                                );
                                None
                            }
                            (other, _) => {
                                self.errors.invalid(&container_path.field("type"), format!("storage containers are referenced by uuid only, got type {:?}", other.as_str()));
                                None
                            }
                        }
                    }
                };
                flash.zip(container)
            }
        };
        let data_source = match &disk.data_source {
            None => Some(None),
            Some(id) => {
                let source_path = path.field("dataSource");
                let resolved = self.context.resolved;
                self.identifier(id, &source_path, true)
                    .and_then(|id| {
                        self.resolve_entity(&resolved.images, &id, "image", &source_path)
                    })
                    .map(Some)
            }
        };
        let (address, (flash_mode, storage_container_uuid), data_source) =
            (address?, storage?, data_source?);
        Some(PlannedDataDisk {
            size_mib: mib_floor(size?),
            address,
            flash_mode,
            storage_container_uuid,
            data_source,
        })
    }

    fn check_address(
        &mut self,
        device_type: &DiskDeviceType,
        adapter: &DiskAdapterType,
        index: u32,
        boot: BootPlan,
        adapter_path: &Path,
        index_path: &Path,
    ) -> bool {
        let mut ok = true;
        if *device_type == DiskDeviceType::CdRom
            && !matches!(adapter, DiskAdapterType::Ide | DiskAdapterType::Sata)
        {
            self.errors.invalid(
                adapter_path,
                format!("a CDRom must be on IDE or SATA, not {adapter}"),
            );
            ok = false;
        }
        if boot == BootPlan::SecureBoot && *adapter == DiskAdapterType::Ide {
            self.errors.invalid(
                adapter_path,
                "SecureBoot needs machine type Q35, which has no IDE bus: use SATA or SCSI",
            );
            ok = false;
        }
        let reserved_for = match (device_type, adapter, index) {
            (DiskDeviceType::Disk, DiskAdapterType::Scsi, 0) => Some("system disk"),
            (DiskDeviceType::CdRom, DiskAdapterType::Ide, 0) => Some("system CD-ROM"),
            _ => None,
        };
        if let Some(owner) = reserved_for {
            self.errors.invalid(index_path, format!("{device_type}.{adapter}.0 is the {owner}'s address: data disks there start at index 1"));
            ok = false;
        }
        ok
    }

    fn gpus(&mut self, kind: &ImageKind) -> Option<Vec<PlannedGpu>> {
        let gpus = self.config.gpus.as_deref().unwrap_or_default();
        let path = self.spec.field("gpus");
        if !gpus.is_empty() && matches!(kind, ImageKind::Template | ImageKind::Vm) {
            self.errors.invalid(&path, format!("gpus cannot be used with imageKind {kind}: neither clone nor deploy attaches GPUs"));
            return None;
        }
        let mut wanted = Vec::new();
        for (index, gpu) in gpus.iter().enumerate() {
            if self.gpu_shape(gpu, &path.index(index)) {
                wanted.push((index, gpu));
            }
        }
        if wanted.len() != gpus.len() {
            return None;
        }
        if wanted.is_empty() {
            return Some(Vec::new());
        }
        let inventory = match (&self.context.resolved.host_gpus, self.mode()) {
            (Some(Lookup::Found(inventory)), _) => inventory,
            (Some(Lookup::Failed { error }), _) => {
                self.errors.unresolved(
                    &path,
                    format!("the cluster's host GPUs could not be listed: {error}"),
                );
                return None;
            }
            (None, ResolutionMode::Strict) => {
                self.errors.unresolved(
                    &path,
                    "the cluster's host GPUs have not been looked up in Prism",
                );
                return None;
            }
            (None, ResolutionMode::Preview) => {
                self.warnings.push("gpus are shown as written: vendor and mode come from the hosts' GPU inventory (--resolve hostGpus)".into());
                return Some(
                    wanted
                        .into_iter()
                        .map(|(_, gpu)| PlannedGpu::AsWritten(gpu.clone()))
                        .collect(),
                );
            }
        };
        let mut taken = BTreeSet::new();
        let mut planned = Vec::new();
        for (index, gpu) in wanted {
            match free_gpu(inventory, gpu, &taken) {
                Some((position, host_gpu)) => {
                    taken.insert(position);
                    match (&host_gpu.vendor, &host_gpu.mode) {
                        (Some(vendor), Some(mode)) => planned.push(PlannedGpu::Assigned {
                            vendor: vendor.clone(),
                            mode: mode.clone(),
                            device_id: host_gpu.device_id,
                        }),
                        _ => self.errors.unresolved(
                            &path.index(index),
                            "Prism reported the matching GPU without vendor or mode",
                        ),
                    }
                }
                None => self.errors.unresolved(
                    &path.index(index),
                    format!("no free GPU {} on the cluster's hosts", describe_gpu(gpu)),
                ),
            }
        }
        (planned.len() == gpus.len()).then_some(planned)
    }

    fn gpu_shape(&mut self, gpu: &NutanixGpu, path: &Path) -> bool {
        match &gpu.type_ {
            GpuIdentifierType::Name => {
                let named = gpu.name.as_deref().is_some_and(|n| !n.is_empty());
                if !named {
                    self.errors
                        .invalid(&path.field("name"), "name is required when type is Name");
                }
                if gpu.device_id.is_some() {
                    self.errors.invalid(
                        &path.field("deviceID"),
                        "deviceID must not be set when type is Name",
                    );
                }
                named && gpu.device_id.is_none()
            }
            GpuIdentifierType::DeviceId => {
                if gpu.device_id.is_none() {
                    self.errors.invalid(
                        &path.field("deviceID"),
                        "deviceID is required when type is DeviceID",
                    );
                }
                if gpu.name.is_some() {
                    self.errors.invalid(
                        &path.field("name"),
                        "name must not be set when type is DeviceID",
                    );
                }
                gpu.device_id.is_some() && gpu.name.is_none()
            }
            GpuIdentifierType::Unset => {
                self.errors.invalid(
                    &path.field("type"),
                    "type is required: \"Name\" or \"DeviceID\"",
                );
                false
            }
            GpuIdentifierType::Unknown(other) => {
                self.errors.invalid(
                    &path.field("type"),
                    format!(
                        "unknown GPU identifier type {other:?}, expected \"Name\" or \"DeviceID\""
                    ),
                );
                false
            }
        }
    }

    // ---- project, categories, secrets --------------------------------------------------------

    fn project(&mut self) -> Option<Option<EntityRef>> {
        let path = self.spec.field("project");
        if self.config.project.is_unset() {
            return Some(None);
        }
        let (config, resolved) = (self.config, self.context.resolved);
        let id = self.identifier(&config.project, &path, false)?;
        self.resolve_entity(&resolved.projects, &id, "project", &path)
            .map(Some)
    }

    fn categories(&mut self, infra_id: &str) -> Option<BTreeMap<String, String>> {
        let path = self.spec.field("categories");
        let owned_key = owned_category_key(infra_id);
        let mut categories = BTreeMap::new();
        let mut complete = true;
        let mut first_index: BTreeMap<&str, usize> = BTreeMap::new();
        for (index, category) in self
            .config
            .categories
            .as_deref()
            .unwrap_or_default()
            .iter()
            .enumerate()
        {
            let item = path.index(index);
            let mut ok = true;
            for (field, text) in [("key", &category.key), ("value", &category.value)] {
                if text.is_empty() || text.chars().count() > 64 {
                    self.errors.invalid(
                        &item.field(field),
                        format!("must be 1 to 64 characters, got {}", text.chars().count()),
                    );
                    ok = false;
                }
            }
            if category.key == owned_key {
                self.errors.invalid(
                    &item.field("key"),
                    format!("{owned_key} is set by the controller"),
                );
                ok = false;
            }
            if let Some(first) = first_index.insert(&category.key, index) {
                self.errors.invalid(&item.field("key"), format!("key {:?} is already used by categories[{first}]; a VM has one value per key", category.key));
                ok = false;
            }
            if ok && self.category_exists(&category.key, &category.value, &item) {
                categories.insert(category.key.clone(), category.value.clone());
            } else {
                complete = false;
            }
        }
        // Upstream adds the owned category only when it exists, and creates the VM anyway.
        match self.category_lookup(&owned_key, OWNED_CATEGORY_VALUE) {
            Some(Lookup::Found(true)) => {
                categories.insert(owned_key, OWNED_CATEGORY_VALUE.to_owned());
            }
            Some(Lookup::Found(false) | Lookup::Failed { .. }) => self.warnings.push(format!(
                "category {owned_key}={OWNED_CATEGORY_VALUE} does not exist in Prism: the VM is created without it, so the installer's teardown will not find it"
            )),
            None if self.mode() == ResolutionMode::Preview => {
                categories.insert(owned_key, OWNED_CATEGORY_VALUE.to_owned());
            }
            None => {
                self.errors.unresolved(&path, format!("category {owned_key}={OWNED_CATEGORY_VALUE} has not been looked up in Prism"));
                complete = false;
            }
        }
        complete.then_some(categories)
    }

    fn category_lookup(&self, key: &str, value: &str) -> Option<&Lookup<bool>> {
        self.context
            .resolved
            .categories
            .get(key)
            .and_then(|values| values.get(value))
    }

    fn category_exists(&mut self, key: &str, value: &str, path: &Path) -> bool {
        match (self.category_lookup(key, value).cloned(), self.mode()) {
            (Some(Lookup::Found(true)), _) | (None, ResolutionMode::Preview) => true,
            (Some(Lookup::Found(false)), _) => {
                self.errors.unresolved(
                    path,
                    format!("category {key}={value} does not exist in Prism"),
                );
                false
            }
            (Some(Lookup::Failed { error }), _) => {
                self.errors
                    .unresolved(path, format!("category {key}={value}: {error}"));
                false
            }
            (None, ResolutionMode::Strict) => {
                self.errors.unresolved(
                    path,
                    format!("category {key}={value} has not been looked up in Prism"),
                );
                false
            }
        }
    }

    fn secrets(&mut self) {
        let spec = self.spec.clone();
        match &self.config.credentials_secret {
            None => self.errors.invalid(
                &spec.field("credentialsSecret"),
                "credentialsSecret is required",
            ),
            Some(secret) if secret.name.is_empty() => self.errors.invalid(
                &spec.field("credentialsSecret").field("name"),
                "name is required",
            ),
            Some(_) => {}
        }
        if self
            .config
            .user_data_secret
            .as_ref()
            .is_some_and(|s| s.name.is_empty())
        {
            self.errors.invalid(
                &spec.field("userDataSecret").field("name"),
                "name is required",
            );
        }
    }

    // ---- guest customization -----------------------------------------------------------------

    fn guest(&mut self, identity: &MachineIdentity, windows: bool) -> Option<GuestPlan> {
        let spec = self.spec.clone();
        let gc_path = spec.field("guestCustomization");
        let settings = self.config.guest_customization.clone().unwrap_or_default();
        let choices = self.choices;
        // Each setting is reported where it was made: its annotation, or the providerSpec.
        let type_path = if choices.guest_customization.is_some() {
            annotation_path(GUEST_CUSTOMIZATION_ANNOTATION)
        } else {
            gc_path.field("type")
        };
        let time_zone_path = if choices.time_zone.is_some() {
            annotation_path(SYSPREP_TIME_ZONE_ANNOTATION)
        } else {
            gc_path.field("timeZone")
        };
        let password_secret_path = if choices.admin_password_secret.is_some() {
            annotation_path(SYSPREP_ADMIN_PASSWORD_SECRET_ANNOTATION)
        } else {
            gc_path.field("adminPasswordSecret")
        };
        let unknown = match &choices.guest_customization {
            Some(GuestCustomizationType::Unknown(other)) => Some(other.clone()),
            _ => match customization_of(self.config) {
                GuestCustomizationType::Unknown(other) => Some(other),
                _ => None,
            },
        };
        if let Some(other) = unknown {
            self.errors.invalid(
                &type_path,
                format!(
                    "unknown guest customization {other:?}, expected \"Sysprep\" or \"CloudInit\""
                ),
            );
            return None;
        }
        let kind = customization_of(self.config);
        let user_data_path = spec.field("userDataSecret");
        let user_data = match (&self.config.user_data_secret, self.context.user_data) {
            (None, _) => None,
            // Reported by `secrets`.
            (Some(secret), _) if secret.name.is_empty() => return None,
            (Some(_), Some(data)) => Some(data),
            (Some(secret), None) if self.mode() == ResolutionMode::Strict => {
                self.errors.unresolved(
                    &user_data_path,
                    format!("Secret {:?} (key userData) has not been read", secret.name),
                );
                return None;
            }
            (Some(secret), None) => {
                self.warnings.push(format!(
                    "no user data given (--user-data): Secret {:?} is not included",
                    secret.name
                ));
                None
            }
        };

        if kind == GuestCustomizationType::CloudInit {
            // One guest customization only: Sysprep's settings make no sense with cloud-init.
            let mut ok = true;
            if settings.time_zone.is_some() {
                self.errors
                    .invalid(&time_zone_path, "a time zone is used only with Sysprep");
                ok = false;
            }
            if settings.admin_password_secret.is_some() {
                self.errors.invalid(
                    &password_secret_path,
                    "an Administrator password Secret is used only with Sysprep",
                );
                ok = false;
            }
            if !ok {
                return None;
            }
            let Some(user_data) = user_data else {
                return Some(GuestPlan::None);
            };
            return self.cloud_init(user_data, identity, windows, &user_data_path);
        }

        if !windows {
            self.errors.invalid(
                &type_path,
                "Sysprep needs a Windows Machine (label machine.openshift.io/os-id: Windows)",
            );
            return None;
        }
        let time_zone = settings.time_zone.as_deref().unwrap_or(DEFAULT_TIME_ZONE);
        if !is_time_zone_id(time_zone) {
            self.errors.invalid(&time_zone_path, format!("{time_zone:?} is not a Windows time zone ID (such as \"UTC\" or \"W. Europe Standard Time\")"));
            return None;
        }
        let password_path = match &settings.admin_password_secret {
            Some(secret) if secret.name.is_empty() => {
                let path = if choices.admin_password_secret.is_some() {
                    password_secret_path
                } else {
                    password_secret_path.field("name")
                };
                self.errors.invalid(&path, "name is required");
                return None;
            }
            Some(_) => password_secret_path,
            None => gc_path.clone(),
        };
        let password = match (self.context.admin_password, self.mode()) {
            (Some(PasswordValue::Secret(password)), _) => PasswordValue::Secret(password),
            (Some(PasswordValue::Placeholder) | None, ResolutionMode::Preview) => {
                PasswordValue::Placeholder
            }
            (_, ResolutionMode::Strict) => {
                self.errors.unresolved(
                    &password_path,
                    "no Administrator password was given for Sysprep",
                );
                return None;
            }
        };
        let script = match user_data
            .map(|data| unattend::powershell_body(data.expose()))
            .transpose()
        {
            Ok(script) => script,
            Err(error) => {
                self.errors
                    .invalid(&user_data_path, format!("{error} (Secret key userData)"));
                return None;
            }
        };
        let input = UnattendInput {
            machine_name: &identity.name,
            time_zone,
            script,
            password,
        };
        match unattend::render_unattend(&input) {
            Ok(rendered) => {
                self.warnings.extend(rendered.warnings.iter().cloned());
                Some(GuestPlan::Sysprep(rendered))
            }
            Err(error) => {
                self.errors
                    .invalid(&user_data_path, format!("{error} (Secret key userData)"));
                None
            }
        }
    }

    fn cloud_init(
        &mut self,
        user_data: &UserData,
        identity: &MachineIdentity,
        windows: bool,
        path: &Path,
    ) -> Option<GuestPlan> {
        let invalid = |errors: &mut Collector, error: CloudInitError| {
            errors.invalid(path, format!("{error} (Secret key userData)"));
        };
        let (bytes, meta_data) = if windows {
            // cloudbase-init gets the user data unchanged and learns its name from meta_data.
            let instance_id = if identity.uid.is_empty() {
                &identity.name
            } else {
                &identity.uid
            };
            (
                user_data.expose().to_vec(),
                Some(cloud_init::meta_data(&identity.name, instance_id)),
            )
        } else {
            match cloud_init::ignition_with_hostname(user_data.expose(), &identity.name) {
                Ok(bytes) => (bytes, None),
                Err(error) => {
                    invalid(&mut self.errors, error);
                    return None;
                }
            }
        };
        let user_data = match cloud_init::encode_user_data(&bytes) {
            Ok(encoded) => encoded,
            Err(error) => {
                invalid(&mut self.errors, error);
                return None;
            }
        };
        let meta_data = match meta_data
            .map(|m| cloud_init::encode_meta_data(&m))
            .transpose()
        {
            Ok(encoded) => encoded,
            Err(error) => {
                invalid(&mut self.errors, error);
                return None;
            }
        };
        Some(GuestPlan::CloudInit {
            user_data: Sensitive::new(user_data),
            meta_data: meta_data.map(Sensitive::new),
        })
    }
}

/// Anything with a UUID a reference can point at.
pub(crate) trait HasUuid {
    fn uuid(&self) -> &str;
}

impl HasUuid for super::resolve::ResolvedEntity {
    fn uuid(&self) -> &str {
        &self.uuid
    }
}

impl HasUuid for ResolvedSource {
    fn uuid(&self) -> &str {
        &self.uuid
    }
}

/// The message for an enum value this version does not know.
fn unknown_value(what: &str, value: &str, known: &[&str]) -> String {
    format!("unknown {what} {value:?}, expected one of {known:?}")
}

fn as_written(id: &NutanixResourceIdentifier) -> EntityRef {
    match (&id.type_, &id.uuid, &id.name) {
        (IdentifierType::Uuid, Some(uuid), _) => EntityRef::Uuid(uuid.clone()),
        (_, _, Some(name)) => EntityRef::Name(name.clone()),
        (_, uuid, _) => EntityRef::Name(uuid.clone().unwrap_or_default()),
    }
}

fn free_gpu<'a>(
    inventory: &'a [HostGpu],
    gpu: &NutanixGpu,
    taken: &BTreeSet<usize>,
) -> Option<(usize, &'a HostGpu)> {
    inventory.iter().enumerate().find(|(position, host_gpu)| {
        !taken.contains(position)
            && host_gpu.is_unused()
            && match &gpu.type_ {
                GpuIdentifierType::Name => host_gpu.name.is_some() && host_gpu.name == gpu.name,
                GpuIdentifierType::DeviceId => {
                    host_gpu.device_id.is_some()
                        && host_gpu.device_id == gpu.device_id.map(i64::from)
                }
                GpuIdentifierType::Unset | GpuIdentifierType::Unknown(_) => false,
            }
    })
}

fn describe_gpu(gpu: &NutanixGpu) -> String {
    match (&gpu.name, gpu.device_id) {
        (Some(name), _) => format!("named {name:?}"),
        (None, Some(id)) => format!("with device ID {id}"),
        (None, None) => "(unnamed)".into(),
    }
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, 1 to 64 characters.
fn is_failure_domain_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

/// Windows time zone IDs are letters, digits, spaces and `.+-()_` (`UTC`, `UTC-11`,
/// `W. Europe Standard Time`, `Russia Time Zone 3`).
fn is_time_zone_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b" .+-()_".contains(&b))
        && !id.starts_with(' ')
        && !id.ends_with(' ')
}

#[cfg(test)]
mod tests;
