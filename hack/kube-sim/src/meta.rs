//! Helpers for `metadata`: timestamps, generated names, name validation, field access.

use rand::Rng;
use serde_json::{Map, Value};

/// Now, as the RFC 3339 seconds-precision string Kubernetes uses (`2026-01-02T03:04:05Z`).
pub fn now_rfc3339() -> String {
    let now = jiff::Timestamp::now();
    jiff::Timestamp::from_second(now.as_second())
        .unwrap_or(now)
        .to_string()
}

/// Seconds since an RFC 3339 timestamp, if it parses.
pub fn age_seconds(timestamp: &str) -> Option<i64> {
    let then: jiff::Timestamp = timestamp.parse().ok()?;
    Some(jiff::Timestamp::now().as_second() - then.as_second())
}

/// Formats an age the way kubectl does (`5s`, `3m12s`, `2d4h`).
pub fn human_age(seconds: i64) -> String {
    let s = seconds.max(0);
    match s {
        0..120 => format!("{s}s"),
        120..600 => format!("{}m{}s", s / 60, s % 60),
        600..10800 => format!("{}m", s / 60),
        10800..172800 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

/// The five random characters the API server appends to `generateName` (no vowels, no confusable digits).
pub fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// A new random UID.
pub fn new_uid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Why a name is not a valid DNS subdomain (RFC 1123), or `None` if it is.
pub fn invalid_subdomain(name: &str) -> Option<&'static str> {
    if name.is_empty() || name.len() > 253 {
        return Some("must be no more than 253 characters and not empty");
    }
    let ok_chars = name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
    let starts_ok = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric());
    let ends_ok = name
        .chars()
        .last()
        .is_some_and(|c| c.is_ascii_alphanumeric());
    if ok_chars && starts_ok && ends_ok {
        None
    } else {
        Some(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
        )
    }
}

/// Why a name is not a valid DNS label (RFC 1123; namespaces), or `None` if it is.
pub fn invalid_label(name: &str) -> Option<&'static str> {
    if name.len() > 63 || name.contains('.') {
        return Some(
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character",
        );
    }
    invalid_subdomain(name)
}

fn qualified_name_part(name: &str) -> bool {
    let bytes = name.as_bytes();
    !name.is_empty()
        && name.len() <= 63
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Why a label or annotation key is not a qualified name (`[prefix/]name`), or `None` if it is.
pub fn invalid_qualified_name(key: &str) -> Option<&'static str> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if prefix.is_some_and(|p| invalid_subdomain(p).is_some()) {
        return Some("prefix part must be a lowercase RFC 1123 subdomain");
    }
    if !qualified_name_part(name) {
        return Some(
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (63 characters at most)",
        );
    }
    None
}

/// Why a label value is invalid, or `None` if it is valid (empty is valid).
pub fn invalid_label_value(value: &str) -> Option<&'static str> {
    if value.is_empty() || qualified_name_part(value) {
        None
    } else {
        Some(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (63 characters at most)",
        )
    }
}

/// The first invalid label or annotation in an object's metadata: (field path, message).
pub fn invalid_labels_or_annotations(object: &Value) -> Option<(String, String)> {
    for (field, check_values) in [("labels", true), ("annotations", false)] {
        let Some(map) = object
            .pointer(&format!("/metadata/{field}"))
            .and_then(Value::as_object)
        else {
            continue;
        };
        for (key, value) in map {
            if let Some(why) = invalid_qualified_name(key) {
                return Some((
                    format!("metadata.{field}"),
                    format!("Invalid value: {key:?}: {why}"),
                ));
            }
            let Some(text) = value.as_str() else {
                return Some((
                    format!("metadata.{field}"),
                    format!("Invalid value: the value of {key:?} must be a string"),
                ));
            };
            if check_values && let Some(why) = invalid_label_value(text) {
                return Some((
                    format!("metadata.{field}"),
                    format!("Invalid value: {text:?}: {why}"),
                ));
            }
        }
    }
    None
}

/// `metadata` as a mutable map, creating it if absent or not an object.
pub fn metadata_mut(object: &mut Value) -> &mut Map<String, Value> {
    if !object.get("metadata").is_some_and(Value::is_object) {
        object["metadata"] = Value::Object(Map::new());
    }
    match object.get_mut("metadata") {
        Some(Value::Object(map)) => map,
        // Unreachable: the object was given a metadata map just above.
        _ => unreachable!("metadata was just set to an object"),
    }
}

/// A string field of `metadata`, or "".
pub fn meta_str<'a>(object: &'a Value, field: &str) -> &'a str {
    object
        .get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The strings of a JSON array (other items skipped); empty if absent.
pub fn string_list(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// `metadata.finalizers`.
pub fn finalizers(object: &Value) -> Vec<String> {
    string_list(object.pointer("/metadata/finalizers"))
}

/// Sets `metadata.finalizers`, removing the field when empty.
pub fn set_finalizers(object: &mut Value, list: &[String]) {
    let meta = metadata_mut(object);
    if list.is_empty() {
        meta.remove("finalizers");
    } else {
        meta.insert("finalizers".into(), Value::from(list.to_vec()));
    }
}

/// Is `metadata.deletionTimestamp` set?
pub fn is_deleting(object: &Value) -> bool {
    object
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

/// Reads a simple JSONPath (`.spec.replicas`, `.metadata.labels['a/b']`, `.metadata.labels.a\.b/c`,
/// `.status.conditions[0].type`, `.status.conditions[?(@.type=="Ready")].status`).
pub fn json_path<'a>(object: &'a Value, path: &str) -> Option<&'a Value> {
    let mut current = object;
    for step in json_path_steps(path)? {
        current = match step {
            PathStep::Key(key) => current.get(key.as_str())?,
            PathStep::Index(i) => current.get(i)?,
            PathStep::Filter(key, value) => current.as_array()?.iter().find(|item| {
                item.get(key.as_str()).and_then(Value::as_str) == Some(value.as_str())
            })?,
        };
    }
    Some(current)
}

/// Sets the value at a simple JSONPath of object keys, creating intermediate objects.
pub fn set_json_path(object: &mut Value, path: &str, value: Value) -> bool {
    let Some(steps) = json_path_steps(path) else {
        return false;
    };
    let mut current = object;
    for step in steps {
        let PathStep::Key(key) = step else {
            return false;
        };
        if !current.is_object() {
            *current = Value::Object(Map::new());
        }
        let Value::Object(map) = current else {
            return false;
        };
        current = map.entry(key).or_insert(Value::Null);
    }
    *current = value;
    true
}

enum PathStep {
    Key(String),
    Index(usize),
    Filter(String, String),
}

fn json_path_steps(path: &str) -> Option<Vec<PathStep>> {
    let path = path.trim().trim_start_matches('{').trim_end_matches('}');
    let mut steps = vec![];
    let chars: Vec<char> = path.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '.' => {
                i += 1;
                let mut key = String::new();
                while i < chars.len() && chars[i] != '.' && chars[i] != '[' {
                    if chars[i] == '\\' && i + 1 < chars.len() {
                        i += 1;
                    }
                    key.push(chars[i]);
                    i += 1;
                }
                if !key.is_empty() {
                    steps.push(PathStep::Key(key));
                }
            }
            '[' => {
                let end = chars[i..].iter().position(|&c| c == ']')? + i;
                let inner: String = chars[i + 1..end].iter().collect();
                let inner = inner.trim();
                if let Some(filter) = inner.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')')) {
                    let (key, value) = filter.split_once("==")?;
                    steps.push(PathStep::Filter(
                        key.trim().to_string(),
                        value
                            .trim()
                            .trim_matches(|c| c == '"' || c == '\'')
                            .to_string(),
                    ));
                } else if let Ok(index) = inner.parse::<usize>() {
                    steps.push(PathStep::Index(index));
                } else {
                    steps.push(PathStep::Key(
                        inner
                            .trim_matches(|c| c == '"' || c == '\'')
                            .replace('\\', ""),
                    ));
                }
                i = end + 1;
            }
            _ => return None,
        }
    }
    Some(steps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_paths_cover_printer_column_forms() {
        let o = json!({"metadata": {"labels": {"machine.openshift.io/instance-type": "m1"}},
            "status": {"conditions": [{"type": "A", "status": "False"}, {"type": "Ready", "status": "True"}]}});
        assert_eq!(
            json_path(&o, ".metadata.labels['machine.openshift.io/instance-type']"),
            Some(&json!("m1"))
        );
        assert_eq!(
            json_path(
                &o,
                ".metadata.labels.machine\\.openshift\\.io/instance-type"
            ),
            Some(&json!("m1"))
        );
        assert_eq!(
            json_path(
                &o,
                ".metadata.labels['machine\\.openshift\\.io/instance-type']"
            ),
            Some(&json!("m1"))
        );
        assert_eq!(
            json_path(&o, ".status.conditions[1].type"),
            Some(&json!("Ready"))
        );
        assert_eq!(
            json_path(&o, ".status.conditions[?(@.type==\"Ready\")].status"),
            Some(&json!("True"))
        );
        assert_eq!(json_path(&o, ".status.missing"), None);
    }

    #[test]
    fn set_json_path_creates_parents() {
        let mut o = json!({});
        assert!(set_json_path(&mut o, ".spec.replicas", json!(3)));
        assert_eq!(o, json!({"spec": {"replicas": 3}}));
    }

    #[test]
    fn names_are_validated_as_rfc1123() {
        assert_eq!(invalid_subdomain("worker-0.example"), None);
        assert!(invalid_subdomain("Worker").is_some());
        assert!(invalid_subdomain("-a").is_some());
        assert!(invalid_label("a.b").is_some());
        assert_eq!(random_suffix().len(), 5);
    }

    #[test]
    fn label_keys_and_values_follow_the_api_rules() {
        assert_eq!(
            invalid_qualified_name("machine.openshift.io/instance-type"),
            None
        );
        assert_eq!(invalid_qualified_name("app"), None);
        assert!(invalid_qualified_name("Bad.Prefix/x").is_some());
        assert!(invalid_qualified_name("a/-x").is_some());
        assert_eq!(invalid_label_value(""), None);
        assert_eq!(invalid_label_value("m1.xlarge_2"), None);
        assert!(invalid_label_value("has space").is_some());
        assert!(invalid_label_value(&"x".repeat(64)).is_some());
        let bad = json!({"metadata": {"labels": {"ok": "v", "machine.openshift.io/zone": "PE 1"}}});
        assert_eq!(
            invalid_labels_or_annotations(&bad).unwrap().0,
            "metadata.labels"
        );
        let annotated = json!({"metadata": {"annotations": {"note": "free text, with spaces"}}});
        assert_eq!(invalid_labels_or_annotations(&annotated), None);
    }

    #[test]
    fn ages_print_like_kubectl() {
        assert_eq!(human_age(5), "5s");
        assert_eq!(human_age(192), "3m12s");
        assert_eq!(human_age(7200), "120m");
        assert_eq!(human_age(200000), "2d");
    }
}
