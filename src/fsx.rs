//! Durable file-system primitives shared by every writer: atomic replace
//! (temp file in the same directory, fsync, rename, fsync the directory),
//! directory fsync, and file locks that the OS frees when a process dies.
//! Every error names the path it concerns.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, IoContext, Result};

/// Prefix of temporary files, so leftovers of a killed process are recognisable.
pub const TEMP_PREFIX: &str = ".ibi-tmp-";

/// The directory holding `path` (`.` for a bare file name).
pub fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// fsyncs a directory so that renames and creations inside it are durable.
pub fn fsync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).with_path("fsync directory", dir)
}

/// Replaces `path` with `bytes` atomically and durably: a reader sees the old or the
/// new content, never a mix, and after return the new content survives a crash.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = parent_dir(path);
    let mut temp =
        tempfile::Builder::new().prefix(TEMP_PREFIX).tempfile_in(dir).with_path("create a temporary file in", dir)?;
    temp.write_all(bytes).with_path("write", temp.path())?;
    temp.as_file().sync_all().with_path("fsync", temp.path())?;
    temp.persist(path).map_err(|e| Error::io("rename a temporary file onto", path, e.error))?;
    fsync_dir(dir)
}

/// An exclusive lock on a lock file, released on drop or when the process dies.
#[derive(Debug)]
pub struct FileLock {
    file: File,
    path: PathBuf,
}

fn open_lock_file(path: &Path) -> Result<File> {
    match OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path) {
        Ok(f) => Ok(f),
        // A read-only place can still be locked if the lock file exists.
        Err(e) if matches!(e.kind(), io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem) => {
            File::open(path).map_err(|_| Error::io("open lock file", path, e))
        }
        Err(e) => Err(Error::io("open lock file", path, e)),
    }
}

impl FileLock {
    /// Waits until the exclusive lock on `path` is ours.
    pub fn acquire(path: &Path) -> Result<FileLock> {
        let file = open_lock_file(path)?;
        file.lock().with_path("lock", path)?;
        Ok(FileLock { file, path: path.to_path_buf() })
    }

    /// Takes the lock if it is free; `Error::Locked` if another process holds it.
    pub fn try_acquire(path: &Path) -> Result<FileLock> {
        let file = open_lock_file(path)?;
        match file.try_lock() {
            Ok(()) => Ok(FileLock { file, path: path.to_path_buf() }),
            Err(fs::TryLockError::WouldBlock) => Err(Error::Locked { path: path.to_path_buf() }),
            Err(fs::TryLockError::Error(e)) => Err(Error::io("lock", path, e)),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        let _ = self.file.unlock();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state");
        atomic_write(&path, b"one").unwrap();
        atomic_write(&path, b"two").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn atomic_write_error_names_the_directory() {
        let err = atomic_write(Path::new("/nonexistent-ibi-dir/state"), b"x").unwrap_err();
        assert!(err.to_string().contains("/nonexistent-ibi-dir"), "{err}");
    }

    #[test]
    fn second_try_lock_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        let held = FileLock::try_acquire(&path).unwrap();
        assert!(matches!(FileLock::try_acquire(&path), Err(Error::Locked { .. })));
        drop(held);
        FileLock::try_acquire(&path).unwrap();
    }
}
