//! `nutanix-machine-controller`: the OpenShift machine-api provider for Nutanix.
//!
//! Subcommands: `render` previews what a Machine or MachineSet would create. The controller
//! itself (`run`, which will be the default) comes with the runtime.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use nutanix_machine_controller::render::{RenderError, render};

#[derive(Debug, Parser)]
#[command(
    name = "nutanix-machine-controller",
    version,
    about = "OpenShift machine-api provider for Nutanix"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the Prism request a Machine or MachineSet would send (and, for Windows with Sysprep,
    /// its unattend.xml), without contacting Prism.
    Render(RenderArgs),
}

#[derive(Debug, Args)]
struct RenderArgs {
    /// A Machine or MachineSet (machine.openshift.io/v1beta1) in YAML.
    #[arg(long, value_name = "FILE.yaml")]
    machine: PathBuf,
    /// The user-data Secret's `userData` content.
    #[arg(long, value_name = "FILE")]
    user_data: Option<PathBuf>,
    /// Prism lookups to apply: names to UUIDs, sizes, categories, GPUs, failure domains (JSON).
    #[arg(long, value_name = "FILE.json")]
    resolve: Option<PathBuf>,
}

/// Exit code for validation errors, as documented.
const EXIT_INVALID: u8 = 2;

fn read(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))
}

fn run_render(args: &RenderArgs) -> ExitCode {
    let inputs = (|| {
        let machine = String::from_utf8(read(&args.machine)?)
            .map_err(|_| format!("{}: not UTF-8", args.machine.display()))?;
        let user_data = args.user_data.as_deref().map(read).transpose()?;
        let resolve = match args.resolve.as_deref().map(read).transpose()? {
            Some(bytes) => Some(
                String::from_utf8(bytes).map_err(|_| "the resolve file is not UTF-8".to_owned())?,
            ),
            None => None,
        };
        Ok::<_, String>((machine, user_data, resolve))
    })();
    let (machine, user_data, resolve) = match inputs {
        Ok(inputs) => inputs,
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::FAILURE;
        }
    };
    match render(&machine, user_data.as_deref(), resolve.as_deref()) {
        Ok(rendered) => {
            for warning in &rendered.warnings {
                eprintln!("warning: {warning}");
            }
            println!("{}", rendered.request_json);
            if let Some(xml) = &rendered.unattend_xml {
                println!("{xml}");
            }
            ExitCode::SUCCESS
        }
        Err(RenderError::Invalid(errors)) => {
            for line in errors.lines() {
                eprintln!("{line}");
            }
            ExitCode::from(EXIT_INVALID)
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match &cli.command {
        Some(Command::Render(args)) => run_render(args),
        None => {
            eprintln!(
                "nutanix-machine-controller: the controller itself is not built yet; see `nutanix-machine-controller help`"
            );
            ExitCode::from(EXIT_INVALID)
        }
    }
}
