//! List: the items of a collection as (name, IBIp), sorted by name and
//! streamed, optionally limited to names whose date lies in `[since, until]`.

use crate::error::Result;
use crate::id::{Ibip, RepositoryName, Timestamp};
use crate::store::local::Collection;

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
pub fn list(
    collection: &Collection,
    range: DateRange,
) -> impl Iterator<Item = Result<(RepositoryName, Option<Ibip>)>> + '_ {
    collection.walk().items().filter_map(move |item| match item {
        Err(e) => Some(Err(e)),
        Ok(item) if !range.contains(item.name.date()) => None,
        Ok(item) => {
            // A damaged bag-info still lists by name; verify reports the damage.
            let ibip = item.ibip().ok().flatten();
            Some(Ok((item.name, ibip)))
        }
    })
}
