//! What the benchmark reads about processes and the machine: CPU time and resident memory (peak,
//! and anonymous and file-backed apart) from `/proc`, the load average, and the controller's
//! `/metrics` (its address from its log).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Clock ticks per second of `/proc/<pid>/stat` times: Linux reports them in `USER_HZ`, which is
/// 100 on every architecture it supports (`sysconf(_SC_CLK_TCK)`), whatever the kernel's `HZ`.
const USER_HZ: f64 = 100.0;

/// CPU time and memory of one process at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct ProcessStats {
    /// User plus system CPU time since the process started, seconds.
    pub cpu_seconds: f64,
    /// Peak resident set size since the process started (`VmHWM`), KiB.
    pub peak_rss_kib: u64,
    /// Resident set size now (`VmRSS`), KiB.
    pub rss_kib: u64,
    /// Its anonymous part now (`RssAnon`: the heap, stacks; what the process itself holds), KiB.
    pub rss_anon_kib: u64,
    /// Its file-backed part now (`RssFile`: mostly the pages of the executable read so far, which
    /// grow with the binary's size and which the kernel may drop and read again), KiB.
    pub rss_file_kib: u64,
}

/// The highest anonymous and file-backed resident memory a process was seen with. The kernel
/// keeps the peak of the total only (`VmHWM`): these are the peaks of samples.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ResidentPeaks {
    pub anon_kib: u64,
    pub file_kib: u64,
}

impl ResidentPeaks {
    pub fn observe(&mut self, stats: &ProcessStats) {
        self.anon_kib = self.anon_kib.max(stats.rss_anon_kib);
        self.file_kib = self.file_kib.max(stats.rss_file_kib);
    }
}

/// User + system CPU seconds from the text of `/proc/<pid>/stat`.
pub fn cpu_seconds_of_stat(stat: &str) -> Option<f64> {
    // The command name (field 2) is in parentheses and may contain spaces: count after the last ')'.
    let after = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // After the name: state is field 3, so utime (14) and stime (15) are at 11 and 12.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / USER_HZ)
}

/// A `kB` field (`VmHWM`, `VmRSS`, `RssAnon`, `RssFile`) of `/proc/<pid>/status`.
pub fn status_kib(status: &str, field: &str) -> Option<u64> {
    status.lines().find_map(|line| {
        let rest = line.strip_prefix(field)?.strip_prefix(':')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// The process's CPU time and memory now; `None` once it is gone (or off Linux).
pub fn process_stats(pid: u32) -> Option<ProcessStats> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    Some(ProcessStats {
        cpu_seconds: cpu_seconds_of_stat(&stat)?,
        peak_rss_kib: status_kib(&status, "VmHWM")?,
        rss_kib: status_kib(&status, "VmRSS")?,
        rss_anon_kib: status_kib(&status, "RssAnon")?,
        rss_file_kib: status_kib(&status, "RssFile")?,
    })
}

/// This process's CPU time and memory.
pub fn own_stats() -> Option<ProcessStats> {
    process_stats(std::process::id())
}

/// The 1-minute load average.
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The CPU model, for the report.
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, model)| model.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned())
}

/// The metrics address the controller logged at its latest start (`metrics listening
/// address=…` after the last start marker of the sandbox's log).
pub fn metrics_address(log: &str) -> Option<String> {
    let latest = log
        .rfind("--- sandbox: controller start")
        .map_or(log, |at| &log[at..]);
    latest.lines().find_map(|line| {
        if !line.contains("metrics listening") {
            return None;
        }
        let value = line.split("address=").nth(1)?;
        let value: String = value
            .chars()
            .take_while(|c| !c.is_whitespace() && *c != '"' && *c != ',')
            .collect();
        (!value.is_empty()).then_some(value)
    })
}

/// Sums of the samples in a Prometheus text exposition, by metric name and label text (for
/// example `nutanix_machine_reconcile_duration_seconds_count` and
/// `controller="machine",result="ok"`).
pub fn parse_metrics(text: &str) -> BTreeMap<(String, String), f64> {
    let mut samples = BTreeMap::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let (name, labels) = match series.split_once('{') {
            Some((name, labels)) => (name, labels.trim_end_matches('}')),
            None => (series, ""),
        };
        samples.insert((name.to_owned(), labels.to_owned()), value);
    }
    samples
}

/// Sum of the samples of `name` whose labels contain every `label="value"` in `having`.
pub fn metric_sum(samples: &BTreeMap<(String, String), f64>, name: &str, having: &[&str]) -> f64 {
    samples
        .iter()
        .filter(|((n, labels), _)| n == name && having.iter().all(|h| labels.contains(h)))
        .map(|(_, v)| *v)
        .sum()
}

/// `GET /metrics` from `address` (plain HTTP/1.0: the body ends with the connection).
pub async fn scrape(address: &str) -> std::io::Result<String> {
    let connect = tokio::net::TcpStream::connect(address);
    let mut stream = tokio::time::timeout(Duration::from_secs(5), connect)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))??;
    stream
        .write_all(format!("GET /metrics HTTP/1.0\r\nHost: {address}\r\n\r\n").as_bytes())
        .await?;
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut response))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "read timed out"))??;
    let text = String::from_utf8_lossy(&response);
    Ok(text
        .split_once("\r\n\r\n")
        .map_or(String::new(), |(_, body)| body.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_is_read_after_the_command_name_even_with_spaces_in_it() {
        let stat =
            "4242 (sandbox ctl) S 1 4242 4242 0 -1 4194560 2000 0 0 0 250 75 0 0 20 0 9 0 100 0 0";
        assert_eq!(cpu_seconds_of_stat(stat), Some(3.25));
        assert_eq!(cpu_seconds_of_stat("garbage"), None);
    }

    #[test]
    fn memory_fields_are_read_in_kib() {
        let status = "Name:\tsandbox\nVmPeak:\t  900 kB\nVmHWM:\t   51234 kB\nVmRSS:\t   40000 kB\n\
                      RssAnon:\t   30000 kB\nRssFile:\t    9000 kB\nRssShmem:\t    1000 kB\n";
        assert_eq!(status_kib(status, "VmHWM"), Some(51234));
        assert_eq!(status_kib(status, "VmRSS"), Some(40000));
        assert_eq!(status_kib(status, "RssAnon"), Some(30000));
        assert_eq!(status_kib(status, "RssFile"), Some(9000));
        assert_eq!(status_kib(status, "VmSwap"), None);
    }

    #[test]
    fn peaks_of_anonymous_and_file_backed_memory_are_kept_apart() {
        let mut peaks = ResidentPeaks::default();
        let at = |anon, file| ProcessStats {
            rss_anon_kib: anon,
            rss_file_kib: file,
            rss_kib: anon + file,
            ..ProcessStats::default()
        };
        peaks.observe(&at(100, 50));
        peaks.observe(&at(300, 20));
        peaks.observe(&at(200, 60));
        assert_eq!(
            peaks,
            ResidentPeaks {
                anon_kib: 300,
                file_kib: 60
            }
        );
    }

    #[test]
    fn our_own_process_is_readable() {
        let stats = own_stats().unwrap();
        assert!(stats.peak_rss_kib >= stats.rss_kib && stats.rss_kib > 0);
        assert!(stats.rss_anon_kib > 0 && stats.rss_file_kib > 0);
        assert!(stats.rss_anon_kib + stats.rss_file_kib <= stats.rss_kib);
    }

    #[test]
    fn the_metrics_address_is_the_latest_starts() {
        let log = "--- sandbox: controller start #1 ---\n\
                   2026-01-01T00:00:00Z  INFO nutanix_machine_controller::runtime::server: metrics listening address=127.0.0.1:4000\n\
                   --- sandbox: controller start #2 ---\n\
                   2026-01-01T00:01:00Z  INFO nutanix_machine_controller::runtime::server: metrics listening address=127.0.0.1:5000\n";
        assert_eq!(metrics_address(log).as_deref(), Some("127.0.0.1:5000"));
        assert_eq!(
            metrics_address("--- sandbox: controller start #3 ---\nstarting\n"),
            None,
            "not listening yet after the latest start"
        );
    }

    #[test]
    fn metric_samples_are_summed_by_labels() {
        let text = "# HELP x y\n# TYPE x counter\n\
                    nutanix_machine_reconcile_duration_seconds_count{controller=\"machine\",result=\"ok\"} 12\n\
                    nutanix_machine_reconcile_duration_seconds_count{controller=\"machine\",result=\"error\"} 3\n\
                    nutanix_machine_reconcile_duration_seconds_count{controller=\"windows-join\",result=\"ok\"} 5\n\
                    nutanix_machine_controller_leader 1\n";
        let samples = parse_metrics(text);
        let name = "nutanix_machine_reconcile_duration_seconds_count";
        assert_eq!(
            metric_sum(&samples, name, &["controller=\"machine\""]),
            15.0
        );
        assert_eq!(
            metric_sum(&samples, name, &["controller=\"machine\"", "result=\"ok\""]),
            12.0
        );
        assert_eq!(
            metric_sum(&samples, "nutanix_machine_controller_leader", &[]),
            1.0
        );
    }
}
