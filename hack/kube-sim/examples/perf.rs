//! Performance numbers for kube-sim: 10,000 objects written over HTTP while 100 watchers follow them, then
//! list latency for 1,000 objects. Prints numbers; asserts nothing (the machine is shared and noisy).
//!
//! Run: `cargo run --release -p kube-sim --example perf`
#![allow(clippy::unwrap_used, clippy::expect_used)] // a measuring tool: a panic is the report

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use kube_sim::{Config, KubeSim};
use serde_json::json;

const NAMESPACES: usize = 10;
const PER_NAMESPACE: usize = 1_000;
const WATCHERS: usize = 100;
const WRITERS: usize = 16;

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib: f64 = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    kib / 1024.0
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

#[tokio::main]
async fn main() {
    let sim = KubeSim::start(Config::default()).await.unwrap();
    let client = sim.client().unwrap();
    println!(
        "kube-sim perf: {} objects in {NAMESPACES} namespaces, {WATCHERS} watchers, {WRITERS} concurrent writers",
        NAMESPACES * PER_NAMESPACE
    );
    let rss_start = rss_mib();

    let namespaces: Api<Namespace> = Api::all(client.clone());
    for n in 0..NAMESPACES {
        namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": format!("ns-{n}")}})).unwrap(),
            )
            .await
            .unwrap();
    }

    // 100 watchers on configmaps in all namespaces; each counts the events it receives.
    let received = Arc::new(AtomicUsize::new(0));
    let all: Api<ConfigMap> = Api::all(client.clone());
    let start_rv = sim.store().resource_version().to_string();
    let mut watchers = vec![];
    for _ in 0..WATCHERS {
        let stream = all
            .watch(&WatchParams::default().timeout(290), &start_rv)
            .await
            .unwrap();
        let received = received.clone();
        watchers.push(tokio::spawn(async move {
            let mut stream = stream.boxed();
            while let Ok(Some(event)) = stream.try_next().await {
                if matches!(event, WatchEvent::Added(_)) {
                    received.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }

    // Write 10,000 objects over HTTP with a few concurrent writers.
    let total = NAMESPACES * PER_NAMESPACE;
    let started = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let mut writers = vec![];
    for _ in 0..WRITERS {
        let client = client.clone();
        let next = next.clone();
        writers.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    return;
                }
                let ns = format!("ns-{}", i % NAMESPACES);
                let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
                let cm: ConfigMap = serde_json::from_value(json!({
                    "metadata": {"name": format!("cm-{i:05}"), "labels": {"app": format!("app-{}", i % 7), "tier": "test"}},
                    "data": {"key": "value", "index": i.to_string()},
                }))
                .unwrap();
                api.create(&PostParams::default(), &cm).await.unwrap();
            }
        }));
    }
    for w in writers {
        w.await.unwrap();
    }
    let write_time = started.elapsed();
    let expected = total * WATCHERS;
    let fanout_started = Instant::now();
    while received.load(Ordering::Relaxed) < expected
        && fanout_started.elapsed() < Duration::from_secs(120)
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let delivered_time = started.elapsed();
    println!(
        "writes: {total} creates in {:.2} s = {:.0} creates/s (HTTP, kube-rs client)",
        write_time.as_secs_f64(),
        total as f64 / write_time.as_secs_f64()
    );
    println!(
        "watch fan-out: {} of {expected} events delivered to {WATCHERS} watchers, all within {:.2} s of the first write ({:.0} events/s)",
        received.load(Ordering::Relaxed),
        delivered_time.as_secs_f64(),
        received.load(Ordering::Relaxed) as f64 / delivered_time.as_secs_f64()
    );

    // List latency: 1,000 objects (one namespace), raw HTTP (server + transfer) and typed through kube-rs.
    let mut raw = vec![];
    for _ in 0..50 {
        let request = http::Request::get("/api/v1/namespaces/ns-3/configmaps")
            .body(Vec::new())
            .unwrap();
        let t = Instant::now();
        let text = client.request_text(request).await.unwrap();
        raw.push(t.elapsed());
        assert!(text.len() > 100_000);
    }
    raw.sort();
    let ns3: Api<ConfigMap> = Api::namespaced(client.clone(), "ns-3");
    let mut typed = vec![];
    for _ in 0..50 {
        let t = Instant::now();
        let list = ns3.list(&ListParams::default()).await.unwrap();
        typed.push(t.elapsed());
        assert_eq!(list.items.len(), PER_NAMESPACE);
    }
    typed.sort();
    let mut selected = vec![];
    for _ in 0..50 {
        let t = Instant::now();
        let list = all
            .list(&ListParams::default().labels("app=app-3,tier=test"))
            .await
            .unwrap();
        selected.push(t.elapsed());
        assert!(list.items.len() > 1_000);
    }
    selected.sort();
    let show = |name: &str, d: &[Duration]| {
        println!(
            "{name}: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms (50 runs)",
            percentile(d, 0.5).as_secs_f64() * 1e3,
            percentile(d, 0.99).as_secs_f64() * 1e3,
            d[d.len() - 1].as_secs_f64() * 1e3
        )
    };
    show("list 1,000 objects, raw HTTP", &raw);
    show("list 1,000 objects, kube-rs typed", &typed);
    show(
        "list with label selector over 10,000 (1,429 match), kube-rs typed",
        &selected,
    );
    println!(
        "resident memory: {:.0} MiB at start, {:.0} MiB now (server and client in one process)",
        rss_start,
        rss_mib()
    );
    for w in watchers {
        w.abort();
    }
    sim.shutdown().await;
}
