//! Name → UUID resolution through Prism, cached.
//!
//! Each kind (clusters, images, subnets, projects, templates) is listed once and kept for the
//! cache's time to live (default 5 minutes); every Machine resolving names or checking UUIDs in
//! that time uses the same listing. Names are compared exactly, client-side (Prism's `==` filter
//! matches partially). Category pairs are checked one by one (`GET /categories/{key}/{value}`)
//! and cached too, and so are source VMs (read by UUID, or listed by name with Prism's name
//! filter: a source VM is seldom one of the cluster's, which the VM inventory lists). Host GPUs are never cached: their `UNUSED` status changes as VMs take them.
//!
//! Everything is dropped when a create meets a 404 for something resolved here
//! ([`LookupCache::invalidate`]), so a deleted image is not used again for the rest of the TTL.
//! A lookup that fails (not found, ambiguous, Prism unreachable) becomes
//! [`Lookup::Failed`], which the plan reports as *unresolved*: the Machine is retried, never
//! failed, for it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use ipnet::IpNet;
use prism_client::quote::{bounded, quoted};
use prism_client::v3::{Cluster, Image, Project, Subnet, Vm};
use prism_client::v4::Template;
use prism_client::{Client, Error};
use serde_json::Value;

use crate::api::quantity::MIB;
use crate::api::{BootType, IdentifierType, NutanixResourceIdentifier};
use crate::plan::machine::addresses::subnet_cidr;
use crate::plan::vm::resolve::{
    FailureDomain, Lookup, RequiredLookups, ResolvedEntity, ResolvedReferences, ResolvedSource,
    ResolvedSubnet, SubnetIpam,
};

/// Characters of a list of same-named entities' UUIDs kept in a message: ten UUIDs, then a cut.
const MAX_UUID_LIST_CHARS: usize = 380;

#[derive(Debug)]
struct Cached<T> {
    at: Instant,
    value: Arc<T>,
}

#[derive(Debug, Default)]
struct Caches {
    clusters: Option<Cached<Vec<Cluster>>>,
    images: Option<Cached<Vec<Image>>>,
    subnets: Option<Cached<Vec<Subnet>>>,
    projects: Option<Cached<Vec<Project>>>,
    templates: Option<Cached<Vec<Template>>>,
    categories: BTreeMap<(String, String), Cached<bool>>,
    /// Source VMs found, by the identifier they were asked by.
    source_vms: BTreeMap<String, Cached<ResolvedSource>>,
}

/// Cached lookups for one Prism Central.
#[derive(Debug)]
pub struct LookupCache {
    ttl: Duration,
    caches: Mutex<Caches>,
    /// One resolution at a time: Machines created together share the listings instead of each
    /// listing everything.
    resolving: tokio::sync::Mutex<()>,
    /// One listing fetched at a time, for callers outside a resolution too (the region label of
    /// every Machine a restarted controller looks at).
    fetching: tokio::sync::Mutex<()>,
}

/// Picks a cache slot.
type Slot<T> = fn(&mut Caches) -> &mut Option<Cached<Vec<T>>>;

impl LookupCache {
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            caches: Mutex::new(Caches::default()),
            resolving: tokio::sync::Mutex::new(()),
            fetching: tokio::sync::Mutex::new(()),
        }
    }

    /// Forgets every cached lookup (after a 404 for something that was resolved).
    pub fn invalidate(&self) {
        *self.caches.lock().unwrap_or_else(PoisonError::into_inner) = Caches::default();
    }

    fn cached<T>(&self, slot: Slot<T>) -> Option<Arc<Vec<T>>> {
        let mut caches = self.caches.lock().unwrap_or_else(PoisonError::into_inner);
        slot(&mut caches)
            .as_ref()
            .filter(|cached| cached.at.elapsed() < self.ttl)
            .map(|cached| cached.value.clone())
    }

    async fn listing<T, F>(&self, slot: Slot<T>, fetch: F) -> Result<Arc<Vec<T>>, Error>
    where
        F: Future<Output = Result<Vec<T>, Error>>,
    {
        if let Some(value) = self.cached(slot) {
            return Ok(value);
        }
        let _fetching = self.fetching.lock().await;
        // Another caller may have fetched it while this one waited.
        if let Some(value) = self.cached(slot) {
            return Ok(value);
        }
        let value = Arc::new(fetch.await?);
        let mut caches = self.caches.lock().unwrap_or_else(PoisonError::into_inner);
        *slot(&mut caches) = Some(Cached {
            at: Instant::now(),
            value: value.clone(),
        });
        Ok(value)
    }

    async fn clusters(&self, client: &Client) -> Result<Arc<Vec<Cluster>>, Error> {
        self.listing(|c| &mut c.clusters, client.list_all::<Cluster>())
            .await
    }

    /// The Prism Central's name (the cluster entity that runs the `PRISM_CENTRAL` service), for
    /// the `region` label.
    pub async fn prism_central_name(&self, client: &Client) -> Result<Option<String>, Error> {
        Ok(self
            .clusters(client)
            .await?
            .iter()
            .find(|cluster| cluster.is_prism_central())
            .and_then(|cluster| cluster.name().map(str::to_owned)))
    }

    /// The CIDR of subnet `uuid` (from the cached subnet listing), for preferring the primary
    /// NIC's own address.
    pub async fn subnet_cidr(&self, client: &Client, uuid: &str) -> Result<Option<IpNet>, Error> {
        Ok(self
            .listing(|c| &mut c.subnets, client.list_all::<Subnet>())
            .await?
            .iter()
            .find(|subnet| subnet.uuid().is_some_and(|u| u.eq_ignore_ascii_case(uuid)))
            .and_then(subnet_cidr))
    }

    async fn category_exists(&self, client: &Client, key: &str, value: &str) -> Lookup<bool> {
        let cache_key = (key.to_owned(), value.to_owned());
        {
            let caches = self.caches.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(cached) = caches.categories.get(&cache_key)
                && cached.at.elapsed() < self.ttl
            {
                return Lookup::Found(*cached.value);
            }
        }
        let exists = match client.get_category_value(key, value).await {
            Ok(_) => true,
            Err(error) if error.is_not_found() => false,
            Err(error) => {
                return Lookup::Failed {
                    error: error.to_string(),
                };
            }
        };
        self.caches
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .categories
            .insert(
                cache_key,
                Cached {
                    at: Instant::now(),
                    value: Arc::new(exists),
                },
            );
        Lookup::Found(exists)
    }

    /// Looks up everything `lookups` asks for. `failure_domains` are Infrastructure's.
    pub async fn resolve(
        &self,
        client: &Client,
        lookups: &RequiredLookups,
        failure_domains: &[FailureDomain],
    ) -> ResolvedReferences {
        let _one_at_a_time = self.resolving.lock().await;
        let mut resolved = ResolvedReferences {
            failure_domains: Some(failure_domains.to_vec()),
            ..ResolvedReferences::default()
        };

        if !lookups.clusters.is_empty() {
            let listing = self.clusters(client).await;
            for id in &lookups.clusters {
                let lookup = find(&listing, id, "cluster", |c: &Cluster| {
                    let (uuid, name) = entity(c.uuid(), c.name())?;
                    (!c.is_prism_central()).then_some((uuid, name, ()))
                })
                .map(|(uuid, ())| ResolvedEntity { uuid });
                insert(&mut resolved.clusters, id, lookup);
            }
        }
        if !lookups.images.is_empty() {
            let listing = self
                .listing(|c| &mut c.images, client.list_all::<Image>())
                .await;
            for id in &lookups.images {
                let lookup = find(&listing, id, "image", |i: &Image| {
                    entity(i.uuid(), i.name()).map(|(uuid, name)| (uuid, name, image_size(i)))
                })
                .map(|(uuid, size_bytes)| ResolvedSource {
                    uuid,
                    size_bytes,
                    boot_type: None,
                    version_id: None,
                    cluster_uuid: None,
                });
                insert(&mut resolved.images, id, lookup);
            }
        }
        if !lookups.templates.is_empty() {
            let listing = self
                .listing(|c| &mut c.templates, client.list_all_templates())
                .await;
            for id in &lookups.templates {
                let lookup = find(&listing, id, "template", |t: &Template| {
                    let (uuid, name) = entity(t.ext_id.as_deref(), t.template_name.as_deref())?;
                    Some((uuid, name, t))
                })
                .map(|(uuid, template)| template_source(uuid, template));
                insert(&mut resolved.templates, id, lookup);
            }
        }
        if !lookups.source_vms.is_empty() {
            for id in &lookups.source_vms {
                let lookup = self.source_vm(client, id).await;
                insert(&mut resolved.source_vms, id, lookup);
            }
        }
        if !lookups.subnets.is_empty() {
            let listing = self
                .listing(|c| &mut c.subnets, client.list_all::<Subnet>())
                .await;
            for id in &lookups.subnets {
                let lookup = find(&listing, id, "subnet", |s: &Subnet| {
                    entity(s.uuid(), s.name()).map(|(uuid, name)| {
                        let ipam = match subnet_cidr(s) {
                            Some(cidr) => SubnetIpam::Managed { cidr },
                            None => SubnetIpam::Unmanaged,
                        };
                        (uuid, name, (s.cluster_uuid().map(str::to_owned), ipam))
                    })
                })
                .map(|(uuid, (cluster_uuid, ipam))| ResolvedSubnet {
                    uuid,
                    cluster_uuid,
                    ipam: Some(ipam),
                });
                insert(&mut resolved.subnets, id, lookup);
            }
        }
        if !lookups.projects.is_empty() {
            let listing = self
                .listing(|c| &mut c.projects, client.list_all::<Project>())
                .await;
            for id in &lookups.projects {
                let lookup = find(&listing, id, "project", |p: &Project| {
                    entity(p.uuid(), p.name()).map(|(uuid, name)| (uuid, name, ()))
                })
                .map(|(uuid, ())| ResolvedEntity { uuid });
                insert(&mut resolved.projects, id, lookup);
            }
        }
        for (key, value) in &lookups.categories {
            let lookup = self.category_exists(client, key, value).await;
            resolved
                .categories
                .entry(key.clone())
                .or_default()
                .insert(value.clone(), lookup);
        }
        if lookups.host_gpus {
            resolved.host_gpus = Some(self.host_gpus(client, &resolved).await);
        }
        resolved
    }

    /// A clone's source VM: read by UUID, or found by its exact name with a name-filtered list
    /// (a source VM is usually not one of the cluster's, so the inventory does not hold it).
    async fn source_vm(
        &self,
        client: &Client,
        id: &NutanixResourceIdentifier,
    ) -> Lookup<ResolvedSource> {
        let cache_key = format!("{:?}/{}", id.type_, id.key().unwrap_or_default());
        {
            let caches = self.caches.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(cached) = caches.source_vms.get(&cache_key)
                && cached.at.elapsed() < self.ttl
            {
                return Lookup::Found((*cached.value).clone());
            }
        }
        let lookup = self.find_source_vm(client, id).await;
        if let Lookup::Found(source) = &lookup {
            self.caches
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .source_vms
                .insert(
                    cache_key,
                    Cached {
                        at: Instant::now(),
                        value: Arc::new(source.clone()),
                    },
                );
        }
        lookup
    }

    async fn find_source_vm(
        &self,
        client: &Client,
        id: &NutanixResourceIdentifier,
    ) -> Lookup<ResolvedSource> {
        match (&id.type_, id.key()) {
            (IdentifierType::Uuid, Some(uuid)) => match client.get_vm(uuid).await {
                Ok(vm) => Lookup::Found(vm_source(&vm)),
                Err(error) if error.is_not_found() => Lookup::Failed {
                    error: format!("no VM with UUID {uuid}"),
                },
                Err(error) => Lookup::Failed {
                    error: error.to_string(),
                },
            },
            (_, Some(name)) => match client.find_vm_by_exact_name(name).await {
                Ok(Some(vm)) => Lookup::Found(vm_source(&vm)),
                Ok(None) => Lookup::Failed {
                    error: format!("no VM named {name:?}", name = quoted(name)),
                },
                Err(error) => Lookup::Failed {
                    error: error.to_string(),
                },
            },
            (_, None) => Lookup::Failed {
                error: "no usable identifier".into(),
            },
        }
    }

    async fn host_gpus(
        &self,
        client: &Client,
        resolved: &ResolvedReferences,
    ) -> Lookup<Vec<prism_client::v3::HostGpu>> {
        let clusters: Vec<&str> = resolved
            .clusters
            .values()
            .filter_map(|lookup| match lookup {
                Lookup::Found(entity) => Some(entity.uuid.as_str()),
                Lookup::Failed { .. } => None,
            })
            .collect();
        let [cluster] = clusters.as_slice() else {
            return Lookup::Failed {
                error: "the GPU inventory needs the cluster, which is not resolved".into(),
            };
        };
        match client.list_hosts_of_cluster(cluster).await {
            Ok(hosts) => Lookup::Found(
                hosts
                    .iter()
                    .flat_map(|host| host.gpus().iter().cloned())
                    .collect(),
            ),
            Err(error) => Lookup::Failed {
                error: error.to_string(),
            },
        }
    }
}

fn insert<T>(
    table: &mut BTreeMap<String, Lookup<T>>,
    id: &NutanixResourceIdentifier,
    lookup: Lookup<T>,
) {
    if let Some(key) = id.key() {
        table.insert(key.to_owned(), lookup);
    }
}

fn entity<'a>(uuid: Option<&'a str>, name: Option<&'a str>) -> Option<(&'a str, Option<&'a str>)> {
    uuid.map(|uuid| (uuid, name))
}

/// The one entry of `listing` that `id` names, by UUID (case-insensitive) or exact name.
/// `view` gives an entry's UUID, name and what to return for it.
fn find<'a, E, T, V>(
    listing: &'a Result<Arc<Vec<E>>, Error>,
    id: &NutanixResourceIdentifier,
    what: &str,
    view: V,
) -> Lookup<(String, T)>
where
    V: Fn(&'a E) -> Option<(&'a str, Option<&'a str>, T)>,
    E: 'a,
{
    let entries = match listing {
        Ok(entries) => entries,
        Err(error) => {
            return Lookup::Failed {
                error: error.to_string(),
            };
        }
    };
    let views = entries.iter().filter_map(view);
    let mut matches: Vec<(&str, T)> = match (&id.type_, id.key()) {
        (IdentifierType::Uuid, Some(uuid)) => views
            .filter(|(entry_uuid, _, _)| entry_uuid.eq_ignore_ascii_case(uuid))
            .map(|(entry_uuid, _, value)| (entry_uuid, value))
            .collect(),
        (IdentifierType::Name, Some(name)) => views
            .filter(|(_, entry_name, _)| *entry_name == Some(name))
            .map(|(entry_uuid, _, value)| (entry_uuid, value))
            .collect(),
        _ => {
            return Lookup::Failed {
                error: "no usable identifier".into(),
            };
        }
    };
    let key = id.key().unwrap_or_default();
    match matches.len() {
        1 => {
            let (uuid, value) = matches.remove(0);
            Lookup::Found((uuid.to_ascii_lowercase(), value))
        }
        0 if id.type_ == IdentifierType::Uuid => Lookup::Failed {
            error: format!("no {what} with UUID {}", quoted(key)),
        },
        0 => Lookup::Failed {
            error: format!("no {what} named {key:?}", key = quoted(key)),
        },
        count => Lookup::Failed {
            error: format!(
                "{count} {what}s are named {key:?}: {}",
                bounded(
                    &matches
                        .iter()
                        .map(|(uuid, _)| *uuid)
                        .collect::<Vec<_>>()
                        .join(", "),
                    MAX_UUID_LIST_CHARS
                ),
                key = quoted(key)
            ),
        },
    }
}

fn image_size(image: &Image) -> Option<u64> {
    image
        .status
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.size_bytes)
        .or_else(|| {
            image
                .spec
                .as_ref()
                .and_then(|s| s.resources.as_ref())
                .and_then(|r| r.size_bytes)
        })
}

/// A template's boot disk size and boot type, from its active version's v4 VM spec.
pub fn template_source(uuid: String, template: &Template) -> ResolvedSource {
    let vm_spec = template
        .template_version_spec
        .as_ref()
        .and_then(|v| v.vm_spec.as_ref());
    let disks = vm_spec
        .and_then(|spec| spec.get("disks"))
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let size = |disk: &Value| {
        disk.pointer("/backingInfo/diskSizeBytes")
            .and_then(Value::as_u64)
    };
    let at_scsi_0 = |disk: &&Value| {
        disk.pointer("/diskAddress/busType").and_then(Value::as_str) == Some("SCSI")
            && disk.pointer("/diskAddress/index").and_then(Value::as_u64) == Some(0)
    };
    let size_bytes = disks
        .iter()
        .find(at_scsi_0)
        .and_then(size)
        .or_else(|| disks.iter().find_map(size));
    let boot_type = vm_spec
        .and_then(|spec| spec.get("bootConfig"))
        .and_then(|boot| {
            let kind = boot.get("$objectType").and_then(Value::as_str)?;
            if kind.ends_with("LegacyBoot") {
                Some(BootType::Legacy)
            } else if kind.ends_with("UefiBoot") {
                let secure = boot
                    .get("isSecureBootEnabled")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                Some(if secure {
                    BootType::SecureBoot
                } else {
                    BootType::Uefi
                })
            } else {
                None
            }
        });
    ResolvedSource {
        uuid,
        size_bytes,
        boot_type,
        version_id: None,
        cluster_uuid: None,
    }
}

/// A source VM's boot disk size (the disk at SCSI 0, else the first DISK) and boot type.
pub fn vm_source(vm: &Vm) -> ResolvedSource {
    let resources = vm.spec.as_ref().map(|spec| &spec.resources);
    let disks = resources
        .map(|r| r.disk_list.as_slice())
        .unwrap_or_default();
    let is_disk = |disk: &&prism_client::v3::Disk| {
        disk.device_properties.as_ref().is_none_or(|p| {
            p.device_type
                .as_ref()
                .is_none_or(|t| *t == prism_client::v3::DeviceType::Disk)
        })
    };
    let at_scsi_0 = |disk: &&prism_client::v3::Disk| {
        disk.device_properties
            .as_ref()
            .and_then(|p| p.disk_address.as_ref())
            .is_some_and(|a| {
                a.adapter_type == prism_client::v3::AdapterType::Scsi && a.device_index == 0
            })
    };
    let boot_disk = disks
        .iter()
        .filter(is_disk)
        .find(at_scsi_0)
        .or_else(|| disks.iter().find(is_disk));
    let size_bytes = boot_disk.and_then(|disk| {
        disk.disk_size_bytes
            .or(disk.disk_size_mib.map(|mib| mib * MIB))
    });
    let boot_type = resources.and_then(|r| r.boot_config.as_ref()).map(|boot| {
        match boot.boot_type.as_ref() {
            Some(prism_client::v3::BootType::Uefi) => BootType::Uefi,
            Some(prism_client::v3::BootType::SecureBoot) => BootType::SecureBoot,
            // No boot type is AHV's default, Legacy.
            _ => BootType::Legacy,
        }
    });
    let cluster_uuid = vm
        .spec
        .as_ref()
        .and_then(|spec| spec.cluster_reference.as_ref())
        .or_else(|| {
            vm.status
                .as_ref()
                .and_then(|status| status.cluster_reference.as_ref())
        })
        .map(|cluster| cluster.uuid.to_ascii_lowercase());
    ResolvedSource {
        uuid: vm.uuid().unwrap_or_default().to_ascii_lowercase(),
        size_bytes,
        boot_type,
        version_id: None,
        cluster_uuid,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn template_disk_and_boot() {
        let template: Template = serde_json::from_value(json!({
            "extId": "t-1", "templateName": "win",
            "templateVersionSpec": {"vmSpec": {
                "bootConfig": {"$objectType": "vmm.v4.ahv.config.UefiBoot", "isSecureBootEnabled": false},
                "disks": [
                    {"diskAddress": {"busType": "SATA", "index": 0}, "backingInfo": {"diskSizeBytes": 1}},
                    {"diskAddress": {"busType": "SCSI", "index": 0}, "backingInfo": {"diskSizeBytes": 128849018880u64}}
                ]}}
        }))
        .unwrap();
        let source = template_source("t-1".into(), &template);
        assert_eq!(source.size_bytes, Some(128_849_018_880));
        assert_eq!(source.boot_type, Some(BootType::Uefi));

        let bare: Template = serde_json::from_value(json!({"extId": "t-2"})).unwrap();
        let source = template_source("t-2".into(), &bare);
        assert_eq!((source.size_bytes, source.boot_type), (None, None));
    }

    #[test]
    fn source_vm_disk_and_boot() {
        let vm: Vm = serde_json::from_value(json!({
            "metadata": {"kind": "vm", "uuid": "V-1"},
            "spec": {"name": "golden", "resources": {
                "num_sockets": 2, "num_vcpus_per_socket": 1, "memory_size_mib": 8192, "power_state": "OFF",
                "boot_config": {"boot_type": "SECURE_BOOT"},
                "disk_list": [
                    {"device_properties": {"device_type": "CDROM", "disk_address": {"adapter_type": "IDE", "device_index": 0}}},
                    {"disk_size_mib": 122880, "device_properties": {"device_type": "DISK", "disk_address": {"adapter_type": "SCSI", "device_index": 0}}}
                ]}}
        }))
        .unwrap();
        let source = vm_source(&vm);
        assert_eq!(source.uuid, "v-1");
        assert_eq!(source.size_bytes, Some(122_880 * MIB));
        assert_eq!(source.boot_type, Some(BootType::SecureBoot));
    }

    #[test]
    fn exact_names_and_uuids() {
        let images: Vec<Image> = serde_json::from_value(json!([
            {"metadata": {"kind": "image", "uuid": "I-1"}, "spec": {"name": "rhcos"}},
            {"metadata": {"kind": "image", "uuid": "i-2"}, "spec": {"name": "rhcos-old"}},
            {"metadata": {"kind": "image", "uuid": "i-3"}, "spec": {"name": "dup"}},
            {"metadata": {"kind": "image", "uuid": "i-4"}, "spec": {"name": "dup"}}
        ]))
        .unwrap();
        let listing: Result<Arc<Vec<Image>>, Error> = Ok(Arc::new(images));
        fn view(image: &Image) -> Option<(&str, Option<&str>, ())> {
            entity(image.uuid(), image.name()).map(|(uuid, name)| (uuid, name, ()))
        }
        let by_name = |name: &str| {
            find(
                &listing,
                &NutanixResourceIdentifier::by_name(name),
                "image",
                view,
            )
        };
        assert_eq!(by_name("rhcos"), Lookup::Found(("i-1".into(), ())));
        assert_eq!(
            by_name("rhc"),
            Lookup::Failed {
                error: "no image named \"rhc\"".into()
            },
            "no partial match"
        );
        assert_eq!(
            by_name("dup"),
            Lookup::Failed {
                error: "2 images are named \"dup\": i-3, i-4".into()
            }
        );
        assert_eq!(
            find(
                &listing,
                &NutanixResourceIdentifier::by_uuid("i-1"),
                "image",
                view
            ),
            Lookup::Found(("i-1".into(), ()))
        );
        assert_eq!(
            find(
                &listing,
                &NutanixResourceIdentifier::by_uuid("i-9"),
                "image",
                view
            ),
            Lookup::Failed {
                error: "no image with UUID i-9".into()
            }
        );
    }
}
