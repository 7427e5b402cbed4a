//! Which Node is a Machine's, and whether this provider may set the Node's `spec.providerID`.
//!
//! Nodelink and the cluster autoscaler match Nodes to Machines by providerID (nodelink falls back
//! to the Machine's first InternalIP). On OpenShift on Nutanix the cloud controller manager sets
//! it when it initialises a Node, Windows Nodes included: library-go's `IsCloudProviderExternal`
//! lists Nutanix, so the workers' kubelet runs with `--cloud-provider=external`; WMCO copies that
//! flag from the worker Ignition into the Windows kubelet's arguments (windows-machine-config-
//! operator `pkg/services/services.go` `generateKubeletArgs`, `pkg/ignition/ignition.go`); and
//! cloud-provider-nutanix's `getInstanceMetadata` (`pkg/provider/manager.go`) names the VM by
//! the Node's `systemUUID`, giving `nutanix://<uuid>`, the value this provider writes. Where no
//! cloud controller manager runs (a cluster without one, the sandbox), or before it has run, the
//! Machine controller alone sets it (`crate::machine::decide`), only on a Node that has none
//! and that is the Machine's: the one its `status.nodeRef` names, or, before nodelink linked
//! them, the one named as the Machine (its `InternalDNS`) that also has one of the Machine's IP
//! addresses. A nodelink annotation naming another Machine always wins.
//!
//! "Where it has none" is decided on the watch cache and enforced by the API server: a Node's
//! providerID may change only from empty (k8s.io/kubernetes `pkg/apis/core/validation/
//! validation.go`, `ValidateNodeUpdate`, v1.34.2 lines 6970-6973: "node updates may not change
//! providerID except from \"\" to valid"), so a write decided on a stale cache after the cloud
//! controller manager set another value is refused (422) and decided again, never overwrites.
//! That is why the write carries no resourceVersion: a precondition would protect nothing more,
//! and the Node's other writers (nodelink annotates the Node right after linking it, the kubelet
//! reports its status) would make it fail with 409s.

use std::net::IpAddr;

use k8s_openapi::api::core::v1::{Node, NodeAddress};
use kube::ResourceExt;

use super::addresses::address_type;
use crate::api::Machine;

/// Node annotation nodelink writes: `<namespace>/<name>` of the Machine.
pub const MACHINE_ANNOTATION: &str = "machine.openshift.io/machine";
/// Node annotation a kubelet started with `--node-ip` publishes when an external cloud provider
/// is configured (comma-separated for dual stack).
pub const PROVIDED_NODE_IP_ANNOTATION: &str = "alpha.kubernetes.io/provided-node-ip";

/// The Machine a Node names in its nodelink annotation.
pub fn machine_of_node(node: &Node) -> Option<(String, String)> {
    let value = node.annotations().get(MACHINE_ANNOTATION)?;
    let (namespace, name) = value.split_once('/')?;
    (!namespace.is_empty() && !name.is_empty() && !name.contains('/'))
        .then(|| (namespace.to_owned(), name.to_owned()))
}

/// Whether two DNS names are the same (any case, a trailing dot ignored), as the approver
/// compares them.
pub fn same_dns_name(a: &str, b: &str) -> bool {
    a.trim_end_matches('.')
        .eq_ignore_ascii_case(b.trim_end_matches('.'))
}

/// The IPs the Node registered with: `alpha.kubernetes.io/provided-node-ip` when the kubelet
/// published it, else its `InternalIP` addresses.
pub fn node_ips(node: &Node) -> Vec<IpAddr> {
    if let Some(provided) = node.annotations().get(PROVIDED_NODE_IP_ANNOTATION) {
        let ips: Vec<IpAddr> = provided
            .split(',')
            .filter_map(|ip| ip.trim().parse().ok())
            .collect();
        if !ips.is_empty() {
            return ips;
        }
    }
    node.status
        .iter()
        .flat_map(|s| s.addresses.iter().flatten())
        .filter(|a| a.type_ == address_type::INTERNAL_IP)
        .filter_map(|a| a.address.trim().parse().ok())
        .collect()
}

/// What decides whether a Node is a Machine's: its name and namespace, the Node its
/// `status.nodeRef` names, and its `status.addresses`. Read from a Machine
/// ([`NodeOwner::of`]), or from the facts a reconcile's snapshot holds.
#[derive(Clone, Copy, Debug)]
pub struct NodeOwner<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    pub node_ref: Option<&'a str>,
    pub addresses: &'a [NodeAddress],
}

impl<'a> NodeOwner<'a> {
    pub fn of(machine: &'a Machine) -> Self {
        Self {
            namespace: machine.metadata.namespace.as_deref().unwrap_or_default(),
            name: machine.metadata.name.as_deref().unwrap_or_default(),
            node_ref: node_ref(machine),
            addresses: machine
                .status
                .as_ref()
                .map_or(&[][..], |status| status.addresses.as_slice()),
        }
    }

    /// Its `InternalIP` and `ExternalIP` addresses.
    pub fn ips(&self) -> Vec<IpAddr> {
        self.addresses
            .iter()
            .filter(|a| {
                a.type_ == address_type::INTERNAL_IP || a.type_ == address_type::EXTERNAL_IP
            })
            .filter_map(|a| a.address.trim().parse().ok())
            .collect()
    }

    /// The names a kubelet on it registers as: its `InternalDNS` addresses, else its name.
    pub fn node_names(&self) -> Vec<String> {
        let dns: Vec<String> = self
            .addresses
            .iter()
            .filter(|a| a.type_ == address_type::INTERNAL_DNS)
            .map(|a| a.address.clone())
            .collect();
        if dns.is_empty() {
            vec![self.name.to_owned()]
        } else {
            dns
        }
    }

    /// Whether `node` is its Node.
    pub fn ownership(&self, node: &Node) -> Ownership {
        let node_name = node.name_any();
        if let Some((namespace, name)) = machine_of_node(node)
            && (namespace != self.namespace || name != self.name)
        {
            return Ownership::NotOurs(format!(
                "Node {node_name} is annotated for Machine {namespace}/{name}"
            ));
        }
        if self.node_ref == Some(node_name.as_str()) {
            return Ownership::NodeRef;
        }
        if !self
            .node_names()
            .iter()
            .any(|name| same_dns_name(name, &node_name))
        {
            return Ownership::NotOurs(format!(
                "Node {node_name} is not named as Machine {}",
                self.name
            ));
        }
        let ips = self.ips();
        if node_ips(node).iter().any(|ip| ips.contains(ip)) {
            Ownership::NameAndAddress
        } else {
            Ownership::NotOurs(format!(
                "Node {node_name} has none of Machine {}'s addresses",
                self.name
            ))
        }
    }

    /// Whether to set `provider_id` (the Machine's) on `node`.
    pub fn provider_id_action(&self, node: &Node, provider_id: &str) -> ProviderIdAction {
        let current = node
            .spec
            .as_ref()
            .and_then(|s| s.provider_id.as_deref())
            .unwrap_or_default();
        if current == provider_id {
            return ProviderIdAction::AlreadySet;
        }
        if !current.is_empty() {
            return ProviderIdAction::Differs {
                node: current.to_owned(),
                machine: provider_id.to_owned(),
            };
        }
        match self.ownership(node) {
            Ownership::NodeRef | Ownership::NameAndAddress => {
                ProviderIdAction::Set(provider_id.to_owned())
            }
            Ownership::NotOurs(why) => ProviderIdAction::NotOurs(why),
        }
    }
}

/// The Machine's `InternalIP` and `ExternalIP` addresses.
pub fn machine_ips(machine: &Machine) -> Vec<IpAddr> {
    NodeOwner::of(machine).ips()
}

/// The names a kubelet on the Machine registers as: its `InternalDNS` addresses, else its name.
pub fn machine_node_names(machine: &Machine) -> Vec<String> {
    NodeOwner::of(machine).node_names()
}

/// `status.nodeRef.name`.
pub fn node_ref(machine: &Machine) -> Option<&str> {
    machine
        .status
        .as_ref()
        .and_then(|s| s.node_ref.as_ref())
        .and_then(|r| r.name.as_deref())
}

/// Why a Node is the Machine's, or why not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ownership {
    /// The Machine's nodeRef names it.
    NodeRef,
    /// Named as the Machine and registered with one of its addresses.
    NameAndAddress,
    NotOurs(String),
}

/// Whether `node` is `machine`'s.
pub fn ownership(machine: &Machine, node: &Node) -> Ownership {
    NodeOwner::of(machine).ownership(node)
}

/// What to do about the Node's `spec.providerID`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProviderIdAction {
    /// Set it to this value.
    Set(String),
    /// It already has the Machine's.
    AlreadySet,
    /// It has another value (a cloud controller manager or a person set it); left alone.
    Differs { node: String, machine: String },
    /// The Node is not (or not provably) the Machine's.
    NotOurs(String),
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn node(value: Value) -> Node {
        serde_json::from_value(value).unwrap()
    }

    fn machine(node_ref: Option<&str>) -> Machine {
        let mut status = json!({"addresses": [
            {"type": "InternalIP", "address": "10.0.0.5"},
            {"type": "InternalDNS", "address": "win-abcde"},
            {"type": "Hostname", "address": "win-abcde"},
        ]});
        if let Some(name) = node_ref {
            status["nodeRef"] = json!({"kind": "Node", "name": name});
        }
        serde_json::from_value(json!({
            "apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
            "metadata": {"name": "win-abcde", "namespace": "openshift-machine-api"},
            "spec": {"providerID": "nutanix://u"},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn nodelink_annotation_names_the_machine() {
        let annotated = |annotation: &str| {
            node(json!({"metadata": {"name": "n",
                "annotations": {MACHINE_ANNOTATION: annotation}}}))
        };
        assert_eq!(
            machine_of_node(&annotated("openshift-machine-api/worker-0")),
            Some(("openshift-machine-api".into(), "worker-0".into()))
        );
        for bad in ["worker-0", "/worker-0", "ns/", "a/b/c"] {
            assert_eq!(machine_of_node(&annotated(bad)), None, "{bad}");
        }
        assert_eq!(
            machine_of_node(&node(json!({"metadata": {"name": "n"}}))),
            None
        );
    }

    #[test]
    fn node_ips_prefer_the_provided_node_ip() {
        let with = |annotations: Value| {
            node(
                json!({"metadata": {"name": "n", "annotations": annotations},
                "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.5"},
                                         {"type": "Hostname", "address": "n"}]}}),
            )
        };
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(node_ips(&with(json!({}))), [ip("10.0.0.5")]);
        assert_eq!(
            node_ips(&with(
                json!({PROVIDED_NODE_IP_ANNOTATION: "10.132.0.2, fd00::2"})
            )),
            [ip("10.132.0.2"), ip("fd00::2")]
        );
        assert_eq!(
            node_ips(&with(json!({PROVIDED_NODE_IP_ANNOTATION: "garbage"}))),
            [ip("10.0.0.5")],
            "an unreadable annotation falls back to the addresses"
        );
    }

    #[test]
    fn provider_id_is_set_only_on_the_machines_node_without_one() {
        let registered = |name: &str, ip: &str, annotations: Value, provider_id: Option<&str>| {
            node(
                json!({"metadata": {"name": name, "annotations": annotations},
                "spec": {"providerID": provider_id},
                "status": {"addresses": [{"type": "InternalIP", "address": ip}]}}),
            )
        };
        let set = ProviderIdAction::Set("nutanix://u".into());
        let unlinked = machine(None);
        let cases = [
            // Before nodelink: by name and address.
            (
                &unlinked,
                registered("win-abcde", "10.0.0.5", json!({}), None),
                set.clone(),
            ),
            (
                &unlinked,
                registered("WIN-ABCDE.", "10.0.0.5", json!({}), None),
                set.clone(),
            ),
            (
                &unlinked,
                registered("win-abcde", "10.0.0.9", json!({}), None),
                ProviderIdAction::NotOurs(
                    "Node win-abcde has none of Machine win-abcde's addresses".into(),
                ),
            ),
            (
                &unlinked,
                registered("other", "10.0.0.5", json!({}), None),
                ProviderIdAction::NotOurs("Node other is not named as Machine win-abcde".into()),
            ),
            (
                &unlinked,
                registered("win-abcde", "10.0.0.5", json!({}), Some("nutanix://u")),
                ProviderIdAction::AlreadySet,
            ),
            (
                &unlinked,
                registered("win-abcde", "10.0.0.5", json!({}), Some("nutanix://other")),
                ProviderIdAction::Differs {
                    node: "nutanix://other".into(),
                    machine: "nutanix://u".into(),
                },
            ),
            (
                &unlinked,
                registered(
                    "win-abcde",
                    "10.0.0.5",
                    json!({MACHINE_ANNOTATION: "openshift-machine-api/someone-else"}),
                    None,
                ),
                ProviderIdAction::NotOurs(
                    "Node win-abcde is annotated for Machine openshift-machine-api/someone-else"
                        .into(),
                ),
            ),
        ];
        for (machine, node, expected) in cases {
            assert_eq!(
                NodeOwner::of(machine).provider_id_action(&node, "nutanix://u"),
                expected,
                "{node:?}"
            );
        }
        // Linked by nodelink: the nodeRef is proof enough, whatever the name and address.
        let linked = machine(Some("linux-node"));
        let node = registered(
            "linux-node",
            "192.168.1.1",
            json!({MACHINE_ANNOTATION: "openshift-machine-api/win-abcde"}),
            None,
        );
        assert_eq!(
            NodeOwner::of(&linked).provider_id_action(&node, "nutanix://u"),
            set
        );
        assert_eq!(ownership(&linked, &node), Ownership::NodeRef);
    }
}
