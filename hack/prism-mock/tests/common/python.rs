//! Python for the tests that run Nutanix's official SDKs: a venv under the target directory with
//! the SDKs installed by package name.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

/// Runs a command to its end within `limit`; `None` when it cannot start, fails or takes longer.
pub async fn run(program: &Path, args: &[&str], limit: Duration) -> Option<std::process::Output> {
    let child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    match tokio::time::timeout(limit, child).await {
        Ok(Ok(output)) if output.status.success() => Some(output),
        _ => None,
    }
}

/// The interpreter of the venv `name` under the target directory with `packages` installed by
/// package name (both SDKs importable), or the reason the test cannot run here.
pub async fn sdk_python(name: &str, packages: &[&str]) -> Result<PathBuf, String> {
    let venv = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let python = venv.join("bin").join("python");
    if !python.exists() {
        let venv_arg = venv.to_string_lossy().into_owned();
        run(
            Path::new("python3"),
            &["-m", "venv", &venv_arg],
            Duration::from_secs(120),
        )
        .await
        .ok_or("python3 with its venv module is not available")?;
    }
    let import = ["-c", "import ntnx_vmm_py_client, ntnx_prism_py_client"];
    if run(&python, &import, Duration::from_secs(60))
        .await
        .is_some()
    {
        return Ok(python);
    }
    let mut install = vec![
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
    ];
    install.extend(packages);
    run(&python, &install, Duration::from_secs(600))
        .await
        .ok_or_else(|| {
            format!(
                "{} could not be installed (no network?)",
                packages.join(" and ")
            )
        })?;
    Ok(python)
}
