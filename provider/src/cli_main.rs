//! The command line's dispatch, shared by the `nutanix-machine-controller` binary and by
//! binaries that run the controller as a subprocess of their own (the sandbox, the e2e tests).
//!
//! With no subcommand (or `run`) it runs the controller; `validate` checks a Machine against
//! Prism Central; `render` previews what a Machine or MachineSet would create; `doctor` checks a
//! cluster and its Prism Central.

use std::ffi::OsString;
use std::path::Path;
use std::process::ExitCode;

use clap::Parser;

use crate::render::{RenderError, render};
use crate::runtime::cli::{Cli, Command, RenderArgs, RunArgs};
use crate::runtime::doctor::doctor;
use crate::runtime::validate::validate;
use crate::runtime::{EXIT_LEASE_LOST, RuntimeError, init_command_logging, init_logging, run};

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

fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
}

fn run_controller(args: RunArgs) -> ExitCode {
    init_logging(args.verbosity, args.log_format == "json");
    let outcome = match runtime() {
        Ok(runtime) => runtime.block_on(run(args)),
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error @ RuntimeError::LeaseLost(_)) => {
            tracing::error!(%error, "stopping");
            ExitCode::from(EXIT_LEASE_LOST)
        }
        Err(error) => {
            tracing::error!(%error, "stopping");
            ExitCode::FAILURE
        }
    }
}

/// Runs the command line `args` (the first item is the program name, as in `std::env::args_os`)
/// and returns the process's exit status. `main` is this call; other binaries (the sandbox, the
/// end-to-end tests) call it to run the controller as a process of their own.
pub fn cli_main(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(error) => {
            // What `Cli::parse` does, without exiting: help and version on stdout with status 0,
            // usage errors on stderr with clap's status 2.
            let _ = error.print();
            return ExitCode::from(u8::try_from(error.exit_code()).unwrap_or(EXIT_INVALID));
        }
    };
    match cli.command {
        None => run_controller(cli.run),
        Some(Command::Run(args)) => run_controller(*args),
        Some(Command::Render(args)) => run_render(&args),
        Some(Command::Doctor(args)) => {
            init_command_logging();
            match runtime() {
                Ok(runtime) => runtime.block_on(doctor(*args)),
                Err(error) => {
                    eprintln!("error: cannot start the async runtime: {error}");
                    ExitCode::FAILURE
                }
            }
        }
        Some(Command::Validate(args)) => {
            init_command_logging();
            match runtime() {
                Ok(runtime) => runtime.block_on(validate(*args)),
                Err(error) => {
                    eprintln!("error: cannot start the async runtime: {error}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
