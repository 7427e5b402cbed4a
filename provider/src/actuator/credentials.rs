//! The credentials Secret (key `credentials`): a JSON array of `basic_auth` entries, of which
//! the first is used, as upstream does:
//!
//! ```json
//! [{"type": "basic_auth", "data": {"prismCentral": {"username": "u", "password": "p"}, "prismElements": null}}]
//! ```
//!
//! Errors name what is wrong and never repeat the Secret's content.

use std::hash::{DefaultHasher, Hash, Hasher};

use prism_client::quote::quoted;
use prism_client::{Credentials, Sensitive};
use serde::Deserialize;

pub use crate::api::CREDENTIALS_KEY;

/// Why the Secret's content cannot be used. Never contains the content.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CredentialsError {
    #[error("key {CREDENTIALS_KEY:?} is not a JSON array of credentials (at {path}: {reason})")]
    NotJson { path: String, reason: String },
    #[error("key {CREDENTIALS_KEY:?} holds an empty list")]
    Empty,
    #[error(
        "the first entry of key {CREDENTIALS_KEY:?} has type {:?}; only \"basic_auth\" is supported",
        quoted(.0)
    )]
    UnsupportedType(String),
    #[error(
        "the first entry of key {CREDENTIALS_KEY:?} has no data.prismCentral.username or password"
    )]
    Incomplete,
}

#[derive(Deserialize)]
struct Entry {
    #[serde(rename = "type", default)]
    type_: String,
    #[serde(default)]
    data: Option<EntryData>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct EntryData {
    #[serde(default)]
    prism_central: Option<BasicAuth>,
}

#[derive(Deserialize)]
struct BasicAuth {
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
}

/// Prism Central credentials read from the Secret, with a fingerprint that changes when they do.
#[derive(Clone, PartialEq, Eq)]
pub struct PrismCredentials {
    pub username: String,
    password: Sensitive,
}

impl std::fmt::Debug for PrismCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrismCredentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

impl PrismCredentials {
    pub fn new(username: impl Into<String>, password: impl Into<Sensitive>) -> Self {
        Self {
            username: username.into(),
            password: password.into(),
        }
    }

    /// Parses the Secret's `credentials` value.
    pub fn parse(bytes: &[u8]) -> Result<Self, CredentialsError> {
        let mut deserializer = serde_json::Deserializer::from_slice(bytes);
        let entries: Vec<Entry> =
            serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
                // serde_json's messages quote no input for type errors, but an "expected
                // value" message can carry a position only; the path is safe either way.
                let reason = match error.inner().classify() {
                    serde_json::error::Category::Syntax | serde_json::error::Category::Eof => {
                        "not valid JSON".to_owned()
                    }
                    _ => "unexpected shape".to_owned(),
                };
                CredentialsError::NotJson {
                    path: error.path().to_string(),
                    reason,
                }
            })?;
        let first = entries.into_iter().next().ok_or(CredentialsError::Empty)?;
        if first.type_ != "basic_auth" {
            return Err(CredentialsError::UnsupportedType(first.type_));
        }
        let auth = first
            .data
            .and_then(|d| d.prism_central)
            .filter(|a| !a.username.is_empty() && !a.password.is_empty())
            .ok_or(CredentialsError::Incomplete)?;
        Ok(Self::new(auth.username, auth.password))
    }

    /// The client credentials.
    pub fn to_client(&self) -> Credentials {
        Credentials::basic(self.username.clone(), self.password.clone())
    }

    /// A value that changes when the credentials change (so a rotated Secret gets a new client);
    /// not a secure digest, and never logged.
    pub fn fingerprint(&self) -> u64 {
        let mut hasher = DefaultHasher::new();
        self.username.hash(&mut hasher);
        self.password.expose().hash(&mut hasher);
        hasher.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_shape_parses() {
        let text = br#"[{"type":"basic_auth","data":{"prismCentral":{"username":"admin","password":"s3cret"},"prismElements":null}}]"#;
        let credentials = PrismCredentials::parse(text).unwrap();
        assert_eq!(credentials.username, "admin");
        assert_eq!(credentials.password.expose(), "s3cret");
        assert!(!format!("{credentials:?}").contains("s3cret"));
    }

    #[test]
    fn errors_never_repeat_the_content() {
        let cases: &[(&[u8], CredentialsError)] = &[
            (
                b"",
                CredentialsError::NotJson {
                    path: ".".into(),
                    reason: "not valid JSON".into(),
                },
            ),
            (
                b"{\"password\": \"s3cret\"}",
                CredentialsError::NotJson {
                    path: ".".into(),
                    reason: "unexpected shape".into(),
                },
            ),
            (b"[]", CredentialsError::Empty),
            (
                br#"[{"type":"api_key","data":{}}]"#,
                CredentialsError::UnsupportedType("api_key".into()),
            ),
            (
                br#"[{"type":"basic_auth","data":{"prismCentral":{"username":"admin"}}}]"#,
                CredentialsError::Incomplete,
            ),
            (br#"[{"type":"basic_auth"}]"#, CredentialsError::Incomplete),
        ];
        for (text, expected) in cases {
            let error = PrismCredentials::parse(text).unwrap_err();
            assert_eq!(&error, expected, "{}", String::from_utf8_lossy(text));
            assert!(!error.to_string().contains("s3cret"));
        }
    }

    #[test]
    fn fingerprints_follow_the_password() {
        let a = PrismCredentials::new("admin", "one");
        let b = PrismCredentials::new("admin", "two");
        assert_ne!(a.fingerprint(), b.fingerprint());
        assert_eq!(a.fingerprint(), a.clone().fingerprint());
    }
}
