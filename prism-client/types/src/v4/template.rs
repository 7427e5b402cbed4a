//! Templates (`/api/vmm/v4.0/content/templates`) and the deploy request.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use super::common::ExtIdReference;
use crate::sensitive::Sensitive;
use crate::v3::{Extra, SysprepInstallType};

/// `$objectType` of a sysprep guest customization.
pub const SYSPREP_OBJECT_TYPE: &str = "vmm.v4.ahv.config.Sysprep";
/// `$objectType` of a cloud-init guest customization.
pub const CLOUD_INIT_OBJECT_TYPE: &str = "vmm.v4.ahv.config.CloudInit";
/// `$objectType` of a sysprep script given as an unattend.xml.
pub const UNATTEND_XML_OBJECT_TYPE: &str = "vmm.v4.ahv.config.Unattendxml";
/// `$objectType` of a cloud-init script given as user data.
pub const USERDATA_OBJECT_TYPE: &str = "vmm.v4.ahv.config.Userdata";
/// The config drive layout cloud-init and cloudbase-init read.
pub const CONFIG_DRIVE_V2: &str = "CONFIG_DRIVE_V2";

/// A VM template.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Template {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ext_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_version_spec: Option<TemplateVersionSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub create_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_time: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub category_ext_ids: Vec<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `templateVersionSpec`: the active version and the VM it describes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TemplateVersionSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ext_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version_description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_active_version: Option<bool>,
    /// Whether deploy may override the guest customization.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_gc_override_enabled: Option<bool>,
    /// The v4 VM spec of the template, kept as JSON (its shape is large and not needed to deploy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm_spec: Option<Value>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// Body of `POST /content/templates/{extId}/$actions/deploy`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TemplateDeployRequest {
    pub number_of_vms: u32,
    /// The Prism Element's extId.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_reference: Option<String>,
    /// A template version; the active version when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version_id: Option<String>,
    /// VM index as a string (`"0"`, `"1"`, …) → overrides for that VM.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub override_vm_config_map: BTreeMap<String, VmConfigOverride>,
    #[serde(flatten)]
    pub extra: Extra,
}

impl TemplateDeployRequest {
    /// A request for one VM on `cluster_ext_id` with these overrides.
    pub fn single(cluster_ext_id: impl Into<String>, overrides: VmConfigOverride) -> Self {
        Self {
            number_of_vms: 1,
            cluster_reference: Some(cluster_ext_id.into()),
            override_vm_config_map: BTreeMap::from([("0".to_owned(), overrides)]),
            ..Self::default()
        }
    }
}

/// What deploy may change per VM: name, CPU, memory, NICs, guest customization (never disks).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VmConfigOverride {
    pub name: String,
    pub num_sockets: u32,
    pub num_cores_per_socket: u32,
    pub num_threads_per_core: u32,
    pub memory_size_bytes: u64,
    /// Empty means "keep the template's NICs".
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nics: Vec<Nic>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest_customization: Option<GuestCustomization>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A v4 NIC (v4.0 shape: `backingInfo` and `networkInfo`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Nic {
    /// Emulated NIC settings (model, MAC, connected), kept as JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backing_info: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_info: Option<NicNetworkInfo>,
    #[serde(flatten)]
    pub extra: Extra,
}

impl Nic {
    /// A normal NIC on a subnet (by the subnet's extId, which is its v3 UUID).
    pub fn on_subnet(subnet_ext_id: impl Into<String>) -> Self {
        Self {
            network_info: Some(NicNetworkInfo {
                nic_type: Some("NORMAL_NIC".to_owned()),
                subnet: Some(ExtIdReference::new(subnet_ext_id)),
                ..NicNetworkInfo::default()
            }),
            ..Self::default()
        }
    }

    /// The same NIC given `ip` as its address (on a subnet Prism manages).
    pub fn with_address(mut self, ip: std::net::Ipv4Addr) -> Self {
        let info = self
            .network_info
            .get_or_insert_with(NicNetworkInfo::default);
        info.ipv4_config = Some(Ipv4Config {
            should_assign_ip: Some(true),
            ip_address: Some(Ipv4Address {
                value: ip.to_string(),
                prefix_length: Some(32),
                extra: Extra::new(),
            }),
            extra: Extra::new(),
        });
        self
    }
}

/// `networkInfo` of a v4 NIC.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NicNetworkInfo {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nic_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet: Option<ExtIdReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vlan_mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipv4_config: Option<Ipv4Config>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `networkInfo.ipv4Config` of a v4 NIC (ntnx-vmm-py-client 4.3.2,
/// `vmm.v4.ahv.config.Ipv4Config`): the address to assign on a Prism-managed subnet.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ipv4Config {
    /// `true` (the default): the NIC must get an address, the one given or one from the
    /// subnet's IPAM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub should_assign_ip: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_address: Option<Ipv4Address>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `common.v1.config.IPv4Address`: `value` and `prefixLength`, which the SDK sends as 32 unless
/// told otherwise (ntnx-vmm-py-client 4.3.2, `IPv4Address.__init__`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ipv4Address {
    pub value: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_length: Option<u8>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `guestCustomization` of a deploy override: `{"config": <Sysprep or CloudInit>}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GuestCustomization {
    pub config: GuestCustomizationConfig,
    #[serde(flatten)]
    pub extra: Extra,
}

impl GuestCustomization {
    pub fn new(config: GuestCustomizationConfig) -> Self {
        Self {
            config,
            extra: Extra::new(),
        }
    }
}

/// The guest customization, told apart by `$objectType`.
#[derive(Clone, PartialEq)]
pub enum GuestCustomizationConfig {
    /// `vmm.v4.ahv.config.Sysprep`
    Sysprep(Sysprep),
    /// `vmm.v4.ahv.config.CloudInit`
    CloudInit(CloudInit),
    /// Another `$objectType`, kept as received. Its contents may be secret, so `Debug` shows only the type.
    Other(Value),
}

impl std::fmt::Debug for GuestCustomizationConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Sysprep(sysprep) => f.debug_tuple("Sysprep").field(sysprep).finish(),
            Self::CloudInit(cloud_init) => f.debug_tuple("CloudInit").field(cloud_init).finish(),
            Self::Other(value) => {
                let object_type = value
                    .get("$objectType")
                    .and_then(Value::as_str)
                    .unwrap_or("?");
                write!(f, "Other({object_type}, <redacted>)")
            }
        }
    }
}

impl Serialize for GuestCustomizationConfig {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let (object_type, body) = match self {
            Self::Sysprep(sysprep) => (SYSPREP_OBJECT_TYPE, serde_json::to_value(sysprep)),
            Self::CloudInit(cloud_init) => {
                (CLOUD_INIT_OBJECT_TYPE, serde_json::to_value(cloud_init))
            }
            Self::Other(value) => return value.serialize(serializer),
        };
        let mut body = body.map_err(serde::ser::Error::custom)?;
        if let Value::Object(fields) = &mut body {
            fields.insert(
                "$objectType".to_owned(),
                Value::String(object_type.to_owned()),
            );
        }
        body.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for GuestCustomizationConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut value = Value::deserialize(deserializer)?;
        let object_type = value
            .get("$objectType")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let known = |value: &mut Value| {
            if let Value::Object(fields) = value {
                fields.remove("$objectType");
            }
        };
        match object_type.as_deref() {
            Some(SYSPREP_OBJECT_TYPE) => {
                known(&mut value);
                serde_json::from_value(value)
                    .map(Self::Sysprep)
                    .map_err(serde::de::Error::custom)
            }
            Some(CLOUD_INIT_OBJECT_TYPE) => {
                known(&mut value);
                serde_json::from_value(value)
                    .map(Self::CloudInit)
                    .map_err(serde::de::Error::custom)
            }
            _ => Ok(Self::Other(value)),
        }
    }
}

/// v4 sysprep: install type and an unattend.xml script.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Sysprep {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install_type: Option<SysprepInstallType>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sysprep_script: Option<SysprepScript>,
    #[serde(flatten)]
    pub extra: Extra,
}

impl Sysprep {
    /// A PREPARED sysprep with a base64 unattend.xml.
    pub fn prepared_unattend_xml(unattend_xml_base64: impl Into<Sensitive>) -> Self {
        Self {
            install_type: Some(SysprepInstallType::Prepared),
            sysprep_script: Some(SysprepScript::unattend_xml(unattend_xml_base64)),
            extra: Extra::new(),
        }
    }
}

/// `sysprepScript`: `{"$objectType":"vmm.v4.ahv.config.Unattendxml","value":"<b64>"}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SysprepScript {
    #[serde(rename = "$objectType")]
    pub object_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Sensitive>,
    #[serde(flatten)]
    pub extra: Extra,
}

impl SysprepScript {
    pub fn unattend_xml(base64: impl Into<Sensitive>) -> Self {
        Self {
            object_type: UNATTEND_XML_OBJECT_TYPE.to_owned(),
            value: Some(base64.into()),
            extra: Extra::new(),
        }
    }
}

/// v4 cloud-init: data source, base64 metadata, and a user data script.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CloudInit {
    /// `CONFIG_DRIVE_V2`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub datasource_type: Option<String>,
    /// Base64 meta data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Sensitive>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud_init_script: Option<CloudInitScript>,
    #[serde(flatten)]
    pub extra: Extra,
}

impl CloudInit {
    /// A config-drive cloud-init with base64 user data and optional base64 meta data.
    pub fn config_drive(
        user_data_base64: impl Into<Sensitive>,
        metadata_base64: Option<Sensitive>,
    ) -> Self {
        Self {
            datasource_type: Some(CONFIG_DRIVE_V2.to_owned()),
            metadata: metadata_base64,
            cloud_init_script: Some(CloudInitScript::user_data(user_data_base64)),
            extra: Extra::new(),
        }
    }
}

/// `cloudInitScript`: `{"$objectType":"vmm.v4.ahv.config.Userdata","value":"<b64>"}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CloudInitScript {
    #[serde(rename = "$objectType")]
    pub object_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Sensitive>,
    #[serde(flatten)]
    pub extra: Extra,
}

impl CloudInitScript {
    pub fn user_data(base64: impl Into<Sensitive>) -> Self {
        Self {
            object_type: USERDATA_OBJECT_TYPE.to_owned(),
            value: Some(base64.into()),
            extra: Extra::new(),
        }
    }
}
