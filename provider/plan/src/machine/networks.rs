//! The cluster's own networks, whose addresses never belong to a Machine: the cluster (pod)
//! network, the service network and the hybrid overlay network that Windows nodes join; and the
//! cluster's primary IP family, which decides whether a Machine's IPv4 or IPv6 addresses come
//! first.
//!
//! Read from the two objects OpenShift keeps them in (openshift/api):
//! - `Network.config.openshift.io/cluster` (`config/v1/types_network.go`): `clusterNetwork[].cidr`
//!   and `serviceNetwork[]`, in `status` once the network operator has applied them, in `spec`
//!   as the installer wrote them;
//! - `Network.operator.openshift.io/cluster` (`operator/v1/types_network.go`):
//!   `spec.defaultNetwork.ovnKubernetesConfig.hybridOverlayConfig.hybridClusterNetwork[].cidr`,
//!   which WMCO requires for Windows nodes.
//!
//! The machine-api-operator owns the controller's arguments on OpenShift, so a flag alone could
//! never set these there; `--excluded-address-cidrs` remains as an override.

use ipnet::IpNet;
use serde_json::Value;

/// What the cluster's network configuration says about Machine addresses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterNetworks {
    /// Addresses inside these are the cluster's, not the Machine's.
    pub excluded: Vec<IpNet>,
    /// The cluster network's first CIDR is IPv6: its nodes' primary addresses are IPv6.
    pub ipv6_primary: bool,
    /// CIDRs written in the objects that do not parse (reported, not fatal).
    pub unreadable: Vec<String>,
}

fn strings(value: Option<&Value>) -> impl Iterator<Item = &str> {
    value
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

fn cidrs(entries: Option<&Value>) -> impl Iterator<Item = &str> {
    entries
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|entry| entry.get("cidr").and_then(Value::as_str))
}

/// `status` when the operator has filled it in (what is in effect), else `spec`.
fn applied<'a>(object: &'a Value, field: &str) -> Option<&'a Value> {
    let non_empty = |value: &&Value| value.as_array().is_some_and(|list| !list.is_empty());
    object
        .pointer(&format!("/status/{field}"))
        .filter(non_empty)
        .or_else(|| object.pointer(&format!("/spec/{field}")).filter(non_empty))
}

/// The networks named by `Network.config.openshift.io/cluster` (`config`) and
/// `Network.operator.openshift.io/cluster` (`operator`), either of which may be absent.
pub fn cluster_networks(config: Option<&Value>, operator: Option<&Value>) -> ClusterNetworks {
    let mut written: Vec<&str> = Vec::new();
    let mut cluster_network: Vec<&str> = Vec::new();
    if let Some(config) = config {
        cluster_network = cidrs(applied(config, "clusterNetwork")).collect();
        written.extend(&cluster_network);
        written.extend(strings(applied(config, "serviceNetwork")));
    }
    if let Some(operator) = operator {
        written.extend(cidrs(operator.pointer(
            "/spec/defaultNetwork/ovnKubernetesConfig/hybridOverlayConfig/hybridClusterNetwork",
        )));
    }
    let mut networks = ClusterNetworks::default();
    for cidr in written {
        match cidr.trim().parse::<IpNet>() {
            Ok(net) if !networks.excluded.contains(&net) => networks.excluded.push(net),
            Ok(_) => {}
            Err(_) => networks.unreadable.push(cidr.to_owned()),
        }
    }
    networks.ipv6_primary = cluster_network
        .first()
        .and_then(|cidr| cidr.trim().parse::<IpNet>().ok())
        .is_some_and(|net| matches!(net, IpNet::V6(_)));
    networks
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn nets(list: &[&str]) -> Vec<IpNet> {
        list.iter().map(|n| n.parse().unwrap()).collect()
    }

    #[test]
    fn cluster_service_and_hybrid_overlay_networks_are_excluded() {
        // The shapes of an OVN-Kubernetes cluster with the hybrid overlay WMCO needs
        // (openshift/api config/v1 and operator/v1 Network types).
        let config = json!({
            "spec": {"clusterNetwork": [{"cidr": "10.128.0.0/14", "hostPrefix": 23}],
                     "serviceNetwork": ["172.30.0.0/16"], "networkType": "OVNKubernetes"},
            "status": {"clusterNetwork": [{"cidr": "10.128.0.0/14", "hostPrefix": 23}],
                       "serviceNetwork": ["172.30.0.0/16"], "networkType": "OVNKubernetes"}
        });
        let operator = json!({"spec": {"defaultNetwork": {"type": "OVNKubernetes",
            "ovnKubernetesConfig": {"hybridOverlayConfig": {
                "hybridClusterNetwork": [{"cidr": "10.132.0.0/14", "hostPrefix": 23}]}}}}});
        let networks = cluster_networks(Some(&config), Some(&operator));
        assert_eq!(
            networks.excluded,
            nets(&["10.128.0.0/14", "172.30.0.0/16", "10.132.0.0/14"])
        );
        assert!(!networks.ipv6_primary);
        assert!(networks.unreadable.is_empty());
    }

    #[test]
    fn the_applied_status_wins_over_the_spec_and_either_object_may_be_missing() {
        let config = json!({
            "spec": {"clusterNetwork": [{"cidr": "10.128.0.0/14"}], "serviceNetwork": ["172.30.0.0/16"]},
            "status": {"clusterNetwork": [{"cidr": "10.200.0.0/14"}], "serviceNetwork": []}
        });
        let networks = cluster_networks(Some(&config), None);
        assert_eq!(
            networks.excluded,
            nets(&["10.200.0.0/14", "172.30.0.0/16"]),
            "an empty status list is not applied yet: the spec's stands"
        );
        assert_eq!(cluster_networks(None, None), ClusterNetworks::default());
    }

    #[test]
    fn an_ipv6_first_cluster_network_makes_ipv6_primary() {
        let config = json!({"status": {
            "clusterNetwork": [{"cidr": "fd01::/48"}, {"cidr": "10.128.0.0/14"}],
            "serviceNetwork": ["fd02::/112", "172.30.0.0/16"]}});
        let networks = cluster_networks(Some(&config), None);
        assert!(networks.ipv6_primary);
        assert_eq!(networks.excluded.len(), 4);
    }

    #[test]
    fn unreadable_cidrs_are_reported_not_fatal() {
        let config = json!({"spec": {"clusterNetwork": [{"cidr": "10.128.0.0/33"}],
                                     "serviceNetwork": ["172.30.0.0/16"]}});
        let networks = cluster_networks(Some(&config), None);
        assert_eq!(networks.excluded, nets(&["172.30.0.0/16"]));
        assert_eq!(networks.unreadable, vec!["10.128.0.0/33".to_owned()]);
    }
}
