//! Choices only annotations make, as no providerSpec field carries them: the storage container
//! of the system disk, and the virtual TPM.

use super::*;

impl Validator<'_, '_> {
    /// The storage container of an image's boot disk, by UUID.
    pub(super) fn system_disk_container(&mut self, kind: &ImageKind) -> Option<Option<String>> {
        let Some(written) = self.choices.system_disk_storage_container.as_deref() else {
            return Some(None);
        };
        let path = annotation_path(SYSTEM_DISK_STORAGE_CONTAINER_ANNOTATION);
        if matches!(kind, ImageKind::Template | ImageKind::Vm) {
            // Neither call places a disk. A deploy overrides only name, CPU, memory, NICs and
            // guest customization (v4 `VmConfigOverride`, Nutanix's ntnx-vmm-py-client 4.3.2
            // `models/vmm/v4/content/VmConfigOverride.py`); a clone has no `disk_list` to override
            // (`vm_clone_override_spec`, nutanix-cloud-native/prism-go-client `v3/swagger.json`).
            // Moving a disk afterwards is its own migration call (nutanix/nutanix.ansible
            // `plugins/modules/ntnx_vms_disks_migrate_v2.py`), not a VM update.
            self.errors.invalid(
                &path,
                format!(
                    "cannot be used with image kind {kind}: a cloned or deployed VM's disks stay in its source's storage containers (neither a clone nor a template deploy can place a disk); use image kind Image, or a source in the wanted container"
                ),
            );
            return None;
        }
        if written.is_empty() {
            self.errors.invalid(
                &path,
                "is empty: give the UUID of a storage container of the Machine's cluster",
            );
            return None;
        }
        match uuid::Uuid::try_parse(written) {
            Ok(_) => Some(Some(written.to_ascii_lowercase())),
            Err(_) => {
                // Prism Central's v3 API has no storage container endpoint to look a name up
                // in (the paths of nutanix-cloud-native/prism-go-client `v3/swagger.json`), as
                // for data disks' `storageContainer`, which upstream allows by uuid only.
                self.errors.invalid(
                    &path,
                    format!(
                        "{written:?} is not a UUID: storage containers are chosen by UUID only (Prism Central's v3 API has no storage container lookup by name); find it under Storage > Storage Containers in Prism",
                        written = quoted(written)
                    ),
                );
                None
            }
        }
    }

    /// Whether the VM gets a vTPM; refused where AHV refuses it.
    pub(super) fn vtpm(
        &mut self,
        kind: &ImageKind,
        boot: BootPlan,
        source: Option<&ResolvedSource>,
    ) -> Option<bool> {
        let path = annotation_path(VTPM_ANNOTATION);
        match &self.choices.vtpm {
            None | Some(VtpmChoice::Disabled) => return Some(false),
            Some(VtpmChoice::Unknown(other)) => {
                self.errors.invalid(
                    &path,
                    unknown_value("vTPM setting", other, VtpmChoice::KNOWN),
                );
                return None;
            }
            Some(VtpmChoice::Enabled) => {}
        }
        // AHV gives a vTPM only to a UEFI VM (with or without Secure Boot): Prism refuses the
        // create of a Legacy BIOS VM with one (nutanix/nutanix.ansible#529, "the API server will
        // refuse the creation" when the boot type is not UEFI), and Nutanix's Packer plugin
        // refuses the combination before asking ("vTPM is not supported with legacy boot type",
        // nutanix-cloud-native/packer-plugin-nutanix `builder/nutanix/config.go`; its
        // `driver.go` sets `vtpmConfig` for UEFI and SecureBoot only).
        let legacy = match boot {
            BootPlan::Uefi | BootPlan::SecureBoot => None,
            BootPlan::Default | BootPlan::Legacy => Some(format!(
                "bootType {:?} boots with Legacy BIOS",
                quoted(self.config.boot_type.as_str())
            )),
            BootPlan::FromSource => {
                let what = if *kind == ImageKind::Template {
                    "template"
                } else {
                    "source VM"
                };
                match source.and_then(|s| s.boot_type.as_ref()) {
                    Some(BootType::Uefi | BootType::SecureBoot) => None,
                    Some(_) => Some(format!("the {what} boots with Legacy BIOS")),
                    None => {
                        self.warnings.push(format!(
                            "{VTPM_ANNOTATION}: the {what}'s boot type is not known; AHV gives a vTPM to UEFI VMs only, so the update that enables it fails if the {what} boots with Legacy BIOS"
                        ));
                        None
                    }
                }
            }
        };
        match legacy {
            Some(reason) => {
                self.errors.invalid(
                    &path,
                    format!(
                        "Enabled needs UEFI firmware, but {reason}, and AHV refuses a vTPM on a Legacy BIOS VM: {}",
                        if boot == BootPlan::FromSource {
                            "use a template or source VM that boots with UEFI or Secure Boot"
                        } else {
                            "set bootType UEFI or SecureBoot"
                        }
                    ),
                );
                None
            }
            None => Some(true),
        }
    }
}
