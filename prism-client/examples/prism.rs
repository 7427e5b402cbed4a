//! `prism`: checks connectivity and credentials against Prism Central and reads what the provider reads.
//!
//! ```sh
//! cargo run -p prism-client --example prism -- --endpoint https://pc.example.com:9440 \
//!     [--ca-file CA.pem] [--insecure] [--allow-plain-http] --username admin --password-file pw.txt whoami
//! ```
//! The password comes from `--password-file` or `PRISM_PASSWORD`. JSON goes to stdout; errors go to stderr with
//! exit code 1 (2 for a usage error).

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use prism_client::v3::{Cluster, Image, Subnet, Vm};
use prism_client::{AuthMode, CaBundle, Client, ClientConfig, Credentials};
use serde_json::{Value, json};

/// Command-line arguments.
#[derive(Debug, Parser)]
#[command(
    name = "prism",
    about = "Check access to Nutanix Prism Central and read its inventory"
)]
pub struct Args {
    /// `host`, `host:port` or `https://host:port` (port 9440 by default).
    #[arg(long)]
    endpoint: String,
    /// PEM file of extra trusted CAs (added to the system roots).
    #[arg(long)]
    ca_file: Option<PathBuf>,
    /// Accept any server certificate (labs only).
    #[arg(long)]
    insecure: bool,
    /// Accept a plain `http://` endpoint, which sends the password in clear text (test servers only).
    #[arg(long)]
    allow_plain_http: bool,
    #[arg(long)]
    username: String,
    /// File holding the password (a trailing newline is ignored); else `PRISM_PASSWORD`.
    #[arg(long)]
    password_file: Option<PathBuf>,
    /// Log in once and use the session cookie instead of sending the password on every request.
    #[arg(long)]
    session: bool,
    /// Whole-request timeout.
    #[arg(long, default_value_t = 30)]
    timeout_seconds: u64,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The authenticated user (`GET /users/me`).
    Whoami,
    /// Every VM: uuid, name, state, power, cluster, IPs.
    ListVms,
    /// One VM as Prism returns it (guest customization secrets redacted).
    GetVm {
        uuid: String,
    },
    ListImages,
    ListSubnets,
    /// Every cluster, the Prism Central entity marked.
    ListClusters,
    /// v4 templates: extId and name.
    ListTemplates,
    /// A v3 task as Prism returns it.
    Task {
        uuid: String,
    },
}

/// Runs the tool; returns the process exit code.
pub async fn run(
    argv: impl IntoIterator<Item = String>,
    password_env: Option<String>,
    stdout: &mut impl Write,
    stderr: &mut impl Write,
) -> i32 {
    let args = match Args::try_parse_from(argv) {
        Ok(args) => args,
        Err(error) => {
            let out: &mut dyn Write = if error.use_stderr() { stderr } else { stdout };
            // Nothing better to do if the terminal itself is gone.
            let _ = write!(out, "{error}");
            return if error.use_stderr() { 2 } else { 0 };
        }
    };
    let password = match (&args.password_file, password_env) {
        (Some(path), _) => match std::fs::read_to_string(path) {
            Ok(text) => text.trim_end_matches(['\r', '\n']).to_owned(),
            Err(error) => {
                let _ = writeln!(
                    stderr,
                    "error: cannot read the password file {}: {error}",
                    path.display()
                );
                return 2;
            }
        },
        (None, Some(password)) => password,
        (None, None) => {
            let _ = writeln!(stderr, "error: give --password-file or set PRISM_PASSWORD");
            return 2;
        }
    };
    let client = match build_client(&args, password) {
        Ok(client) => client,
        Err(error) => {
            let _ = writeln!(stderr, "error: {error}");
            return 2;
        }
    };
    match execute(&client, &args.command).await {
        Ok(value) => match serde_json::to_string_pretty(&value) {
            Ok(text) => {
                let _ = writeln!(stdout, "{text}");
                0
            }
            Err(error) => {
                let _ = writeln!(stderr, "error: cannot print the result: {error}");
                1
            }
        },
        Err(error) => {
            let _ = writeln!(stderr, "error: {error}");
            1
        }
    }
}

fn build_client(args: &Args, password: String) -> Result<Client, Box<dyn std::error::Error>> {
    let mut config = ClientConfig::new(
        &args.endpoint,
        Credentials::basic(args.username.clone(), password),
    )?;
    config.ca_bundle = args.ca_file.clone().map(CaBundle::File);
    config.insecure = args.insecure;
    config.allow_plain_http = args.allow_plain_http;
    config.request_timeout = Duration::from_secs(args.timeout_seconds);
    if args.session {
        config.auth_mode = AuthMode::Session;
    }
    Ok(Client::new(config)?)
}

async fn execute(client: &Client, command: &Command) -> Result<Value, prism_client::Error> {
    Ok(match command {
        Command::Whoami => to_json(&client.whoami().await?),
        Command::ListVms => Value::Array(client.list_all::<Vm>().await?.iter().map(vm_summary).collect()),
        Command::GetVm { uuid } => redact(to_json(&client.get_vm(uuid).await?)),
        Command::ListImages => Value::Array(
            client
                .list_all::<Image>()
                .await?
                .iter()
                .map(|image| {
                    json!({
                        "uuid": image.uuid(),
                        "name": image.name(),
                        "image_type": image.spec.as_ref().and_then(|spec| spec.resources.as_ref())
                            .and_then(|resources| resources.image_type.clone()),
                        "state": image.status.as_ref().and_then(|status| status.state.as_ref()).map(ToString::to_string),
                    })
                })
                .collect(),
        ),
        Command::ListSubnets => Value::Array(
            client
                .list_all::<Subnet>()
                .await?
                .iter()
                .map(|subnet| {
                    let resources = subnet.spec.as_ref().and_then(|spec| spec.resources.as_ref());
                    json!({
                        "uuid": subnet.uuid(),
                        "name": subnet.name(),
                        "cluster_uuid": subnet.cluster_uuid(),
                        "subnet_type": resources.and_then(|resources| resources.subnet_type.clone()),
                        "vlan_id": resources.and_then(|resources| resources.vlan_id),
                    })
                })
                .collect(),
        ),
        Command::ListClusters => Value::Array(
            client
                .list_all::<Cluster>()
                .await?
                .iter()
                .map(|cluster| {
                    json!({
                        "uuid": cluster.uuid(),
                        "name": cluster.name(),
                        "prism_central": cluster.is_prism_central(),
                        "services": cluster.services(),
                    })
                })
                .collect(),
        ),
        Command::ListTemplates => Value::Array(
            client
                .list_all_templates()
                .await?
                .iter()
                .map(|template| json!({"ext_id": template.ext_id, "name": template.template_name}))
                .collect(),
        ),
        Command::Task { uuid } => to_json(&client.get_task_raw(uuid).await?),
    })
}

fn vm_summary(vm: &Vm) -> Value {
    let status = vm.status.as_ref();
    let resources = status.and_then(|status| status.resources.as_ref());
    json!({
        "uuid": vm.uuid(),
        "name": vm.name(),
        "state": vm.state().map(ToString::to_string),
        "power_state": resources.and_then(|resources| resources.power_state.as_ref()).map(ToString::to_string),
        "cluster": status.and_then(|status| status.cluster_reference.as_ref())
            .map(|cluster| cluster.name.clone().unwrap_or_else(|| cluster.uuid.clone())),
        "ip_addresses": resources.map(|resources| resources.ip_addresses().collect::<Vec<_>>()).unwrap_or_default(),
    })
}

fn to_json(value: &impl serde::Serialize) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

/// Keys whose values are secrets a VM may carry (user data, meta data, unattend.xml, sysprep key values).
const SECRET_KEYS: &[&str] = &[
    "user_data",
    "meta_data",
    "unattend_xml",
    "custom_key_values",
];

pub fn redact(mut value: Value) -> Value {
    match &mut value {
        Value::Object(fields) => {
            for (key, field) in fields.iter_mut() {
                if SECRET_KEYS.contains(&key.as_str()) {
                    *field = Value::String("<redacted>".to_owned());
                } else {
                    *field = redact(field.take());
                }
            }
        }
        Value::Array(items) => {
            for item in items.iter_mut() {
                *item = redact(item.take());
            }
        }
        _ => {}
    }
    value
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let code = run(
        std::env::args(),
        std::env::var("PRISM_PASSWORD").ok(),
        &mut std::io::stdout(),
        &mut std::io::stderr(),
    )
    .await;
    std::process::ExitCode::from(u8::try_from(code).unwrap_or(1))
}
