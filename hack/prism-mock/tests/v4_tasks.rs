//! The v4 task listing, `GET /api/prism/{v4.0,v4.4}/config/tasks`, as ntnx-prism-py-client 4.0.1's
//! `TasksApi.list_tasks` documents it: `$filter` on `extId` (OData 4.01 `eq` and `in`), `$limit` 1..=100,
//! `$page` 0-based, an empty page without `data`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use common::{Api, V3, start};

/// `text` percent-encoded as a query value.
fn encoded(text: &str) -> String {
    text.bytes()
        .map(|byte| {
            if byte.is_ascii_alphanumeric() {
                char::from(byte).to_string()
            } else {
                format!("%{byte:02X}")
            }
        })
        .collect()
}

#[tokio::test]
async fn tasks_are_listed_by_ext_id_in_either_form_with_their_status() {
    let mock = start().await;
    let api = Api::new(&mock);
    let s = api.seeded().await;
    let first = api
        .post(&format!("{V3}/vms"), &s.vm_body("a", &s.rhcos, "ON"))
        .await;
    let second = api
        .post(&format!("{V3}/vms"), &s.vm_body("b", &s.rhcos, "ON"))
        .await;
    let _third = api
        .post(&format!("{V3}/vms"), &s.vm_body("c", &s.rhcos, "ON"))
        .await;
    let (first, second) = (first.task_uuid().to_owned(), second.task_uuid().to_owned());

    // One prefixed (as v4 answers), one bare (as v3 answers): the third task is not asked for.
    let filter = format!("extId in ('ZXJnb24=:{first}', '{second}')");
    let path = format!("/api/prism/v4.0/config/tasks?$filter={}", encoded(&filter));
    let listed = api.get(&path).await;
    assert_eq!(listed.status, 200, "{}", listed.text);
    assert_eq!(
        listed.body["$objectType"],
        "prism.v4.config.ListTasksApiResponse"
    );
    assert_eq!(listed.body["metadata"]["totalAvailableResults"], 2);
    let mut ids: Vec<&str> = listed.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|task| task["extId"].as_str().unwrap())
        .collect();
    ids.sort_unstable();
    let mut asked = [format!("ZXJnb24=:{first}"), format!("ZXJnb24=:{second}")];
    asked.sort_unstable();
    assert_eq!(ids, asked);

    // The listing follows each task to its end, as its GET does.
    api.wait_task(&first).await;
    let one = format!("extId eq 'ZXJnb24=:{first}'");
    let listed = api
        .get(&format!(
            "/api/prism/v4.4/config/tasks?$filter={}",
            encoded(&one)
        ))
        .await;
    let task = &listed.body["data"][0];
    assert_eq!(task["status"], "SUCCEEDED", "{}", listed.text);
    assert_eq!(task["entitiesAffected"][0]["rel"], "vmm:ahv:config:vm");
    let single = api
        .get(&format!("/api/prism/v4.4/config/tasks/ZXJnb24=:{first}"))
        .await;
    assert_eq!(task, &single.body["data"]);

    // An id Prism does not know lists nothing: an empty page has no `data`.
    let unknown = "extId in ('ZXJnb24=:00000000-0000-4000-8000-000000000000')";
    let listed = api
        .get(&format!(
            "/api/prism/v4.0/config/tasks?$filter={}",
            encoded(unknown)
        ))
        .await;
    assert_eq!(listed.status, 200);
    assert!(listed.body.get("data").is_none(), "{}", listed.text);
    assert_eq!(listed.body["metadata"]["totalAvailableResults"], 0);
}

#[tokio::test]
async fn the_task_listing_pages_and_refuses_what_it_does_not_know() {
    let mock = start().await;
    let api = Api::new(&mock);
    let s = api.seeded().await;
    for name in ["a", "b", "c"] {
        api.post(&format!("{V3}/vms"), &s.vm_body(name, &s.rhcos, "ON"))
            .await;
    }
    let page = api
        .get("/api/prism/v4.0/config/tasks?$limit=2&$page=1")
        .await;
    assert_eq!(page.status, 200, "{}", page.text);
    assert_eq!(page.body["data"].as_array().unwrap().len(), 1);
    assert_eq!(page.body["metadata"]["totalAvailableResults"], 3);

    for query in [
        "$limit=0".to_owned(),
        "$limit=101".to_owned(),
        format!("$filter={}", encoded("status eq 'RUNNING'")),
        format!("$filter={}", encoded("extId in (unquoted)")),
    ] {
        let refused = api
            .get(&format!("/api/prism/v4.0/config/tasks?{query}"))
            .await;
        assert_eq!(refused.status, 400, "{query}: {}", refused.text);
        assert_eq!(
            refused.body["data"]["error"][0]["errorGroup"], "INVALID_INPUT",
            "{query}"
        );
    }
}
