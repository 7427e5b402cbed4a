//! Validation errors: each names its field and says whether retrying can help.

use std::fmt;

/// Whether a problem is permanent or may go away without a change to the Machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorClass {
    /// The Machine itself is wrong, or contradicts something Prism reported: the Machine fails
    /// with reason `InvalidConfiguration`.
    Invalid,
    /// Something looked up in Prism is missing, ambiguous, not looked up yet, or has no free
    /// capacity now: retry later.
    Unresolved,
}

impl fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Invalid => "invalid",
            Self::Unresolved => "unresolved",
        })
    }
}

/// One problem with a Machine, at a field path such as
/// `providerSpec.dataDisks[1].deviceProperties.adapterType`.
///
/// Messages never contain secret values (user data, passwords).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    pub path: String,
    pub class: ErrorClass,
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} ({})", self.path, self.message, self.class)
    }
}

/// Every problem found in one Machine; never empty when returned as an error.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ValidationErrors(pub Vec<FieldError>);

impl ValidationErrors {
    /// `Invalid` when any error is permanent, otherwise `Unresolved`: one permanent problem fails
    /// the Machine however many lookups are pending.
    pub fn class(&self) -> ErrorClass {
        if self.0.iter().any(|e| e.class == ErrorClass::Invalid) {
            ErrorClass::Invalid
        } else {
            ErrorClass::Unresolved
        }
    }

    /// Only the errors of `class`, if there are any.
    pub fn of_class(self, class: ErrorClass) -> Option<Self> {
        let kept: Vec<FieldError> = self.0.into_iter().filter(|e| e.class == class).collect();
        (!kept.is_empty()).then_some(Self(kept))
    }

    /// The errors, one per line, for `status.errorMessage`, events and stderr.
    pub fn lines(&self) -> impl Iterator<Item = String> + '_ {
        self.0.iter().map(ToString::to_string)
    }
}

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, error) in self.0.iter().enumerate() {
            if index > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

/// A field path under construction (`providerSpec` / `dataDisks` / `[1]` ...).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Path(String);

impl Path {
    pub(crate) fn root(name: &str) -> Self {
        Self(name.to_owned())
    }

    pub(crate) fn field(&self, name: &str) -> Self {
        Self(format!("{}.{name}", self.0))
    }

    pub(crate) fn index(&self, index: usize) -> Self {
        Self(format!("{}[{index}]", self.0))
    }

    /// A map entry whose key may hold dots and slashes (`metadata.annotations[a.b/c]`).
    pub(crate) fn key(&self, key: &str) -> Self {
        Self(format!("{}[{key}]", self.0))
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Collects errors while validation walks the spec.
#[derive(Debug, Default)]
pub(crate) struct Collector(Vec<FieldError>);

impl Collector {
    pub(crate) fn invalid(&mut self, path: &Path, message: impl Into<String>) {
        self.push(path, ErrorClass::Invalid, message);
    }

    pub(crate) fn unresolved(&mut self, path: &Path, message: impl Into<String>) {
        self.push(path, ErrorClass::Unresolved, message);
    }

    pub(crate) fn push(&mut self, path: &Path, class: ErrorClass, message: impl Into<String>) {
        self.0.push(FieldError {
            path: path.to_string(),
            class,
            message: message.into(),
        });
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn into_errors(self) -> ValidationErrors {
        ValidationErrors(self.0)
    }
}
