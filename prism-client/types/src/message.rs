//! The messages Prism returns with an error or a failed task, as one shape for both APIs, kept
//! to a bounded length.

use std::fmt;

use crate::quote::bounded;

/// Longest Prism message kept in an error (a schema error may echo part of a request body).
pub(crate) const MAX_MESSAGE_CHARS: usize = 300;
/// Prism messages kept per error.
const MAX_MESSAGES: usize = 5;

/// One message Prism returned: `message_list[]` of a v3 error body or task, `error[]` of a v4 error body,
/// `errorMessages[]` of a v4 task. Decide on `reason`, `code` or `error_group`, never on `message`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PrismMessage {
    /// `reason` (v3), e.g. `ENTITY_NOT_FOUND`, `CONCURRENT_REQUESTS_NOT_ALLOWED`, `INVALID_REQUEST`. For a v4
    /// message, its `errorGroup`, else its `code`, so that one check covers both APIs.
    pub reason: Option<String>,
    /// `code` (v4), namespaced: e.g. `VMM-30100` (`errorGroup` `VM_NOT_FOUND`), `VMM-30303` (ETag mismatch).
    pub code: Option<String>,
    /// `errorGroup` (v4), e.g. `VM_NOT_FOUND`, `ENTITY_NOT_FOUND`, `RATE_LIMIT_EXCEEDED`.
    pub error_group: Option<String>,
    pub message: Option<String>,
    /// `details` (v3) as compact JSON.
    pub details: Option<String>,
}

impl PrismMessage {
    /// A v4 `AppMessage`.
    pub fn from_v4(message: &crate::v4::AppMessage) -> Self {
        Self {
            reason: message.error_group.clone().or_else(|| message.code.clone()),
            code: message.code.clone(),
            error_group: message.error_group.clone(),
            message: message.message.clone(),
            details: None,
        }
    }

    /// A v3 `message_list[]` entry.
    pub fn from_v3(message: &crate::v3::Message) -> Self {
        Self {
            reason: message.reason.clone(),
            message: message.message.clone(),
            details: message
                .details
                .as_ref()
                .filter(|details| !details.is_null())
                .map(ToString::to_string),
            ..Self::default()
        }
    }
}

impl fmt::Display for PrismMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(reason) = &self.reason {
            parts.push(reason.clone());
        }
        if let Some(message) = &self.message {
            parts.push(message.clone());
        }
        let mut text = parts.join(": ");
        if let Some(details) = &self.details {
            text.push_str(&format!(" ({details})"));
        }
        if let Some(code) = self
            .code
            .as_ref()
            .filter(|code| self.reason.as_ref() != Some(*code))
        {
            text.push_str(&format!(" (code {code})"));
        }
        write!(f, "{}", bounded(&text, MAX_MESSAGE_CHARS))
    }
}

/// The messages of an error response.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PrismMessages(pub Vec<PrismMessage>);

impl PrismMessages {
    /// True when one of the messages has this reason (e.g. `ENTITY_NOT_FOUND`).
    pub fn has_reason(&self, reason: &str) -> bool {
        self.0
            .iter()
            .any(|message| message.reason.as_deref() == Some(reason))
    }

    /// True when one of the messages has this v4 code (e.g. `VMM-30100`).
    pub fn has_code(&self, code: &str) -> bool {
        self.0
            .iter()
            .any(|message| message.code.as_deref() == Some(code))
    }

    /// True when one of the messages has this v4 error group (e.g. `VM_NOT_FOUND`).
    pub fn has_error_group(&self, error_group: &str) -> bool {
        self.0
            .iter()
            .any(|message| message.error_group.as_deref() == Some(error_group))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for PrismMessages {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("no message");
        }
        let shown: Vec<String> = self
            .0
            .iter()
            .take(MAX_MESSAGES)
            .map(ToString::to_string)
            .collect();
        f.write_str(&shown.join("; "))?;
        if self.0.len() > MAX_MESSAGES {
            write!(f, "; and {} more", self.0.len() - MAX_MESSAGES)?;
        }
        Ok(())
    }
}
