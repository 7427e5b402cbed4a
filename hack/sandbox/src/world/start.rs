//! The world's start: prism-mock, the chosen control plane and what it is seeded with, the
//! actors, the controller's replicas and the history's observer.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use prism_mock::{MockConfig, MockPrism};

use super::cluster::{Cluster, ControlPlaneChoice, Objects};
use super::controller::{ControllerLaunch, Provider};
use super::history::History;
use super::observe::{Observed, Sources, observe};
use super::options::WorldOptions;
use super::replicas::Replicas;
use super::seed::{apply_examples, write_secrets};
use super::sim::start_kube_sim;
use super::{AbortOnDrop, World, WorldError, api_paths, io_error, openshift};
use crate::approver::{self, ApproverConfig};
use crate::autoscaler::Autoscaler;
use crate::cluster_objects;
use crate::machine_autoscaler;
use crate::machineset::{self, MachineSetControllerConfig};
use crate::manifests;
use crate::node_agent::{self, NodeAgentConfig};
use crate::nodelink::{self, NodeLinkConfig};
use crate::writes::ADMINISTRATOR_USER;

impl World {
    /// Starts everything, applies the CRDs, the cluster's objects, the Secrets and the
    /// examples (MachineSets at 0 replicas), plays the cluster-autoscaler-operator for the
    /// MachineAutoscaler, then starts the actors and the controller.
    pub async fn start(options: WorldOptions) -> Result<Self, WorldError> {
        let (work_dir, temp_dir) = match &options.work_dir {
            Some(dir) => {
                std::fs::create_dir_all(dir)
                    .map_err(io_error(format!("create {}", dir.display())))?;
                (dir.clone(), None)
            }
            None => {
                let temp = tempfile::Builder::new()
                    .prefix("sandbox-")
                    .tempdir()
                    .map_err(io_error("create a temporary directory"))?;
                (temp.path().to_path_buf(), Some(temp))
            }
        };

        let mut mock_config = MockConfig {
            timings: options.mock_timings.clone(),
            guest: options.guest_behaviour.clone(),
            rng_seed: options.mock_rng_seed,
            seed: options.mock_seed.clone(),
            ..MockConfig::default()
        };
        if let Some(password) = &options.prism_password {
            mock_config.credentials.password = password.clone();
        }
        let mock = MockPrism::start(mock_config).await?;
        let seed_vms = mock.admin().vms().into_iter().map(|vm| vm.uuid).collect();
        let prism_ca_file = work_dir.join("prism-ca.pem");
        std::fs::write(&prism_ca_file, mock.ca_pem().unwrap_or_default())
            .map_err(io_error(format!("write {}", prism_ca_file.display())))?;

        let kubeconfig = work_dir.join("kubeconfig");
        let controller_kubeconfig = work_dir.join("kubeconfig-controller");
        let namespace = options.namespace.clone();
        let (cluster, client) = match &options.control_plane {
            ControlPlaneChoice::KubeSim => {
                let sim = start_kube_sim(&options, &kubeconfig, &controller_kubeconfig).await?;
                let cluster = Cluster::Sim(sim);
                let client = cluster.actor_client("sandbox").await?;
                // The real control plane applies the same objects, as its administrator, while
                // it starts, before the machine-api-operator's webhooks, which read them at
                // start (`real_cluster`).
                cluster_objects::apply_all(
                    &cluster.actor_client(ADMINISTRATOR_USER).await?,
                    &cluster_objects::openshift_on_nutanix(
                        &namespace,
                        manifests::INFRASTRUCTURE_ID,
                        mock.addr().port(),
                    ),
                )
                .await?;
                (cluster, client)
            }
            ControlPlaneChoice::Real(binaries) => {
                Cluster::start_real(
                    binaries.clone(),
                    &work_dir,
                    &namespace,
                    manifests::INFRASTRUCTURE_ID,
                    mock.addr().port(),
                    &kubeconfig,
                    &controller_kubeconfig,
                )
                .await?
            }
        };
        if options.controller.provider == Provider::Go {
            // The Go provider's roles are not in `manifests/`: it runs as the administrator.
            std::fs::copy(&kubeconfig, &controller_kubeconfig).map_err(io_error(format!(
                "write {}",
                controller_kubeconfig.display()
            )))?;
        }
        write_secrets(&client, &options.namespace, &mock).await?;
        openshift::write_cloud_private_key(&client).await?;
        apply_examples(&client, &options.namespace).await?;
        machine_autoscaler::apply_machine_autoscalers(&client, &options.namespace).await?;

        // On the real control plane the machine-api-operator's own MachineSet controller and
        // nodelink run (`real_cluster`); their stand-ins only on kube-sim.
        let actors = match &cluster {
            Cluster::Sim(_) => vec![
                machineset::start(
                    cluster.actor_client("machineset-controller").await?,
                    MachineSetControllerConfig {
                        namespace: namespace.clone(),
                        ..MachineSetControllerConfig::default()
                    },
                ),
                nodelink::start(
                    cluster.actor_client("nodelink").await?,
                    NodeLinkConfig {
                        namespace: namespace.clone(),
                        ..NodeLinkConfig::default()
                    },
                ),
            ],
            Cluster::Real(_) => Vec::new(),
        };
        // The pool's IPAM controller: stood in for on either control plane (nothing of it is
        // built here).
        let mut actors = actors;
        actors.push(crate::ipam::start(
            cluster.actor_client("ipam").await?,
            crate::ipam::IpamConfig {
                namespace: namespace.clone(),
                ..crate::ipam::IpamConfig::default()
            },
        ));
        let approver = approver::start(
            cluster.actor_client("approver").await?,
            ApproverConfig {
                namespace: namespace.clone(),
                ..ApproverConfig::default()
            },
        );
        let agent = Arc::new(node_agent::start(
            cluster.actor_client("node-agent").await?,
            mock.admin().clone(),
            NodeAgentConfig {
                namespace: namespace.clone(),
                identities: cluster.kubelet_identities().await?,
                ..options.node_agent.clone()
            },
        ));
        let autoscaler = Autoscaler::new(cluster.actor_client("autoscaler").await?, &namespace);
        let objects = match &cluster {
            Cluster::Sim(sim) => Objects::Store(sim.store().clone()),
            Cluster::Real(_) => Objects::watch(&client, &namespace).await?,
        };

        let launch = ControllerLaunch {
            command: options.controller.clone(),
            kubeconfig: controller_kubeconfig,
            prism_ca_file,
            namespace,
            intervals: options.intervals,
            // Read from the cluster's Network objects (create_networks), as on OpenShift, where
            // the machine-api-operator passes no such flag.
            excluded_cidrs: Vec::new(),
            verbosity: options.controller_verbosity,
            extra_args: options.controller_args.clone(),
            log_file: work_dir.join("controller.log"),
        };
        let mut replicas = Replicas::new(&launch, options.controller_replicas);
        let mut api_proxies = Vec::new();
        if options.controller_api_proxies && matches!(cluster, Cluster::Real(_)) {
            let paths =
                api_paths::start(&cluster.url(), &launch.kubeconfig, replicas.replicas.len())
                    .await?;
            for (replica, (proxy, kubeconfig)) in replicas.replicas.iter_mut().zip(paths) {
                replica.launch.kubeconfig = kubeconfig;
                api_proxies.push(proxy);
            }
        }
        for index in 0..replicas.replicas.len() {
            replicas.start(index, None).await?;
        }

        let sources = Arc::new(Sources {
            objects,
            admin: mock.admin().clone(),
            agent,
            seed_vms,
            started: Instant::now(),
        });
        let observed = Arc::new(Mutex::new(Observed {
            history: History::default(),
            label: "starting".to_owned(),
            last_line: String::new(),
            last_print: None,
        }));
        let observer = {
            let (sources, observed) = (sources.clone(), observed.clone());
            let every = options.observe_every;
            AbortOnDrop(tokio::spawn(async move {
                loop {
                    observe(&sources, &observed);
                    tokio::time::sleep(every).await;
                }
            }))
        };
        Ok(Self {
            options,
            work_dir,
            temp_dir,
            mock,
            cluster,
            client,
            sources,
            observed,
            observer,
            actors,
            approver,
            autoscaler,
            launch,
            api_proxies,
            controller: tokio::sync::Mutex::new(replicas),
        })
    }
}
