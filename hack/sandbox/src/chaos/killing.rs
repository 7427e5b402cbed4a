//! A kill carried out: armed after a random delay, fired by the first event that matches its
//! aim ([`super::kills`]) or at its fallback time, what the run does while the controller is down,
//! and the restart.

use std::time::{Duration, Instant};

use kube::ResourceExt;
use kube::api::{Api, DeleteParams};
use nutanix_machine_controller::api::Machine;
use prism_mock::{FaultKind, FaultRule};

use crate::manifests::{LINUX_SET, WINDOWS_IMAGE_SET, WINDOWS_TEMPLATE_SET};

use rand::Rng;

use super::Soak;
use super::kills::KillAim;
use super::report::KillRecord;
use super::tracker::VmEvent;
use super::{DEPLOY_PATH, VM_POLL, set_of};

impl Soak<'_> {
    /// Arms a kill after a random delay, waits for its event (or its fallback time), kills the
    /// controller, acts while it is down, and starts it again. `release_drains_after` removes the
    /// drain blockers that long after arming.
    pub(super) async fn kill_at(
        &mut self,
        aim: KillAim,
        release_drains_after: Option<Duration>,
    ) -> Result<KillRecord, String> {
        // The next deploys' answers are lost (Prism deploys, then answers 500), so the kill
        // finds the Machine with its deploy request id and no task: the state in which a
        // deletion must send the deploy again to find the VM.
        let (found, lost_answers) = self
            .await_aim(
                aim,
                release_drains_after,
                aim == KillAim::AfterDeployThenDelete,
            )
            .await?;
        // With several replicas, mostly the leader (whose death hands the Lease over), sometimes
        // the standby.
        let replica = if self.world.replica_count() > 1 {
            let leader = self.leader().await;
            let index = match leader {
                Some(leader) if self.rng.random_bool(0.75) => leader,
                Some(leader) => (leader + 1) % self.world.replica_count(),
                None => self.rng.random_range(0..self.world.replica_count()),
            };
            self.world
                .kill_replica(index)
                .await
                .map_err(|e| e.to_string())?;
            self.pictures.mark(&format!("kill replica-{index}"));
            Some((index, leader == Some(index)))
        } else {
            self.world
                .kill_controller()
                .await
                .map_err(|e| e.to_string())?;
            self.pictures.mark("kill");
            None
        };
        let at = self.elapsed();
        if let Some(id) = lost_answers {
            self.world.admin().remove_fault(id);
        }
        let (aimed, event, target) = match found {
            Some((event, target)) => (true, event, target),
            None => (false, "killed when the wait ran out".to_owned(), None),
        };
        let machine_state = target.as_deref().and_then(|name| self.machine_record(name));
        let mut while_down = None;
        if aim == KillAim::AfterDeployThenDelete
            && let Some(name) = &target
        {
            self.delete_machine(name).await?;
            self.deleted_early.insert(
                name.clone(),
                "deleted while the controller was down, right after its template deploy was sent"
                    .to_owned(),
            );
            while_down = Some(format!("deleted Machine {name}"));
        }
        if self.drains_due.take().is_some() {
            self.release_drains().await?;
        }
        let down_for = self.random_duration(self.options.down_time.0, self.options.down_time.1);
        self.idle(down_for).await?;
        match replica {
            Some((index, _)) => self.world.restart_replica(index).await,
            None => self.world.restart_controller().await,
        }
        .map_err(|e| e.to_string())?;
        Ok(KillRecord {
            aim,
            at,
            aimed,
            event,
            machine_state,
            while_down,
            down_for,
            replica,
        })
    }

    /// Waits a random arming delay, then for the first event matching `aim` (or the trigger
    /// timeout), watching meanwhile; removes the drain blockers `release_drains_after` arming
    /// (or leaves that due in `drains_due` if the event came first). With
    /// `lose_deploy_answers`, the next two deploys are answered 500 once armed (the rule's id is
    /// returned, for the caller to remove). Returns the event and the Machine it concerns.
    pub(super) async fn await_aim(
        &mut self,
        aim: KillAim,
        release_drains_after: Option<Duration>,
        lose_deploy_answers: bool,
    ) -> Result<(Option<(String, Option<String>)>, Option<u64>), String> {
        let arm = self.random_duration(Duration::ZERO, self.options.arm_within);
        self.idle(arm).await?;
        let lost_answers = lose_deploy_answers.then(|| {
            self.world.admin().add_fault(
                FaultRule::new(Some("POST"), DEPLOY_PATH, FaultKind::CreateThen500).times(2),
            )
        });
        let armed = Instant::now();
        let random_at = armed + self.random_duration(Duration::ZERO, self.options.random_within);
        let deadline = armed + self.options.trigger_timeout;
        self.drains_due = release_drains_after.map(|after| armed + after);
        loop {
            let events = self.poll_vms();
            self.look(false).await?;
            if self.drains_due.is_some_and(|at| Instant::now() >= at) {
                self.drains_due = None;
                self.release_drains().await?;
            }
            if let Some(found) = self.trigger(aim, &events, random_at) {
                return Ok((Some(found), lost_answers));
            }
            if Instant::now() >= deadline {
                return Ok((None, lost_answers));
            }
            tokio::time::sleep(VM_POLL).await;
        }
    }

    /// Whether the aimed moment has come: the event and the Machine it concerns.
    fn trigger(
        &self,
        aim: KillAim,
        events: &[VmEvent],
        random_at: Instant,
    ) -> Option<(String, Option<String>)> {
        let vm_event = |wanted: &dyn Fn(&VmEvent) -> Option<String>| {
            events.iter().find_map(|event| {
                let text = wanted(event)?;
                let name = match event {
                    VmEvent::Appeared { name, .. }
                    | VmEvent::State { name, .. }
                    | VmEvent::SpecVersion { name, .. }
                    | VmEvent::Gone { name, .. } => name.clone(),
                };
                Some((text, Some(name)))
            })
        };
        match aim {
            KillAim::AfterCreate => vm_event(&|event| match event {
                VmEvent::Appeared { uuid, name } if set_of(name) != WINDOWS_TEMPLATE_SET => {
                    Some(format!("VM {uuid} of {name} appeared"))
                }
                _ => None,
            }),
            KillAim::AfterDeployThenDelete => vm_event(&|event| match event {
                VmEvent::Appeared { uuid, name } if set_of(name) == WINDOWS_TEMPLATE_SET => {
                    Some(format!("VM {uuid} of {name} appeared (deployed)"))
                }
                _ => None,
            }),
            KillAim::AfterFollowUp => vm_event(&|event| match event {
                VmEvent::SpecVersion {
                    uuid,
                    name,
                    version: 1,
                } if set_of(name) != WINDOWS_IMAGE_SET && set_of(name) != LINUX_SET => {
                    Some(format!("VM {uuid} of {name} updated (spec version 1)"))
                }
                _ => None,
            }),
            KillAim::MidDelete => vm_event(&|event| match event {
                VmEvent::State { uuid, name, state } if state == "DELETE_PENDING" => {
                    Some(format!("VM {uuid} of {name} went DELETE_PENDING"))
                }
                _ => None,
            }),
            KillAim::MidDrain => self.last.machines.iter().find_map(|machine| {
                let drained = machine
                    .status
                    .as_ref()?
                    .conditions
                    .iter()
                    .find(|c| c.type_ == "Drained")?;
                (machine.metadata.deletion_timestamp.is_some()
                    && drained.status == "False"
                    && drained.reason.as_deref() == Some("DrainBlocked"))
                .then(|| {
                    (
                        format!(
                            "Machine {} has Drained=False (DrainBlocked)",
                            machine.name_any()
                        ),
                        Some(machine.name_any()),
                    )
                })
            }),
            KillAim::AtRandom => (Instant::now() >= random_at).then(|| {
                let machines = self.last.machines.len();
                (
                    format!(
                        "{machines} Machines, {} VMs at that moment",
                        self.last.vms.len()
                    ),
                    None,
                )
            }),
        }
    }

    async fn delete_machine(&self, name: &str) -> Result<(), String> {
        let api: Api<Machine> =
            Api::namespaced(self.world.client().clone(), self.world.namespace());
        api.delete(name, &DeleteParams::default())
            .await
            .map(|_| ())
            .map_err(|e| format!("delete Machine {name}: {e}"))
    }
}
