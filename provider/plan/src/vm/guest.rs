//! Which guest customization a Machine gets: decided here once, for the plan and for the
//! controller, which reads (or generates) an Administrator password only for Sysprep.

use crate::api::{
    AnnotatedChoices, GuestCustomizationType, NutanixMachineProviderConfig,
    SYSPREP_ADMIN_PASSWORD_SECRET_ANNOTATION,
};

/// The customization when nothing chooses one: cloud-init, for Windows too. The Go provider
/// always sends the user data as cloud-init (openshift/machine-api-provider-nutanix
/// `pkg/actuators/machine/vm.go`), and every official Windows-on-Nutanix sample uses a
/// cloudbase-init image with no other customization (openshift/openshift-docs
/// `modules/windows-machineset-nutanix.adoc`, openshift/windows-machine-config-operator
/// `docs/machineset-nutanix.md` and `test/e2e/providers/nutanix/nutanix.go`), so a MachineSet
/// written for the Go provider joins unchanged. Sysprep is the opt-in for Sysprep-generalized
/// images.
pub const DEFAULT_CUSTOMIZATION: GuestCustomizationType = GuestCustomizationType::CloudInit;

/// The customization `config` (annotations applied) asks for; an unknown value stays unknown,
/// for validation to report.
pub fn customization_of(config: &NutanixMachineProviderConfig) -> GuestCustomizationType {
    config
        .guest_customization
        .as_ref()
        .and_then(|settings| settings.type_.clone())
        .unwrap_or(DEFAULT_CUSTOMIZATION)
}

/// Where a Machine's Administrator password comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdminPasswordSource {
    /// No Sysprep: no password.
    NotNeeded,
    /// Sysprep without a password Secret: one generated for the VM.
    Generated,
    /// Sysprep with a password Secret (key `password`) named at `field`.
    Secret { name: String, field: String },
}

/// Where the Administrator password of a Machine whose providerSpec is `config` comes from
/// (`choices`: what its annotations chose, to name the field where the Secret was named).
pub fn admin_password_source(
    config: &NutanixMachineProviderConfig,
    choices: &AnnotatedChoices,
) -> AdminPasswordSource {
    if customization_of(config) != GuestCustomizationType::Sysprep {
        return AdminPasswordSource::NotNeeded;
    }
    let secret = config
        .guest_customization
        .as_ref()
        .and_then(|settings| settings.admin_password_secret.as_ref())
        .filter(|secret| !secret.name.is_empty());
    match secret {
        None => AdminPasswordSource::Generated,
        Some(secret) => AdminPasswordSource::Secret {
            name: secret.name.clone(),
            field: if choices.admin_password_secret.is_some() {
                format!("metadata.annotations[{SYSPREP_ADMIN_PASSWORD_SECRET_ANNOTATION}]")
            } else {
                "providerSpec.guestCustomization.adminPasswordSecret".to_owned()
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::api::{GUEST_CUSTOMIZATION_ANNOTATION, Machine, OS_ID_LABEL, OS_ID_WINDOWS};

    fn machine(windows: bool, annotations: Value, guest_customization: Option<Value>) -> Machine {
        let mut value = json!({
            "cluster": {"type": "name", "name": "pe-1"},
            "image": {"type": "name", "name": "windows-server-2022"},
        });
        if let Some(settings) = guest_customization {
            value["guestCustomization"] = settings;
        }
        let labels = if windows {
            json!({OS_ID_LABEL: OS_ID_WINDOWS})
        } else {
            json!({})
        };
        serde_json::from_value(json!({
            "apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
            "metadata": {"name": "m", "labels": labels, "annotations": annotations},
            "spec": {"providerSpec": {"value": value}},
        }))
        .unwrap()
    }

    fn source(machine: &Machine) -> AdminPasswordSource {
        let config = machine.provider_config().unwrap().unwrap();
        admin_password_source(&config, &machine.annotated_choices())
    }

    #[test]
    fn windows_defaults_to_cloud_init_like_the_go_provider() {
        for windows in [true, false] {
            let machine = machine(windows, json!({}), None);
            let config = machine.provider_config().unwrap().unwrap();
            assert_eq!(customization_of(&config), GuestCustomizationType::CloudInit);
            assert_eq!(source(&machine), AdminPasswordSource::NotNeeded);
        }
    }

    #[test]
    fn sysprep_is_chosen_by_annotation_or_in_spec_and_the_annotation_wins() {
        let by_annotation = machine(
            true,
            json!({GUEST_CUSTOMIZATION_ANNOTATION: "Sysprep"}),
            None,
        );
        assert_eq!(source(&by_annotation), AdminPasswordSource::Generated);
        let in_spec = machine(true, json!({}), Some(json!({"type": "Sysprep"})));
        assert_eq!(source(&in_spec), AdminPasswordSource::Generated);
        let overridden = machine(
            true,
            json!({GUEST_CUSTOMIZATION_ANNOTATION: "CloudInit"}),
            Some(json!({"type": "Sysprep"})),
        );
        assert_eq!(source(&overridden), AdminPasswordSource::NotNeeded);
    }

    #[test]
    fn the_password_secret_is_named_where_it_was_set() {
        let by_annotation = machine(
            true,
            json!({GUEST_CUSTOMIZATION_ANNOTATION: "Sysprep",
                   SYSPREP_ADMIN_PASSWORD_SECRET_ANNOTATION: "win-admin"}),
            Some(json!({"adminPasswordSecret": {"name": "ignored"}})),
        );
        assert_eq!(
            source(&by_annotation),
            AdminPasswordSource::Secret {
                name: "win-admin".into(),
                field: format!("metadata.annotations[{SYSPREP_ADMIN_PASSWORD_SECRET_ANNOTATION}]"),
            }
        );
        let in_spec = machine(
            true,
            json!({}),
            Some(json!({"type": "Sysprep", "adminPasswordSecret": {"name": "win-admin"}})),
        );
        assert_eq!(
            source(&in_spec),
            AdminPasswordSource::Secret {
                name: "win-admin".into(),
                field: "providerSpec.guestCustomization.adminPasswordSecret".into(),
            }
        );
    }
}
