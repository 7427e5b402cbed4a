//! The MachineSet controller: the scale-from-zero capacity annotations
//! ([`crate::plan::machineset::annotations`]) on every MachineSet whose template has a Nutanix providerSpec,
//! written with server-side apply under their own field manager ([`crate::plan::machineset`]),
//! so no other annotation is touched and keys no longer wanted are removed.
//!
//! Every change of a MachineSet (its template included) recomputes them; nothing is written when
//! they already hold. A providerSpec they cannot be computed from gets a Warning event
//! `InvalidConfiguration` naming the field, once per distinct problem, and no retry until the
//! MachineSet changes; the annotations written before stay.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};

use super::error::Error;
use super::events::publish;
use super::kit::{self, BackoffKey, Kit, key_of};
use super::shared::Shared;
use crate::api::{GuardedMachineSet, MachineSet};
use crate::plan::machineset::annotations::machine_set_annotations;
use crate::plan::machineset::{FIELD_MANAGER, capacity_apply, is_nutanix};

/// This controller in the kit: its failures back off under its own key, and a reconcile that
/// went well ends the backoff.
const KIT: Kit = Kit {
    controller: "machineset",
    title: "machineset controller",
    backoff: BackoffKey::Controller,
    logs_unreadable: true,
};

/// Event reason of a providerSpec the annotations cannot be computed from.
pub const INVALID_CONFIGURATION: &str = "InvalidConfiguration";

/// The MachineSet controller's context.
#[derive(Debug)]
pub struct Context {
    shared: Arc<Shared>,
    /// The problem last reported per MachineSet (by uid), so a relist does not repeat the event.
    reported: Mutex<HashMap<String, String>>,
}

/// Runs the MachineSet controller until its watch ends.
pub async fn run(shared: Arc<Shared>) {
    let client = shared.client.clone();
    let sets: Api<GuardedMachineSet> = match &shared.settings.namespace {
        Some(namespace) => Api::namespaced(client, namespace),
        None => Api::all(client),
    };
    let config = kit::config(&shared);
    let context = Arc::new(Context {
        shared,
        reported: Mutex::new(HashMap::new()),
    });
    let results = Controller::new(sets, watcher::Config::default())
        .with_config(config)
        .run(reconcile, error_policy, context);
    KIT.run(results).await;
}

async fn reconcile(
    guarded: Arc<GuardedMachineSet>,
    context: Arc<Context>,
) -> Result<Action, Error> {
    KIT.reconcile(&context.shared, &guarded, async |set| {
        reconcile_set(set, &context).await
    })
    .await
}

async fn reconcile_set(set: &MachineSet, context: &Context) -> Result<Action, Error> {
    if !is_nutanix(set) || set.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let key = key_of(set);
    let wanted = match machine_set_annotations(set) {
        Ok(wanted) => wanted,
        Err(problem) => {
            report(set, context, problem.to_string()).await;
            return Ok(Action::await_change());
        }
    };
    forget_report(set, context);
    let Some(body) = capacity_apply(set, &wanted) else {
        return Ok(Action::await_change());
    };
    let api: Api<MachineSet> = Api::namespaced(
        context.shared.client.clone(),
        &set.namespace().unwrap_or_default(),
    );
    api.patch(
        &set.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await
    .map_err(|e| Error::kube(format!("apply capacity annotations to MachineSet {key}"), e))?;
    tracing::info!(machineset = %key, annotations = ?wanted, "capacity annotations written");
    Ok(Action::await_change())
}

fn uid_of(set: &MachineSet) -> String {
    set.uid().unwrap_or_else(|| set.name_any())
}

fn forget_report(set: &MachineSet, context: &Context) {
    context
        .reported
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(&uid_of(set));
}

/// A Warning event for `problem`, unless the same one was reported last for this MachineSet.
async fn report(set: &MachineSet, context: &Context, problem: String) {
    let first = context
        .reported
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(uid_of(set), problem.clone())
        .is_none_or(|previous| previous != problem);
    if !first {
        return;
    }
    tracing::warn!(machineset = %set.name_any(), %problem, "no capacity annotations");
    let event = Event {
        type_: EventType::Warning,
        reason: INVALID_CONFIGURATION.to_owned(),
        note: Some(format!("no capacity annotations: {problem}")),
        action: "CapacityAnnotations".to_owned(),
        secondary: None,
    };
    publish(&context.shared.recorder, set, &event).await;
}

fn error_policy(guarded: Arc<GuardedMachineSet>, error: &Error, context: Arc<Context>) -> Action {
    KIT.retry(&context.shared, guarded.as_ref(), error)
}
