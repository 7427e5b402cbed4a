//! What a benchmark run looked like over time, for its pictures ([`crate::plots`]): the Machines
//! by phase, the provider's Kubernetes writes and its resident memory, sampled while the run's
//! work goes on; Prism's requests by kind, from prism-mock's request log (each with the time it
//! was answered); and the moments the run marked (a phase that begins).

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::process::process_stats;
use crate::plots::{self, Chart, Marker, PlotError, Series};
use crate::world::World;
use crate::writes::Actor;

/// One look at the run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sample {
    /// Seconds since sampling began.
    pub at: f64,
    /// Machines by `status.phase` (`none` before the provider sets one).
    pub phases: BTreeMap<String, usize>,
    /// The provider's Kubernetes writes so far (as the request or audit log has them).
    pub kube_writes: u64,
    /// Each replica's resident memory, MiB, in replica order (`None` between a kill and its
    /// restart).
    pub rss_mib: Vec<Option<f64>>,
}

/// What Prism was asked, as the pictures group it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum CallKind {
    Create,
    Read,
    List,
    Delete,
    /// Updates, power changes and anything else.
    Other,
}

impl CallKind {
    /// From a request's method and endpoint template: a POST ending in `/list` (v3) or a GET of
    /// a collection (v4: its template ends with the collection, not `{…}`) lists; a POST of a
    /// VM, a clone or a deploy creates.
    pub fn of(method: &str, endpoint: &str) -> Self {
        let item = endpoint.ends_with('}');
        match method {
            "DELETE" => Self::Delete,
            "GET" if item => Self::Read,
            "GET" => Self::List,
            "POST" if endpoint.ends_with("/list") => Self::List,
            "POST"
                if endpoint.ends_with("/vms")
                    || endpoint.ends_with("/clone")
                    || endpoint.ends_with("/$actions/deploy") =>
            {
                Self::Create
            }
            _ => Self::Other,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Create => "create",
            Self::Read => "read",
            Self::List => "list",
            Self::Delete => "delete",
            Self::Other => "other",
        }
    }
}

/// A run over time.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunSamples {
    pub samples: Vec<Sample>,
    /// Prism requests: seconds since sampling began, and kind.
    pub prism: Vec<(f64, CallKind)>,
    pub markers: Vec<Marker>,
}

/// Samples a world while work goes on; the work marks its moments with [`Sampler::mark`].
#[derive(Debug)]
pub struct Sampler {
    started: Instant,
    every: Duration,
    /// prism-mock's clock and request log position when sampling began.
    mock_ms: u64,
    prism_from: usize,
    state: Mutex<RunSamples>,
    /// Writes counted before the request log was last cleared (kube-sim's is, at restarts).
    writes_offset: Mutex<(u64, u64)>,
    /// On the real control plane: how far the audit log was read, and the provider's writes in
    /// it up to there (read a piece at a time: reading the whole log at each sample grows with
    /// the run, and a sample holds up the work it samples).
    audit_read: Mutex<(u64, u64)>,
}

impl Sampler {
    /// Begins now, looking every `every`.
    pub fn new(world: &World, every: Duration) -> Self {
        Self {
            started: Instant::now(),
            every,
            mock_ms: world.admin().elapsed_ms(),
            prism_from: world.admin().request_count(),
            state: Mutex::default(),
            writes_offset: Mutex::default(),
            audit_read: Mutex::default(),
        }
    }

    /// Seconds since sampling began.
    pub fn elapsed(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// Marks this moment on the time axis.
    pub fn mark(&self, label: &str) {
        let at = self.elapsed();
        self.lock().markers.push(Marker {
            at,
            label: label.to_owned(),
        });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RunSamples> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The provider's writes so far, across clears of the log.
    fn provider_writes(&self, world: &World) -> u64 {
        if let Some(plane) = world.control_plane() {
            return self.audit_log_writes(&plane.audit_log());
        }
        let now: u64 = match world.writes() {
            Ok(tally) => provider_total(&tally),
            Err(error) => {
                tracing::debug!(%error, "sampling: the writes cannot be read");
                return self
                    .lock()
                    .samples
                    .last()
                    .map_or(0, |sample| sample.kube_writes);
            }
        };
        let mut offset = self
            .writes_offset
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (counted_before, last_seen) = &mut *offset;
        if now < *last_seen {
            *counted_before += *last_seen;
        }
        *last_seen = now;
        *counted_before + now
    }

    /// The provider's writes in the audit log at `path` so far: the complete lines added since
    /// the last look, counted onto the earlier ones. A log shorter than what was read (started
    /// anew) is read from its beginning.
    fn audit_log_writes(&self, path: &Path) -> u64 {
        use std::io::{Read, Seek, SeekFrom};
        let mut read = self
            .audit_read
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (offset, counted) = &mut *read;
        let mut added = Vec::new();
        let opened = std::fs::File::open(path).and_then(|mut file| {
            if file.metadata()?.len() < *offset {
                *offset = 0;
            }
            file.seek(SeekFrom::Start(*offset))?;
            file.read_to_end(&mut added)
        });
        if let Err(error) = opened {
            tracing::debug!(%error, path = %path.display(), "sampling: the audit log cannot be read");
            return *counted;
        }
        let Some(end) = added.iter().rposition(|byte| *byte == b'\n') else {
            return *counted;
        };
        let lines = String::from_utf8_lossy(&added[..=end]);
        match crate::writes::tally_audit_log(&lines) {
            Ok(tally) => *counted += provider_total(&tally),
            Err(error) => tracing::debug!(%error, "sampling: an audit log line cannot be read"),
        }
        *offset += end as u64 + 1;
        *counted
    }

    async fn sample(&self, world: &World) {
        let at = self.elapsed();
        let phases = machine_phases(world);
        let rss_mib = world
            .replica_pids()
            .await
            .into_iter()
            .map(|pid| {
                pid.and_then(process_stats)
                    .map(|s| s.rss_kib as f64 / 1024.0)
            })
            .collect();
        let kube_writes = self.provider_writes(world);
        self.lock().samples.push(Sample {
            at,
            phases,
            kube_writes,
            rss_mib,
        });
    }

    /// Runs `work`, sampling `world` until it ends; returns its output and what was sampled
    /// (with every Prism request answered meanwhile).
    pub async fn run<T>(&self, world: &World, work: impl Future<Output = T>) -> (T, RunSamples) {
        let sampling = async {
            loop {
                self.sample(world).await;
                tokio::time::sleep(self.every).await;
            }
        };
        let output = tokio::select! {
            output = work => output,
            () = sampling => unreachable!("sampling never ends"),
        };
        self.sample(world).await;
        let mut samples = std::mem::take(&mut *self.lock());
        samples.prism = world
            .admin()
            .requests_since(self.prism_from)
            .into_iter()
            .map(|record| {
                let at = (record.at_ms.saturating_sub(self.mock_ms)) as f64 / 1000.0;
                (at, CallKind::of(&record.method, &record.endpoint))
            })
            .collect();
        (output, samples)
    }
}

/// The provider's writes in `tally` (ours or the Go provider's).
fn provider_total(tally: &crate::writes::Tally) -> u64 {
    tally
        .iter()
        .filter(|(kind, _)| matches!(kind.actor, Actor::Controller | Actor::GoProvider))
        .map(|(_, count)| *count)
        .sum()
}

/// The Machines by phase: from kube-sim's store directly (cheap at a thousand Machines, as the
/// benchmark's tracker reads it), or from a snapshot of the real API server.
fn machine_phases(world: &World) -> BTreeMap<String, usize> {
    let mut phases: BTreeMap<String, usize> = BTreeMap::new();
    let mut count = |phase: &str| {
        let phase = if phase.is_empty() { "none" } else { phase };
        *phases.entry(phase.to_owned()).or_default() += 1;
    };
    match world.sim() {
        Some(sim) => {
            let store = sim.store();
            if let Some(def) = store.resource("machine.openshift.io", "machines") {
                let params = kube_sim::store::ListParams {
                    namespace: Some(world.namespace()),
                    ..kube_sim::store::ListParams::default()
                };
                for stored in store
                    .list(&def, &params)
                    .map(|l| l.items)
                    .unwrap_or_default()
                {
                    count(stored.value["status"]["phase"].as_str().unwrap_or_default());
                }
            }
        }
        None => {
            for machine in &world.snapshot().machines {
                count(machine.phase());
            }
        }
    }
    phases
}

/// File names of the pictures, in the order of [`RunSamples::charts`].
pub const PICTURES: [&str; 4] = [
    "machines-by-phase.svg",
    "prism-calls.svg",
    "kube-writes.svg",
    "controller-memory.svg",
];

impl RunSamples {
    fn end(&self) -> f64 {
        self.samples.last().map_or(0.0, |sample| sample.at)
    }

    /// Bins of rates: about 150 over the run, at least a second each.
    fn bin(&self) -> f64 {
        (self.end() / 150.0).ceil().max(1.0)
    }

    /// The four pictures: Machines by phase, Prism calls per second by kind, Kubernetes writes
    /// per second, resident memory.
    pub fn charts(&self) -> Vec<Chart> {
        let end = self.end();
        let bin = self.bin();
        let mut phases: BTreeMap<&str, Vec<(f64, f64)>> = BTreeMap::new();
        for sample in &self.samples {
            for phase in sample.phases.keys() {
                phases.entry(phase).or_default();
            }
        }
        for sample in &self.samples {
            for (phase, points) in &mut phases {
                let count = sample.phases.get(*phase).copied().unwrap_or_default();
                points.push((sample.at, count as f64));
            }
        }
        let machines = Chart {
            title: "Machines by phase".to_owned(),
            unit: "Machines".to_owned(),
            series: phases
                .into_iter()
                .map(|(phase, points)| Series {
                    name: phase.to_owned(),
                    points,
                })
                .collect(),
            markers: self.markers.clone(),
        };
        let mut kinds: BTreeMap<CallKind, Vec<f64>> = [
            CallKind::Create,
            CallKind::Read,
            CallKind::List,
            CallKind::Delete,
        ]
        .into_iter()
        .map(|kind| (kind, Vec::new()))
        .collect();
        for (at, kind) in &self.prism {
            kinds.entry(*kind).or_default().push(*at);
        }
        let prism = Chart {
            title: "Prism calls per second by kind".to_owned(),
            unit: "calls/s".to_owned(),
            series: kinds
                .into_iter()
                .map(|(kind, times)| Series {
                    name: kind.name().to_owned(),
                    points: plots::rate(times, end, bin),
                })
                .collect(),
            markers: self.markers.clone(),
        };
        // Writes per second between samples, then averaged over the bins.
        let mut write_times = Vec::new();
        for pair in self.samples.windows(2) {
            let added = pair[1].kube_writes.saturating_sub(pair[0].kube_writes);
            write_times.extend(std::iter::repeat_n(pair[1].at, added as usize));
        }
        let writes = Chart {
            title: "The provider's Kubernetes writes per second".to_owned(),
            unit: "writes/s".to_owned(),
            series: vec![Series {
                name: "writes".to_owned(),
                points: plots::rate(write_times, end, bin),
            }],
            markers: self.markers.clone(),
        };
        let replicas = self
            .samples
            .iter()
            .map(|sample| sample.rss_mib.len())
            .max()
            .unwrap_or(1);
        let memory = Chart {
            title: "The provider's resident memory".to_owned(),
            unit: "MiB".to_owned(),
            series: (0..replicas.max(1))
                .map(|replica| Series {
                    name: if replicas > 1 {
                        format!("replica-{replica}")
                    } else {
                        "resident memory".to_owned()
                    },
                    points: self
                        .samples
                        .iter()
                        .filter_map(|sample| {
                            let mib = sample.rss_mib.get(replica).copied().flatten()?;
                            Some((sample.at, mib))
                        })
                        .collect(),
                })
                .collect(),
            markers: self.markers.clone(),
        };
        vec![machines, prism, writes, memory]
    }
}

/// Writes `charts` (in the order of [`PICTURES`]) into `dir`, returning the files.
pub fn write_pictures(dir: &Path, charts: &[Chart]) -> Result<Vec<PathBuf>, PlotError> {
    std::fs::create_dir_all(dir).map_err(|source| PlotError::Write {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut written = Vec::new();
    for (chart, name) in charts.iter().zip(PICTURES) {
        let path = dir.join(name);
        plots::write(chart, &path)?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prism_calls_are_grouped_by_what_they_do() {
        for (method, endpoint, kind) in [
            ("POST", "/api/nutanix/v3/vms", CallKind::Create),
            ("POST", "/api/nutanix/v3/vms/{uuid}/clone", CallKind::Create),
            (
                "POST",
                "/api/vmm/v4.0/content/templates/{extId}/$actions/deploy",
                CallKind::Create,
            ),
            ("POST", "/api/nutanix/v3/vms/list", CallKind::List),
            ("GET", "/api/vmm/v4.0/ahv/config/vms", CallKind::List),
            ("GET", "/api/nutanix/v3/vms/{uuid}", CallKind::Read),
            ("GET", "/api/nutanix/v3/tasks/{uuid}", CallKind::Read),
            ("DELETE", "/api/nutanix/v3/vms/{uuid}", CallKind::Delete),
            ("PUT", "/api/nutanix/v3/vms/{uuid}", CallKind::Other),
        ] {
            assert_eq!(CallKind::of(method, endpoint), kind, "{method} {endpoint}");
        }
    }

    #[test]
    fn every_phase_seen_has_a_line_and_writes_become_a_rate() {
        let sample = |at: f64, phases: &[(&str, usize)], writes: u64| Sample {
            at,
            phases: phases.iter().map(|(p, n)| ((*p).to_owned(), *n)).collect(),
            kube_writes: writes,
            rss_mib: vec![Some(20.0)],
        };
        let run = RunSamples {
            samples: vec![
                sample(0.0, &[("Provisioning", 2)], 0),
                sample(1.0, &[("Running", 2)], 4),
                sample(2.0, &[], 6),
            ],
            prism: vec![(0.5, CallKind::Create), (0.6, CallKind::Create)],
            markers: Vec::new(),
        };
        let charts = run.charts();
        let running = &charts[0]
            .series
            .iter()
            .find(|s| s.name == "Running")
            .unwrap();
        assert_eq!(running.points, [(0.0, 0.0), (1.0, 2.0), (2.0, 0.0)]);
        assert_eq!(charts[1].series[0].name, "create");
        assert_eq!(charts[1].series[0].points, [(0.5, 2.0), (1.5, 0.0)]);
        assert_eq!(charts[2].series[0].points, [(0.5, 0.0), (1.5, 6.0)]);
        let memory: Vec<&str> = charts[3].series.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(memory, ["resident memory"]);
    }

    #[test]
    fn the_audit_log_is_read_a_piece_at_a_time_counting_complete_lines_once() {
        // Recorded on the real control plane: one write of our controller among five lines.
        const AUDIT: &str = include_str!("../../fixtures/kube-apiserver-1.34.2-audit.jsonl");
        let controller_line = AUDIT
            .lines()
            .find(|line| line.contains("serviceaccount:openshift-machine-api:nutanix"))
            .unwrap();
        let sampler = Sampler {
            started: Instant::now(),
            every: Duration::from_secs(1),
            mock_ms: 0,
            prism_from: 0,
            state: Mutex::default(),
            writes_offset: Mutex::default(),
            audit_read: Mutex::default(),
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let (head, tail) = controller_line.split_at(40);
        std::fs::write(&path, format!("{AUDIT}{head}")).unwrap();
        assert_eq!(
            sampler.audit_log_writes(&path),
            1,
            "the line being written waits"
        );
        std::fs::write(&path, format!("{AUDIT}{head}{tail}\n")).unwrap();
        assert_eq!(sampler.audit_log_writes(&path), 2);
        assert_eq!(sampler.audit_log_writes(&path), 2, "nothing new");
        // A log started anew (shorter than what was read) is read from its beginning.
        std::fs::write(&path, format!("{controller_line}\n")).unwrap();
        assert_eq!(sampler.audit_log_writes(&path), 3);
    }

    #[test]
    fn several_replicas_have_a_memory_line_each_without_the_moments_they_were_down() {
        let sample = |at: f64, rss_mib: Vec<Option<f64>>| Sample {
            at,
            rss_mib,
            ..Sample::default()
        };
        let run = RunSamples {
            samples: vec![
                sample(0.0, vec![Some(20.0), Some(21.0)]),
                sample(1.0, vec![None, Some(22.0)]),
                sample(2.0, vec![Some(19.0), Some(23.0)]),
            ],
            ..RunSamples::default()
        };
        let charts = run.charts();
        let lines: Vec<(&str, &[(f64, f64)])> = charts[3]
            .series
            .iter()
            .map(|s| (s.name.as_str(), s.points.as_slice()))
            .collect();
        assert_eq!(
            lines,
            [
                ("replica-0", &[(0.0, 20.0), (2.0, 19.0)][..]),
                ("replica-1", &[(0.0, 21.0), (1.0, 22.0), (2.0, 23.0)][..]),
            ]
        );
    }
}
