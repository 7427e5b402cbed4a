//! Creates and updates: the checks a write passes (type, namespace, preconditions), the registry
//! strategies' rules applied to it ([`super::rules`]), then the commit.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult};
use crate::meta::{
    finalizers, invalid_label, invalid_subdomain, is_deleting, meta_str, metadata_mut, new_uid,
    now_rfc3339, random_suffix,
};
use crate::resources::{ResourceDef, resource_from_crd};

use super::rules::{
    crd_status, decode_builtin, field_scope, merge_for_update, prepare_create,
    same_but_managed_times, spec_part,
};
use super::{Collection, EventType, Store, Stored, WriteTarget, subject};

impl Store {
    /// Creates an object of a resource, in a namespace (ignored for cluster-scoped resources).
    pub fn create(
        &self,
        def: &ResourceDef,
        namespace: &str,
        mut object: Value,
        dry_run: bool,
    ) -> ApiResult<Stored> {
        self.check_type(def, &mut object)?;
        decode_builtin(def, &mut object)?;
        let namespace = if def.namespaced { namespace } else { "" };
        let body_ns = meta_str(&object, "namespace").to_string();
        if def.namespaced && !body_ns.is_empty() && body_ns != namespace {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        let mut inner = self.write();
        let mut name = meta_str(&object, "name").to_string();
        if name.is_empty() {
            let prefix = meta_str(&object, "generateName").to_string();
            if prefix.is_empty() {
                return Err(ApiError::invalid(
                    subject(def, ""),
                    &def.kind,
                    "metadata.name",
                    "Required value: name or generateName is required",
                ));
            }
            name = format!("{prefix}{}", random_suffix());
        }
        let invalid = if def.plural == "namespaces" {
            invalid_label(&name)
        } else {
            invalid_subdomain(&name)
        };
        if let Some(why) = invalid {
            return Err(ApiError::invalid(
                subject(def, &name),
                &def.kind,
                "metadata.name",
                &format!("Invalid value: {name:?}: {why}"),
            ));
        }
        if def.namespaced {
            inner.check_namespace_open(namespace)?;
        }
        let key = (def.group.clone(), def.plural.clone());
        if inner.collections.get(&key).is_some_and(|c| {
            c.objects
                .contains_key(&(namespace.to_string(), name.clone()))
        }) {
            return Err(ApiError::already_exists(subject(def, &name)));
        }
        let meta = metadata_mut(&mut object);
        meta.insert("name".into(), json!(name));
        if def.namespaced {
            meta.insert("namespace".into(), json!(namespace));
        } else {
            meta.remove("namespace");
        }
        meta.insert("uid".into(), json!(new_uid()));
        meta.insert("creationTimestamp".into(), json!(now_rfc3339()));
        meta.remove("deletionTimestamp");
        meta.remove("deletionGracePeriodSeconds");
        meta.remove("resourceVersion");
        meta.remove("selfLink");
        if def.spec_generation {
            meta.insert("generation".into(), json!(1));
        } else {
            meta.remove("generation");
        }
        if let Some(map) = object.as_object_mut() {
            map.insert(
                "apiVersion".into(),
                json!(def.api_version(def.preferred_version())),
            );
        }
        if let Some((field, message)) = crate::meta::invalid_labels_or_annotations(&object) {
            return Err(ApiError::invalid(
                subject(def, &name),
                &def.kind,
                &field,
                &message,
            ));
        }
        prepare_create(def, &mut object)?;
        if let Some(schema) = &def.schema {
            crate::schema::apply_to_object(&mut object, schema);
        }
        let crd_def = if def.group == "apiextensions.k8s.io" {
            let new_def = resource_from_crd(&object).map_err(|e| {
                ApiError::invalid(subject(def, &name), &def.kind, &e.field, &e.message)
            })?;
            if inner
                .collections
                .contains_key(&(new_def.group.clone(), new_def.plural.clone()))
            {
                return Err(ApiError::invalid(
                    subject(def, &name),
                    &def.kind,
                    "spec.names.plural",
                    "Invalid value: the resource is already served by another definition",
                ));
            }
            object["status"] = crd_status(&object);
            Some(new_def)
        } else {
            None
        };
        if dry_run {
            return Stored::new(object);
        }
        if let Some(new_def) = crd_def {
            let new_key = (new_def.group.clone(), new_def.plural.clone());
            inner.collections.insert(
                new_key,
                Collection {
                    def: Arc::new(new_def),
                    objects: BTreeMap::new(),
                },
            );
        }
        let stored = self.commit(
            &mut inner,
            def,
            namespace,
            &name,
            object,
            None,
            EventType::Added,
        )?;
        if def.group == "policy" || (def.group.is_empty() && def.plural == "pods") {
            self.sync_pdbs(&mut inner, namespace);
        }
        Ok(stored)
    }

    /// Creates an object from its own `apiVersion`, `kind` and `metadata.namespace` (direct Rust access).
    pub fn create_value(&self, object: Value) -> ApiResult<Stored> {
        let def = self.def_of(&object)?;
        let namespace = meta_str(&object, "namespace").to_string();
        let namespace = if def.namespaced && namespace.is_empty() {
            "default".to_string()
        } else {
            namespace
        };
        self.create(&def, &namespace, object, false)
    }

    /// Finds the resource of an object from its `apiVersion` and `kind`.
    pub fn def_of(&self, object: &Value) -> ApiResult<Arc<ResourceDef>> {
        let api_version = object
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let kind = object
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default();
        self.resource_for_kind(api_version, kind).ok_or_else(|| {
            ApiError::bad_request(format!(
                "no resource serves apiVersion {api_version:?} kind {kind:?}"
            ))
        })
    }

    fn check_type(&self, def: &ResourceDef, object: &mut Value) -> ApiResult<()> {
        if !object.is_object() {
            return Err(ApiError::bad_request(
                "the request body is not a JSON object",
            ));
        }
        let api_version = object
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let kind = object
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if !kind.is_empty() && kind != def.kind {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({kind}) does not match the expected kind ({})",
                def.kind
            )));
        }
        match api_version.rsplit_once('/') {
            Some((group, version)) if group == def.group && def.serves(version) => {}
            None if def.group.is_empty() && def.serves(&api_version) => {}
            _ if api_version.is_empty() => {}
            _ => {
                return Err(ApiError::bad_request(format!(
                    "the API version in the data ({api_version}) does not match the expected API version ({})",
                    def.api_version(def.preferred_version())
                )));
            }
        };
        if let Some(map) = object.as_object_mut() {
            map.insert("kind".into(), json!(def.kind));
        }
        Ok(())
    }

    /// Replaces an object (PUT), or its status. `require_rv` rejects updates without a resourceVersion (custom
    /// resources do not allow unconditional updates).
    #[allow(clippy::too_many_arguments)] // the parts of a PUT; a struct would only rename them
    pub fn update(
        &self,
        def: &ResourceDef,
        namespace: &str,
        name: &str,
        mut object: Value,
        target: WriteTarget,
        dry_run: bool,
        manager: Option<&str>,
    ) -> ApiResult<Stored> {
        self.check_type(def, &mut object)?;
        let body_name = meta_str(&object, "name");
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::bad_request(
                "the name of the object does not match the name on the URL",
            ));
        }
        if meta_str(&object, "resourceVersion").is_empty()
            && def.custom
            && target != WriteTarget::Whole
        {
            return Err(ApiError::invalid(
                subject(def, name),
                &def.kind,
                "metadata.resourceVersion",
                "Invalid value: 0x0: must be specified for an update",
            ));
        }
        self.modify(def, namespace, name, target, dry_run, |current| {
            if let Some(manager) = manager {
                let subresource = if target == WriteTarget::Status {
                    "status"
                } else {
                    ""
                };
                crate::fields::record_update(
                    current,
                    &mut object,
                    manager,
                    field_scope(def, target),
                    subresource,
                    &now_rfc3339(),
                );
            }
            Ok(object)
        })
    }

    /// Atomically reads, transforms and writes an object (patches). The closure sees the current object and
    /// returns the desired one; a `metadata.resourceVersion` in the result that differs from the current one is a
    /// 409 Conflict.
    pub fn modify<F>(
        &self,
        def: &ResourceDef,
        namespace: &str,
        name: &str,
        target: WriteTarget,
        dry_run: bool,
        change: F,
    ) -> ApiResult<Stored>
    where
        F: FnOnce(&Value) -> ApiResult<Value>,
    {
        let namespace = if def.namespaced { namespace } else { "" };
        let mut inner = self.write();
        let current = inner.lookup(def, namespace, name)?;
        let mut desired = change(&current.value)?;
        if !desired.is_object() {
            return Err(ApiError::bad_request("the result is not a JSON object"));
        }
        decode_builtin(def, &mut desired)?;
        let wanted_rv = meta_str(&desired, "resourceVersion");
        if !wanted_rv.is_empty() && wanted_rv != meta_str(&current.value, "resourceVersion") {
            return Err(ApiError::conflict(
                subject(def, name),
                "the object has been modified; please apply your changes to the latest version and try again",
            ));
        }
        let desired_name = meta_str(&desired, "name");
        if !desired_name.is_empty() && desired_name != name {
            return Err(ApiError::bad_request(format!(
                "metadata.name: the name of the object ({desired_name}) does not match the name on the URL ({name})"
            )));
        }
        let next = merge_for_update(def, &current.value, &mut desired, target)?;
        if def.group == "apiextensions.k8s.io" && spec_part(&current.value) != spec_part(&next) {
            let new_def = resource_from_crd(&next).map_err(|e| {
                ApiError::invalid(subject(def, name), &def.kind, &e.field, &e.message)
            })?;
            if !dry_run
                && let Some(c) = inner
                    .collections
                    .get_mut(&(new_def.group.clone(), new_def.plural.clone()))
            {
                c.def = Arc::new(new_def);
            }
        }
        if dry_run {
            return Stored::new(next);
        }
        if *current.value == next || same_but_managed_times(&current.value, &next) {
            // A no-op write (such as re-applying the same configuration) changes nothing, as in the real server.
            return Ok(current);
        }
        let stored = if is_deleting(&next) && finalizers(&next).is_empty() {
            self.remove(&mut inner, def, namespace, name, next)?
        } else {
            self.commit(
                &mut inner,
                def,
                namespace,
                name,
                next,
                Some(current.value.clone()),
                EventType::Modified,
            )?
        };
        if def.group == "policy" || (def.group.is_empty() && def.plural == "pods") {
            self.sync_pdbs(&mut inner, namespace);
        }
        Ok(stored)
    }
}
