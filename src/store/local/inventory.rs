//! The inventory of a local collection: `.ibi/inventory.sqlite`, one row per
//! item the collection holds or has held (ARCHITECTURE.md, "The inventory").
//! SQLite in WAL mode with `synchronous=FULL`: a commit is durable when it
//! returns and survives SIGKILL. `place_all`, `remove_all` and `move_all` commit
//! after their renames and before they drop their journal record, so recovery
//! replays a killed writer's batch into the inventory from the bags. A lost
//! inventory is rebuilt from the bags into a temporary file that is renamed into
//! place only when complete. Links are never followed (`SQLITE_OPEN_NOFOLLOW`).

use std::path::{Path, PathBuf};

use rusqlite::{params, Connection, OpenFlags, OptionalExtension};

use crate::bag::history::Withdrawal;
use crate::error::{Error, Result};
use crate::fsx;
use crate::id::{Ibip, RepositoryName};
use crate::store::inventory::{ItemRecord, Status, VersionRecord};

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
    PRIMARY KEY (prefix, suffix)
) WITHOUT ROWID;
";

/// How many records a page of `all` reads at once.
const PAGE: usize = 4096;

fn sql_error(path: &Path, e: rusqlite::Error) -> Error {
    Error::Data { what: format!("inventory {}", path.display()), problem: e.to_string() }
}

/// An open inventory.
pub struct Inventory {
    path: PathBuf,
    conn: Connection,
}

const COLUMNS: &str = "prefix, suffix, ibip, origin, status, digest, versions, withdrawn";

fn row_to_record(row: &rusqlite::Row) -> rusqlite::Result<std::result::Result<ItemRecord, String>> {
    let (prefix, suffix): (String, String) = (row.get(0)?, row.get(1)?);
    let (ibip, origin, status): (Option<String>, Option<String>, String) = (row.get(2)?, row.get(3)?, row.get(4)?);
    let (versions, withdrawn): (String, Option<String>) = (row.get(6)?, row.get(7)?);
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
        })
    })())
}

impl Inventory {
    /// Opens the inventory at `path`; `None` when the collection has none yet.
    pub fn open(path: &Path) -> Result<Option<Inventory>> {
        if std::fs::symlink_metadata(path).is_err() {
            return Ok(None);
        }
        let flags =
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NOFOLLOW | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags).map_err(|e| sql_error(path, e))?;
        let inventory = Inventory { path: path.to_path_buf(), conn };
        inventory.setup("PRAGMA busy_timeout = 60000; PRAGMA synchronous = FULL;")?;
        Ok(Some(inventory))
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
            let mut building = Inventory {
                path: temp.clone(),
                conn: Connection::open_with_flags(&temp, OpenFlags::default() | OpenFlags::SQLITE_OPEN_NOFOLLOW)
                    .map_err(|e| sql_error(&temp, e))?,
            };
            building.setup(&format!("PRAGMA synchronous = FULL; {SCHEMA}"))?;
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
        if records.is_empty() {
            return Ok(());
        }
        let path = self.path.clone();
        let tx = self.conn.transaction().map_err(|e| sql_error(&path, e))?;
        {
            let sql = format!("INSERT OR REPLACE INTO items ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
            let mut insert = tx.prepare_cached(&sql).map_err(|e| sql_error(&path, e))?;
            for r in records {
                let versions = serde_json::to_string(&r.versions).expect("versions serialise");
                let withdrawn = r.withdrawn.as_ref().map(|w| format!("{} {}", w.date, w.reason));
                insert
                    .execute(params![
                        r.name.prefix().to_string(),
                        r.name.suffix().to_string(),
                        r.ibip.map(|i| i.to_string()),
                        r.origin,
                        r.status.as_str(),
                        r.current().digest,
                        versions,
                        withdrawn
                    ])
                    .map_err(|e| sql_error(&path, e))?;
            }
        }
        tx.commit().map_err(|e| sql_error(&path, e))
    }

    /// Marks items as taken away on purpose, in one durable transaction.
    pub fn mark_removed(&mut self, names: &[RepositoryName]) -> Result<()> {
        let path = self.path.clone();
        let tx = self.conn.transaction().map_err(|e| sql_error(&path, e))?;
        {
            let mut update = tx
                .prepare_cached("UPDATE items SET status = 'removed' WHERE prefix = ?1 AND suffix = ?2")
                .map_err(|e| sql_error(&path, e))?;
            for name in names {
                update
                    .execute(params![name.prefix().to_string(), name.suffix().to_string()])
                    .map_err(|e| sql_error(&path, e))?;
            }
        }
        tx.commit().map_err(|e| sql_error(&path, e))
    }

    fn decode(&self, found: std::result::Result<ItemRecord, String>) -> Result<ItemRecord> {
        found.map_err(|problem| Error::Data { what: format!("inventory {}", self.path.display()), problem })
    }

    /// The records of `names`, in the order asked.
    pub fn get(&self, names: &[RepositoryName]) -> Result<Vec<Option<ItemRecord>>> {
        let sql = format!("SELECT {COLUMNS} FROM items WHERE prefix = ?1 AND suffix = ?2");
        let mut select = self.conn.prepare_cached(&sql).map_err(|e| sql_error(&self.path, e))?;
        names
            .iter()
            .map(|name| {
                let found = select
                    .query_row(params![name.prefix().to_string(), name.suffix().to_string()], row_to_record)
                    .optional()
                    .map_err(|e| sql_error(&self.path, e))?;
                found.map(|f| self.decode(f)).transpose()
            })
            .collect()
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

/// Every record of the inventory at `path`, in name order, a page at a time.
pub fn all(path: &Path) -> impl Iterator<Item = Result<ItemRecord>> + Send {
    let path = path.to_path_buf();
    let mut after: Option<RepositoryName> = None;
    let mut done = false;
    let mut buffer = std::collections::VecDeque::new();
    std::iter::from_fn(move || loop {
        if let Some(record) = buffer.pop_front() {
            return Some(Ok(record));
        }
        if done {
            return None;
        }
        let page = Inventory::open(&path).and_then(|inv| match inv {
            Some(inv) => inv.page(after.as_ref()),
            None => Ok(Vec::new()),
        });
        match page {
            Err(e) => {
                done = true;
                return Some(Err(e));
            }
            Ok(page) => {
                done = page.len() < PAGE;
                after = page.last().map(|r: &ItemRecord| r.name.clone());
                buffer.extend(page);
            }
        }
    })
}

impl super::Collection {
    /// The collection's inventory, `None` before its first write (an older collection).
    pub fn inventory(&self) -> Result<Option<Inventory>> {
        Inventory::open(&self.layout.inventory())
    }

    /// Records items just placed, from their bags (read in parallel). Without an
    /// inventory this does nothing: the first write's `recover` builds it from the bags.
    pub fn record_placed(&self, names: &[RepositoryName]) -> Result<()> {
        use rayon::prelude::*;
        let Some(mut inventory) = self.inventory()? else { return Ok(()) };
        let records: Vec<ItemRecord> = names
            .par_iter()
            .filter(|name| self.contains(name))
            .map(|name| ItemRecord::from_bag(&crate::bag::DirBag::new(&self.layout.item(name)), name))
            .filter_map(|record| record.ok())
            .collect();
        inventory.put(&records)
    }

    /// Records items taken away on purpose.
    pub fn record_removed(&self, names: &[RepositoryName]) -> Result<()> {
        match self.inventory()? {
            Some(mut inventory) => inventory.mark_removed(names),
            None => Ok(()),
        }
    }

    /// Gives an older collection what this version keeps: an id and an inventory
    /// rebuilt from its bags. Call with the write lock held.
    pub fn upgrade(&self) -> Result<()> {
        if self.id.get().is_none() {
            let mut config = self.config.clone();
            let id = super::config::new_collection_id();
            config.id = Some(id.clone());
            fsx::atomic_write(&self.layout.config(), config.to_toml().as_bytes())?;
            let _ = self.id.set(id);
        }
        if self.inventory()?.is_none() {
            self.rebuild_inventory()?;
        }
        Ok(())
    }

    /// Rebuilds the inventory from the bags. Items that vanished are forgotten: the
    /// record of them was the inventory. Returns how many items it recorded.
    pub fn rebuild_inventory(&self) -> Result<usize> {
        use rayon::prelude::*;
        let names: Vec<RepositoryName> = self
            .walk()
            .filter_map(|entry| match entry {
                Ok(super::Entry::Item(item)) => Some(Ok(item.name)),
                Ok(super::Entry::Stray { .. }) => None,
                Err(e) => Some(Err(e)),
            })
            .collect::<Result<_>>()?;
        let records: Vec<ItemRecord> = names
            .par_iter()
            .filter_map(|name| ItemRecord::from_bag(&crate::bag::DirBag::new(&self.layout.item(name)), name).ok())
            .collect();
        let count = records.len();
        Inventory::create(&self.layout.inventory(), records.into_iter().map(Ok))?;
        Ok(count)
    }
}
