//! `/openapi/v2`: the Swagger 2.0 document, as JSON or as the protobuf kubectl asks for.
//!
//! kubectl validates on the client, against this document, what the server cannot validate for
//! it: a `kind: List` has no group-version of its own, so its `fieldValidation` support cannot be
//! checked in `/openapi/v3`, and each item is validated with the definition whose
//! `x-kubernetes-group-version-kind` names it; an item whose kind has no definition is not
//! validated on the client (kubernetes/kubectl `pkg/validation/schema.go`, `validateList`,
//! `validateResource`). Without this document kubectl refuses a List ("error validating data").
//!
//! What it holds: one definition per custom resource, from the storage version's
//! `openAPIV3Schema`, turned into a v2 schema as the real server does
//! (kubernetes/kubernetes `staging/src/k8s.io/apiextensions-apiserver/pkg/controller/openapi/v2/conversion.go`,
//! `ToStructuralOpenAPIV2`: junctors dropped; a nullable or `x-kubernetes-preserve-unknown-fields`
//! schema loses its items and properties, and its type where kubectl could not cope), named
//! `<reversed group>.<version>.<Kind>` with `apiVersion`, `kind` and `metadata` properties added
//! when missing (`.../pkg/controller/openapi/builder/builder.go`). Not held: built-in kinds (kube-sim
//! has no schemas for them, so kubectl leaves their items to the server, which validates them as it
//! does a single object), served versions other than the storage version, `paths`, and schema
//! keywords kubectl's validation does not read (enum, pattern, bounds, defaults).
//!
//! The protobuf form is gnostic's `openapi.v2.Document` (google/gnostic
//! `openapiv2/OpenAPIv2.proto`), which client-go asks for with
//! `Accept: application/com.github.proto-openapi.spec.v2@v1.0+protobuf` and decodes with no JSON
//! fallback.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::discovery::KUBE_VERSION;
use crate::resources::ResourceDef;

/// Content type of the protobuf form (as the real server labels it).
pub const PROTOBUF_CONTENT_TYPE: &str =
    "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

/// Whether an `Accept` header asks for the protobuf form.
pub fn wants_protobuf(accept: &str) -> bool {
    accept.contains("com.github.proto-openapi.spec.v2")
}

/// The document, JSON form: only the keys the protobuf form carries.
pub fn document(defs: &[Arc<ResourceDef>]) -> Value {
    let mut definitions = Map::new();
    for def in defs {
        let (Some(schema), Some(version)) = (&def.schema, def.versions.first()) else {
            continue;
        };
        let mut root = to_v2(schema);
        add_type_meta(&mut root);
        if let Some(map) = root.as_object_mut() {
            map.insert(
                GVK_EXTENSION.to_owned(),
                json!([{"group": def.group, "kind": def.kind, "version": version}]),
            );
        }
        definitions.insert(definition_name(&def.group, version, &def.kind), root);
    }
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": format!("v{}.{}.0", KUBE_VERSION.0, KUBE_VERSION.1)},
        "paths": {},
        "definitions": definitions,
    })
}

const GVK_EXTENSION: &str = "x-kubernetes-group-version-kind";

/// `machine.openshift.io`, `v1beta1`, `Machine` → `io.openshift.machine.v1beta1.Machine`.
fn definition_name(group: &str, version: &str, kind: &str) -> String {
    let reversed: Vec<&str> = group.split('.').rev().collect();
    format!("{}.{version}.{kind}", reversed.join("."))
}

/// The v2 form of a v3 schema: the keys kubectl's validation reads, after
/// `ToStructuralOpenAPIV2`'s rules.
fn to_v2(schema: &Value) -> Value {
    let Some(input) = schema.as_object() else {
        return json!({});
    };
    let flag = |key: &str| input.get(key).and_then(Value::as_bool).unwrap_or(false);
    let nullable = flag("nullable");
    let preserve = flag("x-kubernetes-preserve-unknown-fields");
    let mut out = Map::new();
    for key in ["description", "format"] {
        if let Some(value) = input.get(key).filter(|v| v.is_string()) {
            out.insert(key.to_owned(), value.clone());
        }
    }
    let mut type_ = input.get("type").and_then(Value::as_str).map(str::to_owned);
    // A nullable schema: no type, no items, no properties.
    let keep_children = !nullable && !preserve;
    if nullable {
        type_ = None;
    }
    let items = input
        .get("items")
        .filter(|_| keep_children)
        .filter(|items| items.is_object())
        .map(to_v2);
    if items.is_none() && type_.as_deref() == Some("array") {
        // kubectl cannot cope with an array without an item schema.
        type_ = None;
    }
    if preserve && type_.as_deref() == Some("object") {
        type_ = None;
    }
    if let Some(type_) = type_ {
        out.insert("type".to_owned(), json!(type_));
    }
    if let Some(items) = items {
        out.insert("items".to_owned(), items);
    }
    let mut required: Vec<Value> = input
        .get("required")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if let Some(properties) = input
        .get("properties")
        .and_then(Value::as_object)
        .filter(|_| keep_children)
    {
        let mut converted = Map::new();
        for (name, property) in properties {
            if property.get("nullable").and_then(Value::as_bool) == Some(true) {
                required.retain(|r| r.as_str() != Some(name.as_str()));
            }
            converted.insert(name.clone(), to_v2(property));
        }
        out.insert("properties".to_owned(), Value::Object(converted));
    }
    match input.get("additionalProperties") {
        Some(Value::Bool(allowed)) => {
            out.insert("additionalProperties".to_owned(), json!(allowed));
        }
        Some(schema @ Value::Object(_)) => {
            if schema.get("nullable").and_then(Value::as_bool) == Some(true) {
                required.clear();
            }
            out.insert("additionalProperties".to_owned(), to_v2(schema));
        }
        _ => {}
    }
    if !required.is_empty() && out.contains_key("properties") {
        out.insert("required".to_owned(), Value::Array(required));
    }
    Value::Object(out)
}

/// The builder's type-meta properties, added to a root that lists properties but lacks them.
fn add_type_meta(root: &mut Value) {
    let Some(properties) = root.get_mut("properties").and_then(Value::as_object_mut) else {
        return;
    };
    for (name, schema) in [
        ("apiVersion", json!({"type": "string"})),
        ("kind", json!({"type": "string"})),
        ("metadata", json!({"type": "object"})),
    ] {
        properties.entry(name).or_insert(schema);
    }
}

// ---- protobuf (gnostic openapi.v2) ------------------------------------------------------------

fn varint(out: &mut Vec<u8>, mut value: u64) {
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

fn bytes_field(out: &mut Vec<u8>, number: u64, bytes: &[u8]) {
    varint(out, number << 3 | 2);
    varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

fn string_field(out: &mut Vec<u8>, number: u64, text: &str) {
    bytes_field(out, number, text.as_bytes());
}

fn bool_field(out: &mut Vec<u8>, number: u64, value: bool) {
    varint(out, number << 3);
    varint(out, u64::from(value));
}

/// `Schema` (fields 1 `_ref`, 2 format, 4 description, 19 required, 21 additional_properties,
/// 22 type, 23 items, 25 properties, 31 vendor_extension).
fn schema_message(schema: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    let text = |key: &str| schema.get(key).and_then(Value::as_str);
    if let Some(reference) = text("$ref") {
        string_field(&mut out, 1, reference);
    }
    if let Some(format) = text("format") {
        string_field(&mut out, 2, format);
    }
    if let Some(description) = text("description") {
        string_field(&mut out, 4, description);
    }
    for required in schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        string_field(&mut out, 19, required);
    }
    match schema.get("additionalProperties") {
        Some(Value::Bool(allowed)) => {
            let mut item = Vec::new();
            bool_field(&mut item, 2, *allowed);
            bytes_field(&mut out, 21, &item);
        }
        Some(inner @ Value::Object(_)) => {
            let mut item = Vec::new();
            bytes_field(&mut item, 1, &schema_message(inner));
            bytes_field(&mut out, 21, &item);
        }
        _ => {}
    }
    if let Some(type_) = text("type") {
        let mut item = Vec::new();
        string_field(&mut item, 1, type_);
        bytes_field(&mut out, 22, &item);
    }
    if let Some(items) = schema.get("items").filter(|i| i.is_object()) {
        let mut item = Vec::new();
        bytes_field(&mut item, 1, &schema_message(items));
        bytes_field(&mut out, 23, &item);
    }
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        bytes_field(&mut out, 25, &named_schemas(properties));
    }
    if let Some(gvk) = schema.get(GVK_EXTENSION) {
        // NamedAny { name, Any { yaml } }: JSON is YAML, which is how kubectl reads extensions.
        let mut any = Vec::new();
        string_field(&mut any, 2, &gvk.to_string());
        let mut named = Vec::new();
        string_field(&mut named, 1, GVK_EXTENSION);
        bytes_field(&mut named, 2, &any);
        bytes_field(&mut out, 31, &named);
    }
    out
}

/// `Properties` / `Definitions`: repeated `NamedSchema { name = 1, value = 2 }` in field 1.
fn named_schemas(entries: &Map<String, Value>) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, schema) in entries {
        let mut named = Vec::new();
        string_field(&mut named, 1, name);
        bytes_field(&mut named, 2, &schema_message(schema));
        bytes_field(&mut out, 1, &named);
    }
    out
}

/// The document in gnostic's protobuf form (`Document`: 1 swagger, 2 info, 8 paths,
/// 9 definitions).
pub fn to_protobuf(document: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    string_field(&mut out, 1, document["swagger"].as_str().unwrap_or("2.0"));
    let mut info = Vec::new();
    string_field(
        &mut info,
        1,
        document["info"]["title"].as_str().unwrap_or_default(),
    );
    string_field(
        &mut info,
        2,
        document["info"]["version"].as_str().unwrap_or_default(),
    );
    bytes_field(&mut out, 2, &info);
    bytes_field(&mut out, 8, &[]);
    let definitions = document["definitions"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    bytes_field(&mut out, 9, &named_schemas(&definitions));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v3_schemas_become_v2_as_the_real_server_converts_them() {
        let v3 = json!({
            "type": "object",
            "required": ["spec", "gone"],
            "properties": {
                "spec": {
                    "type": "object",
                    "properties": {
                        "raw": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                                "properties": {"x": {"type": "string"}}},
                        "port": {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": true},
                        "list": {"type": "array", "items": {"type": "string"}},
                        "bare": {"type": "array", "x-kubernetes-preserve-unknown-fields": true},
                        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    },
                },
                "gone": {"type": "string", "nullable": true},
            },
        });
        assert_eq!(
            to_v2(&v3),
            json!({
                "type": "object",
                "properties": {
                    "spec": {
                        "type": "object",
                        "properties": {
                            "raw": {},
                            "port": {},
                            "list": {"type": "array", "items": {"type": "string"}},
                            "bare": {},
                            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                        },
                    },
                    "gone": {},
                },
                "required": ["spec"],
            })
        );
    }

    #[test]
    fn definitions_are_named_by_reversed_group_and_carry_their_kind() {
        assert_eq!(
            definition_name("machine.openshift.io", "v1beta1", "Machine"),
            "io.openshift.machine.v1beta1.Machine"
        );
        let mut root = json!({"type": "object", "properties": {"spec": {"type": "object"}}});
        add_type_meta(&mut root);
        assert_eq!(root["properties"]["apiVersion"], json!({"type": "string"}));
        assert_eq!(root["properties"]["metadata"], json!({"type": "object"}));
    }

    #[test]
    fn protobuf_fields_are_length_delimited_with_their_numbers() {
        let bytes = schema_message(&json!({"type": "string"}));
        // field 22, wire type 2: tag 0xb2 0x01; TypeItem { 1: "string" }.
        assert_eq!(
            bytes,
            [0xb2, 0x01, 8, 0x0a, 6, b's', b't', b'r', b'i', b'n', b'g']
        );
    }
}
