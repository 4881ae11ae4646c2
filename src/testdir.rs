//! Temporary directories for the unit tests, removed when dropped (after a failed assertion too).

use std::path::{Path, PathBuf};

pub struct TempDir(PathBuf);

impl TempDir {
    /// A fresh, empty `parasol-<what>-<uuid>` directory under the system temp dir.
    pub fn new(what: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("parasol-{what}-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl std::ops::Deref for TempDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
