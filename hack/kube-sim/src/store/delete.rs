//! Deletes and evictions: finalizers and propagation policies hold an object as deleting, the
//! rest is removed; an eviction asks the PodDisruptionBudgets first.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult};
use crate::meta::{finalizers, is_deleting, meta_str, metadata_mut, now_rfc3339, set_finalizers};
use crate::resources::{ResourceDef, resource_from_crd};
use crate::selector::LabelSelector;

use super::disruption::{pdb_status, pod_ready};
use super::{DeleteOptions, EventType, Inner, ListParams, Store, Stored, scan, subject};

impl Store {
    /// Deletes an object: marks it deleting when finalizers (or the propagation policy) hold it, removes it
    /// otherwise. Returns the object as last seen.
    pub fn delete(
        &self,
        def: &ResourceDef,
        namespace: &str,
        name: &str,
        options: &DeleteOptions,
    ) -> ApiResult<Stored> {
        let namespace = if def.namespaced { namespace } else { "" };
        let mut inner = self.write();
        let stored = self.delete_locked(&mut inner, def, namespace, name, options)?;
        if def.group == "policy" || (def.group.is_empty() && def.plural == "pods") {
            self.sync_pdbs(&mut inner, namespace);
        }
        Ok(stored)
    }

    pub(super) fn delete_locked(
        &self,
        inner: &mut Inner,
        def: &ResourceDef,
        namespace: &str,
        name: &str,
        options: &DeleteOptions,
    ) -> ApiResult<Stored> {
        let current = inner.lookup(def, namespace, name)?;
        let preconditions = [
            ("UID", "uid", &options.uid),
            (
                "ResourceVersion",
                "resourceVersion",
                &options.resource_version,
            ),
        ];
        for (label, field, wanted) in preconditions {
            let actual = meta_str(&current.value, field);
            if let Some(wanted) = wanted
                && wanted != actual
            {
                return Err(ApiError::conflict(
                    subject(def, name),
                    &format!(
                        "Precondition failed: {label} in precondition: {wanted}, {label} in object meta: {actual}"
                    ),
                ));
            }
        }
        let mut next = (*current.value).clone();
        let mut list = finalizers(&next);
        let propagation_finalizer = match options.propagation.as_deref() {
            Some("Foreground") => Some("foregroundDeletion"),
            Some("Orphan") => Some("orphan"),
            _ => None,
        };
        if let Some(f) = propagation_finalizer
            && !list.iter().any(|x| x == f)
        {
            list.push(f.to_string());
            set_finalizers(&mut next, &list);
        }
        if options.dry_run {
            return Stored::new(next);
        }
        let is_namespace = def.group.is_empty() && def.plural == "namespaces";
        if is_deleting(&current.value) && *current.value == next {
            return Ok(current);
        }
        if !list.is_empty() || is_namespace {
            let meta = metadata_mut(&mut next);
            if !meta.contains_key("deletionTimestamp") {
                meta.insert("deletionTimestamp".into(), json!(now_rfc3339()));
                meta.insert("deletionGracePeriodSeconds".into(), json!(0));
            }
            if is_namespace {
                next["status"] = json!({"phase": "Terminating"});
            }
            let stored = self.commit(
                inner,
                def,
                namespace,
                name,
                next,
                Some(current.value.clone()),
                EventType::Modified,
            )?;
            self.gc_wakeup.notify_one();
            return Ok(stored);
        }
        self.remove(inner, def, namespace, name, next)
    }

    /// Deletes every object of a resource in a namespace matching the selectors.
    pub fn delete_collection(
        &self,
        def: &ResourceDef,
        params: &ListParams<'_>,
        options: &DeleteOptions,
    ) -> ApiResult<Vec<Stored>> {
        let names: Vec<(String, String)> = self
            .list(
                def,
                &ListParams {
                    limit: None,
                    continue_token: None,
                    ..*params
                },
            )?
            .items
            .iter()
            .map(|s| {
                (
                    meta_str(&s.value, "namespace").to_string(),
                    meta_str(&s.value, "name").to_string(),
                )
            })
            .collect();
        let mut deleted = vec![];
        for (ns, name) in names {
            match self.delete(def, &ns, &name, options) {
                Ok(stored) => deleted.push(stored),
                Err(e) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(deleted)
    }

    pub(super) fn remove(
        &self,
        inner: &mut Inner,
        def: &ResourceDef,
        namespace: &str,
        name: &str,
        last: Value,
    ) -> ApiResult<Stored> {
        let key = (def.group.clone(), def.plural.clone());
        let previous = inner
            .collections
            .get_mut(&key)
            .and_then(|c| c.objects.remove(&(namespace.to_string(), name.to_string())))
            .map(|s| {
                inner.uids.remove(&s.gc.uid);
                s.value
            });
        if def.group == "apiextensions.k8s.io" {
            self.unregister_crd(inner, &last);
        }
        let stored = self.record(inner, &key, namespace, last, previous, EventType::Deleted)?;
        self.gc_wakeup.notify_one();
        Ok(stored)
    }

    fn unregister_crd(&self, inner: &mut Inner, crd: &Value) {
        let Ok(crd_def) = resource_from_crd(crd) else {
            return;
        };
        let key = (crd_def.group.clone(), crd_def.plural.clone());
        let Some(collection) = inner.collections.remove(&key) else {
            return;
        };
        for ((ns, _), stored) in collection.objects {
            inner.uids.remove(&stored.gc.uid);
            let last = (*stored.value).clone();
            // Serialization of a stored object cannot fail.
            let _ = self.record(
                inner,
                &key,
                &ns,
                last,
                Some(stored.value),
                EventType::Deleted,
            );
        }
    }

    /// Evicts a pod, honouring PodDisruptionBudgets (429 when one does not allow the disruption). The pod is
    /// deleted at once (no kubelet: grace periods are not simulated).
    pub fn evict(&self, namespace: &str, name: &str, options: &DeleteOptions) -> ApiResult<Stored> {
        let mut inner = self.write();
        let pods_key = (String::new(), "pods".to_string());
        let pod_def = inner
            .collections
            .get(&pods_key)
            .map(|c| c.def.clone())
            .ok_or_else(|| ApiError::internal("pods are not served"))?;
        let pod = inner
            .collections
            .get(&pods_key)
            .and_then(|c| c.objects.get(&(namespace.to_string(), name.to_string())))
            .cloned()
            .ok_or_else(|| ApiError::not_found(subject(&pod_def, name)))?;
        let phase = pod
            .value
            .pointer("/status/phase")
            .and_then(Value::as_str)
            .unwrap_or("Pending");
        let terminal_or_pending = matches!(phase, "Succeeded" | "Failed" | "Pending");
        if !terminal_or_pending && !is_deleting(&pod.value) {
            let pdb_key = ("policy".to_string(), "poddisruptionbudgets".to_string());
            let guarding: Vec<Stored> = inner
                .collections
                .get(&pdb_key)
                .map(|c| {
                    scan(c, Some(namespace))
                        .filter(|pdb| {
                            LabelSelector::from_object(pdb.value.pointer("/spec/selector"))
                                .is_ok_and(|s| !s.is_empty() && s.matches(&pod.value))
                        })
                        .cloned()
                        .collect()
                })
                .unwrap_or_default();
            if guarding.len() > 1 {
                return Err(ApiError::internal(
                    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
                ));
            }
            if let Some(pdb) = guarding.first() {
                let pods: Vec<Arc<Value>> = inner
                    .collections
                    .get(&pods_key)
                    .map(|c| scan(c, Some(namespace)).map(|s| s.value.clone()).collect())
                    .unwrap_or_default();
                let status = pdb_status(&pdb.value, &pods);
                let allowed = status
                    .get("disruptionsAllowed")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                let healthy = status
                    .get("currentHealthy")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                let desired = status
                    .get("desiredHealthy")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                let blocked = if pod_ready(&pod.value) {
                    allowed <= 0
                } else {
                    healthy < desired
                };
                if blocked {
                    let pdb_name = meta_str(&pdb.value, "name");
                    return Err(ApiError::too_many_requests(
                        "Cannot evict pod as it would violate the pod's disruption budget.",
                        json!([{"reason": "DisruptionBudget", "message": format!("The disruption budget {pdb_name} needs {desired} healthy pods and has {healthy} currently")}]),
                    ));
                }
            }
        }
        let stored = self.delete_locked(&mut inner, &pod_def, namespace, name, options)?;
        self.sync_pdbs(&mut inner, namespace);
        Ok(stored)
    }
}
