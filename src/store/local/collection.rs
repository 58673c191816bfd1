//! A `Collection`: a directory root holding items at their repository-name
//! paths (ARCHITECTURE.md, "On-disk layout"), with its config, minter, write lock, staging, trash,
//! journal and alias tree. An `Item` is one deposited bag in it. This module
//! owns opening and creating collections, locking writers out, minting,
//! resolving names and IBIps, and recovering after an interrupted writer.

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::alias;
use super::journal_identity::staged_version_at;
pub use super::layout::Layout;
pub use super::walk::{Entry, ItemWalker};
use crate::bag::{self, BagInfo};
use crate::error::{Error, IoContext, Result};
use crate::fsx::{self, atomic_write, create_dir_all_durable, fsync_dir, FileLock};
use crate::id::{Ibip, Minted, RepositoryName, Subsystem};
pub use crate::store::config::{CollectionConfig, Minting, Peer};
use crate::store::log::StepLog;
pub use crate::store::LockWait;
use crate::store::{guard, registry};

#[derive(Debug, Clone)]
pub struct Collection {
    pub layout: Layout,
    pub config: CollectionConfig,
    pub subsystem: Subsystem,
    /// Items staged through the `Store` seam, by token.
    pub(crate) stages: std::sync::Arc<Mutex<StageTable>>,
    /// The newest name of its own subsystem the collection held when this handle
    /// first minted: the minter never goes at or before it.
    pub(crate) held_floor: std::sync::OnceLock<Option<crate::id::Timestamp>>,
    /// What this handle can vouch for about the newest name held (`held_floor`).
    pub(crate) vouch: super::held_floor::Vouch,
    /// Where the machine-wide minter states are (default: `minter::machine_dir()`).
    pub(crate) minter_dir: Option<PathBuf>,
    /// The collection's id (from the config, or given by `upgrade`).
    pub(crate) id: std::sync::OnceLock<String>,
    /// The inventory, opened once and shared by clones.
    pub(crate) inventory: std::sync::Arc<super::inventory::InventoryHandle>,
    /// Opened to read only (`ibi serve --stdio --read-only`): it takes no lock and
    /// creates no file, not even SQLite's write-ahead log.
    pub(crate) read_only: bool,
    /// The path this machine knows the collection by, when `layout.root` reaches
    /// it through a far server's pinned handle (for the minting registry).
    pub(crate) known_as: Option<PathBuf>,
    /// The root held open for reading items beneath it (`fsx::Beneath`), on first
    /// use; shared by clones.
    pub(crate) beneath: std::sync::Arc<std::sync::OnceLock<crate::fsx::Beneath>>,
    /// The alias folders read so far, held open; shared by clones.
    pub(crate) alias_folders: std::sync::Arc<super::alias::HeldFolders>,
}

/// `path` made absolute against the working folder (not resolved: no link is followed).
pub fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

fn id_of(config: &CollectionConfig) -> std::sync::OnceLock<String> {
    let id = std::sync::OnceLock::new();
    if let Some(known) = &config.id {
        let _ = id.set(known.clone());
    }
    id
}

/// One item: its name and its directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub name: RepositoryName,
    pub path: PathBuf,
}

impl Item {
    pub fn info(&self) -> Result<BagInfo> {
        bag::info::read_info(&bag::DirBag::new(&self.path), &self.path.display().to_string())
    }

    /// The IBIp recorded in bag-info (an External-Identifier that parses as one).
    pub fn ibip(&self) -> Result<Option<Ibip>> {
        Ok(crate::store::ibip_in(&self.info()?))
    }
}

/// A folder in `.ibi/staging/` that removes itself unless `placed` is set. While it
/// lives it is registered, so that an interrupted process can remove it before exit.
#[derive(Debug)]
pub struct StagingDir {
    pub path: PathBuf,
    pub placed: bool,
}

/// The staging folders this process has open: a set, since a deposit holds
/// thousands at once and each drop removes its own (a list scanned on each
/// drop made a batch's cost grow with its square: 12% of a 3,000-item deposit).
static LIVE_STAGING: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());

/// Holds the staging registry: while it is held no staging folder is created,
/// dropped or (by `place_all`) renamed, and `remove_live_staging` waits for it.
pub fn staging_guard() -> MutexGuard<'static, BTreeSet<PathBuf>> {
    LIVE_STAGING.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// For an interrupt (SIGINT, SIGTERM): waits until no placement is renaming, removes
/// every staging folder this process still has, and returns the registry held, so
/// that nothing else is staged or placed before the process exits.
pub fn remove_live_staging() -> MutexGuard<'static, BTreeSet<PathBuf>> {
    let live = staging_guard();
    for path in live.iter() {
        let _ = fsx::remove_tree(path);
    }
    live
}

impl StagingDir {
    pub fn new(collection: &Collection) -> Result<StagingDir> {
        let parent = collection.layout.staging();
        create_dir_all_durable(&parent)?;
        let mut live = staging_guard();
        let dir =
            tempfile::Builder::new().prefix("item-").tempdir_in(&parent).with_path("create staging in", &parent)?;
        let path = dir.keep();
        live.insert(path.clone());
        Ok(StagingDir { path, placed: false })
    }
}

impl Drop for StagingDir {
    fn drop(&mut self) {
        let mut live = staging_guard();
        if !self.placed {
            let _ = fsx::remove_tree(&self.path);
        }
        live.remove(&self.path);
    }
}

/// The staging folders a collection handle holds, by token.
#[derive(Debug, Default)]
pub struct StageTable {
    pub(super) next: u64,
    pub(super) dirs: std::collections::HashMap<u64, StagingDir>,
}

/// What occupies an item's place in the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Slot {
    Empty,
    /// A real directory (an item, or something damaged in its place).
    Item(Item),
    /// A symlink or a file: never followed, never written through.
    Foreign(PathBuf),
}

/// What a journal record announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Intent {
    /// An item is being renamed into place; its alias may be missing.
    Place,
    /// An item is being removed; its alias may be left dangling.
    Remove,
}

impl Intent {
    fn prefix(self) -> &'static str {
        match self {
            Intent::Place => "place-",
            Intent::Remove => "remove-",
        }
    }
}

/// Refuses a symlink where ibi expects its own file or folder.
fn refuse_symlink(path: &Path) -> Result<()> {
    if fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(Error::Invalid {
            what: "collection".into(),
            problem: format!("{} is a symlink; ibi never follows symlinks inside a collection", path.display()),
        });
    }
    Ok(())
}

impl Collection {
    /// Creates a collection at `root` (which may exist, but must not be a collection).
    /// Creates a collection with `config` at `root` (absent or empty). A minting
    /// one is refused when the registry in `minter_dir` names another collection
    /// minting the subsystem on this machine, and is registered there.
    pub fn init(root: &Path, config: &CollectionConfig, minter_dir: Option<PathBuf>) -> Result<Collection> {
        let (_, subsystem) = CollectionConfig::parse(&config.to_toml(), "the new collection's config")?;
        let layout = Layout::new(root);
        guard::check_new_root(root)?;
        let registry = match (&minter_dir, config.minting().mints()) {
            (Some(dir), true) => {
                let lock = registry::lock(dir, &subsystem)?;
                let location = absolute(root).display().to_string();
                registry::refuse_if_held(dir, &subsystem, &location, config.id.as_deref())?;
                registry::refuse_shared_ibip(dir, &subsystem, &location)?;
                Some((dir, lock))
            }
            _ => None,
        };
        for dir in [layout.staging(), layout.trash(), layout.journal(), layout.aliases()] {
            create_dir_all_durable(&dir)?;
        }
        super::inventory::Inventory::create(&layout.inventory(), std::iter::empty())?;
        atomic_write(&layout.config(), config.to_toml().as_bytes())?;
        if let (Some((dir, _lock)), Some(id)) = (&registry, &config.id) {
            registry::register(dir, &subsystem, id, &absolute(root).display().to_string())?;
        }
        Ok(Collection {
            layout,
            id: id_of(config),
            inventory: Default::default(),
            config: config.clone(),
            subsystem,
            stages: Default::default(),
            held_floor: Default::default(),
            vouch: Default::default(),
            minter_dir,
            read_only: false,
            known_as: None,
            beneath: Default::default(),
            alias_folders: Default::default(),
        })
    }

    /// The root, held open, that item files are read beneath.
    pub(crate) fn beneath(&self) -> &crate::fsx::Beneath {
        self.beneath.get_or_init(|| crate::fsx::Beneath::held(&self.layout.root))
    }

    /// Opens an existing collection; a root without `.ibi/collection.toml` is invalid input.
    pub fn open(root: &Path) -> Result<Collection> {
        let layout = Layout::new(root);
        refuse_symlink(&layout.control())?;
        if !layout.config().is_file() {
            return Err(Error::Invalid {
                what: "collection".into(),
                problem: format!("{} is not an ibi collection (it has no .ibi/collection.toml)", root.display()),
            });
        }
        for own in layout.own_paths() {
            refuse_symlink(&own)?;
        }
        let (config, subsystem) = CollectionConfig::read(&layout.config())?;
        Ok(Collection {
            layout,
            id: id_of(&config),
            inventory: Default::default(),
            config,
            subsystem,
            stages: Default::default(),
            held_floor: Default::default(),
            vouch: Default::default(),
            minter_dir: super::minter::machine_dir(),
            read_only: false,
            known_as: None,
            beneath: Default::default(),
            alias_folders: Default::default(),
        })
    }

    /// The collection's part in minting, as its config says now (another process
    /// may have handed minting over since this handle opened it).
    pub fn minting(&self) -> Result<Minting> {
        Ok(CollectionConfig::read(&self.layout.config())?.0.minting())
    }

    /// Sets the collection's part in minting (retire, handover), durably: a retired
    /// collection keeps its items and serves them, copy, mirror and migrate read
    /// from it, but it mints no more names. Call with the write lock.
    /// A collection that starts minting is refused when another collection mints
    /// its subsystem on this machine, and is registered as the one that does.
    pub fn set_minting(&self, minting: &Minting) -> Result<()> {
        let (config, _) = CollectionConfig::read(&self.layout.config())?;
        let config = config.with_minting(minting);
        let (Some(dir), true) = (&self.minter_dir, minting.mints()) else {
            return atomic_write(&self.layout.config(), config.to_toml().as_bytes());
        };
        let where_known = self.known_as.clone().unwrap_or_else(|| absolute(self.root()));
        let _lock = registry::lock(dir, &self.subsystem)?;
        let id = self.id.get().cloned().or(config.id.clone()).unwrap_or_else(|| where_known.display().to_string());
        let location = where_known.display().to_string();
        registry::refuse_if_held(dir, &self.subsystem, &location, Some(&id))?;
        registry::refuse_shared_ibip(dir, &self.subsystem, &location)?;
        atomic_write(&self.layout.config(), config.to_toml().as_bytes())?;
        registry::register(dir, &self.subsystem, &id, &location)
    }

    /// Changes the collection's configuration under the write lease (`change`
    /// may refuse); the new file replaces the old atomically.
    pub fn change_config(&self, change: impl FnOnce(&mut CollectionConfig) -> Result<()>) -> Result<CollectionConfig> {
        let _writer = crate::store::Store::begin_write(self, crate::store::LockWait::For(Duration::from_secs(30)))?;
        let (mut config, _) = CollectionConfig::read(&self.layout.config())?;
        change(&mut config)?;
        let text = config.to_toml();
        CollectionConfig::parse(&text, &self.layout.config().display().to_string())?;
        atomic_write(&self.layout.config(), text.as_bytes())?;
        Ok(config)
    }

    /// Checks the witness key `seed` against the public key `collection.toml`
    /// publishes, writing it there the first time: a key that is not the published
    /// one was replaced, and nothing it would sign could be trusted.
    pub fn publish_witness_key(&self, seed: &[u8; 32]) -> Result<()> {
        let public = crate::store::witness_key::public_key(seed);
        let published = CollectionConfig::read(&self.layout.config())?.0.witness_key;
        match published {
            Some(key) if key == public => Ok(()),
            Some(key) => Err(Error::Data {
                what: self.layout.witness_key().display().to_string(),
                problem: format!(
                    "its public key {public} is not the one collection.toml publishes ({key}): the key was replaced. \
                     Restore the original key, or remove witness_key from collection.toml to publish this one"
                ),
            }),
            None if self.read_only => Ok(()),
            None => self
                .change_config(|config| {
                    config.witness_key.get_or_insert(public.clone());
                    Ok(())
                })
                .and_then(|config| match config.witness_key {
                    Some(key) if key == public => Ok(()),
                    _ => self.publish_witness_key(seed),
                }),
        }
    }

    /// Names the path this machine knows the collection by (a far server pins the
    /// folder and reaches it through `/proc/self/fd`).
    pub fn known_as(mut self, real: &Path) -> Collection {
        self.known_as = Some(real.to_path_buf());
        self
    }

    /// Uses `dir` for the machine-wide minter states instead of the default (tests,
    /// and hosts that keep them elsewhere).
    pub fn with_minter_dir(mut self, dir: &Path) -> Collection {
        self.minter_dir = Some(dir.to_path_buf());
        self
    }

    pub fn root(&self) -> &Path {
        &self.layout.root
    }

    /// This collection, to be read only: every write and the lease are refused.
    pub fn read_only(mut self) -> Collection {
        self.read_only = true;
        self
    }

    /// Takes the collection's write lock.
    pub fn lock_writes(&self, wait: LockWait) -> Result<FileLock> {
        if self.read_only {
            let why = "it was opened to read only".into();
            return Err(Error::Refused { what: format!("writing to {}", self.root().display()), why });
        }
        create_dir_all_durable(&self.layout.control())?;
        let path = self.layout.write_lock();
        match wait {
            LockWait::Forever => FileLock::acquire(&path),
            LockWait::No => FileLock::try_acquire(&path),
            LockWait::For(limit) => {
                let start = Instant::now();
                loop {
                    match FileLock::try_acquire(&path) {
                        Err(Error::Locked { .. }) if start.elapsed() < limit => {
                            std::thread::sleep(Duration::from_millis(100))
                        }
                        other => return other,
                    }
                }
            }
        }
    }

    pub fn item(&self, name: &RepositoryName) -> Item {
        Item { name: name.clone(), path: self.layout.item(name) }
    }

    /// Whether a real item directory (not a symlink) holds `name`.
    pub fn contains(&self, name: &RepositoryName) -> bool {
        self.beneath().is_folder(&name.to_string())
    }

    /// What is at `name`'s place, checking every component without following links.
    pub fn slot(&self, name: &RepositoryName) -> Result<Slot> {
        let mut path = self.layout.root.clone();
        for component in name.components() {
            path.push(component);
            match fs::symlink_metadata(&path) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Slot::Empty),
                Err(e) => return Err(Error::io("inspect", &path, e)),
                Ok(m) if !m.is_dir() => return Ok(Slot::Foreign(path)),
                Ok(_) => {}
            }
        }
        Ok(Slot::Item(self.item(name)))
    }

    /// Creates the three parent directories of `name`'s place, refusing to go
    /// through anything that is not a real directory.
    pub fn make_parents(&self, name: &RepositoryName, known: &BTreeSet<PathBuf>) -> Result<PathBuf> {
        let parent = self.layout.item(name).parent().map(Path::to_path_buf);
        if let Some(parent) = parent.filter(|p| known.contains(p)) {
            return Ok(parent);
        }
        let mut path = self.layout.root.clone();
        for component in &name.components()[..3] {
            let parent = path.clone();
            path.push(component);
            match fs::symlink_metadata(&path) {
                Ok(m) if m.is_dir() => continue,
                Ok(_) => {
                    return Err(Error::Data {
                        what: format!("item {name}"),
                        problem: format!("{} is not a directory; refusing to write through it", path.display()),
                    })
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io("inspect", &path, e)),
            }
            match fs::create_dir(&path) {
                Ok(()) => fsync_dir(&parent)?,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(Error::io("create directory", &path, e)),
            }
        }
        Ok(path)
    }

    /// Every item and stray entry, sorted by name, streaming.
    pub fn walk(&self) -> ItemWalker {
        ItemWalker::new(self.layout.root.clone())
    }

    /// Records, before acting, that items are about to be placed or removed, so that
    /// an interrupted writer's successor can finish their aliases: one record for a
    /// batch, one `name<TAB>ibip` line per item, then `actions` (`StepLog`'s
    /// journal lines, for the log). Returns the record's path.
    pub fn journal_all(
        &self,
        intent: Intent,
        items: &[(&RepositoryName, Option<&Ibip>)],
        actions: &str,
    ) -> Result<PathBuf> {
        let mut text: String = items
            .iter()
            .map(|(name, ibip)| format!("{}\n", Minted { name: (*name).clone(), ibip: ibip.copied() }.record()))
            .collect();
        text.push_str(actions);
        // Unique per writer and record, so two writers of one batch never share a record.
        static RECORDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = RECORDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let key = &fsx::hash_bytes(text.as_bytes())[..16];
        // The time it began leads its name, so that its events' ids sort in time (`log::step_began`).
        let began = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let began = crate::store::log::step_time_mark(began.as_millis() as u64);
        let name = format!("{}{began}{key}-{}-{n}", intent.prefix(), std::process::id());
        let path = self.layout.journal().join(name);
        create_dir_all_durable(&self.layout.journal())?;
        atomic_write(&path, text.as_bytes())?;
        Ok(path)
    }

    /// Drops a journal record once its operation is complete and durable.
    pub fn end_journal(&self, record: &Path) -> Result<()> {
        fs::remove_file(record).with_path("remove", record)?;
        fsync_dir(&self.layout.journal())
    }

    /// Completes what an interrupted writer left: removes staging and trash leftovers
    /// (trash only ever holds items that are replaced or whose copy is verified
    /// elsewhere) and finishes the aliases of journalled placements and removals.
    /// Call with the write lock held.
    pub fn recover(&self) -> Result<()> {
        self.clear_dir(&self.layout.staging())?;
        self.clear_dir(&self.layout.trash())?;
        self.finish_journal()?;
        self.upgrade()
    }

    /// Finishes every journalled batch: aliases and inventory.
    fn finish_journal(&self) -> Result<()> {
        let journal = self.layout.journal();
        let entries = match fs::read_dir(&journal) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            other => other.with_path("list", &journal)?,
        };
        for entry in entries {
            let path = entry.with_path("list", &journal)?.path();
            let file_name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if file_name.starts_with(fsx::TEMP_PREFIX) {
                // A record whose atomic write was killed before its rename: never acted on.
                fsx::remove_tree(&path)?;
                continue;
            }
            if let Some(intent) =
                [Intent::Place, Intent::Remove].into_iter().find(|i| file_name.starts_with(i.prefix()))
            {
                self.finish(intent, &path)?;
            }
        }
        Ok(())
    }

    fn finish(&self, intent: Intent, record: &Path) -> Result<()> {
        let text = fs::read_to_string(record).with_path("read", record)?;
        let (mut placed, mut removed) = (Vec::new(), Vec::new());
        for line in text.lines() {
            let Some(Minted { name, ibip }) = Minted::parse_record(line) else { continue };
            let present = self.contains(&name);
            // A replacement killed before its swap leaves the old version at the place.
            let swapped_in = present && staged_version_at(&self.layout.item(&name), &name, &text)?;
            match (intent, present) {
                (Intent::Place, true) if !swapped_in => {}
                (Intent::Place, true) => {
                    if let Some(ibip) = ibip {
                        alias::create(&self.layout, &ibip, &name)?;
                    }
                    placed.push(name);
                }
                (Intent::Remove, false) => {
                    if let Some(ibip) = ibip {
                        alias::remove(&self.layout, &ibip, &name)?;
                    }
                    removed.push(name);
                }
                _ => {}
            }
        }
        let step = step_of(record);
        self.record(Vec::new(), &placed, &StepLog::from_journal(step.clone(), &text))?;
        self.record_removed(&removed, &step)?;
        self.end_journal(record)
    }

    /// Empties a control directory (staging or trash) without following symlinks.
    pub fn clear_dir(&self, dir: &Path) -> Result<()> {
        if fs::symlink_metadata(dir).is_ok_and(|m| !m.is_dir()) {
            fsx::remove_tree(dir)?;
        }
        create_dir_all_durable(dir)?;
        for entry in fs::read_dir(dir).with_path("list", dir)? {
            fsx::remove_tree(&entry.with_path("list", dir)?.path())?;
        }
        Ok(())
    }
}

/// The name of a journalled step: its record's file name, which the step's
/// event ids are made from.
pub fn step_of(record: &Path) -> String {
    record.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}
