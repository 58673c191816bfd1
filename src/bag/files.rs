//! A bag's files as verification sees them (`BagFiles`): the bag root's kind,
//! every entry under it found without following a link, a capped read of a
//! regular file, and digests computed where the bytes are. `DirBag` is a bag in
//! a local folder; other backends (in memory, on a far server) provide their own,
//! so one verification serves them all.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::digest::{Algorithm, Digests};
use crate::fsx::{file_kind_name, hash_opened, read_opened, Beneath, RegularFile, Sizes, MAX_TAG_FILE};

pub use crate::fsx::FileKind;

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
    /// `entries`, but a regular file's size may be left unasked (0): for a check
    /// that opens every file it reads and takes the size then. By default, `entries`.
    fn entries_unsized(&self) -> Vec<std::result::Result<TreeEntry, TreeError>> {
        self.entries()
    }
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
    /// The bag's folder, held open once found (never through a link): its
    /// entries are listed and its files opened relative to it.
    held: std::sync::Mutex<Option<Beneath>>,
}

impl DirBag {
    pub fn new(path: &Path) -> DirBag {
        DirBag { path: path.to_path_buf(), beneath: None, held: Default::default() }
    }

    /// The bag at `rel_dir` under `root`, reached only beneath `root`.
    pub fn beneath(root: &Beneath, rel_dir: &str) -> DirBag {
        DirBag {
            path: root.path().join(rel_dir),
            beneath: Some((root.clone(), rel_dir.to_string())),
            held: Default::default(),
        }
    }

    /// The bag's folder, held: found now, or as found before unless `again`.
    fn folder(&self, again: bool) -> io::Result<Beneath> {
        let mut held = crate::sync::lock(&self.held);
        if let (Some(folder), false) = (held.as_ref(), again) {
            return Ok(folder.clone());
        }
        let folder = match &self.beneath {
            Some((root, rel_dir)) => root.folder(rel_dir)?,
            None => Beneath::folder_at(&self.path)?,
        };
        *held = Some(folder.clone());
        Ok(folder)
    }

    /// Whether a folder between the root and the bag is a symlink (or not a
    /// folder): asked only when the bag's folder could not be opened.
    fn passes_a_link(&self) -> bool {
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
        match self.folder(false) {
            Ok(_) => Ok(FileKind::Dir),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(e),
            // Not a folder, or not reached without a link: say what stands there.
            Err(_) if self.passes_a_link() => Ok(FileKind::Other("symlink")),
            Err(_) => fs::symlink_metadata(&self.path).map(|m| kind_of(&m.file_type(), Some(m))),
        }
    }

    fn entries(&self) -> Vec<std::result::Result<TreeEntry, TreeError>> {
        self.entries_sized(Sizes::Asked)
    }

    fn entries_unsized(&self) -> Vec<std::result::Result<TreeEntry, TreeError>> {
        self.entries_sized(Sizes::NotAsked)
    }

    fn read(&self, rel: &str) -> io::Result<Vec<u8>> {
        read_opened(self.open(rel)?, MAX_TAG_FILE)
    }

    fn digests(&self, rel: &str, also: &[Algorithm]) -> io::Result<Digests> {
        hash_opened(self.open(rel)?, also)
    }
}

/// A walked entry as the bag sees it: a path that is not UTF-8 keeps its lossy form.
fn tree_entry(walked: crate::fsx::Walked) -> std::result::Result<TreeEntry, TreeError> {
    let text = |path: &Path| path.to_str().map(str::to_string).ok_or_else(|| path.to_string_lossy().into_owned());
    match walked {
        Ok((rel, kind)) => Ok(TreeEntry { rel: text(&rel), kind }),
        Err((rel, e)) => {
            let rel = rel.map(|rel| text(&rel).unwrap_or_else(|lossy| lossy));
            Err(TreeError { why: format!("{}: {e}", rel.as_deref().unwrap_or(".")), rel })
        }
    }
}

impl DirBag {
    fn entries_sized(&self, sizes: Sizes) -> Vec<std::result::Result<TreeEntry, TreeError>> {
        let folder = match self.folder(false) {
            Ok(folder) => folder,
            Err(_) if self.passes_a_link() => {
                let why = "its place passes through a symlink (never followed)".into();
                return vec![Err(TreeError { rel: None, why })];
            }
            Err(e) => return vec![Err(TreeError { rel: None, why: format!("{}: {e}", self.path.display()) })],
        };
        folder.walk_sized(sizes).into_iter().map(tree_entry).collect()
    }

    /// Opens a regular file of the bag: `rel` must be a plain relative path, and it is
    /// resolved beneath the bag's folder, never through a symlink (`fsx::Beneath::open`).
    /// A file not found is looked for once more in the folder found anew: a
    /// replacement swaps the folder and then deletes the old one, so a reader that
    /// held the old folder finds the new one at its path (it sees the old item or
    /// the new, never neither).
    fn open(&self, rel: &str) -> io::Result<RegularFile> {
        crate::bag::manifest::check_path(rel)
            .map_err(|why| io::Error::new(io::ErrorKind::InvalidInput, format!("{rel}: {why}")))?;
        match self.folder(false)?.open(rel) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => self.folder(true)?.open(rel),
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
        self.under_prefix(self.outer.entries())
    }

    fn entries_unsized(&self) -> Vec<std::result::Result<TreeEntry, TreeError>> {
        self.under_prefix(self.outer.entries_unsized())
    }

    fn read(&self, rel: &str) -> io::Result<Vec<u8>> {
        self.outer.read(&self.outer_path(rel))
    }

    fn digests(&self, rel: &str, also: &[Algorithm]) -> io::Result<Digests> {
        self.outer.digests(&self.outer_path(rel), also)
    }
}

impl SubBag<'_> {
    /// The outer bag's entries under the folder, relative to it.
    fn under_prefix(
        &self,
        outer: Vec<std::result::Result<TreeEntry, TreeError>>,
    ) -> Vec<std::result::Result<TreeEntry, TreeError>> {
        let under = format!("{}/", self.prefix);
        let strip = |rel: &str| rel.strip_prefix(&under).map(str::to_string);
        outer
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
}
