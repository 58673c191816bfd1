//! The cosigning facet (`Store::cosigner`): a site keeps the newest checkpoint
//! of each collection it serves (`crate::checkpoint`) and cosigns a newer one
//! only when it extends the one it kept, so that a collection whose log is cut
//! short or rewritten at home is found by the next audit against any site.

use crate::error::Result;
use crate::events::StoredEvent;

/// A place that keeps and cosigns the checkpoints of the collections it copies.
pub trait Cosigner {
    /// The name this place cosigns with and its public key (hex), once it has a key.
    fn cosigner_key(&self) -> Result<Option<(String, String)>>;
    /// The newest checkpoint of `origin` this place cosigned (the note, with the
    /// collection's signature and this place's cosignature), if any.
    fn seen_checkpoint(&self, origin: &str) -> Result<Option<String>>;
    /// Cosigns `note`, which `collection_key` (hex, the key this place first saw
    /// sign the origin's checkpoints) signed, when it extends the checkpoint
    /// kept through `events` (the log's events after it, in order); keeps it
    /// and returns it cosigned. Refused (`Error::Data`) when it does not.
    fn cosign(&self, note: &str, collection_key: &str, events: &[StoredEvent]) -> Result<String>;
}
