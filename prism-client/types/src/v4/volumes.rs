//! The v4 volumes API's shapes that detaching a volume group from a VM uses.

use serde::{Deserialize, Serialize};

use crate::v3::Extra;

/// Body of `POST /api/volumes/v4.x/config/volume-groups/{extId}/$actions/detach-vm`: the VM to detach
/// (`volumes.v4.config.VmAttachment` of Nutanix's ntnx-volumes-py-client 4.3.2: `extId` required, `index`
/// optional). The answer is a task reference (`DetachVmApiResponse`, `data`: `prism.v4.config.TaskReference`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VmAttachment {
    pub ext_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
    #[serde(flatten)]
    pub extra: Extra,
}

impl VmAttachment {
    /// The attachment of VM `vm_ext_id`, by its extId alone (CAPX sends no index: #477, 0883e551).
    pub fn of_vm(vm_ext_id: impl Into<String>) -> Self {
        Self {
            ext_id: vm_ext_id.into(),
            index: None,
            extra: Extra::new(),
        }
    }
}
