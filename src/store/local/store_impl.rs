//! `Store` for a local `Collection`: the seam's calls mapped onto the folder
//! layout. Staged items are `.ibi/staging/` folders held by token until they
//! are placed (`place_all`) or discarded; reads never follow a link.

use std::fs;
use std::io::Read;
use std::path::Path;
use std::time::SystemTime;

use super::held_floor::Vouch;
use super::minter::{machine_states, newest_held, CollectionMinter};
use super::{alias, place_all, remove_all, Collection, Entry, Item, Staged, StagingDir};
use crate::bag::manifest::check_path;
use crate::bag::{BagFiles, DirBag};
use crate::digest::Digests;
use crate::error::{Error, IoContext, Result};
use crate::events::{EventKind, StoredEvent};
use crate::fsx::{self, CopyError, CopyMode};
use crate::id::minter::MinterState;
use crate::id::{Ibip, RepositoryName, Subsystem};
use crate::problem::{Problem, ProblemKind};
use crate::store::config::CollectionConfig;
use crate::store::config::Minting;
use crate::store::inventory::Forward;
use crate::store::records::Records;
use crate::store::StateFile;
use crate::store::{
    FileSource, ItemRecord, Lease, Leased, Listed, LockWait, Placed, Placement, RecordSummary, Slot, StageId, Store,
    WriteBackend, Writer,
};

impl Collection {
    fn staged_path(&self, stage: StageId, rel: &str) -> Result<std::path::PathBuf> {
        check_path(rel)
            .map_err(|why| Error::Invalid { what: "staged path".into(), problem: format!("{rel}: {why}") })?;
        let table = crate::sync::lock(&self.stages);
        let dir = table.dirs.get(&stage.0).ok_or_else(|| unknown_stage(stage))?;
        Ok(dir.path.join(rel))
    }

    /// Removes every staging folder this handle still holds. A far session's
    /// end calls it, after discarding each stage it knows of: a stage it lost
    /// track of (made by one request while another dropped it) goes too,
    /// since the handle lives as long as the process.
    pub fn drop_stages(&self) {
        let dirs = std::mem::take(&mut crate::sync::lock(&self.stages).dirs);
        drop(dirs);
    }

    /// Staging and trash that an interrupted writer left, with their size. Looked for
    /// only when no writer is at work (the write lock is free), so live staging never counts.
    fn leftover_problems(&self) -> Vec<Problem> {
        if !fsx::FileLock::is_free(&self.layout.write_lock()) {
            return Vec::new();
        }
        let mut problems = Vec::new();
        for dir in [self.layout.staging(), self.layout.trash()] {
            let (mut entries, mut bytes) = (0u64, 0u64);
            let top = fs::read_dir(&dir).map(|d| d.filter_map(|e| e.ok()).count()).unwrap_or(0);
            if top == 0 {
                continue;
            }
            for entry in walkdir::WalkDir::new(&dir).follow_links(false).min_depth(1).into_iter().flatten() {
                entries += 1;
                bytes += entry.metadata().map(|m| if m.is_file() { m.len() } else { 0 }).unwrap_or(0);
            }
            let rel = self.layout.relative(&dir).display().to_string();
            let detail = format!(
                "{top} leftover folder(s), {entries} entries, {bytes} bytes; the next writing command clears them"
            );
            problems.push(Problem::new(&rel, None, ProblemKind::Leftover, detail));
        }
        problems
    }
}

fn unknown_stage(stage: StageId) -> Error {
    Error::Invalid { what: "staging".into(), problem: format!("no staged item {}", stage.0) }
}

impl Store for Collection {
    fn aliases(&self) -> &dyn crate::store::aliases::Aliases {
        self
    }

    fn inventory(&self) -> &dyn crate::store::records::Records {
        self
    }

    fn ledger(&self) -> &dyn crate::store::ledger::Ledger {
        self
    }

    fn kept_copies(&self) -> Option<&dyn crate::store::kept::KeptCopies> {
        Some(self)
    }

    fn cosigner(&self) -> Option<&dyn crate::store::cosign::Cosigner> {
        Some(self)
    }

    fn location(&self) -> String {
        self.root().display().to_string()
    }

    fn local_root(&self) -> Option<&Path> {
        Some(self.root())
    }

    fn adopts_by_rename(&self, from: &dyn Store) -> bool {
        let Some(root) = from.local_root() else { return false };
        Collection::open(root).and_then(|src| super::place::same_filesystem(&src, self)).unwrap_or(false)
    }

    fn subsystem(&self) -> &Subsystem {
        &self.subsystem
    }

    fn organisation(&self) -> Option<&str> {
        self.config.organisation.as_deref()
    }

    fn as_dyn(&self) -> &dyn Store {
        self
    }

    fn walk(&self) -> Box<dyn Iterator<Item = Result<Listed>> + Send + '_> {
        Box::new(Collection::walk(self).map(|entry| {
            entry.map(|entry| match entry {
                Entry::Item(name) => Listed::Item(name),
                Entry::Stray { path, why } => {
                    Listed::Stray { place: self.layout.relative(&path).display().to_string(), why }
                }
            })
        }))
    }

    fn slot(&self, name: &RepositoryName) -> Result<Slot> {
        Ok(match Collection::slot(self, name)? {
            super::Slot::Empty => Slot::Empty,
            super::Slot::Item(_) => Slot::Item,
            super::Slot::Foreign(path) => Slot::Foreign(self.layout.relative(&path).display().to_string()),
        })
    }

    fn item_files<'a>(&'a self, name: &RepositoryName) -> Box<dyn BagFiles + 'a> {
        Box::new(DirBag::beneath(self.beneath(), &name.to_string()))
    }

    fn open(
        &self,
        name: &RepositoryName,
        rel: &str,
    ) -> std::io::Result<(Box<dyn Read + Send + '_>, Option<SystemTime>)> {
        self.open_from(name, rel, 0)
    }

    /// Opened beneath the collection root, never through a symlink (`fsx::open_beneath`).
    fn open_from(
        &self,
        name: &RepositoryName,
        rel: &str,
        offset: u64,
    ) -> std::io::Result<(Box<dyn Read + Send + '_>, Option<SystemTime>)> {
        use std::io::{Seek, SeekFrom};
        check_path(rel).map_err(|why| std::io::Error::new(std::io::ErrorKind::InvalidInput, why))?;
        let mut opened = self.beneath().open(&format!("{name}/{rel}"))?;
        if offset > 0 {
            opened.file.seek(SeekFrom::Start(offset))?;
        }
        Ok((Box::new(opened.file), opened.meta.modified().ok()))
    }

    /// The item folder's inode and change time: a placement or replacement puts a
    /// new folder at the name (a rename), so a new stamp means new contents.
    fn item_stamp(&self, name: &RepositoryName) -> Option<String> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::symlink_metadata(self.layout.item(name)).ok()?;
        Some(format!("{}:{}:{}.{}", meta.dev(), meta.ino(), meta.ctime(), meta.ctime_nsec()))
    }

    /// Identity digests from the inventory, which records each one as its item is
    /// placed; an item it does not record is read from its bag. A change made behind
    /// ibi's back is found by `verify`, which compares the two.
    fn identities(&self, names: &[RepositoryName]) -> Vec<Result<String>> {
        use rayon::prelude::*;
        let recorded = self.with_inventory(|inventory| inventory.held_digests(names)).ok().flatten();
        let recorded = recorded.unwrap_or_else(|| vec![None; names.len()]);
        if recorded.iter().all(Option::is_some) {
            return recorded.into_iter().map(|digest| Ok(digest.unwrap_or_default())).collect();
        }
        names
            .par_iter()
            .zip(recorded)
            .map(|(name, digest)| digest.map_or_else(|| crate::store::identity_digest(self, name), Ok))
            .collect()
    }

    /// From the bags, each answered from the identity cache while its
    /// tagmanifest's stat is unchanged (`identities`), read otherwise.
    fn bag_identities(&self, names: &[RepositoryName]) -> Vec<Result<String>> {
        self.bag_identities_cached(names)
    }

    fn leftovers(&self) -> Vec<Problem> {
        self.leftover_problems()
    }

    fn begin_write(&self, wait: LockWait) -> Result<Box<dyn Writer + '_>> {
        Leased::begin(self, wait)
    }
}

impl crate::store::aliases::Aliases for Collection {
    fn alias(&self, ibip: &Ibip) -> Result<Option<RepositoryName>> {
        let Ok(target) = fs::read_link(self.layout.alias(ibip)) else { return Ok(None) };
        let Ok(rel) = target.strip_prefix("../..") else { return Ok(None) };
        Ok(RepositoryName::parse(&rel.to_string_lossy()).ok())
    }

    fn dangling_aliases(&self, checked: &dyn Fn(&Ibip) -> bool) -> Result<Vec<(Ibip, RepositoryName)>> {
        alias::dangling(&self.layout, self.beneath(), checked, &|name| self.contains(name))
    }

    fn alias_problem(&self, ibip: &Ibip, name: &RepositoryName) -> Option<String> {
        alias::check(&self.layout, (self.beneath(), &self.alias_folders), ibip, name)
    }
}

impl crate::store::records::Records for Collection {
    fn has_inventory(&self) -> bool {
        self.layout.inventory().is_file()
    }

    fn records(&self, names: &[RepositoryName]) -> Result<Vec<Option<ItemRecord>>> {
        Ok(self.with_inventory(|inventory| inventory.get(names))?.unwrap_or_else(|| vec![None; names.len()]))
    }

    fn recorded_states(&self, names: &[RepositoryName]) -> Result<Vec<Option<(crate::store::Status, String)>>> {
        let states = self.with_inventory(|inventory| inventory.recorded_states(names))?;
        Ok(states.unwrap_or_else(|| vec![None; names.len()]))
    }

    fn all_records(&self) -> Box<dyn Iterator<Item = Result<ItemRecord>> + Send + '_> {
        Box::new(Collection::all_records(self))
    }

    fn present_names(&self) -> Box<dyn Iterator<Item = Result<RepositoryName>> + Send + '_> {
        Box::new(Collection::present_names(self))
    }

    fn record_summaries(&self) -> Box<dyn Iterator<Item = Result<RecordSummary>> + Send + '_> {
        Box::new(Collection::record_summaries(self))
    }

    /// From the summaries' covering index, no record decoded.
    fn newest_name_of(&self, prefix: &crate::id::Prefix) -> Result<Option<crate::id::Timestamp>> {
        Ok(self.with_inventory(|inventory| inventory.newest_of(prefix))?.flatten())
    }

    fn record_names(&self) -> Box<dyn Iterator<Item = Result<RepositoryName>> + Send + '_> {
        Box::new(Collection::record_summaries(self).map(|summary| summary.map(|s| s.name)))
    }

    fn deposit_record(&self, key: &str) -> Result<Option<RepositoryName>> {
        Collection::deposit_record(self, key)
    }

    fn collection_id(&self) -> Option<String> {
        self.id.get().cloned()
    }

    fn current_config(&self) -> Result<Option<CollectionConfig>> {
        Ok(Some(CollectionConfig::read(&self.layout.config())?.0))
    }

    fn minting(&self) -> Result<Minting> {
        Collection::minting(self)
    }
}

impl crate::store::ledger::Ledger for Collection {
    fn fixity_checks(&self) -> Result<Option<Vec<crate::store::inventory::FixityCheck>>> {
        Ok(Some(self.with_inventory(|inventory| inventory.fixity_checks())?.unwrap_or_default()))
    }

    /// Row by row from the inventory, never all at once.
    fn each_fixity_check(&self, each: &mut dyn FnMut(crate::store::inventory::FixityCheck)) -> Result<bool> {
        self.with_inventory(|inventory| inventory.each_fixity_check(each))?;
        Ok(true)
    }

    fn latest_witness(&self) -> Result<Option<String>> {
        let path = self.layout.witness();
        match fsx::read_capped(&path, 64 * 1024) {
            Ok(bytes) => Ok(Some(String::from_utf8_lossy(&bytes).into_owned())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io("read", &path, e)),
        }
    }

    fn events(&self, item: Option<&RepositoryName>, after: u64) -> Result<Option<Vec<StoredEvent>>> {
        let item = item.map(ToString::to_string);
        let page = self
            .with_inventory(|inventory| inventory.events_page(after, item.as_deref(), crate::store::log::EVENT_PAGE))?;
        Ok(Some(page.unwrap_or_default()))
    }

    fn items_events(&self, names: &[RepositoryName]) -> Result<Vec<Vec<StoredEvent>>> {
        let texts: Vec<String> = names.iter().map(ToString::to_string).collect();
        let found = self.with_inventory(|inventory| inventory.items_events(&texts, crate::store::log::MAX_CARRIED))?;
        Ok(found.unwrap_or_else(|| vec![Vec::new(); names.len()]))
    }

    fn log_head(&self) -> Result<Option<(u64, String)>> {
        Ok(self.with_inventory(|inventory| inventory.log_head())?.flatten())
    }

    fn chain_cursor(&self) -> Result<Option<crate::events::ChainCursor>> {
        Ok(self.with_inventory(|inventory| inventory.chain_cursor())?.flatten())
    }

    fn writer(&self) -> Option<&dyn crate::store::ledger::LedgerWriter> {
        (!self.read_only).then_some(self)
    }
}

impl crate::store::ledger::LedgerWriter for Collection {
    fn record_fixity(&self, checks: &[crate::store::inventory::FixityCheck]) -> Result<()> {
        if !self.has_inventory() {
            return Ok(());
        }
        self.with_fixity_writer(|inventory| inventory.record_fixity(checks)).map(drop)
    }

    fn witness_seed(&self) -> Result<Option<[u8; 32]>> {
        let Some(seed) = crate::store::witness_key::witness_seed(&self.layout.witness_key(), true)? else {
            return Ok(None);
        };
        self.publish_witness_key(&seed)?;
        Ok(Some(seed))
    }

    fn keep_witness(&self, json: &str) -> Result<()> {
        fsx::atomic_write(&self.layout.witness(), json.as_bytes())?;
        let event = crate::store::log::witness_event(json);
        self.with_inventory(|inventory| inventory.log(&[event])).map(drop)
    }

    fn keep_chain_cursor(&self, cursor: &crate::events::ChainCursor) -> Result<()> {
        if !self.has_inventory() {
            return Ok(());
        }
        self.with_inventory(|inventory| inventory.keep_chain_cursor(cursor)).map(drop)
    }

    fn change_config(
        &self,
        change: &mut dyn FnMut(&mut CollectionConfig) -> Result<()>,
    ) -> Result<Option<CollectionConfig>> {
        Collection::change_config(self, change).map(Some)
    }
}

impl WriteBackend for Collection {
    fn log_events(&self, events: &[crate::events::Event]) -> Result<()> {
        self.with_inventory(|inventory| inventory.log(events)).map(drop)
    }

    fn lease(&self, wait: LockWait) -> Result<Lease> {
        Ok(Lease(Box::new((self.vouch.until_released(), self.lock_writes(wait)?))))
    }

    fn recover(&self) -> Result<()> {
        Collection::recover(self)
    }

    fn minter_state(&self) -> Box<dyn MinterState + '_> {
        Box::new(CollectionMinter {
            machine: self.minter_dir.as_ref().map(|dir| machine_states(dir, &self.subsystem)).unwrap_or_default(),
            own: StateFile::new(self.layout.minter_state(), self.layout.minter_lock()),
            floor: Box::new(|| match self.held_floor.get() {
                Some(floor) => Ok(*floor),
                None => {
                    let prefix = self.subsystem.prefix();
                    let recorded = self.with_inventory(|inv| inv.newest_of(prefix))?.flatten();
                    let logged = self.with_inventory(|inv| inv.newest_minted(prefix))?.flatten();
                    let recorded = recorded.max(logged);
                    let floor = newest_held(&self.layout, &self.subsystem)?.max(recorded);
                    let floor = *self.held_floor.get_or_init(|| floor);
                    self.vouch.start(floor);
                    Ok(floor)
                }
            }),
        })
    }

    fn write_deposit_records(&self, records: &[(String, RepositoryName)]) -> Result<()> {
        Collection::write_deposit_records(self, records)
    }

    fn stage(&self) -> Result<StageId> {
        let dir = StagingDir::new(self)?;
        let mut table = crate::sync::lock(&self.stages);
        table.next += 1;
        let id = table.next;
        table.dirs.insert(id, dir);
        Ok(StageId(id))
    }

    fn stage_dir(&self, stage: StageId, rel: &str) -> Result<()> {
        let path = self.staged_path(stage, rel)?;
        fs::create_dir(&path).with_path("create", &path)
    }

    fn stage_file(&self, stage: StageId, rel: &str, from: FileSource) -> std::result::Result<Digests, CopyError> {
        let path = self.staged_path(stage, rel).map_err(CopyError::Destination)?;
        let mode = CopyMode { follow: false, sync: false, progress: from.progress, also: from.also };
        fsx::write_hashing(from.reader, from.origin, &path, from.mtime, mode)
    }

    /// A hard link: the earlier version and the new one share the file's bytes. Only
    /// a regular file is linked; where a link cannot be made, the file is copied.
    fn stage_link(&self, stage: StageId, rel: &str, name: &RepositoryName, from: &str) -> Result<()> {
        check_path(from)
            .map_err(|why| Error::Invalid { what: "item path".into(), problem: format!("{from}: {why}") })?;
        let source = self.layout.item(name).join(from);
        let meta = fs::symlink_metadata(&source).with_path("inspect", &source)?;
        if !meta.is_file() {
            let problem = format!("{} is a {}, not a regular file", from, fsx::file_kind_name(&meta.file_type()));
            return Err(Error::Data { what: format!("item {name}"), problem });
        }
        let target = self.staged_path(stage, rel)?;
        match fs::hard_link(&source, &target) {
            Ok(()) => Ok(()),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EXDEV | libc::EPERM | libc::EMLINK)) => {
                let (mut reader, mtime) = Store::open(self, name, from).with_path("open", &source)?;
                let source = FileSource { reader: &mut reader, origin: &source, mtime, also: &[], progress: &|_| {} };
                self.stage_file(stage, rel, source).map(drop).map_err(Error::from)
            }
            Err(e) => Err(Error::io("link", &target, e)),
        }
    }

    fn staged_files<'a>(&'a self, stage: StageId) -> Box<dyn BagFiles + 'a> {
        let table = crate::sync::lock(&self.stages);
        // An unknown token names a folder that cannot exist, never the current one.
        let path = table.dirs.get(&stage.0).map_or_else(|| self.layout.staging().join(".unknown"), |d| d.path.clone());
        Box::new(DirBag::new(&path))
    }

    fn discard(&self, stage: StageId) {
        let removed = crate::sync::lock(&self.stages).dirs.remove(&stage.0);
        drop(removed);
    }

    fn place(&self, batch: &[Placement]) -> Result<Placed> {
        let mut staged = Vec::with_capacity(batch.len());
        {
            let mut table = crate::sync::lock(&self.stages);
            for p in batch {
                let dir = table.dirs.remove(&p.stage.0).ok_or_else(|| unknown_stage(p.stage))?;
                let mut copy = Staged::new(dir, p.name.clone(), p.ibip, 0);
                copy.replace = p.replace;
                copy.record = p.record.clone();
                copy.action = p.action.clone();
                if copy.action.kind.is_none() {
                    copy.action.kind = Some(if p.replace { EventKind::Update } else { EventKind::Deposit });
                }
                staged.push(copy);
            }
        }
        let newest = Vouch::newest_of(&self.subsystem, staged.iter().map(|copy| &copy.name));
        let placed = place_all(self, staged);
        match &placed {
            Ok(_) => self.vouch.placed(&self.layout, &self.subsystem, newest),
            Err(_) => self.vouch.forfeit(),
        }
        placed
    }

    fn restore_alias(&self, ibip: &Ibip, name: &RepositoryName) -> Result<()> {
        alias::create(&self.layout, ibip, name)
    }

    fn remove(&self, names: &[RepositoryName]) -> Result<()> {
        self.vouch.forfeit();
        let items: Vec<Item> = names.iter().map(|n| self.item(n)).collect();
        remove_all(self, &items)
    }

    /// Sets it, then logs the change (a kill between the two loses the event,
    /// never the change; a rerun finds nothing to change and logs nothing).
    fn set_minting(&self, minting: &Minting) -> Result<()> {
        let before = self.minting()?;
        Collection::set_minting(self, minting)?;
        let event = crate::store::log::minting_event(&before, minting);
        self.with_inventory(|inventory| inventory.log(event.as_slice())).map(drop)
    }

    fn note_moved(&self, names: &[RepositoryName], to: &Forward) -> Result<()> {
        self.record_moved(names, to)
    }

    /// From a local collection on this filesystem: each item renamed into place
    /// (`move_all`), never copied. The caller has verified them where they are.
    fn adopt_from(&self, from: &dyn Writer, names: &[RepositoryName]) -> Result<Option<Placed>> {
        let Some(root) = from.store().local_root() else { return Ok(None) };
        let src = Collection::open(root)?;
        if !super::place::same_filesystem(&src, self)? {
            return Ok(None);
        }
        self.vouch.forfeit();
        let items: Vec<Item> = names.iter().map(|n| src.item(n)).collect();
        super::move_all(&src, self, &items).map(Some)
    }
}
