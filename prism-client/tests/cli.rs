//! The `prism` example driven as an operator would, against a local server.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;
#[path = "../examples/prism.rs"]
#[allow(dead_code)] // its `main` is not called here
mod prism_cli;

use axum::Json;
use axum::Router;
use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use serde_json::{Value, json};

use common::{PASSWORD, Sessions, USERNAME, serve, vm_json};

struct Output {
    code: i32,
    stdout: String,
    stderr: String,
}

async fn prism(args: &[&str], password_env: Option<&str>) -> Output {
    let argv = std::iter::once("prism".to_owned()).chain(args.iter().map(|arg| (*arg).to_owned()));
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    let code = prism_cli::run(
        argv,
        password_env.map(str::to_owned),
        &mut stdout,
        &mut stderr,
    )
    .await;
    Output {
        code,
        stdout: String::from_utf8(stdout).unwrap(),
        stderr: String::from_utf8(stderr).unwrap(),
    }
}

fn inventory() -> Router {
    Sessions::default()
        .router()
        .route(
            "/api/nutanix/v3/vms/list",
            post(|Json(body): Json<Value>| async move {
                let offset = body["offset"].as_u64().unwrap() as usize;
                let all: Vec<Value> = (0..130)
                    .map(|i| {
                        let mut vm = vm_json(&format!("u-{i}"), &format!("vm-{i}"));
                        vm["status"]["resources"] = json!({"power_state": "ON", "nic_list": [
                            {"ip_endpoint_list": [{"ip": format!("10.0.0.{i}"), "type": "LEARNED"}]}]});
                        vm
                    })
                    .collect();
                let page: Vec<Value> = all.into_iter().skip(offset).take(100).collect();
                Json(json!({"metadata": {"total_matches": 130}, "entities": page}))
            }),
        )
        .route(
            "/api/nutanix/v3/clusters/list",
            post(|| async { Json(serde_json::from_str::<Value>(include_str!("fixtures/v3/cluster_list.json")).unwrap()) }),
        )
        .route(
            "/api/nutanix/v3/tasks/{uuid}",
            get(|Path(uuid): Path<String>| async move {
                if uuid == "t-1" {
                    Json(json!({"uuid": "t-1", "status": "RUNNING", "percentage_complete": 40})).into_response()
                } else {
                    (StatusCode::NOT_FOUND, include_str!("fixtures/v3/error_404.json").to_owned()).into_response()
                }
            }),
        )
}

fn endpoint(addr: std::net::SocketAddr) -> String {
    format!("http://{addr}")
}

#[tokio::test]
async fn whoami_with_a_password_file_and_the_session_flag() {
    let (addr, _) = serve(inventory()).await;
    let dir = tempfile::tempdir().unwrap();
    let password_file = dir.path().join("password");
    std::fs::write(&password_file, format!("{PASSWORD}\n")).unwrap();
    let output = prism(
        &[
            "--endpoint",
            &endpoint(addr),
            "--allow-plain-http",
            "--username",
            USERNAME,
            "--password-file",
            password_file.to_str().unwrap(),
            "--session",
            "whoami",
        ],
        None,
    )
    .await;
    assert_eq!(output.code, 0, "{}", output.stderr);
    let me: Value = serde_json::from_str(&output.stdout).unwrap();
    assert_eq!(me["status"]["name"], json!("admin"));
    assert_eq!(output.stderr, "");
}

#[tokio::test]
async fn list_vms_pages_and_summarises() {
    let (addr, _) = serve(inventory()).await;
    let output = prism(
        &[
            "--endpoint",
            &endpoint(addr),
            "--allow-plain-http",
            "--username",
            USERNAME,
            "--session",
            "list-vms",
        ],
        Some(PASSWORD),
    )
    .await;
    assert_eq!(output.code, 0, "{}", output.stderr);
    let vms: Vec<Value> = serde_json::from_str(&output.stdout).unwrap();
    assert_eq!(vms.len(), 130);
    assert_eq!(
        vms[129],
        json!({"uuid": "u-129", "name": "vm-129", "state": "COMPLETE", "power_state": "ON", "cluster": null,
               "ip_addresses": ["10.0.0.129"]})
    );
}

#[tokio::test]
async fn clusters_and_tasks() {
    let (addr, _) = serve(inventory()).await;
    let base = [
        "--endpoint",
        &endpoint(addr),
        "--allow-plain-http",
        "--username",
        USERNAME,
        "--session",
    ]
    .map(str::to_owned);
    let run = |command: &[&str]| {
        let mut args: Vec<String> = base.to_vec();
        args.extend(command.iter().map(|arg| (*arg).to_owned()));
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            prism(&args, Some(PASSWORD)).await
        }
    };
    let output = run(&["list-clusters"]).await;
    assert_eq!(output.code, 0, "{}", output.stderr);
    let clusters: Vec<Value> = serde_json::from_str(&output.stdout).unwrap();
    assert_eq!(clusters[1]["prism_central"], json!(true));
    assert_eq!(clusters[0]["name"], json!("pe1"));

    let output = run(&["task", "t-1"]).await;
    assert_eq!(output.code, 0, "{}", output.stderr);
    assert_eq!(
        serde_json::from_str::<Value>(&output.stdout).unwrap()["percentage_complete"],
        json!(40)
    );

    let output = run(&["task", "nope"]).await;
    assert_eq!(output.code, 1);
    assert_eq!(output.stdout, "");
    assert!(
        output
            .stderr
            .starts_with("error: GET /tasks/{uuid}: not found (ENTITY_NOT_FOUND"),
        "{}",
        output.stderr
    );
}

#[tokio::test]
async fn wrong_password_fails_without_printing_it() {
    let (addr, _) = serve(inventory()).await;
    let output = prism(
        &[
            "--endpoint",
            &endpoint(addr),
            "--allow-plain-http",
            "--username",
            USERNAME,
            "--session",
            "whoami",
        ],
        Some("Wr0ng-Secret-Value"),
    )
    .await;
    assert_eq!(output.code, 1);
    assert_eq!(
        output.stderr,
        "error: GET /users/me: unauthorized (401): the credentials were refused\n"
    );
    assert!(
        !output.stdout.contains("Wr0ng-Secret-Value")
            && !output.stderr.contains("Wr0ng-Secret-Value")
    );
}

#[tokio::test]
async fn usage_errors_exit_2() {
    let output = prism(&["--endpoint", "pc", "--username", "u", "whoami"], None).await;
    assert_eq!(
        (output.code, output.stderr.as_str()),
        (2, "error: give --password-file or set PRISM_PASSWORD\n")
    );
    let output = prism(
        &["--endpoint", "pc/x", "--username", "u", "whoami"],
        Some("p"),
    )
    .await;
    assert_eq!(output.code, 2);
    assert!(
        output.stderr.contains("must not have a path"),
        "{}",
        output.stderr
    );
    let output = prism(
        &[
            "--endpoint",
            "http://127.0.0.1:9",
            "--username",
            "u",
            "whoami",
        ],
        Some("p"),
    )
    .await;
    assert_eq!(output.code, 2);
    assert!(
        output
            .stderr
            .contains("http://127.0.0.1:9 is plain http://"),
        "{}",
        output.stderr
    );
    let output = prism(&["--username", "u", "whoami"], Some("p")).await;
    assert_eq!(output.code, 2);
    assert!(output.stderr.contains("--endpoint"), "{}", output.stderr);
    let output = prism(&["--help"], None).await;
    assert_eq!(output.code, 0);
    assert!(output.stdout.contains("list-vms"));
}

#[test]
fn get_vm_output_hides_guest_customization_secrets() {
    let vm: Value =
        serde_json::from_str(include_str!("fixtures/v3/vm_create_request.json")).unwrap();
    let shown = prism_cli::redact(vm);
    let text = shown.to_string();
    assert!(!text.contains("I2Nsb3VkLWNvbmZpZw"), "{text}");
    assert_eq!(
        shown["spec"]["resources"]["guest_customization"]["cloud_init"]["user_data"],
        json!("<redacted>")
    );
    assert_eq!(shown["spec"]["name"], json!("vm1"));
}
