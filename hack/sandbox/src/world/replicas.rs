//! The controller's replicas as processes: one by default; several (each with its own `POD_NAME`,
//! hence its own leader-election identity `<POD_NAME>_<uuid>`, and its own log) when the world
//! runs them with leader election, as a Deployment of two replicas would. Each can be killed and
//! started again on its own.

use std::path::PathBuf;
use std::time::SystemTime;

use super::{ControllerIntervals, ControllerLaunch, ControllerProcess, World, WorldError};

/// One replica: how it starts and its process now.
#[derive(Debug)]
pub(super) struct Replica {
    pub(super) launch: ControllerLaunch,
    /// `POD_NAME`: fixed per replica when there are several (a pod keeps its name across
    /// container restarts); `None` names it after the start number, as a single replica always
    /// was.
    pub(super) pod_name: Option<String>,
    pub(super) process: Option<ControllerProcess>,
    /// When the running process was started (wall clock: the Lease's).
    pub(super) started: Option<SystemTime>,
}

/// Every replica, and how many starts there were in all.
#[derive(Debug)]
pub(super) struct Replicas {
    pub(super) replicas: Vec<Replica>,
    pub(super) starts: u32,
}

impl Replicas {
    /// `count` replicas of `launch`: the first logs to the launch's log file, replica `i > 0` to
    /// `controller-<i>.log` beside it. Nothing is started yet.
    pub(super) fn new(launch: &ControllerLaunch, count: usize) -> Self {
        let replicas = (0..count.max(1))
            .map(|index| {
                let mut launch = launch.clone();
                if index > 0 {
                    launch.log_file = launch
                        .log_file
                        .with_file_name(format!("controller-{index}.log"));
                }
                Replica {
                    launch,
                    pod_name: (count > 1).then(|| replica_pod_name(index)),
                    process: None,
                    started: None,
                }
            })
            .collect();
        Self {
            replicas,
            starts: 0,
        }
    }

    /// Starts replica `index` (killing it first if it runs) with `launch`.
    pub(super) async fn start(
        &mut self,
        index: usize,
        launch: Option<&ControllerLaunch>,
    ) -> Result<(), WorldError> {
        self.kill(index).await?;
        self.starts += 1;
        let starts = self.starts;
        let replica = self.get(index)?;
        let launch = launch.unwrap_or(&replica.launch);
        let pod_name = replica
            .pod_name
            .clone()
            .unwrap_or_else(|| format!("sandbox-controller-{starts}"));
        replica.started = Some(SystemTime::now());
        replica.process = Some(
            ControllerProcess::start_as(launch, &pod_name, starts).map_err(|source| {
                WorldError::Io {
                    what: format!("start {}", launch.command.program.display()),
                    source,
                }
            })?,
        );
        Ok(())
    }

    /// Kills replica `index` (SIGKILL) if it runs.
    pub(super) async fn kill(&mut self, index: usize) -> Result<(), WorldError> {
        if let Some(mut process) = self.get(index)?.process.take() {
            process.kill().await.map_err(|source| WorldError::Io {
                what: format!("kill controller replica {index}"),
                source,
            })?;
        }
        Ok(())
    }

    fn get(&mut self, index: usize) -> Result<&mut Replica, WorldError> {
        let count = self.replicas.len();
        self.replicas
            .get_mut(index)
            .ok_or(WorldError::NoSuchReplica { index, count })
    }
}

/// The `POD_NAME` of replica `index` when several run.
pub fn replica_pod_name(index: usize) -> String {
    format!("nutanix-machine-controller-{index}")
}

impl World {
    /// Fails when a controller replica exited without being asked to (the first found; it is
    /// then counted as stopped), or a process of the real control plane did.
    pub(super) async fn check_controller(&self, what: &str) -> Result<(), WorldError> {
        self.cluster.check_running()?;
        let mut replicas = self.controller.lock().await;
        for (index, replica) in replicas.replicas.iter_mut().enumerate() {
            let Some(process) = replica.process.as_mut() else {
                continue;
            };
            let Some(status) = process.exited() else {
                continue;
            };
            let pid = process.pid;
            replica.process = None;
            let log = std::fs::read_to_string(&replica.launch.log_file).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            return Err(WorldError::ControllerExited {
                what: what.to_owned(),
                replica: index,
                pid,
                status: status.to_string(),
                code: status.code(),
                log_tail: lines[lines.len().saturating_sub(30)..].join("\n"),
            });
        }
        Ok(())
    }

    /// Kills every replica (SIGKILL: no clean-up, as a crash or an OOM kill would).
    pub async fn kill_controller(&self) -> Result<(), WorldError> {
        let mut replicas = self.controller.lock().await;
        for index in 0..replicas.replicas.len() {
            replicas.kill(index).await?;
        }
        Ok(())
    }

    /// Starts every replica again (killing running ones first).
    pub async fn restart_controller(&self) -> Result<(), WorldError> {
        let mut replicas = self.controller.lock().await;
        for index in 0..replicas.replicas.len() {
            replicas.start(index, None).await?;
        }
        Ok(())
    }

    /// Kills replica `index` (SIGKILL).
    pub async fn kill_replica(&self, index: usize) -> Result<(), WorldError> {
        self.controller.lock().await.kill(index).await
    }

    /// Starts replica `index` again (killing it first if it runs).
    pub async fn restart_replica(&self, index: usize) -> Result<(), WorldError> {
        self.controller.lock().await.start(index, None).await
    }

    /// Starts every replica again (killing running ones first) with other intervals and extra
    /// flags; a later [`World::restart_controller`] goes back to the flags of the options.
    pub async fn restart_controller_with(
        &self,
        intervals: ControllerIntervals,
        extra_args: Vec<String>,
    ) -> Result<(), WorldError> {
        let mut replicas = self.controller.lock().await;
        for index in 0..replicas.replicas.len() {
            let launch = ControllerLaunch {
                intervals,
                extra_args: extra_args.clone(),
                ..replicas.replicas[index].launch.clone()
            };
            replicas.start(index, Some(&launch)).await?;
        }
        Ok(())
    }

    /// How many times a controller process was started (all replicas).
    pub async fn controller_starts(&self) -> u32 {
        self.controller.lock().await.starts
    }

    /// The first replica's process id, while it runs.
    pub async fn controller_pid(&self) -> Option<u32> {
        self.controller.lock().await.replicas[0]
            .process
            .as_ref()
            .and_then(|p| p.pid)
    }

    /// Each replica's process id while it runs, in replica order.
    pub async fn replica_pids(&self) -> Vec<Option<u32>> {
        self.controller
            .lock()
            .await
            .replicas
            .iter()
            .map(|r| r.process.as_ref().and_then(|p| p.pid))
            .collect()
    }

    /// How many replicas the world runs.
    pub fn replica_count(&self) -> usize {
        self.options.controller_replicas.max(1)
    }

    /// Whether replica `index` has a process now (not killed, not exited).
    pub async fn replica_running(&self, index: usize) -> bool {
        self.controller
            .lock()
            .await
            .replicas
            .get(index)
            .is_some_and(|r| r.process.is_some())
    }

    /// When replica `index`'s running process was started; `None` while it has none.
    pub async fn replica_started(&self, index: usize) -> Option<SystemTime> {
        let replicas = self.controller.lock().await;
        let replica = replicas.replicas.get(index)?;
        replica.process.as_ref().and(replica.started)
    }

    /// Each replica's log file, in replica order.
    pub fn controller_log_files(&self) -> Vec<PathBuf> {
        (0..self.replica_count())
            .map(|index| {
                if index == 0 {
                    self.launch.log_file.clone()
                } else {
                    self.launch
                        .log_file
                        .with_file_name(format!("controller-{index}.log"))
                }
            })
            .collect()
    }

    /// Each replica's log so far: its file name and its text.
    pub fn controller_logs(&self) -> Vec<(String, String)> {
        self.controller_log_files()
            .into_iter()
            .map(|path| {
                let name = path.file_name().map_or_else(
                    || path.display().to_string(),
                    |n| n.to_string_lossy().into_owned(),
                );
                (name, std::fs::read_to_string(&path).unwrap_or_default())
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::world::ControllerCommand;

    fn launch() -> ControllerLaunch {
        ControllerLaunch {
            command: ControllerCommand::binary("/bin/controller"),
            kubeconfig: "/w/kubeconfig-controller".into(),
            prism_ca_file: "/w/ca.pem".into(),
            namespace: "ns".into(),
            intervals: ControllerIntervals::tests(),
            excluded_cidrs: Vec::new(),
            verbosity: 2,
            extra_args: Vec::new(),
            log_file: "/w/controller.log".into(),
        }
    }

    #[test]
    fn one_replica_keeps_the_log_and_is_named_by_its_start() {
        let replicas = Replicas::new(&launch(), 1);
        assert_eq!(replicas.replicas.len(), 1);
        assert_eq!(replicas.replicas[0].pod_name, None);
        assert_eq!(
            replicas.replicas[0].launch.log_file,
            PathBuf::from("/w/controller.log")
        );
    }

    #[test]
    fn several_replicas_have_their_own_pod_name_and_log() {
        let replicas = Replicas::new(&launch(), 2);
        let names: Vec<_> = replicas
            .replicas
            .iter()
            .map(|r| r.pod_name.clone().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "nutanix-machine-controller-0",
                "nutanix-machine-controller-1"
            ]
        );
        assert_eq!(
            replicas.replicas[1].launch.log_file,
            PathBuf::from("/w/controller-1.log")
        );
    }
}
