//! Problems found in data (`Problem`): what `verify`, `copy` and `mirror`
//! report instead of failing. Each names the item, the file where there is
//! one, the kind, and a detail. Problems make a run exit 1, never 3.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum ProblemKind {
    /// A file listed in the manifest is not in the payload.
    Missing,
    /// A payload file is not listed in the manifest.
    Extra,
    DigestMismatch,
    /// A tag file (bagit.txt, bag-info.txt, a manifest) is absent, malformed or fails the tagmanifest.
    BadTagFile,
    OxumMismatch,
    /// The IBIp alias link is missing or points elsewhere.
    BrokenAlias,
    /// A manifest path that would leave the item.
    UnsafePath,
    /// A symlink or special file inside an item (never followed).
    SpecialFile,
    Unreadable,
    /// Something in the collection tree that is not an item.
    StrayEntry,
    /// bag-info's External-Identifier does not match the item's place.
    IdentifierMismatch,
    /// An item exists at the destination with a different identity digest.
    Conflict,
    /// Staging or trash left by an interrupted writer (the next writer clears it).
    Leftover,
    /// A damaged copy was found and repaired (`mirror --checksum`).
    Repaired,
    /// An item at its place that the collection's inventory does not know.
    Unknown,
    /// An item whose identity differs from the one its inventory records: changed
    /// behind ibi's back.
    Changed,
    /// An item whose last successful fixity check is older than the cycle, or
    /// that was never checked, or whose last check failed (`verify --age`).
    StaleFixity,
    /// The event log's hash chain is broken: an event was edited, removed,
    /// inserted or reordered.
    BrokenLog,
    /// The cluster behind the store keeps fewer replicas of an item's objects
    /// than they ask for (a volume server or data centre is down).
    Degraded,
}

impl ProblemKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ProblemKind::Missing => "missing",
            ProblemKind::Extra => "extra",
            ProblemKind::DigestMismatch => "digest mismatch",
            ProblemKind::BadTagFile => "bad tag file",
            ProblemKind::OxumMismatch => "oxum mismatch",
            ProblemKind::BrokenAlias => "broken alias",
            ProblemKind::UnsafePath => "unsafe path",
            ProblemKind::SpecialFile => "special file",
            ProblemKind::Unreadable => "unreadable",
            ProblemKind::StrayEntry => "stray entry",
            ProblemKind::IdentifierMismatch => "identifier mismatch",
            ProblemKind::Conflict => "conflict",
            ProblemKind::Leftover => "leftover",
            ProblemKind::Repaired => "repaired",
            ProblemKind::Unknown => "unknown item",
            ProblemKind::Changed => "changed",
            ProblemKind::StaleFixity => "stale fixity",
            ProblemKind::BrokenLog => "broken log",
            ProblemKind::Degraded => "degraded",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Problem {
    /// The item's repository name, or its path when it has none.
    pub item: String,
    /// The file concerned, relative to the item.
    pub file: Option<String>,
    pub kind: ProblemKind,
    pub detail: String,
}

impl Problem {
    pub fn new(item: &str, file: Option<&str>, kind: ProblemKind, detail: impl Into<String>) -> Self {
        Problem { item: item.to_string(), file: file.map(str::to_string), kind, detail: detail.into() }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.file {
            Some(file) => write!(f, "{}: {}: {:?}: {}", self.item, self.kind.as_str(), file, self.detail),
            None => write!(f, "{}: {}: {}", self.item, self.kind.as_str(), self.detail),
        }
    }
}
