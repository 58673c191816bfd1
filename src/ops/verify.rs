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
use crate::ops::report::{Outcome, Reporter, Task};
use crate::ops::survey::{while_surveying, Survey};
use crate::problem::{Problem, ProblemKind};
use crate::store::local::{alias, ibip_in, Collection, Entry, Item, LockWait};

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
    problems: AtomicU64,
}

impl Counters {
    fn summary(&self) -> VerifySummary {
        VerifySummary {
            items: self.items.load(Ordering::Relaxed),
            files: self.files.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            problems: self.problems.load(Ordering::Relaxed),
        }
    }

    fn report(&self, reporter: &dyn Reporter, problem: &Problem) {
        self.problems.fetch_add(1, Ordering::Relaxed);
        reporter.problem(problem);
    }
}

/// Problems of an item beyond its bag: identifiers in bag-info and the alias link.
pub fn check_identifiers(collection: &Collection, item: &Item, info: &bag::BagInfo) -> Vec<Problem> {
    let label = item.name.to_string();
    let mut problems = Vec::new();
    let names: Vec<RepositoryName> =
        info.values("External-Identifier").filter_map(|v| RepositoryName::parse(v).ok()).collect();
    if !names.contains(&item.name) {
        let detail = "no External-Identifier in bag-info.txt names this item";
        problems.push(Problem::new(&label, Some(bag::BAG_INFO_TXT), ProblemKind::IdentifierMismatch, detail));
    }
    if let Some(ibip) = ibip_in(info) {
        if ibip.date() != item.name.date() {
            let detail = format!("IBIp {ibip} has date {}, the name has {}", ibip.date(), item.name.date());
            problems.push(Problem::new(&label, Some(bag::BAG_INFO_TXT), ProblemKind::IdentifierMismatch, detail));
        }
        if let Some(why) = alias::check(&collection.layout, &ibip, &item.name) {
            problems.push(Problem::new(&label, None, ProblemKind::BrokenAlias, why));
        }
    }
    problems
}

/// Verifies one item fully; returns its problems.
pub fn verify_item(collection: &Collection, item: &Item, reporter: &dyn Reporter) -> (bag::BagCheck, Vec<Problem>) {
    let check = bag::verify_bag(&bag::DirBag::new(&item.path), &item.name.to_string(), &|n| reporter.bytes(n));
    let mut problems = check.problems.clone();
    if let Some(info) = &check.info {
        problems.extend(check_identifiers(collection, item, info));
    }
    (check, problems)
}

fn verify_one(collection: &Collection, item: &Item, counters: &Counters, reporter: &dyn Reporter) {
    let (check, problems) = verify_item(collection, item, reporter);
    if !problems.is_empty() && item.vanished() {
        // Moved away by a concurrent migrate while it was read: not damage.
        reporter.item(&item.name.to_string(), Outcome::Vanished);
        return;
    }
    counters.items.fetch_add(1, Ordering::Relaxed);
    counters.files.fetch_add(check.files, Ordering::Relaxed);
    counters.bytes.fetch_add(check.bytes, Ordering::Relaxed);
    for problem in &problems {
        counters.report(reporter, problem);
    }
    reporter.item(&item.name.to_string(), if problems.is_empty() { Outcome::Ok } else { Outcome::Damaged });
}

/// Staging and trash that an interrupted writer left, with their size. Looked for
/// only when no writer is at work (the write lock is free), so live staging never counts.
fn leftovers(collection: &Collection) -> Vec<Problem> {
    let Ok(_lock) = collection.lock_writes(LockWait::No) else { return Vec::new() };
    let mut problems = Vec::new();
    for dir in [collection.layout.staging(), collection.layout.trash()] {
        let (mut entries, mut bytes) = (0u64, 0u64);
        let top = std::fs::read_dir(&dir).map(|d| d.filter_map(|e| e.ok()).count()).unwrap_or(0);
        if top == 0 {
            continue;
        }
        for entry in walkdir::WalkDir::new(&dir).follow_links(false).min_depth(1).into_iter().flatten() {
            entries += 1;
            bytes += entry.metadata().map(|m| if m.is_file() { m.len() } else { 0 }).unwrap_or(0);
        }
        let rel = collection.layout.relative(&dir).display().to_string();
        let detail =
            format!("{top} leftover folder(s), {entries} entries, {bytes} bytes; the next writing command clears them");
        problems.push(Problem::new(&rel, None, ProblemKind::Leftover, detail));
    }
    problems
}

/// Verifies the named items (names or IBIps), or every item when `names` is empty.
pub fn verify(collection: &Collection, names: &[String], reporter: &dyn Reporter) -> Result<VerifySummary> {
    let counters = Counters::default();
    reporter.begin(Task::Verify);
    while_surveying(reporter, Survey::Items(collection, names), || -> Result<()> {
        if names.is_empty() {
            for problem in leftovers(collection) {
                counters.report(reporter, &problem);
            }
            collection.walk().par_bridge().try_for_each(|entry| -> Result<()> {
                match entry? {
                    Entry::Item(item) => verify_one(collection, &item, &counters, reporter),
                    Entry::Stray { path, why } => {
                        let rel = collection.layout.relative(&path).display().to_string();
                        counters.report(reporter, &Problem::new(&rel, None, ProblemKind::StrayEntry, why));
                    }
                }
                Ok(())
            })?;
        } else {
            let mut items: Vec<Item> = names.iter().map(|n| collection.resolve(n)).collect::<Result<_>>()?;
            let mut seen = std::collections::BTreeSet::new();
            items.retain(|item| seen.insert(item.name.clone()));
            items.iter().for_each(|item| verify_one(collection, item, &counters, reporter));
        }
        Ok(())
    })?;
    reporter.end();
    Ok(counters.summary())
}
