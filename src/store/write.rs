//! The write side of the seam. `Writer` is the way to change a collection's
//! items, aliases, records and minter (the collection's own records of fixity,
//! witness, chain cursor and configuration still write through `Store`, each
//! skipped on a read-only handle; ARCHITECTURE.md says so):
//! `Store::begin_write` takes the collection's lease, completes what an
//! interrupted writer left (`recover`), and hands out a `Writer` that holds the
//! lease for as long as it lives and releases it when dropped, however the
//! holder ends. Reading (`Store`) never needs one, so verify, list, show,
//! export, resolve and `serve --listen` run with read-only credentials and while
//! another process writes.
//!
//! A backend implements `WriteBackend` (the raw operations, which assume the
//! lease) and answers `begin_write` with `Leased::begin`; nothing else reaches
//! the raw operations. `Leased` is the one `Writer`; restricted to appending
//! (`Writer::restrict_to_appending`, for a far server's `--append-only` keys)
//! it refuses every replacement, removal, retirement and alias re-pointing.

use std::io::Read;
use std::path::Path;
use std::time::SystemTime;

use crate::bag::BagFiles;
use crate::digest::{Algorithm, Digests};
use crate::error::{Error, Result};
use crate::fsx::CopyError;
use crate::id::minter::{Ahead, Clock, Minter, MinterState};
use crate::id::{Ibip, Minted, RepositoryName, Timestamp};
use crate::store::config::Minting;
use crate::store::inventory::Forward;
use crate::store::{ItemRecord, Lease, LockWait, Store};

/// A staged item under construction, by token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StageId(pub u64);

/// One staged item to place as `name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub stage: StageId,
    pub name: RepositoryName,
    pub ibip: Option<Ibip>,
    /// Swap it with whatever holds the name (a damaged or older copy).
    pub replace: bool,
    /// What the inventory is to record of it, when the caller built or checked the
    /// bag and knows; otherwise the store reads it from the placed bag.
    pub record: Option<ItemRecord>,
    /// What the log records of it.
    pub action: crate::store::log::Action,
}

/// Why one placement of a batch was refused (the others go ahead): the name is
/// taken (`Error::AlreadyExists`) or its place cannot hold an item (`Error::Data`).
pub type Refusal = Error;

/// Each name of a placed batch, with why its placement was refused, if it was.
pub type Placed = Vec<(RepositoryName, std::result::Result<(), Refusal>)>;

/// A file to stage: its bytes, the source's modification time, the algorithms to
/// hash with besides sha256, and a progress callback told of every chunk.
pub struct FileSource<'a> {
    pub reader: &'a mut (dyn Read + Send),
    /// Where the bytes come from, for messages.
    pub origin: &'a Path,
    pub mtime: Option<SystemTime>,
    pub also: &'a [Algorithm],
    pub progress: &'a (dyn Fn(u64) + Sync),
}

/// Holds a collection's lease for its lifetime; every change goes through it.
pub trait Writer: Send + Sync {
    /// The collection written: its read side.
    fn store(&self) -> &dyn Store;
    /// The collection's part in minting names, under this writer's lease.
    fn minter(&self) -> &dyn NameMinter;
    fn stage(&self) -> Result<StageId>;
    /// A stage for an item that will be placed as `name` (not over another unless
    /// `replace`): a backend without rename may write the files at their place at
    /// once, unseen until `place` commits the item.
    fn stage_for(&self, name: &RepositoryName, replace: bool) -> Result<StageId>;
    /// Stages for several items at once, as `stage_for` makes one each (in the
    /// same order), where the backend gains from it (object storage: one intent
    /// announces them all); `None` where it would only make them one by one.
    fn stages_for(&self, _items: &[(RepositoryName, bool)]) -> Result<Option<Vec<StageId>>> {
        Ok(None)
    }
    fn stage_dir(&self, stage: StageId, rel: &str) -> Result<()>;
    /// Writes a new file into the staged item, hashing as it writes.
    fn stage_file(&self, stage: StageId, rel: &str, from: FileSource) -> std::result::Result<Digests, CopyError>;
    /// Puts a file of item `name` into the staged item at `rel` unchanged, sharing
    /// its bytes where the backend can (local: a hard link).
    fn stage_link(&self, stage: StageId, rel: &str, name: &RepositoryName, from: &str) -> Result<()>;
    /// The staged item's files, to verify before placing.
    fn staged_files<'a>(&'a self, stage: StageId) -> Box<dyn BagFiles + 'a>;
    /// Drops a staged item that will not be placed (nothing if it was placed).
    fn discard(&self, stage: StageId);
    /// Places a batch durably, never over an item unless `replace`.
    fn place(&self, batch: &[Placement]) -> Result<Placed>;
    /// Creates or corrects the alias of an item the collection holds, durably.
    fn restore_alias(&self, ibip: &Ibip, name: &RepositoryName) -> Result<()>;
    /// Removes items (and their aliases) durably.
    fn remove(&self, names: &[RepositoryName]) -> Result<()>;
    /// Notes in the inventory where items are going (migrate, just before it
    /// removes them), so that resolvers forward their names; durable on return.
    fn note_moved(&self, names: &[RepositoryName], to: &Forward) -> Result<()>;
    /// Rewrites, item by item and crash-safe, what an older `ibi` stored in a form
    /// this one reads but no longer writes (object storage: percent-encoded keys);
    /// `done` hears of each item it rewrote, or left as it was and why (it stays
    /// readable). Returns how many it rewrote.
    fn upgrade_stored_form(&self, done: &dyn Fn(&RepositoryName, Option<&str>)) -> Result<usize>;
    /// Moves `names` from the collection `from` writes into this one without
    /// copying bytes, when the backend can (local: a rename within one
    /// filesystem); `None` when it cannot, and the caller copies instead. Asked
    /// with no names, it says whether it can and moves nothing.
    fn adopt_from(&self, _from: &dyn Writer, _names: &[RepositoryName]) -> Result<Option<Placed>> {
        Ok(None)
    }
    /// From now on this writer only adds: every replacement, removal, alias
    /// re-pointing, rewrite and change of who mints is refused
    /// (`Error::Refused`), for a far server's `--append-only` keys.
    fn restrict_to_appending(&self);
}

/// Minting under a writer's lease (`Writer::minter`): the dates a collection
/// hands out, the floor it keeps, the deposit keys that make a deposit run
/// again mint nothing new, and the collection's part in minting.
pub trait NameMinter: Send + Sync {
    /// Mints `count` dates, each one the subsystem can encode, from the collection's
    /// minter state (a far server mints with its own state and clock), returning
    /// once the clock has reached every one.
    fn mint_dates(&self, count: usize, clock: &dyn Clock) -> Result<Vec<Timestamp>> {
        Ok(self.mint_dates_ahead(count, clock)?.wait(clock))
    }
    /// Like `mint_dates`, but may return before the clock reaches the dates
    /// (`Minter::mint_ahead`): they go only into staged work until `Ahead::wait`.
    fn mint_dates_ahead(&self, count: usize, clock: &dyn Clock) -> Result<Ahead>;
    /// Raises the minter state to at least `newest` (a name that arrived by copy, or
    /// the last one a predecessor minted).
    fn raise_minter_to(&self, newest: Timestamp) -> Result<()>;
    /// The newest date the collection's minter has handed out or holds (its state
    /// and its floor), minting nothing.
    fn minted_up_to(&self) -> Result<Option<Timestamp>>;
    /// Records names by content key; durable with the next placed batch.
    fn write_deposit_records(&self, records: &[(String, RepositoryName)]) -> Result<()>;
    /// Logs names handed out with no item (`ibi mint -C`), durably: the minter
    /// never hands out a name at or before the newest one logged, whatever its
    /// state says (a state restored from a backup).
    fn note_minted(&self, names: &[RepositoryName]) -> Result<()>;
    /// Sets the collection's part in minting (`ibi retire`, `ibi handover`), durably.
    /// Every later mint reads it afresh, so another handle's next mint sees it.
    fn set_minting(&self, minting: &Minting) -> Result<()>;
}

/// The raw write operations of a backend, which assume the caller holds the lease
/// and has recovered. Reached only through `Leased`, the `Writer` that holds it.
pub trait WriteBackend: Store {
    fn lease(&self, wait: LockWait) -> Result<Lease>;
    /// Completes or clears what an interrupted writer left.
    fn recover(&self) -> Result<()>;
    fn minter_state(&self) -> Box<dyn MinterState + '_>;
    /// Mints only while the collection mints its subsystem's names (read afresh),
    /// from the state `minter_state` keeps (see `NameMinter::mint_dates_ahead`).
    fn mint_dates_ahead(&self, count: usize, clock: &dyn Clock) -> Result<Ahead> {
        refuse_unless_minting(self)?;
        let state = self.minter_state();
        let subsystem = self.subsystem();
        let minter = Minter::new(state.as_ref(), subsystem.granularity, clock);
        minter.mint_ahead(count, &|date| subsystem.identify(date).map(drop))
    }
    fn raise_minter_to(&self, newest: Timestamp) -> Result<()> {
        self.minter_state().update(&mut |last| Ok(last.map_or(newest, |l| l.max(newest))))
    }
    fn minted_up_to(&self) -> Result<Option<Timestamp>> {
        self.minter_state().last()
    }
    fn write_deposit_records(&self, records: &[(String, RepositoryName)]) -> Result<()>;
    /// See `NameMinter::note_minted`; by default the names are logged as `mint`
    /// events wherever the backend keeps its log (`log_events`).
    fn note_minted(&self, names: &[RepositoryName]) -> Result<()> {
        let events: Vec<crate::events::Event> = names.iter().map(crate::store::log::mint_event).collect();
        self.log_events(&events)
    }
    /// Appends collection events to the backend's log; a backend that keeps
    /// none refuses, so that a name is never handed out unlogged.
    fn log_events(&self, _events: &[crate::events::Event]) -> Result<()> {
        let why = "this kind of collection keeps no log of names handed out".into();
        Err(Error::Refused { what: format!("minting names with no item in {}", self.location()), why })
    }
    fn stage(&self) -> Result<StageId>;
    fn stage_for(&self, _name: &RepositoryName, _replace: bool) -> Result<StageId> {
        self.stage()
    }
    /// See `Writer::stages_for`.
    fn stages_for(&self, _items: &[(RepositoryName, bool)]) -> Result<Option<Vec<StageId>>> {
        Ok(None)
    }
    fn stage_dir(&self, stage: StageId, rel: &str) -> Result<()>;
    fn stage_file(&self, stage: StageId, rel: &str, from: FileSource) -> std::result::Result<Digests, CopyError>;
    /// By default, a copy of the file.
    fn stage_link(&self, stage: StageId, rel: &str, name: &RepositoryName, from: &str) -> Result<()> {
        let origin = std::path::PathBuf::from(format!("{}/{name}/{from}", self.location()));
        let (mut reader, mtime) = self.open(name, from).map_err(|e| Error::io("open", &origin, e))?;
        let source = FileSource { reader: &mut reader, origin: &origin, mtime, also: &[], progress: &|_| {} };
        self.stage_file(stage, rel, source).map(drop).map_err(Error::from)
    }
    fn staged_files<'a>(&'a self, stage: StageId) -> Box<dyn BagFiles + 'a>;
    fn discard(&self, stage: StageId);
    fn place(&self, batch: &[Placement]) -> Result<Placed>;
    fn restore_alias(&self, ibip: &Ibip, name: &RepositoryName) -> Result<()>;
    fn remove(&self, names: &[RepositoryName]) -> Result<()>;
    fn note_moved(&self, names: &[RepositoryName], to: &Forward) -> Result<()>;
    /// See `Writer::upgrade_stored_form`; by default there is nothing to rewrite
    /// (a local collection upgrades its own state when its writer starts).
    fn upgrade_stored_form(&self, _done: &dyn Fn(&RepositoryName, Option<&str>)) -> Result<usize> {
        Ok(0)
    }
    /// See `NameMinter::set_minting`; by default the backend cannot.
    fn set_minting(&self, _minting: &Minting) -> Result<()> {
        let why = "this kind of collection keeps no minting role".into();
        Err(Error::Refused { what: format!("changing who mints in {}", self.location()), why })
    }
    /// See `Writer::adopt_from`.
    fn adopt_from(&self, _from: &dyn Writer, _names: &[RepositoryName]) -> Result<Option<Placed>> {
        Ok(None)
    }
}

/// The `Writer` of a `WriteBackend`: the lease, held until dropped.
pub struct Leased<'a, B: WriteBackend + ?Sized> {
    backend: &'a B,
    /// Never touched, only dropped (a mutex makes it shareable between threads).
    _lease: std::sync::Mutex<Lease>,
    /// Set by `restrict_to_appending`: only new items from then on.
    appending: std::sync::atomic::AtomicBool,
}

impl<'a, B: WriteBackend> Leased<'a, B> {
    /// Takes the lease as `wait` says, then recovers: how every writer starts.
    pub fn begin(backend: &'a B, wait: LockWait) -> Result<Box<dyn Writer + 'a>> {
        let lease = backend.lease(wait)?;
        backend.recover()?;
        let appending = std::sync::atomic::AtomicBool::new(false);
        Ok(Box::new(Leased { backend, _lease: std::sync::Mutex::new(lease), appending }))
    }
}

impl<B: WriteBackend> Leased<'_, B> {
    /// Whether this writer only adds (`restrict_to_appending`).
    fn appending(&self) -> bool {
        self.appending.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Refuses `what` when this writer only adds.
    fn refuse_when_appending(&self, what: &str) -> Result<()> {
        match self.appending() {
            true => Err(append_only_refusal(what.to_string())),
            false => Ok(()),
        }
    }
}

impl<B: WriteBackend> Writer for Leased<'_, B> {
    fn restrict_to_appending(&self) {
        self.appending.store(true, std::sync::atomic::Ordering::SeqCst);
    }
    fn store(&self) -> &dyn Store {
        self.backend
    }
    fn stage(&self) -> Result<StageId> {
        self.backend.stage()
    }
    fn stage_for(&self, name: &RepositoryName, replace: bool) -> Result<StageId> {
        if replace {
            self.refuse_when_appending(&format!("replacing {name}"))?;
        }
        self.backend.stage_for(name, replace)
    }
    fn stages_for(&self, items: &[(RepositoryName, bool)]) -> Result<Option<Vec<StageId>>> {
        if let Some((name, _)) = items.iter().find(|(_, replace)| *replace) {
            self.refuse_when_appending(&format!("replacing {name}"))?;
        }
        self.backend.stages_for(items)
    }
    fn stage_dir(&self, stage: StageId, rel: &str) -> Result<()> {
        self.backend.stage_dir(stage, rel)
    }
    fn stage_file(&self, stage: StageId, rel: &str, from: FileSource) -> std::result::Result<Digests, CopyError> {
        self.backend.stage_file(stage, rel, from)
    }
    fn stage_link(&self, stage: StageId, rel: &str, name: &RepositoryName, from: &str) -> Result<()> {
        self.backend.stage_link(stage, rel, name, from)
    }
    fn staged_files<'a>(&'a self, stage: StageId) -> Box<dyn BagFiles + 'a> {
        self.backend.staged_files(stage)
    }
    fn discard(&self, stage: StageId) {
        self.backend.discard(stage)
    }
    /// Appending, replacements are refused one by one; the rest of the batch is placed.
    fn place(&self, batch: &[Placement]) -> Result<Placed> {
        if !self.appending() {
            return self.backend.place(batch);
        }
        let (replacing, adding): (Vec<Placement>, Vec<Placement>) = batch.iter().cloned().partition(|p| p.replace);
        let mut placed = self.backend.place(&adding)?;
        for p in replacing {
            self.backend.discard(p.stage);
            placed.push((p.name.clone(), Err(append_only_refusal(format!("replacing {}", p.name)))));
        }
        Ok(placed)
    }
    fn restore_alias(&self, ibip: &Ibip, name: &RepositoryName) -> Result<()> {
        if self.backend.aliases().alias(ibip)?.is_some_and(|held| held != *name) {
            self.refuse_when_appending(&format!("re-pointing alias {ibip}"))?;
        }
        self.backend.restore_alias(ibip, name)
    }
    fn remove(&self, names: &[RepositoryName]) -> Result<()> {
        self.refuse_when_appending("removing items")?;
        self.backend.remove(names)
    }
    fn note_moved(&self, names: &[RepositoryName], to: &Forward) -> Result<()> {
        self.refuse_when_appending("noting items moved away")?;
        self.backend.note_moved(names, to)
    }
    fn upgrade_stored_form(&self, done: &dyn Fn(&RepositoryName, Option<&str>)) -> Result<usize> {
        self.refuse_when_appending("rewriting stored items")?;
        self.backend.upgrade_stored_form(done)
    }
    /// Appending, nothing is adopted (adoption moves items out of another
    /// collection): the caller copies instead.
    fn adopt_from(&self, from: &dyn Writer, names: &[RepositoryName]) -> Result<Option<Placed>> {
        if self.appending() {
            return Ok(None);
        }
        self.backend.adopt_from(from, names)
    }

    fn minter(&self) -> &dyn NameMinter {
        self
    }
}

impl<B: WriteBackend> NameMinter for Leased<'_, B> {
    fn mint_dates_ahead(&self, count: usize, clock: &dyn Clock) -> Result<Ahead> {
        self.backend.mint_dates_ahead(count, clock)
    }

    fn raise_minter_to(&self, newest: Timestamp) -> Result<()> {
        self.backend.raise_minter_to(newest)
    }

    fn write_deposit_records(&self, records: &[(String, RepositoryName)]) -> Result<()> {
        self.backend.write_deposit_records(records)
    }

    fn note_minted(&self, names: &[RepositoryName]) -> Result<()> {
        self.backend.note_minted(names)
    }

    fn minted_up_to(&self) -> Result<Option<Timestamp>> {
        self.backend.minted_up_to()
    }

    fn set_minting(&self, minting: &Minting) -> Result<()> {
        self.refuse_when_appending("changing who mints")?;
        self.backend.set_minting(minting)
    }
}

fn append_only_refusal(what: String) -> Error {
    Error::Refused { what, why: "this server only accepts new items (ibi serve --append-only)".into() }
}

/// Refuses, naming the way out, when the store does not mint its subsystem's names.
pub fn refuse_unless_minting(store: &(impl Store + ?Sized)) -> Result<()> {
    match store.inventory().minting()? {
        Minting::Mints => Ok(()),
        other => Err(Error::NotMinting { place: store.location(), why: other.why_not(&store.location()) }),
    }
}

/// Mints `count` identifiers through the writer.
pub fn mint(writer: &dyn Writer, count: usize, clock: &dyn Clock) -> Result<Vec<Minted>> {
    let subsystem = writer.store().subsystem();
    let dates = writer.minter().mint_dates(count, clock)?;
    dates.into_iter().map(|date| subsystem.identify(date)).collect()
}

/// Identifiers minted ahead of the clock (`NameMinter::mint_dates_ahead`): they may be
/// written into staged work, and are used only once the clock reaches
/// `usable_from` (`minter::sleep_until_reached`).
pub struct MintedAhead {
    pub minted: Vec<Minted>,
    pub usable_from: Option<Timestamp>,
}

/// Mints `count` identifiers through the writer, ahead of the clock.
pub fn mint_ahead(writer: &dyn Writer, count: usize, clock: &dyn Clock) -> Result<MintedAhead> {
    let subsystem = writer.store().subsystem();
    let ahead = writer.minter().mint_dates_ahead(count, clock)?;
    let minted = ahead.dates.into_iter().map(|date| subsystem.identify(date)).collect::<Result<_>>()?;
    Ok(MintedAhead { minted, usable_from: ahead.usable_from })
}

/// Raises the minter state past the newest of `names` that belong to the store's own
/// subsystem (items arriving by copy, mirror or migrate), so that no later mint can
/// give out one of their names, even after they leave again.
pub fn raise_minter(writer: &dyn Writer, names: &[RepositoryName]) -> Result<()> {
    let own = writer.store().subsystem().prefix();
    let Some(newest) = names.iter().filter(|n| n.prefix() == own).map(|n| n.date()).max() else { return Ok(()) };
    writer.minter().raise_minter_to(newest)
}

/// A staged item that is discarded when dropped, unless it was placed.
pub struct Staging<'a> {
    pub writer: &'a dyn Writer,
    pub id: StageId,
}

impl<'a> Staging<'a> {
    pub fn new(writer: &'a dyn Writer) -> Result<Staging<'a>> {
        Ok(Staging { writer, id: writer.stage()? })
    }

    /// A staging for an item whose name is known (`Writer::stage_for`).
    pub fn for_item(writer: &'a dyn Writer, name: &RepositoryName, replace: bool) -> Result<Staging<'a>> {
        Ok(Staging { writer, id: writer.stage_for(name, replace)? })
    }

    /// A staging for each of several items whose names are known, begun at once
    /// where the backend gains from it (`Writer::stages_for`).
    pub fn for_items(writer: &'a dyn Writer, items: &[(RepositoryName, bool)]) -> Result<Option<Vec<Staging<'a>>>> {
        let stages = writer.stages_for(items)?;
        Ok(stages.map(|ids| ids.into_iter().map(|id| Staging { writer, id }).collect()))
    }
}

impl Drop for Staging<'_> {
    fn drop(&mut self) {
        self.writer.discard(self.id);
    }
}
