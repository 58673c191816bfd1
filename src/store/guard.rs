//! Where a collection ends. A deposit source, a hot-folder inbox or a new root
//! must never lie inside a collection or contain one, and the two ends of a
//! copy, migrate or mirror must be neither the same collection nor nested.
//! Places are compared after resolving symlinks and by device and inode, so
//! a collection reached through a symlink or a bind mount is still itself.

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, IoContext, Result};
use crate::store::local::layout::{Layout, CONTROL_DIR};

/// Device and inode: what makes two paths the same place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    pub dev: u64,
    pub ino: u64,
}

impl Place {
    /// The place `path` names, following symlinks.
    pub fn of(path: &Path) -> io::Result<Place> {
        fs::metadata(path).map(|m| Place { dev: m.dev(), ino: m.ino() })
    }
}

/// Whether `dir` is the root of a collection (it holds `.ibi/collection.toml`).
pub fn is_collection_root(dir: &Path) -> bool {
    fs::symlink_metadata(Layout::new(dir).config()).is_ok_and(|m| m.is_file())
}

/// `path` with symlinks resolved, and every directory above it up to `/`.
fn ancestors(path: &Path) -> Result<Vec<PathBuf>> {
    let real = fs::canonicalize(path).with_path("resolve", path)?;
    Ok(real.ancestors().map(Path::to_path_buf).collect())
}

/// The collection that holds `path` (or is `path`), if any.
pub fn enclosing_collection(path: &Path) -> Result<Option<PathBuf>> {
    Ok(ancestors(path)?.into_iter().find(|dir| is_collection_root(dir)))
}

/// Whether `inner` is `outer` or lies below it, by device and inode.
pub fn within(inner: &Path, outer: &Path) -> Result<bool> {
    let outer = Place::of(outer).with_path("inspect", outer)?;
    for dir in ancestors(inner)? {
        if Place::of(&dir).is_ok_and(|p| p == outer) {
            return Ok(true);
        }
    }
    Ok(false)
}

fn refuse(what: &str, path: &Path, problem: String) -> Error {
    Error::Invalid { what: what.to_string(), problem: format!("{} {problem}", path.display()) }
}

/// Refuses a deposit source or inbox that lies inside a collection or contains
/// `collection_root`. (A source that contains another collection is refused while
/// it is walked, where a `.ibi` folder with a config is met.)
pub fn check_source(what: &str, path: &Path, collection_root: &Path) -> Result<()> {
    SourceGuard::new(what, collection_root)?.check(path)
}

/// `check_source` for many sources of one collection: the places of the
/// collection's folders are read once, and so are the folders the sources share
/// (a deposit of a million files of one folder asks about that folder once).
pub struct SourceGuard<'a> {
    what: &'a str,
    collection_root: &'a Path,
    /// The collection's root and every folder above it, resolved.
    above_collection: Vec<Place>,
    /// Folders met so far: resolved, and the collection that holds each, if any.
    folders: std::collections::HashMap<PathBuf, (PathBuf, Option<PathBuf>)>,
}

impl<'a> SourceGuard<'a> {
    pub fn new(what: &'a str, collection_root: &'a Path) -> Result<SourceGuard<'a>> {
        let mut above_collection = vec![Place::of(collection_root).with_path("inspect", collection_root)?];
        for dir in ancestors(collection_root)?.iter().skip(1) {
            above_collection.extend(Place::of(dir).ok());
        }
        Ok(SourceGuard { what, collection_root, above_collection, folders: Default::default() })
    }

    pub fn check(&mut self, path: &Path) -> Result<()> {
        let Ok(meta) = fs::symlink_metadata(path) else {
            return Ok(()); // planning reports a missing path with its own words
        };
        let (real, folder) = match (path.parent(), path.file_name(), meta.file_type().is_symlink()) {
            (Some(parent), Some(name), false) => {
                let parent = if parent.as_os_str().is_empty() { Path::new(".") } else { parent };
                let folder = self.folder(parent)?;
                (folder.0.join(name), Some(folder))
            }
            _ => (fs::canonicalize(path).with_path("resolve", path)?, None),
        };
        let enclosing = match folder {
            Some((_, above)) => {
                if meta.is_dir() && is_collection_root(&real) {
                    Some(real.clone())
                } else {
                    above
                }
            }
            None => ancestors(&real)?.into_iter().find(|dir| is_collection_root(dir)),
        };
        if let Some(root) = enclosing {
            let problem = format!("is inside the collection {}; refusing to touch it", root.display());
            return Err(refuse(self.what, path, problem));
        }
        // Not a link: the place is the one just inspected (one `statx` fewer).
        let place = match meta.file_type().is_symlink() {
            false => Ok(Place { dev: meta.dev(), ino: meta.ino() }),
            true => Place::of(&real),
        };
        if place.is_ok_and(|place| self.above_collection.contains(&place)) {
            let problem = format!("contains the collection {}; refusing to touch it", self.collection_root.display());
            return Err(refuse(self.what, path, problem));
        }
        Ok(())
    }

    /// A folder resolved, and the collection that holds it (or is it), if any.
    fn folder(&mut self, dir: &Path) -> Result<(PathBuf, Option<PathBuf>)> {
        if let Some(known) = self.folders.get(dir) {
            return Ok(known.clone());
        }
        let real = fs::canonicalize(dir).with_path("resolve", dir)?;
        let holder = real.ancestors().find(|d| is_collection_root(d)).map(Path::to_path_buf);
        self.folders.insert(dir.to_path_buf(), (real.clone(), holder.clone()));
        Ok((real, holder))
    }
}

/// Whether a folder met while walking a source is a collection's control folder.
pub fn is_control_dir_of_collection(dir: &Path) -> bool {
    dir.file_name().is_some_and(|n| n == CONTROL_DIR) && dir.parent().is_some_and(is_collection_root)
}

/// Refuses `ibi init ROOT` inside a collection or over a folder that holds anything.
pub fn check_new_root(root: &Path) -> Result<()> {
    if is_collection_root(root) {
        return Err(refuse("collection", root, "is already a collection".into()));
    }
    let parent = crate::fsx::parent_dir(root);
    if parent.exists() {
        if let Some(outer) = enclosing_collection(parent)? {
            return Err(refuse("collection", root, format!("would lie inside the collection {}", outer.display())));
        }
    }
    let occupied = fs::read_dir(root).is_ok_and(|mut entries| entries.next().is_some());
    if occupied {
        return Err(refuse(
            "collection",
            root,
            "is a folder that is not empty; a new collection needs an empty one".into(),
        ));
    }
    Ok(())
}

/// Refuses two ends of a transfer that are one collection (through any symlink or
/// bind mount) or nested one inside the other.
pub fn check_apart(src: &Path, dst: &Path) -> Result<()> {
    let same = Place::of(src).with_path("inspect", src)? == Place::of(dst).with_path("inspect", dst)?;
    if same {
        return Err(Error::Invalid {
            what: "collections".into(),
            problem: format!("SRC {} and DST {} are the same collection", src.display(), dst.display()),
        });
    }
    for (inner, outer) in [(src, dst), (dst, src)] {
        if within(inner, outer)? {
            return Err(Error::Invalid {
                what: "collections".into(),
                problem: format!("{} lies inside {}; collections must not be nested", inner.display(), outer.display()),
            });
        }
    }
    Ok(())
}
