//! `mirror SRC DST` (ARCHITECTURE.md, "Operations"): a one-way sync built for cron. A merge of the
//! two sorted item walks copies missing items, swaps in items whose identity
//! digest differs, and with `--delete` removes items absent from SRC (capped
//! by `--max-delete`, and refused when SRC is empty while DST is not). A
//! no-op run reads only directory entries and tagmanifests. `--checksum`
//! re-verifies DST payloads and repairs damaged items from SRC. `--watch`
//! re-syncs when `notify` reports changes in SRC, debounced.

use std::cmp::Ordering as Order;
use std::iter::Peekable;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::id::RepositoryName;
use crate::ops::driver::{check_distinct, next_chunk, pipeline, plan_copy, Driver, Plan, Tally, TransferSummary};
use crate::ops::report::{Outcome, Reporter, Task};
use crate::ops::survey::{while_surveying, Survey};
use crate::ops::verify::verify_item;
use crate::problem::{Problem, ProblemKind};
use crate::store::{identity_digest, item_ibip, items, lease_and_recover, Listed, LockWait, Slot, Store};

#[derive(Debug, Clone, Copy)]
pub struct MirrorOptions {
    pub dry_run: bool,
    pub wait: LockWait,
    pub delete: bool,
    pub max_delete: Option<u64>,
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

/// Refuses `--delete` when SRC holds no items while DST holds some (an unmounted
/// or emptied SRC must never empty DST).
fn guard_delete(src: &dyn Store, dst: &dyn Store) -> Result<()> {
    let src_has = items(src).next().transpose()?.is_some();
    let dst_has = items(dst).next().transpose()?.is_some();
    if !src_has && dst_has {
        return Err(Error::Invalid {
            what: "deletion".into(),
            problem: format!("SRC {} holds no items while DST holds some; refusing to delete", src.location()),
        });
    }
    Ok(())
}

/// Decides, for one pair of the merge, what the mirror must do.
struct Planner<'a> {
    src: &'a dyn Store,
    dst: &'a dyn Store,
    options: &'a MirrorOptions,
    tally: &'a Tally,
    deletions: AtomicU64,
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
            return Ok(Plan::Replace(name, "identity digest differs"));
        }
        if self.options.checksum {
            return Ok(self.checksum(name));
        }
        Tally::add(&self.tally.skipped, 1);
        self.reporter.item(&name.to_string(), Outcome::Unchanged);
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

    fn delete(&self, name: RepositoryName, shadowed: bool) -> Plan {
        if !self.options.delete || shadowed {
            return Plan::Settled(name, false);
        }
        if self.src_expects(&name) {
            let detail = "SRC's alias names this item but SRC lacks it (it vanished): DST's copy is kept";
            self.tally.report(self.reporter, &Problem::new(&name.to_string(), None, ProblemKind::Missing, detail));
            return Plan::Settled(name, false);
        }
        let n = self.deletions.fetch_add(1, Ordering::SeqCst) + 1;
        if self.options.max_delete.is_some_and(|max| n > max) {
            self.tally.delete_capped.store(true, Ordering::Relaxed);
            return Plan::Settled(name, false);
        }
        Plan::Delete(name)
    }

    /// Whether SRC's alias of a DST-only item still names it: SRC held it and lost
    /// it, which is never a reason to delete the copy (nor is an unreadable alias).
    fn src_expects(&self, name: &RepositoryName) -> bool {
        let Ok(Some(ibip)) = item_ibip(self.dst, name) else { return false };
        match self.src.alias(&ibip) {
            Ok(Some(target)) => target == *name,
            Ok(None) => false,
            Err(_) => true,
        }
    }

    fn plan(&self, pair: Pair, identities: Option<Identities>) -> Result<Plan> {
        match pair {
            Pair::Src(name) => match self.dst.slot(&name)? {
                // A symlink or file planted at the item's place: swapped out, never followed.
                Slot::Foreign(_) => Ok(Plan::Replace(name, "not an item directory in DST")),
                _ => plan_copy((self.src, name), self.dst, self.tally, self.reporter),
            },
            Pair::Both(name) => {
                let identities =
                    identities.unwrap_or_else(|| (identity_digest(self.src, &name), identity_digest(self.dst, &name)));
                self.both(name, identities)
            }
            Pair::Dst { name, shadowed } => Ok(self.delete(name, shadowed)),
        }
    }
}

/// The identity digests of one item in SRC and in DST.
type Identities = (Result<String>, Result<String>);

impl Planner<'_> {
    /// Plans a chunk of the merge; the identity digests of the items both sides hold
    /// are asked for in one batch per side (one round trip for a far store).
    fn plan_chunk(&self, chunk: Vec<Pair>) -> Result<Vec<Plan>> {
        let both: Vec<RepositoryName> =
            chunk.iter().filter_map(|p| if let Pair::Both(n) = p { Some(n.clone()) } else { None }).collect();
        let mut src_ids = self.src.identities(&both).into_iter();
        let mut dst_ids = self.dst.identities(&both).into_iter();
        let paired: Vec<(Pair, Option<Identities>)> = chunk
            .into_iter()
            .map(|pair| {
                let ids = match pair {
                    Pair::Both(_) => src_ids.next().zip(dst_ids.next()),
                    _ => None,
                };
                (pair, ids)
            })
            .collect();
        paired.into_par_iter().map(|(pair, ids)| self.plan(pair, ids)).collect()
    }
}

/// A SRC item's own bag problems (its aliases are SRC's business).
fn verify_item_quietly(src: &dyn Store, name: &RepositoryName) -> (crate::bag::BagCheck, Vec<Problem>) {
    let check = crate::bag::verify_bag(src.item_files(name).as_ref(), &name.to_string(), &|_| {});
    let problems = check.problems.clone();
    (check, problems)
}

/// One sync pass; the caller holds DST's write lock (unless dry-running).
fn sync(src: &dyn Store, dst: &dyn Store, options: &MirrorOptions, reporter: &dyn Reporter) -> Result<TransferSummary> {
    if options.delete {
        guard_delete(src, dst)?;
    }
    let tally = Tally::default();
    let planner = Planner { src, dst, options, tally: &tally, deletions: AtomicU64::new(0), reporter };
    let driver = Driver { src, dst, dry_run: options.dry_run, tally: &tally, reporter };
    reporter.begin(Task::Mirror);
    while_surveying(reporter, Survey::Items(src, &[]), || -> Result<()> {
        let mut merge = Merge {
            src: src.walk().peekable(),
            dst: items(dst).peekable(),
            shadows: Vec::new(),
            tally: &tally,
            reporter,
        };
        let next_plans = || -> Result<Option<Vec<Plan>>> {
            let chunk = next_chunk(&mut merge)?;
            if chunk.is_empty() {
                return Ok(None);
            }
            Ok(Some(planner.plan_chunk(chunk)?))
        };
        pipeline(&driver, next_plans, |_| Ok(()))?;
        Ok(())
    })?;
    reporter.end();
    Ok(tally.summary())
}

/// Mirrors SRC into DST once.
pub fn mirror(
    src: &dyn Store,
    dst: &dyn Store,
    options: &MirrorOptions,
    reporter: &dyn Reporter,
) -> Result<TransferSummary> {
    check_distinct(src, dst)?;
    let _lease = if options.dry_run { None } else { Some(lease_and_recover(dst, options.wait)?) };
    sync(src, dst, options, reporter)
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
    check_distinct(src, dst)?;
    let _lease = if options.dry_run { None } else { Some(lease_and_recover(dst, options.wait)?) };
    let root = src.local_root().ok_or_else(|| Error::Invalid {
        what: "mirror".into(),
        problem: format!("watching {} for changes needs a local collection", src.location()),
    })?;
    let (_watcher, rx) = crate::fsx::watch_tree(root)?;
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
