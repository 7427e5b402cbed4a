//! Scale-from-zero annotations of a MachineSet: what one of its Machines would bring, so the
//! cluster autoscaler can simulate a node of a set that has no Machine yet.
//!
//! Both key sets are written every time: the autoscaler prefers the upstream keys
//! (`capacity.cluster-autoscaler.kubernetes.io/*`), and the cluster-autoscaler-operator copies the
//! deprecated `machine.openshift.io/*` keys over only when the upstream ones are missing, so
//! writing only the old keys would leave stale upstream values after a change. Memory is a
//! quantity on the upstream key (`16Gi`; a bare number would be read as bytes) and MiB on the
//! deprecated one. The `labels` key carries `kubernetes.io/os` (`windows` for Windows sets:
//! without it the autoscaler would simulate a Linux node), `kubernetes.io/arch`, and on Windows
//! sets WMCO's `node.openshift.io/os_id=Windows`.
//!
//! What OpenShift's autoscaler reads (openshift/kubernetes-autoscaler
//! `cluster-autoscaler/cloudprovider/openshift/openshift_utils.go` for the keys,
//! `openshift_unstructured.go` `InstanceCapacity` and `Taints`):
//! - `ephemeral-disk` (upstream key only) is a quantity, the template node's ephemeral-storage
//!   capacity and allocatable. The kubelet's ephemeral storage is the root filesystem, on the
//!   system disk (Linux `/var/lib/kubelet`, Windows `C:`), and the VM's system disk is exactly
//!   `systemDiskSize` (an image is resized up to it, never shrunk), so that is the value.
//! - `maxPods` (upstream key, else `machine.openshift.io/maxPods`; both written, as for CPU) is
//!   an integer; without it the autoscaler assumes 110 pods. WMCO starts every Windows kubelet
//!   with `maxPods: 250` (openshift/windows-machine-config-operator `pkg/nodeconfig/nodeconfig.go`
//!   `generateKubeletConfiguration`), so Windows sets get 250. A Linux node's limit comes from
//!   the machine-config pool's KubeletConfig, which this provider does not read: Linux sets get
//!   no maxPods, and the autoscaler's 110 under-counts rather than over-counts.
//! - `taints` is `key=value:Effect,...`, added to `spec.template.spec.taints`. WMCO's kubelet
//!   registers every Windows node with `os=Windows:NoSchedule` (same function,
//!   `RegisterWithTaints`), so a Windows set announces it unless its template already carries
//!   it: the autoscaler then never grows a Windows set for a pod that does not tolerate it (a
//!   Linux pod).

use std::collections::BTreeMap;

use crate::api::quantity::{format_mib, mib_floor, quantity_bytes};
use crate::api::{MachineSet, ParseError};

pub const VCPU: &str = "machine.openshift.io/vCPU";
pub const MEMORY_MB: &str = "machine.openshift.io/memoryMb";
pub const GPU: &str = "machine.openshift.io/GPU";
pub const CAPACITY_CPU: &str = "capacity.cluster-autoscaler.kubernetes.io/cpu";
pub const CAPACITY_MEMORY: &str = "capacity.cluster-autoscaler.kubernetes.io/memory";
pub const CAPACITY_GPU_COUNT: &str = "capacity.cluster-autoscaler.kubernetes.io/gpu-count";
pub const CAPACITY_GPU_TYPE: &str = "capacity.cluster-autoscaler.kubernetes.io/gpu-type";
pub const CAPACITY_LABELS: &str = "capacity.cluster-autoscaler.kubernetes.io/labels";
pub const MAX_PODS: &str = "machine.openshift.io/maxPods";
pub const CAPACITY_MAX_PODS: &str = "capacity.cluster-autoscaler.kubernetes.io/maxPods";
pub const CAPACITY_EPHEMERAL_DISK: &str =
    "capacity.cluster-autoscaler.kubernetes.io/ephemeral-disk";
pub const CAPACITY_TAINTS: &str = "capacity.cluster-autoscaler.kubernetes.io/taints";

/// Every key this module writes; a controller applying them owns exactly these.
pub const KEYS: [&str; 12] = [
    VCPU,
    MEMORY_MB,
    GPU,
    MAX_PODS,
    CAPACITY_CPU,
    CAPACITY_MEMORY,
    CAPACITY_GPU_COUNT,
    CAPACITY_GPU_TYPE,
    CAPACITY_LABELS,
    CAPACITY_MAX_PODS,
    CAPACITY_EPHEMERAL_DISK,
    CAPACITY_TAINTS,
];

/// The pod limit WMCO gives every Windows kubelet.
pub const WINDOWS_MAX_PODS: u32 = 250;

/// The taint WMCO's kubelet registers every Windows node with: key, value, effect.
pub const WINDOWS_TAINT: (&str, &str, &str) = ("os", "Windows", "NoSchedule");

/// The label WMCO gives every Windows node (value `Windows`).
pub const WINDOWS_OS_ID_LABEL: &str = "node.openshift.io/os_id";

/// The architecture of every Nutanix AHV VM this provider creates.
pub const ARCH: &str = "amd64";

/// The extended resource the autoscaler simulates for GPUs. Prism names the GPU vendor only
/// once a device is assigned, and NVIDIA is what AHV passthrough and vGPU offer in practice.
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";

/// Why a MachineSet gets no annotations. The MachineSet controller reports it as
/// `InvalidConfiguration` and does not retry until the MachineSet changes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AnnotationError {
    #[error("spec.template.spec.providerSpec.value is missing")]
    NoProviderSpec,
    #[error("spec.template.spec.providerSpec.value: {0}")]
    Parse(#[from] ParseError),
    #[error("spec.template.spec.providerSpec.value.{field}: {message}")]
    Field {
        field: &'static str,
        message: String,
    },
}

/// The annotations for `set`.
pub fn machine_set_annotations(
    set: &MachineSet,
) -> Result<BTreeMap<String, String>, AnnotationError> {
    let config = set
        .provider_config()
        .ok_or(AnnotationError::NoProviderSpec)??;
    let field_error =
        |field: &'static str, message: String| AnnotationError::Field { field, message };
    let positive = |value: i32, field: &'static str| {
        u32::try_from(value)
            .ok()
            .filter(|v| *v >= 1)
            .ok_or_else(|| field_error(field, format!("must be at least 1, got {value}")))
    };
    let vcpus = u64::from(positive(config.vcpu_sockets, "vcpuSockets")?)
        * u64::from(positive(config.vcpus_per_socket, "vcpusPerSocket")?);
    let memory_mib = mib_floor(
        quantity_bytes(&config.memory_size)
            .map_err(|e| field_error("memorySize", e.to_string()))?,
    );
    let system_disk_mib = if config.system_disk_size.0.trim().is_empty() {
        0
    } else {
        mib_floor(
            quantity_bytes(&config.system_disk_size)
                .map_err(|e| field_error("systemDiskSize", e.to_string()))?,
        )
    };
    let gpus = config.gpus.as_ref().map_or(0, Vec::len);
    let windows = set.is_windows();

    let mut annotations = BTreeMap::from([
        (VCPU, vcpus.to_string()),
        (CAPACITY_CPU, vcpus.to_string()),
        (MEMORY_MB, memory_mib.to_string()),
        (CAPACITY_MEMORY, format_mib(memory_mib)),
        (GPU, gpus.to_string()),
        (CAPACITY_GPU_COUNT, gpus.to_string()),
        (CAPACITY_LABELS, template_labels(windows)),
    ]);
    if gpus > 0 {
        annotations.insert(CAPACITY_GPU_TYPE, GPU_RESOURCE.to_owned());
    }
    // An absent or zero systemDiskSize announces no ephemeral storage, which the autoscaler
    // reads as none: it then grows the set for no pod that asks for some.
    if system_disk_mib > 0 {
        annotations.insert(CAPACITY_EPHEMERAL_DISK, format_mib(system_disk_mib));
    }
    if windows {
        annotations.insert(MAX_PODS, WINDOWS_MAX_PODS.to_string());
        annotations.insert(CAPACITY_MAX_PODS, WINDOWS_MAX_PODS.to_string());
        if !template_has_windows_taint(set) {
            let (key, value, effect) = WINDOWS_TAINT;
            annotations.insert(CAPACITY_TAINTS, format!("{key}={value}:{effect}"));
        }
    }
    Ok(annotations
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect())
}

/// The labels a node of the set registers with that its template does not carry: the OS and
/// architecture, which the autoscaler otherwise takes as `linux`/`amd64` (`buildGenericLabels`),
/// and for Windows `node.openshift.io/os_id=Windows`, which WMCO starts every Windows kubelet
/// with (`--node-labels`, openshift/windows-machine-config-operator `pkg/services/services.go`)
/// and by which OpenShift's own tools find Windows nodes (WMCO's e2e tests list them with
/// `-l node.openshift.io/os_id=Windows`): without it in the template, a pod selecting it could
/// not make the autoscaler grow a Windows set from zero.
fn template_labels(windows: bool) -> String {
    if windows {
        format!("kubernetes.io/arch={ARCH},kubernetes.io/os=windows,{WINDOWS_OS_ID_LABEL}=Windows")
    } else {
        format!("kubernetes.io/arch={ARCH},kubernetes.io/os=linux")
    }
}

/// Whether `spec.template.spec.taints` already has WMCO's Windows taint (the autoscaler adds the
/// annotation's taints to these, so announcing it again would list it twice).
fn template_has_windows_taint(set: &MachineSet) -> bool {
    let (key, value, effect) = WINDOWS_TAINT;
    set.spec.template.spec.taints.iter().any(|taint| {
        taint.key == key && taint.value.as_deref() == Some(value) && taint.effect == effect
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn machine_set(windows: bool, provider_spec: serde_json::Value) -> MachineSet {
        with_taints(windows, provider_spec, json!([]))
    }

    fn with_taints(
        windows: bool,
        provider_spec: serde_json::Value,
        taints: serde_json::Value,
    ) -> MachineSet {
        let mut labels = json!({"machine.openshift.io/cluster-api-cluster": "ocp"});
        if windows {
            labels["machine.openshift.io/os-id"] = json!("Windows");
        }
        serde_json::from_value(json!({
            "apiVersion": "machine.openshift.io/v1beta1", "kind": "MachineSet",
            "metadata": {"name": "ms", "namespace": "openshift-machine-api"},
            "spec": {"template": {"metadata": {"labels": labels},
                                  "spec": {"taints": taints, "providerSpec": {"value": provider_spec}}}}
        }))
        .unwrap()
    }

    fn spec(sockets: i32, per_socket: i32, memory: &str) -> serde_json::Value {
        json!({"vcpuSockets": sockets, "vcpusPerSocket": per_socket, "memorySize": memory})
    }

    fn annotations(windows: bool, provider_spec: serde_json::Value) -> BTreeMap<String, String> {
        machine_set_annotations(&machine_set(windows, provider_spec)).unwrap()
    }

    #[test]
    fn upstream_table_values_on_both_key_sets() {
        // The Go provider's own table: 2 vCPU / 8192 Mi and 4 / 16Gi.
        for (sockets, per_socket, memory, cpu, mib, quantity) in [
            (2, 1, "8192Mi", "2", "8192", "8Gi"),
            (2, 2, "16Gi", "4", "16384", "16Gi"),
            (1, 3, "1536Mi", "3", "1536", "1536Mi"),
        ] {
            let a = annotations(false, spec(sockets, per_socket, memory));
            assert_eq!((a[VCPU].as_str(), a[CAPACITY_CPU].as_str()), (cpu, cpu));
            assert_eq!(
                (a[MEMORY_MB].as_str(), a[CAPACITY_MEMORY].as_str()),
                (mib, quantity)
            );
        }
    }

    #[test]
    fn os_and_arch_labels() {
        assert_eq!(
            annotations(false, spec(1, 1, "4Gi"))[CAPACITY_LABELS],
            "kubernetes.io/arch=amd64,kubernetes.io/os=linux"
        );
        assert_eq!(
            annotations(true, spec(1, 1, "4Gi"))[CAPACITY_LABELS],
            "kubernetes.io/arch=amd64,kubernetes.io/os=windows,node.openshift.io/os_id=Windows"
        );
    }

    #[test]
    fn gpus_counted_with_a_type_only_when_present() {
        let none = annotations(false, spec(1, 1, "4Gi"));
        assert_eq!(
            (none[GPU].as_str(), none[CAPACITY_GPU_COUNT].as_str()),
            ("0", "0")
        );
        assert!(!none.contains_key(CAPACITY_GPU_TYPE));
        let mut with_gpus = spec(1, 1, "4Gi");
        with_gpus["gpus"] =
            json!([{"type": "Name", "name": "Tesla T4"}, {"type": "DeviceID", "deviceID": 7864}]);
        let two = annotations(false, with_gpus);
        assert_eq!(
            (
                two[GPU].as_str(),
                two[CAPACITY_GPU_COUNT].as_str(),
                two[CAPACITY_GPU_TYPE].as_str()
            ),
            ("2", "2", "nvidia.com/gpu")
        );
        assert!(two.keys().all(|k| KEYS.contains(&k.as_str())));
    }

    #[test]
    fn windows_sets_announce_wmcos_taint_and_pod_limit() {
        let windows = annotations(true, spec(1, 1, "4Gi"));
        assert_eq!(windows[CAPACITY_TAINTS], "os=Windows:NoSchedule");
        assert_eq!(
            (
                windows[MAX_PODS].as_str(),
                windows[CAPACITY_MAX_PODS].as_str()
            ),
            ("250", "250")
        );
        let linux = annotations(false, spec(1, 1, "4Gi"));
        for key in [CAPACITY_TAINTS, MAX_PODS, CAPACITY_MAX_PODS] {
            assert!(!linux.contains_key(key), "{key} on a Linux set");
        }
        assert!(windows.keys().all(|k| KEYS.contains(&k.as_str())));
    }

    #[test]
    fn a_template_carrying_the_taint_is_not_announced_twice() {
        let carried = |taints| {
            machine_set_annotations(&with_taints(true, spec(1, 1, "4Gi"), taints)).unwrap()
        };
        let same = carried(json!([{"key": "os", "value": "Windows", "effect": "NoSchedule"}]));
        assert!(!same.contains_key(CAPACITY_TAINTS), "{same:?}");
        assert_eq!(same[CAPACITY_MAX_PODS], "250");
        // Another taint, or the same key with another effect, is not WMCO's.
        for other in [
            json!([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]),
            json!([{"key": "os", "value": "Windows", "effect": "NoExecute"}]),
            json!([{"key": "os", "value": "windows", "effect": "NoSchedule"}]),
        ] {
            assert_eq!(
                carried(other.clone())[CAPACITY_TAINTS],
                "os=Windows:NoSchedule",
                "{other}"
            );
        }
    }

    #[test]
    fn ephemeral_disk_is_the_system_disk() {
        for (disk, expected) in [
            ("120Gi", Some("120Gi")),
            ("122880Mi", Some("120Gi")),
            ("100G", Some("95367Mi")),
            ("0", None),
            ("", None),
        ] {
            let mut with_disk = spec(2, 1, "8Gi");
            with_disk["systemDiskSize"] = json!(disk);
            for windows in [false, true] {
                assert_eq!(
                    annotations(windows, with_disk.clone())
                        .get(CAPACITY_EPHEMERAL_DISK)
                        .map(String::as_str),
                    expected,
                    "{disk:?}"
                );
            }
        }
        let mut bad = spec(1, 1, "4Gi");
        bad["systemDiskSize"] = json!("lots");
        assert!(matches!(
            machine_set_annotations(&machine_set(false, bad)),
            Err(AnnotationError::Field {
                field: "systemDiskSize",
                ..
            })
        ));
    }

    #[test]
    fn bad_provider_specs_are_errors_naming_the_field() {
        assert_eq!(
            machine_set_annotations(&machine_set(false, spec(0, 1, "4Gi")))
                .unwrap_err()
                .to_string(),
            "spec.template.spec.providerSpec.value.vcpuSockets: must be at least 1, got 0"
        );
        assert!(matches!(
            machine_set_annotations(&machine_set(false, spec(1, 1, "four"))),
            Err(AnnotationError::Field {
                field: "memorySize",
                ..
            })
        ));
        assert!(matches!(
            machine_set_annotations(&machine_set(false, json!({"vcpuSockets": "x"}))),
            Err(AnnotationError::Parse(_))
        ));
        let mut no_spec = machine_set(false, json!({}));
        no_spec.spec.template.spec.provider_spec.value = None;
        assert_eq!(
            machine_set_annotations(&no_spec),
            Err(AnnotationError::NoProviderSpec)
        );
    }
}
