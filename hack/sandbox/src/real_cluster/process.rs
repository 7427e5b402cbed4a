//! Supervision of the control plane's programs: each started with its log file, watched for an
//! exit, and its log's end quoted when it fails.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::process::{Child, Command};

use super::{ControlPlane, RealClusterError, io_error, lock};

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
pub(super) struct Process {
    pub(super) program: &'static str,
    pub(super) args: Vec<String>,
    /// `None` while killed on purpose ([`ControlPlane::kill_program`]).
    pub(super) child: Option<Child>,
    pub(super) log: PathBuf,
}

impl ControlPlane {
    pub(super) fn spawn(
        &mut self,
        program: &'static str,
        args: Vec<String>,
    ) -> Result<(), RealClusterError> {
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
    pub(super) fn start_child(
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

    pub(super) fn not_ready(&self, what: &str, seconds: u64) -> RealClusterError {
        RealClusterError::NotReady {
            what: what.to_owned(),
            seconds,
            dir: self.dir.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
