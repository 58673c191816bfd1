//! Deposit (DESIGN §5): build the bag in `.ibi/staging/`, copying and hashing
//! in one read pass; mint the name under the minter lock; write the tag files;
//! fsync; rename into place (never over an existing item); create the alias.
//! `--move` removes the originals only after all of that is durable. A failure
//! at any step removes the staging folder; a SIGKILL leaves it for the next
//! writer, which clears it and finishes any journalled alias.

use std::path::{Path, PathBuf};

use rayon::prelude::*;

use crate::bag::{self, BagInfo, ManifestEntry, Oxum};
use crate::collection::{alias, Collection, Intent, LockWait, StagingDir};
use crate::error::{Error, IoContext, Result};
use crate::fsx::{self, copy_hashing, fsync_dir, rename_noreplace, CopyMode};
use crate::id::minter::Clock;
use crate::id::Minted;
use crate::ops::report::Reporter;
use crate::ops::source::{plan_bag, plan_paths, SourcePlan};

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
    for group in &groups {
        let plan = if options.bag { plan_bag(&group[0])? } else { plan_paths(group, options.follow_symlinks)? };
        let item = deposit_planned(collection, &plan, options, clock, reporter, None)?;
        reporter.item(&item.name.to_string(), "deposited");
        minted.push(item);
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
                CopyMode { follow: plan.follow_symlinks, sync: true },
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
    for dir in plan.dirs.iter().rev() {
        fsync_dir(&data.join(dir))?;
    }
    fsync_dir(&data)?;
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

/// Called with the minted identifiers just before the item is renamed into place.
pub type BeforePlace<'a> = &'a dyn Fn(&Minted) -> Result<()>;

/// Deposits one planned item. The caller holds the write lock.
pub fn deposit_planned(
    collection: &Collection,
    plan: &SourcePlan,
    options: &DepositOptions,
    clock: &dyn Clock,
    reporter: &dyn Reporter,
    before_place: Option<BeforePlace>,
) -> Result<Minted> {
    let mut staging = StagingDir::new(collection)?;
    let copied = copy_payload(&staging.path, plan, reporter)?;
    let oxum = Oxum { octets: copied.iter().map(|(_, size)| size).sum(), files: copied.len() as u64 };
    let entries: Vec<ManifestEntry> = copied.into_iter().map(|(entry, _)| entry).collect();
    let minted = collection.mint(1, clock)?.remove(0);
    let info = bag_info(collection, &minted, oxum, plan, options, clock);
    bag::write_tag_files(&staging.path, &info, &entries)?;
    fsync_dir(&staging.path)?;
    if let Some(hook) = before_place {
        hook(&minted)?;
    }
    place(collection, &mut staging, &minted)?;
    if options.move_sources {
        for original in &plan.originals {
            fsx::remove_tree(original)?;
            fsync_dir(fsx::parent_dir(original))?;
        }
    }
    Ok(minted)
}

/// Renames the staged bag to its name's path (never over anything) and creates its alias.
fn place(collection: &Collection, staging: &mut StagingDir, minted: &Minted) -> Result<()> {
    let journal = collection.journal(Intent::Place, &minted.name, minted.ibip.as_ref())?;
    let dest = collection.layout.item(&minted.name);
    let parent = collection.make_parents(&minted.name)?;
    match rename_noreplace(&staging.path, &dest) {
        Ok(()) => staging.placed = true,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists || e.raw_os_error() == Some(libc::ENOTEMPTY) => {
            return Err(Error::Data {
                what: format!("item {}", minted.name),
                problem: format!("{} already exists; refusing to overwrite it", dest.display()),
            });
        }
        Err(e) => return Err(Error::io("rename staged item to", &dest, e)),
    }
    fsync_dir(&parent)?;
    fsync_dir(&collection.layout.staging())?;
    if let Some(ibip) = &minted.ibip {
        alias::create(&collection.layout, ibip, &minted.name)?;
    }
    collection.end_journal(&journal)
}
