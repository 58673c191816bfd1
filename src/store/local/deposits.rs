//! The content records of a local collection: the name each deposited content
//! (its content key, `ops::deposit::content_key`) was given, so that a deposit
//! repeated after a crash, or on purpose, finds the item instead of minting a
//! second name. They live in the inventory's `deposits` table, one row a key,
//! written for a batch in one transaction made durable (with the staged items,
//! by the batch's `syncfs`) before any item of it is placed. A record only
//! says where to look: the deposit checks the item it names
//! (`ops::deposit::deposited_as`).
//!
//! A collection written before the table kept one file a key in
//! `.ibi/deposited/`. The first writer that opens it folds those files into the
//! table (`adopt_deposit_files`) and only then removes them, so every later
//! look-up is one indexed read, never a file open that fails.

use std::fs;
use std::io;

use rusqlite::{params, OptionalExtension, TransactionBehavior};

use super::sqlite::{sql_error, Inventory};
use super::Collection;
use crate::error::{Error, IoContext, Result};
use crate::fsx;
use crate::id::RepositoryName;

const DEPOSITS_SCHEMA: &str =
    "CREATE TABLE IF NOT EXISTS deposits (key TEXT PRIMARY KEY NOT NULL, name TEXT NOT NULL) WITHOUT ROWID;";

/// A content key is one word: letters and digits only (a sha256 in hex), never a
/// path (it named a file of `.ibi/deposited/`, and a far client sends it).
fn check_content_key(key: &str) -> Result<()> {
    if !key.is_empty() && key.len() <= 128 && key.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Ok(());
    }
    let problem = format!("{key:?} is not a content key (letters and digits, at most 128)");
    Err(Error::Invalid { what: "deposit record".into(), problem })
}

impl Inventory {
    /// Writes `records` (one already there for a key is replaced) in one
    /// transaction; with `replace` false, a key already recorded keeps its name.
    /// With `synced` false the commit is not fsynced (`PRAGMA synchronous =
    /// OFF` for it alone): it is durable at the caller's next `syncfs` or synced
    /// commit. A crash before then loses the transaction whole, never part of
    /// it (each frame of SQLite's write-ahead log is checksummed, and a
    /// transaction counts only with its commit frame).
    fn put_deposit_records(&mut self, records: &[(String, RepositoryName)], replace: bool, synced: bool) -> Result<()> {
        if !synced {
            self.conn.execute_batch("PRAGMA synchronous = OFF;").map_err(|e| sql_error(&self.path, e))?;
        }
        let written = self.insert_deposit_records(records, replace);
        let restored = match synced {
            true => Ok(()),
            false => self.conn.execute_batch("PRAGMA synchronous = FULL;").map_err(|e| sql_error(&self.path, e)),
        };
        written.and(restored)
    }

    fn insert_deposit_records(&mut self, records: &[(String, RepositoryName)], replace: bool) -> Result<()> {
        let path = self.path.clone();
        let err = |e| sql_error(&path, e);
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(err)?;
        tx.execute_batch(DEPOSITS_SCHEMA).map_err(err)?;
        {
            let verb = if replace { "REPLACE" } else { "IGNORE" };
            let sql = format!("INSERT OR {verb} INTO deposits (key, name) VALUES (?1, ?2)");
            let mut insert = tx.prepare_cached(&sql).map_err(err)?;
            for (key, name) in records {
                insert.execute(params![key, name.to_string()]).map_err(err)?;
            }
        }
        tx.commit().map_err(err)
    }

    /// The name recorded for `key`, if any (none before the table's first write).
    fn deposit_record(&mut self, key: &str) -> Result<Option<String>> {
        let err = |e| sql_error(&self.path, e);
        if !self.deposits_seen {
            let table: Option<i64> = self
                .conn
                .prepare_cached("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'deposits'")
                .and_then(|mut s| s.query_row([], |row| row.get(0)).optional())
                .map_err(err)?;
            if table.is_none() {
                return Ok(None);
            }
            self.deposits_seen = true;
        }
        self.conn
            .prepare_cached("SELECT name FROM deposits WHERE key = ?1")
            .and_then(|mut s| s.query_row([key], |row| row.get(0)).optional())
            .map_err(err)
    }
}

impl Collection {
    /// The name a deposit of content `key` was given, if one was recorded.
    pub fn deposit_record(&self, key: &str) -> Result<Option<RepositoryName>> {
        check_content_key(key)?;
        let found = self.with_inventory(|inventory| inventory.deposit_record(key))?.flatten();
        Ok(found.and_then(|name| RepositoryName::parse(&name).ok()))
    }

    /// Records which name each content key was deposited as. The commit is not
    /// fsynced here: the caller's `place_all` makes it durable with its batch
    /// (`syncfs`, which writes the inventory's log with the staged items) before
    /// any item is renamed into place; until then a crash loses the batch's
    /// records whole, and no item of it was placed.
    pub fn write_deposit_records(&self, records: &[(String, RepositoryName)]) -> Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        records.iter().try_for_each(|(key, _)| check_content_key(key))?;
        // A lock held by another program is told within seconds (`check_writable`),
        // before anything of the batch is recorded or placed.
        let written = self.with_inventory(|inventory| {
            inventory.check_writable()?;
            inventory.put_deposit_records(records, true, false)
        })?;
        match written {
            Some(()) => Ok(()),
            None => Err(Error::io("write deposit records to", self.layout.inventory(), io::ErrorKind::NotFound.into())),
        }
    }

    /// Folds the files of `.ibi/deposited/` (a collection written before the
    /// table) into the table, a key already in the table keeping its row, then
    /// removes them: only after the table's commit, so a crash between leaves
    /// files that the next writer folds in again. A file read whole that is not
    /// a record (a crash cut it short, or it is not a name) is removed with the
    /// rest, as it was ignored; one that cannot be read stays, with its folder.
    /// Call with the write lock held, after the inventory exists.
    pub(super) fn adopt_deposit_files(&self) -> Result<()> {
        let dir = self.layout.deposit_records();
        let entries = match fs::read_dir(&dir) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            other => other.with_path("list", &dir)?,
        };
        let (mut records, mut done) = (Vec::new(), Vec::new());
        for entry in entries {
            let path = entry.with_path("list", &dir)?.path();
            let key = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let Ok(bytes) = fsx::read_capped(&path, 4096) else { continue };
            // Only a whole record counts: one a crash cut short lacks its newline.
            let text = String::from_utf8(bytes).ok();
            let name = text.as_deref().and_then(|t| t.strip_suffix('\n')).and_then(|t| RepositoryName::parse(t).ok());
            if let (Some(name), Ok(())) = (name, check_content_key(&key)) {
                records.push((key, name));
            }
            done.push(path);
        }
        if !records.is_empty() {
            let written = self.with_inventory(|inventory| inventory.put_deposit_records(&records, false, true))?;
            if written.is_none() {
                return Ok(());
            }
        }
        for file in &done {
            fs::remove_file(file).with_path("remove", file)?;
        }
        match fs::remove_dir(&dir) {
            Err(e) if e.raw_os_error() == Some(libc::ENOTEMPTY) => Ok(()),
            other => other.with_path("remove", &dir),
        }?;
        fsx::fsync_dir(&self.layout.control())
    }
}
