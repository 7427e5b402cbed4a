//! The stand-in's rules, each pinned to the source it comes from. A change to the simulation that
//! breaks one of them fails here, naming the rule and its source.

use serde_json::{Value, json};

use super::MachineApiWebhooks;
use crate::resources::{ResourceDef, resource_from_crd};

const MAO: &str = "openshift/machine-api-operator";
const API: &str = "openshift/api machine/v1/types_nutanixprovider.go";

fn webhooks() -> MachineApiWebhooks {
    MachineApiWebhooks {
        infrastructure_name: "sandbox".to_owned(),
    }
}

fn def(plural: &str, kind: &str) -> ResourceDef {
    resource_from_crd(&json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.machine.openshift.io")},
        "spec": {"group": "machine.openshift.io", "scope": "Namespaced",
                 "names": {"plural": plural, "kind": kind},
                 "versions": [{"name": "v1beta1", "served": true, "storage": true}]},
    }))
    .unwrap()
}

fn machine(value: Value) -> Value {
    json!({"apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
           "metadata": {"name": "m", "namespace": "openshift-machine-api"},
           "spec": {"providerSpec": {"value": value}}})
}

fn admit_machine(object: &mut Value) -> Result<(), String> {
    webhooks()
        .admit_create(&def("machines", "Machine"), object)
        .map_err(|e| format!("{} {}: {}", e.code, e.reason, e.message))
}

/// The providerSpec a Machine with this value is stored with.
fn defaulted(value: Value) -> Value {
    let mut object = machine(value);
    admit_machine(&mut object).unwrap();
    object["spec"]["providerSpec"]["value"].clone()
}

/// The providerSpec of the Go provider's documented Windows MachineSet (openshift-docs
/// `modules/windows-machineset-nutanix.adoc`), placeholders filled in, plus our own fields.
fn documented() -> Value {
    json!({
        "apiVersion": "machine.openshift.io/v1", "kind": "NutanixMachineProviderConfig",
        "bootType": "", "categories": null,
        "cluster": {"type": "uuid", "uuid": "0005b0f1-8f43-a0f2-02b7-3cecef193712"},
        "credentialsSecret": {"name": "nutanix-credentials"},
        "image": {"name": "nutanix-windows-server-2022", "type": "name"},
        "memorySize": "16Gi", "project": {"type": ""},
        "subnets": [{"type": "uuid", "uuid": "c7938dc6-7659-453e-a688-e26020c68e43"}],
        "systemDiskSize": "120Gi", "userDataSecret": {"name": "windows-user-data"},
        "vcpuSockets": 4, "vcpusPerSocket": 1,
        "imageKind": "Template", "guestCustomization": {"type": "Sysprep"},
    })
}

#[test]
fn the_defaulting_follows_its_sources() {
    type Rule = (&'static str, String, fn() -> (Value, Value));
    let rules: Vec<Rule> = vec![
        (
            "only the upstream type's fields survive, in its order, with Go's zero values",
            format!("{MAO} pkg/webhooks/machine_webhook.go defaultNutanix (unmarshalInto, json.Marshal); {API}"),
            || {
                (
                    defaulted(documented()),
                    json!({
                        "kind": "NutanixMachineProviderConfig", "apiVersion": "machine.openshift.io/v1",
                        "metadata": {},
                        "cluster": {"type": "uuid", "uuid": "0005b0f1-8f43-a0f2-02b7-3cecef193712"},
                        "image": {"type": "name", "name": "nutanix-windows-server-2022"},
                        "subnets": [{"type": "uuid", "uuid": "c7938dc6-7659-453e-a688-e26020c68e43"}],
                        "vcpusPerSocket": 1, "vcpuSockets": 4,
                        "memorySize": "16Gi", "systemDiskSize": "120Gi",
                        "bootType": "", "project": {"type": ""},
                        "categories": null, "gpus": null, "dataDisks": null,
                        "userDataSecret": {"name": "windows-user-data"},
                        "credentialsSecret": {"name": "nutanix-credentials"},
                        "failureDomain": null,
                    }),
                )
            },
        ),
        (
            "WMCO's e2e providerSpec (no apiVersion/kind, marshalled from the Go type) comes back unchanged",
            format!("{MAO} defaultNutanix; openshift/windows-machine-config-operator test/e2e/providers/nutanix/nutanix.go"),
            || {
                let wmco = json!({
                    "metadata": {}, "cluster": {"type": "name", "name": "pe-1"},
                    "image": {"type": "name", "name": "nutanix-windows-server"},
                    "subnets": [{"type": "name", "name": "vm-network"}],
                    "vcpusPerSocket": 1, "vcpuSockets": 4, "memorySize": "16Gi", "systemDiskSize": "120Gi",
                    "bootType": "", "project": {"type": ""}, "categories": null, "gpus": null, "dataDisks": null,
                    "userDataSecret": {"name": "windows-user-data"},
                    "credentialsSecret": {"name": "nutanix-credentials"}, "failureDomain": null,
                });
                (defaulted(wmco.clone()), wmco)
            },
        ),
        (
            "secrets default to worker-user-data and nutanix-credentials when absent",
            format!("{MAO} pkg/webhooks/machine_webhook.go defaultNutanix, defaultUserDataSecret, defaultNutanixCredentialsSecret"),
            || {
                let value = defaulted(json!({"credentialsSecret": null}));
                (
                    json!([value["userDataSecret"], value["credentialsSecret"]]),
                    json!([{"name": "worker-user-data"}, {"name": "nutanix-credentials"}]),
                )
            },
        ),
        (
            "an empty secret reference stays as written (only nil is defaulted; name is omitempty)",
            format!("{MAO} defaultNutanix; k8s.io/api core/v1 LocalObjectReference"),
            || {
                let value = defaulted(json!({"userDataSecret": {"name": ""}}));
                (value["userDataSecret"].clone(), json!({}))
            },
        ),
        (
            "quantities come back canonical, canonical text kept as written",
            "kubernetes/apimachinery pkg/api/resource/quantity.go ParseQuantity, MarshalJSON".to_owned(),
            || {
                let value = defaulted(json!({"memorySize": "16384Mi", "systemDiskSize": "120Gi",
                    "dataDisks": [{"diskSize": 1073741824}]}));
                (
                    json!([value["memorySize"], value["systemDiskSize"], value["dataDisks"][0]["diskSize"]]),
                    json!(["16Gi", "120Gi", "1073741824"]),
                )
            },
        ),
        (
            "keys match case-insensitively; numbers given for strings become text",
            "sigs.k8s.io/yaml yaml.go Unmarshal (convertToJSONableObject); Go encoding/json".to_owned(),
            || {
                let value = defaulted(json!({"VCPUSockets": 2, "image": {"type": "name", "name": 2022}}));
                (
                    json!([value["vcpuSockets"], value["image"]]),
                    json!([2, {"type": "name", "name": "2022"}]),
                )
            },
        ),
        (
            "data disk fields: adapterType always written, deviceIndex 0 omitted, storageContainer omitted when nil",
            API.to_owned(),
            || {
                let value = defaulted(json!({"dataDisks": [{"diskSize": "10Gi",
                    "deviceProperties": {"deviceType": "Disk", "deviceIndex": 0},
                    "storageConfig": {"diskMode": "Standard"}}]}));
                (
                    value["dataDisks"][0].clone(),
                    json!({"diskSize": "10Gi", "deviceProperties": {"deviceType": "Disk", "adapterType": ""},
                           "storageConfig": {"diskMode": "Standard"}}),
                )
            },
        ),
        (
            "a Machine without the cluster label gets the infrastructure name; one with it keeps it",
            format!("{MAO} pkg/webhooks/machine_webhook.go machineDefaulterHandler.Default"),
            || {
                let mut object = machine(json!({}));
                admit_machine(&mut object).unwrap();
                let mut labelled = machine(json!({}));
                labelled["metadata"]["labels"] =
                    json!({"machine.openshift.io/cluster-api-cluster": "other"});
                admit_machine(&mut labelled).unwrap();
                (
                    json!([object["metadata"]["labels"], labelled["metadata"]["labels"]]),
                    json!([{"machine.openshift.io/cluster-api-cluster": "sandbox"},
                           {"machine.openshift.io/cluster-api-cluster": "other"}]),
                )
            },
        ),
        (
            "the Machine spec's struct fields are written, fields the Go type lacks are not removed",
            "controller-runtime pkg/webhook/admission/defaulter_custom.go Handle, dropSchemeRemovals; machine/v1beta1 MachineSpec".to_owned(),
            || {
                let mut object = machine(json!({}));
                object["spec"]["futureField"] = json!(1);
                admit_machine(&mut object).unwrap();
                let spec = &object["spec"];
                (
                    json!([spec["metadata"], spec["lifecycleHooks"], spec["futureField"]]),
                    json!([{}, {}, 1]),
                )
            },
        ),
        (
            "a MachineSet's template goes through defaultNutanix; its labels are not defaulted",
            format!("{MAO} pkg/webhooks/machineset_webhook.go defaultMachineSet"),
            || {
                let mut set = json!({"apiVersion": "machine.openshift.io/v1beta1", "kind": "MachineSet",
                    "metadata": {"name": "s"},
                    "spec": {"template": {"spec": {"providerSpec": {"value": documented()}}}}});
                webhooks()
                    .admit_create(&def("machinesets", "MachineSet"), &mut set)
                    .unwrap();
                let value = &set["spec"]["template"]["spec"]["providerSpec"]["value"];
                (
                    json!([value.get("imageKind"), value.get("guestCustomization"),
                           set["metadata"].get("labels"), set["spec"]["selector"],
                           set["spec"]["template"]["metadata"]]),
                    json!([null, null, null, {}, {}]),
                )
            },
        ),
        (
            "no providerSpec.value: denied, 403, naming the webhook",
            format!("{MAO} pkg/webhooks/machine_webhook.go unmarshalInto; controller-runtime Denied; k8s.io/apiserver ToStatusErr"),
            || {
                let mut object = machine(Value::Null);
                (
                    json!(admit_machine(&mut object).unwrap_err()),
                    json!("403 Forbidden: admission webhook \"default.machine.machine.openshift.io\" denied the request: providerSpec.value: Required value: a value must be provided"),
                )
            },
        ),
        (
            "a value of the wrong JSON type: denied with Go's decoding error",
            format!("{MAO} unmarshalInto; sigs.k8s.io/yaml Unmarshal; Go encoding/json UnmarshalTypeError"),
            || {
                let mut object = machine(json!({"vcpuSockets": "4"}));
                (
                    json!(admit_machine(&mut object).unwrap_err()),
                    json!("403 Forbidden: admission webhook \"default.machine.machine.openshift.io\" denied the request: providerSpec.value: Invalid value: error unmarshaling JSON: while decoding JSON: json: cannot unmarshal string into Go struct field NutanixMachineProviderConfig.vcpuSockets of type int32"),
                )
            },
        ),
        (
            "other groups and kinds are not touched",
            format!("{MAO} pkg/webhooks/config.go MachineMutatingWebhook, MachineSetMutatingWebhook (rules)"),
            || {
                let mut other = machine(json!({"imageKind": "Template"}));
                let mut widget = def("machines", "Machine");
                widget.group = "example.com".to_owned();
                webhooks().admit_create(&widget, &mut other).unwrap();
                (other, machine(json!({"imageKind": "Template"})))
            },
        ),
    ];
    for (rule, source, check) in rules {
        let (actual, expected) = check();
        assert_eq!(actual, expected, "rule: {rule}\nsource: {source}");
    }
}
