//! Moving items between collections, the one mechanism under copy, migrate and
//! mirror: stage copies in the destination's `.ibi/staging/`, hashing while
//! reading and checking them against the source's manifests; place a batch of
//! them (rename, never over anything) or swap each with the item it replaces
//! (`RENAME_EXCHANGE`, so the name is never absent); remove items through the
//! trash. A batch is made durable with one `syncfs` before anything is renamed
//! and each touched directory is fsynced once after, instead of an fsync per
//! file. Every step that leaves an alias to fix is journalled first, so an
//! interrupted run's successor completes it. Symlinks are never followed.

use std::collections::{BTreeSet, HashMap};
use std::io;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use walkdir::WalkDir;

use crate::bag;
use crate::collection::{alias, ibip_in, Collection, Intent, Item, StagingDir};
use crate::digest::{Algorithm, Digests};
use crate::error::{Error, IoContext, Result};
use crate::fsx::{self, copy_hashing, fsync_dir, rename_exchange, rename_noreplace, CopyError, CopyMode};
use crate::id::{Ibip, RepositoryName};
use crate::ops::report::Reporter;
use crate::ops::verify::check_identifiers;
use crate::problem::{Problem, ProblemKind};

/// How many items are staged, then made durable and placed, together.
pub const BATCH: usize = 64;

/// A verified copy waiting in the destination's staging.
pub struct Staged {
    dir: StagingDir,
    pub name: RepositoryName,
    pub ibip: Option<Ibip>,
    pub bytes: u64,
    /// Swap it with whatever holds the name in DST.
    pub replace: bool,
}

impl Staged {
    /// A complete bag built in `dir`, to be placed as `name`.
    pub fn new(dir: StagingDir, name: RepositoryName, ibip: Option<Ibip>, bytes: u64) -> Self {
        Staged { dir, name, ibip, bytes, replace: false }
    }
}

/// A copy that failed because the source item is damaged: what was wrong.
pub type Corrupt = Vec<Problem>;

/// Digests of each copied file, by path relative to the item.
type CopiedDigests = HashMap<String, Digests>;

/// Lists an item's folders and regular files (relative paths); anything else, and
/// anything that cannot be walked, is a problem of the item, never an error of the run.
fn list_tree(item: &Item, label: &str) -> (Vec<String>, Vec<String>, Vec<Problem>) {
    let (mut dirs, mut files, mut problems) = (Vec::new(), Vec::new(), Vec::new());
    if !std::fs::symlink_metadata(&item.path).is_ok_and(|m| m.is_dir()) {
        let detail = "the item is not a folder (a symlink is never followed)";
        problems.push(Problem::new(label, None, ProblemKind::SpecialFile, detail));
        return (dirs, files, problems);
    }
    for entry in WalkDir::new(&item.path).follow_links(false).follow_root_links(false).min_depth(1).sort_by_file_name()
    {
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) => {
                let rel = e.path().and_then(|p| p.strip_prefix(&item.path).ok()).map(|p| p.display().to_string());
                problems.push(Problem::new(label, rel.as_deref(), ProblemKind::Unreadable, e.to_string()));
                continue;
            }
        };
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
    (dirs, files, problems)
}

/// The algorithms of the manifests and tagmanifests among an item's files.
fn algorithms_named(files: &[String]) -> Vec<Algorithm> {
    let mut algorithms: Vec<Algorithm> = files
        .iter()
        .filter(|f| !f.contains('/'))
        .filter_map(|f| match bag::TopLevel::of(f) {
            bag::TopLevel::Manifest(a) | bag::TopLevel::TagManifest(a) => Some(a),
            _ => None,
        })
        .collect();
    algorithms.sort();
    algorithms.dedup();
    algorithms
}

/// Copies every file in parallel, hashing as it reads. A source that cannot be read
/// is a problem of the item; a destination that cannot be written is an error.
fn copy_files(
    item: &Item,
    to: &Path,
    files: &[String],
    label: &str,
    reporter: &dyn Reporter,
) -> Result<(CopiedDigests, Corrupt)> {
    let also = algorithms_named(files);
    let results: Vec<(String, std::result::Result<Digests, CopyError>)> = files
        .par_iter()
        .map(|rel| {
            let progress = |n: u64| reporter.bytes(n);
            let mode = CopyMode { follow: false, sync: false, progress: &progress, also: &also };
            let result = copy_hashing(&item.path.join(rel), &to.join(rel), mode).map(|c| c.digests);
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
            Err(CopyError::Source(e)) => {
                let why = match e {
                    Error::Io { source, .. } => source.to_string(),
                    other => other.to_string(),
                };
                problems.push(Problem::new(label, Some(&rel), ProblemKind::Unreadable, why))
            }
            Err(CopyError::Destination(e)) => return Err(e),
        }
    }
    Ok((digests, problems))
}

/// Copies `item` into `dst`'s staging and checks the copy against the source's
/// manifests, using the digests taken while copying. Nothing is fsynced yet:
/// `place_all` makes the batch durable. `Ok(Err(problems))` means the source is
/// damaged: nothing is placed.
pub fn stage_copy(
    item: &Item,
    dst: &Collection,
    replace: bool,
    reporter: &dyn Reporter,
) -> Result<Result<Staged, Corrupt>> {
    let label = item.name.to_string();
    let staging = StagingDir::new(dst)?;
    let (dirs, files, mut problems) = list_tree(item, &label);
    if !problems.is_empty() {
        return Ok(Err(problems));
    }
    for dir in &dirs {
        let path = staging.path.join(dir);
        std::fs::create_dir(&path).with_path("create", &path)?;
    }
    let (digests, unreadable) = copy_files(item, &staging.path, &files, &label, reporter)?;
    problems.extend(unreadable);
    let lookup = |rel: &str, _: &[Algorithm]| {
        digests.get(rel).cloned().ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "not copied"))
    };
    let check = bag::verify_bag_using(&bag::DirBag::new(&staging.path), &label, &lookup);
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
    let bytes = digests.values().map(|d| d.size).sum();
    Ok(Ok(Staged { dir: staging, name: item.name.clone(), ibip, bytes, replace }))
}

/// Renames one staged copy to its place; `Err` says why the place was refused.
fn rename_into_place(dst: &Collection, staged: &mut Staged) -> Result<std::result::Result<PathBuf, String>> {
    let parent = match dst.make_parents(&staged.name) {
        Ok(parent) => parent,
        Err(Error::Data { problem, .. }) => return Ok(Err(problem)),
        Err(e) => return Err(e),
    };
    let dest = dst.layout.item(&staged.name);
    let result = if staged.replace && std::fs::symlink_metadata(&dest).is_ok() {
        // The old item (or a planted symlink) ends up in staging and is removed with it.
        match rename_exchange(&staged.dir.path, &dest) {
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP)) => {
                replace_through_trash(dst, staged, &dest)
            }
            other => other,
        }
    } else {
        rename_noreplace(&staged.dir.path, &dest).map(|()| staged.dir.placed = true)
    };
    match result {
        Ok(()) => Ok(Ok(parent)),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists || e.raw_os_error() == Some(libc::ENOTEMPTY) => {
            Ok(Err(format!("{} already exists; refusing to overwrite it", dest.display())))
        }
        Err(e) => Err(Error::io("rename staged item to", &dest, e)),
    }
}

/// Replaces `dest` where the filesystem cannot exchange two names: the old item is
/// renamed into the trash, then the copy into its place. The name is absent for a
/// moment; a crash then loses only DST's old copy and the new one (the trash and
/// staging are cleared by recovery), and the rerun copies the item from SRC again.
fn replace_through_trash(dst: &Collection, staged: &mut Staged, dest: &Path) -> io::Result<()> {
    let trash = dst.layout.trash();
    let aside = tempfile::Builder::new().prefix("replaced-").tempdir_in(&trash)?.keep();
    std::fs::rename(dest, aside.join("item"))?;
    rename_noreplace(&staged.dir.path, dest)?;
    staged.dir.placed = true;
    let _ = fsx::remove_tree(&aside);
    Ok(())
}

/// Places a batch of staged copies: one `syncfs` makes them durable, one journal
/// record covers their aliases, then each is renamed into place (never over an
/// item unless it is a replacement) and every touched directory is fsynced once.
/// Returns, per copy, its name and `Err(reason)` when its place was refused.
pub fn place_all(
    dst: &Collection,
    mut staged: Vec<Staged>,
) -> Result<Vec<(RepositoryName, std::result::Result<(), String>)>> {
    if staged.is_empty() {
        return Ok(Vec::new());
    }
    fsx::syncfs(&dst.layout.staging())?;
    let entries: Vec<(&RepositoryName, Option<&Ibip>)> = staged.iter().map(|s| (&s.name, s.ibip.as_ref())).collect();
    let record = dst.journal_all(Intent::Place, &entries)?;
    let mut dirs = BTreeSet::new();
    let mut outcomes = Vec::with_capacity(staged.len());
    {
        // An interrupt waits for the renames, so it never removes a folder mid-rename.
        let _renaming = crate::collection::staging_guard();
        for copy in staged.iter_mut() {
            let outcome = rename_into_place(dst, copy)?.map(|parent| {
                dirs.insert(parent);
            });
            outcomes.push((copy.name.clone(), outcome));
        }
    }
    dirs.iter().try_for_each(|dir| fsync_dir(dir))?;
    fsync_dir(&dst.layout.staging())?;
    let mut alias_dirs = BTreeSet::new();
    for (copy, (_, outcome)) in staged.iter().zip(&outcomes) {
        if let (Some(ibip), Ok(())) = (&copy.ibip, outcome) {
            alias_dirs.extend(alias::create_unsynced(&dst.layout, ibip, &copy.name)?);
        }
    }
    alias_dirs.iter().try_for_each(|dir| fsync_dir(dir))?;
    drop(staged);
    dst.end_journal(&record)?;
    Ok(outcomes)
}

/// Removes items: one journal record, renames into the trash, fsyncs, aliases
/// dropped, then the trash emptied.
pub fn remove_all(collection: &Collection, items: &[Item]) -> Result<()> {
    if items.is_empty() {
        return Ok(());
    }
    let ibips: Vec<Option<Ibip>> = items.iter().map(|i| i.ibip().ok().flatten()).collect();
    let entries: Vec<(&RepositoryName, Option<&Ibip>)> =
        items.iter().zip(&ibips).map(|(i, b)| (&i.name, b.as_ref())).collect();
    let record = collection.journal_all(Intent::Remove, &entries)?;
    let trash = collection.layout.trash();
    fsx::create_dir_all_durable(&trash)?;
    let holder = tempfile::Builder::new().prefix("items-").tempdir_in(&trash).with_path("create in", &trash)?.keep();
    let mut dirs = BTreeSet::new();
    for (n, item) in items.iter().enumerate() {
        std::fs::rename(&item.path, holder.join(n.to_string())).with_path("move to trash", &item.path)?;
        dirs.insert(fsx::parent_dir(&item.path).to_path_buf());
    }
    dirs.insert(holder.clone());
    for (item, ibip) in items.iter().zip(&ibips) {
        if let Some(ibip) = ibip {
            dirs.extend(alias::remove_unsynced(&collection.layout, ibip, &item.name)?);
        }
    }
    dirs.iter().try_for_each(|dir| fsync_dir(dir))?;
    fsx::remove_tree(&holder)?;
    fsync_dir(&trash)?;
    collection.end_journal(&record)
}

/// Whether two collections live on one filesystem, so items can move by rename.
pub fn same_filesystem(a: &Collection, b: &Collection) -> Result<bool> {
    use std::os::unix::fs::MetadataExt;
    let dev = |c: &Collection| std::fs::metadata(c.root()).map(|m| m.dev()).with_path("inspect", c.root());
    Ok(dev(a)? == dev(b)?)
}

/// Moves verified items from `src` to `dst` on one filesystem by renaming them:
/// journal records on both sides first, then each rename (never over anything),
/// then each touched directory fsynced once, then the aliases on both sides.
/// Returns, per item, its name and `Err(reason)` when its place in DST was refused.
pub fn move_all(
    src: &Collection,
    dst: &Collection,
    items: &[Item],
) -> Result<Vec<(RepositoryName, std::result::Result<(), String>)>> {
    if items.is_empty() {
        return Ok(Vec::new());
    }
    let ibips: Vec<Option<Ibip>> = items.iter().map(|i| i.ibip().ok().flatten()).collect();
    let entries: Vec<(&RepositoryName, Option<&Ibip>)> =
        items.iter().zip(&ibips).map(|(i, b)| (&i.name, b.as_ref())).collect();
    let src_record = src.journal_all(Intent::Remove, &entries)?;
    let dst_record = dst.journal_all(Intent::Place, &entries)?;
    let mut dirs = BTreeSet::new();
    let mut outcomes = Vec::with_capacity(items.len());
    for item in items {
        let outcome = match dst.make_parents(&item.name) {
            Err(Error::Data { problem, .. }) => Err(problem),
            Err(e) => return Err(e),
            Ok(parent) => match rename_noreplace(&item.path, &dst.layout.item(&item.name)) {
                Ok(()) => {
                    dirs.insert(parent);
                    dirs.insert(fsx::parent_dir(&item.path).to_path_buf());
                    Ok(())
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists || e.raw_os_error() == Some(libc::ENOTEMPTY) => {
                    Err("DST already holds this name; refusing to overwrite it".to_string())
                }
                Err(e) => return Err(Error::io("rename item to", dst.layout.item(&item.name), e)),
            },
        };
        outcomes.push((item.name.clone(), outcome));
    }
    dirs.iter().try_for_each(|dir| fsync_dir(dir))?;
    let mut alias_dirs = BTreeSet::new();
    for ((name, outcome), ibip) in outcomes.iter().zip(&ibips) {
        if let (Ok(()), Some(ibip)) = (outcome, ibip) {
            alias_dirs.extend(alias::create_unsynced(&dst.layout, ibip, name)?);
            alias_dirs.extend(alias::remove_unsynced(&src.layout, ibip, name)?);
        }
    }
    alias_dirs.iter().try_for_each(|dir| fsync_dir(dir))?;
    dst.end_journal(&dst_record)?;
    src.end_journal(&src_record)?;
    Ok(outcomes)
}

/// Whether two copies of an item are equal: their identity digests (tagmanifest sha256).
pub fn same_identity(a: &Item, b: &Item) -> Result<bool> {
    Ok(a.identity_digest()? == b.identity_digest()?)
}
