//! `copy SRC DST [NAME…]` and `migrate SRC DST [NAME…]` (ARCHITECTURE.md, "Operations"). Copy
//! places verified copies of SRC items in DST, skips items DST already holds
//! with the same identity digest, and reports (never overwrites) a different
//! one. Migrate then re-verifies the copy in DST and only then removes the
//! SRC item through SRC's trash, journalled, so a rerun after SIGKILL at any
//! point leaves every item in exactly one place; within one filesystem it
//! verifies each item where it is and renames it across. Items go in batches:
//! planned and staged in parallel, then placed together by the `Driver`,
//! which mirror shares.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::ops::report::{Outcome, Reporter, Task};
use crate::ops::survey::{while_surveying, Survey};
use crate::ops::transfer::{same_identity, stage_copy, BATCH};
use crate::ops::verify::verify_item;
use crate::problem::{Problem, ProblemKind};
use crate::store::local::{guard, Collection, Item, LockWait, Slot};
use crate::store::local::{move_all, place_all, remove_all, same_filesystem, Staged};

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

/// Refuses SRC = DST (through any symlink or bind mount) and nested collections:
/// copying a collection onto itself or into itself can only lose data.
pub fn check_distinct(src: &Collection, dst: &Collection) -> Result<()> {
    guard::check_apart(src.root(), dst.root())
}

/// What to do with one item, decided in parallel for a chunk.
pub enum Plan {
    /// Nothing to write: already identical (`true`), or reported as a problem.
    Settled(Item, bool),
    Copy(Item),
    Replace(Item, &'static str),
    Delete(Item),
}

/// The plan for a SRC item under copy (and migrate): copy it unless DST holds it.
pub fn plan_copy(src_item: Item, dst: &Collection, tally: &Tally, reporter: &dyn Reporter) -> Result<Plan> {
    let label = src_item.name.to_string();
    let conflict = |detail: String| {
        Tally::add(&tally.conflicts, 1);
        tally.report(reporter, &Problem::new(&label, None, ProblemKind::Conflict, detail));
    };
    match dst.slot(&src_item.name)? {
        Slot::Item(existing) => match same_identity(&src_item, &existing) {
            Ok(true) => {
                Tally::add(&tally.skipped, 1);
                reporter.item(&label, Outcome::Skipped);
                return Ok(Plan::Settled(src_item, true));
            }
            Ok(false) => {
                conflict("DST holds a different item under this name (identity digests differ); left untouched".into())
            }
            Err(e) => {
                let detail = format!("cannot compare with DST's copy: {e}; left untouched");
                tally.report(reporter, &Problem::new(&label, None, ProblemKind::Unreadable, detail));
            }
        },
        Slot::Empty if src_item.vanished() => {
            reporter.item(&label, Outcome::Vanished);
        }
        Slot::Empty => return Ok(Plan::Copy(src_item)),
        Slot::Foreign(path) => conflict(format!("{} is not an item directory; left untouched", path.display())),
    }
    Ok(Plan::Settled(src_item, false))
}
/// Carries out the plans of a chunk against DST.
pub struct Driver<'a> {
    pub dst: &'a Collection,
    pub dry_run: bool,
    pub tally: &'a Tally,
    pub reporter: &'a dyn Reporter,
}

impl Driver<'_> {
    fn dry(&self, plans: Vec<Plan>) -> Vec<Item> {
        for plan in &plans {
            let (counter, what, item) = match plan {
                Plan::Settled(..) => continue,
                Plan::Copy(item) => (&self.tally.copied, Outcome::WouldCopy, item),
                Plan::Replace(item, why) => (&self.tally.replaced, Outcome::WouldReplace { why }, item),
                Plan::Delete(item) => (&self.tally.deleted, Outcome::WouldDelete, item),
            };
            Tally::add(counter, 1);
            self.reporter.item(&item.name.to_string(), what);
        }
        Vec::new()
    }

    /// Stages every copy in parallel; damaged sources are reported, not staged. When
    /// staging fails (disk full), the copies that were staged are still returned, with
    /// the first error, so that what fits is placed before the run stops.
    pub fn stage(&self, plans: &[Plan]) -> (Vec<Staged>, Option<Error>) {
        if self.dry_run {
            return (Vec::new(), None);
        }
        let results: Vec<Result<Option<Staged>>> = plans.par_iter().map(|plan| self.stage_one(plan)).collect();
        let mut staged = Vec::with_capacity(results.len());
        let mut first_error = None;
        for result in results {
            match result {
                Ok(Some(copy)) => staged.push(copy),
                Ok(None) => {}
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        (staged, first_error)
    }

    fn stage_one(&self, plan: &Plan) -> Result<Option<Staged>> {
        let (item, replace) = match plan {
            Plan::Copy(item) => (item, false),
            Plan::Replace(item, _) => (item, true),
            _ => return Ok(None),
        };
        match stage_copy(item, self.dst, replace, self.reporter)? {
            Ok(staged) => Ok(Some(staged)),
            Err(_) if item.vanished() => {
                self.reporter.item(&item.name.to_string(), Outcome::Vanished);
                Ok(None)
            }
            Err(problems) => {
                Tally::add(&self.tally.corrupt, 1);
                problems.iter().for_each(|p| self.tally.report(self.reporter, p));
                Ok(None)
            }
        }
    }

    /// Places staged copies and counts them; returns the names placed.
    fn place(&self, staged: Vec<Staged>) -> Result<HashSet<String>> {
        let sizes: HashMap<String, (u64, bool)> =
            staged.iter().map(|s| (s.name.to_string(), (s.bytes, s.replace))).collect();
        let mut placed = HashSet::new();
        for (name, outcome) in place_all(self.dst, staged)? {
            let label = name.to_string();
            let (bytes, replace) = sizes[&label];
            match outcome {
                Ok(()) => {
                    Tally::add(&self.tally.bytes, bytes);
                    Tally::add(if replace { &self.tally.replaced } else { &self.tally.copied }, 1);
                    self.reporter.item(&label, if replace { Outcome::Replaced } else { Outcome::Copied });
                    placed.insert(label);
                }
                Err(why) => {
                    Tally::add(&self.tally.conflicts, 1);
                    self.tally.report(self.reporter, &Problem::new(&label, None, ProblemKind::Conflict, why));
                }
            }
        }
        Ok(placed)
    }

    /// Places a chunk's staged copies and carries out its deletions; returns the SRC
    /// items DST now holds identical copies of.
    pub fn commit(&self, plans: Vec<Plan>, staged: Vec<Staged>) -> Result<Vec<Item>> {
        if self.dry_run {
            return Ok(self.dry(plans));
        }
        let placed = self.place(staged)?;
        let deletes: Vec<Item> =
            plans.iter().filter_map(|p| if let Plan::Delete(i) = p { Some(i.clone()) } else { None }).collect();
        remove_all(self.dst, &deletes)?;
        for item in &deletes {
            Tally::add(&self.tally.deleted, 1);
            self.reporter.item(&item.name.to_string(), Outcome::Deleted);
        }
        Ok(plans
            .into_iter()
            .filter_map(|plan| match plan {
                Plan::Settled(item, true) => Some(item),
                Plan::Copy(item) | Plan::Replace(item, _) if placed.contains(&item.name.to_string()) => Some(item),
                _ => None,
            })
            .collect())
    }
}

/// Migrate's last step for a chunk: re-verify each copy in DST, then remove from SRC
/// the items whose copies are sound.
fn finish_migration(
    src: &Collection,
    dst: &Collection,
    in_dst: Vec<Item>,
    tally: &Tally,
    reporter: &dyn Reporter,
) -> Result<()> {
    let sound: Vec<Item> = in_dst
        .into_par_iter()
        .filter(|item| {
            let (_, problems) = verify_item(dst, &dst.item(&item.name), reporter);
            problems.iter().for_each(|p| tally.report(reporter, p));
            if !problems.is_empty() {
                let detail = "the copy in DST failed re-verification; SRC keeps the item";
                tally.report(reporter, &Problem::new(&item.name.to_string(), None, ProblemKind::Conflict, detail));
            }
            problems.is_empty()
        })
        .collect();
    remove_all(src, &sound)?;
    for item in &sound {
        Tally::add(&tally.migrated, 1);
        reporter.item(&item.name.to_string(), Outcome::Migrated);
    }
    Ok(())
}

/// Migrate within one filesystem: verify each item where it is, then rename the
/// sound ones into DST (the bytes never move, so the check holds for DST).
fn move_chunk(
    src: &Collection,
    dst: &Collection,
    plans: Vec<Plan>,
    tally: &Tally,
    reporter: &dyn Reporter,
) -> Result<Vec<Item>> {
    let mut settled = Vec::new();
    let mut to_move = Vec::new();
    for plan in plans {
        match plan {
            Plan::Settled(item, true) => settled.push(item),
            Plan::Copy(item) => to_move.push(item),
            _ => {}
        }
    }
    let sound: Vec<Item> = to_move
        .into_par_iter()
        .filter(|item| {
            let (check, problems) = verify_item(src, item, reporter);
            Tally::add(&tally.bytes, check.bytes);
            if !problems.is_empty() {
                Tally::add(&tally.corrupt, 1);
                problems.iter().for_each(|p| tally.report(reporter, p));
            }
            problems.is_empty()
        })
        .collect();
    for (name, outcome) in move_all(src, dst, &sound)? {
        match outcome {
            Ok(()) => {
                Tally::add(&tally.migrated, 1);
                reporter.item(&name.to_string(), Outcome::Migrated);
            }
            Err(why) => {
                Tally::add(&tally.conflicts, 1);
                tally.report(reporter, &Problem::new(&name.to_string(), None, ProblemKind::Conflict, why));
            }
        }
    }
    Ok(settled)
}

/// Runs chunks through the driver, committing chunk N on its own thread while
/// chunk N+1 is planned and staged (commit mostly waits on the disk: `syncfs`
/// and directory fsyncs). `after` sees each chunk's result, in order.
pub fn pipeline(
    driver: &Driver,
    mut next_plans: impl FnMut() -> Result<Option<Vec<Plan>>>,
    mut after: impl FnMut(Vec<Item>) -> Result<()>,
) -> Result<()> {
    std::thread::scope(|scope| {
        let mut pending: Option<std::thread::ScopedJoinHandle<'_, Result<Vec<Item>>>> = None;
        while let Some(plans) = next_plans()? {
            let (staged, failed) = driver.stage(&plans);
            if let Some(handle) = pending.take() {
                after(handle.join().expect("the commit thread does not panic")?)?;
            }
            if let Some(error) = failed {
                // Place what was staged, then stop with the error (disk full: copy what fits).
                after(driver.commit(plans, staged)?)?;
                return Err(error);
            }
            pending = Some(scope.spawn(move || driver.commit(plans, staged)));
        }
        match pending {
            Some(handle) => after(handle.join().expect("the commit thread does not panic")?),
            None => Ok(()),
        }
    })
}

/// Takes up to `BATCH` results from an iterator, stopping at the first error.
pub fn next_chunk<T>(iter: &mut impl Iterator<Item = Result<T>>) -> Result<Vec<T>> {
    iter.by_ref().take(BATCH).collect()
}

/// Copies or migrates the named SRC items (all when `names` is empty) into DST.
pub fn transfer(
    kind: TransferKind,
    src: &Collection,
    dst: &Collection,
    names: &[String],
    options: TransferOptions,
    reporter: &dyn Reporter,
) -> Result<TransferSummary> {
    let migrate = kind == TransferKind::Migrate;
    check_distinct(src, dst)?;
    let _dst_lock = if options.dry_run { None } else { Some(dst.lock_and_recover(options.wait)?) };
    let _src_lock = if options.dry_run || !migrate { None } else { Some(src.lock_and_recover(options.wait)?) };
    let tally = Tally::default();
    let driver = Driver { dst, dry_run: options.dry_run, tally: &tally, reporter };
    let by_rename = migrate && !options.dry_run && same_filesystem(src, dst)?;
    reporter.begin(if migrate { Task::Migrate } else { Task::Copy });
    while_surveying(reporter, Survey::Items(src, names), || -> Result<()> {
        let mut items = src.selected(names);
        let mut next_plans = || -> Result<Option<Vec<Plan>>> {
            let chunk = next_chunk(&mut items)?;
            if chunk.is_empty() {
                return Ok(None);
            }
            Ok(Some(chunk.into_par_iter().map(|item| plan_copy(item, dst, &tally, reporter)).collect::<Result<_>>()?))
        };
        if by_rename {
            while let Some(plans) = next_plans()? {
                let in_dst = move_chunk(src, dst, plans, &tally, reporter)?;
                finish_migration(src, dst, in_dst, &tally, reporter)?;
            }
        } else {
            pipeline(&driver, next_plans, |in_dst| {
                if migrate && !options.dry_run {
                    finish_migration(src, dst, in_dst, &tally, reporter)?;
                }
                Ok(())
            })?;
        }
        Ok(())
    })?;
    reporter.end();
    Ok(tally.summary())
}

/// Which transfer between collections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransferKind {
    Copy,
    Migrate,
}
