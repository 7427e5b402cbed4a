//! Start and stop of the simulated actors: each runs as one tokio task that ends when its
//! cancellation token fires.

use std::fmt::Debug;
use std::future::Future;
use std::hash::Hash;

use futures::StreamExt;
use kube::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// A running actor. [`ActorHandle::stop`] cancels it and waits until it has ended; dropping the
/// handle cancels it without waiting.
#[derive(Debug)]
pub struct ActorHandle {
    name: &'static str,
    cancel: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl ActorHandle {
    /// Spawns `run` with a token that fires when the actor is asked to stop. `run` must return
    /// soon after the token fires.
    pub(crate) fn spawn<F, Fut>(name: &'static str, run: F) -> Self
    where
        F: FnOnce(CancellationToken) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let cancel = CancellationToken::new();
        let task = tokio::spawn(run(cancel.clone()));
        tracing::debug!(actor = name, "started");
        Self {
            name,
            cancel,
            task: Some(task),
        }
    }

    /// The actor's name (for logs and progress displays).
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Whether the actor's task is still running (false once it stopped or panicked).
    pub fn is_running(&self) -> bool {
        self.task.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Asks the actor to stop and waits for its task to end.
    pub async fn stop(mut self) {
        self.cancel.cancel();
        if let Some(task) = self.task.take()
            && let Err(error) = task.await
        {
            tracing::warn!(actor = self.name, %error, "actor task ended abnormally");
        }
        tracing::debug!(actor = self.name, "stopped");
    }
}

impl Drop for ActorHandle {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// A cache of `api`'s objects kept by a watch of its own until `cancel` fires, as the real
/// controllers' informers keep theirs: an actor that reads it lists nothing per reconcile (a list
/// of every Machine per Node or CSR made the actors quadratic in the cluster's size). It may lag
/// the API server a little, so a decision that finds nothing on it looks again later.
pub(crate) fn cache<K>(api: Api<K>, cancel: CancellationToken) -> Store<K>
where
    K: kube::Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    let (reader, writer) = reflector::store();
    let updates = reflector::reflector(writer, watcher(api, watcher::Config::default()))
        .default_backoff()
        .touched_objects();
    tokio::spawn(async move {
        tokio::select! {
            () = cancel.cancelled() => {}
            () = updates.for_each(|_| async {}) => {}
        }
    });
    reader
}

/// Completes on Ctrl-C (SIGINT) or SIGTERM, so that the sandbox's commands stop their world, and
/// the controller process it started, on either (a SIGTERM that ended the process at once left
/// the controller running).
pub async fn stop_requested() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::warn!(%error, "cannot watch for SIGTERM; only Ctrl-C stops the sandbox");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}
