//! The machine-api round trip on the real control plane (`sandbox::real_cluster`): a real
//! kube-apiserver, etcd and kube-controller-manager, the machine-api-operator's own MachineSet
//! controller and webhooks, nodelink and machine-healthcheck, and our controller run as MAO runs
//! it, under the ServiceAccount and roles of `manifests/rbac/` (a permission it lacks fails
//! here). Kubelets and WMCO (the node agent), the cluster-machine-approver (not served by the Go
//! module proxy) and Prism Central stay simulated, as clients of the real API server.
//!
//! Needs `REAL_CLUSTER_DIR` (what `hack/real-cluster/build.sh` prints): skipped with a message
//! without it, and failed without it when `REAL_CLUSTER_REQUIRED` is set (CI sets both).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Secret};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use nutanix_machine_controller::api::{Machine, MachineSet};
use nutanix_machine_controller::plan::vm::secret::generated_password_secret;
use prism_mock::{MockConfig, MockPrism, Timings};
use sandbox::approver::{self, ApproverConfig};
use sandbox::manifests;
use sandbox::node_agent::{self, JoinBehaviour, KubeletIdentities, NodeAgentConfig};
use sandbox::real_cluster::{self, ControlPlane};
use sandbox::world::{
    self, ControllerCommand, ControllerIntervals, ControllerLaunch, ControllerProcess,
};
use serde_json::json;

use crate::support::{TIMEOUT, real_control_plane};

const NAMESPACE: &str = sandbox::MACHINE_API_NAMESPACE;
const SERVICE_ACCOUNT: &str = "nutanix-machine-controller";

fn work_dir(test: &str) -> (PathBuf, Option<tempfile::TempDir>) {
    match std::env::var_os("E2E_WORK_DIR") {
        Some(dir) => {
            let dir = PathBuf::from(dir).join(test);
            let _ = std::fs::remove_dir_all(&dir);
            (dir, None)
        }
        None => {
            let temp = tempfile::tempdir().expect("a temporary directory");
            (temp.path().to_owned(), Some(temp))
        }
    }
}

pub(crate) fn kubectl(plane: &ControlPlane, args: &[&str]) -> String {
    let program = plane.binaries().program("kubectl").expect("kubectl built");
    let output = std::process::Command::new(program)
        .arg("--kubeconfig")
        .arg(plane.admin_kubeconfig())
        .args(args)
        .output()
        .expect("kubectl runs");
    assert!(
        output.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub(crate) fn repository(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

pub(crate) async fn scale(client: &Client, set: &str, replicas: i32) {
    let sets: Api<MachineSet> = Api::namespaced(client.clone(), NAMESPACE);
    sets.patch(
        set,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": replicas}})),
    )
    .await
    .unwrap_or_else(|e| panic!("scale {set} to {replicas}: {e}"));
}

fn set_of(machine: &Machine) -> Option<&str> {
    machine
        .labels()
        .get(manifests::MACHINE_SET_LABEL)
        .map(String::as_str)
}

/// What a Running, linked Machine of ours has.
pub(crate) fn running_and_linked(machine: &Machine) -> bool {
    let status = machine.status.as_ref();
    status.and_then(|s| s.phase.as_deref()) == Some("Running")
        && status.is_some_and(|s| s.node_ref.is_some())
        && machine
            .spec
            .provider_id
            .as_deref()
            .is_some_and(|p| p.starts_with("nutanix://"))
}

/// Everything one test runs: prism-mock, the real control plane, our controller under its
/// ServiceAccount, and the simulated kubelets/WMCO and approver. Dropping it stops every process.
pub(crate) struct RealWorld {
    pub(crate) mock: prism_mock::RunningMock,
    pub(crate) plane: ControlPlane,
    pub(crate) admin: Client,
    pub(crate) provider: RunningProvider,
    agent: node_agent::NodeAgentHandle,
    approver: approver::ApproverHandle,
    pub(crate) seed_vms: usize,
    /// Ours runs with this kubeconfig (its ServiceAccount's token); the Go provider with the
    /// administrator's.
    pub(crate) controller_kubeconfig: PathBuf,
    _temp: Option<tempfile::TempDir>,
}

/// Which machine-api provider the world runs.
pub(crate) enum Provider {
    /// Ours, this package's `e2e-controller`.
    Ours,
    /// openshift/machine-api-provider-nutanix's `cmd/manager`, built by whoever runs the test.
    Go(PathBuf),
}

/// The provider's process.
pub(crate) struct RunningProvider {
    pub(crate) launch: Box<ControllerLaunch>,
    pub(crate) process: ControllerProcess,
    /// Stopped on purpose ([`Self::kill`]): its exit is no failure.
    stopped: bool,
}

impl RunningProvider {
    /// The log file, when the process has exited without being stopped.
    fn exited(&mut self) -> Option<&Path> {
        if self.stopped {
            return None;
        }
        self.process
            .exited()
            .map(|_| self.launch.log_file.as_path())
    }

    pub(crate) async fn kill(&mut self) {
        self.process.kill().await.unwrap();
        self.stopped = true;
    }

    /// Starts the provider again (the `start_number`th time), as a new pod would.
    pub(crate) fn restart(&mut self, start_number: u32) {
        self.process =
            ControllerProcess::start(&self.launch, start_number).expect("the provider starts");
        self.stopped = false;
    }
}

impl RealWorld {
    /// `None` (the test skipped) when the real control plane is not built.
    pub(crate) async fn start(test: &str, node_agent: NodeAgentConfig) -> Option<Self> {
        Self::start_with(test, node_agent, Provider::Ours).await
    }

    pub(crate) async fn start_with(
        test: &str,
        node_agent: NodeAgentConfig,
        provider: Provider,
    ) -> Option<Self> {
        let binaries = real_control_plane()?;
        let (dir, temp) = work_dir(test);
        std::fs::create_dir_all(&dir).unwrap();

        let mock = MockPrism::start(MockConfig {
            timings: Timings::for_tests(),
            ..MockConfig::default()
        })
        .await
        .expect("prism-mock starts");
        let seed_vms = mock.admin().vms().len();
        let prism_ca_file = dir.join("prism-ca.pem");
        std::fs::write(&prism_ca_file, mock.ca_pem().unwrap_or_default()).unwrap();

        let plane = ControlPlane::start(
            binaries,
            &dir.join("control-plane"),
            NAMESPACE,
            manifests::INFRASTRUCTURE_ID,
            mock.addr().port(),
        )
        .await
        .expect("the real control plane starts");
        let admin = plane.admin_client().await.unwrap();

        // The controller's identity and permissions exactly as shipped.
        let rbac = repository("manifests/rbac");
        kubectl(&plane, &["apply", "-k", rbac.to_str().unwrap()]);
        let controller_kubeconfig = dir.join("kubeconfig-controller");
        plane
            .write_service_account_kubeconfig(SERVICE_ACCOUNT, &controller_kubeconfig)
            .await
            .expect("a token for the controller's ServiceAccount");

        world::write_secrets(&admin, NAMESPACE, &mock)
            .await
            .expect("Secrets");
        for mut object in manifests::objects(&manifests::EXAMPLES).unwrap() {
            if object["kind"] != "MachineSet" {
                continue;
            }
            object["spec"]["replicas"] = json!(0);
            real_cluster::create(&admin, object)
                .await
                .expect("an example MachineSet is created");
        }

        // Ours as the machine-api-operator runs it, with the ServiceAccount's token; the Go
        // provider with MAO's flags for it, as the administrator (its roles are not in
        // manifests/).
        let command = match provider {
            Provider::Ours => ControllerCommand::binary(env!("CARGO_BIN_EXE_e2e-controller")),
            Provider::Go(program) => ControllerCommand::go_provider(program),
        };
        let kubeconfig = match command.provider {
            world::Provider::Ours => controller_kubeconfig.clone(),
            world::Provider::Go => plane.admin_kubeconfig().to_owned(),
        };
        let launch = ControllerLaunch {
            command,
            kubeconfig,
            prism_ca_file,
            namespace: NAMESPACE.to_owned(),
            intervals: ControllerIntervals::tests(),
            excluded_cidrs: Vec::new(),
            verbosity: 4,
            extra_args: Vec::new(),
            log_file: dir.join("controller.log"),
        };
        let process = ControllerProcess::start(&launch, 1).expect("the provider starts");
        let provider = RunningProvider {
            launch: Box::new(launch),
            process,
            stopped: false,
        };
        let agent = node_agent::start(
            admin.clone(),
            mock.admin().clone(),
            NodeAgentConfig {
                namespace: NAMESPACE.to_owned(),
                identities: KubeletIdentities::of_real_cluster(&plane)
                    .await
                    .expect("the kubelets' bootstrap token"),
                ..node_agent
            },
        );
        let approver = approver::start(
            admin.clone(),
            ApproverConfig {
                namespace: NAMESPACE.to_owned(),
                ..ApproverConfig::default()
            },
        );
        Some(Self {
            mock,
            plane,
            admin,
            provider,
            agent,
            approver,
            seed_vms,
            controller_kubeconfig,
            _temp: temp,
        })
    }

    /// Stops the running provider and starts `provider` in its place (its log beside the
    /// first's, named by `label`), as a switch of the machine-api-operator's image does.
    pub(crate) async fn switch_to(&mut self, provider: Provider, label: &str) {
        self.provider.kill().await;
        let mut launch = (*self.provider.launch).clone();
        (launch.command, launch.kubeconfig) = match provider {
            Provider::Ours => (
                ControllerCommand::binary(env!("CARGO_BIN_EXE_e2e-controller")),
                self.controller_kubeconfig.clone(),
            ),
            Provider::Go(program) => (
                ControllerCommand::go_provider(program),
                self.plane.admin_kubeconfig().to_owned(),
            ),
        };
        launch.log_file = launch
            .log_file
            .with_file_name(format!("controller-{label}.log"));
        *self.provider.launch = launch;
        self.provider.restart(1);
    }

    pub(crate) fn machines(&self) -> Api<Machine> {
        Api::namespaced(self.admin.clone(), NAMESPACE)
    }

    /// Polls `probe` until it gives a value; fails when a process of the control plane or the
    /// controller has exited, or after twice the e2e timeout.
    pub(crate) async fn wait_for<T>(
        &mut self,
        what: &str,
        mut probe: impl AsyncFnMut(&Self) -> Option<T>,
    ) -> T {
        let deadline = Instant::now() + TIMEOUT * 2;
        loop {
            if let Some(value) = probe(self).await {
                return value;
            }
            self.plane
                .check_running()
                .expect("the control plane is running");
            if let Some(log) = self.provider.exited() {
                panic!("the provider exited: {}", log.display());
            }
            assert!(
                Instant::now() < deadline,
                "{what}: not within {:?}; logs in {}",
                TIMEOUT * 2,
                self.plane.dir().display()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Every set scaled to 0; waits until no Machine and no VM of ours is left.
    pub(crate) async fn scale_all_to_zero(&mut self) {
        for set in manifests::MACHINE_SETS {
            scale(&self.admin, set, 0).await;
        }
        self.wait_until_all_gone().await;
    }

    /// Waits until no Machine and no VM but prism-mock's seed is left.
    pub(crate) async fn wait_until_all_gone(&mut self) {
        self.wait_for("no Machine and no VM left", async |world| {
            let list = world.machines().list(&ListParams::default()).await.ok()?;
            (list.items.is_empty() && world.mock.admin().vms().len() == world.seed_vms)
                .then_some(())
        })
        .await;
    }

    pub(crate) async fn stop(mut self) {
        self.approver.stop().await;
        self.agent.stop().await;
        self.provider.kill().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn machine_sets_scale_through_the_real_machine_api_operator_and_api_server() {
    let Some(mut world) = RealWorld::start("real_cluster", NodeAgentConfig::default()).await else {
        return;
    };
    let admin = world.admin.clone();
    let raw_sets: Api<kube::api::DynamicObject> = Api::namespaced_with(
        admin.clone(),
        NAMESPACE,
        &kube::api::ApiResource::erase::<MachineSet>(&()),
    );

    // MAO's defaulting webhook ran: a MachineSet naming no user data or credentials Secret gets
    // `worker-user-data` and `nutanix-credentials` (machine_webhook.go, defaultNutanix).
    let mut probe = manifests::example("MachineSet", manifests::LINUX_SET).unwrap();
    probe["metadata"]["name"] = json!("webhook-probe");
    probe["spec"]["replicas"] = json!(0);
    let spec = &mut probe["spec"]["template"]["spec"]["providerSpec"]["value"];
    spec.as_object_mut().unwrap().remove("userDataSecret");
    spec.as_object_mut().unwrap().remove("credentialsSecret");
    let stored = real_cluster::create(&admin, probe).await.unwrap();
    let value = &stored["spec"]["template"]["spec"]["providerSpec"]["value"];
    assert_eq!(
        value["userDataSecret"]["name"], "worker-user-data",
        "{value}"
    );
    assert_eq!(
        value["credentialsSecret"]["name"], "nutanix-credentials",
        "{value}"
    );
    // ... and its validating webhook: a Nutanix providerSpec without subnets is refused
    // (machine_webhook.go, validateNutanix: "missing subnets").
    let mut invalid = manifests::example("MachineSet", manifests::LINUX_SET).unwrap();
    invalid["metadata"]["name"] = json!("webhook-refused");
    invalid["spec"]["template"]["spec"]["providerSpec"]["value"]
        .as_object_mut()
        .unwrap()
        .remove("subnets");
    let refused = raw_sets
        .create(
            &PostParams::default(),
            &serde_json::from_value(invalid).unwrap(),
        )
        .await;
    match refused {
        Err(kube::Error::Api(status)) => assert!(
            status.message.contains("missing subnets"),
            "refused for another reason: {}",
            status.message
        ),
        other => panic!("a MachineSet without subnets was accepted: {other:?}"),
    }

    // Linux, Windows from an image (cloud-init) and Windows from a template with Sysprep (its
    // choices carried by template annotations through MAO's webhook).
    scale(&admin, manifests::LINUX_SET, 2).await;
    scale(&admin, manifests::WINDOWS_IMAGE_SET, 1).await;
    scale(&admin, manifests::WINDOWS_TEMPLATE_SET, 1).await;
    let running = world
        .wait_for(
            "4 Machines Running and linked to their Nodes",
            async |world| {
                let list = world.machines().list(&ListParams::default()).await.ok()?;
                let linked: Vec<Machine> =
                    list.items.into_iter().filter(running_and_linked).collect();
                (linked.len() == 4).then_some(linked)
            },
        )
        .await;

    // Who made what: the Machines are the real MachineSet controller's (owner reference to
    // their set), their VMs ours, the Node link nodelink's.
    let nodes: Api<Node> = Api::all(admin.clone());
    for machine in &running {
        let set = set_of(machine).expect("a MachineSet label");
        let owner = machine.owner_references().first().expect("an owner");
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("MachineSet", set)
        );
        let node_name = &machine
            .status
            .as_ref()
            .unwrap()
            .node_ref
            .as_ref()
            .unwrap()
            .name;
        let node = nodes.get(node_name.as_deref().unwrap()).await.unwrap();
        assert_eq!(
            node.spec.as_ref().and_then(|s| s.provider_id.as_deref()),
            machine.spec.provider_id.as_deref(),
            "the Node of {} has its VM's providerID",
            machine.name_any()
        );
        // The Sysprep Machine's generated Administrator password: created by our controller under
        // its ServiceAccount, which the admission policy of manifests/rbac/admission/ lets create
        // this Secret and no other.
        if set == manifests::WINDOWS_TEMPLATE_SET {
            let secrets: Api<Secret> = Api::namespaced(admin.clone(), NAMESPACE);
            let password = secrets
                .get(&generated_password_secret(&machine.name_any()))
                .await
                .expect("the generated password's Secret");
            assert_eq!(
                password.owner_references().first().map(|o| &o.uid),
                machine.uid().as_ref()
            );
        }
        // nodelink's annotation on the Node (nodelink_controller.go, machineAnnotationKey).
        assert_eq!(
            node.annotations()
                .get("machine.openshift.io/machine")
                .map(String::as_str),
            Some(format!("{NAMESPACE}/{}", machine.name_any()).as_str())
        );
    }
    assert_eq!(
        world.mock.admin().vms().len(),
        world.seed_vms + 4,
        "one VM per Machine"
    );

    // The round trip back: every Machine deleted by the MachineSet controller, every VM by us.
    world.scale_all_to_zero().await;
    let sets: Api<MachineSet> = Api::namespaced(admin.clone(), NAMESPACE);
    let stored = sets.get(manifests::LINUX_SET).await.unwrap();
    assert_eq!(stored.status.map(|s| s.replicas), Some(0));
    world.stop().await;
}

/// The real machine-healthcheck remediates a Windows Machine whose Node never comes: after the
/// MHC's `nodeStartupTimeout` without a Node (counted from the Machine's `status.lastUpdated`,
/// machinehealthcheck_controller.go `needsRemediation`) it deletes the Machine; our controller
/// deletes its VM, the MachineSet controller makes a replacement, and nothing is left after 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_real_machine_health_check_replaces_a_windows_machine_that_never_joins() {
    let never = JoinBehaviour {
        delay: Duration::from_secs(24 * 3600),
        ..JoinBehaviour::default()
    };
    let agent = NodeAgentConfig {
        overrides: vec![(format!("{}-", manifests::WINDOWS_IMAGE_SET), never)],
        ..NodeAgentConfig::default()
    };
    let Some(mut world) = RealWorld::start("real_cluster_mhc", agent).await else {
        return;
    };
    real_cluster::create(
        &world.admin,
        json!({
            "apiVersion": "machine.openshift.io/v1beta1", "kind": "MachineHealthCheck",
            "metadata": {"name": "windows-startup", "namespace": NAMESPACE},
            "spec": {
                "selector": {"matchLabels": {manifests::MACHINE_SET_LABEL: manifests::WINDOWS_IMAGE_SET}},
                "nodeStartupTimeout": "15s",
                "maxUnhealthy": "100%",
                "unhealthyConditions": [
                    {"type": "Ready", "status": "Unknown", "timeout": "300s"},
                    {"type": "Ready", "status": "False", "timeout": "300s"},
                ],
            },
        }),
    )
    .await
    .expect("the MachineHealthCheck is created");
    scale(&world.admin, manifests::WINDOWS_IMAGE_SET, 1).await;

    let (first, first_vm) = world
        .wait_for("a Windows Machine with its VM", async |world| {
            let list = world.machines().list(&ListParams::default()).await.ok()?;
            let machine = list.items.into_iter().next()?;
            let vm = machine
                .spec
                .provider_id
                .as_deref()?
                .strip_prefix("nutanix://")?
                .to_owned();
            Some((machine.name_any(), vm))
        })
        .await;
    let replacement = world
        .wait_for(
            "the unjoined Machine replaced and its VM deleted",
            async |world| {
                let list = world.machines().list(&ListParams::default()).await.ok()?;
                let vm_left = world
                    .mock
                    .admin()
                    .vms()
                    .iter()
                    .any(|vm| vm.uuid == first_vm);
                let others: Vec<String> = list
                    .items
                    .iter()
                    .map(ResourceExt::name_any)
                    .filter(|name| *name != first)
                    .collect();
                (!vm_left
                    && !list.items.iter().any(|m| m.name_any() == first)
                    && !others.is_empty())
                .then_some(others)
            },
        )
        .await;
    assert_eq!(replacement.len(), 1, "one replacement: {replacement:?}");
    world.scale_all_to_zero().await;
    world.stop().await;
}

/// The Go provider we replace, on the same real control plane, prism-mock and MachineSets: its
/// Prism client (prism-go-client) is then a client of prism-mock, and every call it makes must be
/// answered as Prism Central answers. Needs `GO_PROVIDER_BIN`, a `cmd/manager` built from
/// openshift/machine-api-provider-nutanix (the Go module proxy does not serve that module, so no
/// script of ours builds it: hack/real-cluster/README.md); skipped with a message without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_go_provider_runs_on_the_same_control_plane_and_mock() {
    let Some(program) = std::env::var_os("GO_PROVIDER_BIN") else {
        eprintln!("skipped: GO_PROVIDER_BIN is not set");
        return;
    };
    side_by_side_round_trip(
        "real_cluster_go_provider",
        Provider::Go(PathBuf::from(program)),
    )
    .await;
}

/// Ours on exactly the Go provider's workload, for the side-by-side figures it prints.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ours_runs_the_go_providers_round_trip() {
    side_by_side_round_trip("real_cluster_ours_round_trip", Provider::Ours).await;
}

/// Two Linux and one Windows-image Machine up, then 0; every Prism call answered as Prism
/// answers it; prints the provider's Prism calls per Machine and the time each phase took.
async fn side_by_side_round_trip(test: &str, provider: Provider) {
    let Some(mut world) = RealWorld::start_with(test, NodeAgentConfig::default(), provider).await
    else {
        return;
    };
    let started = Instant::now();
    scale(&world.admin, manifests::LINUX_SET, 2).await;
    scale(&world.admin, manifests::WINDOWS_IMAGE_SET, 1).await;
    world
        .wait_for("3 Machines Running and linked", async |world| {
            let list = world.machines().list(&ListParams::default()).await.ok()?;
            let linked = list.items.iter().filter(|m| running_and_linked(m)).count();
            (linked == 3).then_some(())
        })
        .await;
    let up = started.elapsed();
    let calls_up = world.mock.admin().request_count();
    let started = Instant::now();
    world.scale_all_to_zero().await;
    eprintln!(
        "{test}: 0 -> 3 in {:.1} s with {:.2} Prism calls per Machine; 3 -> 0 in {:.1} s with {:.2}",
        up.as_secs_f64(),
        calls_up as f64 / 3.0,
        started.elapsed().as_secs_f64(),
        (world.mock.admin().request_count() - calls_up) as f64 / 3.0,
    );
    // A VM's GET or DELETE answers 404 once its deletion was accepted: Prism's own answer for a
    // VM that is gone (prism-go-client v3/swagger.json, `/vms/{uuid}` 404), which the Go provider
    // reads to know its deletion ended. Anything else refused is a call the mock got wrong.
    let mut deleted = std::collections::BTreeSet::new();
    let mut refused = Vec::new();
    for request in world.mock.admin().requests_since(0) {
        let gone =
            request.status == 404 && request.vm.as_ref().is_some_and(|vm| deleted.contains(vm));
        if request.method == "DELETE" && request.status < 400 {
            deleted.extend(request.vm.clone());
        }
        if request.status >= 400 && !gone {
            refused.push(format!(
                "{} {} -> {}",
                request.method, request.endpoint, request.status
            ));
        }
    }
    assert!(
        refused.is_empty(),
        "prism-mock refused calls of the Go provider: {refused:#?}"
    );
    world.stop().await;
}

/// MAO's machine contract on the real control plane (`pkg/controller/machine`): the etcd quorum
/// guard's pre-drain hook holds a drain and `Drainable` says so (`setLifecycleHookConditions`),
/// and two control-plane Nodes are never drained at once (`drain_controller.go`,
/// `isDrainAllowed`). The first Node's drain is held by a PodDisruptionBudget the real
/// kube-controller-manager computes (its pod has no kubelet to run it, so it is unhealthy and
/// the API server's eviction refuses it while the budget is unmet).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn control_plane_machines_drain_one_at_a_time_and_the_etcd_hook_holds_a_drain() {
    let Some(mut world) = RealWorld::start("drain_contract", NodeAgentConfig::default()).await
    else {
        return;
    };
    let admin = world.admin.clone();
    scale(&admin, manifests::LINUX_SET, 2).await;
    let names: Vec<String> = world
        .wait_for("2 Machines Running and linked", async |world| {
            let list = world.machines().list(&ListParams::default()).await.ok()?;
            let linked: Vec<String> = list
                .items
                .iter()
                .filter(|m| running_and_linked(m))
                .map(ResourceExt::name_any)
                .collect();
            (linked.len() == 2).then_some(linked)
        })
        .await;
    let (first, second) = (names[0].clone(), names[1].clone());
    let nodes: Api<Node> = Api::all(admin.clone());
    let machines = world.machines();
    // Both control plane (the installer's role label on their Nodes); the etcd operator's hook
    // on the second (cluster-etcd-operator `pkg/operator/ceohelpers`).
    for name in [&first, &second] {
        nodes
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"metadata": {"labels": {"node-role.kubernetes.io/master": ""}}}),
                ),
            )
            .await
            .unwrap();
    }
    machines
        .patch(
            &second,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"lifecycleHooks": {"preDrain": [
                {"name": "EtcdQuorumOperator", "owner": "clusteroperator/etcd"}]}}})),
        )
        .await
        .unwrap();
    // A pod on the first Node, guarded by a budget it cannot meet.
    real_cluster::create(
        &admin,
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "guarded", "namespace": "default", "labels": {"app": "guarded"}},
               "spec": {"nodeName": first, "containers": [{"name": "c", "image": "registry.example.com/app:1"}]}}),
    )
    .await
    .unwrap();
    real_cluster::create(
        &admin,
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
               "metadata": {"name": "guarded", "namespace": "default"},
               "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}}),
    )
    .await
    .unwrap();
    // Running and Ready, as its kubelet would report it: a Pending pod is evicted whatever its
    // budget (kubernetes `pkg/registry/core/pod/storage/eviction.go`, `canIgnorePDB`).
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(admin.clone(), "default");
    pods.patch_status(
        "guarded",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}]}})),
    )
    .await
    .unwrap();
    let budgets: Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> =
        Api::namespaced(admin.clone(), "default");
    world
        .wait_for("the budget computed: no disruption allowed", async |_| {
            let status = budgets.get("guarded").await.ok()?.status?;
            (status.current_healthy == 1 && status.disruptions_allowed == 0).then_some(())
        })
        .await;

    let condition = |machine: &Machine, type_: &str| {
        machine
            .status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == type_).cloned())
    };
    world
        .wait_for(
            "Drainable=False, HookPresent on the hooked Machine",
            async |world| {
                let machine = world.machines().get(&second).await.ok()?;
                condition(&machine, "Drainable")
                    .filter(|c| c.status == "False" && c.reason.as_deref() == Some("HookPresent"))
                    .map(|_| ())
            },
        )
        .await;

    // Both deleted at once, as a scale-down to 0 deletes them.
    scale(&admin, manifests::LINUX_SET, 0).await;
    let cordoned = async |name: &str| {
        nodes
            .get(name)
            .await
            .ok()
            .and_then(|n| n.spec?.unschedulable)
            .unwrap_or(false)
    };
    world
        .wait_for(
            "the first drain under way, held by the budget",
            async |_| cordoned(&first).await.then_some(()),
        )
        .await;
    // The hook holds the second's drain: not cordoned.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!cordoned(&second).await, "the etcd hook holds the drain");
    // The hook gone, the second may drain only once the first's drain has ended.
    machines
        .patch(
            &second,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"lifecycleHooks": {"preDrain": null}}})),
        )
        .await
        .unwrap();
    world
        .wait_for(
            "the second's drain refused while the first drains",
            async |world| {
                let machine = world.machines().get(&second).await.ok()?;
                condition(&machine, "Drained")
                    .filter(|c| c.status == "False" && c.reason.as_deref() == Some("DrainError"))
                    .map(|_| ())
            },
        )
        .await;
    assert!(cordoned(&first).await);
    assert!(!cordoned(&second).await, "one control-plane Node at a time");

    // The budget gone: both drains end and both Machines go, with their VMs.
    let budgets: Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> =
        Api::namespaced(admin.clone(), "default");
    budgets
        .delete("guarded", &Default::default())
        .await
        .unwrap();
    scale(&admin, manifests::LINUX_SET, 0).await;
    world.wait_until_all_gone().await;
    world.stop().await;
}

/// A Machine whose VM holds a Nutanix CSI volume group (attached to the VM itself, as CSI 3.x
/// attaches a PersistentVolume's) is scaled away on the real control plane: no VM is left, the
/// volume group is kept, detached.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_machine_whose_vm_holds_a_volume_group_is_deleted_and_the_group_kept() {
    let Some(mut world) = RealWorld::start("volume_group", NodeAgentConfig::default()).await else {
        return;
    };
    let admin = world.admin.clone();
    scale(&admin, manifests::LINUX_SET, 1).await;
    let vm = world
        .wait_for("a Machine Running and linked", async |world| {
            let list = world.machines().list(&ListParams::default()).await.ok()?;
            let machine = list.items.into_iter().find(running_and_linked)?;
            machine.provider_status().ok()?.vm_uuid
        })
        .await;
    let group = world
        .mock
        .admin()
        .create_volume_group("pvc-3f2a", std::slice::from_ref(&vm))
        .expect("a volume group attached to the VM");
    scale(&admin, manifests::LINUX_SET, 0).await;
    world.wait_until_all_gone().await;
    let kept = world
        .mock
        .admin()
        .volume_group(&group)
        .expect("the volume group kept");
    assert!(kept.attached_vms.is_empty(), "{kept:?}");
    world.stop().await;
}
