//! Verifying a bag: bagit.txt, every tagmanifest against every tag file (tag
//! folders included), every payload manifest against the payload, missing and
//! extra files, and Payload-Oxum. Each file is hashed once, with all the
//! algorithms its manifests use. Verification never follows a symlink and never
//! reads outside the bag: it hashes only files it found by walking the bag itself,
//! whatever a manifest names.

use std::collections::{BTreeMap, BTreeSet};
use std::io;

use rayon::prelude::*;

use super::files::{BagFiles, FileKind, SubBag, TreeEntry};
use super::history::{Earlier, History, VERSIONS_DIR};
use super::{
    manifest, tagmanifest_name, BagInfo, Oxum, TopLevel, BAGIT_TXT, BAG_INFO_TXT, DATA, FETCH_TXT, TAGMANIFEST,
};
use crate::digest::{Algorithm, Digests};
use crate::problem::{Problem, ProblemKind};

/// What verifying one bag found.
#[derive(Debug, Default)]
pub struct BagCheck {
    pub problems: Vec<Problem>,
    pub info: Option<BagInfo>,
    pub files: u64,
    pub bytes: u64,
    /// The identity digest of the tagmanifest-sha256.txt this check read, when it
    /// read one (the same bytes it checked).
    pub identity: Option<String>,
}

impl BagCheck {
    fn push(&mut self, item: &str, file: Option<&str>, kind: ProblemKind, detail: impl Into<String>) {
        self.problems.push(Problem::new(item, file, kind, detail));
    }
}

/// Where digests come from: hashing the file now, where its bytes are, or digests
/// already taken (by a copy that hashed while reading). Gets a path relative to the
/// bag and the algorithms wanted besides sha256.
pub type DigestSource<'a> = &'a (dyn Fn(&str, &[Algorithm]) -> io::Result<Digests> + Sync);

/// The bag's entries as listed once: kinds by path, for every check that follows.
struct Listing {
    kinds: BTreeMap<String, FileKind>,
}

/// Regular payload files by NFC path → the path as found.
type Payload = BTreeMap<String, String>;

/// The size of each file hashed, by the path as found: what was read.
type ReadSizes = BTreeMap<String, u64>;

/// Files of a bag by NFC path → the path as found, with their expected digests.
type Expected = BTreeMap<String, Vec<(Algorithm, String, String)>>;

/// What is in a bag outside `data/`.
#[derive(Default)]
struct TagTree {
    /// Regular files by NFC path → the path as found.
    files: BTreeMap<String, String>,
    manifests: BTreeSet<Algorithm>,
    tagmanifests: BTreeSet<Algorithm>,
}

/// Reads a tag file, or records why it cannot be used.
fn read_tag(files: &dyn BagFiles, listing: &Listing, name: &str, item: &str, check: &mut BagCheck) -> Option<String> {
    let bad = |detail: String| Problem::new(item, Some(name), ProblemKind::BadTagFile, detail);
    match listing.kinds.get(name) {
        Some(FileKind::File { .. }) => {}
        Some(_) => {
            check.problems.push(bad("not a regular file".into()));
            return None;
        }
        None => {
            check.problems.push(bad("cannot read: it is missing".into()));
            return None;
        }
    }
    match files.read(name).map(String::from_utf8) {
        Ok(Ok(text)) => Some(text),
        Ok(Err(_)) => {
            check.problems.push(bad("not UTF-8".into()));
            None
        }
        Err(e) => {
            check.problems.push(bad(format!("cannot read: {e}")));
            None
        }
    }
}

fn check_bagit_txt(files: &dyn BagFiles, listing: &Listing, item: &str, check: &mut BagCheck) {
    let Some(text) = read_tag(files, listing, BAGIT_TXT, item, check) else { return };
    if let Some(why) = super::bagit_txt_layout_problem(&text) {
        check.push(item, Some(BAGIT_TXT), ProblemKind::BadTagFile, format!("malformed: {why}"));
        return;
    }
    let Ok(info) = BagInfo::parse(&text) else {
        check.push(item, Some(BAGIT_TXT), ProblemKind::BadTagFile, "malformed");
        return;
    };
    let version_ok = matches!(info.first("BagIt-Version"), Some("1.0" | "0.97"));
    let encoding_ok = info.first("Tag-File-Character-Encoding").is_some_and(|e| e.eq_ignore_ascii_case("UTF-8"));
    if !version_ok || !encoding_ok {
        let detail = "expected BagIt-Version 1.0 (or 0.97) and Tag-File-Character-Encoding UTF-8";
        check.push(item, Some(BAGIT_TXT), ProblemKind::BadTagFile, detail);
    }
}

/// Records manifest line problems (unsafe paths, malformed lines) of tag file `name`.
fn push_line_problems(item: &str, name: &str, problems: Vec<manifest::LineProblem>, check: &mut BagCheck) {
    for p in problems {
        let kind = if p.unsafe_path { ProblemKind::UnsafePath } else { ProblemKind::BadTagFile };
        let file = p.path.unwrap_or_else(|| name.to_string());
        check.push(item, Some(&file), kind, format!("{name} line {}: {}", p.line, p.problem));
    }
}

/// Reads and parses the manifest `name` of `algorithm`, recording its line problems.
fn read_manifest(
    (files, listing): (&dyn BagFiles, &Listing),
    name: &str,
    algorithm: Algorithm,
    item: &str,
    check: &mut BagCheck,
) -> Option<Vec<manifest::ManifestEntry>> {
    let text = read_tag(files, listing, name, item, check)?;
    let (entries, problems) = manifest::parse(&text, algorithm.hex_len());
    push_line_problems(item, name, problems, check);
    Some(entries)
}

/// Notes what a file at the top of the bag is.
fn classify_top_level(name: &str, item: &str, tree: &mut TagTree, check: &mut BagCheck) {
    match TopLevel::of(name) {
        TopLevel::Manifest(a) => {
            tree.manifests.insert(a);
        }
        TopLevel::TagManifest(a) => {
            tree.tagmanifests.insert(a);
        }
        TopLevel::UnsupportedManifest(a) => {
            let detail = format!("a manifest of algorithm {a:?}, which ibi does not support");
            check.push(item, Some(name), ProblemKind::BadTagFile, detail);
        }
        TopLevel::TagFile if name == FETCH_TXT => {
            check.push(item, Some(name), ProblemKind::BadTagFile, "a holey bag: its payload is elsewhere");
        }
        TopLevel::TagFile => {}
    }
}

/// Lists the bag once, without asking each file's size (the files are opened
/// to be hashed, and their sizes taken then): the tag files outside `data/`
/// (classified) and the regular payload files by NFC path; everything else is
/// a problem.
fn scan(files: &dyn BagFiles, item: &str, check: &mut BagCheck) -> (Listing, TagTree, Payload) {
    let (mut listing, mut tree, mut payload) = (Listing { kinds: BTreeMap::new() }, TagTree::default(), Payload::new());
    for entry in files.entries_unsized() {
        let TreeEntry { rel, kind } = match entry {
            Ok(entry) => entry,
            Err(e) => {
                check.push(item, Some(e.rel.as_deref().unwrap_or(DATA)), ProblemKind::Unreadable, e.why);
                continue;
            }
        };
        let rel = match rel {
            Ok(rel) => rel,
            Err(lossy) => {
                check.push(item, Some(&lossy), ProblemKind::Extra, "file name is not UTF-8");
                continue;
            }
        };
        listing.kinds.insert(rel.clone(), kind);
        if in_versions(&rel) {
            // Earlier versions are bags of their own, checked by `check_versions`.
            continue;
        }
        let in_payload = rel.starts_with("data/");
        match kind {
            FileKind::Dir => {}
            FileKind::Other(what) if rel == DATA => {
                check.push(item, Some(DATA), ProblemKind::SpecialFile, format!("{what} (never followed)"));
            }
            FileKind::Other(what) => {
                check.push(item, Some(&rel), ProblemKind::SpecialFile, format!("{what} (never followed)"))
            }
            FileKind::File { .. } if in_payload => {
                payload.insert(manifest::nfc(&rel), rel);
            }
            FileKind::File { .. } => {
                if !rel.contains('/') {
                    classify_top_level(&rel, item, &mut tree, check);
                }
                tree.files.insert(manifest::nfc(&rel), rel);
            }
        }
    }
    if !listing.kinds.contains_key(DATA) {
        check.push(item, Some(DATA), ProblemKind::Missing, "the bag has no data/ folder");
    }
    (listing, tree, payload)
}

/// Checks every tagmanifest (tagmanifest-sha256.txt is required): each covers every
/// tag file but the tagmanifests, and each listed digest matches.
fn check_tagmanifests(
    bag: (&dyn BagFiles, &Listing),
    item: &str,
    tree: &TagTree,
    digests: DigestSource,
    check: &mut BagCheck,
) {
    let mut expected = Expected::new();
    for algorithm in tree.tagmanifests.iter().copied().chain([Algorithm::Sha256]).collect::<BTreeSet<_>>() {
        let name = tagmanifest_name(algorithm);
        let Some(entries) = read_manifest(bag, &name, algorithm, item, check) else { continue };
        let listed: BTreeSet<String> = entries.iter().map(|e| manifest::nfc(&e.path)).collect();
        for (key, actual) in &tree.files {
            let is_tagmanifest = matches!(TopLevel::of(actual), TopLevel::TagManifest(_));
            if !is_tagmanifest && !listed.contains(key) {
                check.push(item, Some(actual), ProblemKind::BadTagFile, format!("{name} does not cover it"));
            }
        }
        for entry in entries {
            match tree.files.get(&manifest::nfc(&entry.path)) {
                Some(actual) => {
                    expected.entry(actual.clone()).or_default().push((algorithm, entry.digest, name.clone()))
                }
                None => {
                    check.push(item, Some(&entry.path), ProblemKind::BadTagFile, format!("listed in {name}, absent"))
                }
            }
        }
    }
    compare_digests(item, &expected, digests, ProblemKind::BadTagFile, check);
}

/// Hashes each expected file once, in parallel, and compares every digest;
/// returns the size of each file read.
fn compare_digests(
    item: &str,
    expected: &Expected,
    digests: DigestSource,
    mismatch: ProblemKind,
    check: &mut BagCheck,
) -> ReadSizes {
    let results: Vec<_> = expected
        .par_iter()
        .map(|(path, wanted)| {
            let also: Vec<Algorithm> = wanted.iter().map(|(a, _, _)| *a).collect();
            (path, wanted, digests(path, &also))
        })
        .collect();
    let mut sizes = ReadSizes::new();
    for (path, wanted, result) in results {
        let found = match result {
            Ok(found) => found,
            Err(e) => {
                check.push(item, Some(path), ProblemKind::Unreadable, e.to_string());
                continue;
            }
        };
        sizes.insert(path.clone(), found.size);
        for (algorithm, digest, name) in wanted {
            match found.get(*algorithm) {
                Some(actual) if actual == digest => {}
                Some(actual) => {
                    let detail = if mismatch == ProblemKind::BadTagFile {
                        format!("tag file digest does not match {name}")
                    } else if *algorithm == Algorithm::Sha256 {
                        format!("expected {digest}, found {actual}")
                    } else {
                        format!("{algorithm}: expected {digest}, found {actual} ({name})")
                    };
                    check.push(item, Some(path), mismatch, detail);
                }
                None => check.push(item, Some(path), ProblemKind::Unreadable, format!("not hashed with {algorithm}")),
            }
        }
    }
    sizes
}

/// Checks every payload manifest (manifest-sha256.txt is required) against the
/// payload: each lists every payload file, and every digest matches. Returns
/// the size of each payload file hashed.
fn check_payload(
    bag: (&dyn BagFiles, &Listing),
    item: &str,
    tree: &TagTree,
    on_disk: &Payload,
    digests: DigestSource,
    check: &mut BagCheck,
) -> ReadSizes {
    let mut expected = Expected::new();
    let mut missing: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut unlisted: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for algorithm in tree.manifests.iter().copied().chain([Algorithm::Sha256]).collect::<BTreeSet<_>>() {
        let name = super::manifest_name(algorithm);
        let Some(entries) = read_manifest(bag, &name, algorithm, item, check) else { continue };
        let mut listed = BTreeSet::new();
        for entry in entries {
            if !entry.path.starts_with("data/") {
                let detail = format!("{name} lists a path outside data/");
                check.push(item, Some(&entry.path), ProblemKind::UnsafePath, detail);
                continue;
            }
            let key = manifest::nfc(&entry.path);
            match on_disk.get(&key) {
                Some(actual) => {
                    expected.entry(actual.clone()).or_default().push((algorithm, entry.digest, name.clone()))
                }
                None => missing.entry(entry.path).or_default().push(name.clone()),
            }
            listed.insert(key);
        }
        for (key, actual) in on_disk {
            if !listed.contains(key) {
                unlisted.entry(actual.clone()).or_default().push(name.clone());
            }
        }
    }
    for (path, names) in missing {
        let detail = format!("listed in {}, not in the payload", names.join(" and "));
        check.push(item, Some(&path), ProblemKind::Missing, detail);
    }
    for (path, names) in unlisted {
        let detail = format!("in the payload, not in {}", names.join(" or "));
        check.push(item, Some(&path), ProblemKind::Extra, detail);
    }
    let sizes = compare_digests(item, &expected, digests, ProblemKind::DigestMismatch, check);
    check.bytes += sizes.values().sum::<u64>();
    sizes
}

/// The payload's size: each file's as hashed, and for a file not hashed (one no
/// manifest lists, or one that could not be read) as a sized listing says.
fn payload_octets(files: &dyn BagFiles, on_disk: &Payload, hashed: &ReadSizes) -> u64 {
    let mut listed: Option<BTreeMap<String, u64>> = None;
    let mut listed_size = |rel: &str| {
        let sized = listed.get_or_insert_with(|| {
            let entries = files.entries().into_iter().flatten();
            entries
                .filter_map(|e| match (e.rel, e.kind) {
                    (Ok(rel), FileKind::File { size }) => Some((rel, size)),
                    _ => None,
                })
                .collect()
        });
        sized.get(rel).copied().unwrap_or(0)
    };
    on_disk.values().map(|rel| hashed.get(rel).copied().unwrap_or_else(|| listed_size(rel))).sum()
}

fn check_oxum(item: &str, info: &BagInfo, (octets, files): (u64, usize), check: &mut BagCheck) {
    let actual = Oxum { octets, files: files as u64 };
    match info.oxum() {
        Some(declared) if declared == actual => {}
        Some(declared) => {
            let detail = format!("Payload-Oxum {declared}, payload has {actual}");
            check.push(item, Some(BAG_INFO_TXT), ProblemKind::OxumMismatch, detail);
        }
        None => check.push(item, Some(BAG_INFO_TXT), ProblemKind::OxumMismatch, "Payload-Oxum is missing or malformed"),
    }
}

fn in_versions(rel: &str) -> bool {
    rel == VERSIONS_DIR || rel.strip_prefix(VERSIONS_DIR).is_some_and(|rest| rest.starts_with('/'))
}

/// Checks the history bag-info records: each earlier version is a sound bag of its
/// own whose identity digest is the one recorded, and nothing else is under
/// `ibi-versions/`. Earlier versions may all be gone only from a purged tombstone.
fn check_versions(
    bag: (&dyn BagFiles, &Listing),
    item: &str,
    info: &BagInfo,
    digests: DigestSource,
    check: &mut BagCheck,
) {
    let history = match History::of(info) {
        Ok(history) => history,
        Err(why) => return check.push(item, Some(BAG_INFO_TXT), ProblemKind::BadTagFile, why),
    };
    let kept: Vec<&Earlier> =
        history.earlier.iter().filter(|e| bag.1.kinds.contains_key(&History::version_dir(e.number))).collect();
    let purged = kept.is_empty() && history.withdrawn.is_some();
    for earlier in history.earlier.iter().filter(|_| !purged) {
        let dir = History::version_dir(earlier.number);
        if !kept.iter().any(|e| e.number == earlier.number) {
            check.push(item, Some(&dir), ProblemKind::Missing, format!("earlier version {} is gone", earlier.number));
            continue;
        }
        let sub = SubBag { outer: bag.0, prefix: dir.clone() };
        let inner = |rel: &str, also: &[Algorithm]| digests(&format!("{dir}/{rel}"), also);
        let found = verify_with(&sub, item, &inner, false);
        check.bytes += found.bytes;
        check.problems.extend(found.problems.into_iter().map(|mut p| {
            p.file = Some(p.file.map_or(dir.clone(), |f| format!("{dir}/{f}")));
            p
        }));
        match inner(TAGMANIFEST, &[]) {
            Ok(d) if d.sha256() == earlier.digest => {}
            Ok(_) => check.push(item, Some(&dir), ProblemKind::DigestMismatch, "its identity is not the one recorded"),
            Err(e) => check.push(item, Some(&format!("{dir}/{TAGMANIFEST}")), ProblemKind::Unreadable, e.to_string()),
        }
    }
    let expected: BTreeSet<String> = history.earlier.iter().map(|e| History::version_dir(e.number)).collect();
    for rel in bag.1.kinds.keys().filter(|rel| in_versions(rel) && rel.matches('/').count() == 1) {
        if !expected.contains(rel) {
            check.push(item, Some(rel), ProblemKind::Extra, "bag-info records no such earlier version");
        }
    }
}

/// Verifies a bag: structure, tag files, every payload digest, missing and extra files,
/// and Payload-Oxum, hashing where the bytes are. `on_bytes` is told of every hashed
/// file's size, for progress.
pub fn verify_bag(files: &dyn BagFiles, item: &str, on_bytes: &(dyn Fn(u64) + Sync)) -> BagCheck {
    let hash = |rel: &str, also: &[Algorithm]| {
        let result = files.digests(rel, also);
        if let Ok(d) = &result {
            on_bytes(d.size);
        }
        result
    };
    verify_bag_using(files, item, &hash)
}

/// `verify_bag` with digests taken from `digests`.
pub fn verify_bag_using(files: &dyn BagFiles, item: &str, digests: DigestSource) -> BagCheck {
    verify_with(files, item, digests, true)
}

/// Verifies a bag written out of a collection (an export): a plain bag, whose
/// bag-info may record earlier versions it does not carry.
pub fn verify_standalone(files: &dyn BagFiles, item: &str) -> BagCheck {
    let hash = |rel: &str, also: &[Algorithm]| files.digests(rel, also);
    verify_with(files, item, &hash, false)
}

/// A bag's files, with each tag file read once: what `read` returned is kept,
/// and a tag file's digests are taken from those bytes, so that a tag file is
/// opened once (parsed and hashed from one reading) rather than twice.
struct ReadOnce<'a> {
    files: &'a dyn BagFiles,
    kept: std::sync::Mutex<BTreeMap<String, std::sync::Arc<Vec<u8>>>>,
}

impl ReadOnce<'_> {
    fn kept(&self, rel: &str) -> Option<std::sync::Arc<Vec<u8>>> {
        crate::sync::lock(&self.kept).get(rel).cloned()
    }

    /// Digests of `rel`: from the bytes kept, or for a top-level tag file read
    /// now and kept, or else from `digests`.
    fn digests(&self, rel: &str, also: &[Algorithm], digests: DigestSource) -> io::Result<Digests> {
        if let Some(bytes) = self.kept(rel) {
            return Ok(crate::digest::of_bytes(&bytes, also));
        }
        if !rel.contains('/') && rel.ends_with(".txt") {
            if let Ok(bytes) = self.read(rel) {
                return Ok(crate::digest::of_bytes(&bytes, also));
            }
        }
        digests(rel, also)
    }
}

impl BagFiles for ReadOnce<'_> {
    fn root_kind(&self) -> io::Result<FileKind> {
        self.files.root_kind()
    }

    fn entries(&self) -> Vec<std::result::Result<TreeEntry, super::files::TreeError>> {
        self.files.entries()
    }

    fn entries_unsized(&self) -> Vec<std::result::Result<TreeEntry, super::files::TreeError>> {
        self.files.entries_unsized()
    }

    fn read(&self, rel: &str) -> io::Result<Vec<u8>> {
        if let Some(bytes) = self.kept(rel) {
            return Ok(bytes.to_vec());
        }
        let bytes = self.files.read(rel)?;
        crate::sync::lock(&self.kept).insert(rel.to_string(), std::sync::Arc::new(bytes.clone()));
        Ok(bytes)
    }

    fn digests(&self, rel: &str, also: &[Algorithm]) -> io::Result<Digests> {
        self.files.digests(rel, also)
    }
}

fn verify_with(files: &dyn BagFiles, item: &str, digests: DigestSource, with_history: bool) -> BagCheck {
    let once = ReadOnce { files, kept: Default::default() };
    let digests = &|rel: &str, also: &[Algorithm]| once.digests(rel, also, digests);
    let files: &dyn BagFiles = &once;
    let mut check = BagCheck::default();
    match files.root_kind() {
        Ok(FileKind::Dir) => {}
        Ok(other) => {
            let what = match other {
                FileKind::Other(what) => what,
                _ => "regular file",
            };
            check.push(
                item,
                None,
                ProblemKind::SpecialFile,
                format!("the item is a {what}, not a folder (never followed)"),
            );
            return check;
        }
        Err(e) => {
            check.push(item, None, ProblemKind::Missing, e.to_string());
            return check;
        }
    }
    let (listing, tree, payload) = scan(files, item, &mut check);
    check_bagit_txt(files, &listing, item, &mut check);
    check_tagmanifests((files, &listing), item, &tree, digests, &mut check);
    if let Some(text) = read_tag(files, &listing, BAG_INFO_TXT, item, &mut check) {
        match BagInfo::parse(&text) {
            Ok(info) => check.info = Some(info),
            Err(line) => {
                check.push(item, Some(BAG_INFO_TXT), ProblemKind::BadTagFile, format!("malformed line {line}"))
            }
        }
    }
    check.files = payload.len() as u64;
    if let Some(info) = check.info.clone().filter(|_| with_history) {
        check_versions((files, &listing), item, &info, digests, &mut check);
    }
    let hashed = check_payload((files, &listing), item, &tree, &payload, digests, &mut check);
    if let Some(info) = check.info.clone() {
        check_oxum(item, &info, (payload_octets(files, &payload, &hashed), payload.len()), &mut check);
    }
    check.identity = once.kept(TAGMANIFEST).map(|bytes| crate::digest::of_bytes(&bytes, &[]).sha256().to_string());
    check
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bag::files::DirBag;
    use crate::bag::{write_tag_files, BagContents};

    /// A bag holding `data/a` (3 bytes, in the manifest) and `data/b` (5 bytes,
    /// in no manifest), whose bag-info declares `oxum`; returns what verify found.
    fn check_with_unlisted_file(oxum: &str) -> Vec<(ProblemKind, Option<String>, String)> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("data")).unwrap();
        std::fs::write(dir.path().join("data/a"), b"abc").unwrap();
        std::fs::write(dir.path().join("data/b"), b"hello").unwrap();
        let info = BagInfo::parse(&format!("Payload-Oxum: {oxum}\n")).unwrap();
        let payload = [("data/a".to_string(), crate::digest::of_bytes(b"abc", &[]))];
        let contents = BagContents { info: &info, algorithms: &[], payload: &payload, tag_files: &[] };
        write_tag_files(dir.path(), &contents).unwrap();
        let found = verify_standalone(&DirBag::new(dir.path()), "item");
        found.problems.into_iter().map(|p| (p.kind, p.file, p.detail)).collect()
    }

    /// The listing no longer asks each file's size: a hashed file counts as
    /// read, and one no manifest lists (so never hashed) as a sized listing
    /// says, so Payload-Oxum still counts every payload byte.
    #[test]
    fn payload_oxum_counts_files_hashed_and_files_unlisted() {
        let whole = check_with_unlisted_file("8.2");
        assert_eq!(whole.len(), 1, "{whole:?}");
        assert_eq!((whole[0].0, whole[0].1.as_deref()), (ProblemKind::Extra, Some("data/b")));
        let short = check_with_unlisted_file("3.1");
        let oxum: Vec<_> = short.iter().filter(|p| p.0 == ProblemKind::OxumMismatch).collect();
        assert_eq!(oxum.len(), 1, "{short:?}");
        assert!(oxum[0].2.contains("payload has 8.2"), "{short:?}");
    }
}
