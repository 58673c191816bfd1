//! A local collection as a cosigning site (`store::cosign`): the checkpoints it
//! cosigned live in `.ibi/checkpoints/`, one note a collection (named by the
//! SHA-256 of its origin) beside the collection key it first saw sign it
//! (`.key`), written atomically; it cosigns with its own witness key.

use std::path::PathBuf;

use super::Collection;
use crate::checkpoint::{self, Head};
use crate::error::{Error, Result};
use crate::events::StoredEvent;
use crate::fsx;
use crate::store::cosign::Cosigner;
use crate::store::ledger::LedgerWriter;
use crate::store::Store;

impl Collection {
    fn checkpoint_path(&self, origin: &str, ext: &str) -> PathBuf {
        self.layout.control().join("checkpoints").join(format!("{}.{ext}", fsx::hash_bytes(origin.as_bytes())))
    }

    fn read_small(path: &PathBuf) -> Result<Option<String>> {
        match fsx::read_capped(path, 1 << 20) {
            Ok(bytes) => Ok(Some(String::from_utf8_lossy(&bytes).into_owned())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io("read", path, e)),
        }
    }
}

impl Cosigner for Collection {
    fn cosigner_key(&self) -> Result<Option<(String, String)>> {
        // A read-only handle reads the key it has; it makes none.
        let seed = match self.ledger().writer() {
            Some(writer) => writer.witness_seed()?,
            None => crate::store::witness_key::witness_seed(&self.layout.witness_key(), false)?,
        };
        let Some(seed) = seed else { return Ok(None) };
        let public = ed25519_dalek::SigningKey::from_bytes(&seed).verifying_key();
        let name = format!("ibi-site/{}", self.inventory().collection_id().unwrap_or_else(|| self.location()));
        Ok(Some((name, hex::encode(public.as_bytes()))))
    }

    fn seen_checkpoint(&self, origin: &str) -> Result<Option<String>> {
        Self::read_small(&self.checkpoint_path(origin, "note"))
    }

    fn cosign(&self, note: &str, collection_key: &str, events: &[StoredEvent]) -> Result<String> {
        let refused = |problem: String| Error::Data { what: format!("{}'s checkpoint", self.location()), problem };
        if self.read_only {
            return Err(refused("this handle is read-only: it cosigns nothing".into()));
        }
        let (Some(seed), Some((name, _))) = (LedgerWriter::witness_seed(self)?, self.cosigner_key()?) else {
            return Err(refused("it keeps no signing key".into()));
        };
        let next = checkpoint::open(note, collection_key)?;
        let key_path = self.checkpoint_path(&next.origin, "key");
        let pinned = Self::read_small(&key_path)?;
        if pinned.as_deref().is_some_and(|k| k.trim() != collection_key.trim()) {
            return Err(refused(format!(
                "{} was signed by key {collection_key}, not by the key {} that signed its checkpoints before",
                next.origin,
                pinned.unwrap_or_default().trim()
            )));
        }
        if let (Some(seen), Some(pinned)) = (self.seen_checkpoint(&next.origin)?, pinned.as_deref()) {
            let seen: Head = checkpoint::open(&seen, pinned.trim())?;
            checkpoint::extends(&seen, &next, events).map_err(refused)?;
        }
        let now = crate::id::Timestamp::now().whole_seconds() as u64;
        let cosigned = checkpoint::cosign(note, &name, &seed, now)?;
        fsx::create_dir_all_durable(&self.layout.control().join("checkpoints"))?;
        fsx::atomic_write(&key_path, collection_key.trim().as_bytes())?;
        fsx::atomic_write(&self.checkpoint_path(&next.origin, "note"), cosigned.as_bytes())?;
        Ok(cosigned)
    }
}
