//! Handle System identifiers (`Handle`): `prefix/suffix`, where the prefix is a
//! naming authority such as `102.100.272`, `10.1000` or `0.NA` (first segment
//! numeric) and the suffix is any printable text. This module owns parsing and
//! formatting, and recognising an OID written as a handle (the Handle System
//! paper's `10673/1.1.0.15961.12.1.1234567890`: a naming authority, then the
//! OID in dot notation as the suffix). Batch export lives in `ops::handles`.

use std::fmt;
use std::str::FromStr;

use crate::error::ParseError;

const KIND: &str = "handle";

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Handle {
    prefix: String,
    suffix: String,
}

/// Whether `text` looks like a naming-authority prefix: dot-separated alphanumeric
/// segments, the first all digits. Repository-name subdomains never match this.
pub fn is_handle_prefix(text: &str) -> bool {
    let mut segments = text.split('.');
    let first_ok = segments.next().is_some_and(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()));
    first_ok && segments.all(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric()))
}

impl Handle {
    pub fn new(prefix: &str, suffix: &str) -> Result<Self, ParseError> {
        Handle::parse(&format!("{prefix}/{suffix}"))
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    pub fn suffix(&self) -> &str {
        &self.suffix
    }

    pub fn parse(input: &str) -> Result<Self, ParseError> {
        let err = |column: usize, problem: String| ParseError::new(KIND, input, column, problem);
        let Some((prefix, suffix)) = input.split_once('/') else {
            return Err(err(input.chars().count() + 1, "missing \"/\" between prefix and suffix".into()));
        };
        if !is_handle_prefix(prefix) {
            return Err(err(1, format!("invalid naming authority \"{prefix}\" (e.g. 102.100.272 or 10.1000)")));
        }
        if suffix.is_empty() {
            return Err(err(prefix.len() + 2, "empty suffix".into()));
        }
        if let Some((i, c)) = input.chars().enumerate().find(|(_, c)| c.is_control()) {
            return Err(err(i + 1, format!("control character {c:?}")));
        }
        Ok(Handle { prefix: prefix.to_ascii_uppercase(), suffix: suffix.to_string() })
    }
}

/// The prefix under which the Handle System paper resolved OIDs as handles.
pub const OID_PREFIX: &str = "10673";

/// An object identifier in dot notation: at least two arcs of decimal digits, no
/// leading zeros, the first arc 0 (ITU-T), 1 (ISO) or 2 (joint), the second below
/// 40 under 0 and 1 (X.660).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Oid {
    pub arcs: Vec<String>,
}

impl Oid {
    pub fn parse(text: &str) -> Option<Oid> {
        let arcs: Vec<String> = text.split('.').map(str::to_string).collect();
        let decimal =
            |a: &String| !a.is_empty() && a.bytes().all(|b| b.is_ascii_digit()) && (a == "0" || !a.starts_with('0'));
        if arcs.len() < 2 || !arcs.iter().all(decimal) {
            return None;
        }
        let second_ok = arcs[0] == "2" || arcs[1].len() < 3 && arcs[1].parse::<u8>().is_ok_and(|n| n < 40);
        (matches!(arcs[0].as_str(), "0" | "1" | "2") && second_ok).then_some(Oid { arcs })
    }

    /// Who administers the root arc.
    pub fn root(&self) -> &'static str {
        match self.arcs[0].as_str() {
            "0" => "itu-t",
            "1" => "iso",
            _ => "joint-iso-itu-t",
        }
    }
}

impl fmt::Display for Oid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.arcs.join("."))
    }
}

impl Handle {
    /// The OID this handle's suffix writes, if it is one.
    pub fn oid(&self) -> Option<Oid> {
        Oid::parse(&self.suffix)
    }
}

impl fmt::Display for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.prefix, self.suffix)
    }
}

impl FromStr for Handle {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Handle::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn examples_from_the_sources() {
        let pilin = Handle::parse("102.100.272/Y35XYS0QH").unwrap();
        assert_eq!((pilin.prefix(), pilin.suffix()), ("102.100.272", "Y35XYS0QH"));
        let oid = Handle::parse("10673/1.1.0.15961.12.1.1234567890").unwrap();
        assert_eq!(oid.to_string(), "10673/1.1.0.15961.12.1.1234567890");
        assert_eq!(Handle::parse("0.na/10673").unwrap().to_string(), "0.NA/10673");
    }

    #[test]
    fn repository_names_are_not_handles() {
        assert!(Handle::parse("sid.inpe.br/mtc-m18").is_err());
        assert!(Handle::parse("10.1000/").is_err());
        assert!(Handle::parse("10..1/x").is_err());
    }

    proptest! {
        #[test]
        fn round_trip(prefix in "[0-9]{1,5}(\\.[0-9A-Z]{1,4}){0,3}", suffix in "[^\\p{Cc}]{1,30}") {
            let h = Handle::new(&prefix, &suffix).unwrap();
            prop_assert_eq!(Handle::parse(&h.to_string()).unwrap(), h);
        }
    }
}

#[cfg(test)]
mod oid_tests {
    use super::*;

    #[test]
    fn the_papers_oid_handle_is_recognised() {
        let handle = Handle::parse("10673/1.1.0.15961.12.1.1234567890").unwrap();
        let oid = handle.oid().expect("an OID suffix");
        assert_eq!((oid.arcs.len(), oid.root(), handle.prefix()), (7, "iso", OID_PREFIX));
        assert_eq!(oid.to_string(), "1.1.0.15961.12.1.1234567890");
    }

    #[test]
    fn what_is_not_an_oid() {
        for suffix in ["1", "3.1", "1.40.2", "1.01.2", "1..2", "1.2.x", "ABC", "0.NA"] {
            assert_eq!(Oid::parse(suffix), None, "{suffix}");
        }
        assert!(Oid::parse("2.999.1").is_some(), "arc 2 allows any second arc");
    }
}
