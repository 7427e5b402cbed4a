//! The Nutanix machine controller as a child process: started with the sandbox's flags, its
//! stderr appended to a log file, killed and restarted on demand (the chaos tests of issue 9 kill
//! it at random points).

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::process::{Child, Command};

/// How to start the controller: a program and the arguments before the controller's own flags.
///
/// The sandbox binary re-executes itself (`sandbox controller -- FLAGS`); the end-to-end tests use
/// a small binary of their own that calls the same entry point
/// ([`nutanix_machine_controller::cli_main`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerCommand {
    pub program: PathBuf,
    pub leading_args: Vec<OsString>,
    pub provider: Provider,
}

/// Which machine-api provider the command runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Provider {
    /// Ours (`nutanix-machine-controller`).
    Ours,
    /// openshift/machine-api-provider-nutanix's `cmd/manager`, the Go provider we replace, built
    /// by whoever runs it (the Go module proxy does not serve it).
    Go,
}

impl ControllerCommand {
    /// The running sandbox binary's hidden `controller` subcommand.
    pub fn this_sandbox_binary() -> std::io::Result<Self> {
        Ok(Self {
            program: std::env::current_exe()?,
            leading_args: vec!["controller".into(), "--".into()],
            provider: Provider::Ours,
        })
    }

    /// A binary whose arguments are the controller's (for example `nutanix-machine-controller`).
    pub fn binary(program: impl Into<PathBuf>) -> Self {
        Self {
            program: program.into(),
            leading_args: Vec::new(),
            provider: Provider::Ours,
        }
    }

    /// The Go provider's `manager` binary.
    pub fn go_provider(program: impl Into<PathBuf>) -> Self {
        Self {
            program: program.into(),
            leading_args: Vec::new(),
            provider: Provider::Go,
        }
    }
}

/// Intervals the controller runs with: the sandbox shortens them to match the mock's delays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ControllerIntervals {
    /// `--poll-interval`: Prism tasks, VMs being deleted, Nodes being drained.
    pub poll: Duration,
    /// `--requeue-interval`: Machines waiting for addresses or a Node.
    pub requeue: Duration,
    /// `--inventory-refresh-interval`: the shared VM list.
    pub inventory_refresh: Duration,
}

impl ControllerIntervals {
    /// For prism-mock's sandbox timings (tasks of 1.5 s, addresses 2 s after power-on).
    pub fn sandbox() -> Self {
        Self {
            poll: Duration::from_millis(500),
            requeue: Duration::from_secs(1),
            inventory_refresh: Duration::from_secs(5),
        }
    }

    /// The controller's defaults (`--poll-interval 10s --requeue-interval 30s
    /// --inventory-refresh-interval 60s`), as in production.
    pub fn production() -> Self {
        Self {
            poll: Duration::from_secs(10),
            requeue: Duration::from_secs(30),
            inventory_refresh: Duration::from_secs(60),
        }
    }

    /// For prism-mock's test timings (tens of milliseconds).
    pub fn tests() -> Self {
        Self {
            poll: Duration::from_millis(200),
            requeue: Duration::from_millis(500),
            inventory_refresh: Duration::from_secs(2),
        }
    }
}

fn millis(duration: Duration) -> String {
    format!("{}ms", duration.as_millis())
}

/// Everything the controller process is started with.
#[derive(Clone, Debug)]
pub struct ControllerLaunch {
    pub command: ControllerCommand,
    pub kubeconfig: PathBuf,
    pub prism_ca_file: PathBuf,
    pub namespace: String,
    pub intervals: ControllerIntervals,
    /// `--excluded-address-cidrs`.
    pub excluded_cidrs: Vec<String>,
    /// `--v`.
    pub verbosity: u8,
    pub extra_args: Vec<String>,
    pub log_file: PathBuf,
}

impl ControllerLaunch {
    /// The controller's flags (after the command's leading arguments).
    pub fn flags(&self) -> Vec<OsString> {
        if self.command.provider == Provider::Go {
            return self.go_provider_flags();
        }
        let mut flags: Vec<OsString> = vec![
            "--kubeconfig".into(),
            self.kubeconfig.clone().into(),
            "--prism-ca-file".into(),
            self.prism_ca_file.clone().into(),
            "--namespace".into(),
            self.namespace.clone().into(),
            format!("--v={}", self.verbosity).into(),
            "--metrics-bind-address".into(),
            "127.0.0.1:0".into(),
            "--health-addr".into(),
            "127.0.0.1:0".into(),
            "--poll-interval".into(),
            millis(self.intervals.poll).into(),
            "--requeue-interval".into(),
            millis(self.intervals.requeue).into(),
            "--inventory-refresh-interval".into(),
            millis(self.intervals.inventory_refresh).into(),
        ];
        if !self.excluded_cidrs.is_empty() {
            flags.push("--excluded-address-cidrs".into());
            flags.push(self.excluded_cidrs.join(",").into());
        }
        flags.extend(self.extra_args.iter().map(OsString::from));
        flags
    }

    /// The Go provider's flags as the machine-api-operator passes them
    /// (`pkg/operator/sync.go`, `newContainers`: `--logtostderr=true --v=3 --leader-elect=true
    /// --leader-elect-lease-duration=120s --namespace=...`; no `--max-concurrent-reconciles` on
    /// Nutanix), with loopback metrics and health addresses, and leader election off, as ours
    /// runs here. Its kubeconfig and Prism's CA come from the environment ([`Self::environment`]).
    fn go_provider_flags(&self) -> Vec<OsString> {
        let mut flags: Vec<OsString> = vec![
            "--logtostderr=true".into(),
            format!("--v={}", self.verbosity).into(),
            "--leader-elect=false".into(),
            format!("--namespace={}", self.namespace).into(),
            "--metrics-bind-address=127.0.0.1:0".into(),
            "--health-addr=127.0.0.1:0".into(),
        ];
        flags.extend(self.extra_args.iter().map(OsString::from));
        flags
    }

    /// The environment the process needs beyond its flags: the Go provider takes its kubeconfig
    /// from `KUBECONFIG` and Prism Central's CA from the system roots, which Go reads from
    /// `SSL_CERT_FILE` (crypto/x509, `root_unix.go`).
    pub fn environment(&self) -> Vec<(&'static str, OsString)> {
        match self.command.provider {
            Provider::Ours => Vec::new(),
            Provider::Go => vec![
                ("KUBECONFIG", self.kubeconfig.clone().into()),
                ("SSL_CERT_FILE", self.prism_ca_file.clone().into()),
            ],
        }
    }
}

/// A running (or exited) controller process. Dropping it kills the process.
#[derive(Debug)]
pub struct ControllerProcess {
    child: Child,
    pub pid: Option<u32>,
}

fn log_file(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

impl ControllerProcess {
    /// Starts the controller; its stderr (logs) and stdout go to the launch's log file, after a
    /// line saying which start this is.
    pub fn start(launch: &ControllerLaunch, start_number: u32) -> std::io::Result<Self> {
        Self::start_as(
            launch,
            &format!("sandbox-controller-{start_number}"),
            start_number,
        )
    }

    /// Like [`ControllerProcess::start`], with `POD_NAME` set to `pod_name` (the controller's
    /// leader-election identity is `<POD_NAME>_<uuid>`).
    pub fn start_as(
        launch: &ControllerLaunch,
        pod_name: &str,
        start_number: u32,
    ) -> std::io::Result<Self> {
        let mut log = log_file(&launch.log_file)?;
        writeln!(log, "--- sandbox: controller start #{start_number} ---")?;
        let mut command = Command::new(&launch.command.program);
        if launch.command.provider == Provider::Go {
            // The audit log tells its requests apart by the user agent client-go builds from
            // `argv[0]`; a binary built as `go-provider` would otherwise pass for another client.
            command.arg0(crate::writes::GO_PROVIDER_PROGRAM);
        }
        let child = command
            .args(&launch.command.leading_args)
            .args(launch.flags())
            .envs(launch.environment())
            // `--v` decides the level; a RUST_LOG meant for the sandbox must not leak into it.
            .env_remove("RUST_LOG")
            .env("POD_NAME", pod_name)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .kill_on_drop(true)
            .spawn()?;
        Ok(Self {
            pid: child.id(),
            child,
        })
    }

    /// Kills the process (SIGKILL: no chance to clean up, as a crash) and reaps it.
    pub async fn kill(&mut self) -> std::io::Result<()> {
        match self.child.try_wait()? {
            Some(_) => Ok(()),
            None => self.child.kill().await,
        }
    }

    /// The exit status, if the process has ended.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_carry_the_intervals_and_the_extra_arguments_last() {
        let launch = ControllerLaunch {
            command: ControllerCommand::binary("/bin/controller"),
            kubeconfig: "/tmp/k".into(),
            prism_ca_file: "/tmp/ca.pem".into(),
            namespace: "ns".into(),
            intervals: ControllerIntervals::sandbox(),
            excluded_cidrs: vec!["10.128.0.0/14".into(), "172.30.0.0/16".into()],
            verbosity: 2,
            extra_args: vec!["--concurrency".into(), "4".into()],
            log_file: "/tmp/log".into(),
        };
        let flags: Vec<String> = launch
            .flags()
            .iter()
            .map(|f| f.to_string_lossy().into_owned())
            .collect();
        let after = |flag: &str| {
            let at = flags.iter().position(|f| f == flag).unwrap();
            flags[at + 1].clone()
        };
        assert_eq!(after("--poll-interval"), "500ms");
        assert_eq!(after("--requeue-interval"), "1000ms");
        assert_eq!(after("--inventory-refresh-interval"), "5000ms");
        assert_eq!(
            after("--excluded-address-cidrs"),
            "10.128.0.0/14,172.30.0.0/16"
        );
        assert_eq!(after("--prism-ca-file"), "/tmp/ca.pem");
        assert!(flags.contains(&"--v=2".to_owned()));
        assert_eq!(flags[flags.len() - 2..], ["--concurrency", "4"]);
        assert!(launch.environment().is_empty());
    }

    #[tokio::test]
    async fn the_go_provider_runs_as_manager_whatever_its_file_is_called() {
        // The audit log tells the Go provider's requests by the user agent client-go builds from
        // argv[0]: a binary built as `go-provider` once passed for another client, and its
        // writes counted 0.
        let dir = tempfile::tempdir().unwrap();
        // A shell under the Go provider's file name: it refuses the Go provider's flags with
        // an error that starts with its argv[0] (dash and bash alike).
        let program = dir.path().join("go-provider");
        std::fs::copy("/bin/sh", &program).unwrap();
        let launch = ControllerLaunch {
            command: ControllerCommand::go_provider(&program),
            kubeconfig: dir.path().join("kubeconfig"),
            prism_ca_file: dir.path().join("ca.pem"),
            namespace: "openshift-machine-api".into(),
            intervals: ControllerIntervals::production(),
            excluded_cidrs: Vec::new(),
            verbosity: 2,
            extra_args: Vec::new(),
            log_file: dir.path().join("log"),
        };
        let mut process = ControllerProcess::start(&launch, 1).unwrap();
        process.child.wait().await.unwrap();
        let log = std::fs::read_to_string(dir.path().join("log")).unwrap();
        assert!(
            log.contains(&format!("{}:", crate::writes::GO_PROVIDER_PROGRAM)),
            "{log}"
        );
        assert!(!log.contains("go-provider:"), "{log}");
    }

    #[test]
    fn the_go_provider_gets_maos_flags_and_its_kubeconfig_and_ca_from_the_environment() {
        let launch = ControllerLaunch {
            command: ControllerCommand::go_provider("/bin/manager"),
            kubeconfig: "/tmp/admin".into(),
            prism_ca_file: "/tmp/ca.pem".into(),
            namespace: "openshift-machine-api".into(),
            intervals: ControllerIntervals::production(),
            excluded_cidrs: vec!["10.128.0.0/14".into()],
            verbosity: 3,
            extra_args: Vec::new(),
            log_file: "/tmp/log".into(),
        };
        let flags: Vec<String> = launch
            .flags()
            .iter()
            .map(|f| f.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            flags,
            [
                "--logtostderr=true",
                "--v=3",
                "--leader-elect=false",
                "--namespace=openshift-machine-api",
                "--metrics-bind-address=127.0.0.1:0",
                "--health-addr=127.0.0.1:0",
            ]
        );
        assert_eq!(
            launch.environment(),
            [
                ("KUBECONFIG", OsString::from("/tmp/admin")),
                ("SSL_CERT_FILE", OsString::from("/tmp/ca.pem")),
            ]
        );
    }
}
