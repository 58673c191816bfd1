//! The minter state of a local collection (ARCHITECTURE.md, "Identifiers"): one
//! distributor state per identification subsystem on this machine, shared by
//! every collection of that subsystem, plus the collection's own state, plus a
//! floor: the newest name of its own subsystem the collection holds. Minting
//! locks both states (machine-wide first, always in that order), starts after
//! the latest of the three, and saves both. So two collections of one
//! subsystem never mint one name, and a state file restored from a backup or
//! left behind by a migration never hands out a name at or before one the
//! collection holds.

use std::fs;
use std::path::{Path, PathBuf};

use super::Layout;
use crate::error::{Error, IoContext, Result};
use crate::fsx::{create_dir_all_durable, FileLock};
use crate::id::minter::MinterState;
use crate::id::{RepositoryName, Subsystem, Timestamp};
use crate::store::config::{CollectionConfig, Peer};
use crate::store::StateFile;

/// The environment variable that chooses the folder of the machine-wide states.
pub const MINTER_DIR_ENV: &str = "IBI_MINTER_DIR";

/// Where machine-wide minter states live: `$IBI_MINTER_DIR`, else `/var/lib/ibi/minters`
/// for root, else `$XDG_STATE_HOME/ibi/minters` (`~/.local/state/ibi/minters`).
pub fn machine_dir() -> Option<PathBuf> {
    crate::store::machine::folder(MINTER_DIR_ENV, "minters")
}

/// The machine-wide state file of a subsystem, in `dir`.
pub fn machine_state(dir: &Path, subsystem: &Subsystem) -> StateFile {
    StateFile::beside(&dir.join(format!("{}_{}.state", subsystem.host, subsystem.port)))
}

/// The file that names the collection minting `subsystem` on this machine.
fn registry_path(dir: &Path, subsystem: &Subsystem) -> PathBuf {
    dir.join(format!("{}_{}.minting", subsystem.host, subsystem.port))
}

/// The collection the machine-wide registry in `dir` says mints `subsystem` here,
/// if that collection is still there, is the one registered, and still mints.
pub fn live_minter(dir: &Path, subsystem: &Subsystem) -> Result<Option<Peer>> {
    let path = registry_path(dir, subsystem);
    let text = match fs::read_to_string(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        other => other.with_path("read", &path)?,
    };
    let Ok(peer) = toml::from_str::<Peer>(&text) else { return Ok(None) };
    let config = Layout::new(Path::new(&peer.location)).config();
    let Ok((config, _)) = CollectionConfig::read(&config) else { return Ok(None) };
    let same = config.id.as_deref() == Some(peer.id.as_str()) && config.minting().mints();
    Ok(same.then_some(peer))
}

/// Refuses when another collection mints `subsystem` on this machine (the
/// registry in `dir` names it); `root` is the collection that wants to.
pub fn refuse_second_minter(dir: &Path, subsystem: &Subsystem, root: &Path, id: Option<&str>) -> Result<()> {
    let Some(peer) = live_minter(dir, subsystem)? else { return Ok(()) };
    if Path::new(&peer.location) == root || id == Some(peer.id.as_str()) {
        return Ok(());
    }
    let problem = format!(
        "{} ({}) already mints the names of {} on this machine, and one subsystem has one minting collection: \
         make this one follow it with `ibi init {} --like {}`, or move minting later with `ibi handover`; \
         nothing was created",
        peer.location,
        peer.id,
        subsystem.prefix(),
        root.display(),
        peer.location
    );
    Err(Error::Invalid { what: "collection".into(), problem })
}

/// Records `peer` as the collection minting `subsystem` on this machine.
pub fn register_minter(dir: &Path, subsystem: &Subsystem, peer: &Peer) -> Result<()> {
    create_dir_all_durable(dir)?;
    let text = toml::to_string(peer).expect("a peer always serialises");
    crate::fsx::atomic_write(&registry_path(dir, subsystem), text.as_bytes())
}

/// The lock that orders registrations of `subsystem` in `dir` (the machine-wide state's).
pub fn registry_lock(dir: &Path, subsystem: &Subsystem) -> Result<FileLock> {
    create_dir_all_durable(dir)?;
    FileLock::acquire(&machine_state(dir, subsystem).lock)
}

/// The newest date among the names of `subsystem` that the collection holds:
/// the newest year folder that holds any, then the newest name in it.
pub fn newest_held(layout: &Layout, subsystem: &Subsystem) -> Result<Option<Timestamp>> {
    let base = layout.root.join(subsystem.prefix().to_string());
    let mut years: Vec<u32> = match fs::read_dir(&base) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        other => other.with_path("list", &base)?,
    }
    .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
    .collect();
    years.sort_unstable_by(|a, b| b.cmp(a));
    let prefix = subsystem.prefix().to_string();
    for year in years {
        let dir = base.join(year.to_string());
        let newest = fs::read_dir(&dir)
            .with_path("list", &dir)?
            .filter_map(|e| {
                let entry = e.ok()?;
                entry.file_type().ok()?.is_dir().then_some(())?;
                let suffix = entry.file_name().to_str()?.to_string();
                RepositoryName::parse(&format!("{prefix}/{year}/{suffix}")).ok().map(|n| n.date())
            })
            .max();
        if newest.is_some() {
            return Ok(newest);
        }
    }
    Ok(None)
}

/// The collection's minter state as the `Store` seam sees it.
pub struct CollectionMinter<'a> {
    /// `None` when no machine-wide folder can be named (no HOME): minting then fails.
    pub machine: Option<StateFile>,
    pub own: StateFile,
    /// The newest date held, computed under the locks (once per collection handle).
    pub floor: Box<dyn Fn() -> Result<Option<Timestamp>> + 'a>,
}

impl MinterState for CollectionMinter<'_> {
    fn update(&self, step: &mut dyn FnMut(Option<Timestamp>) -> Result<Timestamp>) -> Result<()> {
        let machine = self.machine.as_ref().ok_or_else(|| Error::Invalid {
            what: "minter".into(),
            problem: format!("no folder for the machine-wide minter state: set {MINTER_DIR_ENV} or HOME"),
        })?;
        let dir = crate::fsx::parent_dir(&machine.state);
        create_dir_all_durable(dir)?;
        let _machine_lock = FileLock::acquire(&machine.lock)?;
        let _own_lock = FileLock::acquire(&self.own.lock)?;
        let (shared, own) = (machine.read()?, self.own.read()?);
        let last = [shared, own, (self.floor)()?].into_iter().flatten().max();
        let next = step(last)?;
        if Some(next) != shared {
            machine.write(next)?;
        }
        if Some(next) != own {
            self.own.write(next)?;
        }
        Ok(())
    }
    fn last(&self) -> Result<Option<Timestamp>> {
        let machine = match &self.machine {
            Some(machine) => machine.last()?,
            None => None,
        };
        Ok([machine, self.own.last()?, (self.floor)()?].into_iter().flatten().max())
    }
}
