//! What `hack/real-cluster/build.sh` built: the programs and openshift/api's CRDs.

use std::path::PathBuf;

use super::{DIR_VARIABLE, RealClusterError, io_error};

/// The built programs and CRDs: `$REAL_CLUSTER_DIR/{bin,crds}`.
#[derive(Debug, Clone)]
pub struct Binaries {
    dir: PathBuf,
}

impl Binaries {
    /// The build named by `REAL_CLUSTER_DIR`, or `None` when it is unset.
    pub fn from_env() -> Option<Self> {
        std::env::var_os(DIR_VARIABLE).map(|dir| Self {
            dir: PathBuf::from(dir),
        })
    }

    pub fn program(&self, program: &'static str) -> Result<PathBuf, RealClusterError> {
        let path = self.dir.join("bin").join(program);
        if path.is_file() {
            Ok(path)
        } else {
            Err(RealClusterError::MissingProgram {
                program,
                dir: self.dir.join("bin"),
            })
        }
    }

    /// openshift/api's CRD manifests the build copied.
    pub fn crd_files(&self) -> Result<Vec<PathBuf>, RealClusterError> {
        let dir = self.dir.join("crds");
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map_err(io_error(format!("read {}", dir.display())))?
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
            .collect();
        files.sort();
        Ok(files)
    }

    /// The pinned module versions the build recorded.
    pub fn versions(&self) -> String {
        std::fs::read_to_string(self.dir.join("versions")).unwrap_or_default()
    }
}
