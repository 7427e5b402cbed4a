//! The machine-api-operator's own operator (`cmd/machine-api-operator`, built from the module
//! `hack/real-cluster/mao/go.mod` pins) renders our container, on the real control plane, and
//! our binary runs as that container says.
//!
//! What MAO needs to decide it runs on Nutanix, as an OpenShift cluster holds it: the config CRDs
//! and objects of openshift/api's manifests (`Infrastructure/cluster` with platform Nutanix, as
//! the sandbox writes it; `ClusterVersion/version`, also the sandbox's; `FeatureGate/cluster` whose status lists the
//! gates of the release MAO runs as, `RELEASE_VERSION`, which library-go's feature-gate accessor
//! waits for; `Proxy/cluster`; `ClusterOperator` is its own to write), and its images file (the
//! images ConfigMap's `images.json`, mounted into its pod) naming our image for
//! `clusterAPIControllerNutanix` (MAO `pkg/operator/config.go`).
//!
//! Our binary then starts with the `machine-controller` container's command arguments and
//! environment exactly as MAO writes them. Two stand-ins remain where no kubelet runs: the
//! ServiceAccount token mount is a kubeconfig of the same ServiceAccount (`KUBECONFIG`), and the
//! trusted CA bundle mount is `SSL_CERT_FILE` naming prism-mock's CA.

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Container, EnvVar};
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use nutanix_machine_controller::api::go_provider_status;
use nutanix_machine_controller::runtime::cli::Cli;
use sandbox::node_agent::NodeAgentConfig;
use sandbox::real_cluster;
use serde_json::json;

use crate::real_cluster::RealWorld;
use crate::takeover;

const NAMESPACE: &str = sandbox::MACHINE_API_NAMESPACE;
const RELEASE: &str = "4.21.0";
const OUR_IMAGE: &str = "registry.example.com/ocp/nutanix-machine-controller@sha256:1111111111111111111111111111111111111111111111111111111111111111";
const OUR_NEXT_IMAGE: &str = "registry.example.com/ocp/nutanix-machine-controller@sha256:2222222222222222222222222222222222222222222222222222222222222222";
/// The Lease MAO's Go provider holds, which ours takes over (`cmd/manager/main.go`).
const LEASE: &str = "cluster-api-provider-nutanix-leader";

/// The images file as the release payload's ConfigMap holds it, with `nutanix` ours.
fn images_json(nutanix: &str) -> String {
    json!({
        "machineAPIOperator": "registry.example.com/ocp/machine-api-operator@sha256:aaaa",
        "kubeRBACProxy": "registry.example.com/ocp/kube-rbac-proxy@sha256:bbbb",
        "clusterAPIControllerNutanix": nutanix,
    })
    .to_string()
}

/// The cluster-scoped config objects MAO reads (openshift/api `config/v1`) that the sandbox's
/// cluster does not have already (`ClusterVersion/version` is one of its objects,
/// `sandbox::cluster_objects`).
async fn cluster_config(client: &Client) {
    for object in [
        json!({"apiVersion": "config.openshift.io/v1", "kind": "FeatureGate",
               "metadata": {"name": "cluster"}, "spec": {}}),
        json!({"apiVersion": "config.openshift.io/v1", "kind": "Proxy",
               "metadata": {"name": "cluster"}, "spec": {}}),
    ] {
        real_cluster::create(client, object)
            .await
            .expect("a config object");
    }
    // The gates of this release, as the cluster-config-operator records them: library-go's
    // accessor reads the entry of the version MAO runs as, and panics on a gate it does not
    // list. These are the ones MAO's operator reads (`pkg/operator/operator.go`), as openshift/api
    // `features/features.go` sets them by default.
    let gates: Api<kube::api::DynamicObject> = Api::all_with(
        client.clone(),
        &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "config.openshift.io",
            "v1",
            "FeatureGate",
        )),
    );
    gates
        .patch_status(
            "cluster",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"featureGates": [{
                "version": RELEASE,
                "enabled": [{"name": "AzureWorkloadIdentity"}],
                "disabled": [
                    {"name": "AWSDedicatedHosts"},
                    {"name": "MachineAPIMigration"},
                    {"name": "MachineAPIOperatorDisableMachineHealthCheckController"},
                    {"name": "VSphereHostVMGroupZonal"},
                    {"name": "VSphereMultiDisk"}
                ]
            }]}})),
        )
        .await
        .expect("FeatureGate status");
}

/// MAO's operator as its Deployment runs it (`install/0000_30_machine-api-operator_11_deployment.yaml`:
/// `start --images-json=...`, `RELEASE_VERSION`), with the administrator's kubeconfig.
fn start_operator(world: &RealWorld, images: &Path, log: &Path) -> std::process::Child {
    let program = world
        .plane
        .binaries()
        .program("machine-api-operator")
        .expect("machine-api-operator built");
    std::process::Command::new(program)
        .arg("start")
        .arg(format!("--images-json={}", images.display()))
        .arg(format!(
            "--kubeconfig={}",
            world.plane.admin_kubeconfig().display()
        ))
        .arg("--v=4")
        .env("RELEASE_VERSION", RELEASE)
        .env("POD_NAME", "machine-api-operator-0")
        // Off the ports other tests' programs take.
        .env("METRICS_PORT", "0")
        .stdout(std::fs::File::create(log).expect("a log file"))
        .stderr(std::fs::File::create(log.with_extension("err")).expect("a log file"))
        .spawn()
        .expect("machine-api-operator starts")
}

/// The `machine-controller` container of the Deployment MAO wrote, once it names `image`.
async fn rendered(world: &mut RealWorld, image: &'static str) -> Container {
    world
        .wait_for(
            &format!("MAO renders machine-controller with {image}"),
            async |world| {
                let deployments: Api<Deployment> = Api::namespaced(world.admin.clone(), NAMESPACE);
                let deployment = deployments.get("machine-api-controllers").await.ok()?;
                deployment
                    .spec?
                    .template
                    .spec?
                    .containers
                    .into_iter()
                    .find(|c| c.name == "machine-controller" && c.image.as_deref() == Some(image))
            },
        )
        .await
}

/// The container's environment as a kubelet would give it (`fieldRef`s resolved for a pod on
/// Node `master-0`).
fn environment(container: &Container) -> BTreeMap<String, String> {
    container
        .env
        .iter()
        .flatten()
        .map(
            |EnvVar {
                 name,
                 value,
                 value_from,
             }| {
                let value = match (value, value_from) {
                    (Some(value), _) => value.clone(),
                    (None, Some(from)) => {
                        match from.field_ref.as_ref().map(|f| f.field_path.as_str()) {
                            Some("spec.nodeName") => "master-0".to_owned(),
                            Some("metadata.name") => "machine-api-controllers-0".to_owned(),
                            Some("metadata.namespace") => NAMESPACE.to_owned(),
                            other => {
                                panic!("{name}: a field this test does not resolve: {other:?}")
                            }
                        }
                    }
                    (None, None) => String::new(),
                };
                (name.clone(), value)
            },
        )
        .collect()
}

async fn answers(url: &str) -> bool {
    reqwest::get(url)
        .await
        .is_ok_and(|answer| answer.status().is_success())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn maos_operator_renders_our_container_and_our_binary_runs_as_it_says() {
    let Some(mut world) = RealWorld::start("mao_operator", NodeAgentConfig::default()).await else {
        return;
    };
    world.provider.kill().await;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let admin = world.admin.clone();
    let dir = world.plane.dir().to_owned();

    // A Machine of the Go provider's, Running, for ours to take over once it runs.
    let seed = takeover::seed(&world).await;
    let vm = takeover::go_vm(&world, &seed, "mao-worker-0").await;
    let address = takeover::booted(&mut world, &vm).await;
    let status = go_provider_status::running(&vm, false);
    takeover::go_machine(&admin, "mao-worker-0", &vm, &address, status, true).await;

    cluster_config(&admin).await;
    // Its own pod, which its event recorder names as the events' source (library-go
    // `GetControllerReferenceForCurrentPod`, by `POD_NAME`); no kubelet runs it.
    real_cluster::create(
        &admin,
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "machine-api-operator-0", "namespace": NAMESPACE},
               "spec": {"containers": [{"name": "machine-api-operator",
                   "image": "registry.example.com/ocp/machine-api-operator@sha256:aaaa"}]}}),
    )
    .await
    .expect("MAO's pod object");
    let images = dir.join("images.json");
    std::fs::write(&images, images_json(OUR_IMAGE)).unwrap();
    let mut operator = start_operator(&world, &images, &dir.join("machine-api-operator.log"));

    let container = rendered(&mut world, OUR_IMAGE).await;
    // The command our image answers to (`hack/image/rootfs.sh` links it to the binary), and
    // every argument parsed as our flags.
    assert_eq!(
        container.command,
        Some(vec!["/machine-controller-manager".to_owned()])
    );
    let args = container.args.clone().unwrap_or_default();
    eprintln!(
        "MAO renders machine-controller: command {:?}, args {args:?}, env {:?}",
        container.command,
        environment(&container).keys().collect::<Vec<_>>()
    );
    let cli = <Cli as clap::Parser>::try_parse_from(
        std::iter::once("nutanix-machine-controller".to_owned()).chain(args.iter().cloned()),
    )
    .unwrap_or_else(|e| panic!("MAO's arguments {args:?}: {e}"));
    assert!(cli.run.leader_elect, "{args:?}");
    // The probes MAO sets, on the port our binary serves them.
    let port = container
        .ports
        .iter()
        .flatten()
        .find(|p| p.name.as_deref() == Some("healthz"))
        .map(|p| p.container_port)
        .expect("a healthz port");
    assert_eq!(port, 9440);
    let probe_path = |probe: &Option<k8s_openapi::api::core::v1::Probe>| {
        probe
            .as_ref()
            .and_then(|p| p.http_get.as_ref())
            .and_then(|h| h.path.clone())
    };
    assert_eq!(
        probe_path(&container.readiness_probe).as_deref(),
        Some("/healthz")
    );
    assert_eq!(
        probe_path(&container.liveness_probe).as_deref(),
        Some("/readyz")
    );

    // Our binary, as a kubelet would start that container.
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_e2e-controller"));
    command
        .args(&args)
        .env_clear()
        .envs(environment(&container))
        .env("KUBECONFIG", &world.controller_kubeconfig)
        .env("SSL_CERT_FILE", dir.join("..").join("prism-ca.pem"))
        .env("POD_NAME", "machine-api-controllers-0")
        .stdout(std::fs::File::create(dir.join("ours-as-rendered.log")).unwrap())
        .stderr(std::fs::File::create(dir.join("ours-as-rendered.err")).unwrap());
    let mut ours = command.spawn().expect("ours starts as rendered");

    world
        .wait_for("the probes MAO set answer", async |_| {
            (answers(&format!("http://127.0.0.1:{port}/healthz")).await
                && answers(&format!("http://127.0.0.1:{port}/readyz")).await)
                .then_some(())
        })
        .await;
    world
        .wait_for("ours holds the Go provider's Lease", async |world| {
            let leases: Api<Lease> = Api::namespaced(world.admin.clone(), NAMESPACE);
            let lease = leases.get(LEASE).await.ok()?;
            lease
                .spec?
                .holder_identity
                .filter(|holder| holder.contains("machine-api-controllers-0"))
        })
        .await;
    world
        .wait_for("ours reconciles the Machine", async |world| {
            let machine = world.machines().get("mao-worker-0").await.ok()?;
            let status = machine.provider_status().ok()?;
            status
                .conditions
                .iter()
                .any(|c| c.reason == "MachineInstanceReady")
                .then_some(())
        })
        .await;
    assert!(ours.try_wait().unwrap().is_none(), "ours still runs");

    // The images ConfigMap changed (its mounted file follows): MAO re-reads it at its next sync
    // (`maoConfigFromInfrastructure`, every sync) and rolls our container's image.
    std::fs::write(&images, images_json(OUR_NEXT_IMAGE)).unwrap();
    let proxies: Api<kube::api::DynamicObject> = Api::all_with(
        admin.clone(),
        &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "config.openshift.io",
            "v1",
            "Proxy",
        )),
    );
    // A change MAO watches, to sync now rather than at its resync.
    proxies
        .patch(
            "cluster",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"e2e": "resync"}}})),
        )
        .await
        .unwrap();
    let next = rendered(&mut world, OUR_NEXT_IMAGE).await;
    assert_eq!(next.args, container.args, "only the image changed");

    let _ = ours.kill();
    let _ = ours.wait();
    let _ = operator.kill();
    let _ = operator.wait();
    world.stop().await;
}
