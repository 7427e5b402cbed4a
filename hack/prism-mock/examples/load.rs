//! Load check: fills a mock with N VMs, then drives a mix of Prism calls at a fixed rate and reports latency
//! percentiles and whether the mock kept up. Development tool.
//!
//! `cargo run --release -p prism-mock --example load -- --vms 1000 --rps 200 --seconds 20`
#![allow(clippy::unwrap_used, clippy::expect_used)] // a measuring tool: a panic is the report

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use prism_mock::{MockConfig, MockPrism, Timings};
use rustls_pki_types::pem::PemObject as _;
use serde_json::{Value, json};

#[derive(Debug, Parser)]
struct Args {
    /// VMs to create before measuring.
    #[arg(long, default_value_t = 1000)]
    vms: usize,
    /// Target request rate during the measurement.
    #[arg(long, default_value_t = 200)]
    rps: u64,
    /// Length of the measurement.
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    /// Percent of requests that list 500 VMs (the expensive call); 20% more are filtered lists, the rest GETs.
    #[arg(long, default_value_t = 10)]
    full_list_percent: u64,
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let timings = Timings {
        task_queued_ms: 50,
        task_running_ms: 200,
        boot_to_address_ms: 500,
    };
    let mock = MockPrism::start(MockConfig {
        timings,
        ..MockConfig::default()
    })
    .await
    .unwrap();
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::CertificateDer::pem_slice_iter(mock.ca_pem().unwrap().as_bytes())
    {
        roots.add(cert.unwrap()).unwrap();
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let client = reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .build()
        .unwrap();
    let base = format!("{}/api/nutanix/v3", mock.base_url());
    let (user, password) = (
        mock.credentials().username.clone(),
        mock.credentials().password.clone(),
    );
    let post = |path: String, body: Value| {
        client
            .post(format!("{base}{path}"))
            .basic_auth(&user, Some(&password))
            .json(&body)
            .send()
    };

    let lists = |kind: &str| json!({"kind": kind, "length": 500});
    let entities = |v: &Value| v["entities"].as_array().cloned().unwrap_or_default();
    let pe = entities(
        &post("/clusters/list".into(), lists("cluster"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap(),
    )
    .into_iter()
    .find(|c| c["status"]["resources"]["config"]["service_list"][0] == "AOS")
    .unwrap()["metadata"]["uuid"]
        .clone();
    let subnet = entities(
        &post("/subnets/list".into(), lists("subnet"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap(),
    )[0]["metadata"]["uuid"]
        .clone();
    let image = entities(
        &post("/images/list".into(), lists("image"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap(),
    )[0]["metadata"]["uuid"]
        .clone();

    let fill_started = Instant::now();
    let mut uuids = Vec::with_capacity(args.vms);
    for chunk in (0..args.vms).collect::<Vec<_>>().chunks(50) {
        let calls = chunk.iter().map(|i| {
            post(
                "/vms".into(),
                json!({"metadata": {"kind": "vm"}, "spec": {"name": format!("load-{i:05}"), "cluster_reference": {"kind": "cluster", "uuid": pe},
                    "resources": {"power_state": "ON", "memory_size_mib": 4096, "disk_list": [{"data_source_reference": {"kind": "image", "uuid": image}}],
                        "nic_list": [{"subnet_reference": {"kind": "subnet", "uuid": subnet}}]}}}),
            )
        });
        for response in futures::future::join_all(calls).await {
            let body: Value = response.unwrap().json().await.unwrap();
            uuids.push(
                body["metadata"]["uuid"]
                    .as_str()
                    .expect("create answered a UUID")
                    .to_owned(),
            );
        }
    }
    println!(
        "created {} VMs in {:.2} s",
        uuids.len(),
        fill_started.elapsed().as_secs_f64()
    );
    tokio::time::sleep(Duration::from_millis(800)).await;

    // The mix a controller produces: mostly GET VM and GET task, some lists (one page of 20 and one of 500).
    let total = args.rps * args.seconds;
    let interval = Duration::from_secs_f64(1.0 / args.rps as f64);
    let cpu_before = process_cpu_seconds();
    let started = Instant::now();
    let mut handles = Vec::with_capacity(total as usize);
    for n in 0..total {
        let due = started + interval * n as u32;
        tokio::time::sleep_until(due.into()).await;
        let client = client.clone();
        let (base, user, password) = (base.clone(), user.clone(), password.clone());
        let uuid = uuids[(n as usize * 7919) % uuids.len()].clone();
        let full_list_percent = args.full_list_percent;
        handles.push(tokio::spawn(async move {
            let sent = Instant::now();
            // Spread the kinds evenly over time: 37 is coprime with 100.
            let request = match (n * 37) % 100 {
                k if k < full_list_percent => client
                    .post(format!("{base}/vms/list"))
                    .json(&json!({"kind": "vm", "length": 500})),
                k if k < full_list_percent + 20 => client
                    .post(format!("{base}/vms/list"))
                    .json(&json!({"kind": "vm", "filter": format!("vm_name=={}", n % 1000)})),
                _ => client.get(format!("{base}/vms/{uuid}")),
            };
            let response = request
                .basic_auth(&user, Some(&password))
                .send()
                .await
                .unwrap();
            let ok = response.status().is_success();
            response.bytes().await.unwrap();
            (sent.elapsed(), ok)
        }));
    }
    let mut latencies = Vec::with_capacity(handles.len());
    let mut failures = 0;
    for handle in handles {
        let (latency, ok) = handle.await.unwrap();
        latencies.push(latency);
        failures += usize::from(!ok);
    }
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = process_cpu_seconds()
        .zip(cpu_before)
        .map(|(after, before)| after - before);
    latencies.sort();
    let pct =
        |p: f64| latencies[((latencies.len() as f64 - 1.0) * p) as usize].as_secs_f64() * 1000.0;
    println!(
        "{} requests in {elapsed:.2} s = {:.1} req/s achieved (target {}), failures {failures}",
        latencies.len(),
        latencies.len() as f64 / elapsed,
        args.rps
    );
    println!(
        "latency ms: p50 {:.2}  p90 {:.2}  p99 {:.2}  max {:.2}",
        pct(0.5),
        pct(0.9),
        pct(0.99),
        pct(1.0)
    );
    println!(
        "mix: {}% list of 500 VMs, 20% filtered list (default page), {}% GET /vms/{{uuid}}; {} VMs held",
        args.full_list_percent,
        80u64.saturating_sub(args.full_list_percent),
        mock.admin().vms().len()
    );
    if let Some(cpu) = cpu {
        println!(
            "process CPU (mock and load client together): {cpu:.2} s in {elapsed:.2} s = {:.0}% of one core, {:.2} ms per request",
            100.0 * cpu / elapsed,
            1000.0 * cpu / latencies.len() as f64
        );
    }
    mock.shutdown().await;
}

/// User + system CPU time of this process from /proc (Linux; clock ticks of 1/100 s), `None` elsewhere.
fn process_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let after_name = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}
