//! A `Collection`: a directory root holding items at their repository-name
//! paths (DESIGN §3), with its config, minter, write lock, staging, trash,
//! journal and alias tree. An `Item` is one deposited bag in it. This module
//! owns opening and creating collections, locking writers out, minting,
//! resolving names and IBIps, and recovering after an interrupted writer.

pub mod alias;
pub mod config;
pub mod layout;
pub mod walk;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::bag::{self, BagInfo};
use crate::error::{Error, IoContext, Result};
use crate::fsx::{self, atomic_write, create_dir_all_durable, fsync_dir, FileLock};
use crate::id::minter::{Clock, Minter, StateStore};
use crate::id::{Ibip, Identifier, Minted, RepositoryName, Subsystem};
pub use config::CollectionConfig;
pub use layout::Layout;
pub use walk::{Entry, ItemWalker};

#[derive(Debug, Clone)]
pub struct Collection {
    pub layout: Layout,
    pub config: CollectionConfig,
    pub subsystem: Subsystem,
}

/// One item: its name and its directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub name: RepositoryName,
    pub path: PathBuf,
}

impl Item {
    pub fn info(&self) -> Result<BagInfo> {
        let path = self.path.join(bag::BAG_INFO_TXT);
        let text = fs::read_to_string(&path).with_path("read", &path)?;
        BagInfo::parse(&text).map_err(|line| Error::Invalid {
            what: format!("{}", path.display()),
            problem: format!("malformed line {line}"),
        })
    }

    /// The IBIp recorded in bag-info (an External-Identifier that parses as one).
    pub fn ibip(&self) -> Result<Option<Ibip>> {
        Ok(ibip_in(&self.info()?))
    }

    pub fn identity_digest(&self) -> Result<String> {
        bag::identity_digest(&self.path).with_path("read", self.path.join(bag::TAGMANIFEST))
    }
}

/// The IBIp among bag-info's External-Identifier values, if any.
pub fn ibip_in(info: &BagInfo) -> Option<Ibip> {
    info.values("External-Identifier").find_map(|v| Ibip::parse(v).ok())
}

/// How to wait for the write lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockWait {
    /// Fail at once with `Error::Locked` (exit 75).
    No,
    /// Wait as long as it takes.
    Forever,
    /// Poll for up to this long, then fail with `Error::Locked`.
    For(Duration),
}

/// A journal record: an item placed but maybe not yet aliased.
const PLACE_PREFIX: &str = "place-";

impl Collection {
    /// Creates a collection at `root` (which may exist, but must not be a collection).
    pub fn init(root: &Path, subsystem: Subsystem, organisation: Option<String>) -> Result<Collection> {
        let layout = Layout::new(root);
        if layout.config().exists() {
            return Err(Error::Invalid {
                what: "collection".into(),
                problem: format!("{} is already a collection", root.display()),
            });
        }
        for dir in [layout.staging(), layout.trash(), layout.journal(), layout.aliases()] {
            create_dir_all_durable(&dir)?;
        }
        let config = CollectionConfig::new(&subsystem, organisation);
        atomic_write(&layout.config(), config.to_toml().as_bytes())?;
        Ok(Collection { layout, config, subsystem })
    }

    /// Opens an existing collection; a root without `.ibi/collection.toml` is invalid input.
    pub fn open(root: &Path) -> Result<Collection> {
        let layout = Layout::new(root);
        if !layout.config().is_file() {
            return Err(Error::Invalid {
                what: "collection".into(),
                problem: format!("{} is not an ibi collection (no .ibi/collection.toml; see ibi init)", root.display()),
            });
        }
        let (config, subsystem) = CollectionConfig::read(&layout.config())?;
        Ok(Collection { layout, config, subsystem })
    }

    pub fn root(&self) -> &Path {
        &self.layout.root
    }

    /// Takes the collection's write lock.
    pub fn lock_writes(&self, wait: LockWait) -> Result<FileLock> {
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

    /// Mints `count` identifiers from the collection's own minter state.
    pub fn mint(&self, count: usize, clock: &dyn Clock) -> Result<Vec<Minted>> {
        let store = StateStore::new(self.layout.minter_state(), self.layout.minter_lock());
        let minter = Minter::new(store, self.subsystem.granularity, clock);
        minter.mint(count)?.into_iter().map(|date| self.subsystem.identify(date)).collect()
    }

    pub fn item(&self, name: &RepositoryName) -> Item {
        Item { name: name.clone(), path: self.layout.item(name) }
    }

    pub fn contains(&self, name: &RepositoryName) -> bool {
        self.layout.item(name).is_dir()
    }

    /// Every item and stray entry, sorted by name, streaming.
    pub fn walk(&self) -> ItemWalker {
        ItemWalker::new(self.layout.root.clone())
    }

    /// Finds an item by repository name or IBIp, in any letter case.
    pub fn resolve(&self, text: &str) -> Result<Item> {
        let not_found =
            || Error::Invalid { what: "item".into(), problem: format!("no item {text} in {}", self.root().display()) };
        let name = match Identifier::parse(text)? {
            Identifier::Name(name) => name,
            Identifier::Ibip(ibip) => {
                let link = self.layout.alias(&ibip);
                let target = fs::read_link(&link).map_err(|_| not_found())?;
                let rel = target.strip_prefix("../..").map_err(|_| not_found())?;
                RepositoryName::parse(&rel.to_string_lossy()).map_err(|_| not_found())?
            }
            other => {
                return Err(Error::Invalid {
                    what: "item".into(),
                    problem: format!("{text} is a {}, not a repository name or IBIp", other.kind()),
                })
            }
        };
        let item = self.item(&name);
        if item.path.is_dir() {
            Ok(item)
        } else {
            Err(not_found())
        }
    }

    /// Journals that `name` is about to be placed, so an interrupted writer's
    /// successor can finish its alias.
    pub fn journal_placement(&self, minted: &Minted) -> Result<PathBuf> {
        let key = &fsx::hash_bytes(minted.name.to_string().as_bytes())[..16];
        let path = self.layout.journal().join(format!("{PLACE_PREFIX}{key}"));
        let ibip = minted.ibip.map(|i| i.to_string()).unwrap_or_default();
        atomic_write(&path, format!("{}\t{ibip}\n", minted.name).as_bytes())?;
        Ok(path)
    }

    /// Completes what an interrupted writer left: removes staging leftovers and
    /// finishes the aliases of journalled placements. Call with the write lock held.
    pub fn recover(&self) -> Result<()> {
        self.clear_dir(&self.layout.staging())?;
        let journal = self.layout.journal();
        let entries = match fs::read_dir(&journal) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            other => other.with_path("list", &journal)?,
        };
        for entry in entries {
            let path = entry.with_path("list", &journal)?.path();
            let is_place = path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(PLACE_PREFIX));
            if is_place {
                self.finish_placement(&path)?;
            }
        }
        Ok(())
    }

    fn finish_placement(&self, journal: &Path) -> Result<()> {
        let text = fs::read_to_string(journal).with_path("read", journal)?;
        let (name, ibip) = text.trim_end().split_once('\t').unwrap_or((text.trim_end(), ""));
        if let (Ok(name), Ok(ibip)) = (RepositoryName::parse(name), Ibip::parse(ibip)) {
            if self.contains(&name) {
                alias::create(&self.layout, &ibip, &name)?;
            }
        }
        fs::remove_file(journal).with_path("remove", journal)?;
        fsync_dir(&self.layout.journal())
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
