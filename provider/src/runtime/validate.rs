//! `nutanix-machine-controller validate --machine FILE.yaml`: resolves every reference of a
//! Machine (or of a MachineSet's Machines) against Prism Central and prints exactly the errors
//! the controller would raise before creating its VM (`crate::controller::prepare::
//! resolve_and_plan`, the same function), one per line, or what it would send.

use std::path::PathBuf;
use std::process::ExitCode;

use k8s_openapi::api::core::v1::Secret;
use prism_client::TransportKind;

use super::cli::ValidateArgs;
use super::clients::actuator_settings;
use crate::actuator::Actuator;
use crate::actuator::credentials::{CREDENTIALS_KEY, PrismCredentials};
use crate::actuator::infrastructure::{parse_infrastructure, prism_endpoint};
use crate::controller::prepare::{random_admin_password, resolve_and_plan};
use crate::plan::vm::secret::UserData;
use crate::plan::vm::spec::ParsedSpec;
use crate::plan::vm::validate::UnreadUserData;
use crate::render::machine_from_yaml;

/// Exit code for validation errors (as `render`).
const EXIT_INVALID: u8 = 2;

/// Why a `--credentials-file` that is a Secret's manifest gives no credentials. Never quotes
/// the Secret.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CredentialsFileError {
    #[error("a Secret manifest that Kubernetes would refuse (each value of `data` must be base64)")]
    MalformedSecret,
    #[error(
        "the Secret has neither data.{CREDENTIALS_KEY} nor stringData.{CREDENTIALS_KEY}: give \
         the credentials Secret (nutanix-credentials) or its {CREDENTIALS_KEY} value"
    )]
    NoCredentialsKey,
}

/// The `credentials` value from a `--credentials-file`: the file itself, or, when it is a
/// Secret's manifest, its `stringData.credentials` or else its base64-decoded
/// `data.credentials` (the API server merges `stringData` over `data` on write: Kubernetes
/// `core/v1` `Secret.stringData`, "All keys and values are merged into the data field on write,
/// overwriting any existing values").
pub fn credentials_value(file: &[u8]) -> Result<Vec<u8>, CredentialsFileError> {
    let manifest = std::str::from_utf8(file)
        .ok()
        .and_then(|text| serde_saphyr::from_str::<serde_json::Value>(text).ok())
        .filter(|document| {
            document.get("kind").and_then(serde_json::Value::as_str) == Some("Secret")
        });
    let Some(manifest) = manifest else {
        return Ok(file.to_vec());
    };
    let secret: Secret =
        serde_json::from_value(manifest).map_err(|_| CredentialsFileError::MalformedSecret)?;
    if let Some(value) = secret
        .string_data
        .and_then(|mut data| data.remove(CREDENTIALS_KEY))
    {
        return Ok(value.into_bytes());
    }
    secret
        .data
        .and_then(|mut data| data.remove(CREDENTIALS_KEY))
        .map(|value| value.0)
        .ok_or(CredentialsFileError::NoCredentialsKey)
}

/// Why Prism Central cannot be used at all: said once, with its fix, instead of once per
/// reference.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PrismUnusable {
    #[error(
        "cannot reach Prism Central at {endpoint} ({detail}): check --prism-endpoint (or the \
         --infrastructure's prismCentral), usually https://HOST:9440, and that this machine can \
         connect to it"
    )]
    Unreachable { endpoint: String, detail: String },
    #[error(
        "the TLS handshake with Prism Central at {endpoint} failed ({detail}): pass the CA that \
         signed its certificate with --prism-ca-file"
    )]
    Tls { endpoint: String, detail: String },
    #[error(
        "Prism Central at {endpoint} refused the credentials (401): check the username and \
         password in --credentials-file"
    )]
    CredentialsRefused { endpoint: String },
}

impl PrismUnusable {
    /// The problem that no lookup can get past, if `error` (of a first call) is one.
    pub fn of(endpoint: &str, error: &prism_client::Error) -> Option<Self> {
        let endpoint = endpoint.to_owned();
        match error {
            prism_client::Error::Transport {
                kind: TransportKind::Tls,
                detail,
                ..
            } => Some(Self::Tls {
                endpoint,
                detail: detail.clone(),
            }),
            prism_client::Error::Transport {
                kind: TransportKind::Connect | TransportKind::Timeout,
                detail,
                ..
            } => Some(Self::Unreachable {
                endpoint,
                detail: detail.clone(),
            }),
            prism_client::Error::Unauthorized { .. } => Some(Self::CredentialsRefused { endpoint }),
            _ => None,
        }
    }
}

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
    let credentials = credentials_value(&read(&args.credentials_file)?)
        .map_err(|e| e.to_string())
        .and_then(|value| PrismCredentials::parse(&value).map_err(|e| e.to_string()))
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
    let endpoint = prism_endpoint(
        args.prism.prism_endpoint.as_deref(),
        infrastructure.as_ref(),
    )
    .ok_or("no Prism Central endpoint: give --prism-endpoint or --infrastructure")?;
    let actuator = Actuator::new(actuator_settings(&args.prism), None);
    let connection = actuator
        .connection(&endpoint, "--credentials", &credentials)
        .map_err(|e| e.to_string())?;
    // One call first (`GET /users/me`): when Prism cannot be reached or refuses the
    // credentials, that is said once instead of once per reference.
    if let Err(error) = connection.client().whoami().await
        && let Some(unusable) = PrismUnusable::of(&endpoint, &error)
    {
        eprintln!("error: {unusable}");
        return Ok(ExitCode::FAILURE);
    }
    let failure_domains = infrastructure
        .map(|info| info.failure_domains)
        .unwrap_or_default();
    let password = random_admin_password();
    let windows_sysprep = Some(&password);
    match resolve_and_plan(
        &connection,
        &machine,
        &ParsedSpec::of(&machine),
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

#[cfg(test)]
mod tests {
    use super::*;

    const VALUE: &str = r#"[{"type":"basic_auth","data":{"prismCentral":{"username":"admin","password":"Pr1sm-Secret"}}}]"#;
    // base64 of VALUE.
    const VALUE_BASE64: &str = "W3sidHlwZSI6ImJhc2ljX2F1dGgiLCJkYXRhIjp7InByaXNtQ2VudHJhbCI6eyJ1c2VybmFtZSI6ImFkbWluIiwicGFzc3dvcmQiOiJQcjFzbS1TZWNyZXQifX19XQ==";

    #[test]
    fn the_value_or_the_secret_manifest_gives_the_credentials() {
        let header = "apiVersion: v1\nkind: Secret\nmetadata: {name: nutanix-credentials, namespace: openshift-machine-api}\n";
        let files = [
            VALUE.to_owned(),
            format!("{header}data:\n  credentials: {VALUE_BASE64}\n"),
            format!("{header}stringData:\n  credentials: '{VALUE}'\n"),
            // stringData wins over data, as on the API server.
            format!("{header}data:\n  credentials: e30=\nstringData:\n  credentials: '{VALUE}'\n"),
            serde_json::json!({"apiVersion": "v1", "kind": "Secret",
                               "data": {"credentials": VALUE_BASE64}})
            .to_string(),
        ];
        for file in files {
            let value = credentials_value(file.as_bytes()).unwrap();
            assert_eq!(value, VALUE.as_bytes(), "{file}");
            assert_eq!(
                PrismCredentials::parse(&value).unwrap(),
                PrismCredentials::new("admin", "Pr1sm-Secret")
            );
        }
    }

    #[test]
    fn only_what_no_lookup_gets_past_stops_validate_at_once() {
        let transport = |kind| prism_client::Error::Transport {
            endpoint: "GET /users/me",
            kind,
            detail: "d".into(),
        };
        let endpoint = "https://pc:9440";
        assert_eq!(
            PrismUnusable::of(endpoint, &transport(TransportKind::Tls)),
            Some(PrismUnusable::Tls {
                endpoint: endpoint.to_owned(),
                detail: "d".into()
            })
        );
        for kind in [TransportKind::Connect, TransportKind::Timeout] {
            assert!(matches!(
                PrismUnusable::of(endpoint, &transport(kind)),
                Some(PrismUnusable::Unreachable { .. })
            ));
        }
        assert_eq!(
            PrismUnusable::of(
                endpoint,
                &prism_client::Error::Unauthorized {
                    endpoint: "GET /users/me"
                }
            ),
            Some(PrismUnusable::CredentialsRefused {
                endpoint: endpoint.to_owned()
            })
        );
        // A broken connection or a server error may not repeat: the lookups report them.
        assert_eq!(
            PrismUnusable::of(endpoint, &transport(TransportKind::Other)),
            None
        );
    }

    #[test]
    fn a_secret_without_credentials_is_refused_without_quoting_it() {
        let wrong_key = format!("kind: Secret\ndata:\n  password: {VALUE_BASE64}\n");
        assert_eq!(
            credentials_value(wrong_key.as_bytes()),
            Err(CredentialsFileError::NoCredentialsKey)
        );
        let error =
            credentials_value(b"kind: Secret\ndata:\n  credentials: Pr1sm-Secret!\n").unwrap_err();
        assert_eq!(error, CredentialsFileError::MalformedSecret);
        assert!(!error.to_string().contains("Pr1sm"));
    }
}
