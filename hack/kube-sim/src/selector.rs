//! Label selectors (equality- and set-based) and field selectors, as the API server parses them.

use std::collections::BTreeMap;

use serde_json::Value;

/// How a requirement compares a label.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Op {
    Eq,
    NotEq,
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Requirement {
    key: String,
    op: Op,
    values: Vec<String>,
}

impl Requirement {
    fn matches(&self, labels: &BTreeMap<&str, &str>) -> bool {
        let value = labels.get(self.key.as_str());
        match self.op {
            Op::Eq | Op::In => value.is_some_and(|v| self.values.iter().any(|w| w == v)),
            Op::NotEq | Op::NotIn => value.is_none_or(|v| !self.values.iter().any(|w| w == v)),
            Op::Exists => value.is_some(),
            Op::DoesNotExist => value.is_none(),
            Op::Gt | Op::Lt => {
                let (Some(v), Some(bound)) = (
                    value.and_then(|v| v.parse::<i64>().ok()),
                    self.values.first().and_then(|b| b.parse::<i64>().ok()),
                ) else {
                    return false;
                };
                if self.op == Op::Gt {
                    v > bound
                } else {
                    v < bound
                }
            }
        }
    }
}

/// A parsed label selector. The empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
    /// A `LabelSelector` object that is null selects nothing (PodDisruptionBudget semantics).
    matches_nothing: bool,
}

/// A malformed selector, with the offending text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unable to parse selector {text:?}: {message}")]
pub struct SelectorError {
    /// The selector or term that failed.
    pub text: String,
    /// What is wrong with it.
    pub message: String,
}

fn selector_error(text: &str, message: &str) -> SelectorError {
    SelectorError {
        text: text.to_string(),
        message: message.to_string(),
    }
}

/// Splits at commas outside parentheses.
fn split_terms(text: &str) -> Vec<&str> {
    let mut terms = vec![];
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                terms.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&text[start..]);
    terms
        .into_iter()
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .collect()
}

fn valid_key(key: &str) -> bool {
    !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn parse_set(term: &str, rest: &str) -> Result<Vec<String>, SelectorError> {
    let inner = rest
        .trim()
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| selector_error(term, "expected a parenthesised set of values"))?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

fn parse_term(term: &str) -> Result<Requirement, SelectorError> {
    let requirement =
        |key: &str, op: Op, values: Vec<String>| -> Result<Requirement, SelectorError> {
            let key = key.trim();
            if !valid_key(key) {
                return Err(selector_error(term, "invalid label key"));
            }
            Ok(Requirement {
                key: key.to_string(),
                op,
                values,
            })
        };
    if let Some(key) = term.strip_prefix('!') {
        return requirement(key, Op::DoesNotExist, vec![]);
    }
    for (word, op) in [(" notin ", Op::NotIn), (" in ", Op::In)] {
        if let Some((key, rest)) = term.split_once(word) {
            return requirement(key, op, parse_set(term, rest)?);
        }
    }
    for (sym, op) in [
        ("!=", Op::NotEq),
        ("==", Op::Eq),
        ("=", Op::Eq),
        (">", Op::Gt),
        ("<", Op::Lt),
    ] {
        if let Some((key, value)) = term.split_once(sym) {
            return requirement(key, op, vec![value.trim().to_string()]);
        }
    }
    requirement(term, Op::Exists, vec![])
}

fn labels_of(object: &Value) -> BTreeMap<&str, &str> {
    object
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.as_str(), v.as_str()?)))
                .collect()
        })
        .unwrap_or_default()
}

impl LabelSelector {
    /// Parses the `labelSelector` query parameter form (`a=b,c!=d,e in (f,g),!h`).
    pub fn parse(text: &str) -> Result<Self, SelectorError> {
        let requirements = split_terms(text)
            .into_iter()
            .map(parse_term)
            .collect::<Result<_, _>>()?;
        Ok(Self {
            requirements,
            matches_nothing: false,
        })
    }

    /// Builds a selector from a `metav1.LabelSelector` object (`matchLabels`, `matchExpressions`). `None` or JSON
    /// null selects nothing, `{}` selects everything.
    pub fn from_object(selector: Option<&Value>) -> Result<Self, SelectorError> {
        let Some(selector) = selector.filter(|s| !s.is_null()) else {
            return Ok(Self {
                requirements: vec![],
                matches_nothing: true,
            });
        };
        let mut requirements = vec![];
        if let Some(labels) = selector.get("matchLabels").and_then(Value::as_object) {
            for (key, value) in labels {
                requirements.push(Requirement {
                    key: key.clone(),
                    op: Op::Eq,
                    values: vec![value.as_str().unwrap_or_default().to_string()],
                });
            }
        }
        for expr in selector
            .get("matchExpressions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let key = expr
                .get("key")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let op = match expr.get("operator").and_then(Value::as_str) {
                Some("In") => Op::In,
                Some("NotIn") => Op::NotIn,
                Some("Exists") => Op::Exists,
                Some("DoesNotExist") => Op::DoesNotExist,
                other => {
                    return Err(selector_error(
                        &format!("{other:?}"),
                        "matchExpressions[].operator is not a valid operator",
                    ));
                }
            };
            let values = expr
                .get("values")
                .and_then(Value::as_array)
                .map(|vs| {
                    vs.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            requirements.push(Requirement { key, op, values });
        }
        Ok(Self {
            requirements,
            matches_nothing: false,
        })
    }

    /// Does the object's `metadata.labels` satisfy the selector?
    pub fn matches(&self, object: &Value) -> bool {
        if self.matches_nothing {
            return false;
        }
        if self.requirements.is_empty() {
            return true;
        }
        let labels = labels_of(object);
        self.requirements.iter().all(|r| r.matches(&labels))
    }

    /// Is this the empty selector (matches everything)?
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty() && !self.matches_nothing
    }

    /// The query-string form, as a scale subresource reports it in `status.selector`.
    pub fn to_query(&self) -> String {
        let mut terms: Vec<String> = self
            .requirements
            .iter()
            .map(|r| match r.op {
                Op::Eq => format!("{}={}", r.key, r.values.join("")),
                Op::NotEq => format!("{}!={}", r.key, r.values.join("")),
                Op::In => format!("{} in ({})", r.key, r.values.join(",")),
                Op::NotIn => format!("{} notin ({})", r.key, r.values.join(",")),
                Op::Exists => r.key.clone(),
                Op::DoesNotExist => format!("!{}", r.key),
                Op::Gt => format!("{}>{}", r.key, r.values.join("")),
                Op::Lt => format!("{}<{}", r.key, r.values.join("")),
            })
            .collect();
        terms.sort();
        terms.join(",")
    }
}

/// A parsed field selector: `field=value` / `field!=value` terms.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    terms: Vec<(String, bool, String)>,
}

/// Fields every resource supports in field selectors.
const COMMON_FIELDS: [&str; 2] = ["metadata.name", "metadata.namespace"];

/// Extra fields the real API server supports per resource (group, plural).
fn extra_fields(group: &str, plural: &str) -> &'static [&'static str] {
    match (group, plural) {
        ("", "pods") => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        ("", "nodes") => &["spec.unschedulable"],
        ("", "secrets") => &["type"],
        ("", "namespaces") => &["status.phase"],
        ("", "events") | ("events.k8s.io", "events") => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
            "regarding.kind",
            "regarding.name",
            "regarding.namespace",
        ],
        ("certificates.k8s.io", _) => &["spec.signerName"],
        _ => &[],
    }
}

fn field_value(object: &Value, field: &str) -> String {
    let mut current = object;
    for part in field.split('.') {
        match current.get(part) {
            Some(next) => current = next,
            None => return String::new(),
        }
    }
    match current {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        _ => String::new(),
    }
}

impl FieldSelector {
    /// Parses a field selector for a resource, rejecting fields the real server does not index.
    pub fn parse(text: &str, group: &str, plural: &str) -> Result<Self, SelectorError> {
        let mut terms = vec![];
        for term in split_terms(text) {
            let (field, negate, value) = if let Some((f, v)) = term.split_once("!=") {
                (f, true, v)
            } else if let Some((f, v)) = term.split_once("==") {
                (f, false, v)
            } else if let Some((f, v)) = term.split_once('=') {
                (f, false, v)
            } else {
                return Err(selector_error(
                    term,
                    "invalid field selector: expected field=value or field!=value",
                ));
            };
            let field = field.trim();
            if !COMMON_FIELDS.contains(&field) && !extra_fields(group, plural).contains(&field) {
                return Err(selector_error(field, "field label not supported"));
            }
            terms.push((field.to_string(), negate, value.trim().to_string()));
        }
        Ok(Self { terms })
    }

    /// Does the object satisfy every term? (A missing field compares as the empty string, like the real server;
    /// `spec.unschedulable` reads as `false` when absent.)
    pub fn matches(&self, object: &Value) -> bool {
        self.terms.iter().all(|(field, negate, value)| {
            let mut actual = field_value(object, field);
            if actual.is_empty() && field == "spec.unschedulable" {
                actual = "false".to_string();
            }
            (actual == *value) != *negate
        })
    }

    /// The value required for `metadata.name`, if the selector pins one (kubectl wait does this).
    pub fn pinned_name(&self) -> Option<&str> {
        self.terms
            .iter()
            .find(|(f, negate, _)| f == "metadata.name" && !negate)
            .map(|(_, _, v)| v.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "a", "namespace": "ns", "labels": labels}, "spec": {"nodeName": "n1"}})
    }

    #[test]
    fn equality_and_set_based_label_selectors() {
        let o = obj(json!({"app": "web", "tier": "front", "n": "5"}));
        let cases = [
            ("", true),
            ("app=web", true),
            ("app==web,tier=front", true),
            ("app!=web", false),
            ("app in (db, web)", true),
            ("app notin (web)", false),
            ("tier", true),
            ("!tier", false),
            ("!missing", true),
            ("missing!=x", true),
            ("n>4", true),
            ("n<5", false),
            ("app in (db),tier=front", false),
        ];
        for (text, expected) in cases {
            assert_eq!(
                LabelSelector::parse(text).unwrap().matches(&o),
                expected,
                "{text}"
            );
        }
    }

    #[test]
    fn malformed_label_selector_is_rejected() {
        assert!(LabelSelector::parse("app in web").is_err());
        assert!(LabelSelector::parse("a b=c").is_err());
    }

    #[test]
    fn label_selector_object_null_selects_nothing_and_empty_selects_all() {
        let o = obj(json!({"app": "web"}));
        assert!(!LabelSelector::from_object(None).unwrap().matches(&o));
        assert!(
            LabelSelector::from_object(Some(&json!({})))
                .unwrap()
                .matches(&o)
        );
        let sel = json!({"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]});
        let sel = LabelSelector::from_object(Some(&sel)).unwrap();
        assert!(sel.matches(&o));
        assert_eq!(sel.to_query(), "!tier,app=web");
    }

    #[test]
    fn field_selectors_check_supported_fields() {
        let o = obj(json!({}));
        assert!(
            FieldSelector::parse("spec.nodeName=n1", "", "pods")
                .unwrap()
                .matches(&o)
        );
        assert!(
            !FieldSelector::parse("spec.nodeName!=n1", "", "pods")
                .unwrap()
                .matches(&o)
        );
        assert!(
            FieldSelector::parse("metadata.name=a,metadata.namespace=ns", "x.io", "things")
                .unwrap()
                .matches(&o)
        );
        let err = FieldSelector::parse("spec.nodeName=n1", "x.io", "things").unwrap_err();
        assert_eq!(err.text, "spec.nodeName");
        let node = json!({"metadata": {"name": "n"}, "spec": {}});
        assert!(
            FieldSelector::parse("spec.unschedulable=false", "", "nodes")
                .unwrap()
                .matches(&node)
        );
    }
}
