//! The `Minter`: Algorithm 4's distributor plus its durable state and a clock.
//! Minting runs read, compute and save as one exclusive `MinterState::update`,
//! so processes that share a state never hand out the same date. How the state
//! is stored and locked belongs to a backend (`store::StateFile`); this
//! module does no I/O. The `Clock` is injectable so replays (`--at`) and tests
//! never sleep.

#[cfg(test)]
use std::cell::Cell;
use std::sync::Mutex;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::id::distributor::{Distributor, Granularity};
use crate::id::time::Timestamp;

/// Where time comes from, and how to wait for it; shared by a deposit's threads.
pub trait Clock: Sync {
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
pub struct ReplayClock(Mutex<Timestamp>);

impl ReplayClock {
    pub fn new(at: Timestamp) -> Self {
        ReplayClock(Mutex::new(at))
    }

    fn at(&self) -> std::sync::MutexGuard<'_, Timestamp> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Clock for ReplayClock {
    fn now(&self) -> Timestamp {
        *self.at()
    }

    fn sleep_until(&self, until: Timestamp) {
        let mut at = self.at();
        *at = (*at).max(until);
    }
}

/// Durable storage of the last date a minter used, shared by every process that
/// mints from it. Backends own the storage (`store::StateFile`, a file with
/// a lock beside it; an object store would compare and swap).
pub trait MinterState {
    /// Runs `step` on the stored date while no other minter of this state can, and
    /// stores the date it returns; nothing is stored if `step` fails.
    fn update(&self, step: &mut dyn FnMut(Option<Timestamp>) -> Result<Timestamp>) -> Result<()>;
    /// The stored date (and any floor the state keeps), changing nothing.
    fn last(&self) -> Result<Option<Timestamp>>;
}

/// Runs `step` through `state.update`, returning what `step` made besides the date.
pub fn update_with<T>(
    state: &dyn MinterState,
    step: impl FnOnce(Option<Timestamp>) -> Result<(T, Timestamp)>,
) -> Result<T> {
    let mut step = Some(step);
    let mut out = None;
    state.update(&mut |last| {
        let step = step.take().ok_or_else(|| Error::Invalid {
            what: "minter state".into(),
            problem: "a backend ran the update step twice".into(),
        })?;
        let (made, next) = step(last)?;
        out = Some(made);
        Ok(next)
    })?;
    out.ok_or_else(|| Error::Invalid { what: "minter state".into(), problem: "a backend skipped the update".into() })
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
    check_wait(now, creation, allowed, state)?;
    if creation.nanos() > now.nanos() {
        clock.sleep_until(creation);
    }
    Ok(())
}

/// The wait a minter gathers before it sleeps it (fine granularities wait a grain a name).
const GATHERED_WAIT: Duration = Duration::from_millis(5);

/// `Err(ClockBehind)` when `creation` is further than `allowed` nanoseconds after `now`.
fn check_wait(now: Timestamp, creation: Timestamp, allowed: i128, state: Timestamp) -> Result<()> {
    let wait = creation.nanos() - now.nanos();
    if wait > allowed {
        return Err(Error::ClockBehind {
            clock: now.to_rfc3339(),
            state: state.to_rfc3339(),
            wait_seconds: Timestamp::from_nanos(wait).to_decimal(),
            max_wait_seconds: Timestamp::from_nanos(allowed).to_decimal(),
        });
    }
    Ok(())
}

/// The distributor with its durable state and clock.
pub struct Minter<'c> {
    pub state: &'c dyn MinterState,
    pub granularity: Granularity,
    pub max_wait: Duration,
    pub clock: &'c dyn Clock,
}

impl<'c> Minter<'c> {
    pub fn new(state: &'c dyn MinterState, granularity: Granularity, clock: &'c dyn Clock) -> Self {
        Minter { state, granularity, max_wait: DEFAULT_MAX_WAIT, clock }
    }

    /// Mints `count` dates under one lock hold and saves the state once, before returning.
    pub fn mint(&self, count: usize) -> Result<Vec<Timestamp>> {
        self.mint_checked(count, &|_| Ok(()))
    }

    /// Like `mint`, but every date must pass `accept` before the state is saved: a date
    /// the caller cannot use (an IBIp before 1995) leaves the state unchanged.
    pub fn mint_checked(&self, count: usize, accept: &dyn Fn(Timestamp) -> Result<()>) -> Result<Vec<Timestamp>> {
        Ok(self.mint_within(count, accept, GATHERED_WAIT)?.wait(self.clock))
    }

    /// Like `mint_checked`, but returns as soon as the state is saved, with dates the
    /// clock may not have reached yet (at most `MINTED_AHEAD` ahead): the caller may
    /// write them into work nobody sees, and must `Ahead::wait` before any is shown,
    /// placed or recorded. A name in a collection thus never postdates the clock,
    /// whatever state file a restore brings back.
    pub fn mint_ahead(&self, count: usize, accept: &dyn Fn(Timestamp) -> Result<()>) -> Result<Ahead> {
        self.mint_within(count, accept, MINTED_AHEAD)
    }

    /// Mints, sleeping in the lock hold whenever the dates run `ahead` of the clock.
    fn mint_within(&self, count: usize, accept: &dyn Fn(Timestamp) -> Result<()>, ahead: Duration) -> Result<Ahead> {
        check_count(count)?;
        let allowed = (self.max_wait.as_nanos() as i128).max(self.granularity.nanos());
        update_with(self.state, |last| {
            let mut distributor = Distributor::new(self.granularity, last);
            let mut dates = Vec::with_capacity(count);
            // No date is handed out before the clock reaches it, but the dates of one
            // call are handed out together: the waits are gathered and slept at once
            // (whenever they reach `ahead`, and by the caller at the end), not spun
            // name by name.
            let mut until: Option<Timestamp> = None;
            for _ in 0..count {
                let now = self.clock.now();
                let previous = distributor.last;
                let out = distributor.next(now);
                check_wait(now, out.creation, allowed, previous.unwrap_or(out.date))?;
                accept(out.date)?;
                dates.push(out.date);
                until = Some(out.creation);
                if out.creation.nanos() - now.nanos() >= ahead.as_nanos() as i128 {
                    self.clock.sleep_until(out.creation);
                }
            }
            let last = distributor.last.or(last).unwrap_or(Timestamp::from_nanos(0));
            Ok((Ahead { dates, usable_from: until }, last))
        })
    }
}

/// How far ahead of the clock `Minter::mint_ahead` may run before it sleeps: a
/// deposit's batch of 256 names at 0.0001 s is 25.6 ms of them.
pub const MINTED_AHEAD: Duration = Duration::from_millis(50);

/// Dates minted, and the moment from which every one of them may be used.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "the dates may not be used before the clock reaches them"]
pub struct Ahead {
    pub dates: Vec<Timestamp>,
    /// The last date's creation (`None` for no dates).
    pub usable_from: Option<Timestamp>,
}

impl Ahead {
    /// Dates the clock has already reached.
    pub fn reached(dates: Vec<Timestamp>) -> Ahead {
        Ahead { dates, usable_from: None }
    }

    /// Sleeps on `clock` until every date may be used, and returns them.
    pub fn wait(self, clock: &dyn Clock) -> Vec<Timestamp> {
        sleep_until_reached(clock, self.usable_from);
        self.dates
    }
}

/// Sleeps on `clock` until it reaches `until`, if it has not yet.
pub fn sleep_until_reached(clock: &dyn Clock, until: Option<Timestamp>) {
    if let Some(until) = until.filter(|u| u.nanos() > clock.now().nanos()) {
        clock.sleep_until(until);
    }
}

/// A state in memory, for tests of the minters' own logic.
#[cfg(test)]
#[derive(Default)]
pub(crate) struct CellState(pub Cell<Option<Timestamp>>);

#[cfg(test)]
impl MinterState for CellState {
    fn update(&self, step: &mut dyn FnMut(Option<Timestamp>) -> Result<Timestamp>) -> Result<()> {
        self.0.set(Some(step(self.0.get())?));
        Ok(())
    }
    fn last(&self) -> Result<Option<Timestamp>> {
        Ok(self.0.get())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn t(s: &str) -> Timestamp {
        Timestamp::parse_decimal(s).unwrap()
    }

    use crate::id::minter::CellState;

    #[test]
    fn replayed_table_6_2() {
        let state = CellState::default();
        for row in crate::id::vectors::table_6_2() {
            let clock = ReplayClock::new(row.request);
            let minter = Minter::new(&state, Granularity::SECOND, &clock);
            assert_eq!(minter.mint(1).unwrap(), vec![row.date]);
        }
        assert_eq!(state.0.get(), Some(t("1287588480")));
    }

    #[test]
    fn clock_behind_state_is_an_error_naming_both_dates_and_state_is_kept() {
        let state = CellState(Cell::new(Some(t("2000000000"))));
        let clock = ReplayClock::new(t("1999999000"));
        let err = Minter::new(&state, Granularity::SECOND, &clock).mint(1).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("2033-05-18T03:33:20Z") && text.contains("2033-05-18T03:16:40Z"), "{text}");
        assert_eq!(state.0.get(), Some(t("2000000000")));
    }

    #[test]
    fn a_wait_within_max_wait_is_slept_on_the_clock() {
        let state = CellState(Cell::new(Some(t("1000.5"))));
        let clock = ReplayClock::new(t("995"));
        let dates = Minter::new(&state, Granularity::SECOND, &clock).mint(2).unwrap();
        assert_eq!(dates, vec![t("1001"), t("1002")]);
        assert_eq!(clock.now(), t("1002"));
    }

    #[test]
    fn dates_minted_ahead_wait_for_the_clock_before_use() {
        let state = CellState::default();
        let clock = ReplayClock::new(t("1000"));
        let minter = Minter::new(&state, Granularity::from_nanos(1_000_000).unwrap(), &clock);
        let ahead = minter.mint_ahead(3, &|_| Ok(())).unwrap();
        assert_eq!(ahead.dates, vec![t("1000"), t("1000.001"), t("1000.002")]);
        assert_eq!(clock.now(), t("1000"), "mint_ahead returns before the clock reaches its dates");
        assert_eq!(state.last().unwrap(), Some(t("1000.002")), "the state is saved before the wait");
        let usable_from = ahead.usable_from.unwrap();
        assert!(usable_from >= t("1000.002"), "{usable_from:?}");
        assert_eq!(ahead.wait(&clock).len(), 3);
        assert_eq!(clock.now(), usable_from, "wait sleeps until the last date's creation");
    }

    #[test]
    fn dates_minted_ahead_never_run_further_than_minted_ahead_allows() {
        let state = CellState::default();
        let clock = ReplayClock::new(t("1000"));
        let minter = Minter::new(&state, Granularity::from_nanos(1_000_000).unwrap(), &clock);
        let ahead = minter.mint_ahead(500, &|_| Ok(())).unwrap();
        let lead = ahead.usable_from.unwrap().nanos() - clock.now().nanos();
        assert!(lead <= MINTED_AHEAD.as_nanos() as i128, "{lead} ns ahead");
        assert!(clock.now() > t("1000.4"), "the minter slept in its lock hold: {:?}", clock.now());
    }
}
