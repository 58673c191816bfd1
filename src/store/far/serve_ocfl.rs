//! The far server's side of an OCFL site kept on its machine (protocol
//! version 9): `OcflOpen` names the storage root, and each `Ocfl` step is one
//! `RootWrites` call on it (`store::ocfl::files::LocalRoot`), answered at
//! once. Paths are relative to the root and never leave it; a read-only
//! server answers reads only; the root's lock is held until the session ends.

use std::io::{Read, Seek, SeekFrom, Write};
use std::sync::{Mutex, OnceLock};

use crate::error::{Error, IoContext, Result};
use crate::store::far::wire::{OcflCall, Reply};
use crate::store::ocfl::files::{LocalRoot, RootFiles, RootWrites};

/// The session's OCFL root, once opened, and its lock while held.
#[derive(Default)]
pub struct OcflSession {
    root: OnceLock<LocalRoot>,
    lock: Mutex<Option<Box<dyn std::any::Any + Send>>>,
}

/// The most one `ReadRange` sends.
const MAX_RANGE: u64 = 4 << 20;

impl OcflSession {
    /// Opens the root at `path` (already admitted by the server's options).
    pub fn open(&self, path: &std::path::Path) -> Result<Reply> {
        let opened = LocalRoot::new(path);
        if self.root.set(opened).is_err() && self.root.get().is_some_and(|r| r.path("") != path) {
            let problem = "this session has another OCFL root open".to_string();
            return Err(Error::Invalid { what: path.display().to_string(), problem });
        }
        Ok(Reply::Done)
    }

    /// Runs one step, refusing a write on a read-only server.
    pub fn step(&self, call: OcflCall, payload: &[u8], read_only: bool) -> Result<(Reply, Vec<u8>)> {
        let root = self.root.get().ok_or_else(|| Error::Invalid {
            what: "request".into(),
            problem: "no OCFL root is open yet (OcflOpen)".into(),
        })?;
        if read_only && writes(&call) {
            let why = "this server is read-only (ibi serve --read-only)".into();
            return Err(Error::Refused { what: "writing an OCFL site".into(), why });
        }
        for rel in paths_of(&call) {
            inside(rel, !writes(&call))?;
        }
        let done = |r: Result<()>| r.map(|()| (Reply::Done, Vec::new()));
        match call {
            OcflCall::ReadSmall(rel) => Ok(match root.read_small(&rel)? {
                Some(bytes) => (Reply::OcflBytes(true), bytes),
                None => (Reply::OcflBytes(false), Vec::new()),
            }),
            OcflCall::ReadRange { rel, offset, len } => read_range(root, &rel, offset, len.min(MAX_RANGE)),
            OcflCall::SizesUnder(dir) => Ok((Reply::OcflSizes(root.sizes_under(&dir)?), Vec::new())),
            OcflCall::VersionNumbers(object) => Ok((Reply::OcflNumbers(root.version_numbers(&object)?), Vec::new())),
            OcflCall::ObjectDirs => Ok((Reply::OcflNames(root.object_dirs()?), Vec::new())),
            OcflCall::Append { rel, first } => done(append(root, &rel, first, payload)),
            OcflCall::Create(rel) => done(root.create(&rel, payload)),
            OcflCall::Replace(rel) => done(root.replace(&rel, payload)),
            OcflCall::ReplaceUnsynced(rel) => done(root.replace_unsynced(&rel, payload)),
            OcflCall::Remove(rel) => done(root.remove(&rel)),
            OcflCall::RemoveTree(rel) => done(root.remove_tree(&rel)),
            OcflCall::RenameDir { from, to } => done(root.rename_dir(&from, &to)),
            OcflCall::Sync => done(root.sync()),
            OcflCall::Lock => {
                let held = root.lock()?;
                *crate::sync::lock(&self.lock) = Some(held);
                Ok((Reply::Done, Vec::new()))
            }
            OcflCall::ClearObjectLeftovers(object) => done(root.clear_object_leftovers(&object)),
            OcflCall::PruneEmptyDirs(dir) => done(root.prune_empty_dirs(&dir)),
            OcflCall::ClearUnfinishedRoot(ours) => Ok((Reply::OcflYes(root.clear_unfinished_root(&ours)?), Vec::new())),
        }
    }
}

/// Whether a step changes the root.
fn writes(call: &OcflCall) -> bool {
    !matches!(
        call,
        OcflCall::ReadSmall(_)
            | OcflCall::ReadRange { .. }
            | OcflCall::SizesUnder(_)
            | OcflCall::VersionNumbers(_)
            | OcflCall::ObjectDirs
    )
}

/// The paths a step names.
fn paths_of(call: &OcflCall) -> Vec<&str> {
    match call {
        OcflCall::ReadSmall(rel)
        | OcflCall::ReadRange { rel, .. }
        | OcflCall::SizesUnder(rel)
        | OcflCall::VersionNumbers(rel)
        | OcflCall::Append { rel, .. }
        | OcflCall::Create(rel)
        | OcflCall::Replace(rel)
        | OcflCall::ReplaceUnsynced(rel)
        | OcflCall::Remove(rel)
        | OcflCall::RemoveTree(rel)
        | OcflCall::ClearObjectLeftovers(rel)
        | OcflCall::PruneEmptyDirs(rel) => vec![rel.as_str()],
        OcflCall::RenameDir { from, to } => vec![from.as_str(), to.as_str()],
        OcflCall::ObjectDirs | OcflCall::Sync | OcflCall::Lock | OcflCall::ClearUnfinishedRoot(_) => Vec::new(),
    }
}

/// Refuses a path that could leave the root: absolute, `.`, `..`, an empty
/// part, or a NUL; the root itself (`""`) only to read.
fn inside(rel: &str, reading: bool) -> Result<()> {
    let bad = rel.starts_with('/')
        || rel.contains('\0')
        || (rel.is_empty() && !reading)
        || (!rel.is_empty() && rel.split('/').any(|part| matches!(part, "" | "." | "..")));
    match bad {
        true => Err(Error::Invalid { what: format!("OCFL path {rel:?}"), problem: "it leaves the root".into() }),
        false => Ok(()),
    }
}

fn read_range(root: &LocalRoot, rel: &str, offset: u64, len: u64) -> Result<(Reply, Vec<u8>)> {
    let path = root.path(rel);
    let mut file = match crate::fsx::open_regular(&path, false) {
        Ok(opened) => opened.file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Reply::OcflBytes(false), Vec::new())),
        Err(e) => return Err(Error::io("open", &path, e)),
    };
    file.seek(SeekFrom::Start(offset)).with_path("seek", &path)?;
    let mut bytes = Vec::new();
    file.take(len).read_to_end(&mut bytes).with_path("read", &path)?;
    Ok((Reply::OcflBytes(true), bytes))
}

/// Adds `bytes` to the new file `rel` (made by the first part, which must
/// not find one there); durable with the root's next `Sync`.
fn append(root: &LocalRoot, rel: &str, first: bool, bytes: &[u8]) -> Result<()> {
    let path = root.path(rel);
    if first {
        let parent = crate::fsx::parent_dir(&path);
        std::fs::create_dir_all(parent).with_path("create", parent)?;
    }
    let mut options = std::fs::OpenOptions::new();
    match first {
        true => options.write(true).create_new(true),
        false => options.append(true),
    };
    let mut file = options.open(&path).with_path("open", &path)?;
    file.write_all(bytes).with_path("write", &path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A far client speaking the wire by hand cannot reach outside the root,
    /// nor write through a read-only server.
    #[test]
    fn a_step_outside_the_root_or_a_write_when_read_only_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir(&root).unwrap();
        let session = OcflSession::default();
        session.open(&root).unwrap();
        for rel in ["../escaped", "/tmp/escaped", "a/../../escaped", "a//b", "./a", ""] {
            let result = session.step(OcflCall::Create(rel.into()), b"x", false);
            assert!(matches!(result, Err(Error::Invalid { .. })), "{rel:?}: {:?}", result.map(|r| r.0));
        }
        assert!(session.step(OcflCall::RemoveTree(String::new()), &[], false).is_err(), "never the whole root");
        assert!(root.exists());
        let renamed = OcflCall::RenameDir { from: "a".into(), to: "../b".into() };
        assert!(session.step(renamed, &[], false).is_err());
        assert!(!dir.path().join("escaped").exists());
        let refused = session.step(OcflCall::Replace("ok".into()), b"x", true);
        assert!(matches!(refused, Err(Error::Refused { .. })));
        assert!(!root.join("ok").exists());
        session.step(OcflCall::Replace("ok".into()), b"x", false).unwrap();
        assert_eq!(std::fs::read(root.join("ok")).unwrap(), b"x");
        let (reply, bytes) =
            session.step(OcflCall::ReadRange { rel: "ok".into(), offset: 0, len: 9 }, &[], true).unwrap();
        assert!(matches!(reply, Reply::OcflBytes(true)) && bytes == b"x");
    }
}
