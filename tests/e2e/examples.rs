//! `manifests/examples/` as an administrator applies them: `kubectl apply -f` (client-side apply
//! with kubectl's strict field validation, so a misspelt field fails) over the machine API's CRDs
//! and the test-only CRDs of `hack/crds/`. Skipped, with a message, when kubectl is not installed.

use std::path::{Path, PathBuf};
use std::process::Command;

use kube_sim::{Config, KubeSim};
use sandbox::manifests::{CREDENTIALS_SECRET, MACHINE_SETS, WINDOWS_IMAGE_SET};

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
        // Applying again changes nothing.
        let again = run(&["apply", "-f", &path("manifests/examples")]);
        assert_eq!(again.matches("unchanged").count(), 5, "{again}");
    });
    sim.shutdown().await;
}
