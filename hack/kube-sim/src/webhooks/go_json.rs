//! A JSON value read into a Go struct and written back, as a webhook written in Go does with
//! `sigs.k8s.io/yaml.Unmarshal` then `encoding/json.Marshal`.
//!
//! Reading (sigs.k8s.io/yaml `yaml.go`, `Unmarshal` → `convertToJSONableObject`, then Go's
//! `encoding/json` decoder):
//! - keys match struct fields exactly, else case-insensitively (ASCII here); keys are seen in
//!   sorted order (the YAML step re-encodes a Go map), so the last matching key wins;
//! - unknown keys are dropped;
//! - a number or boolean given for a string field becomes its text (`FormatInt`, or
//!   `FormatFloat(v, 'g', -1, 32)`, or `true`/`false`);
//! - a number given for an integer field must be whole (the YAML step writes a float such as
//!   `4.0` as `4`) and fit the type;
//! - `null` clears a pointer, slice or map and leaves anything else as it was;
//! - anything else of the wrong JSON type is an error (`json: cannot unmarshal ...`).
//!
//! Writing (`encoding/json`): fields in declaration order; `omitempty` drops `""`, `0`, nil
//! pointers and empty slices and maps, never a struct; `omitzero` drops a zero `metav1.Time`; a
//! nil slice or map without `omitempty` is `null`; map keys sorted; `metav1.Time` as RFC 3339 in
//! UTC with seconds (apimachinery `pkg/apis/meta/v1/time.go`, `MarshalJSON`).

use std::collections::BTreeMap;

use k8s_semantics::quantity::{Quantity, QuantityError};
use serde_json::{Map, Number, Value};

/// A Go type, as far as its JSON form goes.
#[derive(Debug)]
pub enum GoType {
    /// `string` or a named string type (`NutanixBootType`); the name is for error messages.
    String(&'static str),
    Int32,
    Int64,
    /// `resource.Quantity`.
    Quantity,
    /// `metav1.Time`.
    Time,
    Struct(&'static GoStruct),
    Pointer(&'static GoType),
    Slice(&'static GoType),
    /// `map[string]string`.
    StringMap,
    /// Kept as written: a part this simulation does not model (each use says why).
    Raw,
}

/// A Go struct: its name (for error messages) and its JSON fields in declaration order.
#[derive(Debug)]
pub struct GoStruct {
    pub name: &'static str,
    pub fields: &'static [GoField],
}

/// One JSON field of a struct (fields of an embedded `json:",inline"` struct are listed in its
/// place).
#[derive(Debug)]
pub struct GoField {
    pub json: &'static str,
    pub ty: GoType,
    pub omit: Omit,
}

/// The field's `omitempty`/`omitzero` option.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Omit {
    Never,
    Empty,
    Zero,
}

/// A value of a [`GoType`].
#[derive(Clone, Debug, PartialEq)]
pub enum GoValue {
    String(String),
    Int(i64),
    Quantity(Quantity),
    Time(Option<jiff::Timestamp>),
    Struct(Vec<GoValue>),
    Pointer(Option<Box<GoValue>>),
    Slice(Option<Vec<GoValue>>),
    StringMap(Option<BTreeMap<String, String>>),
    Raw(Option<Value>),
}

/// Why a value could not be read, in Go's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// `json.UnmarshalTypeError`.
    #[error("json: cannot unmarshal {value} into Go struct field {root}.{field} of type {type_}")]
    Type {
        value: String,
        root: &'static str,
        field: String,
        type_: String,
    },
    /// A value whose own unmarshaller failed (`resource.Quantity`, `metav1.Time`).
    #[error("{0}")]
    Quantity(#[from] QuantityError),
    #[error("parsing time {0:?}: not an RFC 3339 time")]
    Time(String),
}

impl GoType {
    /// The zero value.
    pub fn zero(&self) -> GoValue {
        match self {
            Self::String(_) => GoValue::String(String::new()),
            Self::Int32 | Self::Int64 => GoValue::Int(0),
            Self::Quantity => GoValue::Quantity(Quantity::zero()),
            Self::Time => GoValue::Time(None),
            Self::Struct(s) => GoValue::Struct(s.fields.iter().map(|f| f.ty.zero()).collect()),
            Self::Pointer(_) => GoValue::Pointer(None),
            Self::Slice(_) => GoValue::Slice(None),
            Self::StringMap => GoValue::StringMap(None),
            Self::Raw => GoValue::Raw(None),
        }
    }

    fn go_name(&self) -> String {
        match self {
            Self::String(name) => (*name).to_owned(),
            Self::Int32 => "int32".to_owned(),
            Self::Int64 => "int64".to_owned(),
            Self::Quantity => "resource.Quantity".to_owned(),
            Self::Time => "v1.Time".to_owned(),
            Self::Struct(s) => s.name.to_owned(),
            Self::Pointer(inner) => format!("*{}", inner.go_name()),
            Self::Slice(inner) => format!("[]{}", inner.go_name()),
            Self::StringMap => "map[string]string".to_owned(),
            Self::Raw => "interface {}".to_owned(),
        }
    }
}

fn kind_of(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(_) => "bool".to_owned(),
        Value::Number(n) => format!("number {n}"),
        Value::String(_) => "string".to_owned(),
        Value::Array(_) => "array".to_owned(),
        Value::Object(_) => "object".to_owned(),
    }
}

/// Where the decoder is, for its error messages.
struct Cursor {
    root: &'static str,
    path: Vec<String>,
}

impl Cursor {
    fn error(&self, value: &Value, ty: &GoType) -> DecodeError {
        let value = match value {
            Value::Number(_) => "number".to_owned(),
            other => kind_of(other),
        };
        DecodeError::Type {
            value,
            root: self.root,
            field: self.path.join("."),
            type_: ty.go_name(),
        }
    }
}

/// Reads `input` into a fresh value of the struct `root`.
pub fn decode(root: &'static GoStruct, input: &Value) -> Result<GoValue, DecodeError> {
    let ty = GoType::Struct(root);
    let mut value = ty.zero();
    let mut cursor = Cursor {
        root: root.name,
        path: Vec::new(),
    };
    decode_into(&mut value, &ty, input, &mut cursor)?;
    Ok(value)
}

fn decode_into(
    target: &mut GoValue,
    ty: &GoType,
    input: &Value,
    cursor: &mut Cursor,
) -> Result<(), DecodeError> {
    if input.is_null() {
        match target {
            GoValue::Pointer(p) => *p = None,
            GoValue::Slice(s) => *s = None,
            GoValue::StringMap(m) => *m = None,
            GoValue::Quantity(q) => *q = Quantity::zero(),
            GoValue::Time(t) => *t = None,
            GoValue::Raw(r) => *r = None,
            GoValue::String(_) | GoValue::Int(_) | GoValue::Struct(_) => {}
        }
        return Ok(());
    }
    match (ty, target) {
        (GoType::String(_), GoValue::String(text)) => {
            *text = as_go_string(input).ok_or_else(|| cursor.error(input, ty))?;
        }
        (GoType::Int32 | GoType::Int64, GoValue::Int(number)) => {
            let whole = match input {
                Value::Number(n) => whole_number(n),
                _ => None,
            };
            let Some(whole) = whole else {
                return Err(match input {
                    Value::Number(n) => DecodeError::Type {
                        value: format!("number {n}"),
                        root: cursor.root,
                        field: cursor.path.join("."),
                        type_: ty.go_name(),
                    },
                    _ => cursor.error(input, ty),
                });
            };
            let fits = match ty {
                GoType::Int32 => i32::try_from(whole).is_ok(),
                _ => i64::try_from(whole).is_ok(),
            };
            if !fits {
                return Err(DecodeError::Type {
                    value: format!("number {whole}"),
                    root: cursor.root,
                    field: cursor.path.join("."),
                    type_: ty.go_name(),
                });
            }
            *number = whole as i64;
        }
        (GoType::Quantity, GoValue::Quantity(quantity)) => {
            // Quantity.UnmarshalJSON: quotes stripped, spaces trimmed, then ParseQuantity; any
            // other JSON gets parsed as the text it is, and fails.
            let text = match input {
                Value::String(s) => s.trim().to_owned(),
                Value::Number(n) => go_number_text(n),
                other => other.to_string(),
            };
            *quantity = Quantity::parse(&text)?;
        }
        (GoType::Time, GoValue::Time(time)) => {
            let Value::String(text) = input else {
                return Err(DecodeError::Time(input.to_string()));
            };
            *time = Some(
                text.parse::<jiff::Timestamp>()
                    .map_err(|_| DecodeError::Time(text.clone()))?,
            );
        }
        (GoType::Struct(shape), GoValue::Struct(fields)) => {
            let Value::Object(entries) = input else {
                return Err(cursor.error(input, ty));
            };
            let sorted: BTreeMap<&String, &Value> = entries.iter().collect();
            for (key, value) in sorted {
                let index = shape
                    .fields
                    .iter()
                    .position(|f| f.json == key.as_str())
                    .or_else(|| {
                        shape
                            .fields
                            .iter()
                            .position(|f| f.json.eq_ignore_ascii_case(key))
                    });
                let Some(index) = index else {
                    continue;
                };
                let field = &shape.fields[index];
                cursor.path.push(field.json.to_owned());
                let result = decode_into(&mut fields[index], &field.ty, value, cursor);
                cursor.path.pop();
                result?;
            }
        }
        (GoType::Pointer(inner), GoValue::Pointer(pointer)) => {
            let slot = pointer.get_or_insert_with(|| Box::new(inner.zero()));
            decode_into(slot, inner, input, cursor)?;
        }
        (GoType::Slice(inner), GoValue::Slice(slice)) => {
            let Value::Array(items) = input else {
                return Err(cursor.error(input, ty));
            };
            let mut decoded = Vec::with_capacity(items.len());
            for item in items {
                let mut element = inner.zero();
                decode_into(&mut element, inner, item, cursor)?;
                decoded.push(element);
            }
            *slice = Some(decoded);
        }
        (GoType::StringMap, GoValue::StringMap(map)) => {
            let Value::Object(entries) = input else {
                return Err(cursor.error(input, ty));
            };
            let map = map.get_or_insert_with(BTreeMap::new);
            for (key, value) in entries {
                if value.is_null() {
                    continue;
                }
                let text = as_go_string(value)
                    .ok_or_else(|| cursor.error(value, &GoType::String("string")))?;
                map.insert(key.clone(), text);
            }
        }
        (GoType::Raw, GoValue::Raw(raw)) => *raw = Some(input.clone()),
        (_, target) => *target = ty.zero(),
    }
    Ok(())
}

/// The text a string field gets from a JSON scalar (the YAML step's coercion), or `None`.
fn as_go_string(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Bool(flag) => Some(flag.to_string()),
        Value::Number(number) => Some(match whole_number(number) {
            Some(whole) if number.is_i64() || number.is_u64() => whole.to_string(),
            _ => format_g32(number.as_f64().unwrap_or_default()),
        }),
        Value::Null | Value::Array(_) | Value::Object(_) => None,
    }
}

/// A JSON number as a whole number, as Go sees it after the YAML step: integers as they are,
/// floats when whole and below 1e21 (below which Go writes them without an exponent).
fn whole_number(number: &Number) -> Option<i128> {
    if let Some(value) = number.as_i64() {
        return Some(i128::from(value));
    }
    if let Some(value) = number.as_u64() {
        return Some(i128::from(value));
    }
    let value = number.as_f64()?;
    (value.fract() == 0.0 && value.abs() < 1e21).then_some(value as i128)
}

/// The text of a number as Go's JSON encoder writes a float64 (what `Quantity.UnmarshalJSON` is
/// given after the YAML step).
fn go_number_text(number: &Number) -> String {
    if let Some(whole) = whole_number(number) {
        return whole.to_string();
    }
    let value = number.as_f64().unwrap_or_default();
    if value.abs() >= 1e21 || value.abs() < 1e-6 {
        let text = format!("{value:e}");
        match text.split_once('e') {
            Some((mantissa, exponent)) if !exponent.starts_with('-') => {
                format!("{mantissa}e+{exponent}")
            }
            _ => text,
        }
    } else {
        value.to_string()
    }
}

/// `strconv.FormatFloat(v, 'g', -1, 32)`: the shortest float32 digits, exponent form when the
/// exponent is below -4 or at least 6 (two-digit exponent at least).
fn format_g32(value: f64) -> String {
    let single = value as f32;
    let scientific = format!("{single:e}");
    let Some((digits, exponent)) = scientific.split_once('e') else {
        return scientific;
    };
    let exponent: i32 = exponent.parse().unwrap_or_default();
    if !(-4..6).contains(&exponent) {
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{digits}e{sign}{:02}", exponent.abs())
    } else {
        single.to_string()
    }
}

/// Writes `value` as Go's `json.Marshal` does.
pub fn encode(value: &GoValue, ty: &GoType) -> Value {
    match (value, ty) {
        (GoValue::String(text), _) => Value::String(text.clone()),
        (GoValue::Int(number), _) => Value::from(*number),
        (GoValue::Quantity(quantity), _) => Value::String(quantity.to_go_string()),
        (GoValue::Time(None), _) => Value::Null,
        (GoValue::Time(Some(time)), _) => {
            Value::String(time.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        }
        (GoValue::Struct(fields), GoType::Struct(shape)) => {
            let mut out = Map::new();
            for (field, value) in shape.fields.iter().zip(fields) {
                if omitted(field, value) {
                    continue;
                }
                out.insert(field.json.to_owned(), encode(value, &field.ty));
            }
            Value::Object(out)
        }
        (GoValue::Pointer(None), _) => Value::Null,
        (GoValue::Pointer(Some(inner)), GoType::Pointer(inner_ty)) => encode(inner, inner_ty),
        (GoValue::Slice(None), _) => Value::Null,
        (GoValue::Slice(Some(items)), GoType::Slice(inner_ty)) => {
            Value::Array(items.iter().map(|item| encode(item, inner_ty)).collect())
        }
        (GoValue::StringMap(None), _) => Value::Null,
        (GoValue::StringMap(Some(map)), _) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect(),
        ),
        (GoValue::Raw(raw), _) => raw.clone().unwrap_or(Value::Null),
        // A value that does not match its type cannot be built by `decode`.
        (_, _) => Value::Null,
    }
}

fn omitted(field: &GoField, value: &GoValue) -> bool {
    match field.omit {
        Omit::Never => false,
        Omit::Zero => matches!(value, GoValue::Time(None)),
        Omit::Empty => match value {
            GoValue::String(text) => text.is_empty(),
            GoValue::Int(number) => *number == 0,
            GoValue::Pointer(pointer) => pointer.is_none(),
            GoValue::Slice(items) => items.as_ref().is_none_or(Vec::is_empty),
            GoValue::StringMap(map) => map.as_ref().is_none_or(BTreeMap::is_empty),
            GoValue::Raw(raw) => match raw {
                None | Some(Value::Null) => true,
                Some(Value::Array(items)) => items.is_empty(),
                Some(Value::Object(entries)) => entries.is_empty(),
                Some(Value::String(text)) => text.is_empty(),
                Some(_) => false,
            },
            GoValue::Quantity(_) | GoValue::Time(_) | GoValue::Struct(_) => false,
        },
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    static INNER: GoStruct = GoStruct {
        name: "Inner",
        fields: &[GoField {
            json: "name",
            ty: GoType::Pointer(&GoType::String("string")),
            omit: Omit::Empty,
        }],
    };
    static OUTER: GoStruct = GoStruct {
        name: "Outer",
        fields: &[
            GoField {
                json: "kind",
                ty: GoType::String("string"),
                omit: Omit::Empty,
            },
            GoField {
                json: "count",
                ty: GoType::Int32,
                omit: Omit::Never,
            },
            GoField {
                json: "text",
                ty: GoType::String("v1.Text"),
                omit: Omit::Never,
            },
            GoField {
                json: "inner",
                ty: GoType::Struct(&INNER),
                omit: Omit::Empty,
            },
            GoField {
                json: "list",
                ty: GoType::Slice(&GoType::Struct(&INNER)),
                omit: Omit::Never,
            },
            GoField {
                json: "labels",
                ty: GoType::StringMap,
                omit: Omit::Empty,
            },
            GoField {
                json: "created",
                ty: GoType::Time,
                omit: Omit::Zero,
            },
        ],
    };

    fn round_trip(input: Value) -> Value {
        encode(&decode(&OUTER, &input).unwrap(), &GoType::Struct(&OUTER))
    }

    #[test]
    fn zero_values_unknown_fields_and_omitempty_as_go_writes_them() {
        assert_eq!(
            round_trip(json!({"future": 1})),
            json!({"count": 0, "text": "", "inner": {}, "list": null})
        );
        assert_eq!(
            round_trip(json!({"list": [], "labels": {}, "inner": {"name": ""}})),
            json!({"count": 0, "text": "", "inner": {"name": ""}, "list": []})
        );
    }

    #[test]
    fn keys_match_case_insensitively_and_scalars_become_strings() {
        assert_eq!(
            round_trip(json!({"COUNT": 4.0, "Text": 12, "KIND": true, "labels": {"a": 1}})),
            json!({"kind": "true", "count": 4, "text": "12", "inner": {}, "list": null, "labels": {"a": "1"}})
        );
        assert_eq!(round_trip(json!({"text": 1.5}))["text"], "1.5");
        assert_eq!(
            round_trip(json!({"text": 1234567.5}))["text"],
            "1.2345675e+06"
        );
        // Sorted key order: "count" is seen after "Count" and wins.
        assert_eq!(round_trip(json!({"count": 2, "Count": 1}))["count"], 2);
    }

    #[test]
    fn times_are_written_in_utc_seconds() {
        assert_eq!(
            round_trip(json!({"created": "2026-01-02T03:04:05.678+02:00"}))["created"],
            "2026-01-02T01:04:05Z"
        );
    }

    #[test]
    fn wrong_types_fail_in_gos_words() {
        let error = decode(&OUTER, &json!({"count": "4"})).unwrap_err();
        assert_eq!(
            error.to_string(),
            "json: cannot unmarshal string into Go struct field Outer.count of type int32"
        );
        let error = decode(&OUTER, &json!({"count": 4.5})).unwrap_err();
        assert_eq!(
            error.to_string(),
            "json: cannot unmarshal number 4.5 into Go struct field Outer.count of type int32"
        );
        let error = decode(&OUTER, &json!({"count": 3_000_000_000u64})).unwrap_err();
        assert!(error.to_string().contains("number 3000000000"), "{error}");
        let error = decode(&OUTER, &json!({"list": [{"name": {}}]})).unwrap_err();
        assert_eq!(
            error.to_string(),
            "json: cannot unmarshal object into Go struct field Outer.list.name of type string"
        );
    }
}
