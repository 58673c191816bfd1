//! The ledger facet (`Store::ledger`): a collection's own records of what was
//! done to it and what was checked: its hash-chained event log, the dates of
//! its fixity checks, its witness and the cursor of its chain check. Kept
//! apart from the core `Store` (object_store's way with optional powers): a
//! backend that keeps no ledger leaves `Store::ledger` at `NoLedger`, whose
//! every answer is "keeps none"; ops reach these records only through it.
//! What changes them (fixity results, the witness, the chain cursor, the
//! configuration) is a `LedgerWriter`, which `Ledger::writer` hands out only
//! to a handle that may write: a read-only handle has no way to change them.

use crate::error::Result;
use crate::id::RepositoryName;
use crate::store::{config, inventory};

/// A collection's event log, fixity dates and witness.
pub trait Ledger: Send + Sync {
    /// Every item's last fixity check; `None` when the backend keeps none.
    /// Where the last was store-attested, the newest check that read the
    /// bytes and passed comes before it (the last of a name is its last check).
    fn fixity_checks(&self) -> Result<Option<Vec<inventory::FixityCheck>>> {
        Ok(None)
    }
    /// Hands on every item's last fixity check, one at a time (a backend that can
    /// stream them does); `false` when the backend keeps none.
    fn each_fixity_check(&self, each: &mut dyn FnMut(inventory::FixityCheck)) -> Result<bool> {
        let Some(checks) = self.fixity_checks()? else { return Ok(false) };
        checks.into_iter().for_each(each);
        Ok(true)
    }
    /// Whether the backend makes its witness itself (a far server: from its own
    /// bags, with a key that never leaves its machine) rather than being handed
    /// one to keep.
    fn makes_own_witness(&self) -> bool {
        false
    }
    /// The latest witness (`ops::witness`, JSON), if one was kept.
    fn latest_witness(&self) -> Result<Option<String>> {
        Ok(None)
    }
    /// Up to a page of the collection's event log after event `after`, of `item`
    /// only when given, in order; `None` when the backend keeps no log.
    fn events(&self, _item: Option<&RepositoryName>, _after: u64) -> Result<Option<Vec<crate::events::StoredEvent>>> {
        Ok(None)
    }
    /// The events of each of `names` that a copy carries: all but fixity checks
    /// (which stay where they were made, and are not counted), at most
    /// `log::MAX_CARRIED` each, in order. By default a page of `events`
    /// per name; a backend that can reads them all in one go (local: one read
    /// transaction for the batch, not one per item).
    fn items_events(&self, names: &[RepositoryName]) -> Result<Vec<Vec<crate::events::StoredEvent>>> {
        names.iter().map(|name| item_events_paged(self, name)).collect()
    }
    /// The log's last event: its place and hash (what a witness signs, so that a
    /// log cut short after it is seen); `None` when the backend keeps no log or
    /// it is empty.
    fn log_head(&self) -> Result<Option<(u64, String)>> {
        Ok(None)
    }
    /// Where the last chain check of the log ended (`crate::events::ChainCursor`);
    /// `None` when none was kept, and the next check reads the whole log.
    fn chain_cursor(&self) -> Result<Option<crate::events::ChainCursor>> {
        Ok(None)
    }
    /// Whether the backend checks its log's chain itself (a far server: on its
    /// own machine, with a cursor no client sets) rather than being read.
    fn checks_own_chain(&self) -> bool {
        false
    }
    /// Has the backend check its own log's chain; `None` when it keeps no log.
    fn check_own_chain(&self) -> Result<Option<crate::events::ChainOutcome>> {
        Ok(None)
    }
    /// What changes this ledger; `None` for a handle that may not write (or a
    /// backend that keeps none).
    fn writer(&self) -> Option<&dyn LedgerWriter> {
        None
    }
}

/// What changes a collection's ledger: handed out by `Ledger::writer` only to
/// a handle that may write.
pub trait LedgerWriter: Send + Sync {
    /// Keeps the results of fixity checks (verify), each replacing the item's last;
    /// a backend that keeps none (or a read-only handle) ignores them.
    fn record_fixity(&self, _checks: &[inventory::FixityCheck]) -> Result<()> {
        Ok(())
    }
    /// The seed of the collection's witness signing key (Ed25519), made on first
    /// use and kept private (mode 0600); `None` when the backend keeps none or the
    /// handle may not write.
    fn witness_seed(&self) -> Result<Option<[u8; 32]>> {
        Ok(None)
    }
    /// Has the backend make, sign and keep a witness; its JSON, or `None` when it
    /// keeps no key (or may not write).
    fn make_own_witness(&self) -> Result<Option<String>> {
        Ok(None)
    }
    /// Keeps `json` as the latest witness, durably.
    fn keep_witness(&self, _json: &str) -> Result<()> {
        Ok(())
    }
    /// Keeps where a chain check ended, durably; a backend that keeps none (or a
    /// read-only handle) ignores it.
    fn keep_chain_cursor(&self, _cursor: &crate::events::ChainCursor) -> Result<()> {
        Ok(())
    }

    /// Applies `change` to the stored configuration at once (a concurrent change
    /// is never lost) and returns the result; `None` when this backend cannot.
    fn change_config(
        &self,
        _change: &mut dyn FnMut(&mut config::CollectionConfig) -> Result<()>,
    ) -> Result<Option<config::CollectionConfig>> {
        Ok(None)
    }
}

/// The ledger of a backend that keeps none.
pub struct NoLedger;

impl Ledger for NoLedger {}

/// The events of `name` in `store`'s log that a copy carries (at most
/// `crate::store::log::MAX_CARRIED`, fixity checks left out and not counted), a page of
/// `Ledger::events` at a time: `Ledger::items_events` by default.
pub fn item_events_paged<L: Ledger + ?Sized>(
    store: &L,
    name: &RepositoryName,
) -> Result<Vec<crate::events::StoredEvent>> {
    let mut events = Vec::new();
    let mut after = 0;
    while let Some(page) = store.events(Some(name), after)? {
        let Some(last) = page.last() else { break };
        after = last.seq;
        let full = page.len() == crate::store::log::EVENT_PAGE;
        // An event that does not read stays, for `carried_events` to name.
        events.extend(
            page.into_iter()
                .filter(|stored| stored.event().map_or(true, |e| e.kind != crate::events::EventKind::Fixity)),
        );
        if events.len() >= crate::store::log::MAX_CARRIED || !full {
            break;
        }
    }
    events.truncate(crate::store::log::MAX_CARRIED);
    Ok(events)
}
