#![no_main]
//! Structured arbitrary input through `plan::machine::addresses::machine_addresses` and
//! `plan::windows_join::csr::check_csr`. Nothing may panic, and the addresses keep their
//! documented order:
//! - InternalIP addresses parse, are not excluded, link-local, loopback, unspecified or
//!   multicast, appear once each, the cluster's primary family first;
//! - the last two are InternalDNS and Hostname, both the Machine name;
//! - a reading with no usable IP keeps the previous IPs.
//!
//! The CSR check gets arbitrary CSRs, Machines (any creation time jiff can hold) and serving
//! certificates; it must return a verdict and, for a client CSR it approves, name a Machine.

use std::net::IpAddr;

use arbitrary::{Arbitrary, Unstructured};
use ipnet::IpNet;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::NodeAddress;
use libfuzzer_sys::fuzz_target;
use nutanix_machine_controller::plan::machine::addresses::{
    AddressInput, IpReading, NicReading, address_type, machine_addresses,
};
use nutanix_machine_controller::plan::windows_join::csr::{
    CLIENT_SIGNER, Csr, CsrContext, CsrKind, CsrVerdict, MachineFacts, SERVING_SIGNER, ServingCert,
    check_csr,
};

const SUBNETS: [&str; 3] = [
    "c7938dc6-7659-453e-a688-e26020c68e43",
    "C7938DC6-7659-453E-A688-E26020C68E44",
    "0005b0f1-8f43-a0f2-02b7-3cecef193712",
];

const NAMES: [&str; 4] = ["win-abcde", "WIN-ABCDE.", "ocp-worker-0", ""];

/// An IP as Prism might report it: a real address, or text that may not parse.
#[derive(Debug, Arbitrary)]
enum IpText {
    V4([u8; 4]),
    V6([u16; 8]),
    Text(String),
}

impl IpText {
    fn text(&self) -> String {
        match self {
            Self::V4(octets) => IpAddr::from(*octets).to_string(),
            Self::V6(segments) => IpAddr::from(*segments).to_string(),
            Self::Text(text) => text.clone(),
        }
    }
}

#[derive(Debug, Arbitrary)]
struct Nic {
    subnet: Option<u8>,
    /// Each address, and whether Prism calls it ASSIGNED.
    ips: Vec<(IpText, bool)>,
}

#[derive(Debug, Arbitrary)]
struct AddressCase {
    name: u8,
    nics: Vec<Nic>,
    order: Vec<u8>,
    excluded: Vec<(IpText, u8)>,
    primary_cidr: Option<(IpText, u8)>,
    ipv6_primary: bool,
    previous: Vec<(u8, IpText)>,
}

fn any_timestamp(u: &mut Unstructured<'_>) -> arbitrary::Result<Option<Timestamp>> {
    let (min, max) = (Timestamp::MIN.as_second(), Timestamp::MAX.as_second());
    // Uniform draws almost never land near the ends of the range, where arithmetic overflows:
    // pick those on purpose too.
    let second = match u.int_in_range(0..=4)? {
        0 => return Ok(None),
        1 => min + i64::from(u.int_in_range(0..=20_000)?),
        2 => max - i64::from(u.int_in_range(0..=20_000)?),
        3 => 1_764_400_000 + i64::from(u.int_in_range(-20_000..=20_000)?),
        _ => u.int_in_range(min..=max)?,
    };
    Ok(Timestamp::from_second(second).ok())
}

fn pick<'a>(u: &mut Unstructured<'_>, choices: &[&'a str]) -> arbitrary::Result<String> {
    // Mostly the values the approver looks for, sometimes anything.
    Ok(if u.ratio(3, 4)? {
        (*u.choose(choices)?).to_owned()
    } else {
        String::arbitrary(u)?
    })
}

fn address_types() -> [&'static str; 5] {
    [
        address_type::INTERNAL_IP,
        address_type::EXTERNAL_IP,
        address_type::INTERNAL_DNS,
        address_type::HOSTNAME,
        "ExternalDNS",
    ]
}

fn node_address(u: &mut Unstructured<'_>) -> arbitrary::Result<NodeAddress> {
    let type_ = pick(u, &address_types())?;
    let address = if u.ratio(1, 2)? {
        IpText::arbitrary(u)?.text()
    } else {
        pick(u, &NAMES)?
    };
    Ok(NodeAddress { type_, address })
}

fn csr_case(
    u: &mut Unstructured<'_>,
) -> arbitrary::Result<(
    Csr,
    Vec<MachineFacts>,
    Vec<String>,
    usize,
    Option<ServingCert>,
)> {
    let node = pick(u, &NAMES)?;
    let ips: Vec<IpAddr> = Vec::<IpText>::arbitrary(u)?
        .iter()
        .filter_map(|ip| ip.text().parse().ok())
        .collect();
    let csr = Csr {
        name: "csr-1".to_owned(),
        signer_name: pick(u, &[CLIENT_SIGNER, SERVING_SIGNER])?,
        username: pick(
            u,
            &[
                "system:serviceaccount:openshift-machine-config-operator:node-bootstrapper",
                &format!("system:node:{node}"),
            ],
        )?,
        groups: (0..u.int_in_range(0..=4)?)
            .map(|_| {
                pick(
                    u,
                    &[
                        "system:serviceaccounts:openshift-machine-config-operator",
                        "system:serviceaccounts",
                        "system:authenticated",
                        "system:nodes",
                    ],
                )
            })
            .collect::<arbitrary::Result<_>>()?,
        usages: (0..u.int_in_range(0..=4)?)
            .map(|_| {
                pick(
                    u,
                    &[
                        "digital signature",
                        "key encipherment",
                        "client auth",
                        "server auth",
                    ],
                )
            })
            .collect::<arbitrary::Result<_>>()?,
        created: any_timestamp(u)?,
        common_name: pick(u, &[&format!("system:node:{node}"), "system:node:"])?,
        organizations: (0..u.int_in_range(0..=2)?)
            .map(|_| pick(u, &["system:nodes"]))
            .collect::<arbitrary::Result<_>>()?,
        dns_names: (0..u.int_in_range(0..=3)?)
            .map(|_| pick(u, &NAMES))
            .collect::<arbitrary::Result<_>>()?,
        ip_addresses: ips.clone(),
        other_sans: Vec::<String>::arbitrary(u)?.into_iter().take(2).collect(),
    };
    let machines = (0..u.int_in_range(0..=3)?)
        .map(|index| {
            Ok(MachineFacts {
                name: format!("machine-{index}"),
                created: any_timestamp(u)?,
                addresses: (0..u.int_in_range(0..=4)?)
                    .map(|_| node_address(u))
                    .collect::<arbitrary::Result<_>>()?,
                node_ref: if u.ratio(1, 2)? {
                    Some(pick(u, &NAMES)?)
                } else {
                    None
                },
            })
        })
        .collect::<arbitrary::Result<_>>()?;
    let nodes = (0..u.int_in_range(0..=2)?)
        .map(|_| pick(u, &NAMES))
        .collect::<arbitrary::Result<_>>()?;
    let recent_pending = u.int_in_range(0..=200)?;
    let cert = if u.ratio(1, 3)? {
        Some(ServingCert {
            common_name: csr.common_name.clone(),
            dns_names: csr.dns_names.clone(),
            ip_addresses: if u.ratio(1, 2)? { ips } else { Vec::new() },
            other_sans: Vec::new(),
        })
    } else {
        None
    };
    Ok((csr, machines, nodes, recent_pending, cert))
}

fn check_addresses(case: &AddressCase) {
    let name = NAMES[usize::from(case.name) % NAMES.len()];
    let nics: Vec<NicReading> = case
        .nics
        .iter()
        .map(|nic| NicReading {
            subnet_uuid: nic
                .subnet
                .map(|s| SUBNETS[usize::from(s) % SUBNETS.len()].to_owned()),
            ips: nic
                .ips
                .iter()
                .map(|(ip, assigned)| IpReading {
                    ip: ip.text(),
                    assigned: *assigned,
                })
                .collect(),
        })
        .collect();
    let order: Vec<String> = case
        .order
        .iter()
        .map(|s| SUBNETS[usize::from(*s) % SUBNETS.len()].to_owned())
        .collect();
    let excluded: Vec<IpNet> = case
        .excluded
        .iter()
        .filter_map(|(ip, prefix)| {
            let ip: IpAddr = ip.text().parse().ok()?;
            IpNet::new(ip, prefix % if ip.is_ipv4() { 33 } else { 129 }).ok()
        })
        .collect();
    let previous: Vec<NodeAddress> = case
        .previous
        .iter()
        .map(|(type_, ip)| NodeAddress {
            type_: address_types()[usize::from(*type_) % 5].to_owned(),
            address: ip.text(),
        })
        .collect();
    let primary_cidr = case.primary_cidr.as_ref().and_then(|(ip, prefix)| {
        let ip: IpAddr = ip.text().parse().ok()?;
        IpNet::new(ip, prefix % if ip.is_ipv4() { 33 } else { 129 }).ok()
    });
    let addresses = machine_addresses(&AddressInput {
        machine_name: name,
        nics: &nics,
        subnet_order: &order,
        primary_cidr,
        excluded: &excluded,
        ipv6_primary: case.ipv6_primary,
        previous: &previous,
    });
    let [ips @ .., dns, hostname] = addresses.as_slice() else {
        panic!("InternalDNS and Hostname are always there: {addresses:?}");
    };
    assert_eq!(
        (dns.type_.as_str(), dns.address.as_str()),
        (address_type::INTERNAL_DNS, name)
    );
    assert_eq!(
        (hostname.type_.as_str(), hostname.address.as_str()),
        (address_type::HOSTNAME, name)
    );
    let kept: Vec<&NodeAddress> = previous
        .iter()
        .filter(|a| a.type_ == address_type::INTERNAL_IP || a.type_ == address_type::EXTERNAL_IP)
        .collect();
    if ips.iter().collect::<Vec<_>>() == kept {
        // Nothing usable was read, and the previous IPs were kept in order (or the fresh ones
        // are the same).
        return;
    }
    let reported: Vec<IpAddr> = nics
        .iter()
        .flat_map(|nic| &nic.ips)
        .filter_map(|reading| reading.ip.trim().parse().ok())
        .collect();
    let mut seen = std::collections::BTreeSet::new();
    // The cluster's primary family first.
    let mut other_family_seen = false;
    for address in ips {
        assert_eq!(address.type_, address_type::INTERNAL_IP, "{addresses:?}");
        let ip: IpAddr = address.address.parse().expect("an InternalIP parses");
        assert!(reported.contains(&ip), "{ip} was not reported");
        assert!(seen.insert(ip), "{ip} twice");
        assert!(
            !excluded.iter().any(|net| net.contains(&ip)),
            "{ip} is excluded"
        );
        assert!(
            !ip.is_loopback() && !ip.is_unspecified() && !ip.is_multicast(),
            "{ip}"
        );
        match ip {
            IpAddr::V4(v4) => assert!(!v4.is_link_local(), "{ip} is link-local"),
            IpAddr::V6(v6) => assert!(!v6.is_unicast_link_local(), "{ip} is link-local"),
        }
        let primary_family = ip.is_ipv6() == case.ipv6_primary;
        assert!(
            !(primary_family && other_family_seen),
            "{ip} of the primary family after the other family"
        );
        other_family_seen |= !primary_family;
    }
}

fn run(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok(case) = AddressCase::arbitrary(&mut u) else {
        return;
    };
    check_addresses(&case);
    let Ok((csr, machines, nodes, recent_pending, cert)) = csr_case(&mut u) else {
        return;
    };
    let verdict = check_csr(
        &csr,
        &CsrContext {
            machines: &machines,
            node_names: &nodes,
            recent_pending,
            current_serving_cert: cert.as_ref(),
        },
    );
    match verdict {
        CsrVerdict::Approvable {
            kind: CsrKind::Client | CsrKind::Serving,
            machine,
        } => {
            assert!(machine.is_some(), "an approval names its Machine");
        }
        CsrVerdict::Approvable {
            kind: CsrKind::ServingRenewal,
            ..
        } => {
            assert!(cert.is_some(), "a renewal needs a current certificate");
        }
        CsrVerdict::Pending { reason } => assert!(!reason.is_empty()),
        CsrVerdict::NotNodeCsr => {
            assert!(csr.signer_name != CLIENT_SIGNER && csr.signer_name != SERVING_SIGNER);
        }
    }
}

fuzz_target!(|data: &[u8]| run(data));
