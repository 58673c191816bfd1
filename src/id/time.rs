//! Exact UTC instants: `Timestamp` counts integer nanoseconds since the
//! Unix epoch, so the temporal distributor, name suffixes, IBIp suffixes and
//! PILIN suffixes never touch floating point. This module owns parsing of the
//! two time syntaxes users type (RFC 3339 and POSIX seconds with an optional
//! fraction), the calendar split used by name suffixes, and the exact decimal
//! text stored in minter state files.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Datelike, NaiveDate, Timelike, Utc};

use crate::error::ParseError;

/// Nanoseconds in one second.
pub const NANOS_PER_SECOND: i128 = 1_000_000_000;

/// An exact instant, in nanoseconds since 1970-01-01T00:00:00Z (UTC, no leap seconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(i128);

/// A `Timestamp` split into UTC calendar fields, with the sub-second part in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CalendarParts {
    pub year: i32,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
    pub nanos: u32,
}

impl Timestamp {
    pub const fn from_nanos(nanos: i128) -> Self {
        Timestamp(nanos)
    }

    pub const fn from_seconds(seconds: i64) -> Self {
        Timestamp(seconds as i128 * NANOS_PER_SECOND)
    }

    pub const fn nanos(self) -> i128 {
        self.0
    }

    /// Whole seconds, rounded towards minus infinity.
    pub fn whole_seconds(self) -> i128 {
        self.0.div_euclid(NANOS_PER_SECOND)
    }

    /// The nanoseconds past `whole_seconds`, always in `0..1e9`.
    pub fn subsec_nanos(self) -> u32 {
        self.0.rem_euclid(NANOS_PER_SECOND) as u32
    }

    /// The current system time.
    /// The system clock, exactly; a clock set before 1970 gives a negative instant
    /// (which minting then refuses with an error), never a panic.
    pub fn now() -> Self {
        match std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
            Ok(after) => Timestamp(after.as_nanos() as i128),
            Err(before) => Timestamp(-(before.duration().as_nanos() as i128)),
        }
    }

    /// Builds an instant from UTC calendar fields, checking that they name a real date and time.
    pub fn from_calendar(parts: CalendarParts) -> Option<Self> {
        if parts.hour > 23 || parts.minute > 59 || parts.second > 59 || parts.nanos >= 1_000_000_000 {
            return None;
        }
        let date = NaiveDate::from_ymd_opt(parts.year, parts.month, parts.day)?;
        let days = date.signed_duration_since(NaiveDate::from_ymd_opt(1970, 1, 1)?).num_days() as i128;
        let seconds = days * 86_400 + (parts.hour * 3600 + parts.minute * 60 + parts.second) as i128;
        Some(Timestamp(seconds * NANOS_PER_SECOND + parts.nanos as i128))
    }

    /// Splits the instant into UTC calendar fields; `None` outside chrono's range (±262,000 years).
    pub fn calendar(self) -> Option<CalendarParts> {
        let seconds = i64::try_from(self.whole_seconds()).ok()?;
        let dt = DateTime::<Utc>::from_timestamp(seconds, 0)?;
        Some(CalendarParts {
            year: dt.year(),
            month: dt.month(),
            day: dt.day(),
            hour: dt.hour(),
            minute: dt.minute(),
            second: dt.second(),
            nanos: self.subsec_nanos(),
        })
    }

    /// RFC 3339 in UTC with the fewest fraction digits: `2010-10-20T15:14:06.394023Z`.
    /// RFC 3339 to the whole second (so that such dates sort as text).
    pub fn to_rfc3339_seconds(self) -> String {
        Timestamp::from_seconds(i64::try_from(self.whole_seconds()).unwrap_or(i64::MAX)).to_rfc3339()
    }

    pub fn to_rfc3339(self) -> String {
        match self.calendar() {
            Some(c) => format!(
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}{}Z",
                c.year,
                c.month,
                c.day,
                c.hour,
                c.minute,
                c.second,
                fraction_suffix(c.nanos)
            ),
            None => format!("{} s since the Unix epoch", self.to_decimal()),
        }
    }

    /// Exact decimal seconds since the Unix epoch, fewest fraction digits: `1287587646.394023`.
    pub fn to_decimal(self) -> String {
        if self.0 < 0 {
            // Write negative instants as -(|t|) so the text stays a plain decimal.
            return format!("-{}", Timestamp(-self.0).to_decimal());
        }
        format!("{}{}", self.whole_seconds(), fraction_suffix(self.subsec_nanos()))
    }

    /// Parses exact decimal seconds (`1287587646.394023`, `-12.5`) with at most nine fraction digits.
    pub fn parse_decimal(text: &str) -> Result<Self, ParseError> {
        let err = |column: usize, problem: String| ParseError::new("POSIX time", text, column, problem);
        let (negative, body, offset) = match text.strip_prefix('-') {
            Some(rest) => (true, rest, 1),
            None => (false, text, 0),
        };
        let (int_part, frac_part) = match body.split_once('.') {
            Some((i, f)) => (i, Some(f)),
            None => (body, None),
        };
        if int_part.is_empty() {
            return Err(err(offset + 1, "expected digits before the fraction".into()));
        }
        if let Some(pos) = int_part.find(|c: char| !c.is_ascii_digit()) {
            let c = int_part[pos..].chars().next().unwrap_or('?');
            return Err(err(offset + pos + 1, format!("unexpected character {c:?}")));
        }
        let seconds: i128 = int_part.parse::<i64>().map_err(|_| err(offset + 1, "seconds out of range".into()))?.into();
        let nanos = match frac_part {
            None => 0,
            Some(f) => parse_fraction_nanos(f).map_err(|(pos, p)| err(offset + int_part.len() + 2 + pos, p))?,
        };
        let total = seconds * NANOS_PER_SECOND + nanos as i128;
        Ok(Timestamp(if negative { -total } else { total }))
    }

    /// Parses what users type for TIME: RFC 3339 (`2009-02-16T17:46:00Z`, fractions allowed)
    /// or POSIX seconds with an optional fraction (`1287587646.394023`).
    pub fn parse_user(text: &str) -> Result<Self, ParseError> {
        if let Some(day) = Self::parse_day(text) {
            return Ok(day);
        }
        if text.contains(['T', 't', ' ']) && text.contains('-') && text.contains(':') {
            let dt = DateTime::parse_from_rfc3339(text).map_err(|e| {
                ParseError::new("RFC 3339 time", text, 1, format!("not a valid RFC 3339 date-time ({e})"))
            })?;
            let utc = dt.with_timezone(&Utc);
            return Ok(Timestamp(utc.timestamp() as i128 * NANOS_PER_SECOND + utc.timestamp_subsec_nanos() as i128));
        }
        Self::parse_decimal(text)
    }

    /// A calendar day alone (`2026-11-22`): its first instant, UTC.
    pub fn parse_day(text: &str) -> Option<Self> {
        let date = chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d").ok()?;
        (text.len() == 10).then_some(())?;
        let parts = CalendarParts {
            year: date.year(),
            month: date.month(),
            day: date.day(),
            hour: 0,
            minute: 0,
            second: 0,
            nanos: 0,
        };
        Self::from_calendar(parts)
    }

    pub fn checked_add_nanos(self, nanos: i128) -> Self {
        Timestamp(self.0 + nanos)
    }
}

/// `.394023` for 394_023_000 ns, empty for zero: the fewest digits, no trailing zeros.
pub fn fraction_digits(nanos: u32) -> String {
    if nanos == 0 {
        return String::new();
    }
    format!("{nanos:09}").trim_end_matches('0').to_string()
}

fn fraction_suffix(nanos: u32) -> String {
    let digits = fraction_digits(nanos);
    if digits.is_empty() {
        digits
    } else {
        format!(".{digits}")
    }
}

/// Reads up to nine decimal fraction digits as nanoseconds; on error gives the 0-based
/// position within `digits` and the problem.
pub fn parse_fraction_nanos(digits: &str) -> Result<u32, (usize, String)> {
    if digits.is_empty() {
        return Err((0, "expected digits after \".\"".into()));
    }
    if let Some(pos) = digits.bytes().position(|b| !b.is_ascii_digit()) {
        let c = digits[pos..].chars().next().unwrap_or('?');
        return Err((pos, format!("unexpected character {c:?} in fraction")));
    }
    if digits.len() > 9 {
        return Err((9, format!("fraction \"{digits}\" is finer than one nanosecond")));
    }
    let value = digits.bytes().fold(0u32, |value, digit| value * 10 + u32::from(digit - b'0'));
    Ok(value * 10u32.pow((9 - digits.len()) as u32))
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_rfc3339())
    }
}

impl FromStr for Timestamp {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse_user(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn decimal_text_is_exact() {
        let t = Timestamp::parse_decimal("1287587646.394023").unwrap();
        assert_eq!(t.nanos(), 1_287_587_646_394_023_000);
        assert_eq!(t.to_decimal(), "1287587646.394023");
        assert_eq!(Timestamp::parse_decimal("12.5").unwrap().to_decimal(), "12.5");
        assert_eq!(Timestamp::parse_decimal("-0.5").unwrap().nanos(), -500_000_000);
        assert_eq!(Timestamp::parse_decimal("-0.5").unwrap().to_decimal(), "-0.5");
    }

    #[test]
    fn rfc3339_and_posix_agree() {
        let a = Timestamp::parse_user("2009-02-16T17:46:00Z").unwrap();
        let b = Timestamp::parse_user("1234806360").unwrap();
        assert_eq!(a, b);
        assert_eq!(a.to_rfc3339(), "2009-02-16T17:46:00Z");
        let c = Timestamp::parse_user("2010-10-20T17:14:06.394023+02:00").unwrap();
        assert_eq!(c.to_decimal(), "1287587646.394023");
    }

    #[test]
    fn bad_times_name_the_place() {
        let e = Timestamp::parse_decimal("12x4").unwrap_err();
        assert_eq!(e.column, 3);
        assert!(Timestamp::parse_decimal("1.1234567891").unwrap_err().problem.contains("nanosecond"));
        assert!(Timestamp::parse_user("2009-13-16T17:46:00Z").is_err());
    }

    #[test]
    fn calendar_rejects_impossible_dates() {
        let p = |y, mo, d| CalendarParts { year: y, month: mo, day: d, hour: 0, minute: 0, second: 0, nanos: 0 };
        assert!(Timestamp::from_calendar(p(2009, 2, 29)).is_none());
        assert!(Timestamp::from_calendar(p(2008, 2, 29)).is_some());
        assert!(Timestamp::from_calendar(p(2009, 4, 31)).is_none());
        assert!(Timestamp::from_calendar(p(2009, 13, 1)).is_none());
    }

    proptest! {
        /// Fraction digits are read in machine words: as the same digits padded to
        /// nine and read as text.
        #[test]
        fn fraction_digits_read_as_padded_text(digits in "[0-9]{1,9}") {
            prop_assert_eq!(parse_fraction_nanos(&digits).unwrap(), format!("{digits:0<9}").parse::<u32>().unwrap());
        }

        #[test]
        fn decimal_round_trip(n in -10_000_000_000_000_000_000i128..10_000_000_000_000_000_000i128) {
            let t = Timestamp::from_nanos(n);
            prop_assert_eq!(Timestamp::parse_decimal(&t.to_decimal()).unwrap(), t);
        }

        #[test]
        fn calendar_round_trip(n in -60_000_000_000_000_000_000i128..200_000_000_000_000_000_000i128) {
            let t = Timestamp::from_nanos(n);
            let parts = t.calendar().unwrap();
            prop_assert_eq!(Timestamp::from_calendar(parts), Some(t));
            prop_assert_eq!(Timestamp::parse_user(&t.to_rfc3339()).unwrap(), t);
        }
    }
}
