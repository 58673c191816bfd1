//! `copy SRC DST [NAME…]` and `migrate SRC DST [NAME…]` (DESIGN §5). Copy
//! places verified copies of SRC items in DST, skips items DST already holds
//! with the same identity digest, and reports (never overwrites) a different
//! one. Migrate then re-verifies the copy in DST and only then removes the
//! SRC item through SRC's trash, journalled, so a rerun after SIGKILL at any
//! point leaves every item in exactly one place. Items run in parallel.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use rayon::iter::{ParallelBridge, ParallelIterator};

use crate::collection::{Collection, Entry, Item, LockWait, Slot};
use crate::error::{Error, Result};
use crate::fsx::FileLock;
use crate::ops::report::Reporter;
use crate::ops::transfer::{place, remove, same_identity, stage_copy};
use crate::ops::verify::verify_item;
use crate::problem::{Problem, ProblemKind};

#[derive(Debug, Clone, Copy)]
pub struct TransferOptions {
    /// Say what would happen; change nothing.
    pub dry_run: bool,
    pub wait: LockWait,
}

/// What a copy, migrate or mirror run did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TransferSummary {
    pub copied: u64,
    /// Items removed from SRC after their copy in DST was re-verified.
    pub migrated: u64,
    pub replaced: u64,
    pub deleted: u64,
    pub skipped: u64,
    pub conflicts: u64,
    /// Damaged source items, never placed.
    pub corrupt: u64,
    pub bytes: u64,
    /// Problems reported (conflicts, corrupt items, failed re-verification, …).
    pub problems: u64,
    /// `--max-delete` stopped deletions.
    pub delete_capped: bool,
}

/// Thread-safe counters behind a `TransferSummary`.
#[derive(Default)]
pub struct Tally {
    pub copied: AtomicU64,
    pub migrated: AtomicU64,
    pub replaced: AtomicU64,
    pub deleted: AtomicU64,
    pub skipped: AtomicU64,
    pub conflicts: AtomicU64,
    pub corrupt: AtomicU64,
    pub bytes: AtomicU64,
    pub problems: AtomicU64,
    pub delete_capped: AtomicBool,
}

impl Tally {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub fn report(&self, reporter: &dyn Reporter, problem: &Problem) {
        Tally::add(&self.problems, 1);
        reporter.problem(problem);
    }

    pub fn summary(&self) -> TransferSummary {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        TransferSummary {
            copied: get(&self.copied),
            migrated: get(&self.migrated),
            replaced: get(&self.replaced),
            deleted: get(&self.deleted),
            skipped: get(&self.skipped),
            conflicts: get(&self.conflicts),
            corrupt: get(&self.corrupt),
            bytes: get(&self.bytes),
            problems: get(&self.problems),
            delete_capped: self.delete_capped.load(Ordering::Relaxed),
        }
    }
}

/// Refuses SRC = DST: copying a collection onto itself can only lose data.
pub fn check_distinct(src: &Collection, dst: &Collection) -> Result<()> {
    let canon = |c: &Collection| std::fs::canonicalize(c.root()).unwrap_or_else(|_| c.root().to_path_buf());
    if canon(src) == canon(dst) {
        return Err(Error::Invalid {
            what: "collections".into(),
            problem: "SRC and DST are the same collection".into(),
        });
    }
    Ok(())
}

/// Takes a collection's write lock and completes what an interrupted writer left.
pub fn lock_and_recover(collection: &Collection, wait: LockWait) -> Result<FileLock> {
    let lock = collection.lock_writes(wait)?;
    collection.recover()?;
    Ok(lock)
}

/// Copies one item into `dst` unless it is there already. Returns whether DST now
/// holds an identical copy (copied or skipped).
pub fn copy_one(
    src_item: &Item,
    dst: &Collection,
    dry_run: bool,
    tally: &Tally,
    reporter: &dyn Reporter,
) -> Result<bool> {
    let label = src_item.name.to_string();
    let conflict = |detail: String| {
        Tally::add(&tally.conflicts, 1);
        tally.report(reporter, &Problem::new(&label, None, ProblemKind::Conflict, detail));
        Ok(false)
    };
    match dst.slot(&src_item.name)? {
        Slot::Item(existing) if same_identity(src_item, &existing)? => {
            Tally::add(&tally.skipped, 1);
            reporter.item(&label, "skipped");
            Ok(true)
        }
        Slot::Item(_) => {
            conflict("DST holds a different item under this name (identity digests differ); left untouched".into())
        }
        Slot::Foreign(path) => conflict(format!("{} is not an item directory; left untouched", path.display())),
        Slot::Empty if dry_run => {
            Tally::add(&tally.copied, 1);
            reporter.item(&label, "would copy");
            Ok(false)
        }
        Slot::Empty => match stage_copy(src_item, dst, reporter)? {
            Err(problems) => {
                Tally::add(&tally.corrupt, 1);
                problems.iter().for_each(|p| tally.report(reporter, p));
                Ok(false)
            }
            Ok(staged) => {
                Tally::add(&tally.bytes, staged.bytes);
                match place(dst, staged, &src_item.name, false) {
                    Err(Error::Data { problem, .. }) => conflict(problem),
                    Err(e) => Err(e),
                    Ok(()) => {
                        Tally::add(&tally.copied, 1);
                        reporter.item(&label, "copied");
                        Ok(true)
                    }
                }
            }
        },
    }
}

/// Migrates one item: copy, re-verify in DST, then remove from SRC.
fn migrate_one(
    src: &Collection,
    item: &Item,
    dst: &Collection,
    dry_run: bool,
    tally: &Tally,
    reporter: &dyn Reporter,
) -> Result<()> {
    if !copy_one(item, dst, dry_run, tally, reporter)? || dry_run {
        return Ok(());
    }
    let (_, problems) = verify_item(dst, &dst.item(&item.name), reporter);
    if !problems.is_empty() {
        problems.iter().for_each(|p| tally.report(reporter, p));
        let detail = "the copy in DST failed re-verification; SRC keeps the item";
        tally.report(reporter, &Problem::new(&item.name.to_string(), None, ProblemKind::Conflict, detail));
        return Ok(());
    }
    remove(src, item)?;
    Tally::add(&tally.migrated, 1);
    reporter.item(&item.name.to_string(), "migrated");
    Ok(())
}

/// The SRC items to work on: the named ones, or all.
fn selected<'a>(src: &'a Collection, names: &'a [String]) -> Box<dyn Iterator<Item = Result<Item>> + Send + 'a> {
    if names.is_empty() {
        Box::new(src.walk().filter_map(|entry| match entry {
            Ok(Entry::Item(item)) => Some(Ok(item)),
            Ok(Entry::Stray { .. }) => None,
            Err(e) => Some(Err(e)),
        }))
    } else {
        Box::new(names.iter().map(|n| src.resolve(n)))
    }
}

fn run(
    migrate: bool,
    src: &Collection,
    dst: &Collection,
    names: &[String],
    options: TransferOptions,
    reporter: &dyn Reporter,
) -> Result<TransferSummary> {
    check_distinct(src, dst)?;
    let _dst_lock = if options.dry_run { None } else { Some(lock_and_recover(dst, options.wait)?) };
    let _src_lock = if options.dry_run || !migrate { None } else { Some(lock_and_recover(src, options.wait)?) };
    let tally = Tally::default();
    reporter.begin(if migrate { "migrate" } else { "copy" }, None, None);
    selected(src, names).par_bridge().try_for_each(|item| {
        let item = item?;
        if migrate {
            migrate_one(src, &item, dst, options.dry_run, &tally, reporter)
        } else {
            copy_one(&item, dst, options.dry_run, &tally, reporter).map(|_| ())
        }
    })?;
    reporter.end();
    Ok(tally.summary())
}

pub fn copy(
    src: &Collection,
    dst: &Collection,
    names: &[String],
    options: TransferOptions,
    reporter: &dyn Reporter,
) -> Result<TransferSummary> {
    run(false, src, dst, names, options, reporter)
}

pub fn migrate(
    src: &Collection,
    dst: &Collection,
    names: &[String],
    options: TransferOptions,
    reporter: &dyn Reporter,
) -> Result<TransferSummary> {
    run(true, src, dst, names, options, reporter)
}
