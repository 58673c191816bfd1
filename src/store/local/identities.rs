//! The identity cache of a local collection: each item's identity digest (the
//! sha256 of its tagmanifest) as last read from its bag, kept with the
//! tagmanifest's stat (device, inode, size, modification and change times) in
//! the inventory's `identities` table (made on first use). A witness or an audit
//! asks for every item's identity read from its bag; an item whose tagmanifest's
//! stat is the one cached is answered from the cache with one `lstat`, any other
//! is read and hashed again. The item folder is checked to be a folder (an
//! `lstat`) first: a folder swapped for a symlink is read, and refused. Any
//! write to the file, a replacement (a new inode) or a new hard link changes the
//! change time, which no program can set back, so a copy changed behind ibi's
//! back is read again. A stat is kept only once the
//! file has not changed for `SETTLED` (longer than any file system's timestamp
//! granularity), so that a change in the same clock tick as the read cannot hide.
//! The table is a cache: it is written without waiting for the disk, and a lost
//! or stale row only costs a read.

use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, SystemTime};

use rusqlite::params;

use super::collection::Collection;
use super::sqlite::{sql_error, Inventory};
use crate::bag::TAGMANIFEST;
use crate::error::Result;
use crate::id::RepositoryName;

const IDENTITIES_SCHEMA: &str = "CREATE TABLE IF NOT EXISTS identities (
    name TEXT PRIMARY KEY NOT NULL,
    stat TEXT NOT NULL,
    identity TEXT NOT NULL
) WITHOUT ROWID;";

/// How long a tagmanifest must have stayed unchanged before its stat is kept.
const SETTLED: Duration = Duration::from_secs(2);

/// One identity to keep: the name's text, the stat it was read under, the digest.
type Entry = (String, String, String);

/// How many names one worker stats in a row, reusing the folder it opened.
const STAT_RUN: usize = 64;

/// A tagmanifest's stat as the cache keys it, and whether it has stayed
/// unchanged for `SETTLED`.
struct TagStat {
    /// Device (major, minor), inode, size, modification and change times (s, ns).
    numbers: [i128; 8],
    settled: bool,
}

impl TagStat {
    /// The cache's key: `major.minor:inode:size:mtime.ns:ctime.ns`.
    fn key(&self) -> String {
        let [major, minor, inode, size, m_sec, m_nsec, c_sec, c_nsec] = self.numbers;
        format!("{major}.{minor}:{inode}:{size}:{m_sec}.{m_nsec}:{c_sec}.{c_nsec}")
    }

    /// Whether `kept` (a key) holds these numbers, read without formatting a
    /// key of our own: a witness asks once per item, and formatting each was a
    /// quarter of its identities' user time.
    fn is_key(&self, kept: &str) -> bool {
        let mut fields = kept.split(['.', ':']);
        self.numbers.iter().all(|n| fields.next().and_then(|f| f.parse::<i128>().ok()) == Some(*n))
            && fields.next().is_none()
    }
}

/// The stat of the regular file at `rel` beneath the folder `dir` (a final symlink
/// is not followed).
fn tag_stat(dir: BorrowedFd, rel: &str, now: SystemTime) -> Option<TagStat> {
    use rustix::fs::{AtFlags, FileType, StatxFlags};
    let st = rustix::fs::statx(dir, rel, AtFlags::SYMLINK_NOFOLLOW, StatxFlags::BASIC_STATS).ok()?;
    if FileType::from_raw_mode(st.stx_mode.into()) != FileType::RegularFile {
        return None;
    }
    let (m, c) = (st.stx_mtime, st.stx_ctime);
    let numbers = [
        st.stx_dev_major.into(),
        st.stx_dev_minor.into(),
        st.stx_ino.into(),
        st.stx_size.into(),
        m.tv_sec.into(),
        m.tv_nsec.into(),
        c.tv_sec.into(),
        c.tv_nsec.into(),
    ];
    let settled_before = now.checked_sub(SETTLED).and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok());
    let changed = Duration::new(c.tv_sec.max(0) as u64, c.tv_nsec.min(999_999_999));
    Some(TagStat { numbers, settled: settled_before.is_some_and(|before| changed < before) })
}

/// Whether `rel` beneath `dir` is a folder (a symlink is not followed).
fn is_folder(dir: BorrowedFd, rel: &str) -> bool {
    use rustix::fs::{AtFlags, FileType, StatxFlags};
    rustix::fs::statx(dir, rel, AtFlags::SYMLINK_NOFOLLOW, StatxFlags::TYPE)
        .is_ok_and(|st| FileType::from_raw_mode(st.stx_mode.into()) == FileType::Directory)
}

/// An identity answered, with the stat to cache it under when it was read now.
type Answer = (Result<String>, Option<String>);

impl Inventory {
    /// The cached stat and identity of each of `texts`: names in byte order are
    /// read by one range scan merged with them; others by one lookup each.
    pub fn cached_identities(&mut self, texts: &[String]) -> Result<Vec<Option<(String, String)>>> {
        let path = self.path.clone();
        self.conn.execute_batch(IDENTITIES_SCHEMA).map_err(|e| sql_error(&path, e))?;
        let mut found: Vec<Option<(String, String)>> = vec![None; texts.len()];
        // Runs of names in byte order, each read by one range scan and merged:
        // the whole page when it is sorted (as a witness asks), else one name each.
        let sorted = texts.windows(2).all(|w| w[0] < w[1]);
        let run = if sorted { texts.len().max(1) } else { 1 };
        let sql = "SELECT name, stat, identity FROM identities WHERE name >= ?1 AND name <= ?2";
        let mut select = self.conn.prepare_cached(sql).map_err(|e| sql_error(&path, e))?;
        let fail = |e| sql_error(&path, e);
        for (first, names) in texts.chunks(run).enumerate().map(|(i, names)| (i * run, names)) {
            let mut rows = select.query(params![names[0], names[names.len() - 1]]).map_err(fail)?;
            let mut at = 0;
            while let Some(row) = rows.next().map_err(fail)? {
                let name = row.get_ref(0).map_err(fail)?.as_str().map_err(|e| fail(e.into()))?;
                while at < names.len() && names[at].as_str() < name {
                    at += 1;
                }
                if names.get(at).is_some_and(|text| text == name) {
                    found[first + at] = Some((row.get(1).map_err(fail)?, row.get(2).map_err(fail)?));
                }
            }
        }
        Ok(found)
    }

    /// Keeps `entries`, each replacing the name's row, in one transaction that
    /// does not wait for the disk (SQLite's write-ahead log stays consistent; the
    /// next durable commit carries it).
    pub fn cache_identities(&mut self, entries: &[Entry]) -> Result<()> {
        let path = self.path.clone();
        self.conn
            .execute_batch(&format!("{IDENTITIES_SCHEMA} PRAGMA synchronous = NORMAL;"))
            .map_err(|e| sql_error(&path, e))?;
        let written = (|| {
            let tx = self
                .conn
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .map_err(|e| sql_error(&path, e))?;
            {
                let sql = "INSERT OR REPLACE INTO identities (name, stat, identity) VALUES (?1, ?2, ?3)";
                let mut insert = tx.prepare_cached(sql).map_err(|e| sql_error(&path, e))?;
                for (name, stat, identity) in entries {
                    insert.execute(params![name, stat, identity]).map_err(|e| sql_error(&path, e))?;
                }
            }
            tx.commit().map_err(|e| sql_error(&path, e))
        })();
        self.conn.execute_batch("PRAGMA synchronous = FULL;").map_err(|e| sql_error(&path, e))?;
        written
    }
}

impl Collection {
    /// The identity of each of `names` from its bag, answered from the cache where
    /// the tagmanifest's stat is the cached one, read (in parallel) otherwise; what
    /// was read is cached when the handle may write.
    pub fn bag_identities_cached(&self, names: &[RepositoryName]) -> Vec<Result<String>> {
        use rayon::prelude::*;
        let texts: Vec<String> = names.iter().map(RepositoryName::to_string).collect();
        let cached = self.with_inventory(|inventory| inventory.cached_identities(&texts)).ok().flatten();
        let cached = cached.unwrap_or_else(|| vec![None; names.len()]);
        let now = SystemTime::now();
        let answers: Vec<Answer> = names
            .par_chunks(STAT_RUN)
            .zip(texts.par_chunks(STAT_RUN))
            .zip(cached.par_chunks(STAT_RUN))
            .flat_map_iter(|((names, texts), cached)| self.answer_run(names, texts, cached, now))
            .collect();
        self.keep_identities(&texts, &answers);
        answers.into_iter().map(|(identity, _)| identity).collect()
    }

    /// Answers a run of names (`texts` their text) in order, each folder of items
    /// opened once (beneath the root, never through a symlink) and each
    /// tagmanifest's stat taken relative to it.
    fn answer_run(
        &self,
        names: &[RepositoryName],
        texts: &[String],
        cached: &[Option<(String, String)>],
        now: SystemTime,
    ) -> Vec<Answer> {
        let mut folder: Option<(&str, Option<rustix::fd::OwnedFd>)> = None;
        let mut answers = Vec::with_capacity(names.len());
        let mut tag_path = String::new();
        for ((name, text), cached) in names.iter().zip(texts).zip(cached) {
            // A name's text is `host/word[.port]/year/item`: its folder, then the item.
            let (parent, item) = text.rsplit_once('/').expect("a name has four parts");
            if folder.as_ref().is_none_or(|(open, _)| *open != parent) {
                folder = Some((parent, self.beneath().open_folder(parent).ok()));
            }
            let fd = folder.as_ref().and_then(|(_, fd)| fd.as_ref());
            tag_path.clear();
            tag_path.push_str(item);
            tag_path.push('/');
            tag_path.push_str(TAGMANIFEST);
            // The item folder itself must be a folder, not a symlink (which the
            // tagmanifest's stat would pass through): otherwise it is read, and refused.
            let stat = fd.filter(|fd| is_folder(fd.as_fd(), item)).and_then(|fd| tag_stat(fd.as_fd(), &tag_path, now));
            answers.push(match (cached, stat) {
                (Some((kept, identity)), Some(stat)) if stat.is_key(kept) => (Ok(identity.clone()), None),
                (_, stat) => {
                    let identity = crate::store::identity_digest(self, name);
                    (identity, stat.filter(|stat| stat.settled).map(|stat| stat.key()))
                }
            });
        }
        answers
    }

    /// Caches the identities just read whose stat had settled; best effort.
    fn keep_identities(&self, texts: &[String], answers: &[Answer]) {
        let entries: Vec<Entry> = texts
            .iter()
            .zip(answers)
            .filter_map(|(text, answer)| match answer {
                (Ok(identity), Some(stat)) => Some((text.clone(), stat.clone(), identity.clone())),
                _ => None,
            })
            .collect();
        if entries.is_empty() || self.read_only {
            return;
        }
        let _ = self.with_inventory(|inventory| inventory.cache_identities(&entries));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_identities_are_found_in_any_order_asked() {
        let dir = tempfile::tempdir().unwrap();
        let mut inventory = Inventory::create(&dir.path().join("inventory.sqlite"), std::iter::empty()).unwrap();
        let entry = |n: &str| (n.to_string(), format!("stat {n}"), format!("identity {n}"));
        inventory.cache_identities(&[entry("a/1"), entry("a/3"), entry("b/2")]).unwrap();
        let ask = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        let found = |inventory: &mut Inventory, names: &[&str]| -> Vec<Option<String>> {
            let found = inventory.cached_identities(&ask(names)).unwrap();
            found.into_iter().map(|f| f.map(|(_, identity)| identity)).collect()
        };
        let id = |n: &str| Some(format!("identity {n}"));
        assert_eq!(found(&mut inventory, &["a/1", "a/2", "a/3", "b/2"]), vec![id("a/1"), None, id("a/3"), id("b/2")]);
        assert_eq!(found(&mut inventory, &["b/2", "a/0", "a/1"]), vec![id("b/2"), None, id("a/1")]);
        assert_eq!(found(&mut inventory, &[]), Vec::<Option<String>>::new());
        inventory.cache_identities(&[("a/1".into(), "stat 2".into(), "identity 2".into())]).unwrap();
        assert_eq!(found(&mut inventory, &["a/1"]), vec![Some("identity 2".into())], "a row is replaced");
    }

    #[test]
    fn a_stat_settles_only_after_the_margin() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        let (_, settled) = stat_of(dir.path(), "f", SystemTime::now()).unwrap();
        assert!(!settled, "a file changed just now has not settled");
        let (_, settled) = stat_of(dir.path(), "f", SystemTime::now() + SETTLED * 2).unwrap();
        assert!(settled);
    }

    #[test]
    fn a_symlink_or_a_folder_has_no_stat() {
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/etc/hostname", dir.path().join("link")).unwrap();
        std::fs::create_dir(dir.path().join("folder")).unwrap();
        assert!(stat_of(dir.path(), "link", SystemTime::now()).is_none());
        assert!(stat_of(dir.path(), "folder", SystemTime::now()).is_none());
    }

    #[test]
    fn a_rewrite_with_its_times_set_back_still_changes_the_stat() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"ab").unwrap();
        let (before, modified) = (stat_of(dir.path(), "f", SystemTime::now()).unwrap().0, filetime_of(&file));
        std::thread::sleep(Duration::from_millis(20));
        std::fs::write(&file, b"ba").unwrap();
        std::fs::File::options().write(true).open(&file).unwrap().set_modified(modified).unwrap();
        assert_eq!(filetime_of(&file), modified, "the modification time was set back");
        let after = stat_of(dir.path(), "f", SystemTime::now()).unwrap().0;
        assert_ne!(before, after, "same size and modification time, but the change time moved on");
    }

    /// A cached key is compared by its numbers, not by formatting one to compare.
    #[test]
    fn a_kept_key_matches_only_its_own_numbers() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), b"a").unwrap();
        use rustix::fs::{Mode, OFlags};
        let fd = rustix::fs::open(dir.path(), OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
        let stat = tag_stat(fd.as_fd(), "f", SystemTime::now()).unwrap();
        let key = stat.key();
        assert!(stat.is_key(&key), "{key}");
        let (head, size_and_times) = key.rsplit_once(':').unwrap();
        let other_ctime = format!("{head}:{}1", size_and_times);
        for wrong in [other_ctime, format!("{key}:0"), key[..key.len() - 2].to_string(), String::new(), "x".repeat(9)] {
            assert!(!stat.is_key(&wrong), "{wrong} against {key}");
        }
    }

    fn stat_of(dir: &std::path::Path, rel: &str, now: SystemTime) -> Option<(String, bool)> {
        use rustix::fs::{Mode, OFlags};
        let fd = rustix::fs::open(dir, OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
        tag_stat(fd.as_fd(), rel, now).map(|stat| (stat.key(), stat.settled))
    }

    fn filetime_of(path: &std::path::Path) -> SystemTime {
        std::fs::metadata(path).and_then(|m| m.modified()).unwrap()
    }
}
