//! The transfer driver shared by copy, migrate and mirror: the counters of a
//! run (`Tally`), what to do with each item (`Plan`), and the `Driver` that
//! stages a chunk's copies in parallel and commits them (places the batch,
//! carries out deletions) on its own thread while the next chunk is planned
//! (`pipeline`). Both collections are reached only through the `Store` seam.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::events::EventKind;
use crate::id::RepositoryName;
use crate::ops::report::{Outcome, ProblemCount, Reporter};
use crate::ops::transfer::{item_bytes, place_staged, same_identity, stage_copy, StagedItem, BATCH};
use crate::ops::verify::vanished;
use crate::problem::{Problem, ProblemKind};
use crate::store::guard;
use crate::store::log::{carried_events, Action};
use crate::store::{raise_minter, LockWait, Slot, Staging, Store, Writer};

/// After this long staging a chunk with copies still under way, the copies
/// already staged are placed (`Driver::stage`).
const PLACE_EARLY_AFTER: Duration = Duration::from_secs(5);

/// A chunk's staged copies, the names of those placed while others were still
/// copying, and the first error staging met.
#[derive(Default)]
pub struct StagedChunk<'a> {
    items: Vec<StagedItem<'a>>,
    placed_early: HashSet<String>,
    failed: Option<Error>,
}

#[derive(Debug, Clone)]
pub struct TransferOptions {
    /// Say what would happen; change nothing.
    pub dry_run: bool,
    pub wait: LockWait,
    /// Migrate: DST's public base URL, recorded in SRC for resolvers to send names to.
    pub forward_url: Option<String>,
}

/// What a copy, migrate or mirror run did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TransferSummary {
    pub copied: u64,
    /// Items removed from SRC after their copy in DST was re-verified.
    pub migrated: u64,
    pub replaced: u64,
    pub skipped: u64,
    pub conflicts: u64,
    /// Damaged source items, never placed.
    pub corrupt: u64,
    pub bytes: u64,
    /// Problems reported (conflicts, corrupt items, failed re-verification, …).
    pub problems: u64,
}

/// A run that stopped on an error part way (a full disk, a lost connection): what
/// it had done by then, which its caller still reports, and why it stopped.
#[derive(Debug)]
pub struct Stopped {
    pub done: TransferSummary,
    pub error: Error,
}

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for Stopped {}

/// An error before anything was done.
impl From<Error> for Box<Stopped> {
    fn from(error: Error) -> Self {
        Box::new(Stopped { done: TransferSummary::default(), error })
    }
}

/// What a copy, migrate or mirror run returns.
pub type RunResult = std::result::Result<TransferSummary, Box<Stopped>>;

impl Tally {
    /// The run's result: its summary, or the error it stopped on with the summary so far.
    pub fn finish(&self, run: Result<()>) -> RunResult {
        let done = self.summary();
        run.map(|()| done).map_err(|error| Box::new(Stopped { done, error }))
    }
}

/// Thread-safe counters behind a `TransferSummary`.
#[derive(Default)]
pub struct Tally {
    pub copied: AtomicU64,
    pub migrated: AtomicU64,
    pub replaced: AtomicU64,
    pub skipped: AtomicU64,
    pub conflicts: AtomicU64,
    pub corrupt: AtomicU64,
    pub bytes: AtomicU64,
    pub problems: ProblemCount,
}

impl Tally {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub fn report(&self, reporter: &dyn Reporter, problem: &Problem) {
        self.problems.report(reporter, problem);
    }

    pub fn summary(&self) -> TransferSummary {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        TransferSummary {
            copied: get(&self.copied),
            migrated: get(&self.migrated),
            replaced: get(&self.replaced),
            skipped: get(&self.skipped),
            conflicts: get(&self.conflicts),
            corrupt: get(&self.corrupt),
            bytes: get(&self.bytes),
            problems: self.problems.get(),
        }
    }
}

/// Refuses SRC = DST (through any symlink or bind mount) and nested collections:
/// copying a collection onto itself or into itself can only lose data.
pub fn check_distinct(src: &dyn Store, dst: &dyn Store) -> Result<()> {
    match (src.local_root(), dst.local_root()) {
        (Some(a), Some(b)) => guard::check_apart(a, b),
        _ => Ok(()),
    }
}

/// What to do with one item, decided in parallel for a chunk.
pub enum Plan {
    /// Nothing to write: already identical (`true`), or reported as a problem.
    Settled(RepositoryName, bool),
    Copy(RepositoryName),
    Replace(RepositoryName, &'static str),
}

impl Plan {
    /// The name this plan copies, and whether over an item already there.
    fn copies(&self) -> Option<(RepositoryName, bool)> {
        match self {
            Plan::Copy(name) => Some((name.clone(), false)),
            Plan::Replace(name, _) => Some((name.clone(), true)),
            Plan::Settled(..) => None,
        }
    }
}

/// The plans of a chunk of SRC items under copy (and migrate), in parallel; DST's
/// slots of the chunk are asked for at once (`Store::slots`).
pub fn plan_copies(
    (src, names): (&dyn Store, Vec<RepositoryName>),
    dst: &dyn Store,
    tally: &Tally,
    reporter: &dyn Reporter,
) -> Result<Vec<Plan>> {
    use rayon::prelude::*;
    let slots = dst.slots(&names)?;
    names.into_par_iter().zip(slots).map(|(name, slot)| plan_copy((src, name), (dst, slot), tally, reporter)).collect()
}

/// The plan for a SRC item under copy (and migrate), DST's slot for it given:
/// copy it unless DST holds it.
pub fn plan_copy(
    (src, name): (&dyn Store, RepositoryName),
    (dst, slot): (&dyn Store, Slot),
    tally: &Tally,
    reporter: &dyn Reporter,
) -> Result<Plan> {
    let label = name.to_string();
    let conflict = |detail: String| {
        Tally::add(&tally.conflicts, 1);
        tally.report(reporter, &Problem::new(&label, None, ProblemKind::Conflict, detail));
    };
    match slot {
        Slot::Item => match same_identity((src, &name), (dst, &name)) {
            Ok(true) => {
                Tally::add(&tally.skipped, 1);
                reporter.item(&label, Outcome::Skipped);
                return Ok(Plan::Settled(name, true));
            }
            Ok(false) => {
                conflict("DST holds a different item under this name (identity digests differ); left untouched".into())
            }
            Err(e) => {
                let detail = format!("cannot compare with DST's copy: {e}; left untouched");
                tally.report(reporter, &Problem::new(&label, None, ProblemKind::Unreadable, detail));
            }
        },
        Slot::Empty if vanished(src, &name) => {
            reporter.item(&label, Outcome::Vanished);
        }
        Slot::Empty => return Ok(Plan::Copy(name)),
        Slot::Foreign(place) => conflict(format!("{place} is not an item directory; left untouched")),
    }
    Ok(Plan::Settled(name, false))
}
/// Carries out the plans of a chunk against DST.
pub struct Driver<'a> {
    pub src: &'a dyn Store,
    pub dst: &'a dyn Store,
    /// What writes DST; none on a dry run.
    pub writer: Option<&'a dyn Writer>,
    pub tally: &'a Tally,
    pub reporter: &'a dyn Reporter,
    /// What DST's log records of each item placed.
    pub event: EventKind,
}

impl<'a> Driver<'a> {
    /// Counts and reports what the plans would do, as `commit` would; returns the
    /// SRC items DST would then hold identical copies of.
    fn dry(&self, plans: Vec<Plan>) -> Vec<RepositoryName> {
        let mut in_dst = Vec::new();
        for plan in plans {
            let (counter, what, name) = match &plan {
                Plan::Settled(name, true) => {
                    in_dst.push(name.clone());
                    continue;
                }
                Plan::Settled(..) => continue,
                Plan::Copy(name) => (&self.tally.copied, Outcome::WouldCopy, name),
                Plan::Replace(name, why) => (&self.tally.replaced, Outcome::WouldReplace { why }, name),
            };
            Tally::add(counter, 1);
            Tally::add(&self.tally.bytes, item_bytes(self.src, name));
            self.reporter.item(&name, what);
            in_dst.push(name.clone());
        }
        in_dst
    }

    /// Stages every copy in parallel; damaged sources are reported, not staged. When
    /// staging fails (disk full), the copies that were staged are still returned, with
    /// the first error, so that what fits is placed before the run stops. While
    /// copies are still under way after `PLACE_EARLY_AFTER`, those already staged are
    /// placed (once `settle` has finished the chunk before): a large item holds back
    /// no small one, and a run killed by a timeout keeps them.
    pub fn stage(&self, plans: &[Plan], settle: &mut dyn FnMut() -> Result<()>) -> StagedChunk<'a> {
        let mut chunk = StagedChunk::default();
        let Some(writer) = self.writer else { return chunk };
        let copying: Vec<RepositoryName> = plans
            .iter()
            .filter_map(|plan| match plan {
                Plan::Copy(name) | Plan::Replace(name, _) => Some(name.clone()),
                Plan::Settled(..) => None,
            })
            .collect();
        self.src.prefetch(&copying);
        let stagings = match self.stagings(writer, plans) {
            Ok(stagings) => stagings,
            Err(e) => {
                chunk.failed = Some(e);
                return chunk;
            }
        };
        let (sender, results) = std::sync::mpsc::channel();
        std::thread::scope(|scope| {
            scope.spawn(move || {
                let stage_all = || {
                    plans.par_iter().zip(stagings).for_each_with(sender, |sender, (plan, staging)| {
                        let _ = sender.send((plan, self.stage_one(writer, plan, staging)));
                    })
                };
                match self.dst.transfer_shape().staging_threads.and_then(staging_pool) {
                    Some(pool) => pool.install(stage_all),
                    None => stage_all(),
                }
            });
            let mut next_early = Instant::now() + PLACE_EARLY_AFTER;
            loop {
                match results.recv_timeout(next_early.saturating_duration_since(Instant::now())) {
                    Ok((plan, result)) => self.take_staged(plan, result, &mut chunk),
                    Err(RecvTimeoutError::Timeout) => {
                        self.place_early(writer, &mut chunk, settle);
                        next_early = Instant::now() + PLACE_EARLY_AFTER;
                    }
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            }
        });
        let names: Vec<RepositoryName> = chunk.items.iter().map(|item| item.name().clone()).collect();
        if let Err(e) = self.carry_along(&names, &mut chunk.items) {
            chunk.failed.get_or_insert(e);
        }
        chunk
    }

    /// Files one item's staging result in the chunk.
    fn take_staged(&self, plan: &Plan, result: Result<Option<StagedItem<'a>>>, chunk: &mut StagedChunk<'a>) {
        match result {
            Ok(Some(copy)) => chunk.items.push(copy),
            Ok(None) => {}
            Err(e) => {
                if let Plan::Copy(name) | Plan::Replace(name, _) = plan {
                    self.reporter.item(&name, Outcome::NotCopied { why: &e.to_string() });
                }
                chunk.failed.get_or_insert(e);
            }
        }
    }

    /// Places the copies staged so far, once the chunk before is settled.
    fn place_early(&self, writer: &dyn Writer, chunk: &mut StagedChunk<'a>, settle: &mut dyn FnMut() -> Result<()>) {
        if chunk.items.is_empty() || chunk.failed.is_some() {
            return;
        }
        let mut items = std::mem::take(&mut chunk.items);
        let names: Vec<RepositoryName> = items.iter().map(|item| item.name().clone()).collect();
        let placed =
            settle().and_then(|()| self.carry_along(&names, &mut items)).and_then(|()| self.place(writer, items));
        match placed {
            Ok(placed) => chunk.placed_early.extend(placed),
            Err(e) => {
                chunk.failed.get_or_insert(e);
            }
        }
    }

    /// What goes with the items copied: SRC's content keys, in each placement's
    /// record (`place` files them in DST's records of deposits once the items are
    /// placed, so that DST recognises a repeated deposit of what it holds by
    /// copy), and the action DST logs, with the item's events in SRC (not for a
    /// repair: the item's history is already where it is repaired).
    fn carry_along(&self, copying: &[RepositoryName], staged: &mut [StagedItem]) -> Result<()> {
        let note = format!("from {}", self.src.location());
        let names: Vec<RepositoryName> = staged.iter().map(|item| item.name().clone()).collect();
        let mut carried = match self.event {
            EventKind::Repair => Vec::new(),
            _ => carried_events(self.src, &names)?,
        }
        .into_iter();
        for item in staged.iter_mut() {
            let carried = carried.next().unwrap_or_default();
            item.placement.action = Action { kind: Some(self.event), note: note.clone(), carried };
        }
        let keys: HashMap<RepositoryName, Vec<String>> = copying
            .iter()
            .cloned()
            .zip(self.src.inventory().records(copying)?)
            .filter_map(|(name, record)| Some((name, record?.deposit_keys)).filter(|(_, k)| !k.is_empty()))
            .collect();
        for item in staged.iter_mut() {
            if let (Some(found), Some(record)) = (keys.get(&item.placement.name), item.placement.record.as_mut()) {
                record.deposit_keys = found.clone();
            }
        }
        Ok(())
    }

    /// A staging for each plan that copies, in the plans' order, where the
    /// backend begins them all at once (`Writer::stages_for`); otherwise none,
    /// and each is begun as its item is staged.
    fn stagings(&self, writer: &'a dyn Writer, plans: &[Plan]) -> Result<Vec<Option<Staging<'a>>>> {
        let copying: Vec<(RepositoryName, bool)> = plans.iter().filter_map(Plan::copies).collect();
        let mut stagings = Staging::for_items(writer, &copying)?.unwrap_or_default().into_iter();
        Ok(plans.iter().map(|plan| plan.copies().and_then(|_| stagings.next())).collect())
    }

    fn stage_one(
        &self,
        writer: &'a dyn Writer,
        plan: &Plan,
        staging: Option<Staging<'a>>,
    ) -> Result<Option<StagedItem<'a>>> {
        let Some((name, replace)) = plan.copies() else { return Ok(None) };
        let staging = match staging {
            Some(staging) => staging,
            None => Staging::for_item(writer, &name, replace)?,
        };
        match stage_copy((self.src, &name), (staging, replace), self.reporter)? {
            Ok(staged) => Ok(Some(staged)),
            Err(_) if vanished(self.src, &name) => {
                self.reporter.item(&name, Outcome::Vanished);
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
    fn place(&self, writer: &dyn Writer, staged: Vec<StagedItem>) -> Result<HashSet<String>> {
        let sizes: HashMap<String, (u64, bool)> =
            staged.iter().map(|s| (s.name().to_string(), (s.bytes, s.placement.replace))).collect();
        let keys: Vec<(String, RepositoryName)> = staged
            .iter()
            .filter_map(|s| s.placement.record.as_ref())
            .flat_map(|r| r.deposit_keys.iter().map(|k| (k.clone(), r.name.clone())))
            .collect();
        let mut placed = HashSet::new();
        let mut arrived = Vec::new();
        let mut stopped = None;
        for (name, outcome) in place_staged(writer, staged)? {
            let label = name.to_string();
            let (bytes, replace) = sizes[&label];
            match outcome {
                Ok(()) => {
                    Tally::add(&self.tally.bytes, bytes);
                    Tally::add(if replace { &self.tally.replaced } else { &self.tally.copied }, 1);
                    self.reporter.item(&label, if replace { Outcome::Replaced } else { Outcome::Copied });
                    placed.insert(label);
                    arrived.push(name);
                }
                // Left out for want of room (a full disk): not copied, and the run stops.
                Err(why @ Error::Io { .. }) => {
                    self.reporter.item(&label, Outcome::NotCopied { why: &why.to_string() });
                    stopped.get_or_insert(why);
                }
                Err(why) => {
                    Tally::add(&self.tally.conflicts, 1);
                    self.tally
                        .report(self.reporter, &Problem::new(&label, None, ProblemKind::Conflict, why.to_string()));
                }
            }
        }
        raise_minter(writer, &arrived)?;
        let keys: Vec<_> = keys.into_iter().filter(|(_, n)| placed.contains(&n.to_string())).collect();
        // Only a convenience for a later deposit (the items' records carry the keys
        // too): a failure to file them is told, and the copies stand.
        if let Err(e) = writer.minter().write_deposit_records(&keys) {
            self.reporter.warning(&format!("the copied items' deposit records were not filed: {e}"));
        }
        stopped.map_or(Ok(placed), Err)
    }

    /// Places a chunk's staged copies; returns the SRC items DST now holds identical
    /// copies of (those placed early included).
    pub fn commit(&self, plans: Vec<Plan>, staged: StagedChunk) -> Result<Vec<RepositoryName>> {
        let Some(writer) = self.writer else { return Ok(self.dry(plans)) };
        let mut placed = self.place(writer, staged.items)?;
        placed.extend(staged.placed_early);
        Ok(plans
            .into_iter()
            .filter_map(|plan| match plan {
                Plan::Settled(name, true) => Some(name),
                Plan::Copy(name) | Plan::Replace(name, _) if placed.contains(&name.to_string()) => Some(name),
                _ => None,
            })
            .collect())
    }
}

/// Runs chunks through the driver, committing chunk N on its own thread while
/// chunk N+1 is planned and staged (commit mostly waits on the disk: `syncfs`
/// and directory fsyncs). `after` sees each chunk's result, in order.
pub fn pipeline(
    driver: &Driver,
    mut next_plans: impl FnMut() -> Result<Option<Vec<Plan>>>,
    mut after: impl FnMut(Vec<RepositoryName>) -> Result<()>,
) -> Result<()> {
    std::thread::scope(|scope| {
        let mut pending: Option<std::thread::ScopedJoinHandle<'_, Result<Vec<RepositoryName>>>> = None;
        while let Some(plans) = next_plans()? {
            // Finishes chunk N: before chunk N+1 places anything early, and after it is staged.
            let mut settle = || -> Result<()> {
                match pending.take() {
                    Some(handle) => after(handle.join().expect("the commit thread does not panic")?),
                    None => Ok(()),
                }
            };
            let mut staged = driver.stage(&plans, &mut settle);
            settle()?;
            if let Some(error) = staged.failed.take() {
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

/// The pool that stages into a store asking for more threads than the machine
/// has cores (`TransferShape::staging_threads`): made once, at the first size asked,
/// and kept for the process. None where the global pool is as large.
fn staging_pool(threads: usize) -> Option<&'static rayon::ThreadPool> {
    static POOL: std::sync::OnceLock<Option<rayon::ThreadPool>> = std::sync::OnceLock::new();
    if threads <= rayon::current_num_threads() {
        return None;
    }
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new().num_threads(threads).thread_name(|i| format!("ibi-stage-{i}")).build().ok()
    })
    .as_ref()
}

/// Takes up to `BATCH` results from an iterator, stopping at the first error.
pub fn next_chunk<T>(iter: &mut impl Iterator<Item = Result<T>>) -> Result<Vec<T>> {
    iter.by_ref().take(BATCH).collect()
}
