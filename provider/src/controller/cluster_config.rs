//! The cluster's own configuration objects the controllers read, each cached for a TTL:
//! `Infrastructure/cluster` (the Prism Central and failure domains) and the two `Network`
//! objects (the networks whose addresses are never a Machine's).

use std::time::{Duration, Instant};

use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::Value;

use super::error::Error;
use crate::actuator::infrastructure::{
    INFRASTRUCTURE_GROUP, INFRASTRUCTURE_KIND, INFRASTRUCTURE_NAME, INFRASTRUCTURE_PLURAL,
    INFRASTRUCTURE_VERSION, InfrastructureInfo, parse_infrastructure,
};
use crate::plan::machine::networks::{ClusterNetworks, cluster_networks};

/// `Infrastructure/cluster`, read at most once per TTL.
#[derive(Debug)]
pub struct InfrastructureCache {
    api: Api<DynamicObject>,
    ttl: Duration,
    cached: tokio::sync::Mutex<Option<(Instant, Option<InfrastructureInfo>)>>,
}

impl InfrastructureCache {
    pub fn new(client: kube::Client, ttl: Duration) -> Self {
        let gvk = GroupVersionKind::gvk(
            INFRASTRUCTURE_GROUP,
            INFRASTRUCTURE_VERSION,
            INFRASTRUCTURE_KIND,
        );
        let resource = ApiResource::from_gvk_with_plural(&gvk, INFRASTRUCTURE_PLURAL);
        Self {
            api: Api::all_with(client, &resource),
            ttl,
            cached: tokio::sync::Mutex::new(None),
        }
    }

    /// The object's Nutanix settings; `None` when there is no `Infrastructure/cluster` (or no
    /// such resource at all, as on a cluster without OpenShift's config API).
    pub async fn get(&self) -> Result<Option<InfrastructureInfo>, Error> {
        let mut cached = self.cached.lock().await;
        if let Some((at, info)) = cached.as_ref()
            && at.elapsed() < self.ttl
        {
            return Ok(info.clone());
        }
        let info = match self.api.get_opt(INFRASTRUCTURE_NAME).await {
            Ok(Some(object)) => {
                let value = serde_json::to_value(&object).unwrap_or_default();
                Some(parse_infrastructure(&value)?)
            }
            Ok(None) => None,
            // The resource type itself is unknown: the same as no object.
            Err(kube::Error::Api(status)) if status.code == 404 => None,
            Err(error) => return Err(Error::kube("read Infrastructure/cluster", error)),
        };
        *cached = Some((Instant::now(), info.clone()));
        Ok(info)
    }
}

/// `Network.config.openshift.io/cluster` and `Network.operator.openshift.io/cluster`, read at
/// most once per TTL (so a changed network configuration is followed within it), as the
/// networks whose addresses are never a Machine's ([`cluster_networks`]).
#[derive(Debug)]
pub struct NetworkCache {
    config: Api<DynamicObject>,
    operator: Api<DynamicObject>,
    ttl: Duration,
    cached: tokio::sync::Mutex<Option<(Instant, ClusterNetworks)>>,
}

/// The name of both Network objects.
const NETWORK_NAME: &str = "cluster";

impl NetworkCache {
    pub fn new(client: kube::Client, ttl: Duration) -> Self {
        let api = |group: &str| {
            let gvk = GroupVersionKind::gvk(group, "v1", "Network");
            Api::all_with(
                client.clone(),
                &ApiResource::from_gvk_with_plural(&gvk, "networks"),
            )
        };
        Self {
            config: api("config.openshift.io"),
            operator: api("operator.openshift.io"),
            ttl,
            cached: tokio::sync::Mutex::new(None),
        }
    }

    /// The cluster's networks; empty where neither object exists (a cluster without
    /// OpenShift's network configuration).
    pub async fn get(&self) -> Result<ClusterNetworks, Error> {
        let mut cached = self.cached.lock().await;
        if let Some((at, networks)) = cached.as_ref()
            && at.elapsed() < self.ttl
        {
            return Ok(networks.clone());
        }
        let config = read_optional(&self.config, "Network.config.openshift.io/cluster").await?;
        let operator =
            read_optional(&self.operator, "Network.operator.openshift.io/cluster").await?;
        let networks = cluster_networks(config.as_ref(), operator.as_ref());
        if !networks.unreadable.is_empty() {
            tracing::warn!(cidrs = ?networks.unreadable, "the cluster's network configuration names CIDRs that do not parse; ignored");
        }
        *cached = Some((Instant::now(), networks.clone()));
        Ok(networks)
    }
}

/// The object named `cluster`, as JSON; `None` when it or its resource type does not exist.
async fn read_optional(api: &Api<DynamicObject>, what: &str) -> Result<Option<Value>, Error> {
    match api.get_opt(NETWORK_NAME).await {
        Ok(object) => Ok(object.map(|object| serde_json::to_value(&object).unwrap_or_default())),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
        Err(error) => Err(Error::kube(format!("read {what}"), error)),
    }
}
