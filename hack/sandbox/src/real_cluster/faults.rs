//! The control plane's own bad days, on demand: a program killed (SIGKILL) and started again with
//! the same arguments (kube-apiserver on the same etcd and port, etcd on the same data directory),
//! programs that exited started again as the kubelet restarts a static pod's containers, etcd
//! compacted through its own API, and API Priority and Fairness squeezing one ServiceAccount.

use std::time::{Duration, Instant, SystemTime};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use kube::api::{Api, DeleteParams, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{ControlPlane, RealClusterError, api_error, create, io_error, lock};

/// The objects [`ControlPlane::throttle_service_account`] creates (one name for both kinds).
pub const THROTTLE_NAME: &str = "sandbox-chaos-throttle";

/// How long one probe of `/readyz` may take before it counts as no answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

impl ControlPlane {
    /// Kills `program` (SIGKILL, as an OOM kill or a node's power loss would) and reaps it; it
    /// stays down until [`ControlPlane::start_program_again`]. Killing a program that is already
    /// down does nothing.
    pub async fn kill_program(&self, program: &str) -> Result<(), RealClusterError> {
        let child = {
            let mut processes = lock(&self.processes);
            let process = processes
                .iter_mut()
                .find(|p| p.program == program)
                .ok_or_else(|| RealClusterError::UnknownProgram {
                    program: program.to_owned(),
                })?;
            process.child.take()
        };
        if let Some(mut child) = child {
            child
                .kill()
                .await
                .map_err(io_error(format!("kill {program}")))?;
        }
        Ok(())
    }

    /// Starts a killed `program` again with the arguments it was first started with (its log
    /// goes on in the same file).
    pub fn start_program_again(&self, program: &str) -> Result<(), RealClusterError> {
        let mut processes = lock(&self.processes);
        let process = processes
            .iter_mut()
            .find(|p| p.program == program)
            .ok_or_else(|| RealClusterError::UnknownProgram {
                program: program.to_owned(),
            })?;
        if process.child.is_none() {
            process.child =
                Some(self.start_child(process.program, &process.args, &process.log, true)?);
        }
        Ok(())
    }

    /// Starts again, with their arguments, the programs that exited on their own, and says which
    /// (with how they ended). OpenShift runs etcd and kube-apiserver as static pods and the
    /// machine-api-operator's controllers in a Deployment: the kubelet restarts an exited
    /// container (`restartPolicy: Always`, Kubernetes' "Pod Lifecycle" document, "Container
    /// restart policy"). Here each comes back at once, without the kubelet's back-off.
    pub fn restart_exited(&self) -> Result<Vec<(&'static str, String)>, RealClusterError> {
        let mut restarted = Vec::new();
        let mut processes = lock(&self.processes);
        for process in processes.iter_mut() {
            let Some(child) = process.child.as_mut() else {
                continue;
            };
            let Ok(Some(status)) = child.try_wait() else {
                continue;
            };
            process.child =
                Some(self.start_child(process.program, &process.args, &process.log, true)?);
            restarted.push((process.program, status.to_string()));
        }
        Ok(restarted)
    }

    /// Whether kube-apiserver answers `/readyz` with `ok` now (one probe, at most
    /// [`PROBE_TIMEOUT`]).
    pub async fn api_answering(&self) -> bool {
        let probe = async {
            let client = self.admin_client().await.ok()?;
            let request = http::Request::get("/readyz").body(Vec::new()).ok()?;
            client.request_text(request).await.ok()
        };
        matches!(
            tokio::time::timeout(PROBE_TIMEOUT, probe).await,
            Ok(Some(text)) if text.trim() == "ok"
        )
    }

    /// Waits until kube-apiserver answers `/readyz` with `ok`; returns the wall-clock time it
    /// first did (the audit log's clock).
    pub async fn wait_api_answering(
        &self,
        timeout: Duration,
    ) -> Result<SystemTime, RealClusterError> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.api_answering().await {
                return Ok(SystemTime::now());
            }
            if Instant::now() > deadline {
                return Err(
                    self.not_ready("kube-apiserver /readyz after a fault", timeout.as_secs())
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Compacts etcd's history up to its current revision, as kube-apiserver itself does every
    /// `--etcd-compaction-interval` (default 5 minutes: k8s.io/apiserver
    /// `pkg/storage/storagebackend/config.go:38`, `DefaultCompactInterval`), through etcd's
    /// v3 JSON gateway on its client port (`POST /v3/kv/range` for the revision, then
    /// `POST /v3/kv/compaction`: go.etcd.io/etcd/api/v3 `etcdserverpb/rpc.proto`, v3.6.4).
    /// Afterwards etcd answers a read or watch from an older revision `ErrCompacted`, which
    /// kube-apiserver turns into `410 Gone` (k8s.io/apiserver `pkg/storage/etcd3/errors.go:33`).
    /// Returns the revision compacted to.
    pub async fn compact_etcd(&self) -> Result<i64, RealClusterError> {
        // Any key: the answer's header carries the store's revision.
        let range = self
            .etcd_post(
                "/v3/kv/range",
                &json!({"key": STANDARD.encode("/registry"), "count_only": true}),
            )
            .await?;
        let revision = revision_of(&range).ok_or_else(|| RealClusterError::Etcd {
            action: "read the current revision".to_owned(),
            message: format!("no header.revision in {range}"),
        })?;
        self.etcd_post(
            "/v3/kv/compaction",
            &json!({"revision": revision.to_string(), "physical": true}),
        )
        .await?;
        Ok(revision)
    }

    /// One JSON POST to etcd's gateway (plain HTTP/1.1 on loopback, `Connection: close`).
    async fn etcd_post(&self, path: &str, body: &Value) -> Result<Value, RealClusterError> {
        let etcd_error = |message: String| RealClusterError::Etcd {
            action: format!("POST {path}"),
            message,
        };
        let authority = self
            .etcd_url
            .strip_prefix("http://")
            .unwrap_or(&self.etcd_url)
            .to_owned();
        let body = body.to_string();
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let exchange = async {
            let mut stream = tokio::net::TcpStream::connect(authority.as_str()).await?;
            stream.write_all(request.as_bytes()).await?;
            let mut answer = Vec::new();
            stream.read_to_end(&mut answer).await?;
            Ok::<_, std::io::Error>(answer)
        };
        let answer = tokio::time::timeout(Duration::from_secs(30), exchange)
            .await
            .map_err(|_| etcd_error("no answer within 30 s".to_owned()))?
            .map_err(|e| etcd_error(e.to_string()))?;
        let (status, body) = parse_http_answer(&answer).ok_or_else(|| {
            etcd_error(format!(
                "not an HTTP answer: {}",
                String::from_utf8_lossy(&answer[..answer.len().min(200)])
            ))
        })?;
        if status != 200 {
            return Err(etcd_error(format!("answered {status}: {body}")));
        }
        serde_json::from_str(&body).map_err(|e| etcd_error(format!("{e}: {body}")))
    }

    /// Gives the ServiceAccount `namespace/name` a priority level of its own with no seats and no
    /// queues, so that, as on a cluster whose seats for that level are all taken, its requests
    /// are rejected `429 Too Many Requests` with `Retry-After` (k8s.io/apiserver
    /// `pkg/server/filters/priority-and-fairness.go:378`). The objects are
    /// `flowcontrol.apiserver.k8s.io/v1` (Kubernetes' "API Priority and Fairness" document):
    /// a `PriorityLevelConfiguration` with `nominalConcurrencyShares: 0` (valid in v1:
    /// k8s.io/kubernetes `pkg/apis/flowcontrol/validation/validation.go:427` refuses only
    /// negative shares), nothing lent or borrowed, `limitResponse: Reject`; and a `FlowSchema`
    /// matching every request of the ServiceAccount, with a precedence (1000) that wins over the
    /// defaults that would match it (`service-accounts` 9000, `global-default` 9900, `catch-all`
    /// 10000). A share of 1 was tried first: out of this server's 600 seats it makes 3, which the
    /// controller never filled (no 429 in a window of the short run).
    pub async fn throttle_service_account(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<(), RealClusterError> {
        let client = self.admin_client().await?;
        create(
            &client,
            json!({
                "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
                "kind": "PriorityLevelConfiguration",
                "metadata": {"name": THROTTLE_NAME},
                "spec": {"type": "Limited", "limited": {
                    "nominalConcurrencyShares": 0,
                    "lendablePercent": 0,
                    "borrowingLimitPercent": 0,
                    "limitResponse": {"type": "Reject"},
                }},
            }),
        )
        .await?;
        create(
            &client,
            json!({
                "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
                "metadata": {"name": THROTTLE_NAME},
                "spec": {
                    "priorityLevelConfiguration": {"name": THROTTLE_NAME},
                    "matchingPrecedence": 1000,
                    "distinguisherMethod": {"type": "ByUser"},
                    "rules": [{
                        "subjects": [{"kind": "ServiceAccount",
                                      "serviceAccount": {"name": name, "namespace": namespace}}],
                        "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                                           "clusterScope": true, "namespaces": ["*"]}],
                        "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                    }],
                },
            }),
        )
        .await?;
        Ok(())
    }

    /// Deletes what [`ControlPlane::throttle_service_account`] created (absent objects are fine).
    pub async fn lift_throttle(&self) -> Result<(), RealClusterError> {
        let client = self.admin_client().await?;
        for (kind, plural) in [
            ("FlowSchema", "flowschemas"),
            ("PriorityLevelConfiguration", "prioritylevelconfigurations"),
        ] {
            let resource = ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("flowcontrol.apiserver.k8s.io", "v1", kind),
                plural,
            );
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
            match api.delete(THROTTLE_NAME, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => {
                    return Err(api_error(format!("delete {kind} {THROTTLE_NAME}"))(error));
                }
            }
        }
        Ok(())
    }
}

/// `header.revision` of an etcd gateway answer (int64s are JSON strings there).
fn revision_of(answer: &Value) -> Option<i64> {
    let revision = &answer["header"]["revision"];
    revision
        .as_str()
        .and_then(|text| text.parse().ok())
        .or_else(|| revision.as_i64())
}

/// The status and body of an HTTP/1.1 answer read to its end (`Connection: close`); a chunked
/// body is joined.
fn parse_http_answer(answer: &[u8]) -> Option<(u16, String)> {
    let text = String::from_utf8_lossy(answer);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    let chunked = head.lines().any(|line| {
        let line = line.to_ascii_lowercase();
        line.starts_with("transfer-encoding:") && line.contains("chunked")
    });
    if !chunked {
        return Some((status, body.to_owned()));
    }
    let mut joined = String::new();
    let mut rest = body;
    loop {
        let (size, after) = rest.split_once("\r\n")?;
        let size = usize::from_str_radix(size.trim(), 16).ok()?;
        if size == 0 {
            return Some((status, joined));
        }
        joined.push_str(after.get(..size)?);
        rest = after.get(size + 2..)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_revision_is_read_from_the_gateway_s_string_int64() {
        assert_eq!(
            revision_of(&json!({"header": {"cluster_id": "1", "revision": "4521"}})),
            Some(4521)
        );
        assert_eq!(revision_of(&json!({"header": {}})), None);
    }

    #[test]
    fn plain_and_chunked_answers_are_read() {
        let plain = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{\"a\":1}";
        assert_eq!(
            parse_http_answer(plain),
            Some((200, "{\"a\":1}".to_owned()))
        );
        let chunked =
            b"HTTP/1.1 400 Bad Request\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n3\r\n:1}\r\n0\r\n\r\n";
        assert_eq!(
            parse_http_answer(chunked),
            Some((400, "{\"a\":1}".to_owned()))
        );
        assert_eq!(parse_http_answer(b"garbage"), None);
    }
}
