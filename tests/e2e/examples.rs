//! `manifests/examples/` as an administrator applies them: `kubectl apply -f` (client-side apply
//! with kubectl's strict field validation, so a misspelt field fails) over the machine API's CRDs
//! and the test-only CRDs of `hack/crds/`, on a cluster with the machine-api-operator's defaulting
//! webhooks: what is stored is what the controller gets on OpenShift. Skipped, with a message, when
//! kubectl is not installed.

use std::path::{Path, PathBuf};
use std::process::Command;

use kube_sim::webhooks::MachineApiWebhooks;
use kube_sim::{Config, KubeSim};
use nutanix_machine_controller::api::{
    GUEST_CUSTOMIZATION_ANNOTATION, IMAGE_KIND_ANNOTATION, MachineSet,
};
use sandbox::manifests::{
    CREDENTIALS_SECRET, INFRASTRUCTURE_ID, MACHINE_SETS, WINDOWS_IMAGE_SET, WINDOWS_TEMPLATE_SET,
};

fn repository(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(relative)
}

fn kubectl(kubeconfig: &Path, cache: &Path, args: &[&str]) -> String {
    let output = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--cache-dir")
        .arg(cache)
        .args(args)
        .env_remove("KUBECONFIG")
        .output()
        .expect("kubectl runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "kubectl {args:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_the_examples_over_the_crds() {
    let present = Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !present {
        eprintln!("SKIPPED: kubectl is not installed; this test needs the real kubectl on PATH");
        return;
    }
    let ns = sandbox::MACHINE_API_NAMESPACE;
    let sim = KubeSim::start(Config {
        namespaces: vec![ns.to_owned()],
        machine_api_webhooks: Some(MachineApiWebhooks {
            infrastructure_name: INFRASTRUCTURE_ID.to_owned(),
        }),
        ..Config::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig).unwrap();
    let cache = dir.path().join("cache");
    let path = |relative: &str| repository(relative).display().to_string();

    let run = |args: &[&str]| kubectl(&kubeconfig, &cache, args);
    tokio::task::block_in_place(|| {
        run(&[
            "apply",
            "-f",
            &path("manifests/crds"),
            "-f",
            &path("hack/crds"),
        ]);
        let applied = run(&["apply", "-f", &path("manifests/examples")]);
        for set in MACHINE_SETS {
            assert!(
                applied.contains(&format!("machineset.machine.openshift.io/{set} created")),
                "{applied}"
            );
        }
        assert!(
            applied.contains(&format!("secret/{CREDENTIALS_SECRET} created")),
            "{applied}"
        );
        assert!(
            applied.contains(&format!(
                "machineautoscaler.autoscaling.openshift.io/{WINDOWS_IMAGE_SET} created"
            )),
            "{applied}"
        );
        let target = run(&[
            "get",
            "machineautoscaler",
            WINDOWS_IMAGE_SET,
            "-n",
            ns,
            "-o",
            "jsonpath={.spec.scaleTargetRef.name} {.spec.minReplicas} {.spec.maxReplicas}",
        ]);
        assert_eq!(target, format!("{WINDOWS_IMAGE_SET} 0 4"));
        // Applying again changes nothing. The Secret is "configured" all the same, as against a
        // real server: its stringData is stored as data, so kubectl's three-way patch always
        // carries it again (kubernetes/kubernetes#87736).
        let again = run(&["apply", "-f", &path("manifests/examples")]);
        assert_eq!(again.matches("unchanged").count(), 4, "{again}");
        assert!(
            again.contains(&format!("secret/{CREDENTIALS_SECRET} configured")),
            "{again}"
        );
    });
    // The credentials Secret, written with stringData, has the key the controller reads.
    let secret = sim.get("", "secrets", ns, CREDENTIALS_SECRET).unwrap();
    assert!(secret["data"]["credentials"].is_string(), "{secret}");
    // Our choices survived the webhook, as the controller reads them.
    let stored = |name: &str| -> MachineSet {
        serde_json::from_value(
            sim.get("machine.openshift.io", "machinesets", ns, name)
                .unwrap(),
        )
        .unwrap()
    };
    let template = stored(WINDOWS_TEMPLATE_SET);
    let annotations = template
        .spec
        .template
        .metadata
        .clone()
        .unwrap()
        .annotations
        .unwrap();
    assert_eq!(annotations[IMAGE_KIND_ANNOTATION], "Template");
    assert_eq!(annotations[GUEST_CUSTOMIZATION_ANNOTATION], "Sysprep");
    let config = template.provider_config().unwrap().unwrap();
    assert_eq!(
        config.image_kind,
        Some(nutanix_machine_controller::api::ImageKind::Template)
    );
    let image = stored(WINDOWS_IMAGE_SET)
        .provider_config()
        .unwrap()
        .unwrap();
    assert_eq!(
        nutanix_machine_controller::plan::vm::guest::customization_of(&image),
        nutanix_machine_controller::api::GuestCustomizationType::CloudInit,
        "a Windows image set is cloud-init unless it opts into Sysprep"
    );
    sim.shutdown().await;
}
