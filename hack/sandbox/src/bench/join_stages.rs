//! Where each Machine's way to `Running` went on the real control plane, from the API server's
//! audit log (exact to the microsecond, where the world's snapshots see a Machine up to a second
//! late): when the provider wrote its first `InternalIP` (the body of its status write, which
//! `real_cluster::start`'s policy logs), when the kubelet registered the Node of the same name,
//! when nodelink wrote the Machine's `nodeRef` (its first status write of the Machine), and when
//! the provider wrote phase `Running`.
//!
//! The provider's part is the Machine's creation to its `InternalIP` (its Prism calls, the task,
//! the guest's boot) and the `nodeRef` to `Running`; between the two is the cluster's join: the
//! approver's two CSR approvals (both need the Machine's addresses: openshift/cluster-machine-
//! approver `pkg/controller/csr_check.go`), the kubelet's registration and nodelink's link, which
//! finds the Machine by the Node's `InternalIP` (openshift/machine-api-operator
//! `pkg/controller/nodelink/nodelink_controller.go`, `findMachineFromNodeByIP`).

use std::collections::HashMap;

use k8s_openapi::jiff::Timestamp;
use serde::Serialize;
use serde_json::Value;

use super::report::Spread;
use crate::writes::{Actor, AuditWrite};

/// One Machine's stages, seconds after the scale request.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct MachineJoin {
    pub name: String,
    /// `creationTimestamp` (whole seconds, rounded down).
    pub created: f64,
    /// The provider's first status write carrying an `InternalIP`.
    pub internal_ip: Option<f64>,
    /// The kubelet's create of the Node named as the Machine.
    pub node: Option<f64>,
    /// nodelink's first status write of the Machine (its `nodeRef`).
    pub node_ref: Option<f64>,
    /// The provider's first status write of phase `Running`.
    pub running: Option<f64>,
}

impl MachineJoin {
    /// The cluster's join: from the `InternalIP` to the `nodeRef`.
    fn join_seconds(&self) -> Option<f64> {
        Some(self.node_ref? - self.internal_ip?)
    }

    /// nodelink's part of the join: from the moment it could link the two (the Node registered
    /// and the Machine's `InternalIP` written, whichever came last: before the provider or a
    /// cloud controller manager sets the Node's providerID it matches them by that IP) to its
    /// `nodeRef`. nodelink runs one worker (controller-runtime's default; it passes no
    /// `MaxConcurrentReconciles`), so a burst of Nodes waits in its queue here.
    fn link_seconds(&self) -> Option<f64> {
        Some(self.node_ref? - self.node?.max(self.internal_ip?))
    }
}

/// The stages over the Machines that went through all of them.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct JoinStages {
    /// Machines with every stage seen.
    pub machines: usize,
    /// Created → `InternalIP` written (the provider, its Prism calls, the task, the boot).
    pub to_internal_ip: Spread,
    /// `InternalIP` → `nodeRef` (the cluster: approvals, the kubelet, nodelink).
    pub join: Spread,
    /// Within it, the Node and the `InternalIP` both there → `nodeRef` (nodelink alone).
    pub link: Spread,
    /// `nodeRef` → `Running` (the provider).
    pub to_running: Spread,
    /// The last Machine to be `Running`, stage by stage.
    pub last: Option<MachineJoin>,
    /// When the last `InternalIP` was written, seconds after the scale request: the end of the
    /// part the lower bound counts (the calls, the task, the boot to an address).
    pub last_internal_ip: Option<f64>,
}

impl JoinStages {
    /// The fastest join seen: no Machine was `Running` sooner than this after its `InternalIP`,
    /// so the last one cannot be either.
    pub fn fastest_join(&self) -> f64 {
        self.join.min
    }
}

fn has_internal_ip(body: &Value) -> bool {
    body["status"]["addresses"]
        .as_array()
        .is_some_and(|addresses| addresses.iter().any(|a| a["type"] == "InternalIP"))
}

fn sets_running(body: &Value) -> bool {
    body["status"]["phase"] == "Running"
}

/// Each Machine of `created` (name → `creationTimestamp`) through its stages, from `writes` (the
/// audit log's, in order) by `provider` (the provider's actor), timed from `scaled_at`.
pub fn machine_joins(
    writes: &[AuditWrite],
    provider: &Actor,
    created: &HashMap<String, Timestamp>,
    scaled_at: Timestamp,
) -> Vec<MachineJoin> {
    let mut joins: HashMap<&str, MachineJoin> = created
        .iter()
        .map(|(name, at)| {
            let join = MachineJoin {
                name: name.clone(),
                created: at.duration_since(scaled_at).as_secs_f64(),
                ..MachineJoin::default()
            };
            (name.as_str(), join)
        })
        .collect();
    let first = |slot: &mut Option<f64>, at: f64| {
        slot.get_or_insert(at);
    };
    for write in writes {
        let (Some(answered), true) = (write.answered, (200..300).contains(&write.kind.code)) else {
            continue;
        };
        let Some(join) = joins.get_mut(write.name.as_str()) else {
            continue;
        };
        let at = answered.duration_since(scaled_at).as_secs_f64();
        let kind = &write.kind;
        let status_write = kind.resource == "machines" && kind.subresource == "status";
        let body = write.request_object.as_ref().unwrap_or(&Value::Null);
        if status_write && kind.actor == *provider {
            if has_internal_ip(body) {
                first(&mut join.internal_ip, at);
            }
            if sets_running(body) {
                first(&mut join.running, at);
            }
        } else if status_write && kind.actor == Actor::Nodelink {
            first(&mut join.node_ref, at);
        } else if kind.resource == "nodes" && kind.verb == "create" && kind.actor == Actor::Kubelet
        {
            first(&mut join.node, at);
        }
    }
    let mut joins: Vec<MachineJoin> = joins.into_values().collect();
    joins.sort_by(|a, b| a.name.cmp(&b.name));
    joins
}

/// The stages' spread over `joins`, those with every stage seen.
pub fn summarize(joins: &[MachineJoin]) -> JoinStages {
    let complete: Vec<&MachineJoin> = joins
        .iter()
        .filter(|j| j.internal_ip.is_some() && j.node_ref.is_some() && j.running.is_some())
        .collect();
    let spread = |stage: fn(&MachineJoin) -> Option<f64>| {
        Spread::of(complete.iter().filter_map(|j| stage(j)).collect())
    };
    JoinStages {
        machines: complete.len(),
        to_internal_ip: spread(|j| Some(j.internal_ip? - j.created)),
        join: spread(MachineJoin::join_seconds),
        link: spread(MachineJoin::link_seconds),
        to_running: spread(|j| Some(j.running? - j.node_ref?)),
        last_internal_ip: complete
            .iter()
            .filter_map(|j| j.internal_ip)
            .max_by(f64::total_cmp),
        last: complete
            .iter()
            .max_by(|a, b| {
                a.running
                    .unwrap_or_default()
                    .total_cmp(&b.running.unwrap_or_default())
            })
            .map(|j| (*j).clone()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::writes::WriteKind;

    fn write(
        actor: Actor,
        verb: &str,
        resource: &str,
        name: &str,
        at: f64,
        body: Value,
    ) -> AuditWrite {
        let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
        let start: Timestamp = "2026-12-06T10:00:00Z".parse().unwrap();
        AuditWrite {
            kind: WriteKind {
                actor,
                verb: verb.to_owned(),
                resource: resource.to_owned(),
                subresource: subresource.to_owned(),
                code: 200,
            },
            name: name.to_owned(),
            answered: Some(start + std::time::Duration::from_secs_f64(at)),
            request_object: Some(body).filter(|b| !b.is_null()),
        }
    }

    #[test]
    fn each_stage_is_the_first_write_that_reaches_it() {
        let scaled_at: Timestamp = "2026-12-06T10:00:00Z".parse().unwrap();
        let created = HashMap::from([
            ("m-1".to_owned(), scaled_at),
            ("m-2".to_owned(), "2026-12-06T10:00:01Z".parse().unwrap()),
        ]);
        let ip = json!({"status": {"addresses": [{"type": "InternalDNS", "address": "m-1"},
                                                 {"type": "InternalIP", "address": "10.0.0.1"}]}});
        let writes = [
            // The record and Provisioned carry no InternalIP yet.
            write(
                Actor::Controller,
                "patch",
                "machines/status",
                "m-1",
                0.5,
                json!({"status": {"phase": "Provisioning"}}),
            ),
            write(
                Actor::Controller,
                "patch",
                "machines/status",
                "m-1",
                2.0,
                json!({"status": {"addresses": [{"type": "InternalDNS", "address": "m-1"}]}}),
            ),
            // The kubelet registers before the provider writes the address: nodelink waits.
            write(Actor::Kubelet, "create", "nodes", "m-1", 2.5, Value::Null),
            write(
                Actor::Controller,
                "patch",
                "machines/status",
                "m-1",
                3.0,
                ip.clone(),
            ),
            write(
                Actor::Nodelink,
                "patch",
                "machines/status",
                "m-1",
                4.0,
                Value::Null,
            ),
            write(
                Actor::Controller,
                "patch",
                "machines/status",
                "m-1",
                4.2,
                json!({"status": {"phase": "Running"}}),
            ),
            // A later nodelink write (readiness changed) is not the link.
            write(
                Actor::Nodelink,
                "patch",
                "machines/status",
                "m-1",
                9.0,
                Value::Null,
            ),
            // Another provider's writes and unknown Machines are not this one's.
            write(
                Actor::GoProvider,
                "update",
                "machines/status",
                "m-2",
                1.5,
                ip.clone(),
            ),
            write(
                Actor::Controller,
                "patch",
                "machines/status",
                "other",
                1.0,
                ip,
            ),
        ];
        let joins = machine_joins(&writes, &Actor::Controller, &created, scaled_at);
        assert_eq!(
            joins,
            [
                MachineJoin {
                    name: "m-1".into(),
                    created: 0.0,
                    internal_ip: Some(3.0),
                    node: Some(2.5),
                    node_ref: Some(4.0),
                    running: Some(4.2),
                },
                MachineJoin {
                    name: "m-2".into(),
                    created: 1.0,
                    ..MachineJoin::default()
                },
            ]
        );
        let stages = summarize(&joins);
        assert_eq!(stages.machines, 1, "m-2 never reached its InternalIP");
        assert_eq!(stages.to_internal_ip.max, 3.0);
        assert_eq!(stages.fastest_join(), 1.0);
        assert_eq!(
            stages.link.max, 1.0,
            "nodelink could link them once the address came, at 3.0"
        );
        assert!((stages.to_running.max - 0.2).abs() < 1e-6);
        assert_eq!(stages.last.unwrap().name, "m-1");
        assert_eq!(stages.last_internal_ip, Some(3.0));
    }

    /// Recorded on the real control plane (`fixtures/README.md`).
    const AUDIT: &str =
        include_str!("../../fixtures/kube-apiserver-1.34.2-audit-machine-join.jsonl");

    #[test]
    fn the_real_audit_log_gives_each_stage_of_a_machine() {
        let writes = crate::writes::audit_writes(AUDIT).unwrap();
        let scaled_at: Timestamp = "2026-12-06T15:09:54Z".parse().unwrap();
        let created = HashMap::from([("sandbox-worker-zzrkb".to_owned(), scaled_at)]);
        let joins = machine_joins(&writes, &Actor::Controller, &created, scaled_at);
        let at = |t: Option<f64>| t.map(|t| (t * 1000.0).round() / 1000.0);
        let join = &joins[0];
        assert_eq!(at(join.internal_ip), Some(5.854), "{join:?}");
        assert_eq!(at(join.node), Some(5.079), "{join:?}");
        assert_eq!(at(join.node_ref), Some(6.359), "{join:?}");
        assert_eq!(at(join.running), Some(7.946), "{join:?}");
        assert_eq!(
            at(join.link_seconds()),
            Some(0.505),
            "nodelink linked them half a second after the address: {join:?}"
        );
    }

    #[test]
    fn a_refused_write_reaches_no_stage() {
        let scaled_at: Timestamp = "2026-12-06T10:00:00Z".parse().unwrap();
        let created = HashMap::from([("m-1".to_owned(), scaled_at)]);
        let mut refused = write(
            Actor::Controller,
            "patch",
            "machines/status",
            "m-1",
            1.0,
            json!({"status": {"phase": "Running"}}),
        );
        refused.kind.code = 409;
        let joins = machine_joins(&[refused], &Actor::Controller, &created, scaled_at);
        assert_eq!(joins[0].running, None);
    }
}
