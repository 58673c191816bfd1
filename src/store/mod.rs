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

/// How many items a transfer stages, then makes durable and places, together
/// (a backend may ask for more: `TransferShape::items_per_batch`).
pub const BATCH: usize = 64;

pub mod aliases;
pub mod attest;
pub mod config;
pub mod copy_states;
pub mod cosign;
#[cfg(feature = "far")]
pub mod far;
pub mod guard;
pub mod inventory;
pub mod kept;
pub mod ledger;
pub mod local;
pub mod location;
pub mod log;
pub mod machine;
pub mod memory;
pub mod ocfl;
pub mod open;
pub mod placement;
pub mod records;
pub mod registry;
#[cfg(feature = "s3")]
pub mod s3;
pub mod state_file;
pub mod witness_key;
pub mod write;

#[cfg(any(test, feature = "conformance"))]
pub mod conformance;

use std::any::Any;
use std::io::Read;
use std::path::Path;
use std::time::{Duration, SystemTime};

use crate::bag::{BagCheck, BagFiles, BagInfo, TAGMANIFEST};
use crate::error::{Error, Result};
use crate::id::{Ibip, Identifier, RepositoryName, Subsystem};
use crate::problem::{Problem, ProblemKind};
pub use config::Minting;
#[cfg(feature = "far")]
pub use far::serve::{serve_stdio, ServeOptions};
pub use inventory::{ItemRecord, RecordSummary, Status, VersionRecord};
pub use local::remove_live_staging;
pub use location::Connect;
pub use open::{init, open, open_ocfl_root, InitOptions};
pub use state_file::StateFile;
pub use write::{
    mint, mint_ahead, raise_minter, refuse_unless_minting, FileSource, Leased, MintedAhead, Placed, Placement, Refusal,
    StageId, Staging, WriteBackend, Writer,
};

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

/// How a transfer into a store is best cut up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransferShape {
    /// How many items it stages at once, where that is more than the
    /// machine's cores: a backend whose every file is a request waits on the
    /// network, not on the processor.
    pub staging_threads: Option<usize>,
    /// How many items a mirror stages before it places them. Each batch's
    /// placement waits for the one before it, so a backend whose batches cost
    /// round trips takes more.
    pub items_per_batch: usize,
}

impl Default for TransferShape {
    fn default() -> TransferShape {
        TransferShape { staging_threads: None, items_per_batch: BATCH }
    }
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

/// A collection's storage.
pub trait Store: Send + Sync {
    /// Where the collection is, for messages (a path, later a URL).
    fn location(&self) -> String;
    /// The root folder when the collection is on this machine's filesystem.
    fn local_root(&self) -> Option<&Path>;
    fn subsystem(&self) -> &Subsystem;
    /// Source-Organization for new items.
    fn organisation(&self) -> Option<&str>;

    // Reading.
    /// Every item and stray, in `RepositoryName` order, streaming.
    fn walk(&self) -> Box<dyn Iterator<Item = Result<Listed>> + Send + '_>;
    fn slot(&self, name: &RepositoryName) -> Result<Slot>;
    /// How a transfer into this store is best cut up (`TransferShape`); the
    /// machine's cores and `BATCH` by default.
    fn transfer_shape(&self) -> TransferShape {
        TransferShape::default()
    }

    /// The slot of each of `names`, in order: what a copy or mirror asks of a
    /// batch of names before it copies them. By default `slot` for each; a
    /// backend where each is a request answers from one listing where it can.
    fn slots(&self, names: &[RepositoryName]) -> Result<Vec<Slot>> {
        names.iter().map(|name| self.slot(name)).collect()
    }
    /// The IBIp aliases of the collection's items (`store::aliases`).
    fn aliases(&self) -> &dyn aliases::Aliases;
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
        identities_from_bags(self.as_dyn(), names)
    }
    /// The identity digest of each of `names` read from its bag's tagmanifest
    /// (`identity_digest`), never from a record: what the audit compares, so that
    /// a copy replaced behind ibi's back shows. A far backend asks its server in
    /// one round trip; here, each is read in parallel.
    fn bag_identities(&self, names: &[RepositoryName]) -> Vec<Result<String>> {
        identities_from_bags(self.as_dyn(), names)
    }
    /// The place as a cosigning site of other collections' checkpoints
    /// (`store::cosign`), when this backend keeps them here.
    fn cosigner(&self) -> Option<&dyn cosign::Cosigner> {
        None
    }
    /// The store's own checksums of the items' files (`store::attest`), when
    /// it verifies and keeps them.
    fn store_checksums(&self) -> Option<&dyn attest::StoreChecksums> {
        None
    }
    /// What the place holds of a batch of names, told without a request per
    /// item (`store::copy_states`), when this backend can.
    fn copy_states(&self) -> Option<&dyn copy_states::CopyStates> {
        None
    }
    /// The collection's own records of what was done and checked: its event
    /// log, fixity dates and witness (`store::ledger`). A backend that keeps
    /// none leaves the default, which keeps nothing.
    fn ledger(&self) -> &dyn ledger::Ledger {
        &ledger::NoLedger
    }
    /// The collection's records of the items it holds and held
    /// (`store::records`): its inventory.
    fn inventory(&self) -> &dyn records::Records;
    /// The copies its replacements displaced (`store::kept`), when this
    /// backend can list and remove them here.
    fn kept_copies(&self) -> Option<&dyn kept::KeptCopies> {
        None
    }
    /// Whether a writer of this collection would take `from`'s items by rename
    /// (`Writer::adopt_from`) rather than by copy: asked by a dry run, which holds
    /// no writer, so that it counts what the real run would.
    fn adopts_by_rename(&self, _from: &dyn Store) -> bool {
        false
    }
    /// In which data centres the objects of each of `names` are held, as the
    /// SeaweedFS cluster behind the store proves it (`ibi audit --placement`);
    /// `None` when this backend cannot ask.
    fn placement(
        &self,
        _names: &[RepositoryName],
        _cluster: &config::SeaweedFs,
    ) -> Result<Option<Vec<placement::ItemPlacement>>> {
        Ok(None)
    }
    /// This store as a trait object (for provided methods).
    fn as_dyn(&self) -> &dyn Store;
    /// Staging and trash left by an interrupted writer, as problems.
    fn leftovers(&self) -> Vec<Problem>;

    // Writing.
    /// Takes the collection's lease (waiting as `wait` says), completes what an
    /// interrupted writer left, and returns the `Writer` that holds the lease until
    /// it is dropped: the only way to change the collection.
    fn begin_write(&self, wait: LockWait) -> Result<Box<dyn Writer + '_>>;
}

/// Problems of an item beyond its bag: the identifiers in bag-info and the alias link.
pub fn identifier_problems(store: &dyn Store, name: &RepositoryName, info: &BagInfo) -> Vec<Problem> {
    let mut problems = bag_identifier_problems(name, info);
    if let Some(ibip) = ibip_in(info) {
        if let Some(why) = store.aliases().alias_problem(&ibip, name) {
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

/// The identity digests of `names`, each read from its bag, in parallel, in the
/// order asked: what `Store::identities` and `bag_identities` do by default.
pub fn identities_from_bags(store: &dyn Store, names: &[RepositoryName]) -> Vec<Result<String>> {
    use rayon::prelude::*;
    names.par_iter().map(|name| identity_digest(store, name)).collect()
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
        Identifier::Ibip(ibip) => match store.aliases().alias(&ibip)? {
            Some(name) => name,
            None => {
                let forward = own_name_for(store, &ibip).map(|n| Ok::<_, Error>((forward_of(store, &n)?, n)));
                return Err(match forward.transpose()? {
                    Some((Some(to), name)) => moved(&name, to),
                    _ => not_found(),
                });
            }
        },
        other => {
            let problem = format!("{text} is a {}, not a repository name or IBIp", other.kind());
            return Err(Error::Invalid { what: "item".into(), problem });
        }
    };
    match store.slot(&name)? {
        Slot::Item => Ok(name),
        Slot::Empty => match forward_of(store, &name)? {
            Some(to) => Err(moved(&name, to)),
            None => Err(not_found()),
        },
        Slot::Foreign(place) => Err(Error::Data {
            what: format!("item {name}"),
            problem: format!("{place} is a symlink or a file, not an item folder; refusing to use it"),
        }),
    }
}

fn moved(name: &RepositoryName, to: inventory::Forward) -> Error {
    Error::Moved { name: name.to_string(), to: to.to, date: to.date, url: to.url }
}

/// Where `name` went, if this collection sent it away: migrate's note in its
/// record, or, for a name of its own subsystem it never held, the successor its
/// handover named (names minted there after the handover).
pub fn forward_of(store: &dyn Store, name: &RepositoryName) -> Result<Option<inventory::Forward>> {
    let record = store.inventory().records(std::slice::from_ref(name))?.pop().flatten();
    if let Some(record) = &record {
        return Ok(record.gone_to().cloned());
    }
    if name.prefix() != store.subsystem().prefix() {
        return Ok(None);
    }
    Ok(match store.inventory().minting()? {
        Minting::Retired(Some(next)) => {
            Some(inventory::Forward { to: next.location, date: next.since, url: next.forward_url })
        }
        _ => None,
    })
}

/// The name an IBIp of this collection's own subsystem stands for (the two encode
/// one date), when the IBIp is one: how a moved item's IBIp is forwarded after its
/// alias left with it.
pub fn own_name_for(store: &dyn Store, ibip: &Ibip) -> Option<RepositoryName> {
    let minted = store.subsystem().identify(ibip.date()).ok()?;
    (minted.ibip.as_ref() == Some(ibip)).then_some(minted.name)
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
