//! An OCFL storage root as a site (`ocfl:PATH`, ARCHITECTURE.md "OCFL
//! copies"): read through the `Store` seam, each OCFL object is an item whose
//! current bag is its head state and whose earlier versions are
//! `ibi-versions/N/`, so `verify`, `audit`, `copy` and `list` read it as any
//! other place. It is written only by `replicate` and `export --ocfl`
//! (`ops::ocfl::export`), never through a `Writer`: OCFL rewrites the root
//! inventory on every update, which no lease, alias or append-only rule of
//! ibi's describes. `ibi-site.toml` at the root (a file OCFL allows there)
//! names the subsystem and the collection the site copies.

pub mod format;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::bag::files::{BagFiles, FileKind, TreeEntry, TreeError};
use crate::bag::history::VERSIONS_DIR;
use crate::digest::{Algorithm, Digests};
use crate::error::{Error, Result};
use crate::id::{Ibip, RepositoryName, Subsystem};
use crate::problem::Problem;
use crate::store::config::{CollectionConfig, Minting};
use crate::store::{ItemRecord, Listed, LockWait, Slot, Store, Writer};

use format::{object_path, read_inventory, LAYOUT, OBJECT_ID_BASE};

/// The file at the root that makes an OCFL storage root an `ibi` site.
pub const SITE_FILE: &str = "ibi-site.toml";

/// An OCFL storage root kept as a site of a collection.
pub struct OcflStore {
    root: PathBuf,
    config: CollectionConfig,
    subsystem: Subsystem,
}

impl OcflStore {
    /// Opens the OCFL site at `root`: an OCFL 1.1 root laid out by 0003 whose
    /// `ibi-site.toml` names its subsystem.
    pub fn open(root: &Path) -> Result<OcflStore> {
        let invalid = |problem: String| Error::Invalid { what: format!("ocfl:{}", root.display()), problem };
        let layout = std::fs::read_to_string(root.join("ocfl_layout.json")).unwrap_or_default();
        if !root.join("0=ocfl_1.1").is_file() || !layout.contains(LAYOUT) {
            return Err(invalid(format!("it is not an OCFL 1.1 storage root laid out by {LAYOUT}")));
        }
        if !root.join(SITE_FILE).is_file() {
            return Err(invalid(format!("it has no {SITE_FILE}: it is no site of a collection (`ibi site add`)")));
        }
        let (config, subsystem) = CollectionConfig::read(&root.join(SITE_FILE))?;
        Ok(OcflStore { root: root.to_path_buf(), config, subsystem })
    }

    /// The files of `name`'s object, as the item's bag sees them; `None` when
    /// the root holds no object of it.
    fn bag(&self, name: &RepositoryName) -> OcflBag {
        let object = self.root.join(object_path(&format!("{OBJECT_ID_BASE}{name}")));
        let mut files = BTreeMap::new();
        let inventory = read_inventory(&object).ok().flatten().filter(|i| i.id == format!("{OBJECT_ID_BASE}{name}"));
        if let Some(inventory) = &inventory {
            let head = inventory.head_number();
            for number in 1..=head {
                let Some(version) = inventory.versions.get(&format!("v{number}")) else { continue };
                let under = if number == head { String::new() } else { format!("{VERSIONS_DIR}/{number}/") };
                for (digest, logicals) in &version.state {
                    let Some(content) = inventory.manifest.get(digest).and_then(|c| c.first()) else { continue };
                    for logical in logicals {
                        files.insert(format!("{under}{logical}"), object.join(content));
                    }
                }
            }
        }
        OcflBag { files, held: inventory.is_some() }
    }

    /// Every object's item name, read from the object folders' encoded ids.
    fn names(&self) -> Vec<RepositoryName> {
        let mut names: Vec<RepositoryName> = walkdir::WalkDir::new(&self.root)
            .min_depth(4)
            .max_depth(4)
            .into_iter()
            .flatten()
            .filter(|e| e.file_type().is_dir() && e.path().join("0=ocfl_object_1.1").is_file())
            .filter_map(|e| read_inventory(e.path()).ok().flatten())
            .filter_map(|i| RepositoryName::parse(i.id.strip_prefix(OBJECT_ID_BASE)?).ok())
            .collect();
        names.sort();
        names
    }
}

/// An object's files as the item's bag: logical path to content file.
struct OcflBag {
    files: BTreeMap<String, PathBuf>,
    held: bool,
}

impl OcflBag {
    fn path(&self, rel: &str) -> std::io::Result<&PathBuf> {
        self.files.get(rel).ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, rel.to_string()))
    }
}

impl BagFiles for OcflBag {
    fn root_kind(&self) -> std::io::Result<FileKind> {
        match self.held {
            true => Ok(FileKind::Dir),
            false => Err(std::io::Error::new(std::io::ErrorKind::NotFound, "no such object")),
        }
    }

    fn entries(&self) -> Vec<std::result::Result<TreeEntry, TreeError>> {
        // OCFL holds files, never an empty folder: every bag has its data/
        // (a tombstone's is empty), the current one and each earlier version's.
        let mut dirs: std::collections::BTreeSet<String> = std::collections::BTreeSet::from(["data".to_string()]);
        for rel in self.files.keys() {
            if let Some(version) = rel.strip_prefix(&format!("{VERSIONS_DIR}/")).and_then(|r| r.split('/').next()) {
                dirs.insert(format!("{VERSIONS_DIR}/{version}/data"));
            }
        }
        for rel in self.files.keys() {
            let mut at = rel.as_str();
            while let Some((up, _)) = at.rsplit_once('/') {
                dirs.insert(up.to_string());
                at = up;
            }
        }
        let mut entries: Vec<(String, FileKind)> = dirs.into_iter().map(|d| (d, FileKind::Dir)).collect();
        for (rel, path) in &self.files {
            let size = std::fs::symlink_metadata(path).map_or(0, |m| m.len());
            entries.push((rel.clone(), FileKind::File { size }));
        }
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        entries.into_iter().map(|(rel, kind)| Ok(TreeEntry { rel: Ok(rel), kind })).collect()
    }

    fn read(&self, rel: &str) -> std::io::Result<Vec<u8>> {
        crate::fsx::read_opened(crate::fsx::open_regular(self.path(rel)?, false)?, crate::fsx::MAX_TAG_FILE)
    }

    fn digests(&self, rel: &str, also: &[Algorithm]) -> std::io::Result<Digests> {
        crate::fsx::hash_opened(crate::fsx::open_regular(self.path(rel)?, false)?, also)
    }
}

impl Store for OcflStore {
    fn location(&self) -> String {
        format!("ocfl:{}", self.root.display())
    }
    fn local_root(&self) -> Option<&Path> {
        None
    }
    fn subsystem(&self) -> &Subsystem {
        &self.subsystem
    }
    fn organisation(&self) -> Option<&str> {
        self.config.organisation.as_deref()
    }
    fn walk(&self) -> Box<dyn Iterator<Item = Result<Listed>> + Send + '_> {
        Box::new(self.names().into_iter().map(|name| Ok(Listed::Item(name))))
    }
    fn slot(&self, name: &RepositoryName) -> Result<Slot> {
        Ok(if self.bag(name).held { Slot::Item } else { Slot::Empty })
    }
    fn aliases(&self) -> &dyn crate::store::aliases::Aliases {
        self
    }
    fn item_files<'a>(&'a self, name: &RepositoryName) -> Box<dyn BagFiles + 'a> {
        Box::new(self.bag(name))
    }
    fn open(
        &self,
        name: &RepositoryName,
        rel: &str,
    ) -> std::io::Result<(Box<dyn Read + Send + '_>, Option<SystemTime>)> {
        let bag = self.bag(name);
        let opened = crate::fsx::open_regular(bag.path(rel)?, false)?;
        let mtime = opened.meta.modified().ok();
        Ok((Box::new(opened.file), mtime))
    }
    fn inventory(&self) -> &dyn crate::store::records::Records {
        self
    }
    fn as_dyn(&self) -> &dyn Store {
        self
    }
    fn leftovers(&self) -> Vec<Problem> {
        Vec::new()
    }
    fn begin_write(&self, _wait: LockWait) -> Result<Box<dyn Writer + '_>> {
        Err(Error::Refused {
            what: self.location(),
            why: "an OCFL site is written by `ibi replicate` (and `ibi export --ocfl`), never item by item".into(),
        })
    }
}

/// An OCFL site keeps no aliases: an item's IBIp is in its bag-info.
impl crate::store::aliases::Aliases for OcflStore {
    fn alias(&self, _ibip: &Ibip) -> Result<Option<RepositoryName>> {
        Ok(None)
    }
    fn dangling_aliases(&self, _checked: &dyn Fn(&Ibip) -> bool) -> Result<Vec<(Ibip, RepositoryName)>> {
        Ok(Vec::new())
    }
    fn alias_problem(&self, _ibip: &Ibip, _name: &RepositoryName) -> Option<String> {
        None
    }
}

/// The records are the objects' own: each read from its bag as the inventory
/// maps it.
impl crate::store::records::Records for OcflStore {
    fn has_inventory(&self) -> bool {
        false
    }
    fn records(&self, names: &[RepositoryName]) -> Result<Vec<Option<ItemRecord>>> {
        Ok(names.iter().map(|name| ItemRecord::from_bag(&self.bag(name), name).ok()).collect())
    }
    fn all_records(&self) -> Box<dyn Iterator<Item = Result<ItemRecord>> + Send + '_> {
        Box::new(self.names().into_iter().map(move |name| ItemRecord::from_bag(&self.bag(&name), &name)))
    }
    fn deposit_record(&self, _key: &str) -> Result<Option<RepositoryName>> {
        Ok(None)
    }
    fn collection_id(&self) -> Option<String> {
        self.config.id.clone()
    }
    fn minting(&self) -> Result<Minting> {
        Ok(self.config.minting())
    }
    fn current_config(&self) -> Result<Option<CollectionConfig>> {
        Ok(Some(self.config.clone()))
    }
}
