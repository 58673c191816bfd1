//! The fixity dates of a local collection: when each item (its files, bound
//! together by its manifests) was last checked, and whether it was whole. They
//! live beside the records, in the inventory's `fixity` table (made on first
//! use), so that a rolling verify checks the least recently checked first and
//! `verify --age` can state the oldest check.
//!
//! The table only caches what the hash-chained log says: each row names the
//! `seq` of the `fixity` event that recorded it, and a row counts only when
//! that event is a check of the same item, date and outcome. A row written into
//! the table by hand (no event) or pointing at another event is passed over, as
//! if the item had never been checked.

use rusqlite::{params, OptionalExtension};

use super::sqlite::{sql_error, Inventory};
use crate::error::Result;
use crate::id::RepositoryName;
use crate::store::inventory::FixityCheck;

const FIXITY_SCHEMA: &str = "CREATE TABLE IF NOT EXISTS fixity (
    name TEXT PRIMARY KEY NOT NULL,
    checked TEXT NOT NULL,
    ok INTEGER NOT NULL,
    seq INTEGER
) WITHOUT ROWID;";

/// Gives a table made before rows named their event a `seq` column, and fills
/// it for each row whose check the log holds (one pass over the log's checks).
const FIXITY_SEQ_BACKFILL: &str = "CREATE TEMP TABLE logged_checks AS
    SELECT item, body ->> '$.date' AS date, body ->> '$.outcome' AS outcome, max(seq) AS seq
    FROM events WHERE body ->> '$.type' IS 'fixity' GROUP BY item, date, outcome;
CREATE INDEX temp.logged_checks_at ON logged_checks (item, date, outcome);
UPDATE fixity SET seq = (SELECT l.seq FROM logged_checks l WHERE l.item = fixity.name AND l.date = fixity.checked
    AND l.outcome = CASE fixity.ok WHEN 1 THEN 'pass' ELSE 'fail' END);
DROP TABLE temp.logged_checks;";

/// Every row whose check the log holds: its event is a fixity check of the
/// same item, date and outcome.
const LOGGED_CHECKS: &str = "SELECT f.name, f.checked, f.ok FROM fixity f JOIN events e ON e.seq = f.seq
    WHERE e.item = f.name AND e.body ->> '$.type' IS 'fixity' AND e.body ->> '$.date' = f.checked
    AND e.body ->> '$.outcome' = CASE f.ok WHEN 1 THEN 'pass' ELSE 'fail' END";

impl Inventory {
    /// Records checks, each replacing the item's last one, and logs each, in one transaction.
    pub fn record_fixity(&mut self, checks: &[FixityCheck]) -> Result<()> {
        if checks.is_empty() {
            return Ok(());
        }
        let path = self.path.clone();
        self.upgrade_fixity()?;
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(|e| sql_error(&path, e))?;
        let events: Vec<crate::events::Event> = checks.iter().map(FixityCheck::event).collect();
        super::events::append(&tx, &path, self.collection_id.as_deref(), &events)?;
        {
            let sql = "INSERT OR REPLACE INTO fixity (name, checked, ok, seq) \
                       VALUES (?1, ?2, ?3, (SELECT seq FROM events WHERE id = ?4))";
            let mut insert = tx.prepare_cached(sql).map_err(|e| sql_error(&path, e))?;
            for (check, event) in checks.iter().zip(&events) {
                insert
                    .execute(params![check.name.to_string(), check.date, check.ok, event.id])
                    .map_err(|e| sql_error(&path, e))?;
            }
        }
        tx.commit().map_err(|e| sql_error(&path, e))
    }

    /// Gives a table from before rows named their event its `seq` column;
    /// makes no table (the first check does). Reads only, unless there is one to upgrade.
    pub(super) fn upgrade_older_fixity(&mut self) -> Result<()> {
        let path = self.path.clone();
        let count =
            |sql: &str| self.conn.query_row(sql, [], |row| row.get::<_, i64>(0)).map_err(|e| sql_error(&path, e));
        let older = count("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'fixity'")? > 0
            && count("SELECT count(*) FROM pragma_table_info('fixity') WHERE name = 'seq'")? == 0;
        if older {
            self.upgrade_fixity()?;
        }
        Ok(())
    }

    /// Makes the table, or gives an older one its `seq` column, filled from the log.
    pub(super) fn upgrade_fixity(&mut self) -> Result<()> {
        let path = self.path.clone();
        let err = |e| sql_error(&path, e);
        // Reads first: a writer opening the collection must not wait on another
        // program's lock of the inventory for a table that needs no change.
        let count = |sql: &str| self.conn.query_row(sql, [], |row| row.get::<_, i64>(0)).map_err(err);
        if count("SELECT count(*) FROM pragma_table_info('fixity') WHERE name = 'seq'")? > 0 {
            return Ok(());
        }
        if count("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'fixity'")? == 0 {
            return self.conn.execute_batch(FIXITY_SCHEMA).map_err(err);
        }
        let has_events = count("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'events'")? > 0;
        let tx = self.conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(err)?;
        tx.execute_batch("ALTER TABLE fixity ADD COLUMN seq INTEGER;").map_err(err)?;
        if has_events {
            tx.execute_batch(FIXITY_SEQ_BACKFILL).map_err(err)?;
        }
        tx.commit().map_err(err)
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
        let logged = self.conn.query_row(
            "SELECT count(*) FROM sqlite_master WHERE name IN ('events') OR (name = 'fixity' AND sql LIKE '%seq%')",
            [],
            |row| row.get::<_, i64>(0),
        );
        if logged.map_err(|e| sql_error(&self.path, e))? < 2 {
            // No log, or a table from before rows named their event: nothing the log vouches for.
            return Ok(());
        }
        let mut select = self.conn.prepare(LOGGED_CHECKS).map_err(|e| sql_error(&self.path, e))?;
        let rows = select
            .query_map([], |row| Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?, row.get::<_, bool>(2)?)))
            .map_err(|e| sql_error(&self.path, e))?;
        for row in rows {
            let (name, date, ok) = row.map_err(|e| sql_error(&self.path, e))?;
            if let Ok(name) = RepositoryName::parse(&name) {
                each(FixityCheck::read(name, date, ok, 0, 0));
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
