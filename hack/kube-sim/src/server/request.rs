//! Reading a request: its body (JSON or protobuf), dry run, selectors, delete options, strict
//! field validation, and an object encoded for the version asked.

use std::collections::HashMap;

use bytes::Bytes;
use http::Request;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult};
use crate::resources::ResourceDef;
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{DeleteOptions, ListParams, Stored};

pub(super) async fn read_body(request: Request<Incoming>) -> ApiResult<Bytes> {
    request
        .into_body()
        .collect()
        .await
        .map(|c| c.to_bytes())
        .map_err(|e| ApiError::bad_request(format!("cannot read the request body: {e}")))
}

/// Parses a request body: JSON, or the Kubernetes protobuf envelope for the kinds kubectl sends that way.
pub(super) fn parse_object(content_type: &str, body: &[u8]) -> ApiResult<Value> {
    if content_type.starts_with("application/vnd.kubernetes.protobuf") {
        return crate::protobuf::decode(body).map_err(|e| match e {
            crate::protobuf::ProtobufError::UnsupportedKind(_) => {
                ApiError::unsupported_media_type(e.to_string())
            }
            crate::protobuf::ProtobufError::Malformed(_) => ApiError::bad_request(e.to_string()),
        });
    }
    if content_type.starts_with("application/cbor") {
        return Err(ApiError::unsupported_media_type(
            "CBOR bodies are not supported by kube-sim; send JSON",
        ));
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))
}

pub(super) fn dry_run(query: &HashMap<String, String>) -> bool {
    query.get("dryRun").is_some_and(|v| v == "All")
}

/// The object serialized for a requested version (the stored bytes when the version is the stored one).
pub(super) fn object_bytes(def: &ResourceDef, version: &str, stored: &Stored) -> Bytes {
    let wanted = def.api_version(version);
    if stored.value.get("apiVersion").and_then(Value::as_str) == Some(wanted.as_str()) {
        return stored.json.clone();
    }
    let mut copy = (*stored.value).clone();
    copy["apiVersion"] = json!(wanted);
    Bytes::from(serde_json::to_vec(&copy).unwrap_or_default())
}

pub(super) fn selectors(
    def: &ResourceDef,
    query: &HashMap<String, String>,
) -> ApiResult<(LabelSelector, FieldSelector)> {
    let labels = LabelSelector::parse(
        query
            .get("labelSelector")
            .map(String::as_str)
            .unwrap_or_default(),
    )
    .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let fields = FieldSelector::parse(
        query
            .get("fieldSelector")
            .map(String::as_str)
            .unwrap_or_default(),
        &def.group,
        &def.plural,
    )
    .map_err(|e| ApiError::bad_request(format!("{e} for {}", def.plural)))?;
    Ok((labels, fields))
}

/// `fieldValidation=Strict` (what kubectl sends by default): a custom resource body with fields its schema does
/// not declare is refused, as the real server does (without it, such fields are silently pruned).
pub(super) fn strict_fields(
    def: &ResourceDef,
    version: &str,
    query: &HashMap<String, String>,
    body: &Value,
) -> ApiResult<()> {
    let Some(schema) = def
        .schema
        .as_ref()
        .filter(|_| query.get("fieldValidation").is_some_and(|v| v == "Strict"))
    else {
        return Ok(());
    };
    let unknown = crate::schema::unknown_fields(body, schema);
    if unknown.is_empty() {
        return Ok(());
    }
    let fields: Vec<String> = unknown
        .iter()
        .map(|f| format!("unknown field \"{f}\""))
        .collect();
    Err(ApiError::bad_request(format!(
        "{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: {}",
        fields.join(", "),
        kind = def.kind
    )))
}

pub(super) fn delete_options(
    body: Option<&Value>,
    query: &HashMap<String, String>,
) -> DeleteOptions {
    let from_body = |pointer: &str| {
        body.and_then(|b| b.pointer(pointer))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    DeleteOptions {
        uid: from_body("/preconditions/uid"),
        resource_version: from_body("/preconditions/resourceVersion"),
        propagation: from_body("/propagationPolicy")
            .or_else(|| query.get("propagationPolicy").cloned()),
        dry_run: body
            .and_then(|b| b.get("dryRun"))
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(|v| v == "All"))
            || dry_run(query),
    }
}

/// A list's parameters: `namespace` (or all), the selectors, and the page asked in `query`
/// (`limit`, and `continue` unless empty).
pub(super) fn paged_list_params<'a>(
    namespace: Option<&'a str>,
    labels: &'a LabelSelector,
    fields: &'a FieldSelector,
    query: &'a HashMap<String, String>,
) -> ListParams<'a> {
    ListParams {
        namespace,
        labels: Some(labels),
        fields: Some(fields),
        limit: query.get("limit").and_then(|l| l.parse().ok()),
        continue_token: query
            .get("continue")
            .map(String::as_str)
            .filter(|c| !c.is_empty()),
    }
}
