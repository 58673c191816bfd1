//! List: the items of a collection as (name, IBIp, status, identity), sorted by name and
//! streamed, optionally limited to names whose date lies in `[since, until]`.
//! The inventory serves it (withdrawn items only when asked for, items moved
//! away never); a collection without an inventory yet is walked instead.

use crate::error::Result;
use crate::id::{Ibip, RepositoryName, Timestamp};
use crate::store::{item_ibip, items, Status, Store};

/// A filter on the date of the name.
#[derive(Debug, Clone, Copy, Default)]
pub struct DateRange {
    pub since: Option<Timestamp>,
    pub until: Option<Timestamp>,
}

impl DateRange {
    pub fn contains(&self, date: Timestamp) -> bool {
        self.since.is_none_or(|s| date >= s) && self.until.is_none_or(|u| date <= u)
    }
}

/// One listed item, with its identity digest when the inventory records it.
pub type ListedItem = (RepositoryName, Option<Ibip>, Status, Option<String>);

/// Streams the items in range; stray entries are skipped (verify reports them).
pub fn list(store: &dyn Store, range: DateRange, withdrawn: bool) -> Box<dyn Iterator<Item = Result<ListedItem>> + '_> {
    if store.has_inventory() {
        let wanted = move |status: Status| status == Status::Present || (withdrawn && status == Status::Withdrawn);
        return Box::new(store.all_records().filter_map(move |record| match record {
            Err(e) => Some(Err(e)),
            Ok(r) if !wanted(r.status) || !range.contains(r.name.date()) => None,
            Ok(r) => {
                let identity = r.current().digest.clone();
                Some(Ok((r.name, r.ibip, r.status, Some(identity))))
            }
        }));
    }
    Box::new(items(store).filter_map(move |item| match item {
        Err(e) => Some(Err(e)),
        Ok(name) if !range.contains(name.date()) => None,
        Ok(name) => {
            // A damaged bag-info still lists by name; verify reports the damage.
            let ibip = item_ibip(store, &name).ok().flatten();
            Some(Ok((name, ibip, Status::Present, None)))
        }
    }))
}
