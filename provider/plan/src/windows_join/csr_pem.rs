//! Reading a `CertificateSigningRequest` (certificates.k8s.io/v1) into the [`Csr`] that
//! [`super::csr::check_csr`] compares: the object's fields plus what its PEM-encoded PKCS#10
//! request asks for (subject common name and organizations, subject alternative names).
//!
//! Only reads: the signature is not verified (the API server checked it on create) and nothing is
//! approved.

use std::net::IpAddr;

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::ResourceExt;
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::prelude::FromDer;

use super::csr::Csr;

/// PEM label of a PKCS#10 request.
const PEM_LABEL: &str = "CERTIFICATE REQUEST";

/// What a PKCS#10 request asks for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CertificateRequest {
    /// The first subject CN (empty when there is none).
    pub common_name: String,
    /// Subject O values, in order.
    pub organizations: Vec<String>,
    pub dns_names: Vec<String>,
    pub ip_addresses: Vec<IpAddr>,
    /// Other subject alternative names (email, URI, ...), as text.
    pub other_sans: Vec<String>,
}

/// Why `spec.request` could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CsrPemError {
    #[error("spec.request is not PEM: {0}")]
    NotPem(String),
    #[error("spec.request holds a {0:?} PEM block, not a CERTIFICATE REQUEST")]
    WrongLabel(String),
    #[error("spec.request is not a PKCS#10 request: {0}")]
    NotPkcs10(String),
    #[error("spec.request: a subject alternative name IP address has {0} bytes (4 or 16 expected)")]
    BadIpAddress(usize),
}

/// A CSR object that could not be read; names the object.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("CertificateSigningRequest {name}: {source}")]
pub struct CsrObjectError {
    pub name: String,
    #[source]
    pub source: CsrPemError,
}

/// Parses the first PEM block of `pem` as a PKCS#10 certificate request.
pub fn parse_csr_pem(pem: &[u8]) -> Result<CertificateRequest, CsrPemError> {
    let (_, block) = x509_parser::pem::parse_x509_pem(pem)
        .map_err(|error| CsrPemError::NotPem(error.to_string()))?;
    if block.label != PEM_LABEL {
        return Err(CsrPemError::WrongLabel(block.label));
    }
    let (_, request) = X509CertificationRequest::from_der(&block.contents)
        .map_err(|error| CsrPemError::NotPkcs10(error.to_string()))?;
    let subject = &request.certification_request_info.subject;
    // A value that is not a string type (never the case for kubelet requests) reads as empty.
    let text = |attribute: &x509_parser::x509::AttributeTypeAndValue<'_>| {
        attribute.as_str().unwrap_or_default().to_owned()
    };
    let mut parsed = CertificateRequest {
        common_name: subject
            .iter_common_name()
            .next()
            .map(text)
            .unwrap_or_default(),
        organizations: subject.iter_organization().map(text).collect(),
        ..CertificateRequest::default()
    };
    for extension in request.requested_extensions().into_iter().flatten() {
        let ParsedExtension::SubjectAlternativeName(names) = extension else {
            continue;
        };
        for name in &names.general_names {
            match name {
                GeneralName::DNSName(dns) => parsed.dns_names.push((*dns).to_owned()),
                GeneralName::IPAddress(bytes) => parsed.ip_addresses.push(ip_from_bytes(bytes)?),
                other => parsed.other_sans.push(other.to_string()),
            }
        }
    }
    Ok(parsed)
}

fn ip_from_bytes(bytes: &[u8]) -> Result<IpAddr, CsrPemError> {
    if let Ok(v4) = <[u8; 4]>::try_from(bytes) {
        return Ok(IpAddr::from(v4));
    }
    <[u8; 16]>::try_from(bytes)
        .map(IpAddr::from)
        .map_err(|_| CsrPemError::BadIpAddress(bytes.len()))
}

/// The CSR object and its request, as the approver's rules read them.
pub fn csr_of(object: &CertificateSigningRequest) -> Result<Csr, CsrObjectError> {
    let name = object.name_any();
    let request = parse_csr_pem(&object.spec.request.0).map_err(|source| CsrObjectError {
        name: name.clone(),
        source,
    })?;
    Ok(Csr {
        name,
        signer_name: object.spec.signer_name.clone(),
        username: object.spec.username.clone().unwrap_or_default(),
        groups: object.spec.groups.clone().unwrap_or_default(),
        usages: object.spec.usages.clone().unwrap_or_default(),
        created: object.metadata.creation_timestamp.as_ref().map(|t| t.0),
        common_name: request.common_name,
        organizations: request.organizations,
        dns_names: request.dns_names,
        ip_addresses: request.ip_addresses,
        other_sans: request.other_sans,
    })
}

/// Where a CSR stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CsrState {
    Pending,
    Approved,
    /// Denied or Failed: the kubelet has to ask again.
    Refused,
}

/// The CSR's state from its `status.conditions` (a Denied or Failed condition wins over
/// Approved, as the API server treats them).
pub fn csr_state(object: &CertificateSigningRequest) -> CsrState {
    let conditions = object
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .map(Vec::as_slice)
        .unwrap_or_default();
    let has = |type_: &str| {
        conditions
            .iter()
            .any(|c| c.type_ == type_ && c.status == "True")
    };
    if has("Denied") || has("Failed") {
        CsrState::Refused
    } else if has("Approved") {
        CsrState::Approved
    } else {
        CsrState::Pending
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::ByteString;
    use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair};
    use serde_json::json;

    use super::*;

    fn request(common_name: &str, organization: &str, sans: &[&str]) -> String {
        let key = KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(sans.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
                .unwrap();
        let mut subject = DistinguishedName::new();
        subject.push(DnType::OrganizationName, organization);
        subject.push(DnType::CommonName, common_name);
        params.distinguished_name = subject;
        params.serialize_request(&key).unwrap().pem().unwrap()
    }

    #[test]
    fn a_client_request_has_its_subject_and_no_sans() {
        let pem = request("system:node:win-a1b2c", "system:nodes", &[]);
        let parsed = parse_csr_pem(pem.as_bytes()).unwrap();
        assert_eq!(parsed.common_name, "system:node:win-a1b2c");
        assert_eq!(parsed.organizations, ["system:nodes"]);
        assert!(parsed.dns_names.is_empty());
        assert!(parsed.ip_addresses.is_empty());
        assert!(parsed.other_sans.is_empty());
    }

    #[test]
    fn a_serving_request_carries_dns_and_ip_sans() {
        let pem = request(
            "system:node:win-a1b2c",
            "system:nodes",
            &["win-a1b2c", "10.40.1.7", "fd00::7"],
        );
        let parsed = parse_csr_pem(pem.as_bytes()).unwrap();
        assert_eq!(parsed.dns_names, ["win-a1b2c"]);
        assert_eq!(
            parsed.ip_addresses,
            [
                "10.40.1.7".parse::<IpAddr>().unwrap(),
                "fd00::7".parse().unwrap()
            ]
        );
    }

    #[test]
    fn other_input_is_an_error_naming_the_field() {
        assert!(matches!(
            parse_csr_pem(b"AAAA"),
            Err(CsrPemError::NotPem(_))
        ));
        let certificate = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        assert_eq!(
            parse_csr_pem(certificate),
            Err(CsrPemError::WrongLabel("CERTIFICATE".into()))
        );
        let garbage =
            b"-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n";
        let error = parse_csr_pem(garbage).unwrap_err();
        assert!(matches!(error, CsrPemError::NotPkcs10(_)));
        assert!(error.to_string().starts_with("spec.request"), "{error}");
    }

    fn object(pem: &str, conditions: serde_json::Value) -> CertificateSigningRequest {
        let mut csr: CertificateSigningRequest = serde_json::from_value(json!({
            "metadata": {"name": "csr-7", "creationTimestamp": "2026-03-01T10:00:00Z"},
            "spec": {"request": "", "signerName": "kubernetes.io/kubelet-serving",
                     "username": "system:node:n", "groups": ["system:nodes", "system:authenticated"],
                     "usages": ["digital signature", "server auth"]},
            "status": {"conditions": conditions},
        }))
        .unwrap();
        csr.spec.request = ByteString(pem.as_bytes().to_vec());
        csr
    }

    #[test]
    fn an_object_reads_into_the_approvers_input() {
        let pem = request("system:node:n", "system:nodes", &["n", "10.0.0.5"]);
        let csr = csr_of(&object(&pem, json!([]))).unwrap();
        assert_eq!(csr.name, "csr-7");
        assert_eq!(csr.signer_name, "kubernetes.io/kubelet-serving");
        assert_eq!(csr.username, "system:node:n");
        assert_eq!(csr.groups, ["system:nodes", "system:authenticated"]);
        assert_eq!(csr.usages, ["digital signature", "server auth"]);
        assert_eq!(csr.created, Some("2026-03-01T10:00:00Z".parse().unwrap()));
        assert_eq!(csr.common_name, "system:node:n");
        assert_eq!(csr.ip_addresses, ["10.0.0.5".parse::<IpAddr>().unwrap()]);

        let error = csr_of(&object("nonsense", json!([]))).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("CertificateSigningRequest csr-7: spec.request"),
            "{error}"
        );
    }

    #[test]
    fn state_from_conditions() {
        let pem = request("system:node:n", "system:nodes", &[]);
        let state = |conditions| csr_state(&object(&pem, conditions));
        assert_eq!(state(json!([])), CsrState::Pending);
        assert_eq!(
            state(json!([{"type": "Approved", "status": "True"}])),
            CsrState::Approved
        );
        assert_eq!(
            state(json!([{"type": "Approved", "status": "False"}])),
            CsrState::Pending
        );
        assert_eq!(
            state(
                json!([{"type": "Approved", "status": "True"}, {"type": "Failed", "status": "True"}])
            ),
            CsrState::Refused
        );
        assert_eq!(
            state(json!([{"type": "Denied", "status": "True"}])),
            CsrState::Refused
        );
    }
}
