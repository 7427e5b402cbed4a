//! `nutanix-machine-controller`: the OpenShift machine-api provider for Nutanix.
//!
//! With no subcommand (or `run`) it runs the controller; `validate` checks a Machine against
//! Prism Central; `render` previews what a Machine or MachineSet would create
//! (dispatch in [`nutanix_machine_controller::cli_main`]).

fn main() -> std::process::ExitCode {
    nutanix_machine_controller::cli_main(std::env::args_os())
}
