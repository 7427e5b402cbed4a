//! What every controller of this binary does around its own decisions, written once: how an
//! object is keyed, the reconcile wrapper (an unreadable object skipped, the duration and result
//! counted, a failure turned into a backoff) and the run loop's log of what its stream reports
//! (event publishing is [`super::events`]'s).
//!
//! Each controller describes itself by one [`Kit`] constant; what differs between them (the
//! metrics label, whose backoff a failure counts against) is a field of it, so that the wrapper
//! itself has no branch per controller.

use std::fmt::Display;

use futures::{Stream, StreamExt};
use kube::core::DeserializeGuard;
use kube::runtime::controller::{self, Action};
use kube::{Resource, ResourceExt};

use super::error::Error;
use super::events::Subject;
use super::shared::Shared;

/// How soon an object whose write lost a race is reconciled again, if no watch event came first.
const CONFLICT_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// How one controller uses the kit.
#[derive(Debug)]
pub struct Kit {
    /// Its label in metrics (`controller` of `nutanix_machine_reconcile_duration_seconds` and
    /// `nutanix_machine_reconcile_errors_total`) and in its `reconcile failed` warnings.
    pub controller: &'static str,
    /// How its run loop names it when the controller's stream reports an error.
    pub title: &'static str,
    /// Whose backoff a failed reconcile counts against.
    pub backoff: BackoffKey,
    /// Whether it logs an object that cannot be read. The Windows join reconciler reads the
    /// Machine controller's cache, which logs such a Machine already.
    pub logs_unreadable: bool,
}

/// The key of an object's backoff, and who ends it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackoffKey {
    /// `<namespace>/<name>`: the Machine's own, which the Machine protocol also reads as its
    /// create backoff; only the protocol (`Effect::ResetBackoff`) and a changed Secret end it,
    /// not any reconcile that went well.
    Object,
    /// `<controller>:<namespace>/<name>`: the controller's own, apart from the Machine's; a
    /// reconcile that went well ends it.
    Controller,
}

/// `<namespace>/<name>` of an object: how logs, errors and the Machine's backoff name it.
pub fn key_of(object: &impl Resource) -> String {
    format!(
        "{}/{}",
        object.namespace().unwrap_or_default(),
        object.name_any()
    )
}

/// The kube-rs controller settings every controller runs with.
pub fn config(shared: &Shared) -> controller::Config {
    controller::Config::default().concurrency(shared.settings.concurrency)
}

impl Kit {
    /// The key of `object`'s backoff ([`BackoffKey`]).
    pub fn backoff_key(&self, object: &impl Resource) -> String {
        match self.backoff {
            BackoffKey::Object => key_of(object),
            BackoffKey::Controller => format!("{}:{}", self.controller, key_of(object)),
        }
    }

    /// One reconcile of `guarded`: `work` on the object, or, when the object cannot be read,
    /// nothing until it changes; then its backoff ended if this controller's own and the
    /// reconcile went well, and the duration counted by result.
    pub async fn reconcile<K: Subject>(
        &self,
        shared: &Shared,
        guarded: &DeserializeGuard<K>,
        work: impl AsyncFnOnce(&K) -> Result<Action, Error>,
    ) -> Result<Action, Error> {
        let started = std::time::Instant::now();
        let result = match &guarded.0 {
            Ok(object) => work(object).await,
            Err(invalid) => {
                if self.logs_unreadable {
                    K::warn(
                        &self.backoff_key(guarded),
                        &invalid.error,
                        format_args!("cannot read the {}; skipped until it changes", K::kind(&())),
                    );
                }
                Ok(Action::await_change())
            }
        };
        if result.is_ok() && self.backoff == BackoffKey::Controller {
            shared.backoff.reset(&self.backoff_key(guarded));
        }
        let outcome = if result.is_ok() { "ok" } else { "error" };
        shared
            .metrics
            .reconcile_duration
            .with_label_values(&[self.controller, outcome])
            .observe(started.elapsed().as_secs_f64());
        result
    }

    /// What follows a failed reconcile of `object`: counted, logged, and retried after the
    /// object's backoff (at least what Prism asked for). The controller's error policy.
    ///
    /// A write that lost a race ([`Error::is_conflict`]) is no failure: the other writer's change
    /// is already on its way as a watch event, so the object is looked at again soon, at debug
    /// level and without growing its backoff (on a real API server nodelink's Machine status
    /// writes made these `reconcile failed` warnings in every scale-up).
    pub fn retry(&self, shared: &Shared, object: &impl Resource, error: &Error) -> Action {
        let key = self.backoff_key(object);
        shared
            .metrics
            .reconcile_errors
            .with_label_values(&[self.controller, error.reason()])
            .inc();
        if error.is_conflict() {
            tracing::debug!(controller = self.controller, object = %key, %error, "the object changed since it was read; reconciling again");
            return Action::requeue(CONFLICT_RETRY);
        }
        let delay = shared.backoff.failed(&key, error.retry_after());
        tracing::warn!(controller = self.controller, object = %key, %error, retry_in = ?delay, "reconcile failed");
        Action::requeue(delay)
    }

    /// Runs the controller's stream of reconcile results until its watch ends. A reconcile's
    /// own failure is logged by [`Self::retry`]; what else the stream reports (a watch error,
    /// an object gone from the store) is logged here, at debug: kube-rs retries it.
    pub async fn run<T, E: Display>(&self, results: impl Stream<Item = Result<T, E>>) {
        results
            .for_each(|result| async move {
                if let Err(error) = result {
                    tracing::debug!(%error, "{}", self.title);
                }
            })
            .await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use kube::core::error_boundary::InvalidObject;
    use kube::runtime::reflector;
    use serde_json::json;
    use tokio::sync::broadcast;

    use super::*;
    use crate::actuator::{Actuator, ActuatorSettings};
    use crate::api::Machine;
    use crate::controller::shared::{ControllerSettings, WatchedSecrets};
    use crate::metrics::Metrics;

    const MACHINES: Kit = Kit {
        controller: "machine",
        title: "machine controller",
        backoff: BackoffKey::Object,
        logs_unreadable: true,
    };
    const JOIN: Kit = Kit {
        controller: "windows-join",
        title: "windows join reconciler",
        backoff: BackoffKey::Controller,
        logs_unreadable: false,
    };

    /// Shared state whose clients point at nothing: the kit itself makes no call.
    fn shared() -> Shared {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let (store, _writer) = reflector::store();
        Shared::new(
            client.clone(),
            client,
            Arc::new(Actuator::new(ActuatorSettings::default(), None)),
            Arc::new(Metrics::new().unwrap()),
            ControllerSettings::default(),
            WatchedSecrets {
                store,
                changes: broadcast::channel(1).0,
            },
            "test".to_owned(),
        )
    }

    fn machine() -> DeserializeGuard<Machine> {
        DeserializeGuard(Ok(serde_json::from_value(json!({
            "apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
            "metadata": {"name": "win-1", "namespace": "openshift-machine-api"},
            "spec": {},
        }))
        .unwrap()))
    }

    fn count(shared: &Shared, controller: &str, outcome: &str) -> u64 {
        shared
            .metrics
            .reconcile_duration
            .with_label_values(&[controller, outcome])
            .get_sample_count()
    }

    #[tokio::test]
    async fn a_machines_backoff_outlives_a_good_reconcile_and_a_controllers_own_ends_with_it() {
        let shared = shared();
        let guarded = machine();
        assert_eq!(
            MACHINES.backoff_key(&guarded),
            "openshift-machine-api/win-1"
        );
        assert_eq!(
            JOIN.backoff_key(&guarded),
            "windows-join:openshift-machine-api/win-1"
        );
        let failure = Error::Configuration("no endpoint".to_owned());
        for kit in [&MACHINES, &JOIN] {
            let action = kit.retry(&shared, &guarded, &failure);
            assert_ne!(action, Action::await_change());
            assert_eq!(
                shared
                    .metrics
                    .reconcile_errors
                    .with_label_values(&[kit.controller, "Configuration"])
                    .get(),
                1
            );
        }

        for kit in [&MACHINES, &JOIN] {
            let done = kit
                .reconcile(&shared, &guarded, async |_| Ok(Action::await_change()))
                .await;
            assert_eq!(done.unwrap(), Action::await_change());
            assert_eq!(count(&shared, kit.controller, "ok"), 1);
        }
        // The Machine's backoff is the protocol's create backoff: only the protocol ends it.
        assert!(
            shared
                .backoff
                .remaining(&MACHINES.backoff_key(&guarded))
                .is_some()
        );
        assert_eq!(shared.backoff.remaining(&JOIN.backoff_key(&guarded)), None);
    }

    #[tokio::test]
    async fn an_unreadable_object_waits_for_a_change_and_a_failed_reconcile_counts_as_an_error() {
        let shared = shared();
        let unreadable: DeserializeGuard<Machine> = DeserializeGuard(Err(InvalidObject {
            error: "spec: invalid type".to_owned(),
            metadata: Default::default(),
        }));
        let result = MACHINES
            .reconcile(&shared, &unreadable, async |_| {
                panic!("an unreadable Machine reached the reconcile")
            })
            .await;
        assert_eq!(result.unwrap(), Action::await_change());
        assert_eq!(count(&shared, "machine", "ok"), 1);

        let failed = JOIN
            .reconcile(&shared, &machine(), async |_| {
                Err(Error::Configuration("no endpoint".to_owned()))
            })
            .await;
        assert!(matches!(failed, Err(Error::Configuration(_))));
        assert_eq!(count(&shared, "windows-join", "error"), 1);
        assert_eq!(count(&shared, "windows-join", "ok"), 0);
    }
}
