//! `doctor`'s rules: what the cluster and Prism Central were found to be (read by the runtime,
//! passed in as [`Facts`]) turned into findings, each with its fix. Pure: the same facts give the
//! same report, so every rule is table-tested without a server.
//!
//! The checks are the prerequisites of Windows workers on OpenShift on Nutanix (WMCO's install
//! guide, `../shared/seeds/004_*`) and the causes of a MachineSet that does not work that the
//! field report (`seeds/000_*`) chased by hand; each rule cites where it comes from.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::Serialize;
use serde_json::Value;

mod selector;
#[cfg(test)]
mod tests;

pub use selector::selects;

/// WMCO's namespace, as its install guide creates it (`seeds/004_*`, "Namespace
/// openshift-windows-machine-config-operator").
pub const WMCO_NAMESPACE: &str = "openshift-windows-machine-config-operator";
/// Prefix of WMCO's ClusterServiceVersion names (`oc get csv`: `windows-machine-config-operator.<version>`).
pub const WMCO_CSV_PREFIX: &str = "windows-machine-config-operator.";
/// The Secret WMCO writes its user data to, in the machine API's namespace (WMCO
/// `pkg/secrets/secrets.go`).
pub const WINDOWS_USER_DATA_SECRET: &str = "windows-user-data";
/// The Secret with WMCO's private key, in WMCO's namespace, and its key (`seeds/004_*`:
/// `oc create secret generic cloud-private-key --from-file=private-key.pem=...`).
pub const CLOUD_PRIVATE_KEY_SECRET: &str = "cloud-private-key";
pub const CLOUD_PRIVATE_KEY_KEY: &str = "private-key.pem";
/// The machine-healthcheck's default `nodeStartupTimeout` (openshift/api machine/v1beta1
/// `MachineHealthCheckSpec`: `+kubebuilder:default:="10m"`).
pub const DEFAULT_NODE_STARTUP_TIMEOUT: Duration = Duration::from_secs(10 * 60);

/// One check of the report, in the order the table shows them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Check {
    /// Prism Central answers with the credentials.
    PrismCentral,
    /// OVN-Kubernetes with the hybrid overlay WMCO needs.
    HybridOverlay,
    /// The hybrid overlay's VXLAN port.
    VxlanPort,
    /// WMCO installed, and its version fits the cluster's.
    Wmco,
    /// WMCO's `windows-user-data` Secret.
    WindowsUserData,
    /// WMCO's `cloud-private-key` Secret.
    CloudPrivateKey,
    /// Every reference of a MachineSet found in Prism, and its choices consistent.
    #[serde(rename = "machineset")]
    MachineSet,
    /// The address pool of a Prism-managed subnet the MachineSets use.
    SubnetPool,
    /// The `nodeStartupTimeout` of MachineHealthChecks over Windows Machines.
    HealthCheck,
}

impl Check {
    pub const ALL: [Self; 9] = [
        Self::PrismCentral,
        Self::HybridOverlay,
        Self::VxlanPort,
        Self::Wmco,
        Self::WindowsUserData,
        Self::CloudPrivateKey,
        Self::MachineSet,
        Self::SubnetPool,
        Self::HealthCheck,
    ];

    /// The name the table, the JSON and the metric's `check` label use.
    pub fn name(self) -> &'static str {
        match self {
            Self::PrismCentral => "prism-central",
            Self::HybridOverlay => "hybrid-overlay",
            Self::VxlanPort => "vxlan-port",
            Self::Wmco => "wmco",
            Self::WindowsUserData => "windows-user-data",
            Self::CloudPrivateKey => "cloud-private-key",
            Self::MachineSet => "machineset",
            Self::SubnetPool => "subnet-pool",
            Self::HealthCheck => "health-check",
        }
    }
}

/// How bad a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Keeps a MachineSet from working.
    Error,
    /// Works, but not as an administrator expects (or only until something changes).
    Warning,
}

impl Severity {
    pub fn name(self) -> &'static str {
        match self {
            Self::Error => "error",
            Self::Warning => "warning",
        }
    }
}

/// One problem found, with what to do about it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub check: Check,
    pub severity: Severity,
    /// The object the finding is about (`Network.operator.openshift.io/cluster`,
    /// `MachineSet/windows-a`, `subnet/vlan-10`).
    pub object: String,
    pub problem: String,
    pub fix: String,
}

/// A check that could not be made, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Skipped {
    pub check: Check,
    pub reason: String,
}

/// The report: every check is passed, has findings, or was skipped (several objects of one
/// check may do different things).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    pub findings: Vec<Finding>,
    pub skipped: Vec<Skipped>,
    /// Checks with neither a finding nor a skip.
    pub passed: Vec<Check>,
}

impl Report {
    pub fn has_errors(&self) -> bool {
        self.findings.iter().any(|f| f.severity == Severity::Error)
    }

    /// How many findings of each check and severity (the metric's values).
    pub fn counts(&self) -> BTreeMap<(Check, Severity), usize> {
        let mut counts = BTreeMap::new();
        for check in Check::ALL {
            for severity in [Severity::Error, Severity::Warning] {
                counts.insert((check, severity), 0);
            }
        }
        for finding in &self.findings {
            *counts.entry((finding.check, finding.severity)).or_default() += 1;
        }
        counts
    }
}

/// What a read of one object gave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Read<T> {
    Found(T),
    /// The object (or its kind) does not exist.
    Absent,
    /// It could not be read (forbidden, the API unreachable): the check is skipped with this.
    Unreadable(String),
}

/// A Secret, without its data: only whether it holds the key that matters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SecretShape {
    WithKey,
    WithoutKey,
}

/// Whether Prism Central could be used at all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PrismReach {
    Usable,
    /// Why not, with its fix (the `validate` command's wording).
    Unusable(String),
    /// Not tried: no endpoint or no credentials could be found (the reason says which).
    NotTried(String),
}

/// A MachineSet, as far as the rules need it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachineSetFacts {
    pub name: String,
    pub windows: bool,
    /// The labels its Machines get (the template's), which MachineHealthChecks select.
    pub machine_labels: BTreeMap<String, String>,
    /// What planning one of its Machines against Prism gave: its warnings, or its errors
    /// (one per line, each naming its field). `None` when Prism could not be used.
    pub plan: Option<Result<Vec<String>, Vec<String>>>,
}

/// A subnet one of the MachineSets names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubnetFacts {
    /// Its name (else its UUID), as the table shows it.
    pub name: String,
    pub used_by: Vec<String>,
    pub usage: SubnetUsage,
}

/// A subnet's addresses, from `status.resources.ip_usage_stats` (prism-go-client's recorded
/// `GET /subnets/{uuid}`, `v3/mocks/TestOperations_GetSubnet.yaml`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SubnetUsage {
    /// Prism hands out the addresses: the pools' totals.
    Managed {
        total: u64,
        free: u64,
    },
    /// No `ip_config`: a DHCP server outside Prism hands them out.
    Unmanaged,
    Unreadable(String),
}

/// A MachineHealthCheck, as far as the rules need it.
#[derive(Clone, Debug, PartialEq)]
pub struct HealthCheckFacts {
    pub name: String,
    pub selector: LabelSelector,
    /// `spec.nodeStartupTimeout` parsed; the default when unset; `Err` with the text when it
    /// does not parse.
    pub node_startup_timeout: Result<Duration, String>,
}

/// Everything the rules look at.
#[derive(Clone, Debug, PartialEq)]
pub struct Facts {
    pub prism: PrismReach,
    /// `Network.operator.openshift.io/cluster`.
    pub network_operator: Read<Value>,
    /// `ClusterVersion/version`'s `status.desired.version`.
    pub cluster_version: Read<String>,
    /// WMCO's ClusterServiceVersions in its namespace: (name, `spec.version`, `status.phase`).
    pub wmco_csvs: Read<Vec<(String, String, String)>>,
    pub windows_user_data: Read<SecretShape>,
    pub cloud_private_key: Read<SecretShape>,
    pub machine_sets: Read<Vec<MachineSetFacts>>,
    pub subnets: Vec<SubnetFacts>,
    pub health_checks: Read<Vec<HealthCheckFacts>>,
    /// The provider's `--windows-join-timeout`: how long a Windows join may take.
    pub windows_join_timeout: Duration,
}

/// Runs every rule over `facts`.
pub fn examine(facts: &Facts) -> Report {
    let mut report = Report::default();
    let windows_sets = match &facts.machine_sets {
        Read::Found(sets) => sets.iter().filter(|s| s.windows).count(),
        _ => 0,
    };
    // The Windows prerequisites stop a Windows MachineSet; without one they are what an
    // administrator must do first (a warning).
    let windows_severity = if windows_sets > 0 {
        Severity::Error
    } else {
        Severity::Warning
    };
    let mut out = Out {
        report: &mut report,
    };
    prism(facts, &mut out);
    hybrid_overlay(facts, windows_severity, &mut out);
    wmco(facts, windows_severity, &mut out);
    secrets(facts, windows_severity, &mut out);
    machine_sets(facts, &mut out);
    subnets(facts, &mut out);
    health_checks(facts, &mut out);
    let touched: Vec<Check> = report
        .findings
        .iter()
        .map(|f| f.check)
        .chain(report.skipped.iter().map(|s| s.check))
        .collect();
    report.passed = Check::ALL
        .into_iter()
        .filter(|check| !touched.contains(check))
        .collect();
    report
}

struct Out<'a> {
    report: &'a mut Report,
}

impl Out<'_> {
    fn find(
        &mut self,
        check: Check,
        severity: Severity,
        object: impl Into<String>,
        problem: impl Into<String>,
        fix: impl Into<String>,
    ) {
        self.report.findings.push(Finding {
            check,
            severity,
            object: object.into(),
            problem: problem.into(),
            fix: fix.into(),
        });
    }

    fn skip(&mut self, check: Check, reason: impl Into<String>) {
        self.report.skipped.push(Skipped {
            check,
            reason: reason.into(),
        });
    }
}

fn prism(facts: &Facts, out: &mut Out) {
    match &facts.prism {
        PrismReach::Usable => {}
        PrismReach::Unusable(why) => out.find(
            Check::PrismCentral,
            Severity::Error,
            "Prism Central",
            why.clone(),
            "no Machine can be created until this is fixed; the message says where to look",
        ),
        PrismReach::NotTried(why) => out.skip(Check::PrismCentral, why.clone()),
    }
}

const NETWORK_OPERATOR: &str = "Network.operator.openshift.io/cluster";

/// WMCO refuses a cluster that is not OVN-Kubernetes with `hybridOverlayConfig.
/// hybridClusterNetwork` (WMCO `pkg/cluster/config.go`); the fix is OpenShift's "Configuring
/// hybrid networking" (`oc patch networks.operator.openshift.io cluster`), which also says the
/// VXLAN port "is required for running Windows nodes in a cluster installed on vSphere, and must
/// not be configured for any other cloud provider".
fn hybrid_overlay(facts: &Facts, severity: Severity, out: &mut Out) {
    let network = match &facts.network_operator {
        Read::Found(network) => network,
        Read::Absent => {
            out.find(
                Check::HybridOverlay,
                severity,
                NETWORK_OPERATOR,
                "the cluster has no Network.operator.openshift.io/cluster, so no OVN-Kubernetes \
                 hybrid overlay: WMCO refuses to configure Windows nodes without it",
                PATCH_HYBRID,
            );
            out.skip(Check::VxlanPort, "no hybrid overlay");
            return;
        }
        Read::Unreadable(why) => {
            out.skip(Check::HybridOverlay, why.clone());
            out.skip(Check::VxlanPort, why.clone());
            return;
        }
    };
    let default_network = network.pointer("/spec/defaultNetwork");
    let network_type = default_network
        .and_then(|d| d.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("");
    if network_type != "OVNKubernetes" {
        out.find(
            Check::HybridOverlay,
            severity,
            NETWORK_OPERATOR,
            format!(
                "the cluster network is {:?}, not OVNKubernetes: Windows nodes need \
                 OVN-Kubernetes' hybrid overlay",
                if network_type.is_empty() {
                    "unset"
                } else {
                    network_type
                }
            ),
            "Windows workers need a cluster installed (or migrated) with OVN-Kubernetes; then \
             configure the hybrid overlay",
        );
        out.skip(Check::VxlanPort, "no hybrid overlay");
        return;
    }
    let hybrid =
        default_network.and_then(|d| d.pointer("/ovnKubernetesConfig/hybridOverlayConfig"));
    let networks = hybrid
        .and_then(|h| h.get("hybridClusterNetwork"))
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    if networks == 0 {
        out.find(
            Check::HybridOverlay,
            severity,
            NETWORK_OPERATOR,
            "spec.defaultNetwork.ovnKubernetesConfig.hybridOverlayConfig.hybridClusterNetwork \
             is not set: WMCO refuses to configure Windows nodes without the hybrid overlay",
            PATCH_HYBRID,
        );
        out.skip(Check::VxlanPort, "no hybrid overlay");
        return;
    }
    if let Some(port) = hybrid.and_then(|h| h.get("hybridOverlayVXLANPort")) {
        out.find(
            Check::VxlanPort,
            Severity::Warning,
            NETWORK_OPERATOR,
            format!(
                "hybridOverlayVXLANPort is set ({port}): OpenShift's documentation requires a \
                 custom VXLAN port on vSphere only and says it must not be configured on any \
                 other platform (and Windows Server 2019 cannot use one)"
            ),
            "leave hybridOverlayVXLANPort out on Nutanix (the default, 4789, is what Windows' \
             VXLAN uses); the hybrid overlay's settings are fixed at installation or in the \
             patch that enables it",
        );
    }
}

const PATCH_HYBRID: &str = "oc patch networks.operator.openshift.io cluster --type=merge -p \
     '{\"spec\":{\"defaultNetwork\":{\"ovnKubernetesConfig\":{\"hybridOverlayConfig\":\
     {\"hybridClusterNetwork\":[{\"cidr\":\"10.132.0.0/14\",\"hostPrefix\":23}]}}}}}' \
     (a CIDR that overlaps no other network of the cluster; OpenShift docs, \"Configuring \
     hybrid networking\")";

/// A `major.minor` of a version text (`4.20.3`, `10.20.0`, `v10.16.1-0`).
fn major_minor(version: &str) -> Option<(u64, u64)> {
    let mut parts = version.trim().trim_start_matches('v').split('.');
    let major = parts.next()?.parse().ok()?;
    let minor: String = parts
        .next()?
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    Some((major, minor.parse().ok()?))
}

/// The OpenShift minor version a WMCO version is built for: WMCO's y-streams follow
/// OpenShift's, 9.0 for 4.14 and 10.N for 4.N from 4.15 (WMCO's release branches
/// `release-4.14` … `release-4.18`, `WMCO_VERSION`; reference/03). `None` for versions whose
/// pairing no source here shows.
fn wmco_openshift_minor(wmco: (u64, u64)) -> Option<u64> {
    match wmco {
        (9, _) => Some(14),
        (10, minor) if minor >= 15 => Some(minor),
        _ => None,
    }
}

fn wmco(facts: &Facts, severity: Severity, out: &mut Out) {
    let object = format!("ClusterServiceVersion in {WMCO_NAMESPACE}");
    let csvs = match &facts.wmco_csvs {
        Read::Found(csvs) => csvs,
        Read::Absent => {
            out.find(
                Check::Wmco,
                severity,
                object,
                "the Windows Machine Config Operator is not installed: nothing configures a \
                 Windows VM into a node",
                format!(
                    "install it from OperatorHub into the namespace {WMCO_NAMESPACE} (a \
                     Namespace, an OperatorGroup and a Subscription to the channel stable; \
                     docs/windows-workers.md)"
                ),
            );
            return;
        }
        Read::Unreadable(why) => {
            out.skip(Check::Wmco, why.clone());
            return;
        }
    };
    let Some((name, version, phase)) = csvs
        .iter()
        .find(|(name, _, _)| name.starts_with(WMCO_CSV_PREFIX))
    else {
        out.find(
            Check::Wmco,
            severity,
            object,
            "the Windows Machine Config Operator is not installed: nothing configures a Windows \
             VM into a node",
            format!("install it from OperatorHub into the namespace {WMCO_NAMESPACE}"),
        );
        return;
    };
    let object = format!("ClusterServiceVersion/{name}");
    if phase != "Succeeded" {
        out.find(
            Check::Wmco,
            severity,
            object.clone(),
            format!("WMCO's install is in phase {phase:?}, not Succeeded"),
            format!(
                "oc describe csv -n {WMCO_NAMESPACE} {name} shows why (its conditions and \
                 events)"
            ),
        );
    }
    let Some(wmco_version) = major_minor(version) else {
        out.skip(
            Check::Wmco,
            format!("WMCO's version {version:?} is not major.minor.patch"),
        );
        return;
    };
    if let Some(minor) = wmco_openshift_minor(wmco_version)
        && minor < 16
    {
        out.find(
            Check::Wmco,
            Severity::Warning,
            object.clone(),
            format!(
                "WMCO {version} starts the kubelet without --node-ip on Nutanix Machines (before \
                 WMCO 10.16 / OpenShift 4.16): a node may register with its hybrid-overlay \
                 address and its serving certificate stay pending"
            ),
            "upgrade to OpenShift 4.16 and WMCO 10.16 or later (docs/windows.md, \"WMCO version \
             notes\"); WMCO's own service manager reverts a --node-ip added by hand",
        );
    }
    let cluster = match &facts.cluster_version {
        Read::Found(cluster) => cluster,
        Read::Absent => {
            out.skip(
                Check::Wmco,
                "no ClusterVersion/version: the cluster's OpenShift version is unknown",
            );
            return;
        }
        Read::Unreadable(why) => {
            out.skip(Check::Wmco, why.clone());
            return;
        }
    };
    let Some(cluster_version) = major_minor(cluster) else {
        out.skip(
            Check::Wmco,
            format!("the cluster's version {cluster:?} is not major.minor.patch"),
        );
        return;
    };
    if cluster_version < (4, 14) {
        out.find(
            Check::Wmco,
            severity,
            "ClusterVersion/version",
            format!(
                "OpenShift {cluster}: WMCO supports Windows Machines on Nutanix from OpenShift \
                 4.14 (WMCO 9.0)"
            ),
            "upgrade the cluster to 4.14 or later (4.16 or later recommended)",
        );
        return;
    }
    match wmco_openshift_minor(wmco_version) {
        Some(minor) if (4, minor) != cluster_version => out.find(
            Check::Wmco,
            severity,
            object,
            format!(
                "WMCO {version} is built for OpenShift 4.{minor}, and the cluster runs \
                 {cluster}: WMCO supports only the OpenShift version it is built for"
            ),
            format!(
                "update WMCO to the release for 4.{} (its Subscription's channel, or approve \
                 its pending InstallPlan)",
                cluster_version.1
            ),
        ),
        Some(_) => {}
        None => out.skip(
            Check::Wmco,
            format!(
                "which OpenShift version WMCO {version} is built for is not known to this \
                 provider: check WMCO's release notes"
            ),
        ),
    }
}

fn secrets(facts: &Facts, severity: Severity, out: &mut Out) {
    let user_data_object = format!("Secret/{WINDOWS_USER_DATA_SECRET}");
    match &facts.windows_user_data {
        Read::Found(SecretShape::WithKey) => {}
        Read::Found(SecretShape::WithoutKey) => out.find(
            Check::WindowsUserData,
            severity,
            user_data_object,
            "the Secret has no userData key",
            "WMCO writes this Secret: delete it and WMCO writes it again from cloud-private-key",
        ),
        Read::Absent => out.find(
            Check::WindowsUserData,
            severity,
            user_data_object,
            "WMCO's user data Secret does not exist: a Windows Machine naming it cannot be \
             created",
            format!(
                "WMCO writes it once {CLOUD_PRIVATE_KEY_SECRET} exists in {WMCO_NAMESPACE}; \
                 if that Secret exists, WMCO's log says why not (oc logs -n {WMCO_NAMESPACE} \
                 deployment/windows-machine-config-operator)"
            ),
        ),
        Read::Unreadable(why) => out.skip(Check::WindowsUserData, why.clone()),
    }
    let key_object = format!("Secret/{CLOUD_PRIVATE_KEY_SECRET} in {WMCO_NAMESPACE}");
    let create_key = format!(
        "oc create secret generic {CLOUD_PRIVATE_KEY_SECRET} \
         --from-file={CLOUD_PRIVATE_KEY_KEY}=<the private key whose public key WMCO puts on \
         the VMs> -n {WMCO_NAMESPACE}"
    );
    match &facts.cloud_private_key {
        Read::Found(SecretShape::WithKey) => {}
        Read::Found(SecretShape::WithoutKey) => out.find(
            Check::CloudPrivateKey,
            severity,
            key_object,
            format!(
                "the Secret has no {CLOUD_PRIVATE_KEY_KEY} key: WMCO cannot sign in to the VMs"
            ),
            format!("create it again with that key: {create_key}"),
        ),
        Read::Absent => out.find(
            Check::CloudPrivateKey,
            severity,
            key_object,
            "WMCO's private key Secret does not exist: WMCO writes no user data and cannot sign \
             in to a Windows VM",
            create_key,
        ),
        Read::Unreadable(why) => out.skip(Check::CloudPrivateKey, why.clone()),
    }
}

fn machine_sets(facts: &Facts, out: &mut Out) {
    let sets = match &facts.machine_sets {
        Read::Found(sets) => sets,
        Read::Absent => {
            out.skip(Check::MachineSet, "no MachineSet in the namespace");
            return;
        }
        Read::Unreadable(why) => {
            out.skip(Check::MachineSet, why.clone());
            return;
        }
    };
    let mut planned = 0;
    for set in sets {
        let object = format!("MachineSet/{}", set.name);
        match &set.plan {
            None => {}
            Some(Ok(warnings)) => {
                planned += 1;
                for warning in warnings {
                    out.find(
                        Check::MachineSet,
                        Severity::Warning,
                        object.clone(),
                        warning.clone(),
                        "docs/configuration.md explains the choice; `validate` shows the same",
                    );
                }
            }
            Some(Err(errors)) => {
                planned += 1;
                for error in errors {
                    out.find(
                        Check::MachineSet,
                        Severity::Error,
                        object.clone(),
                        error.clone(),
                        "fix the field named (in the MachineSet's template); a Machine of this \
                         set would be refused before any VM is made",
                    );
                }
            }
        }
    }
    if planned == 0 && !sets.is_empty() {
        out.skip(Check::MachineSet, "Prism Central could not be used");
    } else if sets.is_empty() {
        out.skip(Check::MachineSet, "no MachineSet in the namespace");
    }
}

fn subnets(facts: &Facts, out: &mut Out) {
    if facts.subnets.is_empty() {
        out.skip(Check::SubnetPool, "no subnet was looked at");
        return;
    }
    for subnet in &facts.subnets {
        let object = format!("subnet/{}", subnet.name);
        match &subnet.usage {
            SubnetUsage::Managed { total, free } if *free == 0 => out.find(
                Check::SubnetPool,
                Severity::Error,
                object,
                format!(
                    "every address of the subnet's IP pools is taken ({total} in the pools, 0 \
                     free): a new VM of {} gets no address and its create fails",
                    subnet.used_by.join(", ")
                ),
                "add a range to the subnet's IP pool in Prism Central, or free addresses (VMs \
                 deleted outside the cluster keep theirs until removed)",
            ),
            SubnetUsage::Managed { .. } => {}
            SubnetUsage::Unmanaged => out.skip(
                Check::SubnetPool,
                format!(
                    "subnet {} has no IP pool in Prism: its addresses come from a DHCP server \
                     outside Prism, which doctor cannot see",
                    subnet.name
                ),
            ),
            SubnetUsage::Unreadable(why) => out.skip(Check::SubnetPool, why.clone()),
        }
    }
}

/// A MachineHealthCheck deletes a Machine without a Node `nodeStartupTimeout` after its
/// `status.lastUpdated` (machine-api-operator `pkg/controller/machinehealthcheck`,
/// `needsRemediation`); a Windows join (first boot, Sysprep, cloudbase-init, WMCO's
/// configuration) is much longer than a Linux one (docs/windows.md, "A MachineHealthCheck for
/// Windows MachineSets").
fn health_checks(facts: &Facts, out: &mut Out) {
    let checks = match &facts.health_checks {
        Read::Found(checks) => checks,
        Read::Absent => return,
        Read::Unreadable(why) => {
            out.skip(Check::HealthCheck, why.clone());
            return;
        }
    };
    let Read::Found(sets) = &facts.machine_sets else {
        return;
    };
    for check in checks {
        let object = format!("MachineHealthCheck/{}", check.name);
        let timeout = match &check.node_startup_timeout {
            Ok(timeout) => *timeout,
            Err(text) => {
                out.find(
                    Check::HealthCheck,
                    Severity::Warning,
                    object,
                    format!("nodeStartupTimeout {text:?} is not a duration"),
                    "write it as a Go duration (90m, 1h30m)",
                );
                continue;
            }
        };
        // Zero turns the node startup check off.
        if timeout.is_zero() || timeout >= facts.windows_join_timeout {
            continue;
        }
        let windows: Vec<&str> = sets
            .iter()
            .filter(|set| set.windows && selects(&check.selector, &set.machine_labels))
            .map(|set| set.name.as_str())
            .collect();
        if windows.is_empty() {
            continue;
        }
        out.find(
            Check::HealthCheck,
            Severity::Warning,
            object,
            format!(
                "it deletes Windows Machines of {} that have no Node {}{} after their last \
                 status change: shorter than a Windows join may take (the provider's \
                 --windows-join-timeout is {}), so Machines about to join are replaced again \
                 and again",
                windows.join(", "),
                minutes(timeout),
                if timeout == DEFAULT_NODE_STARTUP_TIMEOUT {
                    " (the default)"
                } else {
                    ""
                },
                minutes(facts.windows_join_timeout)
            ),
            format!(
                "set spec.nodeStartupTimeout to {} or more, or give Windows MachineSets a \
                 MachineHealthCheck of their own (docs/windows.md)",
                minutes(facts.windows_join_timeout)
            ),
        );
    }
}

fn minutes(duration: Duration) -> String {
    let seconds = duration.as_secs();
    if seconds.is_multiple_of(60) {
        format!("{}m", seconds / 60)
    } else {
        format!("{seconds}s")
    }
}
