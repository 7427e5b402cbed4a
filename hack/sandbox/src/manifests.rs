//! The YAML the sandbox applies, embedded at build time so the binary runs from any directory:
//! the machine API's CRDs (`manifests/crds/`), the sandbox-only CRDs (`hack/crds/`) and the
//! examples administrators start from (`manifests/examples/`).
//!
//! The names the examples use are the sandbox's too: the infrastructure ID, the MachineSets and
//! the Secrets they reference.

use serde_json::Value;

/// One embedded file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Manifest {
    /// Path from the repository root.
    pub path: &'static str,
    pub text: &'static str,
}

macro_rules! manifest {
    ($path:literal) => {
        Manifest {
            path: $path,
            text: include_str!(concat!("../../../", $path)),
        }
    };
}

/// `Machine` and `MachineSet` (`manifests/crds/`).
pub const MACHINE_API_CRDS: [Manifest; 2] = [
    manifest!("manifests/crds/machine.openshift.io_machines.yaml"),
    manifest!("manifests/crds/machine.openshift.io_machinesets.yaml"),
];

/// CRDs an OpenShift cluster has and kube-sim lacks (`hack/crds/`): `Infrastructure`, the two
/// `Network`s, `DNS`, `MachineAutoscaler`, `ClusterVersion`, `MachineHealthCheck` and OLM's
/// `ClusterServiceVersion`.
pub const SANDBOX_CRDS: [Manifest; 8] = [
    manifest!("hack/crds/infrastructure.yaml"),
    manifest!("hack/crds/network-config.yaml"),
    manifest!("hack/crds/network-operator.yaml"),
    manifest!("hack/crds/dns.yaml"),
    MACHINE_AUTOSCALER_CRD,
    manifest!("hack/crds/clusterversion.yaml"),
    manifest!("hack/crds/machinehealthcheck.yaml"),
    CLUSTER_SERVICE_VERSION_CRD,
];

/// OLM's `ClusterServiceVersion` (`hack/crds/`), which the real control plane needs too: no OLM
/// runs there, and WMCO's CSV is one of the cluster's objects ([`crate::cluster_objects`]).
pub const CLUSTER_SERVICE_VERSION_CRD: Manifest = manifest!("hack/crds/clusterserviceversion.yaml");

/// The Cluster API's IPAM kinds (`IPAddressClaim`, `IPAddress`, as OpenShift installs them) and
/// the reference IPAM controller's pools, for static addresses (`hack/crds/`), for kube-sim; the
/// real control plane has the first two from the machine-api-operator's module.
pub const IPAM_CRDS: [Manifest; 4] = [
    manifest!("hack/crds/ipam.cluster.x-k8s.io_ipaddressclaims.yaml"),
    manifest!("hack/crds/ipam.cluster.x-k8s.io_ipaddresses.yaml"),
    POOL_CRDS[0],
    POOL_CRDS[1],
];

/// The reference IPAM controller's pools (`InClusterIPPool`, namespaced, and
/// `GlobalInClusterIPPool`, cluster-wide; `hack/crds/`).
pub const POOL_CRDS: [Manifest; 2] = [
    manifest!("hack/crds/ipam.cluster.x-k8s.io_inclusterippools.yaml"),
    manifest!("hack/crds/ipam.cluster.x-k8s.io_globalinclusterippools.yaml"),
];

/// `MachineAutoscaler` (`hack/crds/`): a sandbox CRD the real control plane needs too
/// (openshift/api's manifests give it the config kinds).
pub const MACHINE_AUTOSCALER_CRD: Manifest = manifest!("hack/crds/machineautoscaler.yaml");

/// `manifests/examples/`.
pub const EXAMPLES: [Manifest; 5] = [
    manifest!("manifests/examples/credentials-secret.yaml"),
    manifest!("manifests/examples/machineset-windows-image.yaml"),
    manifest!("manifests/examples/machineset-windows-template.yaml"),
    manifest!("manifests/examples/machineset-linux.yaml"),
    manifest!("manifests/examples/machineautoscaler.yaml"),
];

/// The infrastructure ID the examples carry (label `machine.openshift.io/cluster-api-cluster`)
/// and the sandbox's `Infrastructure/cluster` reports. prism-mock's default seed has the category
/// `kubernetes-io-cluster-sandbox: owned` that the controller puts on every VM.
pub const INFRASTRUCTURE_ID: &str = "sandbox";
/// The Windows MachineSet creating VMs from an image, with cloud-init (cloudbase-init images).
pub const WINDOWS_IMAGE_SET: &str = "win-image";
/// The Windows MachineSet deploying a Prism Central template, with Sysprep.
pub const WINDOWS_TEMPLATE_SET: &str = "win-tmpl";
/// The Linux MachineSet.
pub const LINUX_SET: &str = "sandbox-worker";
/// Every example MachineSet.
pub const MACHINE_SETS: [&str; 3] = [WINDOWS_IMAGE_SET, WINDOWS_TEMPLATE_SET, LINUX_SET];
/// The Prism Central credentials Secret (key `credentials`).
pub const CREDENTIALS_SECRET: &str = "nutanix-credentials";
/// WMCO's user-data Secret (key `userData`); the sandbox writes a stand-in.
pub const WINDOWS_USER_DATA_SECRET: &str = "windows-user-data";
/// The installer's worker Ignition Secret (key `userData`); the sandbox writes a stand-in.
pub const LINUX_USER_DATA_SECRET: &str = "worker-user-data";
/// The label naming a Machine's MachineSet.
pub const MACHINE_SET_LABEL: &str = "machine.openshift.io/cluster-api-machineset";

/// Sets an annotation on a MachineSet's template metadata (where our choices live: the
/// machine-api-operator copies them onto each Machine, and its webhook drops them from
/// providerSpec).
pub fn annotate_template(set: &mut Value, key: &str, value: &str) {
    let metadata = &mut set["spec"]["template"]["metadata"];
    if !metadata["annotations"].is_object() {
        metadata["annotations"] = serde_json::json!({});
    }
    metadata["annotations"][key] = serde_json::json!(value);
}

/// Why an embedded file could not be read.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {message}")]
pub struct ManifestError {
    pub path: &'static str,
    pub message: String,
}

/// The objects of the files, in order (empty documents skipped).
pub fn objects(manifests: &[Manifest]) -> Result<Vec<Value>, ManifestError> {
    let mut all = Vec::new();
    for manifest in manifests {
        let documents = kube_sim::load::documents(manifest.text).map_err(|e| ManifestError {
            path: manifest.path,
            message: e.to_string(),
        })?;
        all.extend(documents);
    }
    Ok(all)
}

/// The example object of this kind and name.
pub fn example(kind: &str, name: &str) -> Result<Value, ManifestError> {
    objects(&EXAMPLES)?
        .into_iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .ok_or(ManifestError {
            path: "manifests/examples",
            message: format!("no {kind} named {name}"),
        })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::Path;

    use super::*;

    fn yaml_files(directory: &str) -> BTreeSet<String> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        std::fs::read_dir(root.join(directory))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.ends_with(".yaml"))
            .map(|name| format!("{directory}/{name}"))
            .collect()
    }

    fn embedded(manifests: &[Manifest]) -> BTreeSet<String> {
        manifests.iter().map(|m| m.path.to_owned()).collect()
    }

    #[test]
    fn every_example_and_machine_api_crd_is_embedded() {
        assert_eq!(embedded(&EXAMPLES), yaml_files("manifests/examples"));
        assert_eq!(embedded(&MACHINE_API_CRDS), yaml_files("manifests/crds"));
        for crd in SANDBOX_CRDS.iter().chain(&IPAM_CRDS) {
            assert!(yaml_files("hack/crds").contains(crd.path), "{}", crd.path);
        }
    }

    #[test]
    fn examples_name_the_sandbox_objects() {
        let objects = objects(&EXAMPLES).unwrap();
        let sets: Vec<&Value> = objects
            .iter()
            .filter(|o| o["kind"] == "MachineSet")
            .collect();
        let names: BTreeSet<&str> = sets
            .iter()
            .map(|s| s["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, BTreeSet::from(MACHINE_SETS));
        for set in sets {
            let name = set["metadata"]["name"].as_str().unwrap();
            let template = &set["spec"]["template"];
            let cluster = "machine.openshift.io/cluster-api-cluster";
            // One infrastructure ID everywhere.
            assert_eq!(set["metadata"]["labels"][cluster], INFRASTRUCTURE_ID);
            assert_eq!(
                set["spec"]["selector"]["matchLabels"][cluster],
                INFRASTRUCTURE_ID
            );
            assert_eq!(template["metadata"]["labels"][cluster], INFRASTRUCTURE_ID);
            assert_eq!(template["metadata"]["labels"][MACHINE_SET_LABEL], name);
            assert_eq!(set["spec"]["replicas"], 0, "{name} starts at 0");
            let windows = template["metadata"]["labels"]["machine.openshift.io/os-id"] == "Windows";
            let value = &template["spec"]["providerSpec"]["value"];
            if windows {
                // <set>-<5 characters> must fit a 15-character NetBIOS computer name.
                assert!(name.len() <= 9, "{name} is longer than 9 characters");
                assert_eq!(value["userDataSecret"]["name"], WINDOWS_USER_DATA_SECRET);
            } else {
                assert_eq!(value["userDataSecret"]["name"], LINUX_USER_DATA_SECRET);
            }
            assert_eq!(value["credentialsSecret"]["name"], CREDENTIALS_SECRET);
            for ours in ["imageKind", "guestCustomization"] {
                assert!(
                    value.get(ours).is_none(),
                    "{name}: {ours} would be dropped by the machine-api-operator's webhook: use the annotation"
                );
            }
        }
        let autoscaler = example("MachineAutoscaler", WINDOWS_IMAGE_SET).unwrap();
        assert_eq!(
            autoscaler["spec"]["scaleTargetRef"]["name"],
            WINDOWS_IMAGE_SET
        );
        let secret = example("Secret", CREDENTIALS_SECRET).unwrap();
        let credentials: Value =
            serde_json::from_str(secret["stringData"]["credentials"].as_str().unwrap()).unwrap();
        assert_eq!(credentials[0]["type"], "basic_auth");
    }

    #[test]
    fn examples_use_names_from_the_mocks_default_seed() {
        // The built-in seed is hack/prism-mock/seeds/default.yaml.
        let seed = serde_json::to_value(prism_mock::Seed::default()).unwrap();
        let names = |section: &str| -> BTreeSet<String> {
            seed[section]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["name"].as_str().unwrap().to_owned())
                .collect()
        };
        let categories: BTreeSet<String> = seed["categories"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["key"].as_str().unwrap().to_owned())
            .collect();
        assert!(categories.contains(&format!("kubernetes-io-cluster-{INFRASTRUCTURE_ID}")));
        for set in objects(&EXAMPLES)
            .unwrap()
            .iter()
            .filter(|o| o["kind"] == "MachineSet")
        {
            let value = &set["spec"]["template"]["spec"]["providerSpec"]["value"];
            let image = value["image"]["name"].as_str().unwrap().to_owned();
            let kind = &set["spec"]["template"]["metadata"]["annotations"]
                [nutanix_machine_controller::api::IMAGE_KIND_ANNOTATION];
            let images = if kind == "Template" {
                names("templates")
            } else {
                names("images")
            };
            assert!(images.contains(&image), "{image}");
            assert!(names("clusters").contains(value["cluster"]["name"].as_str().unwrap()));
            for subnet in value["subnets"].as_array().unwrap() {
                assert!(names("subnets").contains(subnet["name"].as_str().unwrap()));
            }
        }
    }
}
