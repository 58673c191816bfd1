//! Verify (ARCHITECTURE.md, "Operations"): bag structure, every manifest digest, missing and extra
//! payload files, the tagmanifest, Payload-Oxum, the identifiers in bag-info
//! and the alias link. Problems are data: all are reported, none stops the
//! run. Items and files are hashed in parallel on all cores, streaming the
//! items, so memory stays flat.

use std::sync::atomic::{AtomicU64, Ordering};

use rayon::iter::{ParallelBridge, ParallelIterator};

use crate::bag;
use crate::error::Result;
use crate::id::RepositoryName;
use crate::ops::report::{Outcome, ProblemCount, Reporter, Task};
use crate::ops::survey::{while_surveying, Survey};
use crate::problem::{Problem, ProblemKind};
use crate::store::{ibip_in, resolve, Listed, Slot, Store};

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct VerifySummary {
    pub items: u64,
    pub files: u64,
    pub bytes: u64,
    pub problems: u64,
}

#[derive(Default)]
struct Counters {
    items: AtomicU64,
    files: AtomicU64,
    bytes: AtomicU64,
    problems: ProblemCount,
}

impl Counters {
    fn summary(&self) -> VerifySummary {
        VerifySummary {
            items: self.items.load(Ordering::Relaxed),
            files: self.files.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            problems: self.problems.get(),
        }
    }

    fn report(&self, reporter: &dyn Reporter, problem: &Problem) {
        self.problems.report(reporter, problem);
    }
}

/// Problems of an item beyond its bag: identifiers in bag-info and the alias link.
pub fn check_identifiers(store: &dyn Store, name: &RepositoryName, info: &bag::BagInfo) -> Vec<Problem> {
    let label = name.to_string();
    let mut problems = Vec::new();
    let names: Vec<RepositoryName> =
        info.values("External-Identifier").filter_map(|v| RepositoryName::parse(v).ok()).collect();
    if !names.contains(name) {
        let detail = "no External-Identifier in bag-info.txt names this item";
        problems.push(Problem::new(&label, Some(bag::BAG_INFO_TXT), ProblemKind::IdentifierMismatch, detail));
    }
    if let Some(ibip) = ibip_in(info) {
        if ibip.date() != name.date() {
            let detail = format!("IBIp {ibip} has date {}, the name has {}", ibip.date(), name.date());
            problems.push(Problem::new(&label, Some(bag::BAG_INFO_TXT), ProblemKind::IdentifierMismatch, detail));
        }
        if let Some(why) = store.alias_problem(&ibip, name) {
            problems.push(Problem::new(&label, None, ProblemKind::BrokenAlias, why));
        }
    }
    problems
}

/// Verifies one item fully; returns its problems.
pub fn verify_item(store: &dyn Store, name: &RepositoryName, reporter: &dyn Reporter) -> (bag::BagCheck, Vec<Problem>) {
    let check = bag::verify_bag(store.item_files(name).as_ref(), &name.to_string(), &|n| reporter.bytes(n));
    let mut problems = check.problems.clone();
    if let Some(info) = &check.info {
        problems.extend(check_identifiers(store, name, info));
    }
    (check, problems)
}

/// Whether an item is gone from its place (moved away by a concurrent migrate):
/// what reading it found is then no sign of damage.
pub fn vanished(store: &dyn Store, name: &RepositoryName) -> bool {
    matches!(store.slot(name), Ok(Slot::Empty))
}

fn verify_one(store: &dyn Store, name: &RepositoryName, counters: &Counters, reporter: &dyn Reporter) {
    let (check, problems) = verify_item(store, name, reporter);
    if !problems.is_empty() && vanished(store, name) {
        reporter.item(&name.to_string(), Outcome::Vanished);
        return;
    }
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
            for (ibip, name) in store.dangling_aliases()? {
                let detail = format!("alias {ibip} names this item, but the collection does not hold it: it vanished");
                counters.report(reporter, &Problem::new(&name.to_string(), None, ProblemKind::Missing, detail));
            }
            store.walk().par_bridge().try_for_each(|listed| -> Result<()> {
                match listed? {
                    Listed::Item(name) => verify_one(store, &name, &counters, reporter),
                    Listed::Stray { place, why } => {
                        counters.report(reporter, &Problem::new(&place, None, ProblemKind::StrayEntry, why))
                    }
                }
                Ok(())
            })?;
        } else {
            let mut items: Vec<RepositoryName> = names.iter().map(|n| resolve(store, n)).collect::<Result<_>>()?;
            let mut seen = std::collections::BTreeSet::new();
            items.retain(|name| seen.insert(name.clone()));
            items.iter().for_each(|name| verify_one(store, name, &counters, reporter));
        }
        Ok(())
    })?;
    reporter.end();
    Ok(counters.summary())
}
