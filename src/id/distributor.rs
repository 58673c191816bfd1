//! The temporal distributor (Algorithm 4, `Distributor`) and the granularities
//! it works on (`Granularity`: 60 s, 1 s, 0.1 s … 1 ns). Everything is integer
//! nanoseconds, so Table 6.2 is reproduced exactly. `INT` is floor, as the
//! algorithm and Table 6.2 use (Definition 2's `rint` is an erratum). This
//! module never sleeps and never reads a clock: the `Minter` does both.

use std::fmt;
use std::str::FromStr;

use crate::error::ParseError;
use crate::id::time::{Timestamp, NANOS_PER_SECOND};

/// A temporal granularity r ∈ {60, 1, 1/10, 1/100, …, 1/10⁹} seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Granularity(i128);

const MINUTE: i128 = 60 * NANOS_PER_SECOND;

impl Granularity {
    pub const MINUTE: Granularity = Granularity(MINUTE);
    pub const SECOND: Granularity = Granularity(NANOS_PER_SECOND);
    pub const MILLISECOND: Granularity = Granularity(1_000_000);

    /// Every granularity, coarsest first.
    pub fn all() -> impl Iterator<Item = Granularity> {
        std::iter::once(Granularity(MINUTE)).chain((0..10).map(|k| Granularity(NANOS_PER_SECOND / 10i128.pow(k))))
    }

    pub fn from_nanos(nanos: i128) -> Option<Granularity> {
        Granularity::all().find(|g| g.0 == nanos)
    }

    pub fn nanos(self) -> i128 {
        self.0
    }

    /// The granularity written as decimal seconds: `60`, `1`, `0.001`.
    pub fn to_decimal(self) -> String {
        Timestamp::from_nanos(self.0).to_decimal()
    }
}

impl fmt::Display for Granularity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_decimal())
    }
}

impl FromStr for Granularity {
    type Err = ParseError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let problem = "a granularity is 60, 1, 0.1, 0.01, … or 0.000000001 seconds";
        let nanos = Timestamp::parse_decimal(text)
            .map_err(|e| ParseError::new("granularity", text, e.column, format!("{}; {problem}", e.problem)))?;
        Granularity::from_nanos(nanos.nanos()).ok_or_else(|| ParseError::new("granularity", text, 1, problem))
    }
}

/// `r * INT(t / r)` with INT = floor.
pub fn round_down(t: Timestamp, r: i128) -> Timestamp {
    Timestamp::from_nanos(t.nanos().div_euclid(r) * r)
}

/// One answer of the distributor for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Distribution {
    /// The creation date t′ᵢ: the caller must not hand out the name before this instant.
    pub creation: Timestamp,
    /// The date for the suffix t(i): the shortest date on the grid later than the previous one.
    pub date: Timestamp,
}

/// Algorithm 4 with its global state: the granularity and the last date handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Distributor {
    pub granularity: Granularity,
    pub last: Option<Timestamp>,
}

impl Distributor {
    pub fn new(granularity: Granularity, last: Option<Timestamp>) -> Self {
        Distributor { granularity, last }
    }

    /// Runs Algorithm 4 for a request at `current` and records the date it hands out.
    pub fn next(&mut self, current: Timestamp) -> Distribution {
        let r = self.granularity.0;
        let rounded = round_down(current, r);
        let last = self.last.unwrap_or(Timestamp::from_nanos(rounded.nanos() - r));
        let last = round_down(last, r);
        let creation = Timestamp::from_nanos((last.nanos() + r).max(rounded.nanos()));
        let mut short = creation;
        let mut s = r;
        let mut t = creation;
        while last < short {
            s *= 10;
            if s == 10 * NANOS_PER_SECOND {
                s = MINUTE;
            }
            t = short;
            if s > MINUTE {
                break;
            }
            short = round_down(creation, s);
        }
        self.last = Some(t);
        Distribution { creation, date: t }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::name::Suffix;
    use proptest::prelude::*;

    fn t(s: &str) -> Timestamp {
        Timestamp::parse_decimal(s).unwrap()
    }

    #[test]
    fn table_6_2_exactly() {
        let rows = crate::id::vectors::table_6_2();
        assert_eq!(rows.len(), 7);
        let mut d = Distributor::new(Granularity::SECOND, None);
        for row in rows {
            let out = d.next(row.request);
            assert_eq!(out.creation, row.creation, "creation for request {}", row.request.to_decimal());
            assert_eq!(out.date, row.date, "date for request {}", row.request.to_decimal());
            assert_eq!(Suffix::from_date(out.date).unwrap().to_string(), row.suffix);
        }
    }

    #[test]
    fn granularities_parse_and_print() {
        let texts: Vec<String> = Granularity::all().map(|g| g.to_string()).collect();
        assert_eq!(texts[0], "60");
        assert_eq!(texts[1], "1");
        assert_eq!(texts[4], "0.001");
        assert_eq!(texts[10], "0.000000001");
        for text in &texts {
            assert_eq!(text.parse::<Granularity>().unwrap().to_string(), *text);
        }
        for bad in ["2", "0.5", "0.0001x", "", "120", "0.0000000001"] {
            assert!(bad.parse::<Granularity>().is_err(), "{bad}");
        }
    }

    #[test]
    fn coarser_granularity_after_finer_still_moves_forward() {
        let mut d = Distributor::new(Granularity::MILLISECOND, None);
        let a = d.next(t("1287588115.5"));
        d.granularity = Granularity::SECOND;
        let b = d.next(t("1287588115.6"));
        assert!(b.date > a.date);
        assert_eq!(b.date, t("1287588116"));
    }

    fn any_granularity() -> impl Strategy<Value = Granularity> {
        (0usize..11).prop_map(|i| Granularity::all().nth(i).unwrap())
    }

    proptest! {
        /// Any stream of requests (equal times, times going back, granularity changes):
        /// dates strictly increase, sit on the grid of the granularity in force, never
        /// exceed the creation date, and give distinct suffixes.
        #[test]
        fn dates_strictly_increase_and_names_are_distinct(
            start in 807_235_200_000_000_000i128..4_000_000_000_000_000_000i128,
            steps in proptest::collection::vec((-5_000_000_000i128..5_000_000_000i128, proptest::option::of(any_granularity())), 1..200),
            first in any_granularity(),
        ) {
            let mut d = Distributor::new(first, None);
            let mut now = start;
            let mut previous: Option<Timestamp> = None;
            let mut suffixes = std::collections::HashSet::new();
            for (step, change) in steps {
                if let Some(g) = change { d.granularity = g; }
                now += step.max(-now + 1);
                let out = d.next(Timestamp::from_nanos(now));
                if let Some(p) = previous { prop_assert!(out.date > p, "{:?} !> {:?}", out.date, p); }
                prop_assert!(out.date <= out.creation);
                prop_assert_eq!(out.date.nanos() % d.granularity.nanos(), 0);
                prop_assert!(suffixes.insert(Suffix::from_date(out.date).unwrap().to_string()));
                previous = Some(out.date);
            }
        }
    }
}
