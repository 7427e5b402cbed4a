//! What the MachineSet controller writes: the capacity annotations of
//! [`annotations::machine_set_annotations`], applied with server-side apply under a field
//! manager of their own.
//!
//! Server-side apply makes the API server do the bookkeeping: the keys applied are owned by that
//! manager, a key it stops applying (a GPU type once the GPUs are gone) is removed, and every
//! other key (the MachineAutoscaler's min/max and owner annotations, anything a person wrote)
//! stays untouched. The apply is forced: these keys are this provider's to decide (the
//! cluster-autoscaler-operator copies deprecated keys to the upstream ones only when those are
//! missing, which then makes it their owner).
//!
//! Nothing is sent when every wanted key already has its value and the manager owns no key it no
//! longer wants (read from `metadata.managedFields`): no write in steady state.

pub mod annotations;

use std::collections::{BTreeMap, BTreeSet};

use kube::ResourceExt;
use serde_json::{Value, json};

use crate::api::{MachineSet, PROVIDER_CONFIG_KIND};

/// Field manager of the capacity annotations.
pub const FIELD_MANAGER: &str = "nutanix-machineset-capacity";

/// Whether the MachineSet's template has a Nutanix providerSpec: `kind`
/// `NutanixMachineProviderConfig`, or no kind at all (as the Go provider, which decodes any
/// providerSpec of its cluster). A providerSpec of another kind belongs to another provider.
pub fn is_nutanix(set: &MachineSet) -> bool {
    match set.spec.template.spec.provider_spec.value.as_deref() {
        Some(Value::Object(value)) => value
            .get("kind")
            .and_then(Value::as_str)
            .is_none_or(|kind| kind.is_empty() || kind == PROVIDER_CONFIG_KIND),
        Some(_) => true,
        None => false,
    }
}

/// The annotation keys `manager` owns through server-side apply on the main resource.
pub fn applied_annotation_keys(set: &MachineSet, manager: &str) -> BTreeSet<String> {
    set.metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|entry| {
            entry.manager.as_deref() == Some(manager)
                && entry.operation.as_deref() == Some("Apply")
                && entry.subresource.as_deref().is_none_or(str::is_empty)
        })
        .filter_map(|entry| entry.fields_v1.as_ref())
        .filter_map(|fields| {
            fields
                .0
                .get("f:metadata")?
                .get("f:annotations")?
                .as_object()
        })
        .flat_map(|annotations| annotations.keys())
        .filter_map(|key| key.strip_prefix("f:"))
        .map(str::to_owned)
        .collect()
}

/// The server-side apply body that makes `set` carry `wanted`, or `None` when it already does.
pub fn capacity_apply(set: &MachineSet, wanted: &BTreeMap<String, String>) -> Option<Value> {
    let current = set.annotations();
    let values_match = wanted
        .iter()
        .all(|(key, value)| current.get(key) == Some(value));
    let stale = applied_annotation_keys(set, FIELD_MANAGER)
        .into_iter()
        .any(|key| !wanted.contains_key(&key));
    if values_match && !stale {
        return None;
    }
    Some(json!({
        "apiVersion": "machine.openshift.io/v1beta1",
        "kind": "MachineSet",
        "metadata": {
            "name": set.name_any(),
            "namespace": set.namespace(),
            "annotations": wanted,
        },
    }))
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    fn set(annotations: Value, managed: Value, kind: Option<&str>) -> MachineSet {
        let mut provider_spec = json!({"vcpuSockets": 1});
        if let Some(kind) = kind {
            provider_spec["kind"] = json!(kind);
        }
        serde_json::from_value(json!({
            "apiVersion": "machine.openshift.io/v1beta1", "kind": "MachineSet",
            "metadata": {"name": "ms", "namespace": "openshift-machine-api",
                         "annotations": annotations, "managedFields": managed},
            "spec": {"template": {"spec": {"providerSpec": {"value": provider_spec}}}},
        }))
        .unwrap()
    }

    fn applied(manager: &str, keys: &[&str]) -> Value {
        let annotations: serde_json::Map<String, Value> =
            keys.iter().map(|k| (format!("f:{k}"), json!({}))).collect();
        json!({"manager": manager, "operation": "Apply", "apiVersion": "machine.openshift.io/v1beta1",
               "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:annotations": annotations}}})
    }

    fn wanted(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn nutanix_templates_by_kind() {
        assert!(is_nutanix(&set(
            json!({}),
            json!([]),
            Some(PROVIDER_CONFIG_KIND)
        )));
        assert!(is_nutanix(&set(json!({}), json!([]), None)));
        assert!(!is_nutanix(&set(
            json!({}),
            json!([]),
            Some("VSphereMachineProviderSpec")
        )));
        let mut no_spec = set(json!({}), json!([]), None);
        no_spec.spec.template.spec.provider_spec.value = None;
        assert!(!is_nutanix(&no_spec));
    }

    #[test]
    fn owned_keys_come_from_this_managers_apply_entry_only() {
        let managed = json!([
            applied(FIELD_MANAGER, &["machine.openshift.io/vCPU", "machine.openshift.io/GPU"]),
            applied("cluster-autoscaler-operator", &["machine.openshift.io/cluster-api-autoscaler-node-group-min-size"]),
            {"manager": FIELD_MANAGER, "operation": "Update",
             "fieldsV1": {"f:metadata": {"f:annotations": {"f:x": {}}}}},
        ]);
        assert_eq!(
            applied_annotation_keys(&set(json!({}), managed, None), FIELD_MANAGER),
            BTreeSet::from([
                "machine.openshift.io/GPU".to_owned(),
                "machine.openshift.io/vCPU".to_owned()
            ])
        );
    }

    #[test]
    fn applies_only_what_differs_or_went_stale() {
        let others =
            json!({"machine.openshift.io/cluster-api-autoscaler-node-group-max-size": "3"});
        let mut current = others.clone();
        current["machine.openshift.io/vCPU"] = json!("4");
        let want = wanted(&[("machine.openshift.io/vCPU", "4")]);

        // Steady state: the value is there and nothing stale is owned.
        let steady = set(
            current.clone(),
            json!([applied(FIELD_MANAGER, &["machine.openshift.io/vCPU"])]),
            None,
        );
        assert_eq!(capacity_apply(&steady, &want), None);

        // A changed value: the body carries only our keys, never the autoscaler's.
        let body = capacity_apply(&steady, &wanted(&[("machine.openshift.io/vCPU", "8")])).unwrap();
        assert_eq!(
            body["metadata"]["annotations"],
            json!({"machine.openshift.io/vCPU": "8"})
        );
        assert_eq!(body["metadata"]["name"], "ms");
        assert_eq!(body["kind"], "MachineSet");

        // A key we applied but no longer want: applying without it removes it.
        let stale = set(
            current,
            json!([applied(
                FIELD_MANAGER,
                &[
                    "machine.openshift.io/vCPU",
                    "capacity.cluster-autoscaler.kubernetes.io/gpu-type"
                ]
            )]),
            None,
        );
        assert!(capacity_apply(&stale, &want).is_some());

        // Missing entirely (first reconcile).
        assert!(capacity_apply(&set(others, json!([]), None), &want).is_some());
    }
}
