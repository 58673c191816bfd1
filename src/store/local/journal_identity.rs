//! The identity digests a place journal keeps of the versions it stages to
//! replace items, and the test recovery makes with them: whether the version
//! at an item's place is the one the journal staged.

use std::io;
use std::path::Path;

use crate::error::{Error, Result};
use crate::fsx;
use crate::id::RepositoryName;

/// The journal line that keeps the identity digest of a version staged to
/// replace the item of its name. The old version holds the name until the
/// swap, so recovery counts such an item placed (and logs it) only when the
/// version at its place is this one.
pub(super) const IDENTITY_LINE: &str = "#identity\t";

/// The largest tagmanifest read for an identity (it lists tag files only).
const TAGMANIFEST_CAP: u64 = 16 << 20;

/// The identity digest (the SHA-256 of its tagmanifest) of the bag in `dir`;
/// none when it has no tagmanifest.
pub(super) fn identity_at(dir: &Path) -> Result<Option<String>> {
    let path = dir.join(crate::bag::TAGMANIFEST);
    match fsx::read_capped(&path, TAGMANIFEST_CAP) {
        Ok(bytes) => Ok(Some(fsx::hash_bytes(&bytes))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io("read", &path, e)),
    }
}

/// Whether the item at `place`, named `name` in a place journal holding
/// `journal`, is the version that journal staged: always for a new item, and
/// for a replacement only once it was swapped in.
pub(super) fn staged_version_at(place: &Path, name: &RepositoryName, journal: &str) -> Result<bool> {
    let wanted = name.to_string();
    let staged = journal
        .lines()
        .filter_map(|line| line.strip_prefix(IDENTITY_LINE)?.split_once('\t'))
        .find_map(|(journalled, identity)| (journalled == wanted).then_some(identity));
    match staged {
        None => Ok(true),
        Some(identity) => Ok(identity_at(place)?.as_deref() == Some(identity)),
    }
}
