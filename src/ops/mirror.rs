//! `mirror SRC DST` (DESIGN §5): a one-way sync built for cron. A merge of the
//! two sorted item walks copies missing items, swaps in items whose identity
//! digest differs, and with `--delete` removes items absent from SRC (capped
//! by `--max-delete`, and refused when SRC is empty while DST is not). A
//! no-op run reads only directory entries and tagmanifests. `--checksum`
//! re-verifies DST payloads and repairs damaged items from SRC. `--watch`
//! re-syncs when `notify` reports changes in SRC, debounced.

use std::iter::Peekable;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use rayon::iter::{ParallelBridge, ParallelIterator};

use crate::collection::{Collection, Entry, Item, ItemWalker, LockWait, Slot};
use crate::error::{Error, Result};
use crate::ops::copy::{check_distinct, copy_one, lock_and_recover, Tally, TransferSummary};
use crate::ops::report::Reporter;
use crate::ops::transfer::{place, remove, same_identity, stage_copy};
use crate::ops::verify::verify_item;
use crate::problem::{Problem, ProblemKind};

#[derive(Debug, Clone, Copy)]
pub struct MirrorOptions {
    pub dry_run: bool,
    pub wait: LockWait,
    pub delete: bool,
    pub max_delete: Option<u64>,
    pub checksum: bool,
}

/// The items of a walk, in name order (stray entries are skipped).
fn items(walker: ItemWalker) -> impl Iterator<Item = Result<Item>> + Send {
    walker.filter_map(|entry| match entry {
        Ok(Entry::Item(item)) => Some(Ok(item)),
        Ok(Entry::Stray { .. }) => None,
        Err(e) => Some(Err(e)),
    })
}

/// One step of the merge: an item in SRC only, in both, or in DST only.
enum Pair {
    Src(Item),
    Both(Item, Item),
    Dst(Item),
}

/// Merges two walks sorted by name.
struct Merge<A: Iterator<Item = Result<Item>>, B: Iterator<Item = Result<Item>>> {
    src: Peekable<A>,
    dst: Peekable<B>,
}

impl<A: Iterator<Item = Result<Item>>, B: Iterator<Item = Result<Item>>> Iterator for Merge<A, B> {
    type Item = Result<Pair>;

    fn next(&mut self) -> Option<Self::Item> {
        let order = match (self.src.peek(), self.dst.peek()) {
            (None, None) => return None,
            (Some(Err(_)), _) => return self.src.next().map(|r| r.map(Pair::Src)),
            (_, Some(Err(_))) => return self.dst.next().map(|r| r.map(Pair::Dst)),
            (Some(Ok(_)), None) => std::cmp::Ordering::Less,
            (None, Some(Ok(_))) => std::cmp::Ordering::Greater,
            (Some(Ok(s)), Some(Ok(d))) => s.name.to_string().cmp(&d.name.to_string()),
        };
        Some(Ok(match order {
            std::cmp::Ordering::Less => Pair::Src(self.src.next()?.ok()?),
            std::cmp::Ordering::Greater => Pair::Dst(self.dst.next()?.ok()?),
            std::cmp::Ordering::Equal => Pair::Both(self.src.next()?.ok()?, self.dst.next()?.ok()?),
        }))
    }
}

/// Refuses `--delete` when SRC holds no items while DST holds some (an unmounted
/// or emptied SRC must never empty DST).
fn guard_delete(src: &Collection, dst: &Collection) -> Result<()> {
    let src_has = items(src.walk()).next().transpose()?.is_some();
    let dst_has = items(dst.walk()).next().transpose()?.is_some();
    if !src_has && dst_has {
        return Err(Error::Invalid {
            what: "--delete".into(),
            problem: format!("SRC {} holds no items while DST holds some; refusing to delete", src.root().display()),
        });
    }
    Ok(())
}

struct Pass<'a> {
    dst: &'a Collection,
    options: &'a MirrorOptions,
    tally: &'a Tally,
    deletions: AtomicU64,
    reporter: &'a dyn Reporter,
}

impl Pass<'_> {
    /// Replaces DST's copy of an item with a verified copy of SRC's, atomically.
    fn replace(&self, src_item: &Item, why: &str) -> Result<()> {
        let label = src_item.name.to_string();
        if self.options.dry_run {
            Tally::add(&self.tally.replaced, 1);
            self.reporter.item(&label, &format!("would replace ({why})"));
            return Ok(());
        }
        match stage_copy(src_item, self.dst, self.reporter)? {
            Err(problems) => {
                Tally::add(&self.tally.corrupt, 1);
                problems.iter().for_each(|p| self.tally.report(self.reporter, p));
            }
            Ok(staged) => {
                Tally::add(&self.tally.bytes, staged.bytes);
                match place(self.dst, staged, &src_item.name, true) {
                    Err(Error::Data { problem, .. }) => {
                        Tally::add(&self.tally.conflicts, 1);
                        self.tally.report(self.reporter, &Problem::new(&label, None, ProblemKind::Conflict, problem));
                    }
                    Err(e) => return Err(e),
                    Ok(()) => {
                        Tally::add(&self.tally.replaced, 1);
                        self.reporter.item(&label, &format!("replaced ({why})"));
                    }
                }
            }
        }
        Ok(())
    }

    fn both(&self, src_item: &Item, dst_item: &Item) -> Result<()> {
        if !same_identity(src_item, dst_item)? {
            return self.replace(src_item, "identity digest differs");
        }
        if self.options.checksum && !verify_item(self.dst, dst_item, self.reporter).1.is_empty() {
            return self.replace(src_item, "DST copy is damaged");
        }
        Tally::add(&self.tally.skipped, 1);
        self.reporter.item(&src_item.name.to_string(), "unchanged");
        Ok(())
    }

    fn delete(&self, dst_item: &Item) -> Result<()> {
        if !self.options.delete {
            return Ok(());
        }
        let n = self.deletions.fetch_add(1, Ordering::SeqCst) + 1;
        if self.options.max_delete.is_some_and(|max| n > max) {
            self.tally.delete_capped.store(true, Ordering::Relaxed);
            return Ok(());
        }
        let label = dst_item.name.to_string();
        if self.options.dry_run {
            self.reporter.item(&label, "would delete");
        } else {
            remove(self.dst, dst_item)?;
            self.reporter.item(&label, "deleted");
        }
        Tally::add(&self.tally.deleted, 1);
        Ok(())
    }

    fn step(&self, pair: Pair) -> Result<()> {
        match pair {
            Pair::Src(src_item) => match self.dst.slot(&src_item.name)? {
                // A symlink or file planted at the item's place: swapped out, never followed.
                Slot::Foreign(_) => self.replace(&src_item, "not an item directory in DST"),
                _ => copy_one(&src_item, self.dst, self.options.dry_run, self.tally, self.reporter).map(|_| ()),
            },
            Pair::Both(src_item, dst_item) => self.both(&src_item, &dst_item),
            Pair::Dst(dst_item) => self.delete(&dst_item),
        }
    }
}

/// One sync pass; the caller holds DST's write lock (unless dry-running).
fn sync(
    src: &Collection,
    dst: &Collection,
    options: &MirrorOptions,
    reporter: &dyn Reporter,
) -> Result<TransferSummary> {
    if options.delete {
        guard_delete(src, dst)?;
    }
    let tally = Tally::default();
    let pass = Pass { dst, options, tally: &tally, deletions: AtomicU64::new(0), reporter };
    reporter.begin("mirror", None, None);
    let merge = Merge { src: items(src.walk()).peekable(), dst: items(dst.walk()).peekable() };
    merge.par_bridge().try_for_each(|pair| pass.step(pair?))?;
    reporter.end();
    Ok(tally.summary())
}

/// Mirrors SRC into DST once.
pub fn mirror(
    src: &Collection,
    dst: &Collection,
    options: &MirrorOptions,
    reporter: &dyn Reporter,
) -> Result<TransferSummary> {
    check_distinct(src, dst)?;
    let _lock = if options.dry_run { None } else { Some(lock_and_recover(dst, options.wait)?) };
    sync(src, dst, options, reporter)
}

/// Mirrors once, then again after each burst of changes in SRC (quiet for
/// `debounce`), until `stop` is set. Calls `on_pass` after every pass.
pub fn mirror_watch(
    src: &Collection,
    dst: &Collection,
    options: &MirrorOptions,
    reporter: &dyn Reporter,
    stop: &AtomicBool,
    debounce: Duration,
    on_pass: &mut dyn FnMut(&TransferSummary),
) -> Result<()> {
    check_distinct(src, dst)?;
    let _lock = if options.dry_run { None } else { Some(lock_and_recover(dst, options.wait)?) };
    let (tx, rx) = mpsc::channel();
    let mut watcher = notify::recommended_watcher(move |_| {
        let _ = tx.send(());
    })
    .map_err(|e| Error::Invalid { what: "--watch".into(), problem: e.to_string() })?;
    watcher.watch(src.root(), RecursiveMode::Recursive).map_err(|e| Error::Invalid {
        what: "--watch".into(),
        problem: format!("cannot watch {}: {e}", src.root().display()),
    })?;
    on_pass(&sync(src, dst, options, reporter)?);
    while !stop.load(Ordering::SeqCst) {
        if rx.recv_timeout(Duration::from_millis(200)).is_err() {
            continue;
        }
        // Debounce: wait until SRC has been quiet for `debounce`, or stop is asked.
        while !stop.load(Ordering::SeqCst) && rx.recv_timeout(debounce).is_ok() {}
        if stop.load(Ordering::SeqCst) {
            break;
        }
        on_pass(&sync(src, dst, options, reporter)?);
    }
    Ok(())
}
