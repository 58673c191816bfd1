//! The records facet (`Store::inventory`): what the collection records of
//! every item it holds or held (its inventory), read by name, in pages or
//! streamed. Kept apart from the core `Store`, whose calls reach the items
//! themselves.

use crate::error::Result;
use crate::id::RepositoryName;
use crate::store::inventory::{self, ItemRecord, RecordSummary, Status};

/// The collection's records of its items.
pub trait Records: Send + Sync {
    /// Whether the collection keeps an inventory yet (an older one gets it on its first write).
    fn has_inventory(&self) -> bool;
    /// The records of `names`, in the order asked; `None` for a name never held.
    fn records(&self, names: &[RepositoryName]) -> Result<Vec<Option<ItemRecord>>>;
    /// The status and current identity digest recorded of each of `names`, in
    /// the order asked (`None` where no record is kept): what verify compares
    /// each item with. By default from `records`; a backend that can reads the
    /// two fields alone (local).
    fn recorded_states(&self, names: &[RepositoryName]) -> Result<Vec<Option<(Status, String)>>> {
        let records = self.records(names)?;
        Ok(records.into_iter().map(|record| record.map(|r| (r.status, r.current().digest.clone()))).collect())
    }
    /// Every record, in `RepositoryName` order, streaming.
    fn all_records(&self) -> Box<dyn Iterator<Item = Result<ItemRecord>> + Send + '_>;
    /// The name of every record (any status), streaming; a backend that can list
    /// names without reading each record (S3) does.
    fn record_names(&self) -> Box<dyn Iterator<Item = Result<RepositoryName>> + Send + '_> {
        Box::new(self.all_records().map(|record| record.map(|r| r.name)))
    }
    /// Every record's summary (name, IBIp, status, identity), streaming in name
    /// order; a backend that can read them without decoding whole records (the
    /// local inventory) does.
    fn record_summaries(&self) -> Box<dyn Iterator<Item = Result<RecordSummary>> + Send + '_> {
        Box::new(self.all_records().map(|record| record.map(RecordSummary::from)))
    }
    /// The name of every present item (`Status::Present`), streaming in
    /// `RepositoryName` order; a backend that can select them without decoding
    /// each record (the local inventory) does.
    fn present_names(&self) -> Box<dyn Iterator<Item = Result<RepositoryName>> + Send + '_> {
        Box::new(self.all_records().filter_map(|record| match record {
            Ok(r) => (r.status == inventory::Status::Present).then_some(Ok(r.name)),
            Err(e) => Some(Err(e)),
        }))
    }

    /// The newest date among the names under `prefix` that the collection holds
    /// or held (its records): what a minting collection learns from a copy at
    /// first contact. By default from `record_names`; the local inventory
    /// answers from its index.
    fn newest_name_of(&self, prefix: &crate::id::Prefix) -> Result<Option<crate::id::Timestamp>> {
        let mut newest = None;
        for name in self.record_names() {
            let name = name?;
            if name.prefix() == prefix {
                newest = newest.max(Some(name.date()));
            }
        }
        Ok(newest)
    }

    /// The name content `key` was deposited as, if recorded.
    fn deposit_record(&self, key: &str) -> Result<Option<RepositoryName>>;
    /// The collection's own id (a UUID URN), given at init, or on the first write
    /// of a collection made before ids.
    fn collection_id(&self) -> Option<String>;
    /// The collection's part in minting its subsystem's names, as stored now.
    fn minting(&self) -> Result<crate::store::config::Minting>;
    /// The collection's configuration as stored now (its sites and policy among
    /// it); `None` when this backend cannot read it.
    fn current_config(&self) -> Result<Option<crate::store::config::CollectionConfig>> {
        Ok(None)
    }
}
