//! Moving items between collections, the one mechanism under copy, migrate and
//! mirror: stage a copy in the destination's `.ibi/staging/`, hashing while
//! reading and checking it against the source's manifests; place it (rename,
//! never over anything) or swap it with the item it replaces
//! (`RENAME_EXCHANGE`, so the name is never absent); remove items through the
//! trash. Every step that leaves an alias to fix is journalled first, so an
//! interrupted run's successor completes it. Symlinks are never followed.

use std::collections::HashMap;
use std::io;
use std::path::Path;

use rayon::prelude::*;
use walkdir::WalkDir;

use crate::bag;
use crate::collection::{alias, ibip_in, Collection, Intent, Item, StagingDir};
use crate::error::{Error, IoContext, Result};
use crate::fsx::{self, copy_hashing, fsync_dir, rename_exchange, rename_noreplace};
use crate::id::{Ibip, RepositoryName};
use crate::ops::report::Reporter;
use crate::ops::verify::check_identifiers;
use crate::problem::{Problem, ProblemKind};

/// A verified copy waiting in the destination's staging.
pub struct Staged {
    dir: StagingDir,
    pub ibip: Option<Ibip>,
    pub bytes: u64,
}

/// A copy that failed because the source item is damaged: what was wrong.
pub type Corrupt = Vec<Problem>;

/// Digest and size of each copied file, by path relative to the item.
type Digests = HashMap<String, (String, u64)>;

/// Lists an item's folders and regular files (relative paths); anything else is a problem.
fn list_tree(item: &Item, label: &str) -> Result<(Vec<String>, Vec<String>, Vec<Problem>)> {
    let (mut dirs, mut files, mut problems) = (Vec::new(), Vec::new(), Vec::new());
    for entry in WalkDir::new(&item.path).follow_links(false).min_depth(1).sort_by_file_name() {
        let entry = entry.map_err(|e| {
            let path = e.path().unwrap_or(&item.path).to_path_buf();
            Error::io("read", path, e.into_io_error().unwrap_or_else(|| io::Error::other("walk failed")))
        })?;
        let rel = entry.path().strip_prefix(&item.path).unwrap_or(entry.path());
        let Some(rel) = rel.to_str().map(str::to_string) else {
            problems.push(Problem::new(
                label,
                Some(&rel.to_string_lossy()),
                ProblemKind::Extra,
                "file name is not UTF-8",
            ));
            continue;
        };
        match entry.file_type() {
            t if t.is_dir() => dirs.push(rel),
            t if t.is_file() => files.push(rel),
            _ => problems.push(Problem::new(
                label,
                Some(&rel),
                ProblemKind::SpecialFile,
                "symlink or special file (never followed)",
            )),
        }
    }
    Ok((dirs, files, problems))
}

/// Copies every file in parallel, hashing as it reads. A source that cannot be read
/// is a problem of the item; a destination that cannot be written is an error.
fn copy_files(
    item: &Item,
    to: &Path,
    files: &[String],
    label: &str,
    reporter: &dyn Reporter,
) -> Result<(Digests, Corrupt)> {
    let results: Vec<(String, Result<(String, u64)>)> = files
        .par_iter()
        .map(|rel| {
            let result = copy_hashing(&item.path.join(rel), &to.join(rel), false);
            if let Ok((_, n)) = &result {
                reporter.bytes(*n);
            }
            (rel.clone(), result)
        })
        .collect();
    let mut digests = HashMap::new();
    let mut problems = Vec::new();
    for (rel, result) in results {
        match result {
            Ok(done) => {
                digests.insert(rel, done);
            }
            Err(Error::Io { action: "open" | "read", source, .. }) => {
                problems.push(Problem::new(label, Some(&rel), ProblemKind::Unreadable, source.to_string()))
            }
            Err(e) => return Err(e),
        }
    }
    Ok((digests, problems))
}

/// Copies `item` into `dst`'s staging and checks the copy against the source's
/// manifests, using the digests taken while copying. `Ok(Err(problems))` means the
/// source is damaged: nothing is placed.
pub fn stage_copy(item: &Item, dst: &Collection, reporter: &dyn Reporter) -> Result<Result<Staged, Corrupt>> {
    let label = item.name.to_string();
    let staging = StagingDir::new(dst)?;
    let (dirs, files, mut problems) = list_tree(item, &label)?;
    for dir in &dirs {
        let path = staging.path.join(dir);
        std::fs::create_dir(&path).with_path("create", &path)?;
    }
    let (digests, unreadable) = copy_files(item, &staging.path, &files, &label, reporter)?;
    problems.extend(unreadable);
    for dir in dirs.iter().rev() {
        fsync_dir(&staging.path.join(dir))?;
    }
    fsync_dir(&staging.path)?;
    let lookup = |_: &Path, rel: &str| {
        digests.get(rel).cloned().ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "not copied"))
    };
    let check = bag::verify_bag_using(&staging.path, &label, &lookup);
    problems.extend(check.problems);
    if let Some(info) = &check.info {
        let as_placed = Item { name: item.name.clone(), path: staging.path.clone() };
        let identity = check_identifiers(dst, &as_placed, info);
        problems.extend(identity.into_iter().filter(|p| p.kind != ProblemKind::BrokenAlias));
    }
    if !problems.is_empty() {
        return Ok(Err(problems));
    }
    let ibip = check.info.as_ref().and_then(ibip_in);
    Ok(Ok(Staged { dir: staging, ibip, bytes: digests.values().map(|(_, n)| n).sum() }))
}

/// Puts a staged copy at `name`'s place. With `replace`, it is swapped atomically
/// with whatever is there (an older item, or a planted symlink, which is removed
/// and never followed); without, an occupied place is an error.
pub fn place(dst: &Collection, mut staged: Staged, name: &RepositoryName, replace: bool) -> Result<()> {
    let record = dst.journal(Intent::Place, name, staged.ibip.as_ref())?;
    let parent = dst.make_parents(name)?;
    let dest = dst.layout.item(name);
    let result = if replace && std::fs::symlink_metadata(&dest).is_ok() {
        rename_exchange(&staged.dir.path, &dest)
    } else {
        rename_noreplace(&staged.dir.path, &dest).map(|()| staged.dir.placed = true)
    };
    match result {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists || e.raw_os_error() == Some(libc::ENOTEMPTY) => {
            return Err(Error::Data {
                what: format!("item {name}"),
                problem: format!("{} already exists; refusing to overwrite it", dest.display()),
            })
        }
        Err(e) => return Err(Error::io("rename staged item to", &dest, e)),
    }
    fsync_dir(&parent)?;
    fsync_dir(&dst.layout.staging())?;
    if let Some(ibip) = &staged.ibip {
        alias::create(&dst.layout, ibip, name)?;
    }
    drop(staged);
    dst.end_journal(&record)
}

/// Removes an item: journal, rename into the trash, fsync, drop its alias, delete.
pub fn remove(collection: &Collection, item: &Item) -> Result<()> {
    let ibip = item.ibip().ok().flatten();
    let record = collection.journal(Intent::Remove, &item.name, ibip.as_ref())?;
    let trash = collection.layout.trash();
    fsx::create_dir_all_durable(&trash)?;
    let holder = tempfile::Builder::new().prefix("item-").tempdir_in(&trash).with_path("create in", &trash)?.keep();
    let target = holder.join("item");
    std::fs::rename(&item.path, &target).with_path("move to trash", &item.path)?;
    fsync_dir(fsx::parent_dir(&item.path))?;
    fsync_dir(&holder)?;
    if let Some(ibip) = &ibip {
        alias::remove(&collection.layout, ibip, &item.name)?;
    }
    fsx::remove_tree(&holder)?;
    fsync_dir(&trash)?;
    collection.end_journal(&record)
}

/// Whether two copies of an item are equal: their identity digests (tagmanifest sha256).
pub fn same_identity(a: &Item, b: &Item) -> Result<bool> {
    Ok(a.identity_digest()? == b.identity_digest()?)
}
