//! Validates a Machine's providerSpec, together with what Prism said about it, into a [`VmPlan`].
//!
//! Every rule of the Go provider is here, plus ours; all problems are collected, each with its
//! field path and class. The class rule: *invalid* when the Machine itself is wrong or
//! contradicts a fact Prism reported (a subnet on another cluster, a disk smaller than its
//! source); *unresolved* when something in Prism is missing, ambiguous, not looked up yet, or has
//! no free capacity now (it may appear later, so the Machine is retried, never failed).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use prism_types::Sensitive;
use prism_types::quote::quoted;
use prism_types::v3::HostGpu;

use super::addressing::{
    BoundAddress, IpPoolError, NameserversError, PoolRef, machine_ip_pools, machine_nameservers,
};
use super::cloud_init::{self, CloudInitError};
use super::errors::{Collector, ErrorClass, Path, ValidationErrors};
use super::guest::customization_of;
use super::identity::MachineIdentity;
use super::resolve::{
    Lookup, Resolution, ResolutionMode, ResolvedReferences, ResolvedSource, SubnetIpam, resolve,
};
use super::secret::UserData;
use super::spec::{ParsedSpec, secure_boot_customized};
use super::unattend::{self, PasswordValue, UnattendInput};
use super::{
    BootPlan, DiskAddressPlan, EntityRef, GuestPlan, PlannedDataDisk, PlannedGpu, SourcePlan,
    VmPlan,
};
use crate::api::quantity::{GIB, mib_floor, quantity_bytes};
use crate::api::{
    AnnotatedChoices, BootType, CLUSTER_ID_LABEL, DiskAdapterType, DiskDeviceType, DiskMode,
    FieldShape, GUEST_CUSTOMIZATION_ANNOTATION, GpuIdentifierType, GuestCustomizationType,
    IMAGE_KIND_ANNOTATION, IdentifierType, ImageKind, KNOWN_ANNOTATIONS, Machine, NutanixGpu,
    NutanixMachineProviderConfig, NutanixResourceIdentifier, NutanixVmDisk, PROVIDER_SPEC_FIELDS,
    PROVIDER_SPEC_NESTED, SYSPREP_ADMIN_PASSWORD_SECRET_ANNOTATION, SYSPREP_TIME_ZONE_ANNOTATION,
    SYSTEM_DISK_STORAGE_CONTAINER_ANNOTATION, VTPM_ANNOTATION, VtpmChoice, unknown_annotations,
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
    /// What a named user-data Secret without `user_data` means in [`ResolutionMode::Strict`].
    pub unread_user_data: UnreadUserData,
    /// The Administrator password for Sysprep. In [`ResolutionMode::Strict`] a placeholder is
    /// refused: a VM never gets one.
    pub admin_password: Option<PasswordValue<'a>>,
    /// The static addresses the Machine's claims are bound to, when they are.
    pub claims: ClaimedAddresses<'a>,
}

/// The addresses bound to a Machine's IP address claims ([`crate::api::IP_POOL_ANNOTATION`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClaimedAddresses<'a> {
    /// Not claimed (yet): the rules that need the addresses themselves are not checked, and no
    /// NIC is given one; the rules that need only the pools and the subnets are.
    NotClaimed,
    /// Every claim is bound: the addresses by NIC index (`None`: a NIC without a pool).
    Bound(&'a [Option<BoundAddress>]),
}

impl PlanContext<'_> {
    /// The context of the check of a Machine in itself: nothing looked up, no Secret read. The
    /// errors it gives that are [`ErrorClass::Invalid`] no lookup or Secret can change.
    pub fn in_itself() -> PlanContext<'static> {
        static NOTHING: std::sync::LazyLock<ResolvedReferences> =
            std::sync::LazyLock::new(ResolvedReferences::default);
        PlanContext {
            resolved: &NOTHING,
            mode: ResolutionMode::Strict,
            user_data: None,
            unread_user_data: UnreadUserData::Unresolved,
            admin_password: None,
            claims: ClaimedAddresses::NotClaimed,
        }
    }
}

/// The errors of a Machine that is wrong in itself (no lookup, Secret or claim can change
/// them), if any: the first step of every plan, made before anything is read for it.
pub fn invalid_in_itself(machine: &Machine, spec: &ParsedSpec) -> Option<ValidationErrors> {
    plan_vm(machine, spec, &PlanContext::in_itself())
        .err()?
        .of_class(ErrorClass::Invalid)
}

/// What a user-data Secret that the providerSpec names but that was not given means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnreadUserData {
    /// The controller has not read it: unresolved, the Machine is retried.
    Unresolved,
    /// A command ran without `--user-data`: a warning that the user data was not checked.
    NotChecked,
    /// The Secret does not exist (what `doctor` found in the cluster): an error, unresolved
    /// since the Secret may yet be written (WMCO writes `windows-user-data`).
    Absent,
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

/// The plan `validate` and `doctor` make from the lookups `resolved`, before any address is
/// claimed: [`plan_vm`], as the controller makes it, with what such a command has (the user data
/// when given, `password` for Sysprep).
pub fn plan_unclaimed(
    machine: &Machine,
    spec: &ParsedSpec,
    resolved: &ResolvedReferences,
    user_data: Option<&UserData>,
    unread_user_data: UnreadUserData,
    password: Option<&super::secret::AdminPassword>,
) -> Result<VmPlan, ValidationErrors> {
    plan_vm(
        machine,
        spec,
        &PlanContext {
            resolved,
            mode: ResolutionMode::Strict,
            user_data,
            unread_user_data,
            admin_password: password.map(PasswordValue::Secret),
            claims: ClaimedAddresses::NotClaimed,
        },
    )
}

/// Validates `machine`, whose providerSpec `spec` is, and decides its VM.
pub fn plan_vm(
    machine: &Machine,
    spec: &ParsedSpec,
    context: &PlanContext<'_>,
) -> Result<VmPlan, ValidationErrors> {
    let mut errors = Collector::default();
    let name = machine.metadata.name.clone().unwrap_or_default();
    let metadata = Path::root("metadata");
    if !is_dns_label(&name) {
        errors.invalid(
            &metadata.field("name"),
            format!("{name:?} cannot name a VM and its host: use at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit", name = quoted(&name)),
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
    let config = match spec.reading() {
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
            errors.invalid(&path, error.message.clone());
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
    let choices = spec.choices();
    let mut warnings = in_spec_choice_warnings(machine, choices);
    warnings.extend(unknown_key_warnings(machine));
    let mut validator = Validator {
        errors,
        warnings,
        context,
        spec: spec_path,
        config,
        choices,
        pools: machine_ip_pools(machine),
        nameservers: machine_nameservers(machine),
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

/// Warnings for what the provider ignores and a typo would produce: providerSpec fields it does
/// not read, and annotations under its prefix that it does not read.
fn unknown_key_warnings(machine: &Machine) -> Vec<String> {
    let fields = machine
        .spec
        .provider_spec
        .value
        .as_deref()
        .and_then(serde_json::Value::as_object)
        .into_iter()
        .flat_map(serde_json::Map::keys)
        .filter(|field| !PROVIDER_SPEC_FIELDS.contains(&field.as_str()))
        .map(|field| {
            format!(
                "providerSpec.{field} is not a field of NutanixMachineProviderConfig: it is ignored (check its spelling)",
                field = quoted(field)
            )
        });
    let mut nested = Vec::new();
    if let Some(spec) = machine
        .spec
        .provider_spec
        .value
        .as_deref()
        .and_then(serde_json::Value::as_object)
    {
        for (field, shape) in &PROVIDER_SPEC_NESTED {
            if let Some(value) = spec.get(*field) {
                unknown_nested(value, shape, &format!("providerSpec.{field}"), &mut nested);
            }
        }
    }
    let nested = nested.into_iter().map(|path| {
        format!(
            "{path} is not a field of NutanixMachineProviderConfig: it is ignored (check its spelling)",
            path = quoted(&path)
        )
    });
    let fields = fields.chain(nested);
    let known = KNOWN_ANNOTATIONS.join(", ");
    let annotations = unknown_annotations(machine.metadata.annotations.as_ref())
        .into_iter()
        .map(|key| {
            format!(
                "annotation {key:?} is not one the provider reads ({known}): it is ignored (check its spelling)",
                key = quoted(key)
            )
        });
    fields.chain(annotations).collect()
}

/// The paths of the fields inside `value` (at `path`) that `shape` does not have.
fn unknown_nested(
    value: &serde_json::Value,
    shape: &FieldShape,
    path: &str,
    out: &mut Vec<String>,
) {
    match (shape, value) {
        (FieldShape::Object(fields), serde_json::Value::Object(object)) => {
            for (key, inner) in object {
                match fields.iter().find(|(name, _)| name == key) {
                    Some((_, inner_shape)) => {
                        unknown_nested(inner, inner_shape, &format!("{path}.{key}"), out);
                    }
                    None => out.push(format!("{path}.{key}")),
                }
            }
        }
        (FieldShape::List(item), serde_json::Value::Array(items)) => {
            for (index, inner) in items.iter().enumerate() {
                unknown_nested(inner, item, &format!("{path}[{index}]"), out);
            }
        }
        // A value of another type is the parser's to refuse, with its own error.
        _ => {}
    }
}

/// Warnings for our choices written in `providerSpec`: the machine-api-operator's webhook drops
/// them when a Machine is created on OpenShift, and an annotation overrides them.
fn in_spec_choice_warnings(machine: &Machine, choices: &AnnotatedChoices) -> Vec<String> {
    let Some(value) = machine.spec.provider_spec.value.as_deref() else {
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
    /// The IP pools of the NICs (`None`: no [`crate::api::IP_POOL_ANNOTATION`]).
    pools: Option<Result<Vec<Option<PoolRef>>, IpPoolError>>,
    /// The DNS servers of a guest that sets its own address
    /// ([`crate::api::NAMESERVERS_ANNOTATION`]).
    nameservers: Option<Result<Vec<std::net::IpAddr>, NameserversError>>,
}

impl Validator<'_, '_> {
    fn mode(&self) -> ResolutionMode {
        self.context.mode
    }

    fn plan(&mut self, identity: MachineIdentity, infra_id: &str, windows: bool) -> Option<VmPlan> {
        let config = self.config;
        let spec = self.spec.clone();

        // An unknown kind is refused where it was written (an unknown annotation is not applied,
        // so the providerSpec's value is reported only without one); the rest of the plan reads
        // the kind as the lookups did.
        match (&self.choices.image_kind, &config.image_kind) {
            (Some(ImageKind::Unknown(other)), _) => self.errors.invalid(
                &annotation_path(IMAGE_KIND_ANNOTATION),
                unknown_value("image kind", other, ImageKind::KNOWN),
            ),
            (_, Some(ImageKind::Unknown(other))) => self.errors.invalid(
                &spec.field("imageKind"),
                unknown_value("image kind", other, ImageKind::KNOWN),
            ),
            _ => {}
        }
        let image_kind = config.source_kind();

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
        let nics_written = subnet_ids.len();
        let subnets = self.subnets(subnet_ids, cluster.as_ref());
        let addressing =
            self.static_addresses(&identity.name, nics_written, subnets.as_deref(), windows);
        let subnets =
            subnets.map(|subnets| subnets.into_iter().map(|(subnet, _)| subnet).collect());

        let num_sockets = self.positive(config.vcpu_sockets, "vcpuSockets");
        let vcpus_per_socket = self.positive(config.vcpus_per_socket, "vcpusPerSocket");
        let memory = self.size(&config.memory_size, "memorySize", MIN_MEMORY_BYTES);
        let system_disk = self.size(
            &config.system_disk_size,
            "systemDiskSize",
            MIN_SYSTEM_DISK_BYTES,
        );

        let boot = self.boot(&image_kind, source.as_ref().map(|(_, resolved)| resolved));
        let system_disk_storage_container = self.system_disk_container(&image_kind);
        let vtpm_enabled = self.vtpm(
            &image_kind,
            boot,
            source.as_ref().and_then(|(_, resolved)| resolved.as_ref()),
        );
        let data_disks = self.data_disks(&image_kind, boot);
        let gpus = self.gpus(&image_kind);
        let project = self.project();
        let categories = self.categories(infra_id);
        self.secrets();
        let guest_address = addressing
            .as_ref()
            .and_then(|addressing| addressing.guest.as_ref());
        let guest = self.guest(&identity, windows, guest_address);
        let source = source.and_then(|(source, resolved)| {
            self.source_plan(source, resolved.as_ref(), system_disk)
        });
        if secure_boot_customized(config) {
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
            assigned_ips: addressing?.assigned,
            num_sockets: num_sockets?,
            vcpus_per_socket: vcpus_per_socket?,
            memory_mib: mib_floor(memory?),
            system_disk_mib: mib_floor(system_disk?),
            system_disk_storage_container: system_disk_storage_container?,
            vtpm_enabled: vtpm_enabled?,
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
    format!(
        "unknown {what} {value:?}, expected one of {known:?}",
        value = quoted(value)
    )
}

fn as_written(id: &NutanixResourceIdentifier) -> EntityRef {
    match (&id.type_, &id.uuid, &id.name) {
        (IdentifierType::Uuid, Some(uuid), _) => EntityRef::Uuid(uuid.clone()),
        (_, _, Some(name)) => EntityRef::Name(name.clone()),
        (_, uuid, _) => EntityRef::Name(uuid.clone().unwrap_or_default()),
    }
}

mod addresses;
mod annotated;
mod disks;
mod gpus;
mod guest;
mod metadata;
mod placement;
mod source;

#[cfg(test)]
mod tests;
