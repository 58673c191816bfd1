//! The witness: a signed Merkle root (`merkle`) over every present item's
//! identity digest, made at the end of a whole or rolling verify, so that a third
//! party holding an earlier witness and an inclusion proof can tell that an item
//! was not swapped, even for a bag whose manifests agree with themselves. Leaves
//! are `NAME\nIDENTITY` in byte order of the names; ARCHITECTURE.md ("The
//! witness") says enough to recompute the root and check a proof elsewhere
//! (`tests/witness_check.py` does, in Python).

use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::id::Timestamp;
use crate::merkle::{self, Hash};
use crate::store::{items, Status, Store};

/// A signed statement of a collection's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Witness {
    /// The collection's id (a UUID URN) or, without one, its location.
    pub collection: String,
    /// When it was made (RFC 3339, UTC, to the second).
    pub date: String,
    pub items: u64,
    /// The Merkle root, hex.
    pub root: String,
    /// The Ed25519 public key, hex.
    pub public_key: String,
    /// The Ed25519 signature of `Witness::message`, hex.
    pub signature: String,
}

/// That one item is a leaf of a witness's tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proof {
    pub witness: Witness,
    pub name: String,
    pub identity: String,
    pub index: u64,
    /// The audit path, from the leaf up, hex.
    pub path: Vec<String>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex<const N: usize>(text: &str, what: &str) -> Result<[u8; N]> {
    let bytes: Option<Vec<u8>> =
        (0..text.len()).step_by(2).map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok()).collect();
    bytes
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| Error::Invalid { what: what.into(), problem: format!("{text:?} is not {N} bytes in hex") })
}

impl Witness {
    /// The signed text: `ibi-witness-v1`, collection, date, items and root, one a line.
    pub fn message(&self) -> String {
        format!("ibi-witness-v1\n{}\n{}\n{}\n{}\n", self.collection, self.date, self.items, self.root)
    }

    /// Whether the signature is the public key's over the message.
    pub fn signed(&self) -> Result<()> {
        let key = VerifyingKey::from_bytes(&unhex::<32>(&self.public_key, "public key")?)
            .map_err(|e| Error::Invalid { what: "public key".into(), problem: e.to_string() })?;
        let signature = Signature::from_bytes(&unhex::<64>(&self.signature, "signature")?);
        key.verify(self.message().as_bytes(), &signature).map_err(|_| Error::Data {
            what: "witness".into(),
            problem: "its signature does not match its public key and contents".into(),
        })
    }
}

/// The leaf of an item.
pub fn leaf(name: &str, identity: &str) -> Hash {
    merkle::leaf_hash(format!("{name}\n{identity}").as_bytes())
}

/// Every present item's (name, identity), in byte order of the names. The
/// identities are computed from the bags (the sha256 of each tagmanifest), not
/// taken from the inventory, so that an item swapped behind ibi's back changes the root.
fn leaves(store: &dyn Store) -> Result<Vec<(String, String)>> {
    let names: Vec<crate::id::RepositoryName> = if store.has_inventory() {
        let records = store.all_records().filter(|r| r.as_ref().map_or(true, |r| r.status == Status::Present));
        records.map(|r| r.map(|r| r.name)).collect::<Result<_>>()?
    } else {
        items(store).collect::<Result<_>>()?
    };
    use rayon::prelude::*;
    let mut pairs: Vec<(String, String)> = names
        .par_iter()
        .map(|name| Ok((name.to_string(), crate::store::identity_digest(store, name)?)))
        .collect::<Result<_>>()?;
    pairs.sort();
    Ok(pairs)
}

/// Makes, signs and keeps a new witness of `store`; `None` when the store keeps no key.
pub fn make(store: &dyn Store, now: Timestamp) -> Result<Option<Witness>> {
    let Some(seed) = store.witness_seed()? else { return Ok(None) };
    let key = SigningKey::from_bytes(&seed);
    let pairs = leaves(store)?;
    let hashes: Vec<Hash> = pairs.iter().map(|(n, i)| leaf(n, i)).collect();
    let mut witness = Witness {
        collection: store.collection_id().unwrap_or_else(|| store.location()),
        date: crate::store::inventory::fixity_date(now),
        items: pairs.len() as u64,
        root: hex(&merkle::root(&hashes)),
        public_key: hex(key.verifying_key().as_bytes()),
        signature: String::new(),
    };
    witness.signature = hex(&key.sign(witness.message().as_bytes()).to_bytes());
    let json = serde_json::to_string_pretty(&witness).expect("a witness serialises");
    store.keep_witness(&json)?;
    Ok(Some(witness))
}

/// The latest witness kept.
pub fn latest(store: &dyn Store) -> Result<Option<Witness>> {
    let Some(json) = store.latest_witness()? else { return Ok(None) };
    serde_json::from_str(&json).map(Some).map_err(|e| Error::CorruptState {
        path: format!("{}/.ibi/witness.json", store.location()).into(),
        problem: e.to_string(),
    })
}

/// The proof that `name` is in `witness`'s tree, from the collection as it is now;
/// refused when the collection no longer matches the witness.
pub fn prove(store: &dyn Store, witness: &Witness, name: &str) -> Result<Proof> {
    let pairs = leaves(store)?;
    let hashes: Vec<Hash> = pairs.iter().map(|(n, i)| leaf(n, i)).collect();
    if hex(&merkle::root(&hashes)) != witness.root {
        return Err(Error::Data {
            what: "witness".into(),
            problem: format!(
                "{} no longer matches its latest witness ({}): run `ibi verify`",
                store.location(),
                witness.date
            ),
        });
    }
    let index = pairs.iter().position(|(n, _)| n == name).ok_or_else(|| Error::NotFound {
        what: "item",
        name: name.to_string(),
        place: store.location().into(),
    })?;
    let path = merkle::proof(&hashes, index).unwrap_or_default().iter().map(|h| hex(h)).collect();
    Ok(Proof {
        witness: witness.clone(),
        name: name.to_string(),
        identity: pairs[index].1.clone(),
        index: index as u64,
        path,
    })
}

/// Checks a proof on its own: the witness's signature, then the path to its root.
pub fn check(proof: &Proof) -> Result<()> {
    proof.witness.signed()?;
    let root = unhex::<32>(&proof.witness.root, "root")?;
    let path: Vec<Hash> = proof.path.iter().map(|h| unhex::<32>(h, "proof path")).collect::<Result<_>>()?;
    let leaf = leaf(&proof.name, &proof.identity);
    if merkle::check(&leaf, proof.index, proof.witness.items, &path, &root) {
        return Ok(());
    }
    Err(Error::Data {
        what: "proof".into(),
        problem: format!(
            "{} with identity {} is not leaf {} of the witnessed tree",
            proof.name, proof.identity, proof.index
        ),
    })
}
