//! The hot folder (`watch INBOX ROOT`): each top-level entry of the inbox,
//! once it has stopped changing for the settle time, is deposited as one
//! item; the original then moves to `INBOX/.deposited/` (or is removed, file
//! by file, only where unchanged since it was read) and a receipt holding the
//! minted name is written. ibi's own records live under dot-folders of
//! `.deposited/` that no entry name can reach: `.receipts/` (never
//! overwritten) and `.pending/`, a record written just before the item is
//! placed so that a restart finishes the hand-off instead of depositing
//! twice. `notify` wakes the loop early; a periodic scan decides.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use walkdir::WalkDir;

use crate::error::{ErrorClass, IoContext, Result};
use crate::fsx::{self, atomic_write, create_dir_all_durable, fsync_dir, rename_noreplace, Stamp};
use crate::id::minter::Clock;
use crate::id::Minted;
use crate::ops::deposit::{check_meta, deposit_batch, remove_moved, DepositOptions};
use crate::ops::report::Reporter;
use crate::ops::source::plan_paths;
use crate::store::guard;
use crate::store::{LockWait, Slot, Store};

pub const DEPOSITED_DIR: &str = ".deposited";
const RECEIPTS_DIR: &str = ".receipts";
const PENDING_DIR: &str = ".pending";

#[derive(Debug, Clone)]
pub struct WatchOptions {
    /// How long an entry must stay unchanged before it is deposited.
    pub settle: Duration,
    /// Remove originals instead of moving them to `.deposited/`.
    pub remove: bool,
    /// How often the inbox is scanned when no event arrives.
    pub poll: Duration,
    pub deposit: DepositOptions,
}

/// What became of one inbox entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryOutcome {
    Deposited(Minted),
    /// The collection already held exactly these bytes, as this item: nothing new
    /// was made (the receipt says so).
    AlreadyDeposited(Minted),
    /// A hand-off that an interrupted run left between placing and receipting,
    /// finished at start.
    Recovered(Minted),
}

/// What a run of the hot folder did, entry by entry.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct WatchSummary {
    /// New items made.
    pub deposited: u64,
    pub already_deposited: u64,
    pub recovered: u64,
    /// Entries left in the inbox because they cannot be bagged (each warned about).
    pub refused: u64,
}

impl WatchSummary {
    fn count(&mut self, outcome: &EntryOutcome) {
        match outcome {
            EntryOutcome::Deposited(_) => self.deposited += 1,
            EntryOutcome::AlreadyDeposited(_) => self.already_deposited += 1,
            EntryOutcome::Recovered(_) => self.recovered += 1,
        }
    }
}

/// What an entry looked like at the last scan: count, total size, latest mtime.
type Signature = (u64, u64, i128);

fn signature(path: &Path) -> io::Result<Signature> {
    let mut sig = (0u64, 0u64, 0i128);
    for entry in WalkDir::new(path).follow_links(false) {
        let meta = entry.map_err(io::Error::from)?.metadata().map_err(io::Error::from)?;
        let mtime = meta.modified()?.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as i128).unwrap_or(0);
        sig = (sig.0 + 1, sig.1 + meta.len(), sig.2.max(mtime));
    }
    Ok(sig)
}

/// Whether an entry, read at `read_at` and now at `now_at` (archived), still holds
/// exactly the files that were read, each with the stamp it had then (a file
/// written over, appended to or added means no).
fn unchanged_since_read(read_at: &Path, now_at: &Path, stamps: &[(PathBuf, Stamp)]) -> bool {
    let files = WalkDir::new(now_at).follow_links(false).into_iter().flatten().filter(|e| !e.file_type().is_dir());
    files.count() == stamps.len()
        && stamps.iter().all(|(path, stamp)| {
            let (now, renamed) = match path.strip_prefix(read_at) {
                Ok(rel) if rel.as_os_str().is_empty() => (now_at.to_path_buf(), true),
                Ok(rel) => (now_at.join(rel), false),
                Err(_) => (path.clone(), false),
            };
            // The entry itself was just renamed, which moves its change time.
            Stamp::at(&now).is_ok_and(|now| if renamed { now.same_but_renamed(stamp) } else { now == *stamp })
        })
}

/// Top-level inbox entries, skipping dot-names (`.deposited`, editors' temp files);
/// names that are not UTF-8 are returned apart, to be warned about.
fn inbox_entries(inbox: &Path) -> Result<(Vec<String>, Vec<PathBuf>)> {
    let (mut names, mut odd) = (Vec::new(), Vec::new());
    for entry in fs::read_dir(inbox).with_path("list", inbox)? {
        let name = entry.with_path("list", inbox)?.file_name();
        match name.into_string() {
            Ok(n) if !n.starts_with('.') => names.push(n),
            Ok(_) => {}
            Err(raw) => odd.push(inbox.join(raw)),
        }
    }
    names.sort();
    Ok((names, odd))
}

/// The first of `dir/base`, `dir/base.1`, `dir/base.2` … that `place` accepts
/// (it fails with `AlreadyExists` while the name is taken).
fn first_free(dir: &Path, base: &str, mut place: impl FnMut(&Path) -> io::Result<()>) -> Result<PathBuf> {
    for n in 0u64.. {
        let target = if n == 0 { dir.join(base) } else { dir.join(format!("{base}.{n}")) };
        match place(&target) {
            Ok(()) => return Ok(target),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(crate::Error::io("create", target, e)),
        }
    }
    unreachable!("some suffix is free")
}

struct HotFolder<'a> {
    collection: &'a dyn Store,
    inbox: PathBuf,
    deposited: PathBuf,
    options: &'a WatchOptions,
    clock: &'a dyn Clock,
    reporter: &'a dyn Reporter,
}

impl HotFolder<'_> {
    fn pending_path(&self, entry: &str) -> PathBuf {
        self.deposited.join(PENDING_DIR).join(entry)
    }

    /// Moves the original into `.deposited/` under a name no other holds.
    fn archive(&self, entry: &str) -> Result<String> {
        let original = self.inbox.join(entry);
        let target = first_free(&self.deposited, entry, |t| rename_noreplace(&original, t))?;
        fsync_dir(&self.inbox)?;
        fsync_dir(&self.deposited)?;
        Ok(target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default())
    }

    /// Archives an entry that was deposited with `stamps`. When it changed between the
    /// check and the archiving rename, it goes back to the inbox (never over anything)
    /// to be deposited again; returns whether it stayed archived.
    fn archive_unchanged(&self, entry: &str, stamps: &[(PathBuf, Stamp)]) -> Result<(String, bool)> {
        let base = self.archive(entry)?;
        let archived = self.deposited.join(&base);
        if unchanged_since_read(&self.inbox.join(entry), &archived, stamps) {
            return Ok((base, true));
        }
        match rename_noreplace(&archived, &self.inbox.join(entry)) {
            Ok(()) => {
                fsync_dir(&self.deposited)?;
                fsync_dir(&self.inbox)?;
                Ok((entry.to_string(), false))
            }
            Err(e) => {
                let why = format!("{entry} changed while it was archived and cannot go back to the inbox ({e}); it is kept at {}, not deposited", archived.display());
                self.reporter.warning(&why);
                Ok((base, true))
            }
        }
    }

    /// Writes the receipt under a name no other receipt holds, never over one.
    fn write_receipt(&self, base: &str, text: &str) -> Result<()> {
        let dir = self.deposited.join(RECEIPTS_DIR);
        let temp = dir.join(format!("{}{base}", fsx::TEMP_PREFIX));
        fsx::remove_tree(&temp)?;
        fsx::write_new(&temp, text.as_bytes())?;
        fs::File::open(&temp).and_then(|f| f.sync_all()).with_path("fsync", &temp)?;
        first_free(&dir, &format!("{base}.receipt"), |t| rename_noreplace(&temp, t))?;
        fsync_dir(&dir)
    }

    /// Writes the receipt `line` (named after `base`, where the original went) and
    /// drops the pending record.
    fn hand_off(&self, entry: &str, line: &str, base: &str) -> Result<()> {
        self.write_receipt(base, &format!("{line}\n"))?;
        let pending = self.pending_path(entry);
        fs::remove_file(&pending).with_path("remove", &pending)?;
        fsync_dir(&self.deposited.join(PENDING_DIR))
    }

    /// Finishes hand-offs that a previous run left between placing and receipting,
    /// telling `on_entry` of each. Their originals are archived even under
    /// `--remove`: without the stamps taken when they were read, removing them could
    /// lose what changed since.
    fn recover(&self, summary: &mut WatchSummary, on_entry: &mut dyn FnMut(&str, &EntryOutcome)) -> Result<()> {
        let dir = self.deposited.join(PENDING_DIR);
        for dir_entry in fs::read_dir(&dir).with_path("list", &dir)? {
            let file_name = dir_entry.with_path("list", &dir)?.file_name();
            let Some(entry) = file_name.to_str() else { continue };
            let pending = self.pending_path(entry);
            let text =
                String::from_utf8(fsx::read_capped(&pending, 4096).with_path("read", &pending)?).unwrap_or_default();
            let line = text.trim_end();
            let held = Minted::parse_record(line).filter(|m| matches!(self.collection.slot(&m.name), Ok(Slot::Item)));
            if let Some(minted) = held {
                let exists = fs::symlink_metadata(self.inbox.join(entry)).is_ok();
                let base = if exists { self.archive(entry)? } else { entry.to_string() };
                self.hand_off(entry, &format!("{line}\t{entry}"), &base)?;
                let outcome = EntryOutcome::Recovered(minted);
                summary.count(&outcome);
                on_entry(entry, &outcome);
            } else {
                fs::remove_file(&pending).with_path("remove", &pending)?;
            }
        }
        Ok(())
    }

    fn deposit_entry(&self, entry: &str) -> Result<EntryOutcome> {
        let writer = self.collection.begin_write(LockWait::Forever)?;
        let plan = plan_paths(&[self.inbox.join(entry)], self.options.deposit.follow_symlinks)?;
        let mut deposit = self.options.deposit.clone();
        deposit.move_sources = false;
        let record = |minted: &[&Minted]| match minted.first() {
            Some(m) => atomic_write(&self.pending_path(entry), format!("{}\n", m.record()).as_bytes()),
            None => Ok(()),
        };
        let plans = std::slice::from_ref(&plan);
        let outcome =
            deposit_batch(writer.as_ref(), plans, &deposit, self.clock, self.reporter, Some(&record))?.remove(0);
        let minted = outcome.deposited.minted;
        let mut line = minted.record();
        let result = if outcome.deposited.already {
            atomic_write(&self.pending_path(entry), format!("{line}\n").as_bytes())?;
            EntryOutcome::AlreadyDeposited(minted.clone())
        } else {
            EntryOutcome::Deposited(minted.clone())
        };
        if self.options.remove {
            remove_moved(&plan, &outcome.stamps, self.reporter);
            self.hand_off(entry, &receipt_line(&line, entry, &result), entry)?;
            return Ok(result);
        }
        let entry_path = self.inbox.join(entry);
        let (base, archived) = if unchanged_since_read(&entry_path, &entry_path, &outcome.stamps) {
            self.archive_unchanged(entry, &outcome.stamps)?
        } else {
            (entry.to_string(), false)
        };
        line = receipt_line(&line, entry, &result);
        self.hand_off(entry, &line, &base)?;
        if !archived {
            self.reporter.warning(&format!(
                "{entry} changed after it was copied into {}; it stays in the inbox and is deposited again once it settles",
                minted.name
            ));
        }
        Ok(result)
    }
}

/// A receipt's line: `NAME<TAB>IBIP<TAB>ENTRY`, and `<TAB>already deposited` when
/// the collection held the entry's bytes before (no new item was made).
fn receipt_line(record: &str, entry: &str, outcome: &EntryOutcome) -> String {
    match outcome {
        EntryOutcome::AlreadyDeposited(_) => format!("{record}\t{entry}\talready deposited"),
        _ => format!("{record}\t{entry}"),
    }
}

/// Warns once about each entry that cannot be looked at.
#[derive(Default)]
struct Warned(HashSet<PathBuf>);

impl Warned {
    fn once(&mut self, reporter: &dyn Reporter, path: &Path, why: &str) {
        if self.0.insert(path.to_path_buf()) {
            reporter.warning(&format!("{} is not deposited: {why}", path.display()));
        }
    }
}

/// What the hot folder remembers between scans.
#[derive(Default)]
struct Settling {
    /// Each entry's last signature and since when it has had it.
    seen: HashMap<String, (Signature, Instant)>,
    /// Entries that cannot be bagged, by the signature they had: retried once they change.
    refused: HashMap<String, Signature>,
    warned: Warned,
}

impl Settling {
    /// One pass over the inbox: deposits every entry that has kept its signature
    /// for the settle time; returns how many were deposited.
    fn scan(
        &mut self,
        hot: &HotFolder,
        stop: &AtomicBool,
        summary: &mut WatchSummary,
        on_entry: &mut dyn FnMut(&str, &EntryOutcome),
    ) -> Result<()> {
        let (inbox, reporter) = (&hot.inbox, hot.reporter);
        let (entries, odd) = inbox_entries(inbox)?;
        odd.iter().for_each(|path| self.warned.once(reporter, path, "its name is not UTF-8"));
        for entry in entries {
            let sig = match signature(&inbox.join(&entry)) {
                Ok(sig) => sig,
                Err(e) => {
                    self.warned.once(reporter, &inbox.join(&entry), &format!("it cannot be read: {e}"));
                    continue;
                }
            };
            if self.refused.get(&entry) == Some(&sig) {
                continue;
            }
            let now = Instant::now();
            let (last_sig, since) = self.seen.entry(entry.clone()).or_insert((sig, now));
            if *last_sig != sig {
                *last_sig = sig;
                *since = now;
            } else if now.duration_since(*since) >= hot.options.settle && !stop.load(Ordering::SeqCst) {
                self.seen.remove(&entry);
                match hot.deposit_entry(&entry) {
                    Ok(outcome) => {
                        summary.count(&outcome);
                        on_entry(&entry, &outcome);
                        self.refused.remove(&entry);
                    }
                    Err(e) if e.class() != ErrorClass::Operational => {
                        reporter.warning(&format!("{entry} was not deposited: {e}"));
                        summary.refused += 1;
                        self.refused.insert(entry, sig);
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        self.seen.retain(|name, _| inbox.join(name).exists());
        Ok(())
    }
}

/// Watches `inbox` until `stop` is set, depositing settled entries into `collection`.
/// Calls `on_entry` for each entry handed off; returns what the run did.
pub fn watch(
    collection: &dyn Store,
    inbox: &Path,
    options: &WatchOptions,
    clock: &dyn Clock,
    reporter: &dyn Reporter,
    stop: &AtomicBool,
    on_entry: &mut dyn FnMut(&str, &EntryOutcome),
) -> Result<WatchSummary> {
    check_meta(&options.deposit.meta)?;
    crate::store::refuse_unless_minting(collection)?;
    if let Some(root) = collection.local_root() {
        guard::check_source("inbox", inbox, root)?;
    }
    let deposited = inbox.join(DEPOSITED_DIR);
    for dir in [deposited.join(RECEIPTS_DIR), deposited.join(PENDING_DIR)] {
        create_dir_all_durable(&dir)?;
    }
    let hot = HotFolder { collection, inbox: inbox.to_path_buf(), deposited, options, clock, reporter };
    let mut summary = WatchSummary::default();
    hot.recover(&mut summary, on_entry)?;
    let (_watcher, rx) = match fsx::watch_tree(inbox) {
        Ok((watcher, rx)) => (Some(watcher), rx),
        Err(e) => {
            reporter.warning(&format!("{e}; scanning the inbox periodically instead"));
            (None, mpsc::channel().1)
        }
    };
    let mut settling = Settling::default();
    while !stop.load(Ordering::SeqCst) {
        settling.scan(&hot, stop, &mut summary, on_entry)?;
        let _ = rx.recv_timeout(options.poll);
        while rx.try_recv().is_ok() {}
    }
    Ok(summary)
}
