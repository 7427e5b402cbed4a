//! The Node providerIDs this controller set, until the Node watch shows them.
//!
//! A reconcile that follows the providerID's write closely (the Machine's next transition, a
//! Node change of the kubelet's) can read the Node from a watch cache that has not seen the
//! write yet, and would send it again: a second patch that changes nothing, since the write
//! carries no resourceVersion and the value is the same (measured: two Node patches in a
//! Windows join under the full test suite's load). A providerID once set never changes or goes
//! away on the same Node (k8s.io/kubernetes `pkg/apis/core/validation/validation.go`,
//! `ValidateNodeUpdate`, v1.34.2 lines 6970-6973: only from "" to valid), so a Node with the
//! uid this controller wrote to has the value it wrote, whatever an older copy shows. A Node
//! deleted and registered again has another uid, and starts with none.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;

/// Node name → (its uid, the providerID this controller set on it).
#[derive(Debug, Default)]
pub(super) struct ProviderIdsSet(Mutex<HashMap<String, (String, String)>>);

impl ProviderIdsSet {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, (String, String)>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The patch answered with `node`, whose providerID is now set.
    pub(super) fn written(&self, node: &Node) {
        let provider_id = node.spec.as_ref().and_then(|spec| spec.provider_id.clone());
        if let (Some(uid), Some(provider_id)) = (node.uid(), provider_id) {
            self.map().insert(node.name_any(), (uid, provider_id));
        }
    }

    /// `node` as the watch cache holds it, with the providerID this controller set on it if
    /// the cache is older than that write. Once the cache shows one, the entry is forgotten.
    pub(super) fn seen(&self, mut node: Node) -> Node {
        let name = node.name_any();
        let shown = node
            .spec
            .as_ref()
            .and_then(|spec| spec.provider_id.as_deref())
            .is_some_and(|id| !id.is_empty());
        let mut map = self.map();
        if shown {
            map.remove(&name);
            return node;
        }
        match map.get(&name) {
            Some((uid, provider_id)) if node.uid().as_deref() == Some(uid.as_str()) => {
                node.spec.get_or_insert_default().provider_id = Some(provider_id.clone());
            }
            // Another Node of the same name: the one written to is gone.
            Some(_) => {
                map.remove(&name);
            }
            None => {}
        }
        node
    }

    /// The Node `name` was deleted by this controller.
    pub(super) fn forget(&self, name: &str) {
        self.map().remove(name);
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::NodeSpec;
    use kube::api::ObjectMeta;

    use super::*;

    fn node(uid: &str, provider_id: Option<&str>) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some("win-1".into()),
                uid: Some(uid.into()),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec {
                provider_id: provider_id.map(str::to_owned),
                ..NodeSpec::default()
            }),
            status: None,
        }
    }

    fn provider_id(node: &Node) -> Option<&str> {
        node.spec.as_ref()?.provider_id.as_deref()
    }

    #[test]
    fn a_cached_node_older_than_the_write_shows_the_providerid_written() {
        let set = ProviderIdsSet::default();
        set.written(&node("uid-1", Some("nutanix://vm-1")));
        let stale = set.seen(node("uid-1", None));
        assert_eq!(provider_id(&stale), Some("nutanix://vm-1"));
        // Still so until the cache shows it; then the entry goes.
        assert_eq!(
            provider_id(&set.seen(node("uid-1", None))),
            Some("nutanix://vm-1")
        );
        set.seen(node("uid-1", Some("nutanix://vm-1")));
        assert!(set.map().is_empty());
    }

    #[test]
    fn a_node_registered_again_under_the_same_name_starts_with_none() {
        let set = ProviderIdsSet::default();
        set.written(&node("uid-1", Some("nutanix://vm-1")));
        assert_eq!(provider_id(&set.seen(node("uid-2", None))), None);
        assert!(set.map().is_empty());
    }

    #[test]
    fn a_node_this_controller_deleted_is_forgotten() {
        let set = ProviderIdsSet::default();
        set.written(&node("uid-1", Some("nutanix://vm-1")));
        set.forget("win-1");
        assert_eq!(provider_id(&set.seen(node("uid-1", None))), None);
    }

    #[test]
    fn a_node_never_written_is_left_as_the_cache_shows_it() {
        let set = ProviderIdsSet::default();
        assert_eq!(provider_id(&set.seen(node("uid-1", None))), None);
        assert_eq!(
            provider_id(&set.seen(node("uid-1", Some("nutanix://other")))),
            Some("nutanix://other")
        );
    }
}
