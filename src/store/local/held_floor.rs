//! The cache of the minter's floor (ARCHITECTURE.md, "Identifiers"): the
//! newest date among the names a collection holds, found by reading its newest
//! year folder, which at a million items takes a deposit process 0.3 s before
//! its first item. `.ibi/held-floor` keeps the answer with that folder's stamp
//! (device, inode, size, modification and change times); while the folder's
//! stamp is unchanged, the answer stands. It is written by a read of the folder
//! that has been left alone for 2 s (longer than any timestamp's grain, so no
//! change in the tick of the read hides), and by a writer after each batch it
//! placed, for what it placed on top of a floor it knew (`Vouch`). The file is
//! a cache: a missing, unreadable or stale one costs one read of the folder.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::Layout;
use crate::fsx::Stamp;
use crate::id::{RepositoryName, Subsystem, Timestamp};

/// How long a folder must have been left alone before a read of it is kept.
const SETTLED: Duration = Duration::from_secs(2);
const HEADER: &str = "ibi-held-floor-v1";
/// The most of the file read: a kept answer is one line of about 120 bytes.
const MOST_BYTES: u64 = 4096;

/// One answer: under `prefix`, the year folder `year` had `stamp`, and no name
/// in it was dated after `newest`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Kept {
    prefix: String,
    year: u32,
    stamp: Stamp,
    newest: Timestamp,
}

impl Kept {
    fn text(&self) -> String {
        let s = &self.stamp;
        format!(
            "{HEADER}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
            self.prefix,
            self.year,
            s.dev,
            s.ino,
            s.size,
            s.mtime.0,
            s.mtime.1,
            s.ctime.0,
            s.ctime.1,
            self.newest.to_decimal()
        )
    }

    fn parse(text: &str) -> Option<Kept> {
        let fields: Vec<&str> = text.strip_suffix('\n')?.split('\t').collect();
        let [HEADER, prefix, year, dev, ino, size, mtime_s, mtime_ns, ctime_s, ctime_ns, newest] = fields[..] else {
            return None;
        };
        let stamp = Stamp {
            dev: dev.parse().ok()?,
            ino: ino.parse().ok()?,
            size: size.parse().ok()?,
            mtime: (mtime_s.parse().ok()?, mtime_ns.parse().ok()?),
            ctime: (ctime_s.parse().ok()?, ctime_ns.parse().ok()?),
        };
        let newest = Timestamp::parse_decimal(newest).ok()?;
        Some(Kept { prefix: prefix.to_string(), year: year.parse().ok()?, stamp, newest })
    }
}

/// The cache file of one collection and subsystem.
pub struct FloorCache {
    path: PathBuf,
    prefix: String,
}

impl FloorCache {
    pub fn new(layout: &Layout, subsystem: &Subsystem) -> FloorCache {
        FloorCache { path: layout.control().join("held-floor"), prefix: subsystem.prefix().to_string() }
    }

    /// The kept answer for the year folder `year` at `dir`, if its stamp is unchanged.
    pub fn answer(&self, year: u32, dir: &Path) -> Option<Timestamp> {
        // Never through a symlink, and never more than a line's worth.
        let opened = crate::fsx::open_regular(&self.path, false).ok()?;
        let kept = Kept::parse(std::str::from_utf8(&crate::fsx::read_opened(opened, MOST_BYTES).ok()?).ok()?)?;
        let now = Stamp::at(dir).ok()?;
        (kept.prefix == self.prefix && kept.year == year && kept.stamp == now).then_some(kept.newest)
    }

    /// Keeps what a read of `dir` (stamped `before` it) found, when the folder
    /// had been left alone long enough and did not change during the read.
    pub fn keep_read(&self, year: u32, dir: &Path, before: Stamp, newest: Timestamp) {
        let settled = SystemTime::UNIX_EPOCH + Duration::new(before.ctime.0.max(0) as u64, before.ctime.1 as u32);
        let quiet = SystemTime::now().duration_since(settled).is_ok_and(|age| age >= SETTLED);
        if quiet && Stamp::at(dir).is_ok_and(|after| after == before) {
            self.keep(Kept { prefix: self.prefix.clone(), year, stamp: before, newest });
        }
    }

    /// Keeps `newest` as the answer for the year folder `dir` as it is now.
    fn keep_now(&self, year: u32, dir: &Path, newest: Timestamp) {
        if let Ok(stamp) = Stamp::at(dir) {
            self.keep(Kept { prefix: self.prefix.clone(), year, stamp, newest });
        }
    }

    /// Written whole and renamed into place; never synced (a cache).
    fn keep(&self, kept: Kept) {
        let dir = crate::fsx::parent_dir(&self.path);
        let Ok(mut temp) = tempfile::Builder::new().prefix(crate::fsx::TEMP_PREFIX).tempfile_in(dir) else { return };
        if std::io::Write::write_all(&mut temp, kept.text().as_bytes()).is_ok() {
            let _ = temp.persist(&self.path);
        }
    }
}

/// What a writing handle can vouch for: the floor it found (or was told) when
/// it first minted, raised by every batch it placed since. It gives that up
/// once it changed the item folders any other way (an adoption by rename, a
/// removal, a failed placement), and then never writes the cache again. Clones
/// of a handle share it, so what one places the others count.
#[derive(Default, Clone)]
pub struct Vouch(std::sync::Arc<std::sync::Mutex<Vouching>>);

impl std::fmt::Debug for Vouch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Vouch")
    }
}

#[derive(Default)]
enum Vouching {
    #[default]
    Unknown,
    /// The newest date held, `None` when none was.
    Newest(Option<Timestamp>),
    Forfeited,
}

impl Vouch {
    /// The floor found when minting began (`None`: the collection held no name).
    pub fn start(&self, floor: Option<Timestamp>) {
        let mut vouching = crate::sync::lock(&self.0);
        if let Vouching::Unknown = *vouching {
            *vouching = Vouching::Newest(floor);
        }
    }

    pub fn forfeit(&self) {
        *crate::sync::lock(&self.0) = Vouching::Forfeited;
    }

    /// Forfeits when dropped: held with the write lease, since once the lease
    /// is gone other writers may place names this handle never sees.
    pub fn until_released(&self) -> ForfeitOnDrop {
        ForfeitOnDrop(self.clone())
    }

    /// The newest date among `names` of the subsystem's prefix.
    pub fn newest_of<'n>(subsystem: &Subsystem, names: impl Iterator<Item = &'n RepositoryName>) -> Option<Timestamp> {
        names.filter(|name| name.prefix() == subsystem.prefix()).map(|name| name.date()).max()
    }

    /// After names up to `newest_placed` (`newest_of` the batch) were placed
    /// durably: raises the floor by them and keeps it for the newest year
    /// folder, when that folder is the floor's year.
    pub fn placed(&self, layout: &Layout, subsystem: &Subsystem, newest_placed: Option<Timestamp>) {
        let prefix = subsystem.prefix();
        let mut vouching = crate::sync::lock(&self.0);
        let Vouching::Newest(floor) = *vouching else { return };
        let Some(newest) = floor.max(newest_placed) else { return };
        *vouching = Vouching::Newest(Some(newest));
        let base = layout.root.join(prefix.to_string());
        let Some(year) = newest_year(&base) else { return };
        if newest.calendar().is_some_and(|parts| i64::from(parts.year) == i64::from(year)) {
            FloorCache::new(layout, subsystem).keep_now(year, &base.join(year.to_string()), newest);
        }
    }
}

/// See `Vouch::until_released`.
pub struct ForfeitOnDrop(Vouch);

impl Drop for ForfeitOnDrop {
    fn drop(&mut self) {
        self.0.forfeit();
    }
}

/// The year folders under a prefix's folder `base` (none when it is absent).
pub(super) fn years_in(base: &Path) -> crate::error::Result<Vec<u32>> {
    use crate::error::IoContext;
    let listing = match std::fs::read_dir(base) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        other => other.with_path("list", base)?,
    };
    Ok(listing.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect())
}

/// The newest year folder under `base`, if any.
pub fn newest_year(base: &Path) -> Option<u32> {
    years_in(base).ok()?.into_iter().max()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_answer_reads_back_and_a_damaged_one_does_not() {
        let stamp =
            Stamp { dev: 2049, ino: 77, size: 40_083_456, mtime: (1_795_000_000, 12), ctime: (1_795_000_001, 999) };
        let kept = Kept { prefix: "example.org/z".into(), year: 2026, stamp, newest: Timestamp::from_nanos(17 << 40) };
        assert_eq!(Kept::parse(&kept.text()), Some(kept.clone()));
        let text = kept.text();
        for damaged in [&text[..text.len() - 3], &text.replace("v1", "v9"), &text.replace("2026", "twenty"), ""] {
            assert_eq!(Kept::parse(damaged), None, "{damaged:?}");
        }
    }

    /// A collection's folder with its control folder and an empty year folder
    /// of the subsystem `x.example.org`: the folder, its layout, the subsystem
    /// and the year folder.
    fn a_collection_folder() -> (tempfile::TempDir, Layout, Subsystem, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        std::fs::create_dir_all(layout.control()).unwrap();
        let subsystem = Subsystem::new("x.example.org", 80, None, 800, crate::id::Granularity::SECOND).unwrap();
        let year_dir = dir.path().join("example.org/x/2026");
        std::fs::create_dir_all(&year_dir).unwrap();
        (dir, layout, subsystem, year_dir)
    }

    /// A handle keeps its floor only from when it knew one until its lease is
    /// released: after that, another writer may have placed names it never saw.
    #[test]
    fn a_vouch_keeps_the_floor_only_while_the_lease_holds() {
        let (_dir, layout, subsystem, year_dir) = a_collection_folder();
        let cache = FloorCache::new(&layout, &subsystem);
        let place = |suffix: &str| {
            std::fs::create_dir_all(year_dir.join(suffix)).unwrap();
            RepositoryName::parse(&format!("example.org/x/2026/{suffix}")).unwrap()
        };
        let vouch = Vouch::default();
        let lease = vouch.until_released();
        let first = place("11.27.04.00.00");
        vouch.placed(&layout, &subsystem, Vouch::newest_of(&subsystem, [&first].into_iter()));
        assert_eq!(cache.answer(2026, &year_dir), None, "no floor known yet: nothing kept");
        vouch.start(Some(first.date()));
        let second = place("11.27.05.00.00");
        vouch.placed(&layout, &subsystem, Vouch::newest_of(&subsystem, [&second].into_iter()));
        assert_eq!(cache.answer(2026, &year_dir), Some(second.date()));
        drop(lease);
        let third = place("11.27.06.00.00");
        vouch.placed(&layout, &subsystem, Vouch::newest_of(&subsystem, [&third].into_iter()));
        let kept = Kept::parse(&std::fs::read_to_string(layout.control().join("held-floor")).unwrap()).unwrap();
        assert_eq!(kept.newest, second.date(), "nothing vouched for the folder after the lease");
    }

    /// A kept answer is never read through a symlink: it could name a file
    /// outside the collection.
    #[test]
    fn regress_a_symlinked_kept_floor_is_read() {
        let (dir, layout, subsystem, year_dir) = a_collection_folder();
        let cache = FloorCache::new(&layout, &subsystem);
        let newest = Timestamp::from_nanos(17 << 40);
        cache.keep_now(2026, &year_dir, newest);
        assert_eq!(cache.answer(2026, &year_dir), Some(newest));
        let outside = dir.path().join("outside");
        std::fs::rename(layout.control().join("held-floor"), &outside).unwrap();
        std::os::unix::fs::symlink(&outside, layout.control().join("held-floor")).unwrap();
        assert_eq!(cache.answer(2026, &year_dir), None, "read through a symlink");
    }
}
