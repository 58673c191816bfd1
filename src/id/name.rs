//! Repository names (`RepositoryName`): the four-part IBI such as
//! `sid.inpe.br/mtc-m18/2009/02.16.17.46`. This module owns the Table 6.1
//! grammar (legacy `@port`, seconds, fractions), the date checks, the
//! canonical form (lower-case prefix), the prefix from a host and port
//! (Algorithm 1), the suffix from an exact date (Algorithm 2), their
//! concatenation (Algorithm 3) and the four directory components.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::error::{Error, ParseError};
use crate::id::time::{fraction_digits, parse_fraction_nanos, CalendarParts, Timestamp};

const KIND: &str = "repository name";

/// How the port is joined to the first word: `.` today, `@` before August 2010.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortSeparator {
    Dot,
    At,
}

/// The prefix `subdomain/word[.port]`, lower case. Its texts are shared
/// (`Arc`): the names of a walk or a page share one prefix, and a clone of a
/// name then allocates for its time alone.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Prefix {
    subdomain: Arc<str>,
    word: Arc<str>,
    port: Option<(PortSeparator, u16)>,
}

/// The suffix `year/MM.DD.hh.mm[.ss[.f]]`, kept exactly as written, with its date.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Suffix {
    year: Arc<str>,
    time: TimeText,
    date: Timestamp,
}

/// The longest time a suffix can have: `MM.DD.hh.mm.ss.fffffffff`.
const TIME_MAX: usize = 24;

/// A suffix's time text, held inline: a name read from a listing or a walk
/// then costs no allocation of its own for it (one per row was a sixth of
/// `list`'s allocations).
type TimeText = arrayvec::ArrayString<TIME_MAX>;

/// `time` as inline text; only a time `Suffix::parse_date` accepted fits, so
/// callers check first.
fn time_text(time: &str) -> TimeText {
    TimeText::from(time).expect("a checked time has at most TIME_MAX bytes")
}

/// A repository name (IBI). Equality ignores letter case, because the canonical form
/// has a lower-case prefix and the suffix has only digits.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RepositoryName {
    prefix: Prefix,
    suffix: Suffix,
}

type Located = (usize, String);

fn is_alnum(c: u8) -> bool {
    c.is_ascii_alphanumeric()
}

/// Checks a `word` (or a `last-word` when `last` is set) of RFC 1123; errors give a
/// 0-based offset within `label`.
fn check_label(label: &str, last: bool) -> Result<(), Located> {
    let bytes = label.as_bytes();
    let Some(&first) = bytes.first() else {
        return Err((0, "empty label".into()));
    };
    if let Some(pos) = bytes.iter().position(|&c| !(is_alnum(c) || c == b'-')) {
        let c = label[pos..].chars().next().unwrap_or('?');
        return Err((pos, format!("invalid character {c:?}")));
    }
    if first == b'-' {
        return Err((0, format!("label \"{label}\" starts with \"-\"")));
    }
    if bytes[bytes.len() - 1] == b'-' {
        return Err((bytes.len() - 1, format!("label \"{label}\" ends with \"-\"")));
    }
    if last && !first.is_ascii_alphabetic() {
        return Err((0, format!("last label \"{label}\" must start with a letter")));
    }
    Ok(())
}

/// Checks `*(word ".") last-word` (without a trailing dot); offsets are within `text`.
fn check_subdomain(text: &str) -> Result<(), Located> {
    let labels: Vec<&str> = text.split('.').collect();
    let mut offset = 0;
    for (i, label) in labels.iter().enumerate() {
        check_label(label, i + 1 == labels.len()).map_err(|(p, m)| (offset + p, m))?;
        offset += label.len() + 1;
    }
    Ok(())
}

fn parse_port(digits: &str) -> Result<u16, Located> {
    if digits.is_empty() {
        return Err((0, "missing port after separator".into()));
    }
    if let Some(pos) = digits.find(|c: char| !c.is_ascii_digit()) {
        let c = digits[pos..].chars().next().unwrap_or('?');
        return Err((pos, format!("invalid character {c:?} in port")));
    }
    if digits.len() > 1 && digits.starts_with('0') {
        return Err((0, format!("port \"{digits}\" has a leading zero")));
    }
    match digits.parse::<u16>() {
        Ok(p) if p > 0 => Ok(p),
        _ => Err((0, format!("port \"{digits}\" is not in 1..65535"))),
    }
}

impl Prefix {
    /// Algorithm 1: the prefix of names minted by a subsystem at `host`:`port`.
    /// The host needs two or more labels; port 80 is omitted, other ports join with `.`.
    pub fn from_host(host: &str, port: u16) -> Result<Prefix, Error> {
        let lower = host.to_ascii_lowercase();
        let lower = lower.strip_suffix('.').unwrap_or(&lower);
        let err = |column: usize, problem: String| ParseError::new("host name", host, column, problem);
        if !host.is_ascii() {
            let pos = host.chars().position(|c| !c.is_ascii()).unwrap_or(0);
            return Err(err(pos + 1, "non-ASCII character in host name".into()).into());
        }
        let Some((word, subdomain)) = lower.split_once('.') else {
            return Err(err(1, "a host name needs two or more labels, e.g. mtc-m18.sid.inpe.br".into()).into());
        };
        check_label(word, false).map_err(|(p, m)| err(p + 1, m))?;
        check_subdomain(subdomain).map_err(|(p, m)| err(word.len() + 2 + p, m))?;
        if port == 0 {
            return Err(Error::Invalid { what: "port".into(), problem: "port 0 cannot serve a subsystem".into() });
        }
        let port = (port != 80).then_some((PortSeparator::Dot, port));
        Ok(Prefix { subdomain: subdomain.into(), word: word.into(), port })
    }

    pub fn subdomain(&self) -> &str {
        &self.subdomain
    }

    /// The second part: `word`, `word.port` or legacy `word@port`.
    pub fn word_port(&self) -> String {
        match self.port {
            None => self.word.to_string(),
            Some((PortSeparator::Dot, p)) => format!("{}.{p}", self.word),
            Some((PortSeparator::At, p)) => format!("{}@{p}", self.word),
        }
    }

    /// The port as written in the name, if any, with its separator.
    pub fn port(&self) -> Option<(PortSeparator, u16)> {
        self.port
    }

    /// Parses `subdomain "/" word [("." | "@") port]`; `base` is the 0-based column of `sub` in `input`.
    fn parse(input: &str, sub: &str, word_port: &str, base: usize) -> Result<Prefix, ParseError> {
        let err = |column: usize, problem: String| ParseError::new(KIND, input, column + 1, problem);
        let subdomain = sub.strip_suffix('.').unwrap_or(sub);
        if subdomain.is_empty() {
            return Err(err(base, "empty subdomain".into()));
        }
        check_subdomain(subdomain).map_err(|(p, m)| err(base + p, m))?;
        let wp_base = base + sub.len() + 1;
        let (word, port) = match word_port.find(['.', '@']) {
            None => (word_port, None),
            Some(i) => {
                let sep = if word_port.as_bytes()[i] == b'@' { PortSeparator::At } else { PortSeparator::Dot };
                let port = parse_port(&word_port[i + 1..]).map_err(|(p, m)| err(wp_base + i + 1 + p, m))?;
                (&word_port[..i], Some((sep, port)))
            }
        };
        if word.is_empty() {
            return Err(err(wp_base, "empty first word".into()));
        }
        check_label(word, false).map_err(|(p, m)| err(wp_base + p, m))?;
        let lower = |text: &str| -> Arc<str> {
            match text.bytes().any(|b| b.is_ascii_uppercase()) {
                true => text.to_ascii_lowercase().into(),
                false => text.into(),
            }
        };
        Ok(Prefix { subdomain: lower(subdomain), word: lower(word), port })
    }
}

impl fmt::Display for Prefix {
    /// `subdomain/word[.port]`, written piece by piece (`word_port` makes a String).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.subdomain)?;
        f.write_str("/")?;
        f.write_str(&self.word)?;
        match self.port {
            None => Ok(()),
            Some((PortSeparator::Dot, p)) => write!(f, ".{p}"),
            Some((PortSeparator::At, p)) => write!(f, "@{p}"),
        }
    }
}

impl Suffix {
    /// Algorithm 2: `year/MM.DD.hh.mm`, then `.ss` when the seconds are not `00` or there
    /// is a fraction, then `.f` with the fraction's digits (fewest, no trailing zeros).
    pub fn from_date(date: Timestamp) -> Result<Suffix, Error> {
        let c = date.calendar().filter(|c| (0..=262_143).contains(&c.year)).ok_or_else(|| Error::NotEncodable {
            what: format!("date {}", date.to_decimal()),
            problem: "outside the years 0000 to 262143".into(),
        })?;
        let mut time = format!("{:02}.{:02}.{:02}.{:02}", c.month, c.day, c.hour, c.minute);
        if c.nanos != 0 {
            time.push_str(&format!(".{:02}.{}", c.second, fraction_digits(c.nanos)));
        } else if c.second != 0 {
            time.push_str(&format!(".{:02}", c.second));
        }
        Ok(Suffix { year: format!("{:04}", c.year).into(), time: time_text(&time), date })
    }

    pub fn date(&self) -> Timestamp {
        self.date
    }

    /// Parses `year "/" month "." day "." hour "." minute ["." second ["." fraction]]`.
    fn parse(input: &str, year: &str, time: &str, base: usize) -> Result<Suffix, ParseError> {
        let date = Suffix::parse_date(input, year, time, base)?;
        Ok(Suffix { year: year.into(), time: time_text(time), date })
    }

    /// The date of `year "/" time`, checked as `parse` checks it.
    fn parse_date(input: &str, year: &str, time: &str, base: usize) -> Result<Timestamp, ParseError> {
        let err = |column: usize, problem: String| ParseError::new(KIND, input, column + 1, problem);
        if year.len() < 4 || !year.bytes().all(|b| b.is_ascii_digit()) {
            return Err(err(base, format!("invalid year \"{year}\" (four or more digits)")));
        }
        if year.len() > 4 && year.starts_with('0') {
            return Err(err(base, format!("year \"{year}\" has a leading zero")));
        }
        let year_value = year.parse::<i32>().ok().filter(|y| *y <= 262_143);
        let year_value = year_value.ok_or_else(|| err(base, format!("year \"{year}\" is out of range")))?;
        let (fields, count) = time_fields(time);
        let fields = &fields[..count.min(fields.len())];
        let time_base = base + year.len() + 1;
        if count < 4 {
            return Err(err(time_base + time.len(), "expected MM.DD.hh.mm after the year".into()));
        }
        if count > 6 {
            let at = fields[..6].iter().map(|f| f.len() + 1).sum::<usize>() - 1;
            return Err(err(time_base + at, "unexpected \".\" after the fraction".into()));
        }
        let names = ["month", "day", "hour", "minute", "second"];
        let limits = [12, 31, 23, 59, 59];
        let mut values = [0u32; 5];
        let mut offset = time_base;
        for (i, field) in fields.iter().take(5).enumerate() {
            let value = match field.as_bytes() {
                [tens @ b'0'..=b'9', units @ b'0'..=b'9'] => {
                    Some(u32::from(tens - b'0') * 10 + u32::from(units - b'0'))
                }
                _ => None,
            };
            let min = if i < 2 { 1 } else { 0 };
            match value {
                Some(v) if v >= min && v <= limits[i] => values[i] = v,
                _ => return Err(err(offset, format!("invalid {} \"{field}\"", names[i]))),
            }
            offset += field.len() + 1;
        }
        let nanos = match fields.get(5) {
            None => 0,
            Some(f) => parse_fraction_nanos(f).map_err(|(p, m)| err(offset + p, m))?,
        };
        let [month, day, hour, minute, second] = values;
        let parts = CalendarParts { year: year_value, month, day, hour, minute, second, nanos };
        Timestamp::from_calendar(parts).ok_or_else(|| {
            err(time_base + 3, format!("invalid day \"{}\": {year}-{:02} has no such day", fields[1], month))
        })
    }
}

/// The first six `.`-separated fields of a suffix's time, and how many it has
/// in all (a Vec of them was a tenth of `list`'s parsing).
fn time_fields(time: &str) -> ([&str; 6], usize) {
    let mut fields = [""; 6];
    let mut count = 0;
    // Split at the byte `.` (ASCII, so every piece is text): a `str::split` on
    // a char searched through a pattern, 40% of a walk's parsing of a time.
    let mut start = 0;
    for end in time.bytes().enumerate().filter(|(_, b)| *b == b'.').map(|(at, _)| at).chain([time.len()]) {
        if let Some(slot) = fields.get_mut(count) {
            *slot = &time[start..end];
        }
        count += 1;
        start = end + 1;
    }
    (fields, count)
}

impl fmt::Display for Suffix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.year)?;
        f.write_str("/")?;
        f.write_str(&self.time)
    }
}

impl Suffix {
    /// The suffix as text, made at its length (the inventory's key column):
    /// what `to_string` gives, without the formatting machinery.
    pub fn text(&self) -> String {
        [&*self.year, "/", &self.time].concat()
    }
}

impl RepositoryName {
    /// Algorithm 3: `prefix "/" suffix`.
    pub fn new(prefix: Prefix, suffix: Suffix) -> Self {
        RepositoryName { prefix, suffix }
    }

    /// Algorithms 1–3: the name minted at `date` by the subsystem whose prefix is `prefix`.
    pub fn from_prefix_and_date(prefix: &Prefix, date: Timestamp) -> Result<Self, Error> {
        Ok(RepositoryName::new(prefix.clone(), Suffix::from_date(date)?))
    }

    pub fn prefix(&self) -> &Prefix {
        &self.prefix
    }

    pub fn suffix(&self) -> &Suffix {
        &self.suffix
    }

    /// The exact date encoded in the suffix.
    pub fn date(&self) -> Timestamp {
        self.suffix.date
    }

    /// The four directory components: subdomain, word[.port], year, MM.DD.hh.mm[.ss[.f]].
    pub fn components(&self) -> [String; 4] {
        [
            self.prefix.subdomain.to_string(),
            self.prefix.word_port(),
            self.suffix.year.to_string(),
            self.suffix.time.to_string(),
        ]
    }

    /// The name `time` (`MM.DD.hh.mm[.ss[.f]]`, as written) names under this
    /// name's prefix and year; `None` when it is no time (`parse` of the whole
    /// name says why). What a walk of one year's folder asks for each entry,
    /// without parsing the prefix again.
    pub fn sibling(&self, time: &str) -> Option<RepositoryName> {
        let date = Suffix::parse_date(time, &self.suffix.year, time, 0).ok()?;
        let suffix = Suffix { year: self.suffix.year.clone(), time: time_text(time), date };
        Some(RepositoryName { prefix: self.prefix.clone(), suffix })
    }

    /// The name `suffix` (`YYYY/MM.DD.hh.mm[.ss[.f]]`) names under this name's
    /// prefix; `None` when it is no suffix (`parse` of the whole name says why).
    /// What a listing in name order asks of each row after the first of a prefix.
    pub fn under_same_prefix(&self, suffix: &str) -> Option<RepositoryName> {
        let (year, time) = suffix.split_once('/')?;
        let date = Suffix::parse_date(suffix, year, time, 0).ok()?;
        let year = if *self.suffix.year == *year { self.suffix.year.clone() } else { year.into() };
        Some(RepositoryName { prefix: self.prefix.clone(), suffix: Suffix { year, time: time_text(time), date } })
    }

    pub fn parse(input: &str) -> Result<Self, ParseError> {
        let err = |column: usize, problem: String| ParseError::new(KIND, input, column, problem);
        if input.is_empty() {
            return Err(err(1, "empty name".into()));
        }
        if let Some((pos, c)) = input.chars().enumerate().find(|(_, c)| !c.is_ascii() || c.is_ascii_control()) {
            return Err(err(pos + 1, format!("invalid character {c:?}")));
        }
        let parts: Vec<&str> = input.split('/').collect();
        if parts.len() < 4 {
            let what = if parts.len() == 2 { "a lone prefix; " } else { "" };
            return Err(err(input.len() + 1, format!("{what}expected subdomain/word/year/MM.DD.hh.mm")));
        }
        if parts.len() > 4 {
            let at = parts[..4].iter().map(|p| p.len() + 1).sum::<usize>();
            return Err(err(at, "unexpected \"/\": a repository name has four parts".into()));
        }
        let prefix = Prefix::parse(input, parts[0], parts[1], 0)?;
        let suffix = Suffix::parse(input, parts[2], parts[3], parts[0].len() + parts[1].len() + 2)?;
        Ok(RepositoryName { prefix, suffix })
    }
}

impl fmt::Display for RepositoryName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.prefix, f)?;
        f.write_str("/")?;
        fmt::Display::fmt(&self.suffix, f)
    }
}

/// Names order as their canonical text, which is the order a collection walk yields
/// them in (each level sorted as `component/`), so sorted walks can be merged.
impl Ord for RepositoryName {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        // Names of one prefix and year (a walk's, a merge's) differ in their
        // times alone, and the times order as the whole texts do.
        if self.prefix == other.prefix && self.suffix.year == other.suffix.year {
            return self.suffix.time.as_bytes().cmp(other.suffix.time.as_bytes());
        }
        self.text_bytes().cmp(other.text_bytes())
    }
}

impl RepositoryName {
    /// The bytes of the canonical text (`Display`), without making the string.
    fn text_bytes(&self) -> impl Iterator<Item = u8> + '_ {
        let mut port = [0u8; 6];
        let mut port_len = 0;
        if let Some((separator, number)) = self.prefix.port {
            port[0] = match separator {
                PortSeparator::Dot => b'.',
                PortSeparator::At => b'@',
            };
            let digits = number.checked_ilog10().unwrap_or(0) as usize + 1;
            let mut rest = number;
            for at in (1..=digits).rev() {
                port[at] = b'0' + (rest % 10) as u8;
                rest /= 10;
            }
            port_len = 1 + digits;
        }
        let slash = || std::iter::once(b'/');
        (self.prefix.subdomain.bytes().chain(slash()).chain(self.prefix.word.bytes()))
            .chain(port.into_iter().take(port_len))
            .chain(slash().chain(self.suffix.year.bytes()).chain(slash()).chain(self.suffix.time.bytes()))
    }
}

impl PartialOrd for RepositoryName {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl FromStr for RepositoryName {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RepositoryName::parse(s)
    }
}

#[cfg(test)]
mod tests;
