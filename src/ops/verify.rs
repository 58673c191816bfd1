//! Verify (ARCHITECTURE.md, "Operations"): bag structure, every manifest digest, missing and extra
//! payload files, the tagmanifest, Payload-Oxum, earlier versions, the
//! identifiers in bag-info and the alias link; then the collection against its
//! inventory: items it records but lacks (`missing`), items it does not know,
//! items changed behind ibi's back, and leftovers of killed writers. Problems are data: all are reported, none stops the
//! run. Items and files are hashed in parallel on all cores, streaming the
//! items, so memory stays flat.

use std::collections::{BTreeSet, HashMap};

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use rayon::iter::{ParallelBridge, ParallelIterator};

use crate::bag;
use crate::error::Result;
use crate::events::ChainOutcome;
use crate::id::{Ibip, RepositoryName};
pub use crate::ops::confirmed::Confirmed;
use crate::ops::confirmed::Hashes;
use crate::ops::report::{Outcome, ProblemCount, Reporter, Task};
use crate::ops::survey::{while_surveying, Survey};
use crate::problem::{Problem, ProblemKind};
use crate::store::inventory::FixityCheck;
use crate::store::{identity_digest, resolve, Listed, Slot, Status, Store};
use crate::sync::lock;

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct VerifySummary {
    pub items: u64,
    pub files: u64,
    pub bytes: u64,
    pub problems: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    items: AtomicU64,
    files: AtomicU64,
    bytes: AtomicU64,
    problems: ProblemCount,
    /// Checks not yet handed to the store's fixity dates.
    checks: Mutex<Vec<FixityCheck>>,
    /// The thread that hands full batches to the store, when there is one.
    keeper: Option<std::sync::mpsc::SyncSender<Vec<FixityCheck>>>,
    /// The aliases found pointing at their items, which the search for dangling
    /// aliases then need not read again.
    aliases_right: Mutex<Hashes<Ibip>>,
    /// The identities read from bags that equal the inventory's records.
    confirmed: Mutex<Hashes<(RepositoryName, String)>>,
}

/// How many fixity checks are written to the store at once: each batch is one
/// durable commit. 2,048 was tried at a million items on the disk: 985 fsyncs
/// instead of 4,614, but no clear gain in the wall time (0.91–0.98× in two
/// pairs, 1.07× sha256sum after) and 10–20 MiB more at the peak.
const CHECKS_AT_ONCE: usize = 256;

impl Counters {
    /// Runs `work` with counters whose full batches of checks are handed to the
    /// store on a thread of their own, at most two batches behind: each batch is
    /// one durable commit, and its fsync would otherwise stall a hashing thread.
    /// Every check `work` noted is kept, in order, before this returns.
    pub(crate) fn keeping<T>(
        store: &dyn Store,
        reporter: &dyn Reporter,
        work: impl FnOnce(&Counters) -> T,
    ) -> (T, VerifySummary) {
        let (sender, batches) = std::sync::mpsc::sync_channel::<Vec<FixityCheck>>(2);
        std::thread::scope(|scope| {
            let keeper = scope.spawn(move || batches.into_iter().for_each(|batch| Self::keep(store, &batch, reporter)));
            let counters = Counters { keeper: Some(sender), ..Default::default() };
            let out = work(&counters);
            counters.flush(store, reporter);
            let summary = counters.summary();
            drop(counters);
            keeper.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            (out, summary)
        })
    }

    pub(crate) fn summary(&self) -> VerifySummary {
        VerifySummary {
            items: self.items.load(Ordering::Relaxed),
            files: self.files.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            problems: self.problems.get(),
        }
    }

    pub(crate) fn report(&self, reporter: &dyn Reporter, problem: &Problem) {
        self.problems.report(reporter, problem);
    }

    pub(crate) fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// The identities this run confirmed so far, taken out.
    fn take_confirmed(&self) -> Confirmed {
        Confirmed(std::mem::take(&mut *lock(&self.confirmed)).sorted())
    }

    /// Notes one item's check; hands the checks to the store by the batch (all
    /// that are left with `flush`). The dates only order later rolling runs: a
    /// failure to keep them is told, never a problem of the collection.
    fn note_check(&self, store: &dyn Store, check: FixityCheck, reporter: &dyn Reporter) {
        let batch = {
            let mut checks = lock(&self.checks);
            checks.push(check);
            if checks.len() < CHECKS_AT_ONCE {
                return;
            }
            std::mem::take(&mut *checks)
        };
        self.hand_on(store, batch, reporter);
    }

    fn flush(&self, store: &dyn Store, reporter: &dyn Reporter) {
        let batch = std::mem::take(&mut *lock(&self.checks));
        self.hand_on(store, batch, reporter);
    }

    /// A batch to the keeper's thread, or kept now when there is none.
    fn hand_on(&self, store: &dyn Store, batch: Vec<FixityCheck>, reporter: &dyn Reporter) {
        match &self.keeper {
            Some(keeper) => {
                if let Err(unsent) = keeper.send(batch) {
                    Self::keep(store, &unsent.0, reporter);
                }
            }
            None => Self::keep(store, &batch, reporter),
        }
    }

    fn keep(store: &dyn Store, batch: &[FixityCheck], reporter: &dyn Reporter) {
        let Some(writer) = store.ledger().writer() else { return };
        if let Err(e) = writer.record_fixity(batch) {
            reporter.warning(&format!("the dates of {} fixity check(s) were not kept: {e}", batch.len()));
        }
    }
}

pub use crate::store::identifier_problems as check_identifiers;

/// Verifies one item fully, where its bytes are; returns its problems.
pub fn verify_item(store: &dyn Store, name: &RepositoryName, reporter: &dyn Reporter) -> (bag::BagCheck, Vec<Problem>) {
    store.check_item(name, &|n| reporter.bytes(n))
}

/// Whether an item is gone from its place (moved away by a concurrent migrate):
/// what reading it found is then no sign of damage.
pub fn vanished(store: &dyn Store, name: &RepositoryName) -> bool {
    matches!(store.slot(name), Ok(Slot::Empty))
}

/// What the inventory records of each item: its status and identity digest.
type Known = Mutex<HashMap<RepositoryName, (Status, String)>>;

/// What the inventory records of one item about to be verified.
pub(crate) enum Recorded {
    /// The collection keeps no inventory yet: nothing to compare.
    NoInventory,
    Unknown,
    As(Status, String),
}

impl Recorded {
    /// The record of `name` in `known` (taken out of it).
    pub(crate) fn taken_from(known: Option<&Known>, name: &RepositoryName) -> Recorded {
        match known {
            None => Recorded::NoInventory,
            Some(known) => lock(known).remove(name).map_or(Recorded::Unknown, |(s, d)| Recorded::As(s, d)),
        }
    }
}

/// Compares an item at its place with what the inventory records of it.
/// `checked` is the identity the bag's check read, if it read one (else it is read now).
fn against_inventory(
    store: &dyn Store,
    name: &RepositoryName,
    recorded: Recorded,
    checked: Option<String>,
) -> Option<Problem> {
    let label = name.to_string();
    let (status, digest) = match recorded {
        Recorded::NoInventory => return None,
        Recorded::As(status, digest) => (status, digest),
        Recorded::Unknown => {
            let detail = "the collection's inventory does not know this item (placed behind ibi's back?)";
            return Some(Problem::new(&label, None, ProblemKind::Unknown, detail));
        }
    };
    if !status.expected_on_disk() {
        let detail = format!(
            "the inventory records it as {}, but it is at its place: the inventory and the collection disagree \
             (resolvers serve the item at its place; a rebuilt inventory records it as it is)",
            status.as_str()
        );
        return Some(Problem::new(&label, None, ProblemKind::Unknown, detail));
    }
    match checked.map_or_else(|| identity_digest(store, name), Ok) {
        Ok(actual) if actual != digest => {
            let detail = format!("its identity is {actual}, the inventory records {digest}: changed behind ibi's back");
            Some(Problem::new(&label, Some(bag::TAGMANIFEST), ProblemKind::Changed, detail))
        }
        _ => None,
    }
}

/// The inventory's records by name, for the named items; `None` for a
/// collection without an inventory yet.
pub(crate) fn known_items(store: &dyn Store, names: &[RepositoryName]) -> Result<Option<Known>> {
    if !store.inventory().has_inventory() {
        return Ok(None);
    }
    let records = store.inventory().records(names)?.into_iter().flatten();
    let map = records.map(|r| (r.name.clone(), (r.status, r.current().digest.clone()))).collect();
    Ok(Some(Mutex::new(map)))
}

/// One entry of a whole verify's walk, with what the inventory records of it.
enum Job {
    Item(RepositoryName, Recorded),
    Stray { place: String, why: String },
}

/// How many walked entries are looked up in the inventory at once.
const LOOKUP_AT_ONCE: usize = 256;

/// The walk, its items paired with their records (looked up a page at a time), and
/// every walked name noted in `walked` as a 64-bit hash: memory that stays a few
/// bytes an item, where a map of every record held a kilobyte.
struct Paired<'a> {
    store: &'a dyn Store,
    walk: Box<dyn Iterator<Item = Result<Listed>> + Send + 'a>,
    inventory: bool,
    walked: &'a mut WalkedNames,
    ready: std::collections::VecDeque<Result<Job>>,
}

impl Iterator for Paired<'_> {
    type Item = Result<Job>;

    fn next(&mut self) -> Option<Result<Job>> {
        if self.ready.is_empty() {
            self.fill();
        }
        self.ready.pop_front()
    }
}

impl Paired<'_> {
    fn fill(&mut self) {
        let page: Vec<Result<Listed>> = self.walk.by_ref().take(LOOKUP_AT_ONCE).collect();
        let names: Vec<RepositoryName> =
            page.iter().filter_map(|l| if let Ok(Listed::Item(n)) = l { Some(n.clone()) } else { None }).collect();
        names.iter().for_each(|name| self.walked.note(name));
        let mut states = match self.inventory.then(|| self.store.inventory().recorded_states(&names)) {
            None => vec![],
            Some(Ok(found)) => found,
            Some(Err(e)) => return self.ready.push_back(Err(e)),
        }
        .into_iter();
        for listed in page {
            self.ready.push_back(listed.map(|listed| match listed {
                Listed::Stray { place, why } => Job::Stray { place, why },
                Listed::Item(name) if !self.inventory => Job::Item(name, Recorded::NoInventory),
                Listed::Item(name) => {
                    let state = states.next().flatten();
                    Job::Item(name, state.map_or(Recorded::Unknown, |(status, digest)| Recorded::As(status, digest)))
                }
            }));
        }
    }
}

type WalkedNames = Hashes<RepositoryName>;

/// How many recorded names the walk did not find are looked up at once.
const UNWALKED_AT_ONCE: usize = 256;

/// The records the inventory expects at their place but no walk found: items
/// that vanished. Only the records of names the walk did not find are read (a
/// GET each in S3).
fn vanished_records(store: &dyn Store, walked: &WalkedNames) -> Result<Vec<crate::store::ItemRecord>> {
    let mut vanished = Vec::new();
    if !store.inventory().has_inventory() {
        return Ok(vanished);
    }
    let mut unwalked =
        store.inventory().record_names().filter(|name| !matches!(name, Ok(name) if walked.contains(name)));
    loop {
        let page: Vec<RepositoryName> = unwalked.by_ref().take(UNWALKED_AT_ONCE).collect::<Result<_>>()?;
        if page.is_empty() {
            return Ok(vanished);
        }
        let records = store.inventory().records(&page)?.into_iter().flatten();
        vanished.extend(records.filter(|r| r.status.expected_on_disk()));
    }
}

/// Reports what the inventory expects but no walk found, and the aliases that
/// name an item the collection lacks: items that vanished. The two searches
/// (every record's name, every alias) run side by side: each reads on one core.
fn report_vanished(
    store: &dyn Store,
    walked: &WalkedNames,
    aliases_right: Hashes<Ibip>,
    counters: &Counters,
    reporter: &dyn Reporter,
) -> Result<()> {
    let (vanished, dangling) = std::thread::scope(|scope| {
        let vanished = scope.spawn(|| vanished_records(store, walked));
        let dangling = store.aliases().dangling_aliases(&|ibip| aliases_right.contains(ibip));
        (vanished.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)), dangling)
    });
    let (vanished, dangling) = (vanished?, dangling?);
    let mut reported = BTreeSet::new();
    for record in vanished {
        let detail =
            format!("the inventory records it as {}, but the collection lacks it: it vanished", record.status.as_str());
        counters.report(reporter, &Problem::new(&record.name.to_string(), None, ProblemKind::Missing, detail));
        reported.insert(record.name);
    }
    for (ibip, name) in dangling.into_iter().filter(|(_, name)| !reported.contains(name)) {
        let detail = format!("alias {ibip} names this item, but the collection does not hold it: it vanished");
        counters.report(reporter, &Problem::new(&name.to_string(), None, ProblemKind::Missing, detail));
    }
    Ok(())
}

/// Reports the first break in the event log's chain, if there is one.
fn report_chain(chain: Option<ChainOutcome>, counters: &Counters, reporter: &dyn Reporter) {
    if let Some(broken) = chain.as_ref().and_then(|c| c.broken.as_deref()) {
        counters.report(reporter, &Problem::new("event log", None, ProblemKind::BrokenLog, broken));
    }
    if let Some(why) = chain.as_ref().and_then(|c| c.unkept.as_deref()) {
        let note = "where this check of the event log ended was not kept (the next reads more of it)";
        reporter.warning(&format!("{note}: {why}"));
    }
}

/// Reports each item whose store keeps fewer replicas than its volumes ask for,
/// when the collection names the SeaweedFS cluster behind it (`ibi site here`):
/// the item reads well, but one more failure could lose it.
fn report_degraded(store: &dyn Store, counters: &Counters, reporter: &dyn Reporter) -> Result<()> {
    use crate::ops::placement::{Redundancy, DEGRADED, PLACEMENT_PAGE};
    let redundancy = Redundancy::of(store)?;
    if !redundancy.told() {
        return Ok(());
    }
    let mut names = store.inventory().record_names();
    loop {
        let page: Vec<RepositoryName> = names.by_ref().take(PLACEMENT_PAGE).collect::<Result<_>>()?;
        if page.is_empty() {
            return Ok(());
        }
        let degraded = match redundancy.degraded(&page) {
            Ok(degraded) => degraded,
            Err(e) => {
                let detail = format!("where its items are held could not be read: {e}");
                let master = redundancy.master();
                counters.report(reporter, &Problem::new(master, None, ProblemKind::Unreadable, detail));
                return Ok(());
            }
        };
        for (name, _) in page.iter().zip(degraded).filter(|(_, degraded)| *degraded) {
            counters.report(reporter, &Problem::new(&name.to_string(), None, ProblemKind::Degraded, DEGRADED));
        }
    }
}

pub(crate) fn verify_one(
    store: &dyn Store,
    name: &RepositoryName,
    recorded: Recorded,
    counters: &Counters,
    reporter: &dyn Reporter,
) {
    let (check, mut problems) = verify_item(store, name, reporter);
    let alias_right = !problems.iter().any(|p| p.kind == ProblemKind::BrokenAlias);
    let confirmed = match (&recorded, &check.identity) {
        (Recorded::As(Status::Present, digest), Some(read)) => (digest == read).then(|| digest.clone()),
        _ => None,
    };
    problems.extend(against_inventory(store, name, recorded, check.identity.clone()));
    // Only a whole bag confirms its identity: a tagmanifest that still reads as
    // recorded over damaged payload vouches for nothing.
    let confirmed = confirmed.filter(|_| problems.iter().all(|p| p.kind == ProblemKind::BrokenAlias));
    if !problems.is_empty() && vanished(store, name) {
        reporter.item(&name, Outcome::Vanished);
        return;
    }
    if let Some(ibip) = check.info.as_ref().and_then(crate::store::ibip_in).filter(|_| alias_right) {
        lock(&counters.aliases_right).note(&ibip);
    }
    if let Some(identity) = confirmed {
        lock(&counters.confirmed).note(&(name, identity.as_str()));
    }
    let date = crate::store::inventory::fixity_date(crate::id::Timestamp::now());
    let fixity = FixityCheck::read(name.clone(), date, problems.is_empty(), check.files, check.bytes);
    counters.note_check(store, fixity, reporter);
    counters.items.fetch_add(1, Ordering::Relaxed);
    counters.files.fetch_add(check.files, Ordering::Relaxed);
    counters.bytes.fetch_add(check.bytes, Ordering::Relaxed);
    for problem in &problems {
        counters.report(reporter, problem);
    }
    reporter.item(&name, if problems.is_empty() { Outcome::Ok } else { Outcome::Damaged });
}

/// Verifies every item the walk finds, paired with the inventory's records;
/// returns the names it found.
fn verify_walked(store: &dyn Store, counters: &Counters, reporter: &dyn Reporter) -> Result<WalkedNames> {
    let mut walked = WalkedNames::default();
    let paired = Paired {
        store,
        walk: store.walk(),
        inventory: store.inventory().has_inventory(),
        walked: &mut walked,
        ready: Default::default(),
    };
    let check_all = || {
        paired.par_bridge().try_for_each(|job| -> Result<()> {
            match job? {
                Job::Item(name, recorded) => verify_one(store, &name, recorded, counters, reporter),
                Job::Stray { place, why } => {
                    counters.report(reporter, &Problem::new(&place, None, ProblemKind::StrayEntry, why))
                }
            }
            Ok(())
        })
    };
    match checking_pool() {
        Some(pool) => pool.install(check_all)?,
        None => check_all()?,
    }
    Ok(walked.sorted())
}

/// The pool a whole verify checks items on: twice as many threads as the global
/// pool (at most 16 more). A check waits on the disk for each item's inodes and
/// blocks, which at a million items the walk has pushed out of the cache, and
/// a thread waiting there leaves its core idle: on two cores, two threads used
/// 1.44 cores, and three or four checked a million items in 71–72 s against
/// 78–81 s. Made once, kept for the process; `None` (the global pool) if it
/// cannot be made.
fn checking_pool() -> Option<&'static rayon::ThreadPool> {
    static POOL: std::sync::OnceLock<Option<rayon::ThreadPool>> = std::sync::OnceLock::new();
    POOL.get_or_init(|| {
        let cores = rayon::current_num_threads();
        let threads = cores + cores.min(16);
        rayon::ThreadPoolBuilder::new().num_threads(threads).thread_name(|i| format!("ibi-check-{i}")).build().ok()
    })
    .as_ref()
}

/// Verifies the named items (names or IBIps), or every item when `names` is empty.
pub fn verify(store: &dyn Store, names: &[String], reporter: &dyn Reporter) -> Result<VerifySummary> {
    verify_confirming(store, names, reporter).map(|(summary, _)| summary)
}

/// `verify`, with the identities it confirmed, for the witness made after it.
pub fn verify_confirming(
    store: &dyn Store,
    names: &[String],
    reporter: &dyn Reporter,
) -> Result<(VerifySummary, Confirmed)> {
    checking(store, reporter, |counters| verify_counted(store, names, counters, reporter))
}

/// Runs the checks `work` makes (a whole, named or rolling verify) as one
/// reported task, their fixity dates kept on a thread of their own: the
/// summary, and the identities the checks confirmed.
pub(crate) fn checking(
    store: &dyn Store,
    reporter: &dyn Reporter,
    work: impl FnOnce(&Counters) -> Result<()>,
) -> Result<(VerifySummary, Confirmed)> {
    reporter.begin(Task::Verify);
    let (confirmed, summary) =
        Counters::keeping(store, reporter, |counters| work(counters).map(|()| counters.take_confirmed()));
    let confirmed = confirmed?;
    reporter.end();
    Ok((summary, confirmed))
}

/// `verify`'s work, counted in `counters`.
fn verify_counted(store: &dyn Store, names: &[String], counters: &Counters, reporter: &dyn Reporter) -> Result<()> {
    while_surveying(reporter, Survey::Items(store, names), || -> Result<()> {
        if names.is_empty() {
            for problem in store.leftovers() {
                counters.report(reporter, &problem);
            }
            // The chain check reads the new events and a window of older ones on
            // one core: it runs beside the items' checks, while the other core hashes.
            // The search for dangling aliases follows the walk: it then reads only
            // the links the items' checks did not find right.
            let chain = std::thread::scope(|scope| -> Result<Option<ChainOutcome>> {
                let chain = scope.spawn(|| crate::ops::log::check_chain(store, crate::ops::log::CHAIN_WINDOW_LEAST));
                let walked = verify_walked(store, counters, reporter)?;
                let right = std::mem::take(&mut *lock(&counters.aliases_right)).sorted();
                report_vanished(store, &walked, right, counters, reporter)?;
                chain.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })?;
            report_chain(chain, counters, reporter);
            report_degraded(store, counters, reporter)?;
        } else {
            let mut items: Vec<RepositoryName> = names.iter().map(|n| resolve(store, n)).collect::<Result<_>>()?;
            let mut seen = std::collections::BTreeSet::new();
            items.retain(|name| seen.insert(name.clone()));
            let known = known_items(store, &items)?;
            for name in &items {
                verify_one(store, name, Recorded::taken_from(known.as_ref(), name), counters, reporter);
            }
        }
        Ok(())
    })
}
