//! Kubelet certificate signing requests: the PKCS#10 requests the node agent generates (as the
//! kubelet does) and the reading of a `CertificateSigningRequest` object into the plan layer's
//! [`Csr`], which the approver checks.

use std::net::IpAddr;

use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use nutanix_machine_controller::plan::csr::{
    CLIENT_SIGNER, Csr, NODE_BOOTSTRAPPER, SERVING_SIGNER,
};
use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair};
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::prelude::FromDer;

/// Groups of the node-bootstrapper service account, the identity of a kubelet's first (client)
/// CSR. A real API server fills `spec.username` and `spec.groups` from the requester's
/// credentials; kube-sim keeps what the client writes, so the agent writes them.
pub const NODE_BOOTSTRAPPER_GROUPS: [&str; 3] = [
    "system:serviceaccounts:openshift-machine-config-operator",
    "system:serviceaccounts",
    "system:authenticated",
];
/// The group of every node identity.
pub const NODES_GROUP: &str = "system:nodes";
/// Usages a kubelet asks for on its client certificate (ECDSA key: no key encipherment).
pub const CLIENT_USAGES: [&str; 2] = ["digital signature", "client auth"];
/// Usages a kubelet asks for on its serving certificate.
pub const SERVING_USAGES: [&str; 2] = ["digital signature", "server auth"];

/// Why a request could not be generated or read.
#[derive(Debug, thiserror::Error)]
pub enum CsrError {
    #[error("cannot generate the request for node {node}: {source}")]
    Generate { node: String, source: rcgen::Error },
    #[error("CSR {csr}: spec.request is not PEM: {message}")]
    NotPem { csr: String, message: String },
    #[error("CSR {csr}: spec.request holds a {label:?} PEM block, not a CERTIFICATE REQUEST")]
    WrongPemLabel { csr: String, label: String },
    #[error("CSR {csr}: spec.request is not a PKCS#10 request: {message}")]
    NotPkcs10 { csr: String, message: String },
    #[error("CSR {csr}: a subject alternative name IP address has {len} bytes")]
    BadIpAddress { csr: String, len: usize },
}

/// The node name a kubelet's identity carries: `system:node:<name>`.
pub fn node_user(node: &str) -> String {
    format!("system:node:{node}")
}

fn request_pem(node: &str, sans: Vec<String>) -> Result<String, CsrError> {
    let error = |source| CsrError::Generate {
        node: node.to_owned(),
        source,
    };
    // A fresh ECDSA P-256 key per request, as the kubelet generates one per certificate.
    let key = KeyPair::generate().map_err(error)?;
    let mut params = CertificateParams::new(sans).map_err(error)?;
    let mut subject = DistinguishedName::new();
    subject.push(DnType::OrganizationName, NODES_GROUP);
    subject.push(DnType::CommonName, node_user(node));
    params.distinguished_name = subject;
    params
        .serialize_request(&key)
        .map_err(error)?
        .pem()
        .map_err(error)
}

fn csr_object(
    signer: &str,
    usages: &[&str],
    username: String,
    groups: Vec<String>,
    pem: String,
) -> CertificateSigningRequest {
    CertificateSigningRequest {
        metadata: ObjectMeta {
            generate_name: Some("csr-".to_owned()),
            ..ObjectMeta::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(pem.into_bytes()),
            signer_name: signer.to_owned(),
            usages: Some(usages.iter().map(|u| (*u).to_owned()).collect()),
            username: Some(username),
            groups: Some(groups),
            ..CertificateSigningRequestSpec::default()
        },
        status: None,
    }
}

/// The kubelet's bootstrap request: a client certificate for `system:node:<node>` in
/// `system:nodes`, asked by the node-bootstrapper service account.
pub fn client_csr(node: &str) -> Result<CertificateSigningRequest, CsrError> {
    let pem = request_pem(node, Vec::new())?;
    Ok(csr_object(
        CLIENT_SIGNER,
        &CLIENT_USAGES,
        NODE_BOOTSTRAPPER.to_owned(),
        NODE_BOOTSTRAPPER_GROUPS
            .iter()
            .map(|g| (*g).to_owned())
            .collect(),
        pem,
    ))
}

/// The kubelet's serving request, asked by the node itself, for its name and address.
pub fn serving_csr(node: &str, ip: IpAddr) -> Result<CertificateSigningRequest, CsrError> {
    let pem = request_pem(node, vec![node.to_owned(), ip.to_string()])?;
    Ok(csr_object(
        SERVING_SIGNER,
        &SERVING_USAGES,
        node_user(node),
        vec![NODES_GROUP.to_owned(), "system:authenticated".to_owned()],
        pem,
    ))
}

/// Reads a CSR object and its PEM request into what the approver's rules look at.
pub fn parse(object: &CertificateSigningRequest) -> Result<Csr, CsrError> {
    let name = object.name_any();
    let (_, pem) =
        x509_parser::pem::parse_x509_pem(&object.spec.request.0).map_err(|e| CsrError::NotPem {
            csr: name.clone(),
            message: e.to_string(),
        })?;
    if pem.label != "CERTIFICATE REQUEST" {
        return Err(CsrError::WrongPemLabel {
            csr: name,
            label: pem.label,
        });
    }
    let (_, request) =
        X509CertificationRequest::from_der(&pem.contents).map_err(|e| CsrError::NotPkcs10 {
            csr: name.clone(),
            message: e.to_string(),
        })?;
    let subject = &request.certification_request_info.subject;
    let text = |attribute: &x509_parser::x509::AttributeTypeAndValue<'_>| {
        attribute.as_str().unwrap_or_default().to_owned()
    };
    let mut csr = Csr {
        name: name.clone(),
        signer_name: object.spec.signer_name.clone(),
        username: object.spec.username.clone().unwrap_or_default(),
        groups: object.spec.groups.clone().unwrap_or_default(),
        usages: object.spec.usages.clone().unwrap_or_default(),
        created: object.metadata.creation_timestamp.as_ref().map(|t| t.0),
        common_name: subject
            .iter_common_name()
            .next()
            .map(text)
            .unwrap_or_default(),
        organizations: subject.iter_organization().map(text).collect(),
        ..Csr::default()
    };
    for extension in request.requested_extensions().into_iter().flatten() {
        let ParsedExtension::SubjectAlternativeName(sans) = extension else {
            continue;
        };
        for san in &sans.general_names {
            match san {
                GeneralName::DNSName(dns) => csr.dns_names.push((*dns).to_owned()),
                GeneralName::IPAddress(bytes) => csr.ip_addresses.push(ip_of(&name, bytes)?),
                other => csr.other_sans.push(other.to_string()),
            }
        }
    }
    Ok(csr)
}

fn ip_of(csr: &str, bytes: &[u8]) -> Result<IpAddr, CsrError> {
    if let Ok(v4) = <[u8; 4]>::try_from(bytes) {
        return Ok(IpAddr::from(v4));
    }
    <[u8; 16]>::try_from(bytes)
        .map(IpAddr::from)
        .map_err(|_| CsrError::BadIpAddress {
            csr: csr.to_owned(),
            len: bytes.len(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(mut csr: CertificateSigningRequest) -> CertificateSigningRequest {
        csr.metadata.name = Some("csr-test".to_owned());
        csr
    }

    #[test]
    fn client_request_round_trips_with_the_kubelet_identity() {
        let parsed = parse(&named(client_csr("win-a1b2c").unwrap())).unwrap();
        assert_eq!(parsed.signer_name, CLIENT_SIGNER);
        assert_eq!(parsed.common_name, "system:node:win-a1b2c");
        assert_eq!(parsed.organizations, ["system:nodes"]);
        assert_eq!(parsed.username, NODE_BOOTSTRAPPER);
        assert_eq!(parsed.groups, NODE_BOOTSTRAPPER_GROUPS);
        assert_eq!(parsed.usages, CLIENT_USAGES);
        assert!(parsed.dns_names.is_empty() && parsed.ip_addresses.is_empty());
        assert!(parsed.other_sans.is_empty());
    }

    #[test]
    fn serving_request_carries_name_and_address() {
        let ip: IpAddr = "10.40.1.7".parse().unwrap();
        let parsed = parse(&named(serving_csr("win-a1b2c", ip).unwrap())).unwrap();
        assert_eq!(parsed.signer_name, SERVING_SIGNER);
        assert_eq!(parsed.username, "system:node:win-a1b2c");
        assert_eq!(parsed.common_name, parsed.username);
        assert_eq!(parsed.groups, ["system:nodes", "system:authenticated"]);
        assert_eq!(parsed.dns_names, ["win-a1b2c"]);
        assert_eq!(parsed.ip_addresses, [ip]);
        let v6: IpAddr = "fd00::7".parse().unwrap();
        let parsed = parse(&named(serving_csr("n", v6).unwrap())).unwrap();
        assert_eq!(parsed.ip_addresses, [v6]);
    }

    #[test]
    fn requests_that_are_not_pkcs10_pem_are_errors_naming_the_csr() {
        let mut not_pem = named(client_csr("n").unwrap());
        not_pem.spec.request = ByteString(b"AAAA".to_vec());
        assert!(matches!(parse(&not_pem), Err(CsrError::NotPem { csr, .. }) if csr == "csr-test"));

        let mut certificate = not_pem.clone();
        certificate.spec.request =
            ByteString(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".to_vec());
        assert!(matches!(
            parse(&certificate),
            Err(CsrError::WrongPemLabel { label, .. }) if label == "CERTIFICATE"
        ));

        let mut garbage = not_pem;
        garbage.spec.request = ByteString(
            b"-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n"
                .to_vec(),
        );
        assert!(matches!(parse(&garbage), Err(CsrError::NotPkcs10 { .. })));
    }
}
