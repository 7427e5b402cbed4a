//! The admin side: a Rust handle for in-process tests and the same operations over HTTP under `/mock/`
//! (no authentication, never counted, never faulted).

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::app::{App, Shared};
use crate::behaviour::{CloneBehaviour, DeployTaskShape, GuestBehaviour, Timings};
use crate::faults::{Counter, FaultRule, InstalledRule, RateLimit, RequestRecord, TimedRequest};
use crate::seed::GuestOs;
use crate::store::Vm;
use crate::store::record::GuestCustomization;

/// One VM as the admin side sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VmSummary {
    /// VM UUID.
    pub uuid: String,
    /// VM name.
    pub name: String,
    /// v3 `status.state`: PENDING, COMPLETE, ERROR or DELETE_PENDING.
    pub state: String,
    /// Actual power state: ON or OFF.
    pub power_state: String,
    /// Whether `POST /vms/list` shows it (its create task has ended).
    pub listed: bool,
    /// Current `metadata.spec_version`.
    pub spec_version: u64,
    /// Addresses the guest reports now, all NICs in order.
    pub addresses: Vec<String>,
    /// Guest OS family.
    pub os: GuestOs,
    /// Prism Element UUID.
    pub cluster_uuid: String,
}

/// A volume group as the admin side sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeGroupSummary {
    pub ext_id: String,
    pub name: String,
    /// The VMs it is attached to.
    pub attached_vms: Vec<String>,
}

/// Body of `POST /mock/volume-groups`.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct NewVolumeGroup {
    name: String,
    #[serde(default)]
    attached_vms: Vec<String>,
}

/// Handle on a running mock's state, usable from Rust (tests) and behind the `/mock/` HTTP API.
#[derive(Clone, Debug)]
pub struct Admin {
    app: App,
}

impl Admin {
    pub(crate) fn new(app: Arc<Shared>) -> Self {
        Self { app }
    }

    /// Counters of Prism calls by method, route template and status.
    pub fn counters(&self) -> Vec<Counter> {
        self.app.lock().faults.counters()
    }

    /// Sum of the counters of one method and route template, all statuses.
    pub fn count(&self, method: &str, endpoint: &str) -> u64 {
        self.counters()
            .iter()
            .filter(|c| c.method == method && c.endpoint == endpoint)
            .map(|c| c.count)
            .sum()
    }

    /// Clears the counters (and the request log).
    pub fn reset_counters(&self) {
        let mut store = self.app.lock();
        store.faults.counters.clear();
        store.faults.log.clear();
    }

    /// The request log from entry `from` on (entries are numbered from 0 since the last reset; at
    /// most the latest million are kept): what each Prism request was, when it was answered, and
    /// the VM it concerned where the mock can tell.
    pub fn requests_since(&self, from: usize) -> Vec<RequestRecord> {
        let store = self.app.lock();
        store
            .faults
            .log
            .iter()
            .skip(from)
            .map(|request| request.record.clone())
            .collect()
    }

    /// [`Admin::requests_since`] with when each request arrived and was answered, and its
    /// `NTNX-Request-Id`: for in-process tests that order the mock's requests against another
    /// server's.
    pub fn timed_requests_since(&self, from: usize) -> Vec<TimedRequest> {
        let store = self.app.lock();
        store.faults.log.iter().skip(from).cloned().collect()
    }

    /// Entries in the request log (a position for [`Admin::requests_since`]).
    pub fn request_count(&self) -> usize {
        self.app.lock().faults.log.len()
    }

    /// Milliseconds since the mock started (the clock of [`RequestRecord::at_ms`]).
    pub fn elapsed_ms(&self) -> u64 {
        self.app.lock().elapsed_ms(Instant::now())
    }

    /// Installs a fault rule; returns its id.
    pub fn add_fault(&self, rule: FaultRule) -> u64 {
        self.app.lock().faults.add(rule)
    }

    /// Installed rules with how often each fired.
    pub fn faults(&self) -> Vec<InstalledRule> {
        self.app.lock().faults.rules.clone()
    }

    /// Removes one rule; false if no rule has that id.
    pub fn remove_fault(&self, id: u64) -> bool {
        self.app.lock().faults.remove(id)
    }

    /// Removes all rules.
    pub fn clear_faults(&self) {
        self.app.lock().faults.rules.clear();
    }

    /// Sets (or with `None` removes) the server-side rate limit.
    pub fn set_rate_limit(&self, limit: Option<RateLimit>) {
        self.app.lock().faults.set_rate_limit(limit);
    }

    /// Ends every session; returns how many there were.
    pub fn expire_sessions(&self) -> usize {
        self.app.lock().expire_sessions()
    }

    /// Current timings.
    pub fn timings(&self) -> Timings {
        self.app.lock().timings.clone()
    }

    /// Sets the timings of work started from now on.
    pub fn set_timings(&self, timings: Timings) {
        self.app.lock().timings = timings;
    }

    /// How long after its create task ends a VM appears in `POST /vms/list` (zero by default).
    pub fn list_lag(&self) -> Duration {
        self.app.lock().list_lag
    }

    /// Sets the list lag of creates that end from now on: a VM is missing from lists for this
    /// long after its create task ended, as with an eventually consistent Prism Central.
    pub fn set_list_lag(&self, lag: Duration) {
        self.app.lock().list_lag = lag;
    }

    /// How long after a VM's create or update task ends its GET still shows the previous state and power
    /// state (zero by default).
    pub fn read_lag(&self) -> Duration {
        self.app.lock().read_lag
    }

    /// Sets the read lag of tasks that end from now on: for this long after a VM's create or update task
    /// ended, `GET /vms/{uuid}` answers the `status.state` and power state the VM had before.
    pub fn set_read_lag(&self, lag: Duration) {
        self.app.lock().read_lag = lag;
    }

    /// Current guest misbehaviours.
    pub fn guest_behaviour(&self) -> GuestBehaviour {
        self.app.lock().guest.clone()
    }

    /// Sets the guest misbehaviours of guests booting from now on.
    pub fn set_guest_behaviour(&self, behaviour: GuestBehaviour) {
        self.app.lock().guest = behaviour;
    }

    /// How clones behave where real Prism's behaviour is not established (all off by default).
    pub fn clone_behaviour(&self) -> CloneBehaviour {
        self.app.lock().clone_behaviour.clone()
    }

    /// Sets how clones requested from now on behave.
    pub fn set_clone_behaviour(&self, behaviour: CloneBehaviour) {
        self.app.lock().clone_behaviour = behaviour;
    }

    /// Where deploy tasks name their VMs (subtasks by default).
    pub fn deploy_task_shape(&self) -> DeployTaskShape {
        self.app.lock().deploy_task_shape
    }

    /// Sets where deploy tasks created from now on name their VMs.
    pub fn set_deploy_task_shape(&self, shape: DeployTaskShape) {
        self.app.lock().deploy_task_shape = shape;
    }

    /// All VMs, listed or not, in creation order; foreign VMs (a seed's `foreign_vms`) only once a
    /// request changed one.
    pub fn vms(&self) -> Vec<VmSummary> {
        let store = self.app.lock();
        store
            .vm_order
            .values()
            .filter_map(|u| store.vms.get(u))
            .map(summary)
            .collect()
    }

    /// One VM's summary (cheaper than [`Admin::vms`] for a caller interested in one VM); none for a
    /// foreign VM no request changed, as in [`Admin::vms`].
    pub fn vm_summary(&self, uuid: &str) -> Option<VmSummary> {
        self.app.lock().vms.get(uuid).map(summary)
    }

    /// One VM as `GET /vms/{uuid}` would answer it (without a read lag); none for a foreign VM no
    /// request changed, as in [`Admin::vms`].
    pub fn vm(&self, uuid: &str) -> Option<Value> {
        let store = self.app.lock();
        store.vms.get(uuid).map(|vm| store.vm_json(vm))
    }

    /// What reached the guest: decoded user data / meta data / unattend.xml.
    pub fn guest_customization(&self, uuid: &str) -> Option<GuestCustomization> {
        self.app
            .lock()
            .vms
            .get(uuid)
            .and_then(|vm| vm.guest.clone())
    }

    /// Creates a volume group attached to each of `vms`, as Nutanix CSI 3.x does for a PersistentVolume of a pod on
    /// that VM's Node (hypervisor-attached): its extId, `None` if a VM is unknown.
    pub fn create_volume_group(&self, name: &str, vms: &[String]) -> Option<String> {
        self.app.lock().create_volume_group(name, vms).ok()
    }

    /// One volume group, with the VMs it is attached to; `None` if there is none with that extId.
    pub fn volume_group(&self, ext_id: &str) -> Option<VolumeGroupSummary> {
        let store = self.app.lock();
        store
            .volume_groups
            .get(ext_id)
            .map(|group| VolumeGroupSummary {
                ext_id: group.ext_id.clone(),
                name: group.name.clone(),
                attached_vms: group.vm_attachments.iter().map(|a| a.vm.clone()).collect(),
            })
    }

    /// Deletes a VM behind the client's back (no task); false if unknown.
    pub fn delete_vm_out_of_band(&self, uuid: &str) -> bool {
        self.app.lock().remove_vm(uuid)
    }

    /// Powers a VM off behind the client's back (spec and spec_version change); false if unknown.
    pub fn power_off_out_of_band(&self, uuid: &str) -> bool {
        self.app.lock().power_off_out_of_band(uuid, Instant::now())
    }

    /// Changes a VM through another API namespace behind the v3 client's back (`entity_version` moves,
    /// `spec_version` does not); false if unknown.
    pub fn edit_elsewhere(&self, uuid: &str) -> bool {
        self.app.lock().edit_elsewhere(uuid, Instant::now())
    }

    /// Hands every free address of the named subnet's IP pool to holders outside the store
    /// (other tenants' VMs, which take pool addresses as the cluster's do: a real subnet's
    /// `ip_usage_stats` counts them, prism-go-client `v3/mocks/TestOperations_GetSubnet.yaml`),
    /// so that the pool is exhausted: how many were taken, `None` for an unknown subnet or one Prism does not
    /// manage (no pool).
    pub fn take_free_pool_addresses(&self, subnet_name: &str) -> Option<usize> {
        let mut store = self.app.lock();
        let uuid = store.subnets.uuid_by_name(subnet_name)?;
        let pool = store.pools.get_mut(&uuid)?;
        let mut taken = 0;
        while pool.allocate().is_some() {
            taken += 1;
        }
        Some(taken)
    }

    /// Addresses in use in a subnet's pool, for tests on address reuse.
    pub fn subnet_addresses_in_use(&self, subnet_uuid: &str) -> Vec<Ipv4Addr> {
        let store = self.app.lock();
        let mut addresses: Vec<Ipv4Addr> = store
            .vms
            .values()
            .flat_map(|vm| vm.nics.iter())
            .filter(|nic| nic.subnet_uuid == subnet_uuid)
            .filter_map(|nic| nic.ip.map(Ipv4Addr::from))
            .collect();
        addresses.sort();
        addresses
    }
}

fn summary(vm: &Vm) -> VmSummary {
    VmSummary {
        uuid: vm.uuid.clone(),
        name: vm.name().to_owned(),
        state: vm.state().to_owned(),
        power_state: vm.power_state().to_owned(),
        listed: vm.listed,
        spec_version: vm.spec_version,
        addresses: vm
            .reported_addresses()
            .into_iter()
            .flatten()
            .map(|(ip, _)| ip)
            .collect(),
        os: vm.os,
        cluster_uuid: vm.cluster_uuid().to_owned(),
    }
}

#[derive(Deserialize)]
struct FromQuery {
    #[serde(default)]
    from: usize,
}

fn admin(app: &App) -> Admin {
    Admin::new(app.clone())
}

fn not_found(what: &str) -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(json!({"error": format!("{what} not found")})),
    )
        .into_response()
}

pub(crate) fn routes() -> Router<App> {
    Router::new()
        .route("/health", get(|| async { "ok" }))
        .route(
            "/counters",
            get(|State(app): State<App>| async move { Json(json!({"counters": admin(&app).counters()})) }).delete(
                |State(app): State<App>| async move {
                    admin(&app).reset_counters();
                    StatusCode::NO_CONTENT
                },
            ),
        )
        .route(
            "/requests",
            get(|State(app): State<App>, Query(query): Query<FromQuery>| async move {
                Json(json!({"requests": admin(&app).requests_since(query.from)}))
            }),
        )
        .route(
            "/faults",
            get(|State(app): State<App>| async move { Json(json!({"rules": admin(&app).faults()})) })
                .post(|State(app): State<App>, Json(rule): Json<FaultRule>| async move {
                    (StatusCode::CREATED, Json(json!({"id": admin(&app).add_fault(rule)})))
                })
                .delete(|State(app): State<App>| async move {
                    admin(&app).clear_faults();
                    StatusCode::NO_CONTENT
                }),
        )
        .route(
            "/faults/{id}",
            axum::routing::delete(|State(app): State<App>, Path(id): Path<u64>| async move {
                if admin(&app).remove_fault(id) { StatusCode::NO_CONTENT.into_response() } else { not_found("fault rule") }
            }),
        )
        .route(
            "/rate-limit",
            axum::routing::put(|State(app): State<App>, Json(limit): Json<RateLimit>| async move {
                admin(&app).set_rate_limit(Some(limit));
                StatusCode::NO_CONTENT
            })
            .delete(|State(app): State<App>| async move {
                admin(&app).set_rate_limit(None);
                StatusCode::NO_CONTENT
            }),
        )
        .route(
            "/sessions/expire",
            post(|State(app): State<App>| async move { Json(json!({"expired": admin(&app).expire_sessions()})) }),
        )
        .route(
            "/timings",
            get(|State(app): State<App>| async move { Json(admin(&app).timings()) }).put(
                |State(app): State<App>, Json(timings): Json<Timings>| async move {
                    admin(&app).set_timings(timings);
                    StatusCode::NO_CONTENT
                },
            ),
        )
        .route(
            "/guest-behaviour",
            get(|State(app): State<App>| async move { Json(admin(&app).guest_behaviour()) }).put(
                |State(app): State<App>, Json(behaviour): Json<GuestBehaviour>| async move {
                    admin(&app).set_guest_behaviour(behaviour);
                    StatusCode::NO_CONTENT
                },
            ),
        )
        .route(
            "/clone-behaviour",
            get(|State(app): State<App>| async move { Json(admin(&app).clone_behaviour()) }).put(
                |State(app): State<App>, Json(behaviour): Json<CloneBehaviour>| async move {
                    admin(&app).set_clone_behaviour(behaviour);
                    StatusCode::NO_CONTENT
                },
            ),
        )
        .route("/vms", get(|State(app): State<App>| async move { Json(json!({"vms": admin(&app).vms()})) }))
        .route(
            "/vms/{uuid}",
            get(|State(app): State<App>, Path(uuid): Path<String>| async move {
                match admin(&app).vm(&uuid) {
                    Some(vm) => Json(vm).into_response(),
                    None => not_found("VM"),
                }
            }),
        )
        .route(
            "/vms/{uuid}/guest-customization",
            get(|State(app): State<App>, Path(uuid): Path<String>| async move {
                match admin(&app).guest_customization(&uuid) {
                    Some(gc) => Json(gc).into_response(),
                    None => not_found("VM or guest customization"),
                }
            }),
        )
        .route(
            "/vms/{uuid}/delete",
            post(|State(app): State<App>, Path(uuid): Path<String>| async move {
                if admin(&app).delete_vm_out_of_band(&uuid) { StatusCode::NO_CONTENT.into_response() } else { not_found("VM") }
            }),
        )
        .route(
            "/volume-groups",
            post(|State(app): State<App>, Json(group): Json<NewVolumeGroup>| async move {
                match admin(&app).create_volume_group(&group.name, &group.attached_vms) {
                    Some(ext_id) => (StatusCode::CREATED, Json(json!({"extId": ext_id}))).into_response(),
                    None => not_found("VM"),
                }
            }),
        )
        .route(
            "/volume-groups/{ext_id}",
            get(|State(app): State<App>, Path(ext_id): Path<String>| async move {
                match admin(&app).volume_group(&ext_id) {
                    Some(group) => Json(group).into_response(),
                    None => not_found("volume group"),
                }
            }),
        )
        .route(
            "/vms/{uuid}/power-off",
            post(|State(app): State<App>, Path(uuid): Path<String>| async move {
                if admin(&app).power_off_out_of_band(&uuid) { StatusCode::NO_CONTENT.into_response() } else { not_found("VM") }
            }),
        )
}
