//! Who wrote what, and what the API server answered: the writes of one run read from kube-sim's
//! request log or from the real kube-apiserver's audit log, tallied by actor, verb, resource,
//! subresource and answer, and the two tallies compared. The actors that exist on one side only
//! are left out, with the reason ([`ONE_SIDED_ACTORS`]); any other difference is a defect of
//! kube-sim or of a stand-in.
//!
//! Counts of the same write differ between runs (how often a status is patched depends on
//! timing), so the comparison is of which writes happen and how they are answered, not of how
//! many times.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::jiff::Timestamp;
use kube_sim::reqlog::RequestRecord;
use serde::Deserialize;

/// Who made a request.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Actor {
    /// Our controller (its ServiceAccount on the real control plane).
    Controller,
    /// The Go provider (`manager`, as the administrator on the real control plane).
    GoProvider,
    /// The machine-api-operator's MachineSet controller (real, or the stand-in).
    MachineSetController,
    /// The machine-api-operator's nodelink (real, or the stand-in).
    Nodelink,
    /// The machine-api-operator's machine-healthcheck (real only).
    MachineHealthCheck,
    /// The cluster-machine-approver's stand-in.
    Approver,
    /// Kubelets and WMCO (the node agent; on the real control plane also as the node-bootstrapper
    /// and each `system:node:<name>`).
    Kubelet,
    /// The cluster autoscaler's stand-in.
    Autoscaler,
    /// The in-cluster IPAM controller's stand-in ([`crate::ipam`]).
    Ipam,
    /// The test or scenario itself (`oc scale`, `oc apply`).
    Test,
    /// kube-controller-manager (real only).
    KubeControllerManager,
    /// The API server's own bootstrap writes (real only).
    ApiServer,
    /// The control plane's set-up as its administrator (real only: kube-sim's set-up writes to its
    /// store directly).
    Administrator,
    /// Anyone else, by user name.
    Other(String),
}

impl fmt::Display for Actor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Other(user) => write!(f, "{user}"),
            known => write!(f, "{known:?}"),
        }
    }
}

/// One kind of write: who, which verb on which resource, and the answer's status code.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WriteKind {
    pub actor: Actor,
    pub verb: String,
    pub resource: String,
    pub subresource: String,
    pub code: u16,
}

impl fmt::Display for WriteKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let resource = if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        };
        write!(
            f,
            "{} {} {} → {}",
            self.actor, self.verb, resource, self.code
        )
    }
}

/// How many writes of each kind.
pub type Tally = BTreeMap<WriteKind, u64>;

const WRITE_VERBS: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];

/// The kube-sim user (token `user:NAME`) the controller's requests are logged as.
pub const CONTROLLER_USER: &str = "nutanix-machine-controller";

/// The name the Go provider runs under (its `argv[0]`, whatever its file is called): client-go
/// names a client's user agent after it, which is how its requests are told from the
/// administrator's (it runs with the administrator's kubeconfig).
pub const GO_PROVIDER_PROGRAM: &str = "manager";

/// The kube-sim user the cluster's objects are applied as, as the administrator applies them on
/// the real control plane.
pub const ADMINISTRATOR_USER: &str = "administrator";

/// kube-sim's users: each actor's client sends `user:<name>` (`world::client_as`).
fn sim_actor(user: &str) -> Actor {
    match user {
        CONTROLLER_USER => Actor::Controller,
        "machineset-controller" => Actor::MachineSetController,
        "nodelink" => Actor::Nodelink,
        "approver" => Actor::Approver,
        "node-agent" => Actor::Kubelet,
        "autoscaler" => Actor::Autoscaler,
        "ipam" => Actor::Ipam,
        "sandbox" => Actor::Test,
        // The cluster's objects are applied as the administrator on both control planes
        // (`world::start`, `real_cluster::seed`).
        ADMINISTRATOR_USER => Actor::Administrator,
        other => Actor::Other(other.to_owned()),
    }
}

/// The writes of kube-sim's request log.
pub fn tally_kube_sim(records: &[RequestRecord]) -> Tally {
    let mut tally = Tally::new();
    for record in records
        .iter()
        .filter(|r| r.is_resource_request() && WRITE_VERBS.contains(&r.verb.as_str()))
    {
        let kind = WriteKind {
            actor: sim_actor(&record.user),
            verb: record.verb.clone(),
            resource: record.resource.clone(),
            subresource: record.subresource.clone(),
            code: record.status,
        };
        *tally.entry(kind).or_default() += 1;
    }
    tally
}

/// The fields of an `audit.k8s.io/v1` Event read here.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AuditEvent {
    stage: String,
    verb: String,
    user: AuditUser,
    #[serde(default)]
    impersonated_user: Option<AuditUser>,
    #[serde(default)]
    user_agent: String,
    #[serde(default)]
    object_ref: Option<AuditObject>,
    #[serde(default)]
    response_status: Option<AuditStatus>,
    /// When the answer was complete (RFC 3339, microseconds).
    #[serde(default)]
    stage_timestamp: String,
    /// The request's body, where the policy logs it (`real_cluster::start`: a Machine's status
    /// writes only).
    #[serde(default)]
    request_object: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
struct AuditUser {
    username: String,
}

#[derive(Debug, Deserialize)]
struct AuditObject {
    #[serde(default)]
    resource: String,
    #[serde(default)]
    subresource: String,
    #[serde(default)]
    name: String,
}

#[derive(Debug, Deserialize)]
struct AuditStatus {
    code: u16,
}

/// Why an audit log could not be read.
#[derive(Debug, thiserror::Error)]
#[error("audit log line {line}: {message}")]
pub struct AuditLogError {
    pub line: usize,
    pub message: String,
}

/// The real control plane's identities: the stand-ins act as `sandbox:<name>`
/// (`real_cluster::STAND_IN_USERS`), our controller as its ServiceAccount, kubelets as the
/// node-bootstrapper then themselves; the machine-api-operator's binaries and
/// kube-controller-manager share the administrator's certificate and are told apart by their
/// client-go user agent (`<binary>/<version> (<os>/<arch>) kubernetes/<commit>`).
fn real_actor(event: &AuditEvent) -> Actor {
    let user = event
        .impersonated_user
        .as_ref()
        .unwrap_or(&event.user)
        .username
        .as_str();
    let agent = event.user_agent.split('/').next().unwrap_or_default();
    match user {
        "system:serviceaccount:openshift-machine-api:nutanix-machine-controller" => {
            return Actor::Controller;
        }
        "system:serviceaccount:openshift-machine-config-operator:node-bootstrapper"
        | "sandbox:node-agent" => return Actor::Kubelet,
        "sandbox:approver" => return Actor::Approver,
        "sandbox:autoscaler" => return Actor::Autoscaler,
        "sandbox:ipam" => return Actor::Ipam,
        "sandbox:test" => return Actor::Test,
        "system:apiserver" => return Actor::ApiServer,
        _ if user.starts_with("system:node:") => return Actor::Kubelet,
        _ => {}
    }
    match agent {
        "machineset" => Actor::MachineSetController,
        GO_PROVIDER_PROGRAM => Actor::GoProvider,
        "nodelink-controller" => Actor::Nodelink,
        "machine-healthcheck" => Actor::MachineHealthCheck,
        "kube-controller-manager" => Actor::KubeControllerManager,
        _ if user == crate::real_cluster::ADMIN_USER => Actor::Administrator,
        _ => Actor::Other(user.to_owned()),
    }
}

/// One write of a kube-apiserver audit log: its kind, the object's name, when it was answered
/// and, where the policy logs it, its body.
#[derive(Clone, Debug, PartialEq)]
pub struct AuditWrite {
    pub kind: WriteKind,
    /// Empty for a create by `generateName` (the name is not in the request's path).
    pub name: String,
    pub answered: Option<Timestamp>,
    pub request_object: Option<serde_json::Value>,
}

/// The writes of a kube-apiserver audit log (JSON lines, one Event at `ResponseComplete` each),
/// in the log's order.
pub fn audit_writes(text: &str) -> Result<Vec<AuditWrite>, AuditLogError> {
    let mut writes = Vec::new();
    for (index, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let event: AuditEvent = serde_json::from_str(line).map_err(|e| AuditLogError {
            line: index + 1,
            message: e.to_string(),
        })?;
        if event.stage != "ResponseComplete" || !WRITE_VERBS.contains(&event.verb.as_str()) {
            continue;
        }
        let actor = real_actor(&event);
        let AuditEvent {
            verb,
            object_ref: Some(object),
            response_status,
            stage_timestamp,
            request_object,
            ..
        } = event
        else {
            continue;
        };
        writes.push(AuditWrite {
            kind: WriteKind {
                actor,
                verb,
                resource: object.resource,
                subresource: object.subresource,
                code: response_status.as_ref().map_or(0, |s| s.code),
            },
            name: object.name,
            answered: stage_timestamp.parse().ok(),
            request_object,
        });
    }
    Ok(writes)
}

/// The writes of a kube-apiserver audit log, tallied by kind.
pub fn tally_audit_log(text: &str) -> Result<Tally, AuditLogError> {
    let mut tally = Tally::new();
    for write in audit_writes(text)? {
        *tally.entry(write.kind).or_default() += 1;
    }
    Ok(tally)
}

/// A kind of write seen on one side only.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Difference {
    pub kind: WriteKind,
    /// Where it was seen.
    pub side: Side,
    /// How many times.
    pub count: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Side {
    KubeSim,
    Real,
}

/// The actors outside the comparison, which exist on one side only by design:
/// kube-controller-manager (kube-sim signs an approved CSR in its store, without a request, and
/// has no node lifecycle, service-account or RBAC aggregation controllers), the API server's own
/// bootstrap objects and the administrator's set-up (kube-sim writes its CRDs, Infrastructure and
/// Networks to its store directly), and machine-healthcheck (no stand-in: the MHC test runs on
/// the real control plane only).
pub const ONE_SIDED_ACTORS: [Actor; 4] = [
    Actor::KubeControllerManager,
    Actor::ApiServer,
    Actor::Administrator,
    Actor::MachineHealthCheck,
];

/// Whether `kind` is a lost race (409 Conflict) of an actor whose writes of that resource (and
/// subresource) succeeded on both sides: which writer loses a race depends on timing, so such a
/// conflict may be seen on one server in one run and not in the next. Both servers answer a stale
/// write 409 (kube-sim's README; `Error::is_conflict` was written for the real one's), so only
/// that the actor writes the resource is compared. Seen in CI: the controller's status patch lost
/// to nodelink on kube-sim only; and on the real control plane a kubelet's renewal of the Lease
/// the garbage collector had just deleted with its Node was answered 409 (a Lease may be created
/// by an update, so the missing object fails the UID precondition instead of answering 404), the
/// kubelet's creates of Leases succeeding on both sides.
fn lost_race_of_a_shared_writer(
    kind: &WriteKind,
    sim: &BTreeSet<WriteKind>,
    real: &BTreeSet<WriteKind>,
) -> bool {
    let succeeded = |tally: &BTreeSet<WriteKind>| {
        tally.iter().any(|other| {
            (200..300).contains(&other.code)
                && (&other.actor, &other.resource, &other.subresource)
                    == (&kind.actor, &kind.resource, &kind.subresource)
        })
    };
    kind.code == 409 && succeeded(sim) && succeeded(real)
}

/// The kinds of write seen on one side only, the actors of [`ONE_SIDED_ACTORS`] and the lost
/// races of writers whose writes succeeded on both sides left out.
pub fn compare(sim: &Tally, real: &Tally) -> Vec<Difference> {
    let kinds = |tally: &Tally| -> BTreeSet<WriteKind> {
        tally
            .keys()
            .filter(|k| !ONE_SIDED_ACTORS.contains(&k.actor))
            .cloned()
            .collect()
    };
    let (sim_kinds, real_kinds) = (kinds(sim), kinds(real));
    let mut differences = Vec::new();
    for (side, these, others, tally) in [
        (Side::KubeSim, &sim_kinds, &real_kinds, sim),
        (Side::Real, &real_kinds, &sim_kinds, real),
    ] {
        differences.extend(
            these
                .difference(others)
                .filter(|kind| !lost_race_of_a_shared_writer(kind, &sim_kinds, &real_kinds))
                .map(|kind| Difference {
                    kind: kind.clone(),
                    side,
                    count: tally.get(kind).copied().unwrap_or_default(),
                }),
        );
    }
    differences
}

/// Both tallies side by side (one line per kind of write), for a report.
pub fn render(sim: &Tally, real: &Tally) -> String {
    let kinds: BTreeSet<&WriteKind> = sim.keys().chain(real.keys()).collect();
    let mut out = format!("{:>8} {:>8}  write\n", "kube-sim", "real");
    for kind in kinds {
        let count = |tally: &Tally| tally.get(kind).map_or("-".to_owned(), u64::to_string);
        out.push_str(&format!("{:>8} {:>8}  {kind}\n", count(sim), count(real)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Recorded on the real control plane (`fixtures/README.md`).
    const AUDIT: &str = include_str!("../fixtures/kube-apiserver-1.34.2-audit.jsonl");

    fn kind(actor: Actor, verb: &str, resource: &str, subresource: &str, code: u16) -> WriteKind {
        WriteKind {
            actor,
            verb: verb.to_owned(),
            resource: resource.to_owned(),
            subresource: subresource.to_owned(),
            code,
        }
    }

    #[test]
    fn the_audit_log_names_each_writer_and_its_answer() {
        let tally = tally_audit_log(AUDIT).unwrap();
        let expected: Tally = [
            kind(
                Actor::Approver,
                "patch",
                "certificatesigningrequests",
                "approval",
                200,
            ),
            kind(Actor::Controller, "patch", "machines", "status", 409),
            kind(Actor::MachineSetController, "create", "machines", "", 201),
            kind(Actor::Kubelet, "create", "nodes", "", 201),
        ]
        .into_iter()
        .map(|k| (k, 1))
        .collect();
        // The read is no write.
        assert_eq!(tally, expected);
    }

    #[test]
    fn an_unreadable_audit_line_is_named() {
        let error = tally_audit_log("{\"stage\": 1}\n").unwrap_err();
        assert_eq!(error.line, 1);
    }

    fn record(user: &str, verb: &str, resource: &str, status: u16) -> RequestRecord {
        RequestRecord {
            verb: verb.to_owned(),
            method: String::new(),
            path: format!("/apis/machine.openshift.io/v1beta1/{resource}"),
            api_group: "machine.openshift.io".to_owned(),
            api_version: "v1beta1".to_owned(),
            resource: resource.to_owned(),
            subresource: String::new(),
            namespace: "openshift-machine-api".to_owned(),
            name: "m".to_owned(),
            user_agent: String::new(),
            user: user.to_owned(),
            status,
        }
    }

    #[test]
    fn only_kinds_seen_on_one_side_differ_and_one_sided_actors_are_left_out() {
        let sim = tally_kube_sim(&[
            record("machineset-controller", "create", "machines", 201),
            record("machineset-controller", "create", "machines", 201),
            record(CONTROLLER_USER, "patch", "machines", 200),
            record(CONTROLLER_USER, "get", "machines", 200),
        ]);
        let mut real = Tally::new();
        real.insert(
            kind(Actor::MachineSetController, "create", "machines", "", 201),
            5,
        );
        real.insert(kind(Actor::Controller, "patch", "machines", "", 409), 1);
        real.insert(
            kind(Actor::KubeControllerManager, "patch", "nodes", "", 200),
            3,
        );
        let differences = compare(&sim, &real);
        assert_eq!(
            differences,
            [
                Difference {
                    kind: kind(Actor::Controller, "patch", "machines", "", 200),
                    side: Side::KubeSim,
                    count: 1,
                },
                Difference {
                    kind: kind(Actor::Controller, "patch", "machines", "", 409),
                    side: Side::Real,
                    count: 1,
                },
            ]
        );
    }

    #[test]
    fn a_race_lost_on_one_side_only_is_no_difference_when_the_write_succeeded_on_both() {
        // Seen in CI: the controller's status patch lost a race to nodelink on kube-sim only.
        let mut sim = Tally::new();
        sim.insert(
            kind(Actor::Controller, "patch", "machines", "status", 200),
            40,
        );
        sim.insert(
            kind(Actor::Controller, "patch", "machines", "status", 409),
            2,
        );
        let mut real = Tally::new();
        real.insert(
            kind(Actor::Controller, "patch", "machines", "status", 200),
            41,
        );
        assert_eq!(compare(&sim, &real), []);
        // A conflict whose write never succeeded on the other side is still a difference.
        real.clear();
        real.insert(kind(Actor::Controller, "patch", "machines", "", 200), 1);
        assert_eq!(compare(&sim, &real).len(), 3);
    }

    #[test]
    fn a_lost_lease_renewal_is_no_difference_when_the_kubelet_writes_leases_on_both_sides() {
        // Seen in CI: on the real control plane the garbage collector deleted the Leases of
        // deleted Nodes, and two kubelet renewals of them were answered 409.
        let mut sim = Tally::new();
        sim.insert(kind(Actor::Kubelet, "create", "leases", "", 201), 6);
        let mut real = sim.clone();
        real.insert(kind(Actor::Kubelet, "update", "leases", "", 409), 2);
        assert_eq!(compare(&sim, &real), []);
        // A kubelet that never wrote a Lease on the other side: a difference.
        sim.clear();
        sim.insert(kind(Actor::Kubelet, "create", "nodes", "", 201), 6);
        real.insert(kind(Actor::Kubelet, "create", "nodes", "", 201), 6);
        assert_eq!(
            compare(&sim, &real),
            [
                Difference {
                    kind: kind(Actor::Kubelet, "create", "leases", "", 201),
                    side: Side::Real,
                    count: 6,
                },
                Difference {
                    kind: kind(Actor::Kubelet, "update", "leases", "", 409),
                    side: Side::Real,
                    count: 2,
                },
            ]
        );
    }
}
