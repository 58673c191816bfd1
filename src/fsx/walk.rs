//! Listing a held folder's tree (`Beneath::walk`): every entry beneath it,
//! depth first with siblings in name order, found relative to descriptors and
//! never through a symlink. One `getdents` pass per folder gives each entry's
//! type; only regular files are asked for their size (`statx` of one name
//! relative to its folder), so a bag of five files costs a handful of calls
//! instead of a walk by path that resolves every folder again for each entry.
//! A caller that opens every file anyway (verify) lists without sizes
//! (`Sizes::NotAsked`): the listing's types alone, no call per file.

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};

use super::Beneath;

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

/// One entry of a walk: its path relative to the walked folder and its kind, or
/// a part that could not be listed (with its relative path when known).
pub type Walked = Result<(PathBuf, FileKind), (Option<PathBuf>, io::Error)>;

/// Folders nested deeper than this are reported, not entered: a hostile tree
/// must not exhaust descriptors or the stack.
const MAX_DEPTH: usize = 64;

/// Whether a walk asks each regular file for its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sizes {
    Asked,
    /// A regular file the folder listing names as one is listed with size 0,
    /// unasked: for a caller that opens every file and takes its size then.
    NotAsked,
}

impl Beneath {
    /// Every entry beneath the folder (folders included), depth first, siblings
    /// sorted by name, never through a symlink: a symlink is listed as one.
    pub fn walk(&self) -> Vec<Walked> {
        self.walk_sized(Sizes::Asked)
    }

    /// `walk`, with the files' sizes asked or not.
    pub fn walk_sized(&self, sizes: Sizes) -> Vec<Walked> {
        let mut found = Vec::new();
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        match self.with_fd(|fd| Ok(rustix::fs::openat(fd, ".", flags, Mode::empty())?)) {
            Ok(dir) => walk_into(dir, (Path::new(""), sizes), 0, &mut found),
            Err(e) => found.push(Err((None, e))),
        }
        found
    }
}

fn walk_into(dir: OwnedFd, (prefix, sizes): (&Path, Sizes), depth: usize, found: &mut Vec<Walked>) {
    let mut dir = match Dir::new(dir) {
        Ok(dir) => dir,
        Err(e) => return found.push(Err((Some(prefix.to_path_buf()), e.into()))),
    };
    let mut names: Vec<(Vec<u8>, FileType)> = Vec::new();
    while let Some(entry) = dir.read() {
        match entry {
            Ok(entry) => match entry.file_name().to_bytes() {
                b"." | b".." => {}
                name => names.push((name.to_vec(), entry.file_type())),
            },
            Err(e) => {
                found.push(Err((Some(prefix.to_path_buf()), e.into())));
                break;
            }
        }
    }
    names.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let Ok(fd) = dir.fd() else { return };
    for (name, file_type) in names {
        let rel = prefix.join(OsStr::from_bytes(&name));
        let kind = match kind_at(fd, &name, file_type, sizes) {
            Ok(kind) => kind,
            Err(e) => {
                found.push(Err((Some(rel), e)));
                continue;
            }
        };
        found.push(Ok((rel.clone(), kind)));
        if kind == FileKind::Dir {
            enter(fd, &name, (rel, sizes), depth + 1, found);
        }
    }
}

/// Walks the folder `name` inside `fd`, opened without following a link.
fn enter(fd: BorrowedFd<'_>, name: &[u8], (rel, sizes): (PathBuf, Sizes), depth: usize, found: &mut Vec<Walked>) {
    if depth >= MAX_DEPTH {
        let why = format!("folders nest deeper than {MAX_DEPTH} levels here; not entered");
        return found.push(Err((Some(rel), io::Error::new(io::ErrorKind::InvalidData, why))));
    }
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
    match rustix::fs::openat(fd, OsStr::from_bytes(name), flags, Mode::empty()) {
        Ok(sub) => walk_into(sub, (&rel, sizes), depth, found),
        Err(e) => found.push(Err((Some(rel), e.into()))),
    }
}

/// The kind of `name` in `fd`: from the folder listing, and for a regular file
/// whose size is asked (or a file system that does not say) from a `statx`
/// that does not follow.
fn kind_at(fd: BorrowedFd<'_>, name: &[u8], listed: FileType, sizes: Sizes) -> io::Result<FileKind> {
    let asked = match listed {
        FileType::RegularFile if sizes == Sizes::NotAsked => (listed, 0),
        FileType::RegularFile | FileType::Unknown => {
            let stat = rustix::fs::statat(fd.as_fd(), OsStr::from_bytes(name), AtFlags::SYMLINK_NOFOLLOW)?;
            (FileType::from_raw_mode(stat.st_mode), stat.st_size as u64)
        }
        other => (other, 0),
    };
    Ok(match asked {
        (FileType::Directory, _) => FileKind::Dir,
        (FileType::RegularFile, size) => FileKind::File { size },
        (FileType::Symlink, _) => FileKind::Other("symlink"),
        (FileType::Fifo, _) => FileKind::Other("FIFO"),
        (FileType::Socket, _) => FileKind::Other("socket"),
        (FileType::CharacterDevice | FileType::BlockDevice, _) => FileKind::Other("device"),
        (FileType::Unknown, _) => FileKind::Other("special file"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn walked(root: &Path) -> Vec<(String, FileKind)> {
        let folder = Beneath::folder_at(root).unwrap();
        folder.walk().into_iter().map(|w| w.map(|(p, k)| (p.display().to_string(), k)).unwrap()).collect()
    }

    /// Depth first, siblings in byte order (as `walkdir` sorted by name), sizes
    /// of regular files, and a symlink to a folder listed as a symlink, not entered.
    #[test]
    fn a_walk_lists_in_name_order_and_never_enters_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("data/sub")).unwrap();
        std::fs::write(root.join("data/b.txt"), "bb").unwrap();
        std::fs::write(root.join("data/sub/a"), "a").unwrap();
        std::fs::write(root.join("bagit.txt"), "x").unwrap();
        std::fs::write(root.join("Z"), "").unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("data/link")).unwrap();
        let expected = [
            ("Z", FileKind::File { size: 0 }),
            ("bagit.txt", FileKind::File { size: 1 }),
            ("data", FileKind::Dir),
            ("data/b.txt", FileKind::File { size: 2 }),
            ("data/link", FileKind::Other("symlink")),
            ("data/sub", FileKind::Dir),
            ("data/sub/a", FileKind::File { size: 1 }),
        ];
        let expected: Vec<(String, FileKind)> = expected.iter().map(|(p, k)| (p.to_string(), *k)).collect();
        assert_eq!(walked(root), expected);
    }

    /// Unasked, a regular file is listed with size 0 and every other entry as
    /// an asked walk lists it.
    #[test]
    fn a_walk_without_sizes_lists_the_same_entries() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("data/sub")).unwrap();
        std::fs::write(dir.path().join("data/sub/a"), "abc").unwrap();
        std::os::unix::fs::symlink("data", dir.path().join("link")).unwrap();
        let folder = Beneath::folder_at(dir.path()).unwrap();
        let size_dropped = |kind| match kind {
            FileKind::File { .. } => FileKind::File { size: 0 },
            other => other,
        };
        let asked: Vec<_> = folder.walk().into_iter().map(|w| w.map(|(p, k)| (p, size_dropped(k))).unwrap()).collect();
        let not_asked: Vec<_> = folder.walk_sized(Sizes::NotAsked).into_iter().map(Result::unwrap).collect();
        assert_eq!(not_asked, asked);
        assert!(asked.contains(&(PathBuf::from("data/sub/a"), FileKind::File { size: 0 })), "{asked:?}");
        assert_eq!(folder.walk().iter().filter(|w| matches!(w, Ok((_, FileKind::File { size: 3 })))).count(), 1);
    }

    /// A FIFO is named, never opened (the walk would hang on it otherwise).
    #[test]
    fn a_fifo_is_listed_as_one() {
        let dir = tempfile::tempdir().unwrap();
        rustix::fs::mkfifoat(rustix::fs::CWD, dir.path().join("pipe"), Mode::from_raw_mode(0o600)).unwrap();
        assert_eq!(walked(dir.path()), vec![("pipe".to_string(), FileKind::Other("FIFO"))]);
    }

    /// Folders nested past the limit are reported at the limit, not entered, so
    /// a hostile tree cannot exhaust descriptors or the stack.
    #[test]
    fn folders_nested_past_the_limit_are_reported_not_entered() {
        let dir = tempfile::tempdir().unwrap();
        let deep: PathBuf = std::iter::repeat_n("d", MAX_DEPTH + 5).collect();
        std::fs::create_dir_all(dir.path().join(&deep)).unwrap();
        let folder = Beneath::folder_at(dir.path()).unwrap();
        let found = folder.walk();
        let listed = found.iter().filter(|w| w.is_ok()).count();
        assert_eq!(listed, MAX_DEPTH, "folders listed down to the limit");
        let refused: Vec<_> = found.iter().filter_map(|w| w.as_ref().err()).collect();
        assert_eq!(refused.len(), 1, "{found:?}");
        assert_eq!(refused[0].0.as_ref().map(|p| p.components().count()), Some(MAX_DEPTH));
    }
}
