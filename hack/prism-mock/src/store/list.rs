//! v3 list requests: `{kind, filter, length, offset, sort_attribute, sort_order}`.

use serde::Deserialize;
use serde_json::{Value, json};

use super::refusal::Refusal;

/// Page size when the request gives no `length` (real Prism answers a small default page: 20).
pub(crate) const DEFAULT_PAGE: usize = 20;
/// Largest accepted `length`.
pub(crate) const MAX_PAGE: usize = 500;

#[derive(Debug, Default, Deserialize)]
struct RawList {
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    filter: Option<String>,
    #[serde(default)]
    length: Option<i64>,
    #[serde(default)]
    offset: Option<i64>,
    #[serde(default)]
    sort_attribute: Option<String>,
    #[serde(default)]
    sort_order: Option<String>,
}

/// A FIQL-like filter: `,` separates alternatives, `;` separates clauses that must all hold, each clause is
/// `attribute==value` and matches when the attribute contains `value` (real Prism's `==` matches partially).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Filter {
    alternatives: Vec<Vec<(String, String)>>,
}

impl Filter {
    fn parse(text: &str, known: &[&str]) -> Result<Self, String> {
        let mut alternatives = Vec::new();
        for alternative in text.split(',') {
            let mut clauses = Vec::new();
            for clause in alternative.split(';') {
                let (attr, value) = clause.split_once("==").ok_or_else(|| {
                    format!("clause '{clause}' is not of the form attribute==value")
                })?;
                let attr = attr.trim();
                if !known.contains(&attr) {
                    return Err(format!(
                        "unsupported filter attribute '{attr}' (the mock knows: {})",
                        known.join(", ")
                    ));
                }
                clauses.push((attr.to_owned(), value.to_owned()));
            }
            alternatives.push(clauses);
        }
        Ok(Self { alternatives })
    }

    /// Whether an entity matches; `attribute` gives the entity's value of an attribute.
    pub(crate) fn matches<'a>(&self, attribute: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.alternatives.iter().any(|clauses| {
            clauses.iter().all(|(attr, value)| {
                attribute(attr).is_some_and(|actual| actual.contains(value.as_str()))
            })
        })
    }
}

/// A parsed list request.
#[derive(Debug, Clone)]
pub(crate) struct ListQuery {
    pub(crate) kind: String,
    pub(crate) filter: Option<Filter>,
    pub(crate) filter_text: Option<String>,
    pub(crate) length: usize,
    pub(crate) offset: usize,
    pub(crate) sort_by_name: bool,
    pub(crate) descending: bool,
    /// `sort_attribute` and `sort_order` as sent, echoed in the answer's metadata (list_vm.json).
    pub(crate) sort_echo: Vec<(&'static str, String)>,
    /// Whether the answer's metadata shows `offset` and `length`.
    pub(crate) page_in_metadata: bool,
}

impl ListQuery {
    /// Parses a list body (an empty body counts as `{}`); `known` lists the filter attributes of this kind.
    pub(crate) fn parse(body: &[u8], kind: &str, known: &[&str]) -> Result<Self, Refusal> {
        let raw: RawList = if body.iter().all(u8::is_ascii_whitespace) {
            RawList::default()
        } else {
            serde_json::from_slice(body)
                .map_err(|e| Refusal::invalid_one(kind, "", format!("invalid list request: {e}")))?
        };
        let mut details = Vec::new();
        if let Some(given) = raw.kind.as_deref()
            && given != kind
        {
            details.push((
                "kind".to_owned(),
                format!("expected '{kind}', got '{given}'"),
            ));
        }
        let length = match raw.length {
            None => DEFAULT_PAGE,
            Some(n) if n >= 1 && n as usize <= MAX_PAGE => n as usize,
            Some(n) => {
                details.push(("length".to_owned(), format!("{n} is not in 1..={MAX_PAGE}")));
                DEFAULT_PAGE
            }
        };
        let offset = match raw.offset {
            None => 0,
            Some(n) if n >= 0 => n as usize,
            Some(n) => {
                details.push(("offset".to_owned(), format!("{n} is negative")));
                0
            }
        };
        let filter = match raw.filter.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(text) => match Filter::parse(text, known) {
                Ok(filter) => Some(filter),
                Err(message) => {
                    details.push(("filter".to_owned(), message));
                    None
                }
            },
        };
        let sort_by_name = match raw.sort_attribute.as_deref() {
            None | Some("") => false,
            Some(attr) if attr == "name" || known.contains(&attr) => true,
            Some(attr) => {
                details.push((
                    "sort_attribute".to_owned(),
                    format!("unsupported sort attribute '{attr}'"),
                ));
                false
            }
        };
        let descending = match raw.sort_order.as_deref() {
            None | Some("") | Some("ASCENDING") => false,
            Some("DESCENDING") => true,
            Some(other) => {
                details.push((
                    "sort_order".to_owned(),
                    format!("'{other}' is not ASCENDING or DESCENDING"),
                ));
                false
            }
        };
        if !details.is_empty() {
            return Err(Refusal::invalid(kind, details));
        }
        let sort_echo = [
            ("sort_attribute", raw.sort_attribute.clone()),
            ("sort_order", raw.sort_order.clone()),
        ]
        .into_iter()
        .filter_map(|(key, value)| value.map(|v| (key, v)))
        .collect();
        Ok(Self {
            kind: kind.to_owned(),
            sort_echo,
            page_in_metadata: true,
            filter,
            filter_text: raw.filter.filter(|f| !f.trim().is_empty()),
            length,
            offset,
            sort_by_name,
            descending,
        })
    }

    /// Drops the page: every match is answered, from the first.
    pub(crate) fn unpaged(&mut self) {
        self.offset = 0;
        self.length = usize::MAX;
    }

    /// Sorts (when asked) by name and cuts the page; `name` gives each item's name.
    pub(crate) fn page<T>(&self, mut items: Vec<T>, name: impl Fn(&T) -> &str) -> (usize, Vec<T>) {
        if self.sort_by_name {
            items.sort_by(|a, b| name(a).cmp(name(b)));
            if self.descending {
                items.reverse();
            }
        }
        let total = items.len();
        let page = items
            .into_iter()
            .skip(self.offset)
            .take(self.length)
            .collect();
        (total, page)
    }

    /// The list response body.
    pub(crate) fn response(&self, total: usize, entities: Vec<Value>) -> Value {
        let mut metadata = serde_json::Map::new();
        metadata.insert("kind".to_owned(), json!(self.kind));
        metadata.insert("total_matches".to_owned(), json!(total));
        if self.page_in_metadata {
            metadata.insert("length".to_owned(), json!(entities.len()));
            metadata.insert("offset".to_owned(), json!(self.offset));
        }
        if let Some(filter) = &self.filter_text {
            metadata.insert("filter".to_owned(), Value::String(filter.clone()));
        }
        for (key, value) in &self.sort_echo {
            metadata.insert((*key).to_owned(), json!(value));
        }
        super::object([
            ("api_version", json!("3.1")),
            ("metadata", Value::Object(metadata)),
            ("entities", Value::Array(entities)),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_matches_substrings_with_and_and_or() {
        let filter = Filter::parse(
            "vm_name==work;power_state==ON,name==other",
            &["vm_name", "name", "power_state"],
        )
        .unwrap();
        let vm = |name: &'static str, power: &'static str| {
            move |attr: &str| match attr {
                "vm_name" | "name" => Some(name),
                "power_state" => Some(power),
                _ => None,
            }
        };
        assert!(filter.matches(vm("worker-1", "ON")));
        assert!(!filter.matches(vm("worker-1", "OFF")));
        assert!(filter.matches(vm("another", "OFF")));
        assert!(Filter::parse("colour==red", &["name"]).is_err());
    }

    #[test]
    fn length_defaults_to_twenty_and_is_bounded() {
        let q = ListQuery::parse(b"", "vm", &["name"]).unwrap();
        assert_eq!((q.length, q.offset), (DEFAULT_PAGE, 0));
        assert!(ListQuery::parse(br#"{"kind":"vm","length":501}"#, "vm", &["name"]).is_err());
        assert!(ListQuery::parse(br#"{"kind":"image"}"#, "vm", &["name"]).is_err());
        let q = ListQuery::parse(br#"{"kind":"vm","length":2,"offset":1,"sort_attribute":"name","sort_order":"DESCENDING"}"#, "vm", &["name"]).unwrap();
        let (total, page) = q.page(vec!["a", "c", "b", "d"], |s| s);
        assert_eq!(total, 4);
        assert_eq!(page, vec!["c", "b"]);
    }
}
