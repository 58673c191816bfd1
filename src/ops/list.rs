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
    if store.inventory().has_inventory() {
        let wanted = move |status: Status| status == Status::Present || (withdrawn && status == Status::Withdrawn);
        return Box::new(store.inventory().record_summaries().filter_map(move |summary| match summary {
            Err(e) => Some(Err(e)),
            Ok(s) if !wanted(s.status) || !range.contains(s.name.date()) => None,
            Ok(s) => Some(Ok((s.name, s.ibip, s.status, Some(s.identity)))),
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

/// What `list_marked` hands on.
#[derive(Debug)]
pub enum ListEntry {
    /// An item, and whether its store keeps fewer replicas than it asks for.
    Item(ListedItem, bool),
    /// The cluster behind the store could not be asked (once; the items after
    /// it are not marked).
    RedundancyUnknown(String),
}

/// `list`, each item marked degraded when the collection names the SeaweedFS
/// cluster behind it (`ibi site here`): asked a page at a time, so a store with
/// a data centre down still lists every item, and says which read with less
/// redundancy than it promises.
pub fn list_marked(
    store: &dyn Store,
    range: DateRange,
    withdrawn: bool,
) -> Result<Box<dyn Iterator<Item = Result<ListEntry>> + '_>> {
    use crate::ops::placement::{Redundancy, PLACEMENT_PAGE};
    let listed = list(store, range, withdrawn);
    let redundancy = Redundancy::of(store)?;
    if !redundancy.told() {
        return Ok(Box::new(listed.map(|item| item.map(|item| ListEntry::Item(item, false)))));
    }
    let mut listed = listed.peekable();
    let mut asking = true;
    let pages = std::iter::from_fn(move || {
        listed.peek()?;
        let mut page = Vec::new();
        let mut failed = None;
        while page.len() < PLACEMENT_PAGE {
            match listed.next() {
                Some(Ok(item)) => page.push(item),
                Some(Err(e)) => {
                    failed = Some(e);
                    break;
                }
                None => break,
            }
        }
        let names: Vec<RepositoryName> = page.iter().map(|(name, ..)| name.clone()).collect();
        let mut entries: Vec<Result<ListEntry>> = Vec::with_capacity(page.len() + 2);
        let degraded = match asking.then(|| redundancy.degraded(&names)) {
            Some(Ok(degraded)) => degraded,
            Some(Err(e)) => {
                asking = false;
                let why = format!("where its items are held could not be read from {}: {e}", redundancy.master());
                entries.push(Ok(ListEntry::RedundancyUnknown(why)));
                vec![false; page.len()]
            }
            None => vec![false; page.len()],
        };
        entries.extend(page.into_iter().zip(degraded).map(|(item, degraded)| Ok(ListEntry::Item(item, degraded))));
        entries.extend(failed.map(Err));
        Some(entries)
    });
    Ok(Box::new(pages.flatten()))
}
