//! Copying one item between collections, the step under copy, migrate and
//! mirror: stage a copy in the destination's staging, hashing while reading,
//! and check it against the source's manifests with the digests taken on
//! arrival, so the check runs end to end. Placing and removing belong to the
//! store (`store::local::place`). Symlinks are never followed.

use std::collections::HashMap;
use std::io;
use std::path::Path;

use rayon::prelude::*;
use walkdir::WalkDir;

use crate::bag;
use crate::digest::{Algorithm, Digests};
use crate::error::{Error, IoContext, Result};
use crate::fsx::{copy_hashing, CopyError, CopyMode};
use crate::ops::report::Reporter;
use crate::ops::verify::check_identifiers;
use crate::problem::{Problem, ProblemKind};
use crate::store::local::Staged;
use crate::store::local::{ibip_in, Collection, Item, StagingDir};

/// How many items are staged, then made durable and placed, together.
pub const BATCH: usize = 64;

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
    let mut staged = Staged::new(staging, item.name.clone(), ibip, bytes);
    staged.replace = replace;
    Ok(Ok(staged))
}

/// Whether two copies of an item are equal: their identity digests (tagmanifest sha256).
pub fn same_identity(a: &Item, b: &Item) -> Result<bool> {
    Ok(a.identity_digest()? == b.identity_digest()?)
}
