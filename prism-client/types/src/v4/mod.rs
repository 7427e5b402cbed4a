//! Prism Central v4 shapes used for template deploy and volume group detach: templates, the deploy request, the
//! VM attachment of a volume group, tasks, the `{"data": …}`
//! envelope and the v4 error body. JSON names are camelCase; `$objectType` discriminators are written as Prism
//! expects them.

mod common;
mod task;
mod template;
mod volumes;

#[cfg(test)]
mod tests;

pub use common::{AppMessage, Envelope, ErrorData, ExtIdReference, ListEnvelope, ListMetadata};
pub use task::{EntityAffected, SubTaskReference, Task, TaskStatus};
pub use template::{
    CLOUD_INIT_OBJECT_TYPE, CONFIG_DRIVE_V2, CloudInit, CloudInitScript, GuestCustomization,
    GuestCustomizationConfig, Ipv4Address, Ipv4Config, Nic, NicNetworkInfo, SYSPREP_OBJECT_TYPE,
    Sysprep, SysprepScript, Template, TemplateDeployRequest, TemplateVersionSpec,
    UNATTEND_XML_OBJECT_TYPE, USERDATA_OBJECT_TYPE, VmConfigOverride,
};
pub use volumes::VmAttachment;
