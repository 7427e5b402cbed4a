//! A label selector applied to a label set, as the API server and the machine-healthcheck apply
//! it (k8s.io/apimachinery `metav1.LabelSelectorAsSelector`: `matchLabels` and
//! `matchExpressions` AND-ed; `In` and `NotIn` with values, `Exists` and `DoesNotExist` without;
//! an empty selector selects everything).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Whether `selector` selects an object labelled `labels`. An expression with an operator the
/// API does not define selects nothing (the API server would have refused it).
pub fn selects(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let labels_match = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(key, value)| labels.get(key) == Some(value));
    let expressions_match = selector.match_expressions.iter().flatten().all(|e| {
        let values = e.values.as_deref().unwrap_or_default();
        let value = labels.get(&e.key);
        match e.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            // NotIn selects objects without the key too (apimachinery `Requirement.Matches`).
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        }
    });
    labels_match && expressions_match
}
