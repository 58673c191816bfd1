//! The fixity dates of a local collection: when each item (its files, bound
//! together by its manifests) was last checked, and whether it was whole. They
//! live beside the records, in the inventory's `fixity` table (made on first
//! use), so that a rolling verify checks the least recently checked first and
//! `verify --age` can state the oldest check.

use rusqlite::{params, OptionalExtension};

use super::inventory::{sql_error, Inventory};
use crate::error::Result;
use crate::id::RepositoryName;
use crate::store::inventory::FixityCheck;

const FIXITY_SCHEMA: &str = "CREATE TABLE IF NOT EXISTS fixity (
    name TEXT PRIMARY KEY NOT NULL,
    checked TEXT NOT NULL,
    ok INTEGER NOT NULL
) WITHOUT ROWID;";

impl Inventory {
    /// Records checks, each replacing the item's last one, and logs each, in one transaction.
    pub fn record_fixity(&mut self, checks: &[FixityCheck]) -> Result<()> {
        if checks.is_empty() {
            return Ok(());
        }
        let path = self.path.clone();
        self.conn.execute_batch(FIXITY_SCHEMA).map_err(|e| sql_error(&path, e))?;
        let tx = self.conn.transaction().map_err(|e| sql_error(&path, e))?;
        {
            let sql = "INSERT OR REPLACE INTO fixity (name, checked, ok) VALUES (?1, ?2, ?3)";
            let mut insert = tx.prepare_cached(sql).map_err(|e| sql_error(&path, e))?;
            for check in checks {
                insert
                    .execute(params![check.name.to_string(), check.date, check.ok])
                    .map_err(|e| sql_error(&path, e))?;
            }
        }
        let events: Vec<crate::events::Event> = checks.iter().map(FixityCheck::event).collect();
        super::events::append(&tx, &path, &events)?;
        tx.commit().map_err(|e| sql_error(&path, e))
    }

    /// Every item's last check; empty when none was ever recorded.
    pub fn fixity_checks(&self) -> Result<Vec<FixityCheck>> {
        let mut checks = Vec::new();
        self.each_fixity_check(&mut |check| checks.push(check))?;
        Ok(checks)
    }

    /// Hands on every item's last check, one row at a time.
    pub fn each_fixity_check(&self, each: &mut dyn FnMut(FixityCheck)) -> Result<()> {
        let exists: Option<i64> = self
            .conn
            .query_row("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'fixity'", [], |row| row.get(0))
            .optional()
            .map_err(|e| sql_error(&self.path, e))?;
        if exists.is_none() {
            return Ok(());
        }
        let mut select =
            self.conn.prepare("SELECT name, checked, ok FROM fixity").map_err(|e| sql_error(&self.path, e))?;
        let rows = select
            .query_map([], |row| Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?, row.get::<_, bool>(2)?)))
            .map_err(|e| sql_error(&self.path, e))?;
        for row in rows {
            let (name, date, ok) = row.map_err(|e| sql_error(&self.path, e))?;
            if let Ok(name) = RepositoryName::parse(&name) {
                each(FixityCheck { name, date, ok, files: 0, bytes: 0 });
            }
        }
        Ok(())
    }
}

/// Forgets the last checks of items just placed (within the placement's
/// transaction): they were of the copy that was replaced, and the new copy was
/// verified on arrival; the next rolling run checks it first, as never checked.
pub(super) fn forget_checks(
    tx: &rusqlite::Transaction,
    path: &std::path::Path,
    records: &[crate::store::ItemRecord],
) -> Result<()> {
    let err = |e| sql_error(path, e);
    let exists: Option<i64> = tx
        .query_row("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'fixity'", [], |row| row.get(0))
        .optional()
        .map_err(err)?;
    if exists.is_none() {
        return Ok(());
    }
    let mut forget = tx.prepare_cached("DELETE FROM fixity WHERE name = ?1").map_err(err)?;
    for record in records {
        forget.execute(params![record.name.to_string()]).map_err(err)?;
    }
    Ok(())
}
