//! What the world looks like at one moment: MachineSets, Machines, Nodes (read from kube-sim's
//! store in-process, without API calls), VMs (prism-mock's admin handle) and joins (the node
//! agent). Predicates for `World::wait_until` and the progress line are pure functions of it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use nutanix_machine_controller::api::{Machine, MachineSet};
use nutanix_machine_controller::controller::windows_join;
use nutanix_machine_controller::plan;
use prism_mock::VmSummary;

use crate::manifests::MACHINE_SET_LABEL;
use crate::node_agent::{JoinRecord, JoinStage, WMCO_VERSION_ANNOTATION};
use crate::nodelink::MACHINE_ANNOTATION;

/// The world at one moment.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Time since the world started.
    pub elapsed: Duration,
    pub machine_sets: Vec<MachineSet>,
    pub machines: Vec<Machine>,
    pub nodes: Vec<Node>,
    /// prism-mock's VMs, except those of its seed (such as the clone source `windows-golden`).
    pub vms: Vec<VmSummary>,
    /// The node agent's joins, latest per VM.
    pub joins: Vec<JoinRecord>,
}

/// A condition of the Machine's providerStatus: (status, reason, message).
pub fn provider_condition(machine: &Machine, type_: &str) -> Option<(String, String, String)> {
    let conditions = machine
        .status
        .as_ref()?
        .provider_status
        .as_ref()?
        .get("conditions")?
        .as_array()?;
    let condition = conditions.iter().find(|c| c["type"] == type_)?;
    let text = |key: &str| condition[key].as_str().unwrap_or_default().to_owned();
    Some((text("status"), text("reason"), text("message")))
}

/// The controller's `WindowsJoin` condition: (status, reason, message). It has a key of the
/// providerStatus to itself ([`windows_join::STATUS_FIELD`]), which only the join reconciler writes.
pub fn join_condition(machine: &Machine) -> Option<(String, String, String)> {
    let condition = machine
        .status
        .as_ref()?
        .provider_status
        .as_ref()?
        .get(windows_join::STATUS_FIELD)?;
    let text = |key: &str| condition[key].as_str().unwrap_or_default().to_owned();
    Some((text("status"), text("reason"), text("message")))
}

/// The MachineSet a Machine belongs to, by its label.
pub fn machine_set_of(machine: &Machine) -> Option<&str> {
    machine.labels().get(MACHINE_SET_LABEL).map(String::as_str)
}

fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

impl Snapshot {
    pub fn machine_set(&self, name: &str) -> Option<&MachineSet> {
        self.machine_sets.iter().find(|s| s.name_any() == name)
    }

    pub fn machine(&self, name: &str) -> Option<&Machine> {
        self.machines.iter().find(|m| m.name_any() == name)
    }

    /// The Machines labelled as the MachineSet's.
    pub fn machines_of(&self, set: &str) -> Vec<&Machine> {
        self.machines
            .iter()
            .filter(|m| machine_set_of(m) == Some(set))
            .collect()
    }

    pub fn node(&self, name: &str) -> Option<&Node> {
        self.nodes.iter().find(|n| n.name_any() == name)
    }

    /// The VM named like the Machine (VM name = Machine name).
    pub fn vm(&self, name: &str) -> Option<&VmSummary> {
        self.vms.iter().find(|vm| vm.name == name)
    }

    /// The latest join of the VM named `node`.
    pub fn join(&self, node: &str) -> Option<&JoinRecord> {
        self.joins
            .iter()
            .filter(|j| j.node == node)
            .max_by_key(|j| j.started)
    }

    /// Why the Machine is not fully joined yet, or `None` when it is: Running, linked to a Ready
    /// Node that carries its providerID, the node agent's join done, and for Windows the Node
    /// configured by WMCO and the controller's `WindowsJoin` condition `True` (`Configured`).
    pub fn join_gap(&self, machine: &Machine) -> Option<String> {
        let name = machine.name_any();
        if machine.phase() != nutanix_machine_controller::api::phase::RUNNING {
            return Some(format!(
                "Machine {name} is {:?}, not Running",
                machine.phase()
            ));
        }
        let Some(node_name) = machine
            .status
            .as_ref()
            .and_then(|s| s.node_ref.as_ref())
            .and_then(|r| r.name.clone())
        else {
            return Some(format!("Machine {name} has no nodeRef"));
        };
        let Some(node) = self.node(&node_name) else {
            return Some(format!(
                "Machine {name}: its Node {node_name} does not exist"
            ));
        };
        if !node_ready(node) {
            return Some(format!("Node {node_name} is not Ready"));
        }
        let node_provider_id = node.spec.as_ref().and_then(|s| s.provider_id.as_deref());
        if node_provider_id.is_none() || node_provider_id != machine.spec.provider_id.as_deref() {
            return Some(format!(
                "Node {node_name}: spec.providerID {node_provider_id:?} is not the Machine's {:?}",
                machine.spec.provider_id
            ));
        }
        // nodelink writes the Machine's nodeRef first and the Node's annotation, labels and
        // taints after (openshift/machine-api-operator `pkg/controller/nodelink/
        // nodelink_controller.go`, `Reconcile`): a Machine can be Running before its Node has
        // them.
        let linked_to = format!("{}/{name}", machine.namespace().unwrap_or_default());
        if node.annotations().get(MACHINE_ANNOTATION) != Some(&linked_to) {
            return Some(format!(
                "Node {node_name}: nodelink has not marked it as {linked_to}'s yet"
            ));
        }
        if !self
            .join(&node_name)
            .is_some_and(|j| j.stage == JoinStage::Joined)
        {
            return Some(format!("Node {node_name}: the kubelet's join is not done"));
        }
        if machine.is_windows() {
            if !node.annotations().contains_key(WMCO_VERSION_ANNOTATION) {
                return Some(format!("Node {node_name}: not configured by WMCO yet"));
            }
            match join_condition(machine) {
                Some((status, reason, _))
                    if status == "True" && reason == plan::windows_join::reasons::CONFIGURED => {}
                Some((status, reason, message)) => {
                    return Some(format!(
                        "Machine {name}: {} is {status} ({reason}): {message}",
                        plan::windows_join::CONDITION
                    ));
                }
                None => {
                    return Some(format!(
                        "Machine {name}: no {} condition",
                        plan::windows_join::CONDITION
                    ));
                }
            }
        }
        None
    }

    /// Whether every Machine of the set is fully joined and the set has `replicas` of them.
    pub fn set_joined(&self, set: &str, replicas: usize) -> bool {
        let machines = self.machines_of(set);
        machines.len() == replicas && machines.iter().all(|m| self.join_gap(m).is_none())
    }

    /// One line for the progress display.
    pub fn progress_line(&self, label: &str) -> String {
        let mut line = format!("[{:6.1}s] {label} |", self.elapsed.as_secs_f64());
        let mut phases: BTreeMap<&str, usize> = BTreeMap::new();
        for machine in &self.machines {
            let phase = if machine.metadata.deletion_timestamp.is_some() {
                "Deleting"
            } else {
                match machine.phase() {
                    "" => "(new)",
                    phase => phase,
                }
            };
            *phases.entry(phase).or_default() += 1;
        }
        let _ = write!(line, " Machines {}", self.machines.len());
        if !phases.is_empty() {
            let phases: Vec<String> = phases.iter().map(|(p, n)| format!("{n} {p}")).collect();
            let _ = write!(line, " ({})", phases.join(", "));
        }
        let on = self.vms.iter().filter(|vm| vm.power_state == "ON").count();
        let _ = write!(line, " | VMs {} ({on} on)", self.vms.len());
        let ready = self.nodes.iter().filter(|n| node_ready(n)).count();
        let _ = write!(line, " | Nodes {} ({ready} Ready)", self.nodes.len());
        let mut stages: BTreeMap<&str, usize> = BTreeMap::new();
        for join in self
            .joins
            .iter()
            .filter(|j| self.vms.iter().any(|vm| vm.uuid == j.vm_uuid))
        {
            *stages.entry(stage_label(&join.stage)).or_default() += 1;
        }
        if !stages.is_empty() {
            let stages: Vec<String> = stages.iter().map(|(s, n)| format!("{n} {s}")).collect();
            let _ = write!(line, " | joins: {}", stages.join(", "));
        }
        line
    }
}

/// A short name for a join stage.
pub fn stage_label(stage: &JoinStage) -> &'static str {
    match stage {
        JoinStage::WaitingForWmco { .. } => "waiting for WMCO",
        JoinStage::WaitingForAddress => "waiting for an address",
        JoinStage::Delayed => "delayed",
        JoinStage::ClientCsrPending => "client CSR pending",
        JoinStage::NodeRegistered => "Node registered",
        JoinStage::ServingCsrPending => "serving CSR pending",
        JoinStage::Joined => "joined",
        JoinStage::Stopped => "stopped",
        JoinStage::Failed { .. } => "failed",
    }
}

#[cfg(test)]
mod tests {
    use jiff::Timestamp;
    use prism_mock::GuestOs;
    use serde_json::json;

    use super::*;

    fn machine(name: &str, phase: &str, windows: bool, node: Option<&str>) -> Machine {
        let mut labels = json!({MACHINE_SET_LABEL: "win"});
        if windows {
            labels["machine.openshift.io/os-id"] = json!("Windows");
        }
        serde_json::from_value(json!({
            "apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
            "metadata": {"name": name, "namespace": "ns", "labels": labels},
            "spec": {"providerID": format!("nutanix://{name}")},
            "status": {"phase": phase, "nodeRef": node.map(|n| json!({"kind": "Node", "name": n})),
                "providerStatus": {"windowsJoin": {"type": "WindowsJoin", "status": "False",
                    "reason": "NodeLinked", "message": "waiting for the serving CSR"}}},
        }))
        .unwrap()
    }

    fn set_windows_join(machine: &mut Machine, status: &str, reason: &str) {
        let provider_status = machine
            .status
            .as_mut()
            .unwrap()
            .provider_status
            .as_mut()
            .unwrap();
        provider_status["windowsJoin"]["status"] = json!(status);
        provider_status["windowsJoin"]["reason"] = json!(reason);
    }

    /// A Node nodelink linked to Machine `ns/<name>`.
    fn node(name: &str, provider_id: &str, wmco: bool) -> Node {
        let mut annotations = json!({MACHINE_ANNOTATION: format!("ns/{name}")});
        if wmco {
            annotations[WMCO_VERSION_ANNOTATION] = json!("10.20.0");
        }
        serde_json::from_value(json!({
            "metadata": {"name": name, "annotations": annotations},
            "spec": {"providerID": provider_id},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }))
        .unwrap()
    }

    fn join(node: &str, stage: JoinStage) -> JoinRecord {
        JoinRecord {
            vm_uuid: format!("uuid-{node}"),
            node: node.to_owned(),
            windows: true,
            stage,
            node_ip: None,
            client_csr: None,
            serving_csr: None,
            started: Timestamp::UNIX_EPOCH,
            joined: None,
        }
    }

    fn vm(name: &str) -> VmSummary {
        VmSummary {
            uuid: format!("uuid-{name}"),
            name: name.to_owned(),
            state: "COMPLETE".to_owned(),
            power_state: "ON".to_owned(),
            listed: true,
            spec_version: 1,
            addresses: vec![],
            os: GuestOs::Windows,
            cluster_uuid: String::new(),
        }
    }

    #[test]
    fn a_windows_machine_is_joined_only_once_wmco_configured_its_linked_node() {
        let running = machine("win-a", "Running", true, Some("win-a"));
        let mut snapshot = Snapshot {
            machines: vec![running.clone()],
            nodes: vec![node("win-a", "nutanix://win-a", false)],
            joins: vec![join("win-a", JoinStage::Joined)],
            ..Snapshot::default()
        };
        let gap = snapshot.join_gap(&running).unwrap();
        assert!(gap.contains("WMCO"), "{gap}");
        snapshot.nodes = vec![node("win-a", "nutanix://other", true)];
        let gap = snapshot.join_gap(&running).unwrap();
        assert!(gap.contains("providerID"), "{gap}");
        snapshot.nodes = vec![node("win-a", "nutanix://win-a", true)];
        let gap = snapshot.join_gap(&running).unwrap();
        assert!(gap.contains("WindowsJoin is False (NodeLinked)"), "{gap}");
        let mut configured = running.clone();
        set_windows_join(&mut configured, "True", "Configured");
        snapshot.machines = vec![configured.clone()];
        assert_eq!(snapshot.join_gap(&configured), None);
        // nodelink wrote the nodeRef but not yet the Node's annotation and labels.
        snapshot.nodes[0]
            .annotations_mut()
            .remove(MACHINE_ANNOTATION);
        let gap = snapshot.join_gap(&configured).unwrap();
        assert!(gap.contains("nodelink"), "{gap}");
        snapshot.nodes = vec![node("win-a", "nutanix://win-a", true)];
        assert!(snapshot.set_joined("win", 1));
        assert!(!snapshot.set_joined("win", 2));

        let provisioned = machine("win-a", "Provisioned", true, None);
        let gap = snapshot.join_gap(&provisioned).unwrap();
        assert!(gap.contains("not Running"), "{gap}");
    }

    #[test]
    fn the_progress_line_counts_phases_vms_nodes_and_join_stages() {
        let snapshot = Snapshot {
            elapsed: Duration::from_millis(12_345),
            machines: vec![
                machine("a", "Provisioning", true, None),
                machine("b", "Running", true, Some("b")),
                machine("c", "", true, None),
            ],
            nodes: vec![node("b", "nutanix://b", true)],
            vms: vec![vm("a"), vm("b")],
            joins: vec![
                join("a", JoinStage::ClientCsrPending),
                join("b", JoinStage::Joined),
                // A VM that is gone no longer counts.
                join("gone", JoinStage::Stopped),
            ],
            ..Snapshot::default()
        };
        assert_eq!(
            snapshot.progress_line("step"),
            "[  12.3s] step | Machines 3 (1 (new), 1 Provisioning, 1 Running) | VMs 2 (2 on) \
             | Nodes 1 (1 Ready) | joins: 1 client CSR pending, 1 joined"
        );
    }
}
