//! Where the VM goes: the cluster or failure domain, the subnets, and the references they are looked up by.

use super::*;

impl Validator<'_, '_> {
    /// Checks an identifier's shape. `None` when it is unusable (an error was recorded) or, for
    /// an optional one, unset.
    pub(super) fn identifier(
        &mut self,
        id: &NutanixResourceIdentifier,
        path: &Path,
        required: bool,
    ) -> Option<NutanixResourceIdentifier> {
        match &id.type_ {
            IdentifierType::Unset if id.uuid.is_none() && id.name.is_none() => {
                if required {
                    self.errors.invalid(path, "is required");
                }
                None
            }
            IdentifierType::Unset => {
                self.errors.invalid(
                    &path.field("type"),
                    "type is required: \"uuid\" or \"name\"",
                );
                None
            }
            IdentifierType::Unknown(other) => {
                self.errors.invalid(
                    &path.field("type"),
                    format!(
                        "unknown identifier type {other:?}, expected \"uuid\" or \"name\"",
                        other = quoted(other)
                    ),
                );
                None
            }
            IdentifierType::Uuid => match id.uuid.as_deref() {
                None | Some("") => {
                    self.errors.invalid(
                        &path.field("uuid"),
                        "uuid is required when type is \"uuid\"",
                    );
                    None
                }
                Some(uuid) if uuid::Uuid::try_parse(uuid).is_err() => {
                    self.errors.invalid(
                        &path.field("uuid"),
                        format!("{uuid:?} is not a UUID", uuid = quoted(uuid)),
                    );
                    None
                }
                Some(uuid) => Some(NutanixResourceIdentifier::by_uuid(
                    uuid.to_ascii_lowercase(),
                )),
            },
            IdentifierType::Name => match id.name.as_deref() {
                None | Some("") => {
                    self.errors.invalid(
                        &path.field("name"),
                        "name is required when type is \"name\"",
                    );
                    None
                }
                Some(name) => Some(NutanixResourceIdentifier::by_name(name)),
            },
        }
    }

    /// Resolves an identifier whose shape is valid to an entity reference.
    pub(super) fn resolve_entity<T: HasUuid>(
        &mut self,
        table: &BTreeMap<String, Lookup<T>>,
        id: &NutanixResourceIdentifier,
        what: &str,
        path: &Path,
    ) -> Option<EntityRef> {
        match resolve(table, id, what, self.mode()) {
            Resolution::Found(found) => Some(EntityRef::Uuid(found.uuid().to_owned())),
            Resolution::AsWritten => Some(as_written(id)),
            Resolution::Failed(message) => {
                self.errors.unresolved(path, message);
                None
            }
        }
    }

    /// The cluster and subnets, each with the path its errors are reported at: the
    /// providerSpec's, or those of its failure domain, which replace them.
    pub(super) fn placement(
        &mut self,
    ) -> (
        Option<NutanixResourceIdentifier>,
        Path,
        Vec<(Path, NutanixResourceIdentifier)>,
    ) {
        let Some(reference) = &self.config.failure_domain else {
            return self.spec_placement();
        };
        let fd_path = self.spec.field("failureDomain").field("name");
        let name = &reference.name;
        if !is_failure_domain_name(name) {
            self.errors.invalid(&fd_path, format!("{name:?} is not a failure domain name: 1 to 64 lower-case letters, digits and '-', starting and ending with a letter or digit", name = quoted(name)));
            return (None, fd_path, Vec::new());
        }
        let domain = match (&self.context.resolved.failure_domains, self.mode()) {
            (Some(domains), _) => match domains.iter().find(|d| &d.name == name) {
                Some(domain) => domain,
                None => {
                    self.errors.unresolved(
                        &fd_path,
                        format!(
                            "Infrastructure/cluster has no failure domain named {name:?}",
                            name = quoted(name)
                        ),
                    );
                    return (None, fd_path, Vec::new());
                }
            },
            (None, ResolutionMode::Strict) => {
                self.errors.unresolved(
                    &fd_path,
                    "the failure domains of Infrastructure/cluster have not been read",
                );
                return (None, fd_path, Vec::new());
            }
            (None, ResolutionMode::Preview) => {
                self.warnings.push(format!(
                    "failure domain {name:?} not given (--resolve failureDomains): the providerSpec's cluster and subnets are shown, but the failure domain's replace them",
                    name = quoted(name)
                ));
                return self.spec_placement();
            }
        };
        // The failure domain comes from Infrastructure, not from the Machine: fixing it there
        // heals the Machine, so its problems are unresolved, not invalid.
        let usable = |id: &NutanixResourceIdentifier, what: &str, errors: &mut Collector| {
            if id.key().is_some_and(|key| !key.is_empty()) {
                Some(id.clone())
            } else {
                errors.unresolved(
                    &fd_path,
                    format!(
                        "failure domain {name:?} has an unusable {what} identifier",
                        name = quoted(name)
                    ),
                );
                None
            }
        };
        let cluster = usable(&domain.cluster, "cluster", &mut self.errors);
        let subnets = domain
            .subnets
            .iter()
            .filter_map(|s| usable(s, "subnet", &mut self.errors).map(|id| (fd_path.clone(), id)))
            .collect();
        if domain.subnets.is_empty() || domain.subnets.len() > MAX_SUBNETS {
            self.errors.unresolved(
                &fd_path,
                format!(
                    "failure domain {name:?} has {} subnets; 1 to {MAX_SUBNETS} are needed",
                    domain.subnets.len(),
                    name = quoted(name)
                ),
            );
        }
        (cluster, fd_path, subnets)
    }

    pub(super) fn spec_placement(
        &mut self,
    ) -> (
        Option<NutanixResourceIdentifier>,
        Path,
        Vec<(Path, NutanixResourceIdentifier)>,
    ) {
        let config = self.config;
        let cluster_path = self.spec.field("cluster");
        let cluster = self.identifier(&config.cluster, &cluster_path, true);
        let subnets_path = self.spec.field("subnets");
        let subnets = config
            .subnets
            .iter()
            .enumerate()
            .filter_map(|(i, subnet)| {
                let path = subnets_path.index(i);
                self.identifier(subnet, &path, true).map(|id| (path, id))
            })
            .collect();
        if config.subnets.is_empty() {
            self.errors
                .invalid(&subnets_path, "at least one subnet is required");
        } else if config.subnets.len() > MAX_SUBNETS {
            self.errors.invalid(
                &subnets_path,
                format!(
                    "{} subnets given; at most {MAX_SUBNETS} are allowed",
                    config.subnets.len()
                ),
            );
        }
        (cluster, cluster_path, subnets)
    }

    /// The NICs' subnets in order, each with whether Prism manages its addresses (`None`: not
    /// known).
    pub(super) fn subnets(
        &mut self,
        ids: Vec<(Path, NutanixResourceIdentifier)>,
        cluster: Option<&EntityRef>,
    ) -> Option<Vec<(EntityRef, Option<SubnetIpam>)>> {
        let mut subnets = Vec::new();
        let mut complete = true;
        for (path, id) in ids {
            match resolve(&self.context.resolved.subnets, &id, "subnet", self.mode()) {
                Resolution::Found(found) => {
                    if let (Some(subnet_cluster), Some(EntityRef::Uuid(cluster))) =
                        (&found.cluster_uuid, cluster)
                        && !subnet_cluster.eq_ignore_ascii_case(cluster)
                    {
                        self.errors.invalid(&path, format!("subnet {} belongs to cluster {subnet_cluster}, not to the Machine's cluster {cluster}", found.uuid));
                        complete = false;
                    }
                    subnets.push((EntityRef::Uuid(found.uuid.clone()), found.ipam));
                }
                Resolution::AsWritten => subnets.push((as_written(&id), None)),
                Resolution::Failed(message) => {
                    self.errors.unresolved(&path, message);
                    complete = false;
                }
            }
        }
        (complete && !subnets.is_empty()).then_some(subnets)
    }

    // ---- sizes and counts --------------------------------------------------------------------
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, 1 to 64 characters.
fn is_failure_domain_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}
