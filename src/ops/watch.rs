//! The hot folder (`watch INBOX ROOT`, DESIGN §5): each top-level entry of the
//! inbox, once it has stopped changing for the settle time, is deposited as
//! one item; the original then moves to `INBOX/.deposited/` (or is removed)
//! and a receipt holding the minted name is written beside it. `notify`
//! wakes the loop early; a periodic scan decides, so missed events only cost
//! latency. A `.pending` record written just before the item is placed lets a
//! restart finish an interrupted hand-off instead of depositing twice.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use notify::{RecursiveMode, Watcher};
use walkdir::WalkDir;

use crate::collection::{Collection, LockWait};
use crate::error::{ErrorClass, IoContext, Result};
use crate::fsx::{atomic_write, create_dir_all_durable, fsync_dir, remove_tree};
use crate::id::minter::Clock;
use crate::id::{Minted, RepositoryName};
use crate::ops::deposit::{deposit_batch, DepositOptions};
use crate::ops::report::Reporter;
use crate::ops::source::plan_paths;

pub const DEPOSITED_DIR: &str = ".deposited";
const PENDING_SUFFIX: &str = ".pending";
const RECEIPT_SUFFIX: &str = ".receipt";

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

/// What an entry looked like at the last scan: count, total size, latest mtime.
type Signature = (u64, u64, i128);

fn signature(path: &Path) -> Option<Signature> {
    let mut sig = (0u64, 0u64, 0i128);
    for entry in WalkDir::new(path).follow_links(false) {
        let meta = entry.ok()?.metadata().ok()?;
        let mtime =
            meta.modified().ok()?.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as i128).unwrap_or(0);
        sig = (sig.0 + 1, sig.1 + meta.len(), sig.2.max(mtime));
    }
    Some(sig)
}

/// Top-level inbox entries, skipping dot-names (`.deposited`, editors' temp files).
fn inbox_entries(inbox: &Path) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in fs::read_dir(inbox).with_path("list", inbox)? {
        let name = entry.with_path("list", inbox)?.file_name();
        match name.into_string() {
            Ok(n) if !n.starts_with('.') => names.push(n),
            _ => {}
        }
    }
    names.sort();
    Ok(names)
}

struct HotFolder<'a> {
    collection: &'a Collection,
    inbox: PathBuf,
    deposited: PathBuf,
    options: &'a WatchOptions,
    clock: &'a dyn Clock,
    reporter: &'a dyn Reporter,
}

impl HotFolder<'_> {
    fn pending_path(&self, entry: &str) -> PathBuf {
        self.deposited.join(format!("{entry}{PENDING_SUFFIX}"))
    }

    /// Moves (or removes) the original, writes the receipt, drops the pending record.
    fn hand_off(&self, entry: &str, name: &str, ibip: &str) -> Result<()> {
        let original = self.inbox.join(entry);
        if original.exists() || fs::symlink_metadata(&original).is_ok() {
            if self.options.remove {
                remove_tree(&original)?;
            } else {
                let mut target = self.deposited.join(entry);
                let mut n = 1;
                while fs::symlink_metadata(&target).is_ok() {
                    target = self.deposited.join(format!("{entry}.{n}"));
                    n += 1;
                }
                fs::rename(&original, &target).with_path("move to .deposited", &original)?;
            }
            fsync_dir(&self.inbox)?;
        }
        let receipt = self.deposited.join(format!("{entry}{RECEIPT_SUFFIX}"));
        atomic_write(&receipt, format!("{name}\t{ibip}\n").as_bytes())?;
        let pending = self.pending_path(entry);
        fs::remove_file(&pending).with_path("remove", &pending)?;
        fsync_dir(&self.deposited)
    }

    /// Finishes hand-offs that a previous run left between placing and receipting.
    fn recover(&self) -> Result<()> {
        for dir_entry in fs::read_dir(&self.deposited).with_path("list", &self.deposited)? {
            let file_name = dir_entry.with_path("list", &self.deposited)?.file_name();
            let Some(entry) = file_name.to_str().and_then(|n| n.strip_suffix(PENDING_SUFFIX)) else { continue };
            let pending = self.pending_path(entry);
            let text = fs::read_to_string(&pending).with_path("read", &pending)?;
            let (name, ibip) = text.trim_end().split_once('\t').unwrap_or((text.trim_end(), ""));
            let placed = RepositoryName::parse(name).is_ok_and(|n| self.collection.contains(&n));
            if placed {
                self.hand_off(entry, name, ibip)?;
            } else {
                fs::remove_file(&pending).with_path("remove", &pending)?;
            }
        }
        Ok(())
    }

    fn deposit_entry(&self, entry: &str) -> Result<Minted> {
        let _lock = self.collection.lock_writes(LockWait::Forever)?;
        self.collection.recover()?;
        let plan = plan_paths(&[self.inbox.join(entry)], self.options.deposit.follow_symlinks)?;
        let mut deposit = self.options.deposit.clone();
        deposit.move_sources = false;
        let record = |m: &Minted| {
            let ibip = m.ibip.map(|i| i.to_string()).unwrap_or_default();
            atomic_write(&self.pending_path(entry), format!("{}\t{ibip}\n", m.name).as_bytes())
        };
        let minted = deposit_batch(
            self.collection,
            std::slice::from_ref(&plan),
            &deposit,
            self.clock,
            self.reporter,
            Some(&record),
        )?
        .remove(0);
        let ibip = minted.ibip.map(|i| i.to_string()).unwrap_or_default();
        self.hand_off(entry, &minted.name.to_string(), &ibip)?;
        Ok(minted)
    }
}

/// Watches `inbox` until `stop` is set, depositing settled entries into `collection`.
/// Calls `on_deposit` for each item. Returns how many items were deposited.
pub fn watch(
    collection: &Collection,
    inbox: &Path,
    options: &WatchOptions,
    clock: &dyn Clock,
    reporter: &dyn Reporter,
    stop: &AtomicBool,
    on_deposit: &mut dyn FnMut(&str, &Minted),
) -> Result<u64> {
    let deposited = inbox.join(DEPOSITED_DIR);
    create_dir_all_durable(&deposited)?;
    let hot = HotFolder { collection, inbox: inbox.to_path_buf(), deposited, options, clock, reporter };
    hot.recover()?;
    let (tx, rx) = mpsc::channel();
    let mut watcher = notify::recommended_watcher(move |_| {
        let _ = tx.send(());
    })
    .ok();
    if let Some(w) = watcher.as_mut() {
        if w.watch(inbox, RecursiveMode::Recursive).is_err() {
            reporter.warning("cannot watch the inbox for events; scanning it periodically instead");
        }
    }
    let mut seen: HashMap<String, (Signature, Instant)> = HashMap::new();
    // Entries that cannot be bagged, by the signature they had: retried once they change.
    let mut refused: HashMap<String, Signature> = HashMap::new();
    let mut count = 0;
    while !stop.load(Ordering::SeqCst) {
        for entry in inbox_entries(inbox)? {
            let Some(sig) = signature(&inbox.join(&entry)) else { continue };
            if refused.get(&entry) == Some(&sig) {
                continue;
            }
            let now = Instant::now();
            let (last_sig, since) = seen.entry(entry.clone()).or_insert((sig, now));
            if *last_sig != sig {
                *last_sig = sig;
                *since = now;
            } else if now.duration_since(*since) >= options.settle && !stop.load(Ordering::SeqCst) {
                seen.remove(&entry);
                match hot.deposit_entry(&entry) {
                    Ok(minted) => {
                        on_deposit(&entry, &minted);
                        refused.remove(&entry);
                        count += 1;
                    }
                    Err(e) if e.class() != ErrorClass::Operational => {
                        reporter.warning(&format!("{entry} was not deposited: {e}"));
                        refused.insert(entry, sig);
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        seen.retain(|name, _| inbox.join(name).exists());
        let _ = rx.recv_timeout(options.poll);
        while rx.try_recv().is_ok() {}
    }
    Ok(count)
}
