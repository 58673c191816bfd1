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
use crate::id::RepositoryName;
use crate::ops::report::{Outcome, ProblemCount, Reporter, Task};
use crate::ops::survey::{while_surveying, Survey};
use crate::problem::{Problem, ProblemKind};
use crate::store::inventory::FixityCheck;
use crate::store::{identity_digest, resolve, ItemRecord, Listed, Slot, Status, Store};
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
}

/// How many fixity checks are written to the store at once.
const CHECKS_AT_ONCE: usize = 256;

impl Counters {
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
        Self::keep(store, &batch, reporter);
    }

    pub(crate) fn flush(&self, store: &dyn Store, reporter: &dyn Reporter) {
        let batch = std::mem::take(&mut *lock(&self.checks));
        Self::keep(store, &batch, reporter);
    }

    fn keep(store: &dyn Store, batch: &[FixityCheck], reporter: &dyn Reporter) {
        if let Err(e) = store.record_fixity(batch) {
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

/// Compares an item at its place with what the inventory records of it.
fn against_inventory(store: &dyn Store, name: &RepositoryName, known: Option<&Known>) -> Option<Problem> {
    let label = name.to_string();
    let recorded = lock(known?).remove(name);
    let Some((status, digest)) = recorded else {
        let detail = "the collection's inventory does not know this item (placed behind ibi's back?)";
        return Some(Problem::new(&label, None, ProblemKind::Unknown, detail));
    };
    if !status.expected_on_disk() {
        let detail = format!(
            "the inventory records it as {}, but it is at its place: the inventory and the collection disagree \
             (resolvers serve the item at its place; a rebuilt inventory records it as it is)",
            status.as_str()
        );
        return Some(Problem::new(&label, None, ProblemKind::Unknown, detail));
    }
    match identity_digest(store, name) {
        Ok(actual) if actual != digest => {
            let detail = format!("its identity is {actual}, the inventory records {digest}: changed behind ibi's back");
            Some(Problem::new(&label, Some(bag::TAGMANIFEST), ProblemKind::Changed, detail))
        }
        _ => None,
    }
}

/// The inventory's records by name, for the items of `names` (all when empty);
/// `None` for a collection without an inventory yet.
pub(crate) fn known_items(store: &dyn Store, names: &[RepositoryName]) -> Result<Option<Known>> {
    if !store.has_inventory() {
        return Ok(None);
    }
    let records: Vec<ItemRecord> = if names.is_empty() {
        store.all_records().collect::<Result<_>>()?
    } else {
        store.records(names)?.into_iter().flatten().collect()
    };
    let map = records.into_iter().map(|r| (r.name.clone(), (r.status, r.current().digest.clone()))).collect();
    Ok(Some(Mutex::new(map)))
}

/// Reports what the inventory expects but no walk found: items that vanished.
fn report_vanished(
    store: &dyn Store,
    known: Option<Known>,
    counters: &Counters,
    reporter: &dyn Reporter,
) -> Result<()> {
    let mut reported = BTreeSet::new();
    let left = known.map(|k| k.into_inner().unwrap_or_else(|p| p.into_inner())).unwrap_or_default();
    for (name, (status, _)) in left.into_iter().filter(|(_, (status, _))| status.expected_on_disk()) {
        let detail =
            format!("the inventory records it as {}, but the collection lacks it: it vanished", status.as_str());
        counters.report(reporter, &Problem::new(&name.to_string(), None, ProblemKind::Missing, detail));
        reported.insert(name);
    }
    for (ibip, name) in store.dangling_aliases()?.into_iter().filter(|(_, name)| !reported.contains(name)) {
        let detail = format!("alias {ibip} names this item, but the collection does not hold it: it vanished");
        counters.report(reporter, &Problem::new(&name.to_string(), None, ProblemKind::Missing, detail));
    }
    Ok(())
}

/// Reports the first break in the event log's chain, if there is one.
fn check_log(store: &dyn Store, counters: &Counters, reporter: &dyn Reporter) -> Result<()> {
    if let Some(broken) = crate::ops::log::check_chain(store)?.as_ref().and_then(|c| c.broken()) {
        counters.report(reporter, &Problem::new("event log", None, ProblemKind::BrokenLog, broken));
    }
    Ok(())
}

pub(crate) fn verify_one(
    store: &dyn Store,
    name: &RepositoryName,
    known: Option<&Known>,
    counters: &Counters,
    reporter: &dyn Reporter,
) {
    let (check, mut problems) = verify_item(store, name, reporter);
    problems.extend(against_inventory(store, name, known));
    if !problems.is_empty() && vanished(store, name) {
        reporter.item(&name.to_string(), Outcome::Vanished);
        return;
    }
    let date = crate::store::inventory::fixity_date(crate::id::Timestamp::now());
    let fixity =
        FixityCheck { name: name.clone(), date, ok: problems.is_empty(), files: check.files, bytes: check.bytes };
    counters.note_check(store, fixity, reporter);
    counters.items.fetch_add(1, Ordering::Relaxed);
    counters.files.fetch_add(check.files, Ordering::Relaxed);
    counters.bytes.fetch_add(check.bytes, Ordering::Relaxed);
    for problem in &problems {
        counters.report(reporter, problem);
    }
    reporter.item(&name.to_string(), if problems.is_empty() { Outcome::Ok } else { Outcome::Damaged });
}

/// Verifies the named items (names or IBIps), or every item when `names` is empty.
pub fn verify(store: &dyn Store, names: &[String], reporter: &dyn Reporter) -> Result<VerifySummary> {
    let counters = Counters::default();
    reporter.begin(Task::Verify);
    while_surveying(reporter, Survey::Items(store, names), || -> Result<()> {
        if names.is_empty() {
            for problem in store.leftovers() {
                counters.report(reporter, &problem);
            }
            let known = known_items(store, &[])?;
            store.walk().par_bridge().try_for_each(|listed| -> Result<()> {
                match listed? {
                    Listed::Item(name) => verify_one(store, &name, known.as_ref(), &counters, reporter),
                    Listed::Stray { place, why } => {
                        counters.report(reporter, &Problem::new(&place, None, ProblemKind::StrayEntry, why))
                    }
                }
                Ok(())
            })?;
            report_vanished(store, known, &counters, reporter)?;
            check_log(store, &counters, reporter)?;
        } else {
            let mut items: Vec<RepositoryName> = names.iter().map(|n| resolve(store, n)).collect::<Result<_>>()?;
            let mut seen = std::collections::BTreeSet::new();
            items.retain(|name| seen.insert(name.clone()));
            let known = known_items(store, &items)?;
            items.iter().for_each(|name| verify_one(store, name, known.as_ref(), &counters, reporter));
        }
        Ok(())
    })?;
    counters.flush(store, reporter);
    reporter.end();
    Ok(counters.summary())
}
