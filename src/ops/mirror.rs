//! `mirror SRC DST` (ARCHITECTURE.md, "Operations"): a one-way sync built for
//! cron that only ever moves an item forward. A merge of the two sorted item
//! walks copies items DST lacks and replaces a DST item only with a later
//! version of the same item (DST's identity in SRC's history); anything else
//! under one name is a conflict, left untouched. Nothing is ever deleted: an
//! item SRC's inventory expects but SRC lacks is a problem of SRC. A no-op run
//! reads directory entries and the two inventories. `--checksum`
//! re-verifies DST payloads and repairs damaged items from SRC. `--watch`
//! re-syncs when `notify` reports changes in SRC, debounced.

use std::cmp::Ordering as Order;
use std::iter::Peekable;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::events::EventKind;
use crate::id::RepositoryName;
use crate::ops::driver::{pipeline, plan_copy, Driver, Plan, RunResult, Tally, TransferSummary};
use crate::ops::minting::check_pair;
use crate::ops::report::{Outcome, Reporter, Task};
use crate::ops::survey::{while_surveying, Survey};
use crate::ops::verify::verify_item;
use crate::problem::{Problem, ProblemKind};
use crate::store::{identity_digest, item_ibip, items, ItemRecord, Listed, LockWait, Slot, Store, Writer};

#[derive(Debug, Clone, Copy)]
pub struct MirrorOptions {
    pub dry_run: bool,
    pub wait: LockWait,
    pub checksum: bool,
}

/// One step of the merge: an item in SRC only, in both, or in DST only. A DST-only
/// item is `shadowed` when it lies under a SRC entry that could not be read: SRC may
/// hold it, so it must never be deleted.
enum Pair {
    Src(RepositoryName),
    Both(RepositoryName),
    Dst { name: RepositoryName, shadowed: bool },
}

/// Merges the SRC walk (items and strays) with the DST items, both sorted by name.
struct Merge<'r, A: Iterator<Item = Result<Listed>>, B: Iterator<Item = Result<RepositoryName>>> {
    src: Peekable<A>,
    dst: Peekable<B>,
    /// Name prefixes (`a/b/`) of SRC entries that could not be read.
    shadows: Vec<String>,
    tally: &'r Tally,
    reporter: &'r dyn Reporter,
}

impl<A: Iterator<Item = Result<Listed>>, B: Iterator<Item = Result<RepositoryName>>> Merge<'_, A, B> {
    /// Reports a SRC stray and remembers its place, so DST items under it are kept.
    fn shadow(&mut self, rel: String, why: String) {
        let detail = format!("in SRC: {why}; DST items under it are kept");
        self.tally.report(self.reporter, &Problem::new(&rel, None, ProblemKind::StrayEntry, detail));
        self.shadows.push(format!("{rel}/"));
    }

    fn shadowed(&self, name: &RepositoryName) -> bool {
        let name = format!("{name}/");
        self.shadows.iter().any(|prefix| name.starts_with(prefix.as_str()))
    }
}

impl<A: Iterator<Item = Result<Listed>>, B: Iterator<Item = Result<RepositoryName>>> Iterator for Merge<'_, A, B> {
    type Item = Result<Pair>;

    fn next(&mut self) -> Option<Self::Item> {
        while let Some(Ok(Listed::Stray { .. })) = self.src.peek() {
            if let Some(Ok(Listed::Stray { place, why })) = self.src.next() {
                self.shadow(place, why);
            }
        }
        let order = match (self.src.peek(), self.dst.peek()) {
            (None, None) => return None,
            (Some(Err(_)), _) => return self.src.next().and_then(|r| r.err()).map(Err),
            (_, Some(Err(_))) => return self.dst.next().and_then(|r| r.err()).map(Err),
            (Some(Ok(_)), None) => Order::Less,
            (None, Some(Ok(_))) => Order::Greater,
            (Some(Ok(Listed::Item(s))), Some(Ok(d))) => s.cmp(d),
            (Some(Ok(Listed::Stray { .. })), _) => unreachable!("strays were taken above"),
        };
        let take_src = |merge: &mut Self| match merge.src.next() {
            Some(Ok(Listed::Item(name))) => Some(name),
            _ => None,
        };
        Some(Ok(match order {
            Order::Less => Pair::Src(take_src(self)?),
            Order::Greater => {
                let name = self.dst.next()?.ok()?;
                let shadowed = self.shadowed(&name);
                Pair::Dst { name, shadowed }
            }
            Order::Equal => {
                self.dst.next()?.ok()?;
                Pair::Both(take_src(self)?)
            }
        }))
    }
}

/// Decides, for one pair of the merge, what the mirror must do.
struct Planner<'a> {
    src: &'a dyn Store,
    dst: &'a dyn Store,
    options: &'a MirrorOptions,
    tally: &'a Tally,
    reporter: &'a dyn Reporter,
}

impl Planner<'_> {
    fn both(&self, name: RepositoryName, (src_identity, dst_identity): Identities) -> Result<Plan> {
        let src_digest = match src_identity {
            Ok(digest) => digest,
            Err(e) => {
                let detail = format!("in SRC: {e}; DST's copy is kept");
                self.tally
                    .report(self.reporter, &Problem::new(&name.to_string(), None, ProblemKind::Unreadable, detail));
                return Ok(Plan::Settled(name, false));
            }
        };
        if dst_identity.ok().as_ref() != Some(&src_digest) {
            return Ok(self.forward(name));
        }
        if self.options.checksum {
            return Ok(self.checksum(name));
        }
        Tally::add(&self.tally.skipped, 1);
        self.reporter.item(&name, Outcome::Unchanged);
        Ok(Plan::Settled(name, true))
    }

    /// `--checksum` on an item both hold with one identity: a rotten SRC copy is
    /// reported and DST's kept; a damaged DST copy is reported with its reason and
    /// repaired from SRC.
    fn checksum(&self, name: RepositoryName) -> Plan {
        let label = name.to_string();
        let (_, src_problems) = verify_item_quietly(self.src, &name);
        if !src_problems.is_empty() {
            for p in &src_problems {
                let detail = format!("in SRC: {}; DST's copy is kept", p.detail);
                self.tally.report(self.reporter, &Problem::new(&label, p.file.as_deref(), p.kind, detail));
            }
            return Plan::Settled(name, false);
        }
        let (_, dst_problems) = verify_item(self.dst, &name, self.reporter);
        if dst_problems.is_empty() {
            Tally::add(&self.tally.skipped, 1);
            self.reporter.item(&label, Outcome::Unchanged);
            return Plan::Settled(name, true);
        }
        let why: Vec<String> =
            dst_problems.iter().map(|p| format!("{} {}", p.kind.as_str(), p.file.as_deref().unwrap_or(""))).collect();
        let detail = format!("DST copy was damaged ({}); repaired from SRC", why.join(", ").trim());
        self.tally.report(self.reporter, &Problem::new(&label, None, ProblemKind::Repaired, detail));
        Plan::Replace(name, "DST copy is damaged")
    }

    /// Two copies of one name with different identities: DST's copy is replaced
    /// only by a later version of the same item, one whose history holds DST's
    /// current identity (a tombstone is a version too). Anything else is a conflict,
    /// reported and left untouched: DST ahead, diverged histories, unrelated items.
    fn forward(&self, name: RepositoryName) -> Plan {
        let label = name.to_string();
        let record = |store: &dyn Store| ItemRecord::from_bag(store.item_files(&name).as_ref(), &name);
        let why = match (record(self.src), record(self.dst)) {
            (Ok(src), Ok(dst)) if src.follows(&dst.current().digest) => match self.carries(&name, &src, &dst) {
                true => return Plan::Replace(name, "SRC holds a later version"),
                false => format!(
                    "SRC's later version does not carry the bytes of DST's version {} (purged, or its history was \
                     made by hand): replacing would drop a version only DST holds",
                    dst.current().number
                ),
            },
            (Ok(src), Ok(dst)) if dst.follows(&src.current().digest) => {
                format!("DST is ahead: version {} there, {} in SRC", dst.current().number, src.current().number)
            }
            (Ok(src), Ok(dst)) if src.versions.iter().any(|v| dst.versions.iter().any(|w| w.digest == v.digest)) => {
                "the versions in SRC and DST have diverged from a common version".to_string()
            }
            (Ok(_), Ok(_)) => "DST holds a different item under this name (no version in common)".to_string(),
            (Err(e), _) => format!("in SRC: {e}"),
            (_, Err(e)) => format!("in DST: {e}"),
        };
        Tally::add(&self.tally.conflicts, 1);
        let detail = format!("{why}; DST's copy is left untouched");
        self.tally.report(self.reporter, &Problem::new(&label, None, ProblemKind::Conflict, detail));
        Plan::Settled(name, false)
    }

    /// Whether SRC's item carries DST's current version among its earlier versions
    /// (`ibi-versions/<N>/`, whose identity is DST's): only then may it replace DST's
    /// copy, which would otherwise lose bytes that SRC does not hold.
    fn carries(&self, name: &RepositoryName, src: &ItemRecord, dst: &ItemRecord) -> bool {
        let digest = &dst.current().digest;
        let Some(version) = src.versions.iter().find(|v| v.digest == *digest) else { return false };
        let tags = crate::bag::history::History::version_dir(version.number);
        let found = self.src.item_files(name).digests(&format!("{tags}/{}", crate::bag::TAGMANIFEST), &[]);
        found.is_ok_and(|d| d.sha256() == digest)
    }

    /// An item DST holds and SRC does not is never deleted. When SRC's inventory
    /// (or alias) says SRC should hold it, SRC lost it: a problem of SRC.
    fn dst_only(&self, name: RepositoryName, src_record: Option<&ItemRecord>) -> Plan {
        let expected = src_record.is_some_and(|r| r.status.expected_on_disk()) || self.src_expects(&name);
        if expected {
            let detail = "SRC's inventory records this item but SRC lacks it (it vanished): DST's copy is kept; \
                          `ibi repair SRC --from DST` restores it";
            self.tally.report(self.reporter, &Problem::new(&name.to_string(), None, ProblemKind::Missing, detail));
        }
        Plan::Settled(name, false)
    }

    /// A SRC item DST lacks. When DST's inventory knows the name (DST lost it, or
    /// moved it away), it is copied only as the same item or a later version of it.
    fn src_only(&self, name: RepositoryName, dst_record: Option<&ItemRecord>, dst_slot: Slot) -> Result<Plan> {
        if let Some(known) = dst_record {
            let src = ItemRecord::from_bag(self.src.item_files(&name).as_ref(), &name);
            let digest = &known.current().digest;
            if !src.as_ref().is_ok_and(|src| src.current().digest == *digest || src.follows(digest)) {
                Tally::add(&self.tally.conflicts, 1);
                let detail = "DST's inventory records a different item under this name; nothing copied";
                self.tally.report(self.reporter, &Problem::new(&name.to_string(), None, ProblemKind::Conflict, detail));
                return Ok(Plan::Settled(name, false));
            }
        }
        match dst_slot {
            // A symlink or file planted at the item's place: swapped out, never followed.
            Slot::Foreign(_) => Ok(Plan::Replace(name, "not an item directory in DST")),
            slot => plan_copy((self.src, name), (self.dst, slot), self.tally, self.reporter),
        }
    }

    /// Whether SRC's alias of a DST-only item still names it: SRC held it and lost
    /// it, which is never a reason to delete the copy (nor is an unreadable alias).
    fn src_expects(&self, name: &RepositoryName) -> bool {
        let Ok(Some(ibip)) = item_ibip(self.dst, name) else { return false };
        match self.src.aliases().alias(&ibip) {
            Ok(Some(target)) => target == *name,
            Ok(None) => false,
            Err(_) => true,
        }
    }

    fn plan(&self, pair: Pair, known: Known) -> Result<Plan> {
        match (pair, known) {
            (Pair::Src(name), Known::Absent(record, slot)) => self.src_only(name, record.as_ref(), slot),
            (Pair::Both(name), Known::Identities(ids)) => self.both(name, ids),
            (Pair::Both(name), _) => {
                let ids = (identity_digest(self.src, &name), identity_digest(self.dst, &name));
                self.both(name, ids)
            }
            (Pair::Dst { name, shadowed: false }, Known::Record(record)) => Ok(self.dst_only(name, record.as_ref())),
            (Pair::Src(name), _) => {
                let slot = self.dst.slot(&name)?;
                self.src_only(name, None, slot)
            }
            (Pair::Dst { name, .. }, _) => Ok(Plan::Settled(name, false)),
        }
    }
}

/// What one batch per side told the planner about a pair: both identity digests
/// (an item both hold), SRC's record (an item only DST holds), or DST's record
/// and slot (an item only SRC holds).
enum Known {
    Identities(Identities),
    Record(Option<ItemRecord>),
    Absent(Option<ItemRecord>, Slot),
    Nothing,
}

/// The identity digests of one item in SRC and in DST.
type Identities = (Result<String>, Result<String>);

impl Planner<'_> {
    /// Plans a chunk of the merge; the identity digests of the items both sides hold
    /// are asked for in one batch per side (one round trip for a far store).
    fn plan_chunk(&self, chunk: Vec<Pair>) -> Result<Vec<Plan>> {
        let pick = |want: fn(&Pair) -> Option<&RepositoryName>| -> Vec<RepositoryName> {
            chunk.iter().filter_map(want).cloned().collect()
        };
        let both = pick(|p| if let Pair::Both(n) = p { Some(n) } else { None });
        let src_only = pick(|p| if let Pair::Src(n) = p { Some(n) } else { None });
        let dst_only = pick(|p| if let Pair::Dst { name, .. } = p { Some(name) } else { None });
        let mut src_ids = self.src.identities(&both).into_iter();
        let mut dst_ids = self.dst.identities(&both).into_iter();
        let mut dst_records = self.dst.inventory().records(&src_only)?.into_iter();
        let mut dst_slots = self.dst.slots(&src_only)?.into_iter();
        let mut src_records = self.src.inventory().records(&dst_only)?.into_iter();
        let paired: Vec<(Pair, Known)> = chunk
            .into_iter()
            .map(|pair| {
                let known = match pair {
                    Pair::Both(_) => src_ids.next().zip(dst_ids.next()).map(Known::Identities),
                    Pair::Src(_) => dst_records.next().zip(dst_slots.next()).map(|(r, s)| Known::Absent(r, s)),
                    Pair::Dst { .. } => src_records.next().map(Known::Record),
                };
                (pair, known.unwrap_or(Known::Nothing))
            })
            .collect();
        // Pairs both sides hold with one identity settle at once (a no-op run is all
        // of them); the rest may read or copy, in parallel.
        let settled = |pair: &Pair, known: &Known| matches!((pair, known), (Pair::Both(_), Known::Identities((Ok(s), Ok(d)))) if s == d && !self.options.checksum);
        if paired.iter().all(|(pair, known)| settled(pair, known)) {
            return paired.into_iter().map(|(pair, known)| self.plan(pair, known)).collect();
        }
        paired.into_par_iter().map(|(pair, known)| self.plan(pair, known)).collect()
    }
}

/// A SRC item's own bag problems (its aliases are SRC's business).
fn verify_item_quietly(src: &dyn Store, name: &RepositoryName) -> (crate::bag::BagCheck, Vec<Problem>) {
    let check = crate::bag::verify_bag(src.item_files(name).as_ref(), &name.to_string(), &|_| {});
    let problems = check.problems.clone();
    (check, problems)
}

/// Plans made ahead of the driver: the merge is planned `PLAN_AHEAD` pairs at a
/// time (one batch of identities and records per side), and the driver gets
/// batches of at most DST's `TransferShape::items_per_batch` items to copy, with any
/// number of settled ones, so a run with little to do crosses to the commit
/// thread rarely.
#[derive(Default)]
struct Planned {
    ahead: std::collections::VecDeque<Plan>,
    exhausted: bool,
}

/// How many pairs of the merge are planned together.
const PLAN_AHEAD: usize = 1024;
/// The most plans handed to the driver at once.
const MOST_PLANS: usize = 8 * PLAN_AHEAD;

impl Planned {
    fn next_batch(
        &mut self,
        merge: &mut impl Iterator<Item = Result<Pair>>,
        planner: &Planner,
    ) -> Result<Option<Vec<Plan>>> {
        let mut batch = Vec::new();
        let mut to_copy = 0;
        let most = planner.dst.transfer_shape().items_per_batch;
        loop {
            while to_copy < most && batch.len() < MOST_PLANS {
                let Some(plan) = self.ahead.pop_front() else { break };
                to_copy += usize::from(!matches!(plan, Plan::Settled(..)));
                batch.push(plan);
            }
            if to_copy >= most || batch.len() >= MOST_PLANS || (self.ahead.is_empty() && self.exhausted) {
                return Ok((!batch.is_empty()).then_some(batch));
            }
            let pairs: Vec<Pair> = merge.by_ref().take(PLAN_AHEAD).collect::<Result<_>>()?;
            self.exhausted = pairs.len() < PLAN_AHEAD;
            if !pairs.is_empty() {
                self.ahead.extend(planner.plan_chunk(pairs)?);
            }
        }
    }
}

/// One sync pass, writing DST through `writer` (none: a dry run).
fn sync(
    src: &dyn Store,
    (dst, writer): (&dyn Store, Option<&dyn Writer>),
    options: &MirrorOptions,
    reporter: &dyn Reporter,
) -> RunResult {
    let tally = Tally::default();
    let planner = Planner { src, dst, options, tally: &tally, reporter };
    let driver = Driver { src, dst, writer, tally: &tally, reporter, event: EventKind::MirrorIn };
    reporter.begin(Task::Mirror);
    let run = while_surveying(reporter, Survey::Items(src, &[]), || -> Result<()> {
        let mut merge = Merge {
            src: src.walk().peekable(),
            dst: items(dst).peekable(),
            shadows: Vec::new(),
            tally: &tally,
            reporter,
        };
        let mut planned = Planned::default();
        let next_plans = || planned.next_batch(&mut merge, &planner);
        pipeline(&driver, next_plans, |_| Ok(()))?;
        Ok(())
    });
    reporter.end();
    tally.finish(run)
}

/// Mirrors SRC into DST once.
pub fn mirror(src: &dyn Store, dst: &dyn Store, options: &MirrorOptions, reporter: &dyn Reporter) -> RunResult {
    check_pair(src, dst)?;
    if !options.dry_run {
        crate::ops::minting::learn_pair(src, dst, reporter)?;
    }
    let writer = if options.dry_run { None } else { Some(dst.begin_write(options.wait)?) };
    sync(src, (dst, writer.as_deref()), options, reporter)
}

/// Mirrors once, then again after each burst of changes in SRC (quiet for
/// `debounce`), until `stop` is set. Calls `on_pass` after every pass.
pub fn mirror_watch(
    src: &dyn Store,
    dst: &dyn Store,
    options: &MirrorOptions,
    reporter: &dyn Reporter,
    stop: &AtomicBool,
    debounce: Duration,
    on_pass: &mut dyn FnMut(&TransferSummary),
) -> Result<()> {
    check_pair(src, dst)?;
    if !options.dry_run {
        crate::ops::minting::learn_pair(src, dst, reporter)?;
    }
    let writer = if options.dry_run { None } else { Some(dst.begin_write(options.wait)?) };
    let dst = (dst, writer.as_deref());
    let root = src.local_root().ok_or_else(|| Error::Invalid {
        what: "mirror".into(),
        problem: format!("watching {} for changes needs a local collection", src.location()),
    })?;
    let (_watcher, rx) = crate::fsx::watch_tree(root)?;
    pass(sync(src, dst, options, reporter), on_pass)?;
    while !stop.load(Ordering::SeqCst) {
        if rx.recv_timeout(Duration::from_millis(200)).is_err() {
            continue;
        }
        // Debounce: wait until SRC has been quiet for `debounce`, or stop is asked.
        while !stop.load(Ordering::SeqCst) && rx.recv_timeout(debounce).is_ok() {}
        if stop.load(Ordering::SeqCst) {
            break;
        }
        pass(sync(src, dst, options, reporter), on_pass)?;
    }
    Ok(())
}

/// Hands a pass's summary to `on_pass`, that of a pass that stopped too, then its error.
fn pass(result: RunResult, on_pass: &mut dyn FnMut(&TransferSummary)) -> Result<()> {
    match result {
        Ok(summary) => {
            on_pass(&summary);
            Ok(())
        }
        Err(stopped) => {
            on_pass(&stopped.done);
            Err(stopped.error)
        }
    }
}
