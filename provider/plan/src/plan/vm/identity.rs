//! The identity marker that ties a VM to its Machine, so the VM can be found again after a crash
//! (before its UUID was recorded on the Machine) and told apart from a same-named VM of another
//! cluster.
//!
//! The marker lives in the VM's `spec.description`, not in a category: a category value must exist
//! in Prism before a VM can carry it, so a per-Machine value would have to be created first (one
//! more write that can fail halfway) and deleted afterwards, or it would leak one value per Machine
//! forever. Categories carry only the user's pairs and `kubernetes-io-cluster-<infraID>: owned`.

use std::fmt;

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

#[cfg(test)]
mod tests {
    use super::*;

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
