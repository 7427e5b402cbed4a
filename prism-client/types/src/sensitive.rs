//! A string that must never be printed: user data, unattend.xml, passwords, API keys, cookies.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A secret string. It serialises as the plain string (Prism needs the value), but its `Debug` and `Display`
/// print only `<redacted>`, so a struct that holds one can be logged without leaking it.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Sensitive(String);

impl Sensitive {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret itself, for the one place that must send it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// True when the secret is the empty string.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<String> for Sensitive {
    fn from(value: String) -> Self {
        Self(value)
    }
}

impl From<&str> for Sensitive {
    fn from(value: &str) -> Self {
        Self(value.to_owned())
    }
}

impl fmt::Debug for Sensitive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl fmt::Display for Sensitive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_display_hide_the_value_but_serde_keeps_it() {
        let secret = Sensitive::new("hunter2");
        assert_eq!(format!("{secret:?}"), "<redacted>");
        assert_eq!(format!("{secret}"), "<redacted>");
        assert_eq!(serde_json::to_string(&secret).unwrap(), "\"hunter2\"");
        let back: Sensitive = serde_json::from_str("\"hunter2\"").unwrap();
        assert_eq!(back.expose(), "hunter2");
    }
}
