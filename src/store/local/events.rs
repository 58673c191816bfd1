//! The event log of a local collection: the inventory's `events` table (made on
//! first use), one row per event with its place (`seq`), id, item, canonical
//! body and hash (`crate::events`). Events are appended inside the SQLite
//! transaction that records the change they describe, so a kill leaves both or
//! neither; an event whose id is already logged (a journalled batch replayed by
//! recovery, an event carried twice) is skipped, so a rerun logs nothing twice.
//! The `chain_cursor` table's one row keeps where the last chain check ended.

use rusqlite::{params, OptionalExtension, Transaction};

use super::sqlite::{sql_error, Inventory};
use crate::error::Result;
use crate::events::{ChainCursor, Event, StoredEvent};

/// How many low bits of `seq` a band of fixity checks spans: 16,384 events.
const BAND_BITS: u32 = 14;

/// `BAND_BITS` as the SQL text writes it (`concat!` takes only literals; a
/// test holds the two equal).
macro_rules! band_bits {
    () => {
        "14"
    };
}

/// The log's table and indexes. The fixity checks are indexed by band of the
/// log (16,384 events), then item, then place: a verify's checks all land in
/// the newest bands, in the order it checks items (name order), so each batch
/// writes a few index pages. Indexed by item first (`events_checks`, dropped
/// here), each check went to its item's place among all its earlier checks, a
/// page of its own once an item had been checked a few dozen times: a full
/// verify of 50,000 items then wrote 534 MB to the inventory.
const EVENTS_SCHEMA: &str = concat!(
    "CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL,
    item TEXT,
    body TEXT NOT NULL,
    hash TEXT NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS events_id ON events (id);
CREATE INDEX IF NOT EXISTS events_carried ON events (item, seq) WHERE body ->> '$.type' IS NOT 'fixity';
CREATE INDEX IF NOT EXISTS events_checks_banded ON events (seq >> ",
    band_bits!(),
    ", item, seq) WHERE body ->> '$.type' IS 'fixity';
CREATE INDEX IF NOT EXISTS events_mints ON events (seq) WHERE body ->> '$.type' IS 'mint';
DROP INDEX IF EXISTS events_checks;
DROP INDEX IF EXISTS events_item;"
);

/// The band of the log that the event at `seq` is in.
fn band_of(seq: u64) -> u64 {
    seq >> BAND_BITS
}

/// The first `limit` of an item's events that a copy carries (all but its
/// fixity checks), through the `events_carried` index: one look, however often
/// the item was checked. The limit is written into the text, not bound: SQLite
/// prepares a statement whose LIMIT is a bound parameter again at every run.
fn carried_sql(limit: usize) -> String {
    format!(
        "SELECT seq, body, hash FROM events
         WHERE item = ?1 AND body ->> '$.type' IS NOT 'fixity' ORDER BY seq LIMIT {limit}"
    )
}

/// A page of one item's carried events (all but its fixity checks).
const ITEM_CARRIED_PAGE: &str = "SELECT seq, body, hash FROM events
    WHERE item = ?3 AND seq > ?1 AND body ->> '$.type' IS NOT 'fixity' ORDER BY seq LIMIT ?2";

/// A page of one item's fixity checks within one band of the log (`band_of`).
const ITEM_CHECKS_IN_BAND: &str = concat!(
    "SELECT seq, body, hash FROM events WHERE seq >> ",
    band_bits!(),
    " = ?4 AND item = ?3 AND seq > ?1 AND body ->> '$.type' IS 'fixity' ORDER BY seq LIMIT ?2"
);

/// One row: where the last chain check of the log ended (`ChainCursor`).
const CURSOR_SCHEMA: &str = "CREATE TABLE IF NOT EXISTS chain_cursor (
    one INTEGER PRIMARY KEY CHECK (one = 1),
    through INTEGER NOT NULL,
    hash TEXT NOT NULL,
    window_next INTEGER NOT NULL
);";

/// Appends `events` (in order, each after the last) within `tx`, skipping those
/// whose id is already logged.
/// A log begun here is bound to `collection_id` (`crate::events::first_prev`).
pub(super) fn append(
    tx: &Transaction,
    path: &std::path::Path,
    collection_id: Option<&str>,
    events: &[Event],
) -> Result<()> {
    if events.is_empty() {
        return Ok(());
    }
    let err = |e| sql_error(path, e);
    tx.execute_batch(EVENTS_SCHEMA).map_err(err)?;
    let last: Option<(u64, String)> = tx
        .query_row("SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1", [], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()
        .map_err(err)?;
    let (mut seq, mut prev) = last.unwrap_or_else(|| (0, crate::events::first_prev(collection_id)));
    // An id already logged is skipped by the insert itself (one look in the
    // unique index on ids, not a query and then an insert); any other conflict
    // (a seq taken) is still an error.
    let sql = "INSERT INTO events (seq, id, item, body, hash) VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (id) DO NOTHING";
    let mut insert = tx.prepare_cached(sql).map_err(err)?;
    for event in events {
        let stored = event.clone().seal(seq + 1, &prev);
        if insert.execute(params![seq + 1, event.id, event.item, stored.body, stored.hash]).map_err(err)? == 0 {
            continue;
        }
        seq += 1;
        prev = stored.hash;
    }
    Ok(())
}

impl Inventory {
    /// Appends events that go with no other change, in one durable transaction.
    pub fn log(&mut self, events: &[Event]) -> Result<()> {
        if events.is_empty() {
            return Ok(());
        }
        let path = self.path.clone();
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(|e| sql_error(&path, e))?;
        append(&tx, &path, self.collection_id.as_deref(), events)?;
        tx.commit().map_err(|e| sql_error(&path, e))
    }

    fn has_events(&self) -> Result<bool> {
        let found: Option<i64> = self
            .conn
            .query_row("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'events'", [], |r| r.get(0))
            .optional()
            .map_err(|e| sql_error(&self.path, e))?;
        Ok(found.is_some())
    }

    /// The last event's place and hash (the log's head); `None` for an empty log.
    pub fn log_head(&self) -> Result<Option<(u64, String)>> {
        if !self.has_events()? {
            return Ok(None);
        }
        self.conn
            .query_row("SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1", [], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()
            .map_err(|e| sql_error(&self.path, e))
    }

    /// The first `limit` events that a copy of each of `items` carries (all but
    /// fixity checks, which stay with the copy that made them), in order, read in one
    /// transaction (one lock and one look at the log's state for the batch,
    /// where a query each would take them once per item).
    pub fn items_events(&mut self, items: &[String], limit: usize) -> Result<Vec<Vec<StoredEvent>>> {
        if !self.has_events()? {
            return Ok(vec![Vec::new(); items.len()]);
        }
        let path = self.path.clone();
        let err = |e| sql_error(&path, e);
        let tx = self.conn.transaction().map_err(err)?;
        let mut found = Vec::with_capacity(items.len());
        {
            let mut select = tx.prepare_cached(&carried_sql(limit)).map_err(err)?;
            for item in items {
                let rows = select
                    .query_map(params![item], |r| Ok(StoredEvent { seq: r.get(0)?, body: r.get(1)?, hash: r.get(2)? }))
                    .map_err(err)?;
                found.push(rows.collect::<rusqlite::Result<Vec<_>>>().map_err(err)?);
            }
        }
        tx.commit().map_err(err)?;
        Ok(found)
    }

    /// Up to `limit` events after `after`, of `item` only when given, in order.
    pub fn events_page(&self, after: u64, item: Option<&str>, limit: usize) -> Result<Vec<StoredEvent>> {
        if !self.has_events()? {
            return Ok(Vec::new());
        }
        let Some(item) = item else {
            let sql = "SELECT seq, body, hash FROM events WHERE seq > ?1 ORDER BY seq LIMIT ?2";
            return self.stored_events(sql, params![after, limit as i64]);
        };
        let mut page = self.stored_events(ITEM_CARRIED_PAGE, params![after, limit as i64, item])?;
        page.extend(self.item_checks(after, item, limit)?);
        page.sort_by_key(|stored| stored.seq);
        page.truncate(limit);
        Ok(page)
    }

    /// The first `limit` fixity checks of `item` after `after`: one look in
    /// each band of the log from `after`'s to the last, in order, until enough.
    fn item_checks(&self, after: u64, item: &str, limit: usize) -> Result<Vec<StoredEvent>> {
        let Some((last, _)) = self.log_head()? else { return Ok(Vec::new()) };
        let mut found = Vec::new();
        for band in band_of(after)..=band_of(last) {
            let wanted = (limit - found.len()) as i64;
            found.extend(self.stored_events(ITEM_CHECKS_IN_BAND, params![after, wanted, item, band])?);
            if found.len() >= limit {
                break;
            }
        }
        Ok(found)
    }

    /// The events a query of `seq, body, hash` gives.
    fn stored_events(&self, sql: &str, params: impl rusqlite::Params) -> Result<Vec<StoredEvent>> {
        let err = |e| sql_error(&self.path, e);
        let mut select = self.conn.prepare_cached(sql).map_err(err)?;
        let rows = select
            .query_map(params, |r| Ok(StoredEvent { seq: r.get(0)?, body: r.get(1)?, hash: r.get(2)? }))
            .map_err(err)?;
        rows.map(|row| row.map_err(err)).collect()
    }

    /// Where the last chain check ended; `None` when none was kept.
    pub fn chain_cursor(&self) -> Result<Option<ChainCursor>> {
        let err = |e| sql_error(&self.path, e);
        let kept: Option<i64> = self
            .conn
            .query_row("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'chain_cursor'", [], |r| r.get(0))
            .optional()
            .map_err(err)?;
        if kept.is_none() {
            return Ok(None);
        }
        let sql = "SELECT through, hash, window_next FROM chain_cursor WHERE one = 1";
        self.conn
            .query_row(sql, [], |r| Ok(ChainCursor { through: r.get(0)?, hash: r.get(1)?, window_next: r.get(2)? }))
            .optional()
            .map_err(err)
    }

    /// Keeps where a chain check ended, replacing the last, durably.
    pub fn keep_chain_cursor(&mut self, cursor: &ChainCursor) -> Result<()> {
        let err = |e| sql_error(&self.path, e);
        self.conn.execute_batch(CURSOR_SCHEMA).map_err(err)?;
        let sql = "INSERT OR REPLACE INTO chain_cursor (one, through, hash, window_next) VALUES (1, ?1, ?2, ?3)";
        self.conn.execute(sql, params![cursor.through, cursor.hash, cursor.window_next]).map_err(err)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::EventKind;
    use crate::store::log::MAX_CARRIED;

    /// An item checked more often than a copy carries events (`MAX_CARRIED`)
    /// lost its later history to its checks: the read counted the fixity
    /// checks it then left behind, so an update after them never travelled.
    #[test]
    fn regress_fixity_checks_crowd_out_carried_events() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("inventory.sqlite");
        let mut inventory = Inventory::create(&path, std::iter::empty()).unwrap();
        let item = "a.b/c/2026/01.01.00.00";
        let event = |kind| Event::new(kind, Some(item.to_string()), "success", String::new());
        let mut events = vec![event(EventKind::Deposit)];
        events.extend((0..MAX_CARRIED).map(|_| event(EventKind::Fixity)));
        events.push(event(EventKind::Update));
        inventory.log(&events).unwrap();
        let carried = inventory.items_events(&[item.to_string()], MAX_CARRIED).unwrap();
        let kinds: Vec<EventKind> = carried[0].iter().map(|stored| stored.event().unwrap().kind).collect();
        let last = kinds.last();
        assert!(kinds == [EventKind::Deposit, EventKind::Update], "{} carried, the last {last:?}", kinds.len());
        let first_page = inventory.events_page(0, Some(item), 3).unwrap();
        assert_eq!(
            first_page.iter().map(|stored| stored.seq).collect::<Vec<_>>(),
            [1, 2, 3],
            "pages still hold every event"
        );
        let last_page = inventory.events_page(MAX_CARRIED as u64, Some(item), 3).unwrap();
        assert_eq!(
            last_page.iter().map(|stored| stored.seq).collect::<Vec<_>>(),
            [MAX_CARRIED as u64 + 1, MAX_CARRIED as u64 + 2]
        );
    }

    /// `items_events` bound its LIMIT as a parameter, and SQLite prepares such a
    /// statement again at each run (its plan may depend on the value): a
    /// mirror parsed and planned the query once for every item it carried.
    #[test]
    fn regress_a_bound_limit_reprepares_each_lookup() {
        let dir = tempfile::tempdir().unwrap();
        let mut inventory = Inventory::create(&dir.path().join("inventory.sqlite"), std::iter::empty()).unwrap();
        let items: Vec<String> = (0..50).map(|i| format!("a.b/c/2026/01.01.00.{i:02}")).collect();
        let events: Vec<Event> = (items.iter())
            .map(|item| Event::new(EventKind::Deposit, Some(item.clone()), "success", String::new()))
            .collect();
        inventory.log(&events).unwrap();
        for item in &items {
            let carried = inventory.items_events(std::slice::from_ref(item), MAX_CARRIED).unwrap();
            assert_eq!(carried[0].len(), 1);
        }
        let select = inventory.conn.prepare_cached(&carried_sql(MAX_CARRIED)).unwrap();
        assert_eq!(select.get_status(rusqlite::StatementStatus::Run), 50, "the cached statement ran each time");
        assert_eq!(select.get_status(rusqlite::StatementStatus::RePrepare), 0);
    }

    /// The fixity checks were indexed by item, then place: once an item had
    /// been checked a few dozen times, each new check went to a page of that
    /// item's own, so a verify wrote an index page per item (534 MB for a full
    /// verify of 50,000 items after 94 earlier ones). Indexed by band first, a
    /// round of checks in name order writes next to the last round's.
    #[test]
    fn regress_each_check_rewrites_its_items_history_page() {
        let dir = tempfile::tempdir().unwrap();
        let mut inventory = Inventory::create(&dir.path().join("inventory.sqlite"), std::iter::empty()).unwrap();
        let items: Vec<String> = (0..1000).map(|i| format!("a.b/c/2026/01.01.{:02}.{:02}", i / 60, i % 60)).collect();
        let round = || -> Vec<Event> {
            let detail = || "1 files, 660 bytes".to_string();
            (items.iter()).map(|item| Event::new(EventKind::Fixity, Some(item.clone()), "pass", detail())).collect()
        };
        for _ in 0..60 {
            inventory.log(&round()).unwrap();
        }
        let checkpoint = |inventory: &Inventory, mode: &str| -> i64 {
            let sql = format!("PRAGMA wal_checkpoint({mode})");
            inventory.conn.query_row(&sql, [], |row| row.get::<_, i64>(1)).unwrap()
        };
        checkpoint(&inventory, "TRUNCATE");
        inventory.log(&round()).unwrap();
        let pages_written = checkpoint(&inventory, "PASSIVE");
        // The round's rows take about 95 pages. Indexed by item first, each
        // item's 60 earlier checks fill most of a page: 720 pages were written.
        // By band, each band holds 16 rounds (a larger collection's holds one or
        // two): 274.
        assert!(pages_written < 400, "one round of 1,000 checks wrote {pages_written} pages");
        let page = inventory.events_page(0, Some(&items[7]), 1000).unwrap();
        assert_eq!(page.len(), 61, "every check of the item is still found through its bands");
        assert!(page.windows(2).all(|w| w[0].seq < w[1].seq));
    }

    #[test]
    fn the_sql_bands_are_the_bands_read() {
        assert_eq!(band_bits!(), BAND_BITS.to_string());
        let banded = format!("seq >> {BAND_BITS}");
        assert!(EVENTS_SCHEMA.contains(&banded) && ITEM_CHECKS_IN_BAND.contains(&banded));
    }

    /// An inventory made before the banded index (its checks indexed by item
    /// first, `events_checks`) trades that index for the banded one at its next
    /// append, and one item's checks read the same before and after.
    #[test]
    fn an_older_checks_index_is_replaced_at_the_next_append() {
        let dir = tempfile::tempdir().unwrap();
        let mut inventory = Inventory::create(&dir.path().join("inventory.sqlite"), std::iter::empty()).unwrap();
        let check = |item: &str| Event::new(EventKind::Fixity, Some(item.to_string()), "pass", String::new());
        inventory.log(&[check("a.b/c/2026/01.01.00.00"), check("a.b/c/2026/01.01.00.01")]).unwrap();
        let older = "DROP INDEX events_checks_banded;
            CREATE INDEX events_checks ON events (item, seq) WHERE body ->> '$.type' IS 'fixity';";
        inventory.conn.execute_batch(older).unwrap();
        let indexes = |inventory: &Inventory| -> Vec<String> {
            let sql = "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'events' ORDER BY name";
            let mut select = inventory.conn.prepare(sql).unwrap();
            select.query_map([], |row| row.get(0)).unwrap().collect::<rusqlite::Result<_>>().unwrap()
        };
        assert!(indexes(&inventory).contains(&"events_checks".to_string()));
        let before = inventory.events_page(0, Some("a.b/c/2026/01.01.00.00"), 100).unwrap();
        inventory.log(&[check("a.b/c/2026/01.01.00.00")]).unwrap();
        assert_eq!(indexes(&inventory), ["events_carried", "events_checks_banded", "events_id", "events_mints"]);
        let after = inventory.events_page(0, Some("a.b/c/2026/01.01.00.00"), 100).unwrap();
        assert_eq!(after.len(), 2);
        assert_eq!(after[0], before[0]);
    }

    /// libsqlite3-sys builds SQLite with SQLITE_ENABLE_MEMORY_MANAGEMENT, under
    /// which every connection of a process shares one pool of cached pages,
    /// recycled in least-recently-used order across connections: a mirror's
    /// writer took SRC's pages while SRC was read (its carried events), so each
    /// lookup read its pages from the file again (26,506 reads of SRC's
    /// inventory for 5,000 items where 1,339 do). `.cargo/config.toml` builds
    /// it without, so each connection keeps its own cache.
    #[test]
    fn regress_one_page_cache_shared_by_every_connection() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        let options: Vec<String> = conn
            .prepare("PRAGMA compile_options")
            .unwrap()
            .query_map([], |row| row.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert!(options.iter().any(|o| o.starts_with("THREADSAFE")), "the options were read: {options:?}");
        assert!(!options.iter().any(|o| o == "ENABLE_MEMORY_MANAGEMENT"), "{options:?}");
    }
}
