//! The minter state of a local collection, or of `ibi mint --state FILE`: one
//! exact decimal line (the last date used), rewritten atomically and durably
//! under a lock file beside it. A missing state means the first use; an
//! unreadable or corrupt one is an error, never a reset, and is never echoed
//! into a message.

use std::io;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::fsx::{atomic_write, read_capped, FileLock};
use crate::id::minter::MinterState;
use crate::id::Timestamp;

/// The longest minter state read: one decimal date with nine fraction digits fits
/// many times over; a larger file is corrupt and is never echoed into a message.
const MAX_STATE_BYTES: u64 = 256;

/// A durable "last date used" with its lock: the state file and the lock file beside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateFile {
    pub state: PathBuf,
    pub lock: PathBuf,
}

impl StateFile {
    pub fn new(state: impl Into<PathBuf>, lock: impl Into<PathBuf>) -> Self {
        StateFile { state: state.into(), lock: lock.into() }
    }

    /// A state file with its lock at `FILE.lock`.
    pub fn beside(state: &Path) -> Self {
        let mut lock = state.as_os_str().to_owned();
        lock.push(".lock");
        StateFile::new(state, PathBuf::from(lock))
    }

    /// Reads the last date; `None` when the file does not exist yet.
    pub fn read(&self) -> Result<Option<Timestamp>> {
        let corrupt = |problem: String| Error::CorruptState {
            path: self.state.clone(),
            problem: format!("minter state: {problem}"),
        };
        let text = match read_capped(&self.state, MAX_STATE_BYTES) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) if e.kind() == io::ErrorKind::InvalidData => return Err(corrupt(format!("it {e}"))),
            Err(e) => return Err(Error::io("read minter state", &self.state, e)),
        };
        let text = String::from_utf8(text).map_err(|_| corrupt("it is not UTF-8 text".into()))?;
        let line = text.strip_suffix('\n').unwrap_or(&text);
        Timestamp::parse_decimal(line).map(Some).map_err(|e| corrupt(format!("expected one decimal date; {}", e)))
    }

    /// Writes the last date atomically and durably.
    pub fn write(&self, last: Timestamp) -> Result<()> {
        atomic_write(&self.state, format!("{}\n", last.to_decimal()).as_bytes())
    }
}

impl MinterState for StateFile {
    /// Holds the lock file across read, `step` and an atomic, durable write (skipped
    /// when the date is unchanged; nothing is written if `step` fails).
    fn update(&self, step: &mut dyn FnMut(Option<Timestamp>) -> Result<Timestamp>) -> Result<()> {
        let _lock = FileLock::acquire(&self.lock)?;
        let last = self.read()?;
        let next = step(last)?;
        if Some(next) != last {
            self.write(next)?;
        }
        Ok(())
    }
    fn last(&self) -> Result<Option<Timestamp>> {
        let _lock = FileLock::acquire(&self.lock)?;
        self.read()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::minter::{Minter, ReplayClock};
    use crate::id::Granularity;
    use std::fs;

    fn t(s: &str) -> Timestamp {
        Timestamp::parse_decimal(s).unwrap()
    }

    fn state(dir: &Path) -> StateFile {
        StateFile::beside(&dir.join("minter.state"))
    }

    #[test]
    fn replayed_table_6_2_through_the_state_file() {
        let dir = tempfile::tempdir().unwrap();
        for row in crate::id::vectors::table_6_2() {
            let clock = ReplayClock::new(row.request);
            let file = state(dir.path());
            assert_eq!(Minter::new(&file, Granularity::SECOND, &clock).mint(1).unwrap(), vec![row.date]);
        }
        assert_eq!(fs::read_to_string(dir.path().join("minter.state")).unwrap(), "1287588480\n");
    }

    #[test]
    fn a_failed_step_leaves_the_file_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        state(dir.path()).write(t("2000000000")).unwrap();
        let clock = ReplayClock::new(t("1999999000"));
        let file = state(dir.path());
        assert!(Minter::new(&file, Granularity::SECOND, &clock).mint(1).is_err());
        assert_eq!(fs::read_to_string(dir.path().join("minter.state")).unwrap(), "2000000000\n");
    }

    #[test]
    fn corrupt_state_is_an_error_not_a_reset() {
        let dir = tempfile::tempdir().unwrap();
        for bad in ["", "12.3.4\n", "garbage", "\u{0}"] {
            fs::write(dir.path().join("minter.state"), bad).unwrap();
            let clock = ReplayClock::new(t("1000"));
            let file = state(dir.path());
            let err = Minter::new(&file, Granularity::SECOND, &clock).mint(1).unwrap_err();
            assert!(matches!(err, Error::CorruptState { .. }), "{bad:?}: {err}");
            assert_eq!(fs::read_to_string(dir.path().join("minter.state")).unwrap(), bad);
        }
    }
}
