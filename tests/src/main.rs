//! `e2e-controller`: the Nutanix machine controller, built as a binary of the end-to-end test
//! package so its tests can start it as a process (`CARGO_BIN_EXE_e2e-controller`). Same command
//! line as `nutanix-machine-controller`.

fn main() -> std::process::ExitCode {
    nutanix_machine_controller::cli_main(std::env::args_os())
}
