//! List: the items of a collection as (name, IBIp), sorted by name and
//! streamed, optionally limited to names whose date lies in `[since, until]`.

use crate::error::Result;
use crate::id::{Ibip, RepositoryName, Timestamp};
use crate::store::{item_ibip, items, Store};

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

/// Streams the items in range; stray entries are skipped (verify reports them).
pub fn list(store: &dyn Store, range: DateRange) -> impl Iterator<Item = Result<(RepositoryName, Option<Ibip>)>> + '_ {
    items(store).filter_map(move |item| match item {
        Err(e) => Some(Err(e)),
        Ok(name) if !range.contains(name.date()) => None,
        Ok(name) => {
            // A damaged bag-info still lists by name; verify reports the damage.
            let ibip = item_ibip(store, &name).ok().flatten();
            Some(Ok((name, ibip)))
        }
    })
}
