//! What the controller reads from `Infrastructure/cluster` (`config.openshift.io/v1`): the Prism
//! Central endpoint (`spec.platformSpec.nutanix.prismCentral.{address,port}`) and the failure
//! domains (`spec.platformSpec.nutanix.failureDomains`, identifiers `type: UUID|Name`).

use serde_json::Value;

use crate::plan::vm::resolve::FailureDomain;

/// API group, version and name of the object.
pub const INFRASTRUCTURE_GROUP: &str = "config.openshift.io";
pub const INFRASTRUCTURE_VERSION: &str = "v1";
pub const INFRASTRUCTURE_KIND: &str = "Infrastructure";
pub const INFRASTRUCTURE_PLURAL: &str = "infrastructures";
pub const INFRASTRUCTURE_NAME: &str = "cluster";

/// The parts of `Infrastructure/cluster` the provider uses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InfrastructureInfo {
    /// `host:port` of Prism Central, when the object names one.
    pub prism_central: Option<String>,
    pub failure_domains: Vec<FailureDomain>,
}

/// The Prism Central a Machine's VM is made on: `--prism-endpoint` when given (`flag`), else
/// what `Infrastructure/cluster` names. One rule for the controller, `validate` and `doctor`.
pub fn prism_endpoint(
    flag: Option<&str>,
    infrastructure: Option<&InfrastructureInfo>,
) -> Option<String> {
    flag.map(str::to_owned)
        .or_else(|| infrastructure.and_then(|info| info.prism_central.clone()))
}

/// Why the Prism Central endpoint in Infrastructure is unusable.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InfrastructureError {
    #[error(
        "Infrastructure/cluster spec.platformSpec.nutanix.prismCentral.port {0} is not a port (1-65535)"
    )]
    BadPort(i64),
}

fn identifier(value: &Value) -> (String, Option<String>, Option<String>) {
    let text = |key: &str| value.get(key).and_then(Value::as_str).map(str::to_owned);
    (text("type").unwrap_or_default(), text("uuid"), text("name"))
}

/// Reads the object.
pub fn parse_infrastructure(object: &Value) -> Result<InfrastructureInfo, InfrastructureError> {
    let nutanix = object
        .pointer("/spec/platformSpec/nutanix")
        .cloned()
        .unwrap_or(Value::Null);
    let prism_central = match nutanix.get("prismCentral") {
        Some(pc) => {
            let address = pc.get("address").and_then(Value::as_str).unwrap_or("");
            let port = pc.get("port").and_then(Value::as_i64).unwrap_or(9440);
            if !(1..=65535).contains(&port) {
                return Err(InfrastructureError::BadPort(port));
            }
            (!address.is_empty()).then(|| format!("{address}:{port}"))
        }
        None => None,
    };
    let failure_domains = nutanix
        .get("failureDomains")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|domain| {
            let name = domain
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let (type_, uuid, cluster_name) =
                identifier(domain.get("cluster").unwrap_or(&Value::Null));
            let subnets = domain
                .get("subnets")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(identifier);
            FailureDomain::from_infrastructure(name, (&type_, uuid, cluster_name), subnets)
        })
        .collect();
    Ok(InfrastructureInfo {
        prism_central,
        failure_domains,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::NutanixResourceIdentifier;

    #[test]
    fn the_flag_names_prism_central_before_infrastructure() {
        let info = InfrastructureInfo {
            prism_central: Some("pc.example.com:9440".into()),
            failure_domains: Vec::new(),
        };
        assert_eq!(
            prism_endpoint(Some("other:9440"), Some(&info)).as_deref(),
            Some("other:9440")
        );
        assert_eq!(
            prism_endpoint(None, Some(&info)).as_deref(),
            Some("pc.example.com:9440")
        );
        assert_eq!(prism_endpoint(None, None), None);
    }

    #[test]
    fn endpoint_and_failure_domains() {
        let info = parse_infrastructure(&json!({
            "spec": {"platformSpec": {"type": "Nutanix", "nutanix": {
                "prismCentral": {"address": "pc.example.com", "port": 9440},
                "failureDomains": [{"name": "fd-a",
                    "cluster": {"type": "UUID", "uuid": "c-1"},
                    "subnets": [{"type": "Name", "name": "vlan-10"}]}]
            }}}
        }))
        .unwrap();
        assert_eq!(info.prism_central.as_deref(), Some("pc.example.com:9440"));
        assert_eq!(info.failure_domains.len(), 1);
        assert_eq!(
            info.failure_domains[0].cluster,
            NutanixResourceIdentifier::by_uuid("c-1")
        );
        assert_eq!(
            info.failure_domains[0].subnets,
            [NutanixResourceIdentifier::by_name("vlan-10")]
        );
    }

    #[test]
    fn absent_parts_and_bad_ports() {
        assert_eq!(
            parse_infrastructure(&json!({"spec": {}})).unwrap(),
            InfrastructureInfo::default()
        );
        assert_eq!(
            parse_infrastructure(&json!({"spec": {"platformSpec": {"nutanix": {
                "prismCentral": {"address": "pc", "port": 70000}}}}})),
            Err(InfrastructureError::BadPort(70000))
        );
    }
}
