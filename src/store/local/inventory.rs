//! The inventory of a local collection: `.ibi/inventory.sqlite`, one row per
//! item the collection holds or has held (ARCHITECTURE.md, "The inventory").
//! SQLite in WAL mode with `synchronous=FULL`: a commit is durable when it
//! returns and survives SIGKILL. `place_all`, `remove_all` and `move_all` commit
//! after their renames and before they drop their journal record, so recovery
//! replays a killed writer's batch into the inventory from the bags. A lost
//! inventory is rebuilt from the bags into a temporary file that is renamed into
//! place only when complete. Links are never followed (`SQLITE_OPEN_NOFOLLOW`).

use std::path::Path;

use rusqlite::{params, Connection, OpenFlags, OptionalExtension};

use crate::bag::history::Withdrawal;
use crate::error::{Error, IoContext, Result};
use crate::events::{Event, EventKind};
use crate::fsx;
use crate::id::{Ibip, RepositoryName};
use crate::store::inventory::{Forward, ItemRecord, RecordSummary, Status, VersionRecord};
use crate::store::log::{removal_event, Action, StepLog};

pub use super::sqlite::Inventory;
pub(super) use super::sqlite::{damaged, sql_error, DepositKeys};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS items (
    prefix TEXT NOT NULL,
    suffix TEXT NOT NULL,
    ibip TEXT,
    origin TEXT,
    status TEXT NOT NULL,
    digest TEXT NOT NULL,
    versions TEXT NOT NULL,
    withdrawn TEXT,
    moved TEXT,
    keys TEXT,
    PRIMARY KEY (prefix, suffix)
) WITHOUT ROWID;
";

/// The columns a reader in name order takes from every row (`list`, the states a
/// no-op mirror and a verify compare, the witness's present names), in an index
/// of their own: a record with its versions and keys is about 400 bytes, these
/// about 140, so a scan reads a third of the pages. Made with the table, and
/// added to an older inventory at its next write (`add_indexes`).
const STATES_INDEX: &str = "CREATE INDEX IF NOT EXISTS items_states ON items (prefix, suffix, status, digest, ibip);";

/// The readers in name order that `STATES_INDEX` serves alone: the states of
/// a range of names, a page of summaries, a page of present names.
const STATES_IN_RANGE: &str = "SELECT prefix, suffix, status, digest FROM items \
    WHERE (prefix, suffix) >= (?1, ?2) AND (prefix, suffix) <= (?3, ?4) ORDER BY prefix, suffix";
const SUMMARIES_AFTER: &str = "SELECT prefix, suffix, ibip, status, digest FROM items \
    WHERE (prefix, suffix) > (?1, ?2) ORDER BY prefix, suffix LIMIT ?3";
const PRESENT_AFTER: &str = "SELECT prefix, suffix FROM items \
    WHERE (prefix, suffix) > (?1, ?2) AND status = ?3 ORDER BY prefix, suffix LIMIT ?4";

/// How many records a page of `all` reads at once.
const PAGE: usize = 4096;

const COLUMNS: &str = "prefix, suffix, ibip, origin, status, digest, versions, withdrawn, moved, keys";

fn row_to_record(row: &rusqlite::Row) -> rusqlite::Result<std::result::Result<ItemRecord, String>> {
    let (prefix, suffix): (String, String) = (row.get(0)?, row.get(1)?);
    let (ibip, origin, status): (Option<String>, Option<String>, String) = (row.get(2)?, row.get(3)?, row.get(4)?);
    let (versions, withdrawn): (String, Option<String>) = (row.get(6)?, row.get(7)?);
    let (moved, keys): (Option<String>, Option<String>) = (row.get(8)?, row.get(9)?);
    let text = format!("{prefix}/{suffix}");
    Ok((|| {
        let name = RepositoryName::parse(&text).map_err(|e| format!("{text}: {e}"))?;
        let versions: Vec<VersionRecord> = serde_json::from_str(&versions).map_err(|e| format!("{text}: {e}"))?;
        if versions.is_empty() {
            return Err(format!("{text}: no versions"));
        }
        Ok(ItemRecord {
            name,
            ibip: ibip.and_then(|i| Ibip::parse(&i).ok()),
            origin,
            status: Status::parse(&status).ok_or_else(|| format!("{text}: unknown status {status}"))?,
            versions,
            withdrawn: withdrawn.map(|w| {
                let (date, reason) = w.split_once(' ').unwrap_or((&w, ""));
                Withdrawal { date: date.into(), reason: reason.into() }
            }),
            moved: moved.map(|m| serde_json::from_str(&m).map_err(|e| format!("{text}: moved: {e}"))).transpose()?,
            deposit_keys: keys
                .map(|k| serde_json::from_str(&k).map_err(|e| format!("{text}: keys: {e}")))
                .transpose()?
                .unwrap_or_default(),
        })
    })())
}

/// Names read from rows in name order: a row whose prefix text is the row
/// before's parses its suffix alone (`RepositoryName::under_same_prefix`),
/// since a prefix's rows follow each other; any other row, or a suffix that
/// does not parse, takes the whole parse and its error.
#[derive(Default)]
struct NameReader {
    last: Option<(String, RepositoryName)>,
}

impl NameReader {
    fn name(&mut self, prefix: &str, suffix: &str) -> std::result::Result<RepositoryName, String> {
        let same_prefix = self.last.as_ref().filter(|(text, _)| text == prefix);
        if let Some(name) = same_prefix.and_then(|(_, name)| name.under_same_prefix(suffix)) {
            return Ok(name);
        }
        let name =
            RepositoryName::parse(&format!("{prefix}/{suffix}")).map_err(|e| format!("{prefix}/{suffix}: {e}"))?;
        self.last = Some((prefix.to_string(), name.clone()));
        Ok(name)
    }
}

/// The key columns' texts of a run of names: each prefix is written once for
/// the names after it that share it (a chunk of a walk shares one or a few),
/// each suffix for its own name.
struct KeyTexts {
    prefixes: Vec<String>,
    keys: Vec<(usize, String)>,
}

impl KeyTexts {
    fn of(names: &[RepositoryName]) -> KeyTexts {
        let mut texts = KeyTexts { prefixes: Vec::new(), keys: Vec::with_capacity(names.len()) };
        let mut last: Option<&crate::id::Prefix> = None;
        for name in names {
            if last != Some(name.prefix()) {
                texts.prefixes.push(name.prefix().to_string());
                last = Some(name.prefix());
            }
            texts.keys.push((texts.prefixes.len() - 1, name.suffix().text()));
        }
        texts
    }

    fn len(&self) -> usize {
        self.keys.len()
    }

    fn get(&self, at: usize) -> (&str, &str) {
        let (prefix, suffix) = &self.keys[at];
        (&self.prefixes[*prefix], suffix)
    }

    /// Whether the keys rise strictly, as SQLite orders them.
    fn ascending(&self) -> bool {
        (1..self.len()).all(|at| self.get(at - 1) < self.get(at))
    }
}

/// One range scan from the first of `keys` to the last (`sql` binds them as
/// ?1 to ?4 and selects prefix and suffix first, in key order), merged with
/// the keys (ascending): what `read` makes of each key's row, `None` for a key
/// with no row.
fn merge_range<T>(
    tx: &rusqlite::Transaction,
    path: &Path,
    sql: &str,
    keys: &KeyTexts,
    read: impl Fn(&rusqlite::Row) -> rusqlite::Result<T>,
) -> Result<Vec<Option<T>>> {
    let err = |e| sql_error(path, e);
    let mut found: Vec<Option<T>> = std::iter::repeat_with(|| None).take(keys.len()).collect();
    let Some(last) = keys.len().checked_sub(1) else { return Ok(found) };
    let (first, last) = (keys.get(0), keys.get(last));
    let mut select = tx.prepare_cached(sql).map_err(err)?;
    let mut rows = select.query(params![first.0, first.1, last.0, last.1]).map_err(err)?;
    let mut at = 0;
    while let Some(row) = rows.next().map_err(err)? {
        let text = |i| row.get_ref(i).ok().and_then(|v| v.as_str().ok()).unwrap_or_default();
        let key = (text(0), text(1));
        while at < keys.len() && keys.get(at) < key {
            at += 1;
        }
        if at < keys.len() && keys.get(at) == key {
            found[at] = Some(read(row).map_err(err)?);
            at += 1;
        }
    }
    Ok(found)
}

/// The summary of a row of `SELECT prefix, suffix, ibip, status, digest`.
fn summary_of(
    row: &rusqlite::Row,
    names: &mut NameReader,
) -> rusqlite::Result<std::result::Result<RecordSummary, String>> {
    let (prefix, suffix) = (row.get_ref(0)?.as_str()?, row.get_ref(1)?.as_str()?);
    let ibip = row.get_ref(2)?.as_str_or_null()?;
    let (status, identity) = (row.get_ref(3)?.as_str()?, row.get_ref(4)?.as_str()?);
    let name = names.name(prefix, suffix);
    Ok((|| {
        Ok(RecordSummary {
            name: name?,
            ibip: ibip.and_then(|i| Ibip::parse(i).ok()),
            status: Status::parse(status).ok_or_else(|| format!("{prefix}/{suffix}: unknown status {status}"))?,
            identity: identity.to_string(),
        })
    })())
}

/// The content records of `.ibi/deposited/` (one file per key, holding the name)
/// beside the inventory at `path`, by name; unreadable ones are skipped.
fn deposit_dir_keys(path: &Path) -> DepositKeys {
    let mut by_name = DepositKeys::new();
    let Ok(entries) = std::fs::read_dir(fsx::parent_dir(path).join("deposited")) else { return by_name };
    for entry in entries.flatten() {
        let key = entry.file_name().to_string_lossy().into_owned();
        let text = fsx::read_capped(&entry.path(), 4096).ok().and_then(|b| String::from_utf8(b).ok());
        if let Some(name) = text.and_then(|t| RepositoryName::parse(t.trim()).ok()) {
            by_name.entry(name).or_default().push(key);
        }
    }
    by_name
}

/// SQLite's `NOFOLLOW`, which refuses any symlink on the way, unless the collection
/// is reached through the directory handle a far server pinned (`/proc/self/fd/N`,
/// itself a link); there `Collection::open` has refused symlinks at `.ibi/` and the
/// inventory already, and nothing before the handle can be swapped.
fn nofollow(path: &Path) -> OpenFlags {
    match path.starts_with("/proc/self/fd") {
        true => OpenFlags::empty(),
        false => OpenFlags::SQLITE_OPEN_NOFOLLOW,
    }
}

/// What a path in an SQLite URI must escape: `?`, `#` and `%` (and controls, spaces).
const URI_PATH: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS.add(b' ').add(b'?').add(b'#').add(b'%');

impl Inventory {
    /// Opens the inventory at `path`; `None` when the collection has none yet.
    pub fn open(path: &Path) -> Result<Option<Inventory>> {
        if std::fs::symlink_metadata(path).is_err() {
            return Ok(None);
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | nofollow(path) | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags).map_err(|e| sql_error(path, e))?;
        let mut inventory = Inventory::on(path, conn);
        inventory.setup("PRAGMA busy_timeout = 60000; PRAGMA synchronous = FULL;")?;
        inventory.check_schema()?;
        inventory.read_older_columns()?;
        Ok(Some(inventory))
    }

    /// Refuses a file that is SQLite but not an inventory (an empty file is an empty
    /// database): corrupt state, never "no such table" from deep inside a command.
    fn check_schema(&self) -> Result<()> {
        let found: Option<i64> = self
            .conn
            .query_row("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'items'", [], |row| row.get(0))
            .optional()
            .map_err(|e| sql_error(&self.path, e))?;
        match found {
            Some(_) => Ok(()),
            None => Err(damaged(&self.path, "it holds no items table")),
        }
    }

    /// Opens the inventory to read without writing any file of the collection:
    /// immutable when SQLite's write-ahead log is absent; when it is there (a
    /// writer is at work, or was killed), from a private copy of the inventory
    /// and its log (`snapshot`), since reading through the log would write
    /// SQLite's shared-memory index (`-shm`) beside them.
    pub fn open_read_only(path: &Path) -> Result<Option<Inventory>> {
        if std::fs::symlink_metadata(path).is_err() {
            return Ok(None);
        }
        let mut wal = path.as_os_str().to_owned();
        wal.push("-wal");
        if Path::new(&wal).exists() {
            return Inventory::open_snapshot(path, Path::new(&wal)).map(Some);
        }
        let uri =
            format!("file:{}?immutable=1", percent_encoding::utf8_percent_encode(&path.to_string_lossy(), URI_PATH));
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_URI
            | nofollow(path)
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(&uri, flags).map_err(|e| sql_error(path, e))?;
        let mut inventory = Inventory::on(path, conn);
        // Readers page through in key order, so a page cache of 512 KiB (SQLite's
        // default is 2 MiB per connection, and a command may hold several) costs
        // no speed and keeps a reader's memory from growing with the inventory.
        inventory.setup("PRAGMA busy_timeout = 60000; PRAGMA cache_size = -512;")?;
        inventory.check_schema()?;
        inventory.read_older_columns()?;
        Ok(Some(inventory))
    }

    /// Reads the inventory at `path` from a private copy of it and its log
    /// `wal`, taken whole (the two files unchanged from before the copy to
    /// after it, tried a few times), then opened as SQLite opens any database
    /// with a log: the copy takes in the log, the collection's files stay as
    /// they are. The copy lives in the temporary folder until the handle ends.
    fn open_snapshot(path: &Path, wal: &Path) -> Result<Inventory> {
        let stamp = |p: &Path| crate::fsx::Stamp::at(p).ok();
        for _ in 0..8 {
            let before = (stamp(path), stamp(wal));
            let dir = tempfile::Builder::new()
                .prefix("ibi-inventory-")
                .tempdir()
                .with_path("create", std::env::temp_dir())?;
            let copy = dir.path().join("inventory.sqlite");
            std::fs::copy(path, &copy).with_path("copy", path)?;
            match std::fs::copy(wal, dir.path().join("inventory.sqlite-wal")) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                other => drop(other.with_path("copy", wal)?),
            }
            if (stamp(path), stamp(wal)) != before {
                continue;
            }
            let conn =
                Connection::open_with_flags(&copy, OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX)
                    .map_err(|e| sql_error(path, e))?;
            let mut inventory = Inventory::on(path, conn);
            inventory.setup("PRAGMA busy_timeout = 60000; PRAGMA cache_size = -512; PRAGMA query_only = 1;")?;
            inventory.check_schema()?;
            inventory.read_older_columns()?;
            // Unlinked while open: the copy lives as long as the connection.
            drop(dir);
            return Ok(inventory);
        }
        let problem = "it kept changing while a private copy was taken to read it; try again".into();
        Err(Error::Data { what: path.display().to_string(), problem })
    }

    /// An inventory from before forwarding addresses and deposit keys is read
    /// through a view in memory (temp names come first) that gives the columns it
    /// lacks as empty: reading changes nothing. `add_columns` (a writer, under the
    /// lease) adds them.
    fn read_older_columns(&mut self) -> Result<()> {
        if self.has_column("keys")? {
            return Ok(());
        }
        self.older_keys = Some(Default::default());
        let moved = if self.has_column("moved")? { "moved" } else { "NULL AS moved" };
        self.setup(&format!(
            "PRAGMA temp_store = MEMORY; CREATE TEMP VIEW IF NOT EXISTS items AS SELECT prefix, suffix, ibip, \
             origin, status, digest, versions, withdrawn, {moved}, NULL AS keys FROM main.items;"
        ))
    }

    /// Adds the columns an older inventory lacks (`moved`, `keys`), folding the
    /// content records of `.ibi/deposited/` into the records once. Under the lease.
    /// Whether a write can go through now: a write (of the header's user version,
    /// as it is) in a transaction rolled back, waiting a few seconds at most for
    /// another program's lock. Asked before items are placed, so that a locked or
    /// read-only inventory stops a write before anything changes.
    pub fn check_writable(&mut self) -> Result<()> {
        let version: i64 =
            self.conn.query_row("PRAGMA user_version", [], |row| row.get(0)).map_err(|e| sql_error(&self.path, e))?;
        self.setup("PRAGMA busy_timeout = 5000;")?;
        let probe = format!("BEGIN IMMEDIATE; PRAGMA user_version = {version};");
        let probed = self.conn.execute_batch(&probe).map_err(|e| sql_error(&self.path, e));
        let rolled_back = if self.conn.is_autocommit() { Ok(()) } else { self.setup("ROLLBACK;") };
        self.setup("PRAGMA busy_timeout = 60000;")?;
        probed.and(rolled_back)
    }

    /// Adds the indexes an older inventory lacks (`STATES_INDEX`). Under the lease.
    pub fn add_indexes(&mut self) -> Result<()> {
        self.setup(STATES_INDEX)
    }

    pub fn add_columns(&mut self) -> Result<()> {
        if self.has_column("keys")? {
            return Ok(());
        }
        self.setup("DROP VIEW IF EXISTS temp.items;")?;
        self.older_keys = None;
        if !self.has_column("moved")? {
            self.setup("ALTER TABLE main.items ADD COLUMN moved TEXT;")?;
        }
        self.setup("ALTER TABLE main.items ADD COLUMN keys TEXT;")?;
        self.adopt_old_deposit_records()
    }

    /// Whether the stored items table has `column` (inventories made before
    /// forwarding addresses and deposit keys lack `moved` and `keys`).
    fn has_column(&self, column: &str) -> Result<bool> {
        let found: Option<i64> = self
            .conn
            .query_row("SELECT 1 FROM pragma_table_info('items', 'main') WHERE name = ?1", [column], |row| row.get(0))
            .optional()
            .map_err(|e| sql_error(&self.path, e))?;
        Ok(found.is_some())
    }

    /// Once, when the `keys` column is added: the content records of `.ibi/deposited/`
    /// go into the records of the items they name, so that copies carry them.
    fn adopt_old_deposit_records(&mut self) -> Result<()> {
        let mut by_name = deposit_dir_keys(&self.path);
        let names: Vec<RepositoryName> = by_name.keys().cloned().collect();
        let mut records: Vec<ItemRecord> = self.get(&names)?.into_iter().flatten().collect();
        for record in &mut records {
            record.deposit_keys = by_name.remove(&record.name).unwrap_or_default();
        }
        self.put(&records)
    }

    fn setup(&self, sql: &str) -> Result<()> {
        self.conn.execute_batch(sql).map_err(|e| sql_error(&self.path, e))
    }

    /// Builds a new inventory at `path` from `records` (a rebuild, or an empty one at
    /// init): written to a temporary file, made durable, then renamed into place.
    pub fn create(path: &Path, records: impl Iterator<Item = Result<ItemRecord>>) -> Result<Inventory> {
        let dir = fsx::parent_dir(path);
        let temp = dir.join(format!("{}inventory.sqlite", fsx::TEMP_PREFIX));
        for leftover in [temp.clone(), temp.with_extension("sqlite-journal")] {
            fsx::remove_tree(&leftover)?;
        }
        {
            let conn = Connection::open_with_flags(&temp, OpenFlags::default() | OpenFlags::SQLITE_OPEN_NOFOLLOW)
                .map_err(|e| sql_error(&temp, e))?;
            let mut building = Inventory::on(&temp, conn);
            building.setup(&format!("PRAGMA synchronous = FULL; {SCHEMA} {STATES_INDEX}"))?;
            let mut batch = Vec::with_capacity(PAGE);
            for record in records {
                batch.push(record?);
                if batch.len() == PAGE {
                    building.put(&std::mem::take(&mut batch))?;
                }
            }
            building.put(&batch)?;
            building.setup("PRAGMA journal_mode = WAL;")?;
        }
        std::fs::rename(&temp, path).map_err(|e| Error::io("rename the inventory onto", path, e))?;
        fsx::fsync_dir(dir)?;
        Inventory::open(path)?.ok_or_else(|| Error::io("open", path, std::io::ErrorKind::NotFound.into()))
    }

    /// Writes records (inserting or replacing by name) in one durable transaction.
    pub fn put(&mut self, records: &[ItemRecord]) -> Result<()> {
        self.put_logged(records, &[])
    }

    /// Writes records and appends `events` to the log, in one durable transaction.
    pub fn put_logged(&mut self, records: &[ItemRecord], events: &[Event]) -> Result<()> {
        if records.is_empty() && events.is_empty() {
            return Ok(());
        }
        let path = self.path.clone();
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(|e| sql_error(&path, e))?;
        {
            let sql =
                format!("INSERT OR REPLACE INTO items ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)");
            let mut insert = tx.prepare_cached(&sql).map_err(|e| sql_error(&path, e))?;
            for r in records {
                let versions = serde_json::to_string(&r.versions).expect("versions serialise");
                let withdrawn = r.withdrawn.as_ref().map(|w| format!("{} {}", w.date, w.reason));
                let moved = r.moved.as_ref().map(|m| serde_json::to_string(m).expect("a forward serialises"));
                let keys = (!r.deposit_keys.is_empty()).then(|| serde_json::to_string(&r.deposit_keys).expect("keys"));
                insert
                    .execute(params![
                        r.name.prefix().to_string(),
                        r.name.suffix().to_string(),
                        r.ibip.map(|i| i.to_string()),
                        r.origin,
                        r.status.as_str(),
                        r.current().digest,
                        versions,
                        withdrawn,
                        moved,
                        keys
                    ])
                    .map_err(|e| sql_error(&path, e))?;
            }
        }
        if !events.is_empty() {
            super::fixity::forget_checks(&tx, &path, records)?;
        }
        super::events::append(&tx, &path, self.collection_id.as_deref(), events)?;
        tx.commit().map_err(|e| sql_error(&path, e))
    }

    /// Notes where items went (or are going: migrate notes it before it removes),
    /// in one durable transaction.
    pub fn note_moved(&mut self, names: &[RepositoryName], to: &Forward) -> Result<()> {
        self.set_column(names, "moved", &serde_json::to_string(to).expect("a forward serialises"), &[])
    }

    /// Marks items as taken away on purpose and logs `events`, in one durable transaction.
    pub fn mark_removed(&mut self, names: &[RepositoryName], events: &[Event]) -> Result<()> {
        self.set_column(names, "status", Status::Removed.as_str(), events)
    }

    /// Sets one column of the rows of `names` to `value` and logs `events`, in
    /// one durable transaction.
    fn set_column(
        &mut self,
        names: &[RepositoryName],
        column: &'static str,
        value: &str,
        events: &[Event],
    ) -> Result<()> {
        let path = self.path.clone();
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(|e| sql_error(&path, e))?;
        {
            let sql = format!("UPDATE items SET {column} = ?3 WHERE prefix = ?1 AND suffix = ?2");
            let mut update = tx.prepare_cached(&sql).map_err(|e| sql_error(&path, e))?;
            for name in names {
                update
                    .execute(params![name.prefix().to_string(), name.suffix().to_string(), value])
                    .map_err(|e| sql_error(&path, e))?;
            }
        }
        super::events::append(&tx, &path, self.collection_id.as_deref(), events)?;
        tx.commit().map_err(|e| sql_error(&path, e))
    }

    fn decode(&self, found: std::result::Result<ItemRecord, String>) -> Result<ItemRecord> {
        let mut record =
            found.map_err(|problem| Error::Data { what: format!("inventory {}", self.path.display()), problem })?;
        if let Some(older) = &self.older_keys {
            let keys = older.get_or_init(|| deposit_dir_keys(&self.path));
            record.deposit_keys = keys.get(&record.name).cloned().unwrap_or_default();
        }
        Ok(record)
    }

    /// The records of `names`, in the order asked.
    /// The records of `names`, in the order asked, read in one transaction (one
    /// snapshot, and the file locks taken once).
    pub fn get(&mut self, names: &[RepositoryName]) -> Result<Vec<Option<ItemRecord>>> {
        let path = self.path.clone();
        let tx = self.conn.transaction().map_err(|e| sql_error(&path, e))?;
        if let Some(found) = Self::get_sorted(&tx, &path, names)? {
            tx.finish().map_err(|e| sql_error(&path, e))?;
            return found.into_iter().map(|f| f.map(|f| self.decode(f)).transpose()).collect();
        }
        let found: Vec<Option<std::result::Result<ItemRecord, String>>> = {
            let sql = format!("SELECT {COLUMNS} FROM items WHERE prefix = ?1 AND suffix = ?2");
            let mut select = tx.prepare_cached(&sql).map_err(|e| sql_error(&path, e))?;
            names
                .iter()
                .map(|name| {
                    select
                        .query_row(params![name.prefix().to_string(), name.suffix().to_string()], row_to_record)
                        .optional()
                        .map_err(|e| sql_error(&path, e))
                })
                .collect::<Result<_>>()?
        };
        tx.finish().map_err(|e| sql_error(&path, e))?;
        found.into_iter().map(|f| f.map(|f| self.decode(f)).transpose()).collect()
    }

    /// Names asked in name order (a chunk of a walk) are read with one range scan
    /// instead of one lookup each; `None` when they are few or not in order.
    #[allow(clippy::type_complexity)]
    fn get_sorted(
        tx: &rusqlite::Transaction,
        path: &Path,
        names: &[RepositoryName],
    ) -> Result<Option<Vec<Option<std::result::Result<ItemRecord, String>>>>> {
        let keys = KeyTexts::of(names);
        if keys.len() < 8 || !keys.ascending() {
            return Ok(None);
        }
        let sql = format!(
            "SELECT {COLUMNS} FROM items WHERE (prefix, suffix) >= (?1, ?2) AND (prefix, suffix) <= (?3, ?4) \
             ORDER BY prefix, suffix"
        );
        merge_range(tx, path, &sql, &keys, row_to_record).map(Some)
    }

    /// The current identity digest of each of `names` that the inventory records as
    /// held (present or withdrawn), without decoding whole records: what a no-op
    /// mirror asks of every item.
    pub fn held_digests(&mut self, names: &[RepositoryName]) -> Result<Vec<Option<String>>> {
        let states = self.recorded_states(names)?;
        Ok(states
            .into_iter()
            .map(|state| state.filter(|(status, _)| *status != Status::Removed).map(|s| s.1))
            .collect())
    }

    /// The status and current identity digest of each of `names` that the
    /// inventory records (any status), without decoding whole records: what a
    /// verify compares each item with. Names in walk order are read with one
    /// range scan, merged with them; others one lookup each.
    pub fn recorded_states(&mut self, names: &[RepositoryName]) -> Result<Vec<Option<(Status, String)>>> {
        let path = self.path.clone();
        let err = |e| sql_error(&path, e);
        let tx = self.conn.transaction().map_err(err)?;
        let keys = KeyTexts::of(names);
        // A status this version does not know is damage, never "not recorded".
        let state = |row: &rusqlite::Row, from: usize| -> rusqlite::Result<(Status, String)> {
            let text = row.get_ref(from)?.as_str()?;
            let status = Status::parse(text).ok_or_else(|| {
                let unknown = format!("unknown status {text:?}");
                rusqlite::Error::FromSqlConversionFailure(from, rusqlite::types::Type::Text, unknown.into())
            })?;
            Ok((status, row.get(from + 1)?))
        };
        let found = if keys.len() >= 8 && keys.ascending() {
            merge_range(&tx, &path, STATES_IN_RANGE, &keys, |row| state(row, 2))?
        } else {
            let sql = "SELECT status, digest FROM items WHERE prefix = ?1 AND suffix = ?2";
            let mut select = tx.prepare_cached(sql).map_err(err)?;
            let lookup = |at| {
                let key = keys.get(at);
                select.query_row(params![key.0, key.1], |row| state(row, 0)).optional().map_err(err)
            };
            (0..keys.len()).map(lookup).collect::<Result<Vec<_>>>()?
        };
        tx.finish().map_err(err)?;
        Ok(found)
    }

    /// The newest date among the names of `prefix` the inventory records (held or
    /// ever held). Suffixes of one prefix sort by date as text (fixed-width fields);
    /// the last few are parsed to be sure.
    /// The date of the newest name of `prefix` handed out with no item
    /// (`ibi mint -C`), as the log's `mint` events hold them: names are minted
    /// in order, so the last such event is the newest (`events_mints`).
    pub fn newest_minted(&self, prefix: &crate::id::Prefix) -> Result<Option<crate::id::Timestamp>> {
        let has_log = self
            .conn
            .query_row("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'events'", [], |_| Ok(()))
            .optional()
            .map_err(|e| sql_error(&self.path, e))?
            .is_some();
        if !has_log {
            return Ok(None);
        }
        let sql = "SELECT item FROM events WHERE body ->> '$.type' IS 'mint' AND item >= ?1 AND item < ?2 \
                   ORDER BY seq DESC LIMIT 1";
        let (low, high) = (format!("{prefix}/"), format!("{prefix}0"));
        let item: Option<Option<String>> = self
            .conn
            .query_row(sql, params![low, high], |row| row.get(0))
            .optional()
            .map_err(|e| sql_error(&self.path, e))?;
        Ok(item.flatten().and_then(|name| RepositoryName::parse(&name).ok()).map(|name| name.date()))
    }

    pub fn newest_of(&self, prefix: &crate::id::Prefix) -> Result<Option<crate::id::Timestamp>> {
        let sql = "SELECT suffix FROM items WHERE prefix = ?1 ORDER BY suffix DESC LIMIT 16";
        let mut select = self.conn.prepare_cached(sql).map_err(|e| sql_error(&self.path, e))?;
        let prefix = prefix.to_string();
        let rows =
            select.query_map(params![prefix], |row| row.get::<_, String>(0)).map_err(|e| sql_error(&self.path, e))?;
        let mut newest = None;
        for suffix in rows {
            let suffix = suffix.map_err(|e| sql_error(&self.path, e))?;
            if let Ok(name) = RepositoryName::parse(&format!("{prefix}/{suffix}")) {
                newest = newest.max(Some(name.date()));
            }
        }
        Ok(newest)
    }

    /// Up to `PAGE` records after `after`, in name order (`RepositoryName: Ord`
    /// compares prefix, then suffix, as the primary key does).
    pub fn page(&self, after: Option<&RepositoryName>) -> Result<Vec<ItemRecord>> {
        let sql = format!(
            "SELECT {COLUMNS} FROM items WHERE (prefix, suffix) > (?1, ?2) ORDER BY prefix, suffix LIMIT {PAGE}"
        );
        let mut select = self.conn.prepare_cached(&sql).map_err(|e| sql_error(&self.path, e))?;
        let (prefix, suffix) =
            after.map_or((String::new(), String::new()), |n| (n.prefix().to_string(), n.suffix().to_string()));
        let rows = select.query_map(params![prefix, suffix], row_to_record).map_err(|e| sql_error(&self.path, e))?;
        rows.map(|row| self.decode(row.map_err(|e| sql_error(&self.path, e))?)).collect()
    }
}

impl Inventory {
    /// Up to `PAGE` record summaries after `after`, in name order: five short
    /// columns, each name checked, the IBIp kept only when it parses (as `page` does).
    pub fn summary_page(&self, after: Option<&RepositoryName>) -> Result<Vec<RecordSummary>> {
        let mut select = self.conn.prepare_cached(SUMMARIES_AFTER).map_err(|e| sql_error(&self.path, e))?;
        let (prefix, suffix) =
            after.map_or((String::new(), String::new()), |n| (n.prefix().to_string(), n.suffix().to_string()));
        let mut rows = select.query(params![prefix, suffix, PAGE as i64]).map_err(|e| sql_error(&self.path, e))?;
        let mut page = Vec::with_capacity(PAGE);
        let mut names = NameReader::default();
        while let Some(row) = rows.next().map_err(|e| sql_error(&self.path, e))? {
            let summary = summary_of(row, &mut names).map_err(|e| sql_error(&self.path, e))?;
            page.push(
                summary
                    .map_err(|problem| Error::Data { what: format!("inventory {}", self.path.display()), problem })?,
            );
        }
        Ok(page)
    }

    /// Up to `PAGE` names of present items after `after`, in name order.
    pub fn present_page(&self, after: Option<&RepositoryName>) -> Result<Vec<RepositoryName>> {
        let mut select = self.conn.prepare_cached(PRESENT_AFTER).map_err(|e| sql_error(&self.path, e))?;
        let (prefix, suffix) =
            after.map_or((String::new(), String::new()), |n| (n.prefix().to_string(), n.suffix().to_string()));
        let mut rows = select
            .query(params![prefix, suffix, Status::Present.as_str(), PAGE as i64])
            .map_err(|e| sql_error(&self.path, e))?;
        let (mut page, mut names) = (Vec::with_capacity(PAGE), NameReader::default());
        while let Some(row) = rows.next().map_err(|e| sql_error(&self.path, e))? {
            let text = |i| row.get_ref(i).and_then(|v| Ok(v.as_str()?));
            let (prefix, suffix) = (text(0), text(1));
            let (prefix, suffix) =
                (prefix.map_err(|e| sql_error(&self.path, e))?, suffix.map_err(|e| sql_error(&self.path, e))?);
            let name = names.name(prefix, suffix);
            page.push(
                name.map_err(|problem| Error::Data { what: format!("inventory {}", self.path.display()), problem })?,
            );
        }
        Ok(page)
    }
}

/// A collection's open inventory, shared by the clones of its handle: opened on
/// first use and kept, so a run opens the database once. Fixity checks are
/// written through a connection of their own (`fixity`), so that a verify's
/// batch of checks never holds up the lookups of the items being hashed: in
/// write-ahead-log mode the one reads while the other writes.
#[derive(Default)]
pub struct InventoryHandle {
    shared: std::sync::Mutex<Option<Inventory>>,
    fixity: std::sync::Mutex<Option<Inventory>>,
}

impl std::fmt::Debug for InventoryHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InventoryHandle")
    }
}

impl super::Collection {
    /// Runs `work` on the collection's inventory; `None` before its first write (an
    /// older collection, or one whose inventory was lost).
    pub fn with_inventory<T>(&self, work: impl FnOnce(&mut Inventory) -> Result<T>) -> Result<Option<T>> {
        self.with_connection(&self.inventory.shared, work)
    }

    /// Runs `work` on the connection that writes fixity checks (as `with_inventory`).
    pub fn with_fixity_writer<T>(&self, work: impl FnOnce(&mut Inventory) -> Result<T>) -> Result<Option<T>> {
        self.with_connection(&self.inventory.fixity, work)
    }

    fn with_connection<T>(
        &self,
        slot: &std::sync::Mutex<Option<Inventory>>,
        work: impl FnOnce(&mut Inventory) -> Result<T>,
    ) -> Result<Option<T>> {
        let mut cached = crate::sync::lock(slot);
        if cached.is_none() {
            *cached = match self.read_only {
                true => Inventory::open_read_only(&self.layout.inventory())?,
                false => Inventory::open(&self.layout.inventory())?,
            };
        }
        let inventory = cached.as_mut();
        if let Some(inventory) = inventory {
            if inventory.collection_id.is_none() {
                inventory.collection_id = self.id.get().cloned();
            }
            return work(inventory).map(Some);
        }
        Ok(None)
    }

    /// Forgets the open inventory (it was rebuilt into a new file).
    fn reopen_inventory(&self) {
        *crate::sync::lock(&self.inventory.shared) = None;
        *crate::sync::lock(&self.inventory.fixity) = None;
    }

    /// Every record, in name order, a page at a time.
    pub fn all_records(&self) -> impl Iterator<Item = Result<ItemRecord>> + Send + '_ {
        self.paged(|inv, after| inv.page(after), |record| &record.name)
    }

    /// Every record's summary, in name order, a page at a time, without decoding
    /// versions, keys or forwards.
    pub fn record_summaries(&self) -> impl Iterator<Item = Result<RecordSummary>> + Send + '_ {
        self.paged(|inv, after| inv.summary_page(after), |summary| &summary.name)
    }

    /// The names of the items present (not withdrawn, moved or removed), in name
    /// order, a page at a time, without decoding their records.
    pub fn present_names(&self) -> impl Iterator<Item = Result<RepositoryName>> + Send + '_ {
        self.paged(|inv, after| inv.present_page(after), |name| name)
    }

    /// The rows `fetch` reads a page at a time after the last one's name (`name_of`),
    /// until a page comes back short.
    fn paged<'a, T: Send + 'a>(
        &'a self,
        fetch: impl Fn(&mut Inventory, Option<&RepositoryName>) -> Result<Vec<T>> + Send + 'a,
        name_of: impl Fn(&T) -> &RepositoryName + Send + 'a,
    ) -> impl Iterator<Item = Result<T>> + Send + 'a {
        let mut after: Option<RepositoryName> = None;
        let mut done = false;
        let mut buffer = std::collections::VecDeque::new();
        std::iter::from_fn(move || loop {
            if let Some(row) = buffer.pop_front() {
                return Some(Ok(row));
            }
            if done {
                return None;
            }
            match self.with_inventory(|inv| fetch(inv, after.as_ref())) {
                Err(e) => {
                    done = true;
                    return Some(Err(e));
                }
                Ok(page) => {
                    let page = page.unwrap_or_default();
                    done = page.len() < PAGE;
                    after = page.last().map(|row| name_of(row).clone());
                    buffer.extend(page);
                }
            }
        })
    }

    /// Records items just placed, `known` as given, the others read from their
    /// bags, and logs each as `log` says, in one durable transaction.
    pub fn record(&self, known: Vec<ItemRecord>, unknown: &[RepositoryName], log: &StepLog) -> Result<()> {
        use rayon::prelude::*;
        if !self.layout.inventory().exists() {
            return Ok(());
        }
        let mut records = known;
        records.par_extend(
            unknown
                .par_iter()
                .filter(|name| self.contains(name))
                .filter_map(|name| ItemRecord::from_bag(&crate::bag::DirBag::new(&self.layout.item(name)), name).ok()),
        );
        let events: Vec<Event> = records.iter().flat_map(|record| log.events_of(record)).collect();
        self.with_inventory(|inventory| inventory.put_logged(&records, &events)).map(drop)
    }

    /// Notes where items went (`Writer::note_moved`).
    pub fn record_moved(&self, names: &[RepositoryName], to: &Forward) -> Result<()> {
        self.with_inventory(|inventory| inventory.note_moved(names, to)).map(drop)
    }

    /// Records items moved in from `src` (a rename, `move_all`), with the content
    /// keys `src` recorded for them and their events there, as one migrate step.
    pub fn record_arrived_from(&self, src: &super::Collection, names: &[RepositoryName], log: &StepLog) -> Result<()> {
        let held = src.with_inventory(|inventory| inventory.get(names))?.unwrap_or_default();
        let keys: std::collections::HashMap<RepositoryName, Vec<String>> = held
            .into_iter()
            .flatten()
            .filter(|r| !r.deposit_keys.is_empty())
            .map(|r| (r.name, r.deposit_keys))
            .collect();
        let pairs: Vec<(String, RepositoryName)> =
            keys.iter().flat_map(|(name, ks)| ks.iter().map(move |k| (k.clone(), name.clone()))).collect();
        self.write_deposit_records(&pairs)?;
        let mut log = log.clone();
        let note = format!("from {}", crate::store::Store::location(src));
        for (name, carried) in names.iter().zip(crate::store::log::carried_events(src, names)?) {
            let action = Action { kind: Some(EventKind::MigrateIn), note: note.clone(), carried };
            log.actions.insert(name.clone(), action);
        }
        let records: Vec<ItemRecord> = names
            .iter()
            .filter_map(|name| ItemRecord::from_bag(&crate::bag::DirBag::new(&self.layout.item(name)), name).ok())
            .map(|mut record| {
                record.deposit_keys = keys.get(&record.name).cloned().unwrap_or_default();
                record
            })
            .collect();
        self.record(records, &[], &log)
    }

    /// Records items taken away on purpose (migrate), each logged as one step.
    pub fn record_removed(&self, names: &[RepositoryName], step: &str) -> Result<()> {
        if names.is_empty() {
            return Ok(());
        }
        let records = self.with_inventory(|inventory| inventory.get(names))?.unwrap_or_default();
        let events: Vec<Event> =
            names.iter().zip(&records).map(|(name, record)| removal_event(name, record.as_ref(), step)).collect();
        self.with_inventory(|inventory| inventory.mark_removed(names, &events)).map(drop)
    }

    /// Gives an older collection what this version keeps: an id, an inventory
    /// rebuilt from its bags, the inventory's newer columns and indexes, and its
    /// content records in the inventory. Call with the write lock held.
    pub fn upgrade(&self) -> Result<()> {
        if self.id.get().is_none() {
            let mut config = self.config.clone();
            let id = crate::store::config::new_collection_id();
            config.id = Some(id.clone());
            fsx::atomic_write(&self.layout.config(), config.to_toml().as_bytes())?;
            let _ = self.id.set(id);
        }
        if !self.layout.inventory().exists() {
            self.rebuild_inventory()?;
        }
        self.with_inventory(|inventory| {
            inventory.add_columns()?;
            inventory.add_indexes()?;
            inventory.upgrade_older_fixity()
        })?;
        self.adopt_deposit_files()
    }

    /// Rebuilds the inventory from the bags. Items that vanished are forgotten: the
    /// record of them was the inventory. Returns how many items it recorded.
    pub fn rebuild_inventory(&self) -> Result<usize> {
        use rayon::prelude::*;
        let names: Vec<RepositoryName> = self
            .walk()
            .filter_map(|entry| match entry {
                Ok(super::Entry::Item(name)) => Some(Ok(name)),
                Ok(super::Entry::Stray { .. }) => None,
                Err(e) => Some(Err(e)),
            })
            .collect::<Result<_>>()?;
        let records: Vec<ItemRecord> = names
            .par_iter()
            .filter_map(|name| ItemRecord::from_bag(&crate::bag::DirBag::new(&self.layout.item(name)), name).ok())
            .collect();
        let count = records.len();
        self.reopen_inventory();
        Inventory::create(&self.layout.inventory(), records.into_iter().map(Ok))?;
        Ok(count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::inventory::VersionRecord;

    fn record(name: &RepositoryName, status: Status, digest: &str) -> ItemRecord {
        let version = VersionRecord { number: 1, date: "2026-01-01T00:00:00Z".into(), digest: digest.into() };
        ItemRecord {
            name: name.clone(),
            ibip: None,
            origin: None,
            status,
            versions: vec![version],
            withdrawn: None,
            moved: None,
            deposit_keys: Vec::new(),
        }
    }

    /// A page of summaries, or of present names, parses only the suffix of a row
    /// whose prefix is the row before's: the names are those a whole parse
    /// gives, across prefixes.
    #[test]
    fn summaries_name_what_a_whole_parse_names() {
        let dir = tempfile::tempdir().unwrap();
        let mut inventory = Inventory::create(&dir.path().join("inventory.sqlite"), std::iter::empty()).unwrap();
        let texts: Vec<String> = ["a.b/c", "a.b/c.8080", "x.y/z"]
            .iter()
            .flat_map(|prefix| (0..5).map(move |i| format!("{prefix}/202{i}/01.01.00.0{i}")))
            .collect();
        let names: Vec<RepositoryName> = texts.iter().map(|t| RepositoryName::parse(t).unwrap()).collect();
        let records: Vec<ItemRecord> = names.iter().map(|n| record(n, Status::Present, &"0".repeat(64))).collect();
        inventory.put(&records).unwrap();
        let page = inventory.summary_page(None).unwrap();
        let listed: Vec<(String, String)> =
            page.iter().map(|s| (s.name.to_string(), s.name.date().to_decimal())).collect();
        let mut expected: Vec<(String, String)> =
            names.iter().map(|n| (n.to_string(), n.date().to_decimal())).collect();
        expected.sort_by_key(|(text, _)| {
            RepositoryName::parse(text).map(|n| (n.prefix().to_string(), n.suffix().to_string())).unwrap()
        });
        assert_eq!(listed, expected);
        let present: Vec<String> = inventory.present_page(None).unwrap().iter().map(ToString::to_string).collect();
        assert_eq!(present, expected.iter().map(|(text, _)| text.clone()).collect::<Vec<_>>());
    }

    /// Every reader in name order is served by the states index alone (a
    /// column it lacks would send the scan back to the whole records), and an
    /// inventory made before the index gains it at its next write.
    #[test]
    fn the_name_order_readers_scan_only_the_states_index() {
        let dir = tempfile::tempdir().unwrap();
        let mut inventory = Inventory::create(&dir.path().join("inventory.sqlite"), std::iter::empty()).unwrap();
        let plan = |inventory: &Inventory, sql: &str| -> String {
            let explain = format!("EXPLAIN QUERY PLAN {sql}");
            let mut select = inventory.conn.prepare(&explain).unwrap();
            let blanks = rusqlite::params_from_iter(std::iter::repeat_n("", select.parameter_count()));
            let rows = select.query_map(blanks, |row| row.get::<_, String>(3));
            rows.unwrap().collect::<rusqlite::Result<Vec<_>>>().unwrap().join("; ")
        };
        for sql in [STATES_IN_RANGE, SUMMARIES_AFTER, PRESENT_AFTER] {
            assert!(plan(&inventory, sql).contains("COVERING INDEX items_states"), "{sql}: {}", plan(&inventory, sql));
        }
        inventory.conn.execute_batch("DROP INDEX items_states;").unwrap();
        assert!(!plan(&inventory, SUMMARIES_AFTER).contains("items_states"));
        inventory.add_indexes().unwrap();
        assert!(plan(&inventory, SUMMARIES_AFTER).contains("COVERING INDEX items_states"));
    }

    /// The two fields verify reads alone agree with whole records, by either
    /// path: names in walk order (one range scan) and names in any order.
    #[test]
    fn recorded_states_agree_with_whole_records() {
        let dir = tempfile::tempdir().unwrap();
        let mut inventory = Inventory::create(&dir.path().join("inventory.sqlite"), std::iter::empty()).unwrap();
        let names: Vec<RepositoryName> = (0..12)
            .map(|i| RepositoryName::parse(&format!("a.b/c.8080/2026/01.01.00.{i:02}")).unwrap())
            .chain((0..12).map(|i| RepositoryName::parse(&format!("a.b/c/2026/01.01.00.{i:02}")).unwrap()))
            .collect();
        let statuses = [Status::Present, Status::Withdrawn, Status::Removed];
        let kept: Vec<ItemRecord> = (names.iter().enumerate())
            .filter(|(i, _)| i % 4 != 3)
            .map(|(i, name)| record(name, statuses[i % 3], &format!("{i:064x}")))
            .collect();
        inventory.put(&kept).unwrap();
        let mut asked = names.clone();
        asked.sort_by_key(|n| (n.prefix().to_string(), n.suffix().to_string()));
        let mut shuffled = asked.clone();
        shuffled.reverse();
        for names in [asked, shuffled, names[..3].to_vec()] {
            let whole = inventory.get(&names).unwrap();
            let expected: Vec<Option<(Status, String)>> =
                whole.into_iter().map(|r| r.map(|r| (r.status, r.current().digest.clone()))).collect();
            assert_eq!(inventory.recorded_states(&names).unwrap(), expected);
            assert!(expected.iter().any(Option::is_none) || names.len() == 3);
            let held: Vec<Option<String>> = (expected.into_iter())
                .map(|s| s.filter(|(status, _)| *status != Status::Removed).map(|s| s.1))
                .collect();
            assert_eq!(inventory.held_digests(&names).unwrap(), held);
        }
    }
}
