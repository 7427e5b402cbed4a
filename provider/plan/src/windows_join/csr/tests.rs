use pretty_assertions::assert_eq;

use super::*;

fn at(text: &str) -> Option<Timestamp> {
    Some(text.parse().unwrap())
}

fn address(type_: &str, address: &str) -> NodeAddress {
    NodeAddress {
        type_: type_.into(),
        address: address.into(),
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

fn machine() -> MachineFacts {
    MachineFacts {
        name: "winworker-abcde".into(),
        created: at("2026-03-01T10:00:00Z"),
        addresses: vec![
            address("InternalIP", "10.0.0.5"),
            address("InternalDNS", "winworker-abcde"),
            address("Hostname", "winworker-abcde"),
        ],
        node_ref: None,
    }
}

fn client_csr() -> Csr {
    Csr {
        name: "csr-1".into(),
        signer_name: CLIENT_SIGNER.into(),
        username: NODE_BOOTSTRAPPER.into(),
        groups: strings(&NODE_BOOTSTRAPPER_GROUPS),
        usages: strings(&["digital signature", "client auth"]),
        created: at("2026-03-01T10:20:00Z"),
        common_name: "system:node:winworker-abcde".into(),
        organizations: strings(&["system:nodes"]),
        ..Csr::default()
    }
}

fn serving_csr() -> Csr {
    Csr {
        name: "csr-2".into(),
        signer_name: SERVING_SIGNER.into(),
        username: "system:node:winworker-abcde".into(),
        groups: strings(&["system:nodes", "system:authenticated"]),
        usages: strings(&["digital signature", "server auth"]),
        created: at("2026-03-01T10:30:00Z"),
        common_name: "system:node:winworker-abcde".into(),
        organizations: strings(&["system:nodes"]),
        dns_names: strings(&["winworker-abcde"]),
        ip_addresses: vec!["10.0.0.5".parse().unwrap()],
        ..Csr::default()
    }
}

fn linked() -> MachineFacts {
    MachineFacts {
        node_ref: Some("winworker-abcde".into()),
        ..machine()
    }
}

fn verdict(csr: &Csr, machines: &[MachineFacts], nodes: &[&str]) -> CsrVerdict {
    let nodes = strings(nodes);
    check_csr(
        csr,
        &CsrContext {
            machines,
            node_names: &nodes,
            recent_pending: 0,
            current_serving_cert: None,
        },
    )
}

fn reason(verdict: CsrVerdict) -> String {
    match verdict {
        CsrVerdict::Pending { reason } => reason,
        other => panic!("expected pending, got {other:?}"),
    }
}

#[test]
fn client_csr_table() {
    let approvable = CsrVerdict::Approvable {
        kind: CsrKind::Client,
        machine: Some("winworker-abcde".into()),
    };
    assert_eq!(verdict(&client_csr(), &[machine()], &[]), approvable);
    let legacy = Csr {
        usages: strings(&["key encipherment", "digital signature", "client auth"]),
        ..client_csr()
    };
    assert_eq!(
        verdict(&legacy, &[machine()], &[]),
        approvable,
        "legacy usages"
    );
    let upper = MachineFacts {
        addresses: vec![address("InternalDNS", "WinWorker-ABCDE.")],
        ..machine()
    };
    assert_eq!(
        verdict(&client_csr(), &[upper], &[]),
        approvable,
        "case and trailing dot ignored"
    );

    type Row = (
        &'static str,
        Csr,
        Vec<MachineFacts>,
        Vec<&'static str>,
        &'static str,
    );
    let rows: Vec<Row> = vec![
        (
            "wrong organization",
            Csr {
                organizations: strings(&["system:nodes", "x"]),
                ..client_csr()
            },
            vec![machine()],
            vec![],
            "not exactly",
        ),
        (
            "has SANs",
            Csr {
                dns_names: strings(&["a"]),
                ..client_csr()
            },
            vec![machine()],
            vec![],
            "no subject alternative names",
        ),
        (
            "server usages",
            Csr {
                usages: strings(&["digital signature", "server auth"]),
                ..client_csr()
            },
            vec![machine()],
            vec![],
            "not a kubelet client's",
        ),
        (
            "not the bootstrapper",
            Csr {
                username: "system:admin".into(),
                ..client_csr()
            },
            vec![machine()],
            vec![],
            "node-bootstrapper",
        ),
        (
            "extra group",
            Csr {
                groups: strings(&[
                    "system:serviceaccounts",
                    "system:authenticated",
                    "system:masters",
                ]),
                ..client_csr()
            },
            vec![machine()],
            vec![],
            "node-bootstrapper",
        ),
        (
            "CN not a node",
            Csr {
                common_name: "winworker-abcde".into(),
                ..client_csr()
            },
            vec![machine()],
            vec![],
            "does not name a node",
        ),
        (
            "node exists",
            client_csr(),
            vec![machine()],
            vec!["winworker-abcde"],
            "already exists",
        ),
        (
            "Windows host not renamed",
            Csr {
                common_name: "system:node:WIN-3KD8F7Q2L1".into(),
                ..client_csr()
            },
            vec![machine()],
            vec![],
            "failed to find machine for node WIN-3KD8F7Q2L1",
        ),
        (
            "machine already linked",
            client_csr(),
            vec![linked()],
            vec![],
            "already has node winworker-abcde",
        ),
        (
            "more than 2 h after the Machine",
            Csr {
                created: at("2026-03-01T12:00:01Z"),
                ..client_csr()
            },
            vec![machine()],
            vec![],
            "more than 2 h",
        ),
        (
            "exactly 2 h is too late",
            Csr {
                created: at("2026-03-01T12:00:00Z"),
                ..client_csr()
            },
            vec![machine()],
            vec![],
            "outside",
        ),
        (
            "before the Machine beyond skew",
            Csr {
                created: at("2026-03-01T09:59:50Z"),
                ..client_csr()
            },
            vec![machine()],
            vec![],
            "outside",
        ),
        (
            "no creation time",
            Csr {
                created: None,
                ..client_csr()
            },
            vec![machine()],
            vec![],
            "no creation time",
        ),
    ];
    for (name, csr, machines, nodes, expected) in rows {
        let reason = reason(verdict(&csr, &machines, &nodes));
        assert!(reason.contains(expected), "{name}: {reason}");
    }
    let within_skew = Csr {
        created: at("2026-03-01T09:59:51Z"),
        ..client_csr()
    };
    assert_eq!(
        verdict(&within_skew, &[machine()], &[]),
        approvable,
        "9 s before the Machine is clock skew"
    );
}

#[test]
fn serving_csr_table() {
    let approvable = CsrVerdict::Approvable {
        kind: CsrKind::Serving,
        machine: Some("winworker-abcde".into()),
    };
    assert_eq!(
        verdict(&serving_csr(), &[linked()], &["winworker-abcde"]),
        approvable
    );
    let legacy = Csr {
        usages: strings(&["digital signature", "key encipherment", "server auth"]),
        ..serving_csr()
    };
    assert_eq!(verdict(&legacy, &[linked()], &[]), approvable);

    type Row = (&'static str, Csr, Vec<MachineFacts>, &'static str);
    let rows: Vec<Row> = vec![
        (
            "not a node user",
            Csr {
                username: "system:admin".into(),
                ..serving_csr()
            },
            vec![linked()],
            "not by a node",
        ),
        (
            "missing group",
            Csr {
                groups: strings(&["system:nodes"]),
                ..serving_csr()
            },
            vec![linked()],
            "lack system:nodes",
        ),
        (
            "client usages",
            Csr {
                usages: strings(&["digital signature", "client auth"]),
                ..serving_csr()
            },
            vec![linked()],
            "not a kubelet server's",
        ),
        (
            "CN differs",
            Csr {
                common_name: "system:node:other".into(),
                ..serving_csr()
            },
            vec![linked()],
            "differs from the requesting user",
        ),
        (
            "no organization",
            Csr {
                organizations: vec![],
                ..serving_csr()
            },
            vec![linked()],
            "do not include system:nodes",
        ),
        (
            "no nodeRef yet",
            serving_csr(),
            vec![machine()],
            "unable to find machine for node winworker-abcde",
        ),
        (
            "hybrid overlay IP",
            Csr {
                ip_addresses: vec!["10.0.0.5".parse().unwrap(), "10.132.1.2".parse().unwrap()],
                ..serving_csr()
            },
            vec![linked()],
            "IP address '10.132.1.2' not in machine addresses: 10.0.0.5",
        ),
        (
            "DNS name unknown",
            Csr {
                dns_names: strings(&["winworker-abcde", "win.example.com"]),
                ..serving_csr()
            },
            vec![linked()],
            "DNS name 'win.example.com' not in machine names: winworker-abcde winworker-abcde",
        ),
    ];
    for (name, csr, machines, expected) in rows {
        let reason = reason(verdict(&csr, &machines, &[]));
        assert!(reason.contains(expected), "{name}: {reason}");
    }
}

#[test]
fn serving_usages_as_the_approver_counts_them() {
    // csr_check.go validateCSRContents: two or three usages holding digital signature and
    // server auth.
    let approvable = CsrVerdict::Approvable {
        kind: CsrKind::Serving,
        machine: Some("winworker-abcde".into()),
    };
    for usages in [
        &["server auth", "digital signature"][..],
        &["digital signature", "server auth", "client auth"],
        &["digital signature", "server auth", "data encipherment"],
        &["digital signature", "server auth", "server auth"],
    ] {
        let csr = Csr {
            usages: strings(usages),
            ..serving_csr()
        };
        assert_eq!(
            verdict(&csr, &[linked()], &[]),
            approvable,
            "{usages:?}: a superset of the required usages"
        );
    }
    for usages in [
        &["digital signature"][..],
        &["server auth", "server auth"],
        &["digital signature", "key encipherment", "client auth"],
        &[
            "digital signature",
            "key encipherment",
            "server auth",
            "client auth",
        ],
    ] {
        let csr = Csr {
            usages: strings(usages),
            ..serving_csr()
        };
        assert!(
            reason(verdict(&csr, &[linked()], &[])).contains("not a kubelet server's"),
            "{usages:?}"
        );
    }
}

#[test]
fn client_usages_are_counted_exactly() {
    // node_client.go hasExactUsages: as many as the set, each in it.
    let approvable = CsrVerdict::Approvable {
        kind: CsrKind::Client,
        machine: Some("winworker-abcde".into()),
    };
    for usages in [
        &["client auth", "digital signature"][..],
        &["client auth", "client auth"],
        &["digital signature", "client auth", "client auth"],
    ] {
        let csr = Csr {
            usages: strings(usages),
            ..client_csr()
        };
        assert_eq!(verdict(&csr, &[machine()], &[]), approvable, "{usages:?}");
    }
    for usages in [
        &["digital signature", "client auth", "server auth"][..],
        &["client auth"],
        &[
            "digital signature",
            "key encipherment",
            "client auth",
            "client auth",
        ],
    ] {
        let csr = Csr {
            usages: strings(usages),
            ..client_csr()
        };
        assert!(
            reason(verdict(&csr, &[machine()], &[])).contains("not a kubelet client's"),
            "{usages:?}"
        );
    }
}

#[test]
fn ip_sans_are_compared_as_the_approver_writes_them() {
    let approvable = CsrVerdict::Approvable {
        kind: CsrKind::Serving,
        machine: Some("winworker-abcde".into()),
    };
    // An IPv4-mapped IPv6 SAN is the IPv4 address in Go's text.
    let mapped = Csr {
        ip_addresses: vec!["::ffff:10.0.0.5".parse().unwrap()],
        ..serving_csr()
    };
    assert_eq!(verdict(&mapped, &[linked()], &[]), approvable);
    let v6 = |written: &str| MachineFacts {
        addresses: vec![
            address("InternalIP", written),
            address("InternalDNS", "winworker-abcde"),
        ],
        ..linked()
    };
    let csr = Csr {
        ip_addresses: vec!["fd00:0:0::5".parse().unwrap()],
        ..serving_csr()
    };
    assert_eq!(verdict(&csr, &[v6("fd00::5")], &[]), approvable);
    // The same address written otherwise: the approver's text comparison fails, and says so.
    let why = reason(verdict(&csr, &[v6("FD00:0::5")], &[]));
    assert!(
        why.contains("IP address 'fd00::5' not in machine addresses: FD00:0::5")
            && why.contains("written as 'FD00:0::5'"),
        "{why}"
    );
    assert_eq!(
        approver_ip_text("::ffff:10.1.2.3".parse().unwrap()),
        "10.1.2.3"
    );
    assert_eq!(
        approver_ip_text("FD00:0:0:0::1".parse().unwrap()),
        "fd00::1"
    );
}

#[test]
fn serving_renewal_compares_with_the_current_certificate() {
    let csr = Csr {
        ip_addresses: vec!["10.132.1.2".parse().unwrap()],
        ..serving_csr()
    };
    let current = ServingCert {
        common_name: csr.common_name.clone(),
        dns_names: csr.dns_names.clone(),
        ip_addresses: csr.ip_addresses.clone(),
        other_sans: vec![],
    };
    let context = |cert| CsrContext {
        machines: &[],
        node_names: &[],
        recent_pending: 0,
        current_serving_cert: cert,
    };
    assert_eq!(
        check_csr(&csr, &context(Some(&current))),
        CsrVerdict::Approvable {
            kind: CsrKind::ServingRenewal,
            machine: None
        }
    );
    let changed = ServingCert {
        ip_addresses: vec!["10.0.0.5".parse().unwrap()],
        ..current.clone()
    };
    assert!(
        matches!(
            check_csr(&csr, &context(Some(&changed))),
            CsrVerdict::Pending { .. }
        ),
        "SANs changed: back to the Machine check"
    );
}

#[test]
fn other_signers_are_not_the_approvers_business() {
    let csr = Csr {
        signer_name: "kubernetes.io/kube-apiserver-client".into(),
        ..client_csr()
    };
    assert_eq!(verdict(&csr, &[machine()], &[]), CsrVerdict::NotNodeCsr);
}

#[test]
fn too_many_pending_csrs_stop_every_approval() {
    let machines = [machine()];
    let context = CsrContext {
        machines: &machines,
        node_names: &[],
        recent_pending: 102,
        current_serving_cert: None,
    };
    let reason = reason(check_csr(&client_csr(), &context));
    assert!(reason.contains("limit of 101"), "{reason}");
    let context = CsrContext {
        recent_pending: 101,
        ..context
    };
    assert!(matches!(
        check_csr(&client_csr(), &context),
        CsrVerdict::Approvable { .. }
    ));
}

/// Whoever wrote the CSR chose its names, organizations and usages: a reason quotes them cut to a
/// few hundred characters, with their length.
#[test]
fn reasons_quote_what_the_csr_says_with_a_bound() {
    let long = "n".repeat(100_000);
    let mut unknown_node = client_csr();
    unknown_node.common_name = format!("system:node:{long}");
    let mut organizations = client_csr();
    organizations.organizations = vec![long.clone(); 10];
    let mut dns = serving_csr();
    dns.dns_names = vec![long.clone()];
    let mut common_name = serving_csr();
    common_name.common_name = long.clone();
    for (csr, machines) in [
        (unknown_node, machine()),
        (organizations, machine()),
        (dns, linked()),
        (common_name, linked()),
    ] {
        let CsrVerdict::Pending { reason } = verdict(&csr, &[machines], &["winworker-abcde"])
        else {
            panic!("{}: not pending", csr.name)
        };
        assert!(
            reason.chars().count() < 1_000,
            "{}: {} characters",
            csr.name,
            reason.chars().count()
        );
        assert!(reason.contains(" characters)"), "{reason}");
    }
}
