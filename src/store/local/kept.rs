//! The local collection's kept copies (`store::kept`): the folders of
//! `.ibi/kept/`, each a whole bag a replacement displaced.

use std::path::Path;

use super::Collection;
use crate::error::{Error, IoContext, Result};
use crate::fsx;
use crate::store::kept::{is_kept_id, KeptCopies, KeptCopy};

impl KeptCopies for Collection {
    fn list_kept(&self) -> Result<Vec<KeptCopy>> {
        let dir = self.layout.kept();
        let entries = match std::fs::read_dir(&dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            other => other.with_path("list", &dir)?,
        };
        let mut kept = Vec::new();
        for entry in entries {
            let entry = entry.with_path("list", &dir)?;
            let id = entry.file_name().to_string_lossy().into_owned();
            if is_kept_id(&id) && entry.file_type().with_path("read", entry.path())?.is_dir() {
                kept.push(KeptCopy::from_id(&id, tree_bytes(&entry.path())?));
            }
        }
        kept.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(kept)
    }

    fn remove_kept(&self, id: &str) -> Result<KeptCopy> {
        let path = self.layout.kept().join(id);
        let is_dir = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir());
        if !is_kept_id(id) || !is_dir {
            let place = self.layout.kept();
            return Err(Error::NotFound { what: "kept copy", name: id.to_string(), place });
        }
        let copy = KeptCopy::from_id(id, tree_bytes(&path)?);
        fsx::remove_tree(&path)?;
        fsx::fsync_dir(&self.layout.kept())?;
        Ok(copy)
    }
}

/// The bytes of every file under `dir`, links not followed.
fn tree_bytes(dir: &Path) -> Result<u64> {
    let mut total = 0;
    let mut folders = vec![dir.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).with_path("list", &folder)? {
            let entry = entry.with_path("list", &folder)?;
            let meta = entry.metadata().with_path("read", entry.path())?;
            if meta.is_dir() {
                folders.push(entry.path());
            } else {
                total += meta.len();
            }
        }
    }
    Ok(total)
}
