//! Our choices that cannot live in `providerSpec`: annotations on the Machine.
//!
//! The machine-api-operator's defaulting webhook (openshift/machine-api-operator
//! `pkg/webhooks/machine_webhook.go`, `defaultNutanix`, registered for Machine and MachineSet
//! CREATE in `pkg/webhooks/config.go`) unmarshals `providerSpec.value` into the upstream Go type
//! `NutanixMachineProviderConfig` (openshift/api `machine/v1/types_nutanixprovider.go`) and
//! marshals it back, so `imageKind` and `guestCustomization` are gone before the provider sees a
//! Machine. Annotations survive: the webhook leaves metadata alone, and the operator's MachineSet
//! controller copies `spec.template.metadata.annotations` onto every Machine it creates
//! (`pkg/controller/machineset/controller.go`, `createMachine`). So a MachineSet sets these on
//! its template's metadata.
//!
//! Precedence: an annotation wins over the same choice in `providerSpec` (which still counts
//! where the webhook does not run, or when written after the Machine's creation).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::LocalObjectReference;

use super::provider::{GuestCustomizationType, ImageKind, NutanixMachineProviderConfig};
use prism_types::open_enum;

/// What `image` names: `Image` (default), `Template` or `VM` (`providerSpec.imageKind`).
pub const IMAGE_KIND_ANNOTATION: &str = "nutanix.machine.openshift.io/image-kind";
/// The guest customization: `CloudInit` (default) or `Sysprep`
/// (`providerSpec.guestCustomization.type`).
pub const GUEST_CUSTOMIZATION_ANNOTATION: &str = "nutanix.machine.openshift.io/guest-customization";
/// Windows time zone ID for Sysprep (`providerSpec.guestCustomization.timeZone`).
pub const SYSPREP_TIME_ZONE_ANNOTATION: &str = "nutanix.machine.openshift.io/sysprep-time-zone";
/// Secret (key `password`) with the Administrator password for Sysprep
/// (`providerSpec.guestCustomization.adminPasswordSecret.name`).
pub const SYSPREP_ADMIN_PASSWORD_SECRET_ANNOTATION: &str =
    "nutanix.machine.openshift.io/sysprep-admin-password-secret";

/// UUID of the storage container the system (boot) disk is created in; no providerSpec field
/// (`NutanixMachineProviderConfig` has none for the system disk, and the webhook drops unknown
/// fields).
pub const SYSTEM_DISK_STORAGE_CONTAINER_ANNOTATION: &str =
    "nutanix.machine.openshift.io/system-disk-storage-container";
/// `Enabled` gives the VM a virtual TPM (Windows 11 and Server 2025 require one); `Disabled`,
/// the default, leaves it as the image or source has it.
pub const VTPM_ANNOTATION: &str = "nutanix.machine.openshift.io/vtpm";
/// The IP pools the Machine's NICs take static addresses from, one entry per NIC in `subnets`
/// order (`plan::machine::ipam`).
pub const IP_POOL_ANNOTATION: &str = "nutanix.machine.openshift.io/ip-pool";
/// The DNS servers a guest that sets its own static address uses (a subnet Prism does not
/// manage has no DHCP to give them): comma-separated addresses (`plan::machine::ipam`).
pub const NAMESERVERS_ANNOTATION: &str = "nutanix.machine.openshift.io/nameservers";

/// The prefix of our annotations.
pub const ANNOTATION_PREFIX: &str = "nutanix.machine.openshift.io/";

/// Every annotation under [`ANNOTATION_PREFIX`] that the provider reads.
pub const KNOWN_ANNOTATIONS: [&str; 8] = [
    IMAGE_KIND_ANNOTATION,
    GUEST_CUSTOMIZATION_ANNOTATION,
    SYSPREP_TIME_ZONE_ANNOTATION,
    SYSPREP_ADMIN_PASSWORD_SECRET_ANNOTATION,
    SYSTEM_DISK_STORAGE_CONTAINER_ANNOTATION,
    VTPM_ANNOTATION,
    IP_POOL_ANNOTATION,
    NAMESERVERS_ANNOTATION,
];

open_enum! {
    /// The value of [`VTPM_ANNOTATION`].
    #[derive(Default)]
    pub enum VtpmChoice else Unknown {
        #[default]
        Disabled = "Disabled",
        Enabled = "Enabled",
    }
}

/// The keys under [`ANNOTATION_PREFIX`] that the provider does not read: a misspelt choice,
/// which would otherwise be ignored without a word.
pub fn unknown_annotations(annotations: Option<&BTreeMap<String, String>>) -> Vec<&str> {
    annotations
        .into_iter()
        .flat_map(BTreeMap::keys)
        .map(String::as_str)
        .filter(|key| key.starts_with(ANNOTATION_PREFIX) && !KNOWN_ANNOTATIONS.contains(key))
        .collect()
}

/// Our choices as a Machine's annotations state them. Enum values are kept even when unknown,
/// so validation can report them at their annotation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AnnotatedChoices {
    pub image_kind: Option<ImageKind>,
    pub guest_customization: Option<GuestCustomizationType>,
    pub time_zone: Option<String>,
    pub admin_password_secret: Option<String>,
    /// As written; validation checks that it is a UUID. Not applied to `providerSpec`, which
    /// has no field for it.
    pub system_disk_storage_container: Option<String>,
    /// Not applied to `providerSpec`, which has no field for it.
    pub vtpm: Option<VtpmChoice>,
}

impl AnnotatedChoices {
    /// Reads the choices from a Machine's (or a MachineSet template's) annotations.
    pub fn from_annotations(annotations: Option<&BTreeMap<String, String>>) -> Self {
        let get = |key: &str| annotations.and_then(|a| a.get(key)).cloned();
        Self {
            image_kind: get(IMAGE_KIND_ANNOTATION).map(|v| ImageKind::from(v.as_str())),
            guest_customization: get(GUEST_CUSTOMIZATION_ANNOTATION)
                .map(|v| GuestCustomizationType::from(v.as_str())),
            time_zone: get(SYSPREP_TIME_ZONE_ANNOTATION),
            admin_password_secret: get(SYSPREP_ADMIN_PASSWORD_SECRET_ANNOTATION),
            system_disk_storage_container: get(SYSTEM_DISK_STORAGE_CONTAINER_ANNOTATION),
            vtpm: get(VTPM_ANNOTATION).map(|v| VtpmChoice::from(v.as_str())),
        }
    }

    /// Puts the choices into `config`, over what its providerSpec says. Unknown enum values are
    /// not applied (validation reports them at their annotation); text values are applied as
    /// written, empty included, for validation to check.
    pub fn apply(&self, config: &mut NutanixMachineProviderConfig) {
        if let Some(kind) = self.image_kind.as_ref().filter(|k| k.is_known()) {
            config.image_kind = Some(kind.clone());
        }
        let customization = self.guest_customization.as_ref().filter(|k| k.is_known());
        if customization.is_none()
            && self.time_zone.is_none()
            && self.admin_password_secret.is_none()
        {
            return;
        }
        let settings = config
            .guest_customization
            .get_or_insert_with(Default::default);
        if let Some(kind) = customization {
            settings.type_ = Some(kind.clone());
        }
        if let Some(zone) = &self.time_zone {
            settings.time_zone = Some(zone.clone());
        }
        if let Some(name) = &self.admin_password_secret {
            settings.admin_password_secret = Some(LocalObjectReference { name: name.clone() });
        }
    }
}
