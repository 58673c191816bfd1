//! Verifying a bag: bagit.txt, every tagmanifest against every tag file (tag
//! folders included), every payload manifest against the payload, missing and
//! extra files, and Payload-Oxum. Each file is hashed once, with all the
//! algorithms its manifests use. Verification never follows a symlink and never
//! reads outside the bag: it hashes only files it found by walking the bag itself,
//! whatever a manifest names.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::path::Path;

use rayon::prelude::*;
use walkdir::WalkDir;

use super::{manifest, tagmanifest_name, BagInfo, Oxum, TopLevel, BAGIT_TXT, BAG_INFO_TXT, DATA, FETCH_TXT};
use crate::digest::{Algorithm, Digests};
use crate::fsx::{file_kind_name, hash_file_with, read_capped, MAX_TAG_FILE};
use crate::problem::{Problem, ProblemKind};

/// What verifying one bag found.
#[derive(Debug, Default)]
pub struct BagCheck {
    pub problems: Vec<Problem>,
    pub info: Option<BagInfo>,
    pub files: u64,
    pub bytes: u64,
}

impl BagCheck {
    fn push(&mut self, item: &str, file: Option<&str>, kind: ProblemKind, detail: impl Into<String>) {
        self.problems.push(Problem::new(item, file, kind, detail));
    }
}

/// Where digests come from: hashing the file now, or digests already taken (by a
/// copy that hashed while reading). Gets the bag folder, a path relative to it,
/// and the algorithms wanted besides sha256.
pub type DigestSource<'a> = &'a (dyn Fn(&Path, &str, &[Algorithm]) -> io::Result<Digests> + Sync);

/// Hashes `dir/rel` now.
pub fn hash_now(dir: &Path, rel: &str, also: &[Algorithm]) -> io::Result<Digests> {
    hash_file_with(&dir.join(rel), also)
}

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
fn read_tag(dir: &Path, name: &str, item: &str, check: &mut BagCheck) -> Option<String> {
    let bad = |detail: String| Problem::new(item, Some(name), ProblemKind::BadTagFile, detail);
    match fs::symlink_metadata(dir.join(name)) {
        Ok(m) if !m.is_file() => {
            check.problems.push(bad("not a regular file".into()));
            return None;
        }
        Err(e) => {
            check.problems.push(bad(format!("cannot read: {e}")));
            return None;
        }
        Ok(_) => {}
    }
    match read_capped(&dir.join(name), MAX_TAG_FILE).map(String::from_utf8) {
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

fn check_bagit_txt(dir: &Path, item: &str, check: &mut BagCheck) {
    let Some(text) = read_tag(dir, BAGIT_TXT, item, check) else { return };
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
        let kind = if p.problem.starts_with("unsafe path") { ProblemKind::UnsafePath } else { ProblemKind::BadTagFile };
        let file = p.path.unwrap_or_else(|| name.to_string());
        check.push(item, Some(&file), kind, format!("{name} line {}: {}", p.line, p.problem));
    }
}

/// Reads and parses the manifest `name` of `algorithm`, recording its line problems.
fn read_manifest(
    dir: &Path,
    name: &str,
    algorithm: Algorithm,
    item: &str,
    check: &mut BagCheck,
) -> Option<Vec<manifest::ManifestEntry>> {
    let text = read_tag(dir, name, item, check)?;
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

/// Walks the bag outside `data/` without following links.
fn scan_tags(dir: &Path, item: &str, check: &mut BagCheck) -> TagTree {
    let mut tree = TagTree::default();
    let walk = WalkDir::new(dir).follow_links(false).follow_root_links(false).min_depth(1).sort_by_file_name();
    let not_payload = |e: &walkdir::DirEntry| !(e.depth() == 1 && e.file_name() == DATA);
    for entry in walk.into_iter().filter_entry(not_payload) {
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                let rel = e.path().and_then(|p| p.strip_prefix(dir).ok()).map(|p| p.display().to_string());
                check.push(item, rel.as_deref(), ProblemKind::Unreadable, e.to_string());
                continue;
            }
        };
        let rel = entry.path().strip_prefix(dir).unwrap_or(entry.path());
        let Some(rel) = rel.to_str() else {
            check.push(item, Some(&rel.to_string_lossy()), ProblemKind::Extra, "file name is not UTF-8");
            continue;
        };
        let file_type = entry.file_type();
        if file_type.is_dir() {
            continue;
        }
        if !file_type.is_file() {
            let what = format!("{} (never followed)", file_kind_name(&file_type));
            check.push(item, Some(rel), ProblemKind::SpecialFile, what);
            continue;
        }
        if entry.depth() == 1 {
            classify_top_level(rel, item, &mut tree, check);
        }
        tree.files.insert(manifest::nfc(rel), rel.to_string());
    }
    tree
}

/// Checks every tagmanifest (tagmanifest-sha256.txt is required): each covers every
/// tag file but the tagmanifests, and each listed digest matches.
fn check_tagmanifests(dir: &Path, item: &str, tree: &TagTree, digests: DigestSource, check: &mut BagCheck) {
    let mut expected = Expected::new();
    for algorithm in tree.tagmanifests.iter().copied().chain([Algorithm::Sha256]).collect::<BTreeSet<_>>() {
        let name = tagmanifest_name(algorithm);
        let Some(entries) = read_manifest(dir, &name, algorithm, item, check) else { continue };
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
    compare_digests(dir, item, &expected, digests, ProblemKind::BadTagFile, check);
}

/// Hashes each expected file once, in parallel, and compares every digest.
fn compare_digests(
    dir: &Path,
    item: &str,
    expected: &Expected,
    digests: DigestSource,
    mismatch: ProblemKind,
    check: &mut BagCheck,
) -> u64 {
    let results: Vec<_> = expected
        .par_iter()
        .map(|(path, wanted)| {
            let also: Vec<Algorithm> = wanted.iter().map(|(a, _, _)| *a).collect();
            (path, wanted, digests(dir, path, &also))
        })
        .collect();
    let mut bytes = 0;
    for (path, wanted, result) in results {
        let found = match result {
            Ok(found) => found,
            Err(e) => {
                check.push(item, Some(path), ProblemKind::Unreadable, e.to_string());
                continue;
            }
        };
        bytes += found.size;
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
    bytes
}

/// Walks `data/` without following links: regular files by NFC path → (path, size).
fn scan_payload(dir: &Path, item: &str, check: &mut BagCheck) -> BTreeMap<String, (String, u64)> {
    let mut files = BTreeMap::new();
    match fs::symlink_metadata(dir.join(DATA)) {
        Ok(m) if m.is_dir() => {}
        Ok(m) => {
            let what = format!("{} (never followed)", file_kind_name(&m.file_type()));
            check.push(item, Some(DATA), ProblemKind::SpecialFile, what);
            return files;
        }
        Err(e) => {
            check.push(item, Some(DATA), ProblemKind::Missing, e.to_string());
            return files;
        }
    }
    for entry in WalkDir::new(dir.join(DATA)).follow_links(false).follow_root_links(false).min_depth(1) {
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                check.push(item, Some(DATA), ProblemKind::Unreadable, e.to_string());
                continue;
            }
        };
        let rel = entry.path().strip_prefix(dir).unwrap_or(entry.path());
        let Some(rel) = rel.to_str() else {
            check.push(item, Some(&rel.to_string_lossy()), ProblemKind::Extra, "file name is not UTF-8");
            continue;
        };
        let file_type = entry.file_type();
        if file_type.is_dir() {
            continue;
        }
        if !file_type.is_file() {
            let what = if file_type.is_symlink() { "symlink (never followed)" } else { "not a regular file" };
            check.push(item, Some(rel), ProblemKind::SpecialFile, what);
            continue;
        }
        let size = entry.metadata().map(|m| m.len()).unwrap_or(0);
        files.insert(manifest::nfc(rel), (rel.to_string(), size));
    }
    files
}

/// Checks every payload manifest (manifest-sha256.txt is required) against the
/// payload: each lists every payload file, and every digest matches.
fn check_payload(
    dir: &Path,
    item: &str,
    tree: &TagTree,
    on_disk: &BTreeMap<String, (String, u64)>,
    digests: DigestSource,
    check: &mut BagCheck,
) {
    let mut expected = Expected::new();
    let mut missing: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut unlisted: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for algorithm in tree.manifests.iter().copied().chain([Algorithm::Sha256]).collect::<BTreeSet<_>>() {
        let name = super::manifest_name(algorithm);
        let Some(entries) = read_manifest(dir, &name, algorithm, item, check) else { continue };
        let mut listed = BTreeSet::new();
        for entry in entries {
            if !entry.path.starts_with("data/") {
                let detail = format!("{name} lists a path outside data/");
                check.push(item, Some(&entry.path), ProblemKind::UnsafePath, detail);
                continue;
            }
            let key = manifest::nfc(&entry.path);
            match on_disk.get(&key) {
                Some((actual, _)) => {
                    expected.entry(actual.clone()).or_default().push((algorithm, entry.digest, name.clone()))
                }
                None => missing.entry(entry.path).or_default().push(name.clone()),
            }
            listed.insert(key);
        }
        for (key, (actual, _)) in on_disk {
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
    check.bytes += compare_digests(dir, item, &expected, digests, ProblemKind::DigestMismatch, check);
}

fn check_oxum(item: &str, info: &BagInfo, on_disk: &BTreeMap<String, (String, u64)>, check: &mut BagCheck) {
    let actual = Oxum { octets: on_disk.values().map(|(_, size)| size).sum(), files: on_disk.len() as u64 };
    match info.oxum() {
        Some(declared) if declared == actual => {}
        Some(declared) => {
            let detail = format!("Payload-Oxum {declared}, payload has {actual}");
            check.push(item, Some(BAG_INFO_TXT), ProblemKind::OxumMismatch, detail);
        }
        None => check.push(item, Some(BAG_INFO_TXT), ProblemKind::OxumMismatch, "Payload-Oxum is missing or malformed"),
    }
}

/// Verifies a bag: structure, tag files, every payload digest, missing and extra files,
/// and Payload-Oxum. `on_bytes` is told of every hashed file's size, for progress.
pub fn verify_bag(dir: &Path, item: &str, on_bytes: &(dyn Fn(u64) + Sync)) -> BagCheck {
    let hash = |dir: &Path, rel: &str, also: &[Algorithm]| {
        let result = hash_now(dir, rel, also);
        if let Ok(d) = &result {
            on_bytes(d.size);
        }
        result
    };
    verify_bag_using(dir, item, &hash)
}

/// `verify_bag` with digests taken from `digests`.
pub fn verify_bag_using(dir: &Path, item: &str, digests: DigestSource) -> BagCheck {
    let mut check = BagCheck::default();
    match fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(m) => {
            let what = format!("the item is a {}, not a folder (never followed)", file_kind_name(&m.file_type()));
            check.push(item, None, ProblemKind::SpecialFile, what);
            return check;
        }
        Err(e) => {
            check.push(item, None, ProblemKind::Missing, e.to_string());
            return check;
        }
    }
    check_bagit_txt(dir, item, &mut check);
    let tree = scan_tags(dir, item, &mut check);
    check_tagmanifests(dir, item, &tree, digests, &mut check);
    if let Some(text) = read_tag(dir, BAG_INFO_TXT, item, &mut check) {
        match BagInfo::parse(&text) {
            Ok(info) => check.info = Some(info),
            Err(line) => {
                check.push(item, Some(BAG_INFO_TXT), ProblemKind::BadTagFile, format!("malformed line {line}"))
            }
        }
    }
    let on_disk = scan_payload(dir, item, &mut check);
    check.files = on_disk.len() as u64;
    check_payload(dir, item, &tree, &on_disk, digests, &mut check);
    if let Some(info) = check.info.clone() {
        check_oxum(item, &info, &on_disk, &mut check);
    }
    check
}
