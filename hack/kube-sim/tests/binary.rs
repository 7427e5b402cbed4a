//! The `kube-sim` binary: prints its URL on the first line once ready, writes a kubeconfig, loads objects.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;

/// Kills the server even when an assertion fails.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn binary_prints_url_writes_kubeconfig_and_loads_objects() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let objects = dir.path().join("objects.yaml");
    std::fs::write(&objects, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: loaded\n  namespace: demo\ndata:\n  k: v\n").unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_kube-sim"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--namespace",
            "demo",
            "--kubeconfig-out",
        ])
        .arg(&kubeconfig)
        .arg("--load")
        .arg(&objects)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(child);
    let mut first_line = String::new();
    BufReader::new(child.0.stdout.take().unwrap())
        .read_line(&mut first_line)
        .unwrap();
    let url = first_line.trim().to_string();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");

    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kubeconfig).unwrap(),
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(config.cluster_url.to_string().trim_end_matches('/'), url);
    let client = kube::Client::try_from(config).unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client, "demo");
    assert_eq!(cms.get("loaded").await.unwrap().data.unwrap()["k"], "v");
}
