//! The credentials Secret (key `credentials`): a JSON array of entries, of which the first is
//! used, as upstream does: a user and password,
//!
//! ```json
//! [{"type": "basic_auth", "data": {"prismCentral": {"username": "u", "password": "p"}, "prismElements": null}}]
//! ```
//!
//! or a Prism Central service account's API key, sent as `X-Ntnx-Api-Key`:
//!
//! ```json
//! [{"type": "api_key", "data": {"prismCentral": {"apiKey": "k"}}}]
//! ```
//!
//! Both shapes, and "the first entry only", are prism-go-client's (`environment/credentials`
//! `ParseCredentials` and its tests), which the Go provider and CAPX read their Secrets with; its
//! v3 and v4 clients send an API key in the `X-ntnx-api-key` header (`internal/client.go`,
//! `v4/v4.go`).
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
        "the first entry of key {CREDENTIALS_KEY:?} has type {:?}; \"basic_auth\" or \"api_key\" is supported",
        quoted(.0)
    )]
    UnsupportedType(String),
    #[error(
        "the first entry of key {CREDENTIALS_KEY:?} has no data.prismCentral.username or password"
    )]
    Incomplete,
    #[error("the first entry of key {CREDENTIALS_KEY:?} has no data.prismCentral.apiKey")]
    NoApiKey,
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

/// `data.prismCentral` of either type.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BasicAuth {
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
    #[serde(default)]
    api_key: String,
}

/// Prism Central credentials read from the Secret, with a fingerprint that changes when they do.
#[derive(Clone, PartialEq, Eq)]
pub enum PrismCredentials {
    Basic {
        username: String,
        password: Sensitive,
    },
    /// A service account's API key (IAM).
    ApiKey(Sensitive),
}

impl std::fmt::Debug for PrismCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Basic { username, .. } => f
                .debug_struct("PrismCredentials")
                .field("username", username)
                .field("password", &"<redacted>")
                .finish(),
            Self::ApiKey(_) => f
                .debug_struct("PrismCredentials")
                .field("api_key", &"<redacted>")
                .finish(),
        }
    }
}

impl PrismCredentials {
    pub fn new(username: impl Into<String>, password: impl Into<Sensitive>) -> Self {
        Self::Basic {
            username: username.into(),
            password: password.into(),
        }
    }

    /// Who the credentials are, for logs: the user name, or that an API key is used.
    pub fn user(&self) -> &str {
        match self {
            Self::Basic { username, .. } => username,
            Self::ApiKey(_) => "(API key)",
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
        let prism_central = first.data.and_then(|d| d.prism_central);
        match first.type_.as_str() {
            "basic_auth" => {
                let auth = prism_central
                    .filter(|a| !a.username.is_empty() && !a.password.is_empty())
                    .ok_or(CredentialsError::Incomplete)?;
                Ok(Self::new(auth.username, auth.password))
            }
            "api_key" => {
                let auth = prism_central
                    .filter(|a| !a.api_key.is_empty())
                    .ok_or(CredentialsError::NoApiKey)?;
                Ok(Self::ApiKey(auth.api_key.into()))
            }
            _ => Err(CredentialsError::UnsupportedType(first.type_)),
        }
    }

    /// The client credentials.
    pub fn to_client(&self) -> Credentials {
        match self {
            Self::Basic { username, password } => {
                Credentials::basic(username.clone(), password.clone())
            }
            Self::ApiKey(key) => Credentials::api_key(key.clone()),
        }
    }

    /// A value that changes when the credentials change (so a rotated Secret gets a new client);
    /// not a secure digest, and never logged.
    pub fn fingerprint(&self) -> u64 {
        let mut hasher = DefaultHasher::new();
        match self {
            Self::Basic { username, password } => {
                username.hash(&mut hasher);
                password.expose().hash(&mut hasher);
            }
            Self::ApiKey(key) => {
                "api_key".hash(&mut hasher);
                key.expose().hash(&mut hasher);
            }
        }
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
        assert_eq!(credentials, PrismCredentials::new("admin", "s3cret"));
        assert_eq!(credentials.user(), "admin");
        assert!(!format!("{credentials:?}").contains("s3cret"));
    }

    #[test]
    fn an_api_key_parses_as_prism_go_client_reads_it() {
        // prism-go-client environment/credentials/parsecreds_test.go, "api key success".
        let text = br#"[{"type":"api_key","data":{"prismCentral":{"apiKey":"test-api-key"}}}]"#;
        let credentials = PrismCredentials::parse(text).unwrap();
        assert_eq!(credentials, PrismCredentials::ApiKey("test-api-key".into()));
        assert!(!format!("{credentials:?}").contains("test-api-key"));
        assert_eq!(credentials.user(), "(API key)");
        assert_ne!(
            credentials.fingerprint(),
            PrismCredentials::ApiKey("other".into()).fingerprint()
        );
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
                CredentialsError::NoApiKey,
            ),
            (
                br#"[{"type":"api_key","data":{"prismCentral":{"apiKey":""}}}]"#,
                CredentialsError::NoApiKey,
            ),
            (
                br#"[{"type":"session","data":{}}]"#,
                CredentialsError::UnsupportedType("session".into()),
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
