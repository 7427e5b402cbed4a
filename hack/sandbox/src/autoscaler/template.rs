//! A MachineSet as the OpenShift autoscaler's `openshift` cloud provider reads it: its bounds, and
//! the node it would bring when it has no Node to copy (scale from zero).
//!
//! Source: openshift/kubernetes-autoscaler HEAD 70920d3, `cluster-autoscaler/cloudprovider/openshift/`
//! `openshift_utils.go` (the annotation keys, `parseScalingBounds`, `parseCPUCapacity`,
//! `parseMemoryCapacity`, `parseGPUCount`, `parseMaxPodsCapacity`, `parseEphemeralDiskCapacity`,
//! `isScalableResourceMachineAPIAuthoritative`), `openshift_unstructured.go` (`Labels`, `Taints`,
//! `parseTaint`, `InstanceCapacity`, `CanScaleFromZero`), `openshift_nodegroup.go`
//! (`newNodeGroupFromScalableResource`, `TemplateNodeInfo`, `buildGenericLabels`,
//! `defaultMaxPods`), each cited at the code that simulates it.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::Taint;
use k8s_semantics::quantity::{Quantity, QuantityError};
use kube::ResourceExt;

use crate::machine_api::MachineSet;

/// Smallest size of a node group (`nodeGroupMinSizeAnnotationKey`).
pub const MIN_SIZE_ANNOTATION: &str =
    "machine.openshift.io/cluster-api-autoscaler-node-group-min-size";
/// Largest size of a node group (`nodeGroupMaxSizeAnnotationKey`).
pub const MAX_SIZE_ANNOTATION: &str =
    "machine.openshift.io/cluster-api-autoscaler-node-group-max-size";
// The deprecated OpenShift keys and the upstream keys the provider prefers.
pub const DEPRECATED_CPU: &str = "machine.openshift.io/vCPU";
pub const DEPRECATED_MEMORY_MB: &str = "machine.openshift.io/memoryMb";
pub const DEPRECATED_GPU_COUNT: &str = "machine.openshift.io/GPU";
pub const DEPRECATED_MAX_PODS: &str = "machine.openshift.io/maxPods";
pub const CPU: &str = "capacity.cluster-autoscaler.kubernetes.io/cpu";
pub const MEMORY: &str = "capacity.cluster-autoscaler.kubernetes.io/memory";
pub const GPU_COUNT: &str = "capacity.cluster-autoscaler.kubernetes.io/gpu-count";
pub const MAX_PODS: &str = "capacity.cluster-autoscaler.kubernetes.io/maxPods";
pub const EPHEMERAL_DISK: &str = "capacity.cluster-autoscaler.kubernetes.io/ephemeral-disk";
pub const LABELS: &str = "capacity.cluster-autoscaler.kubernetes.io/labels";
/// Read despite the source's "not currently used on OpenShift" comment: `Taints` parses it.
pub const TAINTS: &str = "capacity.cluster-autoscaler.kubernetes.io/taints";
/// `defaultMaxPods`: a template's pods when neither maxPods key says.
pub const DEFAULT_MAX_PODS: i64 = 110;
/// `DefaultArch`, used when `CAPI_SCALE_ZERO_DEFAULT_ARCH` is unset (it is not read here).
pub const DEFAULT_ARCH: &str = "amd64";
/// `cloudprovider.DefaultOS`.
pub const DEFAULT_OS: &str = "linux";
/// The resource `InstanceCapacity` gives GPUs ("OpenShift does not yet use the gpu-type
/// annotation, and assumes nvidia gpu").
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";

/// Why a MachineSet's annotations make it no node group at all, or break the listing.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AnnotationError {
    #[error("annotation {key}={value:?} is not an integer")]
    NotAnInteger { key: &'static str, value: String },
    #[error("annotation {key}: {source}")]
    NotAQuantity {
        key: &'static str,
        source: QuantityError,
    },
    #[error("min size {min} is negative")]
    NegativeMin { min: i64 },
    #[error("max size {max} is negative or smaller than min size {min}")]
    BadMax { min: i64, max: i64 },
}

fn annotation<'a>(set: &'a MachineSet, key: &str) -> Option<&'a str> {
    set.annotations().get(key).map(String::as_str)
}

/// `strconv.Atoi` / `ParseInt(val, 10, 0)`: an optional sign and digits, nothing else.
fn integer(key: &'static str, value: &str) -> Result<i64, AnnotationError> {
    value.parse().map_err(|_| AnnotationError::NotAnInteger {
        key,
        value: value.to_owned(),
    })
}

/// `parseScalingBounds`: a missing bound is 0; min ≥ 0, max ≥ 0 and max ≥ min.
pub fn scaling_bounds(set: &MachineSet) -> Result<(i64, i64), AnnotationError> {
    let bound = |key: &'static str| annotation(set, key).map_or(Ok(0), |v| integer(key, v));
    let min = bound(MIN_SIZE_ANNOTATION)?;
    if min < 0 {
        return Err(AnnotationError::NegativeMin { min });
    }
    let max = bound(MAX_SIZE_ANNOTATION)?;
    if max < 0 || max < min {
        return Err(AnnotationError::BadMax { min, max });
    }
    Ok((min, max))
}

/// `parseKey`: a present, non-empty annotation parsed as a quantity, else `zeroQuantity`.
fn quantity_key(set: &MachineSet, key: &'static str) -> Result<Quantity, AnnotationError> {
    match annotation(set, key) {
        Some(value) if !value.is_empty() => {
            Quantity::parse(value).map_err(|source| AnnotationError::NotAQuantity { key, source })
        }
        _ => Ok(Quantity::parsed_zero()),
    }
}

/// `parseIntKey`: a present, non-empty annotation parsed as an integer (`NewQuantity`), else
/// `zeroQuantity`.
fn integer_key(set: &MachineSet, key: &'static str) -> Result<Quantity, AnnotationError> {
    match annotation(set, key) {
        Some(value) if !value.is_empty() => integer(key, value).map(Quantity::new),
        _ => Ok(Quantity::parsed_zero()),
    }
}

/// The upstream key unless it is the provider's `zeroQuantity` by Go's `==` (absent, or the text
/// `"0"`; a `"0m"`, a `"00"` or an integer key's `"0"` is not that and is kept), then the
/// deprecated one: `parseCPUCapacity`, `parseGPUCount`, `parseMaxPodsCapacity`.
fn upstream_first(
    upstream: Result<Quantity, AnnotationError>,
    deprecated: impl FnOnce() -> Result<Quantity, AnnotationError>,
) -> Result<Quantity, AnnotationError> {
    let upstream = upstream?;
    if upstream == Quantity::parsed_zero() {
        deprecated()
    } else {
        Ok(upstream)
    }
}

/// `parseMemoryCapacity`: the upstream quantity, else the deprecated key's whole MiB.
fn memory(set: &MachineSet) -> Result<Quantity, AnnotationError> {
    upstream_first(quantity_key(set, MEMORY), || {
        match annotation(set, DEPRECATED_MEMORY_MB) {
            Some(value) if !value.is_empty() => {
                let mib = integer(DEPRECATED_MEMORY_MB, value)?;
                Ok(Quantity::new(mib.saturating_mul(1 << 20)))
            }
            _ => Ok(Quantity::parsed_zero()),
        }
    })
}

/// The capacity a MachineSet's annotations promise (`InstanceCapacity`): what is zero is left
/// out, except pods, which default to [`DEFAULT_MAX_PODS`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InstanceCapacity {
    pub cpu: Option<Quantity>,
    pub memory: Option<Quantity>,
    pub ephemeral_storage: Option<Quantity>,
    pub gpus: Option<Quantity>,
    pub pods: i64,
}

/// `InstanceCapacity`.
pub fn instance_capacity(set: &MachineSet) -> Result<InstanceCapacity, AnnotationError> {
    let non_zero = |q: Quantity| (!q.is_zero()).then_some(q);
    let cpu = upstream_first(quantity_key(set, CPU), || quantity_key(set, DEPRECATED_CPU))?;
    let memory = memory(set)?;
    let disk = quantity_key(set, EPHEMERAL_DISK)?;
    let gpus = upstream_first(integer_key(set, GPU_COUNT), || {
        integer_key(set, DEPRECATED_GPU_COUNT)
    })?;
    let max_pods = upstream_first(integer_key(set, MAX_PODS), || {
        integer_key(set, DEPRECATED_MAX_PODS)
    })?;
    Ok(InstanceCapacity {
        cpu: non_zero(cpu),
        memory: non_zero(memory),
        ephemeral_storage: non_zero(disk),
        gpus: non_zero(gpus),
        pods: if max_pods.is_zero() {
            DEFAULT_MAX_PODS
        } else {
            max_pods.value()
        },
    })
}

/// Why a MachineSet cannot be simulated as a node (`CanScaleFromZero` false).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum TemplateError {
    #[error("the MachineSet is not readable: {0}")]
    Unreadable(String),
    #[error(transparent)]
    Annotation(#[from] AnnotationError),
    /// "CPU and memory are the minimum necessary for scaling from zero".
    #[error("no CPU capacity ({CPU} or {DEPRECATED_CPU})")]
    NoCpu,
    #[error("no memory capacity ({MEMORY} or {DEPRECATED_MEMORY_MB})")]
    NoMemory,
}

/// The node a MachineSet's Machines would bring, as `TemplateNodeInfo` builds it.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeTemplate {
    pub cpu_millis: u64,
    pub memory_bytes: u64,
    pub ephemeral_disk_bytes: Option<u64>,
    pub gpus: u64,
    pub max_pods: u64,
    /// `buildGenericLabels` (arch, os `linux`, hostname), then the template's
    /// `spec.metadata.labels`, then the `labels` annotation, each overriding the previous.
    pub labels: BTreeMap<String, String>,
    /// The template's `spec.taints`, then the `taints` annotation's.
    pub taints: Vec<Taint>,
}

/// `IsQualifiedName` (k8s.io/apimachinery `pkg/util/validation`): an optional DNS-1123 subdomain
/// prefix and `/`, then a name of 1 to 63 alphanumerics, `-`, `_` or `.`, alphanumeric at both ends.
fn is_qualified_name(key: &str) -> bool {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let name_ok = (1..=63).contains(&name.len()) && is_label_like(name);
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|part| {
                !part.is_empty()
                    && part
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !part.starts_with('-')
                    && !part.ends_with('-')
            })
    });
    name_ok && prefix_ok
}

fn is_label_like(text: &str) -> bool {
    let bytes = text.as_bytes();
    let alnum = |b: &u8| b.is_ascii_alphanumeric();
    bytes
        .iter()
        .all(|b| alnum(b) || matches!(b, b'-' | b'_' | b'.'))
        && bytes.first().is_some_and(alnum)
        && bytes.last().is_some_and(alnum)
}

/// `IsValidLabelValue`: empty, or at most 63 of the name's characters.
fn is_label_value(value: &str) -> bool {
    value.is_empty() || (value.len() <= 63 && is_label_like(value))
}

/// `parseTaint`: `key`, or `key[=value]:effect`; the key must be a qualified name and the value a
/// label value; the effect is not checked.
pub fn parse_taint(text: &str) -> Option<Taint> {
    let parts: Vec<&str> = text.split(':').collect();
    let (key, value, effect) = match parts.as_slice() {
        [key] => (*key, "", ""),
        [key_value, effect] => {
            let kv: Vec<&str> = key_value.split('=').collect();
            match kv.as_slice() {
                [key] => (*key, "", *effect),
                [key, value] if is_label_value(value) => (*key, *value, *effect),
                _ => return None,
            }
        }
        _ => return None,
    };
    if !is_qualified_name(key) {
        return None;
    }
    Some(Taint {
        key: key.to_owned(),
        value: (!value.is_empty()).then(|| value.to_owned()),
        effect: effect.to_owned(),
        time_added: None,
    })
}

/// `Taints`: the template's `spec.taints`, then each valid entry of the comma-separated
/// `taints` annotation (an invalid one is skipped).
pub fn taints(set: &MachineSet) -> Vec<Taint> {
    let mut taints = set.spec.template.spec.taints.clone();
    if let Some(value) = annotation(set, TAINTS) {
        taints.extend(value.split(',').filter_map(parse_taint));
    }
    taints
}

/// `Labels`: the template's `spec.metadata.labels`, then the `labels` annotation's `k=v` pairs
/// (comma-separated, split at the first `=`, nothing trimmed; an entry without `=` is skipped).
pub fn labels(set: &MachineSet) -> BTreeMap<String, String> {
    let mut labels = set.spec.template.spec.metadata.labels.clone();
    if let Some(value) = annotation(set, LABELS) {
        for entry in value.split(',') {
            if let Some((key, value)) = entry.split_once('=') {
                labels.insert(key.to_owned(), value.to_owned());
            }
        }
    }
    labels
}

/// The template node's name (`TemplateNodeInfo` adds a random number; a fixed one keeps the
/// simulation reproducible).
pub fn template_node_name(set: &MachineSet) -> String {
    format!("{}-asg-0", set.name_any())
}

/// `TemplateNodeInfo`: the node of a set that can scale from zero.
pub fn node_template_of(set: &MachineSet) -> Result<NodeTemplate, TemplateError> {
    let capacity = instance_capacity(set)?;
    let cpu = capacity.cpu.ok_or(TemplateError::NoCpu)?;
    let memory = capacity.memory.ok_or(TemplateError::NoMemory)?;
    let unsigned = |v: i64| u64::try_from(v).unwrap_or(0);
    let mut labels = BTreeMap::from([
        ("kubernetes.io/arch".to_owned(), DEFAULT_ARCH.to_owned()),
        ("kubernetes.io/os".to_owned(), DEFAULT_OS.to_owned()),
        ("kubernetes.io/hostname".to_owned(), template_node_name(set)),
    ]);
    labels.extend(self::labels(set));
    Ok(NodeTemplate {
        cpu_millis: unsigned(cpu.milli_value()),
        memory_bytes: unsigned(memory.value()),
        ephemeral_disk_bytes: capacity.ephemeral_storage.map(|q| unsigned(q.value())),
        gpus: capacity.gpus.map_or(0, |q| unsigned(q.value())),
        max_pods: unsigned(capacity.pods),
        labels,
        taints: taints(set),
    })
}

/// Why a MachineSet is not a node group (`nodeGroups`, `newNodeGroupFromScalableResource`).
#[derive(Clone, Debug, PartialEq)]
pub enum NotAGroup {
    /// `isScalableResourceMachineAPIAuthoritative`: `spec.authoritativeAPI` present and not
    /// `MachineAPI` (an absent one counts as `MachineAPI`, an empty one does not).
    NotAuthoritative { api: String },
    /// "Ensure that if the nodegroup has 0 replicas it is capable of scaling".
    CannotScaleFromZero(TemplateError),
    /// "nodegroup … has no scaling capacity": max is 0 (missing bounds read as 0).
    NoScalingCapacity { min: i64, max: i64 },
}

impl fmt::Display for NotAGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotAuthoritative { api } => {
                write!(f, "spec.authoritativeAPI is {api:?}, not MachineAPI")
            }
            Self::CannotScaleFromZero(why) => {
                write!(f, "it has 0 replicas and cannot scale from zero: {why}")
            }
            Self::NoScalingCapacity { min, max } => write!(
                f,
                "it has no scaling capacity (min {min}, max {max}; both {MIN_SIZE_ANNOTATION} and {MAX_SIZE_ANNOTATION} are needed)"
            ),
        }
    }
}

/// A MachineSet as a node group.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeGroup {
    pub name: String,
    pub min: i64,
    pub max: i64,
    /// `spec.replicas` as the listing saw it (`TargetSize`).
    pub replicas: i64,
    /// The node it brings from its annotations, or why there is none (then it scales only while
    /// it has Machines).
    pub template: Result<NodeTemplate, TemplateError>,
}

impl NodeGroup {
    /// Whether the autoscaler may grow it now: a group at zero needs a template.
    pub fn can_scale(&self) -> bool {
        self.replicas > 0 || self.template.is_ok()
    }
}

/// The set as a node group: `Ok(Err(_))` when the autoscaler skips it, `Err` when its annotations
/// are invalid (which fails the autoscaler's whole listing).
pub fn node_group(set: &MachineSet) -> Result<Result<NodeGroup, NotAGroup>, AnnotationError> {
    if let Some(api) = set.spec.authoritative_api.as_deref()
        && api != "MachineAPI"
    {
        return Ok(Err(NotAGroup::NotAuthoritative {
            api: api.to_owned(),
        }));
    }
    let (min, max) = scaling_bounds(set)?;
    let template = node_template_of(set);
    let replicas = set.spec.replicas;
    if replicas == Some(0)
        && let Err(why) = &template
    {
        return Ok(Err(NotAGroup::CannotScaleFromZero(why.clone())));
    }
    if max == 0 {
        return Ok(Err(NotAGroup::NoScalingCapacity { min, max }));
    }
    Ok(Ok(NodeGroup {
        name: set.name_any(),
        min,
        max,
        replicas: i64::from(replicas.unwrap_or(0)),
        template,
    }))
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn set(annotations: Value, replicas: i32, template_spec: Value) -> MachineSet {
        serde_json::from_value(json!({
            "apiVersion": "machine.openshift.io/v1beta1", "kind": "MachineSet",
            "metadata": {"name": "win", "namespace": "ns", "annotations": annotations},
            "spec": {"replicas": replicas, "template": {"spec": template_spec}}
        }))
        .unwrap()
    }

    fn template(annotations: Value) -> Result<NodeTemplate, TemplateError> {
        node_template_of(&set(
            annotations,
            0,
            json!({"metadata": {"labels": {"node-role.kubernetes.io/worker": ""}}}),
        ))
    }

    /// A rule, the MachineSet's annotations, and what the template must then show.
    type TemplateRule = (&'static str, Value, Box<dyn Fn(&NodeTemplate) -> bool>);

    /// The scale-from-zero rules of openshift/kubernetes-autoscaler
    /// `cluster-autoscaler/cloudprovider/openshift/openshift_utils.go` and
    /// `openshift_unstructured.go` (HEAD 70920d3), each with its place. A provider that writes
    /// these annotations in another form (memory as a bare number on the upstream key, a label
    /// list with spaces, a taint without its effect) makes the autoscaler simulate another node,
    /// and the e2e suite's capacity checks fail.
    #[test]
    fn template_rules_are_the_providers() {
        let gi = 1u64 << 30;
        let cases: Vec<TemplateRule> = vec![
            (
                "parseCPUCapacity: the upstream key wins",
                json!({CPU: "4", DEPRECATED_CPU: "2", MEMORY: "16Gi"}),
                Box::new(|t| t.cpu_millis == 4000),
            ),
            (
                "parseCPUCapacity: an upstream \"0\" falls back to the deprecated key",
                json!({CPU: "0", DEPRECATED_CPU: "2", MEMORY: "16Gi"}),
                Box::new(|t| t.cpu_millis == 2000),
            ),
            (
                "parseMemoryCapacity: the upstream key is a quantity",
                json!({CPU: "4", MEMORY: "16Gi", DEPRECATED_MEMORY_MB: "8192"}),
                Box::new(move |t| t.memory_bytes == 16 * gi),
            ),
            (
                "parseMemoryCapacity: a bare upstream number is bytes",
                json!({CPU: "4", MEMORY: "16384"}),
                Box::new(|t| t.memory_bytes == 16384),
            ),
            (
                "parseMemoryCapacity: the deprecated key is whole MiB",
                json!({DEPRECATED_CPU: "2", DEPRECATED_MEMORY_MB: "8192"}),
                Box::new(move |t| t.memory_bytes == 8 * gi),
            ),
            (
                "parseGPUCount: an upstream \"0\" is NewQuantity(0), not zeroQuantity, and is kept",
                json!({CPU: "4", MEMORY: "16Gi", GPU_COUNT: "0", DEPRECATED_GPU_COUNT: "1"}),
                Box::new(|t| t.gpus == 0),
            ),
            (
                "parseMaxPodsCapacity: upstream first",
                json!({CPU: "4", MEMORY: "16Gi", MAX_PODS: "250", DEPRECATED_MAX_PODS: "100"}),
                Box::new(|t| t.max_pods == 250),
            ),
            (
                "parseMaxPodsCapacity: the deprecated key",
                json!({CPU: "4", MEMORY: "16Gi", DEPRECATED_MAX_PODS: "250"}),
                Box::new(|t| t.max_pods == 250),
            ),
            (
                "InstanceCapacity: defaultMaxPods 110",
                json!({CPU: "4", MEMORY: "16Gi"}),
                Box::new(|t| t.max_pods == 110),
            ),
            (
                "parseEphemeralDiskCapacity: upstream key only",
                json!({CPU: "4", MEMORY: "16Gi", EPHEMERAL_DISK: "120Gi"}),
                Box::new(move |t| t.ephemeral_disk_bytes == Some(120 * gi)),
            ),
            (
                "parseGPUCount: deprecated fallback, nvidia.com/gpu",
                json!({CPU: "4", MEMORY: "16Gi", DEPRECATED_GPU_COUNT: "1"}),
                Box::new(|t| t.gpus == 1),
            ),
            (
                "buildGenericLabels: os linux and arch amd64 unless the labels annotation says",
                json!({CPU: "4", MEMORY: "16Gi"}),
                Box::new(|t| {
                    t.labels["kubernetes.io/os"] == "linux"
                        && t.labels["kubernetes.io/arch"] == "amd64"
                        && t.labels["node-role.kubernetes.io/worker"].is_empty()
                }),
            ),
            (
                "Labels: the annotation overrides, split at the first =, nothing trimmed",
                json!({CPU: "4", MEMORY: "16Gi", LABELS: "kubernetes.io/os=windows, a=b=c,novalue"}),
                Box::new(|t| {
                    t.labels["kubernetes.io/os"] == "windows"
                        && t.labels[" a"] == "b=c"
                        && !t.labels.contains_key("novalue")
                }),
            ),
            (
                "Taints: key=value:effect entries, invalid ones skipped",
                json!({CPU: "4", MEMORY: "16Gi", TAINTS: "os=Windows:NoSchedule,bad key=x:NoSchedule,a=b=c:NoSchedule"}),
                Box::new(|t| {
                    t.taints.len() == 1
                        && t.taints[0].key == "os"
                        && t.taints[0].value.as_deref() == Some("Windows")
                        && t.taints[0].effect == "NoSchedule"
                }),
            ),
        ];
        for (rule, annotations, holds) in cases {
            let template = template(annotations).unwrap_or_else(|e| panic!("{rule}: {e}"));
            assert!(holds(&template), "{rule}: {template:?}");
        }
        assert_eq!(
            template(json!({CPU: "4"})),
            Err(TemplateError::NoMemory),
            "CanScaleFromZero: memory required"
        );
        assert_eq!(
            template(json!({MEMORY: "4Gi"})),
            Err(TemplateError::NoCpu),
            "CanScaleFromZero: CPU required"
        );
        assert_eq!(
            template(json!({CPU: "0m", DEPRECATED_CPU: "2", MEMORY: "4Gi"})),
            Err(TemplateError::NoCpu),
            "parseCPUCapacity: only the zeroQuantity \"0\" falls back"
        );
        assert!(matches!(
            template(json!({CPU: "4", MEMORY: "lots"})),
            Err(TemplateError::Annotation(AnnotationError::NotAQuantity {
                key: MEMORY,
                ..
            }))
        ));
        let with_template_taint = node_template_of(&set(
            json!({CPU: "4", MEMORY: "16Gi", TAINTS: "os=Windows:NoSchedule"}),
            0,
            json!({"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoExecute"}]}),
        ))
        .unwrap();
        assert_eq!(
            with_template_taint
                .taints
                .iter()
                .map(|t| t.key.as_str())
                .collect::<Vec<_>>(),
            ["dedicated", "os"],
            "Taints: spec.template.spec.taints, then the annotation's"
        );
    }

    #[test]
    fn node_group_rules_are_the_providers() {
        let bounds =
            |min: &str, max: &str| json!({MIN_SIZE_ANNOTATION: min, MAX_SIZE_ANNOTATION: max});
        let group =
            |annotations: Value, replicas: i32| node_group(&set(annotations, replicas, json!({})));
        assert!(matches!(
            group(bounds("0", "3"), 1),
            Ok(Ok(NodeGroup {
                min: 0,
                max: 3,
                replicas: 1,
                ..
            }))
        ));
        assert!(
            matches!(
                group(bounds("0", "3"), 0),
                Ok(Err(NotAGroup::CannotScaleFromZero(TemplateError::NoCpu)))
            ),
            "newNodeGroupFromScalableResource: 0 replicas need CanScaleFromZero"
        );
        assert!(
            matches!(
                group(json!({}), 1),
                Ok(Err(NotAGroup::NoScalingCapacity { min: 0, max: 0 }))
            ),
            "parseScalingBounds: missing bounds are 0, and max 0 has no scaling capacity"
        );
        assert!(
            matches!(
                group(json!({MAX_SIZE_ANNOTATION: "2"}), 1),
                Ok(Ok(NodeGroup { min: 0, max: 2, .. }))
            ),
            "parseScalingBounds: a missing min is 0"
        );
        assert_eq!(
            group(bounds("2", "1"), 1),
            Err(AnnotationError::BadMax { min: 2, max: 1 })
        );
        assert_eq!(
            group(bounds("-1", "1"), 1),
            Err(AnnotationError::NegativeMin { min: -1 })
        );
        assert_eq!(
            group(bounds("0", " 3"), 1),
            Err(AnnotationError::NotAnInteger {
                key: MAX_SIZE_ANNOTATION,
                value: " 3".into()
            }),
            "strconv.Atoi takes no spaces"
        );
        let mut cluster_api = set(bounds("0", "3"), 1, json!({}));
        cluster_api.spec.authoritative_api = Some("ClusterAPI".into());
        assert!(matches!(
            node_group(&cluster_api),
            Ok(Err(NotAGroup::NotAuthoritative { .. }))
        ));
        cluster_api.spec.authoritative_api = Some(String::new());
        assert!(
            matches!(
                node_group(&cluster_api),
                Ok(Err(NotAGroup::NotAuthoritative { .. }))
            ),
            "isScalableResourceMachineAPIAuthoritative: a present but empty field is not MachineAPI"
        );
    }

    #[test]
    fn taints_parse_as_the_provider_does() {
        let taint = |t: &str| parse_taint(t).map(|t| (t.key, t.value, t.effect));
        assert_eq!(
            taint("os=Windows:NoSchedule"),
            Some(("os".into(), Some("Windows".into()), "NoSchedule".into()))
        );
        assert_eq!(
            taint("dedicated:NoExecute"),
            Some(("dedicated".into(), None, "NoExecute".into()))
        );
        assert_eq!(
            taint("example.com/key=v:Anything"),
            Some((
                "example.com/key".into(),
                Some("v".into()),
                "Anything".into()
            ))
        );
        assert_eq!(
            taint("lonely"),
            Some(("lonely".into(), None, String::new()))
        );
        assert_eq!(taint(""), None);
        assert_eq!(taint("a:b:c"), None);
        assert_eq!(taint("Bad_Prefix/k=v:NoSchedule"), None);
        assert_eq!(taint("k=-v:NoSchedule"), None);
    }
}
