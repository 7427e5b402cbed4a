//! `nutanix-machine-controller render`: what a Machine or MachineSet would create, without
//! contacting Prism.
//!
//! The output is one JSON document (the request's method, path and body, plus the follow-up
//! update of a clone or template deploy), then, for a Windows Machine with Sysprep, the
//! unattend.xml with the Administrator password replaced by a placeholder. A MachineSet is
//! rendered as one of its Machines (`<name>-xxxxx`). Names stay names unless the `--resolve` file
//! maps them to UUIDs; UUIDs the apiserver or Prism would assign (the Machine's uid, the reserved
//! VM UUID) are shown as the nil UUID.

use prism_client::quote::quoted;
use serde_json::{Value, json};

use crate::api::{Machine, MachineSet};
use crate::plan::vm::GuestPlan;
use crate::plan::vm::errors::ValidationErrors;
use crate::plan::vm::request::build_request;
use crate::plan::vm::resolve::{ResolutionMode, ResolvedReferences};
use crate::plan::vm::secret::UserData;
use crate::plan::vm::spec::ParsedSpec;
use crate::plan::vm::unattend::PasswordValue;
use crate::plan::vm::validate::{ClaimedAddresses, PlanContext, UnreadUserData, plan_vm};

/// Shown wherever Kubernetes or Prism would assign a UUID.
pub const PLACEHOLDER_UUID: &str = "00000000-0000-0000-0000-000000000000";

/// Suffix a MachineSet's preview Machine gets (the machine-api gives five random characters).
pub const PREVIEW_SUFFIX: &str = "-xxxxx";

/// What `render` prints. The request and the unattend.xml carry the user data, so `Debug` shows
/// their lengths only.
#[derive(Clone, PartialEq, Eq)]
pub struct Rendered {
    /// The request description, pretty-printed JSON.
    pub request_json: String,
    /// The unattend.xml (password as a placeholder), for Sysprep.
    pub unattend_xml: Option<String>,
    pub warnings: Vec<String>,
}

impl std::fmt::Debug for Rendered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rendered")
            .field(
                "request_json",
                &format_args!("<{} bytes redacted>", self.request_json.len()),
            )
            .field(
                "unattend_xml_bytes",
                &self.unattend_xml.as_ref().map(String::len),
            )
            .field("warnings", &self.warnings)
            .finish()
    }
}

/// Why nothing could be rendered.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("the Machine file is not YAML: {0}")]
    Yaml(String),
    #[error("the resolve file is not a resolved-references JSON document: {0}")]
    Resolve(String),
    #[error(
        "expected kind Machine or MachineSet (apiVersion machine.openshift.io/v1beta1), found {:?}",
        quoted(.0)
    )]
    Kind(String),
    #[error("the {kind} does not parse: {message}")]
    Object { kind: &'static str, message: String },
    #[error("the Machine file holds no YAML document")]
    NoDocument,
    #[error(
        "the Machine file holds {} YAML documents ({}): give one Machine or MachineSet per file \
         (split it at its `---` lines)",
        .0.len(),
        .0.iter().map(|kind| format!("{:?}", quoted(kind))).collect::<Vec<_>>().join(", ")
    )]
    SeveralDocuments(Vec<String>),
    #[error("{0}")]
    Invalid(ValidationErrors),
}

/// Renders a Machine or MachineSet from its YAML.
pub fn render(
    machine_yaml: &str,
    user_data: Option<&[u8]>,
    resolve_json: Option<&str>,
) -> Result<Rendered, RenderError> {
    let machine = machine_from_yaml(machine_yaml)?;
    let resolved: ResolvedReferences = match resolve_json {
        Some(text) => {
            serde_json::from_str(text).map_err(|e| RenderError::Resolve(e.to_string()))?
        }
        None => ResolvedReferences::default(),
    };
    let user_data = user_data.map(UserData::new);
    let context = PlanContext {
        resolved: &resolved,
        mode: ResolutionMode::Preview,
        user_data: user_data.as_ref(),
        unread_user_data: UnreadUserData::NotChecked,
        admin_password: Some(PasswordValue::Placeholder),
        claims: ClaimedAddresses::NotClaimed,
    };
    let plan =
        plan_vm(&machine, &ParsedSpec::of(&machine), &context).map_err(RenderError::Invalid)?;
    let request = build_request(&plan, PLACEHOLDER_UUID);
    let (method, path) = request.endpoint();
    let mut description = json!({"method": method, "path": path, "body": request.body_json()});
    if let Some(follow_up) = request.follow_up() {
        description["followUp"] = serde_json::to_value(follow_up).unwrap_or(Value::Null);
    }
    let unattend_xml = match &plan.guest {
        GuestPlan::Sysprep(unattend) => Some(unattend.xml.expose().to_owned()),
        GuestPlan::None | GuestPlan::CloudInit { .. } => None,
    };
    Ok(Rendered {
        request_json: serde_json::to_string_pretty(&description).unwrap_or_default(),
        unattend_xml,
        warnings: plan.warnings,
    })
}

/// A Machine from YAML: the document itself, or one Machine of a MachineSet (as `render` shows
/// it, with placeholder name suffix and uid).
pub fn machine_from_yaml(text: &str) -> Result<Machine, RenderError> {
    let mut documents: Vec<Value> = serde_saphyr::from_multiple(text)
        .map_err(|e| RenderError::Yaml(e.to_string()))?
        .into_iter()
        // An empty document (a leading or trailing `---`) is no document.
        .filter(|document: &Value| !document.is_null())
        .collect();
    match documents.len() {
        0 => Err(RenderError::NoDocument),
        1 => machine_of(documents.remove(0)),
        _ => Err(RenderError::SeveralDocuments(
            documents
                .iter()
                .map(|document| {
                    document
                        .get("kind")
                        .and_then(Value::as_str)
                        .unwrap_or("no kind")
                        .to_owned()
                })
                .collect(),
        )),
    }
}

/// The Machine to render: the document itself, or one Machine of a MachineSet.
fn machine_of(document: Value) -> Result<Machine, RenderError> {
    let kind = document
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let object_error = |kind, error: serde_json::Error| RenderError::Object {
        kind,
        message: error.to_string(),
    };
    let mut machine = match kind.as_str() {
        "Machine" => {
            serde_json::from_value::<Machine>(document).map_err(|e| object_error("Machine", e))?
        }
        "MachineSet" => preview_machine(
            serde_json::from_value(document).map_err(|e| object_error("MachineSet", e))?,
        ),
        _ => return Err(RenderError::Kind(kind)),
    };
    machine
        .metadata
        .uid
        .get_or_insert_with(|| PLACEHOLDER_UUID.to_owned());
    Ok(machine)
}

/// One Machine of `set` as the MachineSet controller would make it (the template's spec, labels
/// and annotations), with a placeholder name suffix and uid.
pub fn preview_machine(set: MachineSet) -> Machine {
    let template = set.spec.template;
    let mut machine = Machine::new(
        &format!("{}{PREVIEW_SUFFIX}", set.metadata.name.unwrap_or_default()),
        template.spec,
    );
    let template_meta = template.metadata.unwrap_or_default();
    machine.metadata.namespace = set.metadata.namespace;
    machine.metadata.labels = template_meta.labels;
    machine.metadata.annotations = template_meta.annotations;
    machine.metadata.uid = Some(PLACEHOLDER_UUID.to_owned());
    machine
}

#[cfg(test)]
mod tests {
    use super::*;

    const MACHINE: &str = r#"
apiVersion: machine.openshift.io/v1beta1
kind: Machine
metadata:
  name: ocp-worker-0-abcde
  namespace: openshift-machine-api
  labels: {machine.openshift.io/cluster-api-cluster: ocp}
spec:
  providerSpec:
    value:
      cluster: {type: name, name: pe-1}
      image: {type: name, name: rhcos}
      subnets: [{type: name, name: vlan-10}]
      vcpuSockets: 2
      vcpusPerSocket: 1
      memorySize: 8Gi
      systemDiskSize: 120Gi
      credentialsSecret: {name: nutanix-credentials}
"#;

    #[test]
    fn renders_a_machine_with_names_left_as_names() {
        let rendered = render(MACHINE, None, None).unwrap();
        let json: Value = serde_json::from_str(&rendered.request_json).unwrap();
        assert_eq!(json["path"], "/api/nutanix/v3/vms");
        assert_eq!(
            json["body"]["spec"]["cluster_reference"],
            json!({"kind": "cluster", "uuid": "", "name": "pe-1"})
        );
        assert_eq!(json["body"]["metadata"]["uuid"], PLACEHOLDER_UUID);
        assert_eq!(json.get("followUp"), None);
        assert_eq!(rendered.unattend_xml, None);
    }

    #[test]
    fn the_output_holds_the_user_data_but_its_debug_does_not() {
        let user_data = b"{\"ignition\":{\"version\":\"3.2.0\"},\"x\":\"Us3r-Data-Secret\"}";
        let machine = MACHINE.replace(
            "credentialsSecret: {name: nutanix-credentials}",
            "credentialsSecret: {name: nutanix-credentials}\n      userDataSecret: {name: worker-user-data}",
        );
        let rendered = render(&machine, Some(user_data), None).unwrap();
        let json: Value = serde_json::from_str(&rendered.request_json).unwrap();
        let encoded =
            json["body"]["spec"]["resources"]["guest_customization"]["cloud_init"]["user_data"]
                .as_str()
                .unwrap()
                .to_owned();
        assert!(
            !encoded.is_empty(),
            "render prints the user data (documented)"
        );
        let shown = format!("{rendered:?}");
        assert!(!shown.contains(&encoded), "{shown}");
        assert!(!shown.contains("Us3r-Data-Secret"), "{shown}");
        assert!(shown.contains("bytes redacted"), "{shown}");
    }

    #[test]
    fn the_resolve_file_turns_names_into_uuids() {
        let resolve = r#"{"clusters": {"pe-1": {"uuid": "c0ffee00-0000-4000-8000-000000000001"}}}"#;
        let rendered = render(MACHINE, None, Some(resolve)).unwrap();
        let json: Value = serde_json::from_str(&rendered.request_json).unwrap();
        assert_eq!(
            json["body"]["spec"]["cluster_reference"],
            json!({"kind": "cluster", "uuid": "c0ffee00-0000-4000-8000-000000000001"})
        );
    }

    #[test]
    fn bad_input_is_reported() {
        assert!(
            matches!(render("kind: Pod\n", None, None), Err(RenderError::Kind(kind)) if kind == "Pod")
        );
        assert!(matches!(
            render(": : :\n", None, None),
            Err(RenderError::Yaml(_))
        ));
        assert!(matches!(
            render(MACHINE, None, Some("{\"image\": {}}")),
            Err(RenderError::Resolve(_))
        ));
        // Several documents are refused in plain words; empty ones are not documents.
        let two = format!("{MACHINE}---\n{MACHINE}");
        let error = render(&two, None, None).unwrap_err();
        assert_eq!(
            error.to_string(),
            "the Machine file holds 2 YAML documents (\"Machine\", \"Machine\"): give one Machine or MachineSet per file (split it at its `---` lines)"
        );
        render(&format!("---\n{MACHINE}---\n"), None, None).unwrap();
        assert!(matches!(
            render("---\n", None, None),
            Err(RenderError::NoDocument)
        ));
        let invalid = MACHINE.replace("vcpuSockets: 2", "vcpuSockets: 0");
        let Err(RenderError::Invalid(errors)) = render(&invalid, None, None) else {
            panic!()
        };
        assert_eq!(errors.0[0].path, "providerSpec.vcpuSockets");
    }
}
