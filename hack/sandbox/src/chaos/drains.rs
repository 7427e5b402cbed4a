//! Drains held and let go: a pod guarded by a PodDisruptionBudget on some Nodes blocks their
//! drains until the budgets are deleted.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use nutanix_machine_controller::api::phase;
use rand::Rng;
use serde_json::{Value, json};

use super::Soak;

impl Soak<'_> {
    /// Puts a pod guarded by a PodDisruptionBudget (minAvailable 1) on some Running Machines'
    /// Nodes: their drains are blocked until [`Self::release_drains`].
    pub(super) async fn block_drains(&mut self) -> Result<(), String> {
        self.look(true).await?;
        let mut nodes: Vec<String> = self
            .last
            .machines
            .iter()
            .filter(|m| m.phase() == phase::RUNNING)
            .filter_map(|m| m.status.as_ref()?.node_ref.as_ref()?.name.clone())
            .collect();
        nodes.sort();
        let namespace = self.world.namespace().to_owned();
        let client = self.world.client().clone();
        let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
        let budgets: Api<PodDisruptionBudget> = Api::namespaced(client, &namespace);
        for index in 0..self.options.drain_blockers.min(nodes.len()) {
            let pick = self.rng.random_range(0..nodes.len());
            let node = nodes.swap_remove(pick);
            let name = format!("chaos-drain-{index}");
            let pod: Pod = from_json(json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
                "spec": {"nodeName": node, "containers": [{"name": "app", "image": "registry.invalid/chaos:1"}]},
            }))?;
            pods.create(&PostParams::default(), &pod)
                .await
                .map_err(|e| format!("create pod {name}: {e}"))?;
            pods.patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"phase": "Running", "conditions": [
                    {"type": "Ready", "status": "True"}]}})),
            )
            .await
            .map_err(|e| format!("mark pod {name} Running: {e}"))?;
            let budget: PodDisruptionBudget = from_json(json!({
                "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": name}}},
            }))?;
            budgets
                .create(&PostParams::default(), &budget)
                .await
                .map_err(|e| format!("create PodDisruptionBudget {name}: {e}"))?;
            self.blockers.push(name);
        }
        Ok(())
    }

    /// Deletes the PodDisruptionBudgets: the blocked drains can finish.
    pub(super) async fn release_drains(&mut self) -> Result<(), String> {
        let budgets: Api<PodDisruptionBudget> =
            Api::namespaced(self.world.client().clone(), self.world.namespace());
        for name in &self.blockers {
            match budgets.delete(name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => return Err(format!("delete PodDisruptionBudget {name}: {error}")),
            }
        }
        Ok(())
    }
}

fn from_json<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, String> {
    serde_json::from_value(value).map_err(|e| e.to_string())
}
