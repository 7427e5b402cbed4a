//! Reading objects from YAML or JSON text (`---`-separated documents, `List` objects flattened).

use serde_json::Value;

/// A document that is not a Kubernetes object.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The YAML did not parse.
    #[error("document {index}: not valid YAML: {message}")]
    Yaml {
        /// 0-based document index.
        index: usize,
        /// Parser message.
        message: String,
    },
    /// The document has no apiVersion or kind.
    #[error("document {index}: apiVersion and kind are required")]
    NotAnObject {
        /// 0-based document index.
        index: usize,
    },
}

/// Parses every object of a multi-document YAML (or JSON) text.
pub fn documents(text: &str) -> Result<Vec<Value>, LoadError> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(text).map_err(|e| LoadError::Yaml {
        index: 0,
        message: e.to_string(),
    })?;
    let mut objects = vec![];
    for (index, doc) in docs.into_iter().enumerate() {
        if doc.is_null() {
            continue;
        }
        if doc.get("apiVersion").and_then(Value::as_str).is_none()
            || doc.get("kind").and_then(Value::as_str).is_none()
        {
            return Err(LoadError::NotAnObject { index });
        }
        if doc
            .get("kind")
            .and_then(Value::as_str)
            .is_some_and(|k| k.ends_with("List"))
            && let Some(items) = doc.get("items").and_then(Value::as_array)
        {
            objects.extend(items.iter().cloned());
            continue;
        }
        objects.push(doc);
    }
    Ok(objects)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multi_document_yaml_is_split_and_lists_flattened() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Secret, metadata: {name: b}}\n";
        let objects = documents(text).unwrap();
        assert_eq!(objects.len(), 2);
        assert_eq!(objects[1]["kind"], "Secret");
        assert!(matches!(
            documents("foo: bar\n"),
            Err(LoadError::NotAnObject { index: 0 })
        ));
    }
}
