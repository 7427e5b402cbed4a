//! Auth, faults, counters, rate limit, admin API, v4 templates, entities, seeds and determinism, over HTTPS.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use std::time::{Duration, Instant};

use base64::Engine as _;
use common::{Api, Auth, V3, start, start_with, wait_for};
use prism_mock::{FaultKind, FaultRule, MockConfig, RateLimit, Seed, Timings};
use reqwest::Method;
use rustls_pki_types::pem::PemObject as _;
use serde_json::{Value, json};

fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

#[tokio::test]
async fn basic_session_and_api_key_auth_and_a_non_json_401() {
    let mock = start().await;
    let api = Api::new(&mock);
    let anonymous = api
        .with_auth(Auth::None)
        .get(&format!("{V3}/users/me"))
        .await;
    assert_eq!(anonymous.status, 401);
    assert!(
        serde_json::from_str::<Value>(&anonymous.text).is_err(),
        "the 401 body is not JSON: {}",
        anonymous.text
    );
    assert!(
        anonymous.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let mut wrong = api.with_auth(Auth::Basic);
    wrong.password = "wrong".to_owned();
    assert_eq!(
        wrong
            .post(&format!("{V3}/vms/list"), &json!({"kind": "vm"}))
            .await
            .status,
        401
    );

    let login = api.get(&format!("{V3}/users/me")).await;
    assert_eq!(login.status, 200);
    assert_eq!(login.body["status"]["name"], "admin");
    let set_cookie = login.headers["set-cookie"].to_str().unwrap().to_owned();
    assert!(set_cookie.starts_with("NTNX_IGW_SESSION="), "{set_cookie}");
    assert!(
        set_cookie.contains("; Secure"),
        "HTTPS cookies are Secure: {set_cookie}"
    );
    let cookie = set_cookie.split(';').next().unwrap().to_owned();
    let session = api.with_auth(Auth::Cookie(cookie.clone()));
    assert_eq!(
        session
            .post(&format!("{V3}/vms/list"), &json!({"kind": "vm"}))
            .await
            .status,
        200
    );
    assert_eq!(mock.admin().expire_sessions(), 1);
    assert_eq!(
        session
            .post(&format!("{V3}/vms/list"), &json!({"kind": "vm"}))
            .await
            .status,
        401,
        "an expired cookie stops working"
    );

    // A fault rule can expire the session of one request, as a 15-minute lifetime would.
    let login = api.get(&format!("{V3}/users/me")).await;
    let cookie = login.headers["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let session = api.with_auth(Auth::Cookie(cookie));
    mock.admin().add_fault(
        FaultRule::new(None, "/api/nutanix/v3/vms/list", FaultKind::ExpireSession).times(1),
    );
    assert_eq!(
        session
            .post(&format!("{V3}/vms/list"), &json!({"kind": "vm"}))
            .await
            .status,
        401
    );
    assert_eq!(
        api.post(&format!("{V3}/vms/list"), &json!({"kind": "vm"}))
            .await
            .status,
        200,
        "basic auth still works"
    );

    let key = api.with_auth(Auth::ApiKey("mock-api-key".to_owned()));
    assert_eq!(key.get(&format!("{V3}/users/me")).await.status, 200);
    let bad_key = api.with_auth(Auth::ApiKey("nope".to_owned()));
    assert_eq!(bad_key.get(&format!("{V3}/users/me")).await.status, 401);
}

#[tokio::test]
async fn error_faults_answer_with_retry_after_and_retire() {
    let mock = start().await;
    let api = Api::new(&mock);
    let list = format!("{V3}/vms/list");
    let body = json!({"kind": "vm"});
    mock.admin().add_fault(
        FaultRule::new(
            Some("POST"),
            "/api/nutanix/v3/vms/list",
            FaultKind::Error {
                status: 503,
                retry_after_secs: None,
            },
        )
        .times(1),
    );
    let reply = api.post(&list, &body).await;
    assert_eq!(reply.status, 503);
    assert_eq!(reply.headers["retry-after"], "1");
    assert_eq!(
        api.post(&list, &body).await.status,
        200,
        "the rule fired its one time"
    );

    mock.admin().add_fault(
        FaultRule::new(
            None,
            "*/vms/list",
            FaultKind::Error {
                status: 429,
                retry_after_secs: Some(7),
            },
        )
        .times(1),
    );
    let reply = api.post(&list, &body).await;
    assert_eq!(reply.status, 429);
    assert_eq!(reply.headers["retry-after"], "7");

    mock.admin().add_fault(
        FaultRule::new(
            None,
            "/api/nutanix/v3/vms/{uuid}",
            FaultKind::Error {
                status: 500,
                retry_after_secs: None,
            },
        )
        .times(1),
    );
    let reply = api.get(&format!("{V3}/vms/whatever")).await;
    assert_eq!(reply.status, 500);
    assert_eq!(reply.body["state"], "ERROR");
    assert_eq!(reply.body["message_list"][0]["reason"], "INTERNAL_ERROR");

    // A probability draws from the seeded generator: some requests fail, some pass.
    let id = mock.admin().add_fault(
        FaultRule::new(
            None,
            "/api/nutanix/v3/clusters/list",
            FaultKind::Error {
                status: 500,
                retry_after_secs: None,
            },
        )
        .probability(0.5),
    );
    let mut failed = 0;
    for _ in 0..60 {
        if api
            .post(&format!("{V3}/clusters/list"), &json!({"kind": "cluster"}))
            .await
            .status
            == 500
        {
            failed += 1;
        }
    }
    assert!(
        (10..=50).contains(&failed),
        "about half of 60 requests fail: {failed}"
    );
    assert_eq!(
        mock.admin()
            .faults()
            .iter()
            .find(|r| r.id == id)
            .unwrap()
            .fired,
        failed
    );
    assert!(mock.admin().remove_fault(id));
}

#[tokio::test]
async fn latency_and_dropped_connections() {
    let mock = start().await;
    let api = Api::new(&mock);
    mock.admin().add_fault(
        FaultRule::new(
            Some("GET"),
            "/api/nutanix/v3/users/me",
            FaultKind::Latency { millis: 400 },
        )
        .times(1),
    );
    let started = Instant::now();
    assert_eq!(api.get(&format!("{V3}/users/me")).await.status, 200);
    assert!(started.elapsed() >= Duration::from_millis(400));

    mock.admin().add_fault(
        FaultRule::new(
            Some("GET"),
            "/api/nutanix/v3/users/me",
            FaultKind::DropConnection,
        )
        .times(1),
    );
    let result = api
        .client
        .get(format!("{}{V3}/users/me", api.base))
        .basic_auth(&api.user, Some(&api.password))
        .send()
        .await;
    let error = result.expect_err("the connection is dropped without an answer");
    assert!(!error.is_timeout(), "dropped, not timed out: {error}");
    assert_eq!(
        api.get(&format!("{V3}/users/me")).await.status,
        200,
        "the next request is served"
    );
    assert!(
        mock.admin()
            .counters()
            .iter()
            .any(|c| c.endpoint == "/api/nutanix/v3/users/me" && c.status == 0 && c.count == 1)
    );
}

#[tokio::test]
async fn a_failed_task_carries_the_real_error_in_a_failed_subtask() {
    let mock = start().await;
    let api = Api::new(&mock);
    let seeded = api.seeded().await;
    mock.admin().add_fault(
        FaultRule::new(
            Some("POST"),
            "/api/nutanix/v3/vms",
            FaultKind::FailTask {
                error: "DHCP pool exhausted".to_owned(),
                leave_vm_in_error: false,
            },
        )
        .times(1),
    );
    let reply = api
        .post(
            &format!("{V3}/vms"),
            &seeded.vm_body("fail-vm", &seeded.rhcos, "ON"),
        )
        .await;
    assert_eq!(reply.status, 202, "the request itself succeeds");
    let uuid = reply.uuid();
    let task = api.wait_task(reply.task_uuid()).await;
    assert_eq!(task["status"], "FAILED");
    assert_eq!(
        task["error_detail"], "Internal Error",
        "the parent's error is generic"
    );
    let sub = task["subtask_reference_list"][0]["uuid"].as_str().unwrap();
    let subtask = api.get(&format!("{V3}/tasks/{sub}")).await.body;
    assert_eq!(subtask["status"], "FAILED");
    assert_eq!(subtask["error_detail"], "DHCP pool exhausted");
    assert_eq!(subtask["parent_task_reference"]["uuid"], task["uuid"]);
    assert_eq!(
        api.get(&format!("{V3}/vms/{uuid}")).await.status,
        404,
        "a failed create leaves no VM"
    );

    mock.admin().add_fault(
        FaultRule::new(
            Some("POST"),
            "/api/nutanix/v3/vms",
            FaultKind::FailTask {
                error: "no host".to_owned(),
                leave_vm_in_error: true,
            },
        )
        .times(1),
    );
    let reply = api
        .post(
            &format!("{V3}/vms"),
            &seeded.vm_body("error-vm", &seeded.rhcos, "ON"),
        )
        .await;
    let uuid = reply.uuid();
    api.wait_task(reply.task_uuid()).await;
    let vm = api.get(&format!("{V3}/vms/{uuid}")).await.body;
    assert_eq!(vm["status"]["state"], "ERROR");
    assert_eq!(vm["status"]["message_list"][0]["message"], "no host");
}

#[tokio::test]
async fn a_failed_update_restores_the_spec_and_a_failed_delete_keeps_the_vm() {
    let mock = start().await;
    let api = Api::new(&mock);
    let seeded = api.seeded().await;
    let created = api
        .post(
            &format!("{V3}/vms"),
            &seeded.vm_body("keep-vm", &seeded.rhcos, "OFF"),
        )
        .await;
    let uuid = created.uuid();
    api.wait_task(created.task_uuid()).await;
    let fail = |method: &str| {
        FaultRule::new(
            Some(method),
            "/api/nutanix/v3/vms/{uuid}",
            FaultKind::FailTask {
                error: "host in maintenance".to_owned(),
                leave_vm_in_error: false,
            },
        )
        .times(1)
    };
    mock.admin().add_fault(fail("PUT"));
    let vm = api.get(&format!("{V3}/vms/{uuid}")).await.body;
    let mut update = json!({"metadata": vm["metadata"], "spec": vm["spec"]});
    update["spec"]["resources"]["power_state"] = json!("ON");
    update["spec"]["resources"]["memory_size_mib"] = json!(16384);
    let reply = api.put(&format!("{V3}/vms/{uuid}"), &update).await;
    assert_eq!(reply.status, 202, "{}", reply.text);
    assert_eq!(api.wait_task(reply.task_uuid()).await["status"], "FAILED");
    let after = api.get(&format!("{V3}/vms/{uuid}")).await.body;
    assert_eq!(
        after["spec"]["resources"]["memory_size_mib"], 8192,
        "the previous spec is back"
    );
    assert_eq!(after["status"]["resources"]["power_state"], "OFF");
    assert_eq!(after["status"]["state"], "COMPLETE");

    mock.admin().add_fault(fail("DELETE"));
    let reply = api.delete(&format!("{V3}/vms/{uuid}")).await;
    assert_eq!(api.wait_task(reply.task_uuid()).await["status"], "FAILED");
    let after = api.get(&format!("{V3}/vms/{uuid}")).await;
    assert_eq!(after.status, 200, "a failed delete leaves the VM");
    assert_eq!(after.body["status"]["state"], "COMPLETE");
}

#[tokio::test]
async fn create_then_500_creates_the_vm_the_client_thinks_failed() {
    let mock = start().await;
    let api = Api::new(&mock);
    let seeded = api.seeded().await;
    mock.admin().add_fault(
        FaultRule::new(
            Some("POST"),
            "/api/nutanix/v3/vms",
            FaultKind::CreateThen500,
        )
        .times(1),
    );
    let reply = api
        .post(
            &format!("{V3}/vms"),
            &seeded.vm_body("ghost", &seeded.rhcos, "OFF"),
        )
        .await;
    assert_eq!(reply.status, 500);
    let ghost = wait_for(|| async {
        let list = api
            .post(
                &format!("{V3}/vms/list"),
                &json!({"kind": "vm", "filter": "vm_name==ghost"}),
            )
            .await
            .body;
        (list["metadata"]["total_matches"] == 1).then_some(list)
    })
    .await;
    assert_eq!(ghost["entities"][0]["status"]["state"], "COMPLETE");
    let create = mock
        .admin()
        .requests_since(0)
        .into_iter()
        .find(|r| r.method == "POST" && r.endpoint == "/api/nutanix/v3/vms")
        .unwrap();
    assert_eq!(create.status, 500);
    assert_eq!(
        create.vm.as_deref(),
        ghost["entities"][0]["metadata"]["uuid"].as_str(),
        "the log names the VM the failed-looking create made"
    );
}

#[tokio::test]
async fn the_server_side_rate_limit_answers_429() {
    let mock = start().await;
    let api = Api::new(&mock);
    mock.admin().set_rate_limit(Some(RateLimit {
        requests_per_second: 0.5,
        burst: 2,
    }));
    let statuses = [
        api.get(&format!("{V3}/users/me")).await,
        api.get(&format!("{V3}/users/me")).await,
        api.get(&format!("{V3}/users/me")).await,
    ];
    assert_eq!(statuses[0].status, 200);
    assert_eq!(statuses[1].status, 200);
    assert_eq!(statuses[2].status, 429);
    let retry: u64 = statuses[2].headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=2).contains(&retry), "{retry}");
    mock.admin().set_rate_limit(None);
    assert_eq!(api.get(&format!("{V3}/users/me")).await.status, 200);
}

#[tokio::test]
async fn counters_group_calls_by_route_template_and_status() {
    let mock = start().await;
    let api = Api::new(&mock);
    mock.admin().reset_counters();
    api.get(&format!("{V3}/vms/a")).await;
    api.get(&format!("{V3}/vms/b")).await;
    api.post(&format!("{V3}/vms/list"), &json!({})).await;
    api.with_auth(Auth::None)
        .get(&format!("{V3}/users/me"))
        .await;
    api.get("/api/nutanix/v3/nothing/here").await;
    let counters = mock.admin().counters();
    let find = |method: &str, endpoint: &str, status: u16| {
        counters
            .iter()
            .find(|c| c.method == method && c.endpoint == endpoint && c.status == status)
            .map(|c| c.count)
    };
    assert_eq!(find("GET", "/api/nutanix/v3/vms/{uuid}", 404), Some(2));
    assert_eq!(find("POST", "/api/nutanix/v3/vms/list", 200), Some(1));
    assert_eq!(find("GET", "/api/nutanix/v3/users/me", 401), Some(1));
    assert_eq!(find("GET", "<unmatched>", 404), Some(1));
    assert_eq!(mock.admin().count("GET", "/api/nutanix/v3/vms/{uuid}"), 2);

    let over_http = api
        .client
        .get(format!("{}/mock/counters", api.base))
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    assert_eq!(
        over_http["counters"].as_array().unwrap().len(),
        counters.len(),
        "admin calls are not counted"
    );
    api.client
        .delete(format!("{}/mock/counters", api.base))
        .send()
        .await
        .unwrap();
    assert!(mock.admin().counters().is_empty());
}

#[tokio::test]
async fn the_request_log_attributes_calls_to_the_vm_they_concern() {
    let mock = start().await;
    let api = Api::new(&mock);
    let seeded = api.seeded().await;
    let source = mock
        .admin()
        .vms()
        .into_iter()
        .find(|v| v.name == "windows-golden")
        .unwrap()
        .uuid;
    mock.admin().reset_counters();

    let created = api
        .post(
            &format!("{V3}/vms"),
            &seeded.vm_body("log-1", &seeded.rhcos, "ON"),
        )
        .await;
    assert_eq!(created.status, 202, "{}", created.text);
    let vm = created.uuid();
    api.wait_task(created.task_uuid()).await;
    api.get(&format!("{V3}/vms/{vm}")).await;
    api.post(&format!("{V3}/vms/list"), &json!({"kind": "vm"}))
        .await;
    let clone = api
        .post(
            &format!("{V3}/vms/{source}/clone"),
            &json!({"override_spec": {"name": "log-2"}}),
        )
        .await;
    assert_eq!(clone.status, 202, "{}", clone.text);
    let clone_task = clone.body["task_uuid"].as_str().unwrap().to_owned();
    let finished = api.wait_task(&clone_task).await;
    let cloned = finished["entity_reference_list"][0]["uuid"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(cloned, source);

    let log = mock.admin().requests_since(0);
    assert_eq!(
        log.len() as u64,
        mock.admin().counters().iter().map(|c| c.count).sum::<u64>()
    );
    assert_eq!(mock.admin().request_count(), log.len());
    let of = |method: &str, endpoint: &str| -> Vec<Option<String>> {
        log.iter()
            .filter(|r| r.method == method && r.endpoint == endpoint)
            .map(|r| r.vm.clone())
            .collect()
    };
    assert_eq!(of("POST", "/api/nutanix/v3/vms"), [Some(vm.clone())]);
    assert_eq!(of("GET", "/api/nutanix/v3/vms/{uuid}"), [Some(vm.clone())]);
    assert_eq!(
        of("POST", "/api/nutanix/v3/vms/list"),
        [None],
        "a list is shared"
    );
    assert_eq!(
        of("POST", "/api/nutanix/v3/vms/{uuid}/clone"),
        [Some(cloned.clone())],
        "a clone counts for the new VM, not its source"
    );
    let task_reads = of("GET", "/api/nutanix/v3/tasks/{uuid}");
    assert!(task_reads.contains(&Some(vm.clone())) && task_reads.contains(&Some(cloned)));
    assert!(task_reads.iter().all(Option::is_some), "{task_reads:?}");
    assert!(log.windows(2).all(|w| w[0].at_ms <= w[1].at_ms));
    assert!(log.last().unwrap().at_ms <= mock.admin().elapsed_ms());

    let tail = mock.admin().requests_since(log.len() - 1);
    assert_eq!(tail, [log.last().unwrap().clone()]);
    let over_http = api
        .client
        .get(format!("{}/mock/requests?from=1", api.base))
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    assert_eq!(
        over_http["requests"].as_array().unwrap().len(),
        log.len() - 1
    );
    assert_eq!(over_http["requests"][0]["vm"], json!(vm));

    // Who sent a request, and when it arrived by the wall clock (what a leader's lease is
    // checked against), are kept as the request carried them.
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let named = mock.admin().request_count();
    api.call(
        Method::GET,
        &format!("{V3}/vms/{vm}"),
        None,
        &[("User-Agent", "nutanix-machine-controller/0.1.0 (pod-a_1)")],
    )
    .await;
    let after = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let record = &mock.admin().requests_since(named)[0];
    assert_eq!(
        record.user_agent.as_deref(),
        Some("nutanix-machine-controller/0.1.0 (pod-a_1)")
    );
    assert!(
        (before..=after).contains(&record.received_unix_ms),
        "{record:?}"
    );
    mock.admin().reset_counters();
    assert_eq!(mock.admin().request_count(), 0);
}

#[tokio::test]
async fn the_admin_http_api_installs_faults_and_shows_and_changes_vms() {
    let mock = start().await;
    let api = Api::new(&mock);
    let seeded = api.seeded().await;
    let admin = |path: &str| format!("{}/mock{path}", api.base);
    let created = api
        .client
        .post(admin("/faults"))
        .json(&json!({"method": "GET", "path": "/api/nutanix/v3/users/me", "kind": "error", "status": 503, "times": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    assert_eq!(api.get(&format!("{V3}/users/me")).await.status, 503);

    let user_data = "#cloud-config\nhostname: worker-1\n";
    let mut body = seeded.vm_body("gc-vm", &seeded.rhcos, "OFF");
    body["spec"]["resources"]["guest_customization"] = json!({"cloud_init": {"user_data": b64(user_data), "meta_data": b64("{\"hostname\":\"worker-1\"}")}});
    let reply = api.post(&format!("{V3}/vms"), &body).await;
    let uuid = reply.uuid();
    let gc: Value = api
        .client
        .get(admin(&format!("/vms/{uuid}/guest-customization")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(gc["kind"], "cloud_init");
    assert_eq!(gc["user_data"], user_data);
    assert_eq!(gc["meta_data"], "{\"hostname\":\"worker-1\"}");
    let vms: Value = api
        .client
        .get(admin("/vms"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let summary = vms["vms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["uuid"] == uuid.as_str())
        .unwrap()
        .clone();
    assert_eq!(summary["name"], "gc-vm");

    let timings = Timings {
        task_queued_ms: 1,
        task_running_ms: 2,
        boot_to_address_ms: 3,
    };
    api.client
        .put(admin("/timings"))
        .json(&timings)
        .send()
        .await
        .unwrap();
    assert_eq!(mock.admin().timings(), timings);

    assert_eq!(
        api.client
            .post(admin(&format!("/vms/{uuid}/delete")))
            .send()
            .await
            .unwrap()
            .status(),
        204
    );
    assert_eq!(
        api.get(&format!("{V3}/vms/{uuid}")).await.status,
        404,
        "deleted out of band"
    );
    assert_eq!(
        api.client
            .post(admin("/vms/nope/power-off"))
            .send()
            .await
            .unwrap()
            .status(),
        404
    );
    let expired: Value = api
        .client
        .post(admin("/sessions/expire"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(expired["expired"], 0);
}

#[tokio::test]
async fn template_deploy_is_idempotent_per_request_id_and_makes_a_normal_vm() {
    let mock = start().await;
    let api = Api::new(&mock);
    let seeded = api.seeded().await;
    let templates = api
        .get("/api/vmm/v4.0/content/templates?$page=0&$limit=10")
        .await;
    assert_eq!(templates.status, 200, "{}", templates.text);
    assert_eq!(templates.body["metadata"]["totalAvailableResults"], 1);
    let template = templates.body["data"][0].clone();
    assert_eq!(template["templateName"], "windows-server-2022-template");
    let ext_id = template["extId"].as_str().unwrap().to_owned();
    let empty = api
        .get("/api/vmm/v4.0/content/templates?$page=1&$limit=10")
        .await
        .body;
    assert!(
        empty.get("data").is_none(),
        "an empty page answers without data: {empty}"
    );
    assert_eq!(empty["metadata"]["totalAvailableResults"], 1);
    let filtered = api.get("/api/vmm/v4.0/content/templates?$filter=templateName%20eq%20'windows-server-2022-template'").await;
    assert_eq!(filtered.body["data"][0]["extId"], ext_id.as_str());
    assert_eq!(
        api.get(&format!("/api/vmm/v4.0/content/templates/{ext_id}"))
            .await
            .body["data"]["extId"],
        ext_id.as_str()
    );

    let unattend = "<unattend><ComputerName>win-7</ComputerName></unattend>";
    let deploy = json!({
        "numberOfVms": 1,
        "clusterReference": seeded.pe,
        "overrideVmConfigMap": {"0": {
            "name": "win-7",
            "numSockets": 4,
            "memorySizeBytes": 16u64 << 30,
            "nics": [{"networkInfo": {"subnet": {"extId": seeded.subnet}}}],
            "guestCustomization": {"config": {"$objectType": "vmm.v4.ahv.config.Sysprep", "installType": "PREPARED",
                "sysprepScript": {"$objectType": "vmm.v4.ahv.config.Unattendxml", "value": b64(unattend)}}},
        }},
    });
    let path = format!("/api/vmm/v4.0/content/templates/{ext_id}/$actions/deploy");
    let missing_id = api.call(Method::POST, &path, Some(&deploy), &[]).await;
    assert_eq!(missing_id.status, 400);
    assert_eq!(
        missing_id.body["data"]["error"][0]["errorGroup"],
        "INVALID_INPUT"
    );
    assert!(missing_id.body["data"]["$errorItemDiscriminator"].is_string());

    let first = api
        .call(
            Method::POST,
            &path,
            Some(&deploy),
            &[("NTNX-Request-Id", "req-1")],
        )
        .await;
    assert_eq!(first.status, 202, "{}", first.text);
    let task_ext_id = first.body["data"]["extId"].as_str().unwrap().to_owned();
    let (prefix, task_uuid) = task_ext_id.split_once(':').unwrap();
    assert_eq!(prefix, "ZXJnb24=");
    let again = api
        .call(
            Method::POST,
            &path,
            Some(&deploy),
            &[("NTNX-Request-Id", "req-1")],
        )
        .await;
    assert_eq!(again.status, 202);
    assert_eq!(
        again.body["data"]["extId"],
        task_ext_id.as_str(),
        "the same request id gives the same task"
    );
    let deploys: Vec<_> = mock
        .admin()
        .timed_requests_since(0)
        .into_iter()
        .filter(|r| r.record.endpoint.ends_with("/$actions/deploy"))
        .collect();
    assert_eq!(
        deploys
            .iter()
            .map(|r| r.request_id.as_deref())
            .collect::<Vec<_>>(),
        [None, Some("req-1"), Some("req-1")],
        "the timed log keeps each deploy's request id"
    );
    assert!(
        deploys
            .iter()
            .all(|r| r.received <= r.answered && r.record.vm.is_some() == (r.record.status == 202))
    );
    assert!(
        deploys.windows(2).all(|w| w[0].answered < w[1].received),
        "sent one after the other, so each was answered before the next arrived"
    );

    let task = wait_for(|| async {
        let t = api
            .get(&format!("/api/prism/v4.0/config/tasks/{task_ext_id}"))
            .await;
        assert_eq!(t.status, 200, "{}", t.text);
        (t.body["data"]["status"] == "SUCCEEDED").then_some(t.body)
    })
    .await;
    assert_eq!(task["data"]["progressPercentage"], 100);
    assert_eq!(
        task["data"]["entitiesAffected"],
        json!([{"extId": ext_id, "rel": "vmm:content:templates", "$objectType": "prism.v4.config.EntityReference", "$reserved": {"$fv": "v4.r0"}}]),
        "the deploy task names only the template"
    );
    let subtasks = task["data"]["subTasks"].as_array().unwrap();
    assert_eq!(subtasks.len(), 1, "one subtask per VM");
    assert_eq!(subtasks[0]["rel"], "subtask");
    let sub_id = subtasks[0]["extId"].as_str().unwrap();
    assert!(
        subtasks[0]["href"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/api/prism/v4.0/config/tasks/{sub_id}")),
        "{subtasks:?}"
    );
    let sub = api
        .get(&format!("/api/prism/v4.0/config/tasks/{sub_id}"))
        .await
        .body;
    assert_eq!(sub["data"]["status"], "SUCCEEDED");
    assert_eq!(sub["data"]["parentTask"]["extId"], task_ext_id.as_str());
    let affected = sub["data"]["entitiesAffected"].as_array().unwrap();
    assert_eq!(affected[0]["rel"], "vmm:ahv:config:vm");
    let vm_uuid = affected[0]["extId"].as_str().unwrap().to_owned();
    let v3_task = api.get(&format!("{V3}/tasks/{task_uuid}")).await;
    assert_eq!(
        v3_task.body["status"], "SUCCEEDED",
        "v3 reads the same task by its UUID part"
    );
    assert_eq!(
        api.get(&format!("{V3}/tasks/{task_ext_id}")).await.status,
        404,
        "v3 takes no v4 prefix"
    );

    let named = api
        .post(
            &format!("{V3}/vms/list"),
            &json!({"kind": "vm", "filter": "vm_name==win-7"}),
        )
        .await
        .body;
    assert_eq!(
        named["metadata"]["total_matches"], 1,
        "one VM despite two deploy calls"
    );
    let vm = api.get(&format!("{V3}/vms/{vm_uuid}")).await.body;
    assert_eq!(vm["spec"]["name"], "win-7");
    assert_eq!(vm["spec"]["resources"]["num_sockets"], 4);
    assert_eq!(vm["spec"]["resources"]["memory_size_mib"], 16384);
    assert_eq!(
        vm["spec"]["resources"]["boot_config"]["boot_type"], "UEFI",
        "boot config from the template"
    );
    assert_eq!(
        vm["spec"]["resources"]["disk_list"][0]["data_source_reference"]["uuid"],
        seeded.windows.as_str()
    );
    assert_eq!(
        vm["spec"]["resources"]["disk_list"][0]["disk_size_mib"],
        122880
    );
    assert_eq!(
        mock.admin()
            .guest_customization(&vm_uuid)
            .unwrap()
            .unattend_xml
            .as_deref(),
        Some(unattend)
    );

    let unknown = api
        .call(
            Method::POST,
            "/api/vmm/v4.0/content/templates/nope/$actions/deploy",
            Some(&deploy),
            &[("NTNX-Request-Id", "req-2")],
        )
        .await;
    assert_eq!(unknown.status, 404);
    assert_eq!(
        unknown.body["data"]["error"][0]["errorGroup"],
        "ENTITY_NOT_FOUND"
    );
    let mut bad = deploy.clone();
    bad["clusterReference"] = json!("nope");
    assert_eq!(
        api.call(
            Method::POST,
            &path,
            Some(&bad),
            &[("NTNX-Request-Id", "req-3")]
        )
        .await
        .status,
        400
    );

    mock.admin().add_fault(
        FaultRule::new(
            Some("POST"),
            "*/$actions/deploy",
            FaultKind::FailTask {
                error: "image copy failed".to_owned(),
                leave_vm_in_error: false,
            },
        )
        .times(1),
    );
    let mut second = deploy.clone();
    second["overrideVmConfigMap"]["0"]["name"] = json!("win-8");
    let failed = api
        .call(
            Method::POST,
            &path,
            Some(&second),
            &[("NTNX-Request-Id", "req-4")],
        )
        .await;
    let failed_id = failed.body["data"]["extId"].as_str().unwrap().to_owned();
    let task = wait_for(|| async {
        let t = api
            .get(&format!("/api/prism/v4.0/config/tasks/{failed_id}"))
            .await
            .body;
        (t["data"]["status"] == "FAILED").then_some(t)
    })
    .await;
    let messages: Vec<&str> = task["data"]["errorMessages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["message"].as_str().unwrap())
        .collect();
    assert!(messages.contains(&"image copy failed"), "{messages:?}");
    assert_eq!(task["data"]["subTasks"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn entities_hosts_gpus_and_categories() {
    let mock = start().await;
    let api = Api::new(&mock);
    let seeded = api.seeded().await;
    let clusters = api
        .post(&format!("{V3}/clusters/list"), &json!({"kind": "cluster"}))
        .await
        .body;
    let services: Vec<Value> = clusters["entities"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["status"]["resources"]["config"]["service_list"].clone())
        .collect();
    assert!(services.contains(&json!(["PRISM_CENTRAL"])));
    assert!(services.contains(&json!(["AOS"])));
    assert_eq!(
        api.post(
            &format!("{V3}/projects/list"),
            &json!({"kind": "project", "filter": "name==open"})
        )
        .await
        .body["metadata"]["total_matches"],
        1
    );

    let hosts = api
        .post(&format!("{V3}/hosts/list"), &json!({"kind": "host"}))
        .await
        .body;
    let host = hosts["entities"][0].clone();
    let host_uuid = host["metadata"]["uuid"].as_str().unwrap().to_owned();
    let gpu = host["status"]["resources"]["gpu_list"][0].clone();
    assert_eq!(gpu["status"], "UNUSED");
    assert_eq!(
        host["status"]["cluster_reference"]["uuid"],
        seeded.pe.as_str()
    );
    let mut body = seeded.vm_body("gpu-vm", &seeded.rhcos, "OFF");
    body["spec"]["resources"]["gpu_list"] =
        json!([{"vendor": gpu["vendor"], "mode": gpu["mode"], "device_id": gpu["device_id"]}]);
    let created = api.post(&format!("{V3}/vms"), &body).await;
    assert_eq!(created.status, 202, "{}", created.text);
    let host = api.get(&format!("{V3}/hosts/{host_uuid}")).await.body;
    assert_eq!(host["status"]["resources"]["gpu_list"][0]["status"], "USED");
    body["spec"]["name"] = json!("gpu-vm-2");
    assert_eq!(
        api.post(&format!("{V3}/vms"), &body).await.status,
        422,
        "no UNUSED GPU left"
    );

    assert_eq!(
        api.get(&format!("{V3}/categories/AppType/Windows"))
            .await
            .body["value"],
        "Windows"
    );
    assert_eq!(
        api.get(&format!("{V3}/categories/AppType/Nope"))
            .await
            .status,
        404
    );
    assert_eq!(
        api.put(
            &format!("{V3}/categories/Machine"),
            &json!({"name": "Machine"})
        )
        .await
        .status,
        200
    );
    assert_eq!(
        api.put(
            &format!("{V3}/categories/Machine/worker-1"),
            &json!({"value": "worker-1"})
        )
        .await
        .status,
        200
    );
    let values = api
        .post(
            &format!("{V3}/categories/Machine/list"),
            &json!({"kind": "category"}),
        )
        .await
        .body;
    assert_eq!(values["entities"][0]["value"], "worker-1");
    let keys = api
        .post(
            &format!("{V3}/categories/list"),
            &json!({"kind": "category", "length": 100}),
        )
        .await
        .body;
    assert!(
        keys["entities"]
            .as_array()
            .unwrap()
            .iter()
            .any(|k| k["name"] == "Machine")
    );
    assert_eq!(
        api.put(
            &format!("{V3}/categories/Missing/value"),
            &json!({"value": "value"})
        )
        .await
        .status,
        404
    );
    assert_eq!(
        api.delete(&format!("{V3}/categories/Machine/worker-1"))
            .await
            .status,
        204
    );
}

const SMALL_SEED: &str = r#"
rng_seed: 7
clusters:
  - name: pe-x
subnets:
  - {name: net-x, cluster: pe-x, cidr: 10.9.10.0/24, gateway: 10.9.10.1, pool_start: 10.9.10.10, pool_end: 10.9.10.10}
images:
  - {name: img-x, os: linux, size_mib: 100}
"#;

#[tokio::test]
async fn a_seed_file_loads_and_the_same_seed_gives_the_same_uuids() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("seed.yaml");
    std::fs::write(&path, SMALL_SEED).unwrap();
    let seed = Seed::from_file(&path).unwrap();
    assert_eq!(seed.rng_seed, Some(7));
    let fast = Timings {
        task_queued_ms: 1,
        task_running_ms: 1,
        boot_to_address_ms: 200,
    };

    // The first two runs differ only in timing: the first lets the guest boot (events run) before the next
    // request, the second does not. Randomness drawn while events run would make their UUIDs differ.
    let mut runs = Vec::new();
    for (run, rng_seed) in [None, None, Some(8)].into_iter().enumerate() {
        let mock = start_with(MockConfig {
            seed: seed.clone(),
            rng_seed,
            timings: fast.clone(),
            ..MockConfig::default()
        })
        .await;
        let api = Api::new(&mock);
        let pe = api.uuid_of("cluster", "pe-x").await;
        let subnet = api.uuid_of("subnet", "net-x").await;
        let image = api.uuid_of("image", "img-x").await;
        let body = json!({"metadata": {"kind": "vm"}, "spec": {"name": "v", "cluster_reference": {"kind": "cluster", "uuid": pe},
            "resources": {"power_state": "ON", "disk_list": [{"data_source_reference": {"kind": "image", "uuid": image}}],
                "nic_list": [{"subnet_reference": {"kind": "subnet", "uuid": subnet}}]}}});
        let first = api.post(&format!("{V3}/vms"), &body).await;
        api.wait_task(first.task_uuid()).await;
        let vm = first.uuid();
        let mac = api.get(&format!("{V3}/vms/{vm}")).await.body["spec"]["resources"]["nic_list"][0]
            ["mac_address"]
            .clone();
        if run == 0 {
            wait_for(|| async {
                let vm = api.get(&format!("{V3}/vms/{vm}")).await.body;
                vm["status"]["resources"]["nic_list"][0]["ip_endpoint_list"]
                    .as_array()
                    .is_some_and(|l| !l.is_empty())
                    .then_some(())
            })
            .await;
        }
        // The pool has one address: a second VM's create task fails with the pool exhausted.
        let mut second_body = body.clone();
        second_body["spec"]["name"] = json!("w");
        let second = api.post(&format!("{V3}/vms"), &second_body).await;
        let task = api.wait_task(second.task_uuid()).await;
        assert_eq!(task["status"], "FAILED");
        let sub = api
            .get(&format!(
                "{V3}/tasks/{}",
                task["subtask_reference_list"][0]["uuid"].as_str().unwrap()
            ))
            .await
            .body;
        assert!(
            sub["error_detail"].as_str().unwrap().contains("exhausted"),
            "{sub}"
        );
        let second_uuid = second.body["metadata"]["uuid"].clone();
        runs.push((pe, vm, mac, second_uuid, sub["uuid"].clone()));
        mock.shutdown().await;
    }
    assert_eq!(
        runs[0], runs[1],
        "same seed, same UUIDs and MACs, whatever the timing"
    );
    assert_ne!(runs[0].0, runs[2].0, "another seed, other UUIDs");

    std::fs::write(&path, "clusters:\n  - name: a\nsubnets:\n  - {name: s, cluster: b, cidr: 10.0.0.0/24, gateway: 10.0.0.1, pool_start: 10.0.0.2, pool_end: 10.0.0.3}\n").unwrap();
    let bad = Seed::from_file(&path).unwrap();
    let error = prism_mock::MockPrism::start(MockConfig {
        seed: bad,
        ..MockConfig::default()
    })
    .await
    .unwrap_err();
    assert!(error.to_string().contains("unknown cluster 'b'"), "{error}");
}

#[tokio::test]
async fn https_with_http2_and_plain_http_only_when_asked() {
    let mock = start_with(MockConfig {
        tls: false,
        ..MockConfig::default()
    })
    .await;
    assert!(mock.base_url().starts_with("http://"));
    assert!(mock.ca_pem().is_none());
    let api = Api::new(&mock);
    let login = api.get(&format!("{V3}/users/me")).await;
    assert_eq!(login.status, 200);
    let cookie = login.headers["set-cookie"].to_str().unwrap();
    assert!(
        !cookie.contains("Secure"),
        "a Secure cookie would not come back over plain HTTP: {cookie}"
    );

    let tls = start().await;
    assert!(tls.base_url().starts_with("https://127.0.0.1:"));
    let untrusting = common::client_trusting(None);
    assert!(
        untrusting
            .get(format!("{}/mock/health", tls.base_url()))
            .send()
            .await
            .is_err(),
        "the generated CA is not in the system store"
    );

    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::CertificateDer::pem_slice_iter(tls.ca_pem().unwrap().as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let h2 = reqwest::Client::builder()
        .tls_backend_preconfigured(config)
        .build()
        .unwrap();
    let reply = h2
        .get(format!("{}{V3}/users/me", tls.base_url()))
        .basic_auth("admin", Some("mock-password"))
        .send()
        .await
        .unwrap();
    assert_eq!(reply.version(), reqwest::Version::HTTP_2);
    assert_eq!(reply.status(), 200);
}

#[tokio::test]
async fn a_deploy_task_can_name_its_vm_on_the_parent_task_instead_of_a_subtask() {
    let mock = start().await;
    let api = Api::new(&mock);
    let seeded = api.seeded().await;
    assert_eq!(
        mock.admin().deploy_task_shape(),
        prism_mock::DeployTaskShape::VmsInSubtasks,
        "the Ansible collection's recorded shape by default"
    );
    mock.admin()
        .set_deploy_task_shape(prism_mock::DeployTaskShape::VmsOnParentTask);
    let templates = api.get("/api/vmm/v4.0/content/templates").await;
    let ext_id = templates.body["data"][0]["extId"]
        .as_str()
        .unwrap()
        .to_owned();
    let deploy = json!({"numberOfVms": 1, "clusterReference": seeded.pe});
    let reply = api
        .call(
            Method::POST,
            &format!("/api/vmm/v4.0/content/templates/{ext_id}/$actions/deploy"),
            Some(&deploy),
            &[("NTNX-Request-Id", "parent-shape")],
        )
        .await;
    assert_eq!(reply.status, 202, "{}", reply.text);
    let task_ext_id = reply.body["data"]["extId"].as_str().unwrap().to_owned();
    let task = wait_for(|| async {
        let t = api
            .get(&format!("/api/prism/v4.0/config/tasks/{task_ext_id}"))
            .await;
        (t.body["data"]["status"] == "SUCCEEDED").then_some(t.body)
    })
    .await;
    let entities = task["data"]["entitiesAffected"].as_array().unwrap();
    let rels: Vec<&str> = entities
        .iter()
        .map(|e| e["rel"].as_str().unwrap())
        .collect();
    assert_eq!(rels, ["vmm:content:templates", "vmm:ahv:config:vm"]);
    let vm = entities[1]["extId"].as_str().unwrap();
    assert!(
        task["data"].get("subTasks").is_none(),
        "no per-VM subtask: {task}"
    );
    assert_eq!(task["data"]["numberOfSubtasks"], 0);
    assert_eq!(
        api.get(&format!("{V3}/vms/{vm}")).await.body["status"]["state"],
        "COMPLETE"
    );
}
