//! The executor's hands: each read and each change [`decide`] asks for, performed against
//! Prism and Kubernetes, its result put into the snapshot for the next round. Nothing here
//! chooses what to do next.

use super::*;
use crate::plan::vm::request::VmRequest;
use prism_client::TaskProgress;

impl Scope {
    /// This Machine, for the shared task watch to wake.
    pub(super) fn machine_key(&self) -> MachineKey {
        MachineKey {
            namespace: self.machine.namespace().unwrap_or_default(),
            name: self.machine.name_any(),
        }
    }

    /// What a listing shows about this Machine, for the slot it fills.
    pub(super) fn project(&self, slot: ListingSlot, listing: &InventorySnapshot) -> Listing {
        let facts = &self.rounds.snapshot.machine;
        // The marker's slot looks by name too: a VM the Go provider made for the Machine.
        let by_name = matches!(
            slot,
            ListingSlot::Task | ListingSlot::Deploy | ListingSlot::Marker
        );
        Listing {
            listed_at: listing.listed_at(),
            vm: self
                .rounds
                .snapshot
                .status
                .vm_uuid
                .as_deref()
                .and_then(|uuid| listing.vm(uuid))
                .cloned(),
            named: listing
                .vms()
                .filter(|_| by_name)
                .filter(|vm| vm.spec.as_ref().is_some_and(|spec| spec.name == facts.name))
                .filter_map(|vm| {
                    Some(DeployCandidate {
                        uuid: vm.uuid()?.to_owned(),
                        created: vm
                            .metadata
                            .creation_time
                            .as_deref()
                            .and_then(|time| time.parse().ok()),
                        identity: vm
                            .spec
                            .as_ref()
                            .and_then(|spec| spec.description.as_deref())
                            .and_then(identity_of),
                        categories: vm.metadata.categories.clone().unwrap_or_default(),
                    })
                })
                .collect(),
            marked: if slot == ListingSlot::Marker {
                listing.marked_for(&facts.identity.uid)
            } else {
                Vec::new()
            },
        }
    }

    /// Performs `read`, its result put into the snapshot; a failure the plan is told of
    /// (no Prism connection) is the error returned inside, which a reconcile the plan then
    /// fails ends with.
    pub(super) async fn read(&mut self, read: Read) -> Result<Option<Error>, Error> {
        let mut failed = None;
        match read {
            Read::Environment => {
                let seen =
                    match environment(
                        self.shared(),
                        &self.machine,
                        &self.rounds.snapshot.machine.spec,
                    )
                    .await
                    {
                        Ok(found) => {
                            let poll = self.shared().settings.poll_interval;
                            let first_task_read =
                                self.rounds.snapshot.status.pending_task.as_ref().map_or(
                                    poll,
                                    |task| {
                                        found
                                            .connection
                                            .first_task_read_after(&task.operation, poll)
                                    },
                                );
                            let slowest_task =
                                self.rounds.snapshot.status.pending_task.as_ref().and_then(
                                    |task| found.connection.slowest_task(&task.operation),
                                );
                            let first_delete_look = found.connection.first_delete_look_after(poll);
                            let status = &self.rounds.snapshot.status;
                            let task_end_seen = status
                                .pending_task
                                .as_ref()
                                .is_some_and(|task| found.connection.task_end_seen(&task.id));
                            let delete_end_seen =
                                status.deletion_sent.as_ref().is_some_and(|sent| {
                                    found.connection.delete_end_seen(&sent.vm_uuid)
                                });
                            self.environment = Some(found);
                            EnvironmentSeen::Ready {
                                first_task_read,
                                first_delete_look,
                                slowest_task,
                                task_end_seen,
                                delete_end_seen,
                            }
                        }
                        Err(error) => {
                            let Some(problem) = environment_problem(&error) else {
                                return Err(error);
                            };
                            tracing::warn!(machine = %self.key, %error, "no Prism connection");
                            failed = Some(error);
                            EnvironmentSeen::Unavailable(problem)
                        }
                    };
                self.rounds.snapshot.seen.observe.environment = Some(seen);
            }
            Read::Listing { slot, source } => {
                let connection = self.connection()?;
                let client = connection.client();
                let wanted = NameClause::of(&self.machine);
                let listing = match source {
                    ListingSource::Inventory => {
                        Some(connection.inventory.snapshot(client, &wanted).await?)
                    }
                    ListingSource::Within(age) => Some(
                        connection
                            .inventory
                            .snapshot_within(client, &wanted, age)
                            .await?,
                    ),
                    ListingSource::ForWaiter {
                        waiter,
                        window,
                        max_age,
                    } => {
                        connection
                            .listing_for_waiter(&waiter, &wanted, window, max_age)
                            .await?
                    }
                };
                let projected = listing.map(|listing| self.project(slot, &listing));
                let seen = &mut self.rounds.snapshot.seen;
                match slot {
                    ListingSlot::Task => seen.observe.task_listing = Some(projected.into()),
                    ListingSlot::Deploy => seen.observe.deploy_listing = Some(projected.into()),
                    ListingSlot::Vm => seen.observe.vm_listing = Some(projected.into()),
                    ListingSlot::Marker => seen.observe.marker_listing = Some(projected.into()),
                }
            }
            Read::Task(task) => {
                let connection = self.connection()?;
                let progress = connection.read_task(&task).await?;
                if let TaskProgress::Running { .. } = progress {
                    // Recorded before this controller started, or by another replica.
                    connection.watch_task(&task.id, task.operation.is_v4(), self.machine_key());
                }
                self.rounds.snapshot.seen.observe.task = Some(progress);
            }
            Read::Vm { uuid, fresh } => {
                let connection = self.connection()?;
                let vm = if fresh {
                    connection.get_vm(&uuid).await?
                } else {
                    connection.get_vm_recent(&uuid).await?
                };
                self.rounds.snapshot.seen.observe.vm = Some(vm.into());
            }
            Read::Confirm { uuid } => {
                let vm = self.connection()?.get_vm(&uuid).await?;
                self.rounds.snapshot.seen.observe.confirm = Some(vm.into());
            }
            Read::Node { name, cached } => {
                let from_cache = cached && self.context.nodes_ready.is_ready();
                let node = if from_cache {
                    self.context
                        .nodes
                        .get(&ObjectRef::new(&name))
                        .map(|node| self.context.provider_ids_set.seen(node.as_ref().clone()))
                } else {
                    let nodes: Api<Node> = Api::all(self.shared().client.clone());
                    nodes
                        .get_opt(&name)
                        .await
                        .map_err(|e| Error::kube(format!("read Node {name}"), e))?
                };
                self.rounds.snapshot.seen.observe.node = Some(node.into());
                self.rounds.snapshot.seen.observe.node_fresh = !from_cache;
            }
            Read::AddressContext { primary_subnet } => {
                let context = self.address_context(primary_subnet.as_deref()).await?;
                self.rounds.snapshot.seen.update.address_context = Some(context);
            }
            Read::CreateInputs {
                user_data,
                admin_password,
            } => {
                let environment = self.environment.as_ref().ok_or_else(|| {
                    Error::Configuration(format!(
                        "Machine {}: a create was planned before the connection",
                        self.key
                    ))
                })?;
                let inputs = read_create_inputs(
                    self.shared(),
                    &self.machine,
                    &self.rounds.snapshot.machine.spec,
                    environment,
                    user_data.as_ref(),
                    admin_password.as_ref(),
                )
                .await;
                self.rounds.snapshot.seen.create.inputs = Some(inputs);
            }
            Read::Claims { names } => {
                let readings =
                    claims::read_claims(&self.shared().client, &self.machine, &names).await?;
                self.rounds.snapshot.seen.create.claims = Some(readings);
            }
        }
        Ok(failed)
    }

    /// The primary subnet's CIDR, the cluster's networks and the region label; a lookup that
    /// fails leaves its part out, with a warning.
    pub(super) async fn address_context(
        &self,
        primary_subnet: Option<&str>,
    ) -> Result<AddressContext, Error> {
        let connection = self.connection()?;
        let primary_cidr = match primary_subnet {
            Some(subnet) => match connection
                .lookups
                .subnet_cidr(connection.client(), subnet)
                .await
            {
                Ok(cidr) => cidr,
                Err(error) => {
                    tracing::warn!(machine = %self.key, %error, "cannot read the primary subnet's CIDR; addresses ordered without it");
                    None
                }
            },
            None => None,
        };
        let networks = self.shared().networks.get().await?;
        let region = match connection
            .lookups
            .prism_central_name(connection.client())
            .await
        {
            Ok(region) => region,
            Err(error) => {
                tracing::warn!(machine = %self.key, %error, "cannot read the Prism Central name for the region label");
                None
            }
        };
        Ok(AddressContext {
            primary_cidr,
            cluster_networks: networks.excluded.clone(),
            excluded_flag: self.shared().settings.excluded_cidrs.clone(),
            ipv6_primary: networks.ipv6_primary,
            region,
        })
    }

    /// Performs `change`, its outcome put into the snapshot; a failure the plan is told of
    /// (Prism refusing a create, follow-up or delete) is the error returned inside, which a
    /// reconcile the plan then fails ends with.
    pub(super) async fn send(&mut self, change: Change) -> Result<Option<Error>, Error> {
        let mut failed = None;
        match change {
            Change::CreatePasswordSecret => {
                let outcome = create_password_secret(self.shared(), &self.machine)
                    .await
                    .unwrap_or_else(|error| PasswordSecretOutcome::Failed(error.to_string()));
                self.rounds.snapshot.seen.create.password_secret = Some(outcome);
            }
            Change::ReserveUuid => {
                let connection = self.connection()?;
                let uuid = connection.uuids.take(connection.client()).await?;
                self.rounds.snapshot.seen.create.reserved = Some(uuid);
            }
            Change::Create {
                request,
                deploy_request_id,
            } => {
                let answer = self
                    .connection()?
                    .send_create(&request, deploy_request_id.as_deref())
                    .await;
                let outcome = match answer {
                    Ok(sent) => {
                        tracing::info!(machine = %self.key, "create sent");
                        if let Some(task) = &sent.task {
                            let v4 = matches!(*request, VmRequest::Deploy { .. });
                            self.connection()?.watch_task(task, v4, self.machine_key());
                        }
                        SendOutcome::Accepted { task: sent.task }
                    }
                    Err(error) => {
                        let outcome = SendOutcome::of_error(&error, deploy_request_id.is_none());
                        failed = Some(error.into());
                        outcome
                    }
                };
                self.rounds.snapshot.seen.create.sent = Some(outcome);
            }
            Change::FollowUp { uuid, update, vm } => {
                let answer = self
                    .connection()?
                    .apply_follow_up(&uuid, &update, Some(*vm))
                    .await;
                let outcome = match answer {
                    Ok(actuator::FollowUpOutcome::Sent { task: Some(task) }) => {
                        self.connection()?
                            .watch_task(&task, false, self.machine_key());
                        FollowUpOutcome::Task(task)
                    }
                    Ok(
                        actuator::FollowUpOutcome::Sent { task: None }
                        | actuator::FollowUpOutcome::NothingLeft,
                    ) => FollowUpOutcome::Done,
                    Err(FollowUpFailure::Prism(error)) => {
                        let outcome = FollowUpOutcome::of_error(&error);
                        failed = Some(error.into());
                        outcome
                    }
                    Err(
                        failure @ (FollowUpFailure::Impossible(..) | FollowUpFailure::NoSpec(_)),
                    ) => FollowUpOutcome::Impossible(failure.to_string()),
                };
                self.rounds.snapshot.seen.update.follow_up = Some(outcome);
            }
            Change::DeleteVm { uuid } => {
                let connection = self.connection()?;
                let outcome = match connection.delete_vm(&uuid).await {
                    Ok(actuator::DeleteOutcome::Accepted { task }) => {
                        if let Some(task) = task {
                            connection.watch_delete(&task, &uuid, self.machine_key());
                        }
                        DeleteOutcome::Accepted
                    }
                    Ok(actuator::DeleteOutcome::AlreadyGone) => DeleteOutcome::Gone,
                    Err(error) => {
                        let outcome = DeleteOutcome::Failed(error.to_string());
                        failed = Some(error.into());
                        outcome
                    }
                };
                self.rounds.snapshot.seen.delete.deleted = Some(outcome);
            }
            Change::DetachVolumeGroups { vm_uuid, detaches } => {
                let detached = self
                    .connection()?
                    .detach_volume_groups(&vm_uuid, &detaches)
                    .await?;
                tracing::info!(machine = %self.key, vm = %vm_uuid, count = detached.len(), "volume group detaches sent");
                self.rounds.snapshot.seen.delete.detached = Some(detached);
            }
            Change::Drain { node } => {
                let progress =
                    drain_round(self.shared(), &self.context.control_plane_cordon, &node).await?;
                self.rounds.snapshot.seen.delete.drain = Some(progress);
            }
            Change::DeleteNode { node } => {
                let nodes: Api<Node> = Api::all(self.shared().client.clone());
                match nodes.delete(&node, &Default::default()).await {
                    Ok(_) => tracing::info!(machine = %self.key, node, "deleted the Node"),
                    Err(kube::Error::Api(status)) if status.code == 404 => {}
                    Err(error) => return Err(Error::kube(format!("delete Node {node}"), error)),
                }
                self.context.provider_ids_set.forget(&node);
                self.rounds.snapshot.seen.delete.node_deleted = true;
            }
            Change::NodeProviderId { node, provider_id } => {
                let patched = set_provider_id(&self.shared().client, &node, &provider_id).await?;
                self.context.provider_ids_set.written(&patched);
                self.rounds.snapshot.seen.update.node_provider_id_set = true;
            }
            Change::CreateClaims { claims } => {
                claims::create_claims(&self.shared().client, &self.machine, &claims).await?;
                self.rounds.snapshot.seen.create.claims_created = true;
            }
            Change::AdoptClaims { adoptions } => {
                let adopted =
                    claims::adopt_claims(&self.shared().client, &self.machine, &adoptions).await?;
                let readings = self
                    .rounds
                    .snapshot
                    .seen
                    .create
                    .claims
                    .get_or_insert_default();
                for (nic, claim) in adopted {
                    readings.entry(nic).or_default().claim = claim;
                }
            }
            Change::ReleaseClaims => {
                claims::release_claims(&self.shared().client, &self.machine).await?;
                self.rounds.snapshot.seen.delete.claims_released = true;
            }
        }
        Ok(failed)
    }
}
