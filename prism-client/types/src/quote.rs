//! Text from outside (Prism Central's answers, a Machine's fields, a CSR) put into a message with a
//! bounded length, so that one hostile value cannot fill a log line, an event or a Machine's
//! `status.errorMessage` with kilobytes.

use std::fmt;

/// Characters of a value from input (a name, a UUID, a type) quoted whole in a message. Longer than
/// every value that can be valid where this is used (a Kubernetes name is at most 253 characters,
/// a Prism entity name 80, a UUID 36), so a legitimate value is quoted whole.
pub const MAX_QUOTED_CHARS: usize = 256;

/// `text` for a message, cut to at most `max` characters on a character boundary.
///
/// `{}` writes the kept text, `{:?}` quotes and escapes it as a `str`'s `{:?}` does. A text that was
/// cut ends in `…` and is followed by its original length: `abcd… (5000 characters)`, or
/// `"abcd…" (5000 characters)` with `{:?}`. A text that fits is written as it is.
#[derive(Clone, Copy)]
pub struct Bounded<'a> {
    kept: &'a str,
    /// The original length in characters, when the text was cut.
    cut_from: Option<usize>,
}

/// See [`Bounded`].
pub fn bounded(text: &str, max: usize) -> Bounded<'_> {
    match text.char_indices().nth(max) {
        Some((cut, _)) => Bounded {
            kept: &text[..cut],
            cut_from: Some(text.chars().count()),
        },
        None => Bounded {
            kept: text,
            cut_from: None,
        },
    }
}

/// A value from input for a message: [`bounded`] to [`MAX_QUOTED_CHARS`]; use it with `{:?}`.
pub fn quoted(text: &str) -> Bounded<'_> {
    bounded(text, MAX_QUOTED_CHARS)
}

impl fmt::Display for Bounded<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kept)?;
        match self.cut_from {
            Some(length) => write!(f, "… ({length} characters)"),
            None => Ok(()),
        }
    }
}

impl fmt::Debug for Bounded<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.cut_from {
            Some(length) => write!(f, "{:?} ({length} characters)", format!("{}…", self.kept)),
            None => write!(f, "{:?}", self.kept),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_written_as_it_is() {
        assert_eq!(bounded("abc", 3).to_string(), "abc");
        assert_eq!(format!("{:?}", bounded("a\"b\nc", 10)), r#""a\"b\nc""#);
        assert_eq!(
            format!("{:?}", quoted("worker-1")),
            format!("{:?}", "worker-1")
        );
        assert_eq!(bounded("", 0).to_string(), "");
    }

    #[test]
    fn long_text_is_cut_on_a_character_boundary_with_its_length() {
        assert_eq!(bounded("abcdef", 4).to_string(), "abcd… (6 characters)");
        assert_eq!(
            format!("{:?}", bounded("abcdef", 4)),
            r#""abcd…" (6 characters)"#
        );
        // Multi-byte characters are never split: 'é' is two bytes, '🦀' four.
        let text = "é🦀é🦀é🦀";
        assert_eq!(bounded(text, 3).to_string(), "é🦀é… (6 characters)");
        assert_eq!(bounded(text, 0).to_string(), "… (6 characters)");
    }

    #[test]
    fn a_huge_value_gives_a_short_message() {
        let hostile = "ab".repeat(100_000);
        let shown = format!("{:?}", quoted(&hostile));
        assert!(
            shown.chars().count() < MAX_QUOTED_CHARS + 30,
            "{}",
            shown.len()
        );
        assert!(shown.ends_with("(200000 characters)"), "{shown}");
        let name = "n".repeat(253);
        assert_eq!(
            format!("{:?}", quoted(&name)),
            format!("{name:?}"),
            "a valid Kubernetes name is quoted whole"
        );
    }
}
