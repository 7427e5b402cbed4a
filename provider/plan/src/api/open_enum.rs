//! String enums that keep values they do not know.
//!
//! `providerSpec` is a RawExtension, so the apiserver never checks its enums. Parsing an unknown
//! value into an error would fail the whole providerSpec with one serde message; keeping it as
//! `Unknown(String)` lets validation report it with its field path next to every other problem,
//! and writes it back unchanged.

/// Declares a string enum with an `Unknown(String)` fallback, serialised as its text.
macro_rules! open_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant, )+
            /// A value this version does not know, kept as written.
            Unknown(String),
        }

        impl $name {
            /// Every value this version knows, as written in YAML.
            pub const KNOWN: &'static [&'static str] = &[$($text),+];

            /// The value as written in YAML.
            pub fn as_str(&self) -> &str {
                match self {
                    $( Self::$variant => $text, )+
                    Self::Unknown(text) => text,
                }
            }

            /// Whether this is a value this version knows.
            pub fn is_known(&self) -> bool {
                !matches!(self, Self::Unknown(_))
            }
        }

        impl From<&str> for $name {
            fn from(text: &str) -> Self {
                match text {
                    $( $text => Self::$variant, )+
                    other => Self::Unknown(other.to_owned()),
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
                Ok(Self::from(text.as_ref()))
            }
        }
    };
}

pub(crate) use open_enum;
