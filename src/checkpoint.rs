//! Checkpoints of a collection's event log and the sites' cosignatures, in the
//! C2SP forms (docs/formats.md, "Checkpoints"): a `tlog-checkpoint` note whose
//! origin names the collection (`ibi/<collection id>`), whose size is the
//! log's event count and whose root is the hash of its last event (the log is
//! a hash chain, not a Merkle tree: a site checks that one checkpoint extends
//! another by re-hashing the events between them), signed by the collection's
//! witness key as a `signed-note`; a site cosigns it with its own key in the
//! `tlog-cosignature` v1 form (Ed25519, a timestamp, key type 0x04). The note
//! syntax and checkpoint text are the `signed_note` and `tlog_tiles` crates'.

use ed25519_dalek::{Signer as _, SigningKey, Verifier as _, VerifyingKey};
use sha2::{Digest, Sha256};
use signed_note::{Note, Signer, Verifier, VerifierList};
use tlog_tiles::{Checkpoint, Hash};

use crate::error::{Error, Result};
use crate::events::StoredEvent;

/// The origin of a collection's checkpoints.
pub fn origin(collection_id: &str) -> String {
    format!("ibi/{collection_id}")
}

/// What a checkpoint says: its origin, the log's size, and its head hash (hex).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub origin: String,
    pub size: u64,
    pub head: String,
}

fn bad(what: &str, problem: impl Into<String>) -> Error {
    Error::Data { what: what.into(), problem: problem.into() }
}

/// An Ed25519 key in a signed note: type 0x01 for a signer's own signature,
/// 0x04 for a `tlog-cosignature` (which signs a timestamped message).
struct NoteKey {
    name: String,
    public: VerifyingKey,
    secret: Option<SigningKey>,
    cosigning: Option<u64>,
}

impl NoteKey {
    fn id(&self) -> u32 {
        let kind = if self.cosigning.is_some() { 0x04 } else { 0x01 };
        let mut hasher = Sha256::new();
        hasher.update(self.name.as_bytes());
        hasher.update(b"\n");
        hasher.update([kind]);
        hasher.update(self.public.as_bytes());
        u32::from_be_bytes(hasher.finalize()[..4].try_into().expect("four bytes"))
    }
}

/// The message a `tlog-cosignature` v1 signs at `time`.
fn cosigned_message(time: u64, text: &[u8]) -> Vec<u8> {
    [format!("cosignature/v1\ntime {time}\n").as_bytes(), text].concat()
}

impl Signer for NoteKey {
    fn name(&self) -> &str {
        &self.name
    }
    fn key_id(&self) -> u32 {
        self.id()
    }
    fn sign(&self, msg: &[u8]) -> std::result::Result<Vec<u8>, ed25519_dalek::SignatureError> {
        let secret = self.secret.as_ref().ok_or_else(ed25519_dalek::SignatureError::new)?;
        Ok(match self.cosigning {
            None => secret.sign(msg).to_vec(),
            Some(time) => [&time.to_be_bytes()[..], &secret.sign(&cosigned_message(time, msg)).to_bytes()].concat(),
        })
    }
}

impl Verifier for NoteKey {
    fn name(&self) -> &str {
        &self.name
    }
    fn key_id(&self) -> u32 {
        self.id()
    }
    fn verify(&self, msg: &[u8], sig: &[u8]) -> bool {
        let (message, sig) = match self.cosigning {
            None => (msg.to_vec(), sig),
            Some(_) if sig.len() == 72 => {
                let time = u64::from_be_bytes(sig[..8].try_into().expect("eight bytes"));
                (cosigned_message(time, msg), &sig[8..])
            }
            Some(_) => return false,
        };
        let Ok(sig) = <[u8; 64]>::try_from(sig) else { return false };
        self.public.verify(&message, &ed25519_dalek::Signature::from_bytes(&sig)).is_ok()
    }
}

/// The note of a checkpoint of `head`, signed by the collection's key.
pub fn sign(head: &Head, seed: &[u8; 32]) -> Result<String> {
    let secret = SigningKey::from_bytes(seed);
    let root: [u8; 32] = hex::decode(&head.head)
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| bad("checkpoint", format!("{:?} is not a hash", head.head)))?;
    let checkpoint = Checkpoint::new(&head.origin, head.size, Hash(root), "")
        .map_err(|e| bad("checkpoint", format!("{} cannot be a checkpoint's origin: {e}", head.origin)))?;
    let mut note = Note::new(&checkpoint.to_bytes(), &[]).map_err(|e| bad("checkpoint", format!("not a note: {e}")))?;
    let key =
        NoteKey { name: head.origin.clone(), public: secret.verifying_key(), secret: Some(secret), cosigning: None };
    note.add_sigs(&[&key]).map_err(|e| bad("checkpoint", format!("not signed: {e}")))?;
    Ok(String::from_utf8_lossy(&note.to_bytes()).into_owned())
}

fn public_key(hex_key: &str, what: &str) -> Result<VerifyingKey> {
    hex::decode(hex_key.trim())
        .ok()
        .and_then(|b| <[u8; 32]>::try_from(b).ok())
        .and_then(|b| VerifyingKey::from_bytes(&b).ok())
        .ok_or_else(|| bad(what, format!("{hex_key:?} is not an Ed25519 public key in hex")))
}

/// What a note signed by the collection's key (hex) says; refused when the
/// signature is not that key's or the text is no checkpoint.
pub fn open(note: &str, collection_key: &str) -> Result<Head> {
    let parsed = Note::from_bytes(note.as_bytes()).map_err(|e| bad("checkpoint", format!("not a signed note: {e}")))?;
    let checkpoint = Checkpoint::from_bytes(parsed.text()).map_err(|e| bad("checkpoint", e.to_string()))?;
    let key = NoteKey {
        name: checkpoint.origin().to_string(),
        public: public_key(collection_key, "collection key")?,
        secret: None,
        cosigning: None,
    };
    parsed
        .verify(&VerifierList::new(vec![Box::new(key)]))
        .map_err(|e| bad("checkpoint", format!("not signed by the collection's key: {e}")))?;
    Ok(Head {
        origin: checkpoint.origin().to_string(),
        size: checkpoint.size(),
        head: hex::encode(checkpoint.hash().0),
    })
}

/// Adds `site`'s cosignature (its key's seed; `time` in seconds) to `note`.
pub fn cosign(note: &str, site: &str, seed: &[u8; 32], time: u64) -> Result<String> {
    let mut parsed =
        Note::from_bytes(note.as_bytes()).map_err(|e| bad("checkpoint", format!("not a signed note: {e}")))?;
    let secret = SigningKey::from_bytes(seed);
    let key =
        NoteKey { name: site.into(), public: secret.verifying_key(), secret: Some(secret), cosigning: Some(time) };
    parsed.add_sigs(&[&key]).map_err(|e| bad("cosignature", format!("{site} cannot cosign: {e}")))?;
    Ok(String::from_utf8_lossy(&parsed.to_bytes()).into_owned())
}

/// Whether `note` carries a good cosignature of `site`, whose key is `site_key` (hex).
pub fn cosigned_by(note: &str, site: &str, site_key: &str) -> Result<bool> {
    let parsed = Note::from_bytes(note.as_bytes()).map_err(|e| bad("checkpoint", format!("not a signed note: {e}")))?;
    let key =
        NoteKey { name: site.into(), public: public_key(site_key, "site key")?, secret: None, cosigning: Some(0) };
    Ok(parsed.verify(&VerifierList::new(vec![Box::new(key)])).is_ok())
}

/// Checks that `next` extends `seen` through `events` (those after `seen`, in
/// order): each body hashes to its hash, each follows the one before, and the
/// last is `next`'s head. A checkpoint never goes back, and at one size never
/// names two heads.
pub fn extends(seen: &Head, next: &Head, events: &[StoredEvent]) -> std::result::Result<(), String> {
    if next.origin != seen.origin {
        return Err(format!("it is {}'s, not {}'s", next.origin, seen.origin));
    }
    if next.size < seen.size {
        return Err(format!(
            "it holds {} events, fewer than the {} cosigned before: the log was cut short",
            next.size, seen.size
        ));
    }
    let (mut seq, mut prev) = (seen.size, seen.head.clone());
    for stored in events {
        let event = stored.event()?;
        if crate::fsx::hash_bytes(stored.body.as_bytes()) != stored.hash {
            return Err(format!("event {}: its body does not hash to its hash", stored.seq));
        }
        if event.seq != seq + 1 || stored.seq != seq + 1 || event.prev != prev {
            return Err(format!("event {}: it does not follow event {seq} cosigned before", stored.seq));
        }
        (seq, prev) = (stored.seq, stored.hash.clone());
    }
    if seq != next.size || prev != next.head {
        return Err(format!(
            "its head (event {}, {}) is not where the events since the last one cosigned lead (event {seq}, {prev}): \
             the log before it was rewritten",
            next.size, next.head
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{Event, EventKind, GENESIS};

    fn log(n: u64) -> Vec<StoredEvent> {
        let mut prev = GENESIS.to_string();
        (1..=n)
            .map(|seq| {
                let stored = Event::new(EventKind::Deposit, None, "success", format!("{seq}")).seal(seq, &prev);
                prev = stored.hash.clone();
                stored
            })
            .collect()
    }

    #[test]
    fn a_checkpoint_is_signed_cosigned_and_extended() {
        let (collection, site) = ([7u8; 32], [9u8; 32]);
        let collection_key = hex::encode(SigningKey::from_bytes(&collection).verifying_key().as_bytes());
        let site_key = hex::encode(SigningKey::from_bytes(&site).verifying_key().as_bytes());
        let events = log(5);
        let head = |n: usize| Head { origin: origin("urn:uuid:x"), size: n as u64, head: events[n - 1].hash.clone() };
        let note = sign(&head(3), &collection).unwrap();
        assert!(note.starts_with("ibi/urn:uuid:x\n3\n"), "{note}");
        assert_eq!(open(&note, &collection_key).unwrap(), head(3));
        assert!(open(&note, &site_key).is_err(), "another key's signature is refused");
        let cosigned = cosign(&note, "site-a", &site, 1_800_000_000).unwrap();
        assert!(cosigned_by(&cosigned, "site-a", &site_key).unwrap());
        assert!(!cosigned_by(&cosigned, "site-a", &collection_key).unwrap());
        assert_eq!(open(&cosigned, &collection_key).unwrap(), head(3));
        assert_eq!(extends(&head(3), &head(5), &events[3..]), Ok(()));
        assert!(extends(&head(5), &head(3), &[]).unwrap_err().contains("cut short"));
        let mut forged = events[3..].to_vec();
        forged[0].body = forged[0].body.replace("\"4\"", "\"x\"");
        assert!(extends(&head(3), &head(5), &forged).is_err());
        assert!(extends(&head(3), &head(5), &events[4..]).is_err(), "a gap is refused");
    }
}
