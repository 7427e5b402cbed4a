//! The GPUs, checked against the free GPUs of the cluster's hosts.

use super::*;

impl Validator<'_, '_> {
    pub(super) fn gpus(&mut self, kind: &ImageKind) -> Option<Vec<PlannedGpu>> {
        let gpus = self.config.gpus.as_deref().unwrap_or_default();
        let path = self.spec.field("gpus");
        if !gpus.is_empty() && matches!(kind, ImageKind::Template | ImageKind::Vm) {
            self.errors.invalid(&path, format!("gpus cannot be used with imageKind {kind}: neither clone nor deploy attaches GPUs"));
            return None;
        }
        let mut wanted = Vec::new();
        for (index, gpu) in gpus.iter().enumerate() {
            if self.gpu_shape(gpu, &path.index(index)) {
                wanted.push((index, gpu));
            }
        }
        if wanted.len() != gpus.len() {
            return None;
        }
        if wanted.is_empty() {
            return Some(Vec::new());
        }
        let inventory = match (&self.context.resolved.host_gpus, self.mode()) {
            (Some(Lookup::Found(inventory)), _) => inventory,
            (Some(Lookup::Failed { error }), _) => {
                self.errors.unresolved(
                    &path,
                    format!("the cluster's host GPUs could not be listed: {error}"),
                );
                return None;
            }
            (None, ResolutionMode::Strict) => {
                self.errors.unresolved(
                    &path,
                    "the cluster's host GPUs have not been looked up in Prism",
                );
                return None;
            }
            (None, ResolutionMode::Preview) => {
                self.warnings.push("gpus are shown as written: vendor and mode come from the hosts' GPU inventory (--resolve hostGpus)".into());
                return Some(
                    wanted
                        .into_iter()
                        .map(|(_, gpu)| PlannedGpu::AsWritten(gpu.clone()))
                        .collect(),
                );
            }
        };
        let mut taken = BTreeSet::new();
        let mut planned = Vec::new();
        for (index, gpu) in wanted {
            match free_gpu(inventory, gpu, &taken) {
                Some((position, host_gpu)) => {
                    taken.insert(position);
                    match (&host_gpu.vendor, &host_gpu.mode) {
                        (Some(vendor), Some(mode)) => planned.push(PlannedGpu::Assigned {
                            vendor: vendor.clone(),
                            mode: mode.clone(),
                            device_id: host_gpu.device_id,
                        }),
                        _ => self.errors.unresolved(
                            &path.index(index),
                            "Prism reported the matching GPU without vendor or mode",
                        ),
                    }
                }
                None => self.errors.unresolved(
                    &path.index(index),
                    format!("no free GPU {} on the cluster's hosts", describe_gpu(gpu)),
                ),
            }
        }
        (planned.len() == gpus.len()).then_some(planned)
    }

    pub(super) fn gpu_shape(&mut self, gpu: &NutanixGpu, path: &Path) -> bool {
        match &gpu.type_ {
            GpuIdentifierType::Name => {
                let named = gpu.name.as_deref().is_some_and(|n| !n.is_empty());
                if !named {
                    self.errors
                        .invalid(&path.field("name"), "name is required when type is Name");
                }
                if gpu.device_id.is_some() {
                    self.errors.invalid(
                        &path.field("deviceID"),
                        "deviceID must not be set when type is Name",
                    );
                }
                named && gpu.device_id.is_none()
            }
            GpuIdentifierType::DeviceId => {
                if gpu.device_id.is_none() {
                    self.errors.invalid(
                        &path.field("deviceID"),
                        "deviceID is required when type is DeviceID",
                    );
                }
                if gpu.name.is_some() {
                    self.errors.invalid(
                        &path.field("name"),
                        "name must not be set when type is DeviceID",
                    );
                }
                gpu.device_id.is_some() && gpu.name.is_none()
            }
            GpuIdentifierType::Unset => {
                self.errors.invalid(
                    &path.field("type"),
                    "type is required: \"Name\" or \"DeviceID\"",
                );
                false
            }
            GpuIdentifierType::Unknown(other) => {
                self.errors.invalid(
                    &path.field("type"),
                    format!(
                        "unknown GPU identifier type {other:?}, expected \"Name\" or \"DeviceID\"",
                        other = quoted(other)
                    ),
                );
                false
            }
        }
    }

    // ---- project, categories, secrets --------------------------------------------------------
}

fn free_gpu<'a>(
    inventory: &'a [HostGpu],
    gpu: &NutanixGpu,
    taken: &BTreeSet<usize>,
) -> Option<(usize, &'a HostGpu)> {
    inventory.iter().enumerate().find(|(position, host_gpu)| {
        !taken.contains(position)
            && host_gpu.is_unused()
            && match &gpu.type_ {
                GpuIdentifierType::Name => host_gpu.name.is_some() && host_gpu.name == gpu.name,
                GpuIdentifierType::DeviceId => {
                    host_gpu.device_id.is_some()
                        && host_gpu.device_id == gpu.device_id.map(i64::from)
                }
                GpuIdentifierType::Unset | GpuIdentifierType::Unknown(_) => false,
            }
    })
}

fn describe_gpu(gpu: &NutanixGpu) -> String {
    match (&gpu.name, gpu.device_id) {
        (Some(name), _) => format!("named {name:?}", name = quoted(name)),
        (None, Some(id)) => format!("with device ID {id}"),
        (None, None) => "(unnamed)".into(),
    }
}
