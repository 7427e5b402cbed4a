//! The data disks: size, device, adapter, address, storage container and data source.

use super::*;

impl Validator<'_, '_> {
    pub(super) fn data_disks(
        &mut self,
        kind: &ImageKind,
        boot: BootPlan,
    ) -> Option<Vec<PlannedDataDisk>> {
        let disks = self.config.data_disks.as_deref().unwrap_or_default();
        let path = self.spec.field("dataDisks");
        if !disks.is_empty() && matches!(kind, ImageKind::Template | ImageKind::Vm) {
            self.errors.invalid(
                &path,
                format!(
                    "dataDisks cannot be used with imageKind {kind}: the VM gets its source's disks"
                ),
            );
            return None;
        }
        let mut planned = Vec::new();
        let mut complete = true;
        let mut addresses: BTreeMap<(String, u32), usize> = BTreeMap::new();
        for (index, disk) in disks.iter().enumerate() {
            let disk_path = path.index(index);
            match self.data_disk(disk, &disk_path, boot) {
                Some(disk) => {
                    if let Some(address) = &disk.address {
                        let slot = (address.adapter.to_string(), address.index);
                        if let Some(first) = addresses.insert(slot, index) {
                            self.errors.invalid(
                                &disk_path.field("deviceProperties"),
                                format!(
                                    "{}.{} is already used by dataDisks[{first}]",
                                    address.adapter, address.index
                                ),
                            );
                            complete = false;
                        }
                    }
                    planned.push(disk);
                }
                None => complete = false,
            }
        }
        complete.then_some(planned)
    }

    pub(super) fn data_disk(
        &mut self,
        disk: &NutanixVmDisk,
        path: &Path,
        boot: BootPlan,
    ) -> Option<PlannedDataDisk> {
        let size = self.size_at(
            &disk.disk_size,
            &path.field("diskSize"),
            MIN_DATA_DISK_BYTES,
        );
        let address = match &disk.device_properties {
            None => Some(None),
            Some(properties) => {
                let properties_path = path.field("deviceProperties");
                let device_type = match &properties.device_type {
                    DiskDeviceType::Unknown(other) => {
                        self.errors.invalid(
                            &properties_path.field("deviceType"),
                            unknown_value("device type", other, DiskDeviceType::KNOWN),
                        );
                        None
                    }
                    known => Some(known.clone()),
                };
                let adapter_path = properties_path.field("adapterType");
                let adapter = match &properties.adapter_type {
                    None => {
                        self.errors
                            .invalid(&adapter_path, "adapterType is required");
                        None
                    }
                    Some(DiskAdapterType::Unknown(other)) => {
                        self.errors.invalid(
                            &adapter_path,
                            unknown_value("adapter type", other, DiskAdapterType::KNOWN),
                        );
                        None
                    }
                    Some(adapter) => Some(adapter.clone()),
                };
                let index_path = properties_path.field("deviceIndex");
                let index = u32::try_from(properties.device_index).ok();
                if index.is_none() {
                    self.errors.invalid(
                        &index_path,
                        format!("must be 0 or more, got {}", properties.device_index),
                    );
                }
                match (device_type, adapter, index) {
                    (Some(device_type), Some(adapter), Some(index)) => self
                        .check_address(
                            &device_type,
                            &adapter,
                            index,
                            boot,
                            &adapter_path,
                            &index_path,
                        )
                        .then_some(Some(DiskAddressPlan {
                            device_type,
                            adapter,
                            index,
                        })),
                    _ => None,
                }
            }
        };
        let storage = match &disk.storage_config {
            None => Some((false, None)),
            Some(storage) => {
                let storage_path = path.field("storageConfig");
                let flash = match &storage.disk_mode {
                    DiskMode::Unknown(other) => {
                        self.errors.invalid(
                            &storage_path.field("diskMode"),
                            unknown_value("disk mode", other, DiskMode::KNOWN),
                        );
                        None
                    }
                    mode => Some(*mode == DiskMode::Flash),
                };
                let container = match &storage.storage_container {
                    None => Some(None),
                    Some(container) => {
                        let container_path = storage_path.field("storageContainer");
                        match (&container.type_, container.uuid.as_deref()) {
                            (IdentifierType::Uuid, Some(uuid))
                                if uuid::Uuid::try_parse(uuid).is_ok() =>
                            {
                                Some(Some(uuid.to_ascii_lowercase()))
                            }
                            (IdentifierType::Uuid, None | Some("")) => {
                                self.errors
                                    .invalid(&container_path.field("uuid"), "uuid is required");
                                None
                            }
                            (IdentifierType::Uuid, Some(uuid)) => {
                                self.errors.invalid(
                                    &container_path.field("uuid"),
                                    format!("{uuid:?} is not a UUID", uuid = quoted(uuid)),
                                );
                                None
                            }
                            (other, _) => {
                                self.errors.invalid(&container_path.field("type"), format!("storage containers are referenced by uuid only, got type {:?}", quoted(other.as_str())));
                                None
                            }
                        }
                    }
                };
                flash.zip(container)
            }
        };
        let data_source = match &disk.data_source {
            None => Some(None),
            Some(id) => {
                let source_path = path.field("dataSource");
                let resolved = self.context.resolved;
                self.identifier(id, &source_path, true)
                    .and_then(|id| {
                        self.resolve_entity(&resolved.images, &id, "image", &source_path)
                    })
                    .map(Some)
            }
        };
        let (address, (flash_mode, storage_container_uuid), data_source) =
            (address?, storage?, data_source?);
        Some(PlannedDataDisk {
            size_mib: mib_floor(size?),
            address,
            flash_mode,
            storage_container_uuid,
            data_source,
        })
    }

    pub(super) fn check_address(
        &mut self,
        device_type: &DiskDeviceType,
        adapter: &DiskAdapterType,
        index: u32,
        boot: BootPlan,
        adapter_path: &Path,
        index_path: &Path,
    ) -> bool {
        let mut ok = true;
        if *device_type == DiskDeviceType::CdRom
            && !matches!(adapter, DiskAdapterType::Ide | DiskAdapterType::Sata)
        {
            self.errors.invalid(
                adapter_path,
                format!("a CDRom must be on IDE or SATA, not {adapter}"),
            );
            ok = false;
        }
        if boot == BootPlan::SecureBoot && *adapter == DiskAdapterType::Ide {
            self.errors.invalid(
                adapter_path,
                "SecureBoot needs machine type Q35, which has no IDE bus: use SATA or SCSI",
            );
            ok = false;
        }
        let reserved_for = match (device_type, adapter, index) {
            (DiskDeviceType::Disk, DiskAdapterType::Scsi, 0) => Some("system disk"),
            (DiskDeviceType::CdRom, DiskAdapterType::Ide, 0) => Some("system CD-ROM"),
            _ => None,
        };
        if let Some(owner) = reserved_for {
            self.errors.invalid(index_path, format!("{device_type}.{adapter}.0 is the {owner}'s address: data disks there start at index 1"));
            ok = false;
        }
        ok
    }
}
