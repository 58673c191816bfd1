//! Items as BagIt bags (RFC 8493; ARCHITECTURE.md, "Items"): writing the tag files of a bag
//! being built, and verifying a bag's structure, manifests, payload and
//! Payload-Oxum. Verification never follows a symlink and never reads outside
//! the bag: it hashes only files it found by walking `data/` itself.

pub mod info;
pub mod manifest;

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::Path;

use rayon::prelude::*;
use walkdir::WalkDir;

use crate::error::Result;
use crate::fsx::{hash_bytes, hash_file, write_new};
use crate::problem::{Problem, ProblemKind};
pub use info::{BagInfo, Oxum};
pub use manifest::ManifestEntry;

pub const BAGIT_TXT: &str = "bagit.txt";
pub const BAG_INFO_TXT: &str = "bag-info.txt";
pub const MANIFEST: &str = "manifest-sha256.txt";
pub const TAGMANIFEST: &str = "tagmanifest-sha256.txt";
pub const DATA: &str = "data";
/// The bag-info label under which a deposited bag keeps its own External-Identifier values.
pub const SOURCE_IDENTIFIER: &str = "Source-External-Identifier";
const BAGIT_CONTENT: &str = "BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n";
const SHA256_HEX: usize = 64;

/// Writes bagit.txt, manifest-sha256.txt, bag-info.txt and tagmanifest-sha256.txt
/// into `dir` (a staging folder: the caller makes it durable before placing it),
/// and returns the bag's identity digest.
pub fn write_tag_files(dir: &Path, info: &BagInfo, payload: &[ManifestEntry]) -> Result<String> {
    let manifest_text = manifest::format(payload);
    let info_text = info.to_text();
    let mut tags = Vec::new();
    for (name, text) in
        [(BAGIT_TXT, BAGIT_CONTENT), (BAG_INFO_TXT, info_text.as_str()), (MANIFEST, manifest_text.as_str())]
    {
        write_new(&dir.join(name), text.as_bytes())?;
        tags.push(ManifestEntry { digest: hash_bytes(text.as_bytes()), path: name.to_string() });
    }
    let tagmanifest = manifest::format(&tags);
    write_new(&dir.join(TAGMANIFEST), tagmanifest.as_bytes())?;
    Ok(hash_bytes(tagmanifest.as_bytes()))
}

/// The identity digest of a bag: the sha256 of its tagmanifest.
pub fn identity_digest(dir: &Path) -> io::Result<String> {
    hash_file(&dir.join(TAGMANIFEST)).map(|(digest, _)| digest)
}

/// What verifying one bag found.
#[derive(Debug, Default)]
pub struct BagCheck {
    pub problems: Vec<Problem>,
    pub info: Option<BagInfo>,
    pub files: u64,
    pub bytes: u64,
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
    let bytes = crate::fsx::read_capped(&dir.join(name), crate::fsx::MAX_TAG_FILE);
    match bytes.map(String::from_utf8) {
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
        check.problems.push(Problem::new(item, Some(BAGIT_TXT), ProblemKind::BadTagFile, "malformed"));
        return;
    };
    let version_ok = matches!(info.first("BagIt-Version"), Some("1.0" | "0.97"));
    let encoding_ok = info.first("Tag-File-Character-Encoding").is_some_and(|e| e.eq_ignore_ascii_case("UTF-8"));
    if !version_ok || !encoding_ok {
        let detail = "expected BagIt-Version 1.0 (or 0.97) and Tag-File-Character-Encoding UTF-8";
        check.problems.push(Problem::new(item, Some(BAGIT_TXT), ProblemKind::BadTagFile, detail));
    }
}

/// Records manifest line problems (unsafe paths, malformed lines) of tag file `name`.
fn push_line_problems(item: &str, name: &str, problems: Vec<manifest::LineProblem>, check: &mut BagCheck) {
    for p in problems {
        let kind = if p.problem.starts_with("unsafe path") { ProblemKind::UnsafePath } else { ProblemKind::BadTagFile };
        let file = p.path.unwrap_or_else(|| name.to_string());
        check.problems.push(Problem::new(item, Some(&file), kind, format!("{name} line {}: {}", p.line, p.problem)));
    }
}

fn check_tagmanifest(dir: &Path, item: &str, digests: DigestSource, check: &mut BagCheck) {
    let Some(text) = read_tag(dir, TAGMANIFEST, item, check) else { return };
    let (entries, problems) = manifest::parse(&text, SHA256_HEX);
    push_line_problems(item, TAGMANIFEST, problems, check);
    for required in [BAGIT_TXT, BAG_INFO_TXT, MANIFEST] {
        if !entries.iter().any(|e| e.path == required) {
            let detail = format!("{TAGMANIFEST} does not cover {required}");
            check.problems.push(Problem::new(item, Some(required), ProblemKind::BadTagFile, detail));
        }
    }
    for entry in entries.iter().filter(|e| !e.path.contains('/')) {
        match digests(dir, &entry.path) {
            Ok((digest, _)) if digest == entry.digest => {}
            Ok(_) => check.problems.push(Problem::new(
                item,
                Some(&entry.path),
                ProblemKind::BadTagFile,
                "tag file digest does not match tagmanifest-sha256.txt",
            )),
            Err(e) => {
                check.problems.push(Problem::new(item, Some(&entry.path), ProblemKind::BadTagFile, e.to_string()))
            }
        }
    }
}

/// Walks `data/` without following links: regular files by NFC path → (path, size).
fn scan_payload(dir: &Path, item: &str, check: &mut BagCheck) -> BTreeMap<String, (String, u64)> {
    let mut files = BTreeMap::new();
    match fs::symlink_metadata(dir.join(DATA)) {
        Ok(m) if m.is_dir() => {}
        Ok(m) => {
            let what = format!("{} (never followed)", crate::fsx::file_kind_name(&m.file_type()));
            check.problems.push(Problem::new(item, Some(DATA), ProblemKind::SpecialFile, what));
            return files;
        }
        Err(e) => {
            check.problems.push(Problem::new(item, Some(DATA), ProblemKind::Missing, e.to_string()));
            return files;
        }
    }
    for entry in WalkDir::new(dir.join(DATA)).follow_links(false).follow_root_links(false).min_depth(1) {
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                check.problems.push(Problem::new(item, Some(DATA), ProblemKind::Unreadable, e.to_string()));
                continue;
            }
        };
        let rel = entry.path().strip_prefix(dir).unwrap_or(entry.path());
        let Some(rel) = rel.to_str() else {
            let detail = "file name is not UTF-8";
            check.problems.push(Problem::new(item, Some(&rel.to_string_lossy()), ProblemKind::Extra, detail));
            continue;
        };
        let file_type = entry.file_type();
        if file_type.is_dir() {
            continue;
        }
        if !file_type.is_file() {
            let what = if file_type.is_symlink() { "symlink (never followed)" } else { "not a regular file" };
            check.problems.push(Problem::new(item, Some(rel), ProblemKind::SpecialFile, what));
            continue;
        }
        let size = entry.metadata().map(|m| m.len()).unwrap_or(0);
        files.insert(manifest::nfc(rel), (rel.to_string(), size));
    }
    files
}

/// Where payload digests come from: hashing the file now, or digests already taken
/// (by a copy that hashed while reading). Gets the item directory and a relative path.
pub type DigestSource<'a> = &'a (dyn Fn(&Path, &str) -> io::Result<(String, u64)> + Sync);

/// Hashes `dir/rel` now.
pub fn hash_now(dir: &Path, rel: &str) -> io::Result<(String, u64)> {
    hash_file(&dir.join(rel))
}

/// Hashes the payload in parallel and compares it with the manifest entries.
fn check_payload(
    dir: &Path,
    item: &str,
    entries: &[ManifestEntry],
    on_disk: &BTreeMap<String, (String, u64)>,
    digests: DigestSource,
    check: &mut BagCheck,
) {
    let mut listed = std::collections::HashSet::new();
    let mut to_hash = Vec::new();
    for entry in entries {
        let key = manifest::nfc(&entry.path);
        if !entry.path.starts_with("data/") {
            let detail = "payload manifest lists a path outside data/";
            check.problems.push(Problem::new(item, Some(&entry.path), ProblemKind::UnsafePath, detail));
            continue;
        }
        listed.insert(key.clone());
        match on_disk.get(&key) {
            Some((actual, _)) => to_hash.push((entry, actual)),
            None => check.problems.push(Problem::new(
                item,
                Some(&entry.path),
                ProblemKind::Missing,
                "listed in manifest-sha256.txt, not in the payload",
            )),
        }
    }
    let results: Vec<_> = to_hash.par_iter().map(|(entry, actual)| (*entry, digests(dir, actual))).collect();
    for (entry, result) in results {
        match result {
            Ok((digest, n)) => {
                check.bytes += n;
                if digest != entry.digest {
                    let detail = format!("expected {}, found {digest}", entry.digest);
                    check.problems.push(Problem::new(item, Some(&entry.path), ProblemKind::DigestMismatch, detail));
                }
            }
            Err(e) => {
                check.problems.push(Problem::new(item, Some(&entry.path), ProblemKind::Unreadable, e.to_string()))
            }
        }
    }
    for (key, (actual, _)) in on_disk {
        if !listed.contains(key) {
            check.problems.push(Problem::new(
                item,
                Some(actual),
                ProblemKind::Extra,
                "in the payload, not in manifest-sha256.txt",
            ));
        }
    }
}

fn check_oxum(item: &str, info: &BagInfo, on_disk: &BTreeMap<String, (String, u64)>, check: &mut BagCheck) {
    let actual = Oxum { octets: on_disk.values().map(|(_, size)| size).sum(), files: on_disk.len() as u64 };
    match info.oxum() {
        Some(declared) if declared == actual => {}
        Some(declared) => {
            let detail = format!("Payload-Oxum {declared}, payload has {actual}");
            check.problems.push(Problem::new(item, Some(BAG_INFO_TXT), ProblemKind::OxumMismatch, detail));
        }
        None => {
            let detail = "Payload-Oxum is missing or malformed";
            check.problems.push(Problem::new(item, Some(BAG_INFO_TXT), ProblemKind::OxumMismatch, detail));
        }
    }
}

/// Verifies a bag: structure, tag files, every payload digest, missing and extra files,
/// and Payload-Oxum. `on_bytes` is told of every hashed file's size, for progress.
pub fn verify_bag(dir: &Path, item: &str, on_bytes: &(dyn Fn(u64) + Sync)) -> BagCheck {
    let hash = |dir: &Path, rel: &str| {
        let result = hash_now(dir, rel);
        if let Ok((_, n)) = &result {
            on_bytes(*n);
        }
        result
    };
    verify_bag_using(dir, item, &hash)
}

/// `verify_bag` with payload digests taken from `digests`.
pub fn verify_bag_using(dir: &Path, item: &str, digests: DigestSource) -> BagCheck {
    let mut check = BagCheck::default();
    match fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(m) => {
            let what =
                format!("the item is a {}, not a folder (never followed)", crate::fsx::file_kind_name(&m.file_type()));
            check.problems.push(Problem::new(item, None, ProblemKind::SpecialFile, what));
            return check;
        }
        Err(e) => {
            check.problems.push(Problem::new(item, None, ProblemKind::Missing, e.to_string()));
            return check;
        }
    }
    check_bagit_txt(dir, item, &mut check);
    check_tagmanifest(dir, item, digests, &mut check);
    if let Some(text) = read_tag(dir, BAG_INFO_TXT, item, &mut check) {
        match BagInfo::parse(&text) {
            Ok(info) => check.info = Some(info),
            Err(line) => check.problems.push(Problem::new(
                item,
                Some(BAG_INFO_TXT),
                ProblemKind::BadTagFile,
                format!("malformed line {line}"),
            )),
        }
    }
    let on_disk = scan_payload(dir, item, &mut check);
    check.files = on_disk.len() as u64;
    if let Some(text) = read_tag(dir, MANIFEST, item, &mut check) {
        let (entries, problems) = manifest::parse(&text, SHA256_HEX);
        push_line_problems(item, MANIFEST, problems, &mut check);
        check_payload(dir, item, &entries, &on_disk, digests, &mut check);
    }
    if let Some(info) = check.info.clone() {
        check_oxum(item, &info, &on_disk, &mut check);
    }
    check
}
