//! Planning `deposit --bag`: a foreign BagIt bag is deposited whole. Its payload,
//! every tag file and every tag folder are copied; every digest its manifests and
//! tagmanifests promise is checked while copying (md5, sha1, sha256, sha512);
//! ibi then writes bagit.txt, bag-info.txt and a manifest and tagmanifest in every
//! algorithm the bag used, plus sha256 when it had none. The tag files ibi
//! rewrites (bagit.txt, bag-info.txt, the manifests) are read once here and
//! checked against the bag's tagmanifests from the same bytes. Refused before
//! anything is copied: a non-bag, an unsupported version, a holey bag
//! (`fetch.txt`), an unsupported algorithm, unreadable or non-UTF-8 tag files,
//! and a bag that fails its own manifests.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::bag::history::HISTORY_LABELS;
use crate::bag::{manifest, BagInfo, ManifestEntry, TopLevel, BAGIT_TXT, BAG_INFO_TXT, DATA, FETCH_TXT};
use crate::digest::{self, Algorithm};
use crate::error::{Error, IoContext, Result};
use crate::fsx::{open_regular, Stamp, MAX_TAG_FILE};
use crate::ops::source::{add_source, PlannedFile, Refusals, SourcePlan};

/// A tag file ibi reads while planning and rewrites: its text and its stamp.
struct ReadTag {
    text: String,
    stamp: Stamp,
}

/// The top of a foreign bag, sorted out.
#[derive(Default)]
struct Top {
    manifests: BTreeSet<Algorithm>,
    tagmanifests: BTreeSet<Algorithm>,
    /// Other tag files and tag folders, kept as they are.
    kept: Vec<String>,
    /// bagit.txt, bag-info.txt and the manifests, as read.
    read: BTreeMap<String, ReadTag>,
}

fn refuse(bag: &Path, problem: impl std::fmt::Display) -> Error {
    Error::Invalid { what: "bag".into(), problem: format!("{} {problem}", bag.display()) }
}

/// Reads a tag file as UTF-8 text, never through a link, capped, with its stamp.
fn read_tag(bag: &Path, name: &str) -> std::result::Result<ReadTag, String> {
    let path = bag.join(name);
    let opened = open_regular(&path, false).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => format!("has no {name}"),
        _ => format!("has an unreadable {name} ({e})"),
    })?;
    if opened.meta.len() > MAX_TAG_FILE {
        return Err(format!("has a {name} larger than the {MAX_TAG_FILE} bytes ibi reads into memory"));
    }
    let mut bytes = Vec::new();
    opened
        .file
        .take(MAX_TAG_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("has an unreadable {name} ({e})"))?;
    let text = String::from_utf8(bytes).map_err(|_| format!("has a {name} that is not UTF-8"))?;
    Ok(ReadTag { text, stamp: Stamp::of(&opened.meta) })
}

/// Checks bagit.txt: a bag, of a version ibi reads, in UTF-8.
fn check_declaration(bag: &Path, declaration: &str) -> Result<()> {
    if declaration.starts_with('\u{feff}') {
        return Err(refuse(bag, format!("has a {BAGIT_TXT} that starts with a byte-order mark, which BagIt forbids")));
    }
    if let Some(why) = crate::bag::bagit_txt_layout_problem(declaration) {
        return Err(refuse(bag, format!("has a malformed {BAGIT_TXT} ({why})")));
    }
    let declared = BagInfo::parse(declaration)
        .map_err(|line| refuse(bag, format!("has a malformed {BAGIT_TXT} (line {line})")))?;
    let Some(version) = declared.first("BagIt-Version") else {
        return Err(refuse(bag, format!("has a {BAGIT_TXT} that declares no BagIt-Version")));
    };
    if !matches!(version, "0.97" | "1.0") {
        return Err(refuse(bag, format!("declares BagIt-Version {version:?}; ibi reads 0.97 and 1.0")));
    }
    match declared.first("Tag-File-Character-Encoding") {
        Some(e) if e.eq_ignore_ascii_case("UTF-8") => Ok(()),
        Some(other) => Err(refuse(bag, format!("declares Tag-File-Character-Encoding {other}; ibi reads UTF-8 bags"))),
        None => Err(refuse(bag, "declares no Tag-File-Character-Encoding (ibi reads UTF-8 bags)")),
    }
}

/// Sorts out the top of the bag and reads the tag files ibi rewrites.
fn read_top(bag: &Path) -> Result<Top> {
    let mut top = Top::default();
    let declaration = read_tag(bag, BAGIT_TXT).map_err(|e| {
        let needs = "a bag holds bagit.txt, a data/ folder and a manifest-<algorithm>.txt";
        refuse(bag, format!("is not a BagIt bag: it {e} ({needs})"))
    })?;
    check_declaration(bag, &declaration.text)?;
    top.read.insert(BAGIT_TXT.into(), declaration);
    let mut names: Vec<String> = Vec::new();
    for entry in fs::read_dir(bag).with_path("list", bag)? {
        let name = entry.with_path("list", bag)?.file_name();
        let name = name.to_str().ok_or_else(|| refuse(bag, format!("holds {name:?}, whose name is not UTF-8")))?;
        names.push(name.to_string());
    }
    names.sort();
    for name in names {
        match TopLevel::of(&name) {
            _ if name == FETCH_TXT => return Err(refuse(bag, "is a holey bag (fetch.txt): fetch its files first")),
            _ if name == DATA || name == BAGIT_TXT => {}
            _ if name == crate::bag::history::VERSIONS_DIR => {
                return Err(refuse(bag, format!("has a tag folder {name}/, which ibi keeps for an item's versions")))
            }
            TopLevel::UnsupportedManifest(a) => {
                return Err(refuse(bag, format!("has {name}, in algorithm {a:?}, which ibi does not support")))
            }
            TopLevel::Manifest(a) => {
                top.manifests.insert(a);
                top.read.insert(name.clone(), read_tag(bag, &name).map_err(|e| refuse(bag, e.to_string()))?);
            }
            TopLevel::TagManifest(a) => {
                top.tagmanifests.insert(a);
                top.read.insert(name.clone(), read_tag(bag, &name).map_err(|e| refuse(bag, e.to_string()))?);
            }
            TopLevel::TagFile if name == BAG_INFO_TXT => {
                let info = read_tag(bag, &name).map_err(|e| refuse(bag, e.to_string()))?;
                top.read.insert(name, info);
            }
            TopLevel::TagFile => top.kept.push(name),
        }
    }
    if top.manifests.is_empty() {
        return Err(refuse(bag, "has no payload manifest (manifest-<algorithm>.txt)"));
    }
    Ok(top)
}

/// Parses a manifest or tagmanifest of the bag that `read_top` read.
fn parse_read(bag: &Path, top: &Top, name: &str, algorithm: Algorithm) -> Result<Vec<ManifestEntry>> {
    let text = top.read.get(name).map(|t| t.text.as_str()).unwrap_or_default();
    let (entries, problems) = manifest::parse(text, algorithm.hex_len());
    match problems.first() {
        Some(p) => Err(refuse(bag, format!("has a bad {name} (line {}: {})", p.line, p.problem))),
        None => Ok(entries),
    }
}

/// Finds the planned file a manifest line names, read as RFC 8493 says or as a
/// writer that never encodes `%` meant it, when exactly one of the two exists.
fn find_listed<'a>(
    files: &'a mut BTreeMap<String, PlannedFile>,
    path: &str,
) -> std::result::Result<&'a mut PlannedFile, String> {
    let direct = files.contains_key(&manifest::nfc(path));
    let other = manifest::unencoded_alternative(path).filter(|p| files.contains_key(&manifest::nfc(p)));
    let key = match (direct, other) {
        (true, None) => manifest::nfc(path),
        (false, Some(alt)) => manifest::nfc(&alt),
        (true, Some(alt)) => return Err(format!("{path} could name {path} or {alt}; refusing to guess")),
        (false, None) => return Err(format!("{path} is missing")),
    };
    files.get_mut(&key).ok_or_else(|| format!("{path} is missing"))
}

/// Records what every payload manifest promises; each must list every payload file.
fn expect_payload(bag: &Path, top: &Top, payload: &mut BTreeMap<String, PlannedFile>) -> Result<()> {
    let invalid = |problem: String| Error::Data { what: format!("bag {}", bag.display()), problem };
    for &algorithm in &top.manifests {
        let name = crate::bag::manifest_name(algorithm);
        for entry in parse_read(bag, top, &name, algorithm)? {
            // RFC 8493 §2.1.3: a payload manifest lists payload files only.
            if !entry.path.starts_with("data/") {
                let why = format!("has a {name} that lists {}, outside data/, which BagIt forbids", entry.path);
                return Err(refuse(bag, why));
            }
            let file = find_listed(payload, &entry.path).map_err(|e| invalid(format!("{name}: {e}")))?;
            file.expected.insert(algorithm, entry.digest);
        }
        if let Some(unlisted) = payload.values().find(|f| !f.expected.contains_key(&algorithm)) {
            return Err(invalid(format!("{} is not in {name}", unlisted.path)));
        }
    }
    Ok(())
}

/// Checks every tagmanifest line: a tag file ibi rewrites is checked now, from the
/// bytes read; a kept tag file (or payload file) is checked while it is copied.
fn expect_tags(bag: &Path, top: &Top, kept: &mut BTreeMap<String, PlannedFile>) -> Result<()> {
    for &algorithm in &top.tagmanifests {
        let name = crate::bag::tagmanifest_name(algorithm);
        for entry in parse_read(bag, top, &name, algorithm)? {
            if let Some(read) = top.read.get(&entry.path) {
                let found = digest::of_bytes(read.text.as_bytes(), &[algorithm]);
                if found.get(algorithm) != Some(entry.digest.as_str()) {
                    return Err(refuse(bag, format!("fails its own {name}: {} does not match", entry.path)));
                }
                continue;
            }
            let file = find_listed(kept, &entry.path).map_err(|e| refuse(bag, format!("fails its own {name}: {e}")))?;
            file.expected.insert(algorithm, entry.digest);
        }
    }
    Ok(())
}

/// Walks `data/` and the kept tag files and folders, refusing what a bag cannot hold.
fn walk_bag(bag: &Path, top: &Top) -> Result<(SourcePlan, SourcePlan)> {
    let mut refusals = Refusals::default();
    let mut payload = SourcePlan::default();
    add_source(&mut payload, &bag.join(DATA), DATA, false, &mut refusals)?;
    let mut tags = SourcePlan::default();
    for name in &top.kept {
        add_source(&mut tags, &bag.join(name), name, false, &mut refusals)?;
    }
    refusals.into_result(true)?;
    Ok((payload, tags))
}

fn by_nfc(files: Vec<PlannedFile>) -> BTreeMap<String, PlannedFile> {
    files.into_iter().map(|f| (manifest::nfc(&f.path), f)).collect()
}

/// Plans a deposit of an existing BagIt bag, whole.
pub fn plan_bag(bag: &Path) -> Result<SourcePlan> {
    let top = read_top(bag)?;
    let (walked, tags) = walk_bag(bag, &top)?;
    let mut payload = by_nfc(walked.files);
    expect_payload(bag, &top, &mut payload)?;
    let mut kept = by_nfc(tags.files);
    kept.extend(payload);
    expect_tags(bag, &top, &mut kept)?;
    let mut warnings = bag_warnings(bag, &top)?;
    let (files, tag_files) = kept.into_values().partition(|f| f.path.starts_with("data/"));
    let info_text = top.read.get(BAG_INFO_TXT).map(|t| t.text.as_str()).unwrap_or_default();
    let info = BagInfo::parse(info_text)
        .map_err(|line| refuse(bag, format!("has a malformed {BAG_INFO_TXT} (line {line})")))?;
    warnings.extend(provenance_notes(&info));
    let algorithms = top.manifests.iter().chain(&top.tagmanifests).copied().filter(|a| *a != Algorithm::Sha256);
    let mut source_dirs: Vec<PathBuf> = vec![bag.to_path_buf()];
    source_dirs.extend(walked.source_dirs.into_iter().chain(tags.source_dirs));
    Ok(SourcePlan {
        files,
        tag_files,
        dirs: walked.dirs.into_iter().chain(tags.dirs).collect(),
        empty_dirs: walked.empty_dirs.into_iter().chain(tags.empty_dirs).collect(),
        algorithms: algorithms.collect::<BTreeSet<_>>().into_iter().collect(),
        read_stamps: top.read.iter().map(|(name, t)| (bag.join(name), t.stamp)).collect(),
        info: Some(info),
        originals: vec![bag.to_path_buf()],
        source_dirs,
        follow_symlinks: false,
        warnings,
    })
}

/// What the deposit changes of a source bag's bag-info, said to the user: every
/// other label is kept as the bag has it.
fn provenance_notes(info: &BagInfo) -> Vec<String> {
    let mut notes = Vec::new();
    if let Some(value) = info.first("External-Identifier") {
        notes.push(format!(
            "the bag's External-Identifier ({value}) is kept as {}: the item's own identifiers are its name and IBIp",
            crate::bag::SOURCE_IDENTIFIER
        ));
    }
    for label in HISTORY_LABELS {
        if info.first(label).is_some() {
            notes.push(format!("the bag's {label} is kept as Source-{label}: the item's history starts here"));
        }
    }
    notes
}

/// What the LoC BagIt conformance suite expects a validator to warn about: a
/// manifest listing one file twice (refused in a BagIt 1.0 bag), payload names
/// that differ only in letter case (one file on a case-insensitive disk),
/// system files, and lines written as `md5sum` writes them (`*` before the
/// path, or `./` at its start), which BagIt does not define.
fn bag_warnings(bag: &Path, top: &Top) -> Result<Vec<String>> {
    let declaration = top.read.get(BAGIT_TXT).map(|t| t.text.as_str()).unwrap_or_default();
    let version_1 = BagInfo::parse(declaration).is_ok_and(|d| d.first("BagIt-Version") == Some("1.0"));
    let mut warnings = Vec::new();
    for &algorithm in &top.manifests {
        let name = crate::bag::manifest_name(algorithm);
        let text = top.read.get(&name).map(|t| t.text.as_str()).unwrap_or_default();
        warnings.extend(checksum_tool_lines(&name, text));
        let (entries, _) = manifest::parse(text, algorithm.hex_len());
        let mut seen = BTreeSet::new();
        let mut folded: BTreeMap<String, String> = BTreeMap::new();
        for entry in &entries {
            if !seen.insert(entry.path.as_str()) {
                if version_1 {
                    return Err(refuse(
                        bag,
                        format!(
                            "has a {name} that lists {} more than once, which a BagIt 1.0 manifest may not",
                            entry.path
                        ),
                    ));
                }
                warnings.push(format!("{name} lists {} more than once", entry.path));
            }
            if let Some(other) = folded.insert(entry.path.to_lowercase(), entry.path.clone()) {
                if other != entry.path {
                    warnings.push(format!("{name} lists {other} and {}, which differ only in letter case", entry.path));
                }
            }
            let file = entry.path.rsplit('/').next().unwrap_or_default();
            if [".DS_Store", "Thumbs.db", "desktop.ini"].contains(&file) || file.starts_with("._") {
                warnings.push(format!("{} is a system file ({name} lists it)", entry.path));
            }
        }
    }
    Ok(warnings)
}

/// Lines of a manifest written as checksum tools write them, which BagIt
/// does not define: a `*` before the path (binary mode) or a path starting `./`.
fn checksum_tool_lines(name: &str, text: &str) -> Vec<String> {
    let mut warnings = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let Some((_, rest)) = line.split_once([' ', '\t']) else { continue };
        let path = rest.trim_start_matches([' ', '\t']);
        if rest.starts_with('*') {
            warnings.push(format!(
                "{name} line {}: {path} is marked '*' (a checksum tool's binary mode), which BagIt does not define",
                i + 1
            ));
        } else if path.starts_with("./") {
            warnings.push(format!("{name} line {}: {path} starts with ./, which BagIt paths do not", i + 1));
        }
    }
    warnings
}
