use prism_types::v3::Subnet;
use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

const PRIMARY: &str = "subnet-primary";
const SECOND: &str = "subnet-second";

fn assigned(ips: &[&str]) -> Vec<IpReading> {
    ips.iter()
        .map(|ip| IpReading {
            ip: (*ip).to_owned(),
            assigned: true,
        })
        .collect()
}

fn nic(subnet: &str, ips: &[&str]) -> NicReading {
    NicReading {
        subnet_uuid: Some(subnet.to_owned()),
        ips: assigned(ips),
    }
}

fn learned(ip: &str) -> IpReading {
    IpReading {
        ip: ip.to_owned(),
        assigned: false,
    }
}

fn excluded() -> Vec<IpNet> {
    // cluster network, service network, hybrid overlay network
    [
        "10.128.0.0/14",
        "172.30.0.0/16",
        "10.132.0.0/14",
        "fd01::/48",
    ]
    .iter()
    .map(|n| n.parse().unwrap())
    .collect()
}

fn compute(nics: &[NicReading], previous: &[NodeAddress]) -> Vec<(String, String)> {
    compute_with(nics, previous, None, false)
}

fn compute_with(
    nics: &[NicReading],
    previous: &[NodeAddress],
    primary_cidr: Option<&str>,
    ipv6_primary: bool,
) -> Vec<(String, String)> {
    let order = [PRIMARY.to_owned(), SECOND.to_owned()];
    let excluded = excluded();
    machine_addresses(&AddressInput {
        machine_name: "win-1",
        nics,
        subnet_order: &order,
        primary_cidr: primary_cidr.map(|cidr| cidr.parse().unwrap()),
        excluded: &excluded,
        ipv6_primary,
        previous,
    })
    .into_iter()
    .map(|a| (a.type_, a.address))
    .collect()
}

fn expected(ips: &[&str]) -> Vec<(String, String)> {
    ips.iter()
        .map(|ip| ("InternalIP".to_owned(), (*ip).to_owned()))
        .chain([
            ("InternalDNS".to_owned(), "win-1".to_owned()),
            ("Hostname".to_owned(), "win-1".to_owned()),
        ])
        .collect()
}

#[test]
fn address_table() {
    let cases: Vec<(&str, Vec<NicReading>, Vec<&str>)> = vec![
        (
            "one NIC",
            vec![nic(PRIMARY, &["10.0.0.5"])],
            vec!["10.0.0.5"],
        ),
        (
            "primary NIC first even when Prism lists it second",
            vec![nic(SECOND, &["192.168.1.9"]), nic(PRIMARY, &["10.0.0.5"])],
            vec!["10.0.0.5", "192.168.1.9"],
        ),
        (
            "APIPA dropped (Windows before DHCP)",
            vec![nic(PRIMARY, &["169.254.10.2", "10.0.0.5"])],
            vec!["10.0.0.5"],
        ),
        (
            "hybrid overlay, cluster and service networks dropped",
            vec![nic(
                PRIMARY,
                &["10.132.0.2", "10.0.0.5", "10.128.2.1", "172.30.0.10"],
            )],
            vec!["10.0.0.5"],
        ),
        (
            "IPv6 after every IPv4; link-local and excluded IPv6 dropped",
            vec![
                nic(PRIMARY, &["2001:db8::5", "fe80::1", "10.0.0.5"]),
                nic(SECOND, &["fd01::7", "192.168.1.9", "fd00:1::9"]),
            ],
            vec!["10.0.0.5", "192.168.1.9", "2001:db8::5", "fd00:1::9"],
        ),
        (
            "IPv6 in canonical form",
            vec![nic(PRIMARY, &["2001:DB8:0:0:0:0:0:5"])],
            vec!["2001:db8::5"],
        ),
        (
            "duplicates (ASSIGNED and LEARNED) once",
            vec![nic(PRIMARY, &["10.0.0.5", "10.0.0.5"])],
            vec!["10.0.0.5"],
        ),
        (
            "NICs on unknown subnets after the known ones, in Prism's order",
            vec![
                nic("other", &["10.9.9.9"]),
                nic(SECOND, &["192.168.1.9"]),
                NicReading {
                    subnet_uuid: None,
                    ips: assigned(&["10.8.8.8"]),
                },
            ],
            vec!["192.168.1.9", "10.9.9.9", "10.8.8.8"],
        ),
        (
            "garbage, loopback, unspecified and multicast dropped",
            vec![nic(
                PRIMARY,
                &[
                    "",
                    "not-an-ip",
                    "127.0.0.1",
                    "0.0.0.0",
                    "224.0.0.1",
                    "::1",
                    "10.0.0.5",
                ],
            )],
            vec!["10.0.0.5"],
        ),
        (
            "subnet UUIDs compared without case",
            vec![
                nic(SECOND, &["192.168.1.9"]),
                nic("SUBNET-PRIMARY", &["10.0.0.5"]),
            ],
            vec!["10.0.0.5", "192.168.1.9"],
        ),
    ];
    for (name, nics, ips) in cases {
        assert_eq!(compute(&nics, &[]), expected(&ips), "{name}");
    }
}

#[test]
fn a_reading_without_usable_ips_keeps_the_last_good_ones() {
    let previous: Vec<NodeAddress> = serde_json::from_value(json!([
        {"type": "InternalIP", "address": "10.0.0.5"},
        {"type": "InternalDNS", "address": "old-name"},
        {"type": "Hostname", "address": "old-name"}
    ]))
    .unwrap();
    assert_eq!(
        compute(&[nic(PRIMARY, &["169.254.3.3"])], &previous),
        expected(&["10.0.0.5"])
    );
    assert_eq!(compute(&[], &previous), expected(&["10.0.0.5"]));
    assert_eq!(
        compute(&[nic(PRIMARY, &["10.0.0.6"])], &previous),
        expected(&["10.0.0.6"]),
        "a new reading wins"
    );
    assert_eq!(
        compute(&[], &[]),
        expected(&[]),
        "nothing ever seen: names only"
    );
}

#[test]
fn nics_are_read_from_vm_status() {
    let vm: Vm = serde_json::from_value(json!({
        "metadata": {"kind": "vm", "uuid": "u"},
        "status": {"resources": {"nic_list": [
            {"subnet_reference": {"kind": "subnet", "uuid": "s1"}, "ip_endpoint_list": [{"ip": "10.0.0.5", "type": "ASSIGNED"}, {"type": "LEARNED"}]},
            {"ip_endpoint_list": []}
        ]}}
    }))
    .unwrap();
    assert_eq!(
        nics_of(&vm),
        [
            nic("s1", &["10.0.0.5"]),
            NicReading {
                subnet_uuid: None,
                ips: vec![]
            }
        ]
    );
    let vm: Vm = serde_json::from_value(json!({
        "metadata": {"kind": "vm", "uuid": "u"},
        "status": {"resources": {"nic_list": [
            {"ip_endpoint_list": [{"ip": "10.0.0.9", "type": "LEARNED"}, {"ip": "10.0.0.5"}]}
        ]}}
    }))
    .unwrap();
    assert_eq!(
        nics_of(&vm),
        [NicReading {
            subnet_uuid: None,
            ips: vec![learned("10.0.0.9"), learned("10.0.0.5")]
        }],
        "only ASSIGNED counts as assigned"
    );
}

fn any_ip() -> impl Strategy<Value = String> {
    prop_oneof![
        (1u8..=223, any::<u8>(), any::<u8>(), 1u8..=254)
            .prop_map(|(a, b, c, d)| format!("{a}.{b}.{c}.{d}")),
        (any::<u8>(), any::<u8>()).prop_map(|(c, d)| format!("169.254.{c}.{d}")),
        (0u8..=3, any::<u8>()).prop_map(|(c, d)| format!("10.{}.{c}.{d}", 128 + c)),
        any::<u16>().prop_map(|x| format!("2001:db8::{x:x}")),
        any::<u16>().prop_map(|x| format!("fe80::{x:x}")),
        Just("garbage".to_owned()),
    ]
}

fn any_nic() -> impl Strategy<Value = NicReading> {
    (
        prop_oneof![
            Just(Some(PRIMARY.to_owned())),
            Just(Some(SECOND.to_owned())),
            Just(Some("other".to_owned())),
            Just(None)
        ],
        proptest::collection::vec(any_ip(), 0..4),
    )
        .prop_map(|(subnet_uuid, ips)| NicReading {
            subnet_uuid,
            ips: ips
                .into_iter()
                .map(|ip| IpReading { ip, assigned: true })
                .collect(),
        })
}

proptest! {
    #[test]
    fn address_order_invariants(nics in proptest::collection::vec(any_nic(), 0..5)) {
        let out = compute(&nics, &[]);
        let excluded = excluded();
        let n = out.len();
        // Names last, exactly once each.
        prop_assert_eq!(&out[n - 2..], &expected(&[])[..]);
        let ips: Vec<IpAddr> = out[..n - 2].iter().map(|(t, a)| {
            assert_eq!(t, "InternalIP");
            a.parse().unwrap()
        }).collect();
        // No filtered or duplicate address, and every usable one present.
        let unique: BTreeSet<IpAddr> = ips.iter().copied().collect();
        prop_assert_eq!(unique.len(), ips.len());
        prop_assert!(ips.iter().all(|ip| is_usable(*ip, &excluded)));
        let usable_of = |n: &NicReading| -> Vec<IpAddr> { n.ips.iter().filter_map(|r| r.ip.parse().ok()).filter(|ip| is_usable(*ip, &excluded)).collect() };
        let primaries: Vec<&NicReading> = nics.iter().filter(|n| n.subnet_uuid.as_deref() == Some(PRIMARY)).collect();
        let waiting = !primaries.is_empty() && primaries.iter().all(|n| usable_of(n).is_empty());
        let usable: BTreeSet<IpAddr> = if waiting { BTreeSet::new() } else { nics.iter().flat_map(usable_of).collect() };
        prop_assert_eq!(&unique, &usable, "a primary NIC without an address keeps the previous (here none)");
        // Every IPv4 before every IPv6.
        let first_v6 = ips.iter().position(IpAddr::is_ipv6).unwrap_or(ips.len());
        prop_assert!(ips[first_v6..].iter().all(IpAddr::is_ipv6));
        // The first address is the primary NIC's first usable IPv4, when it has one.
        let primary_v4 = nics.iter().filter(|n| n.subnet_uuid.as_deref() == Some(PRIMARY))
            .flat_map(|n| &n.ips).filter_map(|r| r.ip.parse::<IpAddr>().ok())
            .find(|ip| ip.is_ipv4() && is_usable(*ip, &excluded));
        if let Some(primary) = primary_v4 {
            prop_assert_eq!(ips[0], primary);
        }
        // IPv4 of the primary subnet before those of the second, before the rest.
        let rank = |ip: &IpAddr| nics.iter().filter(|n| n.ips.iter().any(|r| r.ip.parse::<IpAddr>().ok() == Some(*ip)))
            .map(|n| match n.subnet_uuid.as_deref() { Some(PRIMARY) => 0, Some(SECOND) => 1, _ => 2 }).min().unwrap_or(2);
        let v4_ranks: Vec<u8> = ips[..first_v6].iter().map(rank).collect();
        prop_assert!(v4_ranks.windows(2).all(|w| w[0] <= w[1]), "{:?}", v4_ranks);
    }
}

#[test]
fn the_primary_nics_own_assigned_address_comes_first() {
    let primary_with = |ips: Vec<IpReading>| NicReading {
        subnet_uuid: Some(PRIMARY.to_owned()),
        ips,
    };
    let vip_first = primary_with(vec![
        learned("10.0.0.100"),
        assigned(&["10.0.0.5"])[0].clone(),
    ]);
    assert_eq!(
        compute(&[vip_first], &[]),
        expected(&["10.0.0.5", "10.0.0.100"]),
        "a LEARNED VIP listed first does not win over the ASSIGNED address"
    );
    let secondary_first = nic(PRIMARY, &["192.168.50.2", "10.0.0.5"]);
    assert_eq!(
        compute_with(&[secondary_first], &[], Some("10.0.0.0/24"), false),
        expected(&["10.0.0.5", "192.168.50.2"]),
        "inside the primary subnet's CIDR before outside it"
    );
    let previous: Vec<NodeAddress> = serde_json::from_value(json!([
        {"type": "InternalIP", "address": "10.0.0.5"}
    ]))
    .unwrap();
    let waiting = [nic(PRIMARY, &[]), nic(SECOND, &["192.168.1.9"])];
    assert_eq!(
        compute(&waiting, &previous),
        expected(&["10.0.0.5"]),
        "a primary NIC without an address keeps the previous addresses"
    );
    assert_eq!(
        compute(&waiting, &[]),
        expected(&[]),
        "and never promotes the second NIC's"
    );
    let dual = [nic(PRIMARY, &["10.0.0.5", "2001:db8::5"])];
    assert_eq!(
        compute_with(&dual, &[], None, true),
        expected(&["2001:db8::5", "10.0.0.5"]),
        "IPv6 first on an IPv6-primary cluster"
    );
}

#[test]
fn the_subnet_cidr_is_read_from_prisms_ip_config() {
    // The recorded answer of a real Prism Central (pc.2024.3.0.1).
    let recorded: Value = serde_json::from_str(include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../hack/prism-mock/recorded/get_subnet.json"
    )))
    .unwrap();
    let subnet: Subnet =
        serde_json::from_value(recorded["exchanges"][0]["response"]["body"].clone()).unwrap();
    assert_eq!(
        subnet_cidr(&subnet),
        Some("10.40.142.0/24".parse().unwrap())
    );
    let unmanaged: Subnet = serde_json::from_value(
        json!({"metadata": {"kind": "subnet", "uuid": "s"}, "spec": {"name": "n", "resources": {"subnet_type": "VLAN", "vlan_id": 0}}}),
    )
    .unwrap();
    assert_eq!(subnet_cidr(&unmanaged), None);
}
