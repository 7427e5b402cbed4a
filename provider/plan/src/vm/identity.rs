//! The identity marker that ties a VM to its Machine, so the VM can be found again after a crash
//! (before its UUID was recorded on the Machine) and told apart from a same-named VM of another
//! cluster.
//!
//! The marker lives in the VM's `spec.description`, not in a category: a category value must exist
//! in Prism before a VM can carry it, so a per-Machine value would have to be created first (one
//! more write that can fail halfway) and deleted afterwards, or it would leak one value per Machine
//! forever. Categories carry only the user's pairs and `kubernetes-io-cluster-<infraID>: owned`.

use std::fmt;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use prism_types::v3::Vm;

/// Start of the marker line.
pub const IDENTITY_PREFIX: &str = "openshift-machine: ";

/// Which Machine a VM belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MachineIdentity {
    pub namespace: String,
    pub name: String,
    /// The Machine's `metadata.uid`: a recreated Machine of the same name is another Machine.
    pub uid: String,
}

impl MachineIdentity {
    /// The VM description carrying this identity: `openshift-machine: <namespace>/<name> uid=<uid>`.
    pub fn description(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for MachineIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{IDENTITY_PREFIX}{}/{} uid={}",
            self.namespace, self.name, self.uid
        )
    }
}

/// The Machine identity in a VM description, if it has one (on any line).
pub fn identity_of(description: &str) -> Option<MachineIdentity> {
    description.lines().find_map(|line| {
        let rest = line.trim().strip_prefix(IDENTITY_PREFIX)?;
        let (object, uid) = rest.split_once(" uid=")?;
        let (namespace, name) = object.split_once('/')?;
        let plain = |s: &str| !s.is_empty() && !s.contains(char::is_whitespace);
        (plain(namespace) && plain(name) && plain(uid) && !name.contains('/')).then(|| {
            MachineIdentity {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                uid: uid.to_owned(),
            }
        })
    })
}

/// A listed VM whose description carries a Machine's identity marker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MarkedVm {
    pub uuid: String,
    /// `spec.name`.
    pub name: String,
    /// `metadata.creation_time`.
    pub created: Option<Timestamp>,
    pub identity: MachineIdentity,
}

impl MarkedVm {
    /// A listed VM as a candidate, if its description carries a marker (UUID lower-cased).
    pub fn of(vm: &Vm) -> Option<Self> {
        let spec = vm.spec.as_ref()?;
        Some(Self {
            uuid: vm.uuid()?.to_ascii_lowercase(),
            name: spec.name.clone(),
            created: vm
                .metadata
                .creation_time
                .as_deref()
                .and_then(|time| time.parse().ok()),
            identity: identity_of(spec.description.as_deref()?)?,
        })
    }
}

/// How much older than its Machine a VM may look and still be its VM: Prism Central's clock and
/// the API server's are set by different people (and Kubernetes keeps whole seconds).
pub const CLOCK_SKEW: SignedDuration = SignedDuration::from_secs(300);

/// The VM to adopt for a Machine that lost (or never recorded) its VM's UUID, among VMs carrying
/// a marker. A description is anyone's to write in Prism, so the marker alone is not trusted: the
/// VM must carry the Machine's whole identity (namespace, name and uid), bear the Machine's name
/// (every VM this provider makes is named after its Machine), and be no older than the Machine
/// (a VM made before the Machine existed, its description edited since, is not its VM). A VM
/// without a creation time is not taken. Several fitting (which the create protocol prevents):
/// the oldest, by creation time then UUID, so that the answer is stable.
pub fn adoptable_vm<'a>(
    marked: &'a [MarkedVm],
    machine: &MachineIdentity,
    machine_created: Option<Timestamp>,
) -> Option<&'a MarkedVm> {
    let earliest = machine_created? - CLOCK_SKEW;
    marked
        .iter()
        .filter(|vm| vm.identity == *machine && vm.name == machine.name)
        .filter(|vm| vm.created.is_some_and(|created| created >= earliest))
        .min_by(|a, b| (a.created, &a.uuid).cmp(&(b.created, &b.uuid)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marked(uuid: &str, name: &str, created: &str, identity: MachineIdentity) -> MarkedVm {
        MarkedVm {
            uuid: uuid.into(),
            name: name.into(),
            created: Some(created.parse().unwrap()),
            identity,
        }
    }

    #[test]
    fn a_marker_alone_is_not_trusted() {
        let machine = identity();
        let created: Timestamp = "2026-12-01T10:00:00Z".parse().unwrap();
        let own = marked("a", &machine.name, "2026-12-01T10:00:05Z", machine.clone());
        assert_eq!(
            adoptable_vm(std::slice::from_ref(&own), &machine, Some(created)),
            Some(&own)
        );
        let cases = [
            // Renamed, or another VM given the marker.
            marked("b", "someone-else", "2026-12-01T10:00:05Z", machine.clone()),
            // Made long before the Machine existed, its description edited since.
            marked("c", &machine.name, "2026-11-01T10:00:00Z", machine.clone()),
            // The uid of this Machine under another name or namespace.
            marked(
                "d",
                &machine.name,
                "2026-12-01T10:00:05Z",
                MachineIdentity {
                    namespace: "other".into(),
                    ..machine.clone()
                },
            ),
        ];
        for case in &cases {
            assert_eq!(
                adoptable_vm(std::slice::from_ref(case), &machine, Some(created)),
                None,
                "{case:?}"
            );
        }
        let no_time = MarkedVm {
            created: None,
            ..own.clone()
        };
        assert_eq!(adoptable_vm(&[no_time], &machine, Some(created)), None);
        assert_eq!(
            adoptable_vm(std::slice::from_ref(&own), &machine, None),
            None
        );
    }

    #[test]
    fn clocks_may_disagree_by_minutes_and_the_oldest_of_several_wins() {
        let machine = identity();
        let created: Timestamp = "2026-12-01T10:00:00Z".parse().unwrap();
        let skewed = marked("b", &machine.name, "2026-12-01T09:56:00Z", machine.clone());
        let later = marked("a", &machine.name, "2026-12-01T10:01:00Z", machine.clone());
        let marked = [later, skewed.clone()];
        let found = adoptable_vm(&marked, &machine, Some(created));
        assert_eq!(found, Some(&skewed));
    }

    fn identity() -> MachineIdentity {
        MachineIdentity {
            namespace: "openshift-machine-api".into(),
            name: "ocp-7x2kq-worker-0-abcde".into(),
            uid: "6f1c3c4e-2f59-4c43-9a55-0b1f2a3c4d5e".into(),
        }
    }

    #[test]
    fn description_round_trips() {
        let description = identity().description();
        assert_eq!(
            description,
            "openshift-machine: openshift-machine-api/ocp-7x2kq-worker-0-abcde uid=6f1c3c4e-2f59-4c43-9a55-0b1f2a3c4d5e"
        );
        assert_eq!(identity_of(&description), Some(identity()));
    }

    #[test]
    fn the_marker_is_found_on_any_line() {
        let description = format!("edited by hand\n{}\n", identity());
        assert_eq!(identity_of(&description), Some(identity()));
    }

    #[test]
    fn descriptions_without_a_marker_have_no_identity() {
        for description in [
            "",
            "Created By OpenShift Installer",
            "openshift-machine: ns/name",
            "openshift-machine: name uid=1",
            "openshift-machine: ns/ uid=1",
            "openshift-machine: ns/name uid=",
            "openshift-machine: ns/a/b uid=1",
            "openshift-machine: ns/na me uid=1",
        ] {
            assert_eq!(identity_of(description), None, "{description:?}");
        }
    }
}
