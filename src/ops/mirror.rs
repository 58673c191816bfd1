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
use rayon::prelude::*;

use crate::collection::{Collection, Entry, Item, ItemWalker, LockWait, Slot};
use crate::error::{Error, Result};
use crate::ops::copy::{
    check_distinct, lock_and_recover, next_chunk, pipeline, plan_copy, Driver, Plan, Tally, TransferSummary,
};
use crate::ops::report::Reporter;
use crate::ops::transfer::same_identity;
use crate::ops::verify::verify_item;

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

/// Decides, for one pair of the merge, what the mirror must do.
struct Planner<'a> {
    dst: &'a Collection,
    options: &'a MirrorOptions,
    tally: &'a Tally,
    deletions: AtomicU64,
    reporter: &'a dyn Reporter,
}

impl Planner<'_> {
    fn both(&self, src_item: Item, dst_item: &Item) -> Result<Plan> {
        if !same_identity(&src_item, dst_item)? {
            return Ok(Plan::Replace(src_item, "identity digest differs"));
        }
        if self.options.checksum && !verify_item(self.dst, dst_item, self.reporter).1.is_empty() {
            return Ok(Plan::Replace(src_item, "DST copy is damaged"));
        }
        Tally::add(&self.tally.skipped, 1);
        self.reporter.item(&src_item.name.to_string(), "unchanged");
        Ok(Plan::Settled(src_item, true))
    }

    fn delete(&self, dst_item: Item) -> Plan {
        if !self.options.delete {
            return Plan::Settled(dst_item, false);
        }
        let n = self.deletions.fetch_add(1, Ordering::SeqCst) + 1;
        if self.options.max_delete.is_some_and(|max| n > max) {
            self.tally.delete_capped.store(true, Ordering::Relaxed);
            return Plan::Settled(dst_item, false);
        }
        Plan::Delete(dst_item)
    }

    fn plan(&self, pair: Pair) -> Result<Plan> {
        match pair {
            Pair::Src(src_item) => match self.dst.slot(&src_item.name)? {
                // A symlink or file planted at the item's place: swapped out, never followed.
                Slot::Foreign(_) => Ok(Plan::Replace(src_item, "not an item directory in DST")),
                _ => plan_copy(src_item, self.dst, self.tally, self.reporter),
            },
            Pair::Both(src_item, dst_item) => self.both(src_item, &dst_item),
            Pair::Dst(dst_item) => Ok(self.delete(dst_item)),
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
    let planner = Planner { dst, options, tally: &tally, deletions: AtomicU64::new(0), reporter };
    let driver = Driver { dst, dry_run: options.dry_run, tally: &tally, reporter };
    reporter.begin("mirror", None, None);
    let mut merge = Merge { src: items(src.walk()).peekable(), dst: items(dst.walk()).peekable() };
    let next_plans = || -> Result<Option<Vec<Plan>>> {
        let chunk = next_chunk(&mut merge)?;
        if chunk.is_empty() {
            return Ok(None);
        }
        Ok(Some(chunk.into_par_iter().map(|pair| planner.plan(pair)).collect::<Result<_>>()?))
    };
    pipeline(&driver, next_plans, |_| Ok(()))?;
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
