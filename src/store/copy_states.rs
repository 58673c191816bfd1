//! The copy-states facet (`CopyStates`): what one place holds of a batch of
//! names, as an audit asks it — each copy's identity (its tagmanifest's
//! digest) and the place's own record of the item — answered without a
//! request per item by a backend that can (a bucket: listings, and a page of
//! what this machine read before, signed, trusted only where the listing
//! shows each object unchanged since). Any other place is asked with
//! `Store::bag_identities` and `Records::records` (`copy_states_of`).

use crate::error::Result;
use crate::id::RepositoryName;
use crate::store::inventory::Status;
use crate::store::Store;

/// What a place's record of an item says: its status, and the identity of
/// each of its versions, the current one last.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RecordGist {
    pub status: Status,
    pub versions: Vec<String>,
}

/// What a place holds of one item.
#[derive(Debug)]
pub struct CopyState {
    /// The identity of the copy held (its tagmanifest's digest), or why none is held.
    pub identity: Result<String>,
    /// The place's own record of the item, when it keeps one.
    pub record: Option<RecordGist>,
    /// The identity was taken from what this machine read before (a page it
    /// signed), this run's listing showing the tagmanifest unchanged since,
    /// rather than read again.
    pub from_page: bool,
}

/// A place that tells what it holds of a batch of names without a request per item.
pub trait CopyStates: Send + Sync {
    /// The state of each of `names` (sorted), in that order.
    fn copy_states(&self, names: &[RepositoryName]) -> Result<Vec<CopyState>>;
}

/// The state of each of `names` at `store`: from its `CopyStates` facet when
/// it has one, else from its bags' tagmanifests and its records, read now.
pub fn copy_states_of(store: &dyn Store, names: &[RepositoryName]) -> Result<Vec<CopyState>> {
    if let Some(facet) = store.copy_states() {
        return facet.copy_states(names);
    }
    read_now(store, names)
}

/// The state of each of `names`, every identity and record read this run.
pub fn read_now(store: &dyn Store, names: &[RepositoryName]) -> Result<Vec<CopyState>> {
    let records = store.inventory().records(names)?;
    // Read from each bag's tagmanifest (no payload byte), not from the records,
    // so that a copy deleted or replaced behind ibi's back shows.
    let identities = store.bag_identities(names);
    Ok(identities
        .into_iter()
        .zip(records)
        .map(|(identity, record)| CopyState { identity, record: record.map(gist_of), from_page: false })
        .collect())
}

/// The gist of a record.
pub fn gist_of(record: crate::store::inventory::ItemRecord) -> RecordGist {
    RecordGist { status: record.status, versions: record.versions.into_iter().map(|v| v.digest).collect() }
}
