//! Decoding of the Kubernetes protobuf request bodies that kubectl (1.32 and later) sends for some built-in
//! types through its typed clients: Eviction (drain), CertificateSigningRequest (certificate approve/deny),
//! Namespace, ConfigMap and Secret (`kubectl create <kind>`), and DeleteOptions. Other kinds answer 415.
//!
//! Responses are always JSON: kubectl accepts them, since it asks for `protobuf,json`.
//!
//! The field numbers come from the Kubernetes `generated.proto` files (as mirrored by the k8s-pb crate).

use base64::Engine;
use serde_json::{Map, Value, json};

/// The magic prefix of a Kubernetes protobuf envelope.
const MAGIC: &[u8] = b"k8s\x00";

/// A body that cannot be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtobufError {
    /// Missing magic prefix or broken wire format.
    #[error("malformed protobuf body: {0}")]
    Malformed(&'static str),
    /// A kind this simulator cannot decode.
    #[error("protobuf bodies of kind {0:?} are not supported by kube-sim; send JSON")]
    UnsupportedKind(String),
}

#[derive(Clone, Copy)]
enum Type {
    String,
    /// Bytes, rendered base64 as in JSON.
    Bytes,
    Int,
    Bool,
    Time,
    Message(&'static [Field]),
    StringMap,
    /// map<string, bytes>, values base64.
    BytesMap,
    /// map<string, ExtraValue> (CSR extra).
    ExtraMap,
}

#[derive(Clone, Copy)]
struct Field {
    number: u64,
    name: &'static str,
    ty: Type,
    repeated: bool,
}

const fn f(number: u64, name: &'static str, ty: Type) -> Field {
    Field {
        number,
        name,
        ty,
        repeated: false,
    }
}

const fn list(number: u64, name: &'static str, ty: Type) -> Field {
    Field {
        number,
        name,
        ty,
        repeated: true,
    }
}

const OWNER_REFERENCE: &[Field] = &[
    f(1, "kind", Type::String),
    f(3, "name", Type::String),
    f(4, "uid", Type::String),
    f(5, "apiVersion", Type::String),
    f(6, "controller", Type::Bool),
    f(7, "blockOwnerDeletion", Type::Bool),
];

const OBJECT_META: &[Field] = &[
    f(1, "name", Type::String),
    f(2, "generateName", Type::String),
    f(3, "namespace", Type::String),
    f(5, "uid", Type::String),
    f(6, "resourceVersion", Type::String),
    f(7, "generation", Type::Int),
    f(8, "creationTimestamp", Type::Time),
    f(9, "deletionTimestamp", Type::Time),
    f(10, "deletionGracePeriodSeconds", Type::Int),
    f(11, "labels", Type::StringMap),
    f(12, "annotations", Type::StringMap),
    list(13, "ownerReferences", Type::Message(OWNER_REFERENCE)),
    list(14, "finalizers", Type::String),
];

const PRECONDITIONS: &[Field] = &[
    f(1, "uid", Type::String),
    f(2, "resourceVersion", Type::String),
];

const DELETE_OPTIONS: &[Field] = &[
    f(1, "gracePeriodSeconds", Type::Int),
    f(2, "preconditions", Type::Message(PRECONDITIONS)),
    f(3, "orphanDependents", Type::Bool),
    f(4, "propagationPolicy", Type::String),
    list(5, "dryRun", Type::String),
];

const EVICTION: &[Field] = &[
    f(1, "metadata", Type::Message(OBJECT_META)),
    f(2, "deleteOptions", Type::Message(DELETE_OPTIONS)),
];

const NAMESPACE: &[Field] = &[
    f(1, "metadata", Type::Message(OBJECT_META)),
    f(
        2,
        "spec",
        Type::Message(&[list(1, "finalizers", Type::String)]),
    ),
    f(3, "status", Type::Message(&[f(1, "phase", Type::String)])),
];

const CONFIG_MAP: &[Field] = &[
    f(1, "metadata", Type::Message(OBJECT_META)),
    f(2, "data", Type::StringMap),
    f(3, "binaryData", Type::BytesMap),
    f(4, "immutable", Type::Bool),
];

const SECRET: &[Field] = &[
    f(1, "metadata", Type::Message(OBJECT_META)),
    f(2, "data", Type::BytesMap),
    f(3, "type", Type::String),
    f(4, "stringData", Type::StringMap),
    f(5, "immutable", Type::Bool),
];

const CSR_CONDITION: &[Field] = &[
    f(1, "type", Type::String),
    f(2, "reason", Type::String),
    f(3, "message", Type::String),
    f(4, "lastUpdateTime", Type::Time),
    f(5, "lastTransitionTime", Type::Time),
    f(6, "status", Type::String),
];

const CSR: &[Field] = &[
    f(1, "metadata", Type::Message(OBJECT_META)),
    f(
        2,
        "spec",
        Type::Message(&[
            f(1, "request", Type::Bytes),
            f(2, "username", Type::String),
            f(3, "uid", Type::String),
            list(4, "groups", Type::String),
            list(5, "usages", Type::String),
            f(6, "extra", Type::ExtraMap),
            f(7, "signerName", Type::String),
            f(8, "expirationSeconds", Type::Int),
        ]),
    ),
    f(
        3,
        "status",
        Type::Message(&[
            list(1, "conditions", Type::Message(CSR_CONDITION)),
            f(2, "certificate", Type::Bytes),
        ]),
    ),
];

fn schema_for(kind: &str) -> Option<&'static [Field]> {
    match kind {
        "Eviction" => Some(EVICTION),
        "DeleteOptions" => Some(DELETE_OPTIONS),
        "Namespace" => Some(NAMESPACE),
        "ConfigMap" => Some(CONFIG_MAP),
        "Secret" => Some(SECRET),
        "CertificateSigningRequest" => Some(CSR),
        _ => None,
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
}

enum Wire<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, ProtobufError> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = self
                .bytes
                .split_first()
                .ok_or(ProtobufError::Malformed("truncated varint"))?;
            self.bytes = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(ProtobufError::Malformed("varint too long"))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], ProtobufError> {
        if n > self.bytes.len() {
            return Err(ProtobufError::Malformed("truncated field"));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn next(&mut self) -> Result<Option<(u64, Wire<'a>)>, ProtobufError> {
        if self.bytes.is_empty() {
            return Ok(None);
        }
        let key = self.varint()?;
        let wire = match key & 7 {
            0 => Wire::Varint(self.varint()?),
            1 => {
                self.take(8)?;
                Wire::Fixed
            }
            2 => {
                let len = usize::try_from(self.varint()?)
                    .map_err(|_| ProtobufError::Malformed("length too large"))?;
                Wire::Bytes(self.take(len)?)
            }
            5 => {
                self.take(4)?;
                Wire::Fixed
            }
            _ => return Err(ProtobufError::Malformed("unsupported wire type")),
        };
        Ok(Some((key >> 3, wire)))
    }
}

fn text(bytes: &[u8]) -> Result<String, ProtobufError> {
    String::from_utf8(bytes.to_vec()).map_err(|_| ProtobufError::Malformed("string is not UTF-8"))
}

fn map_entry(bytes: &[u8]) -> Result<(String, &[u8]), ProtobufError> {
    let mut reader = Reader { bytes };
    let (mut key, mut value) = (String::new(), &[][..]);
    while let Some((number, wire)) = reader.next()? {
        match (number, wire) {
            (1, Wire::Bytes(b)) => key = text(b)?,
            (2, Wire::Bytes(b)) => value = b,
            _ => {}
        }
    }
    Ok((key, value))
}

/// A `metav1.Time`; the zero time is sent as an empty message and reads as null (as in JSON).
fn time(bytes: &[u8]) -> Result<Value, ProtobufError> {
    if bytes.is_empty() {
        return Ok(Value::Null);
    }
    let mut reader = Reader { bytes };
    let mut seconds = 0i64;
    while let Some((number, wire)) = reader.next()? {
        if let (1, Wire::Varint(v)) = (number, wire) {
            seconds = v as i64;
        }
    }
    Ok(jiff::Timestamp::from_second(seconds)
        .map(|t| json!(t.to_string()))
        .unwrap_or(Value::Null))
}

fn decode_message(bytes: &[u8], schema: &[Field]) -> Result<Value, ProtobufError> {
    let mut object = Map::new();
    let mut reader = Reader { bytes };
    let b64 = base64::engine::general_purpose::STANDARD;
    while let Some((number, wire)) = reader.next()? {
        let Some(field) = schema.iter().find(|f| f.number == number) else {
            continue;
        };
        let value = match (field.ty, wire) {
            (Type::String, Wire::Bytes(b)) => json!(text(b)?),
            (Type::Bytes, Wire::Bytes(b)) => json!(b64.encode(b)),
            (Type::Int, Wire::Varint(v)) => json!(v as i64),
            (Type::Bool, Wire::Varint(v)) => json!(v != 0),
            (Type::Time, Wire::Bytes(b)) => time(b)?,
            (Type::Message(inner), Wire::Bytes(b)) => decode_message(b, inner)?,
            (Type::StringMap | Type::BytesMap | Type::ExtraMap, Wire::Bytes(b)) => {
                let (key, raw) = map_entry(b)?;
                let value = match field.ty {
                    Type::StringMap => json!(text(raw)?),
                    Type::BytesMap => json!(b64.encode(raw)),
                    _ => decode_message(raw, &[list(1, "items", Type::String)])?
                        .get("items")
                        .cloned()
                        .unwrap_or(json!([])),
                };
                let entry = object
                    .entry(field.name)
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Value::Object(map) = entry {
                    map.insert(key, value);
                }
                continue;
            }
            _ => {
                return Err(ProtobufError::Malformed(
                    "field has an unexpected wire type",
                ));
            }
        };
        if value.is_null() {
            continue;
        }
        if field.repeated {
            let entry = object
                .entry(field.name)
                .or_insert_with(|| Value::Array(vec![]));
            if let Value::Array(items) = entry {
                items.push(value);
            }
        } else {
            object.insert(field.name.to_string(), value);
        }
    }
    Ok(Value::Object(object))
}

/// Decodes a `application/vnd.kubernetes.protobuf` body into the JSON object it stands for.
pub fn decode(body: &[u8]) -> Result<Value, ProtobufError> {
    let envelope = body
        .strip_prefix(MAGIC)
        .ok_or(ProtobufError::Malformed("missing k8s magic prefix"))?;
    let mut reader = Reader { bytes: envelope };
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), &[][..]);
    while let Some((number, wire)) = reader.next()? {
        match (number, wire) {
            (1, Wire::Bytes(type_meta)) => {
                let meta = decode_message(
                    type_meta,
                    &[f(1, "apiVersion", Type::String), f(2, "kind", Type::String)],
                )?;
                api_version = meta
                    .get("apiVersion")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                kind = meta
                    .get("kind")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
            }
            (2, Wire::Bytes(b)) => raw = b,
            _ => {}
        }
    }
    let schema = schema_for(&kind).ok_or_else(|| ProtobufError::UnsupportedKind(kind.clone()))?;
    let mut object = decode_message(raw, schema)?;
    object["apiVersion"] = json!(api_version);
    object["kind"] = json!(kind);
    Ok(object)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(number: u64, payload: &[u8]) -> Vec<u8> {
        let mut out = vec![(number << 3 | 2) as u8, payload.len() as u8];
        out.extend_from_slice(payload);
        out
    }

    fn varint_field(number: u64, value: u8) -> Vec<u8> {
        vec![(number << 3) as u8, value]
    }

    #[test]
    fn decodes_an_eviction_envelope() {
        let meta = [
            field(1, b"pod-a"),
            field(3, b"ns1"),
            field(11, &[field(1, b"app"), field(2, b"web")].concat()),
        ]
        .concat();
        let preconditions = field(1, b"uid-1");
        let options = [
            varint_field(1, 30),
            field(2, &preconditions),
            field(4, b"Foreground"),
            field(5, b"All"),
        ]
        .concat();
        let raw = [field(1, &meta), field(2, &options)].concat();
        let type_meta = [field(1, b"policy/v1"), field(2, b"Eviction")].concat();
        let body = [MAGIC.to_vec(), field(1, &type_meta), field(2, &raw)].concat();
        let eviction = decode(&body).unwrap();
        assert_eq!(
            eviction,
            json!({"metadata": {"name": "pod-a", "namespace": "ns1", "labels": {"app": "web"}},
                "deleteOptions": {"gracePeriodSeconds": 30, "preconditions": {"uid": "uid-1"}, "propagationPolicy": "Foreground", "dryRun": ["All"]},
                "apiVersion": "policy/v1", "kind": "Eviction"})
        );
    }

    #[test]
    fn decodes_csr_conditions_and_bytes() {
        let time = varint_field(1, 100);
        let condition = [
            field(1, b"Approved"),
            field(6, b"True"),
            field(2, b"Ok"),
            field(4, &time),
            field(5, b""),
        ]
        .concat();
        let raw = [
            field(1, &field(1, b"csr-1")),
            field(2, &field(1, b"\x01\x02")),
            field(3, &field(1, &condition)),
        ]
        .concat();
        let body = [
            MAGIC.to_vec(),
            field(
                1,
                &[
                    field(1, b"certificates.k8s.io/v1"),
                    field(2, b"CertificateSigningRequest"),
                ]
                .concat(),
            ),
            field(2, &raw),
        ]
        .concat();
        let csr = decode(&body).unwrap();
        assert_eq!(csr["spec"]["request"], "AQI=");
        assert_eq!(
            csr["status"]["conditions"][0],
            json!({"type": "Approved", "status": "True", "reason": "Ok", "lastUpdateTime": "1970-01-01T00:01:40Z"})
        );
    }

    #[test]
    fn unknown_kinds_and_garbage_are_rejected() {
        let body = [
            MAGIC.to_vec(),
            field(1, &[field(1, b"v1"), field(2, b"Pod")].concat()),
        ]
        .concat();
        assert_eq!(
            decode(&body),
            Err(ProtobufError::UnsupportedKind("Pod".into()))
        );
        assert!(matches!(decode(b"{}"), Err(ProtobufError::Malformed(_))));
    }
}
