//! A real control plane on loopback: etcd, kube-apiserver and kube-controller-manager from
//! `k8s.io/kubernetes`, and the machine-api-operator's own `machineset` (the MachineSet
//! controller, serving the Machine and MachineSet webhooks), `nodelink-controller` and
//! `machine-healthcheck`, all built by `hack/real-cluster/build.sh` at pinned versions. The
//! CRDs are openshift/api's own manifests, copied unedited by the build from the module cache.
//!
//! What has no real counterpart here (kubelets and their CSRs, WMCO, Prism Central, the
//! cluster-machine-approver, which the Go module proxy does not serve) stays simulated and talks
//! to this API server like any client.
//!
//! Every process binds to `127.0.0.1` where it has a flag for it, and is killed when the
//! [`ControlPlane`] is dropped (also when a test fails).

mod faults;
mod pki;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use kube::api::{Api, DynamicObject, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, Config};
use serde_json::{Value, json};
use tokio::process::{Child, Command};

pub use faults::THROTTLE_NAME;
pub use pki::Pki;

/// The administrator's user name (its client certificate's CommonName, in `system:masters`).
pub const ADMIN_USER: &str = "real-cluster-admin";

/// The environment variable naming the build's cache directory (what `build.sh` prints).
pub const DIR_VARIABLE: &str = "REAL_CLUSTER_DIR";

/// Why the real control plane could not be started.
#[derive(Debug, thiserror::Error)]
pub enum RealClusterError {
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Certificate(#[from] k8s_semantics::pki::CertificateError),
    #[error("{program} is not in {dir} (run hack/real-cluster/build.sh)")]
    MissingProgram { program: &'static str, dir: PathBuf },
    #[error("{program} exited during start ({status}); its log {log} ends:\n{log_tail}")]
    Exited {
        program: &'static str,
        status: std::process::ExitStatus,
        log: PathBuf,
        log_tail: String,
    },
    #[error("no free port in {start}..{end} on loopback")]
    NoFreePort { start: u16, end: u16 },
    #[error("{what} not ready within {seconds} s; logs in {dir}")]
    NotReady {
        what: String,
        seconds: u64,
        dir: PathBuf,
    },
    #[error("kubeconfig {path}: {message}")]
    Kubeconfig { path: PathBuf, message: String },
    #[error("{action}: {source}")]
    Api { action: String, source: kube::Error },
    #[error("manifest {path}: {message}")]
    Manifest { path: PathBuf, message: String },
    #[error("kubectl apply -k {dir} exited with {status}: {stderr}")]
    Kubectl {
        dir: PathBuf,
        status: std::process::ExitStatus,
        stderr: String,
    },
    #[error("the TokenRequest for ServiceAccount {service_account} answered no status.token")]
    NoToken { service_account: String },
    #[error("no program {program} was started on the control plane")]
    UnknownProgram { program: String },
    #[error("etcd: {action}: {message}")]
    Etcd { action: String, message: String },
}

fn io_error(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> RealClusterError {
    let what = what.into();
    move |source| RealClusterError::Io { what, source }
}

fn api_error(action: impl Into<String>) -> impl FnOnce(kube::Error) -> RealClusterError {
    let action = action.into();
    move |source| RealClusterError::Api { action, source }
}

/// The built programs and CRDs: `$REAL_CLUSTER_DIR/{bin,crds}`.
#[derive(Debug, Clone)]
pub struct Binaries {
    dir: PathBuf,
}

impl Binaries {
    /// The build named by `REAL_CLUSTER_DIR`, or `None` when it is unset.
    pub fn from_env() -> Option<Self> {
        std::env::var_os(DIR_VARIABLE).map(|dir| Self {
            dir: PathBuf::from(dir),
        })
    }

    pub fn program(&self, program: &'static str) -> Result<PathBuf, RealClusterError> {
        let path = self.dir.join("bin").join(program);
        if path.is_file() {
            Ok(path)
        } else {
            Err(RealClusterError::MissingProgram {
                program,
                dir: self.dir.join("bin"),
            })
        }
    }

    /// openshift/api's CRD manifests the build copied.
    pub fn crd_files(&self) -> Result<Vec<PathBuf>, RealClusterError> {
        let dir = self.dir.join("crds");
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map_err(io_error(format!("read {}", dir.display())))?
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
            .collect();
        files.sort();
        Ok(files)
    }

    /// The pinned module versions the build recorded.
    pub fn versions(&self) -> String {
        std::fs::read_to_string(self.dir.join("versions")).unwrap_or_default()
    }
}

fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Where this process hands out ports: below the kernel's ephemeral range, so that no outgoing
/// connection (of which the tests open thousands) takes a port between its choice here and the
/// program's bind. Ports bound with `:0` come from the ephemeral range, and a released one may
/// be a connection's source port a moment later: MAO's `machineset` once exited on CI that way.
const PORT_POOL_START: u16 = 20000;

/// The first port of the ephemeral range (`net.ipv4.ip_local_port_range`; 32768 when unreadable,
/// Linux's default).
fn ephemeral_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768)
}

/// The next port below the ephemeral range no one holds now; each is handed out once per
/// process, from an offset of the process id so that two test processes seldom try the same
/// ports.
fn free_port() -> Result<u16, RealClusterError> {
    static POOL: std::sync::OnceLock<PortPool> = std::sync::OnceLock::new();
    let end = ephemeral_start();
    if end <= PORT_POOL_START {
        // No room below the range: fall back to the kernel's choice.
        let listener = TcpListener::bind("127.0.0.1:0").map_err(io_error("bind a free port"))?;
        return Ok(listener
            .local_addr()
            .map_err(io_error("read a free port"))?
            .port());
    }
    POOL.get_or_init(|| {
        let size = u32::from(end - PORT_POOL_START);
        PortPool::new(
            PORT_POOL_START,
            end,
            std::process::id().wrapping_mul(7919) % size,
        )
    })
    .take()
}

/// Ports `start..end`, handed out in turn from `next`, each skipped while someone holds it.
#[derive(Debug)]
struct PortPool {
    start: u16,
    end: u16,
    next: std::sync::atomic::AtomicU32,
}

impl PortPool {
    fn new(start: u16, end: u16, first_offset: u32) -> Self {
        Self {
            start,
            end,
            next: std::sync::atomic::AtomicU32::new(first_offset),
        }
    }

    fn take(&self) -> Result<u16, RealClusterError> {
        let size = u32::from(self.end.saturating_sub(self.start));
        for _ in 0..size {
            let offset = self.next.fetch_add(1, std::sync::atomic::Ordering::SeqCst) % size;
            let Ok(port) = u16::try_from(u32::from(self.start) + offset) else {
                continue;
            };
            // Free on loopback and on every address: MAO's webhook server binds all of them.
            if TcpListener::bind(("127.0.0.1", port)).is_ok()
                && TcpListener::bind(("0.0.0.0", port)).is_ok()
            {
                return Ok(port);
            }
        }
        Err(RealClusterError::NoFreePort {
            start: self.start,
            end: self.end,
        })
    }
}

/// The last lines of a program's log, so that a failure on CI (where the log is gone) says why.
/// The control plane's programs log no secrets: their credentials are files named by flags.
fn log_tail(log: &Path) -> String {
    const LINES: usize = 20;
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(LINES)..].join("\n")
}

/// One started program, how it was started (a restart uses the same arguments) and where its
/// output goes.
#[derive(Debug)]
struct Process {
    program: &'static str,
    args: Vec<String>,
    /// `None` while killed on purpose ([`ControlPlane::kill_program`]).
    child: Option<Child>,
    log: PathBuf,
}

/// The running control plane. Dropping it kills every process.
#[derive(Debug)]
pub struct ControlPlane {
    /// Behind a lock so that [`ControlPlane::check_running`] works through `&self`.
    processes: std::sync::Mutex<Vec<Process>>,
    dir: PathBuf,
    url: String,
    /// etcd's client URL (plain HTTP on loopback).
    etcd_url: String,
    pki: Pki,
    admin_kubeconfig: PathBuf,
    binaries: Binaries,
    namespace: String,
}

/// Metadata of every request at `ResponseComplete` (the `audit.k8s.io/v1` Policy; no bodies:
/// Secrets and tokens never reach the log).
fn audit_policy_document() -> Value {
    json!({
        "apiVersion": "audit.k8s.io/v1", "kind": "Policy",
        "omitStages": ["RequestReceived", "ResponseStarted"],
        "rules": [{"level": "Metadata"}],
    })
}

/// The users the simulated actors act as on the real control plane, bound to `cluster-admin`:
/// the stand-ins have no real roles to run under (the cluster-machine-approver's would come with
/// it).
pub const STAND_IN_USERS: [&str; 5] = [
    "sandbox:approver",
    "sandbox:node-agent",
    "sandbox:autoscaler",
    "sandbox:ipam",
    "sandbox:test",
];

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
    /// Starts etcd, kube-apiserver and kube-controller-manager, applies openshift/api's CRDs,
    /// `Infrastructure/cluster` (platform Nutanix, Prism Central at `prism_port`) and
    /// `Network/cluster`, starts MAO's `machineset` (webhooks registered with the generated CA),
    /// `nodelink-controller` and `machine-healthcheck`, and waits for each.
    pub async fn start(
        binaries: Binaries,
        dir: &Path,
        namespace: &str,
        infrastructure_name: &str,
        prism_port: u16,
    ) -> Result<Self, RealClusterError> {
        std::fs::create_dir_all(dir).map_err(io_error(format!("create {}", dir.display())))?;
        let pki = pki::write(dir)?;
        let etcd_port = free_port()?;
        let etcd_peer_port = free_port()?;
        let api_port = free_port()?;
        let mut plane = Self {
            processes: std::sync::Mutex::new(Vec::new()),
            dir: dir.to_owned(),
            url: format!("https://127.0.0.1:{api_port}"),
            etcd_url: format!("http://127.0.0.1:{etcd_port}"),
            admin_kubeconfig: dir.join("kubeconfig"),
            pki,
            binaries,
            namespace: namespace.to_owned(),
        };
        plane.write_admin_kubeconfig()?;

        let etcd_client = format!("http://127.0.0.1:{etcd_port}");
        let etcd_peer = format!("http://127.0.0.1:{etcd_peer_port}");
        let etcd_data = dir.join("etcd");
        // A fresh cluster every start: a data directory left by an earlier run (a kept work
        // directory) would hold its objects.
        if etcd_data.exists() {
            std::fs::remove_dir_all(&etcd_data)
                .map_err(io_error(format!("remove {}", etcd_data.display())))?;
        }
        plane.spawn(
            "etcd",
            vec![
                "--data-dir".into(),
                etcd_data.display().to_string(),
                "--listen-client-urls".into(),
                etcd_client.clone(),
                "--advertise-client-urls".into(),
                etcd_client.clone(),
                "--listen-peer-urls".into(),
                etcd_peer.clone(),
                "--initial-advertise-peer-urls".into(),
                etcd_peer.clone(),
                "--initial-cluster".into(),
                format!("default={etcd_peer}"),
                // A test cluster: no fsync wait on a shared disk.
                "--unsafe-no-fsync".into(),
            ],
        )?;

        let pki = plane.pki.clone();
        let audit_policy = dir.join("audit-policy.json");
        std::fs::write(&audit_policy, audit_policy_document().to_string())
            .map_err(io_error(format!("write {}", audit_policy.display())))?;
        plane.spawn(
            "kube-apiserver",
            vec![
                // Every request's metadata and answer, one JSON line each, for the comparison of
                // what each actor wrote here and on kube-sim (`sandbox::writes`).
                "--audit-policy-file".into(),
                audit_policy.display().to_string(),
                "--audit-log-path".into(),
                plane.audit_log().display().to_string(),
                "--audit-log-format".into(),
                "json".into(),
                "--etcd-servers".into(),
                etcd_client,
                "--bind-address".into(),
                "127.0.0.1".into(),
                "--advertise-address".into(),
                "127.0.0.1".into(),
                "--secure-port".into(),
                api_port.to_string(),
                "--tls-cert-file".into(),
                pki.server_cert.display().to_string(),
                "--tls-private-key-file".into(),
                pki.server_key.display().to_string(),
                "--client-ca-file".into(),
                pki.ca_cert.display().to_string(),
                "--service-account-issuer".into(),
                "https://kubernetes.default.svc".into(),
                "--service-account-key-file".into(),
                pki.service_account_public.display().to_string(),
                "--service-account-signing-key-file".into(),
                pki.service_account_private.display().to_string(),
                "--service-cluster-ip-range".into(),
                "172.30.0.0/16".into(),
                // OpenShift's kube-apiserver has the Node authorizer beside RBAC: the kubelets'
                // own identities (`system:node:<name>`) register their Nodes and ask for their
                // serving certificates.
                "--authorization-mode".into(),
                "Node,RBAC".into(),
                // The `kubernetes` Service's endpoints would name a loopback address, which the
                // endpoint validation refuses; nothing here reaches the API server through it.
                "--endpoint-reconciler-type".into(),
                "none".into(),
            ],
        )?;
        plane.wait_api_ready().await?;

        let kubeconfig = plane.admin_kubeconfig.display().to_string();
        plane.spawn(
            "kube-controller-manager",
            vec![
                "--kubeconfig".into(),
                kubeconfig.clone(),
                "--authentication-kubeconfig".into(),
                kubeconfig.clone(),
                "--authorization-kubeconfig".into(),
                kubeconfig.clone(),
                "--bind-address".into(),
                "127.0.0.1".into(),
                "--secure-port".into(),
                free_port()?.to_string(),
                "--leader-elect=false".into(),
                "--cluster-signing-cert-file".into(),
                pki.ca_cert.display().to_string(),
                "--cluster-signing-key-file".into(),
                pki.ca_key.display().to_string(),
                "--root-ca-file".into(),
                pki.ca_cert.display().to_string(),
                "--service-account-private-key-file".into(),
                pki.service_account_private.display().to_string(),
                "--use-service-account-credentials=false".into(),
            ],
        )?;

        let client = plane.admin_client().await?;
        plane.apply_crds(&client).await?;
        create(
            &client,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}),
        )
        .await?;
        create_node_bootstrapper(&client).await?;
        create(
            &client,
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": "sandbox-stand-ins"},
                "subjects": STAND_IN_USERS.map(|name| json!({
                    "kind": "User", "name": name, "apiGroup": "rbac.authorization.k8s.io"})),
                "roleRef": {"kind": "ClusterRole", "name": "cluster-admin",
                            "apiGroup": "rbac.authorization.k8s.io"},
            }),
        )
        .await?;
        create_infrastructure(&client, infrastructure_name, prism_port).await?;
        create_networks(&client).await?;
        // MAO's webhooks read `DNS/cluster` at start (machine_webhook.go, getDNS): no public zone,
        // as on a cluster installed on Nutanix without one.
        create(
            &client,
            json!({
                "apiVersion": "config.openshift.io/v1", "kind": "DNS",
                "metadata": {"name": "cluster"},
                "spec": {"baseDomain": "sandbox.example"},
            }),
        )
        .await?;

        let webhook_port = free_port()?;
        let namespace_flag = format!("--namespace={namespace}");
        plane.spawn(
            "machineset",
            vec![
                namespace_flag.clone(),
                format!("--webhook-port={webhook_port}"),
                format!("--webhook-cert-dir={}", pki.webhook_dir.display()),
                format!("--metrics-bind-address=127.0.0.1:{}", free_port()?),
                format!("--health-addr=127.0.0.1:{}", free_port()?),
            ],
        )?;
        plane.register_webhooks(&client, webhook_port).await?;
        plane.spawn("nodelink-controller", vec![namespace_flag.clone()])?;
        plane.spawn(
            "machine-healthcheck",
            vec![
                namespace_flag,
                format!("--metrics-bind-address=127.0.0.1:{}", free_port()?),
                format!("--health-addr=127.0.0.1:{}", free_port()?),
            ],
        )?;
        plane.wait_webhooks_served(webhook_port).await?;
        Ok(plane)
    }

    /// The API server's audit log: one JSON `audit.k8s.io/v1` Event per request, at its
    /// `ResponseComplete` stage.
    pub fn audit_log(&self) -> PathBuf {
        self.dir.join("audit.log")
    }

    /// A client acting as `user` (impersonated by the administrator, who may): a stand-in's own
    /// name in the audit log. Its permissions are `cluster-admin`'s (see [`STAND_IN_USERS`]).
    pub async fn impersonating_client(&self, user: &str) -> Result<Client, RealClusterError> {
        let user = json!({
            "client-certificate-data": STANDARD.encode(&self.pki.admin_cert_pem),
            "client-key-data": STANDARD.encode(&self.pki.admin_key_pem),
            "as": user,
        });
        self.client_as(&user).await
    }

    /// The API server's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The CA (PEM) that signed the API server's certificate.
    pub fn ca_pem(&self) -> &str {
        &self.pki.ca_pem
    }

    /// The admin kubeconfig (client certificate of `system:masters`).
    pub fn admin_kubeconfig(&self) -> &Path {
        &self.admin_kubeconfig
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn binaries(&self) -> &Binaries {
        &self.binaries
    }

    /// A client of the admin kubeconfig.
    pub async fn admin_client(&self) -> Result<Client, RealClusterError> {
        client_of(&self.admin_kubeconfig).await
    }

    /// A TokenRequest token (valid a day) of the ServiceAccount `namespace/service_account`.
    pub async fn service_account_token(
        &self,
        namespace: &str,
        service_account: &str,
    ) -> Result<String, RealClusterError> {
        let client = self.admin_client().await?;
        let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
            Api::namespaced(client, namespace);
        let request = json!({
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": 86_400},
        });
        let answer: Value = accounts
            .create_subresource("token", service_account, &PostParams::default(), &request)
            .await
            .map_err(api_error(format!(
                "request a token for ServiceAccount {namespace}/{service_account}"
            )))?;
        answer["status"]["token"]
            .as_str()
            .filter(|token| !token.is_empty())
            .map(str::to_owned)
            .ok_or_else(|| RealClusterError::NoToken {
                service_account: format!("{namespace}/{service_account}"),
            })
    }

    /// Writes a kubeconfig with a token of the ServiceAccount `service_account` of the
    /// machine-api namespace, as the controller's pod would have it.
    pub async fn write_service_account_kubeconfig(
        &self,
        service_account: &str,
        path: &Path,
    ) -> Result<(), RealClusterError> {
        let token = self
            .service_account_token(&self.namespace, service_account)
            .await?;
        let text = kubeconfig_yaml(
            &self.url,
            &self.pki.ca_pem,
            &json!({"token": token}),
            service_account,
        );
        std::fs::write(path, text).map_err(io_error(format!("write {}", path.display())))
    }

    /// A client of this API server authenticating with `user` (a kubeconfig user: a `token`, or
    /// `client-certificate-data` and `client-key-data`).
    pub async fn client_as(&self, user: &Value) -> Result<Client, RealClusterError> {
        client_of_identity(&self.url, &self.pki.ca_pem, user).await
    }

    fn write_admin_kubeconfig(&self) -> Result<(), RealClusterError> {
        let user = json!({
            "client-certificate-data": STANDARD.encode(&self.pki.admin_cert_pem),
            "client-key-data": STANDARD.encode(&self.pki.admin_key_pem),
        });
        let text = kubeconfig_yaml(&self.url, &self.pki.ca_pem, &user, "admin");
        std::fs::write(&self.admin_kubeconfig, text).map_err(io_error(format!(
            "write {}",
            self.admin_kubeconfig.display()
        )))
    }

    fn spawn(&mut self, program: &'static str, args: Vec<String>) -> Result<(), RealClusterError> {
        let log = self.dir.join(format!("{program}.log"));
        let child = self.start_child(program, &args, &log, false)?;
        lock(&self.processes).push(Process {
            program,
            args,
            child: Some(child),
            log,
        });
        Ok(())
    }

    /// Starts `program` with `args`, its output to `log` (appended to when `append`, as a
    /// restarted container's log continues).
    fn start_child(
        &self,
        program: &'static str,
        args: &[String],
        log: &Path,
        append: bool,
    ) -> Result<Child, RealClusterError> {
        let path = self.binaries.program(program)?;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(append)
            .truncate(!append)
            .open(log)
            .map_err(io_error(format!("open {}", log.display())))?;
        let err = file
            .try_clone()
            .map_err(io_error(format!("open {}", log.display())))?;
        Command::new(&path)
            .args(args)
            .env("KUBECONFIG", &self.admin_kubeconfig)
            .stdin(Stdio::null())
            .stdout(Stdio::from(file))
            .stderr(Stdio::from(err))
            .kill_on_drop(true)
            .spawn()
            .map_err(io_error(format!("start {}", path.display())))
    }

    /// Fails if a started process has exited.
    pub fn check_running(&self) -> Result<(), RealClusterError> {
        for process in lock(&self.processes).iter_mut() {
            let Some(child) = process.child.as_mut() else {
                continue;
            };
            if let Ok(Some(status)) = child.try_wait() {
                return Err(RealClusterError::Exited {
                    program: process.program,
                    status,
                    log: process.log.clone(),
                    log_tail: log_tail(&process.log),
                });
            }
        }
        Ok(())
    }

    async fn wait_api_ready(&mut self) -> Result<(), RealClusterError> {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            self.check_running()?;
            if let Ok(client) = client_of(&self.admin_kubeconfig).await {
                let ready =
                    client
                        .request_text(http::Request::get("/readyz").body(Vec::new()).map_err(
                            |e| RealClusterError::Manifest {
                                path: self.admin_kubeconfig.clone(),
                                message: e.to_string(),
                            },
                        )?)
                        .await;
                if ready.is_ok_and(|text| text.trim() == "ok") {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                return Err(self.not_ready("kube-apiserver /readyz", 120));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    fn not_ready(&self, what: &str, seconds: u64) -> RealClusterError {
        RealClusterError::NotReady {
            what: what.to_owned(),
            seconds,
            dir: self.dir.clone(),
        }
    }

    async fn apply_crds(&mut self, client: &Client) -> Result<(), RealClusterError> {
        let mut documents = Vec::new();
        for path in self.binaries.crd_files()? {
            let text = std::fs::read_to_string(&path)
                .map_err(io_error(format!("read {}", path.display())))?;
            documents.extend(kube_sim::load::documents(&text).map_err(|e| {
                RealClusterError::Manifest {
                    path: path.clone(),
                    message: e.to_string(),
                }
            })?);
        }
        self.add_crds(client, documents).await
    }

    /// Creates CRDs (other than openshift/api's, which [`ControlPlane::start`] applies) and
    /// waits until each is `Established`.
    pub async fn add_crds(
        &self,
        client: &Client,
        documents: Vec<Value>,
    ) -> Result<(), RealClusterError> {
        let mut names = Vec::new();
        for crd in documents {
            names.push(
                crd["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            );
            create(client, crd).await?;
        }
        let crds: Api<
            k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
        > = Api::all(client.clone());
        let deadline = Instant::now() + Duration::from_secs(60);
        for name in names {
            loop {
                let established = crds.get(&name).await.ok().is_some_and(|crd| {
                    crd.status
                        .and_then(|s| s.conditions)
                        .unwrap_or_default()
                        .iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                });
                if established {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(self.not_ready(&format!("CRD {name} established"), 60));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(())
    }

    /// `kubectl apply -k DIR` with the built kubectl, as an administrator applies
    /// `manifests/rbac/`.
    pub async fn apply_kustomization(&self, dir: &Path) -> Result<(), RealClusterError> {
        let output = Command::new(self.binaries.program("kubectl")?)
            .arg("--kubeconfig")
            .arg(&self.admin_kubeconfig)
            .arg("apply")
            .arg("-k")
            .arg(dir)
            .output()
            .await
            .map_err(io_error(format!("run kubectl apply -k {}", dir.display())))?;
        if output.status.success() {
            return Ok(());
        }
        Err(RealClusterError::Kubectl {
            dir: dir.to_owned(),
            status: output.status,
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        })
    }

    /// The machine-api-operator registers its webhooks by Service with the service CA injected
    /// (`pkg/webhooks/config.go`); here the `machineset` process listens on loopback, so each
    /// webhook names its URL and the generated CA. Names, rules, operations, failure policy
    /// (`Ignore`) and side effects are MAO's.
    async fn register_webhooks(&self, client: &Client, port: u16) -> Result<(), RealClusterError> {
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
    async fn wait_webhooks_served(&mut self, port: u16) -> Result<(), RealClusterError> {
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

fn kubeconfig_yaml(url: &str, ca_pem: &str, user: &Value, user_name: &str) -> String {
    json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "real-cluster", "cluster": {
            "server": url, "certificate-authority-data": STANDARD.encode(ca_pem)}}],
        "users": [{"name": user_name, "user": user}],
        "contexts": [{"name": "real-cluster", "context": {"cluster": "real-cluster", "user": user_name}}],
        "current-context": "real-cluster",
    })
    .to_string()
}

/// A client of the API server at `url` (whose CA is `ca_pem`) authenticating with `user` (a
/// kubeconfig user).
pub async fn client_of_identity(
    url: &str,
    ca_pem: &str,
    user: &Value,
) -> Result<Client, RealClusterError> {
    let text = kubeconfig_yaml(url, ca_pem, user, "user");
    let kubeconfig_error = |message: String| RealClusterError::Kubeconfig {
        path: PathBuf::from(format!("(in memory, for {url})")),
        message,
    };
    let kubeconfig = Kubeconfig::from_yaml(&text).map_err(|e| kubeconfig_error(e.to_string()))?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| kubeconfig_error(e.to_string()))?;
    Client::try_from(config).map_err(api_error(format!("client of {url}")))
}

/// A client of a kubeconfig file.
pub async fn client_of(path: &Path) -> Result<Client, RealClusterError> {
    let kubeconfig_error = |message: String| RealClusterError::Kubeconfig {
        path: path.to_owned(),
        message,
    };
    let kubeconfig = Kubeconfig::read_from(path).map_err(|e| kubeconfig_error(e.to_string()))?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| kubeconfig_error(e.to_string()))?;
    Client::try_from(config).map_err(api_error(format!("client of {}", path.display())))
}

/// Creates one object given as JSON, finding its resource by discovery.
pub async fn create(client: &Client, object: Value) -> Result<Value, RealClusterError> {
    let api_version = object["apiVersion"].as_str().unwrap_or_default().to_owned();
    let kind = object["kind"].as_str().unwrap_or_default().to_owned();
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let (group, version) = api_version.split_once('/').unwrap_or(("", &api_version));
    let gvk = GroupVersionKind::gvk(group, version, &kind);
    let (resource, capabilities) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .map_err(api_error(format!("discover {api_version} {kind}")))?;
    let api: Api<DynamicObject> = match object["metadata"]["namespace"].as_str() {
        Some(namespace) if capabilities.scope == kube::discovery::Scope::Namespaced => {
            Api::namespaced_with(client.clone(), namespace, &resource)
        }
        _ => Api::all_with(client.clone(), &resource),
    };
    let typed: DynamicObject =
        serde_json::from_value(object).map_err(|e| RealClusterError::Manifest {
            path: PathBuf::from(format!("{kind}/{name}")),
            message: e.to_string(),
        })?;
    let created = api
        .create(&PostParams::default(), &typed)
        .await
        .map_err(api_error(format!("create {kind} {name}")))?;
    serde_json::to_value(created).map_err(|e| RealClusterError::Manifest {
        path: PathBuf::from(format!("{kind}/{name}")),
        message: e.to_string(),
    })
}

/// The machine-config-operator's namespace, where the ServiceAccount of the kubelets' bootstrap
/// token lives.
pub const NODE_BOOTSTRAPPER_NAMESPACE: &str = "openshift-machine-config-operator";
/// The ServiceAccount whose token a new kubelet asks for its client certificate with.
pub const NODE_BOOTSTRAPPER: &str = "node-bootstrapper";

/// The kubelets' bootstrap identity as the machine-config-operator installs it
/// (`manifests/machineconfigserver/`: `node-bootstrapper-sa.yaml`,
/// `csr-bootstrap-role-binding.yaml` binding Kubernetes' `system:node-bootstrapper` ClusterRole,
/// and `csr-renewal-role-binding.yaml` letting `system:nodes` renew their own client
/// certificates). It may create CSRs, not approve them: kube-controller-manager's approver leaves
/// its requests to the cluster-machine-approver.
async fn create_node_bootstrapper(client: &Client) -> Result<(), RealClusterError> {
    create(
        client,
        json!({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": NODE_BOOTSTRAPPER_NAMESPACE}}),
    )
    .await?;
    create(
        client,
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": NODE_BOOTSTRAPPER, "namespace": NODE_BOOTSTRAPPER_NAMESPACE}}),
    )
    .await?;
    for (name, subject, role) in [
        (
            "system-bootstrap-node-bootstrapper",
            json!({"kind": "ServiceAccount", "name": NODE_BOOTSTRAPPER,
                   "namespace": NODE_BOOTSTRAPPER_NAMESPACE}),
            "system:node-bootstrapper",
        ),
        (
            "system-bootstrap-node-renewal",
            json!({"kind": "Group", "name": "system:nodes",
                   "apiGroup": "rbac.authorization.k8s.io"}),
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
        ),
    ] {
        create(
            client,
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": name},
                "subjects": [subject],
                "roleRef": {"kind": "ClusterRole", "name": role,
                            "apiGroup": "rbac.authorization.k8s.io"},
            }),
        )
        .await?;
    }
    Ok(())
}

/// `Infrastructure/cluster` as the installer leaves it on Nutanix: the spec's Prism Central and
/// Prism Element, then the status (a subresource in openshift/api's CRD) with the infra ID.
async fn create_infrastructure(
    client: &Client,
    infrastructure_name: &str,
    prism_port: u16,
) -> Result<(), RealClusterError> {
    create(
        client,
        json!({
            "apiVersion": "config.openshift.io/v1", "kind": "Infrastructure",
            "metadata": {"name": "cluster"},
            "spec": {"platformSpec": {"type": "Nutanix", "nutanix": {
                "prismCentral": {"address": "127.0.0.1", "port": prism_port},
                "prismElements": [{"name": "pe-1", "endpoint": {"address": "127.0.0.1", "port": prism_port}}],
            }}},
        }),
    )
    .await?;
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("config.openshift.io", "v1", "Infrastructure"),
        "infrastructures",
    );
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let status = json!({"status": {
        "infrastructureName": infrastructure_name,
        "platform": "Nutanix",
        "platformStatus": {"type": "Nutanix"},
        "controlPlaneTopology": "HighlyAvailable",
        "infrastructureTopology": "HighlyAvailable",
        "apiServerURL": "https://api.sandbox.example:6443",
        "apiServerInternalURI": "https://api-int.sandbox.example:6443",
        "etcdDiscoveryDomain": "",
    }});
    api.patch_status(
        "cluster",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&status),
    )
    .await
    .map_err(api_error("write Infrastructure/cluster status"))?;
    Ok(())
}

/// OpenShift's default networks (the installer's `clusterNetwork` and `serviceNetwork`) in
/// `Network.config.openshift.io/cluster` (its CRD has no status subresource: the status is
/// written with the object), and OVN-Kubernetes' hybrid overlay, as WMCO requires it, in
/// `Network.operator.openshift.io/cluster`.
async fn create_networks(client: &Client) -> Result<(), RealClusterError> {
    let networks = json!({
        "clusterNetwork": [{"cidr": "10.128.0.0/14", "hostPrefix": 23}],
        "serviceNetwork": ["172.30.0.0/16"],
        "networkType": "OVNKubernetes",
    });
    create(
        client,
        json!({
            "apiVersion": "config.openshift.io/v1", "kind": "Network",
            "metadata": {"name": "cluster"},
            "spec": networks, "status": networks,
        }),
    )
    .await?;
    create(
        client,
        json!({
            "apiVersion": "operator.openshift.io/v1", "kind": "Network",
            "metadata": {"name": "cluster"},
            "spec": {"defaultNetwork": {"type": "OVNKubernetes", "ovnKubernetesConfig": {
                "hybridOverlayConfig": {"hybridClusterNetwork": [{"cidr": "10.132.0.0/14", "hostPrefix": 23}]}}}},
        }),
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_handed_out_once_below_the_ephemeral_range() {
        let end = ephemeral_start();
        let ports: Vec<u16> = (0..64).map(|_| free_port().unwrap()).collect();
        let distinct: std::collections::BTreeSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len(), "{ports:?}");
        if end > PORT_POOL_START {
            assert!(
                ports.iter().all(|p| (PORT_POOL_START..end).contains(p)),
                "{ports:?} not in {PORT_POOL_START}..{end}"
            );
        }
    }

    #[test]
    fn a_held_port_is_skipped_and_a_full_pool_says_so() {
        let held = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = held.local_addr().unwrap().port();
        let pool = PortPool::new(port, port + 2, 0);
        assert_eq!(pool.take().unwrap(), port + 1);
        let full = PortPool::new(port, port + 1, 0);
        assert!(matches!(
            full.take(),
            Err(RealClusterError::NoFreePort { .. })
        ));
    }

    #[test]
    fn an_exited_program_s_error_shows_the_end_of_its_log() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("machineset.log");
        let text: Vec<String> = (1..=30).map(|n| format!("line {n}")).collect();
        std::fs::write(&log, text.join("\n")).unwrap();
        let tail = log_tail(&log);
        assert!(tail.starts_with("line 11\n"), "{tail}");
        assert!(tail.ends_with("line 30"), "{tail}");
        assert_eq!(log_tail(&dir.path().join("absent.log")), "");
    }
}
