//! An OCFL storage root as a site (`ocfl:PATH`, ARCHITECTURE.md "OCFL
//! copies"): read through the `Store` seam, each OCFL object is an item whose
//! current bag is its head state and whose earlier versions are
//! `ibi-versions/N/`, so `verify`, `audit`, `copy` and `list` read it as any
//! other place. It is written only by `replicate` and `export --ocfl`
//! (`ops::ocfl::export`), never through a `Writer`: OCFL rewrites the root
//! inventory on every update, which no lease, alias or append-only rule of
//! ibi's describes. Its fixity dates are signed lines of its own (`checks`). `ibi-site.toml` at the root (a file OCFL allows there)
//! names the subsystem and the collection the site copies. The root's files
//! are in a folder or a bucket (`files`, `s3`).

pub mod checks;
pub mod files;
pub mod format;
#[cfg(feature = "s3")]
pub mod s3;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::time::SystemTime;

use crate::bag::files::{BagFiles, FileKind, TreeEntry, TreeError};
use crate::bag::history::VERSIONS_DIR;
use crate::digest::{Algorithm, Digests};
use crate::error::{Error, Result};
use crate::id::{Ibip, RepositoryName, Subsystem};
use crate::problem::Problem;
use crate::store::config::{CollectionConfig, Minting};
use crate::store::{ItemRecord, Listed, LockWait, Slot, Store, Writer};

use files::RootWrites;
use format::{object_rel, read_inventory_in, LAYOUT, OBJECT_ID_BASE};

/// The file at the root that makes an OCFL storage root an `ibi` site.
pub const SITE_FILE: &str = "ibi-site.toml";

/// An OCFL storage root kept as a site of a collection.
pub struct OcflStore {
    files: Box<dyn RootWrites>,
    config: CollectionConfig,
    subsystem: Subsystem,
}

impl OcflStore {
    /// Opens the OCFL site whose files `files` reads (`store::open_ocfl_root`):
    /// an OCFL 1.1 root laid out by 0003 whose `ibi-site.toml` names its subsystem.
    pub fn open_on(files: Box<dyn RootWrites>) -> Result<OcflStore> {
        let invalid = |problem: String| Error::Invalid { what: files.place(), problem };
        let layout = files.read_small("ocfl_layout.json")?.unwrap_or_default();
        let layout_named = String::from_utf8_lossy(&layout).contains(LAYOUT);
        if files.read_small("0=ocfl_1.1")?.is_none() || !layout_named {
            return Err(invalid(format!("it is not an OCFL 1.1 storage root laid out by {LAYOUT}")));
        }
        let Some(site) = files.read_small(SITE_FILE)? else {
            return Err(invalid(format!("it has no {SITE_FILE}: it is no site of a collection (`ibi site add`)")));
        };
        let text = String::from_utf8(site)
            .map_err(|_| Error::Data { what: format!("{}/{SITE_FILE}", files.place()), problem: "not UTF-8".into() })?;
        let (config, subsystem) = CollectionConfig::parse(&text, &format!("{}/{SITE_FILE}", files.place()))?;
        Ok(OcflStore { files, config, subsystem })
    }

    /// The object of `name`: its folder (relative to the root) and its
    /// inventory when it has one that its sidecar seals and that names it.
    fn object_of(&self, name: &RepositoryName) -> Result<(String, Option<format::Inventory>)> {
        let id = format!("{OBJECT_ID_BASE}{name}");
        let object = object_rel(&id);
        let inventory = read_inventory_in(self.files.as_ref(), &object)?.filter(|i| i.id == id);
        Ok((object, inventory))
    }

    /// Every logical path of the item's bag (the head's state at the top,
    /// each earlier version's under `ibi-versions/N/`) with its content file
    /// relative to the root.
    fn logical_files(object: &str, inventory: &format::Inventory) -> BTreeMap<String, String> {
        let mut files = BTreeMap::new();
        let head = inventory.head_number();
        for number in 1..=head {
            let Some(version) = inventory.versions.get(&format!("v{number}")) else { continue };
            let under = if number == head { String::new() } else { format!("{VERSIONS_DIR}/{number}/") };
            for (digest, logicals) in &version.state {
                let Some(content) = inventory.manifest.get(digest).and_then(|c| c.first()) else { continue };
                for logical in logicals {
                    files.insert(format!("{under}{logical}"), format!("{object}/{content}"));
                }
            }
        }
        files
    }

    /// The files of `name`'s object, as the item's bag sees them, with their
    /// sizes (one listing of the object); an empty bag, not held, when the
    /// root holds no object of it.
    fn bag(&self, name: &RepositoryName) -> OcflBag<'_> {
        let (object, inventory) = self.object_of(name).unwrap_or_default();
        let Some(inventory) = inventory else {
            return OcflBag { root: self.files.as_ref(), files: BTreeMap::new(), held: false };
        };
        let sizes = self.files.sizes_under(&object).unwrap_or_default();
        let files = Self::logical_files(&object, &inventory)
            .into_iter()
            .map(|(logical, content)| {
                let size = sizes.get(content.strip_prefix(&format!("{object}/")).unwrap_or(&content)).copied();
                (logical, (content, size.unwrap_or(0)))
            })
            .collect();
        OcflBag { root: self.files.as_ref(), files, held: true }
    }

    /// The identity the object of `name`'s inventory states for its head.
    fn inventory_identity(&self, name: &RepositoryName) -> Result<String> {
        let (object, inventory) = self.object_of(name)?;
        let not_found =
            || Error::NotFound { what: "OCFL object", name: name.to_string(), place: self.files.place().into() };
        let inventory = inventory.ok_or_else(not_found)?;
        let digest = inventory.digest_at(inventory.head_number(), crate::bag::TAGMANIFEST);
        digest.map(str::to_string).ok_or_else(|| Error::Data {
            what: format!("{}/{object}", self.files.place()),
            problem: "its head holds no tagmanifest-sha256.txt".into(),
        })
    }

    /// Every object's item name, read from the object folders' inventories.
    fn names(&self) -> Result<Vec<RepositoryName>> {
        let mut names: Vec<RepositoryName> = self
            .files
            .object_dirs()?
            .into_iter()
            .filter_map(|dir| read_inventory_in(self.files.as_ref(), &dir).ok().flatten())
            .filter_map(|i| RepositoryName::parse(i.id.strip_prefix(OBJECT_ID_BASE)?).ok())
            .collect();
        names.sort();
        Ok(names)
    }
}

/// An object's files as the item's bag: logical path to content file (relative
/// to the storage root) and its size.
struct OcflBag<'a> {
    root: &'a dyn RootWrites,
    files: BTreeMap<String, (String, u64)>,
    held: bool,
}

impl OcflBag<'_> {
    fn content(&self, rel: &str) -> std::io::Result<&str> {
        match self.files.get(rel) {
            Some((content, _)) => Ok(content),
            None => Err(std::io::Error::new(std::io::ErrorKind::NotFound, rel.to_string())),
        }
    }

    fn read_whole(&self, rel: &str, cap: u64) -> std::io::Result<Vec<u8>> {
        let (mut reader, _) = self.root.open(self.content(rel)?)?;
        let mut bytes = Vec::new();
        (&mut reader).take(cap + 1).read_to_end(&mut bytes)?;
        if bytes.len() as u64 > cap {
            return Err(std::io::Error::other(format!("{rel} is longer than {cap} bytes")));
        }
        Ok(bytes)
    }
}

impl BagFiles for OcflBag<'_> {
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
        for (rel, (_, size)) in &self.files {
            entries.push((rel.clone(), FileKind::File { size: *size }));
        }
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        entries.into_iter().map(|(rel, kind)| Ok(TreeEntry { rel: Ok(rel), kind })).collect()
    }

    fn read(&self, rel: &str) -> std::io::Result<Vec<u8>> {
        self.read_whole(rel, crate::fsx::MAX_TAG_FILE)
    }

    fn digests(&self, rel: &str, also: &[Algorithm]) -> std::io::Result<Digests> {
        let (mut reader, _) = self.root.open(self.content(rel)?)?;
        crate::fsx::hash_stream(&mut reader, also, None, |_| Ok(()))
    }
}

impl Store for OcflStore {
    fn location(&self) -> String {
        self.files.place()
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
        match self.names() {
            Ok(names) => Box::new(names.into_iter().map(|name| Ok(Listed::Item(name)))),
            Err(e) => Box::new(std::iter::once(Err(e))),
        }
    }
    /// Whether the root holds an object of `name`: its inventory read, no listing.
    fn slot(&self, name: &RepositoryName) -> Result<Slot> {
        Ok(if self.object_of(name)?.1.is_some() { Slot::Item } else { Slot::Empty })
    }
    fn aliases(&self) -> &dyn crate::store::aliases::Aliases {
        self
    }
    /// Each object's head identity as its inventory (sealed by its sidecar)
    /// states it, the digest of `tagmanifest-sha256.txt` in the head state:
    /// what `audit` counts a copy by, no content read. `verify` of the site
    /// reads the content against the inventories.
    fn bag_identities(&self, names: &[RepositoryName]) -> Vec<Result<String>> {
        names.iter().map(|name| self.inventory_identity(name)).collect()
    }
    fn item_files<'a>(&'a self, name: &RepositoryName) -> Box<dyn BagFiles + 'a> {
        Box::new(self.bag(name))
    }
    fn open(
        &self,
        name: &RepositoryName,
        rel: &str,
    ) -> std::io::Result<(Box<dyn Read + Send + '_>, Option<SystemTime>)> {
        // The inventory alone says where the file is: no listing for its size.
        let not_found = || std::io::Error::new(std::io::ErrorKind::NotFound, rel.to_string());
        let (object, inventory) = self.object_of(name).map_err(|e| std::io::Error::other(e.to_string()))?;
        let files = Self::logical_files(&object, &inventory.ok_or_else(not_found)?);
        self.files.open(files.get(rel).ok_or_else(not_found)?)
    }
    fn inventory(&self) -> &dyn crate::store::records::Records {
        self
    }
    fn ledger(&self) -> &dyn crate::store::ledger::Ledger {
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
        match self.names() {
            Ok(names) => Box::new(names.into_iter().map(move |name| ItemRecord::from_bag(&self.bag(&name), &name))),
            Err(e) => Box::new(std::iter::once(Err(e))),
        }
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
