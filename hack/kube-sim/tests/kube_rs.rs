//! kube-rs against a started kube-sim: CRUD, errors, patches, watches, subresources, a Controller with a
//! finalizer, and a reflector recovering from 410 Gone.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, DeleteParams, EvictParams, ListParams, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Client, CustomResource, ResourceExt};
use kube_sim::{Config, KubeSim, RunningKubeSim};
use serde::{Deserialize, Serialize};
use serde_json::json;

async fn start(config: Config) -> (RunningKubeSim, Client) {
    let sim = KubeSim::start(config).await.expect("kube-sim starts");
    let client = sim.client().expect("client");
    (sim, client)
}

/// Polls `check` every 50 ms for up to 20 s.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..400 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for: {what}");
}

fn config_map(name: &str, labels: serde_json::Value) -> ConfigMap {
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": labels}, "data": {"k": "v"}}),
    )
    .unwrap()
}

#[tokio::test]
async fn crud_errors_and_selectors() {
    let (sim, client) = start(Config::default()).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let created = cms
        .create(
            &PostParams::default(),
            &config_map("a", json!({"app": "web"})),
        )
        .await
        .unwrap();
    assert!(created.metadata.uid.is_some());
    assert!(created.metadata.creation_timestamp.is_some());
    let rv_a: u64 = created.resource_version().unwrap().parse().unwrap();
    cms.create(
        &PostParams::default(),
        &config_map("b", json!({"app": "db"})),
    )
    .await
    .unwrap();

    // AlreadyExists
    let err = cms
        .create(&PostParams::default(), &config_map("a", json!({})))
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("expected an API error")
    };
    assert_eq!(
        (status.code, status.reason.as_str()),
        (409, "AlreadyExists")
    );

    // NotFound
    let kube::Error::Api(status) = cms.get("nope").await.unwrap_err() else {
        panic!()
    };
    assert_eq!((status.code, status.reason.as_str()), (404, "NotFound"));

    // Invalid name
    let kube::Error::Api(status) = cms
        .create(&PostParams::default(), &config_map("Bad_Name", json!({})))
        .await
        .unwrap_err()
    else {
        panic!()
    };
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));

    // Invalid label value (a real server refuses spaces), on create and on patch
    let kube::Error::Api(status) = cms
        .create(
            &PostParams::default(),
            &config_map("l", json!({"zone": "PE 1"})),
        )
        .await
        .unwrap_err()
    else {
        panic!()
    };
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert!(
        status.message.contains("metadata.labels"),
        "{}",
        status.message
    );
    let patch = Patch::Merge(json!({"metadata": {"labels": {"bad key": "v"}}}));
    let kube::Error::Api(status) = cms
        .patch("a", &PatchParams::default(), &patch)
        .await
        .unwrap_err()
    else {
        panic!()
    };
    assert_eq!(status.code, 422);

    // Conflict on a stale resourceVersion
    let mut stale = created.clone();
    cms.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "v2"}})),
    )
    .await
    .unwrap();
    stale.data = Some([("k".to_string(), "v3".to_string())].into());
    let kube::Error::Api(status) = cms
        .replace("a", &PostParams::default(), &stale)
        .await
        .unwrap_err()
    else {
        panic!()
    };
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));

    // Namespace must exist
    let elsewhere: Api<ConfigMap> = Api::namespaced(client.clone(), "missing");
    let kube::Error::Api(status) = elsewhere
        .create(&PostParams::default(), &config_map("x", json!({})))
        .await
        .unwrap_err()
    else {
        panic!()
    };
    assert_eq!(status.code, 404);

    // Label selectors (equality and set-based), field selectors, paging
    let web = cms
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap();
    assert_eq!(
        web.items.iter().map(|c| c.name_any()).collect::<Vec<_>>(),
        vec!["a"]
    );
    let both = cms
        .list(&ListParams::default().labels("app in (web,db)"))
        .await
        .unwrap();
    assert_eq!(both.items.len(), 2);
    let by_name = cms
        .list(&ListParams::default().fields("metadata.name=b"))
        .await
        .unwrap();
    assert_eq!(
        by_name
            .items
            .iter()
            .map(|c| c.name_any())
            .collect::<Vec<_>>(),
        vec!["b"]
    );
    let page = cms.list(&ListParams::default().limit(1)).await.unwrap();
    assert_eq!(page.items.len(), 1);
    let token = page.metadata.continue_.clone().expect("continue token");
    let next = cms
        .list(&ListParams::default().limit(1).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(next.items[0].name_any(), "b");
    assert!(next.metadata.continue_.is_none());

    // One global counter: later writes have higher resourceVersions, across resources
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let s = secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "s"}})).unwrap(),
        )
        .await
        .unwrap();
    assert!(s.resource_version().unwrap().parse::<u64>().unwrap() > rv_a + 2);

    // generateName
    let generated = cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"generateName": "gen-"}})).unwrap(),
        )
        .await
        .unwrap();
    assert!(generated.name_any().starts_with("gen-") && generated.name_any().len() == 9);

    // The request log names verbs as RBAC does
    let log = sim.requests();
    let verbs: Vec<(&str, &str)> = log
        .iter()
        .filter(|r| r.resource == "configmaps")
        .map(|r| (r.verb.as_str(), r.name.as_str()))
        .collect();
    assert!(verbs.contains(&("create", "")));
    assert!(verbs.contains(&("patch", "a")));
    assert!(verbs.contains(&("update", "a")));
    assert!(verbs.contains(&("list", "")));
    assert!(verbs.contains(&("get", "nope")));
    assert!(log.iter().all(|r| r.user == "kube-sim-admin"));
    sim.shutdown().await;
}

#[tokio::test]
async fn patch_types_and_finalizers() {
    let (sim, client) = start(Config::default()).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    cms.create(&PostParams::default(), &config_map("p", json!({"a": "1"})))
        .await
        .unwrap();

    // JSON patch with a failing test op changes nothing
    let bad = json_patch::Patch(
        serde_json::from_value(json!([
            {"op": "test", "path": "/data/k", "value": "other"},
            {"op": "replace", "path": "/data/k", "value": "x"}
        ]))
        .unwrap(),
    );
    assert!(
        cms.patch("p", &PatchParams::default(), &Patch::<()>::Json(bad))
            .await
            .is_err()
    );
    assert_eq!(cms.get("p").await.unwrap().data.unwrap()["k"], "v");

    // Strategic merge: finalizers are merged, labels set to null are removed
    let patched = cms
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Strategic(
                json!({"metadata": {"finalizers": ["x/one"], "labels": {"a": null}}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(patched.metadata.finalizers, Some(vec!["x/one".to_string()]));
    let patched = cms
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Strategic(json!({"metadata": {"finalizers": ["x/two"]}})),
        )
        .await
        .unwrap();
    assert_eq!(
        patched.metadata.finalizers,
        Some(vec!["x/one".to_string(), "x/two".to_string()])
    );

    // Server-side apply creates, then owns what it applied: a field it stops applying goes away, another
    // manager's different value conflicts unless forced.
    let applied = cms
        .patch(
            "q",
            &PatchParams::apply("test-manager"),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "1"}})),
        )
        .await
        .unwrap();
    assert_eq!(applied.data.unwrap()["a"], "1");
    let applied = cms
        .patch(
            "q",
            &PatchParams::apply("test-manager"),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"b": "2"}})),
        )
        .await
        .unwrap();
    assert_eq!(
        applied.data.unwrap(),
        [("b".to_string(), "2".to_string())].into()
    );
    // Re-applying the same configuration is a no-op: no new resourceVersion (no watch event, no reconcile loop)
    let again = cms
        .patch(
            "q",
            &PatchParams::apply("test-manager"),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"b": "2"}})),
        )
        .await
        .unwrap();
    assert_eq!(
        again.resource_version(),
        cms.get("q").await.unwrap().resource_version()
    );
    let before = sim.store().resource_version();
    cms.patch(
        "q",
        &PatchParams::apply("test-manager"),
        &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"b": "2"}})),
    )
    .await
    .unwrap();
    assert_eq!(sim.store().resource_version(), before);
    let other = Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"b": "3"}}));
    let kube::Error::Api(status) = cms
        .patch("q", &PatchParams::apply("other-manager"), &other)
        .await
        .unwrap_err()
    else {
        panic!()
    };
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    assert!(
        status
            .message
            .contains("conflict with \"test-manager\": .data.b"),
        "{}",
        status.message
    );
    let forced = cms
        .patch("q", &PatchParams::apply("other-manager").force(), &other)
        .await
        .unwrap();
    assert_eq!(forced.data.unwrap()["b"], "3");
    let managers: Vec<String> = cms
        .get("q")
        .await
        .unwrap()
        .managed_fields()
        .iter()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert_eq!(
        managers,
        vec!["other-manager".to_string()],
        "test-manager lost its only field"
    );

    // Delete with finalizers: deletionTimestamp set, object kept until the last finalizer goes
    let deleted = cms.delete("p", &DeleteParams::default()).await.unwrap();
    let kept = deleted.left().expect("object still there");
    assert!(kept.metadata.deletion_timestamp.is_some());
    let kube::Error::Api(status) = cms
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["x/one", "x/two", "x/three"]}})),
        )
        .await
        .unwrap_err()
    else {
        panic!()
    };
    assert_eq!(status.code, 422, "no new finalizers while deleting");
    cms.patch(
        "p",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": ["x/two"]}})),
    )
    .await
    .unwrap();
    assert!(cms.get_opt("p").await.unwrap().is_some());
    cms.patch(
        "p",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert!(cms.get_opt("p").await.unwrap().is_none());

    // Delete precondition on uid
    let q = cms.get("q").await.unwrap();
    let wrong = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: Some("wrong".into()),
            resource_version: None,
        }),
        ..Default::default()
    };
    let kube::Error::Api(status) = cms.delete("q", &wrong).await.unwrap_err() else {
        panic!()
    };
    assert_eq!(status.code, 409);
    let right = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: q.metadata.uid.clone(),
            resource_version: None,
        }),
        ..Default::default()
    };
    cms.delete("q", &right).await.unwrap();
    sim.shutdown().await;
}

/// A PUT of a missing Lease (a kind whose strategy allows create on update) creates it, unless
/// it carries the UID of the one that was deleted: then its precondition fails with a 409, as the
/// real kube-apiserver answered a kubelet renewing the Lease the garbage collector had just
/// deleted. A missing ConfigMap (no create on update) is a 404.
#[tokio::test]
async fn a_put_creates_a_missing_lease_unless_it_names_the_deleted_ones_uid() {
    use k8s_openapi::api::coordination::v1::Lease;
    let (_sim, client) = start(Config::default()).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": "node-a", "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": "node-a", "leaseDurationSeconds": 40},
    }))
    .unwrap();
    let written = leases.create(&PostParams::default(), &lease).await.unwrap();
    leases
        .delete("node-a", &DeleteParams::default())
        .await
        .unwrap();
    let error = leases
        .replace("node-a", &PostParams::default(), &written)
        .await
        .unwrap_err();
    match error {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 409, "{status:?}");
            assert!(
                status
                    .message
                    .contains("Precondition failed: UID in precondition"),
                "{status:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(leases.get_opt("node-a").await.unwrap().is_none());

    let created = leases
        .replace("node-a", &PostParams::default(), &lease)
        .await
        .unwrap();
    assert_ne!(created.uid(), written.uid(), "a new Lease");
    assert_eq!(
        created.spec.unwrap().holder_identity.as_deref(),
        Some("node-a")
    );

    let config_maps: Api<ConfigMap> = Api::namespaced(client, "default");
    let error = config_maps
        .replace(
            "absent",
            &PostParams::default(),
            &config_map("absent", json!({})),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&error, kube::Error::Api(status) if status.code == 404),
        "{error:?}"
    );
}

#[tokio::test]
async fn owner_references_are_garbage_collected() {
    let (sim, client) = start(Config {
        gc_interval: Duration::from_millis(100),
        ..Config::default()
    })
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let owner = cms
        .create(&PostParams::default(), &config_map("owner", json!({})))
        .await
        .unwrap();
    let owner_ref = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.uid().unwrap(), "controller": true}]);
    for name in ["child-1", "child-2"] {
        let child: ConfigMap = serde_json::from_value(
            json!({"metadata": {"name": name, "ownerReferences": owner_ref}}),
        )
        .unwrap();
        cms.create(&PostParams::default(), &child).await.unwrap();
    }
    // Orphan: the children stay, without the owner reference
    let orphaned_owner = cms
        .create(&PostParams::default(), &config_map("owner-2", json!({})))
        .await
        .unwrap();
    let orphan: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "orphan", "ownerReferences": [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner-2", "uid": orphaned_owner.uid().unwrap()}]}}))
    .unwrap();
    cms.create(&PostParams::default(), &orphan).await.unwrap();
    cms.delete("owner-2", &DeleteParams::orphan())
        .await
        .unwrap();
    // Foreground: the owner waits for its dependents
    cms.delete("owner", &DeleteParams::foreground())
        .await
        .unwrap();
    eventually("children and owners gone", || async {
        let names: Vec<String> = cms
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .map(|c| c.name_any())
            .collect();
        names == vec!["orphan".to_string()]
    })
    .await;
    let orphan = cms.get("orphan").await.unwrap();
    assert!(
        orphan
            .metadata
            .owner_references
            .unwrap_or_default()
            .is_empty()
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn watch_events_selectors_bookmarks_and_gone() {
    let (sim, client) = start(Config {
        history_limit: 5,
        bookmark_interval: Duration::from_millis(200),
        ..Config::default()
    })
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let first = cms
        .create(
            &PostParams::default(),
            &config_map("w1", json!({"app": "web"})),
        )
        .await
        .unwrap();
    let rv = first.resource_version().unwrap();

    let mut stream = cms
        .watch(&WatchParams::default().labels("app=web").timeout(5), &rv)
        .await
        .unwrap()
        .boxed();
    cms.patch(
        "w1",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "2"}})),
    )
    .await
    .unwrap();
    cms.create(
        &PostParams::default(),
        &config_map("other", json!({"app": "db"})),
    )
    .await
    .unwrap();
    // Leaving the selector is a DELETED event for this watcher
    cms.patch(
        "w1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "db"}}})),
    )
    .await
    .unwrap();
    let mut kinds = vec![];
    while kinds.len() < 2 {
        match stream.try_next().await.unwrap().unwrap() {
            WatchEvent::Modified(cm) => kinds.push(("MODIFIED", cm.name_any())),
            WatchEvent::Deleted(cm) => kinds.push(("DELETED", cm.name_any())),
            WatchEvent::Added(cm) => kinds.push(("ADDED", cm.name_any())),
            WatchEvent::Bookmark(_) | WatchEvent::Error(_) => {}
        }
    }
    assert_eq!(
        kinds,
        vec![
            ("MODIFIED", "w1".to_string()),
            ("DELETED", "w1".to_string())
        ]
    );

    // Bookmarks arrive when asked for
    let mut bookmarked = cms
        .watch(&WatchParams::default().timeout(5), "0")
        .await
        .unwrap()
        .boxed();
    let mut saw_bookmark = false;
    while let Some(event) = bookmarked.try_next().await.unwrap() {
        if matches!(event, WatchEvent::Bookmark(_)) {
            saw_bookmark = true;
            break;
        }
    }
    assert!(saw_bookmark);

    // A resourceVersion older than the history answers 410 in the stream
    for i in 0..10 {
        cms.create(
            &PostParams::default(),
            &config_map(&format!("fill-{i}"), json!({})),
        )
        .await
        .unwrap();
    }
    let mut gone = cms
        .watch(&WatchParams::default().timeout(5), &rv)
        .await
        .unwrap()
        .boxed();
    match gone.try_next().await.unwrap() {
        Some(WatchEvent::Error(status)) => {
            assert_eq!((status.code, status.reason.as_str()), (410, "Expired"))
        }
        other => panic!("expected a 410 error event, got {other:?}"),
    }

    // timeoutSeconds closes the stream
    let started = std::time::Instant::now();
    let mut short = cms
        .watch(
            &WatchParams::default().timeout(1),
            &sim.store().resource_version().to_string(),
        )
        .await
        .unwrap()
        .boxed();
    while short.try_next().await.unwrap().is_some() {}
    assert!(started.elapsed() < Duration::from_secs(10));
    sim.shutdown().await;
}

#[tokio::test]
async fn streaming_list_initial_events_fill_a_reflector() {
    let (sim, client) = start(Config::default()).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for i in 0..3 {
        cms.create(
            &PostParams::default(),
            &config_map(&format!("s{i}"), json!({})),
        )
        .await
        .unwrap();
    }
    let (reader, writer) = reflector::store();
    let stream = reflector(
        writer,
        watcher(cms.clone(), watcher::Config::default().streaming_lists()),
    )
    .applied_objects();
    let task = tokio::spawn(stream.for_each(|_| async {}));
    reader.wait_until_ready().await.unwrap();
    assert_eq!(reader.state().len(), 3);
    cms.create(&PostParams::default(), &config_map("s3", json!({})))
        .await
        .unwrap();
    eventually("reflector sees s3", || async { reader.state().len() == 4 }).await;
    let log = sim.requests();
    assert!(
        log.iter()
            .any(|r| r.resource == "configmaps" && r.verb == "watch")
    );
    assert!(
        !log.iter()
            .any(|r| r.resource == "configmaps" && r.verb == "list"),
        "streaming lists need no list call"
    );
    task.abort();
    sim.shutdown().await;
}

#[tokio::test]
async fn reflector_recovers_from_410_gone() {
    // Tiny history, no bookmarks within the test: the configmap watcher's resourceVersion falls out of the
    // window while secrets are written, and its next watch gets 410.
    let (sim, client) = start(Config {
        history_limit: 3,
        bookmark_interval: Duration::from_secs(3600),
        ..Config::default()
    })
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    cms.create(&PostParams::default(), &config_map("before", json!({})))
        .await
        .unwrap();
    let (reader, writer) = reflector::store();
    let stream = reflector(
        writer,
        watcher(cms.clone(), watcher::Config::default().timeout(1)),
    )
    .default_backoff()
    .applied_objects();
    let task = tokio::spawn(stream.for_each(|_| async {}));
    reader.wait_until_ready().await.unwrap();
    for i in 0..10 {
        secrets
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": format!("s{i}")}})).unwrap(),
            )
            .await
            .unwrap();
    }
    // While the watcher relists, this object must still reach the store.
    eventually("a relist after 410", || async {
        sim.requests()
            .iter()
            .filter(|r| r.resource == "configmaps" && r.verb == "list")
            .count()
            >= 2
    })
    .await;
    cms.create(&PostParams::default(), &config_map("after", json!({})))
        .await
        .unwrap();
    eventually("reflector holds both objects", || async {
        let mut names: Vec<String> = reader.state().iter().map(|c| c.name_any()).collect();
        names.sort();
        names == vec!["after".to_string(), "before".to_string()]
    })
    .await;
    task.abort();
    sim.shutdown().await;
}

#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq)]
#[kube(
    group = "example.com",
    version = "v1",
    kind = "Widget",
    namespaced,
    status = "WidgetStatus",
    schema = "disabled"
)]
pub struct WidgetSpec {
    size: i64,
}

#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default)]
pub struct WidgetStatus {
    phase: String,
    observed_size: i64,
}

fn widget_crd() -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.size", "statusReplicasPath": ".status.observed_size"}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
    }))
    .unwrap()
}

#[derive(Debug, thiserror::Error)]
enum ReconcileError {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<kube::Error>>),
}

struct Ctx {
    client: Client,
    cleaned: Mutex<Vec<String>>,
}

async fn reconcile(widget: Arc<Widget>, ctx: Arc<Ctx>) -> Result<Action, ReconcileError> {
    let api: Api<Widget> = Api::namespaced(ctx.client.clone(), &widget.namespace().unwrap());
    finalizer(&api, "example.com/cleanup", widget, |event| async {
        match event {
            FinalizerEvent::Apply(w) => {
                let status = json!({"status": {"phase": "Ready", "observed_size": w.spec.size}});
                api.patch_status(
                    &w.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(status),
                )
                .await?;
                Ok(Action::await_change())
            }
            FinalizerEvent::Cleanup(w) => {
                ctx.cleaned.lock().unwrap().push(w.name_any());
                Ok(Action::await_change())
            }
        }
    })
    .await
    .map_err(|e| ReconcileError::Finalizer(Box::new(e)))
}

#[tokio::test]
async fn controller_with_finalizer_and_status_runs_to_completion() {
    let (sim, client) = start(Config::default()).await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &widget_crd())
        .await
        .unwrap();
    let widgets: Api<Widget> = Api::namespaced(client.clone(), "default");
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        cleaned: Mutex::new(vec![]),
    });
    let controller = Controller::new(widgets.clone(), watcher::Config::default())
        .run(
            reconcile,
            |_, _, _| Action::requeue(Duration::from_millis(200)),
            ctx.clone(),
        )
        .for_each(|_| async {});
    let task = tokio::spawn(controller);

    widgets
        .create(
            &PostParams::default(),
            &Widget::new("w", WidgetSpec { size: 3 }),
        )
        .await
        .unwrap();
    eventually("status Ready with finalizer", || async {
        let w = widgets.get("w").await.unwrap();
        w.status
            .as_ref()
            .is_some_and(|s| s.phase == "Ready" && s.observed_size == 3)
            && w.finalizers() == ["example.com/cleanup"]
    })
    .await;
    // Writes to the main resource ignore status; spec changes bump generation
    let w = widgets
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 4}, "status": {"phase": "Hacked"}})),
        )
        .await
        .unwrap();
    assert_eq!(w.metadata.generation, Some(2));
    assert_ne!(w.status.unwrap().phase, "Hacked");
    eventually("status follows the spec", || async {
        widgets
            .get("w")
            .await
            .unwrap()
            .status
            .is_some_and(|s| s.observed_size == 4)
    })
    .await;

    // Scale subresource from the CRD's paths
    let scale = widgets.get_scale("w").await.unwrap();
    assert_eq!(scale.spec.unwrap().replicas, Some(4));
    widgets
        .patch_scale(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 6}})),
        )
        .await
        .unwrap();
    assert_eq!(widgets.get("w").await.unwrap().spec.size, 6);
    // At 0 the API server omits spec.replicas (k8s.io/api v0.34.2 autoscaling/v1 ScaleSpec,
    // `omitempty`) and keeps status.replicas.
    widgets
        .patch_scale(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 0}})),
        )
        .await
        .unwrap();
    let scale = widgets.get_scale("w").await.unwrap();
    assert_eq!(scale.spec.and_then(|s| s.replicas), None);
    assert!(scale.status.is_some());

    widgets.delete("w", &DeleteParams::default()).await.unwrap();
    eventually("widget gone after cleanup", || async {
        widgets.get_opt("w").await.unwrap().is_none()
    })
    .await;
    assert_eq!(*ctx.cleaned.lock().unwrap(), vec!["w".to_string()]);

    let log = sim.requests();
    let calls: Vec<(&str, &str)> = log
        .iter()
        .filter(|r| r.resource == "widgets")
        .map(|r| (r.verb.as_str(), r.subresource.as_str()))
        .collect();
    assert!(calls.contains(&("patch", "status")));
    assert!(
        calls.contains(&("patch", "")),
        "finalizer add/remove are patches"
    );
    assert!(calls.contains(&("watch", "")));
    assert!(calls.contains(&("patch", "scale")));
    let rbac = kube_sim::rbac_calls(&log, "");
    let call = |resource: &str, verb: &str| kube_sim::RbacCall {
        api_group: "example.com".into(),
        resource: resource.into(),
        verb: verb.into(),
    };
    for expected in [
        call("widgets", "list"),
        call("widgets", "watch"),
        call("widgets", "patch"),
        call("widgets/status", "patch"),
    ] {
        assert!(
            rbac.contains(&expected),
            "{expected:?} missing from {rbac:?}"
        );
    }
    task.abort();
    sim.shutdown().await;
}

#[tokio::test]
async fn eviction_honours_pod_disruption_budgets() {
    let (sim, _) = start(Config::default()).await;
    // kube-rs would retry the 429 for minutes by default.
    let mut config = sim.kube_config();
    config.default_retry = false;
    let client = Client::try_from(config).unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for name in ["p1", "p2"] {
        let pod: Pod =
            serde_json::from_value(json!({"metadata": {"name": name, "labels": {"app": "web"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]}}))
            .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
        // Pods start Pending (the status of a create is reset, as the real server does); the kubelet's part:
        pods.patch_status(name, &PatchParams::default(), &Patch::Merge(json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})))
            .await
            .unwrap();
    }
    let pdbs: Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> =
        Api::namespaced(client.clone(), "default");
    pdbs.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "web"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}})).unwrap())
        .await
        .unwrap();
    let pdb = pdbs.get("web").await.unwrap();
    assert_eq!(pdb.status.as_ref().unwrap().disruptions_allowed, 1);
    assert_eq!(pdb.status.as_ref().unwrap().expected_pods, 2);

    pods.evict("p1", &EvictParams::default()).await.unwrap();
    assert!(pods.get_opt("p1").await.unwrap().is_none());
    let kube::Error::Api(status) = pods.evict("p2", &EvictParams::default()).await.unwrap_err()
    else {
        panic!()
    };
    assert_eq!(
        (status.code, status.reason.as_str()),
        (429, "TooManyRequests")
    );
    assert_eq!(
        pdbs.get("web")
            .await
            .unwrap()
            .status
            .unwrap()
            .disruptions_allowed,
        0
    );
    assert!(sim.requests().iter().any(|r| r.resource == "pods"
        && r.subresource == "eviction"
        && r.verb == "create"
        && r.status == 429));

    // Cordon is a patch of the node
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "n1"}})).unwrap(),
        )
        .await
        .unwrap();
    nodes.cordon("n1").await.unwrap();
    assert_eq!(
        nodes.get("n1").await.unwrap().spec.unwrap().unschedulable,
        Some(true)
    );
    let cordoned = pods
        .list(&ListParams::default().fields("spec.nodeName=n1"))
        .await
        .unwrap();
    assert_eq!(cordoned.items.len(), 1);
    sim.shutdown().await;
}

/// A Node's providerID is set once, from empty, by whoever comes first; a later write of another
/// value is refused (422), whatever resourceVersion it carries, and one of the same value is not
/// (`ValidateNodeUpdate`).
#[tokio::test]
async fn a_nodes_provider_id_changes_only_from_empty() {
    let (sim, client) = start(Config::default()).await;
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "n1"}})).unwrap(),
        )
        .await
        .unwrap();
    let set = |id: &str| Patch::Merge(json!({"spec": {"providerID": id}}));
    nodes
        .patch("n1", &PatchParams::default(), &set("nutanix://first"))
        .await
        .unwrap();
    nodes
        .patch("n1", &PatchParams::default(), &set("nutanix://first"))
        .await
        .unwrap();
    let kube::Error::Api(status) = nodes
        .patch("n1", &PatchParams::default(), &set("nutanix://second"))
        .await
        .unwrap_err()
    else {
        panic!()
    };
    assert_eq!(status.code, 422, "{status:?}");
    assert!(status.message.contains("spec.providerID"), "{status:?}");
    assert_eq!(
        nodes
            .get("n1")
            .await
            .unwrap()
            .spec
            .unwrap()
            .provider_id
            .as_deref(),
        Some("nutanix://first")
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn csr_approval_subresource() {
    let (sim, client) = start(Config::default()).await;
    let csrs: Api<CertificateSigningRequest> = Api::all(client.clone());
    let csr: CertificateSigningRequest = serde_json::from_value(json!({"metadata": {"name": "node-csr"},
        "spec": {"request": "AAAA", "signerName": "kubernetes.io/kubelet-serving", "usages": ["server auth"], "username": "system:node:n1"},
        "status": {"conditions": [{"type": "Approved", "status": "True"}]}}))
    .unwrap();
    let created = csrs.create(&PostParams::default(), &csr).await.unwrap();
    assert!(
        created
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .is_empty(),
        "status is reset on create"
    );
    let approval = json!({"status": {"conditions": [{"type": "Approved", "status": "True", "reason": "Test", "message": "ok"}]}});
    csrs.patch_subresource(
        "approval",
        "node-csr",
        &PatchParams::default(),
        &Patch::Merge(approval),
    )
    .await
    .unwrap();
    let approved = csrs.get("node-csr").await.unwrap();
    let condition = &approved.status.unwrap().conditions.unwrap()[0];
    assert_eq!(condition.type_, "Approved");
    assert!(condition.last_update_time.is_some());
    let both = json!({"status": {"conditions": [{"type": "Approved", "status": "True"}, {"type": "Denied", "status": "True"}]}});
    let kube::Error::Api(status) = csrs
        .patch_subresource(
            "approval",
            "node-csr",
            &PatchParams::default(),
            &Patch::Merge(both),
        )
        .await
        .unwrap_err()
    else {
        panic!()
    };
    assert_eq!(status.code, 422);
    sim.shutdown().await;
}

#[tokio::test]
async fn kubeconfig_works_for_kube_rs() {
    let (sim, _) = start(Config::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&path).unwrap();
    let kubeconfig = kube::config::Kubeconfig::read_from(&path).unwrap();
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(config.default_namespace, "default");
    let client = Client::try_from(config).unwrap();
    let version = client.apiserver_version().await.unwrap();
    assert_eq!(version.minor, "33");
    let ns: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client);
    assert!(
        ns.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .any(|n| n.name_any() == "kube-system")
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn event_recorder_creates_then_patches_a_series() {
    use kube::runtime::events::{Event, EventType, Recorder};
    let (sim, client) = start(Config::default()).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm = cms
        .create(&PostParams::default(), &config_map("subject", json!({})))
        .await
        .unwrap();
    let recorder = Recorder::new(client.clone(), "nutanix-machine-controller".into());
    let event = Event {
        type_: EventType::Normal,
        reason: "Created".into(),
        note: Some("VM created".into()),
        action: "Create".into(),
        secondary: None,
    };
    let reference = kube::Resource::object_ref(&cm, &());
    recorder.publish(&event, &reference).await.unwrap();
    recorder.publish(&event, &reference).await.unwrap();
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), "default");
    let list = events.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.items[0].series.as_ref().unwrap().count, 2);
    let calls: Vec<(String, String)> = sim
        .requests()
        .into_iter()
        .filter(|r| r.resource == "events")
        .map(|r| (r.api_group, r.verb))
        .collect();
    let expected: Vec<(String, String)> = [
        ("events.k8s.io", "create"),
        ("events.k8s.io", "patch"),
        ("events.k8s.io", "list"),
    ]
    .iter()
    .map(|(g, v)| (g.to_string(), v.to_string()))
    .collect();
    assert_eq!(
        calls, expected,
        "the recorder creates, then patches the series; the test lists"
    );
    // The same event through core/v1 (what kubectl get events and describe read)
    let core: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), "default");
    let core_events = core
        .list(&ListParams::default().fields("involvedObject.name=subject"))
        .await
        .unwrap();
    assert_eq!(core_events.items.len(), 1);
    assert_eq!(core_events.items[0].message.as_deref(), Some("VM created"));
    assert_eq!(
        core_events.items[0].reporting_component.as_deref(),
        Some("nutanix-machine-controller")
    );
    let by_regarding = events
        .list(&ListParams::default().fields("regarding.name=subject"))
        .await
        .unwrap();
    assert_eq!(by_regarding.items.len(), 1);
    sim.shutdown().await;
}

#[tokio::test]
async fn http_errors_are_metav1_status() {
    let (sim, client) = start(Config::default()).await;
    let send = |method: &str, path: &str, content_type: &str, body: &str| {
        let request = http::Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", content_type)
            .body(body.as_bytes().to_vec())
            .unwrap();
        let client = client.clone();
        async move {
            match client.request_text(request).await {
                Ok(text) => (200, text),
                Err(kube::Error::Api(status)) => (status.code, status.reason),
                Err(other) => panic!("unexpected error {other}"),
            }
        }
    };
    assert_eq!(
        send("GET", "/apis/nope.example.com/v1/things", "", "").await,
        (404, "NotFound".into())
    );
    assert_eq!(
        send(
            "PUT",
            "/api/v1/namespaces/default/configmaps",
            "application/json",
            "{}"
        )
        .await,
        (405, "MethodNotAllowed".into())
    );
    assert_eq!(
        send(
            "GET",
            "/api/v1/namespaces/default/configmaps?fieldSelector=spec.foo%3Dx",
            "",
            ""
        )
        .await,
        (400, "BadRequest".into())
    );
    assert_eq!(
        send("GET", "/api/v1/pods?labelSelector=a%20in%20b", "", "").await,
        (400, "BadRequest".into())
    );
    send(
        "POST",
        "/api/v1/namespaces/default/configmaps",
        "application/json",
        r#"{"metadata":{"name":"c"}}"#,
    )
    .await;
    assert_eq!(
        send(
            "PATCH",
            "/api/v1/namespaces/default/configmaps/c",
            "application/json",
            "{}"
        )
        .await,
        (415, "UnsupportedMediaType".into())
    );
    assert_eq!(
        send(
            "POST",
            "/api/v1/namespaces/default/configmaps",
            "application/json",
            r#"{"kind":"Secret","metadata":{"name":"d"}}"#
        )
        .await
        .0,
        400
    );
    assert_eq!(
        send(
            "POST",
            "/api/v1/namespaces/default/configmaps",
            "application/json",
            r#"{"metadata":{"name":"e","namespace":"other"}}"#
        )
        .await
        .0,
        400
    );
    // Strategic merge is refused for custom resources
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &widget_crd())
        .await
        .unwrap();
    send("POST", "/apis/example.com/v1/namespaces/default/widgets", "application/json", r#"{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"size":1}}"#).await;
    assert_eq!(
        send(
            "PATCH",
            "/apis/example.com/v1/namespaces/default/widgets/w",
            "application/strategic-merge-patch+json",
            "{}"
        )
        .await,
        (415, "UnsupportedMediaType".into())
    );
    // Custom resources need a resourceVersion to be replaced
    let (code, reason) = send("PUT", "/apis/example.com/v1/namespaces/default/widgets/w", "application/json", r#"{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"size":2}}"#).await;
    assert_eq!((code, reason.as_str()), (422, "Invalid"));
    // Discovery and OpenAPI documents
    let (_, core) = send("GET", "/api/v1", "", "").await;
    let core: serde_json::Value = serde_json::from_str(&core).unwrap();
    assert!(
        core["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == "pods/eviction")
    );
    let (_, widgets) = send("GET", "/apis/example.com/v1", "", "").await;
    let widgets: serde_json::Value = serde_json::from_str(&widgets).unwrap();
    let scale = widgets["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "widgets/scale")
        .unwrap()
        .clone();
    assert_eq!(
        (scale["group"].as_str(), scale["kind"].as_str()),
        (Some("autoscaling"), Some("Scale"))
    );
    let (_, openapi) = send("GET", "/openapi/v3", "", "").await;
    assert!(openapi.contains("apis/example.com/v1"));
    // Deleting the CRD removes its objects and stops serving them
    crds.delete("widgets.example.com", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(
        send(
            "GET",
            "/apis/example.com/v1/namespaces/default/widgets/w",
            "",
            ""
        )
        .await
        .0,
        404
    );
    assert!(sim.store().resource("example.com", "widgets").is_none());
    sim.shutdown().await;
}

#[tokio::test]
async fn deleting_a_namespace_removes_its_contents() {
    let (sim, client) = start(Config {
        gc_interval: Duration::from_millis(100),
        namespaces: vec!["doomed".into()],
        ..Config::default()
    })
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "doomed");
    cms.create(&PostParams::default(), &config_map("c", json!({})))
        .await
        .unwrap();
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let terminating = namespaces
        .delete("doomed", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .unwrap();
    assert_eq!(
        terminating.status.unwrap().phase.as_deref(),
        Some("Terminating")
    );
    eventually("namespace gone", || async {
        namespaces.get_opt("doomed").await.unwrap().is_none()
    })
    .await;
    assert!(sim.list("", "configmaps").unwrap().is_empty());
    sim.shutdown().await;
}

#[tokio::test]
async fn table_watch_sends_rows_with_columns_first() {
    let (sim, client) = start(Config::default()).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    cms.create(&PostParams::default(), &config_map("t1", json!({})))
        .await
        .unwrap();
    cms.create(&PostParams::default(), &config_map("t2", json!({})))
        .await
        .unwrap();
    let request =
        http::Request::get("/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=1")
            .header(
                "accept",
                "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
            )
            .body(Vec::new())
            .unwrap();
    let text = client.request_text(request).await.unwrap();
    let events: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0]["object"]["kind"], "Table");
    assert_eq!(events[0]["object"]["columnDefinitions"][0]["name"], "Name");
    assert_eq!(events[1]["object"]["columnDefinitions"], json!([]));
    assert_eq!(events[1]["object"]["rows"][0]["cells"][0], "t2");
    sim.shutdown().await;
}

#[tokio::test]
async fn https_with_the_generated_ca_works_for_kube_rs() {
    let (sim, client) = start(Config {
        tls: true,
        ..Config::default()
    })
    .await;
    assert!(sim.url().starts_with("https://127.0.0.1:"));
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let mut events = cms
        .watch(&WatchParams::default().timeout(5), "0")
        .await
        .unwrap()
        .boxed();
    cms.create(&PostParams::default(), &config_map("over-tls", json!({})))
        .await
        .unwrap();
    match events.try_next().await.unwrap() {
        Some(WatchEvent::Added(cm)) => assert_eq!(cm.name_any(), "over-tls"),
        other => panic!("expected ADDED, got {other:?}"),
    }
    // The kubeconfig carries the CA
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&path).unwrap();
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&path).unwrap(),
        &Default::default(),
    )
    .await
    .unwrap();
    let from_file: Api<ConfigMap> = Api::namespaced(Client::try_from(config).unwrap(), "default");
    assert!(from_file.get_opt("over-tls").await.unwrap().is_some());
    // A client that does not trust the CA is refused
    let mut untrusting = sim.kube_config();
    untrusting.root_cert = None;
    let stranger: Api<ConfigMap> =
        Api::namespaced(Client::try_from(untrusting).unwrap(), "default");
    assert!(stranger.get_opt("over-tls").await.is_err());
    sim.shutdown().await;
}

#[tokio::test]
async fn metadata_only_get_list_and_watch() {
    let (sim, client) = start(Config::default()).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    cms.create(
        &PostParams::default(),
        &config_map("m1", json!({"app": "x"})),
    )
    .await
    .unwrap();
    let meta = cms.get_metadata("m1").await.unwrap();
    assert_eq!(
        meta.types.as_ref().map(|t| t.kind.as_str()),
        Some("PartialObjectMetadata")
    );
    assert_eq!(meta.metadata.labels.unwrap()["app"], "x");
    let list = cms.list_metadata(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    let meta_api: Api<kube::core::PartialObjectMeta<ConfigMap>> =
        Api::namespaced(client.clone(), "default");
    let (reader, writer) = reflector::store();
    let stream = reflector(writer, watcher(meta_api, watcher::Config::default())).applied_objects();
    let task = tokio::spawn(stream.for_each(|_| async {}));
    reader.wait_until_ready().await.unwrap();
    cms.create(&PostParams::default(), &config_map("m2", json!({})))
        .await
        .unwrap();
    eventually("metadata watcher sees m2", || async {
        reader.state().len() == 2
    })
    .await;
    task.abort();
    let request = http::Request::get("/api/v1/namespaces/default/configmaps/m1")
        .header(
            "accept",
            "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
        )
        .body(Vec::new())
        .unwrap();
    let raw: serde_json::Value =
        serde_json::from_str(&client.request_text(request).await.unwrap()).unwrap();
    assert!(raw.get("data").is_none(), "only metadata is sent");
    sim.shutdown().await;
}

/// The real server folds `stringData` into `data` when it decodes a Secret, on every write, and
/// never stores it (kubernetes/kubernetes `pkg/apis/core/v1/conversion.go`,
/// `Convert_v1_Secret_To_core_Secret`).
#[tokio::test]
async fn secret_string_data_is_folded_into_data() {
    let (sim, client) = start(Config::default()).await;
    let secrets: Api<Secret> = Api::namespaced(client, "default");
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "creds"},
        "data": {"kept": "a2VwdA==", "credentials": "b2xk"},
        "stringData": {"credentials": "[{\"type\": \"basic_auth\"}]"},
    }))
    .unwrap();
    let created = secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    assert!(created.string_data.is_none(), "never stored");
    let data = created.data.unwrap();
    assert_eq!(
        data["credentials"].0, b"[{\"type\": \"basic_auth\"}]",
        "stringData wins"
    );
    assert_eq!(data["kept"].0, b"kept");

    // A patch carrying stringData (what kubectl apply sends for a changed manifest) too.
    let patched = secrets
        .patch(
            "creds",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"userData": "#cloud-config"}})),
        )
        .await
        .unwrap();
    assert!(patched.string_data.is_none());
    assert_eq!(patched.data.unwrap()["userData"].0, b"#cloud-config");
    let stored = sim.get("", "secrets", "default", "creds").unwrap();
    assert!(stored.get("stringData").is_none(), "{stored}");

    let bad = secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "bad"}})).unwrap(),
        )
        .await;
    assert!(bad.is_ok());
    let error = secrets
        .patch(
            "bad",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"n": 1}})),
        )
        .await
        .unwrap_err();
    assert!(matches!(error, kube::Error::Api(status) if status.code == 400));
    sim.shutdown().await;
}

/// With the machine-api-operator's webhooks on, a Machine or MachineSet created through the API
/// (POST, or a server-side apply that creates) is stored as the operator's defaulting leaves it;
/// an update is not defaulted (the webhooks are registered for CREATE only); a providerSpec the
/// Go type cannot read is refused with 403.
#[tokio::test]
async fn machine_api_webhooks_default_creates_only() {
    let (sim, client) = start(Config {
        namespaces: vec!["openshift-machine-api".to_owned()],
        machine_api_webhooks: Some(kube_sim::webhooks::MachineApiWebhooks {
            infrastructure_name: "sandbox".to_owned(),
        }),
        ..Config::default()
    })
    .await;
    for file in [
        "machine.openshift.io_machines.yaml",
        "machine.openshift.io_machinesets.yaml",
    ] {
        let path = format!("{}/../../manifests/crds/{file}", env!("CARGO_MANIFEST_DIR"));
        for crd in kube_sim::load::documents(&std::fs::read_to_string(path).unwrap()).unwrap() {
            sim.create(crd).unwrap();
        }
    }
    let resource = |kind: &str, plural: &str| {
        kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("machine.openshift.io", "v1beta1", kind),
            plural,
        )
    };
    let machines: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        "openshift-machine-api",
        &resource("Machine", "machines"),
    );
    let value = json!({"apiVersion": "machine.openshift.io/v1", "kind": "NutanixMachineProviderConfig",
        "imageKind": "Template", "memorySize": "8192Mi"});
    let machine: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
        "metadata": {"name": "m1"}, "spec": {"providerSpec": {"value": value}}}))
    .unwrap();
    machines
        .create(&PostParams::default(), &machine)
        .await
        .unwrap();
    let stored = sim
        .get(
            "machine.openshift.io",
            "machines",
            "openshift-machine-api",
            "m1",
        )
        .unwrap();
    let stored_value = &stored["spec"]["providerSpec"]["value"];
    assert!(stored_value.get("imageKind").is_none(), "{stored_value}");
    assert_eq!(stored_value["memorySize"], "8Gi");
    assert_eq!(
        stored_value["userDataSecret"],
        json!({"name": "worker-user-data"})
    );
    assert_eq!(
        stored["metadata"]["labels"]["machine.openshift.io/cluster-api-cluster"],
        "sandbox"
    );

    // An update is not defaulted.
    machines
        .patch(
            "m1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"providerSpec": {"value": {"imageKind": "VM"}}}})),
        )
        .await
        .unwrap();
    let stored = sim
        .get(
            "machine.openshift.io",
            "machines",
            "openshift-machine-api",
            "m1",
        )
        .unwrap();
    assert_eq!(stored["spec"]["providerSpec"]["value"]["imageKind"], "VM");

    // A server-side apply that creates a MachineSet goes through the MachineSet webhook.
    let sets: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        "openshift-machine-api",
        &resource("MachineSet", "machinesets"),
    );
    let set = json!({"apiVersion": "machine.openshift.io/v1beta1", "kind": "MachineSet",
        "metadata": {"name": "s1"},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"set": "s1"}},
                 "template": {"metadata": {"labels": {"set": "s1"}},
                              "spec": {"providerSpec": {"value": {"guestCustomization": {"type": "Sysprep"}}}}}}});
    sets.patch("s1", &PatchParams::apply("test"), &Patch::Apply(&set))
        .await
        .unwrap();
    let stored = sim
        .get(
            "machine.openshift.io",
            "machinesets",
            "openshift-machine-api",
            "s1",
        )
        .unwrap();
    let template_value = &stored["spec"]["template"]["spec"]["providerSpec"]["value"];
    assert!(
        template_value.get("guestCustomization").is_none(),
        "{template_value}"
    );
    assert_eq!(
        template_value["credentialsSecret"]["name"],
        "nutanix-credentials"
    );

    let bad: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
        "metadata": {"name": "bad"}, "spec": {"providerSpec": {"value": {"vcpuSockets": "two"}}}}))
    .unwrap();
    let error = machines
        .create(&PostParams::default(), &bad)
        .await
        .unwrap_err();
    match error {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 403);
            assert!(
                status
                    .message
                    .starts_with("admission webhook \"default.machine.machine.openshift.io\" denied the request: providerSpec.value"),
                "{}",
                status.message
            );
        }
        other => panic!("{other}"),
    }
    assert!(
        sim.get(
            "machine.openshift.io",
            "machines",
            "openshift-machine-api",
            "bad"
        )
        .is_err()
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn each_request_and_change_carries_when_it_happened_in_a_comparable_order() {
    let (sim, client) = start(Config::default()).await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let before = std::time::Instant::now();
    cms.create(&PostParams::default(), &config_map("timed", json!({})))
        .await
        .unwrap();
    cms.patch(
        "timed",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "w"}})),
    )
    .await
    .unwrap();
    let after = std::time::Instant::now();

    let writes: Vec<_> = sim
        .request_log()
        .timed_records()
        .into_iter()
        .filter(|r| r.record.resource == "configmaps" && r.record.verb != "get")
        .collect();
    let create = writes.iter().find(|r| r.record.verb == "create").unwrap();
    let patch = writes.iter().find(|r| r.record.verb == "patch").unwrap();
    assert!(before <= create.received && create.received <= create.answered);
    assert!(
        create.answered < patch.received,
        "the client sent the patch after the create's answer"
    );
    assert!(patch.answered <= after);

    let (_, changes) = sim.store().subscribe_from(0).unwrap();
    let mine: Vec<_> = changes
        .iter()
        .filter(|c| c.resource.1 == "configmaps" && c.object.value["metadata"]["name"] == "timed")
        .collect();
    assert_eq!(mine.len(), 2, "the create and the patch");
    for (change, request) in mine.iter().zip([create, patch]) {
        assert!(
            request.received <= change.at && change.at <= request.answered,
            "a write is applied while its request is served"
        );
    }
}

#[tokio::test]
async fn a_write_latency_delays_writes_and_a_watch_delay_delays_their_events_in_order() {
    let (sim, client) = start(Config::default()).await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let mut events = cms
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    sim.store().set_write_latency(Duration::from_millis(200));
    sim.store().set_watch_delay(Duration::from_millis(300));

    let sent = std::time::Instant::now();
    cms.create(&PostParams::default(), &config_map("late", json!({})))
        .await
        .unwrap();
    let answered = sent.elapsed();
    assert!(answered >= Duration::from_millis(200), "{answered:?}");
    // Read at once, the object is there: only the watch lags.
    assert!(cms.get_opt("late").await.unwrap().is_some());
    let created = sim.store().subscribe_from(0).unwrap().1;
    let applied_at = created.last().unwrap().at;
    cms.delete("late", &DeleteParams::default()).await.unwrap();

    let mut seen = Vec::new();
    while seen.len() < 2 {
        match events.try_next().await.unwrap().unwrap() {
            WatchEvent::Added(cm) => seen.push(("ADDED", cm.name_any())),
            WatchEvent::Deleted(cm) => seen.push(("DELETED", cm.name_any())),
            _ => {}
        }
        if seen.len() == 1 {
            let waited = applied_at.elapsed();
            assert!(waited >= Duration::from_millis(300), "{waited:?}");
        }
    }
    assert_eq!(
        seen,
        [("ADDED", "late".to_owned()), ("DELETED", "late".to_owned())]
    );
}

/// Another client's change put between a read and a write: the write is answered from the state
/// it left. Here it removes the last finalizer of an object being deleted, so the object is gone
/// (the API server removes a deleting object once its finalizers are empty) and the patch the
/// first client sends is answered 404; the interleaving runs once, on the write it matched.
#[tokio::test]
async fn an_interleaving_runs_once_before_the_write_it_matches() {
    let (sim, client) = start(Config::default()).await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let held = config_map("held", json!({}));
    let mut held = serde_json::to_value(held).unwrap();
    held["metadata"]["finalizers"] = json!(["example.com/held"]);
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(held).unwrap(),
    )
    .await
    .unwrap();
    cms.delete("held", &DeleteParams::default()).await.unwrap();
    let runs = Arc::new(Mutex::new(0));
    let counted = runs.clone();
    sim.store()
        .interleave_before_write(Box::new(move |store, write| {
            if write.plural != "configmaps" || write.name != "held" || write.method != "PATCH" {
                return false;
            }
            *counted.lock().unwrap() += 1;
            let def = store.resource("", "configmaps").unwrap();
            store
                .modify(
                    &def,
                    "default",
                    "held",
                    kube_sim::store::WriteTarget::Main,
                    false,
                    |current| {
                        let mut next = current.clone();
                        next["metadata"]["finalizers"] = json!([]);
                        Ok(next)
                    },
                )
                .unwrap();
            true
        }));
    // A write that does not match leaves it waiting.
    cms.create(&PostParams::default(), &config_map("other", json!({})))
        .await
        .unwrap();
    assert_eq!(*runs.lock().unwrap(), 0);

    let label = json!({"metadata": {"labels": {"seen": "yes"}}});
    let answer = cms
        .patch("held", &PatchParams::default(), &Patch::Merge(&label))
        .await;
    assert!(
        matches!(&answer, Err(kube::Error::Api(status)) if status.code == 404),
        "{answer:?}"
    );
    assert!(cms.get_opt("held").await.unwrap().is_none());
    // Once acted, it runs no more: the next patch of another object goes through untouched.
    cms.patch("other", &PatchParams::default(), &Patch::Merge(&label))
        .await
        .unwrap();
    assert_eq!(*runs.lock().unwrap(), 1);
}
