//! Typed v3 calls.

use std::collections::HashSet;

use reqwest::Method;
use serde::de::DeserializeOwned;

use crate::client::{Call, Client};
use crate::endpoints;
use crate::error::Error;
use crate::observe::Api;
use crate::v3::{
    CategoryKey, CategoryValue, Cluster, DeleteResponse, Host, IdempotenceIdentifiers,
    IdempotenceIdentifiersRequest, Image, ListRequest, ListResponse, Project, SkippedEntity,
    Subnet, TaskReference, User, Vm, VmCloneInput, VmIntentInput,
};

/// A v3 entity kind that can be read by UUID and listed.
pub trait V3Entity: DeserializeOwned + Send + 'static {
    /// `kind` of list requests (`vm`, `image`, ...).
    const KIND: &'static str;
    /// Collection path segment (`vms`, `images`, ...).
    const COLLECTION: &'static str;
    const GET_ENDPOINT: &'static str;
    const LIST_ENDPOINT: &'static str;
    fn entity_uuid(&self) -> Option<&str>;
    fn entity_name(&self) -> Option<&str>;
}

macro_rules! v3_entity {
    ($type:ty, $kind:literal, $collection:literal, $get:expr, $list:expr) => {
        impl V3Entity for $type {
            const KIND: &'static str = $kind;
            const COLLECTION: &'static str = $collection;
            const GET_ENDPOINT: &'static str = $get;
            const LIST_ENDPOINT: &'static str = $list;
            fn entity_uuid(&self) -> Option<&str> {
                self.uuid()
            }
            fn entity_name(&self) -> Option<&str> {
                self.name()
            }
        }
    };
}

v3_entity!(Vm, "vm", "vms", endpoints::VMS_GET, endpoints::VMS_LIST);
v3_entity!(
    Image,
    "image",
    "images",
    endpoints::IMAGES_GET,
    endpoints::IMAGES_LIST
);
v3_entity!(
    Subnet,
    "subnet",
    "subnets",
    endpoints::SUBNETS_GET,
    endpoints::SUBNETS_LIST
);
v3_entity!(
    Cluster,
    "cluster",
    "clusters",
    endpoints::CLUSTERS_GET,
    endpoints::CLUSTERS_LIST
);
v3_entity!(
    Project,
    "project",
    "projects",
    endpoints::PROJECTS_GET,
    endpoints::PROJECTS_LIST
);
v3_entity!(
    Host,
    "host",
    "hosts",
    endpoints::HOSTS_GET,
    endpoints::HOSTS_LIST
);

impl Client {
    /// `GET /users/me`: who the credentials belong to (also a connectivity check).
    pub async fn whoami(&self) -> Result<User, Error> {
        self.call_json(Call::new(
            Api::V3,
            Method::GET,
            endpoints::USERS_ME,
            &["users", "me"],
        ))
        .await
    }

    // ---- generic entity access ----

    /// `GET /<collection>/{uuid}`.
    pub async fn get<E: V3Entity>(&self, uuid: &str) -> Result<E, Error> {
        self.call_json(Call::new(
            Api::V3,
            Method::GET,
            E::GET_ENDPOINT,
            &[E::COLLECTION, uuid],
        ))
        .await
    }

    /// One page of `POST /<collection>/list`. An empty `kind` is filled in.
    pub async fn list<E: V3Entity>(&self, request: &ListRequest) -> Result<ListResponse<E>, Error> {
        let mut request = request.clone();
        if request.kind.is_empty() {
            E::KIND.clone_into(&mut request.kind);
        }
        let call = Call::new(
            Api::V3,
            Method::POST,
            E::LIST_ENDPOINT,
            &[E::COLLECTION, "list"],
        )
        .json(&request)?
        .idempotent();
        self.call_json(call).await
    }

    /// Every entity of a kind, as [`Client::list_all_with_skipped`] lists them; the entities that could not be
    /// decoded are left out (and logged).
    pub async fn list_all<E: V3Entity>(&self) -> Result<Vec<E>, Error> {
        Ok(self
            .list_all_with_skipped::<E>()
            .await?
            .into_items(E::LIST_ENDPOINT))
    }

    /// Every entity of a kind, paging with `length`/`offset` until `total_matches` (or an empty or short page
    /// when Prism gives no total), or until a page brings no UUID not seen before: a server that ignores `offset`
    /// (real `hosts/list` does not paginate: cluster-api-provider-nutanix#577) hands the same entities again.
    /// Entities are de-duplicated by UUID (the first one listed is kept). An entity that cannot be decoded does
    /// not fail the listing: it is reported in [`Listing::skipped`].
    pub async fn list_all_with_skipped<E: V3Entity>(&self) -> Result<Listing<E>, Error> {
        self.list_all_at(
            E::LIST_ENDPOINT,
            &[E::COLLECTION, "list"],
            E::KIND,
            None,
            E::entity_uuid,
        )
        .await
    }

    /// The one entity whose name is exactly `name` (compared here: Prism's name filter matches partially).
    /// `Ok(None)` when there is none; [`Error::DuplicateName`] with every UUID when there are several;
    /// [`Error::UnreadableMatch`] when an entity with the name was listed but could not be decoded (answering
    /// "none" could make a caller create a second one).
    pub async fn find_by_exact_name<E: V3Entity>(&self, name: &str) -> Result<Option<E>, Error> {
        let listing = self.list_all_with_skipped::<E>().await?;
        exact_name_match(listing, name)
    }

    /// The one VM named exactly `name`, as [`Client::find_by_exact_name`], listing only the VMs
    /// whose name contains it: `filter: "vm_name==<name>"`, the request the Go provider sends to
    /// find a VM by name (prism-go-client's recorded `v3/mocks` request), so that the cost does
    /// not grow with every VM of the Prism Central. Prism matches partially; names are compared
    /// here. A name holding FIQL's operators (`,` `;`) is listed unfiltered.
    pub async fn find_vm_by_exact_name(&self, name: &str) -> Result<Option<Vm>, Error> {
        let filter = (!name.contains([',', ';', '(', ')'])).then(|| format!("vm_name=={name}"));
        let listing = self
            .list_all_at(
                <Vm as V3Entity>::LIST_ENDPOINT,
                &[<Vm as V3Entity>::COLLECTION, "list"],
                <Vm as V3Entity>::KIND,
                filter.as_deref(),
                <Vm as V3Entity>::entity_uuid,
            )
            .await?;
        exact_name_match(listing, name)
    }

    // ---- VMs ----

    /// `POST /vms`. Never retried by the client (a retry could create a second VM): reserve the UUID with
    /// [`Client::reserve_uuids`] and set `metadata.uuid` to make a repeat safe (Prism answers 409 to a reused UUID).
    pub async fn create_vm(&self, input: &VmIntentInput) -> Result<Vm, Error> {
        let call = Call::new(Api::V3, Method::POST, endpoints::VMS_CREATE, &["vms"]).json(input)?;
        self.call_json(call).await
    }

    pub async fn get_vm(&self, uuid: &str) -> Result<Vm, Error> {
        self.get(uuid).await
    }

    /// `PUT /vms/{uuid}` with `{metadata (spec_version), spec}`; build it with [`Vm::into_update_input`]. A stale
    /// `spec_version` gives [`Error::Conflict`]. Not retried.
    pub async fn update_vm(&self, uuid: &str, input: &VmIntentInput) -> Result<Vm, Error> {
        let call =
            Call::new(Api::V3, Method::PUT, endpoints::VMS_UPDATE, &["vms", uuid]).json(input)?;
        self.call_json(call).await
    }

    /// `DELETE /vms/{uuid}`; the VM is gone when GET returns 404. Not retried.
    pub async fn delete_vm(&self, uuid: &str) -> Result<DeleteResponse, Error> {
        self.call_json(Call::new(
            Api::V3,
            Method::DELETE,
            endpoints::VMS_DELETE,
            &["vms", uuid],
        ))
        .await
    }

    /// `POST /vms/{uuid}/clone`: returns the clone task. Not retried.
    pub async fn clone_vm(
        &self,
        source_uuid: &str,
        input: &VmCloneInput,
    ) -> Result<TaskReference, Error> {
        let call = Call::new(
            Api::V3,
            Method::POST,
            endpoints::VMS_CLONE,
            &["vms", source_uuid, "clone"],
        )
        .json(input)?;
        self.call_json(call).await
    }

    // ---- inventory ----

    /// The Prism Elements: every cluster but the Prism Central entity.
    pub async fn list_prism_elements(&self) -> Result<Vec<Cluster>, Error> {
        Ok(self
            .list_all::<Cluster>()
            .await?
            .into_iter()
            .filter(|cluster| !cluster.is_prism_central())
            .collect())
    }

    /// The hosts of one Prism Element (for its GPU inventory).
    pub async fn list_hosts_of_cluster(&self, cluster_uuid: &str) -> Result<Vec<Host>, Error> {
        Ok(self
            .list_all::<Host>()
            .await?
            .into_iter()
            .filter(|host| host.cluster_uuid() == Some(cluster_uuid))
            .collect())
    }

    // ---- categories ----

    pub async fn get_category_key(&self, key: &str) -> Result<CategoryKey, Error> {
        self.call_json(Call::new(
            Api::V3,
            Method::GET,
            endpoints::CATEGORY_KEY_GET,
            &["categories", key],
        ))
        .await
    }

    /// `GET /categories/{key}/{value}`: 404 when the value (or key) does not exist.
    pub async fn get_category_value(&self, key: &str, value: &str) -> Result<CategoryValue, Error> {
        let call = Call::new(
            Api::V3,
            Method::GET,
            endpoints::CATEGORY_VALUE_GET,
            &["categories", key, value],
        );
        self.call_json(call).await
    }

    /// `PUT /categories/{key}`: creates or updates a key. Not retried.
    pub async fn put_category_key(&self, key: &CategoryKey) -> Result<CategoryKey, Error> {
        let call = Call::new(
            Api::V3,
            Method::PUT,
            endpoints::CATEGORY_KEY_PUT,
            &["categories", &key.name],
        )
        .json(key)?;
        self.call_json(call).await
    }

    /// `PUT /categories/{key}/{value}`: creates or updates a value. Not retried.
    pub async fn put_category_value(
        &self,
        key: &str,
        value: &CategoryValue,
    ) -> Result<CategoryValue, Error> {
        let call = Call::new(
            Api::V3,
            Method::PUT,
            endpoints::CATEGORY_VALUE_PUT,
            &["categories", key, &value.value],
        )
        .json(value)?;
        self.call_json(call).await
    }

    /// Every category key (paged like [`Client::list_all_with_skipped`], keys told apart by name).
    pub async fn list_category_keys(&self) -> Result<Vec<CategoryKey>, Error> {
        let listing = self
            .list_all_at(
                endpoints::CATEGORY_KEYS_LIST,
                &["categories", "list"],
                "category",
                None,
                |key: &CategoryKey| Some(key.name.as_str()),
            )
            .await?;
        Ok(listing.into_items(endpoints::CATEGORY_KEYS_LIST))
    }

    /// Every value of a key (paged like [`Client::list_all_with_skipped`], values told apart by value).
    pub async fn list_category_values(&self, key: &str) -> Result<Vec<CategoryValue>, Error> {
        let listing = self
            .list_all_at(
                endpoints::CATEGORY_VALUES_LIST,
                &["categories", key, "list"],
                "category",
                None,
                |value: &CategoryValue| Some(value.value.as_str()),
            )
            .await?;
        Ok(listing.into_items(endpoints::CATEGORY_VALUES_LIST))
    }

    /// Pages through a list endpoint; `identity` names an entity for de-duplication (`None`: always kept).
    async fn list_all_at<T: DeserializeOwned>(
        &self,
        endpoint: &'static str,
        segments: &[&str],
        kind: &str,
        filter: Option<&str>,
        identity: impl Fn(&T) -> Option<&str>,
    ) -> Result<Listing<T>, Error> {
        let page_size = self.page_size();
        let mut listing = Listing::default();
        let mut seen: HashSet<String> = HashSet::new();
        let mut first_sighting = |id: Option<&str>| id.is_none_or(|id| seen.insert(id.to_owned()));
        // Positions handed out so far, duplicates and undecodable entities included: the next `offset`.
        let mut received_total: usize = 0;
        for _ in 0..crate::MAX_LIST_PAGES {
            let offset = u32::try_from(received_total).unwrap_or(u32::MAX);
            let mut request = ListRequest::page(kind, offset, page_size);
            request.filter = filter.map(str::to_owned);
            let call = Call::new(Api::V3, Method::POST, endpoint, segments)
                .json(&request)?
                .idempotent();
            let page: ListResponse<T> = self.call_json(call).await?;
            let received = page.entities.len() + page.skipped.len();
            received_total += received;
            let mut new = 0_usize;
            for entity in page.entities {
                if first_sighting(identity(&entity)) {
                    new += 1;
                    listing.items.push(entity);
                }
            }
            for skipped in page.skipped {
                if first_sighting(skipped.uuid.as_deref()) {
                    new += 1;
                    listing.skipped.push(skipped);
                }
            }
            let done = match page.metadata.total_matches {
                Some(total) => received == 0 || received_total as u64 >= total,
                None => received < page_size as usize,
            };
            if done {
                return Ok(listing);
            }
            if new == 0 {
                tracing::debug!(
                    endpoint,
                    offset,
                    received,
                    "list page brought no new entity: the server does not page; listing ends"
                );
                return Ok(listing);
            }
        }
        Err(Error::ListDidNotEnd {
            endpoint,
            pages: crate::MAX_LIST_PAGES,
            collected: listing.items.len() + listing.skipped.len(),
        })
    }

    // ---- idempotence identifiers ----

    /// `POST /idempotence_identifiers`: reserves `count` UUIDs for `metadata.uuid` of later creates.
    ///
    /// Retried like a read: a repeat at worst reserves UUIDs nobody uses, which expire; it can never create an
    /// entity. A create with a reserved UUID that was already used gets 409; with an unreserved one, 422.
    pub async fn reserve_uuids(
        &self,
        request: &IdempotenceIdentifiersRequest,
    ) -> Result<IdempotenceIdentifiers, Error> {
        let call = Call::new(
            Api::V3,
            Method::POST,
            endpoints::IDEMPOTENCE_RESERVE,
            &["idempotence_identifiers"],
        )
        .json(request)?
        .idempotent();
        self.call_json(call).await
    }

    /// `GET /idempotence_identifiers/{client_identifier}`.
    pub async fn get_reserved_uuids(
        &self,
        client_identifier: &str,
    ) -> Result<IdempotenceIdentifiers, Error> {
        let call = Call::new(
            Api::V3,
            Method::GET,
            endpoints::IDEMPOTENCE_GET,
            &["idempotence_identifiers", client_identifier],
        );
        self.call_json(call).await
    }

    /// `DELETE /idempotence_identifiers/{client_identifier}`: releases the reservation.
    pub async fn release_reserved_uuids(&self, client_identifier: &str) -> Result<(), Error> {
        let call = Call::new(
            Api::V3,
            Method::DELETE,
            endpoints::IDEMPOTENCE_DELETE,
            &["idempotence_identifiers", client_identifier],
        );
        self.execute(call).await.map(|_| ())
    }
}

/// Every entity a listing returned, and those it could not decode.
#[derive(Debug, Clone, PartialEq)]
pub struct Listing<T> {
    /// Decoded entities, de-duplicated by UUID, in the order listed.
    pub items: Vec<T>,
    /// Entities that did not decode (de-duplicated by UUID where one could be read).
    pub skipped: Vec<SkippedEntity>,
}

impl<T> Default for Listing<T> {
    fn default() -> Self {
        Self {
            items: Vec::new(),
            skipped: Vec::new(),
        }
    }
}

impl<T> Listing<T> {
    /// The decoded entities; the undecodable ones are logged (count and UUIDs) and dropped.
    fn into_items(self, endpoint: &'static str) -> Vec<T> {
        if !self.skipped.is_empty() {
            let skipped: Vec<String> = self.skipped.iter().map(ToString::to_string).collect();
            tracing::warn!(
                endpoint,
                count = self.skipped.len(),
                skipped = %skipped.join("; "),
                "listed entities that cannot be decoded were left out"
            );
        }
        self.items
    }
}

/// None, one, or a duplicate-name error listing every id.
pub(crate) fn single_match<T>(
    kind: &'static str,
    name: &str,
    mut matches: Vec<T>,
    id: impl Fn(&T) -> String,
) -> Result<Option<T>, Error> {
    match matches.len() {
        0 => Ok(None),
        1 => Ok(matches.pop()),
        _ => Err(Error::DuplicateName {
            kind,
            name: name.to_owned(),
            uuids: matches.iter().map(id).collect(),
        }),
    }
}

/// The one entity of `listing` named exactly `name` ([`Client::find_by_exact_name`]).
fn exact_name_match<E: V3Entity>(listing: Listing<E>, name: &str) -> Result<Option<E>, Error> {
    if let Some(unreadable) = listing
        .skipped
        .into_iter()
        .find(|skipped| skipped.name.as_deref() == Some(name))
    {
        return Err(Error::UnreadableMatch {
            kind: E::KIND,
            name: name.to_owned(),
            entity: unreadable,
        });
    }
    let matches: Vec<E> = listing
        .items
        .into_iter()
        .filter(|entity| entity.entity_name() == Some(name))
        .collect();
    single_match(E::KIND, name, matches, |entity| {
        entity.entity_uuid().unwrap_or("<no uuid>").to_owned()
    })
}
