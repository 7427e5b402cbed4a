//! Secret inputs of the plan: user data and the Windows Administrator password.
//!
//! Neither type implements `Display` or `Serialize`, and their `Debug` shows only a length, so a
//! plan can be logged without leaking them. Errors about them never quote the value.

use std::fmt;

/// The bytes of the user-data Secret (key `userData`).
#[derive(Clone, PartialEq, Eq)]
pub struct UserData(Vec<u8>);

impl UserData {
    pub fn new(bytes: impl Into<Vec<u8>>) -> Self {
        Self(bytes.into())
    }

    /// The bytes, for the one place that must put them into a request.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for UserData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UserData(<{} bytes redacted>)", self.0.len())
    }
}

/// The value of one key of a Secret, as read; `Debug` shows only its length.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretValue(Vec<u8>);

impl SecretValue {
    pub fn new(bytes: impl Into<Vec<u8>>) -> Self {
        Self(bytes.into())
    }

    pub fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretValue(<{} bytes redacted>)", self.0.len())
    }
}

/// Key of the user data in its Secret.
pub const USER_DATA_KEY: &str = "userData";
/// Key of the Administrator password in its Secret (`guestCustomization.adminPasswordSecret`,
/// or the one generated).
pub const ADMIN_PASSWORD_KEY: &str = "password";

/// The Windows Administrator password set through Sysprep.
#[derive(Clone, PartialEq, Eq)]
pub struct AdminPassword(String);

/// Why a password cannot be used. Never contains the password.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AdminPasswordError {
    #[error("the Administrator password is empty")]
    Empty,
    #[error(
        "the Administrator password is {length} characters long; Windows accepts at most {max}"
    )]
    TooLong { length: usize, max: usize },
    #[error("the Administrator password contains a control character")]
    ControlCharacter,
    #[error("the Administrator password is not UTF-8")]
    NotUtf8,
}

/// Character classes of generated passwords; one of each satisfies Windows' complexity rule.
const UPPER: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZ";
const LOWER: &[u8] = b"abcdefghijkmnopqrstuvwxyz";
const DIGITS: &[u8] = b"23456789";
const SYMBOLS: &[u8] = b"!#%+-.:=?@_~";

/// The Secret that keeps the Administrator password generated for a Machine's VM (Sysprep
/// without `adminPasswordSecret`), so that every attempt to create the VM (a resend with the same
/// UUID or `NTNX-Request-Id` must carry the same body) and a restarted controller use the same
/// password, and an administrator can read it. Owned by the Machine: deleted with it.
pub fn generated_password_secret(machine_name: &str) -> String {
    format!("{machine_name}{GENERATED_PASSWORD_SUFFIX}")
}

/// What [`generated_password_secret`] appends to the Machine's name; the admission policy that
/// limits the Secrets the controller may create (`manifests/rbac/admission/`) allows this name
/// only.
pub const GENERATED_PASSWORD_SUFFIX: &str = "-admin-password";

/// Random bytes [`AdminPassword::from_random_bytes`] needs: two per character.
pub const PASSWORD_RANDOM_BYTES: usize = 2 * GENERATED_PASSWORD_LENGTH;
const GENERATED_PASSWORD_LENGTH: usize = 20;

impl AdminPassword {
    /// Longest password Windows accepts in the user interface and in unattend files.
    pub const MAX_LENGTH: usize = 127;

    /// A password given by the user (a Secret).
    pub fn new(password: impl Into<String>) -> Result<Self, AdminPasswordError> {
        let password = password.into();
        let length = password.chars().count();
        if length == 0 {
            return Err(AdminPasswordError::Empty);
        }
        if length > Self::MAX_LENGTH {
            return Err(AdminPasswordError::TooLong {
                length,
                max: Self::MAX_LENGTH,
            });
        }
        if password.chars().any(char::is_control) {
            return Err(AdminPasswordError::ControlCharacter);
        }
        Ok(Self(password))
    }

    /// The password a Secret's key holds: UTF-8, one trailing newline dropped (`echo` into a
    /// file).
    pub fn from_secret(value: &SecretValue) -> Result<Self, AdminPasswordError> {
        let text = std::str::from_utf8(value.expose()).map_err(|_| AdminPasswordError::NotUtf8)?;
        Self::new(text.strip_suffix('\n').unwrap_or(text))
    }

    /// A 20-character password drawn from `random` (which the caller takes from a CSPRNG), with
    /// at least one upper-case letter, lower-case letter, digit and symbol. Kept pure so that the
    /// choice of characters is testable; look-alike characters (I, l, O, 0, 1) are left out.
    pub fn from_random_bytes(random: &[u8; PASSWORD_RANDOM_BYTES]) -> Self {
        let all: Vec<u8> = [UPPER, LOWER, DIGITS, SYMBOLS].concat();
        let password = random
            .chunks_exact(2)
            .enumerate()
            .map(|(position, pair)| {
                let class = match position {
                    0 => UPPER,
                    1 => LOWER,
                    2 => DIGITS,
                    3 => SYMBOLS,
                    _ => &all,
                };
                let draw = usize::from(u16::from_le_bytes([pair[0], pair[1]]));
                char::from(class[draw % class.len()])
            })
            .collect();
        Self(password)
    }

    /// The password, for the two places that must write it: the unattend.xml and the Secret
    /// that keeps a generated one.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for AdminPassword {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AdminPassword(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_secret() {
        let password = AdminPassword::new("Sup3r-Secret!").unwrap();
        assert_eq!(format!("{password:?}"), "AdminPassword(<redacted>)");
        let user_data = UserData::new(b"<powershell>secret</powershell>".to_vec());
        assert_eq!(format!("{user_data:?}"), "UserData(<31 bytes redacted>)");
    }

    #[test]
    fn given_passwords_are_checked_without_quoting_them() {
        assert_eq!(AdminPassword::new(""), Err(AdminPasswordError::Empty));
        let long = "x".repeat(128);
        let error = AdminPassword::new(long.clone()).unwrap_err();
        assert!(!error.to_string().contains(&long));
        assert_eq!(
            error,
            AdminPasswordError::TooLong {
                length: 128,
                max: 127
            }
        );
        assert_eq!(
            AdminPassword::new("tab\there"),
            Err(AdminPasswordError::ControlCharacter)
        );
        assert!(AdminPassword::new("x".repeat(127)).is_ok());
    }

    #[test]
    fn generated_passwords_meet_windows_complexity() {
        for seed in 0u8..=255 {
            let random: [u8; PASSWORD_RANDOM_BYTES] = std::array::from_fn(|i| {
                seed.wrapping_mul(31)
                    .wrapping_add((i as u8).wrapping_mul(17))
            });
            let password = AdminPassword::from_random_bytes(&random);
            let text = password.expose();
            assert_eq!(text.len(), 20);
            assert!(text.bytes().any(|b| UPPER.contains(&b)), "{text}");
            assert!(text.bytes().any(|b| LOWER.contains(&b)), "{text}");
            assert!(text.bytes().any(|b| DIGITS.contains(&b)), "{text}");
            assert!(text.bytes().any(|b| SYMBOLS.contains(&b)), "{text}");
            assert!(AdminPassword::new(text).is_ok());
        }
    }

    #[test]
    fn different_random_bytes_give_different_passwords() {
        let a = AdminPassword::from_random_bytes(&[0; PASSWORD_RANDOM_BYTES]);
        let mut other = [0; PASSWORD_RANDOM_BYTES];
        other[39] = 1;
        let b = AdminPassword::from_random_bytes(&other);
        assert_ne!(a.expose(), b.expose());
    }
}
