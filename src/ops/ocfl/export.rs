//! `export --ocfl` (ARCHITECTURE.md, "OCFL copies"): it
//! writes an item, every version, as an OCFL object in a storage root laid out
//! by extension `0003-hash-and-id-n-tuple-storage-layout` (the one layout
//! ocfl-java, rocfl and ocfl-py all read), making the root when it does not
//! exist and adding to it when it does. The object's id is
//! `http://urlib.net/<name>`; version N is the whole bag as it was at version N
//! (never `ibi-versions/`), with `sha256` as the digest, so the digest of its
//! `tagmanifest-sha256.txt` is the item's identity digest at that version;
//! files unchanged between versions are stored once. A new version is built
//! under the root's `extensions/ibi-staging/` (a valid root meanwhile), then
//! renamed into the object and named by the inventories; in a bucket, which
//! has no rename, it is written where it stays, its inventory last. A kill
//! between the version and the root inventory is mended by the next run. The
//! root's files are reached through `store::ocfl::files::RootWrites`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sha2::Digest;

use crate::bag::files::{FileKind, TreeEntry};
use crate::bag::history::VERSIONS_DIR;
use crate::digest::Algorithm;
use crate::error::{Error, Result};
use crate::id::RepositoryName;
use crate::store::location::OcflPlace;
use crate::store::ocfl::files::{RootWrites, Unfinished};
use crate::store::ocfl::format::{object_rel, read_inventory_in, User};
use crate::store::{resolve, Connect, ItemRecord, Store};

use super::{Inventory, Version, LAYOUT, OBJECT_ID_BASE};

const ROOT_NAMASTE: (&str, &str) = ("0=ocfl_1.1", "ocfl_1.1\n");
const OBJECT_NAMASTE: (&str, &str) = ("0=ocfl_object_1.1", "ocfl_object_1.1\n");
/// Where a version is built before it is renamed into its object (a folder only).
const STAGING: &str = "extensions/ibi-staging";
/// Files of ibi's own under the root: the site's lease (in a bucket) and its aliases.
pub const SITE_EXTENSION: &str = "extensions/ibi-site";

/// What `export --ocfl` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OcflExported {
    pub name: RepositoryName,
    /// The object's root folder, relative to the storage root.
    pub object: String,
    /// The versions it added (none when the object already held every one).
    pub added: Vec<u32>,
    pub head: u32,
}

/// What committing one item did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    /// The object's root folder, relative to the storage root.
    pub object: String,
    /// The versions added (none when the object held every one).
    pub added: Vec<u32>,
    pub head: u32,
    /// The identity digest its head holds (its `tagmanifest-sha256.txt`'s digest).
    pub identity: Option<String>,
}

/// Writes every version of the item `text` names that the OCFL object of it
/// under `root` does not hold yet, making the storage root when it is missing.
pub fn export(store: &dyn Store, text: &str, root: &OcflPlace, connect: &Connect) -> Result<OcflExported> {
    let name = resolve(store, text)?;
    let record = ItemRecord::from_bag(store.item_files(&name).as_ref(), &name)?;
    let writing = OcflRoot::open_for_writing(root, connect)?;
    let Committed { object, added, head, .. } = writing.add_item(store, &record)?;
    writing.finish()?;
    Ok(OcflExported { name, object, added, head })
}

/// An OCFL storage root held for writing: made if missing, locked, and
/// cleared of what a killed writer staged.
pub struct OcflRoot {
    files: Box<dyn RootWrites>,
    _lock: std::sync::Mutex<Box<dyn std::any::Any + Send>>,
}

impl OcflRoot {
    pub fn open_for_writing(place: &OcflPlace, connect: &Connect) -> Result<OcflRoot> {
        let files = crate::store::open_ocfl_root(place, connect)?;
        prepare_root(files.as_ref())?;
        let lock = files.lock()?;
        if files.stages() {
            files.remove_tree(STAGING)?;
        }
        Ok(OcflRoot { files, _lock: std::sync::Mutex::new(lock) })
    }

    /// The root's files.
    pub fn files(&self) -> &dyn RootWrites {
        self.files.as_ref()
    }

    /// Adds the versions of the item `record` names that its object lacks:
    /// the object's folder, the versions added and the head.
    pub fn add_item(&self, store: &dyn Store, record: &ItemRecord) -> Result<Committed> {
        let staged = self.stage_item(store, record)?;
        self.make_staged_durable()?;
        self.commit(staged)
    }

    /// Builds every version of `record`'s item its object lacks (staged in a
    /// folder, in place in a bucket; nothing made durable yet: the caller's
    /// `make_staged_durable` does, for as many items as it stages, before
    /// any is committed).
    pub fn stage_item(&self, store: &dyn Store, record: &ItemRecord) -> Result<StagedItem> {
        let id = format!("{OBJECT_ID_BASE}{}", record.name);
        let object = object_rel(&id);
        let mut inventory = open_object(self.files(), &object, &id, record.current().number)?;
        let held = inventory.head_number();
        held_versions_match(&inventory, record, &format!("{}/{object}", self.files.place()))?;
        if held > 0 && held < record.current().number && record.withdrawn.is_some() {
            refuse_a_purge(store, record)?;
        }
        let mut versions = Vec::new();
        for number in held + 1..=record.current().number {
            let built = VersionBuild { files: self.files(), store, record, object: &object };
            versions.push(built.build(number, &mut inventory)?);
        }
        let log = match versions.is_empty() {
            true => None,
            false => Some(crate::ops::log::premis(store, &record.name)?),
        };
        let identity = inventory.digest_at(inventory.head_number(), crate::bag::TAGMANIFEST).map(str::to_string);
        Ok(StagedItem { object, versions, head: inventory.head_number(), log, identity })
    }

    /// Puts each staged version into its object, in order, each named by
    /// the root inventory at once.
    pub fn commit(&self, staged: StagedItem) -> Result<Committed> {
        let added = staged.versions.iter().map(|v| v.number).collect();
        for version in &staged.versions {
            place_version(self.files(), &staged.object, version)?;
            self.files.sync()?;
            write_inventory(self.files(), &staged.object, &version.inventory, true)?;
        }
        write_log(self.files(), &staged)?;
        self.files.sync()?;
        Ok(Committed { object: staged.object, added, head: staged.head, identity: staged.identity })
    }

    /// Commits many staged items at once: every version put into its
    /// object, one `sync`, every root inventory replaced, one more `sync`
    /// (where `commit` makes each step durable on its own). A kill between
    /// leaves objects whose root inventory lags their newest version,
    /// which the next `open_object` mends.
    pub fn commit_batch(&self, staged: Vec<Result<StagedItem>>) -> Vec<Result<Committed>> {
        use rayon::prelude::*;
        let files = self.files();
        let placed: Vec<Result<StagedItem>> = staged
            .into_par_iter()
            .map(|s| s.and_then(|s| s.versions.iter().try_for_each(|v| place_version(files, &s.object, v)).map(|()| s)))
            .collect();
        if let Err(e) = self.files.sync() {
            return placed.into_iter().map(|_| Err(for_each_item(&e))).collect();
        }
        let named: Vec<Result<Committed>> = placed
            .into_par_iter()
            .map(|s| {
                let s = s?;
                if let Some(last) = s.versions.last() {
                    write_inventory(files, &s.object, &last.inventory, false)?;
                }
                write_log(files, &s)?;
                let added = s.versions.iter().map(|v| v.number).collect();
                Ok(Committed { object: s.object, added, head: s.head, identity: s.identity })
            })
            .collect();
        match self.files.sync() {
            Ok(()) => named,
            Err(e) => named.into_iter().map(|_| Err(for_each_item(&e))).collect(),
        }
    }

    /// Makes every version staged so far durable (one `sync`), before any is committed.
    pub fn make_staged_durable(&self) -> Result<()> {
        self.files.sync()
    }

    /// Ends the writing: nothing staged is left.
    pub fn finish(self) -> Result<()> {
        match self.files.stages() {
            true => self.files.remove_tree(STAGING),
            false => Ok(()),
        }
    }
}

/// One failure of a batch, told to each of its items.
fn for_each_item(e: &Error) -> Error {
    Error::Refused { what: "this batch of OCFL versions".into(), why: e.to_string() }
}

/// Makes the storage root (its declaration, layout and extension config) if
/// it is missing; refuses a place that is something else.
fn prepare_root(files: &dyn RootWrites) -> Result<()> {
    if files.read_small(ROOT_NAMASTE.0)?.is_some() {
        let layout = files.read_small("ocfl_layout.json")?.unwrap_or_default();
        if !String::from_utf8_lossy(&layout).contains(LAYOUT) {
            let problem = format!("this OCFL storage root is not laid out by {LAYOUT}, the one layout ibi writes");
            return Err(Error::Invalid { what: files.place(), problem });
        }
        return Ok(());
    }
    let extension = format!("extensions/{LAYOUT}");
    let ours = Unfinished {
        files: vec![format!("{extension}/config.json"), "ocfl_layout.json".into()],
        under: vec![SITE_EXTENSION.into()],
    };
    // What a killed run left half written goes too.
    if !files.clear_unfinished_root(&ours)? {
        let problem = "it is neither an OCFL storage root nor empty: name a new folder or an OCFL root".to_string();
        return Err(Error::Invalid { what: files.place(), problem });
    }
    let config = serde_json::json!({"extensionName": LAYOUT, "digestAlgorithm": "sha256", "tupleSize": 3,
        "numberOfTuples": 3});
    files.replace(&format!("{extension}/config.json"), format!("{config:#}\n").as_bytes())?;
    let layout = serde_json::json!({"extension": LAYOUT,
        "description": "Hashed Truncated N-tuple Trees with Object ID Encapsulating Directory"});
    files.replace("ocfl_layout.json", format!("{layout:#}\n").as_bytes())?;
    // The declaration last: a root is one once it says so.
    files.replace(ROOT_NAMASTE.0, ROOT_NAMASTE.1.as_bytes())
}

/// The object's inventory, mended after a kill: a version whose inventory
/// was written but not yet copied to the object's root becomes the head;
/// one without an inventory is removed. A new, empty inventory for a new
/// object. When the root inventory already names `head` versions (the
/// item's), nothing else is read.
fn open_object(files: &dyn RootWrites, object: &str, id: &str, head: u32) -> Result<Inventory> {
    // A root inventory a killed batch left half renamed: a stray file to OCFL.
    files.clear_object_leftovers(object)?;
    let at_root = read_inventory_in(files, object)?;
    if let Some(inventory) = at_root.as_ref().filter(|i| i.head_number() == head && i.id == id) {
        return Ok(inventory.clone());
    }
    let mut newest: Option<Inventory> = None;
    for number in files.version_numbers(object)? {
        let version = format!("{object}/v{number}");
        match (newest.as_ref().map_or(0, Inventory::head_number) + 1 == number, read_inventory_in(files, &version)?) {
            (true, Some(inventory)) => newest = Some(inventory),
            _ => files.remove_tree(&version)?,
        }
    }
    let Some(inventory) = newest else { return Ok(Inventory::new(id)) };
    if inventory.id != id {
        let problem = format!("its inventory names the object {}, not {id}", inventory.id);
        return Err(Error::Data { what: format!("{}/{object}", files.place()), problem });
    }
    if at_root.as_ref() != Some(&inventory) {
        // In a bucket a killed run may have written a whole first version and
        // nothing of the object around it.
        let declaration = format!("{object}/{}", OBJECT_NAMASTE.0);
        if files.read_small(&declaration)?.is_none() {
            files.replace(&declaration, OBJECT_NAMASTE.1.as_bytes())?;
        }
        write_inventory(files, object, &inventory, true)?;
    }
    Ok(inventory)
}

/// Writes `inventory` and its sidecar into `dir`, each replaced whole
/// (durable at once when `durable`, else with the caller's `sync`).
fn write_inventory(files: &dyn RootWrites, dir: &str, inventory: &Inventory, durable: bool) -> Result<()> {
    let (bytes, sidecar) = inventory_files(inventory);
    for (name, content) in [("inventory.json", bytes.as_slice()), ("inventory.json.sha256", sidecar.as_bytes())] {
        match durable {
            true => files.replace(&format!("{dir}/{name}"), content)?,
            false => files.replace_unsynced(&format!("{dir}/{name}"), content)?,
        }
    }
    Ok(())
}

/// An inventory's bytes and its sidecar's text.
fn inventory_files(inventory: &Inventory) -> (Vec<u8>, String) {
    let bytes = inventory.bytes();
    let digest = hex::encode(sha2::Sha256::digest(&bytes));
    (bytes, format!("{digest} inventory.json\n"))
}
/// Every version the object holds must be the item's version of that number
/// (the same identity digest): an object of another history is never added to.
fn held_versions_match(inventory: &Inventory, record: &ItemRecord, object: &str) -> Result<()> {
    for version in record.versions.iter().take(inventory.head_number() as usize) {
        let held = inventory.digest_at(version.number, "tagmanifest-sha256.txt");
        if held != Some(version.digest.as_str()) {
            let problem = format!(
                "its version v{} holds identity {}, the item's version {} is {}: it is another history, left as it is",
                version.number,
                held.unwrap_or("none"),
                version.number,
                version.digest
            );
            return Err(Error::Data { what: object.to_string(), problem });
        }
    }
    if inventory.head_number() as usize > record.versions.len() {
        let problem = format!("it holds more versions than the item's {}", record.versions.len());
        return Err(Error::Data { what: object.to_string(), problem });
    }
    Ok(())
}

/// A withdrawal that purged the earlier versions' bytes cannot reach an
/// OCFL object that holds them: OCFL 1.1 has no purge, and the object would
/// go on serving what the collection took out of service.
fn refuse_a_purge(store: &dyn Store, record: &ItemRecord) -> Result<()> {
    match version_files(store, record, 1) {
        Err(Error::Invalid { .. }) => Err(Error::Invalid {
            what: format!("item {}", record.name),
            problem: "it was purged here, and OCFL 1.1 has no purge: the OCFL copy still holds its earlier \
                      versions' bytes; remove that object by hand where the purge must reach it"
                .into(),
        }),
        _ => Ok(()),
    }
}

/// The files of version `number` of the item: (their path in the item, their
/// logical path in the version).
fn version_files(store: &dyn Store, record: &ItemRecord, number: u32) -> Result<Vec<(String, String)>> {
    let name = &record.name;
    let prefix = match number == record.current().number {
        true => String::new(),
        false => format!("{VERSIONS_DIR}/{number}/"),
    };
    let mut files = Vec::new();
    for entry in store.item_files(name).entries() {
        let entry = entry.map_err(|e| Error::Data { what: format!("item {name}"), problem: e.why })?;
        let TreeEntry { rel: Ok(rel), kind: FileKind::File { .. } } = entry else { continue };
        let Some(inner) = rel.strip_prefix(&prefix) else { continue };
        if inner.starts_with(&format!("{VERSIONS_DIR}/")) {
            continue;
        }
        if let Some(c) = inner.chars().find(|c| matches!(c, '\r' | '\n' | '\t')) {
            let problem =
                format!("{inner:?} holds {c:?}, which OCFL tools disagree on (rocfl refuses it, E092): not exported");
            return Err(Error::Invalid { what: format!("item {name}"), problem });
        }
        files.push((rel.clone(), inner.to_string()));
    }
    if files.is_empty() {
        let problem = format!(
            "version {number} holds no files here (purged at withdrawal): OCFL 1.1 cannot hold a version without \
             its bytes, so the item is not exported"
        );
        return Err(Error::Invalid { what: format!("item {name}"), problem });
    }
    Ok(files)
}

/// An item's versions built, not yet named by its object's root inventory.
pub struct StagedItem {
    object: String,
    versions: Vec<BuiltVersion>,
    head: u32,
    /// The item's events as PREMIS, for the object's `logs/` (with new versions only).
    log: Option<String>,
    identity: Option<String>,
}

/// The object's log: the item's events as PREMIS 3, in `logs/premis.xml`
/// (OCFL keeps `logs/` outside the versions; replaced with each new version).
fn write_log(files: &dyn RootWrites, staged: &StagedItem) -> Result<()> {
    match &staged.log {
        Some(log) => files.replace_unsynced(&format!("{}/logs/premis.xml", staged.object), log.as_bytes()),
        None => Ok(()),
    }
}

/// One version built: where (its folder relative to the root) and the
/// object's inventory with it as head.
struct BuiltVersion {
    number: u32,
    built: String,
    inventory: Inventory,
}

/// What building a version of one item reads and writes.
struct VersionBuild<'a> {
    files: &'a dyn RootWrites,
    store: &'a dyn Store,
    record: &'a ItemRecord,
    object: &'a str,
}

impl VersionBuild<'_> {
    /// Builds version `number`: only content new to the object, the rest
    /// referred to by digest; the other manifests' digests of what is new
    /// in the `fixity` block; its inventory and sidecar written.
    fn build(&self, number: u32, inventory: &mut Inventory) -> Result<BuiltVersion> {
        let files = version_files(self.store, self.record, number)?;
        // Built aside as the version folder itself, renamed whole into the object.
        let built = match self.files.stages() {
            true => format!("{STAGING}/{}-v{number}", uuid::Uuid::new_v4()),
            false => format!("{}/v{number}", self.object),
        };
        let mut state: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut added = Vec::new();
        for (rel, logical) in &files {
            let content = format!("v{number}/content/{logical}");
            let at = format!("{built}/content/{logical}");
            let digest = self.copy_out(rel, &at)?;
            if inventory.manifest.contains_key(&digest) || state.contains_key(&digest) {
                self.files.remove(&at)?;
            } else {
                inventory.manifest.entry(digest.clone()).or_default().push(content.clone());
                added.push((logical.clone(), content));
            }
            state.entry(digest).or_default().push(logical.clone());
        }
        self.files.prune_empty_dirs(&format!("{built}/content"))?;
        self.add_fixity(&files, &added, inventory)?;
        let version = &self.record.versions[number as usize - 1];
        let message = format!("ibi version {number} of {}", self.record.name);
        let subsystem = self.store.subsystem();
        let user = Some(User { name: format!("ibi at {}:{}", subsystem.host, subsystem.port), address: None });
        inventory.versions.insert(
            format!("v{number}"),
            Version { created: version.date.clone(), message: Some(message), user, state },
        );
        inventory.head = format!("v{number}");
        let (bytes, sidecar) = inventory_files(inventory);
        self.files.create(&format!("{built}/inventory.json"), &bytes)?;
        self.files.create(&format!("{built}/inventory.json.sha256"), sidecar.as_bytes())?;
        Ok(BuiltVersion { number, built, inventory: inventory.clone() })
    }

    /// Copies one file of the item out to `to` (made durable with the
    /// version's `sync`, before the version is named); its sha256, hex.
    fn copy_out(&self, rel: &str, to: &str) -> Result<String> {
        let name = &self.record.name;
        let origin = PathBuf::from(format!("{}/{name}/{rel}", self.store.location()));
        let (mut reader, _) = self.store.open(name, rel).map_err(|e| Error::io("open", &origin, e))?;
        self.files.create_from(to, &mut reader, &origin)
    }

    /// The digests the bag's other manifests (md5, sha1, sha512) give the
    /// payload files whose content this version adds, as the inventory's
    /// `fixity` block holds them: algorithm, digest, content paths.
    fn add_fixity(
        &self,
        files: &[(String, String)],
        added: &[(String, String)],
        inventory: &mut Inventory,
    ) -> Result<()> {
        let bag = self.store.item_files(&self.record.name);
        for (rel, logical) in files {
            let Some(algorithm) = other_manifest_algorithm(logical) else { continue };
            let text = bag.read(rel).map_err(|e| Error::io("read", Path::new(rel), e))?;
            let digests: BTreeMap<&str, &str> = std::str::from_utf8(&text)
                .unwrap_or_default()
                .lines()
                .filter_map(|line| line.split_once(char::is_whitespace))
                .map(|(digest, path)| (path.trim_start(), digest))
                .collect();
            for (logical, content) in added {
                if let Some(digest) = digests.get(logical.as_str()) {
                    let block = inventory.fixity.entry(algorithm.name().to_string()).or_default();
                    block.entry(digest.to_ascii_lowercase()).or_default().push(content.clone());
                }
            }
        }
        Ok(())
    }
}

/// The algorithm of a payload manifest other than sha256 (`manifest-md5.txt`, …).
fn other_manifest_algorithm(logical: &str) -> Option<Algorithm> {
    let name = logical.strip_prefix("manifest-")?.strip_suffix(".txt")?;
    Algorithm::from_name(name).filter(|a| a.name() != "sha256")
}

/// Puts a built (and durable) version into its object: the object's
/// declaration with its first version, then (in a folder) the version
/// renamed in; made durable by the caller's `sync`.
fn place_version(files: &dyn RootWrites, object: &str, version: &BuiltVersion) -> Result<()> {
    if version.number == 1 {
        files.replace_unsynced(&format!("{object}/{}", OBJECT_NAMASTE.0), OBJECT_NAMASTE.1.as_bytes())?;
    }
    match files.stages() {
        true => files.rename_dir(&version.built, &format!("{object}/v{}", version.number)),
        false => Ok(()),
    }
}
