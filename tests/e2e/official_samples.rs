//! The official Nutanix MachineSets (openshift-docs' Windows and compute samples, the one WMCO's
//! end-to-end tests create; `fixtures/official/README.md` names each source) applied as a user
//! applies them, their placeholders filled in: created through the API, so the
//! machine-api-operator's defaulting applies (kube-sim's reading of it, or MAO's own webhook on the
//! real control plane), then scaled by the replica controller (the stand-in, or MAO's). Each
//! one's Machines reach Running and join, the Windows ones with the Go provider's customization
//! (WMCO's user data unchanged as cloud-init): a MachineSet written for the Go provider works
//! unchanged.

use kube::api::{Api, DynamicObject, PostParams};
use prism_mock::{GuestOs, ImageSeed, Seed};
use sandbox::manifests::INFRASTRUCTURE_ID;
use sandbox::world::{self, ControlPlaneChoice, World};
use serde_json::Value;

use crate::support::{TIMEOUT, options, real_control_plane, start, vm_uuid};

const CLUSTER_UUID: &str = "00061aa2-4c5e-4f1b-0000-00000000c0de";
const SUBNET_UUID: &str = "5f0a1b2c-3d4e-4f50-8a6b-7c8d9e0f1a2b";

/// A sample, and the values a user puts in for its placeholders.
struct Sample {
    file: &'static str,
    text: &'static str,
    windows: bool,
}

const SAMPLES: [Sample; 3] = [
    Sample {
        file: "openshift-docs-windows-machineset-nutanix.yaml",
        text: include_str!("fixtures/official/openshift-docs-windows-machineset-nutanix.yaml"),
        windows: true,
    },
    Sample {
        file: "openshift-docs-machineset-yaml-nutanix.yaml",
        text: include_str!("fixtures/official/openshift-docs-machineset-yaml-nutanix.yaml"),
        windows: false,
    },
    Sample {
        file: "wmco-e2e-nutanix-machineset.json",
        text: include_str!("fixtures/official/wmco-e2e-nutanix-machineset.json"),
        windows: true,
    },
];

/// What the callouts ask for, with the sandbox's values: its infrastructure ID, prism-mock's
/// Prism Element, subnet, category and project, and images named as the samples name them.
const PLACEHOLDERS: [(&str, &str); 10] = [
    ("<infrastructure_id>", INFRASTRUCTURE_ID),
    ("<zone>", "pe-1"),
    ("<role>", "worker"),
    ("<cluster_uuid>", CLUSTER_UUID),
    ("<subnet_uuid>", SUBNET_UUID),
    ("<image_id>", "nutanix-windows-server-2022"),
    ("<category_name>", "AppType"),
    ("<category_value>", "Kubernetes"),
    ("<project_name>", "openshift"),
    ("<user_data_secret>", "worker-user-data"),
];

fn filled(sample: &Sample) -> Value {
    let mut text = sample.text.to_owned();
    for (placeholder, value) in PLACEHOLDERS {
        text = text.replace(placeholder, value);
    }
    assert!(
        !text.contains("<"),
        "{}: a placeholder is left",
        sample.file
    );
    let mut documents = kube_sim::load::documents(&text).unwrap();
    assert_eq!(documents.len(), 1, "{}", sample.file);
    documents.remove(0)
}

/// prism-mock's seed with the UUIDs the samples get and the images they name.
fn seed() -> Seed {
    let mut seed = Seed::default();
    seed.clusters[0].uuid = Some(CLUSTER_UUID.to_owned());
    let network = seed
        .subnets
        .iter_mut()
        .find(|s| s.name == "vm-network")
        .unwrap();
    network.uuid = Some(SUBNET_UUID.to_owned());
    for (name, os) in [
        ("nutanix-windows-server-2022", GuestOs::Windows),
        ("nutanix-windows-server", GuestOs::Windows),
        ("sandbox-rhcos", GuestOs::Linux),
    ] {
        seed.images.push(ImageSeed {
            name: name.to_owned(),
            uuid: None,
            os,
            size_mib: 61_440,
        });
    }
    seed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_samples_run_as_a_user_applies_them() {
    let mut options = options("official-samples");
    options.mock_seed = seed();
    official_samples_run(start(options).await).await;
}

/// The same on the real control plane: the machine-api-operator's own webhooks default and
/// validate the samples, and its MachineSet controller scales them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_samples_run_on_the_real_control_plane() {
    let Some(binaries) = real_control_plane() else {
        return;
    };
    let mut options = options("official-samples-real");
    options.mock_seed = seed();
    options.control_plane = ControlPlaneChoice::Real(binaries);
    official_samples_run(start(options).await).await;
}

async fn official_samples_run(world: World) {
    let sets_api = Api::<DynamicObject>::namespaced_with(
        world.client().clone(),
        world.namespace(),
        &kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("machine.openshift.io", "v1beta1", "MachineSet"),
            "machinesets",
        ),
    );
    let mut expected = Vec::new();
    for sample in &SAMPLES {
        let object = filled(sample);
        let name = object["metadata"]["name"].as_str().unwrap().to_owned();
        let replicas = object["spec"]["replicas"].as_u64().unwrap() as usize;
        let set: DynamicObject = serde_json::from_value(object).unwrap();
        sets_api
            .create(&PostParams::default(), &set)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", sample.file));
        expected.push((sample, name, replicas));
    }
    world
        .wait_for("every sample's Machines joined", TIMEOUT * 2, |snapshot| {
            for (sample, name, replicas) in &expected {
                if !snapshot.set_joined(name, *replicas) {
                    let gaps: Vec<String> = snapshot
                        .machines_of(name)
                        .iter()
                        .filter_map(|m| snapshot.join_gap(m))
                        .collect();
                    return Err(format!(
                        "{}: {} of {replicas} Machines, {gaps:?}",
                        sample.file,
                        snapshot.machines_of(name).len()
                    ));
                }
            }
            Ok(())
        })
        .await
        .unwrap();

    let snapshot = world.snapshot();
    for (sample, name, _) in &expected {
        for machine in snapshot.machines_of(name) {
            assert_eq!(machine.phase(), "Running", "{}", sample.file);
            let guest = world
                .admin()
                .guest_customization(&vm_uuid(machine))
                .unwrap();
            assert_eq!(
                guest.kind, "cloud_init",
                "{}: the Go provider's customization",
                sample.file
            );
            if sample.windows {
                assert_eq!(
                    guest.user_data.as_deref(),
                    Some(world::windows_user_data().as_str()),
                    "{}: WMCO's user data, unchanged",
                    sample.file
                );
            }
        }
        // What the webhook stored is the upstream type's fields only.
        let stored = &snapshot
            .machine_set(name)
            .unwrap()
            .spec
            .template
            .spec
            .provider_spec;
        let value = stored.value.as_ref().unwrap();
        assert!(value.get("metadata").is_some(), "{}: {value}", sample.file);
        assert!(
            value.get("failureDomain").is_some(),
            "{}: {value}",
            sample.file
        );
    }
    world.shutdown().await;
}
