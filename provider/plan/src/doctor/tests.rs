use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use serde_json::json;

use super::*;

const NINETY_MINUTES: Duration = Duration::from_secs(90 * 60);

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn windows_set(name: &str) -> MachineSetFacts {
    MachineSetFacts {
        name: name.to_owned(),
        windows: true,
        machine_labels: labels(&[
            ("machine.openshift.io/cluster-api-machineset", name),
            ("machine.openshift.io/os-id", "Windows"),
        ]),
        plan: Some(Ok(Vec::new())),
    }
}

/// A cluster with everything a Windows MachineSet needs (the sandbox's healthy cluster).
fn healthy() -> Facts {
    Facts {
        prism: PrismReach::Usable,
        network_operator: Read::Found(json!({"spec": {"defaultNetwork": {
            "type": "OVNKubernetes",
            "ovnKubernetesConfig": {"hybridOverlayConfig": {
                "hybridClusterNetwork": [{"cidr": "10.132.0.0/14", "hostPrefix": 23}]}}}}})),
        cluster_version: Read::Found("4.20.3".to_owned()),
        wmco_csvs: Read::Found(vec![(
            "windows-machine-config-operator.v10.20.0".to_owned(),
            "10.20.0".to_owned(),
            "Succeeded".to_owned(),
        )]),
        windows_user_data: Read::Found(SecretShape::WithKey),
        cloud_private_key: Read::Found(SecretShape::WithKey),
        machine_sets: Read::Found(vec![windows_set("win")]),
        subnets: vec![SubnetFacts {
            name: "vlan-10".to_owned(),
            used_by: vec!["win".to_owned()],
            usage: SubnetUsage::Managed {
                total: 200,
                free: 150,
            },
        }],
        health_checks: Read::Found(vec![HealthCheckFacts {
            name: "windows".to_owned(),
            selector: LabelSelector {
                match_labels: Some(labels(&[("machine.openshift.io/os-id", "Windows")])),
                ..LabelSelector::default()
            },
            node_startup_timeout: Ok(NINETY_MINUTES),
        }]),
        windows_join_timeout: NINETY_MINUTES,
    }
}

fn found(report: &Report) -> Vec<(Check, Severity, &str)> {
    report
        .findings
        .iter()
        .map(|f| (f.check, f.severity, f.object.as_str()))
        .collect()
}

#[test]
fn a_healthy_cluster_passes_every_check() {
    let report = examine(&healthy());
    assert_eq!(report.findings, Vec::new());
    assert_eq!(report.skipped, Vec::new());
    assert_eq!(report.passed, Check::ALL.to_vec());
    assert!(!report.has_errors());
}

#[test]
fn each_planted_fault_is_found_by_its_check_alone() {
    type Plant = fn(&mut Facts);
    let cases: Vec<(&str, Plant, Check, Severity)> = vec![
        (
            "no hybrid overlay",
            |f| {
                f.network_operator = Read::Found(
                    json!({"spec": {"defaultNetwork": {"type": "OVNKubernetes", "ovnKubernetesConfig": {}}}}),
                );
            },
            Check::HybridOverlay,
            Severity::Error,
        ),
        (
            "OpenShiftSDN",
            |f| {
                f.network_operator =
                    Read::Found(json!({"spec": {"defaultNetwork": {"type": "OpenShiftSDN"}}}));
            },
            Check::HybridOverlay,
            Severity::Error,
        ),
        (
            "a custom VXLAN port",
            |f| {
                if let Read::Found(network) = &mut f.network_operator {
                    network["spec"]["defaultNetwork"]["ovnKubernetesConfig"]["hybridOverlayConfig"]
                        ["hybridOverlayVXLANPort"] = json!(9898);
                }
            },
            Check::VxlanPort,
            Severity::Warning,
        ),
        (
            "no WMCO",
            |f| f.wmco_csvs = Read::Found(Vec::new()),
            Check::Wmco,
            Severity::Error,
        ),
        (
            "WMCO of another OpenShift",
            |f| {
                f.wmco_csvs = Read::Found(vec![(
                    "windows-machine-config-operator.v10.18.1".to_owned(),
                    "10.18.1".to_owned(),
                    "Succeeded".to_owned(),
                )]);
            },
            Check::Wmco,
            Severity::Error,
        ),
        (
            "WMCO failed to install",
            |f| {
                f.wmco_csvs = Read::Found(vec![(
                    "windows-machine-config-operator.v10.20.0".to_owned(),
                    "10.20.0".to_owned(),
                    "Failed".to_owned(),
                )]);
            },
            Check::Wmco,
            Severity::Error,
        ),
        (
            "no windows-user-data",
            |f| f.windows_user_data = Read::Absent,
            Check::WindowsUserData,
            Severity::Error,
        ),
        (
            "no cloud-private-key",
            |f| f.cloud_private_key = Read::Absent,
            Check::CloudPrivateKey,
            Severity::Error,
        ),
        (
            "a cloud-private-key under another key",
            |f| f.cloud_private_key = Read::Found(SecretShape::WithoutKey),
            Check::CloudPrivateKey,
            Severity::Error,
        ),
        (
            "a MachineSet naming an image Prism lacks",
            |f| {
                if let Read::Found(sets) = &mut f.machine_sets {
                    sets[0].plan = Some(Err(vec!["providerSpec.image: no image named 'x'".into()]));
                }
            },
            Check::MachineSet,
            Severity::Error,
        ),
        (
            "Secure Boot with customization",
            |f| {
                if let Read::Found(sets) = &mut f.machine_sets {
                    sets[0].plan = Some(Ok(vec!["Secure Boot with customization".into()]));
                }
            },
            Check::MachineSet,
            Severity::Warning,
        ),
        (
            "an exhausted pool",
            |f| {
                f.subnets[0].usage = SubnetUsage::Managed {
                    total: 200,
                    free: 0,
                };
            },
            Check::SubnetPool,
            Severity::Error,
        ),
        (
            "an MHC with the default timeout",
            |f| {
                if let Read::Found(checks) = &mut f.health_checks {
                    checks[0].node_startup_timeout = Ok(DEFAULT_NODE_STARTUP_TIMEOUT);
                }
            },
            Check::HealthCheck,
            Severity::Warning,
        ),
        (
            "Prism refuses the credentials",
            |f| f.prism = PrismReach::Unusable("refused (401)".into()),
            Check::PrismCentral,
            Severity::Error,
        ),
    ];
    for (name, plant, check, severity) in cases {
        let mut facts = healthy();
        plant(&mut facts);
        let report = examine(&facts);
        let checks: Vec<(Check, Severity)> = report
            .findings
            .iter()
            .map(|f| (f.check, f.severity))
            .collect();
        assert_eq!(checks, vec![(check, severity)], "{name}: {report:#?}");
        assert!(!report.passed.contains(&check), "{name}");
        // The others pass, or are skipped for the same cause (no hybrid overlay: no VXLAN port).
        assert_eq!(
            report.passed.len() + report.skipped.len(),
            Check::ALL.len() - 1,
            "{name}"
        );
        assert!(!report.findings[0].fix.is_empty(), "{name}");
    }
}

#[test]
fn windows_prerequisites_are_warnings_until_a_windows_machineset_exists() {
    let mut facts = healthy();
    facts.machine_sets = Read::Found(vec![MachineSetFacts {
        windows: false,
        ..windows_set("linux")
    }]);
    facts.cloud_private_key = Read::Absent;
    facts.wmco_csvs = Read::Absent;
    let report = examine(&facts);
    assert_eq!(
        found(&report),
        vec![
            (
                Check::Wmco,
                Severity::Warning,
                "ClusterServiceVersion in openshift-windows-machine-config-operator"
            ),
            (
                Check::CloudPrivateKey,
                Severity::Warning,
                "Secret/cloud-private-key in openshift-windows-machine-config-operator"
            ),
        ]
    );
    assert!(!report.has_errors());
}

#[test]
fn wmco_versions_pair_with_openshift_versions() {
    let with = |wmco: &str, cluster: &str| {
        let mut facts = healthy();
        facts.wmco_csvs = Read::Found(vec![(
            format!("windows-machine-config-operator.v{wmco}"),
            wmco.to_owned(),
            "Succeeded".to_owned(),
        )]);
        facts.cluster_version = Read::Found(cluster.to_owned());
        let report = examine(&facts);
        (
            report
                .findings
                .iter()
                .map(|f| f.severity)
                .collect::<Vec<_>>(),
            report.skipped.len(),
        )
    };
    assert_eq!(with("10.20.0", "4.20.3"), (vec![], 0));
    assert_eq!(with("10.16.1", "4.16.20"), (vec![], 0));
    // 9.0 for 4.14, with the --node-ip warning of WMCO before 10.16.
    assert_eq!(with("9.0.2", "4.14.8"), (vec![Severity::Warning], 0));
    assert_eq!(
        with("10.15.3", "4.15.1"),
        (vec![Severity::Warning], 0),
        "10.15 lacks --node-ip"
    );
    assert_eq!(with("10.19.0", "4.20.3"), (vec![Severity::Error], 0));
    assert_eq!(
        with("9.0.2", "4.13.0"),
        (vec![Severity::Warning, Severity::Error], 0)
    );
    // A pairing no source here shows is not judged.
    assert_eq!(with("11.0.0", "4.22.0"), (vec![], 1));
}

#[test]
fn a_health_check_matters_only_over_windows_machines_and_below_the_join_timeout() {
    let with = |selector: LabelSelector, timeout: Result<Duration, String>| {
        let mut facts = healthy();
        facts.machine_sets = Read::Found(vec![
            windows_set("win"),
            MachineSetFacts {
                windows: false,
                machine_labels: labels(&[("machine.openshift.io/cluster-api-machineset", "lin")]),
                ..windows_set("lin")
            },
        ]);
        facts.health_checks = Read::Found(vec![HealthCheckFacts {
            name: "mhc".to_owned(),
            selector,
            node_startup_timeout: timeout,
        }]);
        examine(&facts).findings
    };
    let set = |name: &str| LabelSelector {
        match_labels: Some(labels(&[(
            "machine.openshift.io/cluster-api-machineset",
            name,
        )])),
        ..LabelSelector::default()
    };
    let short = Ok(Duration::from_secs(20 * 60));
    assert_eq!(with(set("lin"), short.clone()), Vec::new(), "Linux only");
    let findings = with(set("win"), short.clone());
    assert_eq!(findings.len(), 1);
    assert!(findings[0].problem.contains("win") && findings[0].problem.contains("20m"));
    assert_eq!(
        with(set("win"), Ok(Duration::ZERO)),
        Vec::new(),
        "0 turns it off"
    );
    assert_eq!(with(set("win"), Ok(NINETY_MINUTES)), Vec::new());
    // An empty selector selects every Machine, the Windows ones too.
    assert_eq!(with(LabelSelector::default(), short.clone()).len(), 1);
    let not_windows = LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: "machine.openshift.io/os-id".to_owned(),
            operator: "NotIn".to_owned(),
            values: Some(vec!["Windows".to_owned()]),
        }]),
        ..LabelSelector::default()
    };
    assert_eq!(with(not_windows, short), Vec::new());
    assert_eq!(with(set("win"), Err("ten minutes".into())).len(), 1);
}

#[test]
fn selectors_follow_apimachinery() {
    let object = labels(&[("a", "1"), ("b", "2")]);
    let expression = |key: &str, operator: &str, values: &[&str]| LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: key.to_owned(),
            operator: operator.to_owned(),
            values: Some(values.iter().map(|v| (*v).to_owned()).collect()),
        }]),
        ..LabelSelector::default()
    };
    assert!(selects(&LabelSelector::default(), &object));
    assert!(selects(&expression("a", "In", &["1", "3"]), &object));
    assert!(!selects(&expression("a", "In", &["3"]), &object));
    assert!(selects(&expression("c", "NotIn", &["1"]), &object));
    assert!(!selects(&expression("a", "NotIn", &["1"]), &object));
    assert!(selects(&expression("b", "Exists", &[]), &object));
    assert!(!selects(&expression("b", "DoesNotExist", &[]), &object));
    assert!(!selects(&expression("a", "Matches", &["1"]), &object));
    let both = LabelSelector {
        match_labels: Some(labels(&[("a", "1")])),
        ..expression("b", "In", &["3"])
    };
    assert!(
        !selects(&both, &object),
        "matchLabels and expressions are AND-ed"
    );
}

#[test]
fn unreadable_objects_skip_their_checks_and_an_unmanaged_subnet_is_not_judged() {
    let mut facts = healthy();
    facts.network_operator = Read::Unreadable("forbidden".into());
    facts.subnets[0].usage = SubnetUsage::Unmanaged;
    facts.prism = PrismReach::NotTried("no credentials Secret".into());
    let report = examine(&facts);
    assert_eq!(report.findings, Vec::new());
    let skipped: Vec<Check> = report.skipped.iter().map(|s| s.check).collect();
    assert_eq!(
        skipped,
        vec![
            Check::PrismCentral,
            Check::HybridOverlay,
            Check::VxlanPort,
            Check::SubnetPool
        ]
    );
}

#[test]
fn counts_have_every_check_and_severity() {
    let mut facts = healthy();
    facts.cloud_private_key = Read::Absent;
    let counts = examine(&facts).counts();
    assert_eq!(counts.len(), Check::ALL.len() * 2);
    assert_eq!(counts[&(Check::CloudPrivateKey, Severity::Error)], 1);
    assert_eq!(counts[&(Check::Wmco, Severity::Error)], 0);
}

#[test]
fn checks_serialize_as_their_names() {
    for check in Check::ALL {
        assert_eq!(serde_json::to_value(check).unwrap(), check.name());
    }
}
