//! One shared look per Prism Central at the tasks Machines wait on (issue 37, item 2).
//!
//! A Machine whose create, clone, deploy, follow-up or delete task runs would otherwise see the
//! task's end only at its own next look (at least `--poll-interval`, 10 s in production). While
//! any task is in flight, the watch lists them all every [`LOOK_EVERY`] in one v4 task listing
//! (`$filter=extId in (...)`, at most [`V4_TASKS_MAX_PAGE`] a call: [`Client::list_v4_tasks`]),
//! so its calls follow the time tasks run, not the number of Machines waiting. When a task has
//! ended, the watch keeps what the listing said of it and wakes its Machine; that Machine's
//! reconcile takes the end as a fact ([`TaskWatch::end_seen`]) and, for a task that succeeded
//! and names what it made, uses the listed task in place of its own `GET`
//! ([`TaskWatch::handed_over`]). A failed task, a deploy (whose VM its subtasks name) and any
//! task the listing missed are read by the Machine itself, as before: the Machine's own poll
//! stays the fallback at its interval.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use prism_client::{
    Client, TaskProgress, V4_TASKS_MAX_PAGE, task_uuid_part, v4::Task, v4_progress,
};
use tokio::sync::{Notify, broadcast};

/// How often the tasks in flight are listed: about the second within which a Machine should
/// see its task's end.
pub const LOOK_EVERY: Duration = Duration::from_secs(1);

/// How long a task is watched at most: past this, its Machine's own reads alone follow it.
const WATCHED_AT_MOST: Duration = Duration::from_secs(3600);

/// How long an ended task's listing is kept for its Machine's reconcile (woken at once; the
/// rest covers a busy work queue).
const ENDED_KEPT: Duration = Duration::from_secs(300);

/// How long the watch rests after Prism Central refused the listing itself (not a transient
/// failure): a Prism Central that does not serve it costs one call per pause, not one a second.
const REFUSED_PAUSE: Duration = Duration::from_secs(600);

/// A Machine, by namespace and name: whom a task's end wakes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MachineKey {
    pub namespace: String,
    pub name: String,
}

/// A task being waited on.
#[derive(Debug)]
struct Watched {
    /// The id as recorded (a v3 UUID, or a v4 extId).
    task: String,
    machine: MachineKey,
    since: Instant,
    /// The listed task may stand in for the Machine's own read when it succeeded.
    hand_over: bool,
    /// The VM a DELETE task deletes.
    deletes: Option<String>,
}

/// A task the listing showed ended.
#[derive(Debug)]
struct Ended {
    at: Instant,
    /// The listed task, when it may stand in for the Machine's read.
    progress: Option<TaskProgress>,
    /// The VM a DELETE task deleted.
    deleted: Option<String>,
}

#[derive(Debug, Default)]
struct State {
    /// The client of the last Machine that asked (any serves: one Prism Central).
    client: Option<Client>,
    /// By the task's UUID part, lower-cased.
    in_flight: HashMap<String, Watched>,
    ended: HashMap<String, Ended>,
    /// Whether the loop runs.
    running: bool,
}

/// The watch of one Prism Central.
#[derive(Debug)]
pub struct TaskWatch {
    state: Mutex<State>,
    /// Rouses the idle loop when a task is added.
    added: Notify,
    wakes: broadcast::Sender<MachineKey>,
}

/// What one listing changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Looked {
    pub ended: Vec<MachineKey>,
}

impl TaskWatch {
    /// A watch whose ended tasks wake their Machines through `wakes`.
    pub fn new(wakes: broadcast::Sender<MachineKey>) -> Self {
        Self {
            state: Mutex::new(State::default()),
            added: Notify::new(),
            wakes,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Watches `task` for `machine`, through `client`; `hand_over`: its listed success may
    /// stand in for the Machine's own read; `deletes`: the VM a DELETE task deletes. Starts the
    /// loop on the first task (inside a tokio runtime). Watching a task again changes nothing
    /// but its Machine.
    pub fn watch(
        self: &Arc<Self>,
        client: &Client,
        task: &str,
        machine: MachineKey,
        hand_over: bool,
        deletes: Option<&str>,
    ) {
        let key = task_uuid_part(task);
        let start = {
            let mut state = self.state();
            state.client = Some(client.clone());
            if state.ended.contains_key(&key) {
                return;
            }
            state
                .in_flight
                .entry(key)
                .and_modify(|watched| watched.machine = machine.clone())
                .or_insert_with(|| Watched {
                    task: task.to_owned(),
                    machine,
                    since: Instant::now(),
                    hand_over,
                    deletes: deletes.map(str::to_ascii_lowercase),
                });
            !std::mem::replace(&mut state.running, true)
        };
        if start {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(self.clone().run());
            } else {
                self.state().running = false;
            }
        }
        self.added.notify_one();
    }

    /// Forgets `task` (its Machine read its end, or no longer waits on it).
    pub fn forget(&self, task: &str) {
        let key = task_uuid_part(task);
        let mut state = self.state();
        state.in_flight.remove(&key);
        state.ended.remove(&key);
    }

    /// Whether the listing showed `task` ended.
    pub fn end_seen(&self, task: &str) -> bool {
        self.state().ended.contains_key(&task_uuid_part(task))
    }

    /// Whether the listing showed the DELETE task of VM `vm` ended.
    pub fn delete_end_seen(&self, vm: &str) -> bool {
        self.state().ended.values().any(|ended| {
            ended
                .deleted
                .as_deref()
                .is_some_and(|deleted| deleted.eq_ignore_ascii_case(vm))
        })
    }

    /// The listed end of `task`, where it stands in for the Machine's own read.
    pub fn handed_over(&self, task: &str) -> Option<TaskProgress> {
        self.state()
            .ended
            .get(&task_uuid_part(task))
            .and_then(|ended| ended.progress.clone())
    }

    /// The tasks to list now (oldest-watched first) and the client to list them with; `None`
    /// when none is in flight. Drops what was kept too long.
    fn due(&self) -> Option<(Client, Vec<String>)> {
        let mut state = self.state();
        state
            .in_flight
            .retain(|_, watched| watched.since.elapsed() < WATCHED_AT_MOST);
        state
            .ended
            .retain(|_, ended| ended.at.elapsed() < ENDED_KEPT);
        if state.in_flight.is_empty() {
            return None;
        }
        let mut watched: Vec<(&Instant, &String)> = state
            .in_flight
            .values()
            .map(|watched| (&watched.since, &watched.task))
            .collect();
        watched.sort();
        let tasks = watched.into_iter().map(|(_, task)| task.clone()).collect();
        Some((state.client.clone()?, tasks))
    }

    /// Takes in one listing: each listed task that ended leaves the watch, is kept for its
    /// Machine, and wakes it.
    pub fn take_in(&self, listed: &[Task]) -> Looked {
        let mut looked = Looked::default();
        let mut state = self.state();
        for task in listed {
            let ended = task
                .status
                .as_ref()
                .is_some_and(|status| status.is_terminal());
            let Some(ext_id) = task.ext_id.as_deref().filter(|_| ended) else {
                continue;
            };
            let key = task_uuid_part(ext_id);
            let Some(watched) = state.in_flight.remove(&key) else {
                continue;
            };
            let progress = v4_progress(&watched.task, task);
            let succeeded = matches!(progress, TaskProgress::Succeeded { .. });
            state.ended.insert(
                key,
                Ended {
                    at: Instant::now(),
                    progress: (watched.hand_over && succeeded).then_some(progress),
                    deleted: watched.deletes,
                },
            );
            looked.ended.push(watched.machine);
        }
        drop(state);
        for machine in &looked.ended {
            // No receiver (no Machine controller yet): the Machine's own poll sees the end.
            let _ = self.wakes.send(machine.clone());
        }
        looked
    }

    /// Lists the tasks in flight every [`LOOK_EVERY`] while there are any; idle otherwise.
    async fn run(self: Arc<Self>) {
        loop {
            let Some((client, tasks)) = self.due() else {
                self.added.notified().await;
                continue;
            };
            let mut pause = LOOK_EVERY;
            for page in tasks.chunks(V4_TASKS_MAX_PAGE) {
                match client.list_v4_tasks(page).await {
                    Ok(listed) => {
                        self.take_in(&listed);
                    }
                    // The Machines' own reads follow their tasks meanwhile.
                    Err(error) if error.is_retryable() => {
                        tracing::debug!(%error, tasks = page.len(), "cannot list the tasks in flight");
                    }
                    Err(error) => {
                        tracing::warn!(%error, pause = ?REFUSED_PAUSE, "Prism Central refused the task listing: task ends are seen by each Machine's own reads until it is tried again");
                        pause = REFUSED_PAUSE;
                        break;
                    }
                }
            }
            tokio::time::sleep(pause).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn machine(name: &str) -> MachineKey {
        MachineKey {
            namespace: "openshift-machine-api".to_owned(),
            name: name.to_owned(),
        }
    }

    fn listed(ext_id: &str, status: &str) -> Task {
        serde_json::from_value(json!({
            "extId": ext_id,
            "status": status,
            "entitiesAffected": [{"extId": "7a1b0c4e-0000-4000-8000-000000000001", "rel": "vmm:ahv:config:vm"}],
        }))
        .unwrap()
    }

    fn watch_without_loop(watch: &TaskWatch, task: &str, name: &str, hand_over: bool) {
        watch.state().in_flight.insert(
            task_uuid_part(task),
            Watched {
                task: task.to_owned(),
                machine: machine(name),
                since: Instant::now(),
                hand_over,
                deletes: None,
            },
        );
    }

    #[test]
    fn an_ended_task_wakes_its_machine_once_and_a_running_one_stays_watched() {
        let (wakes, mut woken) = broadcast::channel(8);
        let watch = TaskWatch::new(wakes);
        let v3 = "5f0e8a3c-0000-4000-8000-00000000000a";
        let running = "5f0e8a3c-0000-4000-8000-00000000000b";
        watch_without_loop(&watch, v3, "m-1", true);
        watch_without_loop(&watch, running, "m-2", true);
        let looked = watch.take_in(&[
            listed(&format!("ZXJnb24=:{}", v3.to_uppercase()), "SUCCEEDED"),
            listed(&format!("ZXJnb24=:{running}"), "RUNNING"),
        ]);
        assert_eq!(looked.ended, [machine("m-1")]);
        assert_eq!(woken.try_recv().unwrap(), machine("m-1"));
        assert!(woken.try_recv().is_err());
        assert!(watch.end_seen(v3));
        assert!(!watch.end_seen(running));
        let Some(TaskProgress::Succeeded { entities, .. }) = watch.handed_over(v3) else {
            panic!("a success is handed over");
        };
        assert_eq!(entities[0].uuid, "7a1b0c4e-0000-4000-8000-000000000001");
        // Listed again, an ended task wakes nobody.
        assert!(watch.take_in(&[listed(v3, "SUCCEEDED")]).ended.is_empty());
        watch.forget(v3);
        assert!(!watch.end_seen(v3));
    }

    #[test]
    fn a_failure_or_a_task_not_handed_over_is_only_seen_ended() {
        let (wakes, _woken) = broadcast::channel(8);
        let watch = TaskWatch::new(wakes);
        let failed = "5f0e8a3c-0000-4000-8000-00000000000c";
        let deploy = "ZXJnb24=:5f0e8a3c-0000-4000-8000-00000000000d";
        watch_without_loop(&watch, failed, "m-1", true);
        watch_without_loop(&watch, deploy, "m-2", false);
        let looked = watch.take_in(&[listed(failed, "FAILED"), listed(deploy, "SUCCEEDED")]);
        assert_eq!(looked.ended.len(), 2);
        assert!(watch.end_seen(failed) && watch.end_seen(deploy));
        assert_eq!(
            watch.handed_over(failed),
            None,
            "its subtasks name the cause"
        );
        assert_eq!(watch.handed_over(deploy), None, "its subtasks name the VM");
    }
}
