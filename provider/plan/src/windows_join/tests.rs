use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::*;
use crate::windows_join::csr::NODE_BOOTSTRAPPER;

const NAME: &str = "win-abcde";
const PROVIDER_ID: &str = "nutanix://0f4c2a1e-0000-4000-8000-000000000001";
const CREATED: &str = "2026-03-01T10:00:00Z";

fn at(text: &str) -> Timestamp {
    text.parse().unwrap()
}

/// A Windows Machine at some point of its life.
struct MachineAt {
    provider_id: bool,
    ip: Option<&'static str>,
    phase: &'static str,
    node_ref: Option<&'static str>,
}

impl MachineAt {
    fn provisioned() -> Self {
        Self {
            provider_id: true,
            ip: Some("10.0.0.5"),
            phase: "Provisioned",
            node_ref: None,
        }
    }

    fn running() -> Self {
        Self {
            phase: "Running",
            node_ref: Some(NAME),
            ..Self::provisioned()
        }
    }

    fn build(&self) -> Machine {
        let mut addresses = vec![];
        if let Some(ip) = self.ip {
            addresses.push(json!({"type": "InternalIP", "address": ip}));
        }
        addresses.push(json!({"type": "InternalDNS", "address": NAME}));
        addresses.push(json!({"type": "Hostname", "address": NAME}));
        let mut status = json!({"phase": self.phase, "addresses": addresses});
        if let Some(node) = self.node_ref {
            status["nodeRef"] = json!({"kind": "Node", "name": node});
        }
        let mut spec = json!({});
        if self.provider_id {
            spec["providerID"] = json!(PROVIDER_ID);
        }
        serde_json::from_value(json!({
            "apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
            "metadata": {"name": NAME, "namespace": "openshift-machine-api",
                "creationTimestamp": CREATED,
                "labels": {"machine.openshift.io/os-id": "Windows"}},
            "spec": spec,
            "status": status,
        }))
        .unwrap()
    }
}

fn node(ip: &str, provider_id: Option<&str>, annotations: Value) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": NAME, "annotations": annotations},
        "spec": {"providerID": provider_id},
        "status": {"addresses": [{"type": "InternalIP", "address": ip},
                                 {"type": "Hostname", "address": NAME}]},
    }))
    .unwrap()
}

/// The VM's UUID in [`PROVIDER_ID`].
const PROVIDER_UUID: &str = "0f4c2a1e-0000-4000-8000-000000000001";

/// `node` as the kubelet registers it with `--cloud-provider=external`, before the cloud
/// controller manager initialised it, reporting `system_uuid`.
fn uninitialized(node: Node, system_uuid: &str) -> Node {
    let mut value = serde_json::to_value(&node).unwrap();
    value["spec"]["taints"] =
        json!([{"key": UNINITIALIZED_TAINT, "value": "true", "effect": "NoSchedule"}]);
    value["status"]["nodeInfo"] = json!({"systemUUID": system_uuid,
        "machineID": "", "kernelVersion": "", "osImage": "", "containerRuntimeVersion": "",
        "kubeletVersion": "", "kubeProxyVersion": "", "operatingSystem": "windows",
        "architecture": "amd64", "bootID": ""});
    serde_json::from_value(value).unwrap()
}

/// A Node with these `InternalIP`s, in this order.
fn node_with_ips(ips: &[&str], annotations: Value) -> Node {
    let mut addresses: Vec<Value> = ips
        .iter()
        .map(|ip| json!({"type": "InternalIP", "address": ip}))
        .collect();
    addresses.push(json!({"type": "Hostname", "address": NAME}));
    serde_json::from_value(json!({
        "metadata": {"name": NAME, "annotations": annotations},
        "spec": {},
        "status": {"addresses": addresses},
    }))
    .unwrap()
}

fn linked_node(annotations: Value) -> Node {
    node("10.0.0.5", Some(PROVIDER_ID), annotations)
}

fn client_csr(name: &str, node: &str, created: &str, state: CsrState) -> ObservedCsr {
    ObservedCsr {
        csr: Csr {
            name: name.into(),
            signer_name: CLIENT_SIGNER.into(),
            username: NODE_BOOTSTRAPPER.into(),
            groups: vec![
                "system:serviceaccounts:openshift-machine-config-operator".into(),
                "system:serviceaccounts".into(),
                "system:authenticated".into(),
            ],
            usages: vec!["digital signature".into(), "client auth".into()],
            created: Some(at(created)),
            common_name: format!("system:node:{node}"),
            organizations: vec!["system:nodes".into()],
            ..Csr::default()
        },
        state,
    }
}

fn serving_csr(name: &str, ips: &[&str], state: CsrState) -> ObservedCsr {
    ObservedCsr {
        csr: Csr {
            name: name.into(),
            signer_name: SERVING_SIGNER.into(),
            username: format!("system:node:{NAME}"),
            groups: vec!["system:nodes".into(), "system:authenticated".into()],
            usages: vec!["digital signature".into(), "server auth".into()],
            created: Some(at("2026-03-01T10:30:00Z")),
            common_name: format!("system:node:{NAME}"),
            organizations: vec!["system:nodes".into()],
            dns_names: vec![NAME.into()],
            ip_addresses: ips.iter().map(|ip| ip.parse().unwrap()).collect(),
            ..Csr::default()
        },
        state,
    }
}

/// One row: the world, and the expected reason and words of the message.
struct Case {
    what: &'static str,
    machine: MachineAt,
    node: Option<Node>,
    csrs: Vec<ObservedCsr>,
    vm_ips: Option<Vec<&'static str>>,
    previous_reason: Option<&'static str>,
    now: &'static str,
    timeout: Duration,
    reason: &'static str,
    contains: &'static [&'static str],
}

impl Case {
    fn new(what: &'static str, machine: MachineAt, reason: &'static str) -> Self {
        Self {
            what,
            machine,
            node: None,
            csrs: vec![],
            vm_ips: Some(vec!["10.0.0.5"]),
            previous_reason: None,
            now: "2026-03-01T10:40:00Z",
            timeout: DEFAULT_JOIN_TIMEOUT,
            reason,
            contains: &[],
        }
    }

    fn state(&self) -> JoinState {
        let machine = self.machine.build();
        let machines = vec![machine_facts(&machine)];
        let node_names: Vec<String> = self.node.iter().map(ResourceExt::name_any).collect();
        let vm_ips: Option<Vec<IpAddr>> = self
            .vm_ips
            .as_ref()
            .map(|ips| ips.iter().map(|ip| ip.parse().unwrap()).collect());
        let previous = self
            .previous_reason
            .map(|reason| provider_condition(CONDITION, false, reason, "", &Time(at(CREATED))));
        join_state(&JoinInput {
            machine: &machine,
            node: self.node.as_ref(),
            csrs: &self.csrs,
            machines: &machines,
            node_names: &node_names,
            vm_ips: vm_ips.as_deref(),
            previous: previous.as_ref(),
            now: at(self.now),
            timeout: self.timeout,
        })
        .unwrap_or_else(|| panic!("{}: no state", self.what))
    }

    /// The state, with the expected reason and words.
    fn check(&self) -> JoinState {
        let state = self.state();
        assert_eq!(
            state.reason, self.reason,
            "{}: {}",
            self.what, state.message
        );
        for word in self.contains {
            assert!(
                state.message.contains(word),
                "{}: {word:?} not in {:?}",
                self.what,
                state.message
            );
        }
        state
    }
}

#[test]
fn no_state_before_the_vm_exists() {
    let machine = MachineAt {
        provider_id: false,
        ip: None,
        phase: "Provisioning",
        node_ref: None,
    }
    .build();
    let input = JoinInput {
        machine: &machine,
        node: None,
        csrs: &[],
        machines: &[],
        node_names: &[],
        vm_ips: None,
        previous: None,
        now: at(CREATED),
        timeout: DEFAULT_JOIN_TIMEOUT,
    };
    assert_eq!(join_state(&input), None);
    assert_eq!(decide(&input, &Time(at(CREATED))), None);
}

#[test]
fn the_stages_in_order() {
    let cases = [
        Case {
            contains: &["report an IPv4 address"],
            ..Case::new(
                "VM without an address",
                MachineAt {
                    ip: None,
                    phase: "Provisioning",
                    ..MachineAt::provisioned()
                },
                reasons::VM_CREATED,
            )
        },
        Case {
            contains: &["10.0.0.5", "Provisioned"],
            ..Case::new(
                "address, not Provisioned yet",
                MachineAt {
                    phase: "Provisioning",
                    ..MachineAt::provisioned()
                },
                reasons::ADDRESS_REPORTED,
            )
        },
        Case {
            contains: &["WMCO", "client certificate as node win-abcde"],
            ..Case::new(
                "Provisioned, no CSR",
                MachineAt::provisioned(),
                reasons::PROVISIONED,
            )
        },
        Case {
            csrs: vec![client_csr(
                "csr-c1",
                NAME,
                "2026-03-01T10:20:00Z",
                CsrState::Pending,
            )],
            contains: &["csr-c1", "meets the cluster-machine-approver's rules"],
            ..Case::new(
                "client CSR approvable",
                MachineAt::provisioned(),
                reasons::PROVISIONED,
            )
        },
        Case {
            csrs: vec![client_csr(
                "csr-c1",
                NAME,
                "2026-03-01T10:20:00Z",
                CsrState::Approved,
            )],
            contains: &["approved (CSR csr-c1)", "register the Node"],
            ..Case::new(
                "client CSR approved",
                MachineAt::provisioned(),
                reasons::PROVISIONED,
            )
        },
        Case {
            node: Some(uninitialized(
                node("10.0.0.5", None, json!({})),
                PROVIDER_UUID,
            )),
            contains: &[
                "cloud controller manager to initialise it",
                UNINITIALIZED_TAINT,
            ],
            ..Case::new(
                "Node registered, not initialised",
                MachineAt::provisioned(),
                reasons::NODE_REGISTERED,
            )
        },
        Case {
            node: Some(node("10.0.0.5", None, json!({}))),
            contains: &["nodelink", "first InternalIP 10.0.0.5"],
            ..Case::new(
                "Node initialised",
                MachineAt::provisioned(),
                reasons::NODE_INITIALIZED,
            )
        },
        Case {
            node: Some(node("10.0.0.5", Some("nutanix://someone-else"), json!({}))),
            contains: &["providerID nutanix://someone-else, not the Machine's"],
            ..Case::new(
                "Node with another providerID",
                MachineAt::provisioned(),
                reasons::NODE_INITIALIZED,
            )
        },
        Case {
            node: Some(node("10.0.0.5", None, json!({}))),
            contains: &["linked by nodeRef", "it has none"],
            ..Case::new(
                "nodeRef set, providerID not yet",
                MachineAt::running(),
                reasons::NODE_INITIALIZED,
            )
        },
        Case {
            node: Some(linked_node(json!({}))),
            contains: &["ask for its serving certificate"],
            ..Case::new("linked", MachineAt::running(), reasons::NODE_LINKED)
        },
        Case {
            node: Some(linked_node(json!({}))),
            csrs: vec![serving_csr("csr-s1", &["10.0.0.5"], CsrState::Pending)],
            contains: &["serving CSR csr-s1 meets"],
            ..Case::new(
                "serving CSR approvable",
                MachineAt::running(),
                reasons::NODE_LINKED,
            )
        },
        Case {
            node: Some(linked_node(json!({}))),
            csrs: vec![serving_csr("csr-s1", &["10.0.0.5"], CsrState::Approved)],
            contains: &["WMCO", WMCO_VERSION_ANNOTATION],
            ..Case::new(
                "serving certificate approved",
                MachineAt::running(),
                reasons::SERVING_CERTIFICATE,
            )
        },
        Case {
            node: Some(linked_node(json!({}))),
            previous_reason: Some(reasons::SERVING_CERTIFICATE),
            ..Case::new(
                "approved CSRs garbage-collected: the stage is kept",
                MachineAt::running(),
                reasons::SERVING_CERTIFICATE,
            )
        },
        Case {
            node: Some(linked_node(json!({WMCO_VERSION_ANNOTATION: "10.18.1"}))),
            contains: &["configured by WMCO 10.18.1"],
            ..Case::new("configured", MachineAt::running(), reasons::CONFIGURED)
        },
        Case {
            node: Some(linked_node(json!({WMCO_VERSION_ANNOTATION: "10.18.1"}))),
            now: "2026-03-02T10:00:00Z",
            ..Case::new(
                "a linked Machine never times out",
                MachineAt::running(),
                reasons::CONFIGURED,
            )
        },
    ];
    for case in cases {
        let state = case.check();
        assert!(
            !state.stuck && state.reason != reasons::JOIN_TIMED_OUT,
            "{}",
            case.what
        );
    }
}

#[test]
fn stuck_reasons_in_the_approvers_terms() {
    let cases = [
        Case {
            csrs: vec![client_csr(
                "csr-x",
                "win-2022-golden",
                "2026-03-01T10:20:00Z",
                CsrState::Pending,
            )],
            contains: &[
                "csr-x",
                "node win-2022-golden",
                "InternalDNS win-abcde",
                "failed to find machine for node win-2022-golden",
            ],
            ..Case::new(
                "client CSR under another host name",
                MachineAt::provisioned(),
                reasons::CLIENT_CSR_NAME_MISMATCH,
            )
        },
        Case {
            csrs: vec![client_csr(
                "csr-old",
                "win-2022-golden",
                "2026-03-01T09:00:00Z",
                CsrState::Pending,
            )],
            contains: &["WMCO"],
            ..Case::new(
                "an unmatched CSR older than the Machine is someone else's",
                MachineAt::provisioned(),
                reasons::PROVISIONED,
            )
        },
        Case {
            csrs: vec![client_csr(
                "csr-late",
                NAME,
                "2026-03-01T12:30:00Z",
                CsrState::Pending,
            )],
            now: "2026-03-01T12:31:00Z",
            timeout: Duration::from_secs(3 * 3600),
            contains: &["csr-late", "2 h", "delete the Machine"],
            ..Case::new(
                "client CSR after the window",
                MachineAt::provisioned(),
                reasons::CLIENT_CSR_WINDOW_EXPIRED,
            )
        },
        Case {
            now: "2026-03-01T12:00:00Z",
            timeout: Duration::from_secs(3 * 3600),
            contains: &["no client CSR", "within 2 h"],
            ..Case::new(
                "no client CSR in 2 h (a timeout above it)",
                MachineAt::provisioned(),
                reasons::CLIENT_CSR_WINDOW_EXPIRED,
            )
        },
        Case {
            csrs: vec![{
                let mut csr = client_csr("csr-u", NAME, "2026-03-01T10:20:00Z", CsrState::Pending);
                csr.csr.username = "system:serviceaccount:default:someone".into();
                csr
            }],
            contains: &["csr-u", "not by the node-bootstrapper"],
            ..Case::new(
                "client CSR failing another rule",
                MachineAt::provisioned(),
                reasons::CSR_PENDING,
            )
        },
        Case {
            node: Some(linked_node(json!({}))),
            csrs: vec![serving_csr(
                "csr-s2",
                &["10.0.0.5", "10.132.0.2"],
                CsrState::Pending,
            )],
            contains: &["csr-s2", "IP address '10.132.0.2' not in machine addresses"],
            ..Case::new(
                "serving CSR with an IP the Machine lacks",
                MachineAt::running(),
                reasons::SERVING_CSR_ADDRESS_MISMATCH,
            )
        },
        Case {
            node: Some(linked_node(json!({WMCO_VERSION_ANNOTATION: "10.18.1"}))),
            csrs: vec![serving_csr(
                "csr-s3",
                &["10.0.0.5", "10.132.0.2"],
                CsrState::Pending,
            )],
            contains: &["10.132.0.2"],
            ..Case::new(
                "a stuck serving CSR outweighs WMCO's annotation",
                MachineAt::running(),
                reasons::SERVING_CSR_ADDRESS_MISMATCH,
            )
        },
        Case {
            node: Some(node("10.132.0.2", None, json!({}))),
            vm_ips: Some(vec!["10.0.0.5"]),
            contains: &[
                "IP 10.132.0.2",
                "not among the VM's addresses in Prism (10.0.0.5)",
                "WMCO older than 10.16",
                "hybrid-overlay",
                "upgrade",
            ],
            ..Case::new(
                "Node registered with another interface's IP",
                MachineAt::provisioned(),
                reasons::NODE_IP_MISMATCH,
            )
        },
        Case {
            node: Some(node(
                "10.0.0.5",
                None,
                json!({"alpha.kubernetes.io/provided-node-ip": "10.132.0.2"}),
            )),
            contains: &["IP 10.132.0.2"],
            ..Case::new(
                "the provided node IP counts over the addresses",
                MachineAt::provisioned(),
                reasons::NODE_IP_MISMATCH,
            )
        },
        Case {
            node: Some(node("169.254.3.7", None, json!({}))),
            vm_ips: Some(vec!["169.254.3.7", "10.0.0.5"]),
            contains: &["has in Prism but the Machine does not report", "link-local"],
            ..Case::new(
                "Node on an address the Machine filters out",
                MachineAt::provisioned(),
                reasons::NODE_IP_MISMATCH,
            )
        },
        Case {
            node: Some(linked_node(json!({WMCO_VERSION_ANNOTATION: "10.15.3"}))),
            vm_ips: Some(vec!["10.0.0.9"]),
            contains: &["IP 10.0.0.5"],
            ..Case::new(
                "even a configured node",
                MachineAt::running(),
                reasons::NODE_IP_MISMATCH,
            )
        },
    ];
    for case in cases {
        let state = case.check();
        assert_eq!(
            state.stuck,
            state.reason != state.stage.reason(),
            "{}",
            case.what
        );
    }
}

#[test]
fn the_cloud_controller_stage() {
    // Linked and even configured: a Node still tainted waits for the cloud controller manager.
    let tainted_linked = uninitialized(
        linked_node(json!({WMCO_VERSION_ANNOTATION: "10.18.1"})),
        &PROVIDER_UUID.to_uppercase(),
    );
    let state = Case {
        node: Some(tainted_linked),
        ..Case::new(
            "linked but not initialised",
            MachineAt::running(),
            reasons::NODE_REGISTERED,
        )
    }
    .check();
    assert!(
        !state.stuck && !state.message.contains("systemUUID 0F4C"),
        "{}",
        state.message
    );
    // The CCM looks the VM up by systemUUID: another one is named.
    Case {
        node: Some(uninitialized(
            node("10.0.0.5", None, json!({})),
            "1e2a4c0f-0000-4000-8000-000000000001",
        )),
        contains: &[
            "systemUUID 1e2a4c0f-0000-4000-8000-000000000001, not the VM's UUID 0f4c2a1e-",
            "cannot find the VM",
        ],
        ..Case::new(
            "another systemUUID",
            MachineAt::provisioned(),
            reasons::NODE_REGISTERED,
        )
    }
    .check();
    // A Node IP that is wrong is wrong before the CCM runs too.
    Case {
        node: Some(uninitialized(
            node(
                "10.0.0.5",
                None,
                json!({"alpha.kubernetes.io/provided-node-ip": "10.132.0.2"}),
            ),
            PROVIDER_UUID,
        )),
        ..Case::new(
            "provided IP unknown to Prism",
            MachineAt::provisioned(),
            reasons::NODE_IP_MISMATCH,
        )
    }
    .check();
}

#[test]
fn the_addresses_a_cloud_controller_copies_are_no_mismatch() {
    // Without --node-ip (WMCO before 10.16) the Nutanix CCM copies every address Prism lists for
    // the VM, link-local and secondary ones among them, which the Machine does not all report.
    let copied = Case {
        node: Some(node_with_ips(
            &["10.0.0.5", "10.0.0.77", "169.254.3.7"],
            json!({}),
        )),
        vm_ips: Some(vec!["10.0.0.5", "10.0.0.77", "169.254.3.7"]),
        ..Case::new(
            "the CCM's copy",
            MachineAt::provisioned(),
            reasons::NODE_INITIALIZED,
        )
    };
    copied.check();
    // An address Prism does not list is no copy of Prism's.
    Case {
        node: Some(node_with_ips(&["10.0.0.5", "10.132.0.2"], json!({}))),
        vm_ips: Some(vec!["10.0.0.5"]),
        contains: &["IP 10.132.0.2", "not among the VM's addresses"],
        ..Case::new(
            "a foreign address",
            MachineAt::provisioned(),
            reasons::NODE_IP_MISMATCH,
        )
    }
    .check();
    // With --node-ip the kubelet chose it: a filtered-out one is wrong.
    Case {
        node: Some(node_with_ips(
            &["169.254.3.7"],
            json!({"alpha.kubernetes.io/provided-node-ip": "169.254.3.7"}),
        )),
        vm_ips: Some(vec!["10.0.0.5", "169.254.3.7"]),
        contains: &["IP 169.254.3.7", "the Machine does not report"],
        ..Case::new(
            "the kubelet's --node-ip filtered out",
            MachineAt::provisioned(),
            reasons::NODE_IP_MISMATCH,
        )
    }
    .check();
}

#[test]
fn ips_are_compared_as_addresses() {
    // An IPv4-mapped IPv6 address is its IPv4 address: for the Node's IP, and for WMCO's pick of
    // the Machine's first IPv4 address (Go's `To4`).
    Case {
        node: Some(node_with_ips(
            &["::ffff:10.0.0.5"],
            json!({"alpha.kubernetes.io/provided-node-ip": "::ffff:10.0.0.5"}),
        )),
        ..Case::new(
            "mapped Node IP",
            MachineAt::provisioned(),
            reasons::NODE_INITIALIZED,
        )
    }
    .check();
    Case {
        contains: &["::ffff:10.0.0.5", "Provisioned"],
        ..Case::new(
            "mapped Machine IP",
            MachineAt {
                ip: Some("::ffff:10.0.0.5"),
                phase: "Provisioning",
                ..MachineAt::provisioned()
            },
            reasons::ADDRESS_REPORTED,
        )
    }
    .check();
    Case {
        node: Some(linked_node(json!({}))),
        csrs: vec![serving_csr(
            "csr-m",
            &["::ffff:10.0.0.5"],
            CsrState::Pending,
        )],
        contains: &["serving CSR csr-m meets"],
        ..Case::new(
            "mapped serving CSR IP",
            MachineAt::running(),
            reasons::NODE_LINKED,
        )
    }
    .check();
}

#[test]
fn prism_addresses_unknown_skip_the_node_ip_check() {
    let case = Case {
        node: Some(node("10.132.0.2", None, json!({}))),
        vm_ips: None,
        ..Case::new(
            "no Prism reading",
            MachineAt::provisioned(),
            reasons::NODE_INITIALIZED,
        )
    };
    assert_eq!(case.state().reason, reasons::NODE_INITIALIZED);
}

#[test]
fn a_join_without_a_linked_node_times_out() {
    // 10:00 + 90 min: the default timeout.
    for (now, node, timed_out) in [
        ("2026-03-01T11:29:59Z", None, false),
        ("2026-03-01T11:30:00Z", None, true),
        (
            "2026-03-01T11:30:00Z",
            Some(node("10.0.0.5", None, json!({}))),
            true,
        ),
    ] {
        let case = Case {
            node,
            now,
            ..Case::new("timeout", MachineAt::provisioned(), reasons::JOIN_TIMED_OUT)
        };
        let state = case.state();
        assert_eq!(
            state.reason == reasons::JOIN_TIMED_OUT,
            timed_out,
            "{now}: {state:?}"
        );
        if timed_out {
            assert!(
                state
                    .message
                    .starts_with("no Node linked to the Machine 90m after its creation"),
                "{}",
                state.message
            );
        }
    }
}

#[test]
fn events_only_on_transitions() {
    let machine = MachineAt::provisioned().build();
    let machines = vec![machine_facts(&machine)];
    fn input<'a>(
        machine: &'a Machine,
        machines: &'a [MachineFacts],
        previous: Option<&'a ProviderCondition>,
        now: &str,
    ) -> JoinInput<'a> {
        JoinInput {
            machine,
            node: None,
            csrs: &[],
            machines,
            node_names: &[],
            vm_ips: None,
            previous,
            now: at(now),
            timeout: Duration::from_secs(60),
        }
    }
    let input = |previous, now| input(&machine, &machines, previous, now);
    let now = Time(at("2026-03-01T10:00:30Z"));
    let first = decide(&input(None, "2026-03-01T10:00:30Z"), &now).unwrap();
    assert_eq!(first.condition.type_, CONDITION);
    assert_eq!(first.condition.status, "False");
    assert_eq!(first.condition.reason, reasons::PROVISIONED);
    let event = first.event.clone().unwrap();
    assert_eq!((event.warning, event.reason), (false, reasons::PROVISIONED));
    assert!(event.note.starts_with("Windows join: "), "{}", event.note);

    let again = decide(&input(Some(&first.condition), "2026-03-01T10:00:40Z"), &now).unwrap();
    assert_eq!(again.event, None, "same reason: no event");

    let late = decide(&input(Some(&first.condition), "2026-03-01T10:01:00Z"), &now).unwrap();
    assert_eq!(late.condition.reason, reasons::JOIN_TIMED_OUT);
    assert_eq!(
        late.event.as_ref().map(|e| (e.warning, e.reason)),
        Some((true, reasons::JOIN_TIMED_OUT))
    );
    assert!(late.condition.message.contains("1m after its creation"));
    let again = decide(&input(Some(&late.condition), "2026-03-01T10:05:00Z"), &now).unwrap();
    assert_eq!(again.event, None, "a timeout is announced once");
}

#[test]
fn configured_is_the_only_true_condition() {
    let machine = MachineAt::running().build();
    let node = linked_node(json!({WMCO_VERSION_ANNOTATION: "10.18.1"}));
    let decision = decide(
        &JoinInput {
            machine: &machine,
            node: Some(&node),
            csrs: &[],
            machines: &[machine_facts(&machine)],
            node_names: &[NAME.to_owned()],
            vm_ips: Some(&["10.0.0.5".parse().unwrap()]),
            previous: None,
            now: at("2026-03-01T10:40:00Z"),
            timeout: DEFAULT_JOIN_TIMEOUT,
        },
        &Time(at("2026-03-01T10:40:00Z")),
    )
    .unwrap();
    assert_eq!(decision.condition.status, "True");
    assert!(decision.state.complete());
}

#[test]
fn which_machines_the_reconciler_looks_after() {
    let with_labels = |labels: Value| -> Machine {
        serde_json::from_value(json!({"metadata": {"name": "m", "labels": labels}, "spec": {}}))
            .unwrap()
    };
    assert!(applies_to(&with_labels(
        json!({"machine.openshift.io/os-id": "Windows"})
    )));
    assert!(applies_to(&with_labels(
        json!({"machine.openshift.io/os-id": "Windows", IGNORE_LABEL: "false"})
    )));
    assert!(!applies_to(&with_labels(
        json!({"machine.openshift.io/os-id": "Windows", IGNORE_LABEL: "true"})
    )));
    assert!(!applies_to(&with_labels(json!({}))));
}

#[test]
fn the_machines_node_by_node_ref_else_by_name() {
    let other: Node = serde_json::from_value(json!({"metadata": {"name": "other"}})).unwrap();
    let named: Node = serde_json::from_value(json!({"metadata": {"name": "WIN-ABCDE"}})).unwrap();
    let nodes = [&other, &named];
    let unlinked = MachineAt::provisioned().build();
    assert_eq!(
        node_of(&unlinked, &nodes).map(ResourceExt::name_any),
        Some("WIN-ABCDE".into())
    );
    let linked = MachineAt {
        node_ref: Some("other"),
        ..MachineAt::running()
    }
    .build();
    assert_eq!(
        node_of(&linked, &nodes).map(ResourceExt::name_any),
        Some("other".into())
    );
}

#[test]
fn durations_as_people_write_them() {
    assert_eq!(human_duration(Duration::from_secs(5400)), "90m");
    assert_eq!(human_duration(Duration::from_secs(45)), "45s");
    assert_eq!(human_duration(Duration::from_secs(90)), "90s");
    assert_eq!(human_duration(Duration::from_millis(1500)), "1500ms");
}

#[test]
fn times_at_the_ends_of_the_range_do_not_panic() {
    let mut machine = MachineAt::provisioned().build();
    let csr_at_the_start = {
        let mut csr = client_csr("csr-min", NAME, CREATED, CsrState::Pending);
        csr.csr.created = Some(Timestamp::MIN);
        csr
    };
    for (machine_created, now) in [
        (Timestamp::MAX, Timestamp::MIN),
        (Timestamp::MIN, Timestamp::MAX),
    ] {
        machine.metadata.creation_timestamp = Some(Time(machine_created));
        let machines = vec![machine_facts(&machine)];
        let state = join_state(&JoinInput {
            machine: &machine,
            node: None,
            csrs: std::slice::from_ref(&csr_at_the_start),
            machines: &machines,
            node_names: &[],
            vm_ips: None,
            previous: None,
            now,
            timeout: Duration::MAX,
        })
        .unwrap();
        assert!(!state.complete());
    }
}

/// A `WindowsJoin` condition at `reason`, written at `when`.
fn join_condition(reason: &str, ok: bool, when: &str) -> ProviderCondition {
    provider_condition(
        CONDITION,
        ok,
        reason,
        format!("stage {reason}"),
        &Time(at(when)),
    )
}

#[test]
fn an_unchanged_condition_is_not_written_again_and_keeps_its_transition_time() {
    let first = join_condition("VMCreated", false, "2026-12-01T10:00:00Z");
    let later = join_condition("AddressReported", false, "2026-12-01T10:09:00Z");
    let next = next_condition(Some(&first), later);
    assert_eq!(next.last_transition_time, first.last_transition_time);
    assert_eq!(next.reason, "AddressReported");
    let done = next_condition(
        Some(&next),
        join_condition("Configured", true, "2026-12-01T10:20:00Z"),
    );
    assert_eq!(
        done.last_transition_time,
        Some(Time(at("2026-12-01T10:20:00Z")))
    );

    let mut status = NutanixMachineProviderStatus::default();
    status
        .other
        .insert(STATUS_FIELD.to_owned(), json!(next.clone()));
    assert_eq!(condition_patch(&status, &next, Some("7")), None);
    let patch = condition_patch(&status, &done, Some("7")).unwrap();
    assert_eq!(
        patch,
        json!({"status": {"providerStatus": {STATUS_FIELD: done}}})
    );
}

#[test]
fn a_condition_an_earlier_version_kept_in_the_list_is_moved_once_against_its_version() {
    let old = join_condition("NodeLinked", false, "2026-12-01T10:00:00Z");
    let creation = provider_condition(
        "MachineCreation",
        true,
        "MachineCreationSucceeded",
        "created",
        &Time(at("2026-12-01T09:00:00Z")),
    );
    let status = NutanixMachineProviderStatus {
        conditions: vec![creation.clone(), old.clone()],
        ..NutanixMachineProviderStatus::default()
    };
    assert_eq!(recorded_condition(&status), Some(old.clone()));
    let patch = condition_patch(&status, &old, Some("7")).unwrap();
    assert_eq!(
        patch,
        json!({
            "metadata": {"resourceVersion": "7"},
            "status": {"providerStatus": {"conditions": [creation], STATUS_FIELD: old}},
        })
    );
}
