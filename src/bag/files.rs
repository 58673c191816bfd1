//! A bag's files as verification sees them (`BagFiles`): the bag root's kind,
//! every entry under it found without following a link, a capped read of a
//! regular file, and digests computed where the bytes are. `DirBag` is a bag in
//! a local folder; other backends (in memory, on a far server) provide their own,
//! so one verification serves them all.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use walkdir::WalkDir;

use crate::digest::{Algorithm, Digests};
use crate::fsx::{file_kind_name, hash_opened, open_beneath, read_opened, Beneath, RegularFile, MAX_TAG_FILE};

/// What an entry is, found without following links.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    Dir,
    File {
        size: u64,
    },
    /// A symlink, FIFO, socket or device: named, never followed or read.
    Other(&'static str),
}

/// One entry under the bag: its path relative to the bag (or, for a name that is
/// not UTF-8, `Err` with its lossy form) and its kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeEntry {
    pub rel: std::result::Result<String, String>,
    pub kind: FileKind,
}

/// A part of the bag that could not be listed: where (when known) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeError {
    pub rel: Option<String>,
    pub why: String,
}

/// A bag's files, wherever they are.
pub trait BagFiles: Sync {
    /// The bag itself: a folder, or what else stands there; `Err` when nothing does.
    fn root_kind(&self) -> io::Result<FileKind>;
    /// Every entry under the bag (folders included), sorted by path, never through a link.
    fn entries(&self) -> Vec<std::result::Result<TreeEntry, TreeError>>;
    /// A regular file's bytes, at most `MAX_TAG_FILE`, never through a link.
    fn read(&self, rel: &str) -> io::Result<Vec<u8>>;
    /// Digests of a regular file (sha256 and `also`), never through a link.
    fn digests(&self, rel: &str, also: &[Algorithm]) -> io::Result<Digests>;
}

/// A bag in a local folder.
pub struct DirBag {
    pub path: PathBuf,
    /// The folder the bag must lie beneath, and the bag's path inside it (a
    /// collection root and an item's four levels): files are then opened beneath
    /// the root, and a symlink anywhere on the way is refused, not followed.
    pub beneath: Option<(Beneath, String)>,
    /// Whether a folder between the root and the bag is a symlink, once asked.
    passes_a_link: std::sync::OnceLock<bool>,
}

impl DirBag {
    pub fn new(path: &Path) -> DirBag {
        DirBag { path: path.to_path_buf(), beneath: None, passes_a_link: Default::default() }
    }

    /// The bag at `rel_dir` under `root`, reached only beneath `root`.
    pub fn beneath(root: &Beneath, rel_dir: &str) -> DirBag {
        DirBag {
            path: root.path().join(rel_dir),
            beneath: Some((root.clone(), rel_dir.to_string())),
            passes_a_link: Default::default(),
        }
    }

    /// Whether a folder between the root and the bag is a symlink (or not a
    /// folder), asked once for the handle (a verify asks twice).
    fn passes_a_link(&self) -> bool {
        *self.passes_a_link.get_or_init(|| self.ask_passes_a_link())
    }

    fn ask_passes_a_link(&self) -> bool {
        let Some((root, rel_dir)) = &self.beneath else { return false };
        let mut at = root.path().to_path_buf();
        let parts: Vec<&str> = rel_dir.split('/').collect();
        parts[..parts.len().saturating_sub(1)].iter().any(|part| {
            at.push(part);
            !fs::symlink_metadata(&at).is_ok_and(|m| m.is_dir())
        })
    }
}

fn kind_of(file_type: &fs::FileType, meta: Option<fs::Metadata>) -> FileKind {
    if file_type.is_dir() {
        FileKind::Dir
    } else if file_type.is_file() {
        FileKind::File { size: meta.map_or(0, |m| m.len()) }
    } else {
        FileKind::Other(file_kind_name(file_type))
    }
}

impl BagFiles for DirBag {
    fn root_kind(&self) -> io::Result<FileKind> {
        if self.passes_a_link() {
            return Ok(FileKind::Other("symlink"));
        }
        fs::symlink_metadata(&self.path).map(|m| kind_of(&m.file_type(), Some(m)))
    }

    fn entries(&self) -> Vec<std::result::Result<TreeEntry, TreeError>> {
        if self.passes_a_link() {
            return vec![Err(TreeError {
                rel: None,
                why: "its place passes through a symlink (never followed)".into(),
            })];
        }
        let walk = WalkDir::new(&self.path).follow_links(false).follow_root_links(false).min_depth(1);
        walk.sort_by_file_name()
            .into_iter()
            .map(|entry| {
                let entry = entry.map_err(|e| TreeError {
                    rel: e.path().and_then(|p| p.strip_prefix(&self.path).ok()).map(|p| p.display().to_string()),
                    why: e.to_string(),
                })?;
                let rel = entry.path().strip_prefix(&self.path).unwrap_or(entry.path());
                let rel = rel.to_str().map(str::to_string).ok_or_else(|| rel.to_string_lossy().into_owned());
                let file_type = entry.file_type();
                let meta = if file_type.is_file() { entry.metadata().ok() } else { None };
                Ok(TreeEntry { rel, kind: kind_of(&file_type, meta) })
            })
            .collect()
    }

    fn read(&self, rel: &str) -> io::Result<Vec<u8>> {
        read_opened(self.open(rel)?, MAX_TAG_FILE)
    }

    fn digests(&self, rel: &str, also: &[Algorithm]) -> io::Result<Digests> {
        hash_opened(self.open(rel)?, also)
    }
}

impl DirBag {
    /// Opens a regular file of the bag: `rel` must be a plain relative path, and it is
    /// resolved beneath the bag's folder, never through a symlink (`fsx::open_beneath`).
    /// A file not found is looked for once more: a replacement swaps the folder and
    /// then deletes the old one, so a reader that opened the old folder just before
    /// finds the new one at its path (it sees the old item or the new, never neither).
    fn open(&self, rel: &str) -> io::Result<RegularFile> {
        crate::bag::manifest::check_path(rel)
            .map_err(|why| io::Error::new(io::ErrorKind::InvalidInput, format!("{rel}: {why}")))?;
        let open = || match &self.beneath {
            Some((root, rel_dir)) => root.open(&format!("{rel_dir}/{rel}")),
            None => open_beneath(&self.path, rel),
        };
        match open() {
            Err(e) if e.kind() == io::ErrorKind::NotFound => open(),
            opened => opened,
        }
    }
}

/// A folder inside a bag seen as a bag of its own (an earlier version under
/// `ibi-versions/<N>/`): paths are relative to the folder.
pub struct SubBag<'a> {
    pub outer: &'a dyn BagFiles,
    /// The folder's path in the outer bag, without a trailing slash.
    pub prefix: String,
}

impl SubBag<'_> {
    fn outer_path(&self, rel: &str) -> String {
        format!("{}/{rel}", self.prefix)
    }
}

impl BagFiles for SubBag<'_> {
    fn root_kind(&self) -> io::Result<FileKind> {
        let found = self.outer.entries().into_iter().flatten().find(|e| e.rel.as_deref() == Ok(self.prefix.as_str()));
        found
            .map(|e| e.kind)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("{} is absent", self.prefix)))
    }

    fn entries(&self) -> Vec<std::result::Result<TreeEntry, TreeError>> {
        let under = format!("{}/", self.prefix);
        let strip = |rel: &str| rel.strip_prefix(&under).map(str::to_string);
        self.outer
            .entries()
            .into_iter()
            .filter_map(|entry| match entry {
                Ok(TreeEntry { rel: Ok(rel), kind }) => strip(&rel).map(|rel| Ok(TreeEntry { rel: Ok(rel), kind })),
                Ok(TreeEntry { rel: Err(lossy), kind }) => {
                    strip(&lossy).map(|rel| Ok(TreeEntry { rel: Err(rel), kind }))
                }
                Err(TreeError { rel: Some(rel), why }) => strip(&rel).map(|rel| Err(TreeError { rel: Some(rel), why })),
                Err(TreeError { rel: None, why }) => Some(Err(TreeError { rel: None, why })),
            })
            .collect()
    }

    fn read(&self, rel: &str) -> io::Result<Vec<u8>> {
        self.outer.read(&self.outer_path(rel))
    }

    fn digests(&self, rel: &str, also: &[Algorithm]) -> io::Result<Digests> {
        self.outer.digests(&self.outer_path(rel), also)
    }
}
