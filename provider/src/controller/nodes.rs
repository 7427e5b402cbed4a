//! Nodes as the controllers cache them: a real Node's image list and managed fields are most of
//! its size, and a cluster has one per Machine, so each watch keeps only what the Machine
//! protocol and the Windows join read (name, labels, annotations, taints, providerID, addresses,
//! systemUUID).

use futures::Stream;
use k8s_openapi::api::core::v1::{Node, NodeStatus, NodeSystemInfo};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};

/// A Node as the controllers read it: every field [`crate::plan::windows_join`] and
/// [`crate::plan::machine::node_link`] never look at is dropped before it is cached.
pub fn project_node(node: &mut Node) {
    node.managed_fields_mut().clear();
    node.metadata.owner_references = None;
    if let Some(spec) = node.spec.as_mut() {
        spec.config_source = None;
        spec.pod_cidr = None;
        spec.pod_cidrs = None;
    }
    if let Some(status) = node.status.as_mut() {
        let system_uuid = status
            .node_info
            .take()
            .map(|info| info.system_uuid)
            .unwrap_or_default();
        *status = NodeStatus {
            addresses: status.addresses.take(),
            node_info: Some(NodeSystemInfo {
                system_uuid,
                ..NodeSystemInfo::default()
            }),
            ..NodeStatus::default()
        };
    }
}

/// A watch of every Node, projected ([`project_node`]) into a store: the store, and the stream
/// of the Nodes it takes in (for a controller to map to its objects).
pub fn watch_nodes(
    client: kube::Client,
) -> (
    Store<Node>,
    impl Stream<Item = Result<Node, watcher::Error>> + Send + 'static,
) {
    let (store, writer) = reflector::store();
    let events = reflector::reflector(
        writer,
        watcher(Api::<Node>::all(client), watcher::Config::default())
            .default_backoff()
            .modify(project_node),
    )
    .touched_objects();
    (store, events)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cached_node_keeps_what_the_controllers_read_and_nothing_else() {
        let mut node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "win-1",
                "labels": {"kubernetes.io/os": "windows"},
                "annotations": {"machine.openshift.io/machine": "openshift-machine-api/win-1"},
                "managedFields": [{"manager": "kubelet"}],
            },
            "spec": {
                "providerID": "nutanix://0d2d9c8e",
                "taints": [{"key": "os", "value": "Windows", "effect": "NoSchedule"}],
                "podCIDR": "10.128.2.0/24",
            },
            "status": {
                "addresses": [{"type": "InternalIP", "address": "10.40.15.20"}],
                "nodeInfo": {"systemUUID": "0D2D9C8E", "machineID": "m", "bootID": "b",
                    "kernelVersion": "10.0.20348", "osImage": "Windows Server 2022",
                    "containerRuntimeVersion": "containerd://1.7", "kubeletVersion": "v1.33.2",
                    "kubeProxyVersion": "", "operatingSystem": "windows", "architecture": "amd64"},
                "capacity": {"cpu": "4", "memory": "16Gi"},
                "conditions": [{"type": "Ready", "status": "True"}],
                "images": [{"names": ["registry/pause"], "sizeBytes": 1}],
            },
        }))
        .unwrap();
        let before = node.clone();
        project_node(&mut node);
        assert_eq!(node.metadata.name, before.metadata.name);
        assert_eq!(node.metadata.labels, before.metadata.labels);
        assert_eq!(node.metadata.annotations, before.metadata.annotations);
        assert!(node.metadata.managed_fields.is_none_or(|f| f.is_empty()));
        let (spec, was) = (node.spec.unwrap(), before.spec.unwrap());
        assert_eq!(spec.provider_id, was.provider_id);
        assert_eq!(spec.taints, was.taints);
        assert_eq!(spec.pod_cidr, None);
        let status = node.status.unwrap();
        assert_eq!(status.addresses, before.status.as_ref().unwrap().addresses);
        assert_eq!(status.node_info.unwrap().system_uuid, "0D2D9C8E");
        assert_eq!(status.capacity, None);
        assert_eq!(status.conditions, None);
        assert_eq!(status.images, None);
    }
}
