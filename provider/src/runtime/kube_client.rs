//! The Kubernetes client, with a deadline on every request but a watch: a request the API
//! server (or the path to it) never answers fails after `--kube-request-timeout` instead of
//! holding its reconcile, or the leader's renewal, for good. kube-client leaves the read timeout
//! unset by default (`Config::read_timeout`, "to avoid breaking long-lived connections"), as
//! client-go leaves `rest.Config.Timeout` at zero; kubectl's `--request-timeout` is the same
//! deadline per request.
//!
//! A watch is exempt: it is meant to stay open, and kube-runtime's watcher has its own idle
//! timeout (`next_with_idle_timeout`: the server's watch timeout plus a margin). A response's
//! body is read within the same deadline as its head.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt as _, Full};
use kube::client::{Body, ClientBuilder, DynBody};
use kube::{Client, Config};
use tower::{BoxError, Layer, Service};

/// `--kube-request-timeout`'s default, and the deadline of the one-shot commands.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The deadline a request exceeded (a `kube::Error::Service` carries it).
#[derive(Debug, thiserror::Error)]
#[error("{method} {path}: no answer from the API server within {timeout:?}")]
pub struct RequestTimedOut {
    pub method: http::Method,
    /// The path alone: a query may name a label selector, never a secret, but it adds nothing.
    pub path: String,
    pub timeout: Duration,
}

/// A client of `config` whose requests, watches aside, end within `timeout`.
pub fn client(config: Config, timeout: Duration) -> Result<Client, kube::Error> {
    Ok(ClientBuilder::try_from(config)?
        .with_layer(&DeadlineLayer { timeout })
        .build())
}

#[derive(Clone, Copy, Debug)]
struct DeadlineLayer {
    timeout: Duration,
}

impl<S> Layer<S> for DeadlineLayer {
    type Service = Deadline<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Deadline {
            inner,
            timeout: self.timeout,
        }
    }
}

#[derive(Clone, Debug)]
struct Deadline<S> {
    inner: S,
    timeout: Duration,
}

/// Whether `request` is a watch (`?watch=true` or `?watch=1`, as the API server reads it).
fn is_watch<B>(request: &Request<B>) -> bool {
    request.uri().query().is_some_and(|query| {
        query
            .split('&')
            .any(|pair| matches!(pair, "watch=true" | "watch=1"))
    })
}

type Answer = Response<Box<DynBody>>;

impl<S> Service<Request<Body>> for Deadline<S>
where
    S: Service<Request<Body>, Response = Answer, Error = BoxError> + Send,
    S::Future: Send + 'static,
{
    type Response = Answer;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Answer, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        if is_watch(&request) {
            return Box::pin(self.inner.call(request));
        }
        let timed_out = RequestTimedOut {
            method: request.method().clone(),
            path: request.uri().path().to_owned(),
            timeout: self.timeout,
        };
        let answer = self.inner.call(request);
        let timeout = self.timeout;
        Box::pin(async move {
            let read = async {
                let (head, body) = answer.await?.into_parts();
                let bytes = body.collect().await?.to_bytes();
                Ok::<_, BoxError>(Response::from_parts(head, buffered(bytes)))
            };
            match tokio::time::timeout(timeout, read).await {
                Ok(answer) => answer,
                Err(_) => Err(Box::new(timed_out) as BoxError),
            }
        })
    }
}

fn buffered(bytes: Bytes) -> Box<DynBody> {
    Box::new(Full::new(bytes).map_err(|never: Infallible| match never {}))
}

#[cfg(test)]
mod tests {
    use super::*;

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::Api;
    use tokio::net::TcpListener;

    #[test]
    fn only_watches_are_exempt() {
        let request = |uri: &str| Request::get(uri).body(()).unwrap();
        assert!(is_watch(&request(
            "/api/v1/configmaps?watch=true&resourceVersion=5"
        )));
        assert!(is_watch(&request(
            "/api/v1/configmaps?labelSelector=a&watch=1"
        )));
        assert!(!is_watch(&request("/api/v1/configmaps?watch=false")));
        assert!(!is_watch(&request(
            "/api/v1/configmaps?fieldSelector=watch%3Dtrue"
        )));
        assert!(!is_watch(&request("/api/v1/namespaces/watch/configmaps")));
    }

    #[tokio::test]
    async fn a_request_that_is_never_answered_fails_at_the_deadline() {
        // Accepts connections and never answers, as a black-holed path to the API server.
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let address = listener.local_addr().unwrap();
        let held = tokio::spawn(async move {
            let mut connections = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                connections.push(stream);
            }
        });
        let config = Config::new(format!("http://{address}").parse().unwrap());
        let client = client(config, Duration::from_millis(300)).unwrap();
        let maps: Api<ConfigMap> = Api::namespaced(client, "default");
        let outcome = tokio::time::timeout(Duration::from_secs(10), maps.get_opt("any"))
            .await
            .expect("the deadline ends the request, not the test's own timeout");
        let Err(kube::Error::Service(error)) = outcome else {
            panic!("{outcome:?}");
        };
        let timed_out = error
            .downcast_ref::<RequestTimedOut>()
            .expect("our deadline");
        assert_eq!(timed_out.path, "/api/v1/namespaces/default/configmaps/any");
        held.abort();
    }
}
