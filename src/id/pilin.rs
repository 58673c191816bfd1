//! PILIN handle suffixes (`PilinSuffix`): the milliseconds since the UUID epoch
//! 1582-10-15T00:00:00Z as a base-31 numeral over `0123456789BCDFGHJKLMNPQRSTVWXYZ`,
//! written least significant digit first. This module owns encoding, decoding
//! back to a date, and minting with a state of its own so that no millisecond
//! is ever used twice.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::error::{ParseError, Result};
use crate::id::base::{to_u128, PILIN};
use crate::id::minter::{update_with, wait_for, Clock, MinterState};
use crate::id::time::Timestamp;

const KIND: &str = "PILIN suffix";
/// 1582-10-15T00:00:00Z in Unix seconds.
pub const UUID_EPOCH_SECONDS: i64 = -12_219_292_800;
const NANOS_PER_MILLI: i128 = 1_000_000;

/// A PILIN suffix: a count of milliseconds since 1582-10-15T00:00:00Z.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PilinSuffix(u128);

impl PilinSuffix {
    pub fn from_millis(millis: u128) -> Self {
        PilinSuffix(millis)
    }

    /// The suffix of the millisecond that holds `date` (dates before 1582-10-15 have none).
    pub fn from_date(date: Timestamp) -> Option<Self> {
        let since = date.nanos() - Timestamp::from_seconds(UUID_EPOCH_SECONDS).nanos();
        (since >= 0).then_some(PilinSuffix((since / NANOS_PER_MILLI) as u128))
    }

    pub fn millis(self) -> u128 {
        self.0
    }

    pub fn date(self) -> Timestamp {
        Timestamp::from_seconds(UUID_EPOCH_SECONDS).checked_add_nanos(self.0 as i128 * NANOS_PER_MILLI)
    }

    pub fn parse(input: &str) -> Result<Self, ParseError> {
        let err = |column: usize, problem: String| ParseError::new(KIND, input, column, problem);
        if input.is_empty() {
            return Err(err(1, "empty suffix".into()));
        }
        if let Some((i, c)) = input.chars().enumerate().find(|(_, c)| PILIN.value_of(*c).is_none()) {
            let why = if "AEIOUaeiou".contains(c) { " (PILIN skips the vowels)" } else { "" };
            return Err(err(i + 1, format!("invalid character {c:?}{why}")));
        }
        if input.len() > 1 && input.ends_with('0') {
            return Err(err(input.len(), "the last character is a leading zero digit".into()));
        }
        let reversed: String = input.chars().rev().collect();
        let value = PILIN.decode(&reversed).expect("characters checked above");
        let millis = to_u128(&value).filter(|m| *m < 1 << 60).ok_or_else(|| err(1, "date out of range".into()))?;
        Ok(PilinSuffix(millis))
    }
}

impl fmt::Display for PilinSuffix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let numeral = PILIN.encode_u128(self.0);
        f.write_str(&numeral.chars().rev().collect::<String>())
    }
}

impl FromStr for PilinSuffix {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PilinSuffix::parse(s)
    }
}

/// Mints PILIN suffixes from a state of their own: each is the current millisecond,
/// or the one after the last used, whichever is later.
pub struct PilinMinter<'c> {
    pub state: &'c dyn MinterState,
    pub max_wait: Duration,
    pub clock: &'c dyn Clock,
}

impl PilinMinter<'_> {
    pub fn mint(&self, count: usize) -> Result<Vec<PilinSuffix>> {
        crate::id::minter::check_count(count)?;
        let allowed = self.max_wait.as_nanos() as i128;
        update_with(self.state, |last| {
            let mut last = last;
            let mut out = Vec::with_capacity(count);
            for _ in 0..count {
                let now = self.clock.now();
                let floor = now.nanos().div_euclid(NANOS_PER_MILLI) * NANOS_PER_MILLI;
                let next_after_last = last.map(|l| (l.nanos().div_euclid(NANOS_PER_MILLI) + 1) * NANOS_PER_MILLI);
                let next = Timestamp::from_nanos(floor.max(next_after_last.unwrap_or(floor)));
                wait_for(self.clock, now, next, allowed, last.unwrap_or(next))?;
                let suffix = PilinSuffix::from_date(next).ok_or_else(|| crate::error::Error::NotEncodable {
                    what: format!("date {next}"),
                    problem: "PILIN suffixes start at 1582-10-15T00:00:00Z".into(),
                })?;
                out.push(suffix);
                last = Some(next);
            }
            Ok((out, last.unwrap_or(Timestamp::from_nanos(0))))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::minter::ReplayClock;
    use proptest::prelude::*;

    /// The policy's example (with the digit zero, see the seeds' errata).
    #[test]
    fn policy_example_y35xys0qh() {
        let s = PilinSuffix::parse("Y35XYS0QH").unwrap();
        assert_eq!(s.millis(), 13_399_357_792_865);
        assert_eq!(s.date().to_rfc3339(), "2007-05-25T03:49:52.865Z");
        assert_eq!(s.to_string(), "Y35XYS0QH");
        assert_eq!(PilinSuffix::parse("y35xys0qh").unwrap(), s);
        let e = PilinSuffix::parse("Y35XYSOQH").unwrap_err();
        assert_eq!(e.column, 7);
        assert!(e.problem.contains("vowels"));
    }

    #[test]
    fn minting_never_reuses_a_millisecond() {
        let clock = ReplayClock::new(PilinSuffix::parse("Y35XYS0QH").unwrap().date());
        let state = crate::id::minter::CellState::default();
        let minter = PilinMinter { state: &state, max_wait: Duration::from_secs(10), clock: &clock };
        let first = minter.mint(3).unwrap();
        let second = minter.mint(2).unwrap();
        assert_eq!(first[0].to_string(), "Y35XYS0QH");
        let all: Vec<u128> = first.iter().chain(&second).map(|s| s.millis()).collect();
        assert_eq!(all, (0..5).map(|i| 13_399_357_792_865 + i).collect::<Vec<_>>());
    }

    proptest! {
        #[test]
        fn round_trip(ms in 0u128..1 << 50) {
            let s = PilinSuffix::from_millis(ms);
            prop_assert_eq!(PilinSuffix::parse(&s.to_string()).unwrap(), s);
            prop_assert_eq!(PilinSuffix::from_date(s.date()), Some(s));
        }
    }
}
