//! The in-memory backend: a collection held in maps, shared by every handle made
//! with `handle()` (as processes share a folder). It keeps the whole `Store`
//! contract with locks instead of renames and fsyncs, which proves the seam and
//! gives tests a fast collection. Nothing survives the process.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{self, Read};
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Instant, SystemTime};

use crate::bag::files::{FileKind, TreeEntry, TreeError};
use crate::bag::manifest::check_path;
use crate::bag::BagFiles;
use crate::digest::{self, Algorithm, Digests, Hasher};
use crate::error::{Error, Result};
use crate::events::{Event, StoredEvent};
use crate::fsx::CopyError;
use crate::id::minter::MinterState;
use crate::id::{Ibip, RepositoryName, Subsystem, Timestamp};
use crate::problem::{Problem, ProblemKind};
use crate::store::config::Minting;
use crate::store::inventory::Forward;
use crate::store::log::{minting_event, placement_events, removal_event, EVENT_PAGE};
use crate::store::{
    item_ibip, FileSource, ItemRecord, Lease, Leased, Listed, LockWait, Placed, Placement, Refusal, Slot, StageId,
    Status, Store, WriteBackend, Writer,
};
use crate::sync::lock;

/// One bag's folders and files.
#[derive(Debug, Clone, Default)]
struct Bag {
    dirs: BTreeSet<String>,
    files: BTreeMap<String, (Vec<u8>, Option<SystemTime>)>,
}

#[derive(Default)]
struct Shared {
    items: Mutex<BTreeMap<RepositoryName, Bag>>,
    aliases: Mutex<BTreeMap<String, RepositoryName>>,
    stages: Mutex<(u64, HashMap<u64, Bag>)>,
    leased: Mutex<bool>,
    lease_freed: Condvar,
    minter: Mutex<Option<Timestamp>>,
    records: Mutex<HashMap<String, RepositoryName>>,
    inventory: Mutex<BTreeMap<RepositoryName, ItemRecord>>,
    /// `None` until set: a new collection mints.
    minting: Mutex<Option<Minting>>,
    /// The event log, sealed in order.
    log: Mutex<Vec<StoredEvent>>,
    /// Where the last chain check ended.
    chain_cursor: Mutex<Option<crate::events::ChainCursor>>,
    /// How many events `events` has handed out, for tests of what a check reads.
    events_served: std::sync::atomic::AtomicU64,
    /// The copies replacements displaced (`store::kept`), by id.
    kept: Mutex<BTreeMap<String, Bag>>,
}

/// A collection in memory.
#[derive(Clone)]
pub struct MemoryStore {
    shared: Arc<Shared>,
    subsystem: Subsystem,
    id: String,
}

impl MemoryStore {
    pub fn new(subsystem: Subsystem) -> MemoryStore {
        MemoryStore { shared: Arc::default(), subsystem, id: crate::store::config::new_collection_id() }
    }

    /// Changes the stored log behind the store's back (tests of the chain check).
    #[cfg(test)]
    pub fn tamper_with_log(&self, change: impl FnOnce(&mut Vec<StoredEvent>)) {
        change(&mut lock(&self.shared.log));
    }

    /// How many events the log has handed out so far.
    #[cfg(test)]
    pub fn events_served(&self) -> u64 {
        self.shared.events_served.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Another handle on the same collection, as a second process would open it.
    pub fn handle(&self) -> MemoryStore {
        self.clone()
    }

    /// Appends events to the log, each after the last (ids already logged are skipped).
    fn log(&self, events: &[Event]) {
        let mut log = lock(&self.shared.log);
        for event in events {
            if log.iter().any(|stored| stored.event().is_ok_and(|e| e.id == event.id)) {
                continue;
            }
            let prev = log.last().map_or_else(|| crate::events::genesis(&self.id), |s| s.hash.clone());
            let stored = event.clone().seal(log.len() as u64 + 1, &prev);
            log.push(stored);
        }
    }

    fn with_stage<T>(&self, stage: StageId, f: impl FnOnce(&mut Bag) -> T) -> Result<T> {
        let mut stages = lock(&self.shared.stages);
        let bag = stages
            .1
            .get_mut(&stage.0)
            .ok_or_else(|| Error::Invalid { what: "staging".into(), problem: format!("no staged item {}", stage.0) })?;
        Ok(f(bag))
    }
}

/// A bag's files as `BagFiles`, from a snapshot.
struct MemoryBag(Option<Bag>);

impl BagFiles for MemoryBag {
    fn root_kind(&self) -> io::Result<FileKind> {
        match &self.0 {
            Some(_) => Ok(FileKind::Dir),
            None => Err(io::Error::new(io::ErrorKind::NotFound, "no such item")),
        }
    }

    fn entries(&self) -> Vec<std::result::Result<TreeEntry, TreeError>> {
        let Some(bag) = &self.0 else { return Vec::new() };
        let mut entries: Vec<TreeEntry> = bag
            .dirs
            .iter()
            .map(|d| TreeEntry { rel: Ok(d.clone()), kind: FileKind::Dir })
            .chain(bag.files.iter().map(|(f, (bytes, _))| TreeEntry {
                rel: Ok(f.clone()),
                kind: FileKind::File { size: bytes.len() as u64 },
            }))
            .collect();
        entries.sort_by(|a, b| a.rel.cmp(&b.rel));
        entries.into_iter().map(Ok).collect()
    }

    fn read(&self, rel: &str) -> io::Result<Vec<u8>> {
        let bag = self.0.as_ref().ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        bag.files.get(rel).map(|(bytes, _)| bytes.clone()).ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
    }

    fn digests(&self, rel: &str, also: &[Algorithm]) -> io::Result<Digests> {
        self.read(rel).map(|bytes| digest::of_bytes(&bytes, also))
    }
}

/// The minter state in memory, updated under its mutex.
struct MemoryMinter<'a>(&'a Mutex<Option<Timestamp>>);

impl MinterState for MemoryMinter<'_> {
    fn update(&self, step: &mut dyn FnMut(Option<Timestamp>) -> Result<Timestamp>) -> Result<()> {
        let mut last = lock(self.0);
        *last = Some(step(*last)?);
        Ok(())
    }
    fn last(&self) -> Result<Option<Timestamp>> {
        Ok(*lock(self.0))
    }
}

/// Holds the lease until dropped.
struct MemoryLease(Arc<Shared>);

impl Drop for MemoryLease {
    fn drop(&mut self) {
        *lock(&self.0.leased) = false;
        self.0.lease_freed.notify_all();
    }
}

impl MemoryStore {
    fn take_lease(&self, wait: LockWait) -> Result<Lease> {
        let busy = || Error::Locked { path: "memory collection".into(), holder: None };
        let start = Instant::now();
        let mut leased = lock(&self.shared.leased);
        while *leased {
            leased = match wait {
                LockWait::No => return Err(busy()),
                LockWait::Forever => self.shared.lease_freed.wait(leased).unwrap_or_else(|p| p.into_inner()),
                LockWait::For(limit) => {
                    let left = limit.checked_sub(start.elapsed()).ok_or_else(busy)?;
                    self.shared.lease_freed.wait_timeout(leased, left).unwrap_or_else(|p| p.into_inner()).0
                }
            };
        }
        *leased = true;
        Ok(Lease(Box::new(MemoryLease(self.shared.clone()))))
    }

    fn place_one(
        &self,
        items: &mut BTreeMap<RepositoryName, Bag>,
        p: &Placement,
    ) -> Result<std::result::Result<(), Refusal>> {
        let bag = lock(&self.shared.stages).1.remove(&p.stage.0).ok_or_else(|| Error::Invalid {
            what: "staging".into(),
            problem: format!("no staged item {}", p.stage.0),
        })?;
        if items.contains_key(&p.name) && !p.replace {
            return Ok(Err(Error::AlreadyExists { path: format!("memory:{}", p.name).into() }));
        }
        let held = p.ibip.as_ref().and_then(|ibip| lock(&self.shared.aliases).get(&ibip.to_string()).cloned());
        if let Some(other) = held.filter(|other| *other != p.name) {
            let problem = format!("its IBIp's alias already names {other}, another item: the alias stays");
            return Ok(Err(Error::Data { what: p.name.to_string(), problem }));
        }
        if let Ok(mut record) = ItemRecord::from_bag(&MemoryBag(Some(bag.clone())), &p.name) {
            record.deposit_keys = p.record.as_ref().map(|r| r.deposit_keys.clone()).unwrap_or_default();
            self.log(&placement_events(&record, &p.action, &p.stage.0.to_string()));
            lock(&self.shared.inventory).insert(p.name.clone(), record);
        }
        if let Some(old) = items.insert(p.name.clone(), bag).filter(|_| p.action.keeps_what_it_replaces()) {
            let id = format!("{}@{}", p.name.to_string().replace('/', "+"), p.stage.0);
            lock(&self.shared.kept).insert(id, old);
        }
        if let Some(ibip) = &p.ibip {
            lock(&self.shared.aliases).insert(ibip.to_string(), p.name.clone());
        }
        Ok(Ok(()))
    }
}

impl crate::store::kept::KeptCopies for MemoryStore {
    fn list_kept(&self) -> Result<Vec<crate::store::kept::KeptCopy>> {
        let kept = lock(&self.shared.kept);
        let size = |bag: &Bag| bag.files.values().map(|(bytes, _)| bytes.len() as u64).sum();
        Ok(kept.iter().map(|(id, bag)| crate::store::kept::KeptCopy::from_id(id, size(bag))).collect())
    }

    fn remove_kept(&self, id: &str) -> Result<crate::store::kept::KeptCopy> {
        let listed = self.list_kept()?.into_iter().find(|k| k.id == id);
        let copy =
            listed.ok_or_else(|| Error::NotFound { what: "kept copy", name: id.into(), place: "memory".into() })?;
        lock(&self.shared.kept).remove(id);
        Ok(copy)
    }
}

impl Store for MemoryStore {
    fn aliases(&self) -> &dyn crate::store::aliases::Aliases {
        self
    }

    fn inventory(&self) -> &dyn crate::store::records::Records {
        self
    }

    fn ledger(&self) -> &dyn crate::store::ledger::Ledger {
        self
    }

    fn location(&self) -> String {
        "memory".into()
    }

    fn kept_copies(&self) -> Option<&dyn crate::store::kept::KeptCopies> {
        Some(self)
    }

    fn local_root(&self) -> Option<&Path> {
        None
    }

    fn subsystem(&self) -> &Subsystem {
        &self.subsystem
    }

    fn organisation(&self) -> Option<&str> {
        None
    }

    fn as_dyn(&self) -> &dyn Store {
        self
    }

    fn walk(&self) -> Box<dyn Iterator<Item = Result<Listed>> + Send + '_> {
        let names: Vec<RepositoryName> = lock(&self.shared.items).keys().cloned().collect();
        Box::new(names.into_iter().map(|n| Ok(Listed::Item(n))))
    }

    fn slot(&self, name: &RepositoryName) -> Result<Slot> {
        Ok(if lock(&self.shared.items).contains_key(name) { Slot::Item } else { Slot::Empty })
    }

    fn item_files<'a>(&'a self, name: &RepositoryName) -> Box<dyn BagFiles + 'a> {
        Box::new(MemoryBag(lock(&self.shared.items).get(name).cloned()))
    }

    fn open(&self, name: &RepositoryName, rel: &str) -> io::Result<(Box<dyn Read + Send + '_>, Option<SystemTime>)> {
        let items = lock(&self.shared.items);
        let (bytes, mtime) = items
            .get(name)
            .and_then(|bag| bag.files.get(rel))
            .cloned()
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        Ok((Box::new(io::Cursor::new(bytes)), mtime))
    }

    fn leftovers(&self) -> Vec<Problem> {
        // Under a free lease no writer is at work, so any staged item is left over.
        let Ok(_lease) = self.take_lease(LockWait::No) else { return Vec::new() };
        let staged = lock(&self.shared.stages).1.len();
        if staged == 0 {
            return Vec::new();
        }
        let detail =
            format!("{staged} staged item(s) left by an interrupted writer; the next writing command clears them");
        vec![Problem::new("staging", None, ProblemKind::Leftover, detail)]
    }

    fn begin_write(&self, wait: LockWait) -> Result<Box<dyn Writer + '_>> {
        Leased::begin(self, wait)
    }
}

impl crate::store::aliases::Aliases for MemoryStore {
    fn alias(&self, ibip: &Ibip) -> Result<Option<RepositoryName>> {
        Ok(lock(&self.shared.aliases).get(&ibip.to_string()).cloned())
    }

    fn dangling_aliases(&self, checked: &dyn Fn(&Ibip) -> bool) -> Result<Vec<(Ibip, RepositoryName)>> {
        let items = lock(&self.shared.items);
        let aliases = lock(&self.shared.aliases);
        Ok(aliases
            .iter()
            .filter(|(_, name)| !items.contains_key(*name))
            .filter_map(|(ibip, name)| Some((Ibip::parse(ibip).ok()?, name.clone())))
            .filter(|(ibip, name)| !checked(ibip) && ibip.date() == name.date())
            .collect())
    }

    fn alias_problem(&self, ibip: &Ibip, name: &RepositoryName) -> Option<String> {
        match lock(&self.shared.aliases).get(&ibip.to_string()) {
            Some(target) if target == name => None,
            Some(target) => Some(format!("alias {ibip} names {target}, expected {name}")),
            None => Some(format!("alias {ibip} is missing")),
        }
    }
}

impl crate::store::records::Records for MemoryStore {
    fn has_inventory(&self) -> bool {
        true
    }

    fn records(&self, names: &[RepositoryName]) -> Result<Vec<Option<ItemRecord>>> {
        let inventory = lock(&self.shared.inventory);
        Ok(names.iter().map(|n| inventory.get(n).cloned()).collect())
    }

    fn all_records(&self) -> Box<dyn Iterator<Item = Result<ItemRecord>> + Send + '_> {
        let records: Vec<ItemRecord> = lock(&self.shared.inventory).values().cloned().collect();
        Box::new(records.into_iter().map(Ok))
    }

    fn deposit_record(&self, key: &str) -> Result<Option<RepositoryName>> {
        Ok(lock(&self.shared.records).get(key).cloned())
    }

    fn collection_id(&self) -> Option<String> {
        Some(self.id.clone())
    }

    fn minting(&self) -> Result<Minting> {
        Ok(lock(&self.shared.minting).clone().unwrap_or(Minting::Mints))
    }
}

impl crate::store::ledger::Ledger for MemoryStore {
    fn events(&self, item: Option<&RepositoryName>, after: u64) -> Result<Option<Vec<StoredEvent>>> {
        let item = item.map(|n| n.to_string());
        let log = lock(&self.shared.log);
        let of_item = |s: &&StoredEvent| item.is_none() || s.event().is_ok_and(|e| e.item == item);
        let page: Vec<StoredEvent> =
            log.iter().skip(after as usize).filter(of_item).take(EVENT_PAGE).cloned().collect();
        self.shared.events_served.fetch_add(page.len() as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(Some(page))
    }

    fn log_head(&self) -> Result<Option<(u64, String)>> {
        Ok(lock(&self.shared.log).last().map(|last| (last.seq, last.hash.clone())))
    }

    fn chain_cursor(&self) -> Result<Option<crate::events::ChainCursor>> {
        Ok(lock(&self.shared.chain_cursor).clone())
    }

    fn writer(&self) -> Option<&dyn crate::store::ledger::LedgerWriter> {
        Some(self)
    }
}

impl crate::store::ledger::LedgerWriter for MemoryStore {
    fn keep_chain_cursor(&self, cursor: &crate::events::ChainCursor) -> Result<()> {
        *lock(&self.shared.chain_cursor) = Some(cursor.clone());
        Ok(())
    }
}

impl WriteBackend for MemoryStore {
    fn log_events(&self, events: &[crate::events::Event]) -> Result<()> {
        self.log(events);
        Ok(())
    }

    fn set_minting(&self, minting: &Minting) -> Result<()> {
        let before = lock(&self.shared.minting).replace(minting.clone()).unwrap_or(Minting::Mints);
        self.log(minting_event(&before, minting).as_slice());
        Ok(())
    }

    fn lease(&self, wait: LockWait) -> Result<Lease> {
        self.take_lease(wait)
    }

    fn recover(&self) -> Result<()> {
        lock(&self.shared.stages).1.clear();
        Ok(())
    }

    fn minter_state(&self) -> Box<dyn MinterState + '_> {
        Box::new(MemoryMinter(&self.shared.minter))
    }

    fn write_deposit_records(&self, records: &[(String, RepositoryName)]) -> Result<()> {
        lock(&self.shared.records).extend(records.iter().cloned());
        Ok(())
    }

    fn note_moved(&self, names: &[RepositoryName], to: &Forward) -> Result<()> {
        let mut inventory = lock(&self.shared.inventory);
        for name in names {
            if let Some(record) = inventory.get_mut(name) {
                record.moved = Some(to.clone());
            }
        }
        Ok(())
    }

    fn stage(&self) -> Result<StageId> {
        let mut stages = lock(&self.shared.stages);
        stages.0 += 1;
        let id = stages.0;
        stages.1.insert(id, Bag::default());
        Ok(StageId(id))
    }

    fn stage_dir(&self, stage: StageId, rel: &str) -> Result<()> {
        check_path(rel).map_err(|why| Error::Invalid { what: "staged path".into(), problem: why })?;
        self.with_stage(stage, |bag| {
            bag.dirs.insert(rel.to_string());
        })
    }

    fn stage_file(&self, stage: StageId, rel: &str, from: FileSource) -> std::result::Result<Digests, CopyError> {
        let invalid = |why: String| CopyError::Destination(Error::Invalid { what: "staged path".into(), problem: why });
        check_path(rel).map_err(invalid)?;
        let mut bytes = Vec::new();
        from.reader.read_to_end(&mut bytes).map_err(|e| CopyError::Source(Error::io("read", from.origin, e)))?;
        (from.progress)(bytes.len() as u64);
        let mut hasher = Hasher::new(from.also);
        hasher.update(&bytes);
        let taken = self
            .with_stage(stage, |bag| bag.files.insert(rel.to_string(), (bytes, from.mtime)).is_some())
            .map_err(CopyError::Destination)?;
        if taken {
            return Err(invalid(format!("{rel} is already staged")));
        }
        Ok(hasher.finish())
    }

    fn staged_files<'a>(&'a self, stage: StageId) -> Box<dyn BagFiles + 'a> {
        Box::new(MemoryBag(lock(&self.shared.stages).1.get(&stage.0).cloned()))
    }

    fn discard(&self, stage: StageId) {
        lock(&self.shared.stages).1.remove(&stage.0);
    }

    fn place(&self, batch: &[Placement]) -> Result<Placed> {
        let mut items = lock(&self.shared.items);
        batch.iter().map(|p| Ok((p.name.clone(), self.place_one(&mut items, p)?))).collect()
    }

    fn restore_alias(&self, ibip: &Ibip, name: &RepositoryName) -> Result<()> {
        lock(&self.shared.aliases).insert(ibip.to_string(), name.clone());
        Ok(())
    }

    fn remove(&self, names: &[RepositoryName]) -> Result<()> {
        let ibips: Vec<Option<Ibip>> = names.iter().map(|n| item_ibip(self, n).ok().flatten()).collect();
        let mut items = lock(&self.shared.items);
        let mut aliases = lock(&self.shared.aliases);
        let mut inventory = lock(&self.shared.inventory);
        for (name, ibip) in names.iter().zip(ibips) {
            items.remove(name);
            if let Some(record) = inventory.get_mut(name) {
                record.status = Status::Removed;
            }
            self.log(&[removal_event(name, inventory.get(name), &format!("{}", uuid::Uuid::new_v4()))]);
            if let Some(ibip) = ibip {
                if aliases.get(&ibip.to_string()) == Some(name) {
                    aliases.remove(&ibip.to_string());
                }
            }
        }
        Ok(())
    }
}
