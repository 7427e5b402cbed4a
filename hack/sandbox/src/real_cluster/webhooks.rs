//! The machine-api-operator's Machine and MachineSet webhooks, served by its `machineset`
//! process on loopback and registered with the generated CA.

use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use kube::Client;
use serde_json::{Value, json};

use super::apply::create;
use super::{ControlPlane, RealClusterError};

/// The machine-api-operator's webhook paths (machine-api-operator `pkg/webhooks/config.go`:
/// `DefaultMachine{Mutating,Validating}HookPath`, `DefaultMachineSet...HookPath`).
const WEBHOOKS: [(&str, &str, &str, &str); 4] = [
    (
        "mutating",
        "default.machine.machine.openshift.io",
        "machines",
        "/mutate-machine-openshift-io-v1beta1-machine",
    ),
    (
        "mutating",
        "default.machineset.machine.openshift.io",
        "machinesets",
        "/mutate-machine-openshift-io-v1beta1-machineset",
    ),
    (
        "validating",
        "validation.machine.machine.openshift.io",
        "machines",
        "/validate-machine-openshift-io-v1beta1-machine",
    ),
    (
        "validating",
        "validation.machineset.machine.openshift.io",
        "machinesets",
        "/validate-machine-openshift-io-v1beta1-machineset",
    ),
];

impl ControlPlane {
    /// The machine-api-operator registers its webhooks by Service with the service CA injected
    /// (`pkg/webhooks/config.go`); here the `machineset` process listens on loopback, so each
    /// webhook names its URL and the generated CA. Names, rules, operations, failure policy
    /// (`Ignore`) and side effects are MAO's.
    pub(super) async fn register_webhooks(
        &self,
        client: &Client,
        port: u16,
    ) -> Result<(), RealClusterError> {
        let ca_bundle = STANDARD.encode(&self.pki.ca_pem);
        let webhook = |name: &str, resource: &str, path: &str| {
            json!({
                "name": name,
                "admissionReviewVersions": ["v1"],
                "failurePolicy": "Ignore",
                "sideEffects": "None",
                "clientConfig": {"url": format!("https://127.0.0.1:{port}{path}"), "caBundle": ca_bundle},
                "rules": [{"apiGroups": ["machine.openshift.io"], "apiVersions": ["v1beta1"],
                           "resources": [resource], "operations": ["CREATE", "UPDATE"]}],
            })
        };
        for (kind, configuration) in [
            ("MutatingWebhookConfiguration", "mutating"),
            ("ValidatingWebhookConfiguration", "validating"),
        ] {
            let webhooks: Vec<Value> = WEBHOOKS
                .iter()
                .filter(|(k, ..)| *k == configuration)
                .map(|(_, name, resource, path)| webhook(name, resource, path))
                .collect();
            create(
                client,
                json!({
                    "apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
                    "metadata": {"name": "machine-api"},
                    "webhooks": webhooks,
                }),
            )
            .await?;
        }
        Ok(())
    }

    /// The webhooks' failure policy is `Ignore`, so a create before the server listens would
    /// pass undefaulted: wait until the `machineset` process accepts connections.
    pub(super) async fn wait_webhooks_served(&mut self, port: u16) -> Result<(), RealClusterError> {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            self.check_running()?;
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(self.not_ready("machineset's webhook server", 120));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}
