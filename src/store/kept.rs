//! The copies that replacements displaced: a repair, mirror, copy or migration
//! that replaces an item keeps what was there (local: `.ibi/kept/NAME@TIME/`;
//! S3: `.ibi/kept/NAME@STAGE/`), and only a person removes one, with `ibi kept
//! --remove`, which says what it removes. A backend offers this facet through
//! `Store::kept_copies`.

use crate::error::Result;

/// One kept copy: its id (the folder or prefix under `.ibi/kept/`), the item's
/// name, when it was displaced (local: the time; S3: the stage), and its size.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct KeptCopy {
    pub id: String,
    pub name: String,
    pub displaced: String,
    pub bytes: u64,
}

impl KeptCopy {
    /// A kept copy described by its id (`NAME with '/' as '+'` `@` `WHEN`).
    pub fn from_id(id: &str, bytes: u64) -> KeptCopy {
        let (name, displaced) = id.rsplit_once('@').unwrap_or((id, ""));
        KeptCopy { id: id.to_string(), name: name.replace('+', "/"), displaced: displaced.to_string(), bytes }
    }
}

/// Whether `id` can name a kept copy: one path part, not `.` or `..`.
pub fn is_kept_id(id: &str) -> bool {
    !id.is_empty() && !id.contains('/') && id != "." && id != ".." && id.contains('@')
}

/// The kept copies of a collection.
pub trait KeptCopies {
    /// Every kept copy, by id.
    fn list_kept(&self) -> Result<Vec<KeptCopy>>;
    /// Removes one kept copy for good (under the collection's write lock, which
    /// the caller holds); returns what it removed.
    fn remove_kept(&self, id: &str) -> Result<KeptCopy>;
}
