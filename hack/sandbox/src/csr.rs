//! Kubelet certificate signing requests: the PKCS#10 requests the node agent generates as the
//! kubelet does, and the reading of a `CertificateSigningRequest`'s request into what Go's
//! `x509.ParseCertificateRequest` exposes, which the approver's rules look at.

use std::net::IpAddr;

use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use k8s_openapi::api::core::v1::NodeAddress;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair};
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::prelude::FromDer;

/// The kubelet's client certificate signer (k8s.io/api `certificates/v1/types.go`,
/// `KubeAPIServerClientKubeletSignerName`).
pub const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// The kubelet's serving certificate signer (`KubeletServingSignerName`).
pub const SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";
/// Who asks for a new node's client certificate: the kubelet's bootstrap kubeconfig holds the
/// token of the machine-config-operator's `node-bootstrapper` service account (WMCO
/// `pkg/nodeconfig/nodeconfig.go`, `generateBootstrapKubeconfig`, reads
/// `node-bootstrapper-token`), whose user name is `system:serviceaccount:<namespace>:<name>`.
pub const NODE_BOOTSTRAPPER: &str =
    "system:serviceaccount:openshift-machine-config-operator:node-bootstrapper";
/// The groups the API server gives a service account token: `system:serviceaccounts:<namespace>`,
/// `system:serviceaccounts`, and `system:authenticated` for any authenticated user. A real API
/// server fills `spec.username` and `spec.groups` from the requester's credentials; kube-sim
/// keeps what the client writes, so the agent writes them.
pub const NODE_BOOTSTRAPPER_GROUPS: [&str; 3] = [
    "system:serviceaccounts:openshift-machine-config-operator",
    "system:serviceaccounts",
    "system:authenticated",
];
/// The group of every node identity.
pub const NODES_GROUP: &str = "system:nodes";
/// The usages of the kubelet's bootstrap request for an ECDSA key (kubernetes
/// `pkg/kubelet/certificate/bootstrap/bootstrap.go`, `requestNodeCertificate`: key encipherment is
/// added only for an RSA key).
pub const CLIENT_USAGES: [&str; 2] = ["digital signature", "client auth"];
/// The usages of the kubelet's serving request, as the kubelet source read here has them
/// (kubernetes `pkg/kubelet/certificate/kubelet.go`, the server certificate manager's `Usages`:
/// key encipherment included). Whether current kubelets drop key encipherment for an ECDSA key, as
/// their bootstrap request does, could not be established; the approver accepts both forms
/// (`serving_rules_are_the_approvers` pins that).
pub const SERVING_USAGES: [&str; 3] = ["digital signature", "key encipherment", "server auth"];

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

/// A PKCS#10 request as Go's `x509.CertificateRequest` shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParsedRequest {
    /// `Subject.CommonName`: the last CN of the subject (`pkix.Name.FillFromRDNSequence`).
    pub common_name: String,
    /// `Subject.Organization`, in order.
    pub organizations: Vec<String>,
    pub dns_names: Vec<String>,
    pub email_addresses: Vec<String>,
    pub ip_addresses: Vec<IpAddr>,
    pub uris: Vec<String>,
}

/// The node name a kubelet's identity carries: `system:node:<name>`.
pub fn node_user(node: &str) -> String {
    format!("system:node:{node}")
}

/// A request and the PEM of its private key (PKCS#8), which the kubelet keeps to use the issued
/// certificate.
fn request_pem(node: &str, sans: Vec<String>) -> Result<(String, String), CsrError> {
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
    let request = params
        .serialize_request(&key)
        .map_err(error)?
        .pem()
        .map_err(error)?;
    Ok((request, key.serialize_pem()))
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

/// The kubelet's bootstrap request (`requestNodeCertificate`): `O=system:nodes,
/// CN=system:node:<node>`, no SANs, asked by the node-bootstrapper service account; with its
/// private key's PEM: once the certificate is issued, the kubelet is `system:node:<node>` with
/// them.
pub fn client_csr(node: &str) -> Result<(CertificateSigningRequest, String), CsrError> {
    let (pem, key) = request_pem(node, Vec::new())?;
    let csr = csr_object(
        CLIENT_SIGNER,
        &CLIENT_USAGES,
        NODE_BOOTSTRAPPER.to_owned(),
        NODE_BOOTSTRAPPER_GROUPS
            .iter()
            .map(|g| (*g).to_owned())
            .collect(),
        pem,
    );
    Ok((csr, key))
}

/// The serving certificate's SANs from the Node's addresses (kubernetes
/// `pkg/kubelet/certificate/kubelet.go`, `addressesToHostnamesAndIPs`): DNS names from `Hostname`
/// (unless it is an IP) and `InternalDNS`/`ExternalDNS`; IPs from `InternalIP`/`ExternalIP` (and
/// a `Hostname` that is an IP); each set de-duplicated and sorted (IPs by their text).
pub fn serving_sans(addresses: &[NodeAddress]) -> (Vec<String>, Vec<IpAddr>) {
    let mut dns_names: Vec<String> = Vec::new();
    let mut ips: Vec<IpAddr> = Vec::new();
    for address in addresses.iter().filter(|a| !a.address.is_empty()) {
        let ip = address.address.parse::<IpAddr>().ok();
        match (address.type_.as_str(), ip) {
            ("Hostname" | "InternalIP" | "ExternalIP", Some(ip)) => ips.push(ip),
            ("Hostname" | "InternalDNS" | "ExternalDNS", None) => {
                dns_names.push(address.address.clone());
            }
            _ => {}
        }
    }
    dns_names.sort();
    dns_names.dedup();
    ips.sort_by_key(ToString::to_string);
    ips.dedup();
    (dns_names, ips)
}

/// The kubelet's serving request, asked by the node itself, for the SANs of its addresses.
pub fn serving_csr(
    node: &str,
    addresses: &[NodeAddress],
) -> Result<CertificateSigningRequest, CsrError> {
    let (dns_names, ips) = serving_sans(addresses);
    let sans = dns_names
        .into_iter()
        .chain(ips.iter().map(ToString::to_string))
        .collect();
    let (pem, _) = request_pem(node, sans)?;
    Ok(csr_object(
        SERVING_SIGNER,
        &SERVING_USAGES,
        node_user(node),
        vec![NODES_GROUP.to_owned(), "system:authenticated".to_owned()],
        pem,
    ))
}

/// Reads a CSR object's PEM request (the first PEM block, which must be a `CERTIFICATE REQUEST`,
/// as the cluster-machine-approver's `parseCSR` requires).
pub fn parse(object: &CertificateSigningRequest) -> Result<ParsedRequest, CsrError> {
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
    let mut parsed = ParsedRequest {
        common_name: subject
            .iter_common_name()
            .last()
            .map(text)
            .unwrap_or_default(),
        organizations: subject.iter_organization().map(text).collect(),
        ..ParsedRequest::default()
    };
    for extension in request.requested_extensions().into_iter().flatten() {
        let ParsedExtension::SubjectAlternativeName(sans) = extension else {
            continue;
        };
        for san in &sans.general_names {
            match san {
                GeneralName::DNSName(dns) => parsed.dns_names.push((*dns).to_owned()),
                GeneralName::RFC822Name(email) => parsed.email_addresses.push((*email).to_owned()),
                GeneralName::URI(uri) => parsed.uris.push((*uri).to_owned()),
                GeneralName::IPAddress(bytes) => parsed.ip_addresses.push(ip_of(&name, bytes)?),
                // Go's parser keeps no other kind of name.
                _ => {}
            }
        }
    }
    Ok(parsed)
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
    use serde_json::json;

    use super::*;

    fn named(mut csr: CertificateSigningRequest) -> CertificateSigningRequest {
        csr.metadata.name = Some("csr-test".to_owned());
        csr
    }

    #[test]
    fn client_request_round_trips_with_the_kubelet_identity() {
        let object = named(client_csr("win-a1b2c").unwrap().0);
        assert_eq!(object.spec.signer_name, CLIENT_SIGNER);
        assert_eq!(object.spec.username.as_deref(), Some(NODE_BOOTSTRAPPER));
        assert_eq!(
            object.spec.groups.clone().unwrap(),
            NODE_BOOTSTRAPPER_GROUPS
        );
        assert_eq!(object.spec.usages.clone().unwrap(), CLIENT_USAGES);
        let parsed = parse(&object).unwrap();
        assert_eq!(parsed.common_name, "system:node:win-a1b2c");
        assert_eq!(parsed.organizations, ["system:nodes"]);
        assert_eq!(parsed.dns_names.len() + parsed.ip_addresses.len(), 0);
    }

    #[test]
    fn serving_request_carries_the_nodes_addresses() {
        let addresses: Vec<NodeAddress> = serde_json::from_value(json!([
            {"type": "InternalIP", "address": "10.40.1.7"},
            {"type": "Hostname", "address": "win-a1b2c"},
            {"type": "InternalDNS", "address": "win-a1b2c"},
            {"type": "ExternalIP", "address": "fd00::7"},
            {"type": "InternalIP", "address": ""}
        ]))
        .unwrap();
        let object = named(serving_csr("win-a1b2c", &addresses).unwrap());
        assert_eq!(object.spec.signer_name, SERVING_SIGNER);
        assert_eq!(
            object.spec.username.as_deref(),
            Some("system:node:win-a1b2c")
        );
        let parsed = parse(&object).unwrap();
        assert_eq!(parsed.common_name, "system:node:win-a1b2c");
        assert_eq!(parsed.dns_names, ["win-a1b2c"]);
        let ips: Vec<IpAddr> = ["10.40.1.7", "fd00::7"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        assert_eq!(parsed.ip_addresses, ips);
    }

    #[test]
    fn requests_that_are_not_pkcs10_pem_are_errors_naming_the_csr() {
        let mut not_pem = named(client_csr("n").unwrap().0);
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
