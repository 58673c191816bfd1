//! This machine's registry of minting collections (ARCHITECTURE.md, "One
//! minting collection per subsystem"): one file per subsystem in the minter
//! folder, `<host>_<port>.minting`, naming the collection that mints its names,
//! wherever it lives (a local folder, `HOST:PATH`, `s3://…`), and the IBIp
//! prefix (IP and IBIp port) it mints under. `init` of a minting collection of
//! any kind is refused while the registry names another one that still holds
//! the subsystem, and a handover run here moves the entry to the successor.
//!
//! Whether a registered collection still holds its subsystem is read from its
//! config where this machine can read it without a connection (a local folder):
//! gone or retired, the subsystem is free; handed over, it is held by the
//! successor its config names. A far or S3 collection's entry is taken as it
//! stands (this machine made or took it over), until `ibi retire` of that
//! collection here, or a handover from it, changes it.

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, IoContext, Result};
use crate::fsx::{create_dir_all_durable, FileLock};
use crate::id::Subsystem;
use crate::store::config::{CollectionConfig, Minting};
use crate::store::location::Location;
use crate::store::StateFile;

/// How many handovers a registry entry is followed through (a loop of
/// successors ends there).
const MOST_HANDOVERS: usize = 16;

/// One registry entry: the collection minting a subsystem, and its IBIp prefix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub id: String,
    pub location: String,
    /// `IP/PORT` of the IBIps the subsystem mints (absent: none, or an entry
    /// written before IBIp prefixes were registered).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ibip: Option<String>,
}

/// The IBIp prefix of a subsystem as the registry writes it: `IP/PORT`.
pub fn ibip_key(subsystem: &Subsystem) -> Option<String> {
    subsystem.ip.map(|ip| format!("{}/{}", crate::id::ibip::ip_canonical(&ip), subsystem.ibip_port))
}

/// The machine-wide distributor state of a subsystem, in `dir`.
pub fn subsystem_state(dir: &Path, subsystem: &Subsystem) -> StateFile {
    StateFile::beside(&dir.join(format!("{}_{}.state", subsystem.host, subsystem.port)))
}

/// The machine-wide distributor state of an IBIp prefix, in `dir`: every
/// subsystem of this machine with that IP and IBIp port mints through it too,
/// so that no two of them give one date, and so one IBIp.
pub fn ibip_state(dir: &Path, subsystem: &Subsystem) -> Option<StateFile> {
    let ip = crate::id::ibip::ip_canonical(&subsystem.ip?).replace(':', "-");
    Some(StateFile::beside(&dir.join(format!("ibip_{ip}_{}.state", subsystem.ibip_port))))
}

/// Every machine-wide state a minter of `subsystem` locks and raises, in the
/// order they are locked: the subsystem's, then its IBIp prefix's.
pub fn machine_states(dir: &Path, subsystem: &Subsystem) -> Vec<StateFile> {
    std::iter::once(subsystem_state(dir, subsystem)).chain(ibip_state(dir, subsystem)).collect()
}

fn entry_path(dir: &Path, subsystem: &Subsystem) -> PathBuf {
    dir.join(format!("{}_{}.minting", subsystem.host, subsystem.port))
}

/// The lock that orders registrations of `subsystem` in `dir` (the subsystem's
/// machine-wide state's lock).
pub fn lock(dir: &Path, subsystem: &Subsystem) -> Result<FileLock> {
    create_dir_all_durable(dir)?;
    FileLock::acquire(&subsystem_state(dir, subsystem).lock)
}

fn read_entry(path: &Path) -> Result<Option<Entry>> {
    match fs::read_to_string(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io("read", path, e)),
        Ok(text) => Ok(toml::from_str::<Entry>(&text).ok()),
    }
}

/// What the config of a registered local collection says of it now.
enum Standing {
    Holds,
    HandedTo(Entry),
    Free,
}

fn standing_of_local(root: &Path, entry: &Entry) -> Standing {
    let path = crate::store::local::Layout::new(root).config();
    let Ok((config, _)) = CollectionConfig::read(&path) else { return Standing::Free };
    if config.id.as_deref() != Some(entry.id.as_str()) {
        return Standing::Free;
    }
    match config.minting() {
        Minting::Mints => Standing::Holds,
        Minting::Retired(Some(next)) => {
            Standing::HandedTo(Entry { id: next.id, location: next.location, ibip: entry.ibip.clone() })
        }
        Minting::Retired(None) | Minting::Follows(_) => Standing::Free,
    }
}

/// The collection that holds `subsystem`'s minting as this machine knows it:
/// the registered one, or the successor a handover named; `None` when it is
/// gone, retired, or never registered.
pub fn holder(dir: &Path, subsystem: &Subsystem) -> Result<Option<Entry>> {
    let Some(mut entry) = read_entry(&entry_path(dir, subsystem))? else { return Ok(None) };
    for _ in 0..MOST_HANDOVERS {
        let Ok(Location::Local(root)) = Location::parse(Path::new(&entry.location)) else { return Ok(Some(entry)) };
        match standing_of_local(&root, &entry) {
            Standing::Holds => return Ok(Some(entry)),
            Standing::HandedTo(next) => entry = next,
            Standing::Free => return Ok(None),
        }
    }
    Ok(Some(entry))
}

/// Refuses when another collection holds `subsystem` on this machine's record
/// (`holder`): `location` (as `Store::location` spells it, local roots
/// absolute) and `id` are the collection that wants to mint.
pub fn refuse_if_held(dir: &Path, subsystem: &Subsystem, location: &str, id: Option<&str>) -> Result<()> {
    let Some(held) = holder(dir, subsystem)? else { return Ok(()) };
    if held.location == location || id == Some(held.id.as_str()) {
        return Ok(());
    }
    let problem = format!(
        "{} ({}) already mints the names of {} as this machine knows it, and one subsystem has one minting \
         collection: make this one follow it with `ibi init {location} --like {}`, or move minting later with \
         `ibi handover`; if that collection no longer exists, `ibi retire` it or remove {}; nothing was created",
        held.location,
        held.id,
        subsystem.prefix(),
        held.location,
        entry_path(dir, subsystem).display()
    );
    Err(Error::Invalid { what: "collection".into(), problem })
}

/// Refuses a subsystem whose IBIp prefix another subsystem registered here
/// mints under, unless both mint through this machine's distributor
/// (`shares_distributor`): two distributors of one IBIp prefix would give one
/// IBIp to two items. Returns the subsystems it will share the prefix with.
pub fn refuse_shared_ibip(dir: &Path, subsystem: &Subsystem, location: &str) -> Result<Vec<String>> {
    let Some(key) = ibip_key(subsystem) else { return Ok(Vec::new()) };
    let own_file = entry_path(dir, subsystem);
    let listing = match fs::read_dir(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        other => other.with_path("list", dir)?,
    };
    let mut sharing = Vec::new();
    for path in listing.flatten().map(|e| e.path()) {
        if path == own_file || path.extension().is_none_or(|x| x != "minting") {
            continue;
        }
        let Some(entry) = read_entry(&path)? else { continue };
        if entry.ibip.as_deref() != Some(key.as_str()) || !still_held(&entry) {
            continue;
        }
        let other = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        if !(shares_distributor(location) && shares_distributor(&entry.location)) {
            let problem = format!(
                "its IBIp prefix {key} (IP and IBIp port) is already minted under by {} ({other}), which mints \
                 through another distributor, and two distributors of one IBIp prefix give one IBIp to two items: \
                 give this subsystem another --ip or --ibip-port; nothing was created",
                entry.location
            );
            return Err(Error::Invalid { what: "collection".into(), problem });
        }
        sharing.push(format!("{other} ({})", entry.location));
    }
    Ok(sharing)
}

/// Whether a registered entry's collection still mints (or handed over to one
/// that does), as far as this machine can tell.
fn still_held(entry: &Entry) -> bool {
    match Location::parse(Path::new(&entry.location)) {
        Ok(Location::Local(root)) => !matches!(standing_of_local(&root, entry), Standing::Free),
        _ => true,
    }
}

/// Whether a collection at `location` mints through this machine's
/// distributor states: a local one and one in a bucket do (both lock this
/// machine's states); a far one mints on its server's machine.
pub fn shares_distributor(location: &str) -> bool {
    !matches!(Location::parse(Path::new(location)), Ok(Location::Far(_)))
}

/// Records the collection `id` at `location` as minting `subsystem` here.
pub fn register(dir: &Path, subsystem: &Subsystem, id: &str, location: &str) -> Result<()> {
    create_dir_all_durable(dir)?;
    let entry = Entry { id: id.to_string(), location: location.to_string(), ibip: ibip_key(subsystem) };
    let text = toml::to_string(&entry).expect("an entry always serialises");
    crate::fsx::atomic_write(&entry_path(dir, subsystem), text.as_bytes())
}

/// Drops the registry's entry of `subsystem` when it names the collection `id`
/// (that collection retired: the subsystem is free here).
pub fn forget(dir: &Path, subsystem: &Subsystem, id: &str) -> Result<()> {
    let path = entry_path(dir, subsystem);
    if read_entry(&path)?.is_some_and(|entry| entry.id == id) {
        fs::remove_file(&path).with_path("remove", &path)?;
        crate::fsx::fsync_dir(dir)?;
    }
    Ok(())
}

/// Moves the registry's entry of `subsystem` from `from_id` to the successor
/// (a handover run on this machine); an entry naming another collection, or
/// none, is left as it is.
pub fn hand_over(dir: &Path, subsystem: &Subsystem, from_id: &str, to_id: &str, to_location: &str) -> Result<()> {
    let _lock = lock(dir, subsystem)?;
    match read_entry(&entry_path(dir, subsystem))? {
        Some(entry) if entry.id == from_id || entry.id == to_id => register(dir, subsystem, to_id, to_location),
        None => register(dir, subsystem, to_id, to_location),
        Some(_) => Ok(()),
    }
}
