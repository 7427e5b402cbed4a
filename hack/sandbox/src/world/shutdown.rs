//! The world's end: everything stopped and waited for, the work directory kept or deleted.

use std::path::PathBuf;
use std::sync::Arc;

use super::World;

impl World {
    /// Stops the controller, the actors and the servers, and waits for them. The work directory
    /// is deleted unless it was given in the options.
    pub async fn shutdown(self) {
        let _ = self.kill_controller().await;
        drop(self.observer);
        for actor in self.actors {
            actor.stop().await;
        }
        self.approver.stop().await;
        if let Ok(sources) = Arc::try_unwrap(self.sources)
            && let Ok(agent) = Arc::try_unwrap(sources.agent)
        {
            agent.stop().await;
        }
        self.cluster.shutdown().await;
        self.mock.shutdown().await;
        drop(self.temp_dir);
    }

    /// Keeps the work directory after the world is gone (for `--keep`-like uses with a
    /// temporary directory); returns its path.
    pub fn keep_work_dir(&mut self) -> PathBuf {
        if let Some(temp) = self.temp_dir.take() {
            let _ = temp.keep();
        }
        self.work_dir.clone()
    }
}
