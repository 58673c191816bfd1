//! The inventory's SQLite handle (`Inventory`), whose methods live beside the
//! tables they keep (`inventory`, `events`, `fixity`, `identities`), and the
//! mapping of SQLite's errors to ibi's: kept apart so that those files depend
//! on the handle, not on one another.

use std::path::{Path, PathBuf};

use rusqlite::Connection;

use crate::error::Error;
use crate::id::RepositoryName;

pub(super) fn sql_error(path: &Path, e: rusqlite::Error) -> Error {
    use rusqlite::ErrorCode::{
        CannotOpen, DatabaseBusy, DatabaseCorrupt, DatabaseLocked, DiskFull, NotADatabase, PermissionDenied, ReadOnly,
        SystemIoFailure,
    };
    match e.sqlite_error_code() {
        Some(NotADatabase | DatabaseCorrupt) => damaged(path, &e.to_string()),
        // Another process (not an ibi writer: those hold the collection's write
        // lock first) holds SQLite's write lock: busy, exit 75.
        Some(DatabaseBusy | DatabaseLocked) => Error::Locked {
            path: path.to_path_buf(),
            holder: Some(format!("another program's SQLite write transaction ({e})")),
        },
        // A read-only file or mount: operational, exit 3.
        Some(ReadOnly | PermissionDenied | CannotOpen) => {
            Error::io("write", path, std::io::Error::new(std::io::ErrorKind::PermissionDenied, e.to_string()))
        }
        // The disk failed or filled: operational (exit 3), like any other write.
        Some(SystemIoFailure | DiskFull) => {
            let synced = matches!(&e, rusqlite::Error::SqliteFailure(f, _)
                if [rusqlite::ffi::SQLITE_IOERR_FSYNC, rusqlite::ffi::SQLITE_IOERR_DIR_FSYNC].contains(&f.extended_code));
            let action = if synced { "fsync" } else { "write" };
            Error::io(action, path, std::io::Error::other(e.to_string()))
        }
        _ => Error::Data { what: format!("inventory {}", path.display()), problem: e.to_string() },
    }
}

/// A damaged inventory: corrupt state (exit 3), with what to do about it.
pub(super) fn damaged(path: &Path, why: &str) -> Error {
    let problem = format!(
        "the inventory is damaged ({why}); move it aside (mv {0} {0}.damaged) and the next writing command \
         rebuilds it from the bags (items that vanished before then are no longer known)",
        path.display()
    );
    Error::CorruptState { path: path.to_path_buf(), problem }
}

/// An open inventory.
pub struct Inventory {
    pub(super) path: PathBuf,
    pub(super) conn: Connection,
    /// Set while an inventory from before deposit keys is read through the view:
    /// the keys of `.ibi/deposited/` by name, read once when first needed, so that
    /// copies of its items carry them before its first write folds them in.
    pub(super) older_keys: Option<std::sync::OnceLock<DepositKeys>>,
    /// The collection's id, which a new log's first event is bound to
    /// (`crate::events::first_prev`); set by the collection that opened it.
    pub(super) collection_id: Option<String>,
    /// Whether the `deposits` table was seen: once made it stays, so a
    /// look-up asks SQLite's schema only until then.
    pub(super) deposits_seen: bool,
}

impl Inventory {
    /// A handle on `conn`, the database at `path`, before anything is read.
    pub(super) fn on(path: &Path, conn: Connection) -> Inventory {
        Inventory { path: path.to_path_buf(), conn, older_keys: None, collection_id: None, deposits_seen: false }
    }
}

/// Content keys by the name they were deposited as.
pub(super) type DepositKeys = std::collections::BTreeMap<RepositoryName, Vec<String>>;
