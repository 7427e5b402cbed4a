//! prism-mock's `/v4.0/` answers read strictly with the models of Nutanix's official v4.0 Python SDKs
//! (ntnx-vmm-py-client and ntnx-prism-py-client 4.0.x): no field the v4.0 model lacks, no value its
//! constraints refuse, `$reserved` as the model carries it (sdk-check/check_v4.py). The SDKs are
//! installed at 4.0.1 by package name into a venv under the target directory; where Python 3, its
//! venv module or the packages are missing, it prints why it is skipped and passes.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use std::path::Path;
use std::process::Stdio;

use common::python::sdk_python;
use common::{Api, V3, start, wait_for};
use prism_mock::{DeployTaskShape, FaultKind, FaultRule};
use reqwest::Method;
use serde_json::{Value, json};
use tokio::process::Command;

const CHECK: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/sdk-check/check_v4.py");

/// The SDKs' v4.0 releases, whose models are the v4.0 API's.
const V4_0_PACKAGES: [&str; 2] = ["ntnx-vmm-py-client==4.0.1", "ntnx-prism-py-client==4.0.1"];

/// Reads a v4.0 task until it ends.
async fn ended_task(api: &Api, ext_id: &str) -> Value {
    wait_for(|| async {
        let reply = api
            .get(&format!("/api/prism/v4.0/config/tasks/{ext_id}"))
            .await;
        assert_eq!(reply.status, 200, "{}", reply.text);
        let status = reply.body["data"]["status"].as_str().unwrap().to_owned();
        (status == "SUCCEEDED" || status == "FAILED").then_some(reply.body)
    })
    .await
}

/// Deploys the seed's template once with `request_id`; the ended task and its subtasks' answers.
async fn deploy(api: &Api, template: &str, pe: &str, request_id: &str) -> (Value, Vec<Value>) {
    let reply = api
        .call(
            Method::POST,
            &format!("/api/vmm/v4.0/content/templates/{template}/$actions/deploy"),
            Some(&json!({"numberOfVms": 1, "clusterReference": pe})),
            &[("NTNX-Request-Id", request_id)],
        )
        .await;
    assert_eq!(reply.status, 202, "{}", reply.text);
    let task = ended_task(api, reply.body["data"]["extId"].as_str().unwrap()).await;
    let mut subtasks = Vec::new();
    for sub in task["data"]["subTasks"].as_array().into_iter().flatten() {
        subtasks.push(ended_task(api, sub["extId"].as_str().unwrap()).await);
    }
    (json!([reply.body, task]), subtasks)
}

#[tokio::test]
async fn v4_0_answers_are_read_strictly_by_the_official_v4_0_sdk_models() {
    let python = match sdk_python("ntnx-sdk-v4.0-venv", &V4_0_PACKAGES).await {
        Ok(python) => python,
        Err(reason) => {
            println!("skipped: {reason}");
            return;
        }
    };
    let mock = start().await;
    let api = Api::new(&mock);
    let seeded = api.seeded().await;
    let mut answers: Vec<(String, Value)> = Vec::new();
    let list = api.get("/api/vmm/v4.0/content/templates").await;
    assert_eq!(list.status, 200, "{}", list.text);
    let template = list.body["data"][0]["extId"].as_str().unwrap().to_owned();
    answers.push(("list templates".into(), list.body));
    answers.push((
        "empty page of templates".into(),
        api.get("/api/vmm/v4.0/content/templates?$page=5")
            .await
            .body,
    ));
    answers.push((
        "get template".into(),
        api.get(&format!("/api/vmm/v4.0/content/templates/{template}"))
            .await
            .body,
    ));
    let (shape, subtasks) = deploy(&api, &template, &seeded.pe, "sdk-subtasks").await;
    assert_eq!(subtasks.len(), 1);
    answers.push(("deploy".into(), shape[0].clone()));
    answers.push(("deploy task, VM on a subtask".into(), shape[1].clone()));
    answers.push(("deploy's subtask".into(), subtasks[0].clone()));
    mock.admin()
        .set_deploy_task_shape(DeployTaskShape::VmsOnParentTask);
    let (shape, _) = deploy(&api, &template, &seeded.pe, "sdk-parent").await;
    answers.push(("deploy task, VM on the parent".into(), shape[1].clone()));
    mock.admin().add_fault(
        FaultRule::new(
            Some("POST"),
            "*/$actions/deploy",
            FaultKind::FailTask {
                error: "IP pool exhausted".into(),
                leave_vm_in_error: false,
            },
        )
        .times(1),
    );
    let (shape, subtasks) = deploy(&api, &template, &seeded.pe, "sdk-failed").await;
    assert_eq!(shape[1]["data"]["status"], "FAILED");
    answers.push(("failed deploy task".into(), shape[1].clone()));
    for sub in subtasks {
        answers.push(("failed deploy's subtask".into(), sub));
    }
    // A v3 create's task read through v4.0.
    let created = api
        .post(
            &format!("{V3}/vms"),
            &seeded.vm_body("sdk-vm", &seeded.rhcos, "OFF"),
        )
        .await;
    answers.push((
        "v3 create task through v4.0".into(),
        ended_task(&api, created.task_uuid()).await,
    ));
    // The VM's v4.0 GET and the answer to its PUT with the GET's ETag.
    let vm_path = format!("/api/vmm/v4.0/ahv/config/vms/{}", created.uuid());
    let read = api.get(&vm_path).await;
    assert_eq!(read.status, 200, "{}", read.text);
    let etag = read.headers["etag"].to_str().unwrap().to_owned();
    let mut changed = read.body["data"].clone();
    changed["description"] = json!("read, then updated");
    answers.push(("get VM".into(), read.body));
    let updated = api
        .call(
            Method::PUT,
            &vm_path,
            Some(&changed),
            &[("If-Match", &etag)],
        )
        .await;
    assert_eq!(updated.status, 202, "{}", updated.text);
    answers.push(("update VM".into(), updated.body));

    let answers: Vec<Value> = answers
        .into_iter()
        .map(|(label, body)| json!({"label": label, "body": body}))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("answers.json");
    std::fs::write(&file, serde_json::to_vec_pretty(&answers).unwrap()).unwrap();
    let output = Command::new(&python)
        .arg(Path::new(CHECK))
        .arg(&file)
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    match output.status.code() {
        Some(0) => println!("{}", stdout.trim()),
        Some(2) => {
            println!("skipped: {}{}", stdout.trim(), stderr.trim());
            return;
        }
        _ => panic!("the v4.0 models refuse prism-mock's answers:\n{stdout}\n{stderr}"),
    }
    assert!(
        stdout.contains(&format!("{} answers checked, 0 problems", answers.len())),
        "{stdout}"
    );
}
