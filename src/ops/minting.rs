//! Minting authority (ARCHITECTURE.md, "One minting collection per subsystem"):
//! RTC-10 gives an identification subsystem one label generator, so exactly one
//! collection mints a subsystem's names and every other one follows it. This
//! module owns the three places `ibi` keeps that rule across collections: the
//! peer a new collection follows (`init --like`), the refusal of two minting
//! collections at first contact (copy, mirror, migrate, repair, handover), and
//! the handover of minting from one collection to another.

use crate::error::{Error, Result};
use crate::id::Timestamp;
use crate::store::config::{Minting, Peer, Successor};
use crate::store::{LockWait, Store};

/// Where a collection is, as another collection's config records it: a local
/// root made absolute, else the location as given (`HOST:PATH`, `s3://…`).
pub fn peer_location(store: &dyn Store) -> String {
    match store.local_root() {
        Some(root) => crate::store::local::absolute(root).display().to_string(),
        None => store.location(),
    }
}

/// The collection's id, or its location for a collection made before ids.
fn id_or_location(store: &dyn Store) -> String {
    store.inventory().collection_id().unwrap_or_else(|| peer_location(store))
}

/// The minting collection a new collection made `--like` `other` follows: `other`
/// itself, or the collection `other` follows or handed minting over to.
pub fn peer_to_follow(other: &dyn Store) -> Result<Peer> {
    Ok(match other.inventory().minting()? {
        Minting::Follows(peer) => peer,
        Minting::Retired(Some(next)) => Peer { id: next.id, location: next.location },
        Minting::Mints | Minting::Retired(None) => Peer { id: id_or_location(other), location: peer_location(other) },
    })
}

/// Refuses two collections that both mint one subsystem's names (exit 2, naming
/// both and the fix), before anything is changed. Two handles on one collection
/// (one id) are not two minters.
pub fn refuse_two_minters(a: &dyn Store, b: &dyn Store) -> Result<()> {
    if a.subsystem().prefix() != b.subsystem().prefix()
        || !a.inventory().minting()?.mints()
        || !b.inventory().minting()?.mints()
    {
        return Ok(());
    }
    let (first_id, second_id) = (a.inventory().collection_id(), b.inventory().collection_id());
    if first_id.is_some() && first_id == second_id {
        return Ok(());
    }
    Err(Error::TwoMinting {
        subsystem: a.subsystem().prefix().to_string(),
        first: a.location(),
        first_id: first_id.unwrap_or_else(|| "no id yet".into()),
        second: b.location(),
        second_id: second_id.unwrap_or_else(|| "no id yet".into()),
    })
}

/// What every two-collection command checks before it touches anything: the two
/// are distinct, and they are not two collections minting one subsystem.
pub fn check_pair(src: &dyn Store, dst: &dyn Store) -> Result<()> {
    crate::ops::driver::check_distinct(src, dst)?;
    refuse_two_minters(src, dst)
}

/// A minter raised at first contact: `minting`'s minter had handed out nothing
/// after `newest`, a name `other` holds or held (the minter's state was
/// restored from a backup, or lost), and now starts after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Raised {
    pub minting: String,
    pub other: String,
    pub was: Option<Timestamp>,
    pub newest: Timestamp,
}

impl std::fmt::Display for Raised {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let was = self.was.map_or("nothing".to_string(), |w| w.to_rfc3339());
        write!(
            f,
            "the minter of {} was behind: it had handed out names up to {was}, but {} holds a name of {} dated {} \
             (was its state restored from a backup?); it now mints only after that date",
            self.minting,
            self.other,
            self.minting,
            self.newest.to_rfc3339()
        )
    }
}

/// First contact: when `minting` mints its subsystem's names and `other` holds
/// or held a name of that subsystem newer than any `minting` holds or handed
/// out, `minting`'s minter is raised past it. Asking costs one look at each
/// side's records; the lease of `minting` is taken only to raise.
pub fn learn_from(minting: &dyn Store, other: &dyn Store) -> Result<Option<Raised>> {
    if !minting.inventory().minting()?.mints() {
        return Ok(None);
    }
    let prefix = minting.subsystem().prefix();
    let Some(newest) = other.inventory().newest_name_of(prefix)? else { return Ok(None) };
    if minting.inventory().newest_name_of(prefix)?.is_some_and(|own| own >= newest) {
        return Ok(None);
    }
    let writer = minting.begin_write(LockWait::For(std::time::Duration::from_secs(30)))?;
    let was = writer.minter().minted_up_to()?;
    if was.is_some_and(|was| was >= newest) {
        return Ok(None);
    }
    writer.minter().raise_minter_to(newest)?;
    Ok(Some(Raised { minting: minting.location(), other: other.location(), was, newest }))
}

/// First contact between two collections (mirror, copy, migrate, repair):
/// whichever mints learns from the other (`learn_from`), and the reporter is
/// told of a minter raised.
pub fn learn_pair(a: &dyn Store, b: &dyn Store, reporter: &dyn crate::ops::report::Reporter) -> Result<()> {
    for (minting, other) in [(a, b), (b, a)] {
        if let Some(raised) = learn_from(minting, other)? {
            reporter.warning(&raised.to_string());
        }
    }
    Ok(())
}

/// How to hand over.
#[derive(Debug, Clone, Default)]
pub struct HandoverOptions {
    /// TO's public base URL, recorded with FROM's successor for resolvers.
    pub forward_url: Option<String>,
    pub wait: Option<LockWait>,
}

/// What a handover did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandedOver {
    /// Minting moved; TO's minter starts after this date (FROM's newest).
    Moved { floor: Option<Timestamp> },
    /// An earlier run had finished it: nothing to do.
    Already,
}

/// Where a handover stands, read from both configs.
enum Stage {
    Start,
    /// FROM has stopped and names TO; TO does not mint yet (a killed run).
    FromStopped,
    Done,
}

fn stage_of(from: &dyn Store, to: &dyn Store, to_id: &str) -> Result<Stage> {
    let refuse = |problem: String| Err(Error::Invalid { what: "handover".into(), problem });
    match (from.inventory().minting()?, to.inventory().minting()?) {
        (Minting::Mints, Minting::Mints) => Err(two_minters(from, to)),
        // TO may be retired: minting handed back (an aborted move) starts after FROM's names.
        (Minting::Mints | Minting::Retired(None), Minting::Follows(_) | Minting::Retired(_)) => Ok(Stage::Start),
        (Minting::Retired(Some(next)), Minting::Follows(_) | Minting::Retired(_)) if next.id == to_id => {
            Ok(Stage::FromStopped)
        }
        (Minting::Retired(Some(next)), Minting::Mints) if next.id == to_id => Ok(Stage::Done),
        (from_minting, _) => refuse(format!("{} mints no names, so it has none to hand over: {}", from.location(), {
            from_minting.why_not(&from.location())
        })),
    }
}

fn two_minters(a: &dyn Store, b: &dyn Store) -> Error {
    refuse_two_minters(a, b).err().unwrap_or_else(|| Error::Invalid {
        what: "handover".into(),
        problem: "both collections mint; nothing was changed".into(),
    })
}

/// Moves minting authority from `from` to `to` (one subsystem). FROM stops first
/// and names TO as its successor; then TO's minter is raised past everything FROM
/// minted or holds; then TO mints. A kill between the steps leaves no collection
/// minting, never two, and a rerun completes the handover.
pub fn handover(from: &dyn Store, to: &dyn Store, options: &HandoverOptions) -> Result<HandedOver> {
    if from.subsystem().prefix() != to.subsystem().prefix() {
        let problem = format!(
            "{} mints {} and {} holds {}: a handover stays within one subsystem",
            from.location(),
            from.subsystem().prefix(),
            to.location(),
            to.subsystem().prefix()
        );
        return Err(Error::Invalid { what: "handover".into(), problem });
    }
    crate::ops::driver::check_distinct(from, to)?;
    // Refused before any lease is taken, so that a refusal changes nothing; asked
    // again under both leases, where the answer holds.
    stage_of(from, to, &id_or_location(to))?;
    let wait = options.wait.unwrap_or(LockWait::No);
    let from_writer = from.begin_write(wait)?;
    let to_writer = to.begin_write(wait)?;
    let to_id = id_or_location(to);
    let stage = stage_of(from, to, &to_id)?;
    if let Stage::Done = stage {
        return Ok(HandedOver::Already);
    }
    if let Stage::Start = stage {
        let since = Timestamp::now().to_rfc3339();
        let next = Successor {
            id: to_id.clone(),
            location: peer_location(to),
            since,
            forward_url: options.forward_url.clone(),
        };
        from_writer.minter().set_minting(&Minting::Retired(Some(next)))?;
    }
    let floor = from_writer.minter().minted_up_to()?;
    if let Some(floor) = floor {
        to_writer.minter().raise_minter_to(floor)?;
    }
    // This machine's registry names TO before TO starts, so that a far TO on
    // this very machine (which checks the same registry) finds itself named.
    if let Some(dir) = crate::store::local::minter::machine_dir() {
        let from_id = id_or_location(from);
        crate::store::registry::hand_over(&dir, to.subsystem(), &from_id, &to_id, &peer_location(to))?;
    }
    to_writer.minter().set_minting(&Minting::Mints)?;
    Ok(HandedOver::Moved { floor })
}

/// Stops `store` minting for good, keeping the successor a handover recorded.
pub fn retire(store: &dyn Store, wait: LockWait) -> Result<()> {
    let writer = store.begin_write(wait)?;
    if !matches!(store.inventory().minting()?, Minting::Retired(_)) {
        writer.minter().set_minting(&Minting::Retired(None))?;
    }
    // This machine's registry forgets it (a far or S3 collection's entry is not
    // read from its config): the subsystem is free here.
    if let Some(dir) = crate::store::local::minter::machine_dir() {
        let _registering = crate::store::registry::lock(&dir, store.subsystem())?;
        crate::store::registry::forget(&dir, store.subsystem(), &id_or_location(store))?;
    }
    Ok(())
}
