//! What the VM is made from (image, template or source VM), how it boots, and the sizes the spec gives.

use super::*;

impl Validator<'_, '_> {
    /// The image, template or source VM, resolved.
    pub(super) fn source(
        &mut self,
        kind: &ImageKind,
    ) -> Option<(EntityRef, Option<ResolvedSource>)> {
        let path = self.spec.field("image");
        let config = self.config;
        let id = self.identifier(&config.image, &path, true)?;
        let (table, what) = match kind {
            ImageKind::Template => (&self.context.resolved.templates, "template"),
            ImageKind::Vm => (&self.context.resolved.source_vms, "source VM"),
            // Read as an image ([`NutanixMachineProviderConfig::source_kind`]).
            ImageKind::Image | ImageKind::Unknown(_) => (&self.context.resolved.images, "image"),
        };
        match resolve(table, &id, what, self.mode()) {
            Resolution::Found(found) => {
                Some((EntityRef::Uuid(found.uuid.clone()), Some(found.clone())))
            }
            Resolution::AsWritten => Some((as_written(&id), None)),
            Resolution::Failed(message) => {
                self.errors.unresolved(&path, message);
                None
            }
        }
    }

    /// A clone lands on its source VM's cluster, whatever the Machine's cluster is: a source
    /// VM on another cluster is an error naming both.
    pub(super) fn clone_lands_on(
        &mut self,
        source: &ResolvedSource,
        cluster: &str,
        cluster_path: &Path,
    ) {
        if let Some(source_cluster) = &source.cluster_uuid
            && !source_cluster.eq_ignore_ascii_case(cluster)
        {
            let path = self.spec.field("image");
            self.errors.invalid(
                &path,
                format!(
                    "source VM {} runs on cluster {source_cluster}, but the Machine's cluster ({cluster_path}) is {cluster}; a clone always lands on its source VM's cluster: use a source VM on cluster {cluster}, or an image or template",
                    source.uuid
                ),
            );
        }
    }

    pub(super) fn source_plan(
        &mut self,
        source: EntityRef,
        resolved: Option<&ResolvedSource>,
        system_disk: Option<u64>,
    ) -> Option<SourcePlan> {
        let kind = self.config.source_kind();
        let path = self.spec.field("systemDiskSize");
        let source_size = resolved.and_then(|r| r.size_bytes);
        if let ImageKind::Image | ImageKind::Unknown(_) = kind {
            if let (Some(wanted), Some(image)) = (system_disk, source_size)
                && wanted < image
            {
                self.errors.invalid(
                    &path,
                    format!(
                        "{} is smaller than the image ({} bytes)",
                        self.config.system_disk_size.0, image
                    ),
                );
                return None;
            }
            return Some(SourcePlan::Image(source));
        }
        let what = if kind == ImageKind::Template {
            "template"
        } else {
            "source VM"
        };
        // Neither clone nor deploy can size disks: a larger system disk is a resize afterwards,
        // a smaller one is impossible.
        let resize = match (system_disk, source_size) {
            (None, _) => return None,
            (Some(wanted), Some(have)) if wanted < have => {
                self.errors.invalid(&path, format!("{} is smaller than the {what}'s boot disk ({have} bytes); disks cannot shrink", self.config.system_disk_size.0));
                return None;
            }
            (Some(wanted), Some(have)) => {
                (mib_floor(wanted) > mib_floor(have)).then(|| mib_floor(wanted))
            }
            (Some(_), None) if self.mode() == ResolutionMode::Strict => {
                self.errors.unresolved(&path, format!("the size of the {what}'s boot disk is not known, so a resize cannot be planned"));
                return None;
            }
            (Some(_), None) => {
                self.warnings.push(format!("the {what}'s boot disk size is not known: no resize is shown; the controller resizes it to systemDiskSize when it is larger"));
                None
            }
        };
        Some(match kind {
            ImageKind::Template => SourcePlan::Template {
                template: source,
                version_id: resolved.and_then(|r| r.version_id.clone()),
                resize_system_disk_mib: resize,
            },
            _ => SourcePlan::Vm {
                source_vm: source,
                resize_system_disk_mib: resize,
            },
        })
    }

    pub(super) fn boot(
        &mut self,
        kind: &ImageKind,
        source: Option<&Option<ResolvedSource>>,
    ) -> BootPlan {
        let path = self.spec.field("bootType");
        let wanted = &self.config.boot_type;
        if let BootType::Unknown(other) = wanted {
            self.errors
                .invalid(&path, unknown_value("boot type", other, BootType::KNOWN));
            return BootPlan::Default;
        }
        if matches!(kind, ImageKind::Template | ImageKind::Vm) {
            // Boot settings belong to the installed OS: a clone or deploy keeps the source's.
            let known = source
                .and_then(Option::as_ref)
                .and_then(|s| s.boot_type.as_ref());
            match known {
                Some(have) if *wanted != BootType::Unset && have != wanted => {
                    self.errors.invalid(&path, format!("{:?} differs from the source's {:?}; a cloned or deployed VM keeps its source's boot settings", quoted(wanted.as_str()), quoted(have.as_str())));
                }
                None if *wanted != BootType::Unset => self.warnings.push(format!(
                    "bootType {:?} is not applied: a cloned or deployed VM keeps its source's boot settings",
                    quoted(wanted.as_str())
                )),
                _ => {}
            }
            return BootPlan::FromSource;
        }
        match wanted {
            BootType::Legacy => BootPlan::Legacy,
            BootType::Uefi => BootPlan::Uefi,
            BootType::SecureBoot => BootPlan::SecureBoot,
            BootType::Unset | BootType::Unknown(_) => BootPlan::Default,
        }
    }

    pub(super) fn positive(&mut self, value: i32, field: &str) -> Option<u32> {
        match u32::try_from(value) {
            Ok(value) if value >= 1 => Some(value),
            _ => {
                self.errors.invalid(
                    &self.spec.field(field),
                    format!("must be at least 1, got {value}"),
                );
                None
            }
        }
    }

    pub(super) fn size_at(
        &mut self,
        quantity: &Quantity,
        path: &Path,
        minimum: u64,
    ) -> Option<u64> {
        if quantity.0.is_empty() {
            self.errors.invalid(path, "is required");
            return None;
        }
        match quantity_bytes(quantity) {
            Err(error) => {
                self.errors.invalid(path, error.to_string());
                None
            }
            Ok(bytes) if bytes < minimum => {
                self.errors.invalid(
                    path,
                    format!("{} is below the minimum of {}Gi", quantity.0, minimum / GIB),
                );
                None
            }
            Ok(bytes) => Some(bytes),
        }
    }

    pub(super) fn size(&mut self, quantity: &Quantity, field: &str, minimum: u64) -> Option<u64> {
        let path = self.spec.field(field);
        self.size_at(quantity, &path, minimum)
    }

    // ---- source, boot, disks, GPUs -----------------------------------------------------------
}
