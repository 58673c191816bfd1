//! The fixity dates of a local collection: when each item (its files, bound
//! together by its manifests) was last checked, and whether it was whole. They
//! live beside the records, in the inventory's `fixity` table (made on first
//! use), so that a rolling verify checks the least recently checked first and
//! `verify --age` can state the oldest check. Beside them, the witness's
//! signing key (`witness_seed`).

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

/// The witness key's seed at `path`: read, or (when `may_write`) made from the
/// OS's random source and kept with mode 0600, never over a key another process
/// made first.
pub fn witness_seed(path: &std::path::Path, may_write: bool) -> Result<Option<[u8; 32]>> {
    let parse = |text: &str| -> Option<[u8; 32]> { hex::decode(text.trim()).ok()?.try_into().ok() };
    let read = || -> Result<Option<[u8; 32]>> {
        match crate::fsx::read_capped(path, 1024) {
            Ok(bytes) => parse(&String::from_utf8_lossy(&bytes)).map(Some).ok_or_else(|| crate::Error::CorruptState {
                path: path.to_path_buf(),
                problem: "it is not a 32-byte key in hex".into(),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(crate::Error::io("read", path, e)),
        }
    };
    if let Some(seed) = read()? {
        return Ok(Some(seed));
    }
    if !may_write {
        return Ok(None);
    }
    let mut seed = [0u8; 32];
    getrandom::getrandom(&mut seed)
        .map_err(|e| crate::Error::io("draw a key from", path, std::io::Error::other(e.to_string())))?;
    let hex = hex::encode(seed);
    let dir = crate::fsx::parent_dir(path);
    let temp = dir.join(format!("{}witness.key", crate::fsx::TEMP_PREFIX));
    crate::fsx::remove_tree(&temp)?;
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)
            .map_err(|e| crate::Error::io("create", &temp, e))?;
        file.write_all(hex.as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(|e| crate::Error::io("write", &temp, e))?;
    }
    match crate::fsx::rename_noreplace(&temp, path) {
        Ok(()) => crate::fsx::fsync_dir(dir).map(|()| Some(seed)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            crate::fsx::remove_tree(&temp)?;
            read()
        }
        Err(e) => Err(crate::Error::io("rename a temporary file onto", path, e)),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The key file's decoder skipped pairs that were not hex, so a damaged file
    /// (here a key with "zz" written into it) read as another 32-byte key and
    /// signed witnesses with it; it is now refused as corrupt.
    #[test]
    fn regress_damaged_witness_key_read_as_another_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("witness.key");
        let key = "11".repeat(32);
        std::fs::write(&path, format!("{}zz{}\n", &key[..32], &key[32..])).unwrap();
        let read = witness_seed(&path, false);
        assert!(matches!(read, Err(crate::Error::CorruptState { .. })), "{read:?}");
        std::fs::write(&path, format!("{key}\n")).unwrap();
        assert_eq!(witness_seed(&path, false).unwrap(), Some([0x11; 32]));
    }
}
