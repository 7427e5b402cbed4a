//! The crate stays pure: no async runtime, Kubernetes client, HTTP client or TLS among its normal
//! dependencies, direct or transitive. Asked of `cargo tree` for this package alone, so the features
//! other workspace members turn on (the controller's kube client) do not count.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use std::process::Command;

/// Crates that mean I/O: a runtime, a client, a server, TLS.
const FORBIDDEN: &[&str] = &[
    "tokio",
    "mio",
    "hyper",
    "h2",
    "reqwest",
    "tower",
    "axum",
    "rustls",
    "kube-client",
    "kube-runtime",
    "prism-client",
];

#[test]
fn no_io_crate_is_a_dependency() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = match Command::new(cargo)
        .args([
            "tree",
            "--package",
            env!("CARGO_PKG_NAME"),
            "--edges",
            "normal",
            "--prefix",
            "none",
            "--format",
            "{lib}",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
    {
        Ok(output) => output,
        Err(error) => {
            eprintln!("skipped: cannot run cargo tree: {error}");
            return;
        }
    };
    assert!(
        output.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let tree = String::from_utf8_lossy(&output.stdout);
    // One library name per line; a repeated one ends in " (*)".
    let crates: Vec<&str> = tree
        .lines()
        .map(|line| line.trim().trim_end_matches(" (*)"))
        .collect();
    assert!(
        crates.contains(&"nutanix_machine_plan"),
        "cargo tree did not list this crate: {tree}"
    );
    let found: Vec<&str> = FORBIDDEN
        .iter()
        .copied()
        .filter(|name| crates.contains(&name.replace('-', "_").as_str()))
        .collect();
    assert!(
        found.is_empty(),
        "I/O crates among the dependencies: {found:?}"
    );
}
