//! The checksum algorithms BagIt manifests name (`manifest-<algorithm>.txt`):
//! md5, sha1, sha256 and sha512, hashed together in one pass over the bytes.
//! sha256 is always computed: it is ibi's own algorithm, the one every item has
//! and the one its identity digest uses. The hashing itself is RustCrypto's.

use std::collections::BTreeMap;
use std::fmt;

use digest::DynDigest;

/// A checksum algorithm a BagIt manifest may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub enum Algorithm {
    Md5,
    Sha1,
    Sha256,
    Sha512,
}

impl Algorithm {
    pub const ALL: [Algorithm; 4] = [Algorithm::Md5, Algorithm::Sha1, Algorithm::Sha256, Algorithm::Sha512];

    /// The name BagIt uses in manifest file names.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Md5 => "md5",
            Algorithm::Sha1 => "sha1",
            Algorithm::Sha256 => "sha256",
            Algorithm::Sha512 => "sha512",
        }
    }

    /// The algorithm a manifest file name uses, as RFC 8493 spells it (lower case).
    pub fn from_name(name: &str) -> Option<Algorithm> {
        Algorithm::ALL.into_iter().find(|a| a.name() == name)
    }

    /// How many hex digits a digest of this algorithm has.
    pub fn hex_len(self) -> usize {
        match self {
            Algorithm::Md5 => 32,
            Algorithm::Sha1 => 40,
            Algorithm::Sha256 => 64,
            Algorithm::Sha512 => 128,
        }
    }

    fn hasher(self) -> Box<dyn DynDigest + Send> {
        match self {
            Algorithm::Md5 => Box::new(md5::Md5::default()),
            Algorithm::Sha1 => Box::new(sha1::Sha1::default()),
            Algorithm::Sha256 => Box::new(sha2::Sha256::default()),
            Algorithm::Sha512 => Box::new(sha2::Sha512::default()),
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Lower-case hex digests of one stream, by algorithm, and how many bytes it held.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Digests {
    pub size: u64,
    pub hex: BTreeMap<Algorithm, String>,
}

impl Digests {
    /// The sha256 digest, which every `Hasher` computes.
    pub fn sha256(&self) -> &str {
        self.hex.get(&Algorithm::Sha256).map(String::as_str).unwrap_or_default()
    }

    pub fn get(&self, algorithm: Algorithm) -> Option<&str> {
        self.hex.get(&algorithm).map(String::as_str)
    }
}

/// Hashes one stream with sha256 and any other algorithms asked for.
pub struct Hasher {
    hashers: Vec<(Algorithm, Box<dyn DynDigest + Send>)>,
    size: u64,
}

impl Hasher {
    /// A hasher for sha256 and every algorithm in `also`.
    pub fn new(also: &[Algorithm]) -> Hasher {
        let mut algorithms: Vec<Algorithm> = also.iter().copied().chain([Algorithm::Sha256]).collect();
        algorithms.sort();
        algorithms.dedup();
        Hasher { hashers: algorithms.into_iter().map(|a| (a, a.hasher())).collect(), size: 0 }
    }

    pub fn update(&mut self, bytes: &[u8]) {
        for (_, hasher) in &mut self.hashers {
            hasher.update(bytes);
        }
        self.size += bytes.len() as u64;
    }

    pub fn finish(self) -> Digests {
        let hex = self.hashers.into_iter().map(|(a, h)| (a, to_hex(&h.finalize()))).collect();
        Digests { size: self.size, hex }
    }
}

/// Lower-case hex of a digest (at most 64 bytes, SHA-512's). `hex::encode`
/// collects one `char` at a time, which was 1.3% of a verify's CPU at 50,000
/// items; encoding into a buffer first is one copy.
pub fn to_hex(bytes: &[u8]) -> String {
    let mut buffer = [0u8; 128];
    let out = &mut buffer[..bytes.len() * 2];
    hex::encode_to_slice(bytes, out).expect("the buffer is twice the bytes");
    std::str::from_utf8(out).expect("hex is ASCII").to_string()
}

/// Digests of bytes in memory.
pub fn of_bytes(bytes: &[u8], also: &[Algorithm]) -> Digests {
    let mut hasher = Hasher::new(also);
    hasher.update(bytes);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Known answers for "abc" (FIPS 180-2 and RFC 1321 test vectors).
    #[test]
    fn known_answers_for_abc() {
        let d = of_bytes(b"abc", &Algorithm::ALL);
        assert_eq!(d.get(Algorithm::Md5), Some("900150983cd24fb0d6963f7d28e17f72"));
        assert_eq!(d.get(Algorithm::Sha1), Some("a9993e364706816aba3e25717850c26c9cd0d89d"));
        assert_eq!(d.sha256(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        assert!(d.get(Algorithm::Sha512).unwrap().starts_with("ddaf35a193617aba"));
        assert_eq!(d.size, 3);
        for a in Algorithm::ALL {
            assert_eq!(d.get(a).unwrap().len(), a.hex_len());
            assert_eq!(Algorithm::from_name(a.name()), Some(a));
        }
    }

    #[test]
    fn sha256_is_always_computed() {
        let d = of_bytes(b"", &[Algorithm::Md5]);
        assert_eq!(d.hex.len(), 2);
        assert_eq!(d.sha256(), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    }
}
