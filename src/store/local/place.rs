//! Placing and removing items in a local collection: the storage protocol.
//! A batch of staged copies is made durable with one `syncfs` before anything
//! is renamed; one journal record covers the batch's aliases; each copy is
//! renamed into place (never over anything) or swapped with the item it
//! replaces (`RENAME_EXCHANGE`, so the name is never absent; through the trash
//! where the filesystem cannot exchange); each touched directory is fsynced
//! once after. Removal goes through the trash, journalled. Within one
//! filesystem, `move_all` moves verified items by rename. Every step that
//! leaves an alias to fix is journalled first, so an interrupted run's
//! successor completes it (`Collection::recover`). Symlinks are never followed.

use std::collections::{BTreeSet, HashMap};
use std::io;
use std::path::{Path, PathBuf};

use crate::error::{Error, IoContext, Result};
use crate::events::EventKind;
use crate::fsx::{self, fsync_dir, rename_exchange, rename_noreplace};
use crate::id::{Ibip, RepositoryName};
use crate::store::local::collection::step_of;
use crate::store::local::journal_identity::{identity_at, IDENTITY_LINE};
use crate::store::local::{alias, Collection, Intent, Item, StagingDir};
use crate::store::log::{Action, StepLog};
use crate::store::{ItemRecord, Store};

/// A verified copy waiting in the destination's staging.
pub struct Staged {
    dir: StagingDir,
    pub name: RepositoryName,
    pub ibip: Option<Ibip>,
    pub bytes: u64,
    /// Swap it with whatever holds the name in DST.
    pub replace: bool,
    /// What the inventory records of it, when the caller knows (else read from the bag).
    pub record: Option<ItemRecord>,
    /// What the log records of it.
    pub action: Action,
    /// A replacement that keeps the copy it displaces (`Action::keeps_what_it_replaces`).
    keep_replaced: bool,
}

impl Staged {
    /// A complete bag built in `dir`, to be placed as `name`.
    pub fn new(dir: StagingDir, name: RepositoryName, ibip: Option<Ibip>, bytes: u64) -> Self {
        Staged { dir, name, ibip, bytes, replace: false, record: None, action: Action::default(), keep_replaced: false }
    }
}

/// The identity lines of the copies that replace an item.
fn identity_lines(staged: &[Staged]) -> Result<String> {
    let mut lines = String::new();
    for copy in staged.iter().filter(|copy| copy.replace) {
        if let Some(identity) = identity_at(&copy.dir.path)? {
            lines.push_str(&format!("{IDENTITY_LINE}{}\t{identity}\n", copy.name));
        }
    }
    Ok(lines)
}

/// Renames one staged copy to its place; `Err` says why the place was refused.
/// `known` holds the parents this batch already made or found whole.
fn rename_into_place(
    dst: &Collection,
    staged: &mut Staged,
    known: &BTreeSet<PathBuf>,
) -> Result<std::result::Result<PathBuf, Error>> {
    if let Some(conflict) = alias_conflict(dst, staged) {
        return Ok(Err(conflict));
    }
    let parent = match dst.make_parents(&staged.name, known) {
        Ok(parent) => parent,
        Err(e @ Error::Data { .. }) => return Ok(Err(e)),
        Err(e) => return Err(e),
    };
    let dest = dst.layout.item(&staged.name);
    let exists = std::fs::symlink_metadata(&dest).is_ok();
    let result = if staged.keep_replaced && exists {
        keep_and_replace(dst, staged, &dest)
    } else if staged.replace && exists {
        // The old version (or a planted symlink) ends up in staging and is removed with it.
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
            Ok(Err(Error::AlreadyExists { path: dest }))
        }
        Err(e) => Err(Error::io("rename staged item to", &dest, e)),
    }
}

/// A copy whose IBIp alias already names another item of `dst` is not placed:
/// two items with one IBIp (minted by two subsystems on one IP) are a
/// conflict, and DST's alias stays as it is.
fn alias_conflict(dst: &Collection, staged: &Staged) -> Option<Error> {
    let ibip = staged.ibip.as_ref()?;
    let held = std::fs::read_link(dst.layout.alias(ibip)).ok()?;
    if held == crate::store::local::Layout::alias_target(&staged.name) {
        return None;
    }
    let other = held.to_string_lossy().trim_start_matches("../../").to_string();
    Some(Error::Data {
        what: format!("{} (IBIp {ibip})", staged.name),
        problem: format!(
            "{}'s alias {ibip} already names {other}, another item: two items with one IBIp; the alias stays and \
             this copy was not placed",
            dst.location()
        ),
    })
}

/// Replaces `dest` where the filesystem cannot exchange two names: the old item is
/// renamed into the trash, then the copy into its place. The name is absent for a
/// moment; a crash then loses only DST's old version and the new one (the trash and
/// staging are cleared by recovery), and the rerun makes it again.
fn replace_through_trash(dst: &Collection, staged: &mut Staged, dest: &Path) -> io::Result<()> {
    let trash = dst.layout.trash();
    let aside = tempfile::Builder::new().prefix("replaced-").tempdir_in(&trash)?.keep();
    std::fs::rename(dest, aside.join("item"))?;
    rename_noreplace(&staged.dir.path, dest)?;
    staged.dir.placed = true;
    let _ = fsx::remove_tree(&aside);
    Ok(())
}

/// Where the copy a replacement displaces is kept: `.ibi/kept/<name, its '/'
/// as '+'>@<UTC time>`, until a person removes it (`ibi kept --remove`).
fn kept_path(dst: &Collection, name: &RepositoryName) -> io::Result<PathBuf> {
    let kept = dst.layout.kept();
    std::fs::create_dir_all(&kept)?;
    let stamp = crate::id::Timestamp::now().to_rfc3339().replace(':', "");
    Ok(kept.join(format!("{}@{stamp}", name.to_string().replace('/', "+"))))
}

/// Replaces `dest` and keeps what it held (ARCHITECTURE.md, "What a repair
/// keeps"). The copy moves to its kept place first and is exchanged there with
/// the old item, so the old item is kept the moment it leaves its name (a kill
/// before the exchange leaves a spare good copy kept, never a loss). Where the
/// filesystem cannot exchange two names, the old item is renamed to the kept
/// place and the copy into its name: the name is absent for a moment, and a
/// kill then leaves the copy in staging for recovery to clear and the rerun to
/// copy again.
fn keep_and_replace(dst: &Collection, staged: &mut Staged, dest: &Path) -> io::Result<()> {
    let kept = kept_path(dst, &staged.name)?;
    rename_noreplace(&staged.dir.path, &kept)?;
    staged.dir.placed = true;
    let result = match rename_exchange(&kept, dest) {
        Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP)) => {
            rename_noreplace(&kept, &staged.dir.path)?;
            staged.dir.placed = false;
            std::fs::rename(dest, &kept)?;
            rename_noreplace(&staged.dir.path, dest).map(|()| staged.dir.placed = true)
        }
        other => other,
    };
    result?;
    std::fs::File::open(dst.layout.kept())?.sync_all()
}

/// Room the inventory needs to record a placed batch (records and events, in
/// SQLite's write-ahead log), beyond what the items themselves take.
fn room_to_record(items: usize) -> u64 {
    256 * 1024 + items as u64 * 16 * 1024
}

/// Leaves out of the batch, from its end, the copies that would leave no room to
/// record the rest (dropping a copy frees its staged bytes): an item placed but
/// not recorded is what a full disk must never leave. Returns the left out, each
/// with the disk-full error.
fn keep_room_to_record(
    dst: &Collection,
    staged: &mut Vec<Staged>,
) -> Result<Vec<(RepositoryName, std::result::Result<(), Error>)>> {
    let staging = dst.layout.staging();
    let mut left_out = Vec::new();
    while !staged.is_empty() && fsx::available_bytes(&staging)? < room_to_record(staged.len()) {
        let copy = staged.pop().expect("not empty");
        let full = io::Error::from(io::ErrorKind::StorageFull);
        left_out.push((copy.name.clone(), Err(Error::io("keep room to record", dst.layout.inventory(), full))));
    }
    Ok(left_out)
}

/// Places a batch of staged copies: one `syncfs` makes them durable, one journal
/// record covers their aliases, then each is renamed into place (never over an
/// item unless it is a replacement) and every touched directory is fsynced once.
/// Returns, per copy, its name and `Err(reason)` when its place was refused.
pub fn place_all(
    dst: &Collection,
    mut staged: Vec<Staged>,
) -> Result<Vec<(RepositoryName, std::result::Result<(), Error>)>> {
    if staged.is_empty() {
        return Ok(Vec::new());
    }
    if dst.layout.inventory().exists() {
        dst.with_inventory(|inventory| inventory.check_writable())?;
    }
    let left_out = keep_room_to_record(dst, &mut staged)?;
    if staged.is_empty() {
        return Ok(left_out);
    }
    fsx::syncfs(&dst.layout.staging())?;
    for copy in staged.iter_mut() {
        copy.keep_replaced = copy.replace && copy.action.keeps_what_it_replaces();
    }
    let actions: HashMap<RepositoryName, Action> =
        staged.iter_mut().map(|s| (s.name.clone(), std::mem::take(&mut s.action))).collect();
    let entries: Vec<(&RepositoryName, Option<&Ibip>)> = staged.iter().map(|s| (&s.name, s.ibip.as_ref())).collect();
    let lines = StepLog::journal_lines(&actions) + &identity_lines(&staged)?;
    let record = dst.journal_all(Intent::Place, &entries, &lines)?;
    let log = StepLog::new(step_of(&record), actions);
    let mut dirs = BTreeSet::new();
    let mut outcomes = Vec::with_capacity(staged.len());
    {
        // An interrupt waits for the renames, so it never removes a folder mid-rename.
        let _renaming = crate::store::local::staging_guard();
        for copy in staged.iter_mut() {
            let outcome = rename_into_place(dst, copy, &dirs)?.map(|parent| {
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
            let made = alias::create_unsynced(&dst.layout, ibip, &copy.name, &alias_dirs)?;
            alias_dirs.extend(made);
        }
    }
    alias_dirs.iter().try_for_each(|dir| fsync_dir(dir))?;
    let (known, unknown): (Vec<_>, Vec<_>) =
        staged.iter_mut().zip(&outcomes).filter(|(_, (_, o))| o.is_ok()).partition(|(s, _)| s.record.is_some());
    let known: Vec<ItemRecord> = known.into_iter().filter_map(|(s, _)| s.record.take()).collect();
    let unknown: Vec<RepositoryName> = unknown.into_iter().map(|(s, _)| s.name.clone()).collect();
    drop(staged);
    dst.record(known, &unknown, &log).map_err(|cause| Error::PlacedUnrecorded {
        names: placed_names(&outcomes).iter().map(ToString::to_string).collect(),
        cause: Box::new(cause),
    })?;
    dst.end_journal(&record)?;
    outcomes.extend(left_out);
    Ok(outcomes)
}

/// The names of a batch that were placed.
fn placed_names(outcomes: &[(RepositoryName, std::result::Result<(), Error>)]) -> Vec<RepositoryName> {
    outcomes.iter().filter(|(_, outcome)| outcome.is_ok()).map(|(name, _)| name.clone()).collect()
}

/// Removes items: one journal record, renames into the trash, fsyncs, aliases
/// dropped, then the trash emptied.
pub fn remove_all(collection: &Collection, items: &[Item]) -> Result<()> {
    if items.is_empty() {
        return Ok(());
    }
    // Checked before anything is journalled or made: an item that is not there
    // (never held, or removed by another request) would fail its move into the
    // trash half-way, leaving the journal record and the trash's folder behind.
    if let Some(absent) = items.iter().find(|i| !std::fs::symlink_metadata(&i.path).is_ok_and(|m| m.is_dir())) {
        return Err(Error::NotFound { what: "item", name: absent.name.to_string(), place: collection.root().into() });
    }
    let ibips: Vec<Option<Ibip>> = items.iter().map(|i| i.ibip().ok().flatten()).collect();
    let entries: Vec<(&RepositoryName, Option<&Ibip>)> =
        items.iter().zip(&ibips).map(|(i, b)| (&i.name, b.as_ref())).collect();
    let record = collection.journal_all(Intent::Remove, &entries, "")?;
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
    let names: Vec<RepositoryName> = items.iter().map(|i| i.name.clone()).collect();
    collection.record_removed(&names, &step_of(&record))?;
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
) -> Result<Vec<(RepositoryName, std::result::Result<(), Error>)>> {
    if items.is_empty() {
        return Ok(Vec::new());
    }
    let ibips: Vec<Option<Ibip>> = items.iter().map(|i| i.ibip().ok().flatten()).collect();
    let entries: Vec<(&RepositoryName, Option<&Ibip>)> =
        items.iter().zip(&ibips).map(|(i, b)| (&i.name, b.as_ref())).collect();
    let src_record = src.journal_all(Intent::Remove, &entries, "")?;
    let actions: HashMap<RepositoryName, Action> = items
        .iter()
        .map(|i| (i.name.clone(), Action::of(EventKind::MigrateIn, format!("from {}", src.location()))))
        .collect();
    let dst_record = dst.journal_all(Intent::Place, &entries, &StepLog::journal_lines(&actions))?;
    let mut dirs = BTreeSet::new();
    let mut outcomes = Vec::with_capacity(items.len());
    for item in items {
        let outcome = match dst.make_parents(&item.name, &dirs) {
            Err(e @ Error::Data { .. }) => Err(e),
            Err(e) => return Err(e),
            Ok(parent) => match rename_noreplace(&item.path, &dst.layout.item(&item.name)) {
                Ok(()) => {
                    dirs.insert(parent);
                    dirs.insert(fsx::parent_dir(&item.path).to_path_buf());
                    Ok(())
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists || e.raw_os_error() == Some(libc::ENOTEMPTY) => {
                    Err(Error::AlreadyExists { path: dst.layout.item(&item.name) })
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
            let made = alias::create_unsynced(&dst.layout, ibip, name, &alias_dirs)?;
            alias_dirs.extend(made);
            alias_dirs.extend(alias::remove_unsynced(&src.layout, ibip, name)?);
        }
    }
    alias_dirs.iter().try_for_each(|dir| fsync_dir(dir))?;
    let moved = placed_names(&outcomes);
    dst.record_arrived_from(src, &moved, &StepLog::new(step_of(&dst_record), actions))?;
    src.record_removed(&moved, &step_of(&src_record))?;
    dst.end_journal(&dst_record)?;
    src.end_journal(&src_record)?;
    Ok(outcomes)
}
