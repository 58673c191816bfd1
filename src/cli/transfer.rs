//! The commands between collections: `copy`, `migrate` and `mirror`. They
//! map flags to library options, print one summary line (copied, replaced,
//! deleted, skipped, conflicts, bytes, seconds) or a JSON `summary` event,
//! and exit 1 when problems were found or `--max-delete` stopped deletions.

use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Result;
use ibi::ops::copy::{transfer, RunResult, Stopped, TransferKind, TransferOptions, TransferSummary};
use ibi::ops::mirror::{mirror as mirror_once, mirror_watch, MirrorOptions};
use ibi::ops::repair::RepairOptions;
use ibi::store::LockWait;
use serde_json::json;

use super::args::{CopyArgs, GlobalArgs, MirrorArgs, RepairArgs, TransferFlags};
use super::printer::Printer;
use super::Outcome;

fn lock_wait(flags: &TransferFlags) -> LockWait {
    match flags.wait {
        Some(secs) => LockWait::For(secs.0),
        None => LockWait::No,
    }
}

/// Prints the summary and returns the outcome.
fn finish(printer: &Printer, verb: &str, s: &TransferSummary, dry_run: bool) -> Outcome {
    let seconds = printer.seconds();
    let would = if dry_run { " (dry run: nothing changed)" } else { "" };
    printer.summary(
        &format!(
            "{verb}: copied {}, migrated {}, replaced {}, skipped {}, conflicts {}, corrupt {}; {} in {seconds:.2} s{would}",
            s.copied,
            s.migrated,
            s.replaced,
            s.skipped,
            s.conflicts,
            s.corrupt,
            printer.size(s.bytes)
        ),
        json!({
            "copied": s.copied, "migrated": s.migrated, "replaced": s.replaced, "skipped": s.skipped,
            "conflicts": s.conflicts, "corrupt": s.corrupt, "bytes": s.bytes, "problems": s.problems,
            "dry_run": dry_run, "seconds": seconds
        }),
    );
    if s.problems > 0 {
        Outcome::Problems
    } else {
        Outcome::Success
    }
}

/// Prints the summary of a run, of one that stopped on an error too (then the
/// error decides the exit code).
fn finished(printer: &Printer, verb: &str, run: RunResult, dry: bool) -> Result<Outcome> {
    match run {
        Ok(summary) => Ok(finish(printer, verb, &summary, dry)),
        Err(stopped) => {
            let Stopped { done, error } = *stopped;
            finish(printer, &format!("{verb} stopped early"), &done, dry);
            Err(error.into())
        }
    }
}

pub fn copy(global: GlobalArgs, args: &CopyArgs, migrate: bool) -> Result<Outcome> {
    let (src, dst) = (super::open(&args.src)?, super::open(&args.dst)?);
    let (src, dst) = (src.as_ref(), dst.as_ref());
    let printer = Printer::new(global);
    if let Some(url) = &args.forward_url {
        if !migrate {
            let problem = "--forward-url is for migrate: a copy leaves the item in SRC".to_string();
            return Err(ibi::Error::Invalid { what: "--forward-url".into(), problem }.into());
        }
        super::collection::check_forward_url(url)?;
    }
    let options = TransferOptions {
        dry_run: args.flags.dry_run,
        wait: lock_wait(&args.flags),
        forward_url: args.forward_url.clone(),
    };
    let kind = if migrate { TransferKind::Migrate } else { TransferKind::Copy };
    let verb = if migrate { "migrate" } else { "copy" };
    let summary = transfer(kind, src, dst, &args.names, options.clone(), &printer);
    finished(&printer, verb, summary, options.dry_run)
}

pub fn mirror(global: GlobalArgs, args: &MirrorArgs) -> Result<Outcome> {
    if args.delete || args.max_delete.is_some() {
        let problem = "mirror no longer deletes: an item that vanished from SRC took its backup with it. \
                       Mirror only moves items forward; withdraw an item with `ibi withdraw` and the tombstone \
                       reaches DST on the next mirror. Drop --delete and --max-delete from the command line.";
        return Err(ibi::Error::Invalid { what: "--delete".into(), problem: problem.into() }.into());
    }
    let (src, dst) = (super::open(&args.src)?, super::open(&args.dst)?);
    let (src, dst) = (src.as_ref(), dst.as_ref());
    let printer = Printer::new(global);
    let options = MirrorOptions { dry_run: args.flags.dry_run, wait: lock_wait(&args.flags), checksum: args.checksum };
    if !args.watch {
        return finished(&printer, "mirror", mirror_once(src, dst, &options, &printer), options.dry_run);
    }
    super::GRACEFUL.store(true, Ordering::SeqCst);
    let stop = &super::STOP;
    let mut worst = Outcome::Success;
    // A pass that changed nothing and found nothing says nothing (cron mails output).
    let mut on_pass = |s: &TransferSummary| {
        let happened = s.copied + s.replaced + s.problems > 0;
        if happened && finish(&printer, "mirror", s, options.dry_run) == Outcome::Problems {
            worst = Outcome::Problems;
        }
    };
    mirror_watch(src, dst, &options, &printer, stop, Duration::from_secs(1), &mut on_pass)?;
    Ok(worst)
}

pub fn repair(global: GlobalArgs, args: &RepairArgs) -> Result<Outcome> {
    let (root, from) = (super::open(&args.root)?, super::open(&args.from)?);
    let printer = Printer::new(global);
    let options = RepairOptions { dry_run: args.flags.dry_run, wait: lock_wait(&args.flags) };
    let summary = ibi::ops::repair::repair(root.as_ref(), from.as_ref(), &args.names, options, &printer)?;
    Ok(finish(&printer, "repair", &summary, args.flags.dry_run))
}
