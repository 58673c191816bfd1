//! A bag in object storage as `BagFiles`: the objects under one folder key (an
//! item's, or a stage's), listed for real so that verify sees what the bucket
//! holds, with the folders the bag was staged with (an empty folder has no object).
//! Digests are computed while the bytes stream in.

use std::collections::BTreeSet;
use std::io::{self, Read};

use object_store::path::Path as Key;

use crate::bag::files::{FileKind, TreeEntry, TreeError};
use crate::bag::BagFiles;
use crate::digest::{Algorithm, Digests, Hasher};
use crate::fsx::MAX_TAG_FILE;
use crate::store::s3::keys::{key_under, KeyForm, Keys};
use crate::store::s3::objects::Objects;

/// The bag under `base`; `exists` says whether it is there at all (its marker, or its stage).
pub struct ObjectBag<'a> {
    pub objects: &'a Objects,
    pub base: Key,
    pub dirs: Vec<String>,
    pub exists: bool,
    /// The files and sizes, when this process wrote them (its own stage): no listing.
    pub known: Option<Vec<(String, u64)>>,
    /// Tag files this process wrote, by path: read without a request.
    pub cached: std::collections::HashMap<String, Vec<u8>>,
    /// Where the item's files are once a placement in flight ends, when `base` is
    /// its stage: a read that finds the stage gone (the placement ended meanwhile)
    /// reads from here, so a reader sees the old item or the new, never an error.
    pub settled: Option<Key>,
    /// How the file paths are spelled in the keys.
    pub form: KeyForm,
}

impl ObjectBag<'_> {
    /// The SHA-256 the store keeps of `rel` (`Objects::stored_sha256`), from
    /// `base`, or from `settled` if the stage is gone.
    pub fn stored_sha256(&self, rel: &str) -> crate::error::Result<Option<String>> {
        let at = |base: &Key| self.objects.run(self.objects.stored_sha256(&key_under(base, rel, self.form)));
        match (at(&self.base), &self.settled) {
            (Err(crate::error::Error::NotFound { .. }), Some(settled)) => at(settled),
            (result, _) => result,
        }
    }

    /// A reader of `rel`: from `base`, or from `settled` if the stage is gone.
    pub fn reader(&self, rel: &str) -> io::Result<super::objects::ObjectReader> {
        match (self.objects.reader(&key_under(&self.base, rel, self.form)), &self.settled) {
            (Err(e), Some(settled)) if e.kind() == io::ErrorKind::NotFound => {
                self.objects.reader(&key_under(settled, rel, self.form))
            }
            (result, _) => result,
        }
    }
}

/// Every folder above a file path (`data/a/b.txt` gives `data`, `data/a`).
fn parents(rel: &str) -> impl Iterator<Item = String> + '_ {
    rel.match_indices('/').map(move |(i, _)| rel[..i].to_string())
}

impl BagFiles for ObjectBag<'_> {
    fn root_kind(&self) -> io::Result<FileKind> {
        match self.exists {
            true => Ok(FileKind::Dir),
            false => Err(io::Error::new(io::ErrorKind::NotFound, format!("no item at {}", self.base))),
        }
    }

    fn entries(&self) -> Vec<Result<TreeEntry, TreeError>> {
        if !self.exists {
            return Vec::new();
        }
        let files: Vec<(String, u64)> = match &self.known {
            Some(known) => known.clone(),
            None => match self.objects.run(self.objects.list_all(&self.base)) {
                Ok(listed) => listed
                    .iter()
                    .filter_map(|m| Some((Keys::relative(&self.base, &m.location, self.form)?, m.size)))
                    .collect(),
                Err(e) => return vec![Err(TreeError { rel: None, why: e.to_string() })],
            },
        };
        let mut dirs: BTreeSet<String> = self.dirs.iter().cloned().collect();
        dirs.extend(files.iter().flat_map(|(rel, _)| parents(rel)));
        let mut entries: Vec<TreeEntry> = dirs
            .into_iter()
            .map(|d| TreeEntry { rel: Ok(d), kind: FileKind::Dir })
            .chain(files.into_iter().map(|(rel, size)| TreeEntry { rel: Ok(rel), kind: FileKind::File { size } }))
            .collect();
        entries.sort_by(|a, b| a.rel.cmp(&b.rel));
        entries.into_iter().map(Ok).collect()
    }

    fn read(&self, rel: &str) -> io::Result<Vec<u8>> {
        if let Some(bytes) = self.cached.get(rel) {
            return Ok(bytes.clone());
        }
        let mut bytes = Vec::new();
        self.reader(rel)?.take(MAX_TAG_FILE + 1).read_to_end(&mut bytes)?;
        if bytes.len() as u64 > MAX_TAG_FILE {
            return Err(io::Error::other(format!("{rel} is larger than {MAX_TAG_FILE} bytes")));
        }
        Ok(bytes)
    }

    fn digests(&self, rel: &str, also: &[Algorithm]) -> io::Result<Digests> {
        let mut reader = self.reader(rel)?;
        let mut hasher = Hasher::new(also);
        crate::fsx::with_read_buffer(|buf| loop {
            match reader.read(buf)? {
                0 => return Ok(hasher.finish()),
                n => hasher.update(&buf[..n]),
            }
        })
    }
}
