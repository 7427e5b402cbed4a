//! The cluster-autoscaler-operator's part for `MachineAutoscaler` objects: it writes their bounds
//! on the target MachineSet as the node-group annotations the autoscaler reads, plus the owner
//! annotation, and touches no other key (the controller's capacity annotations must survive, and
//! the controller must leave these alone).
//!
//! Not simulated: the finalizer on the MachineAutoscaler, removing the annotations when it is
//! deleted, `status.lastTargetRef`, and retargeting.

use std::collections::BTreeMap;

use crate::machine_api::MachineSet;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::autoscaler::{MAX_SIZE_ANNOTATION, MIN_SIZE_ANNOTATION};

/// The annotation naming the MachineAutoscaler that owns a MachineSet's bounds.
pub const OWNER_ANNOTATION: &str = "autoscaling.openshift.io/machineautoscaler";

/// Why a MachineAutoscaler could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum MachineAutoscalerError {
    #[error("MachineAutoscaler {name}: {field} is missing or not {expected}")]
    Field {
        name: String,
        field: &'static str,
        expected: &'static str,
    },
    #[error("MachineAutoscaler {name}: target kind {kind:?} is not supported (only MachineSet)")]
    TargetKind { name: String, kind: String },
    #[error("{action}: {source}")]
    Api {
        action: String,
        source: Box<kube::Error>,
    },
}

/// What a MachineAutoscaler asks for: the target MachineSet and the annotations to write on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetAnnotations {
    pub machine_set: String,
    pub annotations: BTreeMap<String, String>,
}

/// Reads a MachineAutoscaler (as JSON) into the annotations its operator writes.
pub fn target_annotations(
    machine_autoscaler: &Value,
) -> Result<TargetAnnotations, MachineAutoscalerError> {
    let name = machine_autoscaler["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let namespace = machine_autoscaler["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default();
    let spec = &machine_autoscaler["spec"];
    let number = |field: &'static str| {
        spec[field]
            .as_i64()
            .ok_or_else(|| MachineAutoscalerError::Field {
                name: name.clone(),
                field,
                expected: "a whole number",
            })
    };
    let (min, max) = (number("minReplicas")?, number("maxReplicas")?);
    let kind = spec["scaleTargetRef"]["kind"].as_str().unwrap_or_default();
    if kind != "MachineSet" {
        return Err(MachineAutoscalerError::TargetKind {
            name,
            kind: kind.to_owned(),
        });
    }
    let machine_set = spec["scaleTargetRef"]["name"]
        .as_str()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| MachineAutoscalerError::Field {
            name: name.clone(),
            field: "scaleTargetRef.name",
            expected: "a name",
        })?
        .to_owned();
    Ok(TargetAnnotations {
        machine_set,
        annotations: BTreeMap::from([
            (MIN_SIZE_ANNOTATION.to_owned(), min.to_string()),
            (MAX_SIZE_ANNOTATION.to_owned(), max.to_string()),
            (OWNER_ANNOTATION.to_owned(), format!("{namespace}/{name}")),
        ]),
    })
}

fn api_error(action: String) -> impl FnOnce(kube::Error) -> MachineAutoscalerError {
    move |source| MachineAutoscalerError::Api {
        action,
        source: Box::new(source),
    }
}

/// Writes the bounds of every MachineAutoscaler of `namespace` on its MachineSet (a merge patch of
/// those annotations only); returns what it wrote.
pub async fn apply_machine_autoscalers(
    client: &Client,
    namespace: &str,
) -> Result<Vec<TargetAnnotations>, MachineAutoscalerError> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("autoscaling.openshift.io", "v1beta1", "MachineAutoscaler"),
        "machineautoscalers",
    );
    let autoscalers: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &resource);
    let machine_sets: Api<MachineSet> = Api::namespaced(client.clone(), namespace);
    let list = autoscalers
        .list(&ListParams::default())
        .await
        .map_err(api_error("list MachineAutoscalers".to_owned()))?;
    let mut applied = Vec::new();
    for autoscaler in list.items {
        let name = autoscaler.name_any();
        let value =
            serde_json::to_value(&autoscaler).map_err(|_| MachineAutoscalerError::Field {
                name: name.clone(),
                field: "metadata",
                expected: "an object",
            })?;
        let target = target_annotations(&value)?;
        machine_sets
            .patch(
                &target.machine_set,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": target.annotations}})),
            )
            .await
            .map_err(api_error(format!(
                "annotate MachineSet {} for MachineAutoscaler {name}",
                target.machine_set
            )))?;
        applied.push(target);
    }
    Ok(applied)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine_autoscaler(kind: &str) -> Value {
        json!({
            "apiVersion": "autoscaling.openshift.io/v1beta1", "kind": "MachineAutoscaler",
            "metadata": {"name": "ma", "namespace": "openshift-machine-api"},
            "spec": {"minReplicas": 1, "maxReplicas": 4,
                "scaleTargetRef": {"apiVersion": "machine.openshift.io/v1beta1", "kind": kind, "name": "win"}},
        })
    }

    #[test]
    fn bounds_and_owner_become_the_targets_annotations() {
        let target = target_annotations(&machine_autoscaler("MachineSet")).unwrap();
        assert_eq!(target.machine_set, "win");
        assert_eq!(target.annotations[MIN_SIZE_ANNOTATION], "1");
        assert_eq!(target.annotations[MAX_SIZE_ANNOTATION], "4");
        assert_eq!(
            target.annotations[OWNER_ANNOTATION],
            "openshift-machine-api/ma"
        );
        assert_eq!(target.annotations.len(), 3);
    }

    #[test]
    fn other_targets_and_missing_bounds_are_refused() {
        assert!(matches!(
            target_annotations(&machine_autoscaler("Deployment")),
            Err(MachineAutoscalerError::TargetKind { .. })
        ));
        let mut no_max = machine_autoscaler("MachineSet");
        no_max["spec"]
            .as_object_mut()
            .unwrap()
            .remove("maxReplicas");
        let error = target_annotations(&no_max).unwrap_err();
        assert!(error.to_string().contains("maxReplicas"), "{error}");
    }
}
