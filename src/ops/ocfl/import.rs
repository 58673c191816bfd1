//! `deposit --ocfl` (ARCHITECTURE.md, "OCFL copies"): OCFL objects taken in as
//! items, every version. Each object is checked first, whole (its declaration,
//! its inventory and sidecar, its versions and head, every content file read
//! and its digest compared), so a bad object is named with its OCFL code and
//! skipped, never half taken. An object `ibi` wrote (`http://urlib.net/NAME`
//! of this collection's subsystem) comes back under its own name as a copy:
//! its head state is the item's current bag and each earlier version goes to
//! `ibi-versions/N/`, so every identity digest is the one it had; placed only
//! when its bag verifies and its identity is the head's. Any other object is
//! deposited: version 1 as a new item (its id in bag-info, `Ocfl-Object-Id`),
//! each later version as an update, sha512 content kept in a sha512 manifest
//! beside sha256. A deposit record (`ocflobject<sha256 of the id>`) written
//! with the first placement makes a rerun continue the same item.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::Digest;

use crate::bag::history::VERSIONS_DIR;
use crate::digest::Algorithm;
use crate::error::{Error, IoContext, Result};
use crate::events::EventKind;
use crate::id::{Clock, Minted, RepositoryName};
use crate::ops::deposit::{deposit_batch, DepositOptions};
use crate::ops::report::Reporter;
use crate::ops::source::{PlannedFile, SourcePlan};
use crate::ops::update::{payload_path, update, Changes};
use crate::store::log::Action;
use crate::store::{LockWait, Placement, Slot, Staging, Store, Writer};

use super::{validate, Inventory, OBJECT_ID_BASE};

/// The OCFL extension that keeps uncommitted changes (Fedora 6 without auto-versioning).
pub const MUTABLE_HEAD: &str = "extensions/0005-mutable-head";

/// Why an object was not taken: the OCFL validation code (or `ibi`'s own
/// name for a refusal OCFL has no code for) and the problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub object: PathBuf,
    pub code: &'static str,
    pub problem: String,
}

/// What became of one object that was taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Taken {
    /// An object `ibi` wrote, placed under its own name with every version.
    Copied(RepositoryName),
    /// The collection already holds it with the head's identity.
    Held(RepositoryName),
    /// Deposited (or continued): the item and the versions added this run.
    Deposited(RepositoryName, Vec<u32>),
}

/// Every object and what became of it.
#[derive(Debug, Default)]
pub struct Imported {
    pub taken: Vec<(PathBuf, Taken)>,
    pub refused: Vec<Refused>,
}

/// One logical file of a version: where its content is and its digest (in the
/// object's algorithm, checked).
#[derive(Debug, Clone)]
struct LogicalFile {
    logical: String,
    content: PathBuf,
    digest: String,
}

/// An object that passed every check.
struct Checked {
    dir: PathBuf,
    id: String,
    algorithm: Algorithm,
    /// Version N at index N-1: its created date and files.
    versions: Vec<(String, Vec<LogicalFile>)>,
    /// The last version is the object's mutable HEAD (extension
    /// 0005-mutable-head), taken as asked: its newest revision.
    mutable_head: Option<String>,
}

/// How `deposit --ocfl` takes objects.
#[derive(Debug, Clone, Copy, Default)]
pub struct ImportOptions {
    /// Take an object's mutable HEAD (extension 0005-mutable-head) as its
    /// last version, marked as uncommitted, instead of refusing the object.
    pub take_mutable_head: bool,
}

use validate::Check;

/// The object roots `paths` name: a storage root gives every object under it,
/// an object root itself; anything else is refused.
pub fn objects_in(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut objects = Vec::new();
    for path in paths {
        if is_object(path) {
            objects.push(path.clone());
        } else if path.join("0=ocfl_1.1").exists() || path.join("0=ocfl_1.0").exists() {
            let found = walkdir::WalkDir::new(path).sort_by_file_name().into_iter().filter_entry(|e| {
                e.depth() == 0 || !(e.file_type().is_dir() && e.path().parent().is_some_and(is_object))
            });
            for entry in found {
                let entry = entry.map_err(|e| Error::io("read", path, e.into()))?;
                if entry.file_type().is_dir() && is_object(entry.path()) {
                    objects.push(entry.path().to_path_buf());
                }
            }
        } else {
            let problem = "neither an OCFL storage root (0=ocfl_1.x) nor an OCFL object (0=ocfl_object_1.x)".into();
            return Err(Error::Invalid { what: path.display().to_string(), problem });
        }
    }
    Ok(objects)
}

fn is_object(dir: &Path) -> bool {
    ["0=ocfl_object_1.1", "0=ocfl_object_1.0"].iter().any(|n| dir.join(n).is_file())
}

/// Takes every object under `paths` into `store`.
pub fn import(
    store: &dyn Store,
    paths: &[PathBuf],
    options: ImportOptions,
    clock: &dyn Clock,
    reporter: &dyn Reporter,
) -> Result<Imported> {
    use rayon::prelude::*;
    let mut imported = Imported::default();
    for chunk in objects_in(paths)?.chunks(OBJECTS_AT_ONCE) {
        // Checked in parallel, taken in order. The digests of a foreign object's
        // first version are checked as the deposit stages them (one read, not
        // two); a batch one of whose files fails is checked again whole.
        let foreign_id = |id: &str| own_name_of(store, id).is_none();
        let checked: Vec<Check<Checked>> =
            chunk.par_iter().map(|object| check_object(object, options, &foreign_id)).collect();
        let mut foreign = Vec::new();
        let mut results: Vec<Option<Check<Taken>>> = Vec::with_capacity(chunk.len());
        for (index, check) in checked.into_iter().enumerate() {
            match check.map(|c| (own_name(store, &c), c)) {
                Err(refused) => results.push(Some(Err(refused))),
                Ok((Some(name), object)) => results.push(Some(take_copy(store, &object, name)?)),
                Ok((None, object)) => {
                    foreign.push((index, object));
                    results.push(None);
                }
            }
        }
        let objects: Vec<&Checked> = foreign.iter().map(|(_, object)| object).collect();
        match take_deposits(store, &objects, clock, reporter) {
            Ok(taken) => foreign.iter().zip(taken).for_each(|((index, _), t)| results[*index] = Some(Ok(t))),
            Err(_) if !foreign.is_empty() => {
                // Nothing of the batch was minted: check each again whole, take the sound.
                let whole: Vec<Check<Checked>> =
                    foreign.par_iter().map(|(i, _)| check_object(&chunk[*i], options, &|_| false)).collect();
                let mut sound = Vec::new();
                for ((index, _), check) in foreign.iter().zip(whole) {
                    match check {
                        Ok(object) => sound.push((*index, object)),
                        Err(refused) => results[*index] = Some(Err(refused)),
                    }
                }
                let objects: Vec<&Checked> = sound.iter().map(|(_, object)| object).collect();
                let taken = take_deposits(store, &objects, clock, reporter)?;
                sound.iter().zip(taken).for_each(|((index, _), t)| results[*index] = Some(Ok(t)));
            }
            Err(e) => return Err(e),
        }
        for (object, result) in chunk.iter().zip(results) {
            match result {
                Some(Ok(taken)) => imported.taken.push((object.clone(), taken)),
                Some(Err((code, problem))) => imported.refused.push(Refused { object: object.clone(), code, problem }),
                None => {}
            }
        }
    }
    Ok(imported)
}

/// How many objects are checked at once and deposited in one batch.
const OBJECTS_AT_ONCE: usize = 256;

/// Checks an object whole; its versions' files, each content file read once
/// (a first version's left to the deposit's staging when `defer_first` says
/// so of the object's id: see `check_committed`).
fn check_object(dir: &Path, options: ImportOptions, defer_first: &(dyn Fn(&str) -> bool + Sync)) -> Check<Checked> {
    validate::declared_spec(dir)?;
    let mutable = dir.join(MUTABLE_HEAD).exists();
    if mutable && !options.take_mutable_head {
        let problem = format!(
            "it has a mutable HEAD ({MUTABLE_HEAD}: changes not yet committed as a version, which tools that do not \
             implement the extension never see); commit it as a version first, or take it as a last version \
             marked uncommitted with --take-mutable-head"
        );
        return Err(("0005-mutable-head", problem));
    }
    let mut checked = check_committed(dir, defer_first)?;
    if mutable {
        add_mutable_head(&mut checked)?;
    }
    Ok(checked)
}

/// Checks an object's committed versions (its root inventory's). When
/// `defer_first` says so of its id, the content its first version brings is
/// taken at the digest the manifest claims here: the deposit of that version
/// stages each file against it and mints nothing if one differs.
fn check_committed(dir: &Path, defer_first: &(dyn Fn(&str) -> bool + Sync)) -> Check<Checked> {
    let (inventory, algorithm, bytes) = checked_inventory(dir)?;
    validate::root_entries(dir, &inventory)?;
    validate::manifest(dir, &inventory)?;
    for content in inventory.manifest.values().flatten() {
        content_path(dir, content)?;
    }
    let mut digested = validate::Digested::new();
    if defer_first(&inventory.id) {
        for (digest, paths) in &inventory.manifest {
            for path in paths.iter().filter(|p| p.starts_with("v1/")) {
                digested.insert((path.clone(), algorithm), digest.to_lowercase());
            }
        }
    }
    validate::root_digests(dir, &inventory, algorithm, &mut digested)?;
    validate::fixity(dir, &inventory, &mut digested)?;
    validate::version_inventories(dir, &inventory, &bytes, &mut digested)?;
    let mut versions = Vec::new();
    for (key, version) in validate::sorted_versions(&inventory)? {
        let mut files = Vec::new();
        for (digest, logicals) in &version.state {
            let Some(content) = inventory.manifest.get(digest).and_then(|paths| paths.first()) else {
                return Err(("E050a", format!("{key} holds digest {digest}, which the manifest does not")));
            };
            for logical in logicals {
                portable(logical)?;
                files.push(LogicalFile {
                    logical: logical.clone(),
                    content: dir.join(content),
                    digest: digest.clone(),
                });
            }
        }
        files.sort_by(|a, b| a.logical.cmp(&b.logical));
        versions.push((version.created.clone(), files));
    }
    Ok(Checked { dir: dir.to_path_buf(), id: inventory.id.clone(), algorithm, versions, mutable_head: None })
}

/// Adds the object's mutable HEAD as its last version, once checked: its
/// inventory sealed by its sidecar, made on the root inventory the object
/// holds now (no version conflict), the committed versions' states
/// unchanged, and its new content inside the extension's folder with the
/// digests it claims.
fn add_mutable_head(checked: &mut Checked) -> Check<()> {
    let code = "0005-mutable-head";
    let head_dir = checked.dir.join(MUTABLE_HEAD).join("head");
    let bytes = std::fs::read(head_dir.join("inventory.json"))
        .map_err(|e| (code, format!("{MUTABLE_HEAD}/head/inventory.json: {e}")))?;
    let inventory: Inventory = serde_json::from_slice(&bytes)
        .map_err(|e| (code, format!("{MUTABLE_HEAD}/head/inventory.json is not an inventory: {e}")))?;
    let algorithm = validate::sidecar_holds(&head_dir, &inventory, &bytes)?;
    let sidecar = format!("inventory.json.{}", inventory.digest_algorithm);
    let root_then = std::fs::read(checked.dir.join(MUTABLE_HEAD).join(format!("root-{sidecar}")));
    if root_then.ok() != std::fs::read(checked.dir.join(&sidecar)).ok() || algorithm != checked.algorithm {
        let problem = "its mutable HEAD was made on another root inventory (a version conflict)".to_string();
        return Err((code, problem));
    }
    let committed = checked.versions.len();
    if inventory.id != checked.id || inventory.head_number() as usize != committed + 1 {
        let problem = format!("its mutable HEAD is not version v{} of {}", committed + 1, checked.id);
        return Err((code, problem));
    }
    let head = inventory.versions.get(&inventory.head).ok_or((code, "its mutable HEAD names no version".into()))?;
    let mut files = Vec::new();
    for (digest, logicals) in &head.state {
        let content = inventory.manifest.get(digest).and_then(|paths| paths.first());
        let content = content.ok_or((code, format!("its mutable HEAD holds digest {digest} without content")))?;
        let path = content_path(&checked.dir, content)?;
        let inside = content.starts_with(&format!("{MUTABLE_HEAD}/head/content/"));
        if inside && !digest_of(&path, algorithm).is_ok_and(|d| d.eq_ignore_ascii_case(digest)) {
            return Err(("E093", format!("{content} does not have the digest its mutable HEAD gives it")));
        }
        for logical in logicals {
            portable(logical)?;
            files.push(LogicalFile { logical: logical.clone(), content: path.clone(), digest: digest.clone() });
        }
    }
    files.sort_by(|a, b| a.logical.cmp(&b.logical));
    let revisions = std::fs::read_dir(checked.dir.join(MUTABLE_HEAD).join("revisions")).into_iter().flatten();
    let newest =
        revisions.flatten().filter_map(|e| e.file_name().to_str()?.strip_prefix('r')?.parse::<u32>().ok()).max();
    checked.versions.push((head.created.clone(), files));
    checked.mutable_head = Some(format!("r{}", newest.unwrap_or(1)));
    Ok(())
}

/// The root inventory, its sidecar matching, its algorithm one `ibi` keeps.
fn checked_inventory(dir: &Path) -> Check<(Inventory, Algorithm, Vec<u8>)> {
    let bytes = std::fs::read(dir.join("inventory.json")).map_err(|e| ("E034", format!("inventory.json: {e}")))?;
    let value: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| ("E033", format!("inventory.json is not JSON: {e}")))?;
    for (key, code) in [
        ("id", "E036"),
        ("type", "E036"),
        ("digestAlgorithm", "E036"),
        ("head", "E036"),
        ("manifest", "E041"),
        ("versions", "E043"),
    ] {
        if value.get(key).is_none() {
            return Err((code, format!("inventory.json has no {key}")));
        }
    }
    let inventory: Inventory =
        serde_json::from_value(value).map_err(|e| ("E033", format!("inventory.json is not an inventory: {e}")))?;
    let algorithm = validate::sidecar_holds(dir, &inventory, &bytes)?;
    if inventory.id.trim().is_empty() {
        return Err(("E037a", "the inventory's id is empty".into()));
    }
    Ok((inventory, algorithm, bytes))
}

/// A content path inside the object, never outside it or through a link.
fn content_path(dir: &Path, content: &str) -> Check<PathBuf> {
    let inside = !content.starts_with('/') && content.split('/').all(|part| !matches!(part, "" | "." | ".."));
    let path = dir.join(content);
    match std::fs::symlink_metadata(&path) {
        Ok(meta) if inside && meta.is_file() => Ok(path),
        _ => Err(("E092b", format!("{content} is not a file inside the object"))),
    }
}

/// A logical path every OCFL tool and a bag take alike.
fn portable(logical: &str) -> Check<()> {
    if let Some(c) = logical.chars().find(|c| matches!(c, '\r' | '\n' | '\t')) {
        let problem = format!("{logical:?} holds {c:?}, which OCFL tools disagree on (rocfl refuses it, E092)");
        return Err(("unportable-path", problem));
    }
    payload_path(logical).map(drop).map_err(|e| ("unportable-path", e.to_string()))
}

fn digest_of(path: &Path, algorithm: Algorithm) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut buffer = vec![0u8; 1 << 16];
    let (mut sha256, mut sha512) = (sha2::Sha256::new(), sha2::Sha512::new());
    loop {
        let n = file.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        match algorithm {
            Algorithm::Sha512 => sha512.update(&buffer[..n]),
            _ => sha256.update(&buffer[..n]),
        }
    }
    Ok(match algorithm {
        Algorithm::Sha512 => hex::encode(sha512.finalize()),
        _ => hex::encode(sha256.finalize()),
    })
}

/// The name of the item an object `ibi` wrote holds (`http://urlib.net/NAME`
/// of this collection's subsystem); `None` for any other object.
fn own_name(store: &dyn Store, object: &Checked) -> Option<RepositoryName> {
    own_name_of(store, &object.id)
}

fn own_name_of(store: &dyn Store, id: &str) -> Option<RepositoryName> {
    let own = id.strip_prefix(OBJECT_ID_BASE).and_then(|rest| RepositoryName::parse(rest).ok());
    own.filter(|name| name.prefix() == store.subsystem().prefix())
}

/// The item the object holds, placed under its own name with every version.
fn take_copy(store: &dyn Store, object: &Checked, name: RepositoryName) -> Result<Check<Taken>> {
    let head = object.versions.len();
    let Some(identity) = head_identity(object) else {
        return Ok(Err(("not-an-ibi-item", format!("{} names an ibi item, but its head holds no bag", object.id))));
    };
    let writer = store.begin_write(LockWait::Forever)?;
    if store.slot(&name)? == Slot::Item {
        let held = crate::store::identity_digest(store, &name)?;
        return Ok(match held == identity {
            true => Ok(Taken::Held(name)),
            false => Err((
                "another-history",
                format!("{name} is held here with identity {held}, the object's is {identity}"),
            )),
        });
    }
    let stage = Staging::for_item(writer.as_ref(), &name, false)?;
    for (number, (_, files)) in object.versions.iter().enumerate() {
        let under = match number + 1 == head {
            true => String::new(),
            false => format!("{VERSIONS_DIR}/{}/", number + 1),
        };
        for file in files {
            stage_one(writer.as_ref(), stage.id, &format!("{under}{}", file.logical), &file.content)?;
        }
    }
    let staged = writer.staged_files(stage.id);
    let check = crate::bag::verify_bag(staged.as_ref(), &name.to_string(), &|_| {});
    if let Some(problem) = check.problems.first() {
        return Ok(Err(("not-an-ibi-item", format!("its versions do not make a sound item: {problem}"))));
    }
    let ibip = check.info.as_ref().and_then(crate::store::ibip_in);
    drop(staged);
    let note = format!("from OCFL object {} at {}", object.id, object.dir.display());
    let action = Action::of(EventKind::CopyIn, note);
    let placement = Placement { stage: stage.id, name: name.clone(), ibip, replace: false, record: None, action };
    if let Some((_, Err(refusal))) = writer.place(&[placement])?.pop() {
        return Ok(Err(("refused", format!("{name} was not placed: {refusal:?}"))));
    }
    crate::store::raise_minter(writer.as_ref(), std::slice::from_ref(&name))?;
    Ok(Ok(Taken::Copied(name)))
}

/// The head version's identity digest: the digest of its `tagmanifest-sha256.txt`,
/// read (the object may be sha512).
fn head_identity(object: &Checked) -> Option<String> {
    let (_, files) = object.versions.last()?;
    let tagmanifest = files.iter().find(|f| f.logical == crate::bag::TAGMANIFEST)?;
    digest_of(&tagmanifest.content, Algorithm::Sha256).ok()
}

/// Stages one file (and the folders above it) at `rel`.
fn stage_one(writer: &dyn Writer, stage: crate::store::StageId, rel: &str, content: &Path) -> Result<()> {
    let mut parent = String::new();
    for part in rel.split('/').collect::<Vec<_>>().iter().rev().skip(1).rev() {
        parent = if parent.is_empty() { part.to_string() } else { format!("{parent}/{part}") };
        let _ = writer.stage_dir(stage, &parent);
    }
    let mut file = std::fs::File::open(content).with_path("open", content)?;
    let source =
        crate::store::FileSource { reader: &mut file, origin: content, mtime: None, also: &[], progress: &|_| {} };
    writer.stage_file(stage, rel, source).map(drop).map_err(Error::from)
}

/// The deposit record that ties an object to the item it was deposited as
/// (also the map from OCFL ids to names a resolver forwards by).
pub fn object_key(id: &str) -> String {
    format!("ocflobject{}", hex::encode(sha2::Sha256::digest(id.as_bytes())))
}

/// Deposits each object's version 1 as a new item (unless an earlier run
/// did), all in one batch, then each later version the item lacks as an
/// update; what became of each, in order.
fn take_deposits(
    store: &dyn Store,
    objects: &[&Checked],
    clock: &dyn Clock,
    reporter: &dyn Reporter,
) -> Result<Vec<Taken>> {
    if objects.is_empty() {
        return Ok(Vec::new());
    }
    crate::store::refuse_unless_minting(store)?;
    // The lease taken and dropped: what a killed run left is completed first.
    drop(store.begin_write(LockWait::Forever)?);
    let mut held: Vec<Option<(RepositoryName, usize)>> = Vec::with_capacity(objects.len());
    for object in objects {
        let recorded = store.inventory().deposit_record(&object_key(&object.id))?;
        // A record whose item never made it into place (killed before) says nothing.
        let placed = recorded.filter(|name| store.slot(name).is_ok_and(|slot| slot == Slot::Item));
        held.push(match placed {
            Some(name) => {
                let record = crate::store::ItemRecord::from_bag(store.item_files(&name).as_ref(), &name)?;
                Some((name, record.current().number as usize))
            }
            None => None,
        });
    }
    let fresh: Vec<&Checked> = objects.iter().zip(&held).filter(|(_, h)| h.is_none()).map(|(o, _)| *o).collect();
    let mut minted = deposit_firsts(store, &fresh, clock, reporter)?.into_iter();
    let mut taken = Vec::with_capacity(objects.len());
    for (object, held) in objects.iter().zip(held) {
        let (name, mut done, new) = match held {
            Some((name, done)) => (name, done, false),
            None => (minted.next().ok_or_else(|| not_deposited(object))?, 1, true),
        };
        let mut added = if new { vec![1] } else { Vec::new() };
        while done < object.versions.len() {
            let changes = version_changes(object, done);
            update(store, &name.to_string(), &changes, clock, LockWait::Forever)?;
            done += 1;
            added.push(done as u32);
        }
        taken.push(Taken::Deposited(name, added));
    }
    Ok(taken)
}

fn not_deposited(object: &Checked) -> Error {
    Error::Data { what: object.dir.display().to_string(), problem: "its first version was not deposited".into() }
}

/// The bag-info fields that say which OCFL version an item's version is
/// (and, for a mutable HEAD taken, which uncommitted revision).
fn version_meta(object: &Checked, index: usize) -> Vec<(String, String)> {
    let mut meta = vec![
        ("Ocfl-Object-Id".into(), object.id.clone()),
        ("Ocfl-Version".into(), format!("v{}", index + 1)),
        ("Ocfl-Version-Created".into(), object.versions[index].0.clone()),
    ];
    if let Some(revision) = object.mutable_head.as_ref().filter(|_| index + 1 == object.versions.len()) {
        meta.push(("Ocfl-Mutable-Head".into(), format!("uncommitted, revision {revision} of 0005-mutable-head")));
    }
    meta
}

/// Deposits version 1 of each object in one batch, each deposit record
/// (object id to name) written before the batch is placed; the names, in order.
fn deposit_firsts(
    store: &dyn Store,
    objects: &[&Checked],
    clock: &dyn Clock,
    reporter: &dyn Reporter,
) -> Result<Vec<RepositoryName>> {
    if objects.is_empty() {
        return Ok(Vec::new());
    }
    let plans = objects.iter().map(|object| first_plan(object)).collect::<Result<Vec<_>>>()?;
    let options = DepositOptions { duplicate: true, ..DepositOptions::default() };
    let writer = store.begin_write(LockWait::Forever)?;
    let record = |minted: &[&Minted]| {
        let records: Vec<(String, RepositoryName)> =
            objects.iter().zip(minted).map(|(o, m)| (object_key(&o.id), m.name.clone())).collect();
        writer.minter().write_deposit_records(&records)
    };
    let outcomes = deposit_batch(writer.as_ref(), &plans, &options, clock, reporter, Some(&record))?;
    Ok(outcomes.into_iter().map(|o| o.deposited.minted.name).collect())
}

/// The deposit of an object's version 1: its files, checked against the
/// object's digests as they are staged, and its OCFL id and version in bag-info.
fn first_plan(object: &Checked) -> Result<SourcePlan> {
    let also = if object.algorithm == Algorithm::Sha512 { vec![Algorithm::Sha512] } else { Vec::new() };
    let info = crate::bag::BagInfo { fields: version_meta(object, 0) };
    let mut plan =
        SourcePlan { algorithms: also, originals: vec![object.dir.clone()], info: Some(info), ..SourcePlan::default() };
    let mut dirs = std::collections::BTreeSet::new();
    for file in &object.versions[0].1 {
        let path = payload_path(&file.logical)?;
        let mut parent = path.as_str();
        while let Some((up, _)) = parent.rsplit_once('/') {
            if up != "data" {
                dirs.insert(up.to_string());
            }
            parent = up;
        }
        let expected = match object.algorithm {
            Algorithm::Sha512 => BTreeMap::from([(Algorithm::Sha512, file.digest.to_lowercase())]),
            _ => BTreeMap::from([(Algorithm::Sha256, file.digest.to_lowercase())]),
        };
        plan.files.push(PlannedFile { source: file.content.clone(), path, expected });
    }
    plan.dirs = dirs.into_iter().collect();
    Ok(plan)
}

/// What version `index` (from 0) changes from the one before it.
fn version_changes(object: &Checked, index: usize) -> Changes {
    let before: BTreeMap<&str, &str> =
        object.versions[index - 1].1.iter().map(|f| (f.logical.as_str(), f.digest.as_str())).collect();
    let now = &object.versions[index].1;
    let add = now
        .iter()
        .filter(|f| before.get(f.logical.as_str()) != Some(&f.digest.as_str()))
        .map(|f| (f.content.clone(), format!("data/{}", f.logical)))
        .collect();
    let remove = before
        .keys()
        .filter(|logical| !now.iter().any(|f| f.logical == **logical))
        .map(|logical| format!("data/{logical}"))
        .collect();
    Changes { set: version_meta(object, index), add, remove, ..Changes::default() }
}
