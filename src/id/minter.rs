//! The `Minter`: Algorithm 4's distributor plus its durable state, a lock and
//! a clock. Minting holds an exclusive lock across read, compute and save, so
//! processes that share a state file never hand out the same date. The state
//! is one exact decimal line, rewritten atomically; a missing state means the
//! first use, while an unreadable or corrupt one is an error, never a reset.
//! The `Clock` is injectable so replays (`--at`) and tests never sleep.

use std::cell::Cell;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::fsx::{atomic_write, FileLock};
use crate::id::distributor::{Distributor, Granularity};
use crate::id::time::Timestamp;

/// Where time comes from, and how to wait for it.
pub trait Clock {
    fn now(&self) -> Timestamp;
    /// Returns once `now() >= until`.
    fn sleep_until(&self, until: Timestamp);
}

/// The system clock; waits sleep, then spin for the last fraction of a millisecond.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }

    fn sleep_until(&self, until: Timestamp) {
        loop {
            let remaining = until.nanos() - self.now().nanos();
            if remaining <= 0 {
                return;
            }
            if remaining > 200_000 {
                std::thread::sleep(Duration::from_nanos((remaining - 100_000) as u64));
            } else {
                std::thread::yield_now();
            }
        }
    }
}

/// A virtual clock for replays: it starts at a given time and "waits" by jumping ahead.
#[derive(Debug)]
pub struct ReplayClock(Cell<Timestamp>);

impl ReplayClock {
    pub fn new(at: Timestamp) -> Self {
        ReplayClock(Cell::new(at))
    }
}

impl Clock for ReplayClock {
    fn now(&self) -> Timestamp {
        self.0.get()
    }

    fn sleep_until(&self, until: Timestamp) {
        self.0.set(self.0.get().max(until));
    }
}

/// The longest minter state read: one decimal date with nine fraction digits fits
/// many times over; a larger file is corrupt and is never echoed into a message.
const MAX_STATE_BYTES: u64 = 256;

/// A durable "last date used" with its lock: the state file and the lock file beside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateStore {
    pub state: PathBuf,
    pub lock: PathBuf,
}

impl StateStore {
    pub fn new(state: impl Into<PathBuf>, lock: impl Into<PathBuf>) -> Self {
        StateStore { state: state.into(), lock: lock.into() }
    }

    /// A state file with its lock at `FILE.lock`.
    pub fn beside(state: &Path) -> Self {
        let mut lock = state.as_os_str().to_owned();
        lock.push(".lock");
        StateStore::new(state, PathBuf::from(lock))
    }

    /// Reads the last date; `None` when the file does not exist yet.
    pub fn read(&self) -> Result<Option<Timestamp>> {
        let corrupt = |problem: String| Error::CorruptState { path: self.state.clone(), problem };
        let text = match crate::fsx::read_capped(&self.state, MAX_STATE_BYTES) {
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

    /// Runs `step` on the stored date under the exclusive lock, and saves what it returns
    /// (nothing is saved if `step` fails, so the state is left unchanged).
    pub fn update<T>(&self, step: impl FnOnce(Option<Timestamp>) -> Result<(T, Timestamp)>) -> Result<T> {
        let _lock = FileLock::acquire(&self.lock)?;
        let last = self.read()?;
        let (out, next) = step(last)?;
        if Some(next) != last {
            self.write(next)?;
        }
        Ok(out)
    }
}

/// The most names one call may mint: more is refused, never a panic or an abort.
pub const MAX_COUNT: usize = 10_000_000;

/// Refuses a count larger than `MAX_COUNT`.
pub fn check_count(count: usize) -> Result<()> {
    if count > MAX_COUNT {
        return Err(Error::Invalid {
            what: "count".into(),
            problem: format!("{count} at once is more than the {MAX_COUNT} one call may mint"),
        });
    }
    Ok(())
}

/// The default longest wait before a clock is declared behind the state.
pub const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(10);

/// Waits until `creation` on `clock`, unless that is further than `max_wait` (or one
/// grain of the granularity, whichever is longer) away: then the clock is behind the state.
pub fn wait_for(clock: &dyn Clock, now: Timestamp, creation: Timestamp, allowed: i128, state: Timestamp) -> Result<()> {
    let wait = creation.nanos() - now.nanos();
    if wait > allowed {
        return Err(Error::ClockBehind {
            clock: now,
            state,
            wait_seconds: Timestamp::from_nanos(wait).to_decimal(),
            max_wait_seconds: Timestamp::from_nanos(allowed).to_decimal(),
        });
    }
    if wait > 0 {
        clock.sleep_until(creation);
    }
    Ok(())
}

/// The distributor with its durable state, lock and clock.
pub struct Minter<'c> {
    pub store: StateStore,
    pub granularity: Granularity,
    pub max_wait: Duration,
    pub clock: &'c dyn Clock,
}

impl<'c> Minter<'c> {
    pub fn new(store: StateStore, granularity: Granularity, clock: &'c dyn Clock) -> Self {
        Minter { store, granularity, max_wait: DEFAULT_MAX_WAIT, clock }
    }

    /// Mints `count` dates under one lock hold and saves the state once, before returning.
    pub fn mint(&self, count: usize) -> Result<Vec<Timestamp>> {
        self.mint_checked(count, &|_| Ok(()))
    }

    /// Like `mint`, but every date must pass `accept` before the state is saved: a date
    /// the caller cannot use (an IBIp before 1995) leaves the state unchanged.
    pub fn mint_checked(&self, count: usize, accept: &dyn Fn(Timestamp) -> Result<()>) -> Result<Vec<Timestamp>> {
        check_count(count)?;
        let allowed = (self.max_wait.as_nanos() as i128).max(self.granularity.nanos());
        self.store.update(|last| {
            let mut distributor = Distributor::new(self.granularity, last);
            let mut dates = Vec::with_capacity(count);
            for _ in 0..count {
                let now = self.clock.now();
                let previous = distributor.last;
                let out = distributor.next(now);
                wait_for(self.clock, now, out.creation, allowed, previous.unwrap_or(out.date))?;
                accept(out.date)?;
                dates.push(out.date);
            }
            let last = distributor.last.or(last).unwrap_or(Timestamp::from_nanos(0));
            Ok((dates, last))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn t(s: &str) -> Timestamp {
        Timestamp::parse_decimal(s).unwrap()
    }

    fn store(dir: &Path) -> StateStore {
        StateStore::beside(&dir.join("minter.state"))
    }

    #[test]
    fn replayed_table_6_2_through_the_state_file() {
        let dir = tempfile::tempdir().unwrap();
        for row in crate::id::vectors::table_6_2() {
            let clock = ReplayClock::new(row.request);
            let minter = Minter::new(store(dir.path()), Granularity::SECOND, &clock);
            assert_eq!(minter.mint(1).unwrap(), vec![row.date]);
        }
        assert_eq!(fs::read_to_string(dir.path().join("minter.state")).unwrap(), "1287588480\n");
    }

    #[test]
    fn clock_behind_state_is_an_error_naming_both_dates_and_state_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        store(dir.path()).write(t("2000000000")).unwrap();
        let clock = ReplayClock::new(t("1999999000"));
        let err = Minter::new(store(dir.path()), Granularity::SECOND, &clock).mint(1).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("2033-05-18T03:33:20Z") && text.contains("2033-05-18T03:16:40Z"), "{text}");
        assert_eq!(fs::read_to_string(dir.path().join("minter.state")).unwrap(), "2000000000\n");
    }

    #[test]
    fn a_wait_within_max_wait_is_slept_on_the_clock() {
        let dir = tempfile::tempdir().unwrap();
        store(dir.path()).write(t("1000.5")).unwrap();
        let clock = ReplayClock::new(t("995"));
        let dates = Minter::new(store(dir.path()), Granularity::SECOND, &clock).mint(2).unwrap();
        assert_eq!(dates, vec![t("1001"), t("1002")]);
        assert_eq!(clock.now(), t("1002"));
    }

    #[test]
    fn corrupt_state_is_an_error_not_a_reset() {
        let dir = tempfile::tempdir().unwrap();
        for bad in ["", "12.3.4\n", "garbage", "\u{0}"] {
            fs::write(dir.path().join("minter.state"), bad).unwrap();
            let clock = ReplayClock::new(t("1000"));
            let err = Minter::new(store(dir.path()), Granularity::SECOND, &clock).mint(1).unwrap_err();
            assert!(matches!(err, Error::CorruptState { .. }), "{bad:?}: {err}");
            assert_eq!(fs::read_to_string(dir.path().join("minter.state")).unwrap(), bad);
        }
    }
}
