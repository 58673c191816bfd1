//! Items as BagIt bags (RFC 8493; ARCHITECTURE.md, "Items"): the names of a
//! bag's tag files, and writing the tag files of a bag being built. A bag has a
//! payload manifest and a tagmanifest for each of its algorithms (always sha256);
//! every tagmanifest covers every tag file. Verification is in `verify`.

pub mod files;
pub mod history;
pub mod info;
pub mod manifest;
pub mod verify;

use std::io;
use std::path::Path;

use crate::digest::{self, Algorithm, Digests};
use crate::error::Result;
use crate::fsx::{hash_file, write_new};
pub use files::{BagFiles, DirBag};
pub use info::{BagInfo, Oxum};
pub use manifest::ManifestEntry;
pub use verify::{verify_bag, verify_bag_using, verify_standalone, BagCheck, DigestSource};

pub const BAGIT_TXT: &str = "bagit.txt";
pub const BAG_INFO_TXT: &str = "bag-info.txt";
pub const MANIFEST: &str = "manifest-sha256.txt";
pub const TAGMANIFEST: &str = "tagmanifest-sha256.txt";
pub const DATA: &str = "data";
pub const FETCH_TXT: &str = "fetch.txt";
/// The bag-info label under which a deposited bag keeps its own External-Identifier values.
pub const SOURCE_IDENTIFIER: &str = "Source-External-Identifier";
const BAGIT_CONTENT: &str = "BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n";

/// The payload manifest of `algorithm`.
pub fn manifest_name(algorithm: Algorithm) -> String {
    format!("manifest-{algorithm}.txt")
}

/// The tag manifest of `algorithm`.
pub fn tagmanifest_name(algorithm: Algorithm) -> String {
    format!("tagmanifest-{algorithm}.txt")
}

/// What a file at the top of a bag is, by its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopLevel {
    Manifest(Algorithm),
    TagManifest(Algorithm),
    /// A manifest or tagmanifest of an algorithm ibi does not support.
    UnsupportedManifest(String),
    /// Any other tag file (bagit.txt, bag-info.txt, metadata of any kind).
    TagFile,
}

impl TopLevel {
    pub fn of(name: &str) -> TopLevel {
        let manifest = |prefix: &str| name.strip_prefix(prefix).and_then(|rest| rest.strip_suffix(".txt"));
        if let Some(algorithm) = manifest("tagmanifest-") {
            return Algorithm::from_name(algorithm)
                .map_or_else(|| TopLevel::UnsupportedManifest(algorithm.into()), TopLevel::TagManifest);
        }
        if let Some(algorithm) = manifest("manifest-") {
            return Algorithm::from_name(algorithm)
                .map_or_else(|| TopLevel::UnsupportedManifest(algorithm.into()), TopLevel::Manifest);
        }
        TopLevel::TagFile
    }
}

/// What goes into a new bag's tag files.
pub struct BagContents<'a> {
    pub info: &'a BagInfo,
    /// Each algorithm gets a manifest and a tagmanifest; sha256 always does.
    pub algorithms: &'a [Algorithm],
    /// Payload files (`data/…`) with their digests in every algorithm.
    pub payload: &'a [(String, Digests)],
    /// Tag files kept from a source bag (`mets.xml`, `metadata/dc.xml`), already in place.
    pub tag_files: &'a [(String, Digests)],
}

/// Manifest lines of `files` for `algorithm`.
fn entries(files: &[(String, Digests)], algorithm: Algorithm) -> Vec<ManifestEntry> {
    files
        .iter()
        .map(|(path, d)| ManifestEntry { digest: d.get(algorithm).unwrap_or_default().to_string(), path: path.clone() })
        .collect()
}

/// Writes bagit.txt, bag-info.txt, a payload manifest per algorithm, and a tagmanifest
/// per algorithm covering every other tag file, into `dir` (a staging folder: the
/// caller makes it durable before placing it); returns the bag's identity digest.
pub fn write_tag_files(dir: &Path, contents: &BagContents) -> Result<String> {
    write_tag_files_with(contents, &mut |name, bytes| write_new(&dir.join(name), bytes))
}

/// `write_tag_files` through `write(name, bytes)`, for a bag staged in any backend.
pub fn write_tag_files_with(
    contents: &BagContents,
    write: &mut dyn FnMut(&str, &[u8]) -> Result<()>,
) -> Result<String> {
    let mut algorithms = contents.algorithms.to_vec();
    algorithms.push(Algorithm::Sha256);
    algorithms.sort();
    algorithms.dedup();
    let mut written =
        vec![(BAGIT_TXT.to_string(), BAGIT_CONTENT.to_string()), (BAG_INFO_TXT.into(), contents.info.to_text())];
    for &algorithm in &algorithms {
        written.push((manifest_name(algorithm), manifest::format(&entries(contents.payload, algorithm))));
    }
    let mut tags = contents.tag_files.to_vec();
    for (name, text) in &written {
        write(name, text.as_bytes())?;
        tags.push((name.clone(), digest::of_bytes(text.as_bytes(), &algorithms)));
    }
    let mut identity = String::new();
    for &algorithm in &algorithms {
        let text = manifest::format(&entries(&tags, algorithm));
        write(&tagmanifest_name(algorithm), text.as_bytes())?;
        if algorithm == Algorithm::Sha256 {
            identity = digest::of_bytes(text.as_bytes(), &[]).sha256().to_string();
        }
    }
    Ok(identity)
}

/// The identity digest of a bag: the sha256 of its tagmanifest-sha256.txt.
pub fn identity_digest(dir: &Path) -> io::Result<String> {
    hash_file(&dir.join(TAGMANIFEST)).map(|(digest, _)| digest)
}

/// What is wrong with the layout of a bagit.txt, if anything: RFC 8493 §2.1.1
/// gives each of its lines as `LABEL: VALUE`, so whitespace before a label or
/// its colon is refused (the Library of Congress conformance suite's
/// `bagit-with-invalid-whitespace`), where bag-info.txt's looser reading would
/// take it.
pub fn bagit_txt_layout_problem(text: &str) -> Option<String> {
    for (i, raw) in text.lines().enumerate() {
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        if line.is_empty() {
            continue;
        }
        let Some((label, _)) = line.split_once(':') else { continue };
        if label.starts_with(char::is_whitespace) || label.ends_with(char::is_whitespace) {
            return Some(format!("line {}: whitespace around the label {:?}", i + 1, label.trim()));
        }
    }
    None
}
