//! One store for events, two APIs: as in the real server, `events.k8s.io/v1` Events are a view of the core/v1
//! Events, so an event a controller publishes through events.k8s.io shows in `kubectl get events` and
//! `kubectl describe`. Objects are stored in the core form and converted on the way in and out.

use serde_json::{Map, Value, json};

/// (events.k8s.io/v1 field, core/v1 field), for the fields that differ or exist in both.
const FIELD_MAP: [(&str, &str); 14] = [
    ("regarding", "involvedObject"),
    ("related", "related"),
    ("note", "message"),
    ("reason", "reason"),
    ("type", "type"),
    ("reportingController", "reportingComponent"),
    ("reportingInstance", "reportingInstance"),
    ("action", "action"),
    ("eventTime", "eventTime"),
    ("series", "series"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

fn convert(object: &Value, api_version: &str, to_core: bool) -> Value {
    let mut out = Map::new();
    out.insert("apiVersion".into(), json!(api_version));
    out.insert("kind".into(), json!("Event"));
    if let Some(meta) = object.get("metadata") {
        out.insert("metadata".into(), meta.clone());
    }
    for (new_name, core_name) in FIELD_MAP {
        let (from, to) = if to_core {
            (new_name, core_name)
        } else {
            (core_name, new_name)
        };
        if let Some(value) = object.get(from) {
            out.insert(to.to_string(), value.clone());
        }
    }
    Value::Object(out)
}

/// An events.k8s.io/v1 Event in its core/v1 form (for storage).
pub fn to_core(event: &Value) -> Value {
    convert(event, "v1", true)
}

/// A stored core/v1 Event in its events.k8s.io/v1 form.
pub fn from_core(event: &Value) -> Value {
    convert(event, "events.k8s.io/v1", false)
}

/// Rewrites an events.k8s.io field selector into the core field names it is evaluated on.
pub fn core_field_selector(selector: &str) -> String {
    selector
        .split(',')
        .map(|term| {
            let term = term.trim();
            FIELD_MAP
                .iter()
                .find_map(|(new_name, core_name)| {
                    let rest = term.strip_prefix(new_name)?;
                    (rest.starts_with('.') || rest.starts_with('=') || rest.starts_with('!'))
                        .then(|| format!("{core_name}{rest}"))
                })
                .unwrap_or_else(|| term.to_string())
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_round_trip_between_the_two_apis() {
        let new = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e", "namespace": "ns"},
            "regarding": {"kind": "Machine", "name": "m"}, "note": "VM created", "reason": "Created", "type": "Normal",
            "reportingController": "nutanix", "action": "Create", "series": {"count": 2}});
        let core = to_core(&new);
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(core["involvedObject"]["name"], "m");
        assert_eq!(core["message"], "VM created");
        assert_eq!(core["reportingComponent"], "nutanix");
        assert_eq!(from_core(&core), new);
    }

    #[test]
    fn field_selectors_are_renamed() {
        assert_eq!(
            core_field_selector(
                "regarding.name=m,regarding.namespace=ns,reason=Created,reportingController!=x"
            ),
            "involvedObject.name=m,involvedObject.namespace=ns,reason=Created,reportingComponent!=x"
        );
    }
}
