//! The Cluster API's IP address management objects, `ipam.cluster.x-k8s.io/v1beta1`, as the
//! machine-api-operator's vSphere provider uses them (openshift/machine-api-operator
//! `pkg/util/ipam/util.go`, which imports `sigs.k8s.io/cluster-api/api/ipam/v1beta1`; the CRDs it
//! installs are its `third_party/cluster-api/crd/ipam.cluster.x-k8s.io_{ipaddressclaims,ipaddresses}.yaml`).
//!
//! A provider creates an `IPAddressClaim` naming a pool; the pool's IPAM controller allocates an
//! `IPAddress` and names it in the claim's `status.addressRef`. Unknown fields are kept.

use k8s_openapi::api::core::v1::{LocalObjectReference, TypedLocalObjectReference};
use kube::CustomResource;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The API group of both kinds.
pub const IPAM_GROUP: &str = "ipam.cluster.x-k8s.io";
/// The version the vSphere provider writes and OpenShift's CRDs store.
pub const IPAM_VERSION: &str = "v1beta1";

/// `IPAddressClaim.spec`.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "ipam.cluster.x-k8s.io",
    version = "v1beta1",
    kind = "IPAddressClaim",
    namespaced,
    status = "IpAddressClaimStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct IpAddressClaimSpec {
    /// The pool the address comes from (`apiGroup`, `kind`, `name`).
    pub pool_ref: TypedLocalObjectReference,
    #[serde(flatten)]
    pub extra: serde_json::Map<String, Value>,
}

/// `IPAddressClaim.status`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IpAddressClaimStatus {
    /// The `IPAddress` allocated for the claim; an empty name until then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address_ref: Option<LocalObjectReference>,
    #[serde(flatten)]
    pub extra: serde_json::Map<String, Value>,
}

/// `IPAddress.spec`.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "ipam.cluster.x-k8s.io",
    version = "v1beta1",
    kind = "IPAddress",
    namespaced,
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct IpAddressSpec {
    pub claim_ref: LocalObjectReference,
    pub pool_ref: TypedLocalObjectReference,
    /// The address, without its prefix.
    pub address: String,
    /// The prefix length of the network the address is in.
    pub prefix: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,
    #[serde(flatten)]
    pub extra: serde_json::Map<String, Value>,
}
