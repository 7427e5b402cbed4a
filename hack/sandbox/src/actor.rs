//! Start and stop of the simulated actors: each runs as one tokio task that ends when its
//! cancellation token fires.

use std::future::Future;

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
