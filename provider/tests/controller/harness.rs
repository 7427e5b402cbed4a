//! The test environment: prism-mock (HTTPS, its CA passed with `--prism-ca-file`) and kube-sim
//! in-process, the CRDs and an Infrastructure object applied, Secrets created, and the real
//! binary started as child processes with `--kubeconfig`. A small nodelink plays the
//! machine-api-operator's node link controller.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube_sim::{KubeSim, RunningKubeSim};
use nutanix_machine_controller::api::{
    GUEST_CUSTOMIZATION_ANNOTATION, IMAGE_KIND_ANNOTATION, Machine,
};
use prism_mock::{MockConfig, MockPrism, RunningMock};
use serde_json::{Value, json};

pub const NS: &str = "openshift-machine-api";
pub const PRISM_PASSWORD: &str = "mock-password";
pub const INFRA_ID: &str = "sandbox";
/// Markers inside the user data: they must never show in a log line.
pub const LINUX_SECRET: &str = "linux-userdata-secret-7f3a";
pub const WINDOWS_SECRET: &str = "windows-userdata-secret-9c1d";
pub const TIMEOUT: Duration = Duration::from_secs(60);

pub fn linux_user_data() -> String {
    json!({"ignition": {"version": "3.2.0"}, "storage": {"files": [
        {"path": "/etc/marker", "mode": 420, "contents": {"source": format!("data:,{LINUX_SECRET}")}}
    ]}})
    .to_string()
}

pub fn windows_user_data() -> String {
    format!(
        "<powershell>\nWrite-Output \"{WINDOWS_SECRET}\"\n</powershell>\n<persist>true</persist>\n"
    )
}

pub fn credentials_json(password: &str) -> String {
    json!([{"type": "basic_auth", "data": {"prismCentral": {"username": "admin", "password": password}, "prismElements": null}}]).to_string()
}

/// A running controller process; killed when dropped.
pub struct ControllerProcess {
    child: Child,
    pub user: String,
    lines: Arc<Mutex<Vec<String>>>,
}

impl ControllerProcess {
    pub fn logs(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits until a log line contains `text`; returns it.
    pub async fn wait_log(&self, text: &str) -> String {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if let Some(line) = self.logs().into_iter().find(|l| l.contains(text)) {
                return line;
            }
            assert!(
                Instant::now() < deadline,
                "no log line with {text:?}:\n{}",
                self.logs().join("\n")
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The exit status, if it exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

pub struct Env {
    pub mock: RunningMock,
    pub sim: RunningKubeSim,
    pub client: kube::Client,
    pub dir: tempfile::TempDir,
    ca_file: PathBuf,
    /// Every controller started, for the log checks.
    logs: Vec<Arc<Mutex<Vec<String>>>>,
    nodelink: Option<tokio::task::JoinHandle<()>>,
}

fn fixture_path(relative: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(relative)
}

fn documents(path: &PathBuf) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    serde_saphyr::from_multiple::<Value>(&text)
        .unwrap()
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

impl Env {
    pub async fn start() -> Self {
        Self::start_with(MockConfig::default(), PRISM_PASSWORD).await
    }

    /// An environment whose credentials Secret holds `password`.
    pub async fn start_with(mock_config: MockConfig, password: &str) -> Self {
        let mock = MockPrism::start(mock_config).await.unwrap();
        let sim = KubeSim::start(kube_sim::Config {
            namespaces: vec![NS.to_owned()],
            // As on OpenShift: Machines and MachineSets go through the machine-api-operator's
            // defaulting when they are created.
            machine_api_webhooks: Some(kube_sim::webhooks::MachineApiWebhooks {
                infrastructure_name: INFRA_ID.to_owned(),
            }),
            ..kube_sim::Config::default()
        })
        .await
        .unwrap();
        let client = sim.client().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let ca_file = dir.path().join("prism-ca.pem");
        std::fs::write(&ca_file, mock.ca_pem().unwrap()).unwrap();

        for entry in std::fs::read_dir(fixture_path("../manifests/crds")).unwrap() {
            for document in documents(&entry.unwrap().path()) {
                sim.create(document).unwrap();
            }
        }
        for document in documents(&fixture_path("tests/fixtures/infrastructure-crd.yaml")) {
            sim.create(document).unwrap();
        }
        // Static addresses: the IPAM claim and address kinds, as OpenShift installs them.
        for kind in ["ipaddressclaims", "ipaddresses"] {
            let path = format!("../hack/crds/ipam.cluster.x-k8s.io_{kind}.yaml");
            for document in documents(&fixture_path(&path)) {
                sim.create(document).unwrap();
            }
        }
        let port = mock.addr().port();
        sim.create(json!({
            "apiVersion": "config.openshift.io/v1", "kind": "Infrastructure",
            "metadata": {"name": "cluster"},
            "spec": {"platformSpec": {"type": "Nutanix", "nutanix": {
                "prismCentral": {"address": "127.0.0.1", "port": port},
                "prismElements": [{"name": "pe-1", "endpoint": {"address": "127.0.0.1", "port": port}}],
            }}},
            "status": {"infrastructureName": INFRA_ID, "platform": "Nutanix"},
        }))
        .unwrap();
        let env = Self {
            mock,
            sim,
            client,
            dir,
            ca_file,
            logs: Vec::new(),
            nodelink: None,
        };
        env.put_secret(
            "nutanix-credentials",
            "credentials",
            &credentials_json(password),
        )
        .await;
        env.put_secret("worker-user-data", "userData", &linux_user_data())
            .await;
        env.put_secret("windows-user-data", "userData", &windows_user_data())
            .await;
        env
    }

    /// Creates or replaces a Secret in the Machines' namespace.
    pub async fn put_secret(&self, name: &str, key: &str, value: &str) {
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), NS);
        let secret: Secret = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": NS},
            "data": {key: base64::engine::general_purpose::STANDARD.encode(value)},
        }))
        .unwrap();
        match secrets.get_opt(name).await.unwrap() {
            Some(_) => {
                secrets
                    .patch(name, &PatchParams::default(), &Patch::Merge(&secret))
                    .await
                    .unwrap();
            }
            None => {
                secrets
                    .create(&PostParams::default(), &secret)
                    .await
                    .unwrap();
            }
        }
    }

    /// A kubeconfig whose token names `user` in kube-sim's request log.
    pub fn kubeconfig(&self, user: &str) -> PathBuf {
        let path = self.dir.path().join(format!("kubeconfig-{user}"));
        let yaml = self
            .sim
            .kubeconfig_yaml()
            .replace(kube_sim::KUBECONFIG_TOKEN, &format!("user:{user}"));
        std::fs::write(&path, yaml).unwrap();
        path
    }

    pub fn ca_file(&self) -> &PathBuf {
        &self.ca_file
    }

    /// Starts the real binary as `user`, with short intervals and trace logging (so the secret
    /// check sees everything this crate logs).
    pub fn controller(&mut self, user: &str, extra: &[&str]) -> ControllerProcess {
        let mut command = Command::new(env!("CARGO_BIN_EXE_nutanix-machine-controller"));
        command
            .arg("--kubeconfig")
            .arg(self.kubeconfig(user))
            .arg("--prism-ca-file")
            .arg(&self.ca_file)
            .args([
                "--namespace",
                NS,
                "--v=6",
                "--logtostderr=true",
                "--metrics-bind-address",
                "127.0.0.1:0",
                "--health-addr",
                "127.0.0.1:0",
                "--poll-interval",
                "200ms",
                "--requeue-interval",
                "500ms",
                "--inventory-refresh-interval",
                "2s",
                "--excluded-address-cidrs",
                "10.128.0.0/14,172.30.0.0/16",
            ])
            .args(extra)
            .env_remove("RUST_LOG")
            .env("POD_NAME", user)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = command.spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        self.logs.push(lines.clone());
        ControllerProcess {
            child,
            user: user.to_owned(),
            lines,
        }
    }

    /// Every log line of every controller started so far.
    pub fn all_logs(&self) -> Vec<String> {
        self.logs
            .iter()
            .flat_map(|l| l.lock().unwrap().clone())
            .collect()
    }

    /// Fails if a password, user data or a generated Administrator password is in any log line.
    pub fn assert_no_secrets_logged(&self, extra_secrets: &[String]) {
        let encode = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let mut secrets = vec![
            PRISM_PASSWORD.to_owned(),
            LINUX_SECRET.to_owned(),
            WINDOWS_SECRET.to_owned(),
            encode(&linux_user_data()),
            encode(&windows_user_data()),
            encode(&credentials_json(PRISM_PASSWORD)),
        ];
        secrets.extend(extra_secrets.iter().cloned());
        let logs = self.all_logs();
        assert!(!logs.is_empty(), "the controllers logged nothing at all");
        for line in &logs {
            for secret in &secrets {
                assert!(
                    !line.contains(secret.as_str()),
                    "a secret appears in a log line: {line}"
                );
            }
        }
    }

    /// Fails if `user` made a Kubernetes call that the RBAC manifests (`manifests/rbac/`, the
    /// single source of truth for the controller's permissions) do not allow its ServiceAccount.
    pub fn assert_permissions(&self, user: &str) {
        let permissions = crate::rbac::Permissions::controller().unwrap();
        let mine: Vec<_> = self
            .sim
            .requests()
            .into_iter()
            .filter(|r| r.user == user && r.is_resource_request())
            .collect();
        assert!(!mine.is_empty(), "{user} made no call");
        let forbidden = permissions.forbidden(&mine);
        assert!(
            forbidden.is_empty(),
            "{user} made calls that manifests/rbac/ does not allow:\n{}",
            forbidden.join("\n")
        );
    }

    pub fn machines_api(&self) -> Api<Machine> {
        Api::namespaced(self.client.clone(), NS)
    }

    pub async fn create_machine(&self, name: &str, provider_spec: Value, windows: bool) {
        self.create_machine_with(name, provider_spec, windows, json!({}))
            .await;
    }

    /// Creates a Machine whose metadata carries `annotations` (our choices, as a MachineSet's
    /// template gives them to its Machines).
    pub async fn create_machine_with(
        &self,
        name: &str,
        provider_spec: Value,
        windows: bool,
        annotations: Value,
    ) {
        let mut labels = json!({
            "machine.openshift.io/cluster-api-cluster": INFRA_ID,
            "machine.openshift.io/cluster-api-machine-role": "worker",
        });
        if windows {
            labels["machine.openshift.io/os-id"] = json!("Windows");
        }
        let machine: Machine = serde_json::from_value(json!({
            "apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
            "metadata": {"name": name, "namespace": NS, "labels": labels, "annotations": annotations},
            "spec": {"providerSpec": {"value": provider_spec}},
        }))
        .unwrap();
        self.machines_api()
            .create(&PostParams::default(), &machine)
            .await
            .unwrap();
    }

    /// The Machine as stored, or `None` once it is gone.
    pub fn machine(&self, name: &str) -> Option<Value> {
        self.sim
            .get("machine.openshift.io", "machines", NS, name)
            .ok()
    }

    /// Polls until `check` holds for the Machine (a missing Machine is `Value::Null`).
    pub async fn wait_machine(
        &self,
        name: &str,
        what: &str,
        check: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let machine = self.machine(name).unwrap_or(Value::Null);
            if check(&machine) {
                return machine;
            }
            if Instant::now() > deadline {
                let logs = self.all_logs();
                let tail = logs
                    .iter()
                    .rev()
                    .take(60)
                    .rev()
                    .cloned()
                    .collect::<Vec<_>>();
                panic!(
                    "Machine {name}: timed out waiting for {what}; Machine:\n{}\nlast log lines:\n{}",
                    serde_json::to_string_pretty(&machine).unwrap(),
                    tail.join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub async fn wait_phase(&self, name: &str, phase: &str) -> Value {
        self.wait_machine(name, &format!("phase {phase}"), |m| {
            m["status"]["phase"] == phase
        })
        .await
    }

    /// Plays nodelink: for each Machine with a providerID and an InternalIP but no nodeRef,
    /// creates a Ready Node (no providerID: the controller must set it) named after the Machine
    /// and annotated with it, then sets the Machine's `status.nodeRef`.
    pub fn start_nodelink(&mut self) {
        let client = self.client.clone();
        let machines: Api<Machine> = Api::namespaced(client.clone(), NS);
        let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client);
        self.nodelink = Some(tokio::spawn(async move {
            loop {
                if let Ok(list) = machines.list(&Default::default()).await {
                    for machine in list.items {
                        let status = machine.status.clone().unwrap_or_default();
                        let ip = status
                            .addresses
                            .iter()
                            .find(|a| a.type_ == "InternalIP")
                            .map(|a| a.address.clone());
                        let (Some(ip), Some(_), None, None) = (
                            ip,
                            machine.spec.provider_id.as_ref(),
                            status.node_ref.as_ref(),
                            machine.metadata.deletion_timestamp.as_ref(),
                        ) else {
                            continue;
                        };
                        let name = machine.metadata.name.clone().unwrap();
                        let node = serde_json::from_value(json!({
                            "apiVersion": "v1", "kind": "Node",
                            "metadata": {"name": name, "annotations": {
                                "machine.openshift.io/machine": format!("{NS}/{name}")}},
                            "spec": {},
                            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                                       "addresses": [{"type": "InternalIP", "address": ip}]},
                        }))
                        .unwrap();
                        let _ = nodes.create(&PostParams::default(), &node).await;
                        let _ = machines
                            .patch_status(
                                &name,
                                &PatchParams::default(),
                                &Patch::Merge(
                                    json!({"status": {"nodeRef": {"kind": "Node", "name": name}}}),
                                ),
                            )
                            .await;
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }));
    }

    /// The Node as stored, or `None`.
    pub fn node(&self, name: &str) -> Option<Value> {
        self.sim.get("", "nodes", "", name).ok()
    }

    /// Polls until the Node exists and `check` holds for it.
    pub async fn wait_node(&self, name: &str, check: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if let Some(node) = self.node(name)
                && check(&node)
            {
                return node;
            }
            assert!(
                Instant::now() < deadline,
                "Node {name}: timed out; {:?}",
                self.node(name)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// VMs in the mock with this name.
    pub fn vms_named(&self, name: &str) -> Vec<prism_mock::VmSummary> {
        self.mock
            .admin()
            .vms()
            .into_iter()
            .filter(|vm| vm.name == name)
            .collect()
    }

    /// Machine patches by the controller (status and metadata), answered or refused.
    pub fn controller_machine_patches(&self) -> usize {
        self.sim
            .requests()
            .iter()
            .filter(|r| r.resource == "machines" && r.verb == "patch" && r.user == "controller")
            .count()
    }

    /// Waits until the controller's Machine patches have been quiet for two seconds and
    /// returns their count. A Machine just written Running or Configured may still get its
    /// Node's reference and addresses in the next reconciles, later under load (two tests
    /// failed so on a busy machine); a controller that writes on a timer of its own is still
    /// caught by the longer quiet window a test asserts after this.
    pub async fn settled_machine_patches(&self) -> usize {
        let deadline = Instant::now() + TIMEOUT;
        let mut quiet_since = (Instant::now(), self.controller_machine_patches());
        while quiet_since.0.elapsed() < Duration::from_secs(2) {
            assert!(
                Instant::now() < deadline,
                "the controller's Machine writes never settled: {} so far",
                quiet_since.1
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
            let now = self.controller_machine_patches();
            if now != quiet_since.1 {
                quiet_since = (Instant::now(), now);
            }
        }
        quiet_since.1
    }

    /// Prism calls so far, all endpoints.
    pub fn prism_calls(&self) -> u64 {
        self.mock.admin().counters().iter().map(|c| c.count).sum()
    }

    /// Polls until an event about `name` has this reason and a note containing `text`.
    pub async fn wait_event(
        &self,
        name: &str,
        reason: &str,
        text: &str,
    ) -> (String, String, String) {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if let Some(event) = self
                .events_of(name)
                .into_iter()
                .find(|(r, _, note)| r == reason && note.contains(text))
            {
                return event;
            }
            assert!(
                Instant::now() < deadline,
                "no event {reason} about {name} containing {text:?}: {:?}",
                self.events_of(name)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// How many times an event with this reason was published about `name` (a repeated event
    /// is one object with a series count).
    pub fn event_count(&self, name: &str, reason: &str) -> u64 {
        self.sim
            .list("", "events")
            .unwrap_or_default()
            .into_iter()
            .filter(|e| {
                (e["involvedObject"]["name"] == name || e["regarding"]["name"] == name)
                    && e["reason"] == reason
            })
            .map(|e| {
                [&e["series"]["count"], &e["count"], &e["deprecatedCount"]]
                    .iter()
                    .filter_map(|v| v.as_u64())
                    .max()
                    .unwrap_or(1)
            })
            .sum()
    }

    /// Events about `name` (reason, type, note).
    pub fn events_of(&self, name: &str) -> Vec<(String, String, String)> {
        self.sim
            .list("", "events")
            .unwrap_or_default()
            .into_iter()
            .filter(|e| e["involvedObject"]["name"] == name || e["regarding"]["name"] == name)
            .map(|e| {
                let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
                (
                    text(&e["reason"]),
                    text(&e["type"]),
                    if e["note"].is_string() {
                        text(&e["note"])
                    } else {
                        text(&e["message"])
                    },
                )
            })
            .collect()
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        if let Some(nodelink) = self.nodelink.take() {
            nodelink.abort();
        }
    }
}

/// GETs `path` from the endpoint a log line names (`... address=127.0.0.1:PORT`); the body.
pub async fn scrape(log_line: &str, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let address = log_line
        .split_whitespace()
        .find_map(|word| word.strip_prefix("address="))
        .unwrap_or_else(|| panic!("no address in {log_line:?}"));
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    assert!(
        head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"),
        "{head}"
    );
    body.to_owned()
}

/// A providerSpec on the mock's default seed, with only the Go provider's fields (the
/// machine-api-operator's webhook would drop any other).
pub fn provider_spec(image: Value, disk: &str, user_data: &str) -> Value {
    json!({
        "apiVersion": "machine.openshift.io/v1",
        "kind": "NutanixMachineProviderConfig",
        "cluster": {"type": "name", "name": "pe-1"},
        "image": image,
        "subnets": [{"type": "name", "name": "vm-network"}],
        "vcpuSockets": 2, "vcpusPerSocket": 1, "memorySize": "8Gi", "systemDiskSize": disk,
        "bootType": "",
        "project": {"type": ""},
        "categories": [{"key": "AppType", "value": "Kubernetes"}],
        "credentialsSecret": {"name": "nutanix-credentials"},
        "userDataSecret": {"name": user_data},
    })
}

/// Our choices as the annotations that carry them.
pub fn choices(pairs: &[(&str, &str)]) -> Value {
    Value::Object(
        pairs
            .iter()
            .map(|(key, value)| ((*key).to_owned(), json!(value)))
            .collect(),
    )
}

pub fn linux_spec() -> Value {
    provider_spec(
        json!({"type": "name", "name": "rhcos-4.20"}),
        "120Gi",
        "worker-user-data",
    )
}

/// A Windows Machine deployed from the seed's template, with Sysprep: its providerSpec and the
/// annotations choosing both.
pub fn windows_template() -> (Value, Value) {
    (
        provider_spec(
            json!({"type": "name", "name": "windows-server-2022-template"}),
            "120Gi",
            "windows-user-data",
        ),
        choices(&[
            (IMAGE_KIND_ANNOTATION, "Template"),
            (GUEST_CUSTOMIZATION_ANNOTATION, "Sysprep"),
        ]),
    )
}

/// A Windows Machine cloned from the seed's powered-off VM, with Sysprep.
pub fn windows_clone() -> (Value, Value) {
    (
        provider_spec(
            json!({"type": "name", "name": "windows-golden"}),
            "140Gi",
            "windows-user-data",
        ),
        choices(&[
            (IMAGE_KIND_ANNOTATION, "VM"),
            (GUEST_CUSTOMIZATION_ANNOTATION, "Sysprep"),
        ]),
    )
}

/// The Administrator password in an unattend.xml (Windows' obfuscated form decoded).
pub fn admin_password_of(unattend_xml: &str) -> Option<String> {
    let start = unattend_xml.find("<AdministratorPassword>")?;
    let rest = &unattend_xml[start..];
    let value_start = rest.find("<Value>")? + "<Value>".len();
    let value_end = rest.find("</Value>")?;
    let encoded = &rest[value_start..value_end];
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()?;
    let units: Vec<u16> = bytes
        .chunks_exact(2)
        .map(|pair| u16::from_le_bytes([pair[0], pair[1]]))
        .collect();
    let text = String::from_utf16(&units).ok()?;
    text.strip_suffix("AdministratorPassword")
        .map(str::to_owned)
}
