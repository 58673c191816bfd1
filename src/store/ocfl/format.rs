//! The OCFL 1.1 format as `ibi` reads and writes it (ARCHITECTURE.md, "OCFL
//! copies"): the inventory, the object's path under storage layout
//! `0003-hash-and-id-n-tuple-storage-layout`, and an inventory read only when
//! its sidecar holds its digest.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::Digest;

use crate::error::{Error, Result};

use super::files::RootFiles;

/// The base of an item's OCFL object id: the standard's resolver form.
pub const OBJECT_ID_BASE: &str = "http://urlib.net/";
/// The storage layout every OCFL tool reads.
pub const LAYOUT: &str = "0003-hash-and-id-n-tuple-storage-layout";
pub(crate) const INVENTORY_TYPE: &str = "https://ocfl.io/1.1/spec/#inventory";

/// An OCFL inventory (OCFL 1.1, section 3.5), as `ibi` writes and reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inventory {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(rename = "digestAlgorithm")]
    pub digest_algorithm: String,
    pub head: String,
    #[serde(rename = "contentDirectory", default, skip_serializing_if = "Option::is_none")]
    pub content_directory: Option<String>,
    pub manifest: BTreeMap<String, Vec<String>>,
    pub versions: BTreeMap<String, Version>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub fixity: BTreeMap<String, BTreeMap<String, Vec<String>>>,
}

/// One version of an inventory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Version {
    pub created: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<User>,
    pub state: BTreeMap<String, Vec<String>>,
}

/// Who made a version (OCFL 1.1, section 3.5.3.1): ibi names the
/// identification subsystem that holds the collection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
}

impl Inventory {
    pub(crate) fn new(id: &str) -> Inventory {
        Inventory {
            id: id.to_string(),
            kind: INVENTORY_TYPE.into(),
            digest_algorithm: "sha256".into(),
            head: String::new(),
            content_directory: None,
            manifest: BTreeMap::new(),
            versions: BTreeMap::new(),
            fixity: BTreeMap::new(),
        }
    }

    /// How many versions it names.
    pub fn head_number(&self) -> u32 {
        self.head.strip_prefix('v').and_then(|n| n.parse().ok()).unwrap_or(0)
    }

    /// The digest its version `n` holds for the logical path `path`.
    pub fn digest_at(&self, n: u32, path: &str) -> Option<&str> {
        let version = self.versions.get(&format!("v{n}"))?;
        version.state.iter().find(|(_, paths)| paths.iter().any(|p| p == path)).map(|(d, _)| d.as_str())
    }

    pub(crate) fn bytes(&self) -> Vec<u8> {
        let mut json = serde_json::to_vec_pretty(self).expect("an inventory serialises");
        json.push(b'\n');
        json
    }
}

/// The object root of `id` under a 0003 storage root (sha256, three tuples of
/// three): the digest's tuples, then the id percent-encoded (every byte but
/// `A-Z a-z 0-9 - _`, lower-case hex), cut at 100 characters and followed by
/// `-` and the digest when longer.
pub fn object_path(id: &str) -> PathBuf {
    PathBuf::from(object_rel(id))
}

/// `object_path` as a `/`-separated path relative to the storage root.
pub fn object_rel(id: &str) -> String {
    let digest = hex::encode(sha2::Sha256::digest(id.as_bytes()));
    let mut encoded = String::new();
    for byte in id.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' => encoded.push(byte as char),
            _ => encoded.push_str(&format!("%{byte:02x}")),
        }
    }
    if encoded.len() > 100 {
        encoded = format!("{}-{digest}", &encoded[..100]);
    }
    format!("{}/{}/{}/{encoded}", &digest[0..3], &digest[3..6], &digest[6..9])
}

/// The inventory in `dir`, when its sidecar holds its digest; `None` when
/// there is none or its sidecar does not match (written half).
pub fn read_inventory(dir: &Path) -> Result<Option<Inventory>> {
    let path = dir.join("inventory.json");
    let (Ok(bytes), Ok(sidecar)) = (std::fs::read(&path), std::fs::read(dir.join("inventory.json.sha256"))) else {
        return Ok(None);
    };
    inventory_if_sealed(&bytes, &sidecar, &path.display().to_string())
}

/// `read_inventory` of the folder `dir` (relative) of the root `files` reads.
pub fn read_inventory_in(files: &dyn RootFiles, dir: &str) -> Result<Option<Inventory>> {
    let at = |name: &str| if dir.is_empty() { name.to_string() } else { format!("{dir}/{name}") };
    let Some(bytes) = files.read_small(&at("inventory.json"))? else { return Ok(None) };
    let Some(sidecar) = files.read_small(&at("inventory.json.sha256"))? else { return Ok(None) };
    inventory_if_sealed(&bytes, &sidecar, &format!("{}/{}", files.place(), at("inventory.json")))
}

/// The inventory `bytes` hold when `sidecar` names their digest.
fn inventory_if_sealed(bytes: &[u8], sidecar: &[u8], what: &str) -> Result<Option<Inventory>> {
    let digest = hex::encode(sha2::Sha256::digest(bytes));
    if String::from_utf8_lossy(sidecar).split_whitespace().next() != Some(digest.as_str()) {
        return Ok(None);
    }
    serde_json::from_slice(bytes)
        .map(Some)
        .map_err(|e| Error::Data { what: what.to_string(), problem: format!("not an OCFL inventory: {e}") })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The path ocfl-py's 0003 layout gives (its `_id_to_path`, by hand).
    #[test]
    fn an_object_path_is_the_ids_digest_in_tuples_then_the_id_encoded() {
        let id = "http://urlib.net/sid.inpe.br/mtc-m18/2009/02.16.17.46";
        let digest = hex::encode(sha2::Sha256::digest(id.as_bytes()));
        let path = object_path(id);
        let parts: Vec<_> = path.iter().map(|p| p.to_string_lossy().into_owned()).collect();
        assert_eq!(parts[..3], [&digest[0..3], &digest[3..6], &digest[6..9]]);
        assert_eq!(parts[3], "http%3a%2f%2furlib%2enet%2fsid%2einpe%2ebr%2fmtc-m18%2f2009%2f02%2e16%2e17%2e46");
        let long = format!("http://urlib.net/{}", "a/".repeat(60));
        let last = object_path(&long).file_name().unwrap().to_string_lossy().into_owned();
        let long_digest = hex::encode(sha2::Sha256::digest(long.as_bytes()));
        assert!(last.len() == 100 + 1 + 64 && last.ends_with(&format!("-{long_digest}")), "{last}");
    }
}
