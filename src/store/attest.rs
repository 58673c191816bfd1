//! The store's own checksums (`StoreChecksums`), a facet of a backend whose
//! store verifies a SHA-256 sent with each upload and keeps it: S3 with
//! `x-amz-checksum-sha256` (AWS and SeaweedFS do; moto neither checks nor
//! keeps it). A store-attested check (`ops::attest`) compares these with an
//! item's manifests without reading the bytes: it catches an object replaced
//! behind ibi's back, since the replacement's checksum differs, but not a bit
//! flip inside the store's replica, which leaves the kept checksum as it was.

use crate::error::Result;
use crate::id::RepositoryName;

/// What a store keeps of each object's bytes.
pub trait StoreChecksums: Send + Sync {
    /// The SHA-256 (hex) the store keeps of one file of an item, from the
    /// checksum it verified when the file was uploaded; `None` when it keeps
    /// none of the whole file (none was sent, or a multipart upload's
    /// composite one). `Error::NotFound`-like errors when the file is gone.
    fn stored_sha256(&self, name: &RepositoryName, rel: &str) -> Result<Option<String>>;
}
