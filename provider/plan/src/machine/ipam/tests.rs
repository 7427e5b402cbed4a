use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::LocalObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use pretty_assertions::assert_eq;

use super::*;
use crate::api::ipam::{IpAddressClaimStatus, IpAddressSpec};

fn identity() -> MachineIdentity {
    MachineIdentity {
        namespace: "openshift-machine-api".into(),
        name: "win-a".into(),
        uid: "uid-1".into(),
    }
}

fn pool(name: &str) -> PoolRef {
    PoolRef {
        api_group: "ipam.cluster.x-k8s.io".into(),
        kind: "InClusterIPPool".into(),
        name: name.into(),
    }
}

type Parsed = Result<Vec<Option<PoolRef>>, IpPoolError>;

#[test]
fn the_annotation_names_one_pool_per_nic_in_subnet_order() {
    let cases: [(&str, Parsed); 7] = [
        (
            "ipam.cluster.x-k8s.io/InClusterIPPool/workers",
            Ok(vec![Some(pool("workers"))]),
        ),
        (
            " ipam.cluster.x-k8s.io/InClusterIPPool/workers , ,ipam.cluster.x-k8s.io/InClusterIPPool/storage",
            Ok(vec![Some(pool("workers")), None, Some(pool("storage"))]),
        ),
        (
            ",ipam.cluster.x-k8s.io/InClusterIPPool/b",
            Ok(vec![None, Some(pool("b"))]),
        ),
        ("", Err(IpPoolError::NoPool)),
        (
            "InClusterIPPool/workers",
            Err(IpPoolError::Malformed {
                nic: 0,
                entry: "InClusterIPPool/workers".into(),
            }),
        ),
        (
            "ipam.cluster.x-k8s.io/inclusterippools/workers",
            Err(IpPoolError::BadKind {
                nic: 0,
                value: "inclusterippools".into(),
            }),
        ),
        (
            "ipam.cluster.x-k8s.io/InClusterIPPool/Workers",
            Err(IpPoolError::BadGroup {
                nic: 0,
                part: "name",
                value: "Workers".into(),
            }),
        ),
    ];
    for (value, expected) in cases {
        assert_eq!(parse_ip_pools(value), expected, "{value:?}");
    }
}

#[test]
fn errors_name_the_annotation() {
    let error = parse_ip_pools("a/b").unwrap_err().to_string();
    assert!(
        error.starts_with("metadata.annotations[nutanix.machine.openshift.io/ip-pool] entry 0"),
        "{error}"
    );
    let error = check_nic_count(&[None, Some(pool("a"))], 1)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("2 entries but the Machine has 1 NICs"),
        "{error}"
    );
    assert_eq!(check_nic_count(&[Some(pool("a"))], 2), Ok(()));
}

#[test]
fn a_claim_is_named_as_vsphere_names_it_and_owned_by_its_machine() {
    let claim = claim_object(&identity(), 1, &pool("workers"));
    assert_eq!(claim.metadata.name.as_deref(), Some("win-a-claim-1-0"));
    assert_eq!(
        claim.metadata.namespace.as_deref(),
        Some("openshift-machine-api")
    );
    let owner = &claim.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (
            owner.kind.as_str(),
            owner.uid.as_str(),
            owner.controller,
            owner.block_owner_deletion
        ),
        ("Machine", "uid-1", Some(true), Some(true))
    );
    assert_eq!(
        claim.metadata.finalizers,
        Some(vec![IP_CLAIM_PROTECTION_FINALIZER.to_owned()])
    );
    let value = serde_json::to_value(&claim).unwrap();
    assert_eq!(
        value["spec"]["poolRef"],
        serde_json::json!({"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": "workers"})
    );
    assert_eq!(value["apiVersion"], "ipam.cluster.x-k8s.io/v1beta1");
}

fn claim(nic: usize, bound_to: Option<&str>, owner_uid: &str) -> IPAddressClaim {
    let mut claim = claim_object(&identity(), nic, &pool("workers"));
    claim.metadata.owner_references.as_mut().unwrap()[0].uid = owner_uid.into();
    claim.status = Some(IpAddressClaimStatus {
        address_ref: bound_to.map(|name| LocalObjectReference { name: name.into() }),
        extra: Default::default(),
    });
    claim
}

fn address(ip: &str, prefix: i64, gateway: Option<&str>) -> IPAddress {
    IPAddress {
        metadata: ObjectMeta {
            name: Some("win-a-claim-0-0".into()),
            ..ObjectMeta::default()
        },
        spec: IpAddressSpec {
            claim_ref: LocalObjectReference {
                name: "win-a-claim-0-0".into(),
            },
            pool_ref: Default::default(),
            address: ip.into(),
            prefix,
            gateway: gateway.map(str::to_owned),
            extra: Default::default(),
        },
    }
}

fn readings(list: Vec<(usize, ClaimReading)>) -> BTreeMap<usize, ClaimReading> {
    list.into_iter().collect()
}

#[test]
fn claims_are_created_then_waited_for_then_used() {
    let pools = vec![Some(pool("workers")), None];
    let id = identity();
    assert_eq!(
        claims_state(&id, &pools, &BTreeMap::new()),
        ClaimsState::Create(vec![(0, pool("workers"))])
    );
    let unbound = readings(vec![(
        0,
        ClaimReading {
            claim: Some(claim(0, None, "uid-1")),
            ..ClaimReading::default()
        },
    )]);
    let ClaimsState::Waiting { message } = claims_state(&id, &pools, &unbound) else {
        panic!("an unbound claim is waited for");
    };
    assert!(
        message.contains("win-a-claim-0-0 is not bound yet")
            && message.contains("ipam.cluster.x-k8s.io/InClusterIPPool/workers"),
        "{message}"
    );
    let exhausted = readings(vec![(
        0,
        ClaimReading {
            claim: Some(claim(0, None, "uid-1")),
            pool_usage: Some(PoolUsage { total: 19, free: 0 }),
            ..ClaimReading::default()
        },
    )]);
    let ClaimsState::Waiting { message } = claims_state(&id, &pools, &exhausted) else {
        panic!("an exhausted pool's claim is waited for");
    };
    assert!(
        message.contains("pool ipam.cluster.x-k8s.io/InClusterIPPool/workers is exhausted (0 of its 19 addresses free)"),
        "{message}"
    );
    let named_not_read = readings(vec![(
        0,
        ClaimReading {
            claim: Some(claim(0, Some("win-a-claim-0-0"), "uid-1")),
            ..ClaimReading::default()
        },
    )]);
    assert!(matches!(
        claims_state(&id, &pools, &named_not_read),
        ClaimsState::Waiting { .. }
    ));
    let bound = readings(vec![(
        0,
        ClaimReading {
            claim: Some(claim(0, Some("win-a-claim-0-0"), "uid-1")),
            address: Some(address("10.0.0.21", 24, Some("10.0.0.1"))),
            pool_usage: None,
        },
    )]);
    assert_eq!(
        claims_state(&id, &pools, &bound),
        ClaimsState::Bound(vec![
            Some(BoundAddress {
                ip: "10.0.0.21".parse().unwrap(),
                prefix: 24,
                gateway: Some("10.0.0.1".parse().unwrap()),
            }),
            None
        ])
    );
}

#[test]
fn a_claim_of_another_machine_or_being_released_is_waited_for_never_taken() {
    let pools = vec![Some(pool("workers"))];
    let foreign = readings(vec![(
        0,
        ClaimReading {
            claim: Some(claim(0, Some("x"), "uid-old")),
            address: Some(address("10.0.0.21", 24, None)),
            pool_usage: None,
        },
    )]);
    assert!(matches!(
        claims_state(&identity(), &pools, &foreign),
        ClaimsState::Waiting { message } if message.contains("earlier Machine")
    ));
    let mut releasing = claim(0, Some("x"), "uid-1");
    releasing.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
    let releasing = readings(vec![(
        0,
        ClaimReading {
            claim: Some(releasing),
            ..ClaimReading::default()
        },
    )]);
    assert!(matches!(
        claims_state(&identity(), &pools, &releasing),
        ClaimsState::Waiting { .. }
    ));
}

#[test]
fn a_claim_no_one_controls_is_adopted_keeping_its_owners_and_finalizers() {
    let pools = vec![Some(pool("workers"))];
    let mut orphan = claim(0, Some("x"), "uid-1");
    // An owner that is not a controller (a backup tool's, say) stays; the Machine is added.
    orphan.metadata.owner_references.as_mut().unwrap()[0].controller = None;
    orphan.metadata.owner_references.as_mut().unwrap()[0].uid = "uid-other".into();
    orphan.metadata.finalizers = Some(vec![
        "example.com/keep".into(),
        IP_CLAIM_PROTECTION_FINALIZER.into(),
    ]);
    orphan.metadata.resource_version = Some("41".into());
    let reading = readings(vec![(
        0,
        ClaimReading {
            claim: Some(orphan),
            address: Some(address("10.0.0.21", 24, None)),
            pool_usage: None,
        },
    )]);
    let ClaimsState::Adopt(adoptions) = claims_state(&identity(), &pools, &reading) else {
        panic!("an orphan claim is adopted before use");
    };
    let [adoption] = adoptions.as_slice() else {
        panic!("{adoptions:?}");
    };
    assert_eq!(
        (adoption.nic, adoption.name.as_str()),
        (0, "win-a-claim-0-0")
    );
    assert_eq!(adoption.resource_version.as_deref(), Some("41"));
    let owners: Vec<(&str, Option<bool>)> = adoption
        .owner_references
        .iter()
        .map(|o| (o.uid.as_str(), o.controller))
        .collect();
    assert_eq!(owners, [("uid-other", None), ("uid-1", Some(true))]);
    assert_eq!(
        adoption.finalizers,
        ["example.com/keep", IP_CLAIM_PROTECTION_FINALIZER],
        "the protection finalizer once"
    );

    // An orphan claim from another pool is refused as any claim of another pool, not adopted.
    let mut other_pool = claim(0, None, "uid-1");
    other_pool.metadata.owner_references = None;
    other_pool.spec.pool_ref.name = "other".into();
    let reading = readings(vec![(
        0,
        ClaimReading {
            claim: Some(other_pool),
            ..ClaimReading::default()
        },
    )]);
    assert!(matches!(
        claims_state(&identity(), &pools, &reading),
        ClaimsState::Invalid(_)
    ));
}

#[test]
fn a_claim_of_another_pool_or_a_bad_address_is_invalid() {
    let pools = vec![Some(pool("other"))];
    let reading = readings(vec![(
        0,
        ClaimReading {
            claim: Some(claim(0, None, "uid-1")),
            ..ClaimReading::default()
        },
    )]);
    assert!(matches!(
        claims_state(&identity(), &pools, &reading),
        ClaimsState::Invalid(message) if message.contains("claims from pool ipam.cluster.x-k8s.io/InClusterIPPool/workers")
    ));
    for (ip, prefix, gateway, field) in [
        ("10.0.0.300", 24, None, "spec.address"),
        ("10.0.0.3", 33, None, "spec.prefix"),
        ("10.0.0.3", 24, Some("gw"), "spec.gateway"),
    ] {
        let reading = readings(vec![(
            0,
            ClaimReading {
                claim: Some(claim(0, Some("a"), "uid-1")),
                address: Some(address(ip, prefix, gateway)),
                pool_usage: None,
            },
        )]);
        assert!(
            matches!(
                claims_state(&identity(), &[Some(pool("workers"))], &reading),
                ClaimsState::Invalid(message) if message.contains(field)
            ),
            "{field}"
        );
    }
}

#[test]
fn a_bound_address_is_assigned_on_a_managed_subnet_and_set_by_a_windows_guest_elsewhere() {
    let bound = |ip: &str| {
        Some(BoundAddress {
            ip: ip.parse().unwrap(),
            prefix: 24,
            gateway: None,
        })
    };
    let linux = GuestAddressing::Unsupported(NoGuestAddressing::Linux);
    let windows = GuestAddressing::Windows {
        nameservers: vec!["10.0.0.2".parse().unwrap()],
    };
    let managed = Some("10.0.0.0/24".parse().unwrap());
    let pools = [Some(pool("workers")), None];
    for guest in [&linux, &windows] {
        assert_eq!(
            nic_addressing(
                &pools,
                &[("s-1".into(), managed), ("s-2".into(), None)],
                &[bound("10.0.0.21"), None],
                guest,
            ),
            Ok(vec![
                NicAddressing::Assigned("10.0.0.21".parse().unwrap()),
                NicAddressing::Dynamic
            ]),
            "a managed subnet: Prism assigns it, whatever the guest"
        );
    }
    let errors = nic_addressing(
        &pools,
        &[("s-1".into(), None)],
        &[bound("10.0.0.21")],
        &linux,
    )
    .unwrap_err();
    assert!(matches!(
        errors[..],
        [StaticAddressError::UnmanagedSubnet {
            nic: 0,
            why: NoGuestAddressing::Linux,
            ..
        }]
    ));
    assert!(errors[0].to_string().contains("subnet s-1"));
    assert_eq!(
        nic_addressing(
            &pools,
            &[("s-1".into(), None)],
            &[bound("10.0.0.21")],
            &windows
        ),
        Ok(vec![NicAddressing::Guest(bound("10.0.0.21").unwrap())]),
        "an unmanaged subnet: the Windows guest sets it, Prism is sent nothing"
    );
    let errors = nic_addressing(
        &pools,
        &[("s-1".into(), managed)],
        &[bound("10.9.0.21")],
        &windows,
    )
    .unwrap_err();
    assert!(matches!(
        errors[..],
        [StaticAddressError::OutsideSubnet { .. }]
    ));
    for (cidr, guest) in [
        (Some("fd00::/64".parse().unwrap()), &linux),
        (None, &windows),
    ] {
        let errors = nic_addressing(&pools, &[("s-1".into(), cidr)], &[bound("fd00::5")], guest)
            .unwrap_err();
        assert!(matches!(errors[..], [StaticAddressError::NotIpv4 { .. }]));
    }
}

#[test]
fn only_a_windows_cloud_init_machine_with_one_nic_and_nameservers_sets_its_own_address() {
    use crate::api::GuestCustomizationType::{CloudInit, Sysprep};
    let servers = Ok(vec![
        "10.0.0.2".parse().unwrap(),
        "10.0.0.3".parse().unwrap(),
    ]);
    assert_eq!(
        guest_addressing(true, &CloudInit, 1, Some(&servers)),
        GuestAddressing::Windows {
            nameservers: servers.clone().unwrap()
        }
    );
    let why = |windows, customization, nics, nameservers| match guest_addressing(
        windows,
        customization,
        nics,
        nameservers,
    ) {
        GuestAddressing::Unsupported(why) => why,
        GuestAddressing::Windows { .. } => panic!("supported"),
    };
    assert_eq!(
        why(false, &CloudInit, 1, Some(&servers)),
        NoGuestAddressing::Linux
    );
    assert_eq!(
        why(true, &Sysprep, 1, Some(&servers)),
        NoGuestAddressing::Sysprep
    );
    assert_eq!(
        why(true, &CloudInit, 2, Some(&servers)),
        NoGuestAddressing::SeveralNics { nics: 2 }
    );
    assert_eq!(
        why(true, &CloudInit, 1, None),
        NoGuestAddressing::NoNameservers
    );
    let bad = parse_nameservers("10.0.0.2, dns.example.com");
    assert!(matches!(
        why(true, &CloudInit, 1, Some(&bad)),
        NoGuestAddressing::Nameservers(NameserversError::NotAnAddress { index: 1, .. })
    ));
    assert!(
        why(true, &CloudInit, 1, Some(&bad))
            .to_string()
            .contains("nutanix.machine.openshift.io/nameservers")
    );
}

#[test]
fn nameservers_are_comma_separated_addresses_in_order() {
    assert_eq!(
        parse_nameservers(" 10.0.0.3,10.0.0.2 , fd00::53"),
        Ok(vec![
            "10.0.0.3".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
            "fd00::53".parse().unwrap()
        ])
    );
    assert_eq!(parse_nameservers(" , "), Err(NameserversError::Empty));
    assert!(matches!(
        parse_nameservers("10.0.0.300"),
        Err(NameserversError::NotAnAddress { index: 0, .. })
    ));
}
