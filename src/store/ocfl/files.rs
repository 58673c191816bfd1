//! Where an OCFL storage root's files are: a folder on this machine
//! (`LocalRoot`) or a prefix in a bucket (`store::ocfl::s3::S3Root`). The
//! read side (`RootFiles`) is what `OcflStore` reads a site through; the
//! write side (`RootWrites`) is the handful of steps `ops::ocfl::export`
//! builds a version with. Paths are relative to the root, `/`-separated.
//!
//! The two places differ in one way the writer must know (`stages`): a
//! folder builds a version aside and renames it into its object whole, while
//! a bucket has no rename, so a version's keys are written where they stay,
//! its inventory last, and the object's root inventory names it only after.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::error::{Error, IoContext, Result};
use crate::fsx;

/// The files of an OCFL storage root, read.
pub trait RootFiles: Send + Sync {
    /// `ocfl:PATH` or `ocfl:s3://BUCKET/PREFIX`, for messages.
    fn place(&self) -> String;
    /// A small file (a declaration, an inventory, a config) whole; `None`
    /// when there is none.
    fn read_small(&self, rel: &str) -> Result<Option<Vec<u8>>>;
    /// A content file, streamed, with its modification time where known.
    fn open(&self, rel: &str) -> std::io::Result<(Box<dyn Read + Send + '_>, Option<SystemTime>)>;
    /// Every file under the folder `dir` (relative to it) with its size.
    fn sizes_under(&self, dir: &str) -> Result<BTreeMap<String, u64>>;
    /// The numbers of the version folders (`vN`) the object at `object` holds.
    fn version_numbers(&self, object: &str) -> Result<Vec<u32>>;
    /// Every object root under the storage root (three tuples deep, then
    /// the encoded id), relative.
    fn object_dirs(&self) -> Result<Vec<String>>;
    /// A file of ibi's own at the root (an index, the checks) whole, however
    /// long; `None` when there is none.
    fn read_whole(&self, rel: &str) -> std::io::Result<Option<Vec<u8>>> {
        let mut bytes = Vec::new();
        let read = self.open(rel).and_then(|(mut reader, _)| reader.read_to_end(&mut bytes));
        match read {
            Ok(_) => Ok(Some(bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// The steps a writer of an OCFL storage root takes.
pub trait RootWrites: RootFiles {
    /// Whether a version is built aside and renamed into its object
    /// (a folder) rather than written where it stays (a bucket).
    fn stages(&self) -> bool;
    /// Writes a new file from `reader` (not yet durable: `sync` makes it so);
    /// its SHA-256, hex.
    fn create_from(&self, rel: &str, reader: &mut (dyn Read + Send), origin: &Path) -> Result<String>;
    /// Writes a new small file (not yet durable).
    fn create(&self, rel: &str, bytes: &[u8]) -> Result<()>;
    /// Replaces a small file whole, durably: a reader sees the old or the new.
    fn replace(&self, rel: &str, bytes: &[u8]) -> Result<()>;
    /// Replaces a small file whole, made durable by the next `sync`.
    fn replace_unsynced(&self, rel: &str, bytes: &[u8]) -> Result<()>;
    /// Removes a file, when it is there.
    fn remove(&self, rel: &str) -> Result<()>;
    /// Removes a folder and everything under it, when it is there.
    fn remove_tree(&self, rel: &str) -> Result<()>;
    /// Moves the built folder `from` to `to`, which must not exist (only
    /// where `stages`).
    fn rename_dir(&self, from: &str, to: &str) -> Result<()>;
    /// Makes everything written so far durable.
    fn sync(&self) -> Result<()>;
    /// Holds the root for writing until the guard is dropped; one writer at a time.
    fn lock(&self) -> Result<Box<dyn std::any::Any + Send>>;
    /// Removes what a killed writer left half written in the object's
    /// folder itself (a temporary file beside its inventory).
    fn clear_object_leftovers(&self, object: &str) -> Result<()>;
    /// Removes the folders under `dir` that copies left empty (a folder only).
    fn prune_empty_dirs(&self, dir: &str) -> Result<()>;
    /// Whether the root is missing, empty, or holds nothing but files `ours`
    /// names and what a writer killed while making it left half written
    /// (which goes); `false` leaves everything as it is.
    fn clear_unfinished_root(&self, ours: &Unfinished) -> Result<bool>;
}

/// What a writer making a storage root writes before its declaration: these
/// files, and anything under these folders.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Unfinished {
    pub files: Vec<String>,
    pub under: Vec<String>,
}

impl Unfinished {
    /// Whether `rel` is one of them.
    pub fn holds(&self, rel: &str) -> bool {
        self.files.iter().any(|f| f == rel) || self.under.iter().any(|u| rel.starts_with(&format!("{u}/")))
    }
}

/// An OCFL storage root in a folder on this machine.
pub struct LocalRoot {
    root: PathBuf,
}

impl LocalRoot {
    pub fn new(root: &Path) -> LocalRoot {
        LocalRoot { root: root.to_path_buf() }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        match rel {
            "" => self.root.clone(),
            _ => self.root.join(rel),
        }
    }
}

impl RootFiles for LocalRoot {
    fn place(&self) -> String {
        format!("ocfl:{}", self.root.display())
    }

    fn read_small(&self, rel: &str) -> Result<Option<Vec<u8>>> {
        let path = self.path(rel);
        match fsx::open_regular(&path, false) {
            Ok(opened) => fsx::read_opened(opened, fsx::MAX_TAG_FILE).map(Some).with_path("read", &path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io("read", &path, e)),
        }
    }

    fn open(&self, rel: &str) -> std::io::Result<(Box<dyn Read + Send + '_>, Option<SystemTime>)> {
        let opened = fsx::open_regular(&self.path(rel), false)?;
        let mtime = opened.meta.modified().ok();
        Ok((Box::new(opened.file), mtime))
    }

    fn sizes_under(&self, dir: &str) -> Result<BTreeMap<String, u64>> {
        let base = self.path(dir);
        let mut sizes = BTreeMap::new();
        for entry in walkdir::WalkDir::new(&base).min_depth(1) {
            let Ok(entry) = entry else { continue };
            if entry.file_type().is_file() {
                let rel = entry.path().strip_prefix(&base).unwrap_or(entry.path());
                let size = entry.metadata().map_or(0, |m| m.len());
                sizes.insert(rel.to_string_lossy().into_owned(), size);
            }
        }
        Ok(sizes)
    }

    fn version_numbers(&self, object: &str) -> Result<Vec<u32>> {
        let mut numbers: Vec<u32> = std::fs::read_dir(self.path(object))
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| version_number(&e.file_name().to_string_lossy()))
            .collect();
        numbers.sort_unstable();
        Ok(numbers)
    }

    fn object_dirs(&self) -> Result<Vec<String>> {
        Ok(walkdir::WalkDir::new(&self.root)
            .min_depth(4)
            .max_depth(4)
            .into_iter()
            .flatten()
            .filter(|e| e.file_type().is_dir() && e.path().join("0=ocfl_object_1.1").is_file())
            .filter_map(|e| Some(e.path().strip_prefix(&self.root).ok()?.to_string_lossy().into_owned()))
            .collect())
    }
}

impl RootWrites for LocalRoot {
    fn stages(&self) -> bool {
        true
    }

    fn create_from(&self, rel: &str, reader: &mut (dyn Read + Send), origin: &Path) -> Result<String> {
        let to = self.path(rel);
        std::fs::create_dir_all(fsx::parent_dir(&to)).with_path("create", fsx::parent_dir(&to))?;
        let mode = fsx::CopyMode { follow: false, sync: false, progress: &|_| {}, also: &[] };
        let digests = fsx::write_hashing(reader, origin, &to, None, mode).map_err(Error::from)?;
        Ok(digests.sha256().to_string())
    }

    fn create(&self, rel: &str, bytes: &[u8]) -> Result<()> {
        let to = self.path(rel);
        std::fs::create_dir_all(fsx::parent_dir(&to)).with_path("create", fsx::parent_dir(&to))?;
        fsx::write_new(&to, bytes)
    }

    fn replace(&self, rel: &str, bytes: &[u8]) -> Result<()> {
        let to = self.path(rel);
        fsx::create_dir_all_durable(fsx::parent_dir(&to))?;
        fsx::atomic_write(&to, bytes)
    }

    fn replace_unsynced(&self, rel: &str, bytes: &[u8]) -> Result<()> {
        let to = self.path(rel);
        std::fs::create_dir_all(fsx::parent_dir(&to)).with_path("create", fsx::parent_dir(&to))?;
        let name = to.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let temp = fsx::parent_dir(&to).join(format!("{}{name}", fsx::TEMP_PREFIX));
        std::fs::write(&temp, bytes).with_path("write", &temp)?;
        std::fs::rename(&temp, &to).with_path("rename", &temp)
    }

    fn remove(&self, rel: &str) -> Result<()> {
        let path = self.path(rel);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io("remove", &path, e)),
            _ => Ok(()),
        }
    }

    fn remove_tree(&self, rel: &str) -> Result<()> {
        fsx::remove_tree(&self.path(rel))
    }

    fn rename_dir(&self, from: &str, to: &str) -> Result<()> {
        let (from, to) = (self.path(from), self.path(to));
        std::fs::create_dir_all(fsx::parent_dir(&to)).with_path("create", fsx::parent_dir(&to))?;
        fsx::rename_noreplace(&from, &to).map_err(|e| Error::io("rename into the object", &to, e))
    }

    fn sync(&self) -> Result<()> {
        fsx::syncfs(&self.root)
    }

    fn lock(&self) -> Result<Box<dyn std::any::Any + Send>> {
        // A lock on the root folder itself: a lock file would be a stray file to OCFL.
        let lock = std::fs::File::open(&self.root).with_path("open", &self.root)?;
        lock.lock().with_path("lock", &self.root)?;
        Ok(Box::new(lock))
    }

    fn prune_empty_dirs(&self, dir: &str) -> Result<()> {
        prune_empty(&self.path(dir))
    }

    fn clear_unfinished_root(&self, ours: &Unfinished) -> Result<bool> {
        if !self.holds_only(ours) {
            return Ok(false);
        }
        for entry in walkdir::WalkDir::new(&self.root).min_depth(1).into_iter().flatten() {
            if entry.file_name().to_string_lossy().starts_with(fsx::TEMP_PREFIX) {
                std::fs::remove_file(entry.path()).with_path("remove", entry.path())?;
            }
        }
        Ok(true)
    }

    fn clear_object_leftovers(&self, object: &str) -> Result<()> {
        for entry in std::fs::read_dir(self.path(object)).into_iter().flatten().flatten() {
            if entry.file_name().to_string_lossy().starts_with(fsx::TEMP_PREFIX) {
                std::fs::remove_file(entry.path()).with_path("remove", entry.path())?;
            }
        }
        Ok(())
    }
}

impl LocalRoot {
    /// Whether every entry under the root is one of ours (no link, no
    /// other folder): see `RootWrites::clear_unfinished_root`.
    fn holds_only(&self, ours: &Unfinished) -> bool {
        if std::fs::symlink_metadata(&self.root).is_err() {
            return true;
        }
        let ours_or_temp = |rel: &str, is_dir: bool| match is_dir {
            true => ours.files.iter().any(|f| f.starts_with(&format!("{rel}/"))) || ours.holds(&format!("{rel}/")),
            false => ours.holds(rel) || rel.rsplit('/').next().is_some_and(|n| n.starts_with(fsx::TEMP_PREFIX)),
        };
        walkdir::WalkDir::new(&self.root).min_depth(1).into_iter().all(|entry| {
            entry.is_ok_and(|e| {
                let rel = e.path().strip_prefix(&self.root).unwrap_or(e.path()).to_string_lossy().into_owned();
                !e.path_is_symlink() && ours_or_temp(&rel, e.file_type().is_dir())
            })
        })
    }
}

/// `N` of a version folder's name `vN` (no zero padding, as ibi writes).
pub fn version_number(name: &str) -> Option<u32> {
    name.strip_prefix('v').filter(|n| !n.starts_with('0')).and_then(|n| n.parse().ok())
}

/// Removes the folders under `dir` (and `dir`) that hold nothing.
fn prune_empty(dir: &Path) -> Result<()> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Ok(()) };
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            prune_empty(&entry.path())?;
        }
    }
    if std::fs::read_dir(dir).is_ok_and(|mut e| e.next().is_none()) {
        std::fs::remove_dir(dir).with_path("remove", dir)?;
    }
    Ok(())
}
