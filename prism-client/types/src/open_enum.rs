//! String enumerations that keep values they do not know.
//!
//! Prism adds enum values between releases, and a strict enum would make a whole response
//! undecodable; a Machine's `providerSpec` is a RawExtension, whose enums the API server never
//! checks, and an unknown value there must reach validation with its field path rather than
//! fail the whole providerSpec with one serde message. So every such enumeration has a fallback
//! variant that keeps the unknown value and writes it back unchanged. One macro serves Prism's
//! types here and the provider's API types (`nutanix-machine-plan`), each naming its fallback.

/// Declares an enum of wire strings with a fallback variant holding any other value (`Other`
/// unless named after `else`), plus `as_str`, `KNOWN`, `is_known`, `Display`, `From<&str>` and
/// string (de)serialisation. The invoking crate depends on `serde`.
#[macro_export]
macro_rules! open_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $wire:literal ),+ $(,)?
        }
    ) => {
        $crate::open_enum! {
            $(#[$meta])*
            $vis enum $name else Other {
                $( $(#[$vmeta])* $variant = $wire, )+
            }
        }
    };
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident else $fallback:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $wire:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant, )+
            /// A value this version does not know, kept as it came.
            $fallback(String),
        }

        impl $name {
            /// Every value this version knows, as written on the wire.
            pub const KNOWN: &'static [&'static str] = &[$($wire),+];

            /// The value as written on the wire.
            pub fn as_str(&self) -> &str {
                match self {
                    $( Self::$variant => $wire, )+
                    Self::$fallback(value) => value.as_str(),
                }
            }

            /// Whether this is a value this version knows.
            pub fn is_known(&self) -> bool {
                !matches!(self, Self::$fallback(_))
            }
        }

        impl From<&str> for $name {
            fn from(value: &str) -> Self {
                match value {
                    $( $wire => Self::$variant, )+
                    other => Self::$fallback(other.to_owned()),
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
                let value = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
                Ok(Self::from(value.as_ref()))
            }
        }
    };
}
