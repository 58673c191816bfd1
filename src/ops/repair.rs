//! `repair ROOT --from OTHER [NAME…]`: restores what a collection lost from
//! another that holds it. A missing item (its alias remains, or it is named)
//! is copied back when OTHER holds a copy whose bag-info names it; a damaged
//! item is replaced only by a copy with the same identity digest (the
//! tagmanifest it was deposited with), so a repair never changes an item;
//! a missing or wrong alias is recreated. Copies go through the transfer
//! driver, verified on arrival as mirror's are. What cannot be repaired is a
//! problem (exit 1), and nothing else is touched.

use rayon::prelude::*;

use crate::error::Result;
use crate::events::EventKind;
use crate::id::RepositoryName;
use crate::ops::driver::{next_chunk, pipeline, Driver, Plan, Tally, TransferSummary};
use crate::ops::minting::check_pair;
use crate::ops::report::{Outcome, Reporter, Task};
use crate::ops::verify::verify_item;
use crate::problem::{Problem, ProblemKind};
use crate::store::inventory::Status;
use crate::store::{ibip_in, identity_digest, items, resolve, LockWait, Slot, Store, Writer};

#[derive(Debug, Clone, Copy)]
pub struct RepairOptions {
    pub dry_run: bool,
    pub wait: LockWait,
}

/// What the collection needs, by name.
enum Need {
    Missing(RepositoryName),
    Damaged(RepositoryName),
    /// To hold this identity (what a majority of the sites agree on).
    Toward(RepositoryName, String),
}

/// The items to look at: those named, or every item plus every one the
/// inventory or an alias proves lost (an item can vanish with its alias). The
/// walk streams, so memory does not grow with the collection (only with what is
/// lost); an item it meets after this run restored it is looked at and found whole.
fn candidates<'a>(root: &'a dyn Store, names: &[String]) -> Result<Needs<'a>> {
    if names.is_empty() {
        let mut lost = lost_by_record(root)?;
        let known: std::collections::HashSet<RepositoryName> = lost.iter().cloned().collect();
        let by_alias = root.aliases().dangling_aliases(&|_| false)?.into_iter().map(|(_, name)| name);
        lost.extend(by_alias.filter(|name| !known.contains(name)));
        let held = items(root).map(|name| name.map(Need::Damaged));
        return Ok(Box::new(lost.into_iter().map(|name| Ok(Need::Missing(name))).chain(held)));
    }
    let named = names
        .iter()
        .map(|text| match resolve(root, text) {
            Ok(name) => Ok(Need::Damaged(name)),
            Err(crate::error::Error::NotFound { .. }) => Ok(Need::Missing(RepositoryName::parse(text)?)),
            Err(e) => Err(e),
        })
        .collect::<Result<Vec<Need>>>()?;
    Ok(Box::new(named.into_iter().map(Ok)))
}

/// The items the collection's records hold present whose place is empty.
fn lost_by_record(root: &dyn Store) -> Result<Vec<RepositoryName>> {
    let mut lost = Vec::new();
    for summary in root.inventory().record_summaries() {
        let summary = summary?;
        if summary.status == Status::Present && matches!(root.slot(&summary.name)?, Slot::Empty) {
            lost.push(summary.name);
        }
    }
    Ok(lost)
}

/// What a repair looks at, one at a time.
type Needs<'a> = Box<dyn Iterator<Item = Result<Need>> + Send + 'a>;

struct Repairer<'a> {
    root: &'a dyn Store,
    /// None on a dry run.
    writer: Option<&'a dyn Writer>,
    from: &'a dyn Store,
    tally: &'a Tally,
    reporter: &'a dyn Reporter,
}

impl Repairer<'_> {
    fn problem(&self, name: &RepositoryName, detail: String) -> Plan {
        self.tally.report(self.reporter, &Problem::new(&name.to_string(), None, ProblemKind::Missing, detail));
        Plan::Settled(name.clone(), false)
    }

    /// A lost item comes back from OTHER when OTHER holds an item of that name.
    fn missing(&self, name: RepositoryName) -> Result<Plan> {
        Ok(match self.from.slot(&name)? {
            Slot::Item => Plan::Copy(name),
            _ => self.problem(&name, "lost, and OTHER does not hold it either".into()),
        })
    }

    /// A sound item keeps its bytes (its alias is restored if need be); a damaged one
    /// is replaced by OTHER's copy only if that has the same identity digest.
    fn held(&self, name: RepositoryName) -> Result<Plan> {
        let (check, problems) = verify_item(self.root, &name, self.reporter);
        let bag_damage = problems.iter().any(|p| p.kind != ProblemKind::BrokenAlias);
        if !bag_damage {
            if problems.is_empty() {
                self.reporter.item(&name, Outcome::Unchanged);
            } else if let Some(ibip) = check.info.as_ref().and_then(ibip_in) {
                match self.writer {
                    None => self.reporter.item(&name, Outcome::WouldRestoreAlias),
                    Some(writer) => {
                        writer.restore_alias(&ibip, &name)?;
                        self.reporter.item(&name, Outcome::AliasRestored);
                    }
                }
            }
            return Ok(Plan::Settled(name, !problems.is_empty()));
        }
        let ours = identity_digest(self.root, &name).ok();
        let theirs = identity_digest(self.from, &name).ok();
        if ours.is_some() && ours == theirs {
            return Ok(Plan::Replace(name, "damaged"));
        }
        let why: Vec<String> =
            problems.iter().map(|p| format!("{} {}", p.kind.as_str(), p.file.as_deref().unwrap_or(""))).collect();
        Ok(self.problem(
            &name,
            format!("damaged ({}), and OTHER holds no copy with the same identity digest", why.join(", ").trim()),
        ))
    }

    /// A copy brought to `wanted` from OTHER, whose copy must have it: copied
    /// when missing, replaced when damaged or holding another identity.
    fn toward(&self, name: RepositoryName, wanted: &str) -> Result<Plan> {
        if identity_digest(self.from, &name).ok().as_deref() != Some(wanted) {
            return Ok(self.problem(&name, format!("OTHER holds no copy with identity {wanted}")));
        }
        if matches!(self.root.slot(&name)?, Slot::Empty) {
            return Ok(Plan::Copy(name));
        }
        let ours = identity_digest(self.root, &name).ok();
        if ours.as_deref() != Some(wanted) {
            return Ok(Plan::Replace(name, "it differs from the copy a majority of sites hold"));
        }
        let (_, problems) = verify_item(self.root, &name, self.reporter);
        if problems.iter().any(|p| p.kind != ProblemKind::BrokenAlias) {
            return Ok(Plan::Replace(name, "damaged"));
        }
        self.reporter.item(&name, Outcome::Unchanged);
        Ok(Plan::Settled(name, false))
    }

    fn plan(&self, need: Need) -> Result<Plan> {
        match need {
            Need::Missing(name) => self.missing(name),
            Need::Damaged(name) => self.held(name),
            Need::Toward(name, wanted) => self.toward(name, &wanted),
        }
    }
}

/// Brings `root`'s copies of each item to the identity given with it, from
/// `from` (`audit --repair`: what a strict majority of the sites agree on).
pub fn repair_toward(
    root: &dyn Store,
    from: &dyn Store,
    wanted: &[(RepositoryName, String)],
    options: RepairOptions,
    reporter: &dyn Reporter,
) -> Result<TransferSummary> {
    let needs = wanted.iter().map(|(name, identity)| Ok(Need::Toward(name.clone(), identity.clone())));
    run(root, from, Box::new(needs), options, reporter)
}

/// Repairs `root` from `from`: the named items, or everything it lost or holds damaged.
pub fn repair(
    root: &dyn Store,
    from: &dyn Store,
    names: &[String],
    options: RepairOptions,
    reporter: &dyn Reporter,
) -> Result<TransferSummary> {
    let needs = candidates(root, names)?;
    run(root, from, needs, options, reporter)
}

fn run(
    root: &dyn Store,
    from: &dyn Store,
    mut needs: Needs<'_>,
    options: RepairOptions,
    reporter: &dyn Reporter,
) -> Result<TransferSummary> {
    check_pair(from, root)?;
    if !options.dry_run {
        crate::ops::minting::learn_pair(from, root, reporter)?;
    }
    let writer = if options.dry_run { None } else { Some(root.begin_write(options.wait)?) };
    let writer = writer.as_deref();
    let tally = Tally::default();
    let repairer = Repairer { root, writer, from, tally: &tally, reporter };
    let driver = Driver { src: from, dst: root, writer, tally: &tally, reporter, event: EventKind::Repair };
    reporter.begin(Task::Repair);
    let next_plans = || -> Result<Option<Vec<Plan>>> {
        let chunk = next_chunk(&mut needs)?;
        if chunk.is_empty() {
            return Ok(None);
        }
        Ok(Some(chunk.into_par_iter().map(|need| repairer.plan(need)).collect::<Result<_>>()?))
    };
    pipeline(&driver, next_plans, |_| Ok(()))?;
    reporter.end();
    Ok(tally.summary())
}
