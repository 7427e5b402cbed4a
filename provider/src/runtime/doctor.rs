//! `nutanix-machine-controller doctor`: reads the cluster (with the administrator's kubeconfig)
//! and its Prism Central, and prints what will keep a Windows (or any) MachineSet from working,
//! each finding with its fix. The reads are here; the rules are [`crate::plan::doctor`].

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::{Client, ResourceExt};
use prism_client::v3::Subnet;
use serde_json::Value;

use super::cli::{DoctorArgs, parse_duration};
use super::clients::{actuator_settings, kube_config};
use super::kube_client;
use super::validate::PrismUnusable;
use crate::actuator::credentials::{CREDENTIALS_KEY, PrismCredentials};
use crate::actuator::infrastructure::{parse_infrastructure, prism_endpoint};
use crate::actuator::{Actuator, Connection};
use crate::api::IP_POOL_ANNOTATION;
use crate::api::MachineSet;
use crate::controller::prepare::{USER_DATA_KEY, random_admin_password, resolve_and_plan};
use crate::metrics::Metrics;
use crate::plan::doctor::{
    CLOUD_PRIVATE_KEY_KEY, CLOUD_PRIVATE_KEY_SECRET, Check, DEFAULT_NODE_STARTUP_TIMEOUT, Facts,
    Finding, HealthCheckFacts, MachineSetFacts, PrismReach, Read, Report, SecretShape, Severity,
    SubnetFacts, SubnetUsage, WINDOWS_USER_DATA_SECRET, WMCO_NAMESPACE, examine,
};
use crate::plan::machine::ipam::{
    GuestAddressing, PoolRef, StaticAddressError, check_nic_count, guest_addressing_of,
    machine_ip_pools,
};
use crate::plan::vm::EntityRef;
use crate::plan::vm::resolve::FailureDomain;
use crate::plan::vm::secret::UserData;
use crate::plan::vm::spec::ParsedSpec;
use crate::plan::vm::validate::UnreadUserData;
use crate::render::preview_machine;

/// Exit code when a finding is an error (as `validate`'s invalid Machine).
const EXIT_FINDINGS: u8 = 2;

/// What [`gather`] needs besides its clients: the command's flags, or the controller's.
#[derive(Clone, Debug)]
pub struct GatherSettings {
    pub namespace: String,
    /// `--prism-endpoint`, over `Infrastructure/cluster`.
    pub prism_endpoint: Option<String>,
    pub windows_join_timeout: Duration,
    /// Whether to look at WMCO's `cloud-private-key` Secret: the command does, as the
    /// administrator; the controller does not (its ServiceAccount may not read a private key
    /// it has no use for; the key's absence shows anyway as a missing `windows-user-data`,
    /// which WMCO makes from it).
    pub read_cloud_private_key: bool,
}

impl DoctorArgs {
    fn settings(&self) -> GatherSettings {
        GatherSettings {
            namespace: self.namespace.clone(),
            prism_endpoint: self.prism.prism_endpoint.clone(),
            windows_join_timeout: self.windows_join_timeout,
            read_cloud_private_key: true,
        }
    }
}

/// Runs `doctor`: 0 with no error finding, 2 with one, 1 when the cluster cannot be read at all.
pub async fn doctor(args: DoctorArgs) -> ExitCode {
    let client = match kube_config(args.kubeconfig.as_deref()).await {
        Ok(config) => match kube_client::client(config, kube_client::DEFAULT_REQUEST_TIMEOUT) {
            Ok(client) => client,
            Err(error) => {
                eprintln!("error: cannot make a Kubernetes client: {error}");
                return ExitCode::FAILURE;
            }
        },
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::FAILURE;
        }
    };
    let actuator = Actuator::new(actuator_settings(&args.prism), None);
    let facts = gather(&client, &actuator, &args.settings()).await;
    let report = examine(&facts);
    if args.output == "json" {
        match serde_json::to_string_pretty(&report) {
            Ok(text) => println!("{text}"),
            Err(error) => {
                eprintln!("error: cannot write the report as JSON: {error}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        print!("{}", table(&report));
    }
    if report.has_errors() {
        ExitCode::from(EXIT_FINDINGS)
    } else {
        ExitCode::SUCCESS
    }
}

/// Reads everything the rules look at. Nothing read is printed: Secrets only as whether they
/// hold their key, user data only into the plan (whose errors never quote it).
pub async fn gather(client: &Client, actuator: &Actuator, settings: &GatherSettings) -> Facts {
    let namespace = settings.namespace.as_str();
    let network_operator = get_dynamic(
        client,
        ("operator.openshift.io", "v1", "Network", "networks"),
        None,
        "cluster",
    )
    .await;
    let cluster_version = match get_dynamic(
        client,
        (
            "config.openshift.io",
            "v1",
            "ClusterVersion",
            "clusterversions",
        ),
        None,
        "version",
    )
    .await
    {
        Read::Found(object) => object
            .pointer("/status/desired/version")
            .and_then(Value::as_str)
            .map_or(Read::Absent, |v| Read::Found(v.to_owned())),
        Read::Absent => Read::Absent,
        Read::Unreadable(why) => Read::Unreadable(why),
    };
    let wmco_csvs = match list_dynamic(
        client,
        (
            "operators.coreos.com",
            "v1alpha1",
            "ClusterServiceVersion",
            "clusterserviceversions",
        ),
        WMCO_NAMESPACE,
    )
    .await
    {
        Read::Found(csvs) => Read::Found(
            csvs.iter()
                .map(|csv| {
                    let text = |pointer: &str| {
                        csv.pointer(pointer)
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned()
                    };
                    (
                        text("/metadata/name"),
                        text("/spec/version"),
                        text("/status/phase"),
                    )
                })
                .collect(),
        ),
        Read::Absent => Read::Absent,
        Read::Unreadable(why) => Read::Unreadable(why),
    };
    let windows_user_data =
        secret_shape(client, namespace, WINDOWS_USER_DATA_SECRET, USER_DATA_KEY).await;
    let cloud_private_key = if settings.read_cloud_private_key {
        secret_shape(
            client,
            WMCO_NAMESPACE,
            CLOUD_PRIVATE_KEY_SECRET,
            CLOUD_PRIVATE_KEY_KEY,
        )
        .await
    } else {
        Read::Unreadable(
            "the controller does not read WMCO's private key: run `doctor` as an administrator"
                .to_owned(),
        )
    };
    let health_checks = match list_dynamic(
        client,
        (
            "machine.openshift.io",
            "v1beta1",
            "MachineHealthCheck",
            "machinehealthchecks",
        ),
        namespace,
    )
    .await
    {
        Read::Found(checks) => Read::Found(checks.iter().map(health_check).collect()),
        Read::Absent => Read::Absent,
        Read::Unreadable(why) => Read::Unreadable(why),
    };

    let sets = match Api::<MachineSet>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
    {
        Ok(list) => Ok(list.items),
        Err(error) => Err(unreadable("MachineSets", namespace, &error)),
    };
    let (prism, machine_sets, subnets) = match sets {
        Ok(sets) => prism_facts(client, actuator, settings, sets).await,
        Err(why) => (
            PrismReach::NotTried(why.clone()),
            Read::Unreadable(why),
            Vec::new(),
        ),
    };
    Facts {
        prism,
        network_operator,
        cluster_version,
        wmco_csvs,
        windows_user_data,
        cloud_private_key,
        machine_sets,
        subnets,
        health_checks,
        windows_join_timeout: settings.windows_join_timeout,
    }
}

type Gvk<'a> = (&'a str, &'a str, &'a str, &'a str);

fn api_resource((group, version, kind, plural): Gvk) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// Why a read failed, for a skipped check. A 404 means the kind or the object is absent and is
/// not used here.
fn unreadable(what: &str, namespace: &str, error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) if status.code == 403 => format!(
            "{what} in {namespace} cannot be read with this kubeconfig (forbidden): run doctor \
             as a cluster administrator"
        ),
        other => format!("{what} in {namespace} cannot be read: {other}"),
    }
}

fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

async fn get_dynamic(
    client: &Client,
    gvk: Gvk<'_>,
    namespace: Option<&str>,
    name: &str,
) -> Read<Value> {
    let resource = api_resource(gvk);
    let api: Api<DynamicObject> = match namespace {
        Some(namespace) => Api::namespaced_with(client.clone(), namespace, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    match api.get(name).await {
        Ok(object) => match serde_json::to_value(object) {
            Ok(value) => Read::Found(value),
            Err(error) => Read::Unreadable(format!("{}/{name}: {error}", gvk.2)),
        },
        Err(error) if is_not_found(&error) => Read::Absent,
        Err(error) => Read::Unreadable(unreadable(
            &format!("{}/{name}", gvk.2),
            namespace.unwrap_or("the cluster"),
            &error,
        )),
    }
}

async fn list_dynamic(client: &Client, gvk: Gvk<'_>, namespace: &str) -> Read<Vec<Value>> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &api_resource(gvk));
    match api.list(&ListParams::default()).await {
        Ok(list) => Read::Found(
            list.items
                .into_iter()
                .filter_map(|object| serde_json::to_value(object).ok())
                .collect(),
        ),
        // The kind is not served: its operator is not installed.
        Err(error) if is_not_found(&error) => Read::Absent,
        Err(error) => Read::Unreadable(unreadable(gvk.3, namespace, &error)),
    }
}

async fn secret_shape(
    client: &Client,
    namespace: &str,
    name: &str,
    key: &str,
) -> Read<SecretShape> {
    match Api::<Secret>::namespaced(client.clone(), namespace)
        .get(name)
        .await
    {
        Ok(secret) => {
            let has = secret.data.as_ref().is_some_and(|d| d.contains_key(key))
                || secret
                    .string_data
                    .as_ref()
                    .is_some_and(|d| d.contains_key(key));
            Read::Found(if has {
                SecretShape::WithKey
            } else {
                SecretShape::WithoutKey
            })
        }
        Err(error) if is_not_found(&error) => Read::Absent,
        Err(error) => Read::Unreadable(unreadable(&format!("Secret/{name}"), namespace, &error)),
    }
}

fn health_check(object: &Value) -> HealthCheckFacts {
    let selector = object
        .pointer("/spec/selector")
        .cloned()
        .and_then(|s| serde_json::from_value::<LabelSelector>(s).ok())
        .unwrap_or_default();
    let node_startup_timeout = match object
        .pointer("/spec/nodeStartupTimeout")
        .and_then(Value::as_str)
    {
        None => Ok(DEFAULT_NODE_STARTUP_TIMEOUT),
        Some(text) => parse_duration(text).map_err(|_| text.to_owned()),
    };
    HealthCheckFacts {
        name: object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        selector,
        node_startup_timeout,
    }
}

/// Prism Central's endpoint: the flag, else `Infrastructure/cluster`; with its failure domains.
async fn endpoint(
    client: &Client,
    settings: &GatherSettings,
) -> Result<(String, Vec<FailureDomain>), String> {
    let infrastructure = match get_dynamic(
        client,
        (
            "config.openshift.io",
            "v1",
            "Infrastructure",
            "infrastructures",
        ),
        None,
        "cluster",
    )
    .await
    {
        Read::Found(object) => Some(parse_infrastructure(&object).map_err(|e| e.to_string())?),
        Read::Absent => None,
        Read::Unreadable(why) => return Err(why),
    };
    let failure_domains = infrastructure
        .as_ref()
        .map(|info| info.failure_domains.clone())
        .unwrap_or_default();
    let endpoint = prism_endpoint(settings.prism_endpoint.as_deref(), infrastructure.as_ref())
        .ok_or(
            "no Prism Central endpoint: Infrastructure/cluster names none; give --prism-endpoint",
        )?;
    Ok((endpoint, failure_domains))
}

/// Reads the credentials Secret `name` and makes (or reuses) its connection.
async fn connect(
    client: &Client,
    actuator: &Actuator,
    endpoint: &str,
    namespace: &str,
    name: &str,
) -> Result<std::sync::Arc<Connection>, String> {
    let secret = Api::<Secret>::namespaced(client.clone(), namespace)
        .get(name)
        .await
        .map_err(|error| {
            if is_not_found(&error) {
                format!("the credentials Secret {namespace}/{name} does not exist")
            } else {
                unreadable(&format!("Secret/{name}"), namespace, &error)
            }
        })?;
    let value = secret
        .data
        .as_ref()
        .and_then(|data| data.get(CREDENTIALS_KEY))
        .map(|value| value.0.clone())
        .ok_or_else(|| {
            format!("the credentials Secret {namespace}/{name} has no key {CREDENTIALS_KEY}")
        })?;
    let credentials = PrismCredentials::parse(&value)
        .map_err(|e| format!("the credentials Secret {namespace}/{name}: {e}"))?;
    actuator
        .connection(endpoint, &format!("{namespace}/{name}"), &credentials)
        .map_err(|e| e.to_string())
}

type PrismFacts = (PrismReach, Read<Vec<MachineSetFacts>>, Vec<SubnetFacts>);

/// Plans one Machine of each MachineSet against Prism (what the controller does before a
/// create), and reads the subnets they use.
async fn prism_facts(
    client: &Client,
    actuator: &Actuator,
    settings: &GatherSettings,
    sets: Vec<MachineSet>,
) -> PrismFacts {
    let namespace = settings.namespace.as_str();
    let mut facts: Vec<MachineSetFacts> = sets
        .iter()
        .map(|set| MachineSetFacts {
            name: set.name_any(),
            windows: set.is_windows(),
            machine_labels: set
                .spec
                .template
                .metadata
                .as_ref()
                .and_then(|m| m.labels.clone())
                .unwrap_or_default(),
            plan: None,
        })
        .collect();
    if sets.is_empty() {
        return (
            PrismReach::NotTried("no MachineSet names a credentials Secret".to_owned()),
            Read::Found(facts),
            Vec::new(),
        );
    }
    let (endpoint, failure_domains) = match endpoint(client, settings).await {
        Ok(found) => found,
        Err(why) => return (PrismReach::NotTried(why), Read::Found(facts), Vec::new()),
    };
    let mut reach = None;
    // Subnet UUID → the sets using it.
    let mut subnets: BTreeMap<String, Vec<String>> = BTreeMap::new();
    // (set index, NIC, subnet UUID, pool) of every NIC that takes a static address.
    // (MachineSet index, NIC, subnet UUID, pool, what its guest can do on an unmanaged subnet)
    let mut static_nics: Vec<(usize, usize, String, PoolRef, GuestAddressing)> = Vec::new();
    let mut subnet_connection = None;
    for (index, (set, fact)) in sets.into_iter().zip(facts.iter_mut()).enumerate() {
        let Some(Ok(config)) = set.provider_config() else {
            // A providerSpec that does not parse: the plan says why, without Prism.
            let machine = preview_machine(set);
            let spec = ParsedSpec::of(&machine);
            if let Some(errors) = crate::controller::prepare::invalid_in_itself(&machine, &spec) {
                fact.plan = Some(Err(errors.lines().collect()));
            }
            continue;
        };
        let Some(secret) = config
            .credentials_secret
            .as_ref()
            .map(|s| s.name.clone())
            .filter(|n| !n.is_empty())
        else {
            fact.plan = Some(Err(vec![
                "providerSpec.credentialsSecret: not set (the machine-api-operator's webhook \
                 defaults it on OpenShift)"
                    .to_owned(),
            ]));
            continue;
        };
        let connection = match connect(client, actuator, &endpoint, namespace, &secret).await {
            Ok(connection) => connection,
            Err(why) => {
                fact.plan = Some(Err(vec![format!("providerSpec.credentialsSecret: {why}")]));
                continue;
            }
        };
        // One call first: a Prism that cannot be used is said once, not once per reference.
        if reach.is_none() {
            reach = Some(match connection.client().whoami().await {
                Err(error) => match PrismUnusable::of(&endpoint, &error) {
                    Some(unusable) => PrismReach::Unusable(unusable.to_string()),
                    None => PrismReach::Usable,
                },
                Ok(_) => PrismReach::Usable,
            });
        }
        if matches!(reach, Some(PrismReach::Unusable(_))) {
            break;
        }
        let (user_data, unread) = match config.user_data_secret.as_ref() {
            Some(reference) if !reference.name.is_empty() => {
                match user_data_of(client, namespace, &reference.name).await {
                    Some(data) => (Some(data), UnreadUserData::NotChecked),
                    None => (None, UnreadUserData::Absent),
                }
            }
            _ => (None, UnreadUserData::NotChecked),
        };
        let machine = preview_machine(set);
        let password = random_admin_password();
        fact.plan = Some(
            match resolve_and_plan(
                &connection,
                &machine,
                &ParsedSpec::of(&machine),
                &failure_domains,
                user_data.as_ref(),
                unread,
                Some(&password),
            )
            .await
            {
                Ok(plan) => {
                    for subnet in &plan.subnets {
                        if let EntityRef::Uuid(uuid) = subnet {
                            subnets
                                .entry(uuid.clone())
                                .or_default()
                                .push(fact.name.clone());
                        }
                    }
                    // Static addresses: what the controller checks before it claims any.
                    match machine_ip_pools(&machine).map(|pools| {
                        pools.and_then(|pools| {
                            check_nic_count(&pools, plan.subnets.len()).map(|()| pools)
                        })
                    }) {
                        None => Ok(plan.warnings),
                        Some(Err(error)) => Err(vec![format!(
                            "metadata.annotations[{IP_POOL_ANNOTATION}]: {error}"
                        )]),
                        Some(Ok(pools)) => {
                            let guest = guest_addressing_of(
                                &machine,
                                &ParsedSpec::of(&machine),
                                plan.subnets.len(),
                            );
                            for (nic, pool) in pools.into_iter().enumerate() {
                                if let (Some(pool), Some(EntityRef::Uuid(uuid))) =
                                    (pool, plan.subnets.get(nic))
                                {
                                    static_nics.push((
                                        index,
                                        nic,
                                        uuid.clone(),
                                        pool,
                                        guest.clone(),
                                    ));
                                }
                            }
                            Ok(plan.warnings)
                        }
                    }
                }
                Err(errors) => Err(errors.lines().collect()),
            },
        );
        subnet_connection.get_or_insert(connection);
    }
    let mut subnet_facts = Vec::new();
    let mut unmanaged = Vec::new();
    if let Some(connection) = subnet_connection {
        for (uuid, used_by) in subnets {
            let fact = match connection.client().get::<Subnet>(&uuid).await {
                Ok(subnet) => SubnetFacts {
                    name: subnet.name().unwrap_or(&uuid).to_owned(),
                    used_by,
                    usage: match (subnet.has_ip_pools(), subnet.pool_usage()) {
                        (false, _) => SubnetUsage::Unmanaged,
                        (true, Some((total, free))) => SubnetUsage::Managed { total, free },
                        (true, None) => SubnetUsage::Unreadable(format!(
                            "Prism gave no address counts for subnet {uuid}"
                        )),
                    },
                },
                Err(error) => SubnetFacts {
                    name: uuid.clone(),
                    used_by,
                    usage: SubnetUsage::Unreadable(format!("subnet {uuid}: {error}")),
                },
            };
            if fact.usage == SubnetUsage::Unmanaged {
                unmanaged.push((uuid, fact.name.clone()));
            }
            subnet_facts.push(fact);
        }
    }
    // A static address needs a subnet whose addresses Prism manages, or a guest that sets it
    // itself: the controller refuses the Machine otherwise (`plan::machine::ipam::nic_addressing`).
    for (index, nic, uuid, pool, guest) in static_nics {
        let Some((_, subnet)) = unmanaged.iter().find(|(u, _)| *u == uuid) else {
            continue;
        };
        let GuestAddressing::Unsupported(why) = guest else {
            continue;
        };
        let error = StaticAddressError::UnmanagedSubnet {
            nic,
            subnet: subnet.clone(),
            pool,
            why,
        }
        .to_string();
        if let Some(fact) = facts.get_mut(index) {
            match &mut fact.plan {
                Some(Err(errors)) => errors.push(error),
                plan => *plan = Some(Err(vec![error])),
            }
        }
    }
    let reach = reach
        .unwrap_or_else(|| PrismReach::NotTried("no MachineSet has usable credentials".to_owned()));
    (reach, Read::Found(facts), subnet_facts)
}

async fn user_data_of(client: &Client, namespace: &str, name: &str) -> Option<UserData> {
    let secret = Api::<Secret>::namespaced(client.clone(), namespace)
        .get(name)
        .await
        .ok()?;
    let value = secret.data.as_ref()?.get(USER_DATA_KEY)?;
    Some(UserData::new(value.0.clone()))
}

/// The controller's doctor: the same checks every `interval` (the first one interval after
/// start), with the controller's clients
/// (its ServiceAccount: a read it may not do skips its check), published as
/// `nutanix_doctor_findings` and `nutanix_doctor_checks_skipped`, and each new finding logged
/// once as a warning. A metric rather than a condition: the controller owns no object of its
/// own to carry one (the machine-api `ClusterOperator` is the machine-api-operator's, which
/// writes its conditions itself), and a metric reaches the alerting an administrator already
/// watches (`NutanixWindowsPrerequisiteMissing`, manifests/monitoring/).
pub async fn every(
    client: Client,
    actuator: std::sync::Arc<Actuator>,
    metrics: std::sync::Arc<Metrics>,
    settings: GatherSettings,
    interval: Duration,
) {
    let mut previous: Vec<Finding> = Vec::new();
    loop {
        // The first run one interval after start: a starting controller's Prism calls are the
        // Machines', and the checks' answers change slowly.
        tokio::time::sleep(interval).await;
        let report = examine(&gather(&client, &actuator, &settings).await);
        publish(&metrics, &report);
        for finding in report.findings.iter().filter(|f| !previous.contains(f)) {
            tracing::warn!(
                check = finding.check.name(),
                severity = finding.severity.name(),
                object = %finding.object,
                fix = %finding.fix,
                "doctor: {}",
                finding.problem
            );
        }
        tracing::info!(
            findings = report.findings.len(),
            skipped = report.skipped.len(),
            "doctor ran"
        );
        previous = report.findings;
    }
}

/// Sets the doctor's gauges from `report`: every check and severity has a series.
pub fn publish(metrics: &Metrics, report: &Report) {
    for ((check, severity), count) in report.counts() {
        metrics
            .doctor_findings
            .with_label_values(&[check.name(), severity.name()])
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }
    for check in Check::ALL {
        let skipped = report.skipped.iter().filter(|s| s.check == check).count();
        metrics
            .doctor_skipped
            .with_label_values(&[check.name()])
            .set(i64::try_from(skipped).unwrap_or(i64::MAX));
    }
}

/// The report as a table: one line per finding, skipped check and passed check.
pub fn table(report: &Report) -> String {
    let mut rows: Vec<[String; 4]> = Vec::new();
    for finding in &report.findings {
        rows.push([
            finding.check.name().to_owned(),
            finding.severity.name().to_uppercase(),
            finding.object.clone(),
            format!("{}\n  fix: {}", finding.problem, finding.fix),
        ]);
    }
    for skipped in &report.skipped {
        rows.push([
            skipped.check.name().to_owned(),
            "SKIPPED".to_owned(),
            String::new(),
            skipped.reason.clone(),
        ]);
    }
    for check in &report.passed {
        rows.push([
            check.name().to_owned(),
            "OK".to_owned(),
            String::new(),
            String::new(),
        ]);
    }
    let width = |column: usize| {
        rows.iter()
            .map(|row| row[column].len())
            .chain([["CHECK", "RESULT", "OBJECT"][column].len()])
            .max()
            .unwrap_or(0)
    };
    let (check_width, result_width, object_width) = (width(0), width(1), width(2));
    let mut out = format!(
        "{:check_width$}  {:result_width$}  {:object_width$}  FINDING\n",
        "CHECK", "RESULT", "OBJECT"
    );
    let indent = " ".repeat(check_width + result_width + object_width + 6);
    for [check, result, object, text] in rows {
        let mut lines = text.lines();
        out.push_str(
            format!(
                "{check:check_width$}  {result:result_width$}  {object:object_width$}  {}",
                lines.next().unwrap_or("")
            )
            .trim_end(),
        );
        out.push('\n');
        for line in lines {
            out.push_str(&indent);
            out.push_str(line);
            out.push('\n');
        }
    }
    let errors = report
        .findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .count();
    out.push_str(&format!(
        "\n{errors} error(s), {} warning(s), {} check(s) skipped\n",
        report.findings.len() - errors,
        report.skipped.len()
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::doctor::{Severity, Skipped};

    #[test]
    fn the_table_has_a_line_per_check_with_fixes_indented_under_their_finding() {
        let report = Report {
            findings: vec![Finding {
                check: Check::CloudPrivateKey,
                severity: Severity::Error,
                object: "Secret/cloud-private-key".to_owned(),
                problem: "missing".to_owned(),
                fix: "create it".to_owned(),
            }],
            skipped: vec![Skipped {
                check: Check::SubnetPool,
                reason: "DHCP outside Prism".to_owned(),
            }],
            passed: vec![Check::Wmco],
        };
        let table = table(&report);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(
            lines,
            [
                "CHECK              RESULT   OBJECT                    FINDING",
                "cloud-private-key  ERROR    Secret/cloud-private-key  missing",
                "                                                        fix: create it",
                "subnet-pool        SKIPPED                            DHCP outside Prism",
                "wmco               OK",
                "",
                "1 error(s), 0 warning(s), 1 check(s) skipped",
            ]
        );
    }
}

#[cfg(test)]
mod metric_tests {
    use super::*;
    use crate::plan::doctor::Skipped;

    #[test]
    fn every_check_and_severity_has_a_series_and_a_fixed_fault_goes_back_to_zero() {
        let metrics = Metrics::new().unwrap();
        let finding = Finding {
            check: Check::Wmco,
            severity: Severity::Error,
            object: "ClusterServiceVersion/x".to_owned(),
            problem: "p".to_owned(),
            fix: "f".to_owned(),
        };
        let report = Report {
            findings: vec![finding],
            skipped: vec![Skipped {
                check: Check::SubnetPool,
                reason: "r".to_owned(),
            }],
            passed: Vec::new(),
        };
        publish(&metrics, &report);
        let value = |check: &str, severity: &str| {
            metrics
                .doctor_findings
                .with_label_values(&[check, severity])
                .get()
        };
        assert_eq!(value("wmco", "error"), 1);
        assert_eq!(value("wmco", "warning"), 0);
        assert_eq!(value("hybrid-overlay", "error"), 0);
        assert_eq!(
            metrics
                .doctor_skipped
                .with_label_values(&["subnet-pool"])
                .get(),
            1
        );
        let text = metrics.render();
        assert_eq!(
            text.lines()
                .filter(|l| l.starts_with("nutanix_doctor_findings{"))
                .count(),
            Check::ALL.len() * 2
        );
        publish(&metrics, &Report::default());
        assert_eq!(value("wmco", "error"), 0);
    }
}
