//! A real Prometheus server (built by `hack/promtool/build.sh prometheus`) scraping the
//! controller's `/metrics`, so that the dashboard's and the alerts' queries run on Prometheus
//! itself rather than on a reading of them.
//!
//! The target is written to a file-based service discovery file (Prometheus's `file_sd_configs`,
//! re-read when it changes), so that a restarted controller on a new port is followed with
//! [`Prometheus::scrape`]. Queries go to the HTTP API's `/api/v1/query`
//! (prometheus.io/docs/prometheus/latest/querying/api/): `status` `success` with
//! `data.result`, or `error` with `errorType` (`bad_data` for a query that does not parse) and
//! `error`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};

/// The scrape job's name (the `job` label of every series).
pub const JOB: &str = "nutanix-machine-controller";

/// Why Prometheus could not be run or asked.
#[derive(Debug, thiserror::Error)]
pub enum PrometheusError {
    #[error("writing Prometheus's file {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("starting Prometheus {binary}: {source}")]
    Spawn {
        binary: PathBuf,
        source: std::io::Error,
    },
    #[error("no free port for Prometheus: {0}")]
    Port(std::io::Error),
    #[error("Prometheus exited before it was ready (its log: {log})")]
    Exited { log: PathBuf },
    #[error("Prometheus was not ready within {waited:?} (its log: {log})")]
    NotReady { waited: Duration, log: PathBuf },
    #[error("asking Prometheus {path}: {source}")]
    Http {
        path: String,
        source: std::io::Error,
    },
    #[error("Prometheus's answer to {path} is not JSON: {body}")]
    Answer { path: String, body: String },
    #[error("Prometheus refused the query {query:?}: {error_type}: {error}")]
    Query {
        query: String,
        error_type: String,
        error: String,
    },
}

/// A running Prometheus; stopped when dropped.
#[derive(Debug)]
pub struct Prometheus {
    child: Child,
    address: String,
    targets: PathBuf,
    log: PathBuf,
}

impl Prometheus {
    /// Starts `binary` in `dir` (its configuration, data and log), scraping `target`
    /// (`host:port`) every `interval`, and waits until it is ready.
    pub async fn start(
        binary: &Path,
        dir: &Path,
        target: &str,
        interval: Duration,
    ) -> Result<Self, PrometheusError> {
        let write = |path: PathBuf, text: String| {
            std::fs::write(&path, text).map_err(|source| PrometheusError::Write { path, source })
        };
        let targets = dir.join("prometheus-targets.json");
        write(targets.clone(), targets_file(target))?;
        let config = dir.join("prometheus.yml");
        let seconds = interval.as_secs_f64();
        // JSON is YAML.
        let configuration = json!({
            "global": {"scrape_interval": format!("{seconds}s"), "evaluation_interval": format!("{seconds}s")},
            "scrape_configs": [{
                "job_name": JOB,
                "file_sd_configs": [{"files": [targets.display().to_string()], "refresh_interval": "1s"}],
            }],
        });
        write(config.clone(), configuration.to_string())?;
        let address = format!("127.0.0.1:{}", free_port().map_err(PrometheusError::Port)?);
        let log = dir.join("prometheus.log");
        let log_file = std::fs::File::create(&log).map_err(|source| PrometheusError::Write {
            path: log.clone(),
            source,
        })?;
        let log_err = log_file
            .try_clone()
            .map_err(|source| PrometheusError::Write {
                path: log.clone(),
                source,
            })?;
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("prometheus-data").display()
            ))
            .arg(format!("--web.listen-address={address}"))
            .stdin(Stdio::null())
            .stdout(log_file)
            .stderr(log_err)
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| PrometheusError::Spawn {
                binary: binary.to_path_buf(),
                source,
            })?;
        let mut prometheus = Self {
            child,
            address,
            targets,
            log,
        };
        prometheus.wait_until_ready(Duration::from_secs(60)).await?;
        Ok(prometheus)
    }

    /// Where a person (or a test) can query it.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Its log file.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// Scrapes `target` from now on (a restarted controller's new address).
    pub fn scrape(&self, target: &str) -> Result<(), PrometheusError> {
        // Written whole then renamed, so that Prometheus never reads half a file.
        let partial = self.targets.with_extension("partial");
        std::fs::write(&partial, targets_file(target)).map_err(|source| {
            PrometheusError::Write {
                path: partial.clone(),
                source,
            }
        })?;
        std::fs::rename(&partial, &self.targets).map_err(|source| PrometheusError::Write {
            path: self.targets.clone(),
            source,
        })
    }

    async fn wait_until_ready(&mut self, patience: Duration) -> Result<(), PrometheusError> {
        let deadline = Instant::now() + patience;
        loop {
            if let Ok(Some(_)) = self.child.try_wait() {
                return Err(PrometheusError::Exited {
                    log: self.log.clone(),
                });
            }
            if let Ok((status, _)) = get(&self.address, "/-/ready").await
                && status == 200
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(PrometheusError::NotReady {
                    waited: patience,
                    log: self.log.clone(),
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Evaluates `query` at `at` (Unix seconds; now when `None`) and returns the result's
    /// series (`data.result`: one element per series, a scalar's as one).
    pub async fn query(&self, query: &str, at: Option<f64>) -> Result<Vec<Value>, PrometheusError> {
        let mut path = format!("/api/v1/query?query={}", percent_encode(query));
        if let Some(at) = at {
            path.push_str(&format!("&time={at:.3}"));
        }
        self.ask(query, &path).await
    }

    /// `GET path` (an evaluation of `query`) and its series.
    async fn ask(&self, query: &str, path: &str) -> Result<Vec<Value>, PrometheusError> {
        let (_, body) = get(&self.address, path)
            .await
            .map_err(|source| PrometheusError::Http {
                path: path.to_owned(),
                source,
            })?;
        let answer: Value = serde_json::from_str(&body).map_err(|_| PrometheusError::Answer {
            path: path.to_owned(),
            body: body.clone(),
        })?;
        if answer["status"] != "success" {
            return Err(PrometheusError::Query {
                query: query.to_owned(),
                error_type: answer["errorType"].as_str().unwrap_or_default().to_owned(),
                error: answer["error"].as_str().unwrap_or_default().to_owned(),
            });
        }
        let data = &answer["data"];
        Ok(match data["resultType"].as_str() {
            Some("vector" | "matrix") => data["result"].as_array().cloned().unwrap_or_default(),
            // A scalar or string is one value.
            _ => vec![data["result"].clone()],
        })
    }

    /// Evaluates `query` at every `step` from `start` to `end` (Unix seconds), as a dashboard's
    /// graph does (`/api/v1/query_range`), and returns its series.
    pub async fn query_range(
        &self,
        query: &str,
        start: f64,
        end: f64,
        step: Duration,
    ) -> Result<Vec<Value>, PrometheusError> {
        let path = format!(
            "/api/v1/query_range?query={}&start={start:.3}&end={end:.3}&step={}",
            percent_encode(query),
            step.as_secs_f64()
        );
        self.ask(query, &path).await
    }

    /// Waits until Prometheus has scraped the controller at least once successfully.
    pub async fn wait_for_scrape(&self, patience: Duration) -> Result<(), PrometheusError> {
        let deadline = Instant::now() + patience;
        let up = format!("up{{job=\"{JOB}\"}} == 1");
        loop {
            if !self.query(&up, None).await?.is_empty() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(PrometheusError::NotReady {
                    waited: patience,
                    log: self.log.clone(),
                });
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

fn targets_file(target: &str) -> String {
    json!([{"targets": [target]}]).to_string()
}

fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// `text` for a URL's query string: every byte but the unreserved ones (RFC 3986, 2.3) as `%XX`.
fn percent_encode(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len() * 3);
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

/// `GET path` over plain HTTP/1.0 (the body ends with the connection): the status and body.
async fn get(address: &str, path: &str) -> std::io::Result<(u16, String)> {
    let timed_out = |what: &str| std::io::Error::new(std::io::ErrorKind::TimedOut, what.to_owned());
    let mut stream = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::net::TcpStream::connect(address),
    )
    .await
    .map_err(|_| timed_out("connect timed out"))??;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").as_bytes())
        .await?;
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut response))
        .await
        .map_err(|_| timed_out("read timed out"))??;
    let text = String::from_utf8_lossy(&response);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    Ok((status, body.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_is_percent_encoded_but_its_unreserved_characters() {
        assert_eq!(
            percent_encode(r#"sum by (code) (x{code!~"2.."}[5m])"#),
            "sum%20by%20%28code%29%20%28x%7Bcode%21~%222..%22%7D%5B5m%5D%29"
        );
    }
}
