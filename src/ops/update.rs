//! `update` and `withdraw` (ARCHITECTURE.md, "Versions"): an item changes only
//! by a new version under the same name, placed atomically over the current
//! one. The new version is staged complete: the current version moves, byte for
//! byte, to `ibi-versions/<N>/` beside the earlier ones (hard links, so no
//! bytes are copied or destroyed), unchanged payload is linked, added files are
//! copied and hashed, and bag-info gets the chained history. The staged bag is
//! verified, every earlier version included, before it replaces the current
//! one. A withdrawal is a version too: a tombstone with no payload that records
//! the date and reason; `purge` drops the earlier versions' bytes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use crate::bag::files::{FileKind, TreeEntry};
use crate::bag::history::{History, Withdrawal, VERSIONS_DIR};
use crate::bag::manifest::{self, check_path};
use crate::bag::{self, BagContents, BagInfo, TopLevel, BAG_INFO_TXT};
use crate::digest::{Algorithm, Digests};
use crate::error::{Error, Result};
use crate::events::EventKind;
use crate::fsx::open_regular;
use crate::id::minter::Clock;
use crate::id::RepositoryName;
use crate::ops::deposit::check_meta;
use crate::store::log::Action;
use crate::store::{identity_digest, item_info, resolve, FileSource, ItemRecord, LockWait, Placement, Staging, Store};

/// What a new version changes.
#[derive(Debug, Clone, Default)]
pub struct Changes {
    /// bag-info fields to set (each label's earlier values are replaced).
    pub set: Vec<(String, String)>,
    /// bag-info labels to drop.
    pub unset: Vec<String>,
    /// Local files to add (or replace) at a path inside `data/`.
    pub add: Vec<(PathBuf, String)>,
    /// Payload paths (inside `data/`) to leave out of the new version.
    pub remove: Vec<String>,
    /// Make the new version a tombstone.
    pub withdraw: Option<Withdraw>,
}

#[derive(Debug, Clone)]
pub struct Withdraw {
    pub reason: String,
    /// Drop the earlier versions' bytes too.
    pub purge: bool,
}

/// The version an update made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Updated {
    pub name: RepositoryName,
    pub version: u32,
    pub digest: String,
    pub files: u64,
    pub bytes: u64,
}

fn invalid(problem: String) -> Error {
    Error::Invalid { what: "update".into(), problem }
}

/// `data/<path>` for a payload path given with or without `data/`, checked.
pub fn payload_path(text: &str) -> Result<String> {
    let rel = if text.starts_with("data/") { text.to_string() } else { format!("data/{text}") };
    check_path(&rel).map_err(|why| invalid(format!("{text}: {why}")))?;
    Ok(rel)
}

/// The current item's entries, sorted out.
#[derive(Default)]
struct Current {
    /// Folders outside `ibi-versions/`, and the files of each part.
    dirs: Vec<String>,
    payload: BTreeMap<String, u64>,
    kept_tags: Vec<String>,
    /// Every file and folder outside `ibi-versions/` (the version to archive).
    own: Vec<(String, bool)>,
    /// Every file and folder under `ibi-versions/`.
    versions: Vec<(String, bool)>,
    algorithms: Vec<Algorithm>,
}

fn survey(store: &dyn Store, name: &RepositoryName) -> Result<Current> {
    let mut current = Current::default();
    for entry in store.item_files(name).entries() {
        let entry = entry.map_err(|e| Error::Data { what: format!("item {name}"), problem: e.why })?;
        let TreeEntry { rel: Ok(rel), kind } = entry else {
            return Err(Error::Data { what: format!("item {name}"), problem: "a file name is not UTF-8".into() });
        };
        let is_dir = match kind {
            FileKind::Dir => true,
            FileKind::File { .. } => false,
            FileKind::Other(what) => {
                return Err(Error::Data { what: format!("item {name}"), problem: format!("{rel} is a {what}") })
            }
        };
        if rel == VERSIONS_DIR || rel.starts_with(&format!("{VERSIONS_DIR}/")) {
            current.versions.push((rel, is_dir));
            continue;
        }
        current.own.push((rel.clone(), is_dir));
        match (is_dir, kind) {
            (true, _) => current.dirs.push(rel),
            (false, FileKind::File { size }) if rel.starts_with("data/") => {
                current.payload.insert(rel, size);
            }
            (false, _) if rel.contains('/') => current.kept_tags.push(rel),
            (false, _) => match TopLevel::of(&rel) {
                TopLevel::Manifest(a) => current.algorithms.push(a),
                TopLevel::TagFile if rel != bag::BAGIT_TXT && rel != BAG_INFO_TXT => current.kept_tags.push(rel),
                _ => {}
            },
        }
    }
    Ok(current)
}

/// The payload digests the current manifests record, for every algorithm.
fn recorded_digests(store: &dyn Store, name: &RepositoryName, current: &Current) -> Result<BTreeMap<String, Digests>> {
    let files = store.item_files(name);
    let mut digests: BTreeMap<String, Digests> = BTreeMap::new();
    for &algorithm in &current.algorithms {
        let manifest_name = bag::manifest_name(algorithm);
        let bad = |problem: String| Error::Data { what: format!("{name}/{manifest_name}"), problem };
        let bytes = files.read(&manifest_name).map_err(|e| bad(e.to_string()))?;
        let text = String::from_utf8(bytes).map_err(|_| bad("it is not UTF-8".into()))?;
        let (entries, problems) = manifest::parse(&text, algorithm.hex_len());
        if let Some(p) = problems.first() {
            return Err(bad(format!("line {}: {}", p.line, p.problem)));
        }
        for entry in entries {
            let size = current.payload.get(&entry.path).copied().unwrap_or_default();
            let slot = digests.entry(entry.path).or_insert_with(|| Digests { size, hex: BTreeMap::new() });
            slot.hex.insert(algorithm, entry.digest);
        }
    }
    Ok(digests)
}

/// Builds the staged item's folders as needed, each once.
struct Folders<'a> {
    staging: &'a Staging<'a>,
    made: BTreeSet<String>,
}

impl Folders<'_> {
    fn make(&mut self, dir: &str) -> Result<()> {
        let mut path = String::new();
        for part in dir.split('/') {
            path = if path.is_empty() { part.to_string() } else { format!("{path}/{part}") };
            if self.made.insert(path.clone()) {
                self.staging.writer.stage_dir(self.staging.id, &path)?;
            }
        }
        Ok(())
    }

    fn parent_of(&mut self, rel: &str) -> Result<()> {
        match rel.rsplit_once('/') {
            Some((parent, _)) => self.make(parent),
            None => Ok(()),
        }
    }
}

/// Links the current version to `ibi-versions/<N>/` and keeps the earlier ones.
fn stage_history(folders: &mut Folders, name: &RepositoryName, current: &Current, number: u32) -> Result<()> {
    let (store, id) = (folders.staging.writer, folders.staging.id);
    let archive = History::version_dir(number);
    folders.make(&archive)?;
    let moved = current.own.iter().map(|(rel, dir)| (format!("{archive}/{rel}"), rel.clone(), *dir));
    let kept = current.versions.iter().map(|(rel, dir)| (rel.clone(), rel.clone(), *dir));
    for (to, from, is_dir) in moved.chain(kept) {
        if is_dir {
            folders.make(&to)?;
        } else {
            folders.parent_of(&to)?;
            store.stage_link(id, &to, name, &from)?;
        }
    }
    Ok(())
}

/// Stages the new version's payload: unchanged files linked, added files copied
/// and hashed. Returns the payload with its digests.
fn stage_payload(
    folders: &mut Folders,
    name: &RepositoryName,
    current: &Current,
    changes: &Changes,
    recorded: &BTreeMap<String, Digests>,
) -> Result<Vec<(String, Digests)>> {
    let (store, id) = (folders.staging.writer, folders.staging.id);
    folders.make(bag::DATA)?;
    let added: BTreeMap<String, &PathBuf> =
        changes.add.iter().map(|(from, to)| Ok((payload_path(to)?, from))).collect::<Result<_>>()?;
    let removed: BTreeSet<String> = changes.remove.iter().map(|p| payload_path(p)).collect::<Result<_>>()?;
    let mut payload = Vec::new();
    for rel in current.payload.keys().filter(|rel| !removed.contains(*rel) && !added.contains_key(*rel)) {
        let digests = recorded.get(rel).cloned().ok_or_else(|| Error::Data {
            what: format!("item {name}"),
            problem: format!("{rel} is in the payload but not in its manifests"),
        })?;
        folders.parent_of(rel)?;
        store.stage_link(id, rel, name, rel)?;
        payload.push((rel.clone(), digests));
    }
    for (rel, from) in added {
        folders.parent_of(&rel)?;
        let opened = open_regular(from, true).map_err(|e| Error::io("open", from, e))?;
        let mut file = opened.file;
        let mtime = opened.meta.modified().ok();
        let source =
            FileSource { reader: &mut file, origin: from, mtime, also: &current.algorithms, progress: &|_| {} };
        let digests = store.stage_file(id, &rel, source)?;
        payload.push((rel, digests));
    }
    for dir in empty_payload_folders(current) {
        folders.make(dir)?;
    }
    payload.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(payload)
}

/// The payload folders of the current version that hold nothing: a new version
/// keeps them as they were (a folder emptied by this update's removals is not
/// among them and goes).
fn empty_payload_folders(current: &Current) -> impl Iterator<Item = &str> {
    let parents: BTreeSet<&str> =
        current.own.iter().filter_map(|(rel, _)| rel.rsplit_once('/').map(|(parent, _)| parent)).collect();
    current.dirs.iter().map(String::as_str).filter(move |dir| dir.starts_with("data/") && !parents.contains(dir))
}

/// The new version's bag-info: the current one with the changes, a fresh
/// Payload-Oxum and Bagging-Date, and the chained history.
fn new_info(info: &BagInfo, changes: &Changes, history: History, payload: &[(String, Digests)], now: &str) -> BagInfo {
    let mut next = info.clone();
    for label in changes.unset.iter().chain(changes.set.iter().map(|(l, _)| l)) {
        next.remove(label);
    }
    for (label, value) in &changes.set {
        next.push(label, value.clone());
    }
    next.remove("Payload-Oxum");
    next.remove("Bagging-Date");
    let octets: u64 = payload.iter().map(|(_, d)| d.size).sum();
    next.push("Bagging-Date", now.get(..10).unwrap_or(now));
    next.push("Payload-Oxum", bag::Oxum { octets, files: payload.len() as u64 }.to_string());
    history.write_into(&mut next);
    next
}

/// Links the tag files the item keeps (`mets.xml`, `metadata/…`) and hashes them.
fn stage_kept_tags(folders: &mut Folders, name: &RepositoryName, current: &Current) -> Result<Vec<(String, Digests)>> {
    let (store, id) = (folders.staging.writer, folders.staging.id);
    let mut kept = Vec::new();
    for rel in &current.kept_tags {
        folders.parent_of(rel)?;
        store.stage_link(id, rel, name, rel)?;
        let digests = store
            .staged_files(id)
            .digests(rel, &current.algorithms)
            .map_err(|e| Error::Data { what: format!("item {name}"), problem: format!("{rel}: {e}") })?;
        kept.push((rel.clone(), digests));
    }
    Ok(kept)
}

/// Refuses changes that make no sense before anything is staged.
fn check_changes(changes: &Changes) -> Result<()> {
    check_meta(&changes.set)?;
    check_meta(&changes.unset.iter().map(|l| (l.clone(), String::new())).collect::<Vec<_>>())?;
    let nothing = changes.set.is_empty() && changes.unset.is_empty() && changes.add.is_empty();
    if nothing && changes.remove.is_empty() && changes.withdraw.is_none() {
        return Err(invalid("nothing to change: give --meta, --unset, --add or --remove".into()));
    }
    for (from, to) in &changes.add {
        payload_path(to)?;
        if !from.is_file() {
            return Err(invalid(format!("{} is not a file", from.display())));
        }
    }
    Ok(())
}

/// Makes version N+1 of the item `text` names, under the write lease.
pub fn update(store: &dyn Store, text: &str, changes: &Changes, clock: &dyn Clock, wait: LockWait) -> Result<Updated> {
    check_changes(changes)?;
    let writer = store.begin_write(wait)?;
    let name = resolve(store, text)?;
    let info = item_info(store, &name)?;
    let history =
        History::of(&info).map_err(|why| Error::Data { what: format!("{name}/{BAG_INFO_TXT}"), problem: why })?;
    if let Some(w) = &history.withdrawn {
        return Err(Error::Withdrawn { name: name.to_string(), date: w.date.clone(), reason: w.reason.clone() });
    }
    let current = survey(store, &name)?;
    for rel in &changes.remove {
        if !current.payload.contains_key(&payload_path(rel)?) {
            return Err(invalid(format!("{name} has no payload file {}", payload_path(rel)?)));
        }
    }
    let digest = identity_digest(store, &name)?;
    let now = clock.now().to_rfc3339();
    let since = history.date.clone().unwrap_or_else(|| name.date().to_rfc3339());
    let mut next = history.next(&since, &digest, &now);
    let purge = changes.withdraw.as_ref().is_some_and(|w| w.purge);
    next.withdrawn = changes.withdraw.as_ref().map(|w| Withdrawal { date: now.clone(), reason: w.reason.clone() });
    let staging = Staging::new(writer.as_ref())?;
    let mut folders = Folders { staging: &staging, made: BTreeSet::new() };
    if !purge {
        stage_history(&mut folders, &name, &current, history.version)?;
    }
    let (payload, kept) = if changes.withdraw.is_some() {
        folders.make(bag::DATA)?;
        (Vec::new(), Vec::new())
    } else {
        let recorded = recorded_digests(store, &name, &current)?;
        (
            stage_payload(&mut folders, &name, &current, changes, &recorded)?,
            stage_kept_tags(&mut folders, &name, &current)?,
        )
    };
    let version = next.version;
    let info = new_info(&info, changes, next, &payload, &now);
    let algorithms = if changes.withdraw.is_some() { Vec::new() } else { current.algorithms.clone() };
    let contents = BagContents { info: &info, algorithms: &algorithms, payload: &payload, tag_files: &kept };
    let digest = bag::write_tag_files_with(&contents, &mut |file, bytes| stage_bytes(&staging, file, bytes))?;
    place_version(&staging, &name, ItemRecord::from_info(&name, &info, &digest).ok())?;
    let bytes = payload.iter().map(|(_, d)| d.size).sum();
    Ok(Updated { name, version, digest, files: payload.len() as u64, bytes })
}

fn stage_bytes(staging: &Staging, file: &str, bytes: &[u8]) -> Result<()> {
    let mut reader = std::io::Cursor::new(bytes.to_vec());
    let origin = PathBuf::from(file);
    let source = FileSource { reader: &mut reader, origin: &origin, mtime: None, also: &[], progress: &|_| {} };
    staging.writer.stage_file(staging.id, file, source).map(drop).map_err(Error::from)
}

/// Verifies the staged version (earlier versions included) and swaps it in.
fn place_version(staging: &Staging, name: &RepositoryName, record: Option<ItemRecord>) -> Result<()> {
    let store = staging.writer;
    let check = bag::verify_bag(store.staged_files(staging.id).as_ref(), &name.to_string(), &|_| {});
    if let Some(problem) = check.problems.first() {
        let problem = format!("the new version did not verify, nothing changed: {problem}");
        return Err(Error::Data { what: format!("item {name}"), problem });
    }
    let ibip = check.info.as_ref().and_then(crate::store::ibip_in);
    let action = Action::of(EventKind::Update, String::new());
    let batch = [Placement { stage: staging.id, name: name.clone(), ibip, replace: true, record, action }];
    match store.place(&batch)?.into_iter().next() {
        Some((_, Ok(()))) => Ok(()),
        Some((_, Err(refusal))) => Err(refusal),
        None => Err(Error::Data { what: format!("item {name}"), problem: "the store placed nothing".into() }),
    }
}
