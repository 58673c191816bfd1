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
//! renamed into the object and named by the inventories; a kill between that
//! rename and the root inventory is mended by the next run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sha2::Digest;

use crate::bag::files::{FileKind, TreeEntry};
use crate::bag::history::VERSIONS_DIR;
use crate::error::{Error, IoContext, Result};
use crate::fsx::{self, CopyMode};
use crate::id::RepositoryName;
use crate::store::{resolve, ItemRecord, Store};

use super::{object_path, read_inventory, Inventory, Version, LAYOUT, OBJECT_ID_BASE};

const ROOT_NAMASTE: (&str, &str) = ("0=ocfl_1.1", "ocfl_1.1\n");
const OBJECT_NAMASTE: (&str, &str) = ("0=ocfl_object_1.1", "ocfl_object_1.1\n");
/// Where a version is built before it is renamed into its object.
const STAGING: &str = "extensions/ibi-staging";

/// What `export --ocfl` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OcflExported {
    pub name: RepositoryName,
    /// The object's root folder.
    pub object: PathBuf,
    /// The versions it added (none when the object already held every one).
    pub added: Vec<u32>,
    pub head: u32,
}

/// Writes every version of the item `text` names that the OCFL object of it
/// under `root` does not hold yet, making the storage root when it is missing.
pub fn export(store: &dyn Store, text: &str, root: &Path) -> Result<OcflExported> {
    let name = resolve(store, text)?;
    let record = ItemRecord::from_bag(store.item_files(&name).as_ref(), &name)?;
    let writing = OcflRoot::open_for_writing(root)?;
    let (object, added, head) = writing.add_item(store, &record)?;
    writing.finish()?;
    Ok(OcflExported { name, object, added, head })
}

/// An OCFL storage root held for writing: made if missing, locked (a lock on
/// the root folder itself, as a lock file would be a stray file to OCFL), and
/// cleared of what a killed writer staged.
pub struct OcflRoot {
    root: PathBuf,
    _lock: std::fs::File,
}

impl OcflRoot {
    pub fn open_for_writing(root: &Path) -> Result<OcflRoot> {
        prepare_root(root)?;
        let lock = std::fs::File::open(root).with_path("open", root)?;
        lock.lock().with_path("lock", root)?;
        fsx::remove_tree(&root.join(STAGING))?;
        Ok(OcflRoot { root: root.to_path_buf(), _lock: lock })
    }

    /// Adds the versions of the item `record` names that its object lacks:
    /// the object's folder, the versions added and the head.
    pub fn add_item(&self, store: &dyn Store, record: &ItemRecord) -> Result<(PathBuf, Vec<u32>, u32)> {
        let staged = self.stage_item(store, record)?;
        self.make_staged_durable()?;
        self.commit(staged)
    }

    /// Builds, under the staging folder, every version of `record`'s item its
    /// object lacks (nothing made durable yet: the caller's `syncfs` does,
    /// for as many items as it stages, before any is committed).
    pub fn stage_item(&self, store: &dyn Store, record: &ItemRecord) -> Result<StagedItem> {
        let id = format!("{OBJECT_ID_BASE}{}", record.name);
        let object = self.root.join(object_path(&id));
        let mut inventory = open_object(&object, &id)?;
        let held = inventory.head_number();
        held_versions_match(&inventory, record, &object)?;
        if held > 0 && held < record.current().number && record.withdrawn.is_some() {
            refuse_a_purge(store, record)?;
        }
        let mut versions = Vec::new();
        for number in held + 1..=record.current().number {
            versions.push(build_version(store, record, number, &mut inventory, &self.root)?);
        }
        Ok(StagedItem { object, versions, head: inventory.head_number() })
    }

    /// Renames each staged version into its object, in order, each named by
    /// the root inventory at once: the object's folder, the versions added
    /// and the head.
    pub fn commit(&self, staged: StagedItem) -> Result<(PathBuf, Vec<u32>, u32)> {
        let added = staged.versions.iter().map(|v| v.number).collect();
        for version in &staged.versions {
            commit_version(&staged.object, version)?;
        }
        Ok((staged.object, added, staged.head))
    }

    /// Commits many staged items at once: every version renamed into its
    /// object, one `syncfs`, every root inventory replaced, one more `syncfs`
    /// (where `commit` makes each step durable on its own). A kill between
    /// leaves objects whose root inventory lags their newest version folder,
    /// which the next `open_object` mends.
    pub fn commit_batch(&self, staged: Vec<Result<StagedItem>>) -> Vec<Result<(PathBuf, Vec<u32>, u32)>> {
        use rayon::prelude::*;
        let placed: Vec<Result<StagedItem>> =
            staged.into_par_iter().map(|s| s.and_then(|s| place_versions(&s).map(|()| s))).collect();
        if let Err(e) = fsx::syncfs(&self.root) {
            return placed
                .into_iter()
                .map(|_| Err(Error::io("sync", &self.root, std::io::Error::other(e.to_string()))))
                .collect();
        }
        let named: Vec<Result<(PathBuf, Vec<u32>, u32)>> = placed
            .into_par_iter()
            .map(|s| {
                let s = s?;
                if let Some(last) = s.versions.last() {
                    replace_root_inventory(&s.object, &last.inventory)?;
                }
                let added = s.versions.iter().map(|v| v.number).collect();
                Ok((s.object, added, s.head))
            })
            .collect();
        match fsx::syncfs(&self.root) {
            Ok(()) => named,
            Err(e) => named
                .into_iter()
                .map(|_| Err(Error::io("sync", &self.root, std::io::Error::other(e.to_string()))))
                .collect(),
        }
    }

    /// Makes every version staged so far durable (one `syncfs`), before any is committed.
    pub fn make_staged_durable(&self) -> Result<()> {
        match self.root.join(STAGING).exists() {
            true => fsx::syncfs(&self.root.join(STAGING)),
            false => Ok(()),
        }
    }

    /// Ends the writing: nothing staged is left.
    pub fn finish(self) -> Result<()> {
        fsx::remove_tree(&self.root.join(STAGING))
    }
}

/// Makes the storage root (its declaration, layout and extension config) if
/// it is missing; refuses a folder that is something else.
fn prepare_root(root: &Path) -> Result<()> {
    let declaration = root.join(ROOT_NAMASTE.0);
    if declaration.exists() {
        let layout = std::fs::read_to_string(root.join("ocfl_layout.json")).unwrap_or_default();
        if !layout.contains(LAYOUT) {
            let problem = format!("this OCFL storage root is not laid out by {LAYOUT}, the one layout ibi writes");
            return Err(Error::Invalid { what: root.display().to_string(), problem });
        }
        return Ok(());
    }
    if !holds_only_an_unfinished_root(root) {
        let problem = "it is neither an OCFL storage root nor empty: name a new folder or an OCFL root".to_string();
        return Err(Error::Invalid { what: root.display().to_string(), problem });
    }
    // What a killed run left half written goes first.
    for entry in walkdir::WalkDir::new(root).min_depth(1).into_iter().flatten() {
        if entry.file_name().to_string_lossy().starts_with(fsx::TEMP_PREFIX) {
            std::fs::remove_file(entry.path()).with_path("remove", entry.path())?;
        }
    }
    fsx::create_dir_all_durable(&root.join("extensions").join(LAYOUT))?;
    let config = serde_json::json!({"extensionName": LAYOUT, "digestAlgorithm": "sha256", "tupleSize": 3,
        "numberOfTuples": 3});
    let extension = root.join("extensions").join(LAYOUT).join("config.json");
    fsx::atomic_write(&extension, format!("{config:#}\n").as_bytes())?;
    let layout = serde_json::json!({"extension": LAYOUT,
        "description": "Hashed Truncated N-tuple Trees with Object ID Encapsulating Directory"});
    fsx::atomic_write(&root.join("ocfl_layout.json"), format!("{layout:#}\n").as_bytes())?;
    // The declaration last: a root is one once it says so.
    fsx::atomic_write(&declaration, ROOT_NAMASTE.1.as_bytes())
}

/// Whether `root` is missing, empty, or holds nothing but what `prepare_root`
/// writes before the declaration (a run killed while making the root).
fn holds_only_an_unfinished_root(root: &Path) -> bool {
    if std::fs::symlink_metadata(root).is_err() {
        return true;
    }
    let extension = Path::new("extensions").join(LAYOUT);
    let ours = |rel: &Path| {
        let temp = rel.file_name().is_some_and(|n| n.to_string_lossy().starts_with(fsx::TEMP_PREFIX));
        let parent_ours = rel.parent().is_some_and(|p| p == Path::new("") || p == extension);
        (temp && parent_ours)
            || [Path::new("extensions"), &extension, &extension.join("config.json"), Path::new("ocfl_layout.json")]
                .contains(&rel)
    };
    walkdir::WalkDir::new(root).min_depth(1).into_iter().all(|entry| {
        entry.is_ok_and(|e| e.path().strip_prefix(root).is_ok_and(|rel| ours(rel) && !e.path_is_symlink()))
    })
}

/// The object's inventory, mended after a kill: a version folder whose
/// inventory was written but not yet copied to the object's root becomes the
/// head; one without an inventory is removed. A new, empty inventory for a
/// new object.
fn open_object(object: &Path, id: &str) -> Result<Inventory> {
    // A root inventory a killed batch left half renamed: a stray file to OCFL.
    for entry in std::fs::read_dir(object).into_iter().flatten().flatten() {
        if entry.file_name().to_string_lossy().starts_with(fsx::TEMP_PREFIX) {
            std::fs::remove_file(entry.path()).with_path("remove", entry.path())?;
        }
    }
    let mut newest: Option<(u32, Inventory)> = None;
    for number in 1.. {
        let version = object.join(format!("v{number}"));
        if !version.exists() {
            break;
        }
        match read_inventory(&version)? {
            Some(inventory) => newest = Some((number, inventory)),
            None => fsx::remove_tree(&version)?,
        }
    }
    let Some((_, inventory)) = newest else { return Ok(Inventory::new(id)) };
    if inventory.id != id {
        let problem = format!("its inventory names the object {}, not {id}", inventory.id);
        return Err(Error::Data { what: object.display().to_string(), problem });
    }
    if read_inventory(object)?.as_ref() != Some(&inventory) {
        write_inventory(object, &inventory)?;
    }
    Ok(inventory)
}

/// Writes `inventory` and its sidecar into `dir`, each atomically.
fn write_inventory(dir: &Path, inventory: &Inventory) -> Result<()> {
    let (bytes, sidecar) = inventory_files(inventory);
    fsx::atomic_write(&dir.join("inventory.json"), &bytes)?;
    fsx::atomic_write(&dir.join("inventory.json.sha256"), sidecar.as_bytes())
}

/// An inventory's bytes and its sidecar's text.
fn inventory_files(inventory: &Inventory) -> (Vec<u8>, String) {
    let bytes = inventory.bytes();
    let digest = hex::encode(sha2::Sha256::digest(&bytes));
    (bytes, format!("{digest} inventory.json\n"))
}

/// Every version the object holds must be the item's version of that number
/// (the same identity digest): an object of another history is never added to.
fn held_versions_match(inventory: &Inventory, record: &ItemRecord, object: &Path) -> Result<()> {
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
            return Err(Error::Data { what: object.display().to_string(), problem });
        }
    }
    if inventory.head_number() as usize > record.versions.len() {
        let problem = format!("it holds more versions than the item's {}", record.versions.len());
        return Err(Error::Data { what: object.display().to_string(), problem });
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

/// An item's versions built under the staging folder, not yet in its object.
pub struct StagedItem {
    object: PathBuf,
    versions: Vec<BuiltVersion>,
    head: u32,
}

/// One version built: where, and the object's inventory with it as head.
struct BuiltVersion {
    number: u32,
    staging: PathBuf,
    inventory: Inventory,
}

/// Builds version `number` under the staging folder: only content new to the
/// object, the rest referred to by digest; its inventory and sidecar written.
fn build_version(
    store: &dyn Store,
    record: &ItemRecord,
    number: u32,
    inventory: &mut Inventory,
    root: &Path,
) -> Result<BuiltVersion> {
    let files = version_files(store, record, number)?;
    let staging = root.join(STAGING).join(format!("{}-v{number}", uuid::Uuid::new_v4()));
    let built = staging.join(format!("v{number}"));
    std::fs::create_dir_all(&built).with_path("create", &built)?;
    let mut state: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (rel, logical) in &files {
        let content = format!("v{number}/content/{logical}");
        let to = staging.join(&content);
        std::fs::create_dir_all(fsx::parent_dir(&to)).with_path("create", fsx::parent_dir(&to))?;
        let digest = copy_out(store, &record.name, rel, &to)?;
        if inventory.manifest.contains_key(&digest) || state.contains_key(&digest) {
            std::fs::remove_file(&to).with_path("remove", &to)?;
        } else {
            inventory.manifest.entry(digest.clone()).or_default().push(content);
        }
        state.entry(digest).or_default().push(logical.clone());
    }
    prune_empty_dirs(&built.join("content"))?;
    let version = &record.versions[number as usize - 1];
    let message = format!("ibi version {number} of {}", record.name);
    inventory
        .versions
        .insert(format!("v{number}"), Version { created: version.date.clone(), message: Some(message), state });
    inventory.head = format!("v{number}");
    let (bytes, sidecar) = inventory_files(inventory);
    fsx::write_new(&built.join("inventory.json"), &bytes)?;
    fsx::write_new(&built.join("inventory.json.sha256"), sidecar.as_bytes())?;
    Ok(BuiltVersion { number, staging, inventory: inventory.clone() })
}

/// Renames each built (and durable) version into its object, in order,
/// nothing made durable here (`commit_batch` syncs after all of them).
fn place_versions(staged: &StagedItem) -> Result<()> {
    for version in &staged.versions {
        std::fs::create_dir_all(&staged.object).with_path("create", &staged.object)?;
        if version.number == 1 {
            std::fs::write(staged.object.join(OBJECT_NAMASTE.0), OBJECT_NAMASTE.1)
                .with_path("write", staged.object.join(OBJECT_NAMASTE.0))?;
        }
        let built = version.staging.join(format!("v{}", version.number));
        fsx::rename_noreplace(&built, &staged.object.join(format!("v{}", version.number)))
            .map_err(|e| Error::io("rename into the object", &staged.object, e))?;
        let _ = std::fs::remove_dir_all(&version.staging);
    }
    Ok(())
}

/// Replaces the object's root inventory and sidecar, each by a rename,
/// durable with the caller's `syncfs`.
fn replace_root_inventory(object: &Path, inventory: &Inventory) -> Result<()> {
    let (bytes, sidecar) = inventory_files(inventory);
    for (name, content) in [("inventory.json", bytes.as_slice()), ("inventory.json.sha256", sidecar.as_bytes())] {
        let temp = object.join(format!("{}{name}", fsx::TEMP_PREFIX));
        std::fs::write(&temp, content).with_path("write", &temp)?;
        std::fs::rename(&temp, object.join(name)).with_path("rename", &temp)?;
    }
    Ok(())
}

/// Puts a built (and durable) version into its object, then names it in the
/// root inventory: a kill between is mended by the next `open_object`.
fn commit_version(object: &Path, version: &BuiltVersion) -> Result<()> {
    fsx::create_dir_all_durable(object)?;
    if version.number == 1 {
        fsx::atomic_write(&object.join(OBJECT_NAMASTE.0), OBJECT_NAMASTE.1.as_bytes())?;
    }
    let built = version.staging.join(format!("v{}", version.number));
    fsx::rename_noreplace(&built, &object.join(format!("v{}", version.number)))
        .map_err(|e| Error::io("rename into the object", object, e))?;
    fsx::fsync_dir(object)?;
    write_inventory(object, &version.inventory)?;
    fsx::remove_tree(&version.staging)
}

/// Copies one file of the item out to `to` (made durable with its version's
/// `syncfs`, before the version is renamed into the object); its sha256, hex.
fn copy_out(store: &dyn Store, name: &RepositoryName, rel: &str, to: &Path) -> Result<String> {
    let origin = PathBuf::from(format!("{}/{name}/{rel}", store.location()));
    let (mut reader, mtime) = store.open(name, rel).map_err(|e| Error::io("open", &origin, e))?;
    let mode = CopyMode { follow: false, sync: false, progress: &|_| {}, also: &[] };
    let digests = fsx::write_hashing(&mut reader, &origin, to, mtime, mode).map_err(Error::from)?;
    Ok(digests.sha256().to_string())
}

/// Removes the folders that copies left empty (content stored in an earlier version).
fn prune_empty_dirs(dir: &Path) -> Result<()> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Ok(()) };
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            prune_empty_dirs(&entry.path())?;
        }
    }
    if std::fs::read_dir(dir).is_ok_and(|mut e| e.next().is_none()) {
        std::fs::remove_dir(dir).with_path("remove", dir)?;
    }
    Ok(())
}
