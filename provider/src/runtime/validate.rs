//! `nutanix-machine-controller validate --machine FILE.yaml`: resolves every reference of a
//! Machine (or of a MachineSet's Machines) against Prism Central and prints exactly the errors
//! the controller would raise before creating its VM (`crate::controller::provision::
//! resolve_and_plan`, the same function), one per line, or what it would send.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::cli::PrismArgs;
use crate::actuator::Actuator;
use crate::actuator::credentials::PrismCredentials;
use crate::actuator::infrastructure::parse_infrastructure;
use crate::controller::provision::{random_admin_password, resolve_and_plan};
use crate::plan::vm::secret::UserData;
use crate::plan::vm::validate::UnreadUserData;
use crate::render::machine_from_yaml;

/// Flags of `validate`.
#[derive(Clone, Debug, Args)]
pub struct ValidateArgs {
    /// A Machine or MachineSet (machine.openshift.io/v1beta1) in YAML.
    #[arg(long, value_name = "FILE.yaml")]
    pub machine: PathBuf,
    /// The credentials Secret's `credentials` value (JSON list of basic_auth entries).
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

/// Exit code for validation errors (as `render`).
const EXIT_INVALID: u8 = 2;

fn read(path: &PathBuf) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// Runs `validate`: 0 when the Machine would be created, 2 with the errors, 1 when something
/// else failed (files, Prism unreachable is reported as unresolved errors like the controller).
pub async fn validate(args: ValidateArgs) -> ExitCode {
    match validate_inner(&args).await {
        Ok(code) => code,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn validate_inner(args: &ValidateArgs) -> Result<ExitCode, String> {
    let text = String::from_utf8(read(&args.machine)?)
        .map_err(|_| format!("{}: not UTF-8", args.machine.display()))?;
    let machine = machine_from_yaml(&text).map_err(|e| e.to_string())?;
    let credentials = PrismCredentials::parse(&read(&args.credentials_file)?)
        .map_err(|e| format!("{}: {e}", args.credentials_file.display()))?;
    let user_data = args
        .user_data
        .as_ref()
        .map(read)
        .transpose()?
        .map(UserData::new);
    let infrastructure = match &args.infrastructure {
        Some(path) => {
            let text = String::from_utf8(read(path)?)
                .map_err(|_| format!("{}: not UTF-8", path.display()))?;
            let value: serde_json::Value =
                serde_saphyr::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
            Some(parse_infrastructure(&value).map_err(|e| e.to_string())?)
        }
        None => None,
    };
    let endpoint = args
        .prism
        .prism_endpoint
        .clone()
        .or_else(|| {
            infrastructure
                .as_ref()
                .and_then(|i| i.prism_central.clone())
        })
        .ok_or("no Prism Central endpoint: give --prism-endpoint or --infrastructure")?;
    let actuator = Actuator::new(super::actuator_settings(&args.prism), None);
    let connection = actuator
        .connection(&endpoint, "--credentials", &credentials)
        .map_err(|e| e.to_string())?;
    let failure_domains = infrastructure
        .map(|info| info.failure_domains)
        .unwrap_or_default();
    let password = random_admin_password();
    let windows_sysprep = Some(&password);
    match resolve_and_plan(
        &connection,
        &machine,
        &failure_domains,
        user_data.as_ref(),
        UnreadUserData::NotChecked,
        windows_sysprep,
    )
    .await
    {
        Ok(plan) => {
            for warning in &plan.warnings {
                eprintln!("warning: {warning}");
            }
            let request = crate::plan::vm::request::build_request(&plan, "");
            let (method, path) = request.endpoint();
            println!("valid: {method} {path} for VM {:?}", plan.name);
            Ok(ExitCode::SUCCESS)
        }
        Err(errors) => {
            for line in errors.lines() {
                eprintln!("{line}");
            }
            Ok(ExitCode::from(EXIT_INVALID))
        }
    }
}
