//! The storage seam: `Store` is the only way operations touch a collection.
//! Each backend is one module (`local`: a POSIX filesystem; `memory`: a map, for
//! tests and to prove the seam) and passes the shared conformance suite. The
//! contract every backend keeps is written in ARCHITECTURE.md ("The Store
//! contract"); in short:
//!
//! - the walk yields items in `RepositoryName` order, strays included, and one
//!   bad entry never stops it;
//! - placement never overwrites: of two placements of one name, exactly one wins,
//!   and a replacement is atomic where the backend can make it so;
//! - a placed batch is durable before `place` returns, and so are its aliases;
//! - a killed writer's staging is never seen as an item, and `recover` under the
//!   lease completes or clears whatever it left;
//! - the lease excludes every other writer of the collection, and is released
//!   when its holder ends, however it ends;
//! - the minter state is updated under exclusion, so no date is handed out twice.
//!
//! The calls are coarse, for backends where every call is a round trip (a far
//! server) or has no rename (object storage): staging is addressed by a token,
//! placement takes a batch, and digests are computed where the bytes are.

pub mod far;
pub mod inventory;
pub mod local;
pub mod location;
pub mod memory;
pub mod s3;

#[cfg(test)]
pub(crate) mod conformance;

use std::any::Any;
use std::io::Read;
use std::path::Path;
use std::time::{Duration, SystemTime};

use crate::bag::{BagCheck, BagFiles, BagInfo, TAGMANIFEST};
use crate::digest::{Algorithm, Digests};
use crate::error::{Error, Result};
use crate::fsx::CopyError;
use crate::id::minter::{Clock, Minter, MinterState};
use crate::id::{Ibip, Identifier, Minted, RepositoryName, Subsystem, Timestamp};
use crate::problem::{Problem, ProblemKind};
pub use inventory::{ItemRecord, Status, VersionRecord};

/// What a walk finds: an item's name, or an entry that is not an item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listed {
    Item(RepositoryName),
    /// `place` is relative to the collection (`sid.inpe.br/mtc-m18`).
    Stray {
        place: String,
        why: String,
    },
}

/// What stands at an item's place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Slot {
    Empty,
    Item,
    /// Something that is not an item (a symlink, a file): never followed, never written through.
    Foreign(String),
}

/// How to wait for the write lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockWait {
    /// Fail at once with `Error::Locked` (exit 75).
    No,
    /// Wait as long as it takes.
    Forever,
    /// Try for up to this long, then fail with `Error::Locked`.
    For(Duration),
}

/// The write lease: held while it lives.
pub struct Lease(pub Box<dyn Any + Send>);

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
}

/// Why one placement of a batch was refused (the others go ahead): the name is
/// taken (`Error::AlreadyExists`) or its place cannot hold an item (`Error::Data`).
pub type Refusal = Error;

/// What a backend can do, for callers that choose a strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// A replacement never leaves the name absent.
    pub atomic_replace: bool,
}

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

/// A collection's storage.
pub trait Store: Send + Sync {
    /// Where the collection is, for messages (a path, later a URL).
    fn location(&self) -> String;
    /// The root folder when the collection is on this machine's filesystem.
    fn local_root(&self) -> Option<&Path>;
    fn subsystem(&self) -> &Subsystem;
    /// Source-Organization for new items.
    fn organisation(&self) -> Option<&str>;
    fn capabilities(&self) -> Capabilities;
    /// For backend-specific fast paths (rename within one filesystem).
    fn as_any(&self) -> &dyn Any;

    // Reading.
    /// Every item and stray, in `RepositoryName` order, streaming.
    fn walk(&self) -> Box<dyn Iterator<Item = Result<Listed>> + Send + '_>;
    fn slot(&self, name: &RepositoryName) -> Result<Slot>;
    /// The item an IBIp alias names, if the alias exists.
    fn alias(&self, ibip: &Ibip) -> Result<Option<RepositoryName>>;
    /// Aliases (whose IBIp and name encode one date) naming an item the collection
    /// no longer holds: proof that it held it, and lost it.
    fn dangling_aliases(&self) -> Result<Vec<(Ibip, RepositoryName)>>;
    /// Why the alias of `name` is broken, if it is.
    fn alias_problem(&self, ibip: &Ibip, name: &RepositoryName) -> Option<String>;
    /// The item's files, for reading and verifying where they are.
    fn item_files<'a>(&'a self, name: &RepositoryName) -> Box<dyn BagFiles + 'a>;
    /// A hint that these items are about to be read whole (copied out): a far
    /// backend fetches them in one round trip. By default, nothing.
    fn prefetch(&self, _names: &[RepositoryName]) {}
    /// Verifies one item where its bytes are: its bag (`bag::verify_bag`), then its
    /// identifiers and alias; returns the bag check and every problem. `on_bytes` is
    /// told of the bytes hashed, for progress.
    fn check_item(&self, name: &RepositoryName, on_bytes: &(dyn Fn(u64) + Sync)) -> (BagCheck, Vec<Problem>) {
        let check = crate::bag::verify_bag(self.item_files(name).as_ref(), &name.to_string(), on_bytes);
        let mut problems = check.problems.clone();
        if let Some(info) = &check.info {
            problems.extend(identifier_problems(self.as_dyn(), name, info));
        }
        (check, problems)
    }
    /// Opens a regular file of an item for reading (never through a link), with its mtime.
    fn open(
        &self,
        name: &RepositoryName,
        rel: &str,
    ) -> std::io::Result<(Box<dyn Read + Send + '_>, Option<SystemTime>)>;
    /// Like `open`, the bytes from `offset` on (a backend that can seek overrides this).
    fn open_from(
        &self,
        name: &RepositoryName,
        rel: &str,
        offset: u64,
    ) -> std::io::Result<(Box<dyn Read + Send + '_>, Option<SystemTime>)> {
        let (mut reader, mtime) = self.open(name, rel)?;
        let skipped = std::io::copy(&mut (&mut reader).take(offset), &mut std::io::sink())?;
        if skipped < offset {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the file is shorter than the offset"));
        }
        Ok((reader, mtime))
    }
    /// A cheap token that changes whenever the item at `name` is placed or replaced,
    /// for caches of what an item holds; `None` when the backend has none (callers
    /// then re-read after a while).
    fn item_stamp(&self, _name: &RepositoryName) -> Option<String> {
        None
    }
    /// The identity digests of many items at once, in the order asked: one round
    /// trip for a far backend, which overrides this; here, each computed where the
    /// bytes are, in parallel.
    fn identities(&self, names: &[RepositoryName]) -> Vec<Result<String>> {
        use rayon::prelude::*;
        names.par_iter().map(|name| identity_digest(self.as_dyn(), name)).collect()
    }
    /// This store as a trait object (for provided methods).
    fn as_dyn(&self) -> &dyn Store;
    /// Staging and trash left by an interrupted writer, as problems.
    fn leftovers(&self) -> Vec<Problem>;

    // The inventory: what the collection holds and has held.
    /// The collection's own id (a UUID URN), given at init, or on the first write
    /// of a collection made before ids.
    fn collection_id(&self) -> Option<String>;
    /// Whether the collection keeps an inventory yet (an older one gets it on its first write).
    fn has_inventory(&self) -> bool;
    /// The records of `names`, in the order asked; `None` for a name never held.
    fn records(&self, names: &[RepositoryName]) -> Result<Vec<Option<ItemRecord>>>;
    /// Every record, in `RepositoryName` order, streaming.
    fn all_records(&self) -> Box<dyn Iterator<Item = Result<ItemRecord>> + Send + '_>;

    // Writing: the caller holds the lease.
    fn lease(&self, wait: LockWait) -> Result<Lease>;
    /// Completes or clears what an interrupted writer left.
    fn recover(&self) -> Result<()>;
    fn minter_state(&self) -> Box<dyn MinterState + '_>;
    /// Mints `count` dates, each one its subsystem can encode, from the minter state
    /// under its exclusion. A far backend overrides this: its server mints with its
    /// own state and clock, and a client never writes a state.
    fn mint_dates(&self, count: usize, clock: &dyn Clock) -> Result<Vec<Timestamp>> {
        let state = self.minter_state();
        let subsystem = self.subsystem();
        let minter = Minter::new(state.as_ref(), subsystem.granularity, clock);
        minter.mint_checked(count, &|date| subsystem.identify(date).map(drop))
    }
    /// Raises the minter state to at least `newest` (a name that arrived by copy). A
    /// far backend's server raises its own as it places, so there this does nothing.
    fn raise_minter_to(&self, newest: Timestamp) -> Result<()> {
        self.minter_state().update(&mut |last| Ok(last.map_or(newest, |l| l.max(newest))))
    }
    /// The name content `key` was deposited as, if recorded.
    fn deposit_record(&self, key: &str) -> Result<Option<RepositoryName>>;
    /// Records names by content key; durable with the next placed batch.
    fn write_deposit_records(&self, records: &[(String, RepositoryName)]) -> Result<()>;
    fn stage(&self) -> Result<StageId>;
    /// A stage for an item that will be placed as `name` (not over another unless
    /// `replace`): a backend without rename may write the files at their place at
    /// once, unseen until `place` commits the item. By default, `stage()`.
    fn stage_for(&self, _name: &RepositoryName, _replace: bool) -> Result<StageId> {
        self.stage()
    }
    fn stage_dir(&self, stage: StageId, rel: &str) -> Result<()>;
    /// Writes a new file into the staged item, hashing as it writes.
    fn stage_file(&self, stage: StageId, rel: &str, from: FileSource) -> std::result::Result<Digests, CopyError>;
    /// Puts a file of item `name` into the staged item at `rel` unchanged, sharing its
    /// bytes where the backend can (local: a hard link); by default, a copy.
    fn stage_link(&self, stage: StageId, rel: &str, name: &RepositoryName, from: &str) -> Result<()> {
        let origin = std::path::PathBuf::from(format!("{}/{name}/{from}", self.location()));
        let (mut reader, mtime) = self.open(name, from).map_err(|e| Error::io("open", &origin, e))?;
        let source = FileSource { reader: &mut reader, origin: &origin, mtime, also: &[], progress: &|_| {} };
        self.stage_file(stage, rel, source).map(drop).map_err(Error::from)
    }
    /// The staged item's files, to verify before placing.
    fn staged_files<'a>(&'a self, stage: StageId) -> Box<dyn BagFiles + 'a>;
    /// Drops a staged item that will not be placed (nothing if it was placed).
    fn discard(&self, stage: StageId);
    /// Places a batch durably, never over an item unless `replace`; returns each
    /// name with `Err(why)` when its place was refused.
    fn place(&self, batch: &[Placement]) -> Result<Vec<(RepositoryName, std::result::Result<(), Refusal>)>>;
    /// Creates or corrects the alias of an item the collection holds, durably.
    fn restore_alias(&self, ibip: &Ibip, name: &RepositoryName) -> Result<()>;
    /// Removes items (and their aliases) durably.
    fn remove(&self, names: &[RepositoryName]) -> Result<()>;
}

/// Opens the collection at `location`: a local folder, or a far one (`HOST:PATH`,
/// `ssh://…`) reached as `connect` says.
pub fn open(location: &Path, connect: &far::Connect) -> Result<Box<dyn Store>> {
    Ok(match location::Location::parse(location)? {
        location::Location::Local(path) => Box::new(local::Collection::open(&path)?),
        location::Location::Far(address) => Box::new(far::FarStore::open(&address, connect)?),
        location::Location::Object(address) => Box::new(s3::S3Store::open(&address)?),
    })
}

/// How `init` may create a collection.
#[derive(Debug, Clone, Copy, Default)]
pub struct InitOptions {
    /// Create one in object storage whose server ignores conditional writes.
    pub unsafe_no_conditional_writes: bool,
}

/// Creates a collection at `location` (local, far or in object storage) and opens it.
pub fn init(
    location: &Path,
    connect: &far::Connect,
    subsystem: Subsystem,
    organisation: Option<String>,
    options: InitOptions,
) -> Result<Box<dyn Store>> {
    Ok(match location::Location::parse(location)? {
        location::Location::Local(path) => Box::new(local::Collection::init(&path, subsystem, organisation)?),
        location::Location::Far(address) => {
            let config = local::config::CollectionConfig::new(&subsystem, organisation);
            Box::new(far::FarStore::init(&address, connect, &config)?)
        }
        location::Location::Object(address) => {
            let config = local::config::CollectionConfig::new(&subsystem, organisation);
            Box::new(s3::S3Store::init(&address, &config, options.unsafe_no_conditional_writes)?)
        }
    })
}

/// Problems of an item beyond its bag: the identifiers in bag-info and the alias link.
pub fn identifier_problems(store: &dyn Store, name: &RepositoryName, info: &BagInfo) -> Vec<Problem> {
    let mut problems = bag_identifier_problems(name, info);
    if let Some(ibip) = ibip_in(info) {
        if let Some(why) = store.alias_problem(&ibip, name) {
            problems.push(Problem::new(&name.to_string(), None, ProblemKind::BrokenAlias, why));
        }
    }
    problems
}

/// Problems of the identifiers bag-info records: no External-Identifier names the
/// item, or its IBIp encodes another date.
pub fn bag_identifier_problems(name: &RepositoryName, info: &BagInfo) -> Vec<Problem> {
    let label = name.to_string();
    let mut problems = Vec::new();
    let names: Vec<RepositoryName> =
        info.values("External-Identifier").filter_map(|v| RepositoryName::parse(v).ok()).collect();
    if !names.contains(name) {
        let detail = "no External-Identifier in bag-info.txt names this item";
        problems.push(Problem::new(&label, Some(crate::bag::BAG_INFO_TXT), ProblemKind::IdentifierMismatch, detail));
    }
    if let Some(ibip) = ibip_in(info) {
        if ibip.date() != name.date() {
            let detail = format!("IBIp {ibip} has date {}, the name has {}", ibip.date(), name.date());
            problems.push(Problem::new(
                &label,
                Some(crate::bag::BAG_INFO_TXT),
                ProblemKind::IdentifierMismatch,
                detail,
            ));
        }
    }
    problems
}

/// Reads an item's bag-info.
pub fn item_info(store: &dyn Store, name: &RepositoryName) -> Result<BagInfo> {
    crate::bag::info::read_info(store.item_files(name).as_ref(), &name.to_string())
}

/// The IBIp an item's bag-info records.
pub fn item_ibip(store: &dyn Store, name: &RepositoryName) -> Result<Option<Ibip>> {
    Ok(ibip_in(&item_info(store, name)?))
}

/// The IBIp among bag-info's External-Identifier values, if any.
pub fn ibip_in(info: &BagInfo) -> Option<Ibip> {
    info.values("External-Identifier").find_map(|v| Ibip::parse(v).ok())
}

/// An item's identity digest: the sha256 of its tagmanifest-sha256.txt, computed
/// where the bytes are.
pub fn identity_digest(store: &dyn Store, name: &RepositoryName) -> Result<String> {
    let digests = store
        .item_files(name)
        .digests(TAGMANIFEST, &[])
        .map_err(|e| Error::Data { what: format!("{name}/{TAGMANIFEST}"), problem: e.to_string() })?;
    Ok(digests.sha256().to_string())
}

/// Finds an item by repository name or IBIp, in any letter case.
pub fn resolve(store: &dyn Store, text: &str) -> Result<RepositoryName> {
    let not_found = || Error::NotFound { what: "item", name: text.to_string(), place: store.location().into() };
    if !text.contains('/') {
        let problem = format!("\"{text}\" is not a repository name or an IBIp (both hold a \"/\")");
        return Err(Error::Invalid { what: "item".into(), problem });
    }
    let name = match Identifier::parse(text)? {
        Identifier::Name(name) => name,
        Identifier::Ibip(ibip) => store.alias(&ibip)?.ok_or_else(not_found)?,
        other => {
            let problem = format!("{text} is a {}, not a repository name or IBIp", other.kind());
            return Err(Error::Invalid { what: "item".into(), problem });
        }
    };
    match store.slot(&name)? {
        Slot::Item => Ok(name),
        Slot::Empty => Err(not_found()),
        Slot::Foreign(place) => Err(Error::Data {
            what: format!("item {name}"),
            problem: format!("{place} is a symlink or a file, not an item folder; refusing to use it"),
        }),
    }
}

/// The items named (by repository name or IBIp; each once, in the order given), or
/// every item in name order when none is named. Strays are skipped (verify walks
/// itself to report them).
pub fn selected<'a>(
    store: &'a dyn Store,
    names: &'a [String],
) -> Box<dyn Iterator<Item = Result<RepositoryName>> + Send + 'a> {
    if names.is_empty() {
        return Box::new(items(store));
    }
    let mut seen = std::collections::BTreeSet::new();
    Box::new(names.iter().map(|n| resolve(store, n)).filter(move |r| match r {
        Ok(name) => seen.insert(name.clone()),
        Err(_) => true,
    }))
}

/// The items of the walk, in name order, strays skipped.
pub fn items(store: &dyn Store) -> impl Iterator<Item = Result<RepositoryName>> + Send + '_ {
    store.walk().filter_map(|listed| match listed {
        Ok(Listed::Item(name)) => Some(Ok(name)),
        Ok(Listed::Stray { .. }) => None,
        Err(e) => Some(Err(e)),
    })
}

/// Takes the lease and completes what an interrupted writer left: how every writer starts.
pub fn lease_and_recover(store: &dyn Store, wait: LockWait) -> Result<Lease> {
    let lease = store.lease(wait)?;
    store.recover()?;
    Ok(lease)
}

/// Mints `count` identifiers from the collection's own minter state. A date that
/// cannot be encoded (an IBIp before 1995) fails the call and leaves the state as it was.
pub fn mint(store: &dyn Store, count: usize, clock: &dyn Clock) -> Result<Vec<Minted>> {
    let dates = store.mint_dates(count, clock)?;
    dates.into_iter().map(|date| store.subsystem().identify(date)).collect()
}

/// Raises the minter state past the newest of `names` that belong to the store's own
/// subsystem (items arriving by copy, mirror or migrate), so that no later mint can
/// give out one of their names, even after they leave again.
pub fn raise_minter(store: &dyn Store, names: &[RepositoryName]) -> Result<()> {
    let own = store.subsystem().prefix();
    let Some(newest) = names.iter().filter(|n| n.prefix() == own).map(|n| n.date()).max() else { return Ok(()) };
    store.raise_minter_to(newest)
}

/// A staged item that is discarded when dropped, unless it was placed.
pub struct Staging<'a> {
    pub store: &'a dyn Store,
    pub id: StageId,
}

impl<'a> Staging<'a> {
    pub fn new(store: &'a dyn Store) -> Result<Staging<'a>> {
        Ok(Staging { store, id: store.stage()? })
    }

    /// A staging for an item whose name is known (`Store::stage_for`).
    pub fn for_item(store: &'a dyn Store, name: &RepositoryName, replace: bool) -> Result<Staging<'a>> {
        Ok(Staging { store, id: store.stage_for(name, replace)? })
    }
}

impl Drop for Staging<'_> {
    fn drop(&mut self) {
        self.store.discard(self.id);
    }
}
