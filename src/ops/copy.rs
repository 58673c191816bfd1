//! `copy SRC DST [NAME…]` and `migrate SRC DST [NAME…]` (ARCHITECTURE.md, "Operations"). Copy
//! places verified copies of SRC items in DST, skips items DST already holds
//! with the same identity digest, and reports (never overwrites) a different
//! one. Migrate then re-verifies the copy in DST and only then removes the
//! SRC item through SRC's trash, journalled, so a rerun after SIGKILL at any
//! point leaves every item in exactly one place; within one filesystem it
//! verifies each item where it is and renames it across. Items go in batches:
//! planned and staged in parallel, then placed together by the `Driver`
//! (`ops::driver`), which mirror shares.

use rayon::prelude::*;

use crate::error::Result;
use crate::events::EventKind;
use crate::id::RepositoryName;
use crate::ops::driver::{next_chunk, pipeline, plan_copies, Driver, Plan, Tally};
pub use crate::ops::driver::{RunResult, Stopped, TransferOptions, TransferSummary};
use crate::ops::minting::check_pair;
use crate::ops::report::{Outcome, Reporter, Task};
use crate::ops::survey::{while_surveying, Survey};
use crate::ops::transfer::item_bytes;
use crate::ops::verify::verify_item;
use crate::problem::{Problem, ProblemKind};
use crate::store::inventory::Forward;
use crate::store::{raise_minter, selected, Store, Writer};

/// Migrate's last step for a chunk: re-verify each copy in DST, then remove from SRC
/// the items whose copies are sound.
fn finish_migration(
    (src, forward): (&dyn Writer, &Forward),
    dst: &dyn Store,
    in_dst: Vec<RepositoryName>,
    tally: &Tally,
    reporter: &dyn Reporter,
) -> Result<()> {
    let sound: Vec<RepositoryName> = in_dst
        .into_par_iter()
        .filter(|name| {
            let (_, problems) = verify_item(dst, name, reporter);
            problems.iter().for_each(|p| tally.report(reporter, p));
            if !problems.is_empty() {
                let detail = "the copy in DST failed re-verification; SRC keeps the item";
                tally.report(reporter, &Problem::new(&name.to_string(), None, ProblemKind::Conflict, detail));
            }
            problems.is_empty()
        })
        .collect();
    if !sound.is_empty() {
        src.note_moved(&sound, forward)?;
        src.remove(&sound)?;
    }
    for name in &sound {
        Tally::add(&tally.migrated, 1);
        reporter.item(&name, Outcome::Migrated);
    }
    Ok(())
}

/// Migrate within one filesystem: verify each item where it is, then rename the
/// sound ones into DST (the bytes never move, so the check holds for DST).
fn move_chunk(
    (src, dst): (&dyn Writer, &dyn Writer),
    forward: &Forward,
    plans: Vec<Plan>,
    tally: &Tally,
    reporter: &dyn Reporter,
) -> Result<Vec<RepositoryName>> {
    let mut settled = Vec::new();
    let mut to_move = Vec::new();
    for plan in plans {
        match plan {
            Plan::Settled(name, true) => settled.push(name),
            Plan::Copy(name) => to_move.push(name),
            _ => {}
        }
    }
    let sound: Vec<_> = to_move
        .into_par_iter()
        .filter(|name| {
            let (_, problems) = verify_item(src.store(), name, reporter);
            if !problems.is_empty() {
                Tally::add(&tally.corrupt, 1);
                problems.iter().for_each(|p| tally.report(reporter, p));
                return false;
            }
            Tally::add(&tally.bytes, item_bytes(src.store(), name));
            true
        })
        .collect();
    if !sound.is_empty() {
        src.note_moved(&sound, forward)?;
    }
    let moved = dst.adopt_from(src, &sound)?.unwrap_or_default();
    let arrived: Vec<RepositoryName> = moved.iter().filter(|(_, o)| o.is_ok()).map(|(n, _)| n.clone()).collect();
    raise_minter(dst, &arrived)?;
    for (name, outcome) in moved {
        match outcome {
            Ok(()) => {
                Tally::add(&tally.migrated, 1);
                reporter.item(&name, Outcome::Migrated);
            }
            Err(why) => {
                Tally::add(&tally.conflicts, 1);
                tally.report(reporter, &Problem::new(&name.to_string(), None, ProblemKind::Conflict, why.to_string()));
            }
        }
    }
    Ok(settled)
}

/// What `move_chunk` would do, counted the same way, changing nothing: every
/// item not yet in DST would be verified and renamed, and every item DST
/// already holds identically removed from SRC.
fn dry_move_chunk(src: &dyn Store, plans: Vec<Plan>, tally: &Tally, reporter: &dyn Reporter) {
    for plan in plans {
        match plan {
            Plan::Settled(_, true) => Tally::add(&tally.migrated, 1),
            Plan::Copy(name) => {
                Tally::add(&tally.migrated, 1);
                Tally::add(&tally.bytes, item_bytes(src, &name));
                reporter.item(&name, Outcome::WouldMigrate);
            }
            _ => {}
        }
    }
}

/// Copies or migrates the named SRC items (all when `names` is empty) into DST.
pub fn transfer(
    kind: TransferKind,
    src: &dyn Store,
    dst: &dyn Store,
    names: &[String],
    options: TransferOptions,
    reporter: &dyn Reporter,
) -> RunResult {
    let migrate = kind == TransferKind::Migrate;
    check_pair(src, dst)?;
    if !options.dry_run {
        crate::ops::minting::learn_pair(src, dst, reporter)?;
    }
    let dst_writer = if options.dry_run { None } else { Some(dst.begin_write(options.wait)?) };
    let src_writer = if options.dry_run || !migrate { None } else { Some(src.begin_write(options.wait)?) };
    let (dst_writer, src_writer) = (dst_writer.as_deref(), src_writer.as_deref());
    // A SRC that will refuse the removals (an append-only far key) refuses before
    // anything is copied: asked to remove nothing, it says so.
    if let Some(src_writer) = src_writer {
        src_writer.remove(&[])?;
    }
    let forward = Forward {
        to: crate::ops::minting::peer_location(dst),
        date: crate::id::Timestamp::now().to_rfc3339(),
        url: options.forward_url.clone(),
    };
    let tally = Tally::default();
    let event = if migrate { EventKind::MigrateIn } else { EventKind::CopyIn };
    let driver = Driver { src, dst, writer: dst_writer, tally: &tally, reporter, event };
    // Asked with no names, `adopt_from` says whether DST can take SRC's items by rename.
    let by_rename = match (dst_writer, src_writer) {
        (Some(d), Some(s)) if d.adopt_from(s, &[])?.is_some() => Some((s, d)),
        _ => None,
    };
    // A dry run has no writers to ask; DST says whether they would rename.
    let dry_rename = options.dry_run && migrate && dst.adopts_by_rename(src);
    reporter.begin(if migrate { Task::Migrate } else { Task::Copy });
    let run = while_surveying(reporter, Survey::Items(src, names), || -> Result<()> {
        let mut items = selected(src, names);
        let mut next_plans = || -> Result<Option<Vec<Plan>>> {
            let chunk = next_chunk(&mut items)?;
            if chunk.is_empty() {
                return Ok(None);
            }
            Ok(Some(plan_copies((src, chunk), dst, &tally, reporter)?))
        };
        if let Some(local) = by_rename {
            while let Some(plans) = next_plans()? {
                let in_dst = move_chunk(local, &forward, plans, &tally, reporter)?;
                finish_migration((local.0, &forward), dst, in_dst, &tally, reporter)?;
            }
        } else if dry_rename {
            while let Some(plans) = next_plans()? {
                dry_move_chunk(src, plans, &tally, reporter);
            }
        } else {
            pipeline(&driver, next_plans, |in_dst| {
                if let Some(src_writer) = src_writer {
                    finish_migration((src_writer, &forward), dst, in_dst, &tally, reporter)?;
                } else if migrate {
                    Tally::add(&tally.migrated, in_dst.len() as u64);
                }
                Ok(())
            })?;
        }
        Ok(())
    });
    reporter.end();
    tally.finish(run)
}

/// Which transfer between collections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransferKind {
    Copy,
    Migrate,
}
