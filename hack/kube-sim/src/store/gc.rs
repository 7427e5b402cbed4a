//! The garbage collector: dependents whose owners are gone, `foregroundDeletion` and `orphan`
//! finalizers, terminating namespaces emptied; and what tells it whether a pass has work.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde_json::Value;

use crate::meta::{finalizers, is_deleting, meta_str, metadata_mut, set_finalizers};
use crate::resources::ResourceDef;

use super::{DeleteOptions, EventType, Store, Stored};

/// The fields of an object that decide whether a garbage-collection pass has work.
#[derive(Debug, Default)]
pub(super) struct GcFacts {
    pub(super) uid: String,
    /// The uids of its owner references.
    owners: Vec<String>,
    /// Being deleted, and held by a finalizer the collector itself removes (`orphan`,
    /// `foregroundDeletion`), or a namespace being emptied.
    awaits_collector: bool,
}

impl GcFacts {
    pub(super) fn of(object: &Value) -> Self {
        let owners = object
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .map(|refs| {
                refs.iter()
                    .map(|r| {
                        r.get("uid")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned()
                    })
                    .collect()
            })
            .unwrap_or_default();
        let namespace = object.get("apiVersion").and_then(Value::as_str) == Some("v1")
            && object.get("kind").and_then(Value::as_str) == Some("Namespace");
        let awaits_collector = is_deleting(object)
            && (namespace
                || finalizers(object)
                    .iter()
                    .any(|f| f == "orphan" || f == "foregroundDeletion"));
        Self {
            uid: meta_str(object, "uid").to_owned(),
            owners,
            awaits_collector,
        }
    }
}

impl Store {
    /// One garbage-collection pass: deletes dependents whose owners are all gone, honours `foregroundDeletion` and
    /// `orphan` finalizers, empties terminating namespaces. Returns how many objects it changed.
    pub fn collect_garbage(&self) -> usize {
        let mut changed = 0;
        // Each pass may free more (chains of owners); bounded so a cycle cannot spin.
        for _ in 0..16 {
            let n = self.gc_pass();
            changed += n;
            if n == 0 {
                break;
            }
        }
        changed
    }

    /// Whether a pass could change anything: a namespace being emptied, an object being deleted that
    /// holds a finalizer only the collector removes (`orphan`, `foregroundDeletion`: its dependents are
    /// orphaned or deleted first), or an owner reference to a missing uid. An object held by any other
    /// finalizer waits for that finalizer's controller, not for the collector, so it gives a pass
    /// nothing to do: the real collector also acts only on changes to its dependency graph
    /// (kubernetes/kubernetes `pkg/controller/garbagecollector/graph_builder.go`), not on every
    /// deleting object. Checked under the read lock from facts read at each write and the uids kept
    /// with them, so that idle checks neither block writers nor rebuild anything.
    fn gc_needed(&self) -> bool {
        let inner = self.read();
        inner
            .collections
            .values()
            .flat_map(|c| c.objects.values())
            .any(|s| {
                s.gc.awaits_collector
                    || s.gc
                        .owners
                        .iter()
                        .any(|owner| !inner.uids.contains(owner.as_str()))
            })
    }

    fn gc_pass(&self) -> usize {
        if !self.gc_needed() {
            return 0;
        }
        let mut inner = self.write();
        let mut uids: HashMap<String, Arc<Value>> = HashMap::new();
        let mut all: Vec<(Arc<ResourceDef>, Stored)> = vec![];
        for c in inner.collections.values() {
            for s in c.objects.values() {
                uids.insert(meta_str(&s.value, "uid").to_string(), s.value.clone());
                all.push((c.def.clone(), s.clone()));
            }
        }
        let terminating: HashSet<String> = inner
            .collections
            .get(&(String::new(), "namespaces".to_string()))
            .map(|c| {
                c.objects
                    .values()
                    .filter(|s| is_deleting(&s.value))
                    .map(|s| meta_str(&s.value, "name").to_string())
                    .collect()
            })
            .unwrap_or_default();
        let mut changed = 0;
        let mut dependents_of: HashMap<String, usize> = HashMap::new();
        let background = DeleteOptions::default();
        for (def, stored) in &all {
            let ns = meta_str(&stored.value, "namespace").to_string();
            let name = meta_str(&stored.value, "name").to_string();
            if terminating.contains(&ns) {
                if !is_deleting(&stored.value)
                    && self
                        .delete_locked(&mut inner, def, &ns, &name, &background)
                        .is_ok()
                {
                    changed += 1;
                }
                continue;
            }
            let refs: Vec<Value> = stored
                .value
                .pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            if refs.is_empty() {
                continue;
            }
            let owners: Vec<Option<&Arc<Value>>> = refs
                .iter()
                .map(|r| uids.get(r.get("uid").and_then(Value::as_str).unwrap_or_default()))
                .collect();
            for owner in owners.iter().flatten() {
                *dependents_of
                    .entry(meta_str(owner, "uid").to_string())
                    .or_default() += 1;
            }
            let orphaned_by: Vec<&str> = owners
                .iter()
                .flatten()
                .filter(|o| is_deleting(o) && finalizers(o).iter().any(|f| f == "orphan"))
                .map(|o| meta_str(o, "uid"))
                .collect();
            let all_gone = owners.iter().all(Option::is_none);
            let foreground = owners
                .iter()
                .flatten()
                .any(|o| is_deleting(o) && finalizers(o).iter().any(|f| f == "foregroundDeletion"));
            if (all_gone || foreground) && !is_deleting(&stored.value) {
                if self
                    .delete_locked(&mut inner, def, &ns, &name, &background)
                    .is_ok()
                {
                    changed += 1;
                }
            } else if !orphaned_by.is_empty() {
                let mut next = (*stored.value).clone();
                let kept: Vec<Value> = refs
                    .into_iter()
                    .filter(|r| {
                        !orphaned_by
                            .contains(&r.get("uid").and_then(Value::as_str).unwrap_or_default())
                    })
                    .collect();
                if kept.is_empty() {
                    metadata_mut(&mut next).remove("ownerReferences");
                } else {
                    metadata_mut(&mut next).insert("ownerReferences".into(), Value::from(kept));
                }
                if self
                    .commit(
                        &mut inner,
                        def,
                        &ns,
                        &name,
                        next,
                        Some(stored.value.clone()),
                        EventType::Modified,
                    )
                    .is_ok()
                {
                    changed += 1;
                }
            }
        }
        // Owners waiting on their dependents.
        for (def, stored) in &all {
            if !is_deleting(&stored.value) {
                continue;
            }
            let uid = meta_str(&stored.value, "uid");
            let list = finalizers(&stored.value);
            let has_dependents = dependents_of.get(uid).copied().unwrap_or(0) > 0;
            let kept: Vec<String> = list
                .iter()
                .filter(|f| match f.as_str() {
                    "orphan" => false,
                    "foregroundDeletion" => has_dependents,
                    _ => true,
                })
                .cloned()
                .collect();
            let ns = meta_str(&stored.value, "namespace").to_string();
            let name = meta_str(&stored.value, "name").to_string();
            let is_namespace = def.group.is_empty() && def.plural == "namespaces";
            let namespace_empty = is_namespace
                && !all
                    .iter()
                    .any(|(d, s)| d.namespaced && meta_str(&s.value, "namespace") == name);
            if kept.len() != list.len() || (namespace_empty && kept.is_empty()) {
                let mut next = (*stored.value).clone();
                set_finalizers(&mut next, &kept);
                let still_current = inner
                    .collections
                    .get(&(def.group.clone(), def.plural.clone()))
                    .and_then(|c| c.objects.get(&(ns.clone(), name.clone())))
                    .is_some_and(|s| Arc::ptr_eq(&s.value, &stored.value));
                if !still_current {
                    continue;
                }
                let result = if kept.is_empty() && (!is_namespace || namespace_empty) {
                    self.remove(&mut inner, def, &ns, &name, next)
                } else {
                    self.commit(
                        &mut inner,
                        def,
                        &ns,
                        &name,
                        next,
                        Some(stored.value.clone()),
                        EventType::Modified,
                    )
                };
                if result.is_ok() {
                    changed += 1;
                }
            }
        }
        changed
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::store::StoreConfig;

    fn store() -> Store {
        Store::new(StoreConfig {
            history_limit: 100,
            broadcast_capacity: 100,
        })
    }

    fn config_map(name: &str, metadata: Value) -> Value {
        let mut object = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata});
        object["metadata"]["name"] = json!(name);
        object
    }

    #[test]
    fn an_object_held_by_another_controllers_finalizer_gives_the_collector_nothing_to_do() {
        let store = store();
        let def = store.resource("", "configmaps").unwrap();
        let held = config_map("held", json!({"finalizers": ["example.com/held"]}));
        store.create(&def, "default", held, false).unwrap();
        store
            .delete(&def, "default", "held", &DeleteOptions::default())
            .unwrap();
        assert!(is_deleting(
            &store.get(&def, "default", "held").unwrap().value
        ));
        assert!(!store.gc_needed(), "only the finalizer's owner can end it");

        // A dependent whose owner is gone is the collector's work, once.
        let dependent = config_map(
            "dependent",
            json!({"ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "gone", "uid": "no-such-uid"}]}),
        );
        store.create(&def, "default", dependent, false).unwrap();
        assert!(store.gc_needed());
        assert_eq!(store.collect_garbage(), 1);
        assert!(store.get(&def, "default", "dependent").is_err());
        assert!(!store.gc_needed());
    }

    #[test]
    fn a_dependent_becomes_the_collectors_work_when_its_owner_is_removed() {
        let store = store();
        let def = store.resource("", "configmaps").unwrap();
        let owner = store
            .create(&def, "default", config_map("owner", json!({})), false)
            .unwrap();
        let uid = meta_str(&owner.value, "uid").to_owned();
        let dependent = config_map(
            "dependent",
            json!({"ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid}]}),
        );
        store.create(&def, "default", dependent, false).unwrap();
        assert!(!store.gc_needed(), "the owner is there");
        store
            .delete(&def, "default", "owner", &DeleteOptions::default())
            .unwrap();
        assert!(store.gc_needed(), "the owner's uid is gone");
        assert_eq!(store.collect_garbage(), 1);
        assert!(!store.gc_needed());
    }

    #[test]
    fn an_owner_deleted_with_orphan_or_foreground_propagation_waits_for_the_collector() {
        for propagation in ["Orphan", "Foreground"] {
            let store = store();
            let def = store.resource("", "configmaps").unwrap();
            store
                .create(&def, "default", config_map("owner", json!({})), false)
                .unwrap();
            let options = DeleteOptions {
                propagation: Some(propagation.to_owned()),
                ..DeleteOptions::default()
            };
            store.delete(&def, "default", "owner", &options).unwrap();
            assert!(store.gc_needed(), "{propagation}");
            store.collect_garbage();
            assert!(
                store.get(&def, "default", "owner").is_err(),
                "{propagation}: no dependents, so the owner goes"
            );
            assert!(!store.gc_needed(), "{propagation}");
        }
    }
}
