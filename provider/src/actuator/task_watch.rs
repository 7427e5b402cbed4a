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
//! ([`TaskWatch::handed_over`]). A template deploy names its VM only in its subtasks: when one
//! succeeds, its subtasks are listed at once, in the same shared listings, and the deploy is
//! handed over with their entities ([`HandOver::WithSubtasks`]), so a deploy costs its Machine
//! no task read either. A failed task and any task the listing missed are read by the Machine
//! itself, as before: the Machine's own poll stays the fallback at its interval.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use prism_client::{
    Client, MAX_SUBTASK_READS, TaskEntity, TaskProgress, V4_TASKS_MAX_PAGE, dedup_entities,
    task_uuid_part, v4::Task, v4_entities, v4_progress,
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

/// What a task's listed success stands in for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HandOver {
    /// Nothing: the Machine reads the task itself (a DELETE, whose end is known by its VM).
    No,
    /// The Machine's read of the task: the listed task as it is (a v3 create, clone or update
    /// names its VM on the task itself).
    Listed,
    /// The Machine's read of the task and its subtasks: a template deploy, whose real task names
    /// only the template and whose subtasks name the VM (`prism_client`'s
    /// `v4_subtask_entities`, which the Machine's own read uses, has the sources). Its subtasks
    /// are listed, up to [`MAX_SUBTASK_READS`] of them as that read, before it is handed over.
    WithSubtasks,
}

/// A task being waited on.
#[derive(Debug)]
struct Watched {
    /// The id as recorded (a v3 UUID, or a v4 extId).
    task: String,
    machine: MachineKey,
    since: Instant,
    hand_over: HandOver,
    /// The VM a DELETE task deletes.
    deletes: Option<String>,
}

/// A deploy that succeeded, whose subtasks are being listed for the entities they name.
#[derive(Debug)]
struct Collecting {
    machine: MachineKey,
    since: Instant,
    /// The deploy's own entities, then its listed subtasks'.
    entities: Vec<TaskEntity>,
    /// Subtask extIds still to be listed.
    to_list: Vec<String>,
    /// How many subtasks were taken for listing, against [`MAX_SUBTASK_READS`].
    taken: usize,
    /// Subtasks a listing left out, or past the bound.
    unread: Vec<String>,
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
    /// Succeeded deploys by their UUID part, while their subtasks are listed.
    collecting: HashMap<String, Collecting>,
    /// The deploy each subtask being listed belongs to, by the subtask's UUID part.
    subtask_of: HashMap<String, String>,
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

    /// Watches `task` for `machine`, through `client`; `hand_over`: what its listed success
    /// stands in for; `deletes`: the VM a DELETE task deletes. Starts the loop on the first task
    /// (inside a tokio runtime). Watching a task again changes nothing but its Machine.
    pub fn watch(
        self: &Arc<Self>,
        client: &Client,
        task: &str,
        machine: MachineKey,
        hand_over: HandOver,
        deletes: Option<&str>,
    ) {
        let key = task_uuid_part(task);
        let start = {
            let mut state = self.state();
            state.client = Some(client.clone());
            if state.ended.contains_key(&key) {
                return;
            }
            if let Some(collecting) = state.collecting.get_mut(&key) {
                collecting.machine = machine;
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
        if state.collecting.remove(&key).is_some() {
            state.subtask_of.retain(|_, parent| *parent != key);
        }
    }

    /// Whether the listing showed `task` ended (for a deploy: with its subtasks listed).
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

    /// The listed end of `task`, where it stands in for the Machine's own read, and when the
    /// listing that showed it was taken in.
    pub fn handed_over(&self, task: &str) -> Option<(TaskProgress, Instant)> {
        self.state()
            .ended
            .get(&task_uuid_part(task))
            .and_then(|ended| Some((ended.progress.clone()?, ended.at)))
    }

    /// The tasks to list now: the subtasks of succeeded deploys first, then the tasks in
    /// flight, oldest-watched first. Drops what was kept too long.
    fn due(&self) -> Vec<String> {
        let mut state = self.state();
        state
            .in_flight
            .retain(|_, watched| watched.since.elapsed() < WATCHED_AT_MOST);
        state
            .ended
            .retain(|_, ended| ended.at.elapsed() < ENDED_KEPT);
        // A deploy whose subtasks no listing answered is left to its Machine's own read.
        let before = state.collecting.len();
        state
            .collecting
            .retain(|_, collecting| collecting.since.elapsed() < ENDED_KEPT);
        if state.collecting.len() != before {
            let State {
                collecting,
                subtask_of,
                ..
            } = &mut *state;
            subtask_of.retain(|_, parent| collecting.contains_key(parent));
        }
        let mut tasks: Vec<String> = state
            .collecting
            .values()
            .flat_map(|collecting| collecting.to_list.iter().cloned())
            .collect();
        let mut watched: Vec<(&Instant, &String)> = state
            .in_flight
            .values()
            .map(|watched| (&watched.since, &watched.task))
            .collect();
        watched.sort();
        tasks.extend(watched.into_iter().map(|(_, task)| task.clone()));
        tasks
    }

    /// The client of the last Machine that asked.
    fn client(&self) -> Option<Client> {
        self.state().client.clone()
    }

    /// Whether subtasks wait to be listed: the next listing is made at once.
    fn subtasks_due(&self) -> bool {
        self.state()
            .collecting
            .values()
            .any(|collecting| !collecting.to_list.is_empty())
    }

    /// Takes in one listing of the tasks `asked`: each listed task that ended leaves the watch,
    /// is kept for its Machine, and wakes it; a succeeded deploy first has its subtasks listed
    /// ([`HandOver::WithSubtasks`]), and wakes its Machine once they are.
    pub fn take_in(&self, asked: &[String], listed: &[Task]) -> Looked {
        let mut looked = Looked::default();
        let mut state = self.state();
        let mut answered = Vec::new();
        for task in listed {
            let Some(ext_id) = task.ext_id.as_deref() else {
                continue;
            };
            let key = task_uuid_part(ext_id);
            if let Some(parent) = state.subtask_of.remove(&key) {
                answered.push(key.clone());
                take_subtask(&mut state, &parent, &key, task);
                continue;
            }
            let ended = task
                .status
                .as_ref()
                .is_some_and(|status| status.is_terminal());
            if !ended {
                continue;
            }
            let Some(watched) = state.in_flight.remove(&key) else {
                continue;
            };
            let progress = v4_progress(&watched.task, task);
            let succeeded = matches!(progress, TaskProgress::Succeeded { .. });
            if succeeded
                && watched.hand_over == HandOver::WithSubtasks
                && !task.sub_tasks.is_empty()
            {
                start_collecting(&mut state, key, watched.machine, task);
                continue;
            }
            let handed = succeeded && watched.hand_over != HandOver::No;
            state.ended.insert(
                key,
                Ended {
                    at: Instant::now(),
                    progress: handed.then_some(progress),
                    deleted: watched.deletes,
                },
            );
            looked.ended.push(watched.machine);
        }
        // A subtask asked for and not listed is unread, as a `GET` that failed would leave it.
        for id in asked {
            let key = task_uuid_part(id);
            if answered.contains(&key) {
                continue;
            }
            if let Some(parent) = state.subtask_of.remove(&key)
                && let Some(collecting) = state.collecting.get_mut(&parent)
            {
                collecting.to_list.retain(|sub| task_uuid_part(sub) != key);
                collecting.unread.push(id.clone());
            }
        }
        looked.ended.extend(finish_collected(&mut state));
        drop(state);
        self.wake(&looked.ended);
        looked
    }

    /// Gives up listing the subtasks of every succeeded deploy (Prism refused the listing):
    /// each is seen ended, not handed over, and its Machine, woken, reads it itself.
    fn abandon_collecting(&self) {
        let mut state = self.state();
        state.subtask_of.clear();
        let abandoned: Vec<(String, Collecting)> = state.collecting.drain().collect();
        let mut woken = Vec::new();
        for (key, collecting) in abandoned {
            state.ended.insert(
                key,
                Ended {
                    at: Instant::now(),
                    progress: None,
                    deleted: None,
                },
            );
            woken.push(collecting.machine);
        }
        drop(state);
        self.wake(&woken);
    }

    fn wake(&self, machines: &[MachineKey]) {
        for machine in machines {
            // No receiver (no Machine controller yet): the Machine's own poll sees the end.
            let _ = self.wakes.send(machine.clone());
        }
    }

    /// Lists the tasks in flight every [`LOOK_EVERY`] while there are any, and the subtasks of
    /// a succeeded deploy at once; idle otherwise.
    async fn run(self: Arc<Self>) {
        loop {
            let tasks = self.due();
            let Some(client) = self.client().filter(|_| !tasks.is_empty()) else {
                self.added.notified().await;
                continue;
            };
            let mut pause = LOOK_EVERY;
            let mut failed = false;
            for page in tasks.chunks(V4_TASKS_MAX_PAGE) {
                match client.list_v4_tasks(page).await {
                    Ok(listed) => {
                        self.take_in(page, &listed);
                    }
                    // The Machines' own reads follow their tasks meanwhile.
                    Err(error) if error.is_retryable() => {
                        tracing::debug!(%error, tasks = page.len(), "cannot list the tasks in flight");
                        failed = true;
                    }
                    Err(error) => {
                        tracing::warn!(%error, pause = ?REFUSED_PAUSE, "Prism Central refused the task listing: task ends are seen by each Machine's own reads until it is tried again");
                        self.abandon_collecting();
                        pause = REFUSED_PAUSE;
                        failed = true;
                        break;
                    }
                }
            }
            if !failed && self.subtasks_due() {
                continue;
            }
            tokio::time::sleep(pause).await;
        }
    }
}

/// A deploy that succeeded with subtasks: its subtasks are listed next.
fn start_collecting(state: &mut State, key: String, machine: MachineKey, task: &Task) {
    let mut collecting = Collecting {
        machine,
        since: Instant::now(),
        entities: v4_entities(task).collect(),
        to_list: Vec::new(),
        taken: 0,
        unread: Vec::new(),
    };
    let subtasks = task.sub_tasks.iter().filter_map(|sub| sub.ext_id.clone());
    queue_subtasks(state, &key, &mut collecting, subtasks);
    state.collecting.insert(key, collecting);
}

/// Queues `subtasks` of deploy `parent` for listing, up to [`MAX_SUBTASK_READS`] in all; the
/// rest are unread.
fn queue_subtasks(
    state: &mut State,
    parent: &str,
    collecting: &mut Collecting,
    subtasks: impl Iterator<Item = String>,
) {
    for subtask in subtasks {
        if collecting.taken == MAX_SUBTASK_READS {
            collecting.unread.push(subtask);
            continue;
        }
        collecting.taken += 1;
        state
            .subtask_of
            .insert(task_uuid_part(&subtask), parent.to_owned());
        collecting.to_list.push(subtask);
    }
}

/// Takes in a listed subtask `key` of deploy `parent`: its entities, and its own subtasks.
fn take_subtask(state: &mut State, parent: &str, key: &str, task: &Task) {
    let Some(mut collecting) = state.collecting.remove(parent) else {
        return;
    };
    collecting.to_list.retain(|sub| task_uuid_part(sub) != key);
    collecting.entities.extend(v4_entities(task));
    let deeper = task.sub_tasks.iter().filter_map(|sub| sub.ext_id.clone());
    queue_subtasks(state, parent, &mut collecting, deeper);
    state.collecting.insert(parent.to_owned(), collecting);
}

/// Hands over every deploy whose subtasks were all listed (or left unread); returns their
/// Machines, to wake.
fn finish_collected(state: &mut State) -> Vec<MachineKey> {
    let done: Vec<String> = state
        .collecting
        .iter()
        .filter(|(_, collecting)| collecting.to_list.is_empty())
        .map(|(key, _)| key.clone())
        .collect();
    let mut woken = Vec::new();
    for key in done {
        let Some(collecting) = state.collecting.remove(&key) else {
            continue;
        };
        state.ended.insert(
            key,
            Ended {
                at: Instant::now(),
                progress: Some(TaskProgress::Succeeded {
                    entities: dedup_entities(collecting.entities.into_iter()),
                    unread_subtasks: collecting.unread,
                }),
                deleted: None,
            },
        );
        woken.push(collecting.machine);
    }
    woken
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

    fn watch_without_loop(watch: &TaskWatch, task: &str, name: &str, hand_over: HandOver) {
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
        watch_without_loop(&watch, v3, "m-1", HandOver::Listed);
        watch_without_loop(&watch, running, "m-2", HandOver::Listed);
        let looked = watch.take_in(
            &[],
            &[
                listed(&format!("ZXJnb24=:{}", v3.to_uppercase()), "SUCCEEDED"),
                listed(&format!("ZXJnb24=:{running}"), "RUNNING"),
            ],
        );
        assert_eq!(looked.ended, [machine("m-1")]);
        assert_eq!(woken.try_recv().unwrap(), machine("m-1"));
        assert!(woken.try_recv().is_err());
        assert!(watch.end_seen(v3));
        assert!(!watch.end_seen(running));
        let Some((TaskProgress::Succeeded { entities, .. }, _)) = watch.handed_over(v3) else {
            panic!("a success is handed over");
        };
        assert_eq!(entities[0].uuid, "7a1b0c4e-0000-4000-8000-000000000001");
        // Listed again, an ended task wakes nobody.
        assert!(
            watch
                .take_in(&[], &[listed(v3, "SUCCEEDED")])
                .ended
                .is_empty()
        );
        watch.forget(v3);
        assert!(!watch.end_seen(v3));
    }

    #[test]
    fn a_failure_or_a_task_not_handed_over_is_only_seen_ended() {
        let (wakes, _woken) = broadcast::channel(8);
        let watch = TaskWatch::new(wakes);
        let failed = "5f0e8a3c-0000-4000-8000-00000000000c";
        let deploy = "ZXJnb24=:5f0e8a3c-0000-4000-8000-00000000000d";
        watch_without_loop(&watch, failed, "m-1", HandOver::Listed);
        watch_without_loop(&watch, deploy, "m-2", HandOver::No);
        let looked = watch.take_in(
            &[],
            &[listed(failed, "FAILED"), listed(deploy, "SUCCEEDED")],
        );
        assert_eq!(looked.ended.len(), 2);
        assert!(watch.end_seen(failed) && watch.end_seen(deploy));
        assert_eq!(
            watch.handed_over(failed),
            None,
            "its subtasks name the cause"
        );
        assert_eq!(
            watch.handed_over(deploy),
            None,
            "a task not to hand over is only seen ended"
        );
    }

    const TEMPLATE: &str = "0d1e2f30-0000-4000-8000-0000000000aa";
    const DEPLOYED_VM: &str = "7a1b0c4e-0000-4000-8000-0000000000bb";

    /// A listed task with `entities` (extId, rel) and `subtasks`.
    fn task_with(ext_id: &str, status: &str, entities: &[(&str, &str)], subtasks: &[&str]) -> Task {
        serde_json::from_value(json!({
            "extId": ext_id,
            "status": status,
            "entitiesAffected": entities
                .iter()
                .map(|(id, rel)| json!({"extId": id, "rel": rel}))
                .collect::<Vec<_>>(),
            "subTasks": subtasks
                .iter()
                .map(|id| json!({"extId": id, "rel": "subtask"}))
                .collect::<Vec<_>>(),
        }))
        .unwrap()
    }

    #[test]
    fn a_deploy_is_handed_over_with_the_vm_its_subtasks_name_once_they_are_listed() {
        let (wakes, mut woken) = broadcast::channel(8);
        let watch = TaskWatch::new(wakes);
        let deploy = "ZXJnb24=:5f0e8a3c-0000-4000-8000-0000000000d1";
        let create = "ZXJnb24=:5f0e8a3c-0000-4000-8000-0000000000d2";
        let power = "ZXJnb24=:5f0e8a3c-0000-4000-8000-0000000000d3";
        let nested = "ZXJnb24=:5f0e8a3c-0000-4000-8000-0000000000d4";
        let other = "5f0e8a3c-0000-4000-8000-0000000000e1";
        watch_without_loop(&watch, deploy, "m-1", HandOver::WithSubtasks);
        watch_without_loop(&watch, other, "m-2", HandOver::Listed);

        // The deploy names only its template: its subtasks are listed next, before any task
        // in flight, and its Machine is not woken yet (its own read would cost a task read).
        let parent = task_with(
            deploy,
            "SUCCEEDED",
            &[(TEMPLATE, "vmm:content:template")],
            &[create, power],
        );
        let asked = [deploy.to_owned(), other.to_owned()];
        assert!(watch.take_in(&asked, &[parent]).ended.is_empty());
        assert!(woken.try_recv().is_err());
        assert!(!watch.end_seen(deploy));
        assert_eq!(watch.due(), [create, power, other]);

        // One subtask names the VM and has a subtask of its own; the listing leaves out the
        // other, which is unread, as a subtask whose GET failed.
        let asked = [create.to_owned(), power.to_owned()];
        let first = task_with(
            create,
            "SUCCEEDED",
            &[(DEPLOYED_VM, "vmm:ahv:config:vm")],
            &[nested],
        );
        assert!(watch.take_in(&asked, &[first]).ended.is_empty());
        assert_eq!(watch.due(), [nested, other]);

        let last = task_with(nested, "SUCCEEDED", &[], &[]);
        let looked = watch.take_in(&[nested.to_owned()], &[last]);
        assert_eq!(looked.ended, [machine("m-1")]);
        assert_eq!(woken.try_recv().unwrap(), machine("m-1"));
        assert!(watch.end_seen(deploy));
        let Some((
            TaskProgress::Succeeded {
                entities,
                unread_subtasks,
            },
            _,
        )) = watch.handed_over(deploy)
        else {
            panic!("the deploy is handed over");
        };
        let named: Vec<&str> = entities.iter().map(|entity| entity.uuid.as_str()).collect();
        assert_eq!(named, [TEMPLATE, DEPLOYED_VM]);
        assert_eq!(unread_subtasks, [power]);
        assert_eq!(watch.due(), [other]);
    }

    #[test]
    fn a_deploys_subtasks_are_listed_up_to_the_bound_of_the_machines_own_read() {
        let (wakes, _woken) = broadcast::channel(8);
        let watch = TaskWatch::new(wakes);
        let deploy = "ZXJnb24=:5f0e8a3c-0000-4000-8000-0000000000f0";
        watch_without_loop(&watch, deploy, "m-1", HandOver::WithSubtasks);
        let subtasks: Vec<String> = (0..MAX_SUBTASK_READS + 3)
            .map(|n| format!("ZXJnb24=:5f0e8a3c-0000-4000-8000-{n:012}"))
            .collect();
        let refs: Vec<&str> = subtasks.iter().map(String::as_str).collect();
        let parent = task_with(deploy, "SUCCEEDED", &[], &refs);
        watch.take_in(&[deploy.to_owned()], &[parent]);
        assert_eq!(watch.due(), subtasks[..MAX_SUBTASK_READS]);
        let listed: Vec<Task> = subtasks[..MAX_SUBTASK_READS]
            .iter()
            .map(|id| task_with(id, "SUCCEEDED", &[], &[]))
            .collect();
        assert_eq!(watch.take_in(&watch.due(), &listed).ended, [machine("m-1")]);
        let Some((
            TaskProgress::Succeeded {
                unread_subtasks, ..
            },
            _,
        )) = watch.handed_over(deploy)
        else {
            panic!("the deploy is handed over");
        };
        assert_eq!(unread_subtasks, subtasks[MAX_SUBTASK_READS..]);
    }

    #[test]
    fn a_refused_listing_leaves_a_deploy_being_collected_to_its_machine() {
        let (wakes, mut woken) = broadcast::channel(8);
        let watch = TaskWatch::new(wakes);
        let deploy = "ZXJnb24=:5f0e8a3c-0000-4000-8000-0000000000c1";
        let sub = "ZXJnb24=:5f0e8a3c-0000-4000-8000-0000000000c2";
        watch_without_loop(&watch, deploy, "m-1", HandOver::WithSubtasks);
        watch.take_in(
            &[deploy.to_owned()],
            &[task_with(deploy, "SUCCEEDED", &[], &[sub])],
        );
        watch.abandon_collecting();
        assert_eq!(woken.try_recv().unwrap(), machine("m-1"));
        assert!(watch.end_seen(deploy), "its Machine reads it at once");
        assert_eq!(watch.handed_over(deploy), None);
        assert!(watch.due().is_empty());
    }

    #[test]
    fn a_failed_deploy_is_not_collected() {
        let (wakes, _woken) = broadcast::channel(8);
        let watch = TaskWatch::new(wakes);
        let deploy = "ZXJnb24=:5f0e8a3c-0000-4000-8000-0000000000c3";
        let sub = "ZXJnb24=:5f0e8a3c-0000-4000-8000-0000000000c4";
        watch_without_loop(&watch, deploy, "m-1", HandOver::WithSubtasks);
        let looked = watch.take_in(
            &[deploy.to_owned()],
            &[task_with(deploy, "FAILED", &[], &[sub])],
        );
        assert_eq!(looked.ended, [machine("m-1")]);
        assert_eq!(
            watch.handed_over(deploy),
            None,
            "its subtasks name the cause"
        );
        assert!(watch.due().is_empty());
    }
}
