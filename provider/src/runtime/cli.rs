//! Command-line flags: the ones the machine-api-operator passes to a provider's
//! `machine-controller` container (accepted and honoured), and ours.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args, Parser, Subcommand};
use ipnet::IpNet;
use prism_client::quote::quoted;

/// The command line: no subcommand (or `run`) runs the controller.
#[derive(Debug, Parser)]
#[command(
    name = "nutanix-machine-controller",
    version,
    about = "OpenShift machine-api provider for Nutanix",
    args_conflicts_with_subcommands = true,
    // Go's flag package lets a repeated flag win; so do we.
    args_override_self = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the controller (the default).
    Run(Box<RunArgs>),
    /// Resolve a Machine's references against Prism Central and print the errors the controller
    /// would raise (exit 2), or what it would create (exit 0).
    Validate(Box<ValidateArgs>),
    /// Print the Prism request a Machine or MachineSet would send (and, for Windows with Sysprep,
    /// its unattend.xml), without contacting Prism. The output holds the user data given with
    /// --user-data (base64, in the request or the unattend.xml): treat it as the Secret it came
    /// from.
    Render(RenderArgs),
    /// Check a cluster and its Prism Central for what keeps Windows (and other) MachineSets
    /// from working: the hybrid overlay, WMCO and its Secrets, every MachineSet's references
    /// and choices, subnet address pools, MachineHealthCheck timeouts. Prints each finding with
    /// its fix (exit 2 when one is an error).
    Doctor(Box<DoctorArgs>),
}

#[derive(Debug, Args)]
pub struct RenderArgs {
    /// A Machine or MachineSet (machine.openshift.io/v1beta1) in YAML.
    #[arg(long, value_name = "FILE.yaml")]
    pub machine: PathBuf,
    /// The user-data Secret's `userData` content; printed to stdout in the request (base64),
    /// as Prism would receive it.
    #[arg(long, value_name = "FILE")]
    pub user_data: Option<PathBuf>,
    /// Prism lookups to apply: names to UUIDs, sizes, categories, GPUs, failure domains (JSON).
    #[arg(long, value_name = "FILE.json")]
    pub resolve: Option<PathBuf>,
}

/// Flags of `validate`.
#[derive(Clone, Debug, Args)]
pub struct ValidateArgs {
    /// A Machine or MachineSet (machine.openshift.io/v1beta1) in YAML.
    #[arg(long, value_name = "FILE.yaml")]
    pub machine: PathBuf,
    /// The credentials Secret's `credentials` value (JSON list of basic_auth entries), or the
    /// Secret's manifest (YAML or JSON, with `data.credentials` or `stringData.credentials`).
    #[arg(long, value_name = "FILE")]
    pub credentials_file: PathBuf,
    /// The user-data Secret's `userData` content.
    #[arg(long, value_name = "FILE")]
    pub user_data: Option<PathBuf>,
    /// `Infrastructure/cluster` in YAML, for its failure domains (and its Prism Central
    /// endpoint when --prism-endpoint is not given).
    #[arg(long, value_name = "FILE.yaml")]
    pub infrastructure: Option<PathBuf>,
    #[command(flatten)]
    pub prism: PrismArgs,
}

/// Flags of `doctor`.
#[derive(Clone, Debug, Args)]
pub struct DoctorArgs {
    /// The cluster's kubeconfig (else in-cluster or `$KUBECONFIG`): an administrator's, since
    /// doctor reads WMCO's namespace and the cluster's network configuration.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The namespace of the MachineSets and of WMCO's `windows-user-data`.
    #[arg(
        long,
        value_name = "NAMESPACE",
        default_value = "openshift-machine-api"
    )]
    pub namespace: String,
    /// `table` for people, `json` for scripts.
    #[arg(long, value_name = "FORMAT", default_value = "table", value_parser = ["table", "json"])]
    pub output: String,
    /// The controller's `--windows-join-timeout`: MachineHealthChecks over Windows Machines
    /// should wait at least this long for a Node.
    #[arg(long, value_name = "DURATION", default_value = "90m", value_parser = parse_duration)]
    pub windows_join_timeout: Duration,
    #[command(flatten)]
    pub prism: PrismArgs,
}

/// Flags of the controller (`nutanix-machine-controller` and `nutanix-machine-controller run`).
#[derive(Clone, Debug, Args)]
pub struct RunArgs {
    // ---- passed by the machine-api-operator ----
    /// Run leader election; only the leader acts.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", default_value = "false", action = ArgAction::Set)]
    pub leader_elect: bool,
    /// Lease duration (Go duration, e.g. 120s): how long other replicas wait after the last
    /// change of the Lease they saw before taking it.
    #[arg(long, value_name = "DURATION", default_value = "120s", value_parser = parse_duration)]
    pub leader_elect_lease_duration: Duration,
    /// How long after its last successful renewal the leader stops acting; shorter than the lease
    /// duration (default: 11/12 of it, 110s of 120s, as the Go provider).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub leader_elect_renew_deadline: Option<Duration>,
    /// How often the leader renews and candidates try (default: a sixth of the lease duration,
    /// between 1s and 20s; 20s of 120s, as the Go provider).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub leader_elect_retry_period: Option<Duration>,
    /// How long any request to the API server but a watch may wait for its answer (kubectl's
    /// `--request-timeout`); a request past it fails and is retried as any failed request.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub kube_request_timeout: Duration,
    /// Namespace of the Lease (default: --namespace, else the pod's namespace).
    #[arg(long, value_name = "NAMESPACE")]
    pub leader_elect_resource_namespace: Option<String>,
    /// Watch Machines in this namespace only (default: all namespaces).
    #[arg(long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// Log verbosity as klog counts it: up to 3 info, 4-5 debug, 6 and more trace.
    #[arg(long = "v", value_name = "LEVEL", default_value_t = 2)]
    pub verbosity: u8,
    /// Accepted for compatibility; logs always go to stderr.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", default_value = "true", action = ArgAction::Set)]
    pub logtostderr: bool,
    /// Feature gates, `Name=true|false,...`; `MachineAPIMigration` is honoured.
    #[arg(long, value_name = "GATES", default_value = "", value_parser = parse_feature_gates)]
    pub feature_gates: FeatureGates,
    /// Address of the metrics endpoint (`:8081` for every IPv4 and IPv6 address, `host:port`;
    /// `0` disables it).
    #[arg(long, value_name = "ADDRESS", default_value = ":8081")]
    pub metrics_bind_address: String,
    /// Address of `/healthz` and `/readyz` (`:9440` for every IPv4 and IPv6 address,
    /// `host:port`; `0` disables them).
    #[arg(long, value_name = "ADDRESS", default_value = ":9440")]
    pub health_addr: String,
    /// The cluster TLS profile's minimum version (`VersionTLS12`, ...), which MAO passes to the
    /// TLS servers of some platforms' machine controllers (`pkg/operator/sync.go`,
    /// `getTLSArgs`). Accepted so that MAO passing it to Nutanix's cannot crash-loop this one;
    /// this process serves no TLS (its metrics are served over TLS by MAO's kube-rbac-proxy,
    /// its probes are plain HTTP), so it only checks and logs it.
    #[arg(long, value_name = "VERSION")]
    pub tls_min_version: Option<String>,
    /// The cluster TLS profile's cipher suites (IANA names), as `--tls-min-version`.
    #[arg(long, value_name = "SUITE,...", value_delimiter = ',')]
    pub tls_cipher_suites: Vec<String>,

    // ---- ours ----
    /// Kubeconfig to use (default: in-cluster, else $KUBECONFIG or ~/.kube/config).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    #[command(flatten)]
    pub prism: PrismArgs,
    /// Machines reconciled at once. `--max-concurrent-reconciles`, MAO's name for the same
    /// (it passes `=10` to the Azure and GCP machine controllers, `pkg/operator/sync.go`), is
    /// taken as this.
    #[arg(
        long,
        alias = "max-concurrent-reconciles",
        value_name = "N",
        default_value_t = 10
    )]
    pub concurrency: u16,
    /// Addresses in these networks are never reported on Machines (comma-separated CIDRs:
    /// cluster, service and hybrid-overlay networks).
    #[arg(long, value_name = "CIDR,...", value_delimiter = ',')]
    pub excluded_address_cidrs: Vec<IpNet>,
    /// How soon a running Prism task, a VM being deleted or a Node being drained is looked at
    /// again.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub poll_interval: Duration,
    /// How soon a Machine waiting for its addresses or its Node is looked at again.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub requeue_interval: Duration,
    /// Age at which the shared VM inventory is listed again; Running Machines are checked
    /// against it this often.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    pub inventory_refresh_interval: Duration,
    /// How long name → UUID lookups are cached.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_duration)]
    pub lookup_cache_ttl: Duration,
    /// Log format.
    #[arg(long, value_name = "FORMAT", default_value = "text", value_parser = ["text", "json"])]
    pub log_format: String,
    /// A Windows Machine with no Node linked this long after its creation gets the
    /// `WindowsJoin` reason `JoinTimedOut`.
    #[arg(long, value_name = "DURATION", default_value = "90m", value_parser = parse_duration)]
    pub windows_join_timeout: Duration,
    /// How often the leader runs `doctor`'s checks (the first time this long after it leads)
    /// and publishes their findings as the metric `nutanix_doctor_findings` (`0` turns this
    /// off).
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = parse_duration)]
    pub doctor_interval: Duration,
    /// Mark a Windows Machine whose join timed out Failed, so that it is replaced.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", default_value = "false", action = ArgAction::Set)]
    pub fail_timed_out_windows_joins: bool,
}

/// How to reach Prism Central (shared by `run`, `validate` and `doctor`).
#[derive(Clone, Debug, Args)]
pub struct PrismArgs {
    /// Prism Central endpoint (`https://HOST:PORT`); overrides Infrastructure/cluster.
    #[arg(long, value_name = "URL")]
    pub prism_endpoint: Option<String>,
    /// Extra CA certificates (PEM) trusted for Prism Central.
    #[arg(long, value_name = "FILE")]
    pub prism_ca_file: Option<PathBuf>,
    /// Accept any Prism Central certificate (labs only).
    #[arg(long)]
    pub insecure_skip_tls_verify: bool,
    /// Accept a plain `http://` --prism-endpoint, over which the Prism credentials cross the
    /// network in clear text (a lab without TLS only; refused otherwise).
    #[arg(long)]
    pub prism_allow_plain_http: bool,
    /// Requests per second to Prism Central (one token bucket per endpoint and credentials).
    #[arg(long, value_name = "QPS", default_value_t = 20.0)]
    pub prism_rate_limit: f64,
    /// Requests allowed at once after a quiet period.
    #[arg(long, value_name = "N", default_value_t = 40)]
    pub prism_burst: u32,
}

/// The TLS minimum versions of an OpenShift TLS profile (openshift/api `config/v1`
/// `TLSProtocolVersion`).
pub const TLS_VERSIONS: [&str; 4] = [
    "VersionTLS10",
    "VersionTLS11",
    "VersionTLS12",
    "VersionTLS13",
];

impl RunArgs {
    /// What the start-up log says of the TLS flags: `None` when none was given.
    pub fn tls_flags_note(&self) -> Option<String> {
        if self.tls_min_version.is_none() && self.tls_cipher_suites.is_empty() {
            return None;
        }
        let version = match self.tls_min_version.as_deref() {
            Some(version) if TLS_VERSIONS.contains(&version) => version.to_owned(),
            Some(other) => format!("{:?} (not a TLS profile version)", quoted(other)),
            None => "unset".to_owned(),
        };
        Some(format!(
            "--tls-min-version {version} and {} cipher suites accepted; this controller serves no TLS, so they change nothing",
            self.tls_cipher_suites.len()
        ))
    }
}

/// Feature gates by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FeatureGates(pub BTreeMap<String, bool>);

/// The gate that pauses Machines owned by the Cluster API.
pub const MACHINE_API_MIGRATION: &str = "MachineAPIMigration";

impl FeatureGates {
    pub fn enabled(&self, gate: &str) -> bool {
        self.0.get(gate).copied().unwrap_or(false)
    }
}

/// Parses `A=true,B=false` (library-go's format).
pub fn parse_feature_gates(text: &str) -> Result<FeatureGates, String> {
    let mut gates = BTreeMap::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, value) = entry
            .split_once('=')
            .ok_or_else(|| format!("{entry:?} is not Name=true|false"))?;
        let value = value
            .trim()
            .parse::<bool>()
            .map_err(|_| format!("{entry:?}: the value must be true or false"))?;
        gates.insert(name.trim().to_owned(), value);
    }
    Ok(FeatureGates(gates))
}

/// Parses a Go duration: a sequence of decimal numbers with units `ns`, `us`, `µs`, `ms`, `s`,
/// `m`, `h` (`120s`, `1m30s`, `1.5h`); `0` alone is zero.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    if text.is_empty() {
        return Err("empty duration".into());
    }
    let mut rest = text;
    let mut total = 0f64;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("{text:?}: missing unit (ns, us, ms, s, m, h)"))?;
        let (number, after) = rest.split_at(number_end);
        let value: f64 = number
            .parse()
            .map_err(|_| format!("{text:?}: {number:?} is not a number"))?;
        let unit_end = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_end);
        let seconds = match unit {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            other => return Err(format!("{text:?}: unknown unit {other:?}")),
        };
        total += value * seconds;
        rest = next;
    }
    Duration::try_from_secs_f64(total).map_err(|e| format!("{text:?}: {e}"))
}

/// Where an HTTP endpoint listens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListenAddress {
    /// `:PORT`: every address of both families, as Go's `net.Listen("tcp", ":PORT")` listens
    /// (one IPv6 socket that also takes IPv4, or IPv4 alone on a host without IPv6).
    AnyFamily(u16),
    /// `HOST:PORT`: this address only (`0.0.0.0:PORT` is IPv4 only, `[::]:PORT` as the system
    /// sets IPv6 sockets up).
    Socket(SocketAddr),
}

/// A Go-style listen address: `:PORT` (all interfaces, IPv4 and IPv6), `HOST:PORT`; `0` or
/// empty disables.
pub fn parse_listen_address(text: &str) -> Result<Option<ListenAddress>, String> {
    let text = text.trim();
    if text.is_empty() || text == "0" {
        return Ok(None);
    }
    let parsed = match text.strip_prefix(':') {
        Some(port) => port.parse().map(ListenAddress::AnyFamily).ok(),
        None => text.parse().map(ListenAddress::Socket).ok(),
    };
    parsed.map(Some).ok_or_else(|| {
        format!(
            "{:?} is not an address such as :9440, 127.0.0.1:9440 or [::1]:9440",
            quoted(text)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_machine_api_operators_arguments_parse() {
        // As MAO's pkg/operator/sync.go starts a provider's machine-controller container.
        let cli = Cli::try_parse_from([
            "nutanix-machine-controller",
            "--logtostderr=true",
            "--v=3",
            "--leader-elect=true",
            "--leader-elect-lease-duration=120s",
            "--namespace=openshift-machine-api",
            "--feature-gates=MachineAPIMigration=true,OtherGate=false",
            "--metrics-bind-address=:8081",
            "--health-addr=:9440",
        ])
        .unwrap();
        assert!(cli.command.is_none());
        let run = cli.run;
        assert!(run.leader_elect && run.logtostderr);
        assert_eq!(run.verbosity, 3);
        assert_eq!(run.leader_elect_lease_duration, Duration::from_secs(120));
        assert_eq!(run.namespace.as_deref(), Some("openshift-machine-api"));
        assert!(run.feature_gates.enabled(MACHINE_API_MIGRATION));
        assert_eq!(run.metrics_bind_address, ":8081");

        let defaults = Cli::try_parse_from(["nutanix-machine-controller", "run"]).unwrap();
        let Some(Command::Run(run)) = defaults.command else {
            panic!("run subcommand")
        };
        assert!(!run.leader_elect);
        // Derived from the lease duration unless given (runtime/leader.rs).
        assert_eq!(
            (
                run.leader_elect_renew_deadline,
                run.leader_elect_retry_period
            ),
            (None, None)
        );
        assert_eq!(
            run.kube_request_timeout,
            crate::runtime::kube_client::DEFAULT_REQUEST_TIMEOUT
        );
        assert_eq!(run.health_addr, ":9440");
        assert_eq!(run.requeue_interval, Duration::from_secs(30));
        assert_eq!(run.windows_join_timeout, Duration::from_secs(90 * 60));
        assert_eq!(run.doctor_interval, Duration::from_secs(10 * 60));
        assert!(!run.fail_timed_out_windows_joins);

        let bare_flag =
            Cli::try_parse_from(["nutanix-machine-controller", "--leader-elect"]).unwrap();
        assert!(bare_flag.run.leader_elect);

        let join = Cli::try_parse_from([
            "nutanix-machine-controller",
            "--windows-join-timeout=2h",
            "--fail-timed-out-windows-joins",
        ])
        .unwrap();
        assert_eq!(join.run.windows_join_timeout, Duration::from_secs(7200));
        assert!(join.run.fail_timed_out_windows_joins);
    }

    /// Every flag MAO passes to any platform's machine controller, on its main branch and its
    /// release-4.21 and release-4.20 branches (`pkg/operator/sync.go`, `newContainers`: the
    /// common arguments and feature gates; `--max-concurrent-reconciles=10` for Azure and GCP;
    /// on main, `getTLSArgs` of the cluster's TLS profile for BareMetal, here the Intermediate
    /// profile's), parses: were MAO to pass one of them to Nutanix's next, this controller
    /// would not exit on it.
    #[test]
    fn every_flag_mao_passes_to_any_platforms_machine_controller_parses() {
        let common = [
            "--logtostderr=true",
            "--v=3",
            "--leader-elect=true",
            "--leader-elect-lease-duration=120s",
            "--namespace=openshift-machine-api",
            "--feature-gates=AWSDedicatedHosts=false,AzureWorkloadIdentity=true,MachineAPIMigration=false,VSphereHostVMGroupZonal=false",
        ];
        let per_platform: [&[&str]; 3] = [
            &[],
            &["--max-concurrent-reconciles=10"],
            &[
                "--tls-cipher-suites=TLS_AES_128_GCM_SHA256,TLS_AES_256_GCM_SHA384,TLS_CHACHA20_POLY1305_SHA256,TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
                "--tls-min-version=VersionTLS12",
            ],
        ];
        for extra in per_platform {
            let args = ["nutanix-machine-controller"]
                .into_iter()
                .chain(common)
                .chain(extra.iter().copied());
            let cli = Cli::try_parse_from(args).unwrap_or_else(|e| panic!("{extra:?}: {e}"));
            assert!(cli.command.is_none());
        }

        let reconciles = Cli::try_parse_from([
            "nutanix-machine-controller",
            "--max-concurrent-reconciles=4",
        ])
        .unwrap();
        assert_eq!(
            reconciles.run.concurrency, 4,
            "MAO's name for --concurrency"
        );

        let tls = Cli::try_parse_from([
            "nutanix-machine-controller",
            "--tls-min-version=VersionTLS13",
            "--tls-cipher-suites=A,B",
        ])
        .unwrap();
        assert_eq!(tls.run.tls_cipher_suites, ["A", "B"]);
        let note = tls.run.tls_flags_note().unwrap();
        assert!(
            note.contains("VersionTLS13") && note.contains("2 cipher suites"),
            "{note}"
        );
        let odd =
            Cli::try_parse_from(["nutanix-machine-controller", "--tls-min-version=TLS9"]).unwrap();
        assert!(
            odd.run
                .tls_flags_note()
                .unwrap()
                .contains("not a TLS profile version")
        );
        let none = Cli::try_parse_from(["nutanix-machine-controller"]).unwrap();
        assert_eq!(none.run.tls_flags_note(), None);
    }

    #[test]
    fn render_says_in_its_help_that_it_prints_the_user_data() {
        use clap::CommandFactory;
        let mut command = Cli::command();
        let render = command
            .find_subcommand_mut("render")
            .expect("a render subcommand");
        let help = render.render_long_help().to_string();
        assert!(
            help.contains("The output holds the user data given with --user-data"),
            "{help}"
        );
        assert!(help.contains("printed to stdout"), "{help}");
    }

    #[test]
    fn go_durations() {
        let cases = [
            ("120s", 120_000),
            ("1m30s", 90_000),
            ("1.5h", 5_400_000),
            ("500ms", 500),
            ("0", 0),
            ("2m", 120_000),
        ];
        for (text, millis) in cases {
            assert_eq!(
                parse_duration(text).unwrap(),
                Duration::from_millis(millis),
                "{text}"
            );
        }
        for bad in ["", "10", "s", "10x", "1..5s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn feature_gates() {
        let gates = parse_feature_gates("MachineAPIMigration=true, Other=false").unwrap();
        assert!(gates.enabled(MACHINE_API_MIGRATION));
        assert!(!gates.enabled("Other"));
        assert!(!gates.enabled("Absent"));
        assert_eq!(parse_feature_gates("").unwrap(), FeatureGates::default());
        assert!(parse_feature_gates("Gate").is_err());
        assert!(parse_feature_gates("Gate=yes").is_err());
    }

    #[test]
    fn listen_addresses() {
        assert_eq!(
            parse_listen_address(":9440").unwrap(),
            Some(ListenAddress::AnyFamily(9440))
        );
        assert_eq!(
            parse_listen_address("127.0.0.1:0").unwrap(),
            Some(ListenAddress::Socket("127.0.0.1:0".parse().unwrap()))
        );
        assert_eq!(
            parse_listen_address("[::1]:8081").unwrap(),
            Some(ListenAddress::Socket("[::1]:8081".parse().unwrap()))
        );
        assert_eq!(parse_listen_address("0").unwrap(), None);
        assert_eq!(parse_listen_address("").unwrap(), None);
        for bad in ["localhost", ":http", ":65536", "[::1]"] {
            assert!(parse_listen_address(bad).is_err(), "{bad}");
        }
    }
}
