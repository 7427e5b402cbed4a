//! A Machine's providerSpec read once, with its annotations' choices applied, and what the rules
//! derive from it. A reconcile reads it into its snapshot and hands this on, so the protocol,
//! the executor's Secret and lookup reads and validation all work from the same reading; each
//! derived fact has one definition here, used by validation, the protocol and `render` alike.

use crate::api::{
    AnnotatedChoices, BootType, GuestCustomizationType, Machine, NutanixMachineProviderConfig,
    ParseError,
};

use super::guest::customization_of;

/// Reads a Machine's providerSpec: [`ParsedSpec::of`] itself ([`ReadSpec`]), or a test's
/// stand-in that counts the reads (a reconcile makes one).
pub trait SpecReader: std::fmt::Debug + Send + Sync {
    fn read(&self, machine: &Machine) -> ParsedSpec;
}

/// [`ParsedSpec::of`].
#[derive(Debug)]
pub struct ReadSpec;

impl SpecReader for ReadSpec {
    fn read(&self, machine: &Machine) -> ParsedSpec {
        ParsedSpec::of(machine)
    }
}

/// The providerSpec of one Machine, read once.
#[derive(Clone, Debug)]
pub struct ParsedSpec {
    /// `None`: the Machine has no `providerSpec.value`.
    config: Option<Result<NutanixMachineProviderConfig, ParseError>>,
    /// The choices its annotations state (already applied to `config`), kept to report an
    /// error where the choice was made.
    choices: AnnotatedChoices,
}

impl ParsedSpec {
    /// Reads `machine`'s providerSpec: the one read of a reconcile.
    pub fn of(machine: &Machine) -> Self {
        Self {
            config: machine.provider_config(),
            choices: machine.annotated_choices(),
        }
    }

    /// The reading as it came out: absent, unreadable (where and why), or the config.
    pub fn reading(&self) -> Option<&Result<NutanixMachineProviderConfig, ParseError>> {
        self.config.as_ref()
    }

    /// The config, when there is one that reads.
    pub fn config(&self) -> Option<&NutanixMachineProviderConfig> {
        self.config.as_ref()?.as_ref().ok()
    }

    pub fn choices(&self) -> &AnnotatedChoices {
        &self.choices
    }

    /// The credentials Secret the providerSpec names, if it names one.
    pub fn credentials_secret(&self) -> Option<&str> {
        self.config()?
            .credentials_secret
            .as_ref()
            .map(|secret| secret.name.as_str())
            .filter(|name| !name.is_empty())
    }

    /// The other Secrets the providerSpec names: user data, the Administrator password.
    pub fn data_secrets(&self) -> Vec<&str> {
        let Some(config) = self.config() else {
            return Vec::new();
        };
        let admin = config
            .guest_customization
            .as_ref()
            .and_then(|guest| guest.admin_password_secret.as_ref());
        config
            .user_data_secret
            .iter()
            .chain(admin)
            .map(|secret| secret.name.as_str())
            .filter(|name| !name.is_empty())
            .collect()
    }

    /// Whether the VM asks for Secure Boot with guest customization
    /// ([`secure_boot_customized`]); false without a readable config.
    pub fn secure_boot_customized(&self) -> bool {
        self.config().is_some_and(secure_boot_customized)
    }
}

/// Whether `config` asks for a VM that boots with Secure Boot and has its guest customised
/// (Sysprep, or cloud-init with user data): the combination AHV refuses on many versions
/// (VMM-30102), warned about before a create and explained when a create fails. One definition
/// for both. A clone or template deploy keeps its source's boot settings, and validation refuses
/// a `bootType` that differs from the source's, so `SecureBoot` written there means the source
/// has it: the customization CD-ROM meets Secure Boot there too.
pub fn secure_boot_customized(config: &NutanixMachineProviderConfig) -> bool {
    let customised = match customization_of(config) {
        GuestCustomizationType::Sysprep => true,
        _ => config
            .user_data_secret
            .as_ref()
            .is_some_and(|secret| !secret.name.is_empty()),
    };
    config.boot_type == BootType::SecureBoot && customised
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::api::ImageKind;

    fn config(fields: Value) -> NutanixMachineProviderConfig {
        let mut value = json!({
            "cluster": {"type": "name", "name": "pe-1"},
            "image": {"type": "name", "name": "source"},
        });
        for (key, field) in fields.as_object().into_iter().flatten() {
            value[key] = field.clone();
        }
        NutanixMachineProviderConfig::from_value(&value).unwrap()
    }

    /// The one definition, where the two earlier ones disagreed: the create's advice ignored
    /// Sysprep without user data, the validation warning ignored clones and templates.
    #[test]
    fn secure_boot_with_customization_is_secure_boot_with_sysprep_or_user_data() {
        let user_data = json!({"name": "worker-user-data"});
        let sysprep = json!({"type": "Sysprep"});
        let table = [
            (
                "image with user data",
                json!({"bootType": "SecureBoot", "userDataSecret": user_data}),
                true,
            ),
            (
                "image without user data",
                json!({"bootType": "SecureBoot"}),
                false,
            ),
            (
                "an empty user-data Secret name",
                json!({"bootType": "SecureBoot", "userDataSecret": {"name": ""}}),
                false,
            ),
            (
                "Sysprep without user data",
                json!({"bootType": "SecureBoot", "guestCustomization": sysprep}),
                true,
            ),
            (
                "UEFI with user data",
                json!({"bootType": "UEFI", "userDataSecret": user_data}),
                false,
            ),
            (
                "unset with Sysprep",
                json!({"guestCustomization": sysprep}),
                false,
            ),
            (
                "template with user data",
                json!({"imageKind": "Template", "bootType": "SecureBoot", "userDataSecret": user_data}),
                true,
            ),
            (
                "source VM with Sysprep",
                json!({"imageKind": "VM", "bootType": "SecureBoot", "guestCustomization": sysprep}),
                true,
            ),
        ];
        for (case, fields, expected) in table {
            assert_eq!(secure_boot_customized(&config(fields)), expected, "{case}");
        }
    }

    #[test]
    fn an_unknown_or_unset_image_kind_reads_as_an_image() {
        let table = [
            (json!({}), ImageKind::Image),
            (json!({"imageKind": "Snapshot"}), ImageKind::Image),
            (json!({"imageKind": "Template"}), ImageKind::Template),
            (json!({"imageKind": "VM"}), ImageKind::Vm),
        ];
        for (fields, expected) in table {
            assert_eq!(config(fields.clone()).source_kind(), expected, "{fields}");
        }
    }

    #[test]
    fn the_secrets_named_are_read_from_the_one_reading() {
        let machine: Machine = serde_json::from_value(json!({
            "apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
            "metadata": {"name": "m", "annotations": {
                "nutanix.machine.openshift.io/guest-customization": "Sysprep",
                "nutanix.machine.openshift.io/sysprep-admin-password-secret": "admin",
            }},
            "spec": {"providerSpec": {"value": {
                "credentialsSecret": {"name": ""},
                "userDataSecret": {"name": "windows-user-data"},
            }}},
        }))
        .unwrap();
        let spec = ParsedSpec::of(&machine);
        assert_eq!(spec.credentials_secret(), None, "an empty name names none");
        assert_eq!(spec.data_secrets(), ["windows-user-data", "admin"]);
    }
}
