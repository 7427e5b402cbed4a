//! Contract test: the `prism` example's commands against `hack/prism-mock` over HTTPS, trusting only the
//! CA the mock generated. The mock was written to the same wire contract independently of this crate,
//! so this is where a mismatch between the two shows up.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

#[path = "../examples/prism.rs"]
#[allow(dead_code)] // its `main` is not called here
mod prism_cli;

use prism_mock::{MockConfig, MockPrism, RunningMock};
use serde_json::Value;

struct Output {
    code: i32,
    stdout: String,
    stderr: String,
}

struct Fixture {
    mock: RunningMock,
    ca_file: tempfile::NamedTempFile,
    password_file: tempfile::NamedTempFile,
}

impl Fixture {
    async fn start() -> Self {
        let mock = MockPrism::start(MockConfig::default()).await.unwrap();
        let ca_file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(ca_file.path(), mock.ca_pem().expect("HTTPS by default")).unwrap();
        let password_file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(
            password_file.path(),
            format!("{}\n", mock.credentials().password),
        )
        .unwrap();
        Self {
            mock,
            ca_file,
            password_file,
        }
    }

    async fn prism(&self, extra: &[&str], command: &[&str]) -> Output {
        let mut argv: Vec<String> = vec![
            "prism".into(),
            "--endpoint".into(),
            self.mock.base_url().into(),
            "--ca-file".into(),
            self.ca_file.path().display().to_string(),
            "--username".into(),
            self.mock.credentials().username.clone(),
            "--password-file".into(),
            self.password_file.path().display().to_string(),
        ];
        argv.extend(extra.iter().map(|a| (*a).to_owned()));
        argv.extend(command.iter().map(|a| (*a).to_owned()));
        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        let code = prism_cli::run(argv, None, &mut stdout, &mut stderr).await;
        Output {
            code,
            stdout: String::from_utf8(stdout).unwrap(),
            stderr: String::from_utf8(stderr).unwrap(),
        }
    }

    async fn json(&self, extra: &[&str], command: &[&str]) -> Value {
        let out = self.prism(extra, command).await;
        assert_eq!(out.code, 0, "{command:?} {extra:?} failed: {}", out.stderr);
        serde_json::from_str(&out.stdout)
            .unwrap_or_else(|e| panic!("{command:?}: stdout is not JSON ({e}): {}", out.stdout))
    }
}

fn names(list: &Value) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test]
async fn read_commands_work_against_the_mock_with_basic_and_session_auth() {
    let fx = Fixture::start().await;
    let seeded_vms: Vec<String> = fx.mock.admin().vms().into_iter().map(|v| v.name).collect();
    assert!(!seeded_vms.is_empty(), "the default seed has a source VM");

    for auth in [&[][..], &["--session"][..]] {
        let me = fx.json(auth, &["whoami"]).await;
        assert!(me.is_object(), "whoami answers the user: {me}");

        let vms = fx.json(auth, &["list-vms"]).await;
        assert_eq!(names(&vms), seeded_vms, "list-vms with {auth:?}");

        let images = names(&fx.json(auth, &["list-images"]).await);
        assert!(
            images.len() >= 2,
            "the seed has an RHCOS and a Windows image: {images:?}"
        );

        let subnets = names(&fx.json(auth, &["list-subnets"]).await);
        assert!(subnets.len() >= 2, "the seed has two subnets: {subnets:?}");

        // list-clusters leaves the Prism Central entity out: only Prism Elements remain.
        let clusters = fx.json(auth, &["list-clusters"]).await;
        assert!(!clusters.as_array().unwrap().is_empty());

        let templates = fx.json(auth, &["list-templates"]).await;
        assert!(
            !templates.as_array().unwrap().is_empty(),
            "the seed has a Windows template"
        );
    }
}

#[tokio::test]
async fn get_vm_reads_what_the_mock_holds_and_reports_unknown_uuids() {
    let fx = Fixture::start().await;
    let source = fx.mock.admin().vms().into_iter().next().unwrap();
    let vm = fx.json(&[], &["get-vm", &source.uuid]).await;
    assert_eq!(vm["metadata"]["uuid"], source.uuid.as_str());
    assert_eq!(vm["spec"]["name"], source.name.as_str());

    let missing = fx
        .prism(&[], &["get-vm", "00000000-0000-4000-8000-000000000000"])
        .await;
    assert_ne!(missing.code, 0, "an unknown VM is an error");
    assert!(
        missing.stderr.to_lowercase().contains("not found"),
        "{}",
        missing.stderr
    );
}

#[tokio::test]
async fn a_wrong_password_is_refused_and_never_printed() {
    let fx = Fixture::start().await;
    std::fs::write(fx.password_file.path(), "not-the-password-41\n").unwrap();
    let out = fx.prism(&[], &["whoami"]).await;
    assert_ne!(out.code, 0);
    assert!(out.stderr.to_lowercase().contains("unauthorized") || out.stderr.contains("401"));
    assert!(!out.stderr.contains("not-the-password-41"));
    assert!(!out.stdout.contains("not-the-password-41"));
}

#[tokio::test]
async fn an_untrusted_mock_certificate_is_rejected() {
    let fx = Fixture::start().await;
    // A CA file holding some other CA: the mock's certificate must not verify.
    let other = rcgen::generate_simple_self_signed(vec!["other.example".to_owned()]).unwrap();
    std::fs::write(fx.ca_file.path(), other.cert.pem()).unwrap();
    let out = fx.prism(&[], &["whoami"]).await;
    assert_ne!(out.code, 0, "stdout: {}", out.stdout);
}
