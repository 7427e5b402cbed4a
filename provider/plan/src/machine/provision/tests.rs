use std::time::Duration;

use pretty_assertions::assert_eq;
use prism_types::{
    PrismMessage, PrismMessages, SubtaskError, TaskEnd, TaskEntity, TaskFailure, TransportKind,
};

use super::*;
use crate::machine::{FollowUpOutcome, SendOutcome};

fn failure(detail: &str, subtasks: &[&str]) -> TaskFailure {
    TaskFailure {
        task: "t-1".into(),
        end: TaskEnd::Failed,
        error_code: None,
        error_detail: Some(detail.into()),
        progress_message: None,
        messages: PrismMessages::default(),
        subtask_errors: subtasks
            .iter()
            .map(|detail| SubtaskError {
                task: "t-2".into(),
                end: TaskEnd::Failed,
                error_code: None,
                error_detail: Some((*detail).into()),
                messages: PrismMessages::default(),
            })
            .collect(),
    }
}

#[test]
fn task_failures_are_classified_by_their_causes() {
    use FailureClass::{Invalid, Transient};
    let rows: &[(&str, &[&str], FailureClass)] = &[
        // The real cause is in a subtask (CAPX #783).
        (
            "Internal Error",
            &["IP pool of subnet 'vm-network' is exhausted"],
            Transient,
        ),
        ("Internal Error", &[], Transient),
        // A generic parent error does not hide the subtask's verdict.
        (
            "Internal Error",
            &["Invalid argument: memory must be a multiple of 4 MiB"],
            Invalid,
        ),
        ("", &["Insufficient memory on host"], Transient),
        ("Operation timed out", &[], Transient),
        (
            "Invalid argument: memory_size_mib must be a multiple of 2",
            &[],
            Invalid,
        ),
        (
            "Machine type must be set to Q35 for secure boot",
            &[],
            Invalid,
        ),
        ("Operation not supported for VM with GPU", &[], Invalid),
        // Transient words win: this is about Prism's state, not the request.
        ("Invalid state: the host is busy, try again", &[], Transient),
        // Unknown causes are retried, never fatal.
        ("Something odd happened", &[], Transient),
        ("", &[], Transient),
    ];
    for (detail, subtasks, expected) in rows {
        assert_eq!(
            classify_task_failure(&failure(detail, subtasks)),
            *expected,
            "{detail:?} {subtasks:?}"
        );
    }
}

#[test]
fn error_codes_count_too() {
    let mut failure = failure("", &[]);
    failure.error_code = Some("INVALID_ARGUMENT".into());
    assert_eq!(classify_task_failure(&failure), FailureClass::Invalid);
}

fn messages(reason: &str, details: Option<&str>) -> PrismMessages {
    PrismMessages(vec![PrismMessage {
        reason: Some(reason.into()),
        message: Some("Request could not be processed.".into()),
        details: details.map(str::to_owned),
        ..PrismMessage::default()
    }])
}

#[test]
fn create_errors_are_classified() {
    let conflict = Error::Conflict {
        endpoint: "POST /vms",
        messages: messages("ENTITY_ALREADY_EXISTS", None),
    };
    let reservation = Error::Invalid {
        endpoint: "POST /vms",
        status: 422,
        messages: messages(
            "INVALID_REQUEST",
            Some(
                r#"{"metadata.uuid":["u was not reserved through idempotence_identifiers, or its reservation expired"]}"#,
            ),
        ),
    };
    let invalid = Error::Invalid {
        endpoint: "POST /vms",
        status: 422,
        messages: messages(
            "INVALID_REQUEST",
            Some(r#"{"spec.resources.num_sockets":["must be at most 240"]}"#),
        ),
    };
    let missing = Error::NotFound {
        endpoint: "POST /vms/{uuid}/clone",
        messages: messages("ENTITY_NOT_FOUND", None),
    };
    let rate_limited = Error::RateLimited {
        endpoint: "POST /vms",
        retry_after: Some(Duration::from_secs(3)),
    };
    let server = Error::Server {
        endpoint: "POST /vms",
        status: 500,
        messages: PrismMessages::default(),
        retry_after: None,
    };
    let transport = Error::Transport {
        endpoint: "POST /vms",
        kind: TransportKind::Timeout,
        detail: "timed out".into(),
    };
    let unauthorized = Error::Unauthorized {
        endpoint: "POST /vms",
    };

    assert_eq!(
        classify_create_error(&conflict, true),
        CreateCallOutcome::Conflict
    );
    assert_eq!(
        classify_create_error(&conflict, false),
        CreateCallOutcome::Retry,
        "a deploy carries no UUID a 409 could be about"
    );
    assert_eq!(
        classify_create_error(&reservation, true),
        CreateCallOutcome::ReservationRejected
    );
    assert!(matches!(
        classify_create_error(&reservation, false),
        CreateCallOutcome::Invalid(_)
    ));
    let CreateCallOutcome::Invalid(message) = classify_create_error(&invalid, true) else {
        panic!()
    };
    assert!(message.contains("num_sockets"), "{message}");
    assert!(matches!(
        classify_create_error(&missing, true),
        CreateCallOutcome::SourceMissing(_)
    ));
    for retry in [&rate_limited, &server, &transport, &unauthorized] {
        assert_eq!(
            classify_create_error(retry, true),
            CreateCallOutcome::Retry,
            "{retry}"
        );
    }
}

fn task(operation: TaskOperation) -> PendingTask {
    PendingTask {
        id: "t-1".into(),
        operation,
        started: None,
        source_vm: None,
    }
}

#[test]
fn task_reads() {
    let running = TaskProgress::Running {
        status: "RUNNING".into(),
        percentage_complete: Some(40),
    };
    assert_eq!(
        read_task(
            &task(TaskOperation::Create),
            &running,
            TaskContext::default()
        ),
        TaskReading::Running {
            status: "RUNNING".into()
        }
    );
    let vm = TaskEntity {
        kind: "vmm:ahv:config:vm".into(),
        uuid: "ABCDEF00-0000-4000-8000-000000000001".into(),
    };
    let cluster = TaskEntity {
        kind: "clustermgmt:config:cluster".into(),
        uuid: "c".into(),
    };
    let deployed = TaskProgress::Succeeded {
        entities: vec![cluster.clone(), vm],
        unread_subtasks: Vec::new(),
    };
    assert_eq!(
        read_task(
            &task(TaskOperation::Deploy),
            &deployed,
            TaskContext::default()
        ),
        TaskReading::Created {
            vm_uuid: Some("abcdef00-0000-4000-8000-000000000001".into())
        },
        "the VM among the affected entities, lower case"
    );
    assert_eq!(
        read_task(
            &task(TaskOperation::Deploy),
            &TaskProgress::Succeeded {
                entities: vec![cluster],
                unread_subtasks: Vec::new(),
            },
            TaskContext::default()
        ),
        TaskReading::DeployedVmUnnamed,
        "a succeeded deploy that names no VM is not a failure: deploying again would make a second VM"
    );
    let created = TaskProgress::Succeeded {
        entities: Vec::new(),
        unread_subtasks: Vec::new(),
    };
    assert_eq!(
        read_task(
            &task(TaskOperation::Clone),
            &created,
            TaskContext {
                recorded_vm: Some("v-1"),
                ..TaskContext::default()
            }
        ),
        TaskReading::Created { vm_uuid: None }
    );
    assert_eq!(
        read_task(
            &task(TaskOperation::FollowUp),
            &created,
            TaskContext {
                recorded_vm: Some("v-1"),
                ..TaskContext::default()
            }
        ),
        TaskReading::FollowUpApplied
    );
    let failed = TaskProgress::Failed(Box::new(failure(
        "Internal Error",
        &["IP pool of subnet 'vm-network' is exhausted"],
    )));
    let TaskReading::Failed { class, message } = read_task(
        &task(TaskOperation::Create),
        &failed,
        TaskContext::default(),
    ) else {
        panic!()
    };
    assert_eq!(class, FailureClass::Transient);
    assert!(
        message.contains("Internal Error") && message.contains("exhausted"),
        "the subtask's error is shown: {message}"
    );
}

#[test]
fn a_transient_failure_drops_the_task_and_a_deploys_request_id() {
    let mut status = NutanixMachineProviderStatus {
        vm_uuid: Some("u".into()),
        pending_task: Some(task(TaskOperation::Create)),
        ..Default::default()
    };
    after_transient_failure(&mut status);
    assert_eq!(status.pending_task, None);
    assert_eq!(
        status.vm_uuid.as_deref(),
        Some("u"),
        "kept until Prism says no VM has it"
    );

    let mut status = NutanixMachineProviderStatus {
        deploy_request_id: Some("r".into()),
        pending_task: Some(task(TaskOperation::Deploy)),
        ..Default::default()
    };
    after_transient_failure(&mut status);
    assert_eq!(status.pending_task, None);
    assert_eq!(status.deploy_request_id, None);
}

#[test]
fn the_follow_up_round_trips_through_the_status() {
    let update = FollowUpUpdate {
        description: "openshift-machine: ns/m uid=1".into(),
        categories: [("k".to_owned(), "v".to_owned())].into(),
        project_uuid: None,
        resize_system_disk_mib: Some(40960),
        vtpm_enabled: true,
        power_on: true,
        reassert_power: false,
    };
    let status = NutanixMachineProviderStatus {
        pending_follow_up: Some(follow_up_value(&update)),
        ..Default::default()
    };
    let round_tripped: NutanixMachineProviderStatus =
        NutanixMachineProviderStatus::from_value(Some(&status.to_value())).unwrap();
    assert_eq!(pending_follow_up(&round_tripped), Some(update));
}

#[test]
fn a_task_is_first_read_when_tasks_of_its_kind_usually_end() {
    let poll = Duration::from_millis(500);
    assert_eq!(
        first_task_read_after(None, poll),
        poll,
        "nothing learned yet"
    );
    assert_eq!(
        first_task_read_after(Some(Duration::from_secs(10)), poll),
        Duration::from_secs(8),
        "four fifths of the recent minimum"
    );
    assert_eq!(
        first_task_read_after(Some(Duration::from_millis(300)), poll),
        poll,
        "never sooner than the read interval"
    );
}

#[test]
fn a_delete_is_first_looked_at_no_later_than_deletions_were_seen_to_last() {
    let poll = Duration::from_millis(500);
    let secs = Duration::from_secs_f64;
    let seen = |gone: f64, still_there: f64| DeletionSeen {
        gone_after: secs(gone),
        still_there_after: secs(still_there),
    };
    // (recent deletions, first look, why)
    let table: &[(&[DeletionSeen], Duration, &str)] = &[
        (&[], poll, "nothing learned yet"),
        (
            &[seen(2.0, 1.5), seen(2.5, 2.0)],
            secs(1.6),
            "four fifths of the shortest time to the 404, as for a task",
        ),
        (
            &[seen(10.0, 8.0), seen(12.0, 0.0)],
            secs(8.0),
            "a deletion seen going for 8 s: looked at after four fifths of 10 s",
        ),
        // The scale-down's loop: with a backlog every first look is late and finds the VM gone,
        // so the times to the 404 are the queue's, not Prism's. They must not set the wait.
        (
            &[seen(24.0, 0.0), seen(25.0, 0.0), seen(30.0, 0.0)],
            poll,
            "every deletion over at its first look, however late that look was",
        ),
        (
            &[seen(24.0, 1.0), seen(25.0, 0.0)],
            secs(1.5),
            "no later than a poll after the longest a deletion was seen going",
        ),
        (
            &[seen(0.3, 0.0)],
            poll,
            "never sooner than the poll interval",
        ),
    ];
    for (recent, expected, why) in table {
        assert_eq!(first_delete_look_after(recent, poll), *expected, "{why}");
    }
}

fn view(listed: Option<Option<&EntityState>>, named: bool, after_start: bool) -> ListingView<'_> {
    ListingView {
        listed,
        named,
        after_start,
        powered_on: true,
        follow_up_shown: false,
        past_usual_end: false,
    }
}

#[test]
fn a_create_listed_complete_but_powered_off_is_read_from_its_task() {
    // A failed power-on leaves the VM COMPLETE and OFF (CAPX #783): only the task says so.
    let (young, requeue) = (Duration::from_secs(1), Duration::from_secs(30));
    let off = ListingView {
        powered_on: false,
        ..view(Some(Some(&EntityState::Complete)), false, true)
    };
    assert_eq!(
        listing_says(&TaskOperation::Create, young, requeue, off),
        ListingSays::ReadTask
    );
    assert_eq!(
        listing_says(&TaskOperation::Clone, young, requeue, off),
        ListingSays::Created,
        "a clone is powered on by its follow-up"
    );
}

#[test]
fn a_listed_complete_vm_ends_a_create_and_an_absent_one_is_still_running() {
    let (young, requeue) = (Duration::from_secs(1), Duration::from_secs(30));
    let complete = Some(Some(&EntityState::Complete));
    for operation in [TaskOperation::Create, TaskOperation::Clone] {
        assert_eq!(
            listing_says(&operation, young, requeue, view(complete, false, false)),
            ListingSays::Created
        );
        assert_eq!(
            listing_says(&operation, young, requeue, view(None, true, true)),
            ListingSays::Running
        );
        assert_eq!(
            listing_says(
                &operation,
                young,
                requeue,
                view(Some(Some(&EntityState::Error)), false, true)
            ),
            ListingSays::ReadTask,
            "a VM in another state: the task says why"
        );
    }
}

#[test]
fn a_follow_up_is_read_once_a_later_listing_shows_the_vm_complete_again() {
    let (young, requeue) = (Duration::from_secs(1), Duration::from_secs(30));
    let complete = Some(Some(&EntityState::Complete));
    let pending = Some(Some(&EntityState::Pending));
    let follow_up = TaskOperation::FollowUp;
    assert_eq!(
        listing_says(&follow_up, young, requeue, view(complete, false, true)),
        ListingSays::ReadTask,
        "COMPLETE without the update's effects: the task says why"
    );
    let shown = |view: ListingView<'static>| ListingView {
        follow_up_shown: true,
        ..view
    };
    assert_eq!(
        listing_says(
            &follow_up,
            young,
            requeue,
            shown(view(complete, false, true))
        ),
        ListingSays::Applied
    );
    assert_eq!(
        listing_says(
            &follow_up,
            Duration::from_secs(900),
            requeue,
            shown(view(complete, false, true))
        ),
        ListingSays::Applied,
        "an old follow-up the listing shows applied needs no read either"
    );
    assert_eq!(
        listing_says(
            &follow_up,
            young,
            requeue,
            shown(view(complete, false, false))
        ),
        ListingSays::Running,
        "a listing from before the update proves nothing, whatever it shows"
    );
    assert_eq!(
        listing_says(
            &follow_up,
            young,
            requeue,
            shown(view(pending, false, true))
        ),
        ListingSays::Running,
        "PENDING: the update's intent is not applied yet"
    );
    assert_eq!(
        listing_says(&follow_up, young, requeue, view(complete, false, false)),
        ListingSays::Running,
        "a listing from before the update proves nothing"
    );
    assert_eq!(
        listing_says(&follow_up, young, requeue, view(pending, false, true)),
        ListingSays::Running
    );
    assert_eq!(
        listing_says(&follow_up, young, requeue, view(None, false, true)),
        ListingSays::ReadTask,
        "not listed (list lag): the task is the only witness"
    );
}

#[test]
fn a_deploy_is_read_once_a_later_listing_shows_the_machines_name() {
    let (young, requeue) = (Duration::from_secs(1), Duration::from_secs(30));
    let deploy = TaskOperation::Deploy;
    assert_eq!(
        listing_says(&deploy, young, requeue, view(None, true, true)),
        ListingSays::ReadTask
    );
    assert_eq!(
        listing_says(&deploy, young, requeue, view(None, true, false)),
        ListingSays::Running
    );
    assert_eq!(
        listing_says(&deploy, young, requeue, view(None, false, true)),
        ListingSays::Running
    );
}

#[test]
fn an_old_task_is_read_unless_the_listing_shows_its_vm_created() {
    let requeue = Duration::from_secs(30);
    assert!(!task_read_directly(Duration::from_secs(89), requeue));
    assert!(task_read_directly(Duration::from_secs(90), requeue));
    assert_eq!(
        listing_says(
            &TaskOperation::Create,
            Duration::from_secs(90),
            requeue,
            view(None, false, false)
        ),
        ListingSays::ReadTask,
        "a failed create's VM never shows up"
    );
    let complete = EntityState::Complete;
    let listed_on = ListingView {
        listed: Some(Some(&complete)),
        named: false,
        after_start: true,
        powered_on: true,
        follow_up_shown: false,
        past_usual_end: false,
    };
    for (operation, listed) in [
        (TaskOperation::Create, listed_on),
        (
            TaskOperation::Clone,
            ListingView {
                powered_on: false,
                ..listed_on
            },
        ),
    ] {
        assert_eq!(
            listing_says(&operation, Duration::from_secs(900), requeue, listed),
            ListingSays::Created,
            "{operation:?}: the listing shows what the task would"
        );
    }
    let listed_off = ListingView {
        powered_on: false,
        ..listed_on
    };
    assert_eq!(
        listing_says(
            &TaskOperation::Create,
            Duration::from_secs(90),
            requeue,
            listed_off
        ),
        ListingSays::ReadTask,
        "a create listed but off: only the task says why"
    );
    assert_eq!(
        listing_says(
            &TaskOperation::FollowUp,
            Duration::from_secs(90),
            requeue,
            view(Some(Some(&complete)), false, false)
        ),
        ListingSays::ReadTask,
        "an old follow-up is read, listed or not"
    );
}

#[test]
fn a_listing_counts_as_after_a_task_only_a_second_past_its_recorded_time() {
    let started: Timestamp = "2026-11-30T00:00:00Z".parse().unwrap();
    let at = |s: &str| -> Timestamp { s.parse().unwrap() };
    assert!(!listed_after(at("2026-11-30T00:00:00.900Z"), Some(started)));
    assert!(!listed_after(at("2026-11-30T00:00:01Z"), Some(started)));
    assert!(listed_after(at("2026-11-30T00:00:01.100Z"), Some(started)));
    assert!(!listed_after(at("2026-11-30T00:10:00Z"), None));
}

fn vm_entity(uuid: &str) -> TaskEntity {
    TaskEntity {
        kind: "vm".into(),
        uuid: uuid.into(),
    }
}

fn succeeded(uuids: &[&str]) -> TaskProgress {
    TaskProgress::Succeeded {
        entities: uuids.iter().map(|uuid| vm_entity(uuid)).collect(),
        unread_subtasks: Vec::new(),
    }
}

#[test]
fn a_clone_that_prism_gave_another_uuid_is_adopted_with_that_uuid() {
    let clone = PendingTask {
        source_vm: Some("source-0".into()),
        ..task(TaskOperation::Clone)
    };
    let cases: &[(&[&str], Option<&str>, &str)] = &[
        (
            &["RESERVED-1"],
            Some("reserved-1"),
            "the reserved UUID named",
        ),
        (
            &["source-0", "reserved-1"],
            Some("reserved-1"),
            "source named beside it",
        ),
        (
            &["OTHER-2"],
            Some("other-2"),
            "another UUID: adopt it, lower case",
        ),
        (
            &["source-0", "other-2"],
            Some("other-2"),
            "never the source VM",
        ),
        (
            &["source-0"],
            None,
            "only the source: the recorded UUID stands",
        ),
        (&["other-2", "other-3"], None, "two strangers: take neither"),
        (&[], None, "no entity"),
    ];
    for (entities, expected, why) in cases {
        assert_eq!(
            read_task(
                &clone,
                &succeeded(entities),
                TaskContext {
                    recorded_vm: Some("reserved-1"),
                    ..TaskContext::default()
                }
            ),
            TaskReading::Created {
                vm_uuid: expected.map(str::to_owned)
            },
            "{why}"
        );
    }
    assert_eq!(
        read_task(
            &task(TaskOperation::Create),
            &succeeded(&["other-2"]),
            TaskContext {
                recorded_vm: Some("reserved-1"),
                ..TaskContext::default()
            }
        ),
        TaskReading::Created {
            vm_uuid: Some("other-2".into())
        },
        "a v3 create is read the same way"
    );
}

#[test]
fn a_deploy_found_through_its_subtasks_names_its_vm() {
    // The shape of a real kVmTemplateDeploy task: the parent names only the template, the
    // subtask read with it names the VM (prism-client merges both into `entities`).
    let entities = vec![
        TaskEntity {
            kind: "vmm:content:templates".into(),
            uuid: "template-1".into(),
        },
        TaskEntity {
            kind: "vmm:ahv:config:vm".into(),
            uuid: "VM-9".into(),
        },
    ];
    assert_eq!(
        read_task(
            &task(TaskOperation::Deploy),
            &TaskProgress::Succeeded {
                entities,
                unread_subtasks: Vec::new()
            },
            TaskContext::default()
        ),
        TaskReading::Created {
            vm_uuid: Some("vm-9".into())
        }
    );
}

fn identity(uid: &str) -> MachineIdentity {
    MachineIdentity {
        namespace: "openshift-machine-api".into(),
        name: "win-0".into(),
        uid: uid.into(),
    }
}

#[test]
fn a_deployed_vm_is_found_by_name_only_when_exactly_one_fits() {
    let started: Timestamp = "2026-12-01T10:00:00Z".parse().unwrap();
    let at = |text: &str| Some(text.parse::<Timestamp>().unwrap());
    let machine = identity("uid-1");
    let candidate = |uuid: &str, created, identity| DeployCandidate {
        uuid: uuid.into(),
        created,
        identity,
        categories: Default::default(),
    };
    let fresh = candidate("VM-1", at("2026-12-01T10:00:03Z"), None);
    let old = candidate("vm-0", at("2026-12-01T09:00:00Z"), None);
    let foreign = candidate("vm-2", at("2026-12-01T10:00:04Z"), Some(identity("uid-2")));
    let ours = candidate("vm-3", at("2026-12-01T10:00:05Z"), Some(machine.clone()));
    let truncated = candidate("vm-4", at("2026-12-01T09:59:59.5Z"), None);
    let undated = candidate("vm-5", None, None);
    let find = |vms: &[DeployCandidate]| deployed_vm_by_name(vms, &machine, Some(started));
    assert_eq!(
        find(&[fresh.clone(), old.clone(), foreign.clone(), undated.clone()]),
        DeployedByName::One("vm-1".into()),
        "older VMs, another Machine's and undated ones are not taken"
    );
    assert_eq!(
        find(std::slice::from_ref(&ours)),
        DeployedByName::One("vm-3".into())
    );
    assert_eq!(
        find(&[truncated]),
        DeployedByName::One("vm-4".into()),
        "the recorded start keeps whole seconds"
    );
    assert_eq!(find(&[old, foreign]), DeployedByName::NotFound);
    assert_eq!(
        find(&[fresh.clone(), ours]),
        DeployedByName::Several(vec!["vm-1".into(), "vm-3".into()])
    );
    assert_eq!(
        deployed_vm_by_name(&[fresh], &machine, None),
        DeployedByName::NotFound,
        "without a recorded start nothing is provably new"
    );
}

fn message(reason: Option<&str>, code: Option<&str>, group: Option<&str>) -> PrismMessage {
    PrismMessage {
        reason: reason.map(str::to_owned),
        code: code.map(str::to_owned),
        error_group: group.map(str::to_owned),
        message: Some("text".into()),
        details: None,
    }
}

#[test]
fn prisms_error_identifiers_decide_before_any_words() {
    use FailureClass::{Invalid, Transient};
    let with = |detail: &str, error_code: Option<&str>, messages: Vec<PrismMessage>| TaskFailure {
        error_code: error_code.map(str::to_owned),
        messages: PrismMessages(messages),
        ..failure(detail, &[])
    };
    let rows: Vec<(TaskFailure, FailureClass, &str)> = vec![
        (
            with(
                "invalid state: request rate too high",
                None,
                vec![message(
                    Some("RATE_LIMIT_EXCEEDED"),
                    None,
                    Some("RATE_LIMIT_EXCEEDED"),
                )],
            ),
            Transient,
            "an 'invalid' in the text does not fail a rate-limited task",
        ),
        (
            with(
                "operation timed out while validating",
                None,
                vec![message(Some("INVALID_REQUEST"), None, None)],
            ),
            Invalid,
            "a 'timed out' in the text does not retry a refused request",
        ),
        (
            with(
                "Edit conflict: please retry change.",
                None,
                vec![message(Some("CONCURRENT_REQUESTS_NOT_ALLOWED"), None, None)],
            ),
            Transient,
            "a v3 edit conflict",
        ),
        (
            with("cannot be applied", Some("VMM-30303"), Vec::new()),
            Transient,
            "a v4 ETag mismatch, by its code alone",
        ),
        (
            with("something unheard of", Some("1234"), Vec::new()),
            Transient,
            "an unknown numeric code falls back to the words, and unknown words retry",
        ),
    ];
    for (failure, class, why) in rows {
        assert_eq!(classify_task_failure(&failure), class, "{why}");
        assert_eq!(failure_advice(&failure, false), None, "{why}");
    }
}

#[test]
fn secure_boot_with_customization_is_a_permanent_failure_that_names_cause_and_fix() {
    // The shape of nutanix/nutanix.ansible#876: the parent's error is generic, the subtask's
    // v4 message carries VMM-30102.
    let mut failed = failure("Internal Error", &[]);
    failed.subtask_errors.push(SubtaskError {
        task: "t-3".into(),
        end: TaskEnd::Failed,
        error_code: Some("VMM-30102".into()),
        error_detail: Some(
            "Failed to perform the operation as the backend service could not find the entity"
                .into(),
        ),
        messages: PrismMessages(vec![message(
            Some("VM_INVALID_ARGUMENT"),
            Some("VMM-30102"),
            Some("VM_INVALID_ARGUMENT"),
        )]),
    });
    assert_eq!(classify_task_failure(&failed), FailureClass::Invalid);
    let TaskReading::Failed { class, message } = read_task(
        &task(TaskOperation::Create),
        &TaskProgress::Failed(Box::new(failed)),
        TaskContext {
            recorded_vm: Some("v-1"),
            ..TaskContext::default()
        },
    ) else {
        panic!("a failure")
    };
    assert_eq!(class, FailureClass::Invalid);
    assert!(
        message.starts_with(SECURE_BOOT_CUSTOMIZATION_REFUSED) && message.contains("bootType UEFI"),
        "{message}"
    );
}

#[test]
fn a_task_not_shown_ended_after_the_slowest_recent_one_is_read_at_once() {
    let (young, requeue) = (Duration::from_secs(12), Duration::from_secs(30));
    let overdue = |view: ListingView<'static>| ListingView {
        past_usual_end: true,
        ..view
    };
    // Not listed although every recent create had ended by then: failed (its VM never shows
    // up) or slower than all of them; either way only the task tells, so it is read now rather
    // than after DIRECT_TASK_READS_AFTER requeue intervals.
    for operation in [TaskOperation::Create, TaskOperation::Clone] {
        assert_eq!(
            listing_says(&operation, young, requeue, view(None, false, true)),
            ListingSays::Running,
            "{operation:?}: within the usual time"
        );
        assert_eq!(
            listing_says(&operation, young, requeue, overdue(view(None, false, true))),
            ListingSays::ReadTask,
            "{operation:?}: past the usual time"
        );
    }
    // A VM shown created is created, however long it took.
    assert_eq!(
        listing_says(
            &TaskOperation::Create,
            young,
            requeue,
            overdue(view(Some(Some(&EntityState::Complete)), false, true))
        ),
        ListingSays::Created
    );
}

#[test]
fn the_usual_end_is_the_slowest_recent_task_after_the_recorded_start() {
    let started: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
    let at = |seconds: i64| started + SignedDuration::from_secs(seconds);
    let slowest = Some(Duration::from_secs(8));
    // (listing began after the start, slowest known, past the usual end)
    let table = [
        (9, slowest, false),
        (10, slowest, true),
        (60, None, false),
        (60, slowest, true),
    ];
    for (seconds, slowest, past) in table {
        assert_eq!(
            past_usual_end(at(seconds), Some(started), slowest),
            past,
            "listed {seconds} s after the start, slowest {slowest:?}"
        );
    }
    assert!(
        !past_usual_end(at(60), None, slowest),
        "no recorded start: nothing assumed"
    );
    assert!(
        !past_usual_end(at(60), Some(started), Some(Duration::MAX)),
        "no overflow"
    );
}

/// Errors of the follow-up update are classified here, as a create's are, not by the executor.
#[test]
fn a_follow_up_error_is_a_conflict_an_invalid_update_or_a_retry() {
    let conflict = Error::Conflict {
        endpoint: "PUT /vms/{uuid}",
        messages: PrismMessages::default(),
    };
    let server = Error::Server {
        endpoint: "PUT /vms/{uuid}",
        status: 503,
        messages: PrismMessages::default(),
        retry_after: None,
    };
    let invalid = Error::Invalid {
        endpoint: "PUT /vms/{uuid}",
        status: 422,
        messages: messages(
            "INVALID_REQUEST",
            Some(r#"{"num_sockets":["must be positive"]}"#),
        ),
    };
    assert_eq!(
        FollowUpOutcome::of_error(&conflict),
        FollowUpOutcome::Conflict
    );
    assert_eq!(FollowUpOutcome::of_error(&server), FollowUpOutcome::Retry);
    assert!(matches!(
        FollowUpOutcome::of_error(&invalid),
        FollowUpOutcome::Invalid(_)
    ));
    assert_eq!(
        SendOutcome::of_error(&conflict, true),
        SendOutcome::Conflict(conflict.to_string())
    );
    assert_eq!(SendOutcome::of_error(&server, true), SendOutcome::Retry);
}
