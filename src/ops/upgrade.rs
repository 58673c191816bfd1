//! `upgrade`: rewrites what an older `ibi` stored in a form this one reads but
//! no longer writes, through `Writer::upgrade_stored_form`, under the lease. For
//! object storage that is the percent-encoded keys of items written before keys
//! took the files' own names; local and far collections have nothing to rewrite.

use crate::error::Result;
use crate::id::RepositoryName;
use crate::store::{LockWait, Store};

/// What an upgrade did.
#[derive(Debug, Default)]
pub struct UpgradeSummary {
    /// Items whose stored form was rewritten.
    pub rewritten: Vec<RepositoryName>,
    /// Items left as they were (still readable), and why.
    pub kept: Vec<(RepositoryName, String)>,
}

/// Upgrades `store` under its lease, waiting as `wait` says.
pub fn upgrade(store: &dyn Store, wait: LockWait) -> Result<UpgradeSummary> {
    let writer = store.begin_write(wait)?;
    let summary = std::sync::Mutex::new(UpgradeSummary::default());
    writer.upgrade_stored_form(&|name, kept| {
        let mut summary = crate::sync::lock(&summary);
        match kept {
            None => summary.rewritten.push(name.clone()),
            Some(why) => summary.kept.push((name.clone(), why.to_string())),
        }
    })?;
    Ok(summary.into_inner().unwrap_or_else(|poisoned| poisoned.into_inner()))
}
