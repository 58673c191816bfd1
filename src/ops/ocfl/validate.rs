//! The checks of an OCFL object's structure that `deposit --ocfl` makes
//! before it takes anything (beside the root inventory and content digests,
//! which `import` checks): what the object root may hold, the version folders
//! against the versions, version names and dates, the manifest's content
//! paths, the fixity block, and every version's own inventory against the
//! root's. Each refusal carries the OCFL 1.1 validation code that names it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::digest::Algorithm;

use super::{Inventory, Version};

/// A refusal: the OCFL validation code and the problem.
pub type Check<T> = std::result::Result<T, (&'static str, String)>;

const DECLARATIONS: [(&str, &str); 2] = [("0=ocfl_object_1.0", "1.0"), ("0=ocfl_object_1.1", "1.1")];

/// The object's OCFL version, from its declaration, whose content must be
/// the declaration's own text (E003, E007).
pub fn declared_spec(dir: &Path) -> Check<&'static str> {
    for (file, spec) in DECLARATIONS {
        if let Ok(text) = std::fs::read_to_string(dir.join(file)) {
            if text != format!("ocfl_object_{spec}\n") {
                return Err(("E007", format!("{file} does not hold \"ocfl_object_{spec}\" and a newline")));
            }
            return Ok(spec);
        }
    }
    Err(("E003", "the object declaration 0=ocfl_object_1.x is missing".into()))
}

/// What the object root may hold: its declaration, inventory and sidecar,
/// `logs/`, `extensions/` (of folders only), and a folder per version (E001,
/// E067, E010, E046).
pub fn root_entries(dir: &Path, inventory: &Inventory) -> Check<()> {
    let sidecar = format!("inventory.json.{}", inventory.digest_algorithm);
    let mut version_dirs = BTreeSet::new();
    let entries = std::fs::read_dir(dir).map_err(|e| ("E001", format!("the object cannot be listed: {e}")))?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        let allowed_file = DECLARATIONS.iter().any(|(d, _)| *d == name) || name == "inventory.json" || name == sidecar;
        match (is_dir, name.as_str()) {
            (false, _) if allowed_file => {}
            (true, "logs") => {}
            (true, "extensions") => extensions_hold_folders_only(&entry.path())?,
            (true, _) if version_number(&name).is_some() => {
                version_dirs.insert(name);
            }
            _ => return Err(("E001", format!("the object root holds {name}, which OCFL does not allow there"))),
        }
    }
    let named: BTreeSet<String> = inventory.versions.keys().cloned().collect();
    if let Some(extra) = version_dirs.difference(&named).next() {
        return Err(("E046", format!("{extra}/ is a version folder the inventory does not name")));
    }
    if let Some(missing) = named.difference(&version_dirs).next() {
        return Err(("E010", format!("the inventory names {missing}, which has no folder")));
    }
    Ok(())
}

fn extensions_hold_folders_only(extensions: &Path) -> Check<()> {
    let entries = std::fs::read_dir(extensions).map_err(|e| ("E067", format!("extensions/: {e}")))?;
    match entries.flatten().find(|e| !e.file_type().is_ok_and(|t| t.is_dir())) {
        Some(file) => Err(("E067", format!("extensions/ holds the file {}", file.file_name().to_string_lossy()))),
        None => Ok(()),
    }
}

/// `vN`'s number, when the name is a version name.
pub fn version_number(name: &str) -> Option<u32> {
    let digits = name.strip_prefix('v')?;
    (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())).then(|| digits.parse().ok()).flatten()
}

/// The versions in order: numbered from 1 without a gap, all padded alike,
/// the last the head, each dated with a time zone to the second (E008, E009,
/// E010, E011, E040, E049).
pub fn sorted_versions(inventory: &Inventory) -> Check<Vec<(&String, &Version)>> {
    let mut numbered: Vec<(u32, &String, &Version)> = Vec::new();
    for (key, version) in &inventory.versions {
        let n = version_number(key).ok_or_else(|| ("E046", format!("{key:?} is not a version name")))?;
        numbered.push((n, key, version));
    }
    numbered.sort_by_key(|(n, ..)| *n);
    let Some((_, last, _)) = numbered.last() else { return Err(("E008", "the inventory names no version".into())) };
    if let Some((i, (n, key, _))) = numbered.iter().enumerate().find(|(i, (n, ..))| *n != *i as u32 + 1) {
        let code = if i == 0 { "E009" } else { "E010" };
        return Err((code, format!("{key} (version {n}) is out of sequence")));
    }
    let padded = |key: &str| key.len() > 2 && key.as_bytes()[1] == b'0';
    let width = last.len();
    if numbered.iter().any(|(_, key, _)| padded(key) && key.len() != width)
        || (padded(&numbered[0].1[..]) && numbered.iter().any(|(_, key, _)| key.len() != width))
    {
        return Err(("E011", "the version names are not all padded to one width".into()));
    }
    if inventory.head != **last {
        return Err(("E040", format!("head is {:?}, the last version is {last}", inventory.head)));
    }
    for (_, key, version) in &numbered {
        if chrono::DateTime::parse_from_rfc3339(&version.created).is_err() {
            return Err((
                "E049",
                format!("{key}'s created {:?} is not an RFC 3339 date to the second", version.created),
            ));
        }
    }
    Ok(numbered.into_iter().map(|(_, key, version)| (key, version)).collect())
}

/// The manifest: every state's digest in it (E050a), digests unique whatever their case, each content path once,
/// inside a version's content folder, every digest used by some version, and
/// every file of a content folder listed (E096, E101, E015, E107, E023).
pub fn manifest(dir: &Path, inventory: &Inventory) -> Check<()> {
    for (key, version) in &inventory.versions {
        if let Some(digest) = version.state.keys().find(|d| !inventory.manifest.contains_key(*d)) {
            return Err(("E050a", format!("{key} holds digest {digest}, which the manifest does not")));
        }
    }
    let folded: BTreeSet<String> = inventory.manifest.keys().map(|d| d.to_lowercase()).collect();
    if folded.len() != inventory.manifest.len() {
        return Err(("E096", "the manifest lists one digest twice (in two letter cases)".into()));
    }
    let content_dir = inventory.content_directory.as_deref().unwrap_or("content");
    let mut listed = BTreeSet::new();
    for paths in inventory.manifest.values() {
        for path in paths {
            if !listed.insert(path.as_str()) {
                return Err(("E101", format!("the manifest lists the content path {path} twice")));
            }
            let inside = path.split_once('/').is_some_and(|(v, rest)| {
                inventory.versions.contains_key(v) && rest.starts_with(&format!("{content_dir}/"))
            });
            if !inside {
                return Err(("E015", format!("{path} is not inside a version's {content_dir}/ folder")));
            }
        }
    }
    let used: BTreeSet<&String> = inventory.versions.values().flat_map(|v| v.state.keys()).collect();
    if let Some(unused) = inventory.manifest.keys().find(|d| !used.contains(d)) {
        return Err(("E107", format!("the manifest lists {unused}, which no version's state holds")));
    }
    for version in inventory.versions.keys() {
        let folder = dir.join(version).join(content_dir);
        for entry in walkdir::WalkDir::new(&folder).min_depth(1).into_iter().flatten() {
            let rel = entry.path().strip_prefix(dir).unwrap_or(entry.path()).to_string_lossy().into_owned();
            if entry.file_type().is_file() && !listed.contains(rel.as_str()) {
                return Err(("E023", format!("{rel} is in a content folder but not in the manifest")));
            }
        }
    }
    Ok(())
}

/// Digests of content files already computed, by path and algorithm.
pub type Digested = BTreeMap<(String, Algorithm), String>;

/// The digest of the content file `rel` in `algorithm`, computed once.
fn digest_at(dir: &Path, rel: &str, algorithm: Algorithm, done: &mut Digested) -> Check<String> {
    if let Some(found) = done.get(&(rel.to_string(), algorithm)) {
        return Ok(found.clone());
    }
    let opened = crate::fsx::open_regular(&dir.join(rel), false).map_err(|e| ("E092b", format!("{rel}: {e}")))?;
    let digests = crate::fsx::hash_opened(opened, &[algorithm]).map_err(|e| ("E092b", format!("{rel}: {e}")))?;
    let found = digests.hex.get(&algorithm).cloned().unwrap_or_default();
    done.insert((rel.to_string(), algorithm), found.clone());
    Ok(found)
}

/// The fixity block: each algorithm's digests unique whatever their case, and
/// each that `ibi` computes (md5, sha1, sha256, sha512) right (E097, E093).
pub fn fixity(dir: &Path, inventory: &Inventory, done: &mut Digested) -> Check<()> {
    for (name, block) in &inventory.fixity {
        let folded: BTreeSet<String> = block.keys().map(|d| d.to_lowercase()).collect();
        if folded.len() != block.len() {
            return Err(("E097", format!("the fixity block lists one {name} digest twice")));
        }
        let Some(algorithm) = Algorithm::from_name(name) else { continue };
        for (digest, paths) in block {
            for path in paths {
                let found = digest_at(dir, path, algorithm, done)?;
                if !found.eq_ignore_ascii_case(digest) {
                    return Err(("E093", format!("{path} has {name} {found}, the fixity block says {digest}")));
                }
            }
        }
    }
    Ok(())
}

/// Every version's own inventory, where it keeps one: its sidecar right, the
/// object's id, itself as head, the root's content folder, each version's
/// state the root's (by content path, whatever the algorithm), its digests
/// right, its spec no newer than a later one's, and the head's the root
/// inventory itself (E058, E060, E061, E037, E040, E019, E066, E092, E103, E064).
pub fn version_inventories(dir: &Path, root: &Inventory, root_bytes: &[u8], done: &mut Digested) -> Check<()> {
    let mut newest_spec = "1.0";
    for (key, _) in sorted_versions(root)? {
        let folder = dir.join(key);
        let Ok(bytes) = std::fs::read(folder.join("inventory.json")) else { continue };
        let own: Inventory =
            serde_json::from_slice(&bytes).map_err(|e| ("E033", format!("{key}/inventory.json: {e}")))?;
        let algorithm = sidecar_holds(&folder, &own, &bytes).map_err(|(c, p)| (c, format!("{key}/{p}")))?;
        let problem = |code, what: String| Err((code, format!("{key}/inventory.json {what}")));
        if own.id != root.id {
            return problem("E037", format!("names the object {}, the root inventory {}", own.id, root.id));
        }
        if own.head != *key {
            return problem("E040", format!("has head {}", own.head));
        }
        if own.content_directory != root.content_directory {
            return problem("E019", "has another content folder than the root inventory".into());
        }
        let spec = if own.kind.contains("/1.1/") { "1.1" } else { "1.0" };
        if spec < newest_spec {
            return problem("E103", format!("is OCFL {spec}, older than an earlier version's {newest_spec}"));
        }
        newest_spec = spec;
        same_states(dir, root, &own, algorithm, done).map_err(|(c, p)| (c, format!("{key}/inventory.json {p}")))?;
        if *key == root.head && bytes != root_bytes {
            return problem("E064", "is not the root inventory, though it is the head's".into());
        }
    }
    Ok(())
}

/// The algorithm of `own`, whose sidecar in `folder` must hold its digest as
/// `DIGEST inventory.json`.
pub fn sidecar_holds(folder: &Path, own: &Inventory, bytes: &[u8]) -> Check<Algorithm> {
    let algorithm = match own.digest_algorithm.as_str() {
        "sha512" => Algorithm::Sha512,
        "sha256" => Algorithm::Sha256,
        other => return Err(("E025a", format!("inventory.json uses {other:?}"))),
    };
    let name = format!("inventory.json.{}", own.digest_algorithm);
    let text = std::fs::read_to_string(folder.join(&name)).map_err(|e| ("E058a", format!("{name}: {e}")))?;
    let words: Vec<&str> = text.split_whitespace().collect();
    if words.len() != 2 || words[1] != "inventory.json" {
        return Err(("E061", format!("{name} is not \"DIGEST inventory.json\"")));
    }
    let digests = crate::digest::of_bytes(bytes, &[algorithm]);
    if !digests.hex.get(&algorithm).is_some_and(|d| d.eq_ignore_ascii_case(words[0])) {
        return Err(("E060", format!("{name} does not hold inventory.json's digest")));
    }
    Ok(algorithm)
}

/// Each version `own` holds has the root's state (the same logical paths,
/// each the same content file), and `own`'s digests are right for the
/// content they name, whatever its algorithm.
fn same_states(dir: &Path, root: &Inventory, own: &Inventory, algorithm: Algorithm, done: &mut Digested) -> Check<()> {
    let contents = |inventory: &Inventory, version: &Version| -> BTreeMap<String, Option<String>> {
        let mut by_path = BTreeMap::new();
        for (digest, logicals) in &version.state {
            let content = inventory.manifest.get(digest).and_then(|p| p.first()).cloned();
            for logical in logicals {
                by_path.insert(logical.clone(), content.clone());
            }
        }
        by_path
    };
    for (key, version) in &own.versions {
        let Some(theirs) = root.versions.get(key) else {
            return Err(("E066", format!("names {key}, which the root inventory does not")));
        };
        if contents(own, version) != contents(root, theirs) {
            return Err(("E066", format!("gives {key} another state than the root inventory")));
        }
    }
    for (digest, paths) in &own.manifest {
        for path in paths {
            if !digest_at(dir, path, algorithm, done)?.eq_ignore_ascii_case(digest) {
                return Err(("E092", format!("lists {path} with digest {digest}, which its content does not have")));
            }
        }
    }
    Ok(())
}

/// The content digest pass of the root manifest, through the same cache.
pub fn root_digests(dir: &Path, inventory: &Inventory, algorithm: Algorithm, done: &mut Digested) -> Check<()> {
    for (digest, paths) in &inventory.manifest {
        for path in paths {
            if !digest_at(dir, path, algorithm, done)?.eq_ignore_ascii_case(digest) {
                return Err(("E092a", format!("{path} does not have the digest {digest} its manifest gives")));
            }
        }
    }
    Ok(())
}
