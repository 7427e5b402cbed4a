//! Which VMs of a Prism Central belong to this cluster's Machines, as a filter Prism applies.
//!
//! A Prism Central is often shared by many clusters and teams; listing every VM it holds makes
//! the inventory's cost grow with Prism Central instead of with the cluster. Every VM this
//! provider makes is named after its Machine, and the MachineSet controller names each Machine
//! `<MachineSet>-<random>` (machine-api-operator `pkg/controller/machineset/controller.go`,
//! `createMachine`: `GenerateName: <set>-`). So the Machines' names, one clause per MachineSet,
//! select the cluster's VMs.
//!
//! The clauses go to `POST /vms/list` as a FIQL `filter` of `vm_name==<text>` alternatives
//! joined by `,` (FIQL's OR). Sources: prism-go-client's v3 swagger (`vm_list_metadata.filter`:
//! "The filter in FIQL syntax used for the results"), its recorded request
//! `{"filter":"vm_name==test-vm",...}` (`v3/mocks`), which the Go provider sends to find a VM by
//! name; real Prism's `==` on names matches partially (CAPX #485 and #260: the names of other
//! VMs came back). A partial match selects more than asked, never less, so the listing keeps
//! only the VMs a clause really names ([`VmNameScope::covers`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use crate::api::Machine;

/// One clause: the names it selects.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NameClause {
    /// The Machines of one MachineSet: names starting with `<set>-`.
    Prefix(String),
    /// One Machine that no MachineSet named: exactly this name.
    Exact(String),
}

impl NameClause {
    /// The clause for a Machine named `name`, owned by the MachineSet `owner` if any. A Machine a
    /// MachineSet adopted (its name does not start with `<set>-`) is named exactly.
    pub fn of_machine(name: &str, owner: Option<&str>) -> Self {
        match owner {
            Some(set)
                if !set.is_empty()
                    && name
                        .strip_prefix(set)
                        .is_some_and(|rest| rest.starts_with('-')) =>
            {
                Self::Prefix(format!("{set}-"))
            }
            _ => Self::Exact(name.to_owned()),
        }
    }

    /// The clause naming the VM of `machine`.
    pub fn of(machine: &Machine) -> Self {
        Self::of_machine(
            machine.metadata.name.as_deref().unwrap_or_default(),
            machine.machine_set(),
        )
    }

    fn text(&self) -> &str {
        match self {
            Self::Prefix(text) | Self::Exact(text) => text,
        }
    }

    /// Whether a VM named `vm_name` is one this clause names.
    pub fn covers(&self, vm_name: &str) -> bool {
        match self {
            Self::Prefix(prefix) => vm_name.starts_with(prefix.as_str()),
            Self::Exact(name) => vm_name == name,
        }
    }
}

/// Clauses above which the filter is not sent and every VM is listed: a FIQL expression this
/// long has never been seen sent to Prism (the Go provider, CAPX and the SDKs send one clause),
/// and a cluster with this many standalone Machines is rare.
pub const MAX_CLAUSES: usize = 256;

/// The names of a cluster's VMs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VmNameScope {
    clauses: BTreeSet<NameClause>,
    /// The Machines' own names.
    machines: BTreeSet<String>,
    /// The clusters' infrastructure IDs (`machine.openshift.io/cluster-api-cluster`).
    cluster_ids: BTreeSet<String>,
}

impl VmNameScope {
    /// The scope of the Machines given as `(name, owning MachineSet)`.
    pub fn of<'a>(machines: impl IntoIterator<Item = (&'a str, Option<&'a str>)>) -> Self {
        let mut scope = Self::default();
        for (name, owner) in machines {
            scope.insert(NameClause::of_machine(name, owner));
            scope.machines.insert(name.to_owned());
        }
        scope
    }

    /// Adds a cluster whose VMs [`Self::is_orphan`] recognises.
    pub fn add_cluster_id(&mut self, infra_id: &str) {
        if !infra_id.is_empty() {
            self.cluster_ids.insert(infra_id.to_owned());
        }
    }

    /// Whether a listed VM is one of the cluster's with no Machine: named as the scope's
    /// Machines are but after none of them, and carrying the category every VM of the cluster
    /// gets, `kubernetes-io-cluster-<infraID>: owned` (the installer's, which its `destroy`
    /// deletes VMs by: openshift/installer `pkg/destroy/nutanix/nutanix.go`), so that a VM of
    /// another cluster with a same-named MachineSet is not counted. A VM left behind (a Machine
    /// whose finalizer was removed by hand) or made behind the controller's back.
    pub fn is_orphan(&self, vm_name: &str, categories: Option<&BTreeMap<String, String>>) -> bool {
        let owned = categories.is_some_and(|categories| {
            self.cluster_ids.iter().any(|id| {
                categories
                    .get(&format!("kubernetes-io-cluster-{id}"))
                    .is_some_and(|value| value == "owned")
            })
        });
        owned && self.covers(vm_name) && !self.machines.contains(vm_name)
    }

    pub fn insert(&mut self, clause: NameClause) {
        self.clauses.insert(clause);
    }

    /// Every name `other` selects, this scope selects too.
    pub fn includes(&self, other: &NameClause) -> bool {
        match other {
            NameClause::Exact(name) => self.covers(name),
            NameClause::Prefix(wanted) => self.clauses.iter().any(|clause| {
                matches!(clause, NameClause::Prefix(prefix) if wanted.starts_with(prefix.as_str()))
            }),
        }
    }

    /// Whether a VM named `vm_name` belongs to the scope. A scope too large to send
    /// ([`Self::filter`] is `None`) still keeps only its own VMs.
    pub fn covers(&self, vm_name: &str) -> bool {
        self.clauses.iter().any(|clause| clause.covers(vm_name))
    }

    pub fn len(&self) -> usize {
        self.clauses.len()
    }

    pub fn is_empty(&self) -> bool {
        self.clauses.is_empty()
    }

    /// The FIQL `filter` selecting the scope's VMs; `None` (list every VM) above
    /// [`MAX_CLAUSES`]. An empty scope selects nothing, so callers do not list at all.
    pub fn filter(&self) -> Option<String> {
        if self.clauses.len() > MAX_CLAUSES {
            return None;
        }
        let mut filter = String::new();
        for clause in &self.clauses {
            if !filter.is_empty() {
                filter.push(',');
            }
            // FIQL reserves `,` and `;` (and `(`, `)`) as operators; a Kubernetes object name
            // (DNS subdomain: lower-case letters, digits, `-` and `.`) never holds them.
            let _ = write!(filter, "vm_name=={}", clause.text());
        }
        Some(filter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machines_of_a_machine_set_share_one_clause() {
        let scope = VmNameScope::of([
            ("ocp-7x2kq-worker-a-abcde", Some("ocp-7x2kq-worker-a")),
            ("ocp-7x2kq-worker-a-fghij", Some("ocp-7x2kq-worker-a")),
            ("win-image-k2p9x", Some("win-image")),
            ("ocp-7x2kq-master-0", None),
        ]);
        assert_eq!(scope.len(), 3);
        assert_eq!(
            scope.filter().as_deref(),
            Some("vm_name==ocp-7x2kq-worker-a-,vm_name==win-image-,vm_name==ocp-7x2kq-master-0")
        );
    }

    #[test]
    fn a_machine_adopted_by_a_set_is_named_exactly() {
        assert_eq!(
            NameClause::of_machine("hand-made", Some("workers")),
            NameClause::Exact("hand-made".into())
        );
        // `workers2-x` does not start with `workers-`: the set `workers` did not name it.
        assert_eq!(
            NameClause::of_machine("workers2-x", Some("workers")),
            NameClause::Exact("workers2-x".into())
        );
        assert_eq!(
            NameClause::of_machine("workers-x", Some("")),
            NameClause::Exact("workers-x".into())
        );
    }

    #[test]
    fn only_the_names_a_clause_names_are_covered() {
        let scope = VmNameScope::of([
            ("win-image-k2p9x", Some("win-image")),
            ("ocp-master-0", None),
        ]);
        for covered in ["win-image-k2p9x", "win-image-other", "ocp-master-0"] {
            assert!(scope.covers(covered), "{covered}");
        }
        // What Prism's partial match also returns: kept out.
        for foreign in [
            "test-win-image-1",
            "win-image",
            "ocp-master-01",
            "old-ocp-master-0",
        ] {
            assert!(!scope.covers(foreign), "{foreign}");
        }
    }

    #[test]
    fn a_scope_too_large_to_send_lists_everything_but_keeps_its_own() {
        let names: Vec<String> = (0..=MAX_CLAUSES).map(|i| format!("m-{i}")).collect();
        let scope = VmNameScope::of(names.iter().map(|name| (name.as_str(), None)));
        assert_eq!(scope.filter(), None);
        assert!(scope.covers("m-7"));
        assert!(!scope.covers("m-7x"));
        let smaller = VmNameScope::of(names[1..].iter().map(|name| (name.as_str(), None)));
        assert!(smaller.filter().is_some());
    }

    #[test]
    fn an_orphan_is_a_clusters_vm_named_as_its_machines_but_after_none() {
        let mut scope = VmNameScope::of([("win-abcde", Some("win"))]);
        scope.add_cluster_id("ocp-7x2kq");
        let owned = BTreeMap::from([("kubernetes-io-cluster-ocp-7x2kq".into(), "owned".into())]);
        let other = BTreeMap::from([("kubernetes-io-cluster-ocp-other".into(), "owned".into())]);
        assert!(scope.is_orphan("win-zzzzz", Some(&owned)));
        assert!(
            !scope.is_orphan("win-abcde", Some(&owned)),
            "its Machine exists"
        );
        assert!(
            !scope.is_orphan("win-zzzzz", Some(&other)),
            "another cluster's"
        );
        assert!(
            !scope.is_orphan("win-zzzzz", None),
            "no category: not provably ours"
        );
        assert!(
            !scope.is_orphan("lin-zzzzz", Some(&owned)),
            "not named as the Machines are"
        );
    }

    #[test]
    fn inclusion_is_by_clause() {
        let scope = VmNameScope::of([("w-1", Some("w"))]);
        assert!(scope.includes(&NameClause::of_machine("w-2", Some("w"))));
        assert!(!scope.includes(&NameClause::of_machine("v-2", Some("v"))));
        // A set's clause includes each of its Machines named exactly, not the other way round.
        assert!(scope.includes(&NameClause::Exact("w-adopted".into())));
        let one = VmNameScope::of([("w-1", None)]);
        assert!(!one.includes(&NameClause::of_machine("w-2", Some("w"))));
    }
}
