//! Guest customization: the Secrets it reads, Sysprep's unattend.xml or cloud-init.

use super::*;
use crate::api::IP_POOL_ANNOTATION;
use crate::vm::guest_network::{GuestAddress, GuestAddressError, with_guest_address};

impl Validator<'_, '_> {
    pub(super) fn secrets(&mut self) {
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

    /// `address`: a static address the guest sets itself, written into its user data.
    pub(super) fn guest(
        &mut self,
        identity: &MachineIdentity,
        windows: bool,
        address: Option<&GuestAddress>,
    ) -> Option<GuestPlan> {
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
                    "unknown guest customization {other:?}, expected \"Sysprep\" or \"CloudInit\"",
                    other = quoted(&other)
                ),
            );
            return None;
        }
        let kind = customization_of(self.config);
        let user_data_path = spec.field("userDataSecret");
        // The Linux workers' Secret is refused by name, before it is read: `render` and
        // `validate` without --user-data say the same as the controller.
        let secret_name = self
            .config
            .user_data_secret
            .as_ref()
            .map(|s| s.name.as_str());
        if windows
            && let Some(name) = secret_name
            && let Err(error) = cloud_init::check_windows_user_data(name, None)
        {
            self.errors.invalid(&user_data_path, error.to_string());
            return None;
        }
        let user_data = match (&self.config.user_data_secret, self.context.user_data) {
            (None, _) => None,
            // Reported by `secrets`.
            (Some(secret), _) if secret.name.is_empty() => return None,
            (Some(_), Some(data)) => Some(data),
            (Some(secret), None)
                if self.mode() == ResolutionMode::Strict
                    && self.context.unread_user_data == UnreadUserData::Unresolved =>
            {
                self.errors.unresolved(
                    &user_data_path,
                    format!(
                        "Secret {:?} (key userData) has not been read",
                        quoted(&secret.name)
                    ),
                );
                return None;
            }
            (Some(secret), None) if self.context.unread_user_data == UnreadUserData::Absent => {
                self.errors.unresolved(
                    &user_data_path,
                    format!(
                        "Secret {:?} (key userData) does not exist in the Machine's namespace",
                        quoted(&secret.name)
                    ),
                );
                return None;
            }
            (Some(secret), None) => {
                let left_out = match self.mode() {
                    ResolutionMode::Preview => "; the output leaves it out",
                    ResolutionMode::Strict => "",
                };
                self.warnings.push(format!(
                    "user data not checked: pass --user-data with the userData of Secret {:?}{left_out}",
                    quoted(&secret.name)
                ));
                None
            }
        };
        if windows
            && let (Some(name), Some(data)) = (secret_name, user_data)
            && let Err(error) = cloud_init::check_windows_user_data(name, Some(data.expose()))
        {
            self.errors.invalid(&user_data_path, error.to_string());
            return None;
        }

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
                if let Some(address) = address {
                    self.guest_address_refused(address, &GuestAddressError::NoUserData);
                    return None;
                }
                return Some(GuestPlan::None);
            };
            return self.cloud_init(user_data, identity, windows, &user_data_path, address);
        }
        if let Some(address) = address {
            self.guest_address_refused(address, &GuestAddressError::Sysprep);
            return None;
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
            self.errors.invalid(&time_zone_path, format!("{time_zone:?} is not a Windows time zone ID (such as \"UTC\" or \"W. Europe Standard Time\")", time_zone = quoted(time_zone)));
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

    /// A static address the guest was to set itself, and why it cannot.
    fn guest_address_refused(&mut self, address: &GuestAddress, error: &GuestAddressError) {
        self.errors.invalid(
            &annotation_path(IP_POOL_ANNOTATION),
            format!(
                "the static address of IPAddressClaim {} must be set by the guest (Prism does not manage its subnet's addresses), but {error}",
                address.claim
            ),
        );
    }

    pub(super) fn cloud_init(
        &mut self,
        user_data: &UserData,
        identity: &MachineIdentity,
        windows: bool,
        path: &Path,
        address: Option<&GuestAddress>,
    ) -> Option<GuestPlan> {
        let invalid = |errors: &mut Collector, error: CloudInitError| {
            errors.invalid(path, format!("{error} (Secret key userData)"));
        };
        if windows && !cloud_init::cloudbase_init_runs(user_data.expose()) {
            self.warnings.push(format!(
                "{path}: the user data is neither a script nor cloud-config that cloudbase-init \
                 runs (WMCO's is a <powershell> script): the VM would boot without it; check the \
                 Secret's userData"
            ));
        }
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
        // The guest's own address goes in before the user data is encoded: its commands run
        // first (`crate::vm::guest_network`).
        let bytes = match address.map(|address| (address, with_guest_address(&bytes, address))) {
            None => bytes,
            Some((_, Ok(with_address))) => with_address,
            Some((address, Err(error))) => {
                self.guest_address_refused(address, &error);
                return None;
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
