//! Deposit (DESIGN §5): build the bag in `.ibi/staging/`, copying and hashing
//! in one read pass; mint the name under the minter lock; write the tag files;
//! fsync; rename into place (never over an existing item); create the alias.
//! `--move` removes the originals only after all of that is durable. A failure
//! at any step removes the staging folder; a SIGKILL leaves it for the next
//! writer, which clears it and finishes any journalled alias.

use std::path::{Path, PathBuf};

use rayon::prelude::*;

use crate::bag::{self, BagInfo, ManifestEntry, Oxum};
use crate::collection::{Collection, LockWait, StagingDir};
use crate::error::{Error, IoContext, Result};
use crate::fsx::{self, copy_hashing, fsync_dir, CopyMode};
use crate::id::minter::Clock;
use crate::id::Minted;
use crate::ops::report::Reporter;
use crate::ops::source::{plan_bag, plan_paths, SourcePlan};
use crate::ops::transfer::{place_all, Staged, BATCH};

#[derive(Debug, Clone, Default)]
pub struct DepositOptions {
    /// One item per path instead of one item for all.
    pub each: bool,
    /// Each path is an existing BagIt bag, deposited as is.
    pub bag: bool,
    /// Remove the originals once the item is durable.
    pub move_sources: bool,
    pub follow_symlinks: bool,
    /// Extra bag-info fields.
    pub meta: Vec<(String, String)>,
}

/// Deposits `paths` as one item (or one per path with `each`), holding the write lock.
/// Items go in batches of `BATCH`: staged in parallel, minted together, then
/// made durable and placed together.
pub fn deposit(
    collection: &Collection,
    paths: &[PathBuf],
    options: &DepositOptions,
    clock: &dyn Clock,
    reporter: &dyn Reporter,
) -> Result<Vec<Minted>> {
    let _lock = collection.lock_writes(LockWait::Forever)?;
    collection.recover()?;
    let groups: Vec<Vec<PathBuf>> = if options.each || options.bag {
        paths.iter().map(|p| vec![p.clone()]).collect()
    } else {
        vec![paths.to_vec()]
    };
    reporter.begin("deposit", Some(groups.len() as u64), None);
    let mut minted = Vec::with_capacity(groups.len());
    for batch in groups.chunks(BATCH) {
        let plans: Vec<SourcePlan> = batch
            .iter()
            .map(|group| if options.bag { plan_bag(&group[0]) } else { plan_paths(group, options.follow_symlinks) })
            .collect::<Result<_>>()?;
        for item in deposit_batch(collection, &plans, options, clock, reporter, None)? {
            reporter.item(&item.name.to_string(), "deposited");
            minted.push(item);
        }
    }
    reporter.end();
    Ok(minted)
}

/// Copies the payload into `staging/data`, hashing as it reads, in parallel.
fn copy_payload(staging: &Path, plan: &SourcePlan, reporter: &dyn Reporter) -> Result<Vec<(ManifestEntry, u64)>> {
    let data = staging.join(bag::DATA);
    std::fs::create_dir(&data).with_path("create", &data)?;
    for dir in &plan.dirs {
        let path = data.join(dir);
        std::fs::create_dir(&path).with_path("create", &path)?;
    }
    for empty in &plan.empty_dirs {
        reporter.warning(&format!("empty folder {empty} is kept, but BagIt manifests do not record empty folders"));
    }
    let copied: Vec<(ManifestEntry, u64)> = plan
        .files
        .par_iter()
        .map(|file| {
            let (digest, size) = copy_hashing(
                &file.source,
                &data.join(&file.payload),
                CopyMode { follow: plan.follow_symlinks, sync: false },
            )?;
            reporter.bytes(size);
            if let Some(expected) = &file.expected {
                if *expected != digest {
                    return Err(Error::Data {
                        what: format!("source bag file {}", file.source.display()),
                        problem: format!("sha256 {digest} does not match its manifest ({expected})"),
                    });
                }
            }
            Ok((ManifestEntry { digest, path: format!("{}/{}", bag::DATA, file.payload) }, size))
        })
        .collect::<Result<_>>()?;
    Ok(copied)
}

/// The bag-info of a new item: its two identifiers first, then what it carries over.
fn bag_info(
    collection: &Collection,
    minted: &Minted,
    oxum: Oxum,
    plan: &SourcePlan,
    options: &DepositOptions,
    clock: &dyn Clock,
) -> BagInfo {
    let mut info = BagInfo::default();
    info.push("External-Identifier", minted.name.to_string());
    if let Some(ibip) = &minted.ibip {
        info.push("External-Identifier", ibip.to_string());
    }
    let today = clock.now().to_rfc3339();
    info.push("Bagging-Date", today.get(..10).unwrap_or(&today));
    info.push("Payload-Oxum", oxum.to_string());
    if let Some(org) = &collection.config.organisation {
        info.push("Source-Organization", org.clone());
    }
    let carried = ["Payload-Oxum", "Bagging-Date", "Bag-Size"];
    if let Some(source) = &plan.info {
        for (label, value) in &source.fields {
            let ours = carried.iter().any(|c| c.eq_ignore_ascii_case(label))
                || (label.eq_ignore_ascii_case("Source-Organization") && collection.config.organisation.is_some());
            if !ours {
                info.push(label, value.clone());
            }
        }
    }
    for (label, value) in &options.meta {
        info.push(label, value.clone());
    }
    info
}

/// Called with the minted identifiers just before the items are renamed into place.
pub type BeforePlace<'a> = &'a dyn Fn(&Minted) -> Result<()>;

/// Copies one item's payload into a new staging folder (no fsync yet).
fn stage_payload(
    collection: &Collection,
    plan: &SourcePlan,
    reporter: &dyn Reporter,
) -> Result<(StagingDir, Vec<ManifestEntry>, Oxum)> {
    let staging = StagingDir::new(collection)?;
    let copied = copy_payload(&staging.path, plan, reporter)?;
    let oxum = Oxum { octets: copied.iter().map(|(_, size)| size).sum(), files: copied.len() as u64 };
    Ok((staging, copied.into_iter().map(|(entry, _)| entry).collect(), oxum))
}

/// Deposits planned items; the caller holds the write lock. Every payload is staged
/// first, so a failure (disk full, unreadable file) mints nothing; then the names
/// are minted in one lock hold, the tag files written, and `place_all` makes the
/// batch durable and renames it into place. `--move` removes originals only then.
pub fn deposit_batch(
    collection: &Collection,
    plans: &[SourcePlan],
    options: &DepositOptions,
    clock: &dyn Clock,
    reporter: &dyn Reporter,
    before_place: Option<BeforePlace>,
) -> Result<Vec<Minted>> {
    let payloads: Vec<(StagingDir, Vec<ManifestEntry>, Oxum)> =
        plans.par_iter().map(|plan| stage_payload(collection, plan, reporter)).collect::<Result<_>>()?;
    let minted = collection.mint(plans.len(), clock)?;
    let mut staged = Vec::with_capacity(plans.len());
    for ((dir, entries, oxum), (plan, m)) in payloads.into_iter().zip(plans.iter().zip(&minted)) {
        let info = bag_info(collection, m, oxum, plan, options, clock);
        bag::write_tag_files(&dir.path, &info, &entries)?;
        staged.push(Staged::new(dir, m.name.clone(), m.ibip, oxum.octets));
    }
    if let Some(hook) = before_place {
        minted.iter().try_for_each(hook)?;
    }
    for (name, outcome) in place_all(collection, staged)? {
        outcome.map_err(|problem| Error::Data { what: format!("item {name}"), problem })?;
    }
    if options.move_sources {
        for original in plans.iter().flat_map(|p| &p.originals) {
            fsx::remove_tree(original)?;
            fsync_dir(fsx::parent_dir(original))?;
        }
    }
    Ok(minted)
}
