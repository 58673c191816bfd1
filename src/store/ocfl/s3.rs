//! An OCFL storage root under a prefix of a bucket (`ocfl:s3://BUCKET/PREFIX`):
//! its files are keys, read and written through the S3 backend's blocking
//! client. A bucket has no rename, so a version is written at the keys where
//! it stays, its inventory last, and named by the object's root inventory
//! only after (the root validates again once a killed run is rerun). One
//! writer at a time holds a lease kept by conditional writes, as a
//! collection's is, at `extensions/ibi-site/.ibi/lease` (inside an
//! extension's folder, where OCFL allows other files).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::time::SystemTime;

use object_store::path::Path as Key;

use crate::error::{Error, Result};
use crate::store::location::ObjectAddress;
use crate::store::s3::keys::Keys;
use crate::store::s3::objects::{Objects, MAX_STATE_BYTES};
use crate::store::{FileSource, LockWait};

use super::files::{version_number, RootFiles, RootWrites, Unfinished};

/// An OCFL storage root in a bucket.
pub struct S3Root {
    objects: Objects,
    address: ObjectAddress,
}

impl S3Root {
    pub fn connect(address: &ObjectAddress) -> Result<S3Root> {
        Ok(S3Root { objects: crate::store::s3::connect(address)?, address: address.clone() })
    }

    /// The key of `rel` (kept as written: OCFL's encoded ids hold `%`).
    fn key(&self, rel: &str) -> Result<Key> {
        let whole = match (self.address.prefix.is_empty(), rel.is_empty()) {
            (true, _) => rel.to_string(),
            (false, true) => self.address.prefix.clone(),
            (false, false) => format!("{}/{rel}", self.address.prefix),
        };
        Key::parse(&whole)
            .map_err(|e| Error::Invalid { what: format!("{}/{rel}", self.place()), problem: e.to_string() })
    }

    /// `key` relative to the folder `dir`'s key.
    fn relative(&self, dir: &Key, key: &Key) -> String {
        let (dir, key) = (dir.as_ref(), key.as_ref());
        match dir.is_empty() {
            true => key.to_string(),
            false => key.strip_prefix(dir).map(|k| k.trim_start_matches('/')).unwrap_or(key).to_string(),
        }
    }
}

impl RootFiles for S3Root {
    fn place(&self) -> String {
        format!("ocfl:{}", self.address)
    }

    fn read_small(&self, rel: &str) -> Result<Option<Vec<u8>>> {
        let key = self.key(rel)?;
        Ok(self.objects.run(self.objects.get_capped(&key, MAX_STATE_BYTES))?.map(|f| f.bytes.to_vec()))
    }

    fn open(&self, rel: &str) -> std::io::Result<(Box<dyn Read + Send + '_>, Option<SystemTime>)> {
        let key = self.key(rel).map_err(|e| std::io::Error::other(e.to_string()))?;
        Ok((Box::new(self.objects.reader(&key)?), None))
    }

    fn sizes_under(&self, dir: &str) -> Result<BTreeMap<String, u64>> {
        let prefix = self.key(dir)?;
        let listed = self.objects.run(self.objects.list_all(&prefix))?;
        Ok(listed.into_iter().map(|meta| (self.relative(&prefix, &meta.location), meta.size)).collect())
    }

    fn version_numbers(&self, object: &str) -> Result<Vec<u32>> {
        let prefix = self.key(object)?;
        let listed = self.objects.run(self.objects.list_level(&prefix))?;
        let mut numbers: Vec<u32> =
            listed.common_prefixes.iter().filter_map(|p| p.filename().and_then(version_number)).collect();
        numbers.sort_unstable();
        numbers.dedup();
        Ok(numbers)
    }

    fn object_dirs(&self) -> Result<Vec<String>> {
        let prefix = self.key("")?;
        let listed = self.objects.run(self.objects.list_all(&prefix))?;
        Ok(listed
            .into_iter()
            .map(|meta| self.relative(&prefix, &meta.location))
            .filter_map(|rel| rel.strip_suffix("/0=ocfl_object_1.1").map(str::to_string))
            .filter(|dir| dir.split('/').count() == 4)
            .collect())
    }
}

impl RootWrites for S3Root {
    fn stages(&self) -> bool {
        false
    }

    fn create_from(&self, rel: &str, reader: &mut (dyn Read + Send), origin: &Path) -> Result<String> {
        let key = self.key(rel)?;
        let from = FileSource { reader, origin, mtime: None, also: &[], progress: &|_| {} };
        let (digests, _) = crate::store::s3::upload::send(&self.objects, &key, from).map_err(Error::from)?;
        Ok(digests.sha256().to_string())
    }

    fn create(&self, rel: &str, bytes: &[u8]) -> Result<()> {
        self.replace(rel, bytes)
    }

    fn replace(&self, rel: &str, bytes: &[u8]) -> Result<()> {
        let key = self.key(rel)?;
        self.objects.run(self.objects.overwrite(&key, bytes.to_vec()))
    }

    fn replace_unsynced(&self, rel: &str, bytes: &[u8]) -> Result<()> {
        self.replace(rel, bytes)
    }

    fn remove(&self, rel: &str) -> Result<()> {
        let key = self.key(rel)?;
        self.objects.run(self.objects.delete(&key))
    }

    fn remove_tree(&self, rel: &str) -> Result<()> {
        let key = self.key(rel)?;
        self.objects.run(self.objects.delete_all(&key))
    }

    fn rename_dir(&self, from: &str, _to: &str) -> Result<()> {
        Err(Error::Refused { what: format!("{}/{from}", self.place()), why: "a bucket has no rename".into() })
    }

    fn sync(&self) -> Result<()> {
        // Every write returned once the store held it.
        Ok(())
    }

    fn lock(&self) -> Result<Box<dyn std::any::Any + Send>> {
        let keys = Keys::new(&format!("{}/extensions/ibi-site", self.address.prefix));
        let lease =
            crate::store::s3::lease::take(&self.objects, &keys, LockWait::For(std::time::Duration::from_secs(60)))?;
        Ok(Box::new(lease))
    }

    fn clear_object_leftovers(&self, _object: &str) -> Result<()> {
        // A key is written whole or not at all: nothing half written is left.
        Ok(())
    }

    fn prune_empty_dirs(&self, _dir: &str) -> Result<()> {
        // A bucket has no folders.
        Ok(())
    }

    fn clear_unfinished_root(&self, ours: &Unfinished) -> Result<bool> {
        Ok(self.sizes_under("")?.keys().all(|rel| ours.holds(rel)))
    }
}
