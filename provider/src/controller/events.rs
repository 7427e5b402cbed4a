//! Events about the objects the controllers reconcile, published through the shared recorder:
//! for whoever reads `oc describe`; a failure to publish is logged, never returned.

use std::fmt::{Arguments, Display};

use kube::runtime::events::{Event, Recorder};
use kube::{Resource, ResourceExt};

use crate::api::{Machine, MachineSet};

/// Publishes `event` about `object`. A failure to publish is logged, not returned: the event is
/// for whoever reads `oc describe`, and the reconcile's outcome does not depend on it.
pub async fn publish<K: Subject>(recorder: &Recorder, object: &K, event: &Event) {
    if let Err(error) = recorder.publish(event, &object.object_ref(&())).await {
        K::warn(
            &object.name_any(),
            &error,
            format_args!("cannot publish event {}", event.reason),
        );
    }
}

/// An object the controllers reconcile, named in log lines by the field its controller has
/// always used for it (`machine`, `machineset`).
pub trait Subject: Resource<DynamicType = ()> {
    /// Logs a warning about the object named `name`.
    fn warn(name: &str, error: &dyn Display, message: Arguments<'_>);
}

impl Subject for Machine {
    fn warn(name: &str, error: &dyn Display, message: Arguments<'_>) {
        tracing::warn!(machine = %name, %error, "{message}");
    }
}

impl Subject for MachineSet {
    fn warn(name: &str, error: &dyn Display, message: Arguments<'_>) {
        tracing::warn!(machineset = %name, %error, "{message}");
    }
}
