//! VMs entering and leaving the store: a validated body committed, the VMs of a template deploy, the seed's
//! VMs.

use std::net::Ipv4Addr;
use std::time::Instant;

use rand::Rng;
use serde_json::{Value, json};

use super::{Details, KIND, Prepared, cloudbase};
use crate::behaviour::DeployTaskShape;
use crate::seed::{GuestOs, SeedError, VmSeed};
use crate::store::Store;
use crate::store::record::{AddressPhase, Vm};
use crate::store::tasks::{Effect, FailOutcome, FailPlan};

/// A VM of a template deploy, validated, waiting to be committed.
#[derive(Debug)]
pub(crate) struct DeployVm {
    inner: Prepared,
    os: GuestOs,
    now: Instant,
}

impl Store {
    /// Allocates addresses and GPUs of a prepared VM and stores it (not yet listed). Returns a failure plan
    /// when an address pool is exhausted (the create task then fails, as on a real cluster).
    pub(super) fn commit_new_vm(
        &mut self,
        uuid: &str,
        prepared: Prepared,
        os: GuestOs,
        now: Instant,
    ) -> Option<FailPlan> {
        let mut exhausted = None;
        let nics = self.allocate_nics(&prepared.nics, &mut exhausted);
        for (host, index) in &prepared.gpus {
            self.set_gpu_consumer(
                host,
                *index,
                Some((
                    uuid,
                    prepared
                        .spec
                        .get("name")
                        .and_then(Value::as_str)
                        .unwrap_or(""),
                )),
            );
        }
        let seq = self.next_vm_seq;
        self.next_vm_seq += 1;
        let wall = self.wall(now);
        let apipa_octets: [u8; 2] = self.rng.random();
        let apipa = Ipv4Addr::new(
            169,
            254,
            1 + apipa_octets[0] % 254,
            1 + apipa_octets[1] % 254,
        );
        let vm = Vm {
            uuid: uuid.to_owned(),
            seq,
            spec: prepared.spec,
            meta: prepared.meta,
            spec_version: 0,
            entity_version: 1,
            listed: false,
            listed_from: None,
            pending_updates: 0,
            deleting: None,
            error: None,
            task_uuids: Vec::new(),
            powered_on: false,
            boot_gen: 0,
            phase: AddressPhase::None,
            apipa: u32::from(apipa),
            static_ipv4: cloudbase::guest_static_ipv4(os, prepared.guest.as_ref()),
            overlay: None,
            nics,
            gpus: prepared.gpus,
            os,
            guest: prepared.guest,
            creation_time: wall.clone(),
            last_update_time: wall,
            host_uuid: None,
            // The recorded VM's bios_uuid is its own UUID (get_vm.json).
            bios_uuid: uuid.to_owned(),
            stale_view: None,
        };
        self.vm_order.insert(seq, uuid.to_owned());
        self.vms.insert(uuid.to_owned(), vm);
        exhausted.map(|subnet| {
            FailPlan::in_subtask(
                format!("IP pool of subnet '{subnet}' is exhausted"),
                FailOutcome::RemoveVm,
            )
        })
    }

    /// Removes a VM and gives back its addresses and GPUs.
    pub(crate) fn remove_vm(&mut self, uuid: &str) -> bool {
        self.make_ordinary(uuid);
        let Some(vm) = self.vms.remove(uuid) else {
            return false;
        };
        self.vm_order.remove(&vm.seq);
        self.release_nics(&vm.nics);
        self.forget_attachments_of(uuid);
        for (host, index) in &vm.gpus {
            self.set_gpu_consumer(host, *index, None);
        }
        true
    }

    /// Creates a VM from a v3-shaped spec built elsewhere (template deploy); `Err` carries 422 details.
    pub(crate) fn create_vm_from_spec(
        &mut self,
        now: Instant,
        spec: &Value,
        os: GuestOs,
    ) -> Result<(String, DeployVm), Details> {
        let prepared = self.prepare_vm(spec, &json!({"kind": KIND}), None)?;
        let uuid = self.new_uuid();
        Ok((
            uuid,
            DeployVm {
                inner: prepared,
                os,
                now,
            },
        ))
    }

    /// Commits VMs prepared by [`Store::create_vm_from_spec`] under one deploy task, in the store's
    /// [`DeployTaskShape`]. By default the task names only the template (`vmm:content:templates`); each VM has
    /// a subtask of its own that names it and moves with the deploy (the Ansible collection's
    /// ntnx_templates_deploy_v2 RETURN block: a real deploy task lists the template in `entities_affected` and
    /// its work in `sub_tasks`). One `kVmCreate` subtask per VM is the mock's reading: the recorded answer
    /// shows three subtasks without saying what each one did. With `VmsOnParentTask` the task names the
    /// template and the VMs itself, as terraform-provider-nutanix reads it.
    pub(crate) fn commit_deploy(
        &mut self,
        now: Instant,
        prepared: Vec<(String, DeployVm)>,
        cluster: &str,
        template: &str,
        fail: Option<FailPlan>,
    ) -> String {
        let mut uuids = Vec::new();
        let mut fail = fail;
        for (uuid, p) in prepared {
            fail = fail.or_else(|| {
                self.unmanaged_assignment(&p.inner.nics, format!("Failed to create VM {uuid}"))
            });
            let exhausted = self.commit_new_vm(&uuid, p.inner, p.os, p.now);
            fail = fail.or(exhausted);
            uuids.push(uuid);
        }
        let on_parent = self.deploy_task_shape == DeployTaskShape::VmsOnParentTask;
        let mut entities = vec![("template", template.to_owned())];
        if on_parent {
            entities.extend(uuids.iter().map(|uuid| ("vm", uuid.clone())));
        }
        let task = self.create_task(
            now,
            "kVmTemplateDeploy",
            entities,
            Some(cluster.to_owned()),
            Effect::Create { vms: uuids.clone() },
            fail,
        );
        for uuid in &uuids {
            if !on_parent {
                self.add_follower_subtask(&task, "kVmCreate", uuid);
            }
            if let Some(vm) = self.vms.get_mut(uuid) {
                vm.task_uuids = vec![task.clone()];
            }
        }
        task
    }

    pub(crate) fn seed_vm(&mut self, seed: &VmSeed) -> Result<(), SeedError> {
        let bad = |what: String| SeedError::Reference(format!("vm '{}': {what}", seed.name));
        let cluster = self
            .clusters
            .uuid_by_name(&seed.cluster)
            .ok_or_else(|| bad(format!("unknown cluster '{}'", seed.cluster)))?;
        let image = self
            .images
            .uuid_by_name(&seed.image)
            .ok_or_else(|| bad(format!("unknown image '{}'", seed.image)))?;
        let mut nics = Vec::new();
        for subnet in &seed.subnets {
            let uuid = self
                .subnets
                .uuid_by_name(subnet)
                .ok_or_else(|| bad(format!("unknown subnet '{subnet}'")))?;
            nics.push(json!({"subnet_reference": {"kind": "subnet", "uuid": uuid}}));
        }
        let machine_type = if seed.boot_type == "SECURE_BOOT" {
            "Q35"
        } else {
            "PC"
        };
        let spec = json!({
            "name": seed.name,
            "cluster_reference": {"kind": "cluster", "uuid": cluster},
            "resources": {
                "num_sockets": seed.num_sockets,
                "num_vcpus_per_socket": seed.num_vcpus_per_socket,
                "memory_size_mib": seed.memory_mib,
                "power_state": seed.power_state,
                "machine_type": machine_type,
                "boot_config": {"boot_type": seed.boot_type},
                "disk_list": [{"data_source_reference": {"kind": "image", "uuid": image}, "disk_size_mib": seed.disk_size_mib}],
                "nic_list": nics,
            },
        });
        let uuid = match &seed.uuid {
            Some(u) => u.clone(),
            None => self.new_uuid(),
        };
        let prepared = self
            .prepare_vm(&spec, &json!({"kind": KIND}), None)
            .map_err(|d| {
                bad(d
                    .into_iter()
                    .map(|(f, m)| format!("{f}: {m}"))
                    .collect::<Vec<_>>()
                    .join("; "))
            })?;
        let os = self.os_of(&prepared, None);
        let now = Instant::now();
        if self.commit_new_vm(&uuid, prepared, os, now).is_some() {
            return Err(bad("address pool exhausted".to_owned()));
        }
        self.finish_vm_create(&uuid, None, now);
        Ok(())
    }
}
