//! The IBIp (`Ibip`): the opaque alias such as `8JMKD3MGP8W/34PGRBS`. This
//! module owns the Table 7.1 syntax, encoding from the subsystem's IP and port
//! and an exact date (Algorithms 5–7, with the fraction code fixed in
//! ARCHITECTURE.md, "Identifiers"), and decoding back to IP, port and date. IPs are canonicalised
//! first (IPv4 dotted decimal, IPv6 in RFC 5952 form) so the encoding is a
//! function of the address, not of how it was typed.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};
use std::str::FromStr;

use num_bigint::BigUint;

use crate::error::{Error, ParseError};
use crate::id::base::{to_u128, IBIP, IPV4_TEXT, IPV6_TEXT};
use crate::id::time::{Timestamp, NANOS_PER_SECOND};

const KIND: &str = "IBIp";

/// Suffix seconds count from 1995-08-01T00:00:00Z.
pub const IBIP_EPOCH_SECONDS: i64 = 807_235_200;
/// The IBIp port that is omitted from a prefix.
pub const DEFAULT_IBIP_PORT: u16 = 800;

/// An IBIp: the IP and port of the minting subsystem, and the item's date.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ibip {
    ip: IpAddr,
    port: u16,
    date: Timestamp,
}

/// RFC 5952 text of an IPv6 address, always in hexadecimal groups (never the dotted
/// IPv4-mapped form, whose `.` is not a digit of Table 7.5).
pub fn ipv6_canonical(ip: &Ipv6Addr) -> String {
    let segments = ip.segments();
    let (mut best, mut run) = ((0usize, 0usize), (0usize, 0usize));
    for (i, &s) in segments.iter().enumerate() {
        if s == 0 {
            run = if run.1 == 0 { (i, 1) } else { (run.0, run.1 + 1) };
            if run.1 > best.1 {
                best = run;
            }
        } else {
            run = (0, 0);
        }
    }
    let hex = |range: &[u16]| range.iter().map(|s| format!("{s:x}")).collect::<Vec<_>>().join(":");
    if best.1 < 2 {
        return hex(&segments);
    }
    format!("{}::{}", hex(&segments[..best.0]), hex(&segments[best.0 + best.1..]))
}

/// The canonical text of an IP: dotted decimal for IPv4, RFC 5952 for IPv6.
pub fn ip_canonical(ip: &IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => ipv6_canonical(v6),
    }
}

/// Parses an IP as users type it, naming the input on error.
pub fn parse_ip(text: &str) -> Result<IpAddr, ParseError> {
    IpAddr::from_str(text).map_err(|_| ParseError::new("IP address", text, 1, "not an IPv4 or IPv6 address"))
}

fn ip_number(ip: &IpAddr) -> Result<BigUint, Error> {
    let text = ip_canonical(ip);
    if text.starts_with('0') {
        return Err(Error::NotEncodable {
            what: format!("IP {text}"),
            problem: "its text starts with the digit 0, which a numeral cannot keep".into(),
        });
    }
    let alphabet = if ip.is_ipv4() { IPV4_TEXT } else { IPV6_TEXT };
    Ok(alphabet.decode(&text).expect("canonical IP text uses only its table's digits"))
}

/// The fraction code (ARCHITECTURE.md, "Identifiers"): one `2` per leading zero digit, then the base-27 numeral
/// of the remaining digits (no trailing zeros) read as an integer.
fn write_fraction_code(nanos: u32, out: &mut impl fmt::Write) -> fmt::Result {
    let (zeros, significant) = fraction_parts(nanos);
    for _ in 0..zeros {
        out.write_char('2')?;
    }
    out.write_str(IBIP.numeral_u128(significant.into(), &mut [0u8; 128]))
}

/// A non-zero fraction's digits (`fraction_digits`) as its leading zero digits
/// and the number the rest make: 0.0602 s is 1 zero, then 602.
fn fraction_parts(nanos: u32) -> (usize, u32) {
    debug_assert!(nanos != 0, "a zero fraction has no code");
    let (mut significant, mut length) = (nanos, 9usize);
    while significant % 10 == 0 {
        significant /= 10;
        length -= 1;
    }
    let digits = significant.ilog10() as usize + 1;
    (length - digits, significant)
}

impl Ibip {
    /// An IBIp for a date minted by the subsystem at `ip`:`port`.
    pub fn new(ip: IpAddr, port: u16, date: Timestamp) -> Result<Ibip, Error> {
        if date < Timestamp::from_seconds(IBIP_EPOCH_SECONDS) {
            return Err(Error::NotEncodable {
                what: format!("date {date}"),
                problem: "IBIp dates start at 1995-08-01T00:00:00Z".into(),
            });
        }
        if port == 0 {
            return Err(Error::Invalid { what: "IBIp port".into(), problem: "port 0 cannot serve a subsystem".into() });
        }
        ip_number(&ip)?;
        Ok(Ibip { ip, port, date })
    }

    pub fn ip(&self) -> IpAddr {
        self.ip
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn date(&self) -> Timestamp {
        self.date
    }

    /// Algorithm 5: the IP code, `W` (IPv4) or `X` (IPv6), then the port code (empty for 800).
    pub fn prefix(&self) -> String {
        let mut out = String::with_capacity(16);
        self.write_prefix(&mut out).expect("a String takes every write");
        out
    }

    fn encode_prefix(&self) -> String {
        let ip_code = IBIP.encode(&ip_number(&self.ip).expect("checked in Ibip::new"));
        let sep = if self.ip.is_ipv4() { 'W' } else { 'X' };
        let port_code = if self.port == DEFAULT_IBIP_PORT { String::new() } else { IBIP.encode_u128(self.port.into()) };
        format!("{ip_code}{sep}{port_code}")
    }

    /// Algorithm 6: seconds since 1995-08-01 in base 27, then `W` and the fraction code.
    pub fn suffix(&self) -> String {
        let mut out = String::with_capacity(16);
        self.write_suffix(&mut out).expect("a String takes every write");
        out
    }

    /// `suffix`, written to `out` without a String of its own.
    fn write_suffix(&self, out: &mut impl fmt::Write) -> fmt::Result {
        let seconds = self.date.whole_seconds() - IBIP_EPOCH_SECONDS as i128;
        out.write_str(IBIP.numeral_u128(seconds as u128, &mut [0u8; 128]))?;
        if self.date.subsec_nanos() != 0 {
            out.write_char('W')?;
            write_fraction_code(self.date.subsec_nanos(), out)?;
        }
        Ok(())
    }

    /// `prefix`, written to `out` from the last prefix encoded, without a copy.
    fn write_prefix(&self, out: &mut impl fmt::Write) -> fmt::Result {
        thread_local! {
            /// The last prefix encoded: a collection's IBIps share one.
            static LAST: std::cell::RefCell<Option<(IpAddr, u16, String)>> = const { std::cell::RefCell::new(None) };
        }
        LAST.with_borrow_mut(|last| match last {
            Some((ip, port, text)) if *ip == self.ip && *port == self.port => out.write_str(text),
            _ => out.write_str(&last.insert((self.ip, self.port, self.encode_prefix())).2),
        })
    }

    /// Parses and decodes an IBIp (Table 7.1), in any letter case.
    pub fn parse(input: &str) -> Result<Ibip, ParseError> {
        let err = |column: usize, problem: String| ParseError::new(KIND, input, column + 1, problem);
        if input.is_empty() {
            return Err(err(0, "empty IBIp".into()));
        }
        // One pass over the bytes, through a table (every allowed character
        // is ASCII): which kinds of byte the text holds, and how many `/`.
        let (kinds, slashes) = input.bytes().fold((0u8, 0usize), |(kinds, slashes), b| {
            (kinds | IBIP_TEXT_BYTES[usize::from(b)], slashes + usize::from(b == b'/'))
        });
        if kinds & NOT_IBIP_TEXT != 0 {
            return Err(first_not_allowed(input));
        }
        let upper: std::borrow::Cow<str> = match kinds & LOWER_CASE != 0 {
            true => input.to_ascii_uppercase().into(),
            false => input.into(),
        };
        let Some(slash) = byte_at(&upper, b'/') else {
            return Err(err(input.len(), "missing \"/\" between prefix and suffix".into()));
        };
        let (prefix, suffix) = (&upper[..slash], &upper[slash + 1..]);
        if let Some(extra) = (slashes > 1).then(|| byte_at(suffix, b'/')).flatten() {
            return Err(err(prefix.len() + 1 + extra, "unexpected second \"/\"".into()));
        }
        let (ip, port) = decode_prefix_again(prefix).map_err(|(p, m)| err(p, m))?;
        let date = decode_suffix(suffix).map_err(|(p, m)| err(prefix.len() + 1 + p, m))?;
        Ok(Ibip { ip, port, date })
    }
}

type Located = (usize, String);

/// A byte no IBIp holds (`IBIP_TEXT_BYTES`).
const NOT_IBIP_TEXT: u8 = 1;
/// A lower-case letter an IBIp may hold.
const LOWER_CASE: u8 = 2;

/// The kind of each byte in an IBIp's text: 0 for the digits of Table 7.6
/// and the separators `/`, `W` and `X`, `LOWER_CASE` for their lower-case
/// letters, `NOT_IBIP_TEXT` for every other byte.
static IBIP_TEXT_BYTES: [u8; 256] = {
    let mut kinds = [NOT_IBIP_TEXT; 256];
    let mut byte = 0;
    while byte < 256 {
        let upper = (byte as u8).to_ascii_uppercase();
        if matches!(upper, b'/' | b'W' | b'X') || IBIP.is_digit_byte(upper) {
            kinds[byte] = if (byte as u8).is_ascii_lowercase() { LOWER_CASE } else { 0 };
        }
        byte += 1;
    }
    kinds
};

/// The error for the first character of `input` no IBIp holds.
fn first_not_allowed(input: &str) -> ParseError {
    let allowed = |c: char| c.is_ascii() && IBIP_TEXT_BYTES[c as usize] != NOT_IBIP_TEXT;
    let (i, c) = input.chars().enumerate().find(|(_, c)| !allowed(*c)).unwrap_or((0, '\u{fffd}'));
    let problem = match c.to_ascii_uppercase() {
        '0' | 'O' | '1' | 'I' | 'V' | 'Y' | 'Z' => format!("excluded character {c:?} (IBIps never use 0 O 1 I V Y Z)"),
        _ => format!("invalid character {c:?}"),
    };
    ParseError::new(KIND, input, i + 1, problem)
}

/// A canonical base-27 numeral: non-empty, no leading zero digit unless it is `2` alone.
fn decode_numeral(code: &str, at: usize, what: &str) -> Result<BigUint, Located> {
    if code.is_empty() {
        return Err((at, format!("empty {what} code")));
    }
    if code.len() > 1 && code.starts_with('2') {
        return Err((at, format!("{what} code \"{code}\" has a leading zero digit \"2\"")));
    }
    IBIP.decode(code).map_err(|p| (at + p, format!("invalid character in {what} code")))
}

/// `decode_prefix`, answered from the last prefix decoded when it is the same
/// text (a collection's IBIps share one).
/// Where the ASCII byte `wanted` first is in `text` (a byte search, where
/// `str::find` with a char goes through a pattern searcher: a third of an
/// IBIp's parsing in `list`).
fn byte_at(text: &str, wanted: u8) -> Option<usize> {
    text.bytes().position(|b| b == wanted)
}

fn decode_prefix_again(prefix: &str) -> Result<(IpAddr, u16), Located> {
    thread_local! {
        static LAST: std::cell::RefCell<Option<(String, IpAddr, u16)>> = const { std::cell::RefCell::new(None) };
    }
    LAST.with_borrow_mut(|last| match last {
        Some((text, ip, port)) if text == prefix => Ok((*ip, *port)),
        _ => {
            let (ip, port) = decode_prefix(prefix)?;
            *last = Some((prefix.to_string(), ip, port));
            Ok((ip, port))
        }
    })
}

fn decode_prefix(prefix: &str) -> Result<(IpAddr, u16), Located> {
    let Some(sep_at) = prefix.find(['W', 'X']) else {
        return Err((prefix.len(), "prefix lacks the \"W\" (IPv4) or \"X\" (IPv6) separator".into()));
    };
    let (ip_code, port_code) = (&prefix[..sep_at], &prefix[sep_at + 1..]);
    if let Some(p) = port_code.find(['W', 'X']) {
        return Err((sep_at + 1 + p, "unexpected second separator in prefix".into()));
    }
    let number = decode_numeral(ip_code, 0, "IP")?;
    let ipv4 = prefix.as_bytes()[sep_at] == b'W';
    let text = if ipv4 { IPV4_TEXT.encode(&number) } else { IPV6_TEXT.encode(&number) };
    let ip = IpAddr::from_str(&text).ok().filter(|ip| ip.is_ipv4() == ipv4 && ip_canonical(ip) == text);
    let ip = ip.ok_or_else(|| {
        (0, format!("IP code decodes to \"{text}\", not a canonical IP{}", if ipv4 { "v4" } else { "v6" }))
    })?;
    let port = if port_code.is_empty() {
        DEFAULT_IBIP_PORT
    } else {
        let value = decode_numeral(port_code, sep_at + 1, "port")?;
        match to_u128(&value) {
            Some(p) if p == DEFAULT_IBIP_PORT as u128 => {
                return Err((sep_at + 1, "port 800 is written as an empty port code".into()))
            }
            Some(p @ 1..=65535) => p as u16,
            _ => return Err((sep_at + 1, format!("port code \"{port_code}\" is not a port in 1..65535"))),
        }
    };
    Ok((ip, port))
}

fn decode_suffix(suffix: &str) -> Result<Timestamp, Located> {
    let (seconds_code, fraction) = match byte_at(suffix, b'W') {
        Some(w) => (&suffix[..w], Some(&suffix[w + 1..])),
        None => (suffix, None),
    };
    if let Some(p) = byte_at(suffix, b'X') {
        return Err((p, "\"X\" cannot appear in a suffix".into()));
    }
    let seconds = small_numeral(seconds_code, 0, "seconds")?;
    let seconds = seconds.filter(|s| *s < 1 << 40).ok_or_else(|| (0, "date is out of range".to_string()))?;
    let mut nanos = (seconds as i128 + IBIP_EPOCH_SECONDS as i128) * NANOS_PER_SECOND;
    if let Some(code) = fraction {
        nanos += decode_fraction(code).map_err(|(p, m)| (seconds_code.len() + 1 + p, m))? as i128;
    }
    // Every date below 2^40 seconds after the IBIp epoch has a calendar (year
    // 36,837 at most; `the_latest_ibip_date_has_a_calendar`), so none is checked.
    Ok(Timestamp::from_nanos(nanos))
}

fn decode_fraction(code: &str) -> Result<u32, Located> {
    if let Some(p) = byte_at(code, b'W') {
        return Err((p, "unexpected second \"W\" in suffix".into()));
    }
    let zeros = code.bytes().take_while(|b| *b == b'2').count();
    let significant = &code[zeros..];
    if significant.is_empty() {
        return Err((code.len(), "fraction code has no significant digits".into()));
    }
    let value =
        IBIP.decode_u128(significant).map_err(|p| (zeros + p, "invalid character in fraction code".to_string()))?;
    // The fraction's digits are `zeros` zeros, then `value` in decimal.
    let digits = |value: &dyn fmt::Display| format!("{}{value}", "0".repeat(zeros));
    let Some(value) = value else {
        let big = digits(&IBIP.decode(significant).unwrap_or_default());
        let why = if big.ends_with('0') { "gives trailing zero digits" } else { "is finer than one nanosecond" };
        return Err((0, format!("fraction code \"{code}\" {why} (.{big})")));
    };
    let length = zeros + value.checked_ilog10().map_or(1, |l| l as usize + 1);
    if value % 10 == 0 {
        return Err((0, format!("fraction code \"{code}\" gives trailing zero digits (.{})", digits(&value))));
    }
    if length > 9 {
        return Err((0, format!("fraction code \"{code}\" is finer than one nanosecond (.{})", digits(&value))));
    }
    Ok((value * 10u128.pow((9 - length) as u32)) as u32)
}

/// `decode_numeral` in machine words: `None` when it needs more than 128 bits.
fn small_numeral(code: &str, at: usize, what: &str) -> Result<Option<u128>, Located> {
    if code.is_empty() {
        return Err((at, format!("empty {what} code")));
    }
    if code.len() > 1 && code.starts_with('2') {
        return Err((at, format!("{what} code \"{code}\" has a leading zero digit \"2\"")));
    }
    IBIP.decode_u128(code).map_err(|p| (at + p, format!("invalid character in {what} code")))
}

impl fmt::Display for Ibip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_prefix(f)?;
        f.write_str("/")?;
        self.write_suffix(f)
    }
}

impl FromStr for Ibip {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ibip::parse(s)
    }
}

#[cfg(test)]
mod tests;
