//! One ordered journal of what happened to one Machine across both servers: the Machine's
//! versions as kube-sim applied them, the Kubernetes requests of the controller, and the Prism
//! requests as prism-mock answered them. Everything runs in one process, so the `Instant`s the
//! two servers stamp compare.
//!
//! Ordering rule: `a` came before `b` when `a` was over before `b` began (a change is a point;
//! a request spans from its arrival to its answer). The rule holds for a client that waits for
//! `a`'s answer before sending `b`, and fails whenever `b` reached its server first, so an
//! assertion built on it fails when the order it checks is broken.

use std::sync::Arc;
use std::time::Instant;

use kube_sim::TimedRequest as KubeRequest;
use kube_sim::store::{Change, EventType};
use prism_mock::TimedRequest as PrismRequest;
use serde_json::Value;

use crate::harness::{Env, NS};

/// The finalizer the machine-api-operator's Machine controller puts on every Machine
/// (openshift/machine-api-operator, vendor/github.com/openshift/api/machine/v1beta1/types_machine.go:
/// `MachineFinalizer`).
pub const MACHINE_FINALIZER: &str = "machine.machine.openshift.io";

/// The condition a drained Machine carries (same repository,
/// vendor/github.com/openshift/api/machine/v1beta1/types_provider.go: `MachineDrained`).
pub const DRAINED_CONDITION: &str = "Drained";

/// Something with a start and an end on the process's clock.
pub trait Span {
    fn start(&self) -> Instant;
    fn end(&self) -> Instant;
    /// One line for a failure message.
    fn describe(&self, origin: Instant) -> String;
}

fn offset(origin: Instant, at: Instant) -> String {
    format!(
        "{:>9.1} ms",
        at.saturating_duration_since(origin).as_secs_f64() * 1000.0
    )
}

/// A version of the Machine, as applied.
#[derive(Clone)]
pub struct MachineVersion(pub Arc<Change>);

impl MachineVersion {
    pub fn object(&self) -> &Value {
        &self.0.object.value
    }

    pub fn deleted(&self) -> bool {
        self.0.kind == EventType::Deleted
    }

    pub fn provider_status(&self) -> &Value {
        &self.object()["status"]["providerStatus"]
    }

    pub fn vm_uuid(&self) -> Option<&str> {
        self.provider_status()["vmUUID"].as_str()
    }

    pub fn phase(&self) -> Option<&str> {
        self.object()["status"]["phase"].as_str()
    }

    pub fn has_finalizer(&self) -> bool {
        !self.deleted()
            && self.object()["metadata"]["finalizers"]
                .as_array()
                .is_some_and(|all| all.iter().any(|f| f == MACHINE_FINALIZER))
    }

    pub fn deleting(&self) -> bool {
        self.object()["metadata"]["deletionTimestamp"].is_string()
    }

    pub fn pending_task_operation(&self) -> Option<&str> {
        self.provider_status()["pendingTask"]["operation"].as_str()
    }

    pub fn drained(&self) -> bool {
        self.object()["status"]["conditions"]
            .as_array()
            .is_some_and(|all| {
                all.iter()
                    .any(|c| c["type"] == DRAINED_CONDITION && c["status"] == "True")
            })
    }
}

impl Span for MachineVersion {
    fn start(&self) -> Instant {
        self.0.at
    }
    fn end(&self) -> Instant {
        self.0.at
    }
    fn describe(&self, origin: Instant) -> String {
        let status = self.provider_status();
        format!(
            "{} kube    {:<8} Machine rv {} phase={} finalizer={} deleting={} drained={} vmUUID={} deployRequestId={} pendingTask={} pendingFollowUp={}",
            offset(origin, self.0.at),
            self.0.kind.as_str(),
            self.0.rv,
            self.phase().unwrap_or("-"),
            self.has_finalizer(),
            self.deleting(),
            self.drained(),
            self.vm_uuid().unwrap_or("-"),
            status["deployRequestId"].as_str().unwrap_or("-"),
            self.pending_task_operation().unwrap_or("-"),
            !status["pendingFollowUp"].is_null(),
        )
    }
}

/// A Kubernetes request of the controller.
#[derive(Clone)]
pub struct KubeCall(pub KubeRequest);

impl KubeCall {
    pub fn is_write(&self) -> bool {
        !matches!(self.0.record.verb.as_str(), "get" | "list" | "watch")
    }
}

impl Span for KubeCall {
    fn start(&self) -> Instant {
        self.0.received
    }
    fn end(&self) -> Instant {
        self.0.answered
    }
    fn describe(&self, origin: Instant) -> String {
        let r = &self.0.record;
        format!(
            "{} kube    {} {} {} {} -> {}",
            offset(origin, self.0.received),
            r.user,
            r.verb,
            r.rbac_resource(),
            r.name,
            r.status
        )
    }
}

/// A Prism request.
#[derive(Clone)]
pub struct PrismCall(pub PrismRequest);

impl PrismCall {
    pub fn method(&self) -> &str {
        &self.0.record.method
    }

    pub fn endpoint(&self) -> &str {
        &self.0.record.endpoint
    }

    pub fn vm(&self) -> Option<&str> {
        self.0.record.vm.as_deref()
    }

    pub fn is(&self, method: &str, endpoint: &str) -> bool {
        self.method() == method && self.endpoint() == endpoint
    }

    /// A call that changes something in Prism: every `PUT` and `DELETE`, and every `POST` but
    /// the list and read ones (v3 lists are `POST …/list`).
    pub fn is_write(&self) -> bool {
        match self.method() {
            "PUT" | "DELETE" => true,
            "POST" => !self.endpoint().ends_with("/list"),
            _ => false,
        }
    }
}

impl Span for PrismCall {
    fn start(&self) -> Instant {
        self.0.received
    }
    fn end(&self) -> Instant {
        self.0.answered
    }
    fn describe(&self, origin: Instant) -> String {
        let r = &self.0.record;
        format!(
            "{} prism   {} {} -> {} vm={} requestId={}",
            offset(origin, self.0.received),
            r.method,
            r.endpoint,
            r.status,
            r.vm.as_deref().unwrap_or("-"),
            self.0.request_id.as_deref().unwrap_or("-"),
        )
    }
}

/// What happened to one Machine so far.
pub struct Journal {
    pub versions: Vec<MachineVersion>,
    /// Kubernetes requests of the controller's users, any object.
    pub kube: Vec<KubeCall>,
    pub prism: Vec<PrismCall>,
    origin: Instant,
}

/// Prism routes the tests name.
pub mod route {
    pub const VMS: &str = "/api/nutanix/v3/vms";
    pub const VM: &str = "/api/nutanix/v3/vms/{uuid}";
    pub const CLONE: &str = "/api/nutanix/v3/vms/{uuid}/clone";
}

impl Journal {
    /// The journal of Machine `name`, with the Kubernetes requests of the users in `users`.
    pub fn of(env: &Env, name: &str, users: &[&str]) -> Self {
        let (_, changes) = env
            .sim
            .store()
            .subscribe_from(0)
            .expect("the test's changes are all in kube-sim's history");
        let versions: Vec<_> = changes
            .into_iter()
            .filter(|c| {
                c.resource.0 == "machine.openshift.io"
                    && c.resource.1 == "machines"
                    && c.namespace == NS
                    && c.object.value["metadata"]["name"] == name
            })
            .map(MachineVersion)
            .collect();
        let kube: Vec<_> = env
            .sim
            .request_log()
            .timed_records()
            .into_iter()
            .filter(|r| users.contains(&r.record.user.as_str()))
            .map(KubeCall)
            .collect();
        let prism: Vec<_> = env
            .mock
            .admin()
            .timed_requests_since(0)
            .into_iter()
            .map(PrismCall)
            .collect();
        let origin = versions
            .first()
            .map(Span::start)
            .into_iter()
            .chain(prism.iter().map(Span::start))
            .chain(kube.iter().map(Span::start))
            .min()
            .unwrap_or_else(Instant::now);
        Self {
            versions,
            kube,
            prism,
            origin,
        }
    }

    /// Every entry in order of its start, one per line.
    pub fn render(&self) -> String {
        let mut lines: Vec<(Instant, String)> = self
            .versions
            .iter()
            .map(|v| (v.start(), v.describe(self.origin)))
            .chain(
                self.kube
                    .iter()
                    .map(|k| (k.start(), k.describe(self.origin))),
            )
            .chain(
                self.prism
                    .iter()
                    .map(|p| (p.start(), p.describe(self.origin))),
            )
            .collect();
        lines.sort_by_key(|(at, _)| *at);
        lines
            .into_iter()
            .map(|(_, line)| line)
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The first version for which `check` holds.
    pub fn first_version(
        &self,
        what: &str,
        check: impl Fn(&MachineVersion) -> bool,
    ) -> &MachineVersion {
        self.versions.iter().find(|v| check(v)).unwrap_or_else(|| {
            panic!(
                "no version of the Machine {what}; journal:\n{}",
                self.render()
            )
        })
    }

    /// The Prism calls for which `check` holds, in order of arrival.
    pub fn prism_calls(&self, check: impl Fn(&PrismCall) -> bool) -> Vec<&PrismCall> {
        let mut calls: Vec<_> = self.prism.iter().filter(|p| check(p)).collect();
        calls.sort_by_key(|p| p.start());
        calls
    }

    /// The first Prism call for which `check` holds.
    pub fn first_prism_call(&self, what: &str, check: impl Fn(&PrismCall) -> bool) -> &PrismCall {
        self.prism_calls(check)
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("no Prism call {what}; journal:\n{}", self.render()))
    }

    /// The controller's write request that made `version`: a write to the Machine, served
    /// while the version was applied.
    pub fn write_of(&self, version: &MachineVersion) -> &KubeCall {
        let name = version.object()["metadata"]["name"]
            .as_str()
            .unwrap_or_default();
        self.kube
            .iter()
            .find(|k| {
                k.is_write()
                    && k.0.record.resource == "machines"
                    && k.0.record.name == name
                    && k.start() <= version.start()
                    && version.start() <= k.end()
            })
            .unwrap_or_else(|| {
                panic!(
                    "no write of the controller made {}; journal:\n{}",
                    version.describe(self.origin),
                    self.render()
                )
            })
    }

    /// Fails unless `first` was over before `then` began.
    pub fn assert_before(&self, first: &dyn Span, then: &dyn Span, why: &str) {
        assert!(
            first.end() < then.start(),
            "{why}:\n  expected  {}\n  before    {}\njournal:\n{}",
            first.describe(self.origin),
            then.describe(self.origin),
            self.render()
        );
    }
}
