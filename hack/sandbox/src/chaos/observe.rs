//! Watching the run: prism-mock's VMs polled for the tracker and the Windows passwords, the
//! world looked at (progress, Failed Machines, a controller that exited), waits for a condition,
//! and what a Machine's provisioning record says.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use kube::ResourceExt;
use nutanix_machine_controller::api::{Machine, phase};
use serde_json::Value;

use crate::world::{Snapshot, WorldError};

use super::Soak;
use super::tracker::VmEvent;
use super::{LOOK_EVERY, VM_POLL};

/// The controller's exit status after giving its Lease up (docs/configuration.md).
const LEASE_LOST_EXIT: i32 = 3;

impl Soak<'_> {
    /// Polls prism-mock's VMs once: the tracker's events, and the Administrator password of
    /// every new Windows VM.
    pub(super) fn poll_vms(&mut self) -> Vec<VmEvent> {
        let admin = self.world.admin().clone();
        let vms: Vec<_> = admin
            .vms()
            .into_iter()
            .filter(|vm| !self.seed_vms.contains(&vm.uuid))
            .collect();
        let at = self.elapsed();
        let events = self.tracker.observe(at, &vms, |uuid| {
            admin
                .vm(uuid)
                .and_then(|vm| vm["spec"]["description"].as_str().map(str::to_owned))
        });
        for event in &events {
            if let VmEvent::Appeared { uuid, name } = event
                && let Some(xml) = admin.guest_customization(uuid).and_then(|c| c.unattend_xml)
                && let Some((password, obfuscated)) = admin_password(&xml)
            {
                self.secrets
                    .push((format!("Administrator password of {name}"), password));
                self.secrets.push((
                    format!("obfuscated Administrator password of {name}"),
                    obfuscated,
                ));
            }
        }
        events
    }

    /// Looks at the world (at most every [`LOOK_EVERY`]): progress line, Failed Machines'
    /// reasons, and a controller that exited on its own (restarted, and reported).
    pub(super) async fn look(&mut self, force: bool) -> Result<(), String> {
        if !force && self.last_look.is_some_and(|at| at.elapsed() < LOOK_EVERY) {
            return Ok(());
        }
        self.last_look = Some(Instant::now());
        // A wait that never holds, with no time left: one snapshot (kept), and an error saying
        // whether the controller exited on its own.
        let seen = Mutex::new(None);
        let result = self
            .world
            .wait_for("the chaos run", Duration::ZERO, |snapshot| {
                *seen
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(snapshot.clone());
                Err(String::new())
            })
            .await;
        if let Err(WorldError::ControllerExited {
            replica,
            status,
            code,
            log_tail,
            ..
        }) = result
        {
            let at = self.elapsed().as_secs_f64();
            let line = format!(
                "at +{at:.1}s replica {replica} exited with {status}; last lines: {}",
                log_tail
                    .lines()
                    .rev()
                    .take(3)
                    .collect::<Vec<_>>()
                    .join(" | ")
            );
            // A replica that gave leadership up (it could not renew within its deadline) exits
            // with the controller's documented status for it (docs/configuration.md, leader
            // election: 3), as client-go's callers exit on `OnStoppedLeading`; any other exit is
            // a failure.
            if code == Some(LEASE_LOST_EXIT) {
                self.lease_exits.push(line);
            } else {
                self.unexpected_exits.push(line);
            }
            // Its Deployment's kubelet starts it again.
            self.world
                .restart_replica(replica)
                .await
                .map_err(|e| e.to_string())?;
        }
        self.supervise_control_plane()?;
        if let Some(snapshot) = seen
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
        {
            for machine in &snapshot.machines {
                if machine.phase() == phase::FAILED {
                    let status = machine.status.as_ref();
                    let text = |v: Option<&String>| v.cloned().unwrap_or_default();
                    self.failures.insert(
                        machine.name_any(),
                        (
                            text(status.and_then(|s| s.error_reason.as_ref())),
                            text(status.and_then(|s| s.error_message.as_ref())),
                        ),
                    );
                }
            }
            self.last = snapshot;
        }
        Ok(())
    }

    /// Starts again the control-plane programs that exited on their own (as their kubelet
    /// would), and notes them.
    fn supervise_control_plane(&mut self) -> Result<(), String> {
        let Some(plane) = self.world.control_plane() else {
            return Ok(());
        };
        let restarted = plane.restart_exited().map_err(|e| e.to_string())?;
        let at = self.elapsed().as_secs_f64();
        for (program, status) in restarted {
            self.plane_restarts.push(format!(
                "at +{at:.1}s {program} exited with {status}, started again"
            ));
        }
        Ok(())
    }

    /// Polls until `check` holds for a snapshot, or fails after `timeout` with what is missing.
    pub(super) async fn wait(
        &mut self,
        what: &str,
        timeout: Duration,
        check: impl Fn(&Snapshot) -> Result<(), String>,
    ) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            self.poll_vms();
            self.look(false).await?;
            let missing = match check(&self.last) {
                Ok(()) => return Ok(()),
                Err(missing) => missing,
            };
            if Instant::now() >= deadline {
                return Err(format!(
                    "timed out after {}s waiting for {what}: {missing}",
                    timeout.as_secs()
                ));
            }
            tokio::time::sleep(VM_POLL).await;
        }
    }

    /// Keeps polling for `duration`.
    pub(super) async fn idle(&mut self, duration: Duration) -> Result<(), String> {
        let until = Instant::now() + duration;
        while Instant::now() < until {
            self.poll_vms();
            self.look(false).await?;
            tokio::time::sleep(VM_POLL).await;
        }
        Ok(())
    }

    /// What the Machine's providerStatus says, read straight from the API server's store.
    pub(super) fn machine_record(&self, name: &str) -> Option<String> {
        let machines = self
            .world
            .sim()?
            .list("machine.openshift.io", "machines")
            .ok()?;
        let machine = machines.iter().find(|m| m["metadata"]["name"] == name)?;
        Some(describe_record(machine))
    }
}

/// Every MachineSet has its replicas of Machines not being deleted, each Running or Failed.
pub(super) fn scale_up_done(
    snapshot: &Snapshot,
    sets: &[(&'static str, &'static str, usize)],
) -> Result<(), String> {
    let mut missing = Vec::new();
    for (set, _, target) in sets {
        let live: Vec<&Machine> = snapshot
            .machines_of(set)
            .into_iter()
            .filter(|m| m.metadata.deletion_timestamp.is_none())
            .collect();
        if live.len() != *target {
            missing.push(format!("{set}: {} of {target} Machines", live.len()));
        }
        for machine in live {
            let phase = machine.phase();
            if phase != phase::RUNNING && phase != phase::FAILED {
                missing.push(format!(
                    "{} is {}",
                    machine.name_any(),
                    if phase.is_empty() { "new" } else { phase }
                ));
            }
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        let more = missing.len().saturating_sub(6);
        missing.truncate(6);
        if more > 0 {
            missing.push(format!("{more} more"));
        }
        Err(missing.join("; "))
    }
}

/// A Machine's provisioning record in a few words (`phase Provisioning; deployRequestId
/// recorded; no task recorded; no vmUUID`).
fn describe_record(machine: &Value) -> String {
    let status = &machine["status"]["providerStatus"];
    let phase = machine["status"]["phase"].as_str().unwrap_or("");
    let mut parts = vec![format!(
        "phase {}",
        if phase.is_empty() { "(none)" } else { phase }
    )];
    if status["deployRequestId"].is_string() {
        parts.push("deployRequestId recorded".to_owned());
    }
    match status["pendingTask"]["operation"].as_str() {
        Some(operation) => parts.push(format!("{operation} task recorded")),
        None => parts.push("no task recorded".to_owned()),
    }
    parts.push(if status["vmUUID"].is_string() {
        "vmUUID recorded".to_owned()
    } else {
        "no vmUUID".to_owned()
    });
    if status["pendingFollowUp"].is_object() {
        parts.push("follow-up pending".to_owned());
    }
    if machine["metadata"]["deletionTimestamp"].is_string() {
        parts.push("being deleted".to_owned());
    }
    parts.join("; ")
}

/// The Administrator password of an unattend.xml and its obfuscated form (base64 of the
/// UTF-16LE of the password followed by `AdministratorPassword`).
fn admin_password(unattend_xml: &str) -> Option<(String, String)> {
    let section = &unattend_xml[unattend_xml.find("<AdministratorPassword>")?..];
    let start = section.find("<Value>")? + "<Value>".len();
    let end = section[start..].find('<')? + start;
    let obfuscated = section[start..end].to_owned();
    let bytes = STANDARD.decode(&obfuscated).ok()?;
    let units: Vec<u16> = bytes
        .chunks_exact(2)
        .map(|pair| u16::from_le_bytes([pair[0], pair[1]]))
        .collect();
    let text = String::from_utf16(&units).ok()?;
    let password = text.strip_suffix("AdministratorPassword")?.to_owned();
    Some((password, obfuscated))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::manifests;

    #[test]
    fn a_provisioning_record_is_described_in_a_few_words() {
        let machine = json!({
            "metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"},
            "status": {"phase": "Provisioning", "providerStatus": {"deployRequestId": "r1",
                "pendingFollowUp": {"powerOn": true}}},
        });
        assert_eq!(
            describe_record(&machine),
            "phase Provisioning; deployRequestId recorded; no task recorded; no vmUUID; \
             follow-up pending; being deleted"
        );
        let machine = json!({"status": {"providerStatus": {"vmUUID": "u",
            "pendingTask": {"id": "t", "operation": "Create"}}}});
        assert_eq!(
            describe_record(&machine),
            "phase (none); Create task recorded; vmUUID recorded"
        );
    }

    #[test]
    fn the_administrator_password_is_read_back_from_windows_obfuscation() {
        let units: Vec<u8> = "S3cret!AdministratorPassword"
            .encode_utf16()
            .flat_map(u16::to_le_bytes)
            .collect();
        let encoded = STANDARD.encode(units);
        let xml = format!(
            "<x><AdministratorPassword><Value>{encoded}</Value><PlainText>false</PlainText></AdministratorPassword></x>"
        );
        assert_eq!(admin_password(&xml), Some(("S3cret!".to_owned(), encoded)));
        assert_eq!(admin_password("<x/>"), None);
    }

    #[test]
    fn scale_up_is_done_when_every_set_has_its_machines_running_or_failed() {
        let machine = |name: &str, set: &str, phase: &str| -> Machine {
            serde_json::from_value(json!({
                "apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
                "metadata": {"name": name, "labels": {manifests::MACHINE_SET_LABEL: set}},
                "spec": {}, "status": {"phase": phase},
            }))
            .unwrap()
        };
        let sets = [("a", "", 2), ("b", "", 1)];
        let mut snapshot = Snapshot {
            machines: vec![
                machine("a-1", "a", "Running"),
                machine("a-2", "a", "Provisioned"),
                machine("b-1", "b", "Failed"),
            ],
            ..Snapshot::default()
        };
        assert_eq!(
            scale_up_done(&snapshot, &sets),
            Err("a-2 is Provisioned".to_owned())
        );
        snapshot.machines[1] = machine("a-2", "a", "Running");
        assert_eq!(scale_up_done(&snapshot, &sets), Ok(()));
        snapshot.machines.pop();
        assert_eq!(
            scale_up_done(&snapshot, &sets),
            Err("b: 0 of 1 Machines".to_owned())
        );
    }
}
