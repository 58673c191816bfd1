//! Copying one item between collections, the step under copy, migrate and
//! mirror: stage a copy in the destination store, hashing while it is written,
//! and check it against the source's manifests with the digests taken on
//! arrival, so the check runs end to end. Both ends are reached only through
//! the `Store` seam; placing and removing belong to the stores. Links are never
//! followed.

use std::collections::HashMap;
use std::io;
use std::path::PathBuf;

use rayon::prelude::*;

use crate::bag::{self, files::FileKind, files::TreeEntry};
use crate::digest::{Algorithm, Digests};
use crate::error::{Error, Result};
use crate::fsx::CopyError;
use crate::id::RepositoryName;
use crate::ops::report::Reporter;
use crate::problem::{Problem, ProblemKind};
use crate::store::log::Action;
use crate::store::{ibip_in, identity_digest, FileSource, ItemRecord, Placed, Placement, Staging, Store, Writer};

pub use crate::store::BATCH;

/// A copy that failed because the source item is damaged: what was wrong.
pub type Corrupt = Vec<Problem>;

/// Digests of each copied file, by path relative to the item.
type CopiedDigests = HashMap<String, Digests>;

/// A verified copy waiting in a store's staging, with what placing it needs; it
/// is discarded when dropped unless it was placed.
pub struct StagedItem<'a> {
    pub staging: Staging<'a>,
    pub placement: Placement,
    pub bytes: u64,
}

impl StagedItem<'_> {
    pub fn name(&self) -> &RepositoryName {
        &self.placement.name
    }
}

/// Places staged items in one batch; returns each name with `Err(why)` when its
/// place was refused. The staged items are dropped after: placed ones are gone
/// from staging, refused ones are discarded.
pub fn place_staged(writer: &dyn Writer, staged: Vec<StagedItem>) -> Result<Placed> {
    if staged.is_empty() {
        return Ok(Vec::new());
    }
    let batch: Vec<Placement> = staged.iter().map(|s| s.placement.clone()).collect();
    writer.place(&batch)
}

/// Lists an item's folders and regular files (relative paths); anything else, and
/// anything that cannot be listed, is a problem of the item, never an error of the run.
fn list_tree(src: &dyn Store, name: &RepositoryName, label: &str) -> (Vec<String>, ItemFiles, Vec<Problem>) {
    let (mut dirs, mut files, mut problems) = (Vec::new(), ItemFiles::default(), Vec::new());
    let bag = src.item_files(name);
    if !matches!(bag.root_kind(), Ok(FileKind::Dir)) {
        let detail = "the item is not a folder (a symlink is never followed)";
        problems.push(Problem::new(label, None, ProblemKind::SpecialFile, detail));
        return (dirs, files, problems);
    }
    for entry in bag.entries() {
        match entry {
            Err(e) => problems.push(Problem::new(label, e.rel.as_deref(), ProblemKind::Unreadable, e.why)),
            Ok(TreeEntry { rel: Err(lossy), .. }) => {
                problems.push(Problem::new(label, Some(&lossy), ProblemKind::Extra, "file name is not UTF-8"))
            }
            Ok(TreeEntry { rel: Ok(rel), kind: FileKind::Dir }) => dirs.push(rel),
            Ok(TreeEntry { rel: Ok(rel), kind: FileKind::File { size } }) => {
                files.bytes += size;
                files.rels.push(rel);
            }
            Ok(TreeEntry { rel: Ok(rel), kind: FileKind::Other(what) }) => {
                let detail = format!("{what} (never followed)");
                problems.push(Problem::new(label, Some(&rel), ProblemKind::SpecialFile, detail))
            }
        }
    }
    (dirs, files, problems)
}

/// An item's files, and their bytes as its listing gave them.
#[derive(Default)]
struct ItemFiles {
    rels: Vec<String>,
    bytes: u64,
}

/// Items smaller than this have their files copied one after another by the
/// thread that stages the item (other items are staged beside it); larger ones
/// copy their files in parallel. Splitting a small item's few files into tasks
/// of their own cost more in rayon's wake-ups and spins than it saved.
const PARALLEL_ITEM_BYTES: u64 = 8 << 20;

/// The bytes of all an item's files (payload and tag files): what a transfer
/// counts for an item it carries, whether by copy or by rename, and what a dry
/// run counts for one it would carry.
pub fn item_bytes(store: &dyn Store, name: &RepositoryName) -> u64 {
    let bag = store.item_files(name);
    let sizes = bag.entries().into_iter().filter_map(|entry| match entry {
        Ok(TreeEntry { kind: FileKind::File { size }, .. }) => Some(size),
        _ => None,
    });
    sizes.sum()
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

/// Copies one file from `src`'s item into the staged item, hashing as it goes.
fn copy_one(
    (src, name): (&dyn Store, &RepositoryName),
    staging: &Staging,
    rel: &str,
    also: &[Algorithm],
    reporter: &dyn Reporter,
) -> std::result::Result<Digests, CopyError> {
    let origin = PathBuf::from(format!("{}/{name}/{rel}", src.location()));
    let (mut reader, mtime) = src.open(name, rel).map_err(|e| CopyError::Source(Error::io("open", &origin, e)))?;
    let progress = |n: u64| reporter.bytes(n);
    let source = FileSource { reader: &mut reader, origin: &origin, mtime, also, progress: &progress };
    staging.writer.stage_file(staging.id, rel, source)
}

/// Copies every file (in parallel for a large item), hashing as it writes. A source
/// that cannot be read is a problem of the item; a destination that cannot be
/// written is an error.
fn copy_files(
    from: (&dyn Store, &RepositoryName),
    staging: &Staging,
    files: &ItemFiles,
    reporter: &dyn Reporter,
) -> Result<(CopiedDigests, Corrupt)> {
    let also = algorithms_named(&files.rels);
    let copy = |rel: &String| copy_one(from, staging, rel, &also, reporter);
    let copied: Vec<std::result::Result<Digests, CopyError>> = match files.bytes < PARALLEL_ITEM_BYTES {
        true => files.rels.iter().map(copy).collect(),
        false => files.rels.par_iter().map(copy).collect(),
    };
    let results = files.rels.iter().zip(copied);
    let mut digests = HashMap::new();
    let mut problems = Vec::new();
    for (rel, result) in results {
        match result {
            Ok(done) => {
                digests.insert(rel.clone(), done);
            }
            Err(CopyError::Source(e)) => {
                let why = match e {
                    Error::Io { source, .. } => source.to_string(),
                    other => other.to_string(),
                };
                problems.push(Problem::new(&from.1.to_string(), Some(rel), ProblemKind::Unreadable, why))
            }
            Err(CopyError::Destination(e)) => return Err(at_the_items_place(e, staging, from.1, rel)),
        }
    }
    Ok((digests, problems))
}

/// A failure to write a staged file, told at the path the file would have in the
/// collection (`DST/NAME/REL`) rather than at the staging path nobody knows.
fn at_the_items_place(error: Error, staging: &Staging, name: &RepositoryName, rel: &str) -> Error {
    match error {
        Error::Io { action, source, .. } => Error::Io {
            action,
            path: PathBuf::from(format!("{}/{name}/{rel}", staging.writer.store().location())),
            source,
        },
        other => other,
    }
}

/// Copies `src`'s item `name` into `staging` (over an item there when `replace`) and
/// checks the copy against the source's manifests, using the digests taken while
/// copying. Nothing is durable yet: placing the batch makes it so. `Ok(Err(problems))`
/// means the source is damaged: nothing is placed.
pub fn stage_copy<'d>(
    (src, name): (&dyn Store, &RepositoryName),
    (staging, replace): (Staging<'d>, bool),
    reporter: &dyn Reporter,
) -> Result<Result<StagedItem<'d>, Corrupt>> {
    let label = name.to_string();
    let (dirs, files, mut problems) = list_tree(src, name, &label);
    if !problems.is_empty() {
        return Ok(Err(problems));
    }
    let dst = staging.writer;
    for dir in &dirs {
        dst.stage_dir(staging.id, dir)?;
    }
    let (digests, unreadable) = copy_files((src, name), &staging, &files, reporter)?;
    problems.extend(unreadable);
    let lookup = |rel: &str, _: &[Algorithm]| {
        digests.get(rel).cloned().ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "not copied"))
    };
    let check = bag::verify_bag_using(dst.staged_files(staging.id).as_ref(), &label, &lookup);
    problems.extend(check.problems);
    if let Some(info) = &check.info {
        problems.extend(crate::store::bag_identifier_problems(name, info));
    }
    if !problems.is_empty() {
        return Ok(Err(problems));
    }
    let ibip = check.info.as_ref().and_then(ibip_in);
    let bytes = digests.values().map(|d| d.size).sum();
    let record = match (&check.info, digests.get(bag::TAGMANIFEST)) {
        (Some(info), Some(tags)) => ItemRecord::from_info(name, info, tags.sha256()).ok(),
        _ => None,
    };
    let placement =
        Placement { stage: staging.id, name: name.clone(), ibip, replace, record, action: Action::default() };
    Ok(Ok(StagedItem { staging, placement, bytes }))
}

/// Whether two copies of an item are equal: their identity digests (tagmanifest sha256).
pub fn same_identity(a: (&dyn Store, &RepositoryName), b: (&dyn Store, &RepositoryName)) -> Result<bool> {
    Ok(identity_digest(a.0, a.1)? == identity_digest(b.0, b.1)?)
}
