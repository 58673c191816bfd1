//! An OCFL storage root on a far machine (`ocfl:HOST:PATH`), reached as a far
//! collection is (`ibi serve --stdio` over ssh, protocol version 9): each
//! `RootWrites` step is one request, answered by the far side's own
//! `LocalRoot`, so a version is built aside and renamed into its object there,
//! as on this machine. A file's bytes go in parts of `wire::CHUNK`, hashed
//! here as they go; they come back in ranges of 1 MiB.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::error::{Error, Result};
use crate::store::far::conn::Connection;
use crate::store::far::wire::{OcflCall, Reply, Request, CHUNK};
use crate::store::location::{Connect, FarAddress};
use crate::store::ocfl::files::{RootFiles, RootWrites, Unfinished};

/// The most a read asks for at once.
const RANGE: u64 = 1 << 20;

/// An OCFL storage root on a far machine.
pub struct FarRoot {
    conn: Connection,
    place: String,
}

impl FarRoot {
    pub fn open(address: &FarAddress, connect: &Connect) -> Result<FarRoot> {
        let conn = Connection::open(address, connect)?;
        if conn.version() < 9 {
            let problem = format!(
                "its ibi speaks the far protocol up to version {}; an OCFL site there needs version 9",
                conn.version()
            );
            return Err(Error::Connection { place: address.to_string(), problem });
        }
        let (reply, _) = conn.call(&Request::OcflOpen { path: PathBuf::from(&address.path) })?;
        match reply {
            Reply::Done => Ok(FarRoot { conn, place: format!("ocfl:{address}") }),
            other => Err(conn.unexpected(&other)),
        }
    }

    fn step(&self, call: OcflCall, payload: &[u8]) -> Result<(Reply, Vec<u8>)> {
        match self.conn.call_with(&Request::Ocfl(call), payload)? {
            (Reply::Error(e), _) => Err(e.into_error(&self.place)),
            answer => Ok(answer),
        }
    }

    fn done(&self, call: OcflCall, payload: &[u8]) -> Result<()> {
        match self.step(call, payload)? {
            (Reply::Done, _) => Ok(()),
            (other, _) => Err(self.conn.unexpected(&other)),
        }
    }

    fn bytes(&self, call: OcflCall) -> Result<Option<Vec<u8>>> {
        match self.step(call, &[])? {
            (Reply::OcflBytes(true), bytes) => Ok(Some(bytes)),
            (Reply::OcflBytes(false), _) => Ok(None),
            (other, _) => Err(self.conn.unexpected(&other)),
        }
    }
}

/// A far file read a range at a time.
struct FarReader<'a> {
    root: &'a FarRoot,
    rel: String,
    offset: u64,
    held: Vec<u8>,
    at: usize,
    ended: bool,
}

impl Read for FarReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.at == self.held.len() && !self.ended {
            let call = OcflCall::ReadRange { rel: self.rel.clone(), offset: self.offset, len: RANGE };
            let got = self.root.bytes(call).map_err(|e| std::io::Error::other(e.to_string()))?;
            let got = got.ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, self.rel.clone()))?;
            self.ended = (got.len() as u64) < RANGE;
            self.offset += got.len() as u64;
            (self.held, self.at) = (got, 0);
        }
        let n = buf.len().min(self.held.len() - self.at);
        buf[..n].copy_from_slice(&self.held[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

impl RootFiles for FarRoot {
    fn place(&self) -> String {
        self.place.clone()
    }

    fn read_small(&self, rel: &str) -> Result<Option<Vec<u8>>> {
        self.bytes(OcflCall::ReadSmall(rel.to_string()))
    }

    fn open(&self, rel: &str) -> std::io::Result<(Box<dyn Read + Send + '_>, Option<SystemTime>)> {
        let reader = FarReader { root: self, rel: rel.to_string(), offset: 0, held: Vec::new(), at: 0, ended: false };
        Ok((Box::new(reader), None))
    }

    fn sizes_under(&self, dir: &str) -> Result<BTreeMap<String, u64>> {
        match self.step(OcflCall::SizesUnder(dir.to_string()), &[])? {
            (Reply::OcflSizes(sizes), _) => Ok(sizes),
            (other, _) => Err(self.conn.unexpected(&other)),
        }
    }

    fn version_numbers(&self, object: &str) -> Result<Vec<u32>> {
        match self.step(OcflCall::VersionNumbers(object.to_string()), &[])? {
            (Reply::OcflNumbers(numbers), _) => Ok(numbers),
            (other, _) => Err(self.conn.unexpected(&other)),
        }
    }

    fn object_dirs(&self) -> Result<Vec<String>> {
        match self.step(OcflCall::ObjectDirs, &[])? {
            (Reply::OcflNames(names), _) => Ok(names),
            (other, _) => Err(self.conn.unexpected(&other)),
        }
    }
}

impl RootWrites for FarRoot {
    fn stages(&self) -> bool {
        true
    }

    fn create_from(&self, rel: &str, reader: &mut (dyn Read + Send), origin: &Path) -> Result<String> {
        let mut hasher = crate::digest::Hasher::new(&[]);
        let mut buf = vec![0u8; CHUNK];
        let mut first = true;
        loop {
            let n = crate::fsx::fill(reader, &mut buf).map_err(|e| Error::io("read", origin, e))?;
            hasher.update(&buf[..n]);
            if n > 0 || first {
                self.done(OcflCall::Append { rel: rel.to_string(), first }, &buf[..n])?;
            }
            first = false;
            if n < buf.len() {
                return Ok(hasher.finish().sha256().to_string());
            }
        }
    }

    fn create(&self, rel: &str, bytes: &[u8]) -> Result<()> {
        self.done(OcflCall::Create(rel.to_string()), bytes)
    }

    fn replace(&self, rel: &str, bytes: &[u8]) -> Result<()> {
        self.done(OcflCall::Replace(rel.to_string()), bytes)
    }

    fn replace_unsynced(&self, rel: &str, bytes: &[u8]) -> Result<()> {
        self.done(OcflCall::ReplaceUnsynced(rel.to_string()), bytes)
    }

    fn remove(&self, rel: &str) -> Result<()> {
        self.done(OcflCall::Remove(rel.to_string()), &[])
    }

    fn remove_tree(&self, rel: &str) -> Result<()> {
        self.done(OcflCall::RemoveTree(rel.to_string()), &[])
    }

    fn rename_dir(&self, from: &str, to: &str) -> Result<()> {
        self.done(OcflCall::RenameDir { from: from.to_string(), to: to.to_string() }, &[])
    }

    fn sync(&self) -> Result<()> {
        self.done(OcflCall::Sync, &[])
    }

    fn lock(&self) -> Result<Box<dyn std::any::Any + Send>> {
        // Held by the far session until it ends.
        self.done(OcflCall::Lock, &[])?;
        Ok(Box::new(()))
    }

    fn clear_object_leftovers(&self, object: &str) -> Result<()> {
        self.done(OcflCall::ClearObjectLeftovers(object.to_string()), &[])
    }

    fn prune_empty_dirs(&self, dir: &str) -> Result<()> {
        self.done(OcflCall::PruneEmptyDirs(dir.to_string()), &[])
    }

    fn clear_unfinished_root(&self, ours: &Unfinished) -> Result<bool> {
        match self.step(OcflCall::ClearUnfinishedRoot(ours.clone()), &[])? {
            (Reply::OcflYes(yes), _) => Ok(yes),
            (other, _) => Err(self.conn.unexpected(&other)),
        }
    }
}
