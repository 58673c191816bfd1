//! One item, read: `show` gathers its identifiers, bag-info, status and version
//! history with its file count and size; `export` writes any of its versions out
//! as a standalone bag (the current one without `ibi-versions/`, an earlier one
//! from `ibi-versions/<N>/`), built beside the target, verified, then renamed
//! into place, so a killed export never leaves a half bag under the target's name.

use std::path::{Path, PathBuf};

use crate::bag::files::{FileKind, TreeEntry};
use crate::bag::history::{History, VERSIONS_DIR};
use crate::bag::{self, BagInfo, DirBag};
use crate::error::{Error, IoContext, Result};
use crate::fsx::{self, CopyMode};
use crate::id::RepositoryName;
use crate::store::{item_info, resolve, ItemRecord, Status, Store};

/// What `show` tells about an item.
#[derive(Debug, Clone)]
pub struct ItemView {
    pub record: ItemRecord,
    pub info: BagInfo,
    /// Payload files of the current version (path in the bag, size), in path order.
    pub payload: Vec<(String, u64)>,
    /// Their count and bytes.
    pub files: u64,
    pub bytes: u64,
}

impl ItemView {
    pub fn status(&self) -> Status {
        self.record.status
    }
}

/// Gathers what `show` prints of the item `text` names (a name or an IBIp).
pub fn show(store: &dyn Store, text: &str) -> Result<ItemView> {
    let name = resolve(store, text)?;
    let info = item_info(store, &name)?;
    let record = ItemRecord::from_bag(store.item_files(&name).as_ref(), &name)?;
    let mut payload: Vec<(String, u64)> = Vec::new();
    for entry in store.item_files(&name).entries().into_iter().flatten() {
        if let TreeEntry { rel: Ok(rel), kind: FileKind::File { size } } = entry {
            if rel.starts_with("data/") {
                payload.push((rel, size));
            }
        }
    }
    payload.sort();
    let (files, bytes) = (payload.len() as u64, payload.iter().map(|(_, size)| size).sum());
    Ok(ItemView { record, info, payload, files, bytes })
}

/// Refuses a withdrawn item where one in service is needed (`resolve`).
pub fn in_service(store: &dyn Store, name: &RepositoryName) -> Result<()> {
    let info = item_info(store, name)?;
    match History::of(&info).ok().and_then(|h| h.withdrawn) {
        Some(w) => Err(Error::Withdrawn { name: name.to_string(), date: w.date, reason: w.reason }),
        None => Ok(()),
    }
}

/// A version written out by `export`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exported {
    pub name: RepositoryName,
    pub version: u32,
    pub path: PathBuf,
    pub files: u64,
}

/// The folder inside the item that holds `version` ("" for the current one).
fn version_prefix(name: &RepositoryName, record: &ItemRecord, version: Option<u32>) -> Result<(u32, String)> {
    let current = record.current().number;
    match version {
        None => Ok((current, String::new())),
        Some(n) if n == current => Ok((n, String::new())),
        Some(n) if n >= 1 && n < current => Ok((n, format!("{}/", History::version_dir(n)))),
        Some(n) => Err(Error::Invalid {
            what: "version".into(),
            problem: format!("{name} has versions 1 to {current}, not {n}"),
        }),
    }
}

/// Writes version `version` (the current one when `None`) of the item `text` names
/// as a standalone bag at `target`, which must not exist.
pub fn export(store: &dyn Store, text: &str, target: &Path, version: Option<u32>) -> Result<Exported> {
    let name = resolve(store, text)?;
    let record = ItemRecord::from_bag(store.item_files(&name).as_ref(), &name)?;
    let (number, prefix) = version_prefix(&name, &record, version)?;
    if std::fs::symlink_metadata(target).is_ok() {
        // The request names a place that is taken: invalid input (exit 2), as an
        // unknown name is; nothing in the collection is wrong.
        let problem =
            format!("{} already exists; export never writes over anything: name a new folder", target.display());
        return Err(Error::Invalid { what: "export target".into(), problem });
    }
    let parent = fsx::parent_dir(target);
    let building = tempfile::Builder::new().prefix(".ibi-export-").tempdir_in(parent).with_path("create in", parent)?;
    let mut files = 0;
    for entry in store.item_files(&name).entries() {
        let entry = entry.map_err(|e| Error::Data { what: format!("item {name}"), problem: e.why })?;
        let TreeEntry { rel: Ok(rel), kind } = entry else { continue };
        let Some(inner) = rel.strip_prefix(&prefix) else { continue };
        if inner.is_empty() || inner == VERSIONS_DIR || inner.starts_with(&format!("{VERSIONS_DIR}/")) {
            continue;
        }
        let to = building.path().join(inner);
        match kind {
            FileKind::Dir => std::fs::create_dir(&to).with_path("create", &to)?,
            FileKind::File { .. } => {
                copy_out(store, &name, &rel, &to)?;
                files += 1;
            }
            FileKind::Other(what) => {
                return Err(Error::Data { what: format!("item {name}"), problem: format!("{rel} is a {what}") })
            }
        }
    }
    if files == 0 {
        let problem = format!("version {number} holds no files here (its bytes were purged at withdrawal)");
        return Err(Error::Data { what: format!("item {name}"), problem });
    }
    finish_export(building, target, &name)?;
    Ok(Exported { name, version: number, path: target.to_path_buf(), files })
}

fn copy_out(store: &dyn Store, name: &RepositoryName, rel: &str, to: &Path) -> Result<()> {
    let origin = PathBuf::from(format!("{}/{name}/{rel}", store.location()));
    let (mut reader, mtime) = store.open(name, rel).map_err(|e| Error::io("open", &origin, e))?;
    let mode = CopyMode { follow: false, sync: false, progress: &|_| {}, also: &[] };
    fsx::write_hashing(&mut reader, &origin, to, mtime, mode).map(drop).map_err(Error::from)
}

/// Verifies the bag built beside the target, makes it durable, and renames it into place.
fn finish_export(building: tempfile::TempDir, target: &Path, name: &RepositoryName) -> Result<()> {
    let check = bag::verify_standalone(&DirBag::new(building.path()), &name.to_string());
    if let Some(problem) = check.problems.first() {
        let problem = format!("the exported bag did not verify, nothing written: {problem}");
        return Err(Error::Data { what: format!("item {name}"), problem });
    }
    fsx::syncfs(building.path())?;
    let built = building.keep();
    fsx::rename_noreplace(&built, target).map_err(|e| {
        let _ = fsx::remove_tree(&built);
        Error::io("rename the export to", target, e)
    })?;
    fsx::fsync_dir(fsx::parent_dir(target))
}
