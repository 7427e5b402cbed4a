use pretty_assertions::assert_eq;
use prism_types::v3::{GpuMode, GpuVendor, HostGpu};
use serde_json::{Value, json};

use super::*;
use crate::vm::addressing::BoundAddress;
use crate::vm::errors::{ErrorClass, FieldError};
use crate::vm::resolve::ResolvedSubnet;
use crate::vm::secret::AdminPassword;
use crate::vm::unattend::PASSWORD_PLACEHOLDER;

const CLUSTER: &str = "0005b0f1-8f43-a0f2-02b7-3cecef193712";
const OTHER_CLUSTER: &str = "0005b0f1-8f43-a0f2-02b7-3cecef199999";
const SUBNET: &str = "c7938dc6-7659-453e-a688-e26020c68e43";
const SUBNET_2: &str = "d8a49ed7-8760-464f-b799-f37131d79f54";
const IMAGE: &str = "f2a1c0de-0000-4000-8000-000000000001";
const TEMPLATE: &str = "7e3b0d9a-1111-4000-8000-000000000002";
const SOURCE_VM: &str = "9c1d2e3f-2222-4000-8000-000000000003";
const CONTAINER: &str = "5a5a5a5a-3333-4000-8000-000000000004";
const PROJECT: &str = "6b6b6b6b-4444-4000-8000-000000000005";
const IGNITION: &[u8] = br#"{"ignition":{"version":"3.2.0"}}"#;
const WINDOWS_USER_DATA: &[u8] =
    b"<powershell>\nWrite-Host hello\n</powershell>\n<persist>true</persist>\n";

/// One Machine plus everything the plan gets besides it.
struct Case {
    machine: Value,
    resolved: ResolvedReferences,
    user_data: Option<Vec<u8>>,
    password: Option<AdminPassword>,
    mode: ResolutionMode,
}

impl Case {
    fn linux() -> Self {
        Self {
            machine: json!({
                "apiVersion": "machine.openshift.io/v1beta1",
                "kind": "Machine",
                "metadata": {
                    "name": "ocp-7x2kq-worker-0-abcde",
                    "namespace": "openshift-machine-api",
                    "uid": "11111111-2222-4333-8444-555555555555",
                    "labels": {"machine.openshift.io/cluster-api-cluster": "ocp-7x2kq"}
                },
                "spec": {"providerSpec": {"value": {
                    "apiVersion": "machine.openshift.io/v1",
                    "kind": "NutanixMachineProviderConfig",
                    "cluster": {"type": "uuid", "uuid": CLUSTER},
                    "image": {"type": "name", "name": "rhcos"},
                    "subnets": [{"type": "uuid", "uuid": SUBNET}],
                    "vcpuSockets": 2,
                    "vcpusPerSocket": 1,
                    "memorySize": "8Gi",
                    "systemDiskSize": "120Gi",
                    "bootType": "",
                    "project": {"type": ""},
                    "categories": null,
                    "credentialsSecret": {"name": "nutanix-credentials"},
                    "userDataSecret": {"name": "worker-user-data"}
                }}}
            }),
            resolved: serde_json::from_value(json!({
                "clusters": {CLUSTER: {"uuid": CLUSTER}},
                "images": {"rhcos": {"uuid": IMAGE, "sizeBytes": 16u64 << 30}, "data-image": {"uuid": IMAGE}},
                "templates": {"win-template": {"uuid": TEMPLATE, "sizeBytes": 64u64 << 30, "bootType": "UEFI"}},
                "sourceVms": {"win-golden": {"uuid": SOURCE_VM, "sizeBytes": 64u64 << 30}},
                "subnets": {
                    SUBNET: {"uuid": SUBNET, "clusterUuid": CLUSTER},
                    SUBNET_2: {"uuid": SUBNET_2, "clusterUuid": CLUSTER},
                    "vlan-10": {"uuid": SUBNET_2, "clusterUuid": CLUSTER}
                },
                "projects": {"ocp": {"uuid": PROJECT}},
                "categories": {
                    "kubernetes-io-cluster-ocp-7x2kq": {"owned": true},
                    "Environment": {"prod": true, "test": true},
                    "Team": {"infra": true}
                },
                "hostGpus": [
                    {"name": "Tesla T4", "vendor": "NVIDIA", "mode": "PASSTHROUGH_COMPUTE", "device_id": 7864, "status": "UNUSED"},
                    {"name": "Tesla T4", "vendor": "NVIDIA", "mode": "PASSTHROUGH_COMPUTE", "device_id": 7864, "status": "USED"},
                    {"name": "Tesla T4", "vendor": "NVIDIA", "mode": "PASSTHROUGH_COMPUTE", "device_id": 7864, "status": "UNUSED"}
                ],
                "failureDomains": [
                    {"name": "fd-a", "cluster": {"type": "uuid", "uuid": CLUSTER}, "subnets": [{"type": "name", "name": "vlan-10"}]}
                ]
            }))
            .unwrap(),
            user_data: Some(IGNITION.to_vec()),
            password: None,
            mode: ResolutionMode::Strict,
        }
    }

    /// A Windows Machine as the Go provider's MachineSets make them: cloud-init by default.
    fn windows() -> Self {
        let mut case = Self::linux();
        case.machine["metadata"]["name"] = json!("winworker-abcde");
        case.machine["metadata"]["labels"]["machine.openshift.io/os-id"] = json!("Windows");
        case.set("/userDataSecret", json!({"name": "windows-user-data"}));
        case.user_data = Some(WINDOWS_USER_DATA.to_vec());
        case
    }

    /// A Windows Machine that opts into Sysprep with the annotation, as its MachineSet's
    /// template would give it.
    fn sysprep() -> Self {
        let mut case = Self::windows();
        case.annotate(GUEST_CUSTOMIZATION_ANNOTATION, "Sysprep");
        case.password = Some(AdminPassword::new("Ex4mple-Passw0rd!").unwrap());
        case
    }

    fn annotate(&mut self, key: &str, value: &str) -> &mut Self {
        let metadata = &mut self.machine["metadata"];
        if metadata.get("annotations").is_none() {
            metadata["annotations"] = json!({});
        }
        metadata["annotations"][key] = json!(value);
        self
    }

    /// Sets a field of the providerSpec (`/vcpuSockets`) or, with a leading `!`, of the Machine.
    fn set(&mut self, pointer: &str, value: Value) -> &mut Self {
        let pointer = match pointer.strip_prefix('!') {
            Some(machine_pointer) => machine_pointer.to_owned(),
            None => format!("/spec/providerSpec/value{pointer}"),
        };
        let (parent, key) = pointer.rsplit_once('/').unwrap();
        let parent = self
            .machine
            .pointer_mut(parent)
            .unwrap_or_else(|| panic!("no {parent}"));
        match parent {
            Value::Object(map) => {
                map.insert(key.to_owned(), value);
            }
            Value::Array(items) => items[key.parse::<usize>().unwrap()] = value,
            _ => panic!("{pointer} is not in an object or list"),
        }
        self
    }

    fn remove(&mut self, pointer: &str) -> &mut Self {
        let pointer = format!("/spec/providerSpec/value{pointer}");
        let (parent, key) = pointer.rsplit_once('/').unwrap();
        self.machine
            .pointer_mut(parent)
            .unwrap()
            .as_object_mut()
            .unwrap()
            .remove(key);
        self
    }

    fn plan(&self) -> Result<VmPlan, ValidationErrors> {
        let machine: Machine = serde_json::from_value(self.machine.clone()).unwrap();
        let user_data = self.user_data.clone().map(UserData::new);
        let context = PlanContext {
            resolved: &self.resolved,
            mode: self.mode,
            user_data: user_data.as_ref(),
            unread_user_data: UnreadUserData::Unresolved,
            admin_password: self.password.as_ref().map(PasswordValue::Secret),
            claims: ClaimedAddresses::NotClaimed,
        };
        plan_vm(&machine, &ParsedSpec::of(&machine), &context)
    }
}

type Edit = fn(&mut Case);

/// Bad specs: each edit of a good Machine must give exactly one error, at this path, of this
/// class.
fn bad_specs() -> Vec<(&'static str, Edit, &'static str, ErrorClass)> {
    use ErrorClass::{Invalid, Unresolved};
    vec![
        // The Machine itself.
        (
            "name not a DNS label",
            |c| {
                c.set("!/metadata/name", json!("Worker_1"));
            },
            "metadata.name",
            Invalid,
        ),
        (
            "name too long for a host",
            |c| {
                c.set("!/metadata/name", json!("a".repeat(64)));
            },
            "metadata.name",
            Invalid,
        ),
        (
            "no cluster label",
            |c| {
                c.machine["metadata"]["labels"] = json!({});
            },
            "metadata.labels",
            Invalid,
        ),
        (
            "no providerSpec value",
            |c| {
                c.machine["spec"]["providerSpec"] = json!({});
            },
            "providerSpec.value",
            Invalid,
        ),
        (
            "wrong JSON type",
            |c| {
                c.set("/vcpuSockets", json!("four"));
            },
            "providerSpec.vcpuSockets",
            Invalid,
        ),
        (
            "wrong JSON type deep",
            |c| {
                c.set(
                    "/dataDisks",
                    json!([{"diskSize": "1Gi", "deviceProperties": {"deviceIndex": "one"}}]),
                );
            },
            "providerSpec.dataDisks[0].deviceProperties.deviceIndex",
            Invalid,
        ),
        // Identifiers.
        (
            "cluster missing",
            |c| {
                c.remove("/cluster");
            },
            "providerSpec.cluster",
            Invalid,
        ),
        (
            "cluster type unknown",
            |c| {
                c.set("/cluster/type", json!("id"));
            },
            "providerSpec.cluster.type",
            Invalid,
        ),
        (
            "cluster uuid missing",
            |c| {
                c.set("/cluster", json!({"type": "uuid"}));
            },
            "providerSpec.cluster.uuid",
            Invalid,
        ),
        (
            "cluster uuid malformed",
            |c| {
                c.set("/cluster/uuid", json!("not-a-uuid"));
            },
            "providerSpec.cluster.uuid",
            Invalid,
        ),
        (
            "image name empty",
            |c| {
                c.set("/image/name", json!(""));
            },
            "providerSpec.image.name",
            Invalid,
        ),
        (
            "image type missing",
            |c| {
                c.set("/image", json!({"name": "rhcos"}));
            },
            "providerSpec.image.type",
            Invalid,
        ),
        (
            "no subnets",
            |c| {
                c.set("/subnets", json!([]));
            },
            "providerSpec.subnets",
            Invalid,
        ),
        (
            "subnets null",
            |c| {
                c.set("/subnets", Value::Null);
            },
            "providerSpec.subnets",
            Invalid,
        ),
        (
            "33 subnets",
            |c| {
                c.set(
                    "/subnets",
                    json!(vec![json!({"type": "uuid", "uuid": SUBNET}); 33]),
                );
            },
            "providerSpec.subnets",
            Invalid,
        ),
        (
            "second subnet without type",
            |c| {
                c.set(
                    "/subnets",
                    json!([{"type": "uuid", "uuid": SUBNET}, {"uuid": SUBNET_2}]),
                );
            },
            "providerSpec.subnets[1].type",
            Invalid,
        ),
        (
            "project uuid missing",
            |c| {
                c.set("/project", json!({"type": "uuid"}));
            },
            "providerSpec.project.uuid",
            Invalid,
        ),
        // Sizes.
        (
            "vcpusPerSocket zero",
            |c| {
                c.set("/vcpusPerSocket", json!(0));
            },
            "providerSpec.vcpusPerSocket",
            Invalid,
        ),
        (
            "vcpuSockets negative",
            |c| {
                c.set("/vcpuSockets", json!(-1));
            },
            "providerSpec.vcpuSockets",
            Invalid,
        ),
        (
            "memory below 2Gi",
            |c| {
                c.set("/memorySize", json!("1Gi"));
            },
            "providerSpec.memorySize",
            Invalid,
        ),
        (
            "memory not a quantity",
            |c| {
                c.set("/memorySize", json!("lots"));
            },
            "providerSpec.memorySize",
            Invalid,
        ),
        (
            "memory missing",
            |c| {
                c.remove("/memorySize");
            },
            "providerSpec.memorySize",
            Invalid,
        ),
        (
            "system disk below 20Gi",
            |c| {
                c.set("/systemDiskSize", json!("10Gi"));
            },
            "providerSpec.systemDiskSize",
            Invalid,
        ),
        (
            "system disk smaller than the image",
            |c| {
                c.set("/systemDiskSize", json!("20Gi"));
                c.resolved.images.insert(
                    "rhcos".into(),
                    Lookup::Found(ResolvedSource {
                        uuid: IMAGE.into(),
                        size_bytes: Some(40 << 30),
                        boot_type: None,
                        version_id: None,
                        cluster_uuid: None,
                    }),
                );
            },
            "providerSpec.systemDiskSize",
            Invalid,
        ),
        (
            "boot type unknown",
            |c| {
                c.set("/bootType", json!("Bios"));
            },
            "providerSpec.bootType",
            Invalid,
        ),
        // Categories.
        (
            "category key empty",
            |c| {
                c.set("/categories", json!([{"key": "", "value": "prod"}]));
            },
            "providerSpec.categories[0].key",
            Invalid,
        ),
        (
            "category value too long",
            |c| {
                c.set(
                    "/categories",
                    json!([{"key": "Environment", "value": "v".repeat(65)}]),
                );
            },
            "providerSpec.categories[0].value",
            Invalid,
        ),
        (
            "category key twice",
            |c| {
                c.set("/categories", json!([{"key": "Environment", "value": "prod"}, {"key": "Environment", "value": "test"}]));
            },
            "providerSpec.categories[1].key",
            Invalid,
        ),
        (
            "category key reserved",
            |c| {
                c.set(
                    "/categories",
                    json!([{"key": "kubernetes-io-cluster-ocp-7x2kq", "value": "owned"}]),
                );
            },
            "providerSpec.categories[0].key",
            Invalid,
        ),
        // GPUs.
        (
            "gpu type unknown",
            |c| {
                c.set("/gpus", json!([{"type": "Model", "name": "Tesla T4"}]));
            },
            "providerSpec.gpus[0].type",
            Invalid,
        ),
        (
            "gpu name missing",
            |c| {
                c.set("/gpus", json!([{"type": "Name"}]));
            },
            "providerSpec.gpus[0].name",
            Invalid,
        ),
        (
            "gpu device id with a name",
            |c| {
                c.set(
                    "/gpus",
                    json!([{"type": "DeviceID", "deviceID": 7864, "name": "Tesla T4"}]),
                );
            },
            "providerSpec.gpus[0].name",
            Invalid,
        ),
        // Data disks.
        (
            "data disk below 1Gi",
            |c| {
                c.set("/dataDisks", json!([{"diskSize": "512Mi"}]));
            },
            "providerSpec.dataDisks[0].diskSize",
            Invalid,
        ),
        (
            "CDRom on SCSI",
            |c| {
                c.set("/dataDisks", json!([
                {"diskSize": "10Gi", "deviceProperties": {"deviceType": "Disk", "adapterType": "SCSI", "deviceIndex": 1}},
                {"diskSize": "1Gi", "deviceProperties": {"deviceType": "CDRom", "adapterType": "SCSI", "deviceIndex": 2}}]));
            },
            "providerSpec.dataDisks[1].deviceProperties.adapterType",
            Invalid,
        ),
        (
            "device type unknown",
            |c| {
                c.set("/dataDisks", json!([{"diskSize": "10Gi", "deviceProperties": {"deviceType": "Tape", "adapterType": "SCSI", "deviceIndex": 1}}]));
            },
            "providerSpec.dataDisks[0].deviceProperties.deviceType",
            Invalid,
        ),
        (
            "adapter type missing",
            |c| {
                c.set("/dataDisks", json!([{"diskSize": "10Gi", "deviceProperties": {"deviceType": "Disk", "deviceIndex": 1}}]));
            },
            "providerSpec.dataDisks[0].deviceProperties.adapterType",
            Invalid,
        ),
        (
            "adapter type unknown",
            |c| {
                c.set("/dataDisks", json!([{"diskSize": "10Gi", "deviceProperties": {"deviceType": "Disk", "adapterType": "NVMe", "deviceIndex": 1}}]));
            },
            "providerSpec.dataDisks[0].deviceProperties.adapterType",
            Invalid,
        ),
        (
            "device index negative",
            |c| {
                c.set("/dataDisks", json!([{"diskSize": "10Gi", "deviceProperties": {"deviceType": "Disk", "adapterType": "SCSI", "deviceIndex": -1}}]));
            },
            "providerSpec.dataDisks[0].deviceProperties.deviceIndex",
            Invalid,
        ),
        (
            "SCSI 0 is the system disk",
            |c| {
                c.set("/dataDisks", json!([{"diskSize": "10Gi", "deviceProperties": {"deviceType": "Disk", "adapterType": "SCSI", "deviceIndex": 0}}]));
            },
            "providerSpec.dataDisks[0].deviceProperties.deviceIndex",
            Invalid,
        ),
        (
            "IDE 0 is the system CD-ROM",
            |c| {
                c.set("/dataDisks", json!([{"diskSize": "1Gi", "deviceProperties": {"deviceType": "CDRom", "adapterType": "IDE", "deviceIndex": 0}}]));
            },
            "providerSpec.dataDisks[0].deviceProperties.deviceIndex",
            Invalid,
        ),
        (
            "two disks at one address",
            |c| {
                c.set("/dataDisks", json!([
                {"diskSize": "10Gi", "deviceProperties": {"deviceType": "Disk", "adapterType": "SATA", "deviceIndex": 1}},
                {"diskSize": "1Gi", "deviceProperties": {"deviceType": "CDRom", "adapterType": "SATA", "deviceIndex": 1}}]));
            },
            "providerSpec.dataDisks[1].deviceProperties",
            Invalid,
        ),
        (
            "disk mode unknown",
            |c| {
                c.set(
                    "/dataDisks",
                    json!([{"diskSize": "10Gi", "storageConfig": {"diskMode": "Fast"}}]),
                );
            },
            "providerSpec.dataDisks[0].storageConfig.diskMode",
            Invalid,
        ),
        (
            "storage container by name",
            |c| {
                c.set("/dataDisks", json!([{"diskSize": "10Gi", "storageConfig": {"diskMode": "Standard", "storageContainer": {"type": "name", "uuid": CONTAINER}}}]));
            },
            "providerSpec.dataDisks[0].storageConfig.storageContainer.type",
            Invalid,
        ),
        (
            "storage container uuid missing",
            |c| {
                c.set("/dataDisks", json!([{"diskSize": "10Gi", "storageConfig": {"diskMode": "Flash", "storageContainer": {"type": "uuid"}}}]));
            },
            "providerSpec.dataDisks[0].storageConfig.storageContainer.uuid",
            Invalid,
        ),
        (
            "data source type unknown",
            |c| {
                c.set(
                    "/dataDisks",
                    json!([{"diskSize": "10Gi", "dataSource": {"type": "url", "name": "x"}}]),
                );
            },
            "providerSpec.dataDisks[0].dataSource.type",
            Invalid,
        ),
        (
            "IDE disk with SecureBoot",
            |c| {
                c.set("/bootType", json!("SecureBoot"));
                c.set("/dataDisks", json!([{"diskSize": "10Gi", "deviceProperties": {"deviceType": "Disk", "adapterType": "IDE", "deviceIndex": 1}}]));
            },
            "providerSpec.dataDisks[0].deviceProperties.adapterType",
            Invalid,
        ),
        // Failure domain, secrets.
        (
            "failure domain name malformed",
            |c| {
                c.set("/failureDomain", json!({"name": "FD_1"}));
            },
            "providerSpec.failureDomain.name",
            Invalid,
        ),
        (
            "credentials secret missing",
            |c| {
                c.remove("/credentialsSecret");
            },
            "providerSpec.credentialsSecret",
            Invalid,
        ),
        (
            "credentials secret null",
            |c| {
                c.set("/credentialsSecret", Value::Null);
            },
            "providerSpec.credentialsSecret",
            Invalid,
        ),
        (
            "credentials secret unnamed",
            |c| {
                c.set("/credentialsSecret", json!({"name": ""}));
            },
            "providerSpec.credentialsSecret.name",
            Invalid,
        ),
        (
            "user data secret unnamed",
            |c| {
                c.set("/userDataSecret", json!({"name": ""}));
                c.user_data = None;
            },
            "providerSpec.userDataSecret.name",
            Invalid,
        ),
        // Our additions.
        (
            "image kind unknown",
            |c| {
                c.set("/imageKind", json!("Snapshot"));
            },
            "providerSpec.imageKind",
            Invalid,
        ),
        (
            "guest customization unknown",
            |c| {
                c.set("/guestCustomization", json!({"type": "Ignition"}));
            },
            "providerSpec.guestCustomization.type",
            Invalid,
        ),
        (
            "Sysprep on Linux",
            |c| {
                c.set("/guestCustomization", json!({"type": "Sysprep"}));
            },
            "providerSpec.guestCustomization.type",
            Invalid,
        ),
        (
            "Sysprep setting with cloud-init",
            |c| {
                c.set(
                    "/guestCustomization",
                    json!({"type": "CloudInit", "timeZone": "UTC"}),
                );
            },
            "providerSpec.guestCustomization.timeZone",
            Invalid,
        ),
        (
            "Sysprep password with cloud-init",
            |c| {
                *c = Case::windows();
                c.set(
                    "/guestCustomization",
                    json!({"type": "CloudInit", "adminPasswordSecret": {"name": "pw"}}),
                );
            },
            "providerSpec.guestCustomization.adminPasswordSecret",
            Invalid,
        ),
        (
            "time zone malformed",
            |c| {
                *c = Case::sysprep();
                c.set("/guestCustomization", json!({"timeZone": "Europe/Paris"}));
            },
            "providerSpec.guestCustomization.timeZone",
            Invalid,
        ),
        (
            "password secret unnamed",
            |c| {
                *c = Case::sysprep();
                c.set(
                    "/guestCustomization",
                    json!({"adminPasswordSecret": {"name": ""}}),
                );
            },
            "providerSpec.guestCustomization.adminPasswordSecret.name",
            Invalid,
        ),
        (
            "Windows user data without PowerShell",
            |c| {
                *c = Case::sysprep();
                c.user_data = Some(b"#ps1\nWrite-Host hi".to_vec());
            },
            "providerSpec.userDataSecret",
            Invalid,
        ),
        (
            "Windows script too large for Sysprep",
            |c| {
                *c = Case::sysprep();
                c.user_data = Some(
                    [
                        b"<powershell>".as_slice(),
                        &[b'#'; 20_000],
                        b"</powershell>",
                    ]
                    .concat(),
                );
            },
            "providerSpec.userDataSecret",
            Invalid,
        ),
        (
            "Windows Machine given the Linux workers' default Secret",
            |c| {
                *c = Case::windows();
                c.set("/userDataSecret", json!({"name": "worker-user-data"}));
                c.user_data = Some(IGNITION.to_vec());
            },
            "providerSpec.userDataSecret",
            Invalid,
        ),
        (
            "Windows Machine given Ignition under another name",
            |c| {
                *c = Case::windows();
                c.user_data = Some(IGNITION.to_vec());
            },
            "providerSpec.userDataSecret",
            Invalid,
        ),
        (
            "Linux user data not Ignition",
            |c| {
                c.user_data = Some(b"#cloud-config\n".to_vec());
            },
            "providerSpec.userDataSecret",
            Invalid,
        ),
        (
            "Linux user data over Prism's limit",
            |c| {
                c.user_data = Some(
                    format!(
                        r#"{{"ignition":{{"version":"3.2.0"}},"pad":"{}"}}"#,
                        "x".repeat(96_000)
                    )
                    .into_bytes(),
                );
            },
            "providerSpec.userDataSecret",
            Invalid,
        ),
        (
            "data disks on a clone",
            |c| {
                c.set("/imageKind", json!("VM"));
                c.set("/image", json!({"type": "name", "name": "win-golden"}));
                c.set("/dataDisks", json!([{"diskSize": "10Gi"}]));
            },
            "providerSpec.dataDisks",
            Invalid,
        ),
        (
            "GPUs on a template",
            |c| {
                c.set("/imageKind", json!("Template"));
                c.set("/image", json!({"type": "name", "name": "win-template"}));
                c.set("/gpus", json!([{"type": "Name", "name": "Tesla T4"}]));
            },
            "providerSpec.gpus",
            Invalid,
        ),
        (
            "system disk smaller than the template's",
            |c| {
                c.set("/imageKind", json!("Template"));
                c.set("/image", json!({"type": "name", "name": "win-template"}));
                c.set("/systemDiskSize", json!("40Gi"));
            },
            "providerSpec.systemDiskSize",
            Invalid,
        ),
        (
            "boot type differs from the template's",
            |c| {
                c.set("/imageKind", json!("Template"));
                c.set("/image", json!({"type": "name", "name": "win-template"}));
                c.set("/bootType", json!("Legacy"));
            },
            "providerSpec.bootType",
            Invalid,
        ),
        (
            "subnet on another cluster",
            |c| {
                c.resolved.subnets.insert(
                    SUBNET.into(),
                    Lookup::Found(ResolvedSubnet {
                        uuid: SUBNET.into(),
                        cluster_uuid: Some(OTHER_CLUSTER.into()),
                        ipam: None,
                    }),
                );
            },
            "providerSpec.subnets[0]",
            Invalid,
        ),
        // Lookups: retry, never fail.
        (
            "cluster not looked up",
            |c| {
                c.resolved.clusters.clear();
            },
            "providerSpec.cluster",
            Unresolved,
        ),
        (
            "image not found",
            |c| {
                c.resolved.images.insert(
                    "rhcos".into(),
                    Lookup::Failed {
                        error: "no image named \"rhcos\"".into(),
                    },
                );
            },
            "providerSpec.image",
            Unresolved,
        ),
        (
            "two images of that name",
            |c| {
                c.resolved.images.insert(
                    "rhcos".into(),
                    Lookup::Failed {
                        error: "2 images named \"rhcos\"".into(),
                    },
                );
            },
            "providerSpec.image",
            Unresolved,
        ),
        (
            "template not found",
            |c| {
                c.set("/imageKind", json!("Template"));
                c.set("/image", json!({"type": "name", "name": "nope"}));
            },
            "providerSpec.image",
            Unresolved,
        ),
        (
            "subnet not found",
            |c| {
                c.resolved.subnets.remove(SUBNET);
            },
            "providerSpec.subnets[0]",
            Unresolved,
        ),
        (
            "project not found",
            |c| {
                c.set("/project", json!({"type": "name", "name": "missing"}));
            },
            "providerSpec.project",
            Unresolved,
        ),
        (
            "category does not exist",
            |c| {
                c.set("/categories", json!([{"key": "Team", "value": "db"}]));
                c.resolved
                    .categories
                    .get_mut("Team")
                    .unwrap()
                    .insert("db".into(), Lookup::Found(false));
            },
            "providerSpec.categories[0]",
            Unresolved,
        ),
        (
            "owned category not looked up",
            |c| {
                c.resolved
                    .categories
                    .remove("kubernetes-io-cluster-ocp-7x2kq");
            },
            "providerSpec.categories",
            Unresolved,
        ),
        (
            "no free GPU",
            |c| {
                c.set("/gpus", json!([{"type": "Name", "name": "Tesla T4"}, {"type": "Name", "name": "Tesla T4"}, {"type": "DeviceID", "deviceID": 7864}]));
            },
            "providerSpec.gpus[2]",
            Unresolved,
        ),
        (
            "host GPUs not looked up",
            |c| {
                c.set("/gpus", json!([{"type": "Name", "name": "Tesla T4"}]));
                c.resolved.host_gpus = None;
            },
            "providerSpec.gpus",
            Unresolved,
        ),
        (
            "failure domain unknown",
            |c| {
                c.set("/failureDomain", json!({"name": "fd-z"}));
            },
            "providerSpec.failureDomain.name",
            Unresolved,
        ),
        (
            "failure domains not read",
            |c| {
                c.set("/failureDomain", json!({"name": "fd-a"}));
                c.resolved.failure_domains = None;
            },
            "providerSpec.failureDomain.name",
            Unresolved,
        ),
        (
            "user data not read",
            |c| {
                c.user_data = None;
            },
            "providerSpec.userDataSecret",
            Unresolved,
        ),
        (
            "no Administrator password",
            |c| {
                *c = Case::sysprep();
                c.password = None;
            },
            "providerSpec.guestCustomization",
            Unresolved,
        ),
        (
            "password Secret not read",
            |c| {
                *c = Case::sysprep();
                c.password = None;
                c.set(
                    "/guestCustomization",
                    json!({"adminPasswordSecret": {"name": "win-admin"}}),
                );
            },
            "providerSpec.guestCustomization.adminPasswordSecret",
            Unresolved,
        ),
        (
            "data disk image not found",
            |c| {
                c.set(
                    "/dataDisks",
                    json!([{"diskSize": "10Gi", "dataSource": {"type": "name", "name": "gone"}}]),
                );
            },
            "providerSpec.dataDisks[0].dataSource",
            Unresolved,
        ),
        (
            "source VM on another cluster",
            |c| {
                c.set("/imageKind", json!("VM"));
                c.set("/image", json!({"type": "name", "name": "win-golden"}));
                c.resolved.source_vms.insert(
                    "win-golden".into(),
                    Lookup::Found(ResolvedSource {
                        uuid: SOURCE_VM.into(),
                        size_bytes: Some(40 << 30),
                        boot_type: None,
                        version_id: None,
                        cluster_uuid: Some("0005b0f1-0000-0000-0000-00000000beef".into()),
                    }),
                );
            },
            "providerSpec.image",
            Invalid,
        ),
        (
            "source VM disk size unknown",
            |c| {
                c.set("/imageKind", json!("VM"));
                c.set("/image", json!({"type": "name", "name": "win-golden"}));
                c.resolved.source_vms.insert(
                    "win-golden".into(),
                    Lookup::Found(ResolvedSource {
                        uuid: SOURCE_VM.into(),
                        size_bytes: None,
                        boot_type: None,
                        version_id: None,
                        cluster_uuid: None,
                    }),
                );
            },
            "providerSpec.systemDiskSize",
            Unresolved,
        ),
    ]
}

#[test]
fn each_bad_spec_gives_one_error_at_its_field() {
    let cases = bad_specs();
    assert!(
        cases.len() >= 30,
        "at least 30 bad specs, have {}",
        cases.len()
    );
    for (name, edit, path, class) in cases {
        let mut case = Case::linux();
        edit(&mut case);
        let errors = match case.plan() {
            Ok(_) => panic!("{name}: expected an error at {path}"),
            Err(errors) => errors.0,
        };
        let found: Vec<(&str, ErrorClass)> =
            errors.iter().map(|e| (e.path.as_str(), e.class)).collect();
        assert_eq!(found, vec![(path, class)], "{name}: {errors:?}");
    }
}

/// A value of 100,000 characters where the spec wants a name, a UUID, a type or a quantity: the
/// error names the field and quotes the value cut to a few hundred characters, with its length.
#[test]
fn hostile_values_are_quoted_cut_with_their_length() {
    let long = "Q".repeat(100_000);
    let edits: Vec<(&str, Value, &str)> = vec![
        ("!/metadata/name", json!(long), "metadata.name"),
        (
            "/cluster",
            json!({"type": "uuid", "uuid": long}),
            "providerSpec.cluster.uuid",
        ),
        (
            "/image",
            json!({"type": long, "name": "rhcos"}),
            "providerSpec.image.type",
        ),
        (
            "/failureDomain",
            json!({"name": long}),
            "providerSpec.failureDomain.name",
        ),
        ("/memorySize", json!(long), "providerSpec.memorySize"),
        ("/imageKind", json!(long), "providerSpec.imageKind"),
    ];
    for (pointer, value, path) in edits {
        let mut case = Case::linux();
        case.set(pointer, value);
        let errors = case.plan().expect_err(path).0;
        let error = errors
            .iter()
            .find(|error| error.path == path)
            .unwrap_or_else(|| panic!("{path}: {errors:?}"));
        let shown = error.to_string();
        assert!(
            shown.chars().count() < 600,
            "{path}: {} characters",
            shown.chars().count()
        );
        assert!(shown.contains("(100000 characters)"), "{path}: {shown}");
    }
}

#[test]
fn the_good_cases_are_good() {
    Case::linux().plan().unwrap();
    Case::windows().plan().unwrap();
    Case::sysprep().plan().unwrap();
}

#[test]
fn all_errors_are_reported_together() {
    let mut case = Case::linux();
    case.set("/vcpuSockets", json!(0))
        .set("/memorySize", json!("1Gi"))
        .set("/bootType", json!("bios"));
    case.resolved.clusters.clear();
    let errors = case.plan().unwrap_err();
    let paths: Vec<&str> = errors.0.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "providerSpec.cluster",
            "providerSpec.vcpuSockets",
            "providerSpec.memorySize",
            "providerSpec.bootType"
        ]
    );
    assert_eq!(
        errors.class(),
        ErrorClass::Invalid,
        "one invalid error fails the Machine"
    );
    assert!(
        errors
            .to_string()
            .contains("providerSpec.memorySize: 1Gi is below the minimum of 2Gi (invalid)"),
        "{errors}"
    );
}

#[test]
fn only_unresolved_errors_mean_retry() {
    let mut case = Case::linux();
    case.resolved.clusters.clear();
    case.resolved.subnets.clear();
    assert_eq!(case.plan().unwrap_err().class(), ErrorClass::Unresolved);
}

#[test]
fn errors_never_quote_user_data() {
    let mut case = Case::linux();
    case.user_data = Some(b"#cloud-config\npassword: hunter2\n".to_vec());
    let errors = case.plan().unwrap_err();
    assert!(!errors.to_string().contains("hunter2"));
    assert!(!format!("{errors:?}").contains("hunter2"));
}

#[test]
fn linux_plan_matches_the_spec() {
    let plan = Case::linux().plan().unwrap();
    assert_eq!(plan.name, "ocp-7x2kq-worker-0-abcde");
    assert_eq!(
        plan.description,
        "openshift-machine: openshift-machine-api/ocp-7x2kq-worker-0-abcde uid=11111111-2222-4333-8444-555555555555"
    );
    assert_eq!(plan.cluster, EntityRef::Uuid(CLUSTER.into()));
    assert_eq!(
        plan.source,
        SourcePlan::Image(EntityRef::Uuid(IMAGE.into()))
    );
    assert_eq!(plan.subnets, [EntityRef::Uuid(SUBNET.into())]);
    assert_eq!(
        (
            plan.num_sockets,
            plan.vcpus_per_socket,
            plan.memory_mib,
            plan.system_disk_mib
        ),
        (2, 1, 8192, 122_880)
    );
    assert_eq!(plan.boot, BootPlan::Default);
    assert_eq!(plan.project, None);
    assert_eq!(
        plan.categories,
        BTreeMap::from([("kubernetes-io-cluster-ocp-7x2kq".into(), "owned".into())])
    );
    let GuestPlan::CloudInit {
        user_data,
        meta_data: None,
    } = &plan.guest
    else {
        panic!("{:?}", plan.guest)
    };
    let ignition: Value = serde_json::from_slice(&decode_base64(user_data.expose())).unwrap();
    assert_eq!(
        ignition["storage"]["files"][0]["contents"]["source"],
        "data:,ocp-7x2kq-worker-0-abcde"
    );
    assert!(plan.warnings.is_empty(), "{:?}", plan.warnings);
}

fn decode_base64(text: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .unwrap()
}

#[test]
fn windows_defaults_to_cloud_init_and_opts_into_sysprep() {
    // The Go provider's Windows MachineSets (cloudbase-init images) join unchanged.
    let plan = Case::windows().plan().unwrap();
    let GuestPlan::CloudInit {
        user_data,
        meta_data: Some(meta_data),
    } = &plan.guest
    else {
        panic!("{:?}", plan.guest)
    };
    assert_eq!(
        decode_base64(user_data.expose()),
        WINDOWS_USER_DATA,
        "passed through unchanged"
    );
    let meta: Value = serde_json::from_slice(&decode_base64(meta_data.expose())).unwrap();
    assert_eq!(
        meta,
        json!({"hostname": "winworker-abcde", "uuid": "11111111-2222-4333-8444-555555555555"})
    );

    for opt_in in [Case::sysprep(), {
        let mut case = Case::windows();
        case.set("/guestCustomization", json!({"type": "Sysprep"}));
        case.password = Case::sysprep().password;
        case
    }] {
        let plan = opt_in.plan().unwrap();
        let GuestPlan::Sysprep(unattend) = &plan.guest else {
            panic!("{:?}", plan.guest)
        };
        assert!(
            unattend
                .xml
                .expose()
                .contains("<ComputerName>winworker-abcde</ComputerName>")
        );
    }
}

/// MAO's webhook gives a Nutanix Machine without userDataSecret `worker-user-data`, the Linux
/// workers' Ignition: a Windows Machine is refused with it, whatever its customization and
/// whether or not the Secret was read (`render` and `validate` without --user-data).
#[test]
fn a_windows_machine_never_gets_the_linux_workers_user_data() {
    let expected = |errors: ValidationErrors| {
        let [error] = errors.0.as_slice() else {
            panic!("{errors:?}")
        };
        assert_eq!(error.path, "providerSpec.userDataSecret");
        assert_eq!(error.class, ErrorClass::Invalid);
        assert!(error.message.contains("windows-user-data"), "{error}");
        assert!(error.message.contains("never join"), "{error}");
    };
    for (customization, mode, read) in [
        (Case::windows as fn() -> Case, ResolutionMode::Strict, true),
        (Case::windows, ResolutionMode::Strict, false),
        (Case::windows, ResolutionMode::Preview, false),
        (Case::sysprep, ResolutionMode::Strict, true),
        (Case::sysprep, ResolutionMode::Preview, false),
    ] {
        let mut case = customization();
        case.set("/userDataSecret", json!({"name": "worker-user-data"}));
        case.mode = mode;
        case.user_data = read.then(|| IGNITION.to_vec());
        expected(case.plan().unwrap_err());

        let mut case = customization();
        case.mode = mode;
        case.user_data = Some(IGNITION.to_vec());
        expected(case.plan().unwrap_err());
    }
    // Linux Machines keep the default Secret.
    Case::linux().plan().unwrap();
}

#[test]
fn annotations_carry_the_choices_and_win_over_the_provider_spec() {
    let mut case = Case::sysprep();
    case.annotate(IMAGE_KIND_ANNOTATION, "Template")
        .annotate(SYSPREP_TIME_ZONE_ANNOTATION, "W. Europe Standard Time")
        .set("/image", json!({"type": "name", "name": "win-template"}))
        .set("/imageKind", json!("Image"))
        .set("/guestCustomization", json!({"type": "CloudInit"}));
    let plan = case.plan().unwrap();
    assert!(
        matches!(plan.source, SourcePlan::Template { .. }),
        "{:?}",
        plan.source
    );
    let GuestPlan::Sysprep(unattend) = &plan.guest else {
        panic!("{:?}", plan.guest)
    };
    assert!(
        unattend
            .xml
            .expose()
            .contains("<TimeZone>W. Europe Standard Time</TimeZone>")
    );
    for field in ["imageKind", "guestCustomization"] {
        assert!(
            plan.warnings.iter().any(|w| w.starts_with(&format!(
                "providerSpec.{field} is overridden by the annotation"
            ))),
            "{field}: {:?}",
            plan.warnings
        );
    }
}

#[test]
fn choices_written_in_the_provider_spec_still_count_and_say_how_to_survive_the_webhook() {
    let mut case = Case::windows();
    case.set("/imageKind", json!("Template"))
        .set("/image", json!({"type": "name", "name": "win-template"}));
    let plan = case.plan().unwrap();
    assert!(matches!(plan.source, SourcePlan::Template { .. }));
    assert!(
        plan.warnings.iter().any(
            |w| w.contains("dropped by the machine-api-operator's webhook")
                && w.contains(IMAGE_KIND_ANNOTATION)
        ),
        "{:?}",
        plan.warnings
    );
}

#[test]
fn a_bad_annotation_is_reported_at_the_annotation() {
    let cases: [(&str, Edit, String); 5] = [
        (
            "unknown image kind",
            |c| {
                c.annotate(IMAGE_KIND_ANNOTATION, "Snapshot");
            },
            format!("metadata.annotations[{IMAGE_KIND_ANNOTATION}]"),
        ),
        (
            "empty guest customization",
            |c| {
                c.annotate(GUEST_CUSTOMIZATION_ANNOTATION, "");
            },
            format!("metadata.annotations[{GUEST_CUSTOMIZATION_ANNOTATION}]"),
        ),
        (
            "malformed time zone",
            |c| {
                c.annotate(SYSPREP_TIME_ZONE_ANNOTATION, "Europe/Paris");
            },
            format!("metadata.annotations[{SYSPREP_TIME_ZONE_ANNOTATION}]"),
        ),
        (
            "empty password Secret name",
            |c| {
                c.annotate(SYSPREP_ADMIN_PASSWORD_SECRET_ANNOTATION, "");
            },
            format!("metadata.annotations[{SYSPREP_ADMIN_PASSWORD_SECRET_ANNOTATION}]"),
        ),
        (
            "Sysprep on Linux",
            |c| {
                *c = Case::linux();
                c.annotate(GUEST_CUSTOMIZATION_ANNOTATION, "Sysprep");
            },
            format!("metadata.annotations[{GUEST_CUSTOMIZATION_ANNOTATION}]"),
        ),
    ];
    for (name, edit, path) in cases {
        let mut case = Case::sysprep();
        edit(&mut case);
        let errors = case.plan().unwrap_err().0;
        let found: Vec<(&str, ErrorClass)> =
            errors.iter().map(|e| (e.path.as_str(), e.class)).collect();
        assert_eq!(
            found,
            vec![(path.as_str(), ErrorClass::Invalid)],
            "{name}: {errors:?}"
        );
    }
}

#[test]
fn a_long_windows_name_is_left_to_wmco_with_a_warning() {
    let mut case = Case::sysprep();
    case.set("!/metadata/name", json!("ocp-7x2kq-windows-abcde"));
    let plan = case.plan().unwrap();
    assert!(
        plan.warnings
            .iter()
            .any(|w| w.contains("ComputerName is left out")),
        "{:?}",
        plan.warnings
    );
}

#[test]
fn secure_boot_sets_q35_and_warns_about_the_customization_cdrom() {
    let mut case = Case::linux();
    case.set("/bootType", json!("SecureBoot"));
    let plan = case.plan().unwrap();
    assert_eq!(plan.boot, BootPlan::SecureBoot);
    assert!(
        plan.warnings.iter().any(|w| w.contains("VMM-30102")),
        "{:?}",
        plan.warnings
    );
}

/// Validation warns exactly where a failed create is explained as VMM-30102: one definition
/// ([`secure_boot_customized`]) for both.
#[test]
fn the_secure_boot_warning_follows_the_one_definition() {
    let secure = |mut case: Case| {
        case.set("/bootType", json!("SecureBoot"));
        case
    };
    let without_user_data = {
        let mut case = secure(Case::linux());
        case.set("/userDataSecret", Value::Null);
        case.user_data = None;
        case
    };
    let mut uefi = Case::sysprep();
    uefi.set("/bootType", json!("UEFI"));
    let table = [
        ("Linux with user data", secure(Case::linux()), true),
        ("Linux without user data", without_user_data, false),
        ("Sysprep", secure(Case::sysprep()), true),
        ("Sysprep on UEFI", uefi, false),
    ];
    for (name, case, expected) in table {
        let machine: Machine = serde_json::from_value(case.machine.clone()).unwrap();
        let spec = ParsedSpec::of(&machine);
        assert_eq!(spec.secure_boot_customized(), expected, "{name}");
        let plan = case.plan().unwrap();
        let warned = plan
            .warnings
            .iter()
            .any(|w| w == SECURE_BOOT_CUSTOMIZATION_WARNING);
        assert_eq!(warned, expected, "{name}: {:?}", plan.warnings);
    }
}

#[test]
fn failure_domain_replaces_cluster_and_subnets() {
    let mut case = Case::linux();
    case.set("/failureDomain", json!({"name": "fd-a"}));
    case.set(
        "/subnets",
        json!([{"type": "uuid", "uuid": SUBNET}, {"type": "uuid", "uuid": SUBNET_2}]),
    );
    let plan = case.plan().unwrap();
    assert_eq!(plan.subnets, [EntityRef::Uuid(SUBNET_2.into())]);
}

#[test]
fn gpus_take_distinct_free_devices() {
    let mut case = Case::linux();
    case.set(
        "/gpus",
        json!([{"type": "Name", "name": "Tesla T4"}, {"type": "DeviceID", "deviceID": 7864}]),
    );
    let plan = case.plan().unwrap();
    let assigned = PlannedGpu::Assigned {
        vendor: GpuVendor::Nvidia,
        mode: GpuMode::PassthroughCompute,
        device_id: Some(7864),
    };
    assert_eq!(plan.gpus, [assigned.clone(), assigned]);
    let Some(Lookup::Found(inventory)) = &case.resolved.host_gpus else {
        panic!()
    };
    let taken: Vec<&HostGpu> = inventory.iter().filter(|g| g.is_unused()).collect();
    assert_eq!(taken.len(), 2, "both free devices, not the used one");
}

#[test]
fn a_missing_owned_category_is_left_out_with_a_warning() {
    let mut case = Case::linux();
    case.resolved
        .categories
        .get_mut("kubernetes-io-cluster-ocp-7x2kq")
        .unwrap()
        .insert("owned".into(), Lookup::Found(false));
    let plan = case.plan().unwrap();
    assert!(plan.categories.is_empty());
    assert!(
        plan.warnings.iter().any(|w| w.contains("teardown")),
        "{:?}",
        plan.warnings
    );
}

#[test]
fn user_categories_and_project_are_planned() {
    let mut case = Case::linux();
    case.set(
        "/categories",
        json!([{"key": "Environment", "value": "prod"}, {"key": "Team", "value": "infra"}]),
    );
    case.set("/project", json!({"type": "name", "name": "ocp"}));
    let plan = case.plan().unwrap();
    assert_eq!(plan.categories.len(), 3);
    assert_eq!(plan.categories["Team"], "infra");
    assert_eq!(plan.project, Some(EntityRef::Uuid(PROJECT.into())));
}

#[test]
fn a_template_or_vm_larger_disk_becomes_a_resize() {
    for (kind, name) in [("Template", "win-template"), ("VM", "win-golden")] {
        let mut case = Case::windows();
        case.set("/imageKind", json!(kind))
            .set("/image", json!({"type": "name", "name": name}))
            .set("/systemDiskSize", json!("100Gi"));
        let plan = case.plan().unwrap();
        let resize = match plan.source {
            SourcePlan::Template {
                resize_system_disk_mib,
                ..
            }
            | SourcePlan::Vm {
                resize_system_disk_mib,
                ..
            } => resize_system_disk_mib,
            SourcePlan::Image(_) => panic!("{kind}"),
        };
        assert_eq!(resize, Some(102_400), "{kind}");
        assert_eq!(plan.boot, BootPlan::FromSource);

        case.set("/systemDiskSize", json!("64Gi"));
        let plan = case.plan().unwrap();
        assert!(
            matches!(
                plan.source,
                SourcePlan::Template {
                    resize_system_disk_mib: None,
                    ..
                } | SourcePlan::Vm {
                    resize_system_disk_mib: None,
                    ..
                }
            ),
            "{kind}: same size, no resize"
        );
    }
}

#[test]
fn data_disks_are_planned_with_addresses_and_storage() {
    let mut case = Case::linux();
    case.set("/dataDisks", json!([
        {"diskSize": "50Gi", "deviceProperties": {"deviceType": "Disk", "adapterType": "SCSI", "deviceIndex": 1},
         "storageConfig": {"diskMode": "Flash", "storageContainer": {"type": "uuid", "uuid": CONTAINER}},
         "dataSource": {"type": "name", "name": "data-image"}},
        {"diskSize": "10Gi"}
    ]));
    let plan = case.plan().unwrap();
    assert_eq!(plan.data_disks[0].size_mib, 51_200);
    assert_eq!(
        plan.data_disks[0]
            .address
            .as_ref()
            .map(|a| (a.adapter.as_str(), a.index)),
        Some(("SCSI", 1))
    );
    assert!(plan.data_disks[0].flash_mode);
    assert_eq!(
        plan.data_disks[0].storage_container_uuid.as_deref(),
        Some(CONTAINER)
    );
    assert_eq!(
        plan.data_disks[0].data_source,
        Some(EntityRef::Uuid(IMAGE.into()))
    );
    assert_eq!(plan.data_disks[1].address, None);
}

#[test]
fn preview_leaves_names_as_names_and_shows_a_password_placeholder() {
    let mut case = Case::sysprep();
    case.mode = ResolutionMode::Preview;
    case.resolved = ResolvedReferences::default();
    case.password = None;
    let plan = case.plan().unwrap();
    assert_eq!(
        plan.source,
        SourcePlan::Image(EntityRef::Name("rhcos".into()))
    );
    assert_eq!(
        plan.cluster,
        EntityRef::Uuid(CLUSTER.into()),
        "UUIDs need no lookup to be shown"
    );
    let GuestPlan::Sysprep(unattend) = &plan.guest else {
        panic!()
    };
    assert!(unattend.xml.expose().contains(PASSWORD_PLACEHOLDER));
    assert!(
        plan.categories
            .contains_key("kubernetes-io-cluster-ocp-7x2kq")
    );
}

#[test]
fn a_placeholder_password_is_refused_for_real_vms() {
    let case = Case::sysprep();
    let machine: Machine = serde_json::from_value(case.machine.clone()).unwrap();
    let user_data = UserData::new(WINDOWS_USER_DATA.to_vec());
    let context = PlanContext {
        resolved: &case.resolved,
        mode: ResolutionMode::Strict,
        user_data: Some(&user_data),
        unread_user_data: UnreadUserData::Unresolved,
        admin_password: Some(PasswordValue::Placeholder),
        claims: ClaimedAddresses::NotClaimed,
    };
    let errors = plan_vm(&machine, &ParsedSpec::of(&machine), &context).unwrap_err();
    assert_eq!(
        errors.0,
        [FieldError {
            path: "providerSpec.guestCustomization".into(),
            class: ErrorClass::Unresolved,
            message: "no Administrator password was given for Sysprep".into()
        }]
    );
}

/// The controller retries a Machine whose user-data Secret it has not read; `validate` without
/// --user-data says the user data was not checked, and goes on.
#[test]
fn unread_user_data_is_unresolved_for_the_controller_and_not_checked_for_validate() {
    let mut case = Case::linux();
    case.user_data = None;
    let errors = case.plan().unwrap_err();
    assert_eq!(
        errors
            .0
            .iter()
            .map(|e| (e.path.as_str(), e.class))
            .collect::<Vec<_>>(),
        [("providerSpec.userDataSecret", ErrorClass::Unresolved)]
    );

    let machine: Machine = serde_json::from_value(case.machine.clone()).unwrap();
    let context = PlanContext {
        resolved: &case.resolved,
        mode: ResolutionMode::Strict,
        user_data: None,
        unread_user_data: UnreadUserData::NotChecked,
        admin_password: None,
        claims: ClaimedAddresses::NotClaimed,
    };
    let plan = plan_vm(&machine, &ParsedSpec::of(&machine), &context).unwrap();
    assert_eq!(plan.guest, GuestPlan::None);
    assert!(
        plan.warnings.contains(
            &"user data not checked: pass --user-data with the userData of Secret \"worker-user-data\""
                .to_owned()
        ),
        "{:?}",
        plan.warnings
    );

    // `doctor` found no such Secret in the cluster: an error naming it.
    let errors = plan_vm(
        &machine,
        &ParsedSpec::of(&machine),
        &PlanContext {
            unread_user_data: UnreadUserData::Absent,
            ..context
        },
    )
    .unwrap_err();
    assert_eq!(
        errors
            .0
            .iter()
            .map(|e| (e.path.as_str(), e.class, e.message.as_str()))
            .collect::<Vec<_>>(),
        [(
            "providerSpec.userDataSecret",
            ErrorClass::Unresolved,
            "Secret \"worker-user-data\" (key userData) does not exist in the Machine's namespace"
        )]
    );
}

/// A misspelt field inside the spec's objects is warned about too, with its path; every field
/// the upstream types have passes (the documented Windows case has some of each).
#[test]
fn unknown_nested_fields_are_warned_about_with_their_path() {
    let mut case = Case::windows();
    case.set("/cluster/nmae", json!("pe-1"))
        .set("/subnets/0/uiid", json!("x"))
        .set(
            "/dataDisks",
            json!([{"diskSize": "10Gi",
                    "deviceProperties": {"deviceType": "Disk", "adapterType": "SCSI", "deviceIndex": 1},
                    "storageConfig": {"diskMode": "Standard", "storageContainer": {"type": "uuid", "uuid": "0005b0f1-8f43-a0f2-02b7-3cecef193712", "name": "n"}},
                    "dataSorce": {"type": "name", "name": "img"}}]),
        )
        .set("/userDataSecret/nmae", json!("w"));
    let plan = case.plan().unwrap();
    assert_eq!(
        plan.warnings,
        [
            "providerSpec.cluster.nmae is not a field of NutanixMachineProviderConfig: it is ignored (check its spelling)",
            "providerSpec.subnets[0].uiid is not a field of NutanixMachineProviderConfig: it is ignored (check its spelling)",
            "providerSpec.dataDisks[0].storageConfig.storageContainer.name is not a field of NutanixMachineProviderConfig: it is ignored (check its spelling)",
            "providerSpec.dataDisks[0].dataSorce is not a field of NutanixMachineProviderConfig: it is ignored (check its spelling)",
            "providerSpec.userDataSecret.nmae is not a field of NutanixMachineProviderConfig: it is ignored (check its spelling)",
        ]
    );
}

/// A misspelt providerSpec field or annotation is ignored by the provider: it is warned about,
/// not passed over in silence.
#[test]
fn unknown_fields_and_annotations_of_ours_are_warned_about() {
    let mut case = Case::windows();
    case.set("/vcpuSocket", json!(4))
        .annotate("nutanix.machine.openshift.io/image-knd", "Template")
        .annotate("machine.openshift.io/exclude-node-draining", "");
    let plan = case.plan().unwrap();
    assert_eq!(
        plan.warnings,
        [
            "providerSpec.vcpuSocket is not a field of NutanixMachineProviderConfig: it is ignored (check its spelling)",
            "annotation \"nutanix.machine.openshift.io/image-knd\" is not one the provider reads (nutanix.machine.openshift.io/image-kind, nutanix.machine.openshift.io/guest-customization, nutanix.machine.openshift.io/sysprep-time-zone, nutanix.machine.openshift.io/sysprep-admin-password-secret, nutanix.machine.openshift.io/system-disk-storage-container, nutanix.machine.openshift.io/vtpm, nutanix.machine.openshift.io/ip-pool, nutanix.machine.openshift.io/nameservers): it is ignored (check its spelling)",
        ]
    );
    assert!(Case::windows().plan().unwrap().warnings.is_empty());
}

/// cloudbase-init skips user data in no format it knows: a Windows Machine is warned.
#[test]
fn windows_user_data_cloudbase_init_would_skip_is_warned_about() {
    let mut case = Case::windows();
    case.user_data = Some(b"Write-Host hello".to_vec());
    let plan = case.plan().unwrap();
    assert_eq!(
        plan.warnings,
        [
            "providerSpec.userDataSecret: the user data is neither a script nor cloud-config that cloudbase-init runs (WMCO's is a <powershell> script): the VM would boot without it; check the Secret's userData"
        ]
    );
    for runs in [WINDOWS_USER_DATA, b"#cloud-config\nusers: []\n"] {
        case.user_data = Some(runs.to_vec());
        assert!(case.plan().unwrap().warnings.is_empty());
    }
}

#[test]
fn dns_labels() {
    for good in ["a", "worker-0", "a1", &"a".repeat(63)] {
        assert!(is_dns_label(good), "{good}");
    }
    for bad in ["", "-a", "a-", "A", "a.b", "a_b", &"a".repeat(64)] {
        assert!(!is_dns_label(bad), "{bad}");
    }
}

#[test]
fn resolved_entities_are_looked_up_by_uuid_too() {
    let mut case = Case::linux();
    case.set(
        "/image",
        json!({"type": "uuid", "uuid": IMAGE.to_uppercase()}),
    );
    case.resolved.images.insert(
        IMAGE.into(),
        Lookup::Found(ResolvedSource {
            uuid: IMAGE.into(),
            size_bytes: None,
            boot_type: None,
            version_id: None,
            cluster_uuid: None,
        }),
    );
    let plan = case.plan().unwrap();
    assert_eq!(
        plan.source,
        SourcePlan::Image(EntityRef::Uuid(IMAGE.into())),
        "UUIDs are compared in lower case"
    );
}

#[test]
fn debug_of_a_plan_shows_no_secret() {
    let plan = Case::sysprep().plan().unwrap();
    let debug = format!("{plan:?}");
    assert!(!debug.contains("Ex4mple-Passw0rd!"));
    assert!(!debug.contains("Write-Host hello"));
    let GuestPlan::Sysprep(unattend) = &plan.guest else {
        panic!()
    };
    assert!(
        !debug.contains(&unattend.to_base64().expose()[..40]),
        "not even the encoded unattend"
    );
    let linux = Case::linux().plan().unwrap();
    let GuestPlan::CloudInit { user_data, .. } = &linux.guest else {
        panic!()
    };
    assert!(!format!("{linux:?}").contains(user_data.expose()));
}

/// A Windows 11 / Server 2025 Machine: UEFI, a vTPM and its boot disk in a chosen container.
fn with_vtpm_and_container() -> Case {
    let mut case = Case::windows();
    case.set("/bootType", json!("UEFI"))
        .annotate(VTPM_ANNOTATION, "Enabled")
        .annotate(
            SYSTEM_DISK_STORAGE_CONTAINER_ANNOTATION,
            &CONTAINER.to_ascii_uppercase(),
        );
    case
}

fn source_vm_booting(case: &mut Case, boot_type: Option<BootType>) {
    case.annotate(IMAGE_KIND_ANNOTATION, "VM")
        .set("/image", json!({"type": "name", "name": "win-golden"}))
        .set("/bootType", json!(""));
    case.resolved.source_vms.insert(
        "win-golden".into(),
        Lookup::Found(ResolvedSource {
            uuid: SOURCE_VM.into(),
            size_bytes: Some(64 << 30),
            boot_type,
            version_id: None,
            cluster_uuid: Some(CLUSTER.into()),
        }),
    );
}

#[test]
fn a_vtpm_and_a_system_disk_container_are_planned_where_ahv_takes_them() {
    let plan = with_vtpm_and_container().plan().unwrap();
    assert!(plan.vtpm_enabled);
    assert_eq!(
        plan.system_disk_storage_container.as_deref(),
        Some(CONTAINER),
        "the UUID, in Prism's lower case"
    );
    assert!(plan.warnings.is_empty(), "{:?}", plan.warnings);

    let accepted: [(&str, Edit, bool); 6] = [
        (
            "Secure Boot",
            |c| {
                c.set("/bootType", json!("SecureBoot"));
            },
            true,
        ),
        (
            "a UEFI template",
            |c| {
                c.machine["metadata"]["annotations"]
                    .as_object_mut()
                    .unwrap()
                    .remove(SYSTEM_DISK_STORAGE_CONTAINER_ANNOTATION);
                c.annotate(IMAGE_KIND_ANNOTATION, "Template")
                    .set("/image", json!({"type": "name", "name": "win-template"}))
                    .set("/bootType", json!(""));
            },
            true,
        ),
        (
            "a Secure Boot source VM",
            |c| {
                c.machine["metadata"]["annotations"]
                    .as_object_mut()
                    .unwrap()
                    .remove(SYSTEM_DISK_STORAGE_CONTAINER_ANNOTATION);
                source_vm_booting(c, Some(BootType::SecureBoot));
            },
            true,
        ),
        (
            "Disabled on Legacy BIOS",
            |c| {
                c.annotate(VTPM_ANNOTATION, "Disabled")
                    .set("/bootType", json!("Legacy"));
            },
            false,
        ),
        (
            "no vTPM annotation",
            |c| {
                c.machine["metadata"]["annotations"]
                    .as_object_mut()
                    .unwrap()
                    .remove(VTPM_ANNOTATION);
                c.set("/bootType", json!(""));
            },
            false,
        ),
        (
            "a container alone",
            |c| {
                c.annotate(VTPM_ANNOTATION, "Disabled");
            },
            false,
        ),
    ];
    for (name, edit, vtpm) in accepted {
        let mut case = with_vtpm_and_container();
        edit(&mut case);
        let plan = case.plan().unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(plan.vtpm_enabled, vtpm, "{name}");
        assert!(
            !plan.warnings.iter().any(|w| w.contains(VTPM_ANNOTATION)),
            "{name}: {:?}",
            plan.warnings
        );
    }

    // A source whose firmware is not known: planned, with a warning naming the annotation.
    let mut case = with_vtpm_and_container();
    case.machine["metadata"]["annotations"]
        .as_object_mut()
        .unwrap()
        .remove(SYSTEM_DISK_STORAGE_CONTAINER_ANNOTATION);
    source_vm_booting(&mut case, None);
    let plan = case.plan().unwrap();
    assert!(plan.vtpm_enabled);
    assert!(
        plan.warnings
            .iter()
            .any(|w| w.starts_with(VTPM_ANNOTATION) && w.contains("Legacy BIOS")),
        "{:?}",
        plan.warnings
    );
}

#[test]
fn a_vtpm_or_system_disk_container_ahv_would_refuse_is_invalid_at_its_annotation() {
    let vtpm = format!("metadata.annotations[{VTPM_ANNOTATION}]");
    let container = format!("metadata.annotations[{SYSTEM_DISK_STORAGE_CONTAINER_ANNOTATION}]");
    let cases: [(&str, Edit, &String, &str); 8] = [
        (
            "vTPM on AHV's default firmware (Legacy BIOS)",
            |c| {
                c.set("/bootType", json!(""));
            },
            &vtpm,
            "bootType \"\" boots with Legacy BIOS",
        ),
        (
            "vTPM on Legacy BIOS",
            |c| {
                c.set("/bootType", json!("Legacy"));
            },
            &vtpm,
            "set bootType UEFI or SecureBoot",
        ),
        (
            "vTPM on a Legacy BIOS source VM",
            |c| {
                c.machine["metadata"]["annotations"]
                    .as_object_mut()
                    .unwrap()
                    .remove(SYSTEM_DISK_STORAGE_CONTAINER_ANNOTATION);
                source_vm_booting(c, Some(BootType::Legacy));
            },
            &vtpm,
            "the source VM boots with Legacy BIOS",
        ),
        (
            "unknown vTPM value",
            |c| {
                c.annotate(VTPM_ANNOTATION, "true");
            },
            &vtpm,
            "expected one of [\"Disabled\", \"Enabled\"]",
        ),
        (
            "a container name",
            |c| {
                c.annotate(
                    SYSTEM_DISK_STORAGE_CONTAINER_ANNOTATION,
                    "default-container",
                );
            },
            &container,
            "chosen by UUID only",
        ),
        (
            "an empty container",
            |c| {
                c.annotate(SYSTEM_DISK_STORAGE_CONTAINER_ANNOTATION, "");
            },
            &container,
            "is empty",
        ),
        (
            "a container for a template",
            |c| {
                c.annotate(IMAGE_KIND_ANNOTATION, "Template")
                    .set("/image", json!({"type": "name", "name": "win-template"}))
                    .set("/bootType", json!(""));
            },
            &container,
            "cannot be used with image kind Template",
        ),
        (
            "a container for a source VM",
            |c| {
                source_vm_booting(c, Some(BootType::Uefi));
            },
            &container,
            "cannot be used with image kind VM",
        ),
    ];
    for (name, edit, path, message) in cases {
        let mut case = with_vtpm_and_container();
        edit(&mut case);
        let errors = case.plan().unwrap_err().0;
        let found: Vec<(&str, ErrorClass)> =
            errors.iter().map(|e| (e.path.as_str(), e.class)).collect();
        assert_eq!(
            found,
            vec![(path.as_str(), ErrorClass::Invalid)],
            "{name}: {errors:?}"
        );
        assert!(
            errors[0].message.contains(message),
            "{name}: {}",
            errors[0].message
        );
    }
}

/// A Windows Machine taking `ip` from a pool on its subnet, which Prism manages or not, with
/// its DNS servers; planned with the address bound.
fn with_bound_address(mut case: Case, managed: bool, ip: &str) -> Result<VmPlan, ValidationErrors> {
    case.annotate(
        crate::api::IP_POOL_ANNOTATION,
        "ipam.cluster.x-k8s.io/InClusterIPPool/workers",
    );
    case.annotate(crate::api::NAMESERVERS_ANNOTATION, "10.50.0.2");
    if let Some(Lookup::Found(subnet)) = case.resolved.subnets.get_mut(SUBNET) {
        subnet.ipam = Some(if managed {
            SubnetIpam::Managed {
                cidr: "10.50.0.0/24".parse().unwrap(),
            }
        } else {
            SubnetIpam::Unmanaged
        });
    }
    let machine: Machine = serde_json::from_value(case.machine.clone()).unwrap();
    let user_data = case.user_data.clone().map(UserData::new);
    let bound = [Some(BoundAddress {
        ip: ip.parse().unwrap(),
        prefix: 24,
        gateway: Some("10.50.0.1".parse().unwrap()),
    })];
    plan_vm(
        &machine,
        &ParsedSpec::of(&machine),
        &PlanContext {
            resolved: &case.resolved,
            mode: ResolutionMode::Strict,
            user_data: user_data.as_ref(),
            unread_user_data: UnreadUserData::Unresolved,
            admin_password: None,
            claims: ClaimedAddresses::Bound(&bound),
        },
    )
}

fn decoded_user_data(plan: &VmPlan) -> String {
    use base64::Engine as _;
    let GuestPlan::CloudInit { user_data, .. } = &plan.guest else {
        panic!("cloud-init: {:?}", plan.guest);
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(user_data.expose())
        .unwrap();
    String::from_utf8(bytes).unwrap()
}

/// The address a guest sets itself is written into its user data as the plan encodes it, ahead
/// of WMCO's block; Prism is given no address, and the meta data stays.
#[test]
fn a_guest_set_address_goes_into_the_user_data_before_it_is_encoded() {
    let plan = with_bound_address(Case::windows(), false, "10.50.0.21").unwrap();
    assert_eq!(plan.assigned_ips, [None]);
    let user_data = decoded_user_data(&plan);
    assert!(
        user_data.starts_with(
            "<powershell>\n# Static address of IPAddressClaim winworker-abcde-claim-0-0"
        ) && user_data.contains("-IPAddress 10.50.0.21 -PrefixLength 24 -DefaultGateway 10.50.0.1")
            && user_data.ends_with(std::str::from_utf8(WINDOWS_USER_DATA).unwrap()),
        "{user_data}"
    );
    assert!(matches!(
        plan.guest,
        GuestPlan::CloudInit {
            meta_data: Some(_),
            ..
        }
    ));

    // On a subnet Prism manages, Prism assigns it; the user data is WMCO's alone.
    let plan = with_bound_address(Case::windows(), true, "10.50.0.21").unwrap();
    assert_eq!(plan.assigned_ips, [Some("10.50.0.21".parse().unwrap())]);
    assert_eq!(
        decoded_user_data(&plan),
        std::str::from_utf8(WINDOWS_USER_DATA).unwrap()
    );
}

/// The rules of a bound address and of a guest that sets it join the plan's errors, at the
/// annotation: an address outside its subnet, and user data grown past Prism's limit.
#[test]
fn a_bound_address_the_vm_cannot_take_is_a_plan_error_at_the_annotation() {
    let errors = with_bound_address(Case::windows(), true, "10.60.0.21").unwrap_err();
    assert_eq!(errors.class(), ErrorClass::Invalid);
    let lines: Vec<String> = errors.lines().collect();
    assert!(
        lines.len() == 1
            && lines[0].starts_with("metadata.annotations[nutanix.machine.openshift.io/ip-pool]")
            && lines[0].contains("is not in subnet"),
        "{lines:?}"
    );

    let mut case = Case::windows();
    case.user_data = Some(
        format!(
            "<powershell>\n{}</powershell>\n",
            "#".repeat(crate::vm::cloud_init::USER_DATA_BASE64_LIMIT / 4 * 3 - 20)
        )
        .into_bytes(),
    );
    let errors = with_bound_address(case, false, "10.50.0.21").unwrap_err();
    assert_eq!(errors.class(), ErrorClass::Invalid, "{errors}");
}

/// Before any address is claimed, a pool the Machine cannot use is refused from the pools and
/// the subnets alone: a Linux guest cannot set its own address where Prism assigns none.
#[test]
fn a_pool_on_an_unmanaged_subnet_a_linux_guest_cannot_use_is_refused_unclaimed() {
    let mut case = Case::linux();
    case.annotate(
        crate::api::IP_POOL_ANNOTATION,
        "ipam.cluster.x-k8s.io/InClusterIPPool/workers",
    );
    if let Some(Lookup::Found(subnet)) = case.resolved.subnets.get_mut(SUBNET) {
        subnet.ipam = Some(SubnetIpam::Unmanaged);
    }
    let errors = case.plan().unwrap_err();
    assert_eq!(errors.class(), ErrorClass::Invalid);
    assert!(
        errors.to_string().contains("only a Windows guest"),
        "{errors}"
    );
    // The same Machine on a subnet Prism manages plans, with no address yet.
    if let Some(Lookup::Found(subnet)) = case.resolved.subnets.get_mut(SUBNET) {
        subnet.ipam = Some(SubnetIpam::Managed {
            cidr: "10.0.0.0/24".parse().unwrap(),
        });
    }
    assert_eq!(case.plan().unwrap().assigned_ips, Vec::new());
}
